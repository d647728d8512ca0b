//! The "typical peer operations" table of the performance model: how long
//! the everyday operations of a JXTA application take, timed in-process
//! with two peers on loopback (configuration `ad-hoc`: no rendezvous, the
//! peers connected directly).
//!
//! Operations (each repeated [`OpsOptions::runs`] times, median and p99 in
//! ms): `start` (a peer with an existing identity), `create-group`,
//! `join-group` (password membership), `open-input-pipe`, `cached-peers`
//! and `cached-pipe` (local discovery), `remote-peers` and `remote-pipe`
//! (a discovery query to the other peer and its answer), `open-output-pipe`
//! (pipe binding through the resolver) and `publish` (a pipe
//! advertisement into the local cache).
//!
//! ```no_run
//! # async fn demo() -> Result<(), juxta_bench::BenchError> {
//! let rows = juxta_bench::ops::run(&juxta_bench::ops::OpsOptions::default(), |l| eprintln!("{l}")).await?;
//! assert_eq!(rows[0].operation, "start");
//! # Ok(()) }
//! ```

use std::time::{Duration, Instant};

use juxta::proto::advertisement::{AdvKind, Advertisement, PipeAdvertisement, PipeType};
use juxta::{Peer, PeerConfig};
use serde::Serialize;

use crate::util::{percentile, random_pipe_id};
use crate::BenchError;

/// The operations, in table order.
pub const OPERATIONS: [&str; 10] = [
    "start",
    "create-group",
    "join-group",
    "open-input-pipe",
    "cached-peers",
    "remote-peers",
    "cached-pipe",
    "remote-pipe",
    "open-output-pipe",
    "publish",
];

/// How long a remote operation may take before the run fails.
const OP_TIMEOUT: Duration = Duration::from_secs(10);

/// Errors specific to the operations scenario.
#[derive(Debug, thiserror::Error)]
pub enum OpsError {
    /// Discovery failed.
    #[error(transparent)]
    Discovery(#[from] juxta::discovery::DiscoveryError),
    /// A group operation failed.
    #[error(transparent)]
    Group(#[from] juxta::group::GroupError),
    /// An operation returned nothing where something was expected.
    #[error("{0}: nothing found")]
    NotFound(&'static str),
}

/// Options of the scenario.
#[derive(Debug, Clone, Serialize)]
pub struct OpsOptions {
    /// Repetitions of each operation (default 20).
    pub runs: usize,
    /// RSA key size of the peers' identities (default 1024).
    pub key_bits: usize,
}

impl Default for OpsOptions {
    fn default() -> Self {
        OpsOptions {
            runs: 20,
            key_bits: 1024,
        }
    }
}

/// One row of the table.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct OpsRow {
    /// Always `ops`.
    pub scenario: String,
    /// One of [`OPERATIONS`].
    pub operation: String,
    /// The configuration (`ad-hoc`).
    pub config: String,
    /// Median, ms.
    pub ms_median: f64,
    /// 99th percentile, ms.
    pub ms_p99: f64,
    /// Repetitions measured.
    pub runs: usize,
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn pipe(name: String) -> PipeAdvertisement {
    let mut a = PipeAdvertisement::new(random_pipe_id(), PipeType::Unicast);
    a.name = Some(name);
    a
}

fn row(op: &str, samples: &mut [f64]) -> OpsRow {
    samples.sort_by(f64::total_cmp);
    OpsRow {
        scenario: "ops".into(),
        operation: op.into(),
        config: "ad-hoc".into(),
        ms_median: percentile(samples, 0.5),
        ms_p99: percentile(samples, 0.99),
        runs: samples.len(),
    }
}

/// Runs the scenario and returns one row per operation, in
/// [`OPERATIONS`] order.
pub async fn run(
    opts: &OpsOptions,
    mut progress: impl FnMut(&str),
) -> Result<Vec<OpsRow>, BenchError> {
    let runs = opts.runs.max(1);
    let dir = tempfile::tempdir().map_err(|source| BenchError::Io {
        what: "creating a temporary directory".into(),
        source,
    })?;
    let cfg = |name: &str, listen: bool| {
        let mut c = PeerConfig::new(dir.path().join(name));
        c.key_bits = opts.key_bits;
        if listen {
            c = c.listen("127.0.0.1:0".parse().expect("address"));
        }
        c
    };
    let mut t: Vec<Vec<f64>> = vec![Vec::with_capacity(runs); OPERATIONS.len()];
    let idx = |op: &str| OPERATIONS.iter().position(|o| *o == op).expect("operation");

    progress("ops: start");
    // The identity is created once; `start` loads it.
    drop(Peer::start(cfg("s", false)).await?);
    for _ in 0..runs {
        let t0 = Instant::now();
        let p = Peer::start(cfg("s", false)).await?;
        t[idx("start")].push(ms(t0.elapsed()));
        drop(p);
    }

    progress("ops: two peers on loopback");
    let a = Peer::start(cfg("a", true)).await?;
    let b = Peer::start(cfg("b", false)).await?;
    let addr = a
        .local_addr()
        .ok_or(OpsError::NotFound("listen address"))
        .map_err(BenchError::from)?;
    let to_a = b.connect(addr).await?;
    to_a.wait_compact(OP_TIMEOUT).await;
    let aid = a.peer_id();
    let (da, db) = (a.discovery(), b.discovery());

    progress("ops: groups");
    for i in 0..runs {
        let t0 = Instant::now();
        let g = a
            .groups()
            .create(&format!("ops-group-{i}"), Some("pw"))
            .await
            .map_err(OpsError::from)?;
        t[idx("create-group")].push(ms(t0.elapsed()));
        let t0 = Instant::now();
        b.groups()
            .join(&g.adv, Some("pw"))
            .await
            .map_err(OpsError::from)?;
        t[idx("join-group")].push(ms(t0.elapsed()));
        b.groups().leave(&g.id).map_err(OpsError::from)?;
    }

    progress("ops: pipes and discovery");
    let mut inputs = Vec::with_capacity(runs);
    for i in 0..runs {
        let adv = pipe(format!("ops-pipe-{i}"));
        let t0 = Instant::now();
        inputs.push(a.pipes().create_input_pipe(&adv)?);
        t[idx("open-input-pipe")].push(ms(t0.elapsed()));

        let t0 = Instant::now();
        da.publish(&Advertisement::Pipe(adv.clone()))
            .await
            .map_err(OpsError::from)?;
        t[idx("publish")].push(ms(t0.elapsed()));

        let t0 = Instant::now();
        let found = db
            .get_remote(AdvKind::Peer, None, None, 10, Some(aid), OP_TIMEOUT)
            .await
            .map_err(OpsError::from)?;
        t[idx("remote-peers")].push(ms(t0.elapsed()));
        if found.is_empty() {
            return Err(OpsError::NotFound("remote-peers").into());
        }

        let t0 = Instant::now();
        let found = db
            .get_local(AdvKind::Peer, None, None, 10)
            .await
            .map_err(OpsError::from)?;
        t[idx("cached-peers")].push(ms(t0.elapsed()));
        if found.is_empty() {
            return Err(OpsError::NotFound("cached-peers").into());
        }

        let name = adv.name.clone().unwrap_or_default();
        let t0 = Instant::now();
        let found = db
            .get_remote(
                AdvKind::Adv,
                Some("Name"),
                Some(&name),
                1,
                Some(aid),
                OP_TIMEOUT,
            )
            .await
            .map_err(OpsError::from)?;
        t[idx("remote-pipe")].push(ms(t0.elapsed()));
        if found.is_empty() {
            return Err(OpsError::NotFound("remote-pipe").into());
        }

        let t0 = Instant::now();
        let found = db
            .get_local(AdvKind::Adv, Some("Name"), Some(&name), 1)
            .await
            .map_err(OpsError::from)?;
        t[idx("cached-pipe")].push(ms(t0.elapsed()));
        let Some(Advertisement::Pipe(found)) = found.into_iter().next() else {
            return Err(OpsError::NotFound("cached-pipe").into());
        };

        let t0 = Instant::now();
        let out = b
            .pipes()
            .create_output_pipe(&found, &[aid], OP_TIMEOUT)
            .await?;
        t[idx("open-output-pipe")].push(ms(t0.elapsed()));
        drop(out);
    }
    drop(inputs);

    let rows: Vec<OpsRow> = OPERATIONS
        .iter()
        .zip(t.iter_mut())
        .map(|(op, s)| row(op, s))
        .collect();
    for r in &rows {
        progress(&format!(
            "ops: {:<16} median {:>8.3} ms  p99 {:>8.3} ms",
            r.operation, r.ms_median, r.ms_p99
        ));
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_operation_is_measured_in_order() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let opts = OpsOptions {
            runs: 2,
            key_bits: 1024,
        };
        let rows = rt.block_on(run(&opts, |_| {})).unwrap();
        let ops: Vec<&str> = rows.iter().map(|r| r.operation.as_str()).collect();
        assert_eq!(ops, OPERATIONS);
        for r in &rows {
            assert_eq!(
                (r.scenario.as_str(), r.config.as_str(), r.runs),
                ("ops", "ad-hoc", 2)
            );
            assert!(r.ms_median >= 0.0 && r.ms_p99 >= r.ms_median);
        }
        let json = serde_json::to_value(&rows[0]).unwrap();
        assert_eq!(json["operation"], "start");
        assert!(json["ms_median"].is_number() && json["ms_p99"].is_number());
    }
}
