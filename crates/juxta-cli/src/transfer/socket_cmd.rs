//! `juxta socket listen NAME` / `juxta socket connect NAME`: netcat over a
//! JXTA socket found by pipe name. stdin goes to the other side's stdout,
//! both ways; the end of stdin half-closes the sending direction, and the
//! command ends when both directions are done.

use std::sync::Arc;

use juxta::socket::{JxtaServerSocket, JxtaSocket};
use juxta::Peer;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::send::socket_config;
use super::{
    announce, connect_all, find_name, publish_name, stdin_reader, write_stdout, MeetOpts, PeerOpts,
    TransferError,
};

/// `juxta socket` subcommands.
#[derive(clap::Subcommand, Clone, Debug)]
pub enum SocketCmd {
    /// Open a server socket named NAME (published for discovery), accept
    /// one connection and join it to stdin/stdout.
    Listen {
        /// The socket's (pipe's) name.
        name: String,
        #[command(flatten)]
        meet: MeetOpts,
        #[command(flatten)]
        peer: PeerOpts,
    },
    /// Find the socket named NAME, connect, and join it to stdin/stdout.
    Connect {
        /// The socket's (pipe's) name.
        name: String,
        #[command(flatten)]
        meet: MeetOpts,
        #[command(flatten)]
        peer: PeerOpts,
    },
}

/// `juxta socket`.
pub async fn main(c: SocketCmd) -> Result<(), TransferError> {
    match c {
        SocketCmd::Listen { name, meet, peer } => {
            let listen = meet
                .listen
                .unwrap_or_else(|| "0.0.0.0:0".parse().expect("addr"));
            let p = peer.start(Some(listen), &meet.seed).await?;
            connect_all(&p, &meet.connect).await?;
            let adv = publish_name(&p, &name).await?;
            let mut server = JxtaServerSocket::bind(&p, &adv, socket_config())?;
            announce(&p, "socket", &name);
            let s = tokio::select! {
                s = server.accept() => s?,
                r = tokio::signal::ctrl_c() => {
                    r.map_err(TransferError::io("waiting for Ctrl-C"))?;
                    return Ok(());
                }
            };
            eprintln!("juxta: connection from {}", s.remote());
            splice(s, p).await
        }
        SocketCmd::Connect { name, meet, peer } => {
            if meet.connect.is_empty() && meet.seed.is_empty() {
                return Err(TransferError::NowhereToLook);
            }
            let timeout = peer.timeout()?;
            let p = peer.start(meet.connect_listen(), &meet.seed).await?;
            let direct = connect_all(&p, &meet.connect).await?;
            for d in &direct {
                if let Ok(m) = p.messenger(d) {
                    m.wait_compact(timeout.min(std::time::Duration::from_secs(5)))
                        .await;
                }
            }
            let (adv, holder) = find_name(&p, &name, &direct, timeout).await?;
            let mut cfg = socket_config();
            cfg.connect_timeout = timeout;
            let s = JxtaSocket::connect(&p.pipes(), &adv, holder, cfg).await?;
            splice(s, p).await
        }
    }
}

/// Copies stdin to the socket and the socket to stdout until both
/// directions ended (stdin's end is sent as a half-close). The side whose
/// sending ended last then waits (up to 10 s) for the other to close the
/// connection, so that its last bytes are read before it exits. Either
/// side then closes its peer gracefully ([`Peer::close`]): a half-close
/// only hands the last bytes to the connection, and a process that ended
/// with its peer merely dropped would cut the connection under bytes
/// still queued for the other side (seen in CI: the connector lost the
/// end of the listener's data when the listener's sending ended first).
async fn splice(s: JxtaSocket, peer: Arc<Peer>) -> Result<(), TransferError> {
    let remote = s.remote();
    let down_first = std::sync::atomic::AtomicBool::new(false);
    let up_done = std::sync::atomic::AtomicBool::new(false);
    let (mut rd, mut wr) = tokio::io::split(s);
    let up = async {
        let mut stdin = stdin_reader(false);
        while let Some(chunk) = stdin.recv().await {
            let chunk = chunk.map_err(TransferError::io("reading stdin"))?;
            wr.write_all(&chunk)
                .await
                .map_err(TransferError::io("sending"))?;
            wr.flush().await.map_err(TransferError::io("sending"))?;
        }
        wr.shutdown().await.map_err(TransferError::io("closing"))?;
        up_done.store(true, std::sync::atomic::Ordering::SeqCst);
        Ok::<(), TransferError>(())
    };
    let down = async {
        let mut buf = vec![0u8; 64 << 10];
        loop {
            let n = rd
                .read(&mut buf)
                .await
                .map_err(TransferError::io("receiving"))?;
            if n == 0 {
                if !up_done.load(std::sync::atomic::Ordering::SeqCst) {
                    down_first.store(true, std::sync::atomic::Ordering::SeqCst);
                }
                return Ok::<(), TransferError>(());
            }
            write_stdout(&buf[..n])?;
        }
    };
    let (a, b) = tokio::join!(up, down);
    b?;
    a?;
    if down_first.load(std::sync::atomic::Ordering::SeqCst) {
        let end = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
        while peer.is_connected_to(&remote) && tokio::time::Instant::now() < end {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }
    peer.close().await?;
    Ok(())
}
