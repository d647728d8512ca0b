//! Assembling the self-contained HTML page: header, sections, tables.
//!
//! The page has no external resources: SVG plots are inline, CSS and the
//! render check script too. The script marks each `figure.plot` as
//! rendered or not and writes `data-plots-ok="k/n"` on `<body>`, so a
//! headless browser (`chromium --dump-dom`) can verify the plots.

use std::fmt::Write as _;

use serde_json::Value;

use super::plots::Plot;
use super::rows::value_text;

/// A table of the report.
#[derive(Debug, Clone)]
pub struct Table {
    /// Stable element id, e.g. `table-ops`.
    pub id: String,
    /// Caption (how to read it).
    pub caption: String,
    /// Column headers.
    pub head: Vec<String>,
    /// Cells; a newline in a cell becomes a line break.
    pub rows: Vec<Vec<String>>,
}

/// One item of a section.
#[derive(Debug, Clone)]
pub enum Item {
    /// A figure.
    Plot(Plot),
    /// A table.
    Table(Table),
    /// A paragraph of text.
    Note(String),
}

/// One section of the report.
#[derive(Debug, Clone)]
pub struct Section {
    /// Element id.
    pub id: String,
    /// Heading.
    pub title: String,
    /// Items; empty means "not measured in this run".
    pub items: Vec<Item>,
}

/// Escapes text for HTML.
pub fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c => o.push(c),
        }
    }
    o
}

const CSS: &str = r#"
body{font-family:system-ui,-apple-system,"Segoe UI",Helvetica,Arial,sans-serif;margin:0 auto;max-width:1000px;padding:1em 1.5em;color:#222;line-height:1.4}
h1{font-size:1.6em;margin-bottom:.2em}h2{border-bottom:2px solid #ddd;padding-bottom:.2em;margin-top:2em}
table{border-collapse:collapse;margin:.6em 0 1.4em;font-size:.88em}
th,td{border:1px solid #ccc;padding:.25em .55em;text-align:left;vertical-align:top}
th{background:#f3f3f3}td.num{text-align:right;font-variant-numeric:tabular-nums}
caption{caption-side:top;text-align:left;font-style:italic;color:#555;padding:.3em 0}
figure.plot{margin:1em 0 1.8em;border:1px solid #e4e4e4;padding:.4em}
figure.plot svg{max-width:100%;height:auto;display:block}
figure.plot figcaption{font-size:.85em;color:#555;padding:.3em .4em}
figure.plot-bad{border:3px solid #c00}
p.not-measured{color:#888;font-style:italic}
.errors li{color:#a00}.warn{color:#a60}
pre{background:#f6f6f6;padding:.6em;overflow-x:auto;font-size:.8em}
code{background:#f3f3f3;padding:0 .2em}
"#;

const SCRIPT: &str = r#"
window.addEventListener('load', function () {
  var figs = document.querySelectorAll('figure.plot');
  var ok = 0;
  figs.forEach(function (f) {
    var svg = f.querySelector('svg');
    var good = false;
    if (svg) {
      var box = svg.getBoundingClientRect();
      var drawn = 0;
      svg.querySelectorAll('polyline,path,circle,rect,line,polygon,text').forEach(function (e) {
        var b = e.getBBox();
        if (b.width > 0 || b.height > 0) { drawn++; }
      });
      good = box.width > 0 && box.height > 0 && drawn >= 5;
      f.dataset.drawn = String(drawn);
    }
    f.dataset.rendered = good ? 'ok' : 'bad';
    if (good) { ok++; } else { f.classList.add('plot-bad'); }
  });
  document.body.dataset.plotsOk = ok + '/' + figs.length;
});
"#;

/// Renders a table.
fn table_html(t: &Table, out: &mut String) {
    let _ = write!(
        out,
        "<table class=\"data\" id=\"{}\"><caption>{}</caption><thead><tr>",
        esc(&t.id),
        esc(&t.caption)
    );
    for h in &t.head {
        let _ = write!(out, "<th>{}</th>", esc(h));
    }
    out.push_str("</tr></thead><tbody>\n");
    for r in &t.rows {
        out.push_str("<tr>");
        for c in r {
            let numeric = !c.is_empty()
                && c.chars()
                    .all(|ch| ch.is_ascii_digit() || ".-+e,%".contains(ch));
            let cls = if numeric { " class=\"num\"" } else { "" };
            let _ = write!(out, "<td{cls}>{}</td>", esc(c).replace('\n', "<br>"));
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</tbody></table>\n");
}

/// Renders a figure.
fn plot_html(p: &Plot, out: &mut String) {
    let svg = p.svg.trim_start();
    let svg = svg.strip_prefix("<svg ").map_or_else(
        || svg.to_string(),
        |rest| {
            format!(
                "<svg class=\"plot-svg\" role=\"img\" aria-label=\"{}\" {rest}",
                esc(&p.title)
            )
        },
    );
    let _ = writeln!(
        out,
        "<figure class=\"plot\" id=\"{}\">\n{}\n<figcaption><b>{}.</b> {}</figcaption></figure>",
        esc(&p.id),
        svg,
        esc(&p.title),
        esc(&p.caption)
    );
}

/// Days since 1970-01-01 to (year, month, day) (proleptic Gregorian).
fn civil(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// A unix time as `YYYY-MM-DD hh:mm:ss UTC`.
pub fn utc(secs: f64) -> String {
    if !secs.is_finite() || secs.abs() > 1e13 {
        return secs.to_string();
    }
    let s = secs.floor() as i64;
    let (y, m, d) = civil(s.div_euclid(86_400));
    let t = s.rem_euclid(86_400);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC",
        t / 3600,
        t / 60 % 60,
        t % 60
    )
}

/// The header: command, machine, network, noise, errors, options.
fn header_html(doc: &Value, out: &mut String) {
    let get = |k: &str| doc.get(k);
    out.push_str("<header id=\"run\"><h1>Juxta benchmark report</h1>\n");
    out.push_str("<p>Juxta measured with the JXTA Performance Model: every layer is compared with plain TCP measured in the same run (ratios), and with the JXTA studies' published figures as ratios to their own socket bound.</p>\n");
    let mut facts: Vec<(String, String)> = Vec::new();
    if let Some(c) = get("command") {
        facts.push(("command".into(), value_text(c)));
    }
    if let Some(n) = get("net") {
        facts.push(("network profile".into(), value_text(n)));
    }
    if let Some(t) = get("started_unix").and_then(Value::as_f64) {
        facts.push(("started".into(), utc(t)));
    }
    if let Some(d) = get("duration_s").and_then(Value::as_f64) {
        facts.push(("duration".into(), format!("{d:.1} s")));
    }
    if let Some(Value::Object(m)) = get("machine") {
        for (k, v) in m {
            facts.push((format!("machine: {k}"), value_text(v)));
        }
    }
    out.push_str("<table class=\"facts\" id=\"table-run\"><tbody>\n");
    for (k, v) in &facts {
        let _ = writeln!(out, "<tr><th>{}</th><td>{}</td></tr>", esc(k), esc(v));
    }
    if facts.is_empty() {
        out.push_str("<tr><td>the results document carries no run facts</td></tr>\n");
    }
    out.push_str("</tbody></table>\n");

    // Noise.
    out.push_str("<h3>Noise</h3>\n");
    match get("noise") {
        Some(Value::Object(n)) => {
            let base: Vec<String> = n
                .get("baseline_rtt_us_1b")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(Value::as_f64)
                        .map(|v| format!("{v:.1}"))
                        .collect()
                })
                .unwrap_or_default();
            let spread = n.get("spread").and_then(Value::as_f64);
            let worst = n.get("spread_worst").and_then(Value::as_f64);
            let _ = write!(
                out,
                "<p id=\"noise\">The tcp baseline was rerun beside every layer; its 1-byte RTTs: {} us. Spread (max-min)/median of the reruns: typical {}{}.",
                esc(&base.join(", ")),
                spread.map_or("unknown".into(), |s| format!("{:.1}%", s * 100.0)),
                worst.map_or(String::new(), |w| format!(", worst size or run {:.1}%", w * 100.0))
            );
            if spread.is_some_and(|s| s > 0.10) {
                out.push_str(" <span class=\"warn\">The machine was noisy: differences under this spread are not significant.</span>");
            }
            out.push_str("</p>\n");
        }
        _ => out.push_str("<p class=\"not-measured\" id=\"noise\">No baseline reruns in this document (noise not measured).</p>\n"),
    }

    // Errors.
    out.push_str("<h3>Errors</h3>\n");
    match get("errors").and_then(Value::as_array) {
        Some(errs) if !errs.is_empty() => {
            out.push_str("<ul class=\"errors\" id=\"errors\">\n");
            for e in errs {
                let (sc, msg) = match e {
                    Value::Object(m) => (
                        m.get("scenario").map(value_text).unwrap_or_default(),
                        m.get("message")
                            .map(value_text)
                            .unwrap_or_else(|| e.to_string()),
                    ),
                    other => (String::new(), value_text(other)),
                };
                let _ = writeln!(out, "<li><b>{}</b> {}</li>", esc(&sc), esc(&msg));
            }
            out.push_str("</ul>\n");
        }
        _ => out.push_str("<p id=\"errors\">None reported.</p>\n"),
    }
    if let Some(o) = get("options") {
        let pretty = serde_json::to_string_pretty(o).unwrap_or_default();
        let _ = writeln!(
            out,
            "<details><summary>Options of the run</summary><pre>{}</pre></details>",
            esc(&pretty)
        );
    }
    out.push_str("</header>\n");
}

/// The whole page.
pub fn page(doc: &Value, sections: &[Section]) -> String {
    let mut out = String::with_capacity(1 << 20);
    out.push_str("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>Juxta benchmark report</title>\n<style>");
    out.push_str(CSS);
    out.push_str("</style>\n<script>");
    out.push_str(SCRIPT);
    out.push_str("</script>\n</head>\n<body>\n");
    header_html(doc, &mut out);
    out.push_str("<nav><b>Sections:</b> ");
    for s in sections {
        let _ = write!(out, "<a href=\"#{}\">{}</a> · ", esc(&s.id), esc(&s.title));
    }
    out.push_str("</nav>\n");
    for s in sections {
        section_html(s, &mut out);
    }
    out.push_str("</body></html>\n");
    out
}

/// One section.
pub fn section_html(s: &Section, out: &mut String) {
    let _ = writeln!(
        out,
        "<section id=\"{}\"><h2>{}</h2>",
        esc(&s.id),
        esc(&s.title)
    );
    if s.items.is_empty() {
        out.push_str("<p class=\"not-measured\">Not measured in this run.</p>\n");
    }
    for it in &s.items {
        match it {
            Item::Plot(p) => plot_html(p, out),
            Item::Table(t) => table_html(t, out),
            Item::Note(n) => {
                let _ = writeln!(out, "<p class=\"note\">{}</p>", esc(n));
            }
        }
    }
    out.push_str("</section>\n");
}

/// Minimal standalone page around sections (used by the run comparison).
pub fn simple_page(title: &str, intro: &str, sections: &[Section]) -> String {
    let mut out = String::with_capacity(1 << 18);
    let _ = writeln!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>{}</title>\n<style>{CSS}</style>\n<script>{SCRIPT}</script>\n</head>\n<body>\n<h1>{}</h1>\n<p>{}</p>",
        esc(title),
        esc(title),
        esc(intro)
    );
    for s in sections {
        section_html(s, &mut out);
    }
    out.push_str("</body></html>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_dates() {
        assert_eq!(utc(0.0), "1970-01-01 00:00:00 UTC");
        assert_eq!(utc(1_790_000_000.0), "2026-09-21 14:13:20 UTC");
        assert_eq!(esc("<a&\"b\">"), "&lt;a&amp;&quot;b&quot;&gt;");
    }
}
