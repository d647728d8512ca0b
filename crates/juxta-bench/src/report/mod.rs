//! The HTML report of a benchmark run.
//!
//! Reads a results document (docs/results-format.md) as a
//! [`serde_json::Value`], leniently: any subset of rows, unknown fields and
//! unknown scenarios are accepted. Writes one self-contained `report.html`
//! with inline SVG plots in the style of the JXTA studies' figures and
//! tables that put the published figures (as ratios to the study's socket
//! bound, see [`published`]) beside ours (as ratios to our tcp bound).
//!
//! ```no_run
//! let doc: serde_json::Value =
//!     serde_json::from_str(&std::fs::read_to_string("results.json").unwrap()).unwrap();
//! let summary = juxta_bench::report::write_report(&doc, std::path::Path::new("report.html")).unwrap();
//! println!("{} plots, {} tables", summary.plots, summary.tables);
//! ```

pub mod chart;
pub mod html;
pub mod plots;
pub mod published;
pub mod rows;
pub mod tables;

use std::path::{Path, PathBuf};

use serde_json::Value;

use html::{Item, Section};
use plots::Plot;
use rows::{scenario_rows, Row};

/// Errors while writing the report, CSV files or a comparison.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// Could not write a file.
    #[error("cannot write {path}: {source}")]
    Write {
        /// the file
        path: PathBuf,
        /// the error
        #[source]
        source: std::io::Error,
    },
    /// Could not read a file.
    #[error("cannot read {path}: {source}")]
    Read {
        /// the file
        path: PathBuf,
        /// the error
        #[source]
        source: std::io::Error,
    },
    /// A file is not JSON.
    #[error("{path} is not a JSON results document: {source}")]
    Json {
        /// the file
        path: PathBuf,
        /// the error
        #[source]
        source: serde_json::Error,
    },
    /// Writing a CSV file failed.
    #[error("cannot write CSV {path}: {source}")]
    Csv {
        /// the file
        path: PathBuf,
        /// the error
        #[source]
        source: csv::Error,
    },
    /// Drawing a plot failed.
    #[error("cannot draw plot {id}: {source}")]
    Plot {
        /// the plot id
        id: String,
        /// the plotters error
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

/// What a report contains.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReportSummary {
    /// Number of plots (SVG figures).
    pub plots: usize,
    /// Number of tables (besides the run facts).
    pub tables: usize,
    /// Ids of the plots, in page order.
    pub plot_ids: Vec<String>,
    /// Ids of the tables, in page order.
    pub table_ids: Vec<String>,
    /// Sections with no rows in this run.
    pub not_measured: Vec<String>,
    /// Scenarios present in the document that the report does not know.
    pub unknown_scenarios: Vec<String>,
}

/// The scenarios the report knows, in page order: (scenario, section id, title).
pub const SECTIONS: &[(&str, &str, &str)] = &[
    (
        "pingpong",
        "sec-pingpong",
        "Messaging: RTT and bandwidth per layer",
    ),
    (
        "propagate",
        "sec-propagate",
        "Messaging: propagate to 1..n receivers",
    ),
    (
        "throughput",
        "sec-throughput",
        "Messaging: throughput and loss",
    ),
    (
        "composition",
        "sec-composition",
        "Messaging: message composition",
    ),
    ("senders", "sec-senders", "Messaging: many-to-one senders"),
    (
        "buffers",
        "sec-buffers",
        "Messaging: socket buffer sweep (JuxTest)",
    ),
    ("ops", "sec-ops", "Typical peer operations"),
    (
        "rendezvous",
        "sec-rendezvous",
        "Rendezvous: search under load",
    ),
    (
        "recovery",
        "sec-recovery",
        "Rendezvous: recovery after failure",
    ),
    ("relay", "sec-relay", "Relays"),
    (
        "soak",
        "sec-soak",
        "Soak: resource growth under a mixed load",
    ),
    ("chaos", "sec-chaos", "Chaos: kills and restarts"),
    (
        "mp-pingpong",
        "sec-mp",
        "Message passing (de Souza et al.): ping-pong, matrix multiplication, allreduce",
    ),
];

/// Scenarios drawn in another scenario's section (`juxta bench mp`'s).
const DRAWN_ELSEWHERE: [&str; 3] = ["matmul", "mp-allreduce", "ops-cache"];

type PlotFn = fn(&[Row<'_>]) -> Result<Option<Plot>, ReportError>;

fn push_plots(items: &mut Vec<Item>, rows: &[Row<'_>], fns: &[PlotFn]) -> Result<(), ReportError> {
    for f in fns {
        if let Some(p) = f(rows)? {
            items.push(Item::Plot(p));
        }
    }
    Ok(())
}

fn push_table(items: &mut Vec<Item>, t: Option<html::Table>) {
    if let Some(t) = t {
        items.push(Item::Table(t));
    }
}

/// Builds every section of the report from the document.
pub fn sections(doc: &Value) -> Result<Vec<Section>, ReportError> {
    let all = rows::rows(doc);
    let mut out = Vec::new();
    for (scenario, id, title) in SECTIONS {
        let mut items = Vec::new();
        match *scenario {
            "pingpong" => {
                let r = scenario_rows(&all, "pingpong");
                push_plots(
                    &mut items,
                    &r,
                    &[
                        plots::pingpong_bandwidth,
                        plots::pingpong_rtt,
                        plots::pingpong_rtt_small,
                    ],
                )?;
                push_table(&mut items, tables::pingpong_published(&r));
                push_table(&mut items, tables::like_for_like(&r));
                push_table(&mut items, tables::stacks(&r));
                push_plots(
                    &mut items,
                    &r,
                    &[plots::pingpong_wire, plots::pingpong_wire_overhead],
                )?;
                push_table(&mut items, tables::pingpong_wire(&r));
            }
            "propagate" => {
                let r: Vec<Row<'_>> = scenario_rows(&all, "pingpong")
                    .into_iter()
                    .filter(|r| r.layer() == "propagate" && r.f("receivers").is_some())
                    .collect();
                push_plots(&mut items, &r, &[plots::propagate_receivers])?;
                push_table(&mut items, tables::propagate_published(&r));
            }
            "throughput" => {
                let r = scenario_rows(&all, "throughput");
                push_plots(
                    &mut items,
                    &r,
                    &[
                        plots::throughput_msgs,
                        plots::throughput_mbs,
                        plots::throughput_loss,
                        plots::throughput_paced,
                    ],
                )?;
                push_table(&mut items, tables::throughput_published(&r));
            }
            "composition" => {
                let r = scenario_rows(&all, "composition");
                push_plots(&mut items, &r, &[plots::composition])?;
                push_table(&mut items, tables::composition(&r));
            }
            "senders" => {
                let r = scenario_rows(&all, "senders");
                push_plots(
                    &mut items,
                    &r,
                    &[plots::senders_msgs, plots::senders_mbs, plots::senders_rtt],
                )?;
            }
            "buffers" => {
                let r = scenario_rows(&all, "buffers");
                push_plots(&mut items, &r, &[plots::buffers])?;
                push_table(&mut items, tables::buffers(&r));
            }
            "ops" => {
                let r = scenario_rows(&all, "ops");
                push_plots(&mut items, &r, &[plots::ops])?;
                push_table(&mut items, tables::ops(&r));
                let c = scenario_rows(&all, "ops-cache");
                push_plots(&mut items, &c, &[plots::ops_cache])?;
            }
            "rendezvous" => {
                let r = scenario_rows(&all, "rendezvous");
                push_plots(
                    &mut items,
                    &r,
                    &[
                        plots::rendezvous_response_qps,
                        plots::rendezvous_loss_qps,
                        plots::rendezvous_cv_qps,
                        plots::rendezvous_response_edges,
                        plots::rendezvous_loss_edges,
                    ],
                )?;
                push_table(&mut items, tables::rendezvous(&r));
                if !items.is_empty() {
                    items.push(Item::Note(tables::rendezvous_published_note()));
                }
            }
            "recovery" => {
                let r = scenario_rows(&all, "recovery");
                push_plots(&mut items, &r, &[plots::recovery])?;
                push_table(&mut items, tables::recovery(&r));
                push_table(&mut items, tables::recovery_thesis(&r));
            }
            "relay" => {
                let r = scenario_rows(&all, "relay");
                push_plots(
                    &mut items,
                    &r,
                    &[
                        plots::relay_rtt,
                        plots::relay_bandwidth,
                        plots::relay_overload,
                        plots::relay_overload_loss,
                        plots::relay_overload_rss,
                    ],
                )?;
                push_table(&mut items, tables::relay(&r));
                if !items.is_empty() {
                    items.push(Item::Note(format!(
                        "Published (thesis, JXTA 2.0): {}.",
                        published::RELAY_NOTES.join("; ")
                    )));
                }
            }
            "soak" => {
                let r = scenario_rows(&all, "soak");
                push_plots(
                    &mut items,
                    &r,
                    &[
                        plots::soak_rss,
                        plots::soak_fds,
                        plots::soak_threads,
                        plots::soak_tasks,
                    ],
                )?;
                push_table(&mut items, tables::soak(&r));
                push_table(&mut items, tables::soak_totals(&r));
            }
            "chaos" => {
                let r = scenario_rows(&all, "chaos");
                push_plots(&mut items, &r, &[plots::chaos_recovery])?;
                push_table(&mut items, tables::chaos_events(&r));
                push_table(&mut items, tables::chaos_summary(&r));
            }
            "mp-pingpong" => {
                let r = scenario_rows(&all, "mp-pingpong");
                push_plots(
                    &mut items,
                    &r,
                    &[
                        plots::mp_rtt_small,
                        plots::mp_rtt_medium,
                        plots::mp_rtt_large,
                    ],
                )?;
                push_table(&mut items, tables::mp_pingpong(&r));
                push_table(&mut items, tables::matmul(&scenario_rows(&all, "matmul")));
                push_table(
                    &mut items,
                    tables::mp_allreduce(&scenario_rows(&all, "mp-allreduce")),
                );
            }
            _ => {}
        }
        out.push(Section {
            id: id.to_string(),
            title: title.to_string(),
            items,
        });
    }
    let unknown = unknown_scenarios(&all);
    if !unknown.is_empty() {
        let list = unknown
            .iter()
            .map(|(s, n)| format!("{s} ({n} rows)"))
            .collect::<Vec<_>>()
            .join(", ");
        out.push(Section {
            id: "sec-other".into(),
            title: "Other scenarios".into(),
            items: vec![Item::Note(format!(
                "Rows of scenarios this report does not know are kept in the CSV files only: {list}."
            ))],
        });
    }
    Ok(out)
}

/// Scenarios in the document the report does not know, with row counts.
fn unknown_scenarios(all: &[Row<'_>]) -> Vec<(String, usize)> {
    let mut v: Vec<(String, usize)> = Vec::new();
    for r in all {
        let s = r.scenario();
        if SECTIONS.iter().any(|(k, _, _)| *k == s) || DRAWN_ELSEWHERE.contains(&s) {
            continue;
        }
        let name = if s.is_empty() { "(none)" } else { s };
        match v.iter_mut().find(|(n, _)| n == name) {
            Some(e) => e.1 += 1,
            None => v.push((name.to_string(), 1)),
        }
    }
    v
}

/// The table of contents of the studies' figures: one line per entry of
/// [`published::STUDY_FIGURES`] with its published values (labelled
/// absolute or ratio), the section and our plots and tables that carry
/// it, and whether this run measured it or why the report cannot. `net`:
/// the run's network profile (`None` when the results do not say), checked
/// against each figure's [`published::StudyFigure::link`].
pub fn study_toc(secs: &[Section], net: Option<&str>) -> Section {
    let present: Vec<&str> = secs
        .iter()
        .flat_map(|s| s.items.iter())
        .filter_map(|it| match it {
            Item::Plot(p) => Some(p.id.as_str()),
            Item::Table(t) => Some(t.id.as_str()),
            Item::Note(_) => None,
        })
        .collect();
    let rows = published::STUDY_FIGURES
        .iter()
        .map(|f| {
            let here: Vec<&str> = f
                .ours
                .iter()
                .copied()
                .filter(|id| present.contains(id))
                .collect();
            let title = SECTIONS
                .iter()
                .find(|(_, id, _)| *id == f.section)
                .map_or(f.section, |(_, _, t)| *t);
            let other_link = match (f.link, net) {
                (Some(want), Some(got)) if want != got => Some((want, got)),
                _ => None,
            };
            let status = match (f.cannot, here.is_empty(), other_link) {
                (Some(why), true, _) => format!("not reproduced: {why}"),
                (Some(why), false, _) => format!("partly reproduced in this run: {why}"),
                (None, false, None) => "reproduced in this run".to_string(),
                (None, false, Some((want, got))) => format!(
                    "measured in this run on {got}, not on the study's link ({want}): {}",
                    f.how
                ),
                (None, true, _) => format!("reproducible, not measured in this run: {}", f.how),
            };
            vec![
                f.id.to_string(),
                f.study.to_string(),
                f.title.to_string(),
                f.published.to_string(),
                format!("{title} ({}): {}", f.section, f.ours.join(", ")),
                status,
            ]
        })
        .collect();
    Section {
        id: "sec-studies".into(),
        title: "The studies' tables and figures: table of contents".into(),
        items: vec![
            Item::Note("Every table and figure of the studies (Halepovic's thesis, JuxTest, de Souza et al.), the published values beside the section that puts ours next to them. Layer figures are compared as ratios to the socket bound each study measured (ours: to the tcp bound of the same run); where a study gives no bound its figures are absolute and labelled so (their hardware is not ours).".into()),
            Item::Table(html::Table {
                id: STUDY_TOC_ID.into(),
                caption: "Study figures: published values, where this report reproduces them, and status.".into(),
                head: ["study figure", "study", "what", "published", "in this report", "status"]
                    .iter()
                    .map(|h| h.to_string())
                    .collect(),
                rows,
            }),
        ],
    }
}

/// The element id of the studies' table of contents.
pub const STUDY_TOC_ID: &str = "table-study-figures";

/// Renders the report page to a string, with its summary.
pub fn render_report(doc: &Value) -> Result<(String, ReportSummary), ReportError> {
    let mut secs = sections(doc)?;
    let toc = study_toc(&secs, doc.get("net").and_then(Value::as_str));
    secs.insert(0, toc);
    let mut summary = ReportSummary::default();
    for s in &secs {
        if s.items.is_empty() {
            summary.not_measured.push(s.id.clone());
        }
        for it in &s.items {
            match it {
                Item::Plot(p) => summary.plot_ids.push(p.id.clone()),
                Item::Table(t) => summary.table_ids.push(t.id.clone()),
                Item::Note(_) => {}
            }
        }
    }
    summary.plots = summary.plot_ids.len();
    summary.tables = summary.table_ids.len();
    summary.unknown_scenarios = unknown_scenarios(&rows::rows(doc))
        .into_iter()
        .map(|(s, _)| s)
        .collect();
    Ok((html::page(doc, &secs), summary))
}

/// Writes the self-contained report page to `path`.
pub fn write_report(doc: &Value, path: &Path) -> Result<ReportSummary, ReportError> {
    let (page, summary) = render_report(doc)?;
    std::fs::write(path, page).map_err(|source| ReportError::Write {
        path: path.to_path_buf(),
        source,
    })?;
    Ok(summary)
}
