//! A small chart engine on top of plotters' SVG backend.
//!
//! Every plot of the report (and of the run comparison) is a [`Chart`]:
//! two axes (linear, log or categorical) and series drawn as lines,
//! markers or horizontal bars, with the legend in a panel to the right of
//! the plot so it never hides data. Log axes are drawn in log10 space with
//! our own tick marks at whole decades, which keeps labels readable
//! (`1 kB`, `10k`) and lets one concrete plotters coordinate type serve
//! every chart.

use std::ops::Range;

use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint, Ranged};
use plotters::prelude::*;

use super::ReportError;

/// How an axis maps values.
#[derive(Debug, Clone)]
pub enum Scale {
    /// Linear, starting at zero for non-negative data.
    Linear,
    /// Base-10 logarithmic; non-positive values are not drawn.
    Log,
    /// Categories, first on top (y) or left (x); values are indexes.
    Category(Vec<String>),
}

/// How tick labels are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// Plain numbers (`1k`, `2.5`).
    Number,
    /// Byte counts (`1 B`, `10 kB`).
    Bytes,
}

/// One axis.
#[derive(Debug, Clone)]
pub struct Axis {
    /// Description with unit, e.g. "RTT (us)".
    pub label: String,
    /// The scale.
    pub scale: Scale,
    /// Tick label format.
    pub unit: Unit,
}

impl Axis {
    /// A log axis.
    pub fn log(label: &str, unit: Unit) -> Axis {
        Axis {
            label: label.to_string(),
            scale: Scale::Log,
            unit,
        }
    }
    /// A linear axis.
    pub fn linear(label: &str) -> Axis {
        Axis {
            label: label.to_string(),
            scale: Scale::Linear,
            unit: Unit::Number,
        }
    }
    /// A categorical axis.
    pub fn category(label: &str, cats: Vec<String>) -> Axis {
        Axis {
            label: label.to_string(),
            scale: Scale::Category(cats),
            unit: Unit::Number,
        }
    }

    /// Maps a data value to drawing space (None: cannot be drawn).
    fn to_coord(&self, v: f64) -> Option<f64> {
        if !v.is_finite() {
            return None;
        }
        match &self.scale {
            Scale::Linear => Some(v),
            Scale::Log => (v > 0.0).then(|| v.log10()),
            Scale::Category(c) => {
                let n = c.len() as f64;
                (v >= 0.0 && v < n).then_some(n - 1.0 - v)
            }
        }
    }

    /// Drawing range and (bold, light) key points for the data extent.
    fn layout(&self, lo: f64, hi: f64) -> (f64, f64, Vec<f64>, Vec<f64>) {
        match &self.scale {
            Scale::Category(c) => {
                let n = c.len().max(1) as f64;
                let keys = (0..c.len()).map(|i| i as f64).collect();
                (-0.6, n - 0.4, keys, vec![])
            }
            Scale::Log => {
                let pad = ((hi - lo) * 0.05).max(0.08);
                let (a, b) = (lo - pad, hi + pad);
                let mut bold: Vec<f64> = (a.ceil() as i64..=b.floor() as i64)
                    .map(|e| e as f64)
                    .collect();
                if bold.len() > 8 {
                    bold.retain(|e| (*e as i64) % 2 == 0);
                }
                let mantissas = |ks: &[f64]| -> Vec<f64> {
                    (a.floor() as i64..=b.ceil() as i64)
                        .flat_map(|e| ks.iter().map(move |k| e as f64 + k.log10()))
                        .filter(|t| *t >= a && *t <= b)
                        .collect()
                };
                if bold.len() < 3 {
                    bold = mantissas(&[1.0, 2.0, 5.0]);
                }
                if bold.len() < 2 {
                    bold = mantissas(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0]);
                }
                let light = if b - a <= 6.0 {
                    mantissas(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0])
                } else {
                    vec![]
                };
                (a, b, bold, light)
            }
            Scale::Linear => {
                let a = lo.min(0.0);
                let mut b = hi.max(a) * 1.08;
                if b - a <= f64::EPSILON {
                    b = a + 1.0;
                }
                let step = nice_step((b - a) / 5.0);
                let a = (a / step).floor() * step;
                let b = (b / step).ceil() * step;
                let n = ((b - a) / step).round() as i64;
                let bold = (0..=n.min(50)).map(|i| a + i as f64 * step).collect();
                (a, b, bold, vec![])
            }
        }
    }

    /// Tick label for a drawing-space coordinate.
    fn tick(&self, t: f64) -> String {
        match &self.scale {
            Scale::Category(c) => {
                let n = c.len() as f64;
                let i = (n - 1.0 - t).round();
                if i >= 0.0 && i < n {
                    shorten(&c[i as usize], 44)
                } else {
                    String::new()
                }
            }
            Scale::Log => fmt_tick(10f64.powf(t), self.unit),
            Scale::Linear => fmt_tick(t, self.unit),
        }
    }
}

/// How a series is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Line through the points with markers.
    Line,
    /// Markers only.
    Markers,
    /// Horizontal bars from the x origin (y must be categorical).
    Bars,
}

/// Marker shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Marker {
    /// Filled circle.
    Circle,
    /// Filled triangle.
    Triangle,
    /// Filled square.
    Square,
    /// Cross.
    Cross,
    /// No marker (reference lines).
    None,
}

/// One series.
#[derive(Debug, Clone)]
pub struct Series {
    /// Legend text.
    pub label: String,
    /// RGB colour.
    pub color: RGBColor,
    /// Dashed line (used for the original JXSE).
    pub dashed: bool,
    /// Thick line (used for the tcp bound).
    pub bold: bool,
    /// Marker.
    pub marker: Marker,
    /// How to draw.
    pub kind: Kind,
    /// Data points (x, y) in data space.
    pub points: Vec<(f64, f64)>,
}

/// One chart.
#[derive(Debug, Clone)]
pub struct Chart {
    /// Title drawn above the plot.
    pub title: String,
    /// The x axis.
    pub x: Axis,
    /// The y axis.
    pub y: Axis,
    /// The series, in legend order.
    pub series: Vec<Series>,
}

const WIDTH: u32 = 900;
const LEGEND_W: u32 = 290;
const FONT: &str = "sans-serif";

/// Palette for series that are not layers (Tableau 10).
pub const PALETTE: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

impl Chart {
    /// True when at least one point can be drawn.
    pub fn has_data(&self) -> bool {
        self.series.iter().any(|s| {
            s.points
                .iter()
                .any(|&(x, y)| self.x.to_coord(x).is_some() && self.y.to_coord(y).is_some())
        })
    }

    /// Renders the chart to an SVG string; `Ok(None)` when nothing can be drawn.
    pub fn render(&self, id: &str) -> Result<Option<String>, ReportError> {
        if !self.has_data() {
            return Ok(None);
        }
        let plot_err = |e: Box<dyn std::error::Error + Send + Sync>| ReportError::Plot {
            id: id.to_string(),
            source: e,
        };
        // Drawing-space points per series.
        let pts: Vec<Vec<(f64, f64)>> = self
            .series
            .iter()
            .map(|s| {
                s.points
                    .iter()
                    .filter_map(|&(x, y)| Some((self.x.to_coord(x)?, self.y.to_coord(y)?)))
                    .collect()
            })
            .collect();
        let all = pts.iter().flatten();
        let (mut xlo, mut xhi, mut ylo, mut yhi) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
        for &(x, y) in all {
            xlo = xlo.min(x);
            xhi = xhi.max(x);
            ylo = ylo.min(y);
            yhi = yhi.max(y);
        }
        if matches!(self.x.scale, Scale::Log) && self.series.iter().any(|s| s.kind == Kind::Bars) {
            // Log bars start below the smallest value so every bar is visible.
            xlo -= 0.3;
        }
        let (x0, x1, xb, xl) = self.x.layout(xlo, xhi);
        let (y0, y1, yb, yl) = self.y.layout(ylo, yhi);
        let cat_rows = match &self.y.scale {
            Scale::Category(c) => c.len() as u32,
            _ => 0,
        };
        let legend_rows = self.series.len() as u32;
        let height = 460u32.max(90 + 22 * legend_rows).max(110 + 24 * cat_rows);
        let y_label_w = match &self.y.scale {
            Scale::Category(c) => {
                let longest = c.iter().map(|s| shorten(s, 44).chars().count()).max();
                (longest.unwrap_or(4) as u32 * 7 + 16).clamp(70, 300)
            }
            _ => 70,
        };

        let mut buf = String::new();
        {
            let root = SVGBackend::with_string(&mut buf, (WIDTH, height)).into_drawing_area();
            root.fill(&WHITE).map_err(|e| plot_err(Box::new(e)))?;
            let (plot_area, legend_area) = root.split_horizontally(WIDTH - LEGEND_W);
            let xr = Ticked {
                lo: x0,
                hi: x1,
                bold: xb,
                light: xl,
            };
            let yr = Ticked {
                lo: y0,
                hi: y1,
                bold: yb,
                light: yl,
            };
            let mut chart = ChartBuilder::on(&plot_area)
                .caption(&self.title, (FONT, 21))
                .margin(12)
                .x_label_area_size(52)
                .y_label_area_size(y_label_w)
                .build_cartesian_2d(xr, yr)
                .map_err(|e| plot_err(Box::new(e)))?;
            let xfmt = |t: &f64| self.x.tick(*t);
            let yfmt = |t: &f64| self.y.tick(*t);
            chart
                .configure_mesh()
                .x_desc(&self.x.label)
                .y_desc(&self.y.label)
                .x_label_formatter(&xfmt)
                .y_label_formatter(&yfmt)
                .axis_desc_style((FONT, 17))
                .label_style((FONT, 15))
                .light_line_style(RGBColor(235, 235, 235))
                .bold_line_style(RGBColor(205, 205, 205))
                .draw()
                .map_err(|e| plot_err(Box::new(e)))?;

            let nbars = self
                .series
                .iter()
                .filter(|s| s.kind == Kind::Bars)
                .count()
                .max(1);
            let mut bar_i = 0usize;
            for (s, p) in self.series.iter().zip(&pts) {
                let width = if s.bold { 3 } else { 2 };
                let style = s.color.stroke_width(width);
                match s.kind {
                    Kind::Line => {
                        if s.dashed {
                            chart
                                .draw_series(DashedLineSeries::new(p.clone(), 8, 5, style))
                                .map_err(|e| plot_err(Box::new(e)))?;
                        } else {
                            chart
                                .draw_series(LineSeries::new(p.clone(), style))
                                .map_err(|e| plot_err(Box::new(e)))?;
                        }
                    }
                    Kind::Markers => {}
                    Kind::Bars => {
                        // Bars of several series share a category: split it.
                        let band = 0.8 / nbars as f64;
                        let off = band * bar_i as f64;
                        bar_i += 1;
                        let base = x0;
                        let fill = s.color.mix(0.85).filled();
                        chart
                            .draw_series(p.iter().map(|&(x, y)| {
                                let (ya, yb) = (y + 0.4 - off - band, y + 0.4 - off);
                                Rectangle::new([(base, ya), (x, yb)], fill)
                            }))
                            .map_err(|e| plot_err(Box::new(e)))?;
                        continue;
                    }
                }
                draw_markers(&mut chart, s, p).map_err(plot_err)?;
            }

            // Legend panel.
            legend_area
                .draw(&Text::new(
                    "Legend",
                    (10, 40),
                    (FONT, 16).into_font().style(FontStyle::Bold),
                ))
                .map_err(|e| plot_err(Box::new(e)))?;
            for (i, s) in self.series.iter().enumerate() {
                let y = 64 + 22 * i as i32;
                let style = s.color.stroke_width(if s.bold { 3 } else { 2 });
                if s.kind == Kind::Bars {
                    legend_area
                        .draw(&Rectangle::new(
                            [(10, y - 6), (38, y + 6)],
                            s.color.filled(),
                        ))
                        .map_err(|e| plot_err(Box::new(e)))?;
                } else {
                    if s.kind == Kind::Line {
                        let line = if s.dashed {
                            vec![(10, y), (18, y), (22, y), (30, y)]
                        } else {
                            vec![(10, y), (38, y)]
                        };
                        if s.dashed {
                            for seg in line.chunks(2) {
                                legend_area
                                    .draw(&PathElement::new(seg.to_vec(), style))
                                    .map_err(|e| plot_err(Box::new(e)))?;
                            }
                        } else {
                            legend_area
                                .draw(&PathElement::new(line, style))
                                .map_err(|e| plot_err(Box::new(e)))?;
                        }
                    }
                    draw_marker_px(&legend_area, s, (24, y)).map_err(plot_err)?;
                }
                legend_area
                    .draw(&Text::new(
                        shorten(&s.label, 32),
                        (46, y - 7),
                        (FONT, 14).into_font().color(&BLACK),
                    ))
                    .map_err(|e| plot_err(Box::new(e)))?;
            }
            root.present().map_err(|e| plot_err(Box::new(e)))?;
        }
        Ok(Some(buf))
    }
}

/// A linear coordinate in drawing space with our own tick marks
/// (bold: labelled grid lines, light: minor grid lines).
#[derive(Debug, Clone)]
struct Ticked {
    lo: f64,
    hi: f64,
    bold: Vec<f64>,
    light: Vec<f64>,
}

impl Ranged for Ticked {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, v: &f64, limit: (i32, i32)) -> i32 {
        let span = self.hi - self.lo;
        let t = if span > 0.0 {
            (v - self.lo) / span
        } else {
            0.5
        };
        let t = if t.is_finite() {
            t.clamp(-4.0, 5.0)
        } else {
            0.0
        };
        limit.0 + (f64::from(limit.1 - limit.0) * t).round() as i32
    }

    fn key_points<H: KeyPointHint>(&self, hint: H) -> Vec<f64> {
        if hint.weight().allow_light_points() {
            self.light.clone()
        } else {
            self.bold.clone()
        }
    }

    fn range(&self) -> Range<f64> {
        self.lo..self.hi
    }
}

type Ctx<'a, 'b> = ChartContext<'a, SVGBackend<'b>, Cartesian2d<Ticked, Ticked>>;

fn draw_markers(
    chart: &mut Ctx<'_, '_>,
    s: &Series,
    p: &[(f64, f64)],
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let c = s.color.filled();
    match s.marker {
        Marker::Circle => {
            chart.draw_series(p.iter().map(|&q| Circle::new(q, 4, c)))?;
        }
        Marker::Triangle => {
            chart.draw_series(p.iter().map(|&q| TriangleMarker::new(q, 5, c)))?;
        }
        Marker::Square => {
            chart.draw_series(
                p.iter()
                    .map(|&q| EmptyElement::at(q) + Rectangle::new([(-4, -4), (4, 4)], c)),
            )?;
        }
        Marker::None => {}
        Marker::Cross => {
            chart.draw_series(p.iter().map(|&q| Cross::new(q, 4, s.color.stroke_width(2))))?;
        }
    }
    Ok(())
}

fn draw_marker_px(
    area: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
    s: &Series,
    at: (i32, i32),
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let c = s.color.filled();
    match s.marker {
        Marker::Circle => area.draw(&Circle::new(at, 4, c))?,
        Marker::Triangle => area.draw(&TriangleMarker::new(at, 5, c))?,
        Marker::Square => area.draw(&Rectangle::new(
            [(at.0 - 4, at.1 - 4), (at.0 + 4, at.1 + 4)],
            c,
        ))?,
        Marker::Cross => area.draw(&Cross::new(at, 4, s.color.stroke_width(2)))?,
        Marker::None => {}
    }
    Ok(())
}

/// A "nice" step (1, 2 or 5 times a power of ten) near `raw`.
fn nice_step(raw: f64) -> f64 {
    if !(raw.is_finite() && raw > 0.0) {
        return 1.0;
    }
    let p = 10f64.powf(raw.log10().floor());
    let m = raw / p;
    let k = if m <= 1.0 {
        1.0
    } else if m <= 2.0 {
        2.0
    } else if m <= 5.0 {
        5.0
    } else {
        10.0
    };
    k * p
}

/// Tick label text.
pub fn fmt_tick(v: f64, unit: Unit) -> String {
    match unit {
        Unit::Bytes => {
            let (d, suffix) = if v >= 1e9 {
                (1e9, "GB")
            } else if v >= 1e6 {
                (1e6, "MB")
            } else if v >= 1e3 {
                (1e3, "kB")
            } else {
                (1.0, "B")
            };
            format!("{} {suffix}", trim_num(v / d))
        }
        Unit::Number => {
            let a = v.abs();
            if a >= 1e9 {
                format!("{}G", trim_num(v / 1e9))
            } else if a >= 1e6 {
                format!("{}M", trim_num(v / 1e6))
            } else if a >= 1e4 {
                format!("{}k", trim_num(v / 1e3))
            } else if a > 0.0 && a < 1e-3 {
                format!("{v:.0e}")
            } else {
                trim_num(v)
            }
        }
    }
}

/// A number with at most 3 significant digits after the point, no trailing zeros.
fn trim_num(v: f64) -> String {
    let s = if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.4}")
    };
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// Cuts long labels with an ellipsis.
pub fn shorten(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(max.saturating_sub(1)).collect();
        t.push('…');
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_readable() {
        assert_eq!(fmt_tick(1000.0, Unit::Bytes), "1 kB");
        assert_eq!(fmt_tick(1.0, Unit::Bytes), "1 B");
        assert_eq!(fmt_tick(1e6, Unit::Number), "1M");
        assert_eq!(fmt_tick(0.1, Unit::Number), "0.1");
        assert_eq!(fmt_tick(25.0, Unit::Number), "25");
        assert_eq!(nice_step(0.3), 0.5);
    }

    #[test]
    fn empty_chart_renders_nothing() {
        let c = Chart {
            title: "t".into(),
            x: Axis::log("x", Unit::Bytes),
            y: Axis::log("y", Unit::Number),
            series: vec![Series {
                label: "s".into(),
                color: PALETTE[0],
                dashed: false,
                bold: false,
                marker: Marker::Circle,
                kind: Kind::Line,
                points: vec![(0.0, 1.0), (f64::NAN, 2.0)],
            }],
        };
        assert!(c.render("x").unwrap().is_none());
    }
}
