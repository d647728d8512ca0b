//! CSV files, one per scenario, for spreadsheets and plotting tools.
//!
//! Each file's header is the union of the fields of that scenario's rows,
//! in a stable order (identifying fields first, then the others in the
//! order they first appear); a row without a field leaves the cell empty.
//! Rows of unknown scenarios get their own file like any other.
//!
//! ```no_run
//! let doc = serde_json::json!({"results": [{"scenario": "pingpong", "layer": "tcp", "size": 1}]});
//! let files = juxta_bench::csv_out::write_csvs(&doc, std::path::Path::new("out")).unwrap();
//! assert_eq!(files[0].file_name().unwrap(), "pingpong.csv");
//! ```

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::report::rows::{rows, value_text, Row};
use crate::report::ReportError;

/// Fields written first when present: the scenario, the fields that
/// identify a row ([`crate::compare::ID_FIELDS`]), then the CPU placement.
fn leading_fields() -> impl Iterator<Item = &'static str> {
    std::iter::once("scenario")
        .chain(crate::compare::ID_FIELDS.iter().copied())
        .chain(std::iter::once("pin"))
}

/// A file-name-safe form of a scenario name (`unnamed` when empty).
pub fn file_stem(scenario: &str) -> String {
    let s: String = scenario
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .take(64)
        .collect();
    if s.is_empty() {
        "unnamed".into()
    } else {
        s
    }
}

/// The header for a set of rows: leading fields present, then the rest in first-seen order.
pub fn header(rows: &[Row<'_>]) -> Vec<String> {
    let mut h: Vec<String> = leading_fields()
        .filter(|f| rows.iter().any(|r| r.0.contains_key(*f)))
        .map(|f| f.to_string())
        .collect();
    for r in rows {
        for k in r.0.keys() {
            if !h.iter().any(|x| x == k) {
                h.push(k.clone());
            }
        }
    }
    h
}

/// Writes `<scenario>.csv` into `dir` (created if needed) for every scenario
/// present in `doc`, in order of first appearance; returns the files written.
pub fn write_csvs(doc: &Value, dir: &Path) -> Result<Vec<PathBuf>, ReportError> {
    let all = rows(doc);
    let mut groups: Vec<(String, Vec<Row<'_>>)> = Vec::new();
    for r in all {
        let stem = file_stem(r.scenario());
        match groups.iter_mut().find(|(s, _)| *s == stem) {
            Some(g) => g.1.push(r),
            None => groups.push((stem, vec![r])),
        }
    }
    if !groups.is_empty() {
        std::fs::create_dir_all(dir).map_err(|source| ReportError::Write {
            path: dir.to_path_buf(),
            source,
        })?;
    }
    let mut written = Vec::with_capacity(groups.len());
    for (stem, group) in groups {
        let path = dir.join(format!("{stem}.csv"));
        let csv_err = |source| ReportError::Csv {
            path: path.clone(),
            source,
        };
        let mut w = csv::Writer::from_path(&path).map_err(csv_err)?;
        let head = header(&group);
        w.write_record(&head).map_err(csv_err)?;
        for r in &group {
            w.write_record(
                head.iter()
                    .map(|k| r.0.get(k).map(value_text).unwrap_or_default()),
            )
            .map_err(csv_err)?;
        }
        w.flush().map_err(|source| ReportError::Write {
            path: path.clone(),
            source,
        })?;
        written.push(path);
    }
    Ok(written)
}
