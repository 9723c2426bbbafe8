// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! The one font of the plots: DejaVu Sans, embedded in the binary (from the
//! `dejavu` crate), so that text can be measured for layout and rendered
//! to PNG without any system font or package, also inside a minimal guest.
//! The SVG names the same family, so a viewer with DejaVu installed shows
//! identical metrics; others substitute a similar sans-serif.

use ab_glyph::{Font, FontRef, GlyphId, OutlineCurve, PxScale, ScaleFont};
use std::sync::OnceLock;

/// The CSS family the SVG asks for.
pub const FAMILY: &str = "DejaVu Sans, Verdana, Arial, sans-serif";

fn font() -> &'static FontRef<'static> {
    static FONT: OnceLock<FontRef<'static>> = OnceLock::new();
    FONT.get_or_init(|| {
        FontRef::try_from_slice(dejavu::sans::regular()).expect("embedded DejaVu Sans parses")
    })
}

/// Width of `text` at `size` px.
pub fn width(text: &str, size: f32) -> f32 {
    layout(text, size).last().map_or(0.0, |g| g.x + g.advance)
}

/// One positioned glyph of a laid-out line.
#[derive(Clone, Copy, Debug)]
pub struct Placed {
    /// The glyph.
    pub id: GlyphId,
    /// Pen position (px from the start of the line).
    pub x: f32,
    /// Advance width (px).
    pub advance: f32,
}

/// Lay out `text` on one line at `size` px, with kerning.
pub fn layout(text: &str, size: f32) -> Vec<Placed> {
    let f = font().as_scaled(PxScale::from(size));
    let mut out: Vec<Placed> = Vec::with_capacity(text.len());
    let mut x = 0.0;
    let mut prev: Option<GlyphId> = None;
    for c in text.chars() {
        let id = f.glyph_id(c);
        if let Some(p) = prev {
            x += f.kern(p, id);
        }
        let advance = f.h_advance(id);
        out.push(Placed { id, x, advance });
        x += advance;
        prev = Some(id);
    }
    out
}

/// A path segment in pixel units, y down, relative to the pen's baseline
/// origin.
#[derive(Clone, Copy, Debug)]
pub enum Seg {
    /// Start a contour.
    Move(f32, f32),
    /// Straight line.
    Line(f32, f32),
    /// Quadratic curve (control, end).
    Quad(f32, f32, f32, f32),
    /// Cubic curve (control 1, control 2, end).
    Cubic(f32, f32, f32, f32, f32, f32),
}

/// The outline of `text` at `size` px as path segments (baseline at y = 0).
pub fn outline(text: &str, size: f32) -> Vec<Seg> {
    let f = font();
    let sf = f.as_scaled(PxScale::from(size));
    let (sx, sy) = (sf.h_scale_factor(), sf.v_scale_factor());
    let mut segs = Vec::new();
    for g in layout(text, size) {
        let Some(o) = f.outline(g.id) else { continue };
        let p = |pt: ab_glyph::Point| (g.x + pt.x * sx, -pt.y * sy);
        let mut last: Option<(f32, f32)> = None;
        for c in &o.curves {
            let (start, seg) = match *c {
                OutlineCurve::Line(a, b) => {
                    let b = p(b);
                    (p(a), Seg::Line(b.0, b.1))
                }
                OutlineCurve::Quad(a, c1, b) => {
                    let (c1, b) = (p(c1), p(b));
                    (p(a), Seg::Quad(c1.0, c1.1, b.0, b.1))
                }
                OutlineCurve::Cubic(a, c1, c2, b) => {
                    let (c1, c2, b) = (p(c1), p(c2), p(b));
                    (p(a), Seg::Cubic(c1.0, c1.1, c2.0, c2.1, b.0, b.1))
                }
            };
            let close_enough =
                last.is_some_and(|l| (l.0 - start.0).abs() < 1e-3 && (l.1 - start.1).abs() < 1e-3);
            if !close_enough {
                segs.push(Seg::Move(start.0, start.1));
            }
            last = Some(match seg {
                Seg::Line(x, y) | Seg::Quad(_, _, x, y) | Seg::Cubic(_, _, _, _, x, y) => (x, y),
                Seg::Move(x, y) => (x, y),
            });
            segs.push(seg);
        }
    }
    segs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn measures_and_outlines() {
        assert!(width("size [bytes]", 14.0) > width("size", 14.0));
        assert!(width("W", 28.0) > 1.9 * width("W", 14.0));
        assert!(!outline("2^28", 14.0).is_empty());
        assert!(outline(" ", 14.0).is_empty());
    }
}
