//! One function per figure of the report, in the style of the JXTA studies.
//!
//! Each function takes the rows of its scenario and returns `None` when the
//! rows it needs are absent (the page then leaves the figure out). Series
//! of different implementations share a plot: `tcp` (the bound, thick
//! black), `juxta <layer>` (solid) and `jxse <layer>` (dashed, triangles).

use std::collections::BTreeMap;

use plotters::style::RGBColor;

use super::chart::{Axis, Chart, Kind, Marker, Series, Unit, PALETTE};
use super::published;
use super::rows::{impl_layer_label, impl_rank, layer_rank, Row};
use super::ReportError;

/// A rendered figure.
#[derive(Debug, Clone)]
pub struct Plot {
    /// Stable element id, e.g. `plot-pingpong-bandwidth`.
    pub id: String,
    /// Title (also drawn in the SVG).
    pub title: String,
    /// How it was measured.
    pub caption: String,
    /// The SVG document.
    pub svg: String,
}

/// Colour of a layer (tcp black, others fixed so a layer looks the same in every plot).
pub fn layer_color(layer: &str) -> RGBColor {
    match layer {
        "tcp" => RGBColor(0, 0, 0),
        "endpoint" => PALETTE[0],
        "endpoint-compat" => PALETTE[9],
        "unicast-pipe" => PALETTE[1],
        "secure-pipe" => PALETTE[3],
        "bidi-pipe" => PALETTE[2],
        "socket" => PALETTE[4],
        "socket-chunk" => PALETTE[6],
        "secure-socket" => PALETTE[8],
        "propagate" => PALETTE[5],
        "relayed-pipe" => PALETTE[7],
        other => PALETTE[6 + other.len() % 3],
    }
}

/// Sort key of a series: (layer rank, implementation rank, label).
type Rank = (usize, usize, String);

/// How one series looks and sorts.
#[derive(Debug, Clone)]
struct Key {
    rank: Rank,
    label: String,
    color: RGBColor,
    dashed: bool,
    bold: bool,
    marker: Marker,
}

/// The series key of an implementation/layer row, with an optional suffix.
fn layer_key(r: &Row<'_>, suffix: &str) -> Key {
    let imp = r.imp();
    let layer = if r.layer().is_empty() && imp == "tcp" {
        "tcp"
    } else {
        r.layer()
    };
    let label = if suffix.is_empty() {
        impl_layer_label(r)
    } else {
        format!("{} {suffix}", impl_layer_label(r))
    };
    Key {
        rank: (layer_rank(layer), impl_rank(imp), label.clone()),
        label,
        color: layer_color(layer),
        dashed: imp.starts_with("jxse"),
        bold: layer == "tcp",
        marker: if imp.starts_with("jxse") {
            Marker::Triangle
        } else if layer == "tcp" {
            Marker::Square
        } else {
            Marker::Circle
        },
    }
}

/// A series key from a free label, coloured by its rank in the plot.
fn plain_key(label: String, order: f64) -> Key {
    Key {
        rank: (0, (order.max(0.0) * 1000.0) as usize, label.clone()),
        label,
        color: PALETTE[0],
        dashed: false,
        bold: false,
        marker: Marker::Circle,
    }
}

/// Groups rows into series sorted by key; points sorted by x, duplicate x averaged.
fn build(
    rows: &[Row<'_>],
    kind: Kind,
    key: impl Fn(&Row<'_>) -> Option<Key>,
    x: impl Fn(&Row<'_>) -> Option<f64>,
    y: impl Fn(&Row<'_>) -> Option<f64>,
    recolor: bool,
) -> Vec<Series> {
    let mut groups: BTreeMap<Rank, (Key, Vec<(f64, f64)>)> = BTreeMap::new();
    for r in rows {
        let (Some(k), Some(xv), Some(yv)) = (key(r), x(r), y(r)) else {
            continue;
        };
        groups
            .entry(k.rank.clone())
            .or_insert_with(|| (k, Vec::new()))
            .1
            .push((xv, yv));
    }
    groups
        .into_values()
        .enumerate()
        .map(|(i, (k, mut pts))| {
            pts.sort_by(|a, b| a.0.total_cmp(&b.0));
            let mut merged: Vec<(f64, f64, u32)> = Vec::new();
            for (px, py) in pts {
                match merged.last_mut() {
                    Some(last) if last.0 == px && kind == Kind::Line => {
                        last.1 += py;
                        last.2 += 1;
                    }
                    _ => merged.push((px, py, 1)),
                }
            }
            Series {
                label: k.label,
                color: if recolor {
                    PALETTE[i % PALETTE.len()]
                } else {
                    k.color
                },
                dashed: k.dashed,
                bold: k.bold,
                marker: if recolor {
                    [
                        Marker::Circle,
                        Marker::Square,
                        Marker::Triangle,
                        Marker::Cross,
                    ][(i / 10) % 4]
                } else {
                    k.marker
                },
                kind,
                points: merged
                    .into_iter()
                    .map(|(a, b, n)| (a, b / n as f64))
                    .collect(),
            }
        })
        .collect()
}

fn finish(
    id: &str,
    title: &str,
    caption: &str,
    x: Axis,
    y: Axis,
    series: Vec<Series>,
) -> Result<Option<Plot>, ReportError> {
    let chart = Chart {
        title: title.to_string(),
        x,
        y,
        series,
    };
    Ok(chart.render(id)?.map(|svg| Plot {
        id: id.to_string(),
        title: title.to_string(),
        caption: caption.to_string(),
        svg,
    }))
}

/// Ping-pong rows measured one-to-one (not the propagate fan-out to >1 receivers).
fn one_to_one<'a>(rows: &[Row<'a>]) -> Vec<Row<'a>> {
    rows.iter()
        .copied()
        .filter(|r| r.f("receivers").is_none_or(|n| n <= 1.0))
        .collect()
}

const PINGPONG_METHOD: &str = "Message/ack ping-pong between two processes: warm-up, then timed runs of consecutive message/ack pairs; median over runs. Plain TCP in the same run is the bound.";

/// Bandwidth vs message size per layer, log-log, tcp as the bound (JuxTest figure).
pub fn pingpong_bandwidth(rows: &[Row<'_>]) -> Result<Option<Plot>, ReportError> {
    let s = build(
        &one_to_one(rows),
        Kind::Line,
        |r| Some(layer_key(r, "")),
        |r| r.f("size"),
        |r| r.f("bandwidth_mb_s"),
        false,
    );
    finish(
        "plot-pingpong-bandwidth",
        "Bandwidth vs message size",
        &format!("{PINGPONG_METHOD} Bandwidth = bytes sent / time of the pairs."),
        Axis::log("message size", Unit::Bytes),
        Axis::log("bandwidth (MB/s)", Unit::Number),
        s,
    )
}

/// Median RTT vs message size per layer, log-log.
pub fn pingpong_rtt(rows: &[Row<'_>]) -> Result<Option<Plot>, ReportError> {
    let s = build(
        &one_to_one(rows),
        Kind::Line,
        |r| Some(layer_key(r, "")),
        |r| r.f("size"),
        |r| r.f("rtt_us_median"),
        false,
    );
    finish(
        "plot-pingpong-rtt",
        "Round-trip time vs message size",
        &format!("{PINGPONG_METHOD} Median RTT of a message and its small ack."),
        Axis::log("message size", Unit::Bytes),
        Axis::log("RTT median (us)", Unit::Number),
        s,
    )
}

/// The smallest measured size (1 byte when present).
fn smallest_size(rows: &[Row<'_>]) -> Option<f64> {
    rows.iter()
        .filter_map(|r| r.f("size"))
        .min_by(|a, b| a.total_cmp(b))
}

/// Horizontal bars of one or more fields per implementation/layer at the smallest size.
fn bars_at_smallest(
    rows: &[Row<'_>],
    fields: &[(&str, &str)],
) -> Option<(f64, Vec<String>, Vec<Series>)> {
    let rows = one_to_one(rows);
    let size = smallest_size(&rows)?;
    let mut at: Vec<(Key, Row<'_>)> = rows
        .iter()
        .filter(|r| r.f("size") == Some(size))
        .map(|r| (layer_key(r, ""), *r))
        .collect();
    at.sort_by(|a, b| a.0.rank.cmp(&b.0.rank));
    at.dedup_by(|a, b| a.0.label == b.0.label);
    let cats: Vec<String> = at.iter().map(|(k, _)| k.label.clone()).collect();
    let series = fields
        .iter()
        .enumerate()
        .map(|(fi, (field, label))| Series {
            label: label.to_string(),
            color: PALETTE[fi % PALETTE.len()],
            dashed: false,
            bold: false,
            marker: Marker::Square,
            kind: Kind::Bars,
            points: at
                .iter()
                .enumerate()
                .filter_map(|(i, (_, r))| Some((r.f(field)?, i as f64)))
                .collect(),
        })
        .collect();
    Some((size, cats, series))
}

/// RTT of the smallest (1-byte) message per layer and implementation.
pub fn pingpong_rtt_small(rows: &[Row<'_>]) -> Result<Option<Plot>, ReportError> {
    let Some((size, cats, series)) = bars_at_smallest(
        rows,
        &[
            ("rtt_us_median", "median"),
            ("rtt_us_p99", "99th percentile"),
        ],
    ) else {
        return Ok(None);
    };
    finish(
        "plot-pingpong-rtt-1b",
        &format!("RTT of a {} message per layer", size_text(size)),
        &format!("{PINGPONG_METHOD} The studies' latency figure is this RTT."),
        Axis::log("RTT (us)", Unit::Number),
        Axis::category("", cats),
        series,
    )
}

/// Bytes on the wire for the smallest payload per layer (protocol efficiency).
pub fn pingpong_wire(rows: &[Row<'_>]) -> Result<Option<Plot>, ReportError> {
    let Some((size, cats, series)) = bars_at_smallest(rows, &[("wire_bytes", "bytes on the wire")])
    else {
        return Ok(None);
    };
    finish(
        "plot-pingpong-wire",
        &format!("Bytes on the wire for a {} payload", size_text(size)),
        "Bytes the layer writes to its TCP connection for one message of this payload (framing, headers, message elements), excluding TCP/IP headers.",
        Axis::log("bytes on the wire per message", Unit::Bytes),
        Axis::category("", cats),
        series,
    )
}

/// Wire overhead (bytes on the wire / payload) vs size, log-log.
pub fn pingpong_wire_overhead(rows: &[Row<'_>]) -> Result<Option<Plot>, ReportError> {
    let s = build(
        &one_to_one(rows),
        Kind::Line,
        |r| Some(layer_key(r, "")),
        |r| r.f("size"),
        |r| Some(r.f("wire_bytes")? / r.f("size").filter(|s| *s > 0.0)?),
        false,
    );
    finish(
        "plot-pingpong-wire-ratio",
        "Bytes on the wire per payload byte",
        "Bytes on the wire divided by the payload size: 1 means no overhead.",
        Axis::log("message size", Unit::Bytes),
        Axis::log("wire bytes / payload bytes", Unit::Number),
        s,
    )
}

/// One series per layer and message size, ordered by layer then size.
fn layer_size_key(r: &Row<'_>) -> Option<Key> {
    let size = r.f("size").map(size_text).unwrap_or_default();
    let mut k = layer_key(r, &size);
    k.rank.1 = k.rank.1 * 100_000_000 + r.f("size").unwrap_or(0.0) as usize;
    Some(k)
}

/// Propagate RTT vs number of receivers (one-to-many).
pub fn propagate_receivers(rows: &[Row<'_>]) -> Result<Option<Plot>, ReportError> {
    let fan: Vec<Row<'_>> = rows
        .iter()
        .copied()
        .filter(|r| r.f("receivers").is_some())
        .collect();
    let s = build(
        &fan,
        Kind::Line,
        layer_size_key,
        |r| r.f("receivers"),
        |r| r.f("rtt_us_median"),
        true,
    );
    finish(
        "plot-propagate-receivers",
        "Propagate pipe: RTT vs receivers",
        "One sender propagates each message to n receivers; the RTT ends when every receiver's ack has arrived (median).",
        Axis::linear("receivers"),
        Axis::log("RTT median (us)", Unit::Number),
        s,
    )
}

fn throughput_key(r: &Row<'_>) -> Option<Key> {
    let pattern = r.s("pattern").unwrap_or("");
    if pattern == "paced" {
        // Several offered rates per size: plotted against the rate.
        return None;
    }
    let suffix = match r.f("receivers") {
        Some(n) if pattern == "smooth" => format!("to {n} receivers"),
        Some(n) => format!("{pattern} to {n} receivers"),
        None if pattern == "smooth" => String::new(),
        None => pattern.to_string(),
    };
    let mut k = layer_key(r, &suffix);
    if pattern == "bursty" {
        k.marker = Marker::Square;
        k.rank.1 += 10;
    }
    Some(k)
}

const THROUGHPUT_METHOD: &str = "One-way stream from a sender to a receiver; smooth = back-to-back, bursty = bursts of 50 messages then 500 ms idle; messages counted by id at the receiver.";

/// Paced runs: received vs offered message rate per layer and size (the
/// thesis' send-rate sweeps).
pub fn throughput_paced(rows: &[Row<'_>]) -> Result<Option<Plot>, ReportError> {
    let paced: Vec<Row<'_>> = rows
        .iter()
        .copied()
        .filter(|r| r.s("pattern") == Some("paced") && r.f("offered_msgs_per_s").is_some())
        .collect();
    let s = build(
        &paced,
        Kind::Line,
        layer_size_key,
        |r| r.f("offered_msgs_per_s"),
        |r| r.f("msgs_per_s"),
        true,
    );
    finish(
        "plot-throughput-paced",
        "Throughput at set send rates: received vs offered",
        "One-way stream at a set offered rate (message i leaves i/rate after the start; within a millisecond messages leave together); received rate counted by id at the receiver.",
        Axis::log("offered messages/s", Unit::Number),
        Axis::log("received messages/s", Unit::Number),
        s,
    )
}

/// Messages per second vs size per layer and pattern.
pub fn throughput_msgs(rows: &[Row<'_>]) -> Result<Option<Plot>, ReportError> {
    let s = build(
        rows,
        Kind::Line,
        throughput_key,
        |r| r.f("size"),
        |r| r.f("msgs_per_s"),
        false,
    );
    finish(
        "plot-throughput-msgs",
        "Throughput: messages per second",
        THROUGHPUT_METHOD,
        Axis::log("message size", Unit::Bytes),
        Axis::log("messages/s", Unit::Number),
        s,
    )
}

/// MB/s vs size per layer and pattern.
pub fn throughput_mbs(rows: &[Row<'_>]) -> Result<Option<Plot>, ReportError> {
    let s = build(
        rows,
        Kind::Line,
        throughput_key,
        |r| r.f("size"),
        |r| r.f("bandwidth_mb_s"),
        false,
    );
    finish(
        "plot-throughput-mbs",
        "Throughput: MB per second",
        THROUGHPUT_METHOD,
        Axis::log("message size", Unit::Bytes),
        Axis::log("MB/s", Unit::Number),
        s,
    )
}

/// Loss % vs size per layer and pattern.
pub fn throughput_loss(rows: &[Row<'_>]) -> Result<Option<Plot>, ReportError> {
    let s = build(
        rows,
        Kind::Line,
        throughput_key,
        |r| r.f("size"),
        |r| r.f("loss_pct"),
        false,
    );
    finish(
        "plot-throughput-loss",
        "Throughput: messages lost",
        "Messages sent but never seen at the receiver (by message id), percent.",
        Axis::log("message size", Unit::Bytes),
        Axis::linear("loss (%)"),
        s,
    )
}

/// RTT of one 20 KB message as 1..20 elements.
pub fn composition(rows: &[Row<'_>]) -> Result<Option<Plot>, ReportError> {
    let s = build(
        rows,
        Kind::Line,
        |r| Some(layer_key(r, "")),
        |r| r.f("elements"),
        |r| r.f("rtt_us_median"),
        false,
    );
    finish(
        "plot-composition",
        "Message composition: RTT vs number of elements",
        "The same payload (20 KB) sent as 1x20 KB, 5x4 KB, 10x2 KB or 20x1 KB elements; median message/ack RTT.",
        Axis::linear("elements per message"),
        Axis::linear("RTT median (us)"),
        s,
    )
}

/// The socket buffer sweep: ping-pong bandwidth over tcp's vs size, one
/// series per window (`recolor`: the windows are not layers).
pub fn buffers(rows: &[Row<'_>]) -> Result<Option<Plot>, ReportError> {
    let socket: Vec<Row<'_>> = rows.iter().copied().filter(|r| r.imp() != "tcp").collect();
    let s = build(
        &socket,
        Kind::Line,
        |r| {
            // Bounded windows in order, `auto` (null) last.
            let order = r.f("window").unwrap_or(f64::from(u32::MAX));
            Some(plain_key(
                format!("socket, window {}", r.s("window_label").unwrap_or("?")),
                order / 1024.0,
            ))
        },
        |r| r.f("size"),
        |r| r.f("bandwidth_ratio_vs_tcp"),
        true,
    );
    finish(
        "plot-buffers",
        "Socket buffer sweep: bandwidth vs plain TCP per stream window",
        "JuxTest's buffer test: the JXTA socket with its stream window bounded at each size (both ends), message/ack ping-pong bandwidth (size / median RTT) as a ratio to plain TCP measured in the same run; `auto` is the default window.",
        Axis::log("message size", Unit::Bytes),
        Axis::linear("bandwidth / tcp"),
        s,
    )
}

fn senders_key(r: &Row<'_>) -> Option<Key> {
    let size = r.f("size").map(size_text).unwrap_or_default();
    // Rows before the one-way mode existed have no `mode`: ping-pong.
    let oneway = r.s("mode") == Some("oneway");
    let label = if oneway {
        format!("{size} one-way")
    } else {
        size
    };
    let mut k = layer_key(r, &label);
    k.rank.1 = k.rank.1 * 100_000_000 + r.f("size").unwrap_or(0.0) as usize;
    if oneway {
        k.marker = Marker::Square;
        k.rank.1 += 50_000_000;
    }
    Some(k)
}

/// Many-to-one one-way: aggregate MB/s received vs senders.
pub fn senders_mbs(rows: &[Row<'_>]) -> Result<Option<Plot>, ReportError> {
    let oneway: Vec<Row<'_>> = rows
        .iter()
        .copied()
        .filter(|r| r.s("mode") == Some("oneway"))
        .collect();
    let s = build(
        &oneway,
        Kind::Line,
        senders_key,
        |r| r.f("senders"),
        |r| r.f("bandwidth_mb_s"),
        false,
    );
    finish(
        "plot-senders-mbs",
        "Many-to-one throughput: MB/s received vs senders",
        "n sender peers stream back to back into one input pipe (or server socket); the receiver counts each sender's messages by id; MB/s over all senders, first start to last count.",
        Axis::linear("senders"),
        Axis::log("MB/s (all senders)", Unit::Number),
        s,
    )
}

/// Many-to-one: aggregate messages/s vs senders.
pub fn senders_msgs(rows: &[Row<'_>]) -> Result<Option<Plot>, ReportError> {
    let s = build(
        rows,
        Kind::Line,
        senders_key,
        |r| r.f("senders"),
        |r| r.f("msgs_per_s"),
        false,
    );
    finish(
        "plot-senders-msgs",
        "Many-to-one: aggregate messages/s vs senders",
        "n sender peers send into one input pipe (or server socket): ping-pong (each waits for its ack) and one-way (back to back, counted by id at the receiver); messages/s over all senders.",
        Axis::linear("senders"),
        Axis::linear("messages/s (all senders)"),
        s,
    )
}

/// Many-to-one: RTT vs senders.
pub fn senders_rtt(rows: &[Row<'_>]) -> Result<Option<Plot>, ReportError> {
    let s = build(
        rows,
        Kind::Line,
        senders_key,
        |r| r.f("senders"),
        |r| r.f("rtt_us_median"),
        false,
    );
    finish(
        "plot-senders-rtt",
        "Many-to-one: RTT vs senders",
        "Median message/ack RTT seen by a sender while n senders share the receiver.",
        Axis::linear("senders"),
        Axis::log("RTT median (us)", Unit::Number),
        s,
    )
}

/// Typical operations: median ms per operation and configuration, with the published means.
pub fn ops(rows: &[Row<'_>]) -> Result<Option<Plot>, ReportError> {
    let mut cats: Vec<String> = published::OPS_MS
        .iter()
        .map(|(o, _)| o.to_string())
        .collect();
    for r in rows {
        if let Some(op) = r.s("operation") {
            if !cats.iter().any(|c| c == op) {
                cats.push(op.to_string());
            }
        }
    }
    let measured: Vec<&str> = rows.iter().filter_map(|r| r.s("operation")).collect();
    cats.retain(|c| measured.contains(&c.as_str()));
    let index = |op: &str| cats.iter().position(|c| c == op).map(|i| i as f64);
    let mut series = build(
        rows,
        Kind::Bars,
        |r| {
            Some(plain_key(
                format!("ours, {}", r.s("config").unwrap_or("default")),
                0.0,
            ))
        },
        |r| r.f("ms_median"),
        |r| index(r.s("operation")?),
        true,
    );
    series.push(Series {
        label: "published, JXTA 2.0 (mean)".into(),
        color: RGBColor(150, 150, 150),
        dashed: false,
        bold: false,
        marker: Marker::Square,
        kind: Kind::Bars,
        points: published::OPS_MS
            .iter()
            .filter_map(|(op, ms)| Some((*ms, index(op)?)))
            .collect(),
    });
    finish(
        "plot-ops",
        "Typical peer operations",
        "Latency of each platform operation (median of repeated runs); grey: the thesis' means on a 100 Mb/s LAN with a TCP rendezvous (JXTA 2.0, 800 MHz PCs).",
        Axis::log("time (ms)", Unit::Number),
        Axis::category("", cats.clone()),
        series,
    )
}

fn rdv_label(r: &Row<'_>, vary: &str) -> Option<Key> {
    let model = r.s("model").unwrap_or("?");
    let model_rank = ["centralized", "flooding", "srdi"]
        .iter()
        .position(|m| *m == model)
        .unwrap_or(3) as f64;
    let other_n = match vary {
        "offered_qps" => r.f("edges"),
        _ => r.f("offered_qps"),
    }
    .unwrap_or(0.0);
    // A certificate subgroup's rendezvous after the Net peer group's.
    let subgroup = r.s("group") == Some("subgroup");
    let order = f64::from(u8::from(subgroup)) * 1e7
        + model_rank * 1e6
        + other_n.clamp(0.0, 9999.0) * 100.0
        + r.f("rendezvous").unwrap_or(0.0).clamp(0.0, 99.0);
    let rdv = r
        .f("rendezvous")
        .map(|n| format!(", {n} rdv"))
        .unwrap_or_default();
    let other = match vary {
        "offered_qps" => r.f("edges").map(|e| format!(", {e} edges")),
        _ => r.f("offered_qps").map(|q| format!(", {q} q/s")),
    }
    .unwrap_or_default();
    let group = if subgroup { ", subgroup" } else { "" };
    Some(plain_key(format!("{model}{other}{rdv}{group}"), order))
}

fn rdv_plot(
    rows: &[Row<'_>],
    vary: &str,
    field: &str,
    id: &str,
    title: &str,
    ylabel: Axis,
) -> Result<Option<Plot>, ReportError> {
    let s = build(
        rows,
        Kind::Line,
        |r| rdv_label(r, vary),
        |r| r.f(vary),
        |r| r.f(field),
        true,
    );
    let xlabel = if vary == "edges" {
        "group size (edges)"
    } else {
        "offered query rate (queries/s)"
    };
    finish(
        id,
        title,
        "Edges send discovery queries for advertisements held elsewhere in the group at the offered rate; response time from query to first answer, loss = queries never answered.",
        Axis::linear(xlabel),
        ylabel,
        s,
    )
}

/// Rendezvous response time (p50) vs offered query rate.
pub fn rendezvous_response_qps(rows: &[Row<'_>]) -> Result<Option<Plot>, ReportError> {
    rdv_plot(
        rows,
        "offered_qps",
        "response_ms_p50",
        "plot-rendezvous-response-qps",
        "Rendezvous: response time vs query rate",
        Axis::log("response time median (ms)", Unit::Number),
    )
}

/// Rendezvous loss vs offered query rate.
pub fn rendezvous_loss_qps(rows: &[Row<'_>]) -> Result<Option<Plot>, ReportError> {
    rdv_plot(
        rows,
        "offered_qps",
        "loss_pct",
        "plot-rendezvous-loss-qps",
        "Rendezvous: lost queries vs query rate",
        Axis::linear("lost queries (%)"),
    )
}

/// Rendezvous coefficient of variation (stddev / mean of the response
/// times, the thesis' figure) vs offered query rate.
pub fn rendezvous_cv_qps(rows: &[Row<'_>]) -> Result<Option<Plot>, ReportError> {
    rdv_plot(
        rows,
        "offered_qps",
        "cv",
        "plot-rendezvous-cv-qps",
        "Rendezvous: coefficient of variation vs query rate",
        Axis::linear("cv (stddev / mean response time)"),
    )
}

/// Rendezvous response time (p50) vs group size.
pub fn rendezvous_response_edges(rows: &[Row<'_>]) -> Result<Option<Plot>, ReportError> {
    rdv_plot(
        rows,
        "edges",
        "response_ms_p50",
        "plot-rendezvous-response-edges",
        "Rendezvous: response time vs group size",
        Axis::log("response time median (ms)", Unit::Number),
    )
}

/// Rendezvous loss vs group size.
pub fn rendezvous_loss_edges(rows: &[Row<'_>]) -> Result<Option<Plot>, ReportError> {
    rdv_plot(
        rows,
        "edges",
        "loss_pct",
        "plot-rendezvous-loss-edges",
        "Rendezvous: lost queries vs group size",
        Axis::linear("lost queries (%)"),
    )
}

/// Recovery time after a rendezvous is killed, per group size.
pub fn recovery(rows: &[Row<'_>]) -> Result<Option<Plot>, ReportError> {
    let s = build(
        rows,
        Kind::Markers,
        |r| {
            let n = r.f("rendezvous").unwrap_or(0.0);
            // Successive kills (`--kill-every`): each kill's median, per
            // topology; the summary rows are left out.
            match (r.s("row"), r.s("topology")) {
                (Some("summary"), _) => None,
                (Some(_), Some(t)) => Some(plain_key(
                    format!("{n} rendezvous, {t}, median per kill"),
                    n + 0.5,
                )),
                _ => Some(plain_key(format!("{n} rendezvous"), n)),
            }
        },
        |r| r.f("edges"),
        |r| Some(r.f("recovery_ms").or_else(|| r.f("recovery_ms_p50"))? / 1000.0),
        true,
    );
    finish(
        "plot-recovery",
        "Recovery after a rendezvous failure",
        "One rendezvous is killed; time until every orphaned edge is connected to a live rendezvous again (thesis: 78.4 s / 100.4 s mean, 60 s of which fixed failure detection).",
        Axis::linear("group size (edges)"),
        Axis::linear("recovery time (s)"),
        s,
    )
}

fn relay_key(r: &Row<'_>) -> Option<Key> {
    let path = r.s("path")?;
    let layer = r.layer();
    let label = if layer.is_empty() {
        path.to_string()
    } else {
        format!("{path} {layer}")
    };
    let rank = [
        "direct",
        "tcp-relay",
        "http-relay",
        "two-relays",
        "firewalled",
    ]
    .iter()
    .position(|p| *p == path)
    .unwrap_or(5);
    Some(plain_key(label, rank as f64))
}

const RELAY_METHOD: &str = "Message/ack ping-pong between two edges connected directly, through one TCP relay, one HTTP relay, two relays, or (firewalled) one rendezvous and relay that edges with no listener lease by default.";

/// RTT per relay path vs size.
pub fn relay_rtt(rows: &[Row<'_>]) -> Result<Option<Plot>, ReportError> {
    let s = build(
        rows,
        Kind::Line,
        relay_key,
        |r| r.f("size"),
        |r| r.f("rtt_us_median"),
        true,
    );
    finish(
        "plot-relay-rtt",
        "Relays: RTT per path",
        RELAY_METHOD,
        Axis::log("message size", Unit::Bytes),
        Axis::log("RTT median (us)", Unit::Number),
        s,
    )
}

/// Bandwidth per relay path vs size.
pub fn relay_bandwidth(rows: &[Row<'_>]) -> Result<Option<Plot>, ReportError> {
    let s = build(
        rows,
        Kind::Line,
        relay_key,
        |r| r.f("size"),
        |r| r.f("bandwidth_mb_s"),
        true,
    );
    finish(
        "plot-relay-bandwidth",
        "Relays: bandwidth per path",
        RELAY_METHOD,
        Axis::log("message size", Unit::Bytes),
        Axis::log("bandwidth (MB/s)", Unit::Number),
        s,
    )
}

/// Start-up time and first query vs cache size (the thesis' Fig. 6.1).
pub fn ops_cache(rows: &[Row<'_>]) -> Result<Option<Plot>, ReportError> {
    let mut s = Vec::new();
    for (field, label) in [
        ("start_ms_median", "peer start (median)"),
        (
            "first_query_ms_median",
            "first local query by name (median)",
        ),
    ] {
        let mut pts: Vec<(f64, f64)> = rows
            .iter()
            .filter_map(|r| Some((r.f("cache_entries")?, r.f(field)?)))
            .filter(|(x, y)| *x > 0.0 && *y > 0.0)
            .collect();
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        if !pts.is_empty() {
            s.push(Series {
                label: label.into(),
                color: PALETTE[s.len() % PALETTE.len()],
                dashed: false,
                bold: false,
                marker: Marker::Circle,
                kind: Kind::Line,
                points: pts,
            });
        }
    }
    finish(
        "plot-ops-cache",
        "Start-up time vs advertisement cache size (thesis Fig. 6.1)",
        "The peer's home holds a cache of N pipe advertisements; time of Peer::start on it and of the first local discovery query by name after the start (the thesis: 10 to 1,000 advertisements; here 10 to 10,000, to 1,000,000 under --full).",
        Axis::log("advertisements in the cache", Unit::Number),
        Axis::log("ms", Unit::Number),
        s,
    )
}

/// The overload rows' key: the single overload point apart from the
/// curve's points.
fn relay_overload_key(r: &Row<'_>) -> Option<Key> {
    // Documents before the curve had no `run` on their overload row.
    let run = r.s("run").unwrap_or("overload");
    if run != "overload" && run != "overload-curve" {
        return None;
    }
    let k = relay_key(r)?;
    let label = if run == "overload-curve" {
        format!("{} (curve)", k.label)
    } else {
        format!("{} (paced sink)", k.label)
    };
    let order = k.rank.1 as f64 / 1000.0 + if run == "overload-curve" { 0.5 } else { 0.0 };
    Some(plain_key(label, order))
}

/// Relay overload: delivered vs offered messages/s (the thesis' offered
/// vs received figure).
pub fn relay_overload(rows: &[Row<'_>]) -> Result<Option<Plot>, ReportError> {
    let mut s = build(
        rows,
        Kind::Line,
        relay_overload_key,
        |r| r.f("offered_msgs_per_s"),
        |r| r.f("delivered_msgs_per_s"),
        true,
    );
    let max = s
        .iter()
        .flat_map(|x| x.points.iter().map(|p| p.0))
        .fold(0.0, f64::max);
    if max > 0.0 {
        s.push(Series {
            label: "delivered = offered".into(),
            color: RGBColor(120, 120, 120),
            dashed: true,
            bold: false,
            marker: Marker::None,
            kind: Kind::Line,
            points: vec![(0.0, 0.0), (max, max)],
        });
    }
    finish(
        "plot-relay-overload",
        "Relays under overload: offered vs received (thesis: collapse after ~2,000-4,000 messages)",
        "Senders offer 1 KB messages through one TCP relay at set rates (the curve: 0.5x to 20x the rate the relay forwarded with the senders back to back, measured first; the sink reads as fast as it can); the single paced-sink point offers 10x what its sink reads. Received rate at the sink (a relay with flow control levels off instead of collapsing).",
        Axis::linear("offered (messages/s)"),
        Axis::linear("received (messages/s)"),
        s,
    )
}

/// Relay overload curve: loss vs offered messages/s.
pub fn relay_overload_loss(rows: &[Row<'_>]) -> Result<Option<Plot>, ReportError> {
    let s = build(
        rows,
        Kind::Line,
        relay_overload_key,
        |r| r.f("offered_msgs_per_s"),
        |r| r.f("loss_pct"),
        true,
    );
    finish(
        "plot-relay-overload-loss",
        "Relays under overload: loss vs offered rate",
        "Offered messages not delivered (held back at the sender by the relay's push-back, refused by the relay, or lost), %.",
        Axis::linear("offered (messages/s)"),
        Axis::linear("loss (%)"),
        s,
    )
}

/// Relay overload curve: the relay's largest RSS vs offered messages/s.
pub fn relay_overload_rss(rows: &[Row<'_>]) -> Result<Option<Plot>, ReportError> {
    let s = build(
        rows,
        Kind::Line,
        relay_overload_key,
        |r| r.f("offered_msgs_per_s"),
        |r| r.f("relay_rss_mb_max"),
        true,
    );
    finish(
        "plot-relay-overload-rss",
        "Relays under overload: relay memory vs offered rate",
        "The relay process's largest resident set size during each point, sampled from /proc every 250 ms (a relay that queues without bound grows with the offered rate).",
        Axis::linear("offered (messages/s)"),
        Axis::linear("relay RSS max (MB)"),
        s,
    )
}

/// A size as text (`1 B`, `16 KiB`, `1 MiB`).
pub fn size_text(v: f64) -> String {
    if v >= 1_048_576.0 && v % 1_048_576.0 == 0.0 {
        format!("{} MiB", v / 1_048_576.0)
    } else if v >= 1024.0 && v % 1024.0 == 0.0 {
        format!("{} KiB", v / 1024.0)
    } else {
        format!("{v} B")
    }
}

/// One series per soak process of `field` of its `series` against time
/// (minutes).
fn soak_series(rows: &[Row<'_>], field: &str) -> Vec<Series> {
    rows.iter()
        .filter_map(|r| {
            let s = r.0.get("series")?;
            let col = |k: &str| -> Vec<f64> {
                s.get(k)
                    .and_then(|v| v.as_array())
                    .map(|a| a.iter().map(|x| x.as_f64().unwrap_or(f64::NAN)).collect())
                    .unwrap_or_default()
            };
            let points: Vec<(f64, f64)> = col("t_s")
                .into_iter()
                .zip(col(field))
                .filter(|(t, y)| t.is_finite() && y.is_finite())
                .map(|(t, y)| (t / 60.0, y))
                .collect();
            (!points.is_empty()).then(|| (r.s("process").unwrap_or("?").to_string(), points))
        })
        .enumerate()
        .map(|(i, (label, points))| Series {
            label,
            color: PALETTE[i % PALETTE.len()],
            dashed: false,
            bold: false,
            marker: Marker::None,
            kind: Kind::Line,
            points,
        })
        .collect()
}

const SOAK_METHOD: &str = "Every peer is its own process under a mixed load (pipe ping-pong direct and through a relay, a paced socket stream, lookups through the rendezvous, an edge joining and leaving every few seconds); sampled from /proc every second.";

fn soak_plot(
    rows: &[Row<'_>],
    field: &str,
    id: &str,
    title: &str,
    y: &str,
) -> Result<Option<Plot>, ReportError> {
    finish(
        id,
        title,
        SOAK_METHOD,
        Axis::linear("time (minutes)"),
        Axis::linear(y),
        soak_series(rows, field),
    )
}

/// Soak: RSS of every process over time.
pub fn soak_rss(rows: &[Row<'_>]) -> Result<Option<Plot>, ReportError> {
    soak_plot(
        rows,
        "rss_mb",
        "plot-soak-rss",
        "Soak: resident memory",
        "RSS (MB)",
    )
}

/// Soak: open descriptors of every process over time.
pub fn soak_fds(rows: &[Row<'_>]) -> Result<Option<Plot>, ReportError> {
    soak_plot(
        rows,
        "fds",
        "plot-soak-fds",
        "Soak: open file descriptors",
        "descriptors",
    )
}

/// Soak: threads of every process over time.
pub fn soak_threads(rows: &[Row<'_>]) -> Result<Option<Plot>, ReportError> {
    soak_plot(
        rows,
        "threads",
        "plot-soak-threads",
        "Soak: threads",
        "threads",
    )
}

/// Soak: tokio tasks alive in every process over time.
pub fn soak_tasks(rows: &[Row<'_>]) -> Result<Option<Plot>, ReportError> {
    soak_plot(
        rows,
        "tasks",
        "plot-soak-tasks",
        "Soak: tokio tasks alive",
        "tasks",
    )
}

/// Chaos: every recovery time per kill.
pub fn chaos_recovery(rows: &[Row<'_>]) -> Result<Option<Plot>, ReportError> {
    let mut groups: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    for r in rows {
        let (Some(kind), Some(ev)) = (r.s("kind"), r.f("event")) else {
            continue;
        };
        let Some(v) = r.0.get("recovery_ms").and_then(|v| v.as_array()) else {
            continue;
        };
        let g = groups.entry(kind.to_string()).or_default();
        g.extend(v.iter().filter_map(|x| x.as_f64()).map(|ms| (ev, ms)));
    }
    let s = groups
        .into_iter()
        .enumerate()
        .map(|(i, (label, points))| Series {
            label: format!("{label} killed"),
            color: PALETTE[i % PALETTE.len()],
            dashed: false,
            bold: false,
            marker: Marker::Circle,
            kind: Kind::Markers,
            points,
        })
        .collect();
    finish(
        "plot-chaos-recovery",
        "Chaos: recovery after each kill",
        "Each point is one affected process: for a rendezvous kill an orphaned edge's new lease, for a relay kill (restarted at once) a client's new relay connection, for an edge kill the restarted edge's lease; time from the SIGKILL.",
        Axis::linear("kill (in order)"),
        Axis::linear("recovery (ms)"),
        s,
    )
}

/// The de Souza size classes: (id suffix, title, smallest, largest).
const MP_CLASSES: [(&str, &str, f64, f64); 3] = [
    ("small", "small messages (2-1,000 B)", 0.0, 1_000.0),
    ("medium", "medium messages (20-100 KB)", 1_001.0, 100_000.0),
    (
        "large",
        "large messages (200 KB-1 MB)",
        100_001.0,
        f64::INFINITY,
    ),
];

fn mp_rtt(rows: &[Row<'_>], class: usize) -> Result<Option<Plot>, ReportError> {
    let (id, title, lo, hi) = MP_CLASSES[class];
    let r: Vec<Row<'_>> = rows
        .iter()
        .copied()
        .filter(|r| r.f("size").is_some_and(|s| s >= lo && s <= hi))
        .collect();
    let s = build(
        &r,
        Kind::Line,
        |r| Some(layer_key(r, "")),
        |r| r.f("size"),
        |r| r.f("rtt_us_median"),
        true,
    );
    finish(
        &format!("plot-mp-rtt-{id}"),
        &format!("Message passing ping-pong: {title}"),
        "de Souza et al.'s ping-pong (their Figures 1-6: time vs size per routine, small, medium and large messages): rank 0 sends the message, rank 1 sends it back; median round trip after a warm-up. Each routine is started the same way (ranks bound to cores 0 and 1); Open MPI on its TCP and shared-memory transports. Juxta's pipe and socket, UDP and JXSE's pipe and socket are measured by the common ping-pong harness, whose reply is a 1-byte ack (their rows say `reply: ack`), not an echo.",
        Axis::linear("message size (bytes)"),
        Axis::linear("RTT median (us)"),
        s,
    )
}

/// Ping-pong RTT vs size, small messages (de Souza Figures 1-6).
pub fn mp_rtt_small(rows: &[Row<'_>]) -> Result<Option<Plot>, ReportError> {
    mp_rtt(rows, 0)
}

/// Ping-pong RTT vs size, medium messages.
pub fn mp_rtt_medium(rows: &[Row<'_>]) -> Result<Option<Plot>, ReportError> {
    mp_rtt(rows, 1)
}

/// Ping-pong RTT vs size, large messages.
pub fn mp_rtt_large(rows: &[Row<'_>]) -> Result<Option<Plot>, ReportError> {
    mp_rtt(rows, 2)
}
