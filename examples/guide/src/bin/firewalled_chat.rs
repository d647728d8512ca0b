//! docs/guide.md, "Discovery and pipes through a rendezvous": one peer is
//! rendezvous and relay; two edges that do not listen (as behind a NAT)
//! find each other's pipe by name and exchange messages through it.

use std::time::Duration;

use juxta::prelude::*;
use juxta_guide::Scratch;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let scratch = Scratch::new("chat");
    // The rendezvous: listens, indexes what edges publish, relays for them.
    let rdv = Peer::start(
        PeerConfig::new(scratch.home("rdv"))
            .listen("127.0.0.1:0".parse()?)
            .rendezvous(RendezvousConfig::rendezvous())
            .relay(RelayConfig::server()),
    )
    .await?;
    let seeds = vec![rdv.local_addr().expect("the rendezvous listens")];

    // Two edges with no listen address: they dial out to their seed and
    // lease it as relay by default (nothing to configure).
    let alice = Peer::start(
        PeerConfig::new(scratch.home("alice")).rendezvous(RendezvousConfig::edge(seeds.clone())),
    )
    .await?;
    let bob =
        Peer::start(PeerConfig::new(scratch.home("bob")).rendezvous(RendezvousConfig::edge(seeds)))
            .await?;
    for edge in [&alice, &bob] {
        let leased = edge
            .rendezvous()
            .expect("configured as edge")
            .wait_leased(Duration::from_secs(10))
            .await;
        assert_eq!(leased, Some(rdv.peer_id()), "edge leased its rendezvous");
    }

    // Alice opens an input pipe and publishes its advertisement.
    let mut chat = PipeAdvertisement::new(PipeId::new_random(), PipeType::Unicast);
    chat.name = Some("guide-chat".into());
    let mut inbox = alice.pipes().create_input_pipe(&chat)?;
    alice
        .discovery()
        .publish(&Advertisement::Pipe(chat.clone()))
        .await?;

    // Bob finds it by name through the rendezvous. The index on the
    // rendezvous is loosely consistent: give it a moment after a publish.
    let mut found = None;
    for _ in 0..50 {
        match bob
            .discovery()
            .search(AdvKind::Adv)
            .matching("Name", "guide-chat")
            .threshold(1)
            .timeout(Duration::from_secs(1))
            .remote()
            .await
        {
            Ok(f) => {
                found = f.advertisements.into_iter().find_map(|a| match a {
                    Advertisement::Pipe(p) => Some(p),
                    _ => None,
                });
                if found.is_some() {
                    break;
                }
            }
            // Nobody answered yet (the rendezvous stays silent when it
            // holds nothing, as JXSE's does): ask again.
            Err(DiscoveryError::NoAnswer { .. }) => {}
            Err(e) => return Err(e.into()),
        }
    }
    let pipe = found.expect("bob found alice's pipe");
    assert_eq!(pipe.id, chat.id);

    // Bob binds an output pipe without knowing who holds the input pipe:
    // the rendezvous forwards the binding query, alice answers through
    // the relay.
    let out = bob
        .pipes()
        .create_output_pipe(&pipe, &[], Duration::from_secs(10))
        .await?;
    for line in ["hello", "from", "bob"] {
        out.send(Message::new().with(Element::text("", "text", line)))
            .await?;
    }
    for want in ["hello", "from", "bob"] {
        let m = tokio::time::timeout(Duration::from_secs(10), inbox.recv())
            .await?
            .expect("pipe open");
        let text = m.message.get("", "text").and_then(|e| e.as_str());
        assert_eq!(text, Some(want));
        assert_eq!(m.from, Some(bob.peer_id()), "the sender is known");
        println!("alice got {want:?} from {}", bob.peer_id());
    }
    // Neither edge ever connected to the other: everything went through
    // the rendezvous/relay.
    assert!(!alice.is_connected_to(&bob.peer_id()));
    println!("ok: discovered and messaged through the rendezvous");
    Ok(())
}
