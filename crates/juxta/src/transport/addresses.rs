//! A connection's service addresses in wire form, kept between messages.
//!
//! Every message names its destination as a group-mangled service address
//! (`EndpointService:<group>` / `<service>/<param>`, see
//! [`juxta_proto::endpoint::mangle`]). Building that on each send took two
//! `format!`s and four allocations, and taking it apart on each receive
//! (the wire address copied out of the decoder's table, then
//! [`demangle`]d) five more: about half of the endpoint's own work for a
//! small message. A connection carries the same few addresses over and
//! over (a pipe, a socket, an ack listener), so both directions keep the
//! last [`MAX_ADDRESSES`] they saw and reuse them; a received message's
//! [`juxta_proto::endpoint::Delivery`] shares the cached strings (`Arc`)
//! instead of copying them. The caches are bounded
//! in entries and in size (an address longer than [`MAX_CACHED_LEN`], which
//! a peer could send to fill them, is computed each time and never kept)
//! and only ever hold what a lookup would compute: a miss computes it as
//! before.

use std::sync::{Arc, Mutex};

use juxta_proto::endpoint::{demangle, mangle, ServiceAddress};

/// Addresses kept per direction and connection.
pub(crate) const MAX_ADDRESSES: usize = 16;

/// Longest address (its strings together, in bytes) that is kept: so a
/// connection's caches hold at most a few tens of KiB whatever its peer
/// sends.
pub(crate) const MAX_CACHED_LEN: usize = 512;

fn address_len(a: &ServiceAddress) -> usize {
    a.service
        .len()
        .saturating_add(a.param.as_ref().map_or(0, String::len))
}

/// A destination as callers name it, and its wire form.
struct Sent {
    group: Box<str>,
    service: Box<str>,
    param: Option<Box<str>>,
    wire: Arc<ServiceAddress>,
}

/// A wire address as received, and what it demangles to (shared with
/// every delivery that names it).
struct Received {
    wire: Arc<ServiceAddress>,
    group: Option<Arc<str>>,
    real: Arc<ServiceAddress>,
}

/// The two caches of one connection (see the module documentation).
#[derive(Default)]
pub(crate) struct Addresses {
    sent: Mutex<Vec<Sent>>,
    received: Mutex<Vec<Received>>,
}

/// Moves entry `i` to the front (most recently used first) and returns it.
fn to_front<T>(v: &mut [T], i: usize) -> &T {
    v[..=i].rotate_right(1);
    &v[0]
}

impl Addresses {
    /// The wire address of `service`/`param` in the group whose unique
    /// value is `group`: `mangle(group, (service, param))`.
    pub(crate) fn wire(
        &self,
        group: &str,
        service: &str,
        param: Option<&str>,
    ) -> Arc<ServiceAddress> {
        let mut sent = self.sent.lock().expect("address cache lock");
        let hit = sent.iter().position(|e| {
            *e.service == *service && e.param.as_deref() == param && *e.group == *group
        });
        if let Some(i) = hit {
            return to_front(&mut sent, i).wire.clone();
        }
        let wire = Arc::new(mangle(group, &ServiceAddress::new(service, param)));
        if address_len(&wire) > MAX_CACHED_LEN {
            return wire;
        }
        sent.truncate(MAX_ADDRESSES - 1);
        sent.insert(
            0,
            Sent {
                group: group.into(),
                service: service.into(),
                param: param.map(Into::into),
                wire: wire.clone(),
            },
        );
        wire
    }

    /// `demangle` of a received wire address: the group (if the address
    /// was mangled) and the service address it names. A cached address
    /// comes back as the same shared strings (no copy).
    pub(crate) fn demangled(
        &self,
        wire: Arc<ServiceAddress>,
    ) -> (Option<Arc<str>>, Arc<ServiceAddress>) {
        let mut received = self.received.lock().expect("address cache lock");
        // The compact decoder hands out one shared address per channel, so
        // the pointer usually matches; JXTA framing decodes a fresh one.
        let hit = received
            .iter()
            .position(|e| Arc::ptr_eq(&e.wire, &wire) || *e.wire == *wire);
        if let Some(i) = hit {
            let e = to_front(&mut received, i);
            return (e.group.clone(), e.real.clone());
        }
        if address_len(&wire) > MAX_CACHED_LEN {
            drop(received);
            let (group, real) = demangle(Arc::unwrap_or_clone(wire));
            return (group.map(Arc::from), Arc::new(real));
        }
        let (group, real) = demangle((*wire).clone());
        let (group, real): (Option<Arc<str>>, _) = (group.map(Arc::from), Arc::new(real));
        received.truncate(MAX_ADDRESSES - 1);
        received.insert(
            0,
            Received {
                wire,
                group: group.clone(),
                real: real.clone(),
            },
        );
        (group, real)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `demangle`'s answer in the shared form `demangled` gives.
    fn shared((g, a): (Option<String>, ServiceAddress)) -> (Option<Arc<str>>, Arc<ServiceAddress>) {
        (g.map(Arc::from), Arc::new(a))
    }

    #[test]
    fn cached_addresses_are_what_mangle_and_demangle_give() {
        let a = Addresses::default();
        for round in 0..3 {
            for i in 0..(MAX_ADDRESSES + 5) {
                let param = format!("p{i}");
                let param = (i % 3 != 0).then_some(param.as_str());
                let group = if i % 2 == 0 { "g1" } else { "g2" };
                let want = mangle(group, &ServiceAddress::new("S", param));
                let got = a.wire(group, "S", param);
                assert_eq!(*got, want, "round {round}, address {i}");
                // The same address again is the cached one.
                assert!(Arc::ptr_eq(&got, &a.wire(group, "S", param)));
                // Received: by pointer, and by value (a fresh copy).
                let first = a.demangled(got.clone());
                assert_eq!(first, shared(demangle(want.clone())));
                let again = a.demangled(Arc::new(want.clone()));
                assert_eq!(again, shared(demangle(want.clone())));
                // The same address again shares the cached strings.
                assert!(Arc::ptr_eq(&first.1, &again.1));
                assert!(Arc::ptr_eq(
                    first.0.as_ref().unwrap(),
                    again.0.as_ref().unwrap()
                ));
                // A name that is not mangled comes back as it is.
                let plain = ServiceAddress::new("Plain", param);
                assert_eq!(a.demangled(Arc::new(plain.clone())), shared((None, plain)));
            }
            assert!(a.sent.lock().unwrap().len() <= MAX_ADDRESSES);
            assert!(a.received.lock().unwrap().len() <= MAX_ADDRESSES);
        }
    }

    #[test]
    fn long_addresses_are_computed_but_never_kept() {
        let a = Addresses::default();
        let long = "x".repeat(MAX_CACHED_LEN + 1);
        for i in 0..(2 * MAX_ADDRESSES) {
            let param = format!("{long}{i}");
            let want = mangle("g", &ServiceAddress::new("S", Some(&param)));
            assert_eq!(*a.wire("g", "S", Some(&param)), want);
            assert_eq!(a.demangled(Arc::new(want.clone())), shared(demangle(want)));
        }
        assert!(a.sent.lock().unwrap().is_empty());
        assert!(a.received.lock().unwrap().is_empty());
        // Short ones are still kept beside them.
        let short = a.wire("g", "S", Some("p"));
        assert!(Arc::ptr_eq(&short, &a.wire("g", "S", Some("p"))));
    }

    #[test]
    fn group_service_and_param_all_tell_addresses_apart() {
        let a = Addresses::default();
        let base = a.wire("g", "S", Some("p"));
        assert_ne!(*a.wire("h", "S", Some("p")), *base);
        assert_ne!(*a.wire("g", "T", Some("p")), *base);
        assert_ne!(*a.wire("g", "S", Some("q")), *base);
        assert_ne!(*a.wire("g", "S", None), *base);
        assert_eq!(*a.wire("g", "S", Some("p")), *base);
    }
}
