//! The many-to-one scenario: 1, 2, 4, 8 sender peers (each its own peer
//! with its own connection, all in this process) ping-pong concurrently
//! into one input pipe held by the responder, which acks each sender on its
//! own reverse pipe. Reports the total pings completed per second across
//! senders and the median RTT. The tcp baseline is the same number of TCP
//! connections to one server.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::layers::{spawn_responder, Client, Host, Layer, Ping, Responder, ResponderSpec};
use crate::util::{median, pin_current, Pin};
use crate::BenchError;

/// Layers the senders scenario measures.
pub const LAYERS: [Layer; 5] = [
    Layer::Tcp,
    Layer::Endpoint,
    Layer::UnicastPipe,
    Layer::SecurePipe,
    Layer::BidiPipe,
];

/// Options of a senders run.
#[derive(Debug, Clone, Serialize)]
pub struct SendersOptions {
    /// Layers (tcp first).
    pub layers: Vec<Layer>,
    /// Sender counts.
    pub senders: Vec<usize>,
    /// Payload sizes.
    pub sizes: Vec<usize>,
    /// Timed ping-pong per (layer, senders, size), in ms.
    pub duration_ms: u64,
    /// Warm-up pairs per sender before each timed period.
    pub warmup: usize,
    /// CPU placement.
    pub pin: Pin,
    /// RSA key size of the bench peers.
    pub key_bits: usize,
    /// Where the two sides run (default: loopback, as before).
    pub net: crate::net::Net,
}

impl Default for SendersOptions {
    fn default() -> Self {
        SendersOptions {
            layers: vec![Layer::Tcp, Layer::UnicastPipe],
            senders: vec![1, 2, 4, 8],
            sizes: vec![1],
            duration_ms: 1000,
            warmup: 200,
            pin: Pin::Same,
            key_bits: 1024,
            net: crate::net::Net::default(),
        }
    }
}

/// One result row.
#[derive(Debug, Clone, Serialize)]
pub struct SendersRow {
    /// Always `senders`.
    pub scenario: &'static str,
    /// Layer name.
    pub layer: &'static str,
    /// Concurrent sender peers.
    pub senders: usize,
    /// Payload bytes.
    pub size: usize,
    /// Pings completed per second, all senders together.
    pub msgs_per_s: f64,
    /// Median RTT over all senders' pings (µs).
    pub rtt_us_median: f64,
}

/// What the senders of one period measured.
#[derive(Debug, Default)]
pub struct Period {
    /// RTTs of every completed ping (µs).
    pub rtts: Vec<f64>,
    /// Earliest start and latest end over the senders.
    pub span: Duration,
}

impl Period {
    /// The row of this period.
    pub fn row(mut self, layer: Layer, senders: usize, size: usize) -> SendersRow {
        let secs = self.span.as_secs_f64();
        let n = self.rtts.len();
        SendersRow {
            scenario: "senders",
            layer: layer.name(),
            senders,
            size,
            msgs_per_s: if secs > 0.0 { n as f64 / secs } else { 0.0 },
            rtt_us_median: median(&mut self.rtts),
        }
    }
}

/// Runs `clients` concurrently: each warms up, all start together, and
/// each ping-pongs until `duration` has passed.
async fn period(
    clients: Vec<Client>,
    ping: &Ping,
    warmup: usize,
    duration: Duration,
) -> Result<(Vec<Client>, Period), BenchError> {
    let n = clients.len();
    let barrier = Arc::new(tokio::sync::Barrier::new(n));
    let mut tasks = Vec::with_capacity(n);
    for mut c in clients {
        let ping = ping.clone();
        let barrier = barrier.clone();
        tasks.push(tokio::spawn(async move {
            let mut go = async {
                for _ in 0..warmup {
                    c.pair(&ping).await?;
                }
                Ok::<(), BenchError>(())
            }
            .await;
            // Everyone reaches the barrier, even after an error.
            barrier.wait().await;
            let start = Instant::now();
            let deadline = start + duration;
            let mut rtts = Vec::new();
            while go.is_ok() && Instant::now() < deadline {
                let t = Instant::now();
                match c.pair(&ping).await {
                    Ok(_) => rtts.push(t.elapsed().as_secs_f64() * 1e6),
                    Err(e) => go = Err(e),
                }
            }
            (c, go, rtts, start, Instant::now())
        }));
    }
    let mut out = Vec::with_capacity(n);
    let mut all = Vec::new();
    let mut first: Option<Instant> = None;
    let mut last: Option<Instant> = None;
    let mut err = None;
    for t in tasks {
        let (c, go, rtts, start, end) = t.await.map_err(|e| BenchError::Responder {
            layer: "senders".into(),
            reason: format!("sender task failed: {e}"),
        })?;
        if let Err(e) = go {
            err.get_or_insert(e);
        }
        out.push(c);
        all.extend(rtts);
        first = Some(first.map_or(start, |f| f.min(start)));
        last = Some(last.map_or(end, |l| l.max(end)));
    }
    if let Some(e) = err {
        return Err(e);
    }
    let span = match (first, last) {
        (Some(f), Some(l)) => l - f,
        _ => Duration::ZERO,
    };
    Ok((out, Period { rtts: all, span }))
}

/// Runs the scenario: per layer one responder and max(senders) client
/// peers; for each sender count and size, every layer in turn.
pub async fn run(
    host: &Host,
    opts: &SendersOptions,
    progress: impl FnMut(&str),
) -> Result<Vec<SendersRow>, BenchError> {
    crate::net::scoped(&opts.net, run_here(host, opts, progress)).await
}

async fn run_here(
    host: &Host,
    opts: &SendersOptions,
    mut progress: impl FnMut(&str),
) -> Result<Vec<SendersRow>, BenchError> {
    pin_current(opts.pin.client_core());
    let layers = crate::layers::checked_unique(&opts.layers, "senders", &LAYERS)?;
    let most = opts.senders.iter().copied().max().unwrap_or(1).max(1);
    let mut responders: Vec<Responder> = Vec::new();
    let mut pools: Vec<Vec<Client>> = Vec::new();
    for &l in &layers {
        progress(&format!(
            "starting the {} responder and {most} sender peers",
            l.name()
        ));
        let spec = ResponderSpec::new(l, opts.key_bits, 1).on(&opts.net);
        let r = spawn_responder(host, &spec, opts.pin.responder_core()).await?;
        let mut pool = Vec::with_capacity(most);
        for _ in 0..most {
            pool.push(Client::connect(l, &r.ready, opts.key_bits, 1).await?);
        }
        pools.push(pool);
        responders.push(r);
    }
    let duration = Duration::from_millis(opts.duration_ms);
    let mut rows = Vec::new();
    for &n in &opts.senders {
        for &size in &opts.sizes {
            let ping = Ping::single(size);
            for (i, &l) in layers.iter().enumerate() {
                progress(&format!("{n} senders, size {size}: {}", l.name()));
                let mut pool = std::mem::take(&mut pools[i]);
                let rest = pool.split_off(n.min(pool.len()));
                let (mut back, p) = period(pool, &ping, opts.warmup, duration).await?;
                back.extend(rest);
                pools[i] = back;
                rows.push(p.row(l, n, size));
            }
        }
    }
    drop(pools);
    for r in responders {
        r.stop().await;
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_total_over_senders() {
        let p = Period {
            rtts: vec![30.0, 10.0, 20.0, 40.0],
            span: Duration::from_millis(2),
        };
        let r = p.row(Layer::UnicastPipe, 2, 1);
        assert_eq!(r.msgs_per_s, 2000.0);
        assert_eq!(r.rtt_us_median, 30.0);
        let j = serde_json::to_value(&r).unwrap();
        let mut keys: Vec<&str> = j.as_object().unwrap().keys().map(|k| k.as_str()).collect();
        keys.sort();
        assert_eq!(
            keys,
            [
                "layer",
                "msgs_per_s",
                "rtt_us_median",
                "scenario",
                "senders",
                "size"
            ]
        );
        let empty = Period::default().row(Layer::Tcp, 1, 1);
        assert_eq!((empty.msgs_per_s, empty.rtt_us_median), (0.0, 0.0));
    }
}
