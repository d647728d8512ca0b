//! The common case of [`super::shallow::parse_shallow`] read without an
//! XML reader: a document whose root holds only flat text children
//! (`<Name>text</Name>`), as JXSE and Juxta print resolver and discovery
//! queries.
//!
//! Why: a rendezvous parses two documents per query it forwards (the
//! resolver envelope and the discovery query inside it). quick-xml's event
//! loop with the checks around it was about a sixth of a rendezvous' CPU
//! at 40,000 queries/s; for a flat document one scan for `<` per child
//! does the same work. The subset is strict: anything else (comments,
//! CDATA, nesting, a name wanted deep, an unusual prolog, `\r`, an entity
//! outside a wanted child, a limit reached) returns `None`, and the caller
//! reads the document with the full reader, so every error, and every
//! answer outside the subset, is that reader's. The tests compare the two.

use std::borrow::Cow;

use super::shallow::Kept;
use super::{MAX_XML_ATTRIBUTES, MAX_XML_ELEMENTS};

/// The prologs accepted, as Juxta and JXSE print them.
const DECLS: [&str; 2] = [
    "<?xml version=\"1.0\" encoding=\"UTF-8\"?>",
    "<?xml version=\"1.0\"?>",
];

/// Whitespace the subset accepts between markup (not `\r`: the reader's
/// handling of line ends is left to it).
fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n')
}

/// What a byte can be in an ASCII XML name (`is_xml_name`'s rule): 1
/// anywhere, 2 after the first byte only, 0 not at all. A name with any
/// other byte is left to the full reader.
const NAME_BYTES: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        t[b] = if c.is_ascii_alphabetic() || c == b'_' || c == b':' {
            1
        } else if c.is_ascii_digit() || c == b'-' || c == b'.' {
            2
        } else {
            0
        };
        b += 1;
    }
    t
};

/// A position in the document. It only ever moves over ASCII bytes or up
/// to an ASCII byte, so it stays on a character boundary.
struct Cursor<'a> {
    xml: &'a str,
    at: usize,
}

impl<'a> Cursor<'a> {
    fn rest(&self) -> &'a [u8] {
        &self.xml.as_bytes()[self.at..]
    }

    fn skip_space(&mut self) {
        let n = self
            .rest()
            .iter()
            .position(|&b| !is_space(b))
            .unwrap_or(self.rest().len());
        self.at += n;
    }

    fn eat(&mut self, lit: &str) -> bool {
        let found = self.rest().starts_with(lit.as_bytes());
        if found {
            self.at += lit.len();
        }
        found
    }

    /// An ASCII XML name, ended by a byte that cannot be in one (not by
    /// the end of the document).
    fn name(&mut self) -> Option<&'a str> {
        let rest = self.rest();
        if NAME_BYTES[usize::from(*rest.first()?)] != 1 {
            return None;
        }
        let len = 1 + rest[1..]
            .iter()
            .position(|&b| NAME_BYTES[usize::from(b)] == 0)?;
        let name = &self.xml[self.at..self.at + len];
        self.at += len;
        Some(name)
    }

    /// The end tag of `name`.
    fn end_tag(&mut self, name: &str) -> bool {
        self.eat("</") && self.eat(name) && self.eat(">")
    }

    /// Bytes up to the first `stop`, which is then next; `None` at the end
    /// of the document or when `refuse` comes first.
    fn until(&mut self, stop: u8, refuse: u8) -> Option<&'a str> {
        let rest = self.rest();
        let len = memchr::memchr2(stop, refuse, rest)?;
        if rest[len] != stop {
            return None;
        }
        let s = &self.xml[self.at..self.at + len];
        self.at += len;
        Some(s)
    }
}

/// [`super::shallow::parse_shallow`]'s answer for a flat document (after
/// its length check), or `None` when `xml` is outside the subset.
pub(super) fn read<'a, const N: usize>(
    xml: &'a str,
    root: &str,
    wanted: [&str; N],
    deep: [bool; N],
) -> Option<[Option<Kept<'a>>; N]> {
    let mut c = Cursor { xml, at: 0 };
    for d in DECLS {
        if c.eat(d) {
            break;
        }
    }
    c.skip_space();
    if c.eat("<!DOCTYPE ") {
        c.name()?;
        if !c.eat(">") {
            return None;
        }
        c.skip_space();
    }
    // The root's open tag: ` key="value"` attributes, checked as the
    // reader checks them (names, count, duplicates) but never kept.
    if !c.eat("<") || c.name()? != root {
        return None;
    }
    let mut keys = [""; MAX_XML_ATTRIBUTES];
    let mut n_keys = 0;
    loop {
        let before = c.at;
        c.skip_space();
        if c.eat(">") {
            break;
        }
        if c.at == before || n_keys == MAX_XML_ATTRIBUTES {
            return None;
        }
        let key = c.name()?;
        if !c.eat("=\"") || keys[..n_keys].contains(&key) {
            return None;
        }
        let value = c.until(b'"', b'\r')?;
        if value.bytes().any(|b| matches!(b, b'<' | b'>' | b'&')) {
            return None;
        }
        c.at += 1;
        keys[n_keys] = key;
        n_keys += 1;
    }
    let mut kept: [Option<Kept<'a>>; N] = std::array::from_fn(|_| None);
    let mut elements = 1usize;
    loop {
        c.skip_space();
        if c.rest().starts_with(b"</") {
            if !c.end_tag(root) {
                return None;
            }
            break;
        }
        if !c.eat("<") {
            return None;
        }
        let name = c.name()?;
        elements += 1;
        if elements > MAX_XML_ELEMENTS {
            return None;
        }
        // The first child of a wanted name is kept; a later one is read
        // and passed over, as the reader does.
        let slot = wanted
            .iter()
            .position(|w| *w == name)
            .filter(|&i| kept[i].is_none());
        if slot.is_some_and(|i| deep[i]) {
            return None;
        }
        let text = if c.eat("/>") {
            Cow::Borrowed("")
        } else {
            if !c.eat(">") {
                return None;
            }
            let raw = c.until(b'<', b'\r')?;
            if !c.end_tag(name) {
                return None;
            }
            match slot {
                // An entity the reader would refuse: its error is the
                // reader's to give.
                Some(_) => unescape(raw)?,
                None if raw.contains('&') => return None,
                None => continue,
            }
        };
        if let Some(i) = slot {
            kept[i] = Some(Kept { text, node: None });
        }
    }
    c.skip_space();
    (c.at == xml.len()).then_some(kept)
}

/// `raw` with XML's five predefined entities replaced, in one allocation
/// of `raw`'s length; any other reference (a character reference, or one
/// the reader refuses) leaves the whole text to quick-xml's `unescape`,
/// and an error to the full reader.
fn unescape(raw: &str) -> Option<Cow<'_, str>> {
    let Some(first) = memchr::memchr(b'&', raw.as_bytes()) else {
        return Some(Cow::Borrowed(raw));
    };
    let mut out = String::with_capacity(raw.len());
    let mut rest = raw;
    let mut at = first;
    loop {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        let (ch, len) = match after.as_bytes() {
            [b'l', b't', b';', ..] => ('<', 3),
            [b'g', b't', b';', ..] => ('>', 3),
            [b'a', b'm', b'p', b';', ..] => ('&', 4),
            [b'q', b'u', b'o', b't', b';', ..] => ('"', 5),
            [b'a', b'p', b'o', b's', b';', ..] => ('\'', 5),
            _ => return quick_xml::escape::unescape(raw).ok(),
        };
        out.push(ch);
        rest = &after[len..];
        match memchr::memchr(b'&', rest.as_bytes()) {
            Some(i) => at = i,
            None => {
                out.push_str(rest);
                return Some(Cow::Owned(out));
            }
        }
    }
}
