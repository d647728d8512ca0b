//! The JXTA studies' published figures, as data, to print beside ours.
//!
//! Source: the project's background notes on the JXTA performance model
//! (kept outside this repository), which summarise
//! Halepovic's thesis (2004), Antoniu/Jan/Noblet INRIA RR-5718 and HPCC'05
//! (JuxTest), Jan's 2004 slides and de Souza et al. Their hardware is not
//! ours, so layer figures are compared as ratios to the socket bound the
//! same study measured (ours: to the tcp bound of the same run).

/// What a layer figure measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Metric {
    /// Round-trip latency of the smallest message, microseconds.
    LatencyUs,
    /// Peak bandwidth, MB/s.
    BandwidthMbS,
}

/// A network on which a study measured, with its plain-socket bound.
#[derive(Debug, Clone, Copy)]
pub struct Network {
    /// Name as in the study.
    pub name: &'static str,
    /// Socket RTT bound, microseconds.
    pub socket_rtt_us: f64,
    /// Socket bandwidth bound, MB/s.
    pub socket_mb_s: f64,
}

/// performance-model.md section 2: Fast Ethernet LAN, socket bound 11.2 MB/s, ~70 us.
pub const FAST_ETHERNET: Network = Network {
    name: "Fast Ethernet LAN",
    socket_rtt_us: 70.0,
    socket_mb_s: 11.2,
};
/// performance-model.md section 2 (SAN): GigE, ~115 MB/s and 45 us.
pub const GIGE: Network = Network {
    name: "GigE SAN",
    socket_rtt_us: 45.0,
    socket_mb_s: 115.0,
};
/// performance-model.md section 2 (SAN): Myrinet-Ethernet, ~155 MB/s and 60 us.
pub const MYRINET: Network = Network {
    name: "Myrinet SAN",
    socket_rtt_us: 60.0,
    socket_mb_s: 155.0,
};

/// One published layer figure.
#[derive(Debug, Clone, Copy)]
pub struct LayerFigure {
    /// Our layer name it corresponds to.
    pub layer: &'static str,
    /// What is measured.
    pub metric: Metric,
    /// The implementation and version measured.
    pub implementation: &'static str,
    /// The value (low end of a range).
    pub value: f64,
    /// High end when the study gives a range.
    pub value_hi: Option<f64>,
    /// Where.
    pub network: Network,
    /// Remark (buffer size, ...), may be empty.
    pub note: &'static str,
}

impl LayerFigure {
    /// The figure as a ratio to the study's socket bound, oriented like
    /// ours: RTT / socket RTT, bandwidth / socket bandwidth.
    pub fn ratio(&self) -> (f64, Option<f64>) {
        let bound = match self.metric {
            Metric::LatencyUs => self.network.socket_rtt_us,
            Metric::BandwidthMbS => self.network.socket_mb_s,
        };
        (self.value / bound, self.value_hi.map(|v| v / bound))
    }
}

const fn fig(
    layer: &'static str,
    metric: Metric,
    implementation: &'static str,
    value: f64,
    value_hi: Option<f64>,
    network: Network,
    note: &'static str,
) -> LayerFigure {
    LayerFigure {
        layer,
        metric,
        implementation,
        value,
        value_hi,
        network,
        note,
    }
}

use Metric::{BandwidthMbS as BW, LatencyUs as LAT};

/// Layer figures: performance-model.md section 2, the JuxTest table
/// (Fast Ethernet) and the SAN paragraph (GigE latencies, Myrinet pipe bandwidth).
pub const LAYER_FIGURES: &[LayerFigure] = &[
    // Section 2 table, Fast Ethernet LAN.
    fig(
        "endpoint",
        BW,
        "JXTA-J2SE 2.2.1",
        11.01,
        None,
        FAST_ETHERNET,
        "",
    ),
    fig(
        "endpoint",
        BW,
        "JXTA-J2SE 2.3",
        10.47,
        None,
        FAST_ETHERNET,
        "",
    ),
    fig("endpoint", BW, "JXTA-C", 11.16, None, FAST_ETHERNET, ""),
    fig(
        "unicast-pipe",
        BW,
        "JXTA-J2SE 2.2.1",
        10.74,
        None,
        FAST_ETHERNET,
        "",
    ),
    fig(
        "unicast-pipe",
        BW,
        "JXTA-J2SE 2.3",
        9.59,
        None,
        FAST_ETHERNET,
        "",
    ),
    fig("unicast-pipe", BW, "JXTA-C", 11.1, None, FAST_ETHERNET, ""),
    fig(
        "socket",
        BW,
        "JXTA-J2SE 2.2.1",
        9.48,
        None,
        FAST_ETHERNET,
        "16 KB buffer",
    ),
    fig(
        "socket",
        BW,
        "JXTA-J2SE 2.3",
        9.72,
        None,
        FAST_ETHERNET,
        "16 KB buffer",
    ),
    fig(
        "socket",
        BW,
        "JXTA-J2SE 2.2.1",
        11.12,
        None,
        FAST_ETHERNET,
        "512 KB buffer",
    ),
    fig(
        "socket",
        BW,
        "JXTA-J2SE 2.3",
        10.96,
        None,
        FAST_ETHERNET,
        "512 KB buffer",
    ),
    fig(
        "endpoint",
        LAT,
        "JXTA-J2SE 2.2.1",
        960.0,
        None,
        FAST_ETHERNET,
        "",
    ),
    fig(
        "endpoint",
        LAT,
        "JXTA-J2SE 2.3",
        480.0,
        Some(735.0),
        FAST_ETHERNET,
        "",
    ),
    fig("endpoint", LAT, "JXTA-C", 820.0, None, FAST_ETHERNET, ""),
    fig(
        "unicast-pipe",
        LAT,
        "JXTA-J2SE 2.2.1",
        35_000.0,
        None,
        FAST_ETHERNET,
        "",
    ),
    fig(
        "unicast-pipe",
        LAT,
        "JXTA-J2SE 2.3",
        2_000.0,
        None,
        FAST_ETHERNET,
        "",
    ),
    fig(
        "unicast-pipe",
        LAT,
        "JXTA-C",
        1_990.0,
        None,
        FAST_ETHERNET,
        "",
    ),
    fig(
        "socket",
        LAT,
        "JXTA-J2SE 2.2.1",
        3_400.0,
        None,
        FAST_ETHERNET,
        "",
    ),
    fig(
        "socket",
        LAT,
        "JXTA-J2SE 2.3",
        2_500.0,
        None,
        FAST_ETHERNET,
        "",
    ),
    // Section 2, SAN paragraph: GigE latencies.
    fig("endpoint", LAT, "JXTA-J2SE", 294.0, Some(357.0), GIGE, ""),
    fig(
        "unicast-pipe",
        LAT,
        "JXTA-J2SE",
        711.0,
        Some(834.0),
        GIGE,
        "",
    ),
    fig("socket", LAT, "JXTA-J2SE", 977.0, Some(1_300.0), GIGE, ""),
    fig("endpoint", LAT, "JXTA-C 2.1.1", 137.0, None, GIGE, ""),
    fig("unicast-pipe", LAT, "JXTA-C 2.1.1", 298.0, None, GIGE, ""),
    // Section 2, SAN paragraph: unicast pipe on Myrinet.
    fig(
        "unicast-pipe",
        BW,
        "JXTA-J2SE 2.2.1",
        136.8,
        None,
        MYRINET,
        "",
    ),
    fig(
        "unicast-pipe",
        BW,
        "JXTA-J2SE 2.3.2",
        106.5,
        None,
        MYRINET,
        "",
    ),
];

/// Bytes on the wire for a 1-byte payload (performance-model.md section 2):
/// (layer, J2SE bytes low, J2SE bytes high, JXTA-C bytes).
pub const WIRE_BYTES_1B: &[(&str, f64, f64, Option<f64>)] = &[
    ("endpoint", 300.0, 300.0, Some(239.0)),
    ("unicast-pipe", 877.0, 877.0, Some(834.0)),
    ("socket", 909.0, 913.0, None),
];

/// Typical operations, mean ms, TCP rendezvous on LAN, JXTA 2.0
/// (performance-model.md section 3, first paragraph). Keys are our
/// `ops` operation names.
pub const OPS_MS: &[(&str, f64)] = &[
    ("start", 5_311.0),
    ("create-group", 1_447.0),
    ("join-group", 5.4),
    ("open-input-pipe", 10.7),
    ("cached-peers", 29.3),
    ("remote-peers", 880.8),
    ("cached-pipe", 2.0),
    ("remote-pipe", 478.7),
    ("open-output-pipe", 860.7),
    ("publish", 294.8),
];
/// Published total of the operations above (TCP rendezvous, LAN), ad-hoc and 56 kbps WAN.
pub const OPS_TOTAL_MS: [(&str, f64); 3] = [
    ("TCP rendezvous, LAN", 9_321.0),
    ("ad-hoc", 8_048.0),
    ("56 kbps WAN", 13_414.0),
];

/// Pipe message rates, msg/s (performance-model.md section 3, "Pipes"):
/// (layer, pattern, low, high, version).
pub const PIPE_RATES: &[(&str, &str, f64, f64, &str)] = &[
    ("unicast-pipe", "smooth", 115.0, 115.0, "JXTA 1.0"),
    ("unicast-pipe", "bursty", 179.0, 179.0, "JXTA 2.0"),
    ("secure-pipe", "smooth", 23.0, 23.0, "JXTA 1.0"),
    (
        "propagate",
        "smooth",
        9.0,
        20.0,
        "JXTA 2.0, 1 to 8 receivers",
    ),
];

/// Composition (section 3): 20 small elements cost 24-100% more RTT than
/// one large one in JXTA 1.0, "little" in 2.0.
pub const COMPOSITION_EXTRA_PCT: (f64, f64) = (24.0, 100.0);

/// Recovery after a rendezvous is killed (section 3), seconds:
/// (situation, mean seconds).
pub const RECOVERY_S: &[(&str, f64)] = &[
    ("fewer than 8 orphaned edges", 78.4),
    ("8 or more orphaned edges", 100.4),
];
/// Of which a fixed failure-detection wait, seconds (section 3).
pub const RECOVERY_DETECTION_S: f64 = 60.0;

/// Rendezvous findings (section 3, "Rendezvous"), per search model.
pub const RENDEZVOUS_NOTES: &[(&str, &str)] = &[
    (
        "centralized",
        "answers in under 1 s at 2-4 q/s, tens to hundreds of seconds at 8 q/s",
    ),
    ("flooding", "loses over 80% of queries at high load"),
    (
        "srdi",
        "no or negligible loss up to 8 q/s; a second rendezvous helps at 16 q/s; memory grew 45 MB in 12 h",
    ),
    ("all", "coefficient of variation mostly 50% or more"),
];

/// Relay findings (section 3, "Relays").
pub const RELAY_NOTES: &[&str] = &[
    "the TCP transport had a bug making HTTP relays faster for RTT",
    "relays collapsed under overload after ~2,000-4,000 messages (no flow control)",
    "two relays made propagate pipes noticeably slow",
];

/// de Souza et al. (performance-model.md section 5 (a), Athlon64 5200+):
/// the dense matrix multiplication, wall seconds, as (configuration, the
/// implementation of ours it is set beside, seconds). The study's
/// sequential Java run stands beside our sequential Rust (each project's
/// own language); its MPJ Express (Java message passing) beside Juxta's
/// communicator; Open MPI beside Open MPI.
pub const MATMUL_SECONDS: [(&str, &str, f64); 7] = [
    ("sequential g++ without optimisation", "c-O0", 198.89),
    ("sequential g++ -O3", "c-O3", 129.09),
    ("sequential Java", "rust-seq", 127.30),
    ("Open MPI, two computers", "", 67.78),
    ("MPJ Express, two computers", "", 68.09),
    ("Open MPI, two cores of one computer", "mpi", 64.52),
    ("MPJ Express, two cores of one computer", "juxta", 64.37),
];

/// de Souza et al. (performance-model.md section 5 (b), GigE): ping-pong
/// points the study states as numbers, as (size in bytes, routine, what it
/// is compared with, ratio routine / socket). 200 B: a JXTA pipe 1,677
/// against a Java socket's 439 (units as printed); 600 KB (the largest a
/// JXTA pipe takes): JXTA 165% slower than a Java socket.
pub const MP_PINGPONG_RATIOS: [(f64, &str, f64); 2] = [
    (200.0, "JXTA 2.5 pipe vs Java socket", 1677.0 / 439.0),
    (600_000.0, "JXTA 2.5 vs Java socket", 2.65),
];
