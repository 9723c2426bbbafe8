// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! Rasterises a [`Scene`] to PNG with tiny-skia (anti-aliased paths) and the
//! embedded font's glyph outlines, so text is drawn as filled paths: the
//! same code handles rotated labels, and nothing outside the binary is read.

use super::{font, Anchor, Prim, Rgb, Scene};
use crate::error::{Error, Result};
use tiny_skia::{Color, FillRule, Paint, PathBuilder, Pixmap, Stroke, StrokeDash, Transform};

/// Pixels per scene unit: 2 gives a crisp image for documents.
pub const SCALE: f32 = 2.0;

fn paint(c: Rgb) -> Paint<'static> {
    let mut p = Paint::default();
    p.set_color(Color::from_rgba8(c.0, c.1, c.2, 255));
    p.anti_alias = true;
    p
}

fn poly(pts: &[(f32, f32)], close: bool) -> Option<tiny_skia::Path> {
    let mut pb = PathBuilder::new();
    let (first, rest) = pts.split_first()?;
    pb.move_to(first.0, first.1);
    for p in rest {
        pb.line_to(p.0, p.1);
    }
    if close {
        pb.close();
    }
    pb.finish()
}

fn text_path(text: &str, size: f32) -> Option<tiny_skia::Path> {
    let mut pb = PathBuilder::new();
    let mut open = false;
    for s in font::outline(text, size) {
        match s {
            font::Seg::Move(x, y) => {
                if open {
                    pb.close();
                }
                pb.move_to(x, y);
                open = true;
            }
            font::Seg::Line(x, y) => pb.line_to(x, y),
            font::Seg::Quad(a, b, x, y) => pb.quad_to(a, b, x, y),
            font::Seg::Cubic(a, b, c, d, x, y) => pb.cubic_to(a, b, c, d, x, y),
        }
    }
    if open {
        pb.close();
    }
    pb.finish()
}

/// Fill `path` and then stroke it (colour, width), each when asked for.
fn fill_and_stroke(
    pm: &mut Pixmap,
    path: &tiny_skia::Path,
    fill: Option<Rgb>,
    stroke: Option<(Rgb, f32)>,
    base: Transform,
) {
    if let Some(c) = fill {
        pm.fill_path(path, &paint(c), FillRule::Winding, base, None);
    }
    if let Some((c, width)) = stroke {
        let s = Stroke {
            width,
            ..Stroke::default()
        };
        pm.stroke_path(path, &paint(c), &s, base, None);
    }
}

/// The scene as an RGBA pixmap.
pub fn rasterize(scene: &Scene) -> Result<Pixmap> {
    let (w, h) = ((scene.width * SCALE) as u32, (scene.height * SCALE) as u32);
    let mut pm = Pixmap::new(w, h)
        .ok_or_else(|| Error::Verify(format!("cannot allocate a {w}x{h} pixmap")))?;
    pm.fill(Color::WHITE);
    let base = Transform::from_scale(SCALE, SCALE);
    for p in &scene.prims {
        match p {
            Prim::Path {
                pts,
                color,
                width,
                dash,
            } => {
                let Some(path) = poly(pts, false) else {
                    continue;
                };
                let mut stroke = Stroke {
                    width: *width,
                    ..Stroke::default()
                };
                stroke.line_join = tiny_skia::LineJoin::Round;
                if let Some((a, b)) = dash {
                    stroke.dash = StrokeDash::new(vec![*a, *b], 0.0);
                }
                pm.stroke_path(&path, &paint(*color), &stroke, base, None);
            }
            Prim::Polygon { pts, fill, stroke } => {
                if let Some(path) = poly(pts, true) {
                    fill_and_stroke(&mut pm, &path, *fill, *stroke, base);
                }
            }
            Prim::Circle { c, r, fill, stroke } => {
                if let Some(path) = PathBuilder::from_circle(c.0, c.1, *r) {
                    fill_and_stroke(&mut pm, &path, *fill, *stroke, base);
                }
            }
            Prim::Text {
                at,
                text,
                size,
                anchor,
                vertical,
                color,
            } => {
                let Some(path) = text_path(text, *size) else {
                    continue;
                };
                let width = font::width(text, *size);
                let dx = match anchor {
                    Anchor::Start => 0.0,
                    Anchor::Middle => -width / 2.0,
                    Anchor::End => -width,
                };
                let local = if *vertical {
                    Transform::from_translate(at.0, at.1)
                        .pre_concat(Transform::from_rotate(-90.0))
                        .pre_translate(dx, 0.0)
                } else {
                    Transform::from_translate(at.0 + dx, at.1)
                };
                pm.fill_path(
                    &path,
                    &paint(*color),
                    FillRule::Winding,
                    base.pre_concat(local),
                    None,
                );
            }
        }
    }
    Ok(pm)
}

/// The scene as PNG bytes.
pub fn render(scene: &Scene) -> Result<Vec<u8>> {
    rasterize(scene)?
        .encode_png()
        .map_err(|e| Error::Verify(format!("PNG encoding failed: {e}")))
}

#[cfg(test)]
mod tests {
    #[test]
    fn draws_something_and_encodes() {
        let scene = crate::plot::tests::sample().layout();
        let pm = super::rasterize(&scene).unwrap();
        // Not all white: lines, text and markers left ink.
        let dark = pm
            .pixels()
            .iter()
            .filter(|p| p.red() < 128 && p.green() < 128)
            .count();
        assert!(dark > 1000, "only {dark} dark pixels");
        let png = super::render(&scene).unwrap();
        assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    }
}
