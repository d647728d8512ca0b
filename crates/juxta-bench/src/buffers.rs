//! The socket buffer sweep (JuxTest): the JXTA socket with its stream
//! window bounded at 16 KB, 64 KB, 512 KB and left automatic, against
//! plain TCP in the same run, on the network profile asked for (`san`,
//! `wan`). JuxTest found JXTA sockets needed their buffer tuned by hand to
//! reach the link on a WAN; this shows what the bound costs and that the
//! default needs no tuning.
//!
//! Per window and size two figures: the ping-pong (message, 1-byte ack;
//! the median RTT and size / RTT, JuxTest's bidirectional bandwidth test,
//! interleaved with tcp as in [`crate::pingpong`]) and a one-way stream
//! (the throughput scenario's `smooth` pattern, MB/s at the receiver).
//! The window is the socket's stream-mode receive window (credit granted
//! ahead of the reader), set on both ends; `auto` is the default
//! ([`juxta_proto::socket::stream::DEFAULT_WINDOW`]). The tcp lane keeps
//! the kernel's own buffer sizing.

use std::time::Duration;

use serde::Serialize;

use crate::layers::{spawn_responder, Client, Host, Layer, Ping, Responder, ResponderSpec};
use crate::pingpong::{measure, Driver, Lane};
use crate::util::{pin_current, Pin};
use crate::BenchError;

/// Options of a buffer sweep.
#[derive(Debug, Clone, Serialize)]
pub struct BuffersOptions {
    /// Stream windows in bytes; `None` is the default (automatic).
    pub windows: Vec<Option<u64>>,
    /// Payload sizes in bytes.
    pub sizes: Vec<usize>,
    /// CPU placement.
    pub pin: Pin,
    /// Warm-up pairs per lane and size (capped at 256 MiB of payload).
    pub warmup: usize,
    /// Timed runs.
    pub runs: usize,
    /// Pairs per timed run.
    pub pairs: usize,
    /// One-way stream per lane and size, ms (0: no stream rows).
    pub stream_ms: u64,
    /// RSA key size of the bench peers.
    pub key_bits: usize,
    /// Where the two sides run.
    pub net: crate::net::Net,
}

impl Default for BuffersOptions {
    fn default() -> Self {
        BuffersOptions {
            windows: vec![Some(16 << 10), Some(64 << 10), Some(512 << 10), None],
            sizes: vec![1024, 65536, 1 << 20, 4 << 20],
            pin: Pin::Same,
            warmup: 100,
            runs: 5,
            pairs: 20,
            stream_ms: 1000,
            key_bits: 1024,
            net: crate::net::Net::default(),
        }
    }
}

/// Parses `16K,64K,512K,auto` (sizes with K/M suffixes, `auto` for the
/// default); each bounded window within the socket's accepted range.
pub fn parse_windows(s: &str) -> Result<Vec<Option<u64>>, BenchError> {
    use juxta_proto::socket::stream::{MAX_WINDOW, MIN_WINDOW};
    let v = crate::util::parse_list(s, |w| {
        if w.eq_ignore_ascii_case("auto") {
            return Ok(None);
        }
        let n = crate::util::parse_size(w)? as u64;
        if !(MIN_WINDOW..=MAX_WINDOW).contains(&n) {
            return Err(BenchError::BadOption(format!(
                "--windows {w}: a socket window is {MIN_WINDOW}..={MAX_WINDOW} bytes, or auto"
            )));
        }
        Ok(Some(n))
    })?;
    if v.is_empty() {
        return Err(BenchError::BadOption(format!("empty window list {s:?}")));
    }
    Ok(v)
}

/// One result row.
#[derive(Debug, Clone, Serialize)]
pub struct BuffersRow {
    /// Always `buffers`.
    pub scenario: &'static str,
    /// `tcp` or `juxta`.
    #[serde(rename = "impl")]
    pub implementation: &'static str,
    /// `tcp` or `socket`.
    pub layer: &'static str,
    /// The socket's stream window in bytes (`null`: automatic; tcp rows:
    /// the kernel's sizing).
    pub window: Option<u64>,
    /// `16 KiB`, `auto`, or `kernel` (tcp).
    pub window_label: String,
    /// Payload bytes.
    pub size: usize,
    /// Median ping-pong RTT (µs).
    pub rtt_us_median: f64,
    /// size / median RTT, 10^6 bytes/s.
    pub bandwidth_mb_s: f64,
    /// Bandwidth over tcp's in the same run and size.
    pub bandwidth_ratio_vs_tcp: f64,
    /// One-way stream, MB/s at the receiver (absent with `stream_ms` 0).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stream_mb_s: Option<f64>,
    /// Stream over tcp's stream in the same run and size.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stream_ratio_vs_tcp: Option<f64>,
    /// Timed ping-pong samples.
    pub samples: usize,
}

/// How a window is written in rows and progress.
pub fn window_label(w: Option<u64>) -> String {
    match w {
        None => "auto".into(),
        Some(n) if n >= 1 << 20 && n % (1 << 20) == 0 => format!("{} MiB", n >> 20),
        Some(n) if n % 1024 == 0 => format!("{} KiB", n >> 10),
        Some(n) => format!("{n} B"),
    }
}

/// Runs the sweep; rows per size: tcp, then the socket at each window.
pub async fn run(
    host: &Host,
    opts: &BuffersOptions,
    progress: impl FnMut(&str),
) -> Result<Vec<BuffersRow>, BenchError> {
    crate::net::scoped(&opts.net, run_here(host, opts, progress)).await
}

async fn run_here(
    host: &Host,
    opts: &BuffersOptions,
    mut progress: impl FnMut(&str),
) -> Result<Vec<BuffersRow>, BenchError> {
    pin_current(opts.pin.client_core());
    if opts.windows.is_empty() || opts.sizes.is_empty() {
        return Err(BenchError::BadOption(
            "no window or no size to measure".into(),
        ));
    }
    if opts.sizes.contains(&0) {
        return Err(BenchError::BadOption(
            "buffer sweep messages need at least 1 byte".into(),
        ));
    }
    let mut responders: Vec<Responder> = Vec::new();
    let mut lanes: Vec<Lane> = Vec::new();
    let mut windows: Vec<Option<u64>> = Vec::new();
    for (layer, w) in
        std::iter::once((Layer::Tcp, None)).chain(opts.windows.iter().map(|&w| (Layer::Socket, w)))
    {
        progress(&format!(
            "starting the {} responder{}",
            layer.name(),
            if layer == Layer::Socket {
                format!(" (window {})", window_label(w))
            } else {
                String::new()
            }
        ));
        let spec = ResponderSpec::new(layer, opts.key_bits, 1)
            .socket_window(w)
            .on(&opts.net);
        let r = spawn_responder(host, &spec, opts.pin.responder_core()).await?;
        let mut c = Client::connect(layer, &r.ready, opts.key_bits, 1).await?;
        c.set_socket_window(w);
        lanes.push(Lane {
            layer,
            receivers: None,
            client: Driver::Local(Box::new(c)),
        });
        windows.push(w);
        responders.push(r);
    }
    let mut rows = Vec::new();
    for &size in &opts.sizes {
        let ping = Ping::single(size);
        let samples = measure(
            &mut lanes,
            &ping,
            opts.warmup,
            opts.runs,
            opts.pairs,
            &format!("size {size}"),
            &mut progress,
        )
        .await?;
        let mut streams: Vec<Option<f64>> = vec![None; lanes.len()];
        if opts.stream_ms > 0 {
            for (i, lane) in lanes.iter_mut().enumerate() {
                let Driver::Local(c) = &mut lane.client else {
                    continue;
                };
                progress(&format!(
                    "size {size}: one-way stream, {} {}",
                    lane.layer.name(),
                    window_label(windows[i])
                ));
                let warm = (16u64 << 20) / size as u64;
                crate::throughput::smooth(c, size, Duration::MAX, Some(warm.max(1)), None).await?;
                let r = crate::throughput::smooth(
                    c,
                    size,
                    Duration::from_millis(opts.stream_ms),
                    None,
                    None,
                )
                .await?;
                let row = r.row(lane.layer, size, crate::throughput::Pattern::Smooth);
                streams[i] = Some(row.bandwidth_mb_s);
            }
        }
        let tcp_bw = samples[0].median();
        let tcp_bw = if tcp_bw > 0.0 {
            size as f64 / tcp_bw
        } else {
            0.0
        };
        for (i, s) in samples.iter().enumerate() {
            let med = s.median();
            let bw = if med > 0.0 { size as f64 / med } else { 0.0 };
            let tcp = i == 0;
            rows.push(BuffersRow {
                scenario: "buffers",
                implementation: if tcp { "tcp" } else { "juxta" },
                layer: lanes[i].layer.name(),
                window: windows[i],
                window_label: if tcp {
                    "kernel".into()
                } else {
                    window_label(windows[i])
                },
                size,
                rtt_us_median: med,
                bandwidth_mb_s: bw,
                bandwidth_ratio_vs_tcp: if tcp_bw > 0.0 { bw / tcp_bw } else { 0.0 },
                stream_mb_s: streams[i],
                stream_ratio_vs_tcp: match (streams[i], streams[0]) {
                    (Some(x), Some(t)) if t > 0.0 => Some(x / t),
                    _ => None,
                },
                samples: s.all.len(),
            });
        }
    }
    drop(lanes);
    for r in responders {
        r.stop().await;
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_parse_and_are_bounded() {
        assert_eq!(
            parse_windows("16K,64K, 512K,auto").unwrap(),
            vec![Some(16384), Some(65536), Some(524_288), None]
        );
        assert!(parse_windows("1K").is_err(), "below the socket's minimum");
        assert!(parse_windows("1024M").is_err(), "above the maximum");
        assert!(parse_windows("").is_err());
        assert!(parse_windows("big").is_err());
        assert_eq!(window_label(Some(16384)), "16 KiB");
        assert_eq!(window_label(Some(2 << 20)), "2 MiB");
        assert_eq!(window_label(None), "auto");
    }
}
