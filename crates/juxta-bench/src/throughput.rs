//! The throughput scenario: one-way messages per second and MB/s per layer
//! and size, sending `smooth` (as fast as the layer accepts, for a fixed
//! time or count), `bursty` (bursts of 50 messages, then 500 ms idle) or
//! `paced` (at set offered rates, as the thesis swept send rates: message
//! `i` leaves at `i / rate` after the start; tokio's timer wakes at most
//! once a millisecond, so above 1,000 messages/s the messages due within
//! a millisecond leave together).
//!
//! The propagate layer sends to `receivers` receivers (one responder
//! process); its rate is per receiver (deliveries over all receivers
//! divided by their number) and its loss over every (message, receiver)
//! pair.
//!
//! Every payload carries an 8-byte message id (its low bytes when the
//! payload is shorter); the receiver counts distinct ids in order and
//! reports at the end of the run, giving the loss. Rates are the
//! receiver's: a run is timed from the first send until the end-of-run
//! report is back (so everything sent was also received and counted).
//! Bursty runs are timed per burst, from its first send until a sync
//! message sent after it is answered; the idle time is excluded.
//!
//! Other stacks ([`crate::stacks`]: ZeroMQ PUSH/PULL beside its REQ/REP,
//! rust-libp2p's stream, Open MPI's `MPI_Send`) run the smooth pattern in
//! the same loop, timed by their own client the same way (first send until
//! the responder's count of what it received is back), with the same
//! warm-up count; they have no bursty rows.

use std::time::{Duration, Instant};

use serde::Serialize;

use crate::layers::{spawn_responder, Client, Ctl, Host, Layer, Responder, ResponderSpec};
use crate::stacks::{Stack, StackLane};
use crate::util::{loss_pct, pin_current, CountedPayload, Pin};
use crate::BenchError;

/// Layers the throughput scenario measures.
pub const LAYERS: [Layer; 9] = [
    Layer::Tcp,
    Layer::Endpoint,
    Layer::EndpointCompat,
    Layer::UnicastPipe,
    Layer::SecurePipe,
    Layer::BidiPipe,
    Layer::Socket,
    Layer::SecureSocket,
    Layer::Propagate,
];

/// How messages are sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Pattern {
    /// Back to back for the whole run.
    Smooth,
    /// Bursts of messages separated by idle time.
    Bursty,
    /// At each of the set offered rates ([`ThroughputOptions::rates`]).
    Paced,
}

impl Pattern {
    /// Parses `smooth|bursty`.
    pub fn parse(s: &str) -> Result<Pattern, BenchError> {
        match s {
            "smooth" => Ok(Pattern::Smooth),
            "bursty" => Ok(Pattern::Bursty),
            "paced" => Ok(Pattern::Paced),
            _ => Err(BenchError::BadOption(format!(
                "pattern {s:?} (expected smooth, bursty or paced)"
            ))),
        }
    }
    /// The pattern's name.
    pub fn name(self) -> &'static str {
        match self {
            Pattern::Smooth => "smooth",
            Pattern::Bursty => "bursty",
            Pattern::Paced => "paced",
        }
    }
}

/// Options of a throughput run.
#[derive(Debug, Clone, Serialize)]
pub struct ThroughputOptions {
    /// Layers (tcp first).
    pub layers: Vec<Layer>,
    /// Payload sizes in bytes.
    pub sizes: Vec<usize>,
    /// Sending patterns.
    pub patterns: Vec<Pattern>,
    /// Smooth: how long to send (ms), unless `count` is set.
    pub duration_ms: u64,
    /// Smooth: send exactly this many messages instead.
    pub count: Option<u64>,
    /// Bursty: number of bursts.
    pub bursts: usize,
    /// Bursty: messages per burst.
    pub burst_len: usize,
    /// Bursty: idle time after each burst but the last (ms).
    pub idle_ms: u64,
    /// Paced: offered rates, messages per second (each run lasts
    /// `duration_ms`, or `count` messages).
    pub rates: Vec<f64>,
    /// Propagate: receivers each message reaches.
    pub receivers: usize,
    /// Warm-up: messages sent (and counted, then discarded) per layer and
    /// size before the timed runs, capped at 32 MiB of payload.
    pub warmup: u64,
    /// CPU placement.
    pub pin: Pin,
    /// RSA key size of the bench peers (secure pipes use at least 2048).
    pub key_bits: usize,
    /// Where the two sides run (default: loopback, as before).
    pub net: crate::net::Net,
    /// Other stacks measured in the same run (smooth pattern only; local
    /// loopback only).
    #[serde(skip)]
    pub stacks: Vec<Stack>,
}

impl Default for ThroughputOptions {
    fn default() -> Self {
        ThroughputOptions {
            layers: LAYERS
                .into_iter()
                // As the CLI's default: secure-socket and propagate on
                // request only.
                .filter(|l| {
                    !matches!(
                        l,
                        Layer::EndpointCompat | Layer::SecureSocket | Layer::Propagate
                    )
                })
                .collect(),
            sizes: vec![1, 1024, 65536, 1_048_576],
            patterns: vec![Pattern::Smooth, Pattern::Bursty],
            duration_ms: 500,
            count: None,
            bursts: 3,
            burst_len: 50,
            idle_ms: 500,
            rates: Vec::new(),
            receivers: 1,
            warmup: 2000,
            pin: Pin::Same,
            key_bits: 1024,
            net: crate::net::Net::default(),
            stacks: Vec::new(),
        }
    }
}

/// One result row.
#[derive(Debug, Clone, Serialize)]
pub struct ThroughputRow {
    /// Always `throughput`.
    pub scenario: &'static str,
    /// `tcp` for the baseline, `juxta`, `jxse`, or another stack's name
    /// (`zmq`, `libp2p`, `mpi`).
    #[serde(rename = "impl")]
    pub implementation: &'static str,
    /// Layer name.
    pub layer: &'static str,
    /// Payload bytes per message.
    pub size: usize,
    /// Sending pattern.
    pub pattern: Pattern,
    /// Paced rows: the offered rate, messages per second.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub offered_msgs_per_s: Option<f64>,
    /// Propagate rows: the receivers each message reached.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub receivers: Option<usize>,
    /// Messages received per second (propagate: per receiver).
    pub msgs_per_s: f64,
    /// Payload received, 10^6 bytes/s.
    pub bandwidth_mb_s: f64,
    /// Messages sent and not received, in percent.
    pub loss_pct: f64,
}

/// What one run measured.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RunResult {
    /// Messages sent.
    pub sent: u64,
    /// Distinct messages the receivers counted (summed over receivers).
    pub delivered: u64,
    /// Time the rate is computed over.
    pub elapsed: Duration,
    /// Receivers each message was sent to (1 but for propagate).
    pub fanout: u64,
}

impl RunResult {
    /// The row of this run.
    pub fn row(&self, layer: Layer, size: usize, pattern: Pattern) -> ThroughputRow {
        let implementation = if layer == Layer::Tcp { "tcp" } else { "juxta" };
        self.row_for(implementation, layer.name(), size, pattern)
    }

    /// The row of this run for any implementation and layer name.
    pub fn row_for(
        &self,
        implementation: &'static str,
        layer: &'static str,
        size: usize,
        pattern: Pattern,
    ) -> ThroughputRow {
        let secs = self.elapsed.as_secs_f64();
        let fanout = self.fanout.max(1);
        let rate = if secs > 0.0 {
            self.delivered as f64 / fanout as f64 / secs
        } else {
            0.0
        };
        ThroughputRow {
            scenario: "throughput",
            implementation,
            layer,
            size,
            pattern,
            offered_msgs_per_s: None,
            receivers: (layer == Layer::Propagate.name()).then_some(fanout as usize),
            msgs_per_s: rate,
            bandwidth_mb_s: rate * size as f64 / 1e6,
            loss_pct: loss_pct(self.sent.saturating_mul(fanout), self.delivered),
        }
    }
}

/// The row of a stack's stream run.
fn stack_row(stack: Stack, size: usize, r: &crate::stacks::StreamRun) -> ThroughputRow {
    RunResult {
        sent: r.sent,
        delivered: r.received,
        elapsed: r.elapsed,
        fanout: 1,
    }
    .row_for(
        stack.name(),
        stack.stream_configuration(),
        size,
        Pattern::Smooth,
    )
}

async fn end_run(client: &mut Client, sent: u64) -> Result<u64, BenchError> {
    let r = client
        .control(Ctl::End, sent)
        .await?
        .ok_or_else(|| BenchError::Responder {
            layer: client.layer().name().into(),
            reason: "no end-of-run report".into(),
        })?;
    Ok(r.unique)
}

/// Sends `size`-byte messages back to back (or, with `rate`, message `i`
/// at `i / rate` seconds after the start) for `duration`, or `count`
/// messages if given.
pub(crate) async fn smooth(
    client: &mut Client,
    size: usize,
    duration: Duration,
    count: Option<u64>,
    rate: Option<f64>,
) -> Result<RunResult, BenchError> {
    client.control(Ctl::Begin, size as u64).await?;
    let mut payload = CountedPayload::new(size);
    let t0 = Instant::now();
    let deadline = t0.checked_add(duration);
    let mut sent = 0u64;
    loop {
        if let Some(r) = rate {
            let due = t0 + Duration::from_secs_f64(sent as f64 / r);
            if sent > 0 && count.is_none() && deadline.is_some_and(|d| due >= d) {
                // The next message's slot starts after the run.
                break;
            }
            if due > Instant::now() {
                tokio::time::sleep_until(due.into()).await;
            }
        }
        let b = payload.get(sent);
        client.send_counted(&b).await?;
        payload.put_back(b);
        sent += 1;
        match count {
            Some(c) if sent >= c => break,
            Some(_) => {}
            None if deadline.is_some_and(|d| Instant::now() >= d) => break,
            None => {}
        }
    }
    let delivered = end_run(client, sent).await?;
    let mut elapsed = t0.elapsed();
    if let Some(r) = rate {
        // Paced: the n messages' slots span n / rate; a run that kept up
        // ends within its last slot and is timed over the whole schedule.
        elapsed = elapsed.max(Duration::from_secs_f64(sent as f64 / r));
    }
    Ok(RunResult {
        sent,
        delivered,
        elapsed,
        fanout: client.fanout() as u64,
    })
}

async fn bursty(
    client: &mut Client,
    size: usize,
    bursts: usize,
    burst_len: usize,
    idle: Duration,
) -> Result<RunResult, BenchError> {
    client.control(Ctl::Begin, size as u64).await?;
    let mut payload = CountedPayload::new(size);
    let mut sent = 0u64;
    let mut active = Duration::ZERO;
    for b in 0..bursts {
        let t = Instant::now();
        for _ in 0..burst_len {
            let p = payload.get(sent);
            client.send_counted(&p).await?;
            payload.put_back(p);
            sent += 1;
        }
        client.control(Ctl::Sync, sent).await?;
        active += t.elapsed();
        if b + 1 < bursts {
            tokio::time::sleep(idle).await;
        }
    }
    let delivered = end_run(client, sent).await?;
    Ok(RunResult {
        sent,
        delivered,
        elapsed: active,
        fanout: client.fanout() as u64,
    })
}

/// Refuses paced runs without rates, rates without the paced pattern, and
/// rates that are not a positive finite number of messages per second.
pub fn check_rates(opts: &ThroughputOptions) -> Result<(), BenchError> {
    let paced = opts.patterns.contains(&Pattern::Paced);
    if paced && opts.rates.is_empty() {
        return Err(BenchError::BadOption(
            "--patterns paced needs --rate (offered messages per second)".into(),
        ));
    }
    if !paced && !opts.rates.is_empty() {
        return Err(BenchError::BadOption(
            "--rate applies to the paced pattern only: add paced to --patterns".into(),
        ));
    }
    if let Some(r) = opts.rates.iter().find(|r| !(r.is_finite() && **r > 0.0)) {
        return Err(BenchError::BadOption(format!(
            "--rate {r}: a rate is a positive number of messages per second"
        )));
    }
    Ok(())
}

/// Runs the scenario: one responder per layer on `host`; for each size and
/// pattern, every layer in turn. Returns one row per (layer, size, pattern).
pub async fn run(
    host: &Host,
    opts: &ThroughputOptions,
    progress: impl FnMut(&str),
) -> Result<Vec<ThroughputRow>, BenchError> {
    crate::net::scoped(&opts.net, run_here(host, opts, progress)).await
}

async fn run_here(
    host: &Host,
    opts: &ThroughputOptions,
    mut progress: impl FnMut(&str),
) -> Result<Vec<ThroughputRow>, BenchError> {
    pin_current(opts.pin.client_core());
    let layers = crate::layers::checked_unique(&opts.layers, "throughput", &LAYERS)?;
    if opts.sizes.contains(&0) {
        return Err(BenchError::BadOption(
            "throughput messages need at least 1 byte (the message id)".into(),
        ));
    }
    check_rates(opts)?;
    let mut responders: Vec<Responder> = Vec::new();
    let mut clients = Vec::new();
    for &l in &layers {
        progress(&format!("starting the {} responder", l.name()));
        let receivers = if l == Layer::Propagate {
            opts.receivers.max(1)
        } else {
            1
        };
        let spec = ResponderSpec::new(l, opts.key_bits, receivers).on(&opts.net);
        let r = spawn_responder(host, &spec, opts.pin.responder_core()).await?;
        clients.push(Client::connect(l, &r.ready, opts.key_bits, receivers).await?);
        responders.push(r);
    }
    let mut lanes: Vec<StackLane> = Vec::new();
    for &k in &opts.stacks {
        progress(&format!(
            "building and starting {} ({})",
            k.name(),
            k.stream_configuration()
        ));
        let lane = StackLane::start(k, opts.pin.client_core(), opts.pin.responder_core())
            .await
            .map_err(|e| BenchError::Responder {
                layer: k.name().into(),
                reason: e.to_string(),
            })?;
        lanes.push(lane);
    }
    let stack_err = |k: Stack| {
        move |e: crate::stacks::StackError| BenchError::Responder {
            layer: k.name().into(),
            reason: e.to_string(),
        }
    };
    let duration = Duration::from_millis(opts.duration_ms);
    let idle = Duration::from_millis(opts.idle_ms);
    let mut rows = Vec::new();
    for &size in &opts.sizes {
        let warm = opts.warmup.min((32u64 << 20) / size as u64).max(1);
        for c in clients.iter_mut() {
            progress(&format!(
                "size {size}: warm-up {} ({warm} messages)",
                c.layer().name()
            ));
            smooth(c, size, Duration::MAX, Some(warm), None).await?;
        }
        for lane in lanes.iter_mut() {
            let k = lane.stack();
            progress(&format!(
                "size {size}: warm-up {} ({warm} messages)",
                k.name()
            ));
            lane.stream(size, warm, Duration::ZERO)
                .await
                .map_err(stack_err(k))?;
        }
        for &pattern in &opts.patterns {
            for c in clients.iter_mut() {
                if pattern == Pattern::Paced {
                    for &rate in &opts.rates {
                        progress(&format!(
                            "size {size}: paced at {rate} msgs/s {}",
                            c.layer().name()
                        ));
                        let r = smooth(c, size, duration, opts.count, Some(rate)).await?;
                        let mut row = r.row(c.layer(), size, pattern);
                        row.offered_msgs_per_s = Some(rate);
                        rows.push(row);
                    }
                    continue;
                }
                progress(&format!(
                    "size {size}: {} {}",
                    pattern.name(),
                    c.layer().name()
                ));
                let r = match pattern {
                    Pattern::Smooth => smooth(c, size, duration, opts.count, None).await?,
                    Pattern::Bursty => {
                        bursty(c, size, opts.bursts.max(1), opts.burst_len.max(1), idle).await?
                    }
                    Pattern::Paced => unreachable!("handled above"),
                };
                rows.push(r.row(c.layer(), size, pattern));
            }
            if pattern != Pattern::Smooth {
                continue;
            }
            for lane in lanes.iter_mut() {
                let k = lane.stack();
                progress(&format!(
                    "size {size}: smooth {} ({})",
                    k.name(),
                    k.stream_configuration()
                ));
                let r = lane
                    .stream(
                        size,
                        opts.count.unwrap_or(0),
                        if opts.count.is_some() {
                            Duration::ZERO
                        } else {
                            duration
                        },
                    )
                    .await
                    .map_err(stack_err(k))?;
                rows.push(stack_row(k, size, &r));
            }
        }
    }
    for lane in lanes {
        lane.stop().await;
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
    fn patterns_parse() {
        assert_eq!(Pattern::parse("smooth").unwrap(), Pattern::Smooth);
        assert_eq!(Pattern::parse("bursty").unwrap(), Pattern::Bursty);
        assert!(Pattern::parse("steady").is_err());
    }

    #[test]
    fn rows_compute_rates_and_loss() {
        let r = RunResult {
            sent: 1000,
            delivered: 990,
            elapsed: Duration::from_millis(500),
            fanout: 1,
        };
        let row = r.row(Layer::UnicastPipe, 1024, Pattern::Bursty);
        assert_eq!(row.msgs_per_s, 1980.0);
        assert!((row.bandwidth_mb_s - 1980.0 * 1024.0 / 1e6).abs() < 1e-9);
        assert!((row.loss_pct - 1.0).abs() < 1e-9);
        let j = serde_json::to_value(&row).unwrap();
        assert_eq!(j["pattern"], "bursty");
        assert_eq!(j["layer"], "unicast-pipe");
        let mut keys: Vec<&str> = j.as_object().unwrap().keys().map(|k| k.as_str()).collect();
        keys.sort();
        assert_eq!(
            keys,
            [
                "bandwidth_mb_s",
                "impl",
                "layer",
                "loss_pct",
                "msgs_per_s",
                "pattern",
                "scenario",
                "size"
            ]
        );
        let zero = RunResult {
            sent: 0,
            delivered: 0,
            elapsed: Duration::ZERO,
            fanout: 1,
        }
        .row(Layer::Tcp, 1, Pattern::Smooth);
        assert_eq!((zero.msgs_per_s, zero.loss_pct), (0.0, 0.0));
    }

    #[test]
    fn paced_runs_need_valid_rates() {
        let mut o = ThroughputOptions {
            patterns: vec![Pattern::Paced],
            ..ThroughputOptions::default()
        };
        assert!(check_rates(&o).unwrap_err().to_string().contains("--rate"));
        o.rates = vec![100.0, 0.0];
        assert!(check_rates(&o).is_err());
        o.rates = vec![100.0, f64::INFINITY];
        assert!(check_rates(&o).is_err());
        o.rates = vec![100.0, 1e4];
        assert!(check_rates(&o).is_ok());
        o.patterns = vec![Pattern::Smooth];
        assert!(check_rates(&o).unwrap_err().to_string().contains("paced"));
        assert_eq!(Pattern::parse("paced").unwrap(), Pattern::Paced);
    }

    #[test]
    fn propagate_rows_are_per_receiver() {
        let r = RunResult {
            sent: 1000,
            delivered: 3960,
            elapsed: Duration::from_secs(1),
            fanout: 4,
        };
        let row = r.row(Layer::Propagate, 1024, Pattern::Smooth);
        assert_eq!(row.msgs_per_s, 990.0);
        assert_eq!(row.receivers, Some(4));
        assert!((row.loss_pct - 1.0).abs() < 1e-9);
        let j = serde_json::to_value(&row).unwrap();
        assert_eq!(j["receivers"], 4);
        assert!(j.get("offered_msgs_per_s").is_none());
    }

    #[test]
    fn default_layers_skip_compat() {
        let o = ThroughputOptions::default();
        assert_eq!(o.layers[0], Layer::Tcp);
        assert!(!o.layers.contains(&Layer::EndpointCompat));
        assert_eq!(o.layers.len(), 6);
    }
}
