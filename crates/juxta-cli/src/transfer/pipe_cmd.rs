//! `juxta pipe listen NAME` / `juxta pipe send NAME`: messages over a
//! unicast pipe whose advertisement is found by name through discovery.
//! Each stdin line (or each file given) is one message; the listener
//! writes every message's bytes to stdout as they arrive.

use std::path::PathBuf;
use std::time::Duration;

use juxta::proto::message::{Element, Message};

use super::{
    announce, connect_all, find_name, publish_name, stdin_reader, write_stdout, MeetOpts, PeerOpts,
    TransferError,
};

/// Namespace of the data element.
pub const NS: &str = "juxta-cli";
/// Name of the data element.
pub const ELEMENT: &str = "data";
/// Largest file sent as one message (the wire limit is 64 MiB).
pub const MAX_FILE: u64 = 60 << 20;

/// `juxta pipe` subcommands.
#[derive(clap::Subcommand, Clone, Debug)]
pub enum PipeCmd {
    /// Open an input pipe named NAME (published for discovery) and write
    /// every message received to stdout.
    Listen {
        /// The pipe's name.
        name: String,
        /// Exit after this many messages.
        #[arg(long)]
        count: Option<u64>,
        #[command(flatten)]
        meet: MeetOpts,
        #[command(flatten)]
        peer: PeerOpts,
    },
    /// Find the pipe named NAME and send each stdin line (or each FILE)
    /// to it as one message.
    Send {
        /// The pipe's name.
        name: String,
        /// Files to send, one message each (default: stdin lines).
        files: Vec<PathBuf>,
        /// Milliseconds to wait after the last message before exiting (the
        /// connection's last bytes leave meanwhile).
        #[arg(long, default_value_t = 300)]
        linger_ms: u64,
        #[command(flatten)]
        meet: MeetOpts,
        #[command(flatten)]
        peer: PeerOpts,
    },
}

/// `juxta pipe`.
pub async fn main(c: PipeCmd) -> Result<(), TransferError> {
    match c {
        PipeCmd::Listen {
            name,
            count,
            meet,
            peer,
        } => listen(name, count, meet, peer).await,
        PipeCmd::Send {
            name,
            files,
            linger_ms,
            meet,
            peer,
        } => send(name, files, linger_ms, meet, peer).await,
    }
}

async fn listen(
    name: String,
    count: Option<u64>,
    meet: MeetOpts,
    opts: PeerOpts,
) -> Result<(), TransferError> {
    let listen = meet
        .listen
        .unwrap_or_else(|| "0.0.0.0:0".parse().expect("addr"));
    let peer = opts.start(Some(listen), &meet.seed).await?;
    connect_all(&peer, &meet.connect).await?;
    let adv = publish_name(&peer, &name).await?;
    let mut input = peer.pipes().create_input_pipe(&adv)?;
    announce(&peer, "pipe", &name);
    let mut n = 0u64;
    if count == Some(0) {
        return Ok(());
    }
    loop {
        tokio::select! {
            m = input.recv() => {
                let Some(m) = m else { return Ok(()) };
                let Some(e) = m.message.get(NS, ELEMENT) else { continue };
                write_stdout(&e.data)?;
                n += 1;
                if count.is_some_and(|c| n >= c) {
                    return Ok(());
                }
            }
            r = tokio::signal::ctrl_c() => {
                r.map_err(TransferError::io("waiting for Ctrl-C"))?;
                return Ok(());
            }
        }
    }
}

async fn send(
    name: String,
    files: Vec<PathBuf>,
    linger_ms: u64,
    meet: MeetOpts,
    opts: PeerOpts,
) -> Result<(), TransferError> {
    if meet.connect.is_empty() && meet.seed.is_empty() {
        return Err(TransferError::NowhereToLook);
    }
    let timeout = opts.timeout()?;
    let peer = opts.start(meet.connect_listen(), &meet.seed).await?;
    let direct = connect_all(&peer, &meet.connect).await?;
    let (adv, holder) = find_name(&peer, &name, &direct, timeout).await?;
    let pipe = peer
        .pipes()
        .create_output_pipe(&adv, &[holder], timeout)
        .await?;
    let msg = |data: Vec<u8>| Message::new().with(Element::bytes(NS, ELEMENT, data));
    if files.is_empty() {
        let mut lines = stdin_reader(true);
        while let Some(line) = lines.recv().await {
            let line = line.map_err(TransferError::io("reading stdin"))?;
            pipe.send(msg(line)).await?;
        }
    } else {
        for f in files {
            let len = std::fs::metadata(&f)
                .map_err(TransferError::io(format!("reading {}", f.display())))?
                .len();
            if len > MAX_FILE {
                return Err(TransferError::TooLarge(f, len, MAX_FILE));
            }
            let data = tokio::fs::read(&f)
                .await
                .map_err(TransferError::io(format!("reading {}", f.display())))?;
            pipe.send(msg(data)).await?;
        }
    }
    tokio::time::sleep(Duration::from_millis(linger_ms)).await;
    Ok(())
}
