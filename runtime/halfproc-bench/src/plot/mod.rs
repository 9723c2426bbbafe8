// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! Log-log plots of time against size, like the paper's Figs. 7 and 8.
//!
//! A [`Chart`] (data) is laid out once into a [`Scene`] (lines, polygons and
//! text in pixels); [`svg::render`] and [`png::render`] draw the same scene,
//! so the two files always show the same picture. Everything is pure Rust:
//! the PNG is rasterised by tiny-skia with glyph outlines from the embedded
//! DejaVu Sans ([`font`]).

pub mod font;
pub mod png;
pub mod svg;

/// An sRGB colour.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rgb(pub u8, pub u8, pub u8);

impl Rgb {
    /// `#rrggbb`.
    pub fn hex(self) -> String {
        format!("#{:02x}{:02x}{:02x}", self.0, self.1, self.2)
    }
}

/// Marker shapes, cycled through the series.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// Filled circle.
    Circle,
    /// Filled square.
    Square,
    /// Triangle pointing up.
    TriangleUp,
    /// Triangle pointing down.
    TriangleDown,
    /// Diamond.
    Diamond,
    /// Hollow circle.
    Ring,
}

/// One line of the chart.
#[derive(Clone, Debug)]
pub struct Line {
    /// Legend text.
    pub name: String,
    /// `(x, y)` data, both > 0.
    pub points: Vec<(f64, f64)>,
    /// Colour.
    pub color: Rgb,
    /// Dashed (references, pipelined variants).
    pub dashed: bool,
    /// Marker, or none.
    pub marker: Option<Shape>,
}

/// A log-log chart: x is a power of two (bytes), y a power of ten (seconds).
#[derive(Clone, Debug)]
pub struct Chart {
    /// Title line.
    pub title: String,
    /// Second title line (smaller).
    pub subtitle: String,
    /// X axis label.
    pub x_label: String,
    /// Y axis label.
    pub y_label: String,
    /// The lines.
    pub lines: Vec<Line>,
}

/// Horizontal anchor of a text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Anchor {
    /// Text starts at x.
    Start,
    /// Text is centred on x.
    Middle,
    /// Text ends at x.
    End,
}

/// A drawing primitive in pixels (y down).
#[derive(Clone, Debug)]
pub enum Prim {
    /// An open polyline.
    Path {
        /// Vertices.
        pts: Vec<(f32, f32)>,
        /// Stroke colour.
        color: Rgb,
        /// Stroke width.
        width: f32,
        /// Dash pattern (on, off), or solid.
        dash: Option<(f32, f32)>,
    },
    /// A closed polygon.
    Polygon {
        /// Vertices.
        pts: Vec<(f32, f32)>,
        /// Fill, if any.
        fill: Option<Rgb>,
        /// Stroke colour and width, if any.
        stroke: Option<(Rgb, f32)>,
    },
    /// A circle.
    Circle {
        /// Centre.
        c: (f32, f32),
        /// Radius.
        r: f32,
        /// Fill, if any.
        fill: Option<Rgb>,
        /// Stroke colour and width, if any.
        stroke: Option<(Rgb, f32)>,
    },
    /// One line of text; `(x, y)` is the baseline point the anchor refers to.
    Text {
        /// Position.
        at: (f32, f32),
        /// Content.
        text: String,
        /// Font size, px.
        size: f32,
        /// Horizontal anchor.
        anchor: Anchor,
        /// Rotated by -90 degrees (reads bottom to top).
        vertical: bool,
        /// Colour.
        color: Rgb,
    },
}

/// A laid-out picture.
#[derive(Clone, Debug)]
pub struct Scene {
    /// Width, px.
    pub width: f32,
    /// Height, px.
    pub height: f32,
    /// Primitives, painted in order.
    pub prims: Vec<Prim>,
}

/// A qualitative palette with enough distinct colours for every strategy.
pub const PALETTE: [Rgb; 16] = [
    Rgb(0x1f, 0x77, 0xb4),
    Rgb(0xff, 0x7f, 0x0e),
    Rgb(0x2c, 0xa0, 0x2c),
    Rgb(0xd6, 0x27, 0x28),
    Rgb(0x94, 0x67, 0xbd),
    Rgb(0x8c, 0x56, 0x4b),
    Rgb(0xe3, 0x77, 0xc2),
    Rgb(0x6b, 0x6e, 0xcf),
    Rgb(0xbc, 0xbd, 0x22),
    Rgb(0x17, 0xbe, 0xcf),
    Rgb(0x39, 0x3b, 0x79),
    Rgb(0xad, 0x49, 0x4a),
    Rgb(0x63, 0x79, 0x39),
    Rgb(0x00, 0x00, 0x00),
    Rgb(0xff, 0x00, 0x80),
    Rgb(0x00, 0x99, 0x66),
];

/// Marker shapes in cycle order.
pub const SHAPES: [Shape; 6] = [
    Shape::Circle,
    Shape::Square,
    Shape::TriangleUp,
    Shape::Diamond,
    Shape::TriangleDown,
    Shape::Ring,
];

const W: f32 = 1000.0;
const H: f32 = 640.0;
const LEFT: f32 = 86.0;
const RIGHT: f32 = 700.0;
const TOP: f32 = 70.0;
const BOTTOM: f32 = 570.0;
const INK: Rgb = Rgb(0x20, 0x20, 0x20);
const GRID: Rgb = Rgb(0xdd, 0xdd, 0xdd);

/// A text with a superscript, as two primitives: `base` then `sup`, anchored
/// as a whole at `at`.
/// A solid 1-unit line from `a` to `b` (grid lines, ticks).
fn hairline(a: (f32, f32), b: (f32, f32), color: Rgb) -> Prim {
    Prim::Path {
        pts: vec![a, b],
        color,
        width: 1.0,
        dash: None,
    }
}

fn power_label(prims: &mut Vec<Prim>, at: (f32, f32), base: &str, sup: &str, anchor: Anchor) {
    let (bs, ss) = (14.0, 10.0);
    let total = font::width(base, bs) + font::width(sup, ss);
    let x0 = match anchor {
        Anchor::Start => at.0,
        Anchor::Middle => at.0 - total / 2.0,
        Anchor::End => at.0 - total,
    };
    let text = |at, text: &str, size| Prim::Text {
        at,
        text: text.to_string(),
        size,
        anchor: Anchor::Start,
        vertical: false,
        color: INK,
    };
    prims.push(text((x0, at.1), base, bs));
    prims.push(text((x0 + font::width(base, bs), at.1 - 7.0), sup, ss));
}

impl Chart {
    /// Lay the chart out.
    ///
    /// # Panics
    ///
    /// If no line has a point (callers plot measured data only).
    pub fn layout(&self) -> Scene {
        let pts = || self.lines.iter().flat_map(|l| l.points.iter().copied());
        let xmin = pts().map(|p| p.0).fold(f64::INFINITY, f64::min);
        let xmax = pts().map(|p| p.0).fold(0.0, f64::max);
        let ymin = pts().map(|p| p.1).fold(f64::INFINITY, f64::min);
        let ymax = pts().map(|p| p.1).fold(0.0, f64::max);
        assert!(xmin.is_finite() && ymin.is_finite(), "chart without data");
        let (ex0, ex1) = (
            xmin.log2().floor() as i32,
            (xmax.log2().ceil() as i32).max(xmin.log2().floor() as i32 + 1),
        );
        let (ey0, ey1) = (
            ymin.log10().floor() as i32,
            (ymax.log10().ceil() as i32).max(ymin.log10().floor() as i32 + 1),
        );
        let sx =
            |x: f64| LEFT + (RIGHT - LEFT) * ((x.log2() - ex0 as f64) / (ex1 - ex0) as f64) as f32;
        let sy = |y: f64| {
            BOTTOM - (BOTTOM - TOP) * ((y.log10() - ey0 as f64) / (ey1 - ey0) as f64) as f32
        };

        let mut prims = Vec::new();
        prims.push(Prim::Polygon {
            pts: vec![(0.0, 0.0), (W, 0.0), (W, H), (0.0, H)],
            fill: Some(Rgb(255, 255, 255)),
            stroke: None,
        });
        // Grid and ticks.
        let xstep = if ex1 - ex0 > 12 { 2 } else { 1 };
        for e in (ex0..=ex1).filter(|e| (e - ex0) % xstep == 0) {
            let x = sx(2f64.powi(e));
            prims.push(hairline((x, TOP), (x, BOTTOM), GRID));
            prims.push(hairline((x, BOTTOM), (x, BOTTOM + 5.0), INK));
            power_label(
                &mut prims,
                (x, BOTTOM + 22.0),
                "2",
                &e.to_string(),
                Anchor::Middle,
            );
        }
        for e in ey0..=ey1 {
            let y = sy(10f64.powi(e));
            prims.push(hairline((LEFT, y), (RIGHT, y), GRID));
            prims.push(hairline((LEFT - 5.0, y), (LEFT, y), INK));
            power_label(
                &mut prims,
                (LEFT - 8.0, y + 5.0),
                "10",
                &e.to_string(),
                Anchor::End,
            );
            // Minor ticks at 2..9 x 10^e.
            if e < ey1 {
                for m in 2..10 {
                    let y = sy(m as f64 * 10f64.powi(e));
                    prims.push(Prim::Path {
                        pts: vec![(LEFT - 3.0, y), (LEFT, y)],
                        color: INK,
                        width: 0.8,
                        dash: None,
                    });
                }
            }
        }
        prims.push(Prim::Polygon {
            pts: vec![(LEFT, TOP), (RIGHT, TOP), (RIGHT, BOTTOM), (LEFT, BOTTOM)],
            fill: None,
            stroke: Some((INK, 1.2)),
        });
        let text = |at, t: &str, size, anchor, vertical| Prim::Text {
            at,
            text: t.to_string(),
            size,
            anchor,
            vertical,
            color: INK,
        };
        prims.push(text(
            ((LEFT + RIGHT) / 2.0, 28.0),
            &self.title,
            18.0,
            Anchor::Middle,
            false,
        ));
        prims.push(text(
            ((LEFT + RIGHT) / 2.0, 50.0),
            &self.subtitle,
            12.0,
            Anchor::Middle,
            false,
        ));
        prims.push(text(
            ((LEFT + RIGHT) / 2.0, BOTTOM + 52.0),
            &self.x_label,
            15.0,
            Anchor::Middle,
            false,
        ));
        prims.push(text(
            (24.0, (TOP + BOTTOM) / 2.0),
            &self.y_label,
            15.0,
            Anchor::Middle,
            true,
        ));

        // Data.
        for l in &self.lines {
            let pts: Vec<(f32, f32)> = l.points.iter().map(|&(x, y)| (sx(x), sy(y))).collect();
            let dash = l.dashed.then_some((7.0, 4.0));
            prims.push(Prim::Path {
                pts: pts.clone(),
                color: l.color,
                width: 1.8,
                dash,
            });
            if let Some(shape) = l.marker {
                for &p in &pts {
                    prims.push(marker(shape, p, 4.0, l.color));
                }
            }
        }

        // Legend, right of the plot.
        let lx = RIGHT + 20.0;
        let mut ly = TOP + 8.0;
        for l in &self.lines {
            let dash = l.dashed.then_some((7.0, 4.0));
            prims.push(Prim::Path {
                pts: vec![(lx, ly), (lx + 34.0, ly)],
                color: l.color,
                width: 1.8,
                dash,
            });
            if let Some(shape) = l.marker {
                prims.push(marker(shape, (lx + 17.0, ly), 4.0, l.color));
            }
            prims.push(text(
                (lx + 42.0, ly + 4.5),
                &l.name,
                12.5,
                Anchor::Start,
                false,
            ));
            ly += 21.0;
        }
        Scene {
            width: W,
            height: H,
            prims,
        }
    }
}

fn marker(shape: Shape, (x, y): (f32, f32), r: f32, color: Rgb) -> Prim {
    let poly = |pts: Vec<(f32, f32)>| Prim::Polygon {
        pts,
        fill: Some(color),
        stroke: None,
    };
    match shape {
        Shape::Circle => Prim::Circle {
            c: (x, y),
            r,
            fill: Some(color),
            stroke: None,
        },
        Shape::Ring => Prim::Circle {
            c: (x, y),
            r,
            fill: Some(Rgb(255, 255, 255)),
            stroke: Some((color, 1.5)),
        },
        Shape::Square => poly(vec![
            (x - r, y - r),
            (x + r, y - r),
            (x + r, y + r),
            (x - r, y + r),
        ]),
        Shape::TriangleUp => poly(vec![
            (x, y - r * 1.2),
            (x + r * 1.1, y + r * 0.8),
            (x - r * 1.1, y + r * 0.8),
        ]),
        Shape::TriangleDown => poly(vec![
            (x, y + r * 1.2),
            (x + r * 1.1, y - r * 0.8),
            (x - r * 1.1, y - r * 0.8),
        ]),
        Shape::Diamond => poly(vec![
            (x, y - r * 1.3),
            (x + r, y),
            (x, y + r * 1.3),
            (x - r, y),
        ]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn sample() -> Chart {
        Chart {
            title: "copy".into(),
            subtitle: "test".into(),
            x_label: "size [bytes]".into(),
            y_label: "time [s]".into(),
            lines: vec![
                Line {
                    name: "a".into(),
                    points: vec![(64.0, 1e-6), (1024.0, 1e-5), (1048576.0, 1e-3)],
                    color: PALETTE[0],
                    dashed: false,
                    marker: Some(Shape::Circle),
                },
                Line {
                    name: "b <&>".into(),
                    points: vec![(64.0, 2e-6), (1048576.0, 3e-3)],
                    color: PALETTE[1],
                    dashed: true,
                    marker: Some(Shape::Ring),
                },
            ],
        }
    }

    #[test]
    fn layout_keeps_data_inside_the_frame() {
        let s = sample().layout();
        // Five data markers inside the frame, two legend markers right of it.
        let circles: Vec<(f32, f32)> = s
            .prims
            .iter()
            .filter_map(|p| {
                if let Prim::Circle { c, .. } = p {
                    Some(*c)
                } else {
                    None
                }
            })
            .collect();
        assert_eq!(circles.len(), 7);
        let inside = |c: &&(f32, f32)| {
            c.0 >= LEFT - 0.5 && c.0 <= RIGHT + 0.5 && c.1 >= TOP - 0.5 && c.1 <= BOTTOM + 0.5
        };
        assert_eq!(circles.iter().filter(inside).count(), 5);
        assert!(circles
            .iter()
            .filter(|c| !inside(c))
            .all(|c| c.0 > RIGHT && c.0 < W));
        // Ticks 2^6 .. 2^20 and 10^-6 .. 10^-2 are labelled.
        let texts: Vec<&str> = s
            .prims
            .iter()
            .filter_map(|p| {
                if let Prim::Text { text, .. } = p {
                    Some(text.as_str())
                } else {
                    None
                }
            })
            .collect();
        assert!(
            texts.contains(&"20")
                && texts.contains(&"6")
                && texts.contains(&"-6")
                && texts.contains(&"-2")
        );
    }
}
