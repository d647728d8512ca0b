//! The composition scenario: one 20 KB message sent as 1x20 KB, 5x4 KB,
//! 10x2 KB or 20x1 KB elements, ping-pong RTT on every message layer
//! (endpoint, unicast, secure, bidirectional and propagate pipes — the
//! latter to one receiver — in compact framing, and the endpoint and pipe
//! in JXTA framing), with plain TCP carrying the same bytes (one frame) as
//! the baseline. Measured like the ping-pong: warm-up, timed runs
//! interleaved with tcp, median. Byte-stream layers (sockets) carry no
//! elements and are not measured here.

use serde::Serialize;

use crate::layers::{Host, Layer, Ping};
use crate::pingpong::{connect_lanes, lanes_of, measure};
use crate::util::{pin_current, Pin};
use crate::BenchError;

/// Layers the composition scenario measures.
pub const LAYERS: [Layer; 8] = [
    Layer::Tcp,
    Layer::Endpoint,
    Layer::EndpointCompat,
    Layer::UnicastPipe,
    Layer::PipeCompat,
    Layer::SecurePipe,
    Layer::BidiPipe,
    Layer::Propagate,
];

/// Options of a composition run.
#[derive(Debug, Clone, Serialize)]
pub struct CompositionOptions {
    /// Layers besides `tcp` (always measured).
    pub layers: Vec<Layer>,
    /// (elements, element size) of each composition.
    pub compositions: Vec<(usize, usize)>,
    /// CPU placement.
    pub pin: Pin,
    /// Warm-up pairs per layer and composition.
    pub warmup: usize,
    /// Timed runs.
    pub runs: usize,
    /// Pairs per timed run.
    pub pairs: usize,
    /// RSA key size of the bench peers.
    pub key_bits: usize,
    /// Where the two sides run (default: loopback, as before).
    pub net: crate::net::Net,
}

impl Default for CompositionOptions {
    fn default() -> Self {
        CompositionOptions {
            layers: vec![Layer::Endpoint, Layer::UnicastPipe],
            compositions: vec![(1, 20480), (5, 4096), (10, 2048), (20, 1024)],
            pin: Pin::Same,
            warmup: 1000,
            runs: 5,
            pairs: 100,
            key_bits: 1024,
            net: crate::net::Net::default(),
        }
    }
}

/// Parses `1x20K,5x4K,...` (elements `x` element size).
pub fn parse_compositions(s: &str) -> Result<Vec<(usize, usize)>, BenchError> {
    let v = crate::util::parse_list(s, |c| {
        let (n, size) = c
            .split_once(['x', 'X'])
            .ok_or_else(|| BenchError::BadOption(format!("composition {c:?} (expected NxSIZE)")))?;
        let n: usize =
            n.trim().parse().ok().filter(|&n| n > 0).ok_or_else(|| {
                BenchError::BadOption(format!("composition {c:?}: element count"))
            })?;
        let size = crate::util::parse_size(size)?;
        if n.saturating_mul(size) > crate::util::MAX_SIZE {
            return Err(BenchError::BadOption(format!(
                "composition {c:?} too large"
            )));
        }
        Ok((n, size))
    })?;
    if v.is_empty() {
        return Err(BenchError::BadOption(format!(
            "empty composition list {s:?}"
        )));
    }
    Ok(v)
}

/// One result row.
#[derive(Debug, Clone, Serialize)]
pub struct CompositionRow {
    /// Always `composition`.
    pub scenario: &'static str,
    /// Layer name (`tcp`: the same bytes in one frame).
    pub layer: &'static str,
    /// Elements in the message.
    pub elements: usize,
    /// Bytes per element.
    pub element_size: usize,
    /// Median RTT (µs).
    pub rtt_us_median: f64,
}

/// Runs the scenario; one row per (composition, layer).
pub async fn run(
    host: &Host,
    opts: &CompositionOptions,
    progress: impl FnMut(&str),
) -> Result<Vec<CompositionRow>, BenchError> {
    crate::net::scoped(&opts.net, run_here(host, opts, progress)).await
}

async fn run_here(
    host: &Host,
    opts: &CompositionOptions,
    mut progress: impl FnMut(&str),
) -> Result<Vec<CompositionRow>, BenchError> {
    pin_current(opts.pin.client_core());
    for l in &opts.layers {
        l.check("composition", &LAYERS)?;
    }
    // Propagate: to one receiver, as a composition of the one-to-one case.
    let lanes = lanes_of(&opts.layers, &[1]);
    let (mut clients, responders) = connect_lanes(
        host,
        &lanes,
        opts.key_bits,
        opts.pin,
        &opts.net,
        &mut progress,
    )
    .await?;
    let mut rows = Vec::new();
    for &(elements, each) in &opts.compositions {
        let ping = Ping::composed(elements, each);
        let samples = measure(
            &mut clients,
            &ping,
            opts.warmup,
            opts.runs,
            opts.pairs,
            &format!("{elements}x{each}"),
            &mut progress,
        )
        .await?;
        for (&(layer, _), s) in lanes.iter().zip(&samples) {
            rows.push(CompositionRow {
                scenario: "composition",
                layer: layer.name(),
                elements,
                element_size: each,
                rtt_us_median: s.median(),
            });
        }
    }
    drop(clients);
    for r in responders {
        r.stop().await;
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compositions_parse() {
        assert_eq!(
            parse_compositions("1x20K, 5x4096,10X2K,20x1k").unwrap(),
            vec![(1, 20480), (5, 4096), (10, 2048), (20, 1024)]
        );
        assert!(parse_compositions("20").is_err());
        assert!(parse_compositions("0x1K").is_err());
        assert!(parse_compositions("2xfoo").is_err());
        assert!(parse_compositions("").is_err());
    }

    #[test]
    fn rows_serialize_exactly() {
        let r = CompositionRow {
            scenario: "composition",
            layer: "unicast-pipe",
            elements: 5,
            element_size: 4096,
            rtt_us_median: 42.0,
        };
        let j = serde_json::to_value(&r).unwrap();
        let mut keys: Vec<&str> = j.as_object().unwrap().keys().map(|k| k.as_str()).collect();
        keys.sort();
        assert_eq!(
            keys,
            [
                "element_size",
                "elements",
                "layer",
                "rtt_us_median",
                "scenario"
            ]
        );
    }
}
