//! The ping-pong scenario: RTT and bandwidth per layer against plain TCP.
//!
//! Method (JuxTest's bidirectional bandwidth test): send a message, wait for
//! a 1-byte ack; warm up, then 5 timed runs of 100 consecutive pairs; report
//! the median and p99 RTT and `bandwidth = size / median RTT`. The client is
//! this process, the responder another process (`juxta bench-responder`);
//! layers are measured interleaved (tcp, layer, tcp, layer, ...) so drift
//! hits the baseline and the layer alike.
//!
//! Propagate is measured once per receiver count (1 sender, n receivers in
//! one responder process): the RTT ends when every receiver's ack is back.

use std::collections::HashMap;
use std::time::Instant;

use serde::Serialize;

pub use crate::layers::{run_responder, Layer, BENCH_SERVICE};
use crate::layers::{spawn_responder, Client, Host, Ping, Responder, ResponderSpec};
use crate::socket_bytes::{ClientSockets, Counted};
use crate::util::percentile;
pub use crate::util::{pin_current, Pin};
use crate::BenchError;

/// Layers the ping-pong measures.
pub const LAYERS: [Layer; 22] = Layer::ALL;

/// Options of a ping-pong run.
#[derive(Debug, Clone, Serialize)]
pub struct PingPongOptions {
    /// Layers besides `tcp` (always measured).
    pub layers: Vec<Layer>,
    /// Payload sizes in bytes.
    pub sizes: Vec<usize>,
    /// Receiver counts of the propagate layer.
    pub receivers: Vec<usize>,
    /// CPU placement.
    pub pin: Pin,
    /// Warm-up pairs (capped at 256 MiB of payload per layer and size).
    pub warmup: usize,
    /// Timed runs.
    pub runs: usize,
    /// Pairs per timed run.
    pub pairs: usize,
    /// RSA key size of the bench peers (secure pipes use at least 2048).
    pub key_bits: usize,
    /// Where the two sides run (default: loopback, as before).
    pub net: crate::net::Net,
}

impl Default for PingPongOptions {
    fn default() -> Self {
        PingPongOptions {
            layers: vec![Layer::Endpoint, Layer::EndpointCompat],
            sizes: vec![1, 1024, 16384, 65536, 262_144, 1_048_576, 4_194_304],
            receivers: vec![1, 2, 4, 8],
            pin: Pin::Same,
            warmup: 1000,
            runs: 5,
            pairs: 100,
            key_bits: 1024,
            net: crate::net::Net::default(),
        }
    }
}

/// One result row.
#[derive(Debug, Clone, Serialize)]
pub struct PingPongRow {
    /// Always `pingpong`.
    pub scenario: &'static str,
    /// `tcp` for the baseline, `juxta` otherwise.
    #[serde(rename = "impl")]
    pub implementation: &'static str,
    /// Layer name.
    pub layer: &'static str,
    /// Payload bytes.
    pub size: usize,
    /// Receivers (propagate rows only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub receivers: Option<usize>,
    /// Median RTT (µs).
    pub rtt_us_median: f64,
    /// 99th percentile RTT (µs).
    pub rtt_us_p99: f64,
    /// size / median RTT, 10^6 bytes/s.
    pub bandwidth_mb_s: f64,
    /// Bytes the client's sockets sent per timed pair, counted by the
    /// kernel (TCP payload, no headers; [`crate::socket_bytes`]): the
    /// message one way plus the client's share of acks and control traffic
    /// (propagate: per receiver connection).
    pub wire_bytes: u64,
    /// Bytes both directions carried per timed round trip (message, ack,
    /// acks of the transport, control traffic), counted the same way.
    pub wire_bytes_rtt: u64,
    /// Median RTT over the tcp median of the same size (1.0 for tcp).
    pub rtt_ratio_vs_tcp: f64,
    /// Bandwidth over the tcp bandwidth of the same size.
    pub bandwidth_ratio_vs_tcp: f64,
    /// Spread of the per-run medians, (max-min)/median.
    pub run_spread: f64,
    /// CPU placement.
    pub pin: Pin,
    /// Timed samples.
    pub samples: usize,
    /// Warm-up pairs before the timed runs of this size.
    pub warmup: usize,
    /// Whether messages carried a CBJX signature (JXTA-framed rows only:
    /// JXSE and the `*-compat` layers).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cbjx: Option<bool>,
}

/// One measured lane: a layer (and receiver count) with its client.
pub(crate) struct Lane {
    pub layer: Layer,
    pub receivers: Option<usize>,
    pub client: Driver,
}

/// What drives a lane's pairs: a client in this process (tcp and every
/// Juxta layer), or the JXSE client JVM, which times its own pairs with
/// `System.nanoTime` (one command per timed run, so the control channel is
/// never inside a measurement). Both get the same warm-up, the same runs
/// and pairs, the same interleaving with `tcp` and the same byte counter.
pub(crate) enum Driver {
    /// A client in this process.
    Local(Box<Client>),
    /// A layer of the JXSE client JVM.
    Jxse(crate::jxse::JxseLane),
    /// Another stack's client process ([`crate::stacks`]).
    Stack(Box<crate::stacks::StackLane>),
    /// A local client's place while its pairs run on a task of their own
    /// ([`Driver::pairs_on_task`]); never seen outside.
    Moved,
}

impl Driver {
    fn is_datagram(&self) -> bool {
        matches!(self, Driver::Local(c) if c.layer() == Layer::Udp)
    }

    fn sockets(&self) -> ClientSockets {
        match self {
            Driver::Local(c) => c.sockets().clone(),
            Driver::Jxse(j) => j.sockets(),
            Driver::Stack(k) => k.sockets(),
            Driver::Moved => ClientSockets::default(),
        }
    }

    async fn warm(&mut self, ping: &Ping, n: usize) -> Result<(), BenchError> {
        match self {
            Driver::Local(_) => self.pairs_on_task(ping, n, false).await.map(drop),
            Driver::Jxse(j) => Ok(j.warm(ping.len(), n).await?),
            Driver::Stack(k) => Ok(k.warm(ping.len(), n).await?),
            Driver::Moved => Err(moved()),
        }
    }

    /// One timed run: the RTT of each pair (µs).
    async fn timed(&mut self, ping: &Ping, pairs: usize) -> Result<Vec<f64>, BenchError> {
        match self {
            Driver::Local(_) => self.pairs_on_task(ping, pairs, true).await,
            Driver::Jxse(j) => Ok(j.timed_run(ping.len(), pairs).await?),
            Driver::Stack(k) => Ok(k.timed_run(ping.len(), pairs).await?),
            Driver::Moved => Err(moved()),
        }
    }

    /// Runs `n` pairs of a local client on a task of its own
    /// ([`crate::util::on_task`]: every lane is woken the same way), and
    /// returns their RTTs (µs) if `timed`.
    async fn pairs_on_task(
        &mut self,
        ping: &Ping,
        n: usize,
        timed: bool,
    ) -> Result<Vec<f64>, BenchError> {
        let Driver::Local(mut c) = std::mem::replace(self, Driver::Moved) else {
            return Err(moved());
        };
        let ping = ping.clone();
        let (c, r) = crate::util::on_task("the lane's client", async move {
            let mut run = Vec::with_capacity(if timed { n } else { 0 });
            for _ in 0..n {
                let t = Instant::now();
                if let Err(e) = c.pair(&ping).await {
                    return (c, Err(e));
                }
                if timed {
                    run.push(t.elapsed().as_secs_f64() * 1e6);
                }
            }
            (c, Ok(run))
        })
        .await?;
        *self = Driver::Local(c);
        r
    }
}

fn moved() -> BenchError {
    BenchError::Task {
        what: "the lane's client".into(),
        reason: "lost by an earlier failure".into(),
    }
}

/// Warm-up pairs of one size: `warmup`, capped at 256 MiB of payload, at
/// least 10. The same rule for every implementation.
pub(crate) fn warmup_pairs(warmup: usize, size: usize) -> usize {
    warmup.min((256 << 20) / size.max(1)).max(10)
}

impl Lane {
    pub(crate) fn label(&self) -> String {
        match self.receivers {
            Some(r) => format!("{} x{r}", self.layer.name()),
            None => self.layer.name().to_string(),
        }
    }
}

/// Timed samples of one lane.
#[derive(Debug, Default)]
pub(crate) struct Samples {
    /// Every timed RTT (µs), sorted once measuring ends.
    pub all: Vec<f64>,
    /// Median of each timed run.
    pub run_medians: Vec<f64>,
    /// Bytes the client's sockets sent and received over the timed pairs
    /// (kernel counters).
    pub counted: Counted,
    /// Timed pairs the counters cover.
    pub counted_pairs: usize,
    /// Receivers per pair (propagate), 1 otherwise.
    pub fanout: usize,
}

impl Samples {
    /// Bytes the client sent per message (per receiver connection for
    /// propagate): its message plus its share of acks and control traffic.
    pub(crate) fn wire_one_way(&self) -> u64 {
        let n = (self.counted_pairs * self.fanout.max(1)) as u64;
        (self.counted.sent.saturating_add(n / 2))
            .checked_div(n)
            .unwrap_or(0)
    }

    /// Bytes both directions carried per round trip (message, ack and
    /// everything else on the lane's connections).
    pub(crate) fn wire_round_trip(&self) -> u64 {
        let n = self.counted_pairs as u64;
        (self
            .counted
            .sent
            .saturating_add(self.counted.received)
            .saturating_add(n / 2))
        .checked_div(n)
        .unwrap_or(0)
    }

    pub(crate) fn median(&self) -> f64 {
        percentile(&self.all, 0.5)
    }
    pub(crate) fn spread(&self) -> f64 {
        let m = self.median();
        let (lo, hi) = self
            .run_medians
            .iter()
            .fold((f64::MAX, f64::MIN), |(a, b), &x| (a.min(x), b.max(x)));
        if m > 0.0 && hi >= lo {
            (hi - lo) / m
        } else {
            0.0
        }
    }
}

async fn timed_run(
    lane: &mut Driver,
    ping: &Ping,
    pairs: usize,
    s: &mut Samples,
) -> Result<(), BenchError> {
    let sockets = lane.sockets();
    let before = sockets.read()?;
    let mut run = lane.timed(ping, pairs).await?;
    let after = sockets.read()?;
    s.counted.add(after.since(before));
    if lane.is_datagram() {
        // No stream counters for UDP: each pair is one datagram of the
        // payload out and one 1-byte datagram back (UDP adds only its
        // 8-byte header, as TCP's headers are not counted either).
        let n = run.len() as u64;
        s.counted.add(Counted {
            sent: n.saturating_mul(ping.len() as u64),
            received: n,
        });
    }
    s.counted_pairs += run.len();
    s.all.extend_from_slice(&run);
    run.sort_by(f64::total_cmp);
    s.run_medians.push(percentile(&run, 0.5));
    Ok(())
}

/// Warms up every lane, then runs `runs` timed runs of `pairs` pairs,
/// interleaved tcp (lane 0), lane 1, tcp, lane 2, ...; returns the samples
/// of each lane (sorted).
pub(crate) async fn measure(
    lanes: &mut [Lane],
    ping: &Ping,
    warmup: usize,
    runs: usize,
    pairs: usize,
    what: &str,
    progress: &mut dyn FnMut(&str),
) -> Result<Vec<Samples>, BenchError> {
    let warmup = warmup_pairs(warmup, ping.len());
    for lane in lanes.iter_mut() {
        progress(&format!(
            "{what}: warm-up {} ({warmup} pairs)",
            lane.label()
        ));
        lane.client.warm(ping, warmup).await?;
    }
    let mut samples: Vec<Samples> = lanes
        .iter()
        .map(|l| Samples {
            fanout: l.receivers.unwrap_or(1),
            ..Samples::default()
        })
        .collect();
    for run in 0..runs {
        progress(&format!("{what}: timed run {}/{runs}", run + 1));
        if lanes.len() == 1 {
            timed_run(&mut lanes[0].client, ping, pairs, &mut samples[0]).await?;
        }
        for i in 1..lanes.len() {
            let (tcp, rest) = lanes.split_at_mut(1);
            timed_run(&mut tcp[0].client, ping, pairs, &mut samples[0]).await?;
            timed_run(&mut rest[i - 1].client, ping, pairs, &mut samples[i]).await?;
        }
    }
    for s in &mut samples {
        s.all.sort_by(f64::total_cmp);
    }
    Ok(samples)
}

/// The lanes of a ping-pong: tcp first, then each layer, propagate once per
/// receiver count.
pub(crate) fn lanes_of(layers: &[Layer], receivers: &[usize]) -> Vec<(Layer, Option<usize>)> {
    let mut out = vec![(Layer::Tcp, None)];
    for &l in layers {
        if l == Layer::Tcp || out.iter().any(|(x, _)| *x == l) {
            continue;
        }
        if l == Layer::Propagate {
            for &r in receivers {
                if !out.contains(&(l, Some(r))) {
                    out.push((l, Some(r)));
                }
            }
        } else {
            out.push((l, None));
        }
    }
    out
}

/// Starts one responder per layer of `lanes` and connects a client per
/// lane. Propagate receivers all live in one responder process.
pub(crate) async fn connect_lanes(
    host: &Host,
    lanes: &[(Layer, Option<usize>)],
    key_bits: usize,
    pin: Pin,
    net: &crate::net::Net,
    progress: &mut dyn FnMut(&str),
) -> Result<(Vec<Lane>, Vec<Responder>), BenchError> {
    let mut responders: HashMap<Layer, Responder> = HashMap::new();
    let mut order = Vec::new();
    for &(layer, _) in lanes {
        if responders.contains_key(&layer) || layer.stack().is_some() {
            continue;
        }
        let receivers = lanes
            .iter()
            .filter(|(l, _)| *l == layer)
            .filter_map(|(_, r)| *r)
            .max()
            .unwrap_or(1);
        progress(&format!("starting the {} responder", layer.name()));
        let spec = ResponderSpec::new(layer, key_bits, receivers).on(net);
        responders.insert(
            layer,
            spawn_responder(host, &spec, pin.responder_core()).await?,
        );
        order.push(layer);
    }
    let mut out = Vec::new();
    for &(layer, receivers) in lanes {
        let client = match layer.stack() {
            Some(stack) => {
                if host.remote().is_some() {
                    return Err(BenchError::BadOption(format!(
                        "{} runs its own programs on this machine, not against --remote: drop it from --impl",
                        stack.name()
                    )));
                }
                if net.responder_ns.is_some() {
                    return Err(BenchError::BadOption(format!(
                        "{} runs on loopback only: drop --net",
                        stack.name()
                    )));
                }
                progress(&format!("building and starting {}", stack.name()));
                let lane =
                    crate::stacks::StackLane::start(stack, pin.client_core(), pin.responder_core())
                        .await?;
                Driver::Stack(Box::new(lane))
            }
            None => {
                let ready = &responders[&layer].ready;
                let c = Client::connect(layer, ready, key_bits, receivers.unwrap_or(1)).await?;
                Driver::Local(Box::new(c))
            }
        };
        out.push(Lane {
            layer,
            receivers,
            client,
        });
    }
    let rs = order
        .into_iter()
        .map(|l| responders.remove(&l).expect("started"))
        .collect();
    Ok((out, rs))
}

/// Who the non-tcp lanes of a run are.
pub(crate) struct RunLabel {
    /// `impl` of the non-tcp rows (`juxta`, `jxse`, ...).
    pub implementation: &'static str,
    /// Warm-up pairs per size.
    pub warmup: usize,
    /// CBJX on or off, when the run sets it for every JXTA-framed lane.
    pub cbjx: Option<bool>,
}

/// Builds the rows of one size from the lanes' samples (lane 0 is tcp).
pub(crate) fn rows_of(
    lanes: &[(Layer, Option<usize>)],
    samples: &[Samples],
    size: usize,
    pin: Pin,
    run: &RunLabel,
) -> Vec<PingPongRow> {
    let tcp_median = samples[0].median();
    let tcp_bw = size as f64 / tcp_median;
    lanes
        .iter()
        .zip(samples)
        .map(|(&(layer, receivers), s)| {
            let median = s.median();
            let bw = size as f64 / median;
            PingPongRow {
                scenario: "pingpong",
                implementation: layer.implementation().unwrap_or(run.implementation),
                layer: layer.stack().map_or(layer.name(), |k| k.configuration()),
                size,
                receivers,
                rtt_us_median: median,
                rtt_us_p99: percentile(&s.all, 0.99),
                bandwidth_mb_s: bw,
                wire_bytes: s.wire_one_way(),
                wire_bytes_rtt: s.wire_round_trip(),
                rtt_ratio_vs_tcp: if tcp_median > 0.0 {
                    median / tcp_median
                } else {
                    0.0
                },
                bandwidth_ratio_vs_tcp: if tcp_bw > 0.0 { bw / tcp_bw } else { 0.0 },
                run_spread: s.spread(),
                pin,
                samples: s.all.len(),
                warmup: run.warmup,
                cbjx: if layer == Layer::Tcp {
                    None
                } else {
                    run.cbjx.or(layer.cbjx())
                },
            }
        })
        .collect()
}

/// Runs the ping-pong: starts one responder per layer on `host`, measures
/// every size interleaved with the tcp baseline, and returns one row per
/// (layer, receivers, size). `progress` is called with a line per step.
/// With a namespaced `opts.net`, this side runs in the client namespace
/// (a current-thread runtime is required) and the responders in theirs.
pub async fn run(
    host: &Host,
    opts: &PingPongOptions,
    progress: impl FnMut(&str),
) -> Result<Vec<PingPongRow>, BenchError> {
    crate::net::scoped(&opts.net, run_here(host, opts, progress)).await
}

async fn run_here(
    host: &Host,
    opts: &PingPongOptions,
    mut progress: impl FnMut(&str),
) -> Result<Vec<PingPongRow>, BenchError> {
    pin_current(opts.pin.client_core());
    let lanes = lanes_of(&opts.layers, &opts.receivers);
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
    for &size in &opts.sizes {
        let ping = Ping::single(size);
        // Lanes that cannot carry this size (udp above 64 KB) sit it out.
        type Placed = Vec<(usize, Lane)>;
        let (mut here, aside): (Placed, Placed) = clients
            .drain(..)
            .enumerate()
            .partition(|(_, l)| l.layer.carries(size));
        let shape: Vec<(Layer, Option<usize>)> = here.iter().map(|(i, _)| lanes[*i]).collect();
        let mut measured: Vec<Lane> = here.drain(..).map(|(_, l)| l).collect();
        let samples = measure(
            &mut measured,
            &ping,
            opts.warmup,
            opts.runs,
            opts.pairs,
            &format!("size {size}"),
            &mut progress,
        )
        .await;
        // Put every lane back in its place before anything can fail.
        let mut back: Vec<(usize, Lane)> = shape
            .iter()
            .zip(measured)
            .map(|(sh, l)| (lanes.iter().position(|x| x == sh).expect("a lane"), l))
            .chain(aside)
            .collect();
        back.sort_by_key(|(i, _)| *i);
        clients = back.into_iter().map(|(_, l)| l).collect();
        let samples = samples?;
        let label = RunLabel {
            implementation: "juxta",
            warmup: warmup_pairs(opts.warmup, size),
            cbjx: None,
        };
        rows.extend(rows_of(&shape, &samples, size, opts.pin, &label));
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
    fn lanes_put_tcp_first_and_expand_propagate() {
        let l = lanes_of(
            &[
                Layer::UnicastPipe,
                Layer::Propagate,
                Layer::Tcp,
                Layer::UnicastPipe,
            ],
            &[1, 2, 2, 8],
        );
        assert_eq!(
            l,
            vec![
                (Layer::Tcp, None),
                (Layer::UnicastPipe, None),
                (Layer::Propagate, Some(1)),
                (Layer::Propagate, Some(2)),
                (Layer::Propagate, Some(8)),
            ]
        );
    }

    #[test]
    fn rows_carry_ratios_and_receivers() {
        let lanes = vec![(Layer::Tcp, None), (Layer::Propagate, Some(4))];
        let mk = |v: Vec<f64>, sent: u64, fanout| Samples {
            run_medians: vec![v[0], v[v.len() - 1]],
            counted_pairs: v.len(),
            all: v,
            counted: Counted { sent, received: 3 },
            fanout,
        };
        let samples = vec![
            mk(vec![10.0, 10.0, 10.0], 15, 1),
            mk(vec![20.0, 20.0, 30.0], 108, 4),
        ];
        let label = RunLabel {
            implementation: "juxta",
            warmup: 10,
            cbjx: None,
        };
        let rows = rows_of(&lanes, &samples, 1000, Pin::Same, &label);
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].implementation, "tcp");
        assert_eq!(rows[0].rtt_ratio_vs_tcp, 1.0);
        assert_eq!(rows[1].receivers, Some(4));
        assert_eq!(rows[1].rtt_ratio_vs_tcp, 2.0);
        assert_eq!(rows[1].bandwidth_ratio_vs_tcp, 0.5);
        assert_eq!(rows[1].bandwidth_mb_s, 50.0);
        assert_eq!(rows[0].wire_bytes, 5);
        assert_eq!(rows[0].wire_bytes_rtt, 6);
        // 108 bytes over 3 pairs to 4 receivers: 9 per receiver connection.
        assert_eq!(rows[1].wire_bytes, 9);
        assert_eq!(rows[1].wire_bytes_rtt, 37);
        assert_eq!(rows[1].warmup, 10);
        assert_eq!(rows[1].run_spread, 0.5);
        let j = serde_json::to_value(&rows).unwrap();
        assert!(j[0].get("receivers").is_none());
        assert_eq!(j[1]["receivers"], 4);
        assert_eq!(j[1]["layer"], "propagate");
        assert_eq!(j[1]["impl"], "juxta");
        for k in [
            "scenario",
            "impl",
            "layer",
            "size",
            "rtt_us_median",
            "rtt_us_p99",
            "bandwidth_mb_s",
            "wire_bytes",
            "wire_bytes_rtt",
            "warmup",
            "rtt_ratio_vs_tcp",
            "bandwidth_ratio_vs_tcp",
            "run_spread",
            "pin",
            "samples",
        ] {
            assert!(j[1].get(k).is_some(), "missing {k}");
        }
    }
}
