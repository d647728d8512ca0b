//! The many-to-one scenario: 1, 2, 4, 8 sender peers (each its own peer
//! with its own connection, all in this process) send concurrently into
//! one input pipe (or server socket) held by the responder.
//!
//! - `pingpong` mode: each sender ping-pongs; the responder acks each
//!   sender on its own reverse pipe. Reports the total pings completed per
//!   second across senders and the median RTT.
//! - `oneway` mode (the thesis' many-to-one throughput, Figs 6.14-6.17):
//!   each sender streams back to back as the throughput scenario's
//!   `smooth` pattern does; the responder counts each sender's messages by
//!   id and reports at the end. Reports messages and MB received per
//!   second over all senders (first start to last report) and the loss.
//!
//! The tcp baseline is the same number of TCP connections to one server.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::layers::{spawn_responder, Client, Host, Layer, Ping, Responder, ResponderSpec};
use crate::util::{loss_pct, median, pin_current, Pin};
use crate::BenchError;

/// Layers the senders scenario measures.
pub const LAYERS: [Layer; 6] = [
    Layer::Tcp,
    Layer::Endpoint,
    Layer::UnicastPipe,
    Layer::SecurePipe,
    Layer::BidiPipe,
    Layer::Socket,
];

/// How the senders send.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// Each sender waits for the ack of every message.
    Pingpong,
    /// Each sender streams back to back; the receiver counts.
    Oneway,
}

impl Mode {
    /// Parses `pingpong|oneway`.
    pub fn parse(s: &str) -> Result<Mode, BenchError> {
        match s {
            "pingpong" => Ok(Mode::Pingpong),
            "oneway" => Ok(Mode::Oneway),
            _ => Err(BenchError::BadOption(format!(
                "mode {s:?} (expected pingpong or oneway)"
            ))),
        }
    }
    /// The mode's name.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Pingpong => "pingpong",
            Mode::Oneway => "oneway",
        }
    }
}

/// Options of a senders run.
#[derive(Debug, Clone, Serialize)]
pub struct SendersOptions {
    /// Layers (tcp first).
    pub layers: Vec<Layer>,
    /// Sender counts.
    pub senders: Vec<usize>,
    /// Modes: ping-pong, one-way.
    pub modes: Vec<Mode>,
    /// Payload sizes.
    pub sizes: Vec<usize>,
    /// Timed period per (mode, layer, senders, size), in ms.
    pub duration_ms: u64,
    /// Warm-up pairs (one-way: messages) per sender before each timed
    /// period.
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
            modes: vec![Mode::Pingpong],
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
    /// `pingpong` or `oneway`.
    pub mode: Mode,
    /// Concurrent sender peers.
    pub senders: usize,
    /// Payload bytes.
    pub size: usize,
    /// Pings completed (one-way: messages received) per second, all
    /// senders together.
    pub msgs_per_s: f64,
    /// `msgs_per_s` x size, 10^6 bytes/s.
    pub bandwidth_mb_s: f64,
    /// Median RTT over all senders' pings (µs; ping-pong rows).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rtt_us_median: Option<f64>,
    /// Messages sent and not received, in percent (one-way rows).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub loss_pct: Option<f64>,
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
        let rate = if secs > 0.0 { n as f64 / secs } else { 0.0 };
        SendersRow {
            scenario: "senders",
            layer: layer.name(),
            mode: Mode::Pingpong,
            senders,
            size,
            msgs_per_s: rate,
            bandwidth_mb_s: rate * size as f64 / 1e6,
            rtt_us_median: Some(median(&mut self.rtts)),
            loss_pct: None,
        }
    }
}

/// What the senders of one one-way period sent and the receiver counted.
#[derive(Debug, Default)]
pub struct Stream {
    /// Messages sent, all senders.
    pub sent: u64,
    /// Distinct messages received, all senders.
    pub delivered: u64,
    /// First start to the last end-of-run report.
    pub span: Duration,
}

impl Stream {
    /// The row of this period.
    pub fn row(&self, layer: Layer, senders: usize, size: usize) -> SendersRow {
        let secs = self.span.as_secs_f64();
        let rate = if secs > 0.0 {
            self.delivered as f64 / secs
        } else {
            0.0
        };
        SendersRow {
            scenario: "senders",
            layer: layer.name(),
            mode: Mode::Oneway,
            senders,
            size,
            msgs_per_s: rate,
            bandwidth_mb_s: rate * size as f64 / 1e6,
            rtt_us_median: None,
            loss_pct: Some(loss_pct(self.sent, self.delivered)),
        }
    }
}

/// Runs `clients` concurrently one way: each warms up (`warmup`
/// messages, counted and discarded), all start together, each streams
/// for `duration` and asks the receiver for its count.
async fn stream_period(
    clients: Vec<Client>,
    size: usize,
    warmup: usize,
    duration: Duration,
) -> Result<(Vec<Client>, Stream), BenchError> {
    let n = clients.len();
    let barrier = Arc::new(tokio::sync::Barrier::new(n));
    let mut tasks = Vec::with_capacity(n);
    for mut c in clients {
        let barrier = barrier.clone();
        tasks.push(tokio::spawn(async move {
            let warm = crate::throughput::smooth(
                &mut c,
                size,
                Duration::MAX,
                Some(warmup.max(1) as u64),
                None,
            )
            .await;
            barrier.wait().await;
            let start = Instant::now();
            let r = match warm {
                Ok(_) => crate::throughput::smooth(&mut c, size, duration, None, None).await,
                Err(e) => Err(e),
            };
            (c, r, start, Instant::now())
        }));
    }
    let mut out = Vec::with_capacity(n);
    let mut total = Stream::default();
    let mut first: Option<Instant> = None;
    let mut last: Option<Instant> = None;
    let mut err = None;
    for t in tasks {
        let (c, r, start, end) = t.await.map_err(|e| BenchError::Responder {
            layer: "senders".into(),
            reason: format!("sender task failed: {e}"),
        })?;
        match r {
            Ok(r) => {
                total.sent = total.sent.saturating_add(r.sent);
                total.delivered = total.delivered.saturating_add(r.delivered);
            }
            Err(e) => {
                err.get_or_insert(e);
            }
        }
        out.push(c);
        first = Some(first.map_or(start, |f| f.min(start)));
        last = Some(last.map_or(end, |l| l.max(end)));
    }
    if let Some(e) = err {
        return Err(e);
    }
    if let (Some(f), Some(l)) = (first, last) {
        total.span = l - f;
    }
    Ok((out, total))
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
    if opts.modes.contains(&Mode::Oneway) && opts.sizes.contains(&0) {
        return Err(BenchError::BadOption(
            "one-way messages need at least 1 byte (the message id)".into(),
        ));
    }
    let mut rows = Vec::new();
    for &mode in &opts.modes {
        for &n in &opts.senders {
            for &size in &opts.sizes {
                let ping = Ping::single(size);
                for (i, &l) in layers.iter().enumerate() {
                    progress(&format!(
                        "{} {n} senders, size {size}: {}",
                        mode.name(),
                        l.name()
                    ));
                    let mut pool = std::mem::take(&mut pools[i]);
                    let rest = pool.split_off(n.min(pool.len()));
                    let mut back = match mode {
                        Mode::Pingpong => {
                            let (back, p) = period(pool, &ping, opts.warmup, duration).await?;
                            rows.push(p.row(l, n, size));
                            back
                        }
                        Mode::Oneway => {
                            let (back, s) =
                                stream_period(pool, size, opts.warmup, duration).await?;
                            rows.push(s.row(l, n, size));
                            back
                        }
                    };
                    back.extend(rest);
                    pools[i] = back;
                }
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
        assert_eq!(r.rtt_us_median, Some(30.0));
        let j = serde_json::to_value(&r).unwrap();
        let mut keys: Vec<&str> = j.as_object().unwrap().keys().map(|k| k.as_str()).collect();
        keys.sort();
        assert_eq!(
            keys,
            [
                "bandwidth_mb_s",
                "layer",
                "mode",
                "msgs_per_s",
                "rtt_us_median",
                "scenario",
                "senders",
                "size"
            ]
        );
        assert_eq!(j["mode"], "pingpong");
        let empty = Period::default().row(Layer::Tcp, 1, 1);
        assert_eq!((empty.msgs_per_s, empty.rtt_us_median), (0.0, Some(0.0)));
    }

    #[test]
    fn one_way_rows_total_and_count_loss() {
        let s = Stream {
            sent: 4000,
            delivered: 3960,
            span: Duration::from_millis(500),
        };
        let r = s.row(Layer::Socket, 4, 1024);
        assert_eq!(r.msgs_per_s, 7920.0);
        assert!((r.bandwidth_mb_s - 7920.0 * 1024.0 / 1e6).abs() < 1e-9);
        assert_eq!(r.loss_pct, Some(1.0));
        assert_eq!(r.rtt_us_median, None);
        let j = serde_json::to_value(&r).unwrap();
        assert_eq!(j["mode"], "oneway");
        assert!(j.get("rtt_us_median").is_none());
        assert_eq!(Mode::parse("oneway").unwrap(), Mode::Oneway);
        assert!(Mode::parse("both").is_err());
    }
}
