//! The report's tables: ours beside the published figures, and row tables
//! for the scenarios whose results are best read as numbers.

use super::html::Table;
use super::plots::size_text;
use super::published::{self, Metric};
use super::rows::{impl_rank, layer_rank, Row};

/// A number with about three significant digits.
pub fn num(v: f64) -> String {
    if !v.is_finite() {
        return "n/a".into();
    }
    let a = v.abs();
    if a >= 100.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.2}")
    } else if a >= 0.01 || a == 0.0 {
        format!("{v:.3}")
    } else {
        format!("{v:.2e}")
    }
}

/// A duration in microseconds as `21.6 us` or `2.00 ms`.
pub fn us_text(us: f64) -> String {
    if us >= 1000.0 {
        format!("{} ms", num(us / 1000.0))
    } else {
        format!("{} us", num(us))
    }
}

fn one_to_one<'a>(rows: &[Row<'a>]) -> Vec<Row<'a>> {
    rows.iter()
        .copied()
        .filter(|r| r.f("receivers").is_none_or(|n| n <= 1.0))
        .collect()
}

/// The tcp row matching `r` (same size, and same pin/pattern when given).
fn tcp_peer<'a>(rows: &[Row<'a>], r: &Row<'_>) -> Option<Row<'a>> {
    rows.iter().copied().find(|t| {
        t.imp() == "tcp"
            && t.f("size") == r.f("size")
            && t.s("pin") == r.s("pin")
            && t.s("pattern") == r.s("pattern")
            && t.f("offered_msgs_per_s") == r.f("offered_msgs_per_s")
    })
}

/// `field / tcp's field` for the same size: the row's own ratio field when present.
fn ratio(rows: &[Row<'_>], r: &Row<'_>, ratio_field: &str, field: &str) -> Option<f64> {
    r.f(ratio_field).or_else(|| {
        let t = tcp_peer(rows, r)?;
        let d = t.f(field).filter(|d| *d > 0.0)?;
        Some(r.f(field)? / d)
    })
}

/// Implementations measured for a layer, in order (tcp, juxta, jxse, ...).
fn impls_of<'a>(rows: &[Row<'a>], layer: &str) -> Vec<&'a str> {
    let mut v: Vec<&str> = rows
        .iter()
        .filter(|r| r.layer() == layer)
        .map(|r| r.imp())
        .collect();
    v.sort_by_key(|i| (impl_rank(i), i.to_string()));
    v.dedup();
    v
}

fn layers_of<'a>(rows: &[Row<'a>]) -> Vec<&'a str> {
    let mut v: Vec<&str> = rows
        .iter()
        .map(|r| r.layer())
        .filter(|l| !l.is_empty())
        .collect();
    v.sort_by_key(|l| (layer_rank(l), l.to_string()));
    v.dedup();
    v
}

/// Our figure for (layer, metric), one line per implementation.
fn ours_line(rows: &[Row<'_>], layer: &str, metric: Metric) -> String {
    let mut lines = Vec::new();
    for imp in impls_of(rows, layer) {
        let of: Vec<Row<'_>> = rows
            .iter()
            .copied()
            .filter(|r| r.layer() == layer && r.imp() == imp)
            .collect();
        let pick = match metric {
            Metric::LatencyUs => of
                .iter()
                .filter(|r| r.f("rtt_us_median").is_some())
                .min_by(|a, b| size_key(a).total_cmp(&size_key(b))),
            Metric::BandwidthMbS => of
                .iter()
                .filter(|r| r.f("bandwidth_mb_s").is_some())
                .max_by(|a, b| size_key(a).total_cmp(&size_key(b))),
        };
        let Some(r) = pick else { continue };
        let size = r.f("size").map(size_text).unwrap_or_else(|| "?".into());
        let line = match metric {
            Metric::LatencyUs => {
                let v = r.f("rtt_us_median").unwrap_or(f64::NAN);
                match ratio(rows, r, "rtt_ratio_vs_tcp", "rtt_us_median") {
                    Some(q) => format!("{imp}: {} = {} x tcp ({size})", us_text(v), num(q)),
                    None => format!("{imp}: {} ({size}, no tcp bound)", us_text(v)),
                }
            }
            Metric::BandwidthMbS => {
                let v = r.f("bandwidth_mb_s").unwrap_or(f64::NAN);
                match ratio(rows, r, "bandwidth_ratio_vs_tcp", "bandwidth_mb_s") {
                    Some(q) => format!("{imp}: {} MB/s = {} x tcp ({size})", num(v), num(q)),
                    None => format!("{imp}: {} MB/s ({size}, no tcp bound)", num(v)),
                }
            }
        };
        lines.push(line);
    }
    if lines.is_empty() {
        "not measured".into()
    } else {
        lines.join("\n")
    }
}

fn size_key(r: &Row<'_>) -> f64 {
    r.f("size").unwrap_or(0.0)
}

/// Published vs ours per layer: latency and bandwidth as ratios to each side's socket bound.
pub fn pingpong_published(rows: &[Row<'_>]) -> Option<Table> {
    let rows = one_to_one(rows);
    if rows.is_empty() {
        return None;
    }
    let mut layers: Vec<&str> = layers_of(&rows);
    for f in published::LAYER_FIGURES {
        if !layers.contains(&f.layer) {
            layers.push(f.layer);
        }
    }
    layers.retain(|l| *l != "tcp");
    layers.sort_by_key(|l| (layer_rank(l), l.to_string()));
    let mut out = Vec::new();
    for layer in layers {
        for (metric, name) in [
            (Metric::LatencyUs, "latency (smallest message RTT)"),
            (Metric::BandwidthMbS, "bandwidth (largest message)"),
        ] {
            let pubs: Vec<String> = published::LAYER_FIGURES
                .iter()
                .filter(|f| f.layer == layer && f.metric == metric)
                .map(|f| {
                    let (lo, hi) = f.ratio();
                    let (v, r) = match (metric, f.value_hi, hi) {
                        (Metric::LatencyUs, Some(vh), Some(rh)) => (
                            format!("{}-{}", us_text(f.value), us_text(vh)),
                            format!("{}-{}", num(lo), num(rh)),
                        ),
                        (Metric::LatencyUs, _, _) => (us_text(f.value), num(lo)),
                        (Metric::BandwidthMbS, _, _) => (format!("{} MB/s", num(f.value)), num(lo)),
                    };
                    let note = if f.note.is_empty() {
                        String::new()
                    } else {
                        format!(", {}", f.note)
                    };
                    format!(
                        "{} ({}{note}): {v} = {r} x socket",
                        f.implementation, f.network.name
                    )
                })
                .collect();
            let ours = ours_line(&rows, layer, metric);
            if pubs.is_empty() && ours == "not measured" {
                continue;
            }
            out.push(vec![
                layer.to_string(),
                name.to_string(),
                if pubs.is_empty() {
                    "no published figure".into()
                } else {
                    pubs.join("\n")
                },
                ours,
            ]);
        }
    }
    Some(Table {
        id: "table-pingpong-published".into(),
        caption: "Published JuxTest figures (performance-model.md section 2) as a ratio to that study's socket bound (Fast Ethernet: 70 us, 11.2 MB/s; GigE: 45 us, 115 MB/s; Myrinet: 60 us, 155 MB/s), beside ours as a ratio to plain TCP measured in the same run. Lower RTT ratios and higher bandwidth ratios are better; 1 = the socket bound.".into(),
        head: vec![
            "layer".into(),
            "figure".into(),
            "published".into(),
            "ours".into(),
        ],
        rows: out,
    })
    .filter(|t| !t.rows.is_empty())
}

/// Bytes on the wire for the smallest payload, ours beside the studies' 1-byte figures.
pub fn pingpong_wire(rows: &[Row<'_>]) -> Option<Table> {
    let rows = one_to_one(rows);
    let smallest = rows
        .iter()
        .filter(|r| r.f("wire_bytes").is_some())
        .filter_map(|r| r.f("size"))
        .min_by(|a, b| a.total_cmp(b))?;
    let mut out = Vec::new();
    for layer in layers_of(&rows) {
        let ours: Vec<String> = rows
            .iter()
            .filter(|r| r.layer() == layer && r.f("size") == Some(smallest))
            .filter_map(|r| Some(format!("{}: {} B", r.imp(), num(r.f("wire_bytes")?))))
            .collect();
        if ours.is_empty() {
            continue;
        }
        let pubd = published::WIRE_BYTES_1B
            .iter()
            .find(|(l, ..)| *l == layer)
            .map(|(_, lo, hi, c)| {
                let j = if lo == hi {
                    format!("J2SE: {} B", num(*lo))
                } else {
                    format!("J2SE: {}-{} B", num(*lo), num(*hi))
                };
                match c {
                    Some(c) => format!("{j}\nJXTA-C: {} B", num(*c)),
                    None => j,
                }
            })
            .unwrap_or_else(|| "no published figure".into());
        out.push(vec![layer.to_string(), pubd, ours.join("\n")]);
    }
    (!out.is_empty()).then(|| Table {
        id: "table-pingpong-wire".into(),
        caption: format!("Bytes on the wire for one message: published for a 1-byte payload (section 2; the pipe's EndpointRouterMsg alone is 565 bytes), ours for a {} payload.", size_text(smallest)),
        head: vec!["layer".into(), "published (1 B payload)".into(), "ours".into()],
        rows: out,
    })
}

/// The like-for-like pairs: (JXSE impl, JXSE layer, Juxta layer in the
/// same framing).
const LIKE_FOR_LIKE: [(&str, &str, &str); 6] = [
    ("jxse", "endpoint", "endpoint-compat"),
    ("jxse", "unicast-pipe", "pipe-compat"),
    ("jxse", "socket", "socket-compat"),
    ("jxse-nocbjx", "endpoint", "endpoint-compat-nocbjx"),
    ("jxse-nocbjx", "unicast-pipe", "pipe-compat-nocbjx"),
    ("jxse-nocbjx", "socket", "socket-compat-nocbjx"),
];

/// JXSE beside Juxta in the same framing (JXTA framing, CBJX on as JXSE
/// ships, and both with CBJX off), per layer and size: RTT and bandwidth
/// of each, and how many times Juxta is faster. Juxta's compact framing
/// is what two Juxta peers get, never the comparison with JXSE.
pub fn like_for_like(rows: &[Row<'_>]) -> Option<Table> {
    let rows = one_to_one(rows);
    let mut out = Vec::new();
    for (jimp, jlayer, xlayer) in LIKE_FOR_LIKE {
        let mut sizes: Vec<f64> = rows
            .iter()
            .filter(|r| r.imp() == jimp && r.layer() == jlayer)
            .filter_map(|r| r.f("size"))
            .collect();
        sizes.sort_by(f64::total_cmp);
        sizes.dedup();
        for size in sizes {
            let pick = |imp: &str, layer: &str| {
                rows.iter()
                    .copied()
                    .find(|r| r.imp() == imp && r.layer() == layer && r.f("size") == Some(size))
            };
            let Some(j) = pick(jimp, jlayer) else {
                continue;
            };
            let Some(x) = pick("juxta", xlayer) else {
                continue;
            };
            let (Some(jr), Some(xr)) = (j.f("rtt_us_median"), x.f("rtt_us_median")) else {
                continue;
            };
            let bw = |r: &Row<'_>| r.f("bandwidth_mb_s").unwrap_or(f64::NAN);
            out.push(vec![
                format!("{jimp} {jlayer} / juxta {xlayer}"),
                size_text(size),
                format!("{} / {}", us_text(jr), us_text(xr)),
                format!("{} / {} MB/s", num(bw(&j)), num(bw(&x))),
                if xr > 0.0 { num(jr / xr) } else { "n/a".into() },
                format!(
                    "{} / {} B",
                    num(j.f("wire_bytes").unwrap_or(f64::NAN)),
                    num(x.f("wire_bytes").unwrap_or(f64::NAN))
                ),
            ]);
        }
    }
    (!out.is_empty()).then(|| Table {
        id: "table-like-for-like".into(),
        caption: "Like for like: JXSE 2.7 beside Juxta in the same framing (JXTA framing with CBJX as JXSE ships it; and both with CBJX off), measured by the same harness in the same run (same warm-up, samples, pinning, interleaved with tcp; bytes counted by the kernel at the client's sockets). Juxta's compact framing is what two Juxta peers get and is not part of this comparison.".into(),
        head: vec![
            "pair".into(),
            "size".into(),
            "RTT median (JXSE / Juxta)".into(),
            "bandwidth (JXSE / Juxta)".into(),
            "Juxta faster (x)".into(),
            "wire bytes per message (JXSE / Juxta)".into(),
        ],
        rows: out,
    })
}

/// The other stacks measured in the pingpong ([`crate::stacks`]).
const STACKS: [&str; 3] = ["zmq", "libp2p", "mpi"];

/// Juxta's compact layers (what two Juxta peers use) beside every other
/// stack of the same run, per stack configuration and size: the stack's
/// RTT and bandwidth, and Juxta's unicast pipe and socket as a ratio to
/// it (RTT: lower is better; bandwidth: higher is better).
pub fn stacks(rows: &[Row<'_>]) -> Option<Table> {
    let rows = one_to_one(rows);
    let mut configs: Vec<(String, String)> = rows
        .iter()
        .filter(|r| STACKS.contains(&r.imp()))
        .map(|r| (r.imp().to_string(), r.layer().to_string()))
        .collect();
    configs.sort();
    configs.dedup();
    let mut out = Vec::new();
    for (imp, layer) in configs {
        let mut sizes: Vec<f64> = rows
            .iter()
            .filter(|r| r.imp() == imp && r.layer() == layer)
            .filter_map(|r| r.f("size"))
            .collect();
        sizes.sort_by(f64::total_cmp);
        sizes.dedup();
        for size in sizes {
            let pick = |imp: &str, layer: &str| {
                rows.iter()
                    .copied()
                    .find(|r| r.imp() == imp && r.layer() == layer && r.f("size") == Some(size))
            };
            let Some(st) = pick(&imp, &layer) else {
                continue;
            };
            let (Some(srtt), Some(sbw)) = (st.f("rtt_us_median"), st.f("bandwidth_mb_s")) else {
                continue;
            };
            let ratio = |jl: &str| match pick("juxta", jl) {
                Some(j) => match (j.f("rtt_us_median"), j.f("bandwidth_mb_s")) {
                    (Some(r), Some(b)) if srtt > 0.0 && sbw > 0.0 => {
                        format!("{} / {}", num(r / srtt), num(b / sbw))
                    }
                    _ => "n/a".into(),
                },
                None => "not measured".into(),
            };
            out.push(vec![
                format!("{imp} {layer}"),
                size_text(size),
                us_text(srtt),
                format!("{} MB/s", num(sbw)),
                ratio("unicast-pipe"),
                ratio("socket"),
            ]);
        }
    }
    (!out.is_empty()).then(|| Table {
        id: "table-stacks".into(),
        caption: "Juxta beside the stacks people pick today, measured by the same harness in the same run (same warm-up, samples and pinning, interleaved with tcp; Open MPI on its default binding; libp2p quic between two network namespaces joined by a veth, where the kernel counts its UDP bytes, tcp and the rest on loopback): each stack's median RTT and bandwidth, and Juxta's unicast pipe and socket (compact framing, between Juxta peers) as RTT ratio / bandwidth ratio to that stack. RTT ratio below 1 and bandwidth ratio above 1 mean Juxta is faster.".into(),
        head: vec![
            "stack".into(),
            "size".into(),
            "RTT median".into(),
            "bandwidth".into(),
            "juxta unicast-pipe (RTT x / bw x)".into(),
            "juxta socket (RTT x / bw x)".into(),
        ],
        rows: out,
    })
}

/// The study's ping-pong points beside ours: each routine's RTT as a ratio
/// to the plain socket's at the same size (theirs a Java socket on GigE,
/// ours `tcp` of the same run), at the sizes the study states numbers for.
pub fn mp_pingpong(rows: &[Row<'_>]) -> Option<Table> {
    let mut out = Vec::new();
    for (size, what, ratio) in published::MP_PINGPONG_RATIOS {
        let at = |imp: &str, layer: &str| {
            rows.iter()
                .find(|r| r.imp() == imp && r.layer() == layer && r.f("size") == Some(size))
                .and_then(|r| r.f("rtt_us_median"))
        };
        let Some(tcp) = at("tcp", "tcp").filter(|t| *t > 0.0) else {
            continue;
        };
        let mut ours: Vec<String> = Vec::new();
        for (imp, layer, label) in [
            ("juxta", "mp", "juxta communicator"),
            ("mpi", "tcp", "Open MPI tcp"),
            ("mpi", "sm", "Open MPI sm"),
        ] {
            if let Some(v) = at(imp, layer) {
                ours.push(format!("{label}: {} = {} x tcp", us_text(v), num(v / tcp)));
            }
        }
        if ours.is_empty() {
            continue;
        }
        out.push(vec![
            size_text(size),
            format!("{what}: {} x", num(ratio)),
            format!("tcp {}\n{}", us_text(tcp), ours.join("\n")),
        ]);
    }
    (!out.is_empty()).then(|| Table {
        id: "table-mp-pingpong".into(),
        caption: "de Souza et al.'s ping-pong, where the study gives numbers (performance-model.md section 5): the P2P routine's round trip as a ratio to a plain socket's, theirs (JXSE 2.5 on GigE against a Java socket) beside ours (Juxta's communicator and Open MPI against tcp measured in the same run, loopback).".into(),
        head: vec!["size".into(), "published".into(), "ours".into()],
        rows: out,
    })
}

/// The matrix multiplication (de Souza Tables 1-3): our wall times and
/// speed-ups beside the study's, each as a ratio to its own sequential
/// optimised C (g++ -O3 there, `c-O3` here), since the hardware differs.
pub fn matmul(rows: &[Row<'_>]) -> Option<Table> {
    let seconds = |imp: &str| {
        rows.iter()
            .find(|r| r.imp() == imp)
            .and_then(|r| r.f("seconds"))
    };
    let ours_o3 = seconds("c-O3").filter(|s| *s > 0.0);
    let pub_o3 = published::MATMUL_SECONDS[1].2;
    let mut out = Vec::new();
    let mut seen = Vec::new();
    for (config, imp, pubs) in published::MATMUL_SECONDS {
        let ours = if imp.is_empty() {
            "not run (one machine)".to_string()
        } else {
            seen.push(imp);
            match (seconds(imp), ours_o3) {
                (Some(s), Some(o3)) => format!("{imp}: {} s = {} x c-O3", num(s), num(s / o3)),
                (Some(s), None) => format!("{imp}: {} s", num(s)),
                _ => format!("{imp}: not measured"),
            }
        };
        out.push(vec![
            config.to_string(),
            format!("{} s = {} x g++ -O3", num(pubs), num(pubs / pub_o3)),
            ours,
        ]);
    }
    for r in rows {
        let imp = r.imp();
        if seen.contains(&imp) {
            continue;
        }
        if let Some(s) = r.f("seconds") {
            seen.push(imp);
            out.push(vec![
                "no published figure".into(),
                String::new(),
                format!("{imp}: {} s", num(s)),
            ]);
        }
    }
    if rows.is_empty() {
        return None;
    }
    let n = rows.iter().find_map(|r| r.f("n")).unwrap_or(0.0);
    let speedups: Vec<String> = rows
        .iter()
        .filter(|r| r.f("ranks").is_some_and(|k| k > 1.0))
        .filter_map(|r| {
            Some(format!(
                "{} {} ranks: {} x",
                r.imp(),
                num(r.f("ranks")?),
                num(r.f("speedup")?)
            ))
        })
        .collect();
    Some(Table {
        id: "table-matmul".into(),
        caption: format!(
            "de Souza et al.'s matrix multiplication (their Tables 1-3; performance-model.md section 5 (a), Athlon64 5200+) beside ours (n = {}, this machine): wall seconds, each as a ratio to its own sequential optimised C. Speed-up over our sequential Rust: {}. The study's figure for two cores is 129.09 / 64.52 = {} x over g++ -O3.",
            num(n),
            if speedups.is_empty() { "not measured".into() } else { speedups.join(", ") },
            num(pub_o3 / 64.52)
        ),
        head: vec!["configuration (study)".into(), "published".into(), "ours".into()],
        rows: out,
    })
}

/// The 1 MB allreduce over 4 ranks: Juxta's communicator beside Open MPI.
pub fn mp_allreduce(rows: &[Row<'_>]) -> Option<Table> {
    let mpi = rows
        .iter()
        .find(|r| r.imp() == "mpi")
        .and_then(|r| r.f("us_median"));
    let out: Vec<Vec<String>> = rows
        .iter()
        .filter_map(|r| {
            let us = r.f("us_median")?;
            Some(vec![
                r.imp().to_string(),
                num(r.f("ranks")?),
                size_text(r.f("bytes")?),
                us_text(us),
                match mpi {
                    Some(m) if m > 0.0 => num(us / m),
                    _ => "n/a".into(),
                },
            ])
        })
        .collect();
    (!out.is_empty()).then(|| Table {
        id: "table-mp-allreduce".into(),
        caption: "Allreduce (sum of f64) across ranks, median time of one call at rank 0 (more ranks than cores: neither implementation is bound to cores). No published figure.".into(),
        head: vec![
            "impl".into(),
            "ranks".into(),
            "bytes per rank".into(),
            "median".into(),
            "x Open MPI".into(),
        ],
        rows: out,
    })
}

/// Propagate RTT per receivers beside the published propagate rate.
pub fn propagate_published(rows: &[Row<'_>]) -> Option<Table> {
    let mut out = Vec::new();
    let mut sorted: Vec<Row<'_>> = rows.to_vec();
    sorted.sort_by(|a, b| {
        (
            impl_rank(a.imp()),
            size_key(a),
            a.f("receivers").unwrap_or(0.0),
        )
            .partial_cmp(&(
                impl_rank(b.imp()),
                size_key(b),
                b.f("receivers").unwrap_or(0.0),
            ))
            .unwrap_or(std::cmp::Ordering::Equal)
    });
    for r in sorted {
        out.push(vec![
            r.imp().to_string(),
            r.f("size").map(size_text).unwrap_or_default(),
            r.f("receivers").map(num).unwrap_or_default(),
            r.f("rtt_us_median").map(us_text).unwrap_or_default(),
            r.f("rtt_ratio_vs_tcp").map(num).unwrap_or_default(),
        ]);
    }
    (!out.is_empty()).then(|| Table {
        id: "table-propagate".into(),
        caption: "Propagate pipe RTT per number of receivers. Published (thesis, JXTA 2.0): ~9-20 msg/s, stable from 1 to 8 receivers.".into(),
        head: vec![
            "impl".into(),
            "size".into(),
            "receivers".into(),
            "RTT median".into(),
            "x tcp (1 receiver)".into(),
        ],
        rows: out,
    })
}

/// Our message rates beside the published pipe rates.
pub fn throughput_published(rows: &[Row<'_>]) -> Option<Table> {
    let mut out = Vec::new();
    for layer in layers_of(rows) {
        for pattern in ["smooth", "bursty"] {
            let of: Vec<Row<'_>> = rows
                .iter()
                .copied()
                .filter(|r| {
                    r.layer() == layer
                        && r.s("pattern").unwrap_or("smooth") == pattern
                        && r.f("msgs_per_s").is_some()
                })
                .collect();
            let Some(small) = of
                .iter()
                .filter_map(|r| r.f("size"))
                .min_by(|a, b| a.total_cmp(b))
            else {
                continue;
            };
            let ours: Vec<String> = of
                .iter()
                .filter(|r| r.f("size") == Some(small))
                .map(|r| {
                    let v = r.f("msgs_per_s").unwrap_or(f64::NAN);
                    match ratio(rows, r, "msgs_ratio_vs_tcp", "msgs_per_s") {
                        Some(q) if r.imp() != "tcp" => {
                            format!("{}: {} msg/s = {} x tcp", r.imp(), num(v), num(q))
                        }
                        _ => format!("{}: {} msg/s", r.imp(), num(v)),
                    }
                })
                .collect();
            let pubd: Vec<String> = published::PIPE_RATES
                .iter()
                .filter(|(l, p, ..)| *l == layer && *p == pattern)
                .map(|(_, _, lo, hi, v)| {
                    if lo == hi {
                        format!("{} msg/s ({v})", num(*lo))
                    } else {
                        format!("{}-{} msg/s ({v})", num(*lo), num(*hi))
                    }
                })
                .collect();
            out.push(vec![
                layer.to_string(),
                pattern.to_string(),
                size_text(small),
                if pubd.is_empty() {
                    "no published figure".into()
                } else {
                    pubd.join("\n")
                },
                ours.join("\n"),
            ]);
        }
    }
    (!out.is_empty()).then(|| Table {
        id: "table-throughput-published".into(),
        caption: "Message rate at the smallest size. Published rates (thesis, 100 Mb/s LAN, 800 MHz PCs, section 3) had no socket bound; ours are also given as a ratio to plain TCP in the same run.".into(),
        head: vec![
            "layer".into(),
            "pattern".into(),
            "size".into(),
            "published".into(),
            "ours".into(),
        ],
        rows: out,
    })
}

/// The socket buffer sweep beside JuxTest's socket figures (16 KB and
/// 512 KB buffers, Fast Ethernet) as ratios to the socket bound.
pub fn buffers(rows: &[Row<'_>]) -> Option<Table> {
    let mut out = Vec::new();
    let socket: Vec<Row<'_>> = rows.iter().copied().filter(|r| r.imp() != "tcp").collect();
    for r in &socket {
        let label = r.s("window_label").unwrap_or("?");
        let published: Vec<String> = published::LAYER_FIGURES
            .iter()
            .filter(|f| f.layer == "socket" && f.metric == Metric::BandwidthMbS)
            .filter(|f| {
                let kb = r.f("window").map(|w| w / 1024.0);
                kb.is_some_and(|kb| f.note == format!("{kb} KB buffer"))
            })
            .map(|f| format!("{} {} x socket", f.implementation, num(f.ratio().0)))
            .collect();
        out.push(vec![
            label.to_string(),
            r.f("size").map(size_text).unwrap_or_default(),
            r.f("rtt_us_median").map(us_text).unwrap_or_default(),
            r.f("bandwidth_ratio_vs_tcp")
                .map(|v| format!("{} x tcp", num(v)))
                .unwrap_or_default(),
            r.f("stream_ratio_vs_tcp")
                .map(|v| format!("{} x tcp", num(v)))
                .unwrap_or_else(|| "not measured".into()),
            if published.is_empty() {
                "no published figure".into()
            } else {
                published.join("\n")
            },
        ]);
    }
    (!out.is_empty()).then(|| Table {
        id: "table-buffers".into(),
        caption: "Socket stream window vs plain TCP in the same run (ping-pong bandwidth = size / median RTT; stream = one-way MB/s at the receiver). Published: JuxTest, Fast Ethernet, JXTA socket bandwidth over the 11.2 MB/s socket bound with a 16 KB and a 512 KB buffer.".into(),
        head: vec![
            "window".into(),
            "size".into(),
            "RTT".into(),
            "ping-pong".into(),
            "stream".into(),
            "published (JuxTest)".into(),
        ],
        rows: out,
    })
}

/// Extra RTT of the most split composition over one element, per layer.
pub fn composition(rows: &[Row<'_>]) -> Option<Table> {
    let mut out = Vec::new();
    for layer in layers_of(rows) {
        for imp in impls_of(rows, layer) {
            let of: Vec<Row<'_>> = rows
                .iter()
                .copied()
                .filter(|r| r.layer() == layer && r.imp() == imp && r.f("rtt_us_median").is_some())
                .collect();
            let by = |pick_max: bool| {
                of.iter()
                    .filter(|r| r.f("elements").is_some())
                    .max_by(|a, b| {
                        let (x, y) = (
                            a.f("elements").unwrap_or(0.0),
                            b.f("elements").unwrap_or(0.0),
                        );
                        if pick_max {
                            x.total_cmp(&y)
                        } else {
                            y.total_cmp(&x)
                        }
                    })
                    .copied()
            };
            let (Some(one), Some(many)) = (by(false), by(true)) else {
                continue;
            };
            let (a, b) = (
                one.f("rtt_us_median").unwrap_or(f64::NAN),
                many.f("rtt_us_median").unwrap_or(f64::NAN),
            );
            out.push(vec![
                format!("{imp} {layer}"),
                format!(
                    "{} x {}",
                    num(one.f("elements").unwrap_or(0.0)),
                    one.f("element_size").map(size_text).unwrap_or_default()
                ),
                us_text(a),
                format!(
                    "{} x {}",
                    num(many.f("elements").unwrap_or(0.0)),
                    many.f("element_size").map(size_text).unwrap_or_default()
                ),
                us_text(b),
                format!("{:+.1}%", (b / a - 1.0) * 100.0),
            ]);
        }
    }
    (!out.is_empty()).then(|| Table {
        id: "table-composition".into(),
        caption: format!(
            "Cost of splitting a message into many elements. Published (thesis, section 3): 20 small elements cost {}-{}% more RTT than one large one in JXTA 1.0, little in 2.0.",
            published::COMPOSITION_EXTRA_PCT.0, published::COMPOSITION_EXTRA_PCT.1
        ),
        head: vec![
            "layer".into(),
            "fewest elements".into(),
            "RTT".into(),
            "most elements".into(),
            "RTT".into(),
            "extra".into(),
        ],
        rows: out,
    })
}

/// Typical operations beside the thesis' means.
pub fn ops(rows: &[Row<'_>]) -> Option<Table> {
    let mut sorted: Vec<Row<'_>> = rows
        .iter()
        .copied()
        .filter(|r| r.s("operation").is_some())
        .collect();
    let rank = |r: &Row<'_>| {
        let op = r.s("operation").unwrap_or("");
        published::OPS_MS
            .iter()
            .position(|(o, _)| *o == op)
            .unwrap_or(usize::MAX)
    };
    sorted.sort_by_key(|r| (r.s("config").unwrap_or("").to_string(), rank(r)));
    let mut out = Vec::new();
    for r in &sorted {
        let op = r.s("operation").unwrap_or("");
        let p = published::OPS_MS
            .iter()
            .find(|(o, _)| *o == op)
            .map(|(_, ms)| *ms);
        let m = r.f("ms_median");
        out.push(vec![
            op.to_string(),
            r.s("config").unwrap_or("").to_string(),
            m.map(num).unwrap_or_default(),
            r.f("ms_p99").map(num).unwrap_or_default(),
            p.map(num).unwrap_or_else(|| "n/a".into()),
            match (m, p) {
                (Some(m), Some(p)) if p > 0.0 => num(m / p),
                _ => String::new(),
            },
        ]);
    }
    (!out.is_empty()).then(|| Table {
        id: "table-ops".into(),
        caption: format!(
            "Typical operations, ms. Published: thesis means, JXTA 2.0, TCP rendezvous on a 100 Mb/s LAN (section 3); totals {}.",
            published::OPS_TOTAL_MS
                .iter()
                .map(|(k, v)| format!("{k} {} ms", num(*v)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        head: vec![
            "operation".into(),
            "config".into(),
            "ours median".into(),
            "ours p99".into(),
            "published mean".into(),
            "ours / published".into(),
        ],
        rows: out,
    })
}

/// A table of the given fields of every row, keeping only columns that occur.
fn rows_table(id: &str, caption: &str, rows: &[Row<'_>], cols: &[(&str, &str)]) -> Option<Table> {
    let present: Vec<&(&str, &str)> = cols
        .iter()
        .filter(|(f, _)| rows.iter().any(|r| r.0.contains_key(*f)))
        .collect();
    if rows.is_empty() || present.is_empty() {
        return None;
    }
    Some(Table {
        id: id.into(),
        caption: caption.into(),
        head: present.iter().map(|(_, h)| h.to_string()).collect(),
        rows: rows
            .iter()
            .map(|r| {
                present
                    .iter()
                    .map(|(f, _)| match r.f(f) {
                        Some(v) => num(v),
                        None => r.text(f).unwrap_or_default(),
                    })
                    .collect()
            })
            .collect(),
    })
}

/// Every rendezvous row.
pub fn rendezvous(rows: &[Row<'_>]) -> Option<Table> {
    rows_table(
        "table-rendezvous",
        "Rendezvous load runs: response times, loss, coefficient of variation (stddev/mean) and the rendezvous' CPU and memory. Query pdp: JXTA discovery queries through the rendezvous (loss counts positive queries: a miss is never answered); lookup: Juxta's SRDI lookup. Group net: the Net peer group's rendezvous; subgroup: a certificate subgroup's own rendezvous (every message sealed with the member key).",
        rows,
        &[
            ("group", "group"),
            ("query_kind", "query"),
            ("adv_type", "type"),
            ("threshold", "threshold"),
            ("query_space", "space"),
            ("rdv_cache", "rdv cache"),
            ("model", "model"),
            ("edges", "edges"),
            ("rendezvous", "rdv"),
            ("offered_qps", "offered q/s"),
            ("queries_per_s", "answered q/s"),
            ("response_ms_p50", "p50 ms"),
            ("response_ms_p99", "p99 ms"),
            ("response_ms_mean", "mean ms"),
            ("loss_pct", "loss %"),
            ("cv", "cv (sd/mean)"),
            ("rdv_cpu_pct", "rdv CPU %"),
            ("rdv_rss_mb", "rdv RSS MB"),
            ("error", "error"),
        ],
    )
}

/// The published rendezvous findings as one paragraph.
pub fn rendezvous_published_note() -> String {
    let parts: Vec<String> = published::RENDEZVOUS_NOTES
        .iter()
        .map(|(m, n)| format!("{m}: {n}"))
        .collect();
    format!(
        "Published (thesis, JXTA 2.0, section 3): {}.",
        parts.join("; ")
    )
}

/// The two-rendezvous recovery rows (one kill per repeat), beside the
/// thesis' means.
pub fn recovery(rows: &[Row<'_>]) -> Option<Table> {
    let rows: Vec<Row<'_>> = rows
        .iter()
        .copied()
        .filter(|r| r.s("topology").is_none())
        .collect();
    let caption = format!(
        "Recovery after a rendezvous is killed: two rendezvous, every edge on the killed one, one kill per repeat (not the thesis' procedure: see the next table). Published (thesis, 16 edges, 4 rendezvous): {}.",
        published_recovery()
    );
    rows_table(
        "table-recovery",
        &caption,
        &rows,
        &[
            ("row", "row"),
            ("edges", "edges"),
            ("rendezvous", "rendezvous"),
            ("recovery_ms", "recovery ms"),
            ("kills", "kills"),
            ("recovery_ms_p50", "p50 ms"),
            ("recovery_ms_p99", "p99 ms"),
            ("recovery_ms_max", "max ms"),
        ],
    )
}

/// Recovery as the thesis ran it (`--kill-every`: successive kills down
/// to one rendezvous, per seeding topology): per kill and summary rows.
pub fn recovery_thesis(rows: &[Row<'_>]) -> Option<Table> {
    let rows: Vec<Row<'_>> = rows
        .iter()
        .copied()
        .filter(|r| r.s("topology").is_some())
        .collect();
    let caption = format!(
        "Recovery as the thesis ran it: the rendezvous most edges lease is killed every interval, down to one; an orphan not leased again within the interval never recovered. Published (thesis, 16 edges, 4 rendezvous, 10-minute intervals): {}.",
        published_recovery()
    );
    rows_table(
        "table-recovery-thesis",
        &caption,
        &rows,
        &[
            ("topology", "topology"),
            ("row", "row"),
            ("kill", "kill"),
            ("kill_every_s", "interval s"),
            ("edges", "edges"),
            ("rendezvous", "rendezvous"),
            ("live_rendezvous", "live after"),
            ("orphaned", "orphaned"),
            ("never_recovered", "never recovered"),
            ("recovery_ms_p50", "p50 ms"),
            ("recovery_ms_p99", "p99 ms"),
            ("recovery_ms_max", "max ms"),
            ("recovery_ms_mean", "mean ms"),
        ],
    )
}

fn published_recovery() -> String {
    format!(
        "{}; {} s of it a fixed failure-detection wait",
        published::RECOVERY_S
            .iter()
            .map(|(k, s)| format!("{} s mean with {k}", num(*s)))
            .collect::<Vec<_>>()
            .join(", "),
        num(published::RECOVERY_DETECTION_S)
    )
}

/// Every relay row.
pub fn relay(rows: &[Row<'_>]) -> Option<Table> {
    rows_table(
        "table-relay",
        "Relay paths: RTT and bandwidth, and the overload runs (offered vs delivered rate, loss, relay memory).",
        rows,
        &[
            ("path", "path"),
            ("layer", "layer"),
            ("size", "size B"),
            ("rtt_us_median", "RTT us"),
            ("bandwidth_mb_s", "MB/s"),
            ("run", "run"),
            ("offered_factor", "offered / forwarding"),
            ("offered_msgs_per_s", "offered msg/s"),
            ("delivered_msgs_per_s", "delivered msg/s"),
            ("loss_pct", "loss %"),
            ("relay_rss_mb_max", "relay RSS MB max"),
        ],
    )
}

/// Soak: one line per process (growth after the warm-up).
pub fn soak(rows: &[Row<'_>]) -> Option<Table> {
    let procs: Vec<Row<'_>> = rows
        .iter()
        .copied()
        .filter(|r| r.s("process") != Some("total"))
        .collect();
    rows_table(
        "table-soak",
        "Soak, per process: values at the end of the warm-up and at the end, and the least-squares slope after the warm-up per 10 minutes (target: RSS <= 1 MB per 10 minutes, no growth of descriptors, threads or tasks).",
        &procs,
        &[
            ("process", "process"),
            ("duration_s", "s"),
            ("rss_mb_start", "RSS MB"),
            ("rss_mb_end", "RSS MB end"),
            ("rss_mb_per_10min", "RSS MB/10 min"),
            ("fds_start", "fds"),
            ("fds_end", "fds end"),
            ("fds_per_10min", "fds/10 min"),
            ("threads_end", "threads end"),
            ("threads_per_10min", "threads/10 min"),
            ("tasks_end", "tasks end"),
            ("tasks_per_10min", "tasks/10 min"),
            ("srdi_entries_end", "SRDI entries end"),
            ("srdi_entries_per_10min", "SRDI entries/10 min"),
            ("ops", "ops"),
            ("errors", "errors"),
        ],
    )
}

/// Soak: the run's totals.
pub fn soak_totals(rows: &[Row<'_>]) -> Option<Table> {
    let t: Vec<Row<'_>> = rows
        .iter()
        .copied()
        .filter(|r| r.s("process") == Some("total"))
        .collect();
    rows_table(
        "table-soak-totals",
        "Soak totals: edges that joined and left, operations and errors of all processes, the socket stream's accounting (bytes written on connections closed without error and not read are lost) and the pipe echoes' duplicates.",
        &t,
        &[
            ("churn_edges", "edges joined"),
            ("ops", "ops"),
            ("errors", "errors"),
            ("lookups_failed", "lookups failed"),
            ("ping_timeouts", "ping timeouts"),
            ("socket_conns_ok", "sockets ok"),
            ("socket_conns_err", "sockets err"),
            ("socket_bytes_ok", "bytes"),
            ("socket_bytes_lost", "bytes lost"),
            ("socket_bytes_out_of_order", "bytes out of order"),
            ("pipe_duplicates", "pipe duplicates"),
        ],
    )
}

/// Chaos: one line per kill.
pub fn chaos_events(rows: &[Row<'_>]) -> Option<Table> {
    let ev: Vec<Row<'_>> = rows
        .iter()
        .copied()
        .filter(|r| r.s("row") == Some("event"))
        .collect();
    rows_table(
        "table-chaos-events",
        "Chaos, per kill: processes that had to recover and how long they took from the SIGKILL (target: edges re-leased within 200 ms p99, none never).",
        &ev,
        &[
            ("event", "#"),
            ("kind", "killed"),
            ("target", "process"),
            ("live_rendezvous", "rdv alive"),
            ("affected", "affected"),
            ("recovered", "recovered"),
            ("never_recovered", "never"),
            ("recovery_ms_p50", "p50 ms"),
            ("recovery_ms_p99", "p99 ms"),
            ("recovery_ms_max", "max ms"),
        ],
    )
}

/// Chaos: the checks.
pub fn chaos_summary(rows: &[Row<'_>]) -> Option<Table> {
    let s: Vec<Row<'_>> = rows
        .iter()
        .copied()
        .filter(|r| r.s("row") == Some("summary"))
        .collect();
    rows_table(
        "table-chaos-summary",
        "Chaos checks: re-lease after rendezvous kills, socket bytes (target: none lost or out of order; connections that reported an error are counted apart), pipe pings and duplicates, lookups failed outside a recovery window.",
        &s,
        &[
            ("rendezvous_kills", "rdv kills"),
            ("release_ms_p50", "re-lease p50 ms"),
            ("release_ms_p99", "p99 ms"),
            ("release_ms_max", "max ms"),
            ("never_recovered", "never recovered"),
            ("relay_release_ms_max", "relay re-lease max ms"),
            ("socket_conns_ok", "sockets ok"),
            ("socket_conns_err", "sockets err"),
            ("socket_bytes_lost", "bytes lost"),
            ("socket_bytes_out_of_order", "out of order"),
            ("pings_acked", "pings acked"),
            ("ping_timeouts", "ping timeouts"),
            ("pipe_duplicates", "duplicates"),
            ("lookups_failed", "lookups failed"),
            ("lookups_failed_outside_recovery", "outside recovery"),
        ],
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Map, Value};

    fn row(imp: &str, layer: &str, size: u64, rtt: f64, wire: u64) -> Map<String, Value> {
        let v = json!({
            "scenario": "pingpong", "impl": imp, "layer": layer, "size": size,
            "rtt_us_median": rtt, "bandwidth_mb_s": size as f64 / rtt, "wire_bytes": wire,
        });
        v.as_object().unwrap().clone()
    }

    #[test]
    fn like_for_like_pairs_jxse_with_juxta_in_the_same_framing() {
        let maps = [
            row("jxse", "unicast-pipe", 1, 5000.0, 2456),
            row("juxta", "pipe-compat", 1, 250.0, 1288),
            // Compact framing is never the comparison.
            row("juxta", "unicast-pipe", 1, 20.0, 7),
            row("jxse-nocbjx", "unicast-pipe", 1, 2000.0, 929),
            row("juxta", "pipe-compat-nocbjx", 1, 50.0, 900),
            // No Juxta partner: no line.
            row("jxse", "socket", 1, 9000.0, 3000),
        ];
        let rows: Vec<Row<'_>> = maps.iter().map(Row).collect();
        let t = like_for_like(&rows).expect("a table");
        assert_eq!(t.rows.len(), 2);
        assert_eq!(t.rows[0][0], "jxse unicast-pipe / juxta pipe-compat");
        assert_eq!(t.rows[0][4], num(20.0));
        assert!(t.rows[0][5].contains("2456") || t.rows[0][5].contains("2,456"));
        assert_eq!(
            t.rows[1][0],
            "jxse-nocbjx unicast-pipe / juxta pipe-compat-nocbjx"
        );
        assert_eq!(t.rows[1][4], num(40.0));
        assert!(like_for_like(&rows[2..3]).is_none());
    }

    #[test]
    fn mp_tables_set_ours_beside_the_study() {
        let pp = [
            json!({"scenario": "mp-pingpong", "impl": "tcp", "layer": "tcp", "size": 200, "rtt_us_median": 20.0}),
            json!({"scenario": "mp-pingpong", "impl": "juxta", "layer": "mp", "size": 200, "rtt_us_median": 30.0}),
            json!({"scenario": "mp-pingpong", "impl": "juxta", "layer": "mp", "size": 2, "rtt_us_median": 25.0}),
        ];
        let maps: Vec<Map<String, Value>> =
            pp.iter().map(|v| v.as_object().unwrap().clone()).collect();
        let rows: Vec<Row<'_>> = maps.iter().map(Row).collect();
        let t = mp_pingpong(&rows).expect("a table");
        assert_eq!(t.rows.len(), 1, "only 200 B has both sides");
        assert!(t.rows[0][1].contains(&num(1677.0 / 439.0)));
        assert!(t.rows[0][2].contains(&format!("{} x tcp", num(1.5))));
        assert!(mp_pingpong(&rows[1..]).is_none(), "no tcp: no ratio");

        let mm = [
            json!({"scenario": "matmul", "impl": "c-O3", "ranks": 1, "n": 8, "seconds": 10.0, "speedup": 1.0}),
            json!({"scenario": "matmul", "impl": "juxta", "ranks": 2, "n": 8, "seconds": 5.0, "speedup": 2.0}),
            json!({"scenario": "matmul", "impl": "future", "ranks": 2, "n": 8, "seconds": 7.0, "speedup": 1.0}),
        ];
        let maps: Vec<Map<String, Value>> =
            mm.iter().map(|v| v.as_object().unwrap().clone()).collect();
        let rows: Vec<Row<'_>> = maps.iter().map(Row).collect();
        let t = matmul(&rows).expect("a table");
        assert_eq!(
            t.rows.len(),
            8,
            "seven published configurations and one of ours alone"
        );
        assert!(t.rows[1][2].contains(&format!("{} x c-O3", num(1.0))));
        assert!(t.rows[6][2].contains(&format!("{} x c-O3", num(0.5))));
        assert!(t.rows[3][2].contains("not run"));
        assert!(t.rows[7][2].starts_with("future"));
        assert!(t
            .caption
            .contains(&format!("juxta {} ranks: {} x", num(2.0), num(2.0))));
        assert!(matmul(&[]).is_none());
    }

    #[test]
    fn stacks_table_sets_juxta_beside_each_stack() {
        let maps = [
            row("libp2p", "tcp-noise-yamux", 1, 35.0, 60),
            row("juxta", "unicast-pipe", 1, 17.5, 7),
            row("juxta", "socket", 1, 35.0, 9),
            row("zmq", "tcp-req-rep", 1, 50.0, 12),
            // Not a stack: no line of its own.
            row("jxse", "unicast-pipe", 1, 5000.0, 2456),
        ];
        let rows: Vec<Row<'_>> = maps.iter().map(Row).collect();
        let t = stacks(&rows).expect("a table");
        assert_eq!(t.rows.len(), 2);
        assert_eq!(t.rows[0][0], "libp2p tcp-noise-yamux");
        assert_eq!(t.rows[0][4], format!("{} / {}", num(0.5), num(2.0)));
        assert_eq!(t.rows[0][5], format!("{} / {}", num(1.0), num(1.0)));
        assert_eq!(t.rows[1][0], "zmq tcp-req-rep");
        assert!(stacks(&rows[1..3]).is_none());
    }
}
