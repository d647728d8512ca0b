//! The order of the namespace table, as a `java.util.HashMap` iterates it.
//!
//! JXSE verifies a CBJX signature over its *own* re-encoding of a received
//! message, and it writes the namespace table by iterating a
//! `HashMap<String, Integer>`. Our table must therefore be in exactly that
//! order or JXSE drops the message (digest §2.5 rule 2).

/// How a JVM orders `HashMap` entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum JavaHashOrder {
    /// Java 8 and later: `h ^ (h >>> 16)`.
    #[default]
    Java8,
    /// Java 6/7: the older supplemental hash.
    Java6,
}

/// `java.lang.String.hashCode()` (over UTF-16 code units).
pub fn java_string_hash(s: &str) -> i32 {
    let mut h: i32 = 0;
    for unit in s.encode_utf16() {
        h = h.wrapping_mul(31).wrapping_add(unit as i32);
    }
    h
}

impl JavaHashOrder {
    fn spread(self, h: i32) -> u32 {
        let h = h as u32;
        match self {
            JavaHashOrder::Java8 => h ^ (h >> 16),
            JavaHashOrder::Java6 => {
                let h = h ^ ((h >> 20) ^ (h >> 12));
                h ^ (h >> 7) ^ (h >> 4)
            }
        }
    }

    /// Sorts `names` (distinct, in insertion order) into the HashMap's
    /// iteration order: ascending bucket at the final capacity, insertion
    /// order within a bucket (Java preserves it when it splits on resize).
    pub fn order<'a>(self, names: &[&'a str]) -> Vec<&'a str> {
        let mut cap: usize = 16;
        while names.len() * 4 > cap * 3 {
            cap *= 2;
        }
        let mut keyed: Vec<(usize, usize, &str)> = names
            .iter()
            .enumerate()
            .map(|(i, n)| {
                let bucket = (self.spread(java_string_hash(n)) as usize) & (cap - 1);
                (bucket, i, *n)
            })
            .collect();
        keyed.sort_unstable();
        keyed.into_iter().map(|(_, _, n)| n).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn string_hash_matches_java() {
        // Values computed by Java's String.hashCode().
        assert_eq!(java_string_hash(""), 0);
        assert_eq!(java_string_hash("a"), 97);
        assert_eq!(java_string_hash("jxta"), 3_276_859);
        assert_eq!(java_string_hash("hello world"), 1_794_106_052);
    }

    #[test]
    fn tested_live_order() {
        // Digest §2.5: ["ab","zz"] was dropped by JXSE, ["zz","ab"] accepted.
        assert_eq!(JavaHashOrder::Java8.order(&["ab", "zz"]), vec!["zz", "ab"]);
        assert_eq!(JavaHashOrder::Java8.order(&["zz", "ab"]), vec!["zz", "ab"]);
    }

    #[test]
    fn single_namespace_is_unchanged() {
        assert_eq!(JavaHashOrder::Java8.order(&["JXTASOC"]), vec!["JXTASOC"]);
    }
}
