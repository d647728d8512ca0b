//! `juxta peer` as a daemon, run as the real binary: settings from TOML
//! files in temporary homes on 127.0.0.1 ephemeral ports, the operator
//! commands over the control socket, metrics, bad input, SIGTERM.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

const JUXTA: &str = env!("CARGO_BIN_EXE_juxta");

/// A pipe advertisement named `name` with a fixed ID ending in `tail`.
fn pipe_adv(name: &str, tail: &str) -> String {
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<!DOCTYPE jxta:PipeAdvertisement>\n\
         <jxta:PipeAdvertisement xmlns:jxta=\"http://jxta.org\">\n\
         <Id>urn:jxta:cbid-59616261646162614E50472050325033112233445566778811223344556677{tail}04</Id>\n\
         <Type>JxtaUnicast</Type>\n<Name>{name}</Name>\n</jxta:PipeAdvertisement>\n"
    )
}

/// A private home directory (mode 0700) under `root`.
fn home(root: &Path, name: &str) -> PathBuf {
    let h = root.join(name);
    std::fs::create_dir_all(&h).unwrap();
    std::fs::set_permissions(&h, std::fs::Permissions::from_mode(0o700)).unwrap();
    h
}

/// A running daemon (killed if the test fails before stopping it).
struct Daemon {
    child: Option<Child>,
    home: PathBuf,
    peer_id: String,
}

impl Daemon {
    /// Starts `juxta peer --home H` (settings from H/juxta.toml) and
    /// waits for its `ready` line.
    fn start(home: &Path) -> Daemon {
        let mut child = Command::new(JUXTA)
            .args(["peer", "--home"])
            .arg(home)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn juxta peer");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for l in BufReader::new(stdout).lines() {
                let Ok(l) = l else { break };
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        let mut peer_id = String::new();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(l) if l == "ready" => break,
                Ok(l) => {
                    if let Some(rest) = l.strip_prefix("peer ") {
                        peer_id = rest.split_whitespace().next().unwrap().to_string();
                    }
                }
                Err(e) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    panic!("daemon in {} not ready: {e}", home.display());
                }
            }
        }
        assert!(peer_id.starts_with("urn:jxta:"), "{peer_id}");
        Daemon {
            child: Some(child),
            home: home.to_path_buf(),
            peer_id,
        }
    }

    /// `juxta <cmd> --home H --json <args>`: the result on success.
    fn ask(&self, cmd: &str, args: &[&str]) -> Value {
        let o = juxta_home(cmd, &self.home, &[&["--json"], args].concat());
        let text = String::from_utf8_lossy(&o.stdout);
        let v: Value = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("{cmd}: {e}: {text} {}", stderr(&o)));
        assert!(o.status.success(), "{cmd} failed: {v}");
        assert_eq!(v["ok"], true, "{v}");
        v["result"].clone()
    }

    fn status(&self) -> Value {
        self.ask("status", &[])
    }

    /// Sends SIGTERM and waits (at most 10 s) for the exit status.
    fn stop(mut self) -> std::process::ExitStatus {
        let mut child = self.child.take().unwrap();
        let st = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .unwrap();
        assert!(st.success());
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(s) = child.try_wait().unwrap() {
                return s;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("daemon did not exit within 10 s of SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn juxta_home(cmd: &str, home: &Path, args: &[&str]) -> Output {
    Command::new(JUXTA)
        .arg(cmd)
        .arg("--home")
        .arg(home)
        .args(args)
        .output()
        .expect("run juxta")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Polls `f` until it returns `Some` (at most 30 s).
fn eventually<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(t) = f() {
            return t;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn http_get(addr: &str, path: &str) -> String {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

#[test]
fn a_rendezvous_and_two_edges_answer_the_operator_commands() {
    let root = tempfile::tempdir().unwrap();
    let rdv_home = home(root.path(), "rdv");
    std::fs::write(
        rdv_home.join("juxta.toml"),
        "# a rendezvous that is also a relay\n\
         listen = \"127.0.0.1:0\"\n\
         roles = [\"rendezvous\", \"relay\"]\n\
         key_bits = 1024\n\
         metrics = \"127.0.0.1:0\"\n\
         [limits]\nrendezvous_clients = 100\n",
    )
    .unwrap();
    let rdv = Daemon::start(&rdv_home);
    let st = rdv.status();
    assert_eq!(st["peer_id"], rdv.peer_id.as_str());
    assert_eq!(st["roles"], serde_json::json!(["rendezvous", "relay"]));
    assert_eq!(st["rendezvous"]["is_rendezvous"], true);
    assert!(st["relay"].is_object(), "{st}");
    let rdv_addr = st["addresses"]["tcp"].as_str().unwrap().to_string();
    let metrics_addr = st["addresses"]["metrics"].as_str().unwrap().to_string();

    // `juxta id` reads the same identity.
    let o = Command::new(JUXTA)
        .args(["id", "--home"])
        .arg(&rdv_home)
        .output()
        .unwrap();
    assert!(o.status.success());
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), rdv.peer_id);

    // Edge A listens, publishes an advertisement from its settings and
    // creates a group; edge B does not listen (reached through the relay).
    let a_home = home(root.path(), "a");
    std::fs::write(a_home.join("chat.xml"), pipe_adv("chat-room", "01")).unwrap();
    std::fs::write(
        a_home.join("juxta.toml"),
        format!(
            "listen = \"127.0.0.1:0\"\nseeds = [\"{rdv_addr}\"]\nkey_bits = 1024\n\
             publish = [\"chat.xml\"]\n\
             [[groups]]\nname = \"team\"\naction = \"create\"\npassword = \"pw\"\n\
             [log]\nformat = \"json\"\nlevel = \"warn\"\n"
        ),
    )
    .unwrap();
    let a = Daemon::start(&a_home);
    let b_home = home(root.path(), "b");
    std::fs::write(
        b_home.join("juxta.toml"),
        format!(
            "seeds = [\"{rdv_addr}\"]\nkey_bits = 1024\n\
             [[groups]]\nname = \"team\"\npassword = \"pw\"\n"
        ),
    )
    .unwrap();
    let b = Daemon::start(&b_home);

    for e in [&a, &b] {
        eventually("rendezvous lease", || {
            let st = e.status();
            (st["rendezvous"]["leased_to"] == rdv.peer_id.as_str()).then_some(())
        });
    }
    eventually("relay lease of B", || {
        (b.status()["relay"]["leased_to"] == rdv.peer_id.as_str()).then_some(())
    });
    let st = rdv.status();
    assert_eq!(st["rendezvous"]["clients"], 2, "{st}");
    assert_eq!(st["connections"], 2, "{st}");
    assert!(st["counters"]["messages_in"].as_u64().unwrap() > 0, "{st}");
    assert!(st["counters"]["bytes_out"].as_u64().unwrap() > 0, "{st}");

    // peers: the rendezvous is connected to both edges.
    let p = rdv.ask("peers", &[]);
    let connected: Vec<&str> = p["connected"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["peer"].as_str().unwrap())
        .collect();
    assert!(connected.contains(&a.peer_id.as_str()), "{p}");
    assert!(connected.contains(&b.peer_id.as_str()), "{p}");

    // groups: A created "team"; B joined it, found by name through the
    // rendezvous.
    let g = a.ask("groups", &[]);
    assert_eq!(g["joined"][0]["name"], "team", "{g}");
    let team = g["joined"][0]["id"].clone();
    let gb = eventually("B joining team", || {
        let g = b.ask("groups", &[]);
        (g["joined"].as_array().unwrap().len() == 1).then_some(g)
    });
    assert_eq!(gb["joined"][0]["id"], team, "{gb}");

    // publish from the command line, then B finds both advertisements
    // through the rendezvous.
    let adv2 = root.path().join("board.xml");
    std::fs::write(&adv2, pipe_adv("chat-board", "02")).unwrap();
    let r = a.ask("publish", &[adv2.to_str().unwrap()]);
    assert_eq!(r["published"]["type"], "jxta:PipeAdvertisement", "{r}");
    assert_eq!(r["published"]["fields"]["Name"], "chat-board", "{r}");
    let names = eventually("remote discovery", || {
        let d = b.ask(
            "discover",
            &[
                "--remote",
                "--type",
                "adv",
                "--attr",
                "Name",
                "--value",
                "chat-*",
                "--threshold",
                "5",
            ],
        );
        let names: Vec<String> = d["advertisements"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a["fields"]["Name"].as_str().unwrap_or("").to_string())
            .collect();
        (names.len() >= 2).then_some(names)
    });
    assert!(names.contains(&"chat-room".to_string()), "{names:?}");
    assert!(names.contains(&"chat-board".to_string()), "{names:?}");
    // Local discovery on A sees its own advertisements.
    let d = a.ask("discover", &["--attr", "Name", "--value", "chat-room"]);
    assert_eq!(d["advertisements"].as_array().unwrap().len(), 1, "{d}");
    assert_eq!(d["remote"], false);

    // route: B reaches the rendezvous directly; A reaches B (who does not
    // listen) through the relay.
    let r = b.ask("route", &[&rdv.peer_id]);
    assert_eq!(r["how"], "direct", "{r}");
    assert_eq!(r["addr"], rdv_addr.as_str(), "{r}");
    let r = a.ask("route", &[&b.peer_id]);
    assert_eq!(r["how"], "relayed", "{r}");
    assert_eq!(r["hops"], serde_json::json!([rdv.peer_id]), "{r}");
    // A route to nobody: a typed error.
    let o = juxta_home(
        "route",
        &a_home,
        &[
            "--json",
            &format!(
                "urn:jxta:cbid-59616261646162614A78746150325033{}03",
                "AB".repeat(16)
            ),
        ],
    );
    assert!(!o.status.success());
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["ok"], false);
    assert_eq!(v["error"]["kind"], "no_route", "{v}");
    let o = juxta_home("route", &a_home, &["--json", "not-a-peer"]);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["error"]["kind"], "invalid_argument", "{v}");

    // Human output names the fields.
    let o = juxta_home("status", &rdv_home, &[]);
    assert!(o.status.success());
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains(&rdv.peer_id)
            && text.contains("rendezvous")
            && text.contains("2 edges leased"),
        "{text}"
    );

    // Metrics: Prometheus text with the expected names.
    let m = http_get(&metrics_addr, "/metrics");
    assert!(m.starts_with("HTTP/1.1 200"), "{m}");
    for name in [
        "# TYPE juxta_bytes_in counter",
        "juxta_bytes_in_total ",
        "juxta_bytes_out_total ",
        "juxta_messages_in_total ",
        "juxta_messages_out_total ",
        "juxta_connections 2",
        "juxta_rendezvous_leases 2",
        "juxta_rendezvous_queries_answered_total ",
        "juxta_rendezvous_queries_refused_total ",
        "juxta_relay_clients 1",
        "juxta_relay_queue_depth ",
        "juxta_relay_refusals_total{reason=\"queue_full\"} ",
        "juxta_relay_pushed_back_total ",
        "juxta_errors_total{kind=\"frame_timeout\"} ",
        "# EOF",
    ] {
        assert!(m.contains(name), "{name} missing from:\n{m}");
    }
    assert!(http_get(&metrics_addr, "/other").starts_with("HTTP/1.1 404"));

    // SIGTERM: each exits 0, and removes its control socket.
    for d in [b, a, rdv] {
        let h = d.home.clone();
        let st = d.stop();
        assert!(st.success(), "{st:?}");
        assert!(!h.join("control.sock").exists());
    }
}

#[test]
fn a_config_error_names_file_line_and_key_before_anything_starts() {
    let root = tempfile::tempdir().unwrap();
    let h = home(root.path(), "h");
    let file = h.join("juxta.toml");
    std::fs::write(
        &file,
        "listen = \"127.0.0.1:0\"\nkey_bits = 1024\n\n[limits]\nmax_conections = 10\n",
    )
    .unwrap();
    let o = Command::new(JUXTA)
        .args(["peer", "--home"])
        .arg(&h)
        .output()
        .unwrap();
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(e.contains(&format!("{}:5:", file.display())), "{e}");
    assert!(e.contains("max_conections"), "{e}");
    assert!(!h.join("identity.key").exists(), "nothing may start");
    assert!(!h.join("control.sock").exists());

    // A malformed value: its key and line; an explicit --config too.
    let other = root.path().join("other.toml");
    std::fs::write(&other, "roles = [\"edge\"]\nseeds = [\"nowhere\"]\n").unwrap();
    let o = Command::new(JUXTA)
        .args(["peer", "--home"])
        .arg(&h)
        .arg("--config")
        .arg(&other)
        .output()
        .unwrap();
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(
        e.contains(&format!("{}:2:", other.display())) && e.contains("seeds"),
        "{e}"
    );
    // Contradicting roles.
    std::fs::write(&other, "roles = [\"edge\", \"rendezvous\"]\n").unwrap();
    let o = Command::new(JUXTA)
        .args(["peer", "--home"])
        .arg(&h)
        .arg("--config")
        .arg(&other)
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("edge or a rendezvous"),
        "{}",
        stderr(&o)
    );
    // A missing --config file.
    let o = Command::new(JUXTA)
        .args(["peer", "--home"])
        .arg(&h)
        .arg("--config")
        .arg(root.path().join("absent.toml"))
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(stderr(&o).contains("absent.toml"), "{}", stderr(&o));
    // No daemon: the commands say so.
    let o = juxta_home("status", &h, &[]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("no peer daemon"), "{}", stderr(&o));
}

#[test]
fn unsafe_homes_and_sockets_are_refused_and_bad_requests_get_typed_errors() {
    let root = tempfile::tempdir().unwrap();
    // A home others may write to: the daemon does not start.
    let open = home(root.path(), "open");
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    let o = Command::new(JUXTA)
        .args(["peer", "--key-bits", "1024", "--home"])
        .arg(&open)
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("writable by group or others"),
        "{}",
        stderr(&o)
    );

    let h = home(root.path(), "h");
    let d = Command::new(JUXTA)
        .args([
            "peer",
            "--key-bits",
            "1024",
            "--listen",
            "127.0.0.1:0",
            "--home",
        ])
        .arg(&h)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut d = DaemonGuard(Some(d));
    let out = d.0.as_mut().unwrap().stdout.take().unwrap();
    let mut lines = BufReader::new(out).lines();
    while let Some(Ok(l)) = lines.next() {
        if l == "ready" {
            break;
        }
    }
    let sock = h.join("control.sock");
    let mode = std::fs::metadata(&sock).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);

    // Garbage, unknown requests, bad arguments: typed errors, the daemon
    // keeps serving.
    let ask = |line: &[u8]| -> Value {
        let s = std::os::unix::net::UnixStream::connect(&sock).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let data = line.to_vec();
        let mut w = s.try_clone().unwrap();
        // The daemon may stop reading (too large) before all is written.
        let t = std::thread::spawn(move || {
            let _ = w.write_all(&data);
        });
        let mut r = BufReader::new(s);
        let mut resp = String::new();
        r.read_line(&mut resp).unwrap();
        drop(r);
        let _ = t.join();
        serde_json::from_str(&resp).unwrap_or_else(|e| panic!("{e}: {resp:?}"))
    };
    assert_eq!(ask(b"\x00\x01garbage\n")["error"]["kind"], "bad_request");
    assert_eq!(
        ask(b"{\"request\": \"reboot\"}\n")["error"]["kind"],
        "unknown_request"
    );
    assert_eq!(ask(b"{\"no\": 1}\n")["error"]["kind"], "bad_request");
    assert_eq!(
        ask(b"{\"request\": \"discover\", \"kind\": \"cats\"}\n")["error"]["kind"],
        "invalid_argument"
    );
    assert_eq!(
        ask(b"{\"request\": \"publish\", \"xml\": \"<nope/>\"}\n")["error"]["kind"],
        "invalid_argument"
    );
    let huge = vec![b'x'; 3 << 20];
    assert_eq!(ask(&huge)["error"]["kind"], "too_large");
    let v = ask(b"{\"request\": \"status\"}\n");
    assert_eq!(v["ok"], true, "{v}");
    // A silent client does not block others.
    let _silent = std::os::unix::net::UnixStream::connect(&sock).unwrap();
    assert_eq!(ask(b"{\"request\": \"peers\"}\n")["ok"], true);

    // A socket open to others is refused by the client.
    std::fs::set_permissions(&sock, std::fs::Permissions::from_mode(0o666)).unwrap();
    let o = juxta_home("status", &h, &[]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("open to group or others"),
        "{}",
        stderr(&o)
    );
    std::fs::set_permissions(&sock, std::fs::Permissions::from_mode(0o600)).unwrap();
    let o = juxta_home("status", &h, &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    // A socket owned by another user is refused (making one needs root).
    let me = std::os::unix::fs::MetadataExt::uid(&std::fs::metadata(&h).unwrap());
    if me == 0 {
        std::os::unix::fs::chown(&sock, Some(65534), None).unwrap();
        let o = juxta_home("status", &h, &[]);
        assert!(!o.status.success());
        assert!(stderr(&o).contains("owned by uid 65534"), "{}", stderr(&o));
        std::os::unix::fs::chown(&sock, Some(0), None).unwrap();
        assert!(juxta_home("status", &h, &[]).status.success());
    } else {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "the socket-owner check needs root (chown), and CI runs as root"
        );
        println!("skipped: a control socket owned by another user (needs root to chown)");
    }
    // Something else than a socket in its place: refused.
    let fake = home(root.path(), "fake");
    std::fs::write(fake.join("control.sock"), b"").unwrap();
    std::fs::set_permissions(
        fake.join("control.sock"),
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    let o = juxta_home("peers", &fake, &[]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("not a socket"), "{}", stderr(&o));

    let mut c = d.0.take().unwrap();
    Command::new("kill")
        .args(["-TERM", &c.id().to_string()])
        .status()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let st = loop {
        if let Some(s) = c.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "no exit within 10 s of SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(st.success(), "{st:?}");
}

/// Kills the child if the test fails first.
struct DaemonGuard(Option<Child>);

impl Drop for DaemonGuard {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
