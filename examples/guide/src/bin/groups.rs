//! docs/guide.md, "Groups": a certificate group with services of its
//! own. a creates it and issues b a credential; b joins, finds a pipe
//! published in the group (and nothing of the Net peer group), binds to it
//! and sends; leaving closes a's input pipe.

use std::time::Duration;

use juxta::prelude::*;
use juxta_guide::Scratch;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let scratch = Scratch::new("groups");
    let a = Peer::start(PeerConfig::new(scratch.home("a")).listen("127.0.0.1:0".parse()?)).await?;
    let b = Peer::start(PeerConfig::new(scratch.home("b"))).await?;
    b.connect(a.local_addr().expect("listening")).await?;
    let hour = Duration::from_secs(3600);

    let club = a.groups().create_secure("club", hour).await?;
    let cred = club.issue(b.peer_id(), hour, false)?;
    let mut adv = PipeAdvertisement::new(PipeId::new_random(), PipeType::Unicast);
    adv.name = Some("club-chat".into());
    club.discovery()
        .publish(&Advertisement::Pipe(adv.clone()))
        .await?;
    let mut net_adv = PipeAdvertisement::new(PipeId::new_random(), PipeType::Unicast);
    net_adv.name = Some("club-public".into());
    a.discovery().publish(&Advertisement::Pipe(net_adv)).await?;
    let mut input = club.pipes().create_input_pipe(&adv)?;

    let g = b.groups().join_with_certificate(&club.adv, &cred).await?;
    let found = g
        .discovery()
        .search(AdvKind::Adv)
        .matching("Name", "club-*")
        .ask(a.peer_id())
        .remote()
        .await?;
    assert_eq!(found.advertisements.len(), 1, "only the group's pipe");
    let Advertisement::Pipe(pipe) = &found.advertisements[0] else {
        panic!("a pipe advertisement");
    };
    let out = g
        .pipes()
        .create_output_pipe(pipe, &[a.peer_id()], Duration::from_secs(10))
        .await?;
    out.send(Message::new().with(Element::text("", "text", "hello club")))
        .await?;
    let m = tokio::time::timeout(Duration::from_secs(10), input.recv())
        .await?
        .expect("pipe open");
    assert_eq!(
        m.message.get("", "text").and_then(|e| e.as_str()),
        Some("hello club")
    );

    club.leave()?;
    let closed = tokio::time::timeout(Duration::from_secs(10), input.recv()).await?;
    assert!(closed.is_none(), "leaving closes the group's pipes");
    println!(
        "ok: b joined {} with a certificate, found and used its pipe; a left",
        g.id
    );
    Ok(())
}
