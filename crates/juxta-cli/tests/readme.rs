//! README.md's "Using it" session, run exactly as written (a rendezvous
//! and an edge as daemons, the operator commands, metrics, a file sent by
//! ticket), with free ports in place of the ones it names.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const MARK: &str = "<!-- readme-session: run by crates/juxta-cli/tests/readme.rs -->";

/// The shell block after the marker.
fn session() -> String {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md"))
        .expect("README.md");
    let after = &readme[readme.find(MARK).expect("the session marker") + MARK.len()..];
    let body = after
        .trim_start()
        .strip_prefix("```sh\n")
        .expect("a sh block after the marker");
    body[..body.find("```").expect("the block's end")].to_string()
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[test]
fn the_readme_session_runs_as_written() {
    let script = session();
    for port in ["127.0.0.1:9701", "127.0.0.1:9100"] {
        assert!(script.contains(port), "the session names {port}");
    }
    let script = script
        .replace("127.0.0.1:9701", &format!("127.0.0.1:{}", free_port()))
        .replace("127.0.0.1:9100", &format!("127.0.0.1:{}", free_port()));
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("session.sh"), &script).unwrap();
    let bin = std::path::Path::new(env!("CARGO_BIN_EXE_juxta"))
        .parent()
        .unwrap()
        .to_path_buf();
    let path = std::env::join_paths(
        std::iter::once(bin).chain(std::env::split_paths(&std::env::var_os("PATH").unwrap())),
    )
    .unwrap();
    let mut child = Command::new("bash")
        .args(["-e", "session.sh"])
        .current_dir(dir.path())
        .env("PATH", path)
        // The commands' default homes (~/.juxta/cli-<n>) land here.
        .env("HOME", dir.path())
        // No daemon of the developer's may serve the session's `juxta send`.
        .env_remove("JUXTA_HOME")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("bash");
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    // A hang (a peer that never answers) ends the session: bash gets
    // SIGTERM, its EXIT trap stops the peers it started.
    let end = Instant::now() + Duration::from_secs(120);
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if Instant::now() > end {
            let _ = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status();
            let st = child.wait().unwrap();
            panic!(
                "the session hung ({st}); stderr:\n{}",
                err_reader.join().unwrap()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let out = reader.join().unwrap();
    let err = err_reader.join().unwrap();
    assert!(status.success(), "{status}\nstdout:\n{out}\nstderr:\n{err}");
    assert!(out.contains("rendezvous, relay"), "{out}");
    assert!(out.contains("1 edges leased"), "{out}");
    assert!(out.contains("juxta_messages_in_total"), "{out}");
    assert!(out.contains("jxta:PA"), "the edge found a peer: {out}");
    assert_eq!(out.lines().last(), Some("hello from juxta"), "{out}");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("got/notes.txt")).unwrap(),
        "hello from juxta\n"
    );
}
