//! Lenient access to the rows of a results document.
//!
//! The results format (docs/results-format.md) grows over time and old
//! documents lack fields, so every reader goes through these helpers: a
//! missing or mistyped field is `None`, never a panic.

use serde_json::{Map, Value};

/// One row of `results`, viewed leniently.
#[derive(Debug, Clone, Copy)]
pub struct Row<'a>(pub &'a Map<String, Value>);

impl<'a> Row<'a> {
    /// A string field.
    pub fn s(&self, key: &str) -> Option<&'a str> {
        self.0.get(key).and_then(Value::as_str)
    }

    /// A finite numeric field.
    pub fn f(&self, key: &str) -> Option<f64> {
        self.0
            .get(key)
            .and_then(Value::as_f64)
            .filter(|v| v.is_finite())
    }

    /// The scenario name ("" when absent).
    pub fn scenario(&self) -> &'a str {
        self.s("scenario").unwrap_or("")
    }

    /// The layer ("" when absent).
    pub fn layer(&self) -> &'a str {
        self.s("layer").unwrap_or("")
    }

    /// The implementation: the `impl` field, or for older documents without
    /// it `tcp` for the tcp layer and `juxta` otherwise.
    pub fn imp(&self) -> &'a str {
        match self.s("impl") {
            Some(i) => i,
            None if self.layer() == "tcp" => "tcp",
            None => "juxta",
        }
    }

    /// A field rendered as text (numbers in JSON form, strings raw).
    pub fn text(&self, key: &str) -> Option<String> {
        self.0.get(key).map(value_text)
    }
}

/// A JSON value as plain text: strings unquoted, null empty, others compact JSON.
pub fn value_text(v: &Value) -> String {
    match v {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        Value::Bool(b) => b.to_string(),
        other => other.to_string(),
    }
}

/// The rows of a document: `doc.results` when `doc` is an object, the
/// array itself when `doc` is an array; non-object entries are skipped.
pub fn rows(doc: &Value) -> Vec<Row<'_>> {
    let arr = match doc {
        Value::Object(m) => m.get("results").and_then(Value::as_array),
        Value::Array(a) => Some(a),
        _ => None,
    };
    arr.map(|a| a.iter().filter_map(Value::as_object).map(Row).collect())
        .unwrap_or_default()
}

/// The rows of one scenario.
pub fn scenario_rows<'a>(all: &[Row<'a>], scenario: &str) -> Vec<Row<'a>> {
    all.iter()
        .copied()
        .filter(|r| r.scenario() == scenario)
        .collect()
}

/// Rank of a layer in the conventional order (unknown layers last).
pub fn layer_rank(layer: &str) -> usize {
    const ORDER: [&str; 16] = [
        "tcp",
        "endpoint",
        "endpoint-compat",
        "endpoint-compat-nocbjx",
        "unicast-pipe",
        "pipe-compat",
        "pipe-compat-nocbjx",
        "secure-pipe",
        "bidi-pipe",
        "socket",
        "socket-chunk",
        "socket-compat",
        "socket-compat-nocbjx",
        "secure-socket",
        "propagate",
        "relayed-pipe",
    ];
    ORDER
        .iter()
        .position(|l| *l == layer)
        .unwrap_or(ORDER.len())
}

/// Rank of an implementation (tcp, juxta, jxse, others).
pub fn impl_rank(imp: &str) -> usize {
    match imp {
        "tcp" => 0,
        "juxta" => 1,
        "jxse" => 2,
        "jxse-nocbjx" => 3,
        _ => 4,
    }
}

/// The series label of a row compared across implementations:
/// `tcp` for the bound, `juxta endpoint`, `jxse unicast-pipe`, ...
pub fn impl_layer_label(r: &Row<'_>) -> String {
    let (imp, layer) = (r.imp(), r.layer());
    if layer == "tcp" || (imp == "tcp" && layer.is_empty()) {
        if imp == "tcp" {
            "tcp".to_string()
        } else {
            format!("{imp} tcp")
        }
    } else if layer.is_empty() {
        imp.to_string()
    } else {
        format!("{imp} {layer}")
    }
}
