//! Discovery value patterns: exact values and `*` wildcards.
//!
//! Why this exists: a discovery query carries an attribute and a value
//! that may contain `*`. The cache turns the pattern into an index range
//! (literal prefix, or literal suffix through the reversed-value index)
//! and then checks every candidate with [`Pattern::matches`], so the
//! index only narrows the search and this matcher decides.
//!
//! Semantics (JXSE 2.7, `XIndiceAdvertisementCache.getIndexQuery` and the
//! `xindice` `Value` comparisons):
//! * matching is on the UTF-8 bytes, **case-sensitive**;
//! * `""` and `"*"` (any number of stars only) match every value;
//! * `*` matches any sequence of bytes, including none.
//!
//! JXSE's default cache only honours a leading and/or trailing `*` (and
//! mangles `a*b` by dropping its first and last characters); its JDBC
//! caches turn every `*` into `.*?`. Juxta follows the JDBC behaviour
//! (`*` anywhere), which agrees with the default cache on every pattern
//! the default cache handles correctly.

/// A parsed discovery value pattern.
///
/// ```
/// use juxta::cache::Pattern;
/// assert!(Pattern::parse("Juxta*").matches(b"JuxtaPipe"));
/// assert!(Pattern::parse("*Pipe").matches(b"JuxtaPipe"));
/// assert!(Pattern::parse("*xta*").matches(b"JuxtaPipe"));
/// assert!(!Pattern::parse("juxta*").matches(b"JuxtaPipe")); // case-sensitive
/// assert!(Pattern::parse("*").matches(b"anything"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pattern {
    /// Matches every value (`""`, `"*"`, `"**"`, ...).
    Any,
    /// No `*`: the value must be exactly these bytes.
    Exact(Vec<u8>),
    /// At least one `*` and at least one literal byte.
    Glob {
        /// Literal bytes before the first `*` (may be empty).
        prefix: Vec<u8>,
        /// Literal pieces between stars, in order (never empty pieces).
        middle: Vec<Vec<u8>>,
        /// Literal bytes after the last `*` (may be empty).
        suffix: Vec<u8>,
    },
}

impl Pattern {
    /// Parses a discovery value; `*` is the only special character.
    pub fn parse(value: &str) -> Pattern {
        let bytes = value.as_bytes();
        if !bytes.contains(&b'*') {
            return if bytes.is_empty() {
                Pattern::Any
            } else {
                Pattern::Exact(bytes.to_vec())
            };
        }
        let parts: Vec<&[u8]> = bytes.split(|&b| b == b'*').collect();
        if parts.iter().all(|p| p.is_empty()) {
            return Pattern::Any;
        }
        // `split` on a string containing at least one `*` yields >= 2 parts.
        let prefix = parts[0].to_vec();
        let suffix = parts[parts.len() - 1].to_vec();
        let middle = parts[1..parts.len() - 1]
            .iter()
            .filter(|p| !p.is_empty())
            .map(|p| p.to_vec())
            .collect();
        Pattern::Glob {
            prefix,
            middle,
            suffix,
        }
    }

    /// Whether `value` matches this pattern (byte-wise, case-sensitive).
    pub fn matches(&self, value: &[u8]) -> bool {
        match self {
            Pattern::Any => true,
            Pattern::Exact(v) => v.as_slice() == value,
            Pattern::Glob {
                prefix,
                middle,
                suffix,
            } => {
                if value.len() < prefix.len() + suffix.len()
                    || !value.starts_with(prefix)
                    || !value.ends_with(suffix)
                {
                    return false;
                }
                // Leftmost-first search of each middle piece is optimal:
                // taking the earliest occurrence leaves the most room for
                // the pieces that follow.
                let mut rest = &value[prefix.len()..value.len() - suffix.len()];
                for piece in middle {
                    match find(rest, piece) {
                        Some(at) => rest = &rest[at + piece.len()..],
                        None => return false,
                    }
                }
                true
            }
        }
    }
}

/// Position of the first occurrence of `needle` (non-empty) in `hay`.
fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.len() > hay.len() {
        return None;
    }
    hay.windows(needle.len()).position(|w| w == needle)
}

/// The smallest byte string greater than every string starting with `p`,
/// or `None` when there is none (empty or all-0xFF prefix).
pub(crate) fn prefix_upper_bound(p: &[u8]) -> Option<Vec<u8>> {
    let mut up = p.to_vec();
    while let Some(last) = up.pop() {
        if last < 0xFF {
            up.push(last + 1);
            return Some(up);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_shapes() {
        assert_eq!(Pattern::parse(""), Pattern::Any);
        assert_eq!(Pattern::parse("***"), Pattern::Any);
        assert_eq!(Pattern::parse("abc"), Pattern::Exact(b"abc".to_vec()));
        assert_eq!(
            Pattern::parse("a**b*c"),
            Pattern::Glob {
                prefix: b"a".to_vec(),
                middle: vec![b"b".to_vec()],
                suffix: b"c".to_vec()
            }
        );
    }

    #[test]
    fn matching() {
        let p = Pattern::parse("ab*ba");
        assert!(p.matches(b"abba"));
        assert!(!p.matches(b"aba")); // prefix and suffix may not overlap
        assert!(Pattern::parse("*a*b*").matches(b"xaxbx"));
        assert!(!Pattern::parse("*b*a*").matches(b"ab"));
        assert!(Pattern::parse("a*").matches(b"a"));
    }

    #[test]
    fn upper_bound() {
        assert_eq!(prefix_upper_bound(b"ab"), Some(b"ac".to_vec()));
        assert_eq!(prefix_upper_bound(&[b'a', 0xFF]), Some(b"b".to_vec()));
        assert_eq!(prefix_upper_bound(&[0xFF, 0xFF]), None);
        assert_eq!(prefix_upper_bound(b""), None);
    }
}
