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

/// A table or figure of one of the studies, and where the report
/// reproduces it (or why it cannot).
#[derive(Debug, Clone, Copy)]
pub struct StudyFigure {
    /// Stable id (the study and its number where the sources give one,
    /// e.g. `thesis-fig-6.1`, else the study and the topic).
    pub id: &'static str,
    /// The study: `thesis` (Halepovic 2004), `juxtest` (Antoniu, Jan and
    /// Noblet RR-5718 / HPCC'05), `desouza` (de Souza et al.).
    pub study: &'static str,
    /// What the figure or table shows.
    pub title: &'static str,
    /// The published values, labelled as absolute or as ratios.
    pub published: &'static str,
    /// The report section that reproduces it.
    pub section: &'static str,
    /// Our plots and tables that carry it (element ids).
    pub ours: &'static [&'static str],
    /// Why the report cannot reproduce it (`None`: it can, with the
    /// command the `how` field names).
    pub cannot: Option<&'static str>,
    /// The command that measures it.
    pub how: &'static str,
    /// The network profile that emulates the study's link, when its
    /// figures depend on it (`None`: any); a run on another profile
    /// measures the figure but not under the study's conditions, and the
    /// table of contents says so.
    pub link: Option<&'static str>,
}

/// Every table and figure of the studies the Performance Model lists
/// (performance-model.md sections 2, 3 and 5), in study order.
pub const STUDY_FIGURES: &[StudyFigure] = &[
    StudyFigure {
        id: "juxtest-lan-layers",
        study: "juxtest",
        title: "Layer bandwidth and latency on Fast Ethernet (endpoint, unicast pipe, JXTA socket; J2SE 2.2.1, 2.3, JXTA-C)",
        published: "absolute and as ratios to the 11.2 MB/s / 70 us socket bound: see the published table of the pingpong section",
        section: "sec-pingpong",
        ours: &["table-pingpong-published", "plot-pingpong-bandwidth", "plot-pingpong-rtt-1b"],
        cannot: None,
        how: "juxta bench (pingpong; --net lan for the link)",
        link: Some("lan"),
    },
    StudyFigure {
        id: "juxtest-jxta-c",
        study: "juxtest",
        title: "J2SE 2.2.1/2.3 against JXTA-C 2.1.1 (LAN and SAN)",
        published: "absolute: JXTA-C endpoint 11.16 MB/s, pipe 11.1 MB/s, endpoint 820 us, pipe 1.99 ms (LAN); endpoint 135/103 MB/s, pipe 133/96 MB/s (SAN)",
        section: "sec-pingpong",
        ours: &["table-pingpong-published", "table-like-for-like"],
        cannot: Some("no JXTA-C build here: the published JXTA-C rows stand beside Juxta and, with --impl jxse, JXSE 2.7 (the J2SE line's successor)"),
        how: "juxta bench --impl jxse",
        link: None,
    },
    StudyFigure {
        id: "juxtest-wire-bytes",
        study: "juxtest",
        title: "Bytes on the wire for a 1-byte payload",
        published: "absolute: endpoint 300 (J2SE) / 239 (C); unicast pipe 877 / 834; JXTA socket 909-913",
        section: "sec-pingpong",
        ours: &["table-pingpong-wire", "plot-pingpong-wire"],
        cannot: None,
        how: "juxta bench (pingpong)",
        link: None,
    },
    StudyFigure {
        id: "juxtest-san-layers",
        study: "juxtest",
        title: "Layer bandwidth and latency on the SAN (GigE, Myrinet)",
        published: "ratios to the GigE (115 MB/s, 45 us) and Myrinet (155 MB/s, 60 us) socket bounds: see the published table of the pingpong section",
        section: "sec-pingpong",
        ours: &["table-pingpong-published", "plot-pingpong-bandwidth"],
        cannot: None,
        how: "juxta bench --net san",
        link: Some("san"),
    },
    StudyFigure {
        id: "juxtest-fig-9",
        study: "juxtest",
        title: "JXTA socket output buffer: 16 KB default vs 512 KB (Fig. 9 and the SAN tables)",
        published: "absolute: 9.48 / 9.72 MB/s (16 KB) vs 11.12 / 10.96 MB/s (512 KB) on the LAN; 12 vs 92 MB/s on the SAN",
        section: "sec-buffers",
        ours: &["plot-buffers", "table-buffers"],
        cannot: None,
        how: "juxta bench (buffers; --net san or wan)",
        link: Some("san"),
    },
    StudyFigure {
        id: "juxtest-wan",
        study: "juxtest",
        title: "Bandwidth over the Grid'5000 WAN (1 Gb/s, 11.2 ms RTT), default and tuned TCP buffers",
        published: "absolute: 6 MB/s (2.2.1) and under 1 MB/s (2.3.2) with default buffers; ~107 MB/s (endpoint and pipe, tuned); JXTA-C 94 MB/s at 4 MB",
        section: "sec-pingpong",
        ours: &["plot-pingpong-bandwidth", "plot-throughput-mbs", "plot-buffers"],
        cannot: None,
        how: "juxta bench --net wan",
        link: Some("wan"),
    },
    StudyFigure {
        id: "thesis-fig-6.1",
        study: "thesis",
        title: "Advertisement cache size vs start-up time",
        published: "cache sizes 10 to 1,000 advertisements on local disk (no values in the summary: ours absolute)",
        section: "sec-ops",
        ours: &["plot-ops-cache"],
        cannot: None,
        how: "juxta bench ops --cache-sizes 10,100,1000 (the suite: to 10,000; --full to 1,000,000)",
        link: None,
    },
    StudyFigure {
        id: "thesis-ops-tcp-lan",
        study: "thesis",
        title: "Typical peer operations, TCP rendezvous on the LAN (mean ms per operation)",
        published: "absolute (JXTA 2.0, 800 MHz PCs): start 5,311; secure group 1,447; join 5.4; input pipe 10.7; cached peers 29.3; remote peers 880.8; cached pipe 2.0; remote pipe 478.7; output pipe 860.7; publish 294.8; total 9,321",
        section: "sec-ops",
        ours: &["table-ops", "plot-ops"],
        cannot: None,
        how: "juxta bench (ops)",
        link: None,
    },
    StudyFigure {
        id: "thesis-ops-totals",
        study: "thesis",
        title: "Typical operations totals: ad hoc, HTTP rendezvous, WAN and 56 kbps modem",
        published: "absolute: ad-hoc total 8,048 ms; 56 kbps WAN total 13,414 ms",
        section: "sec-ops",
        ours: &["table-ops"],
        cannot: Some("one network profile per run: the ad-hoc and HTTP-rendezvous totals come from a loopback run (HTTP rendezvous under --full), the WAN and 56 kbps rows from a run with --net wan or --net modem56k"),
        how: "juxta bench --full (ops); juxta bench ops --net wan|modem56k --configs ad-hoc,rendezvous,http-rendezvous",
        link: None,
    },
    StudyFigure {
        id: "thesis-pipe-rates",
        study: "thesis",
        title: "Pipe send rates: unicast, secure, propagate (smooth and bursty)",
        published: "absolute: unicast ~115 msg/s (1.0), up to 179 msg/s bursty (2.0); secure ~23 msg/s (1.0); propagate ~9-20 msg/s",
        section: "sec-throughput",
        ours: &["table-throughput-published", "plot-throughput-msgs", "plot-throughput-paced"],
        cannot: None,
        how: "juxta bench (throughput; the send-rate sweep under --full)",
        link: None,
    },
    StudyFigure {
        id: "thesis-composition",
        study: "thesis",
        title: "Message composition: 20 KB as 1x20 KB, 5x4 KB, 10x2 KB, 20x1 KB",
        published: "relative: 20 small elements cost 24-100% more RTT than one large one (1.0), little in 2.0",
        section: "sec-composition",
        ours: &["plot-composition", "table-composition"],
        cannot: None,
        how: "juxta bench (composition; every layer under --full)",
        link: None,
    },
    StudyFigure {
        id: "thesis-propagate-receivers",
        study: "thesis",
        title: "Propagate pipe to 1, 2, 4, 8 receivers",
        published: "absolute: ~9-20 msg/s, stable from 1 to 8 receivers",
        section: "sec-propagate",
        ours: &["plot-propagate-receivers", "table-propagate"],
        cannot: None,
        how: "juxta bench (pingpong propagate)",
        link: None,
    },
    StudyFigure {
        id: "thesis-figs-6.14-6.17",
        study: "thesis",
        title: "Many-to-one: 1, 2, 4, 8 senders into one pipe (throughput and RTT)",
        published: "no values in the summary",
        section: "sec-senders",
        ours: &["plot-senders-msgs", "plot-senders-mbs", "plot-senders-rtt"],
        cannot: None,
        how: "juxta bench (senders; one-way throughput under --full)",
        link: None,
    },
    StudyFigure {
        id: "thesis-rendezvous-response",
        study: "thesis",
        title: "Rendezvous query response time vs query rate per search model and group size",
        published: "absolute: centralized under 1 s at 2-4 q/s, tens to hundreds of seconds at 8 q/s",
        section: "sec-rendezvous",
        ours: &["plot-rendezvous-response-qps", "plot-rendezvous-response-edges", "table-rendezvous"],
        cannot: None,
        how: "juxta bench (rendezvous; the thesis' sweep under --full)",
        link: None,
    },
    StudyFigure {
        id: "thesis-rendezvous-loss",
        study: "thesis",
        title: "Rendezvous query loss vs query rate per search model",
        published: "absolute: flooding loses over 80% at high load; SRDI no or negligible loss up to 8 q/s, a second rendezvous helps at 16 q/s",
        section: "sec-rendezvous",
        ours: &["plot-rendezvous-loss-qps", "plot-rendezvous-loss-edges", "table-rendezvous"],
        cannot: None,
        how: "juxta bench (rendezvous; --full)",
        link: None,
    },
    StudyFigure {
        id: "thesis-rendezvous-cv",
        study: "thesis",
        title: "Coefficient of variation of rendezvous response times",
        published: "absolute: mostly 50% or more",
        section: "sec-rendezvous",
        ours: &["plot-rendezvous-cv-qps", "table-rendezvous"],
        cannot: None,
        how: "juxta bench (rendezvous)",
        link: None,
    },
    StudyFigure {
        id: "thesis-rendezvous-memory",
        study: "thesis",
        title: "Rendezvous memory over 12 hours (SRDI)",
        published: "absolute: grew 45 MB in 12 h (a leak)",
        section: "sec-soak",
        ours: &["plot-soak-rss", "table-soak"],
        cannot: Some("no 12-hour run in the suite: the opt-in soak (juxta bench soak --minutes N) samples the rendezvous' RSS under a mixed load"),
        how: "juxta bench soak --minutes 720",
        link: None,
    },
    StudyFigure {
        id: "thesis-recovery",
        study: "thesis",
        title: "Recovery after a rendezvous failure (16 edges, 4 rendezvous, one killed every 10 minutes)",
        published: "absolute: 78.4 s mean (fewer than 8 orphaned edges), 100.4 s (more), 60 s of which fixed failure detection; with one rendezvous left some edges never recovered",
        section: "sec-recovery",
        // Only the thesis' procedure counts (the two-rendezvous rows of
        // `table-recovery` are another experiment).
        ours: &["table-recovery-thesis"],
        cannot: None,
        how: "juxta bench recovery --rendezvous 4 --kill-every S --topology ring|star (in juxta bench --full on loopback)",
        link: None,
    },
    StudyFigure {
        id: "thesis-relay-paths",
        study: "thesis",
        title: "RTT and throughput through no relay, one TCP relay, one HTTP relay, two relays",
        published: "qualitative: a TCP transport bug made HTTP relays faster for RTT; two relays made propagate pipes noticeably slow",
        section: "sec-relay",
        ours: &["plot-relay-rtt", "plot-relay-bandwidth", "table-relay"],
        cannot: None,
        how: "juxta bench relay (--layers unicast-pipe,secure-pipe,bidi-pipe,propagate,socket)",
        link: None,
    },
    StudyFigure {
        id: "thesis-relay-overload",
        study: "thesis",
        title: "Relay overload: offered vs received rate",
        published: "absolute: relays collapsed after ~2,000-4,000 messages (no flow control)",
        section: "sec-relay",
        ours: &["plot-relay-overload", "plot-relay-overload-loss", "plot-relay-overload-rss"],
        cannot: None,
        how: "juxta bench relay (the curve: --curve-factors or --rates)",
        link: None,
    },
    StudyFigure {
        id: "desouza-matmul",
        study: "desouza",
        title: "Matrix multiplication, sequential and on 2 processes",
        published: "absolute (Athlon64 5200+): g++ -O0 198.89 s, -O3 129.09 s, Java 127.30 s; Open MPI 67.78 s, MPJ Express 68.09 s on two computers",
        section: "sec-mp",
        ours: &["table-matmul"],
        cannot: None,
        how: "juxta bench mp",
        link: None,
    },
    StudyFigure {
        id: "desouza-pingpong",
        study: "desouza",
        title: "Ping-pong RTT of small, medium and large messages: sockets, Open MPI, MPJ Express, JXTA pipes and sockets",
        published: "relative: a 200 B JXTA pipe 3.8x a Java socket (1,677 vs 439); 600 KB 165% slower",
        section: "sec-mp",
        ours: &["table-mp-pingpong", "plot-mp-rtt-small", "plot-mp-rtt-medium", "plot-mp-rtt-large"],
        cannot: None,
        how: "juxta bench mp",
        link: None,
    },
];
