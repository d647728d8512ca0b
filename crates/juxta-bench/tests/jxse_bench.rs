//! The JXSE side by side with tiny budgets: two real JXSE 2.7 peers (the
//! interop/jxse harness, built by scripts/test.sh or on demand here) run
//! the ping-pong and throughput on the endpoint, unicast pipe and socket
//! layers, and the ping-pong on the unreliable socket and reliable bidi
//! pipe. Checks rows, figures and that the JVMs are gone afterwards (no
//! timing thresholds), and that bad set-ups give typed errors quickly.

use std::time::Duration;

use juxta_bench::jxse::{self, JxseError, JxseOptions, JXSE_LAYERS};
use juxta_bench::layers::{Host, Layer};
use juxta_bench::BenchError;

mod prereq;

fn small() -> JxseOptions {
    JxseOptions {
        sizes: vec![1, 65536],
        warmup: 3,
        runs: 2,
        pairs: 3,
        throughput_duration_ms: 200,
        throughput_max_count: 50,
        ..JxseOptions::default()
    }
}

fn gone(pids: &[u32]) -> bool {
    pids.iter()
        .all(|p| !std::path::Path::new(&format!("/proc/{p}")).exists())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jxse_pingpong_and_throughput() {
    if !prereq::require_ok(prereq::jxse()) {
        return;
    }
    prereq::built_jxse_harness();
    let opts = small();
    let mut log = Vec::new();
    let run =
        jxse::run_pingpong(&Host::Thread, &opts, &mut |l: &str| log.push(l.to_string())).await;
    assert!(run.error.is_none(), "pingpong failed: {:?}", run.error);
    assert_eq!(run.jvm_pids.len(), 2);
    assert!(
        gone(&run.jvm_pids),
        "JVMs still running: {:?}",
        run.jvm_pids
    );
    assert!(!log.is_empty());
    // A tcp lane beside the JXSE lanes, per size.
    assert_eq!(run.rows.len(), (JXSE_LAYERS.len() + 1) * 2);
    let tcp: Vec<_> = run
        .rows
        .iter()
        .filter(|r| r.implementation == "tcp")
        .collect();
    assert_eq!(tcp.len(), 2);
    for layer in JXSE_LAYERS {
        for size in [1, 65536] {
            let r = run
                .rows
                .iter()
                .find(|r| r.layer == layer.name() && r.size == size && r.implementation != "tcp")
                .unwrap_or_else(|| panic!("no row for {} {size}", layer.name()));
            assert_eq!(r.implementation, "jxse");
            assert_eq!(r.scenario, "pingpong");
            // Every implementation gets every sample and the same warm-up.
            assert_eq!(r.samples, 2 * 3, "{r:?}");
            assert_eq!(r.warmup, 10, "{r:?}");
            assert_eq!(r.cbjx, Some(true), "{r:?}");
            assert!(
                r.rtt_us_median.is_finite() && r.rtt_us_median > 0.0,
                "{r:?}"
            );
            assert!(r.rtt_us_p99 >= r.rtt_us_median, "{r:?}");
            assert!(
                r.bandwidth_mb_s.is_finite() && r.bandwidth_mb_s > 0.0,
                "{r:?}"
            );
            // The kernel counted at least the payload per pair from the
            // client JVM's sockets, and the ack back.
            assert!(r.wire_bytes >= size as u64, "{r:?}");
            assert!(r.wire_bytes_rtt > r.wire_bytes, "{r:?}");
            // Ratios against the tcp lane of the same run.
            let t = tcp.iter().find(|t| t.size == size).unwrap();
            assert_eq!(r.rtt_ratio_vs_tcp, r.rtt_us_median / t.rtt_us_median);
            // tcp runs before each layer's run (interleaved).
            assert_eq!(t.samples, 2 * 3 * JXSE_LAYERS.len());
        }
    }
    let j = serde_json::to_value(
        run.rows
            .iter()
            .find(|r| r.implementation == "jxse")
            .unwrap(),
    )
    .unwrap();
    assert_eq!(j["impl"], "jxse");
    assert_eq!(j["cbjx"], true);

    // The second configuration: CBJX off, its own impl, and no signature
    // trailer on the wire (fewer bytes per 1-byte message).
    let off = JxseOptions {
        cbjx: false,
        sizes: vec![1],
        layers: vec![Layer::Endpoint],
        ..small()
    };
    let run_off = jxse::run_pingpong(&Host::Thread, &off, &mut |_: &str| {}).await;
    assert!(
        run_off.error.is_none(),
        "pingpong failed: {:?}",
        run_off.error
    );
    let r_off = run_off
        .rows
        .iter()
        .find(|r| r.implementation == "jxse-nocbjx")
        .expect("a jxse-nocbjx row");
    assert_eq!(r_off.cbjx, Some(false));
    let r_on = run
        .rows
        .iter()
        .find(|r| r.implementation == "jxse" && r.layer == "endpoint" && r.size == 1)
        .unwrap();
    assert!(
        r_off.wire_bytes < r_on.wire_bytes,
        "CBJX off {} bytes, on {} bytes",
        r_off.wire_bytes,
        r_on.wire_bytes
    );

    let run = jxse::run_throughput(&opts, &mut |_: &str| {}).await;
    assert!(run.error.is_none(), "throughput failed: {:?}", run.error);
    assert!(
        gone(&run.jvm_pids),
        "JVMs still running: {:?}",
        run.jvm_pids
    );
    assert_eq!(run.rows.len(), JXSE_LAYERS.len() * 2);
    for r in &run.rows {
        assert_eq!(r.implementation, "jxse");
        assert!(r.msgs_per_s.is_finite() && r.msgs_per_s > 0.0, "{r:?}");
        assert!(r.bandwidth_mb_s > 0.0, "{r:?}");
        assert!((0.0..=100.0).contains(&r.loss_pct), "{r:?}");
    }
    // Ratios come from the caller's tcp rows of the same size.
    let rows = run.into_result().unwrap();
    assert!(rows.iter().any(|r| r.layer == "socket"));
}

#[tokio::test]
async fn missing_harness_is_a_typed_error() {
    let dir = tempfile::tempdir().unwrap();
    let opts = JxseOptions {
        harness_dir: Some(dir.path().join("nope")),
        ..small()
    };
    let run = jxse::run_pingpong(&Host::Thread, &opts, &mut |_: &str| {}).await;
    assert!(run.rows.is_empty());
    assert!(run.jvm_pids.is_empty());
    let e = run.error.expect("an error");
    assert!(matches!(e, JxseError::HarnessNotFound { .. }), "{e}");
    assert!(e.to_string().contains("JUXTA_JXSE_HARNESS"), "{e}");
    // And through the bench's error type.
    let run = jxse::run_throughput(&opts, &mut |_: &str| {}).await;
    assert!(matches!(
        run.into_result(),
        Err(BenchError::Jxse(JxseError::HarnessNotFound { .. }))
    ));
}

#[tokio::test]
async fn missing_java_is_a_typed_error() {
    let opts = JxseOptions {
        java: "/nonexistent/bin/java".into(),
        build: false,
        ..small()
    };
    // Without a built harness there is nothing to start (the missing
    // harness is covered by the test above): build it if needed.
    if !prereq::require_ok(prereq::jxse()) {
        return;
    }
    prereq::built_jxse_harness();
    let run = jxse::run_pingpong(&Host::Thread, &opts, &mut |_: &str| {}).await;
    assert!(
        matches!(run.error, Some(JxseError::JavaMissing)),
        "{:?}",
        run.error
    );
}

/// de Souza's other two JXTA routines on JXSE: the unreliable socket
/// (stream = false) and the reliable bidi pipe, each a lane of the common
/// harness with rows at every size (one of them above JXSE's message
/// chunking) and positive round trips; the throughput refuses them with a
/// typed error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jxse_unreliable_socket_and_reliable_bidi_pipe() {
    if !prereq::require_ok(prereq::jxse()) {
        return;
    }
    prereq::built_jxse_harness();
    let sizes = vec![2, 20_000, 200_000];
    let opts = JxseOptions {
        layers: Layer::JXSE_ONLY.to_vec(),
        sizes: sizes.clone(),
        ..small()
    };
    let run = jxse::run_pingpong(&Host::Thread, &opts, &mut |_: &str| {}).await;
    assert!(run.error.is_none(), "pingpong failed: {:?}", run.error);
    assert!(
        gone(&run.jvm_pids),
        "JVMs still running: {:?}",
        run.jvm_pids
    );
    for (layer, reliable) in [
        (Layer::SocketUnreliable, false),
        (Layer::BidiPipeReliable, true),
    ] {
        assert_eq!(jxse::reliable(layer), Some(reliable));
        let got: Vec<usize> = run
            .rows
            .iter()
            .filter(|r| r.implementation == "jxse" && r.layer == layer.name())
            .map(|r| {
                assert_eq!(r.samples, 2 * 3, "{r:?}");
                assert!(
                    r.rtt_us_median.is_finite() && r.rtt_us_median > 0.0,
                    "{r:?}"
                );
                assert!(r.wire_bytes >= r.size as u64, "{r:?}");
                r.size
            })
            .collect();
        assert_eq!(got, sizes, "{}", layer.name());
    }
    let run = jxse::run_throughput(&opts, &mut |_: &str| {}).await;
    assert!(
        matches!(run.error, Some(JxseError::UnsupportedLayer(_))),
        "{:?}",
        run.error
    );
    assert!(gone(&run.jvm_pids));
}

#[tokio::test]
async fn unsupported_layer_and_dying_jvm() {
    let opts = JxseOptions {
        layers: vec![Layer::Propagate],
        ..small()
    };
    let run = jxse::run_pingpong(&Host::Thread, &opts, &mut |_: &str| {}).await;
    assert!(matches!(run.error, Some(JxseError::UnsupportedLayer(_))));

    // A "java" that exits at once: an Exited error naming the role, no hang.
    if !prereq::require_ok(prereq::jxse()) {
        return;
    }
    prereq::built_jxse_harness();
    let opts = JxseOptions {
        java: "/bin/false".into(),
        ..small()
    };
    let run = jxse::run_pingpong(&Host::Thread, &opts, &mut |_: &str| {}).await;
    assert!(
        matches!(run.error, Some(JxseError::Exited { .. })),
        "{:?}",
        run.error
    );
}

#[tokio::test]
async fn failing_build_is_a_typed_error_with_its_output() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("build.sh"),
        "echo 'compiling...'\necho 'boom: no compiler' >&2\nexit 3\n",
    )
    .unwrap();
    let opts = JxseOptions {
        harness_dir: Some(dir.path().to_path_buf()),
        ..small()
    };
    let run = jxse::run_pingpong(&Host::Thread, &opts, &mut |_: &str| {}).await;
    match run.error {
        Some(JxseError::BuildFailed { tail, .. }) => assert!(tail.contains("boom"), "{tail}"),
        // Machines without Maven stop before building.
        Some(JxseError::MavenMissing { .. }) => {
            prereq::require("`mvn` on PATH (to run the failing build)", false);
        }
        other => panic!("{other:?}"),
    }
}

/// The command lines of running processes.
fn cmdlines() -> Vec<String> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| std::fs::read(e.ok()?.path().join("cmdline")).ok())
        .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
        .collect()
}

#[tokio::test]
async fn hanging_jvm_times_out_and_is_killed() {
    if !prereq::require_ok(prereq::jxse()) {
        return;
    }
    prereq::built_jxse_harness();
    // A "java" that never prints READY.
    let dir = tempfile::tempdir().unwrap();
    let fake = dir.path().join("java");
    std::fs::write(&fake, "#!/bin/sh\nexec sleep 987\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let opts = JxseOptions {
        java: fake,
        startup_timeout_ms: 1000,
        ..small()
    };
    let run = jxse::run_throughput(&opts, &mut |_: &str| {}).await;
    assert!(
        matches!(run.error, Some(JxseError::Timeout { ref command, .. }) if command == "startup"),
        "{:?}",
        run.error
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        !cmdlines().iter().any(|c| c.starts_with("sleep 987")),
        "the fake JVM survived"
    );
}

fn allowed_cpus(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .unwrap()
        .trim()
        .to_string()
}

#[tokio::test]
async fn session_pins_jvms_and_stops_them() {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    if !prereq::require(
        &format!("two CPUs to pin the JVMs on (this machine allows {cpus})"),
        cpus >= 2,
    ) || !prereq::require_ok(prereq::jxse())
    {
        return;
    }
    prereq::built_jxse_harness();
    let opts = JxseOptions {
        pin: juxta_bench::util::Pin::Split,
        ..small()
    };
    let mut bench = jxse::JxseBench::start(&opts).await.expect("start");
    let pids = bench.pids();
    assert_eq!(pids.len(), 2);
    // client on CPU 0, responder on CPU 1
    assert_eq!(allowed_cpus(pids[0]), "0");
    assert_eq!(allowed_cpus(pids[1]), "1");
    let r = bench
        .throughput(Layer::Endpoint, 1024)
        .await
        .expect("throughput");
    assert_eq!(
        (r.implementation, r.layer, r.size),
        ("jxse", "endpoint", 1024)
    );
    assert!(r.msgs_per_s > 0.0);
    let run = bench
        .timed_run(Layer::UnicastPipe, 1, 4)
        .await
        .expect("a timed run");
    assert_eq!(run.len(), 4);
    assert!(run.iter().all(|&us| us > 0.0), "{run:?}");
    bench.stop().await;
    assert!(gone(&pids), "JVMs still running: {pids:?}");
}
