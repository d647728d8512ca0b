//! docs/guide.md, "A group's own rendezvous": an encrypted certificate
//! group whose rendezvous is one of its members. m creates the group and
//! serves its rendezvous; a and b join with credentials m issued, lease
//! m's group rendezvous (its address is all they know), and b finds and
//! binds to the pipe a published in the group through it; a then leaves,
//! which withdraws its entries from the group's rendezvous.

use std::time::Duration;

use juxta::prelude::*;
use juxta_guide::Scratch;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let scratch = Scratch::new("group_rendezvous");
    let start = |name: &str| {
        PeerConfig::new(scratch.home(name)).listen("127.0.0.1:0".parse().expect("address"))
    };
    let m = Peer::start(start("m")).await?;
    let a = Peer::start(start("a")).await?;
    let b = Peer::start(start("b")).await?;
    let hour = Duration::from_secs(3600);
    let wait = Duration::from_secs(10);

    // m: the group (traffic encrypted with a key derived from the group
    // secret its credentials carry) and its rendezvous.
    let club = m.groups().create_secure_encrypted("club", hour).await?;
    let rdv = club.start_rendezvous(RendezvousConfig::rendezvous())?;
    let seeds = vec![m.local_addr().expect("listening")];

    // a and b: join, and lease the group's rendezvous.
    let mut members = Vec::new();
    for p in [&a, &b] {
        let cred = club.issue(p.peer_id(), hour, false)?;
        let g = p.groups().join_with_certificate(&club.adv, &cred).await?;
        let h = g.start_rendezvous(RendezvousConfig::edge(seeds.clone()))?;
        assert_eq!(h.wait_leased(wait).await, Some(m.peer_id()));
        members.push(g);
    }
    let (ga, gb) = (&members[0], &members[1]);

    // a publishes a pipe in the group: an SRDI entry at m, in the group's
    // scope only.
    let mut adv = PipeAdvertisement::new(PipeId::new_random(), PipeType::Unicast);
    adv.name = Some("club-chat".into());
    let mut input = ga.pipes().create_input_pipe(&adv)?;
    ga.discovery()
        .publish(&Advertisement::Pipe(adv.clone()))
        .await?;
    let deadline = tokio::time::Instant::now() + wait;
    while rdv.status().index_entries < 2 {
        assert!(tokio::time::Instant::now() < deadline, "indexed at m");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    // b: discovery and binding go through m, which forwards them to a.
    let found = gb
        .discovery()
        .search(AdvKind::Adv)
        .matching("Name", "club-*")
        .threshold(1)
        .timeout(wait)
        .remote()
        .await?;
    let Some(Advertisement::Pipe(pipe)) = found.advertisements.first() else {
        panic!("the group's pipe through its rendezvous");
    };
    let out = gb.pipes().create_output_pipe(pipe, &[], wait).await?;
    out.send(Message::new().with(Element::text("", "text", "hello club")))
        .await?;
    let got = tokio::time::timeout(wait, input.recv())
        .await?
        .expect("pipe open");
    assert_eq!(
        got.message.get("", "text").and_then(|e| e.as_str()),
        Some("hello club")
    );

    // a leaves: its lease ends and m drops its entries.
    ga.leave()?;
    let deadline = tokio::time::Instant::now() + wait;
    while rdv.status().clients != 1 || rdv.status().index_entries != 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "a's entries withdrawn"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    println!(
        "ok: a and b met in {} through its own rendezvous; a left and its entries went",
        club.id
    );
    Ok(())
}
