//! Comparing two runs: which figures got better or worse, by how much.
//!
//! Rows of the two results documents are matched by their identifying
//! fields (scenario, impl, layer, size, ...); for every numeric figure both
//! rows carry, the ratio b/a is computed. Rows present in only one run are
//! listed as such. The result prints as a text table or writes an HTML page
//! with one log-scale dot chart of the ratios per scenario.
//!
//! ```no_run
//! use juxta_bench::compare;
//! let a = compare::load("runs/before".as_ref()).unwrap();
//! let b = compare::load("runs/after/results.json".as_ref()).unwrap();
//! let c = compare::compare(&a, &b);
//! c.print_table(&mut std::io::stdout()).unwrap();
//! compare::write_html(&c, "compare.html".as_ref()).unwrap();
//! ```

use std::fmt;
use std::path::Path;

use serde_json::Value;

use crate::report::chart::{Axis, Chart, Kind, Marker, Series, Unit, PALETTE};
use crate::report::html::{self, Item, Section, Table};
use crate::report::plots::Plot;
use crate::report::rows::{rows, value_text, Row};
use crate::report::tables::num;
use crate::report::{ReportError, ReportSummary};

/// Fields that identify a row (what was measured, not the measurement).
pub const ID_FIELDS: &[&str] = &[
    "impl",
    "layer",
    "path",
    "model",
    "operation",
    "config",
    "pattern",
    "size",
    "receivers",
    "elements",
    "element_size",
    "senders",
    "edges",
    "rendezvous",
    "offered_qps",
    "offered_msgs_per_s",
    "group",
];

/// Numeric fields that are not figures worth a ratio.
const NOT_FIGURES: &[&str] = &["samples", "started_unix"];

/// Preferred order of figures (others follow alphabetically).
const FIGURE_ORDER: &[&str] = &[
    "rtt_us_median",
    "rtt_us_p99",
    "bandwidth_mb_s",
    "msgs_per_s",
    "wire_bytes",
    "ms_median",
    "ms_p99",
    "queries_per_s",
    "response_ms_p50",
    "response_ms_p99",
    "loss_pct",
    "recovery_ms",
    "delivered_msgs_per_s",
];

/// Upper bound of rows drawn in one comparison plot (the table has them all).
pub const MAX_PLOT_ROWS: usize = 150;

/// Loads a results document: a directory holding `results.json`, or a JSON file.
pub fn load(path: &Path) -> Result<Value, ReportError> {
    let file = if path.is_dir() {
        path.join("results.json")
    } else {
        path.to_path_buf()
    };
    let text = std::fs::read_to_string(&file).map_err(|source| ReportError::Read {
        path: file.clone(),
        source,
    })?;
    serde_json::from_str(&text).map_err(|source| ReportError::Json { path: file, source })
}

/// What identifies a row: its scenario and identifying fields.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct RowKey {
    /// The scenario.
    pub scenario: String,
    /// (field, value) of the identifying fields present, in [`ID_FIELDS`] order.
    pub fields: Vec<(String, String)>,
    /// 0 for the first row with this key, 1 for a second one, ...
    pub occurrence: usize,
}

impl RowKey {
    fn of(r: &Row<'_>) -> RowKey {
        RowKey {
            scenario: r.scenario().to_string(),
            fields: ID_FIELDS
                .iter()
                .filter_map(|f| r.0.get(*f).map(|v| (f.to_string(), value_text(v))))
                // `group: net` is what rows without the field measured
                // (rendezvous rows before `--group`): the same key.
                .filter(|(f, v)| !(f == "group" && v == "net"))
                .collect(),
            occurrence: 0,
        }
    }

    /// The identifying values only, as `juxta endpoint 1` (for plot axes).
    pub fn short_label(&self) -> String {
        let mut s = self
            .fields
            .iter()
            .map(|(_, v)| v.as_str())
            .collect::<Vec<_>>()
            .join(" ");
        if self.occurrence > 0 {
            s.push_str(&format!(" #{}", self.occurrence + 1));
        }
        s
    }

    /// The identifying fields as `impl=juxta layer=endpoint size=1`.
    pub fn label(&self) -> String {
        let mut s = self
            .fields
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(" ");
        if self.occurrence > 0 {
            s.push_str(&format!(" #{}", self.occurrence + 1));
        }
        s
    }
}

impl fmt::Display for RowKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.scenario, self.label())
    }
}

/// One figure of a matched row.
#[derive(Debug, Clone, PartialEq)]
pub struct FigureRatio {
    /// Field name, e.g. `rtt_us_median`.
    pub field: String,
    /// Value in run a.
    pub a: f64,
    /// Value in run b.
    pub b: f64,
    /// b / a; None when a is 0.
    pub ratio: Option<f64>,
}

impl FigureRatio {
    /// Whether b is better than a: Some(true) better, Some(false) worse,
    /// None when equal, unknown direction or no ratio.
    pub fn improved(&self) -> Option<bool> {
        let r = self.ratio?;
        if r == 1.0 {
            return None;
        }
        higher_is_better(&self.field).map(|h| (r > 1.0) == h)
    }
}

/// Whether a larger value of the field is better (None: unknown).
pub fn higher_is_better(field: &str) -> Option<bool> {
    if field.contains("ratio_vs_tcp") {
        return Some(field.starts_with("bandwidth") || field.starts_with("msgs"));
    }
    if field.starts_with("bandwidth") || field.contains("per_s") || field == "queries_per_s" {
        return Some(true);
    }
    if field.starts_with("rtt")
        || field.starts_with("ms_")
        || field.starts_with("response")
        || field.starts_with("loss")
        || field.starts_with("recovery")
        || field.contains("wire")
        || field.contains("rss")
        || field.contains("cpu")
        || field == "cv"
        || field == "completion_cv"
        || field.contains("spread")
    {
        return Some(false);
    }
    None
}

/// A row found in both runs.
#[derive(Debug, Clone, PartialEq)]
pub struct MatchedRow {
    /// Its identity.
    pub key: RowKey,
    /// Figures both rows carry.
    pub figures: Vec<FigureRatio>,
}

/// The comparison of run a with run b.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Comparison {
    /// Rows found in both, in run a's order.
    pub matched: Vec<MatchedRow>,
    /// Rows only in run a.
    pub only_a: Vec<RowKey>,
    /// Rows only in run b.
    pub only_b: Vec<RowKey>,
    /// Run a's command, when given.
    pub a_command: String,
    /// Run b's command, when given.
    pub b_command: String,
}

fn keyed<'a>(doc: &'a Value) -> Vec<(RowKey, Row<'a>)> {
    let mut out: Vec<(RowKey, Row<'a>)> = Vec::new();
    for r in rows(doc) {
        let mut k = RowKey::of(&r);
        k.occurrence = out
            .iter()
            .filter(|(o, _)| o.scenario == k.scenario && o.fields == k.fields)
            .count();
        out.push((k, r));
    }
    out
}

fn figure_fields(a: &Row<'_>, b: &Row<'_>) -> Vec<String> {
    let mut f: Vec<String> =
        a.0.keys()
            .filter(|k| {
                !ID_FIELDS.contains(&k.as_str())
                    && !NOT_FIGURES.contains(&k.as_str())
                    && a.f(k).is_some()
                    && b.f(k).is_some()
            })
            .cloned()
            .collect();
    f.sort_by_key(|k| {
        (
            FIGURE_ORDER
                .iter()
                .position(|o| o == k)
                .unwrap_or(FIGURE_ORDER.len()),
            k.clone(),
        )
    });
    f
}

/// Compares run `a` with run `b` (ratios are b/a).
pub fn compare(a: &Value, b: &Value) -> Comparison {
    let ka = keyed(a);
    let kb = keyed(b);
    let mut c = Comparison {
        a_command: a.get("command").map(value_text).unwrap_or_default(),
        b_command: b.get("command").map(value_text).unwrap_or_default(),
        ..Comparison::default()
    };
    for (k, ra) in &ka {
        match kb.iter().find(|(o, _)| o == k) {
            Some((_, rb)) => {
                let figures = figure_fields(ra, rb)
                    .into_iter()
                    .filter_map(|f| {
                        let (x, y) = (ra.f(&f)?, rb.f(&f)?);
                        let ratio = (x != 0.0).then(|| y / x).filter(|r| r.is_finite());
                        Some(FigureRatio {
                            field: f,
                            a: x,
                            b: y,
                            ratio,
                        })
                    })
                    .collect();
                c.matched.push(MatchedRow {
                    key: k.clone(),
                    figures,
                });
            }
            None => c.only_a.push(k.clone()),
        }
    }
    for (k, _) in &kb {
        if !ka.iter().any(|(o, _)| o == k) {
            c.only_b.push(k.clone());
        }
    }
    c
}

impl Comparison {
    /// Scenarios of the matched rows, in order of appearance.
    pub fn scenarios(&self) -> Vec<String> {
        let mut v: Vec<String> = Vec::new();
        for m in &self.matched {
            if !v.contains(&m.key.scenario) {
                v.push(m.key.scenario.clone());
            }
        }
        v
    }

    /// Prints the comparison as a plain-text table.
    pub fn print_table(&self, w: &mut impl std::io::Write) -> std::io::Result<()> {
        if !self.a_command.is_empty() || !self.b_command.is_empty() {
            writeln!(w, "a: {}", self.a_command)?;
            writeln!(w, "b: {}", self.b_command)?;
        }
        writeln!(
            w,
            "{:<58} {:<22} {:>12} {:>12} {:>9}",
            "row", "figure", "a", "b", "b/a"
        )?;
        for m in &self.matched {
            let label = format!("{} {}", m.key.scenario, m.key.label());
            for (i, f) in m.figures.iter().enumerate() {
                let mark = match f.improved() {
                    Some(true) => " better",
                    Some(false) => " worse",
                    None => "",
                };
                writeln!(
                    w,
                    "{:<58} {:<22} {:>12} {:>12} {:>9}{mark}",
                    if i == 0 { label.as_str() } else { "" },
                    f.field,
                    num(f.a),
                    num(f.b),
                    f.ratio.map(num).unwrap_or_else(|| "n/a".into())
                )?;
            }
            if m.figures.is_empty() {
                writeln!(w, "{label:<58} (no common numeric figures)")?;
            }
        }
        for (name, list) in [("a", &self.only_a), ("b", &self.only_b)] {
            if !list.is_empty() {
                writeln!(w, "only in {name}:")?;
                for k in list {
                    writeln!(w, "  {k}")?;
                }
            }
        }
        Ok(())
    }
}

/// The dot chart of one scenario's ratios (log x, one row per matched row).
fn scenario_plot(c: &Comparison, scenario: &str) -> Result<Option<Plot>, ReportError> {
    let rows: Vec<&MatchedRow> = c
        .matched
        .iter()
        .filter(|m| m.key.scenario == scenario && m.figures.iter().any(|f| f.ratio.is_some()))
        .take(MAX_PLOT_ROWS)
        .collect();
    if rows.is_empty() {
        return Ok(None);
    }
    let total = c
        .matched
        .iter()
        .filter(|m| m.key.scenario == scenario)
        .count();
    let cats: Vec<String> = rows.iter().map(|m| m.key.short_label()).collect();
    let mut fields: Vec<String> = Vec::new();
    for m in &rows {
        for f in &m.figures {
            if !fields.contains(&f.field) {
                fields.push(f.field.clone());
            }
        }
    }
    // The main figures only, when there are any (the table has every figure).
    if fields.iter().any(|f| FIGURE_ORDER.contains(&f.as_str())) {
        fields.retain(|f| FIGURE_ORDER.contains(&f.as_str()));
    }
    let markers = [
        Marker::Circle,
        Marker::Square,
        Marker::Triangle,
        Marker::Cross,
    ];
    let mut series: Vec<Series> = fields
        .iter()
        .enumerate()
        .map(|(i, field)| Series {
            label: field.clone(),
            color: PALETTE[i % PALETTE.len()],
            dashed: false,
            bold: false,
            marker: markers[(i / PALETTE.len()) % markers.len()],
            kind: Kind::Markers,
            points: rows
                .iter()
                .enumerate()
                .filter_map(|(ri, m)| {
                    let f = m.figures.iter().find(|f| &f.field == field)?;
                    Some((f.ratio?, ri as f64))
                })
                .collect(),
        })
        .collect();
    series.push(Series {
        label: "b = a".into(),
        color: plotters::style::RGBColor(0, 0, 0),
        dashed: true,
        bold: false,
        marker: Marker::None,
        kind: Kind::Line,
        points: vec![(1.0, 0.0), (1.0, (rows.len() - 1) as f64)],
    });
    let chart = Chart {
        title: format!("{scenario}: b / a per figure"),
        x: Axis::log("ratio b / a (log scale)", Unit::Number),
        y: Axis::category("", cats),
        series,
    };
    let id = format!("plot-compare-{}", crate::csv_out::file_stem(scenario));
    let mut ident: Vec<&str> = Vec::new();
    for m in &rows {
        for (k, _) in &m.key.fields {
            if !ident.contains(&k.as_str()) {
                ident.push(k);
            }
        }
    }
    let ident = ident.join(", ");
    let shown = if total > rows.len() {
        format!(
            " First {} of {} rows shown; the table has all.",
            rows.len(),
            total
        )
    } else {
        String::new()
    };
    Ok(chart.render(&id)?.map(|svg| Plot {
        id,
        title: format!("{scenario}: ratios b / a"),
        caption: format!("Each dot is one figure of one row (identified by {}), run b divided by run a; right of the dashed line b is larger (better for rates and bandwidth, worse for times, loss and bytes).{shown}", ident),
        svg,
    }))
}

/// The sections of the comparison page.
pub fn sections(c: &Comparison) -> Result<Vec<Section>, ReportError> {
    let mut out = Vec::new();
    for sc in c.scenarios() {
        let mut items = Vec::new();
        if let Some(p) = scenario_plot(c, &sc)? {
            items.push(Item::Plot(p));
        }
        let mut t = Table {
            id: format!("table-compare-{}", crate::csv_out::file_stem(&sc)),
            caption: format!("{sc}: every figure of the rows found in both runs."),
            head: ["row", "figure", "a", "b", "b / a", ""]
                .iter()
                .map(|s| s.to_string())
                .collect(),
            rows: Vec::new(),
        };
        for m in c.matched.iter().filter(|m| m.key.scenario == sc) {
            for f in &m.figures {
                t.rows.push(vec![
                    m.key.label(),
                    f.field.clone(),
                    num(f.a),
                    num(f.b),
                    f.ratio.map(num).unwrap_or_else(|| "n/a".into()),
                    match f.improved() {
                        Some(true) => "better".into(),
                        Some(false) => "worse".into(),
                        None => String::new(),
                    },
                ]);
            }
        }
        items.push(Item::Table(t));
        out.push(Section {
            id: format!("sec-compare-{}", crate::csv_out::file_stem(&sc)),
            title: sc.clone(),
            items,
        });
    }
    for (name, list, id) in [
        ("Rows only in run a", &c.only_a, "table-only-a"),
        ("Rows only in run b", &c.only_b, "table-only-b"),
    ] {
        let items = if list.is_empty() {
            vec![Item::Note("None.".into())]
        } else {
            vec![Item::Table(Table {
                id: id.into(),
                caption: name.into(),
                head: vec!["scenario".into(), "row".into()],
                rows: list
                    .iter()
                    .map(|k| vec![k.scenario.clone(), k.label()])
                    .collect(),
            })]
        };
        out.push(Section {
            id: format!("sec-{id}"),
            title: name.into(),
            items,
        });
    }
    Ok(out)
}

/// Writes the comparison as a self-contained HTML page.
pub fn write_html(c: &Comparison, path: &Path) -> Result<ReportSummary, ReportError> {
    let secs = sections(c)?;
    let mut summary = ReportSummary::default();
    for s in &secs {
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
    let intro =
        format!(
        "Run a: {}. Run b: {}. Rows matched by scenario and identifying fields; ratios are b / a.",
        if c.a_command.is_empty() { "?" } else { &c.a_command },
        if c.b_command.is_empty() { "?" } else { &c.b_command }
    );
    let page = html::simple_page("Juxta benchmark comparison", &intro, &secs);
    std::fs::write(path, page).map_err(|source| ReportError::Write {
        path: path.to_path_buf(),
        source,
    })?;
    Ok(summary)
}
