//! docs/guide.md, "Secure pipes": messages over TLS 1.3 between peer
//! identities; the receiver learns who sent each message from the
//! certificate, not from anything the sender claims.

use std::time::Duration;

use juxta::prelude::*;
use juxta_guide::Scratch;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let scratch = Scratch::new("secure");
    let a = Peer::start(PeerConfig::new(scratch.home("a")).listen("127.0.0.1:0".parse()?)).await?;
    let b = Peer::start(PeerConfig::new(scratch.home("b"))).await?;
    b.connect(a.local_addr().expect("listening")).await?;

    let adv = PipeAdvertisement::new(PipeId::new_random(), PipeType::UnicastSecure);
    let mut input = a.pipes().create_input_pipe(&adv)?;
    // Naming the peer that holds the input pipe skips the search for it.
    let out = b
        .pipes()
        .create_output_pipe(&adv, &[a.peer_id()], Duration::from_secs(10))
        .await?;
    let secret = vec![42u8; 1 << 20];
    out.send(Message::new().with(Element::bytes("", "secret", secret.clone())))
        .await?;
    let m = tokio::time::timeout(Duration::from_secs(10), input.recv())
        .await?
        .expect("pipe open");
    assert_eq!(
        m.from,
        Some(b.peer_id()),
        "sender proven by its certificate"
    );
    assert_eq!(
        m.message.get("", "secret").expect("element").data[..],
        secret[..]
    );
    println!("ok: 1 MiB over a secure pipe from {}", b.peer_id());
    Ok(())
}
