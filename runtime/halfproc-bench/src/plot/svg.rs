// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! Writes a [`Scene`] as SVG 1.1, by hand: a few element kinds, escaped text.

use super::{font, Anchor, Prim, Rgb, Scene};
use std::fmt::Write as _;

fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            c => o.push(c),
        }
    }
    o
}

fn points(pts: &[(f32, f32)]) -> String {
    let mut s = String::new();
    for (i, (x, y)) in pts.iter().enumerate() {
        if i > 0 {
            s.push(' ');
        }
        let _ = write!(s, "{x:.1},{y:.1}");
    }
    s
}

fn paint(fill: Option<Rgb>, stroke: Option<(Rgb, f32)>) -> String {
    let mut s = match fill {
        Some(c) => format!("fill=\"{}\"", c.hex()),
        None => "fill=\"none\"".into(),
    };
    if let Some((c, w)) = stroke {
        let _ = write!(s, " stroke=\"{}\" stroke-width=\"{w}\"", c.hex());
    }
    s
}

/// The SVG document for `scene`.
pub fn render(scene: &Scene) -> String {
    let mut o = String::new();
    let _ = writeln!(o, r#"<?xml version="1.0" encoding="UTF-8"?>"#);
    let _ = writeln!(
        o,
        r#"<svg xmlns="http://www.w3.org/2000/svg" version="1.1" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="{f}">"#,
        w = scene.width,
        h = scene.height,
        f = font::FAMILY
    );
    for p in &scene.prims {
        match p {
            Prim::Path {
                pts,
                color,
                width,
                dash,
            } => {
                let d = dash.map_or(String::new(), |(a, b)| {
                    format!(" stroke-dasharray=\"{a},{b}\"")
                });
                let _ = writeln!(
                    o,
                    r#"<polyline points="{}" fill="none" stroke="{}" stroke-width="{width}" stroke-linejoin="round"{d}/>"#,
                    points(pts),
                    color.hex()
                );
            }
            Prim::Polygon { pts, fill, stroke } => {
                let _ = writeln!(
                    o,
                    r#"<polygon points="{}" {}/>"#,
                    points(pts),
                    paint(*fill, *stroke)
                );
            }
            Prim::Circle { c, r, fill, stroke } => {
                let _ = writeln!(
                    o,
                    r#"<circle cx="{:.1}" cy="{:.1}" r="{r}" {}/>"#,
                    c.0,
                    c.1,
                    paint(*fill, *stroke)
                );
            }
            Prim::Text {
                at,
                text,
                size,
                anchor,
                vertical,
                color,
            } => {
                let a = match anchor {
                    Anchor::Start => "start",
                    Anchor::Middle => "middle",
                    Anchor::End => "end",
                };
                let rot = if *vertical {
                    format!(" transform=\"rotate(-90 {:.1} {:.1})\"", at.0, at.1)
                } else {
                    String::new()
                };
                let _ = writeln!(
                    o,
                    r#"<text x="{:.1}" y="{:.1}" font-size="{size}" text-anchor="{a}" fill="{}"{rot}>{}</text>"#,
                    at.0,
                    at.1,
                    color.hex(),
                    esc(text)
                );
            }
        }
    }
    o.push_str("</svg>\n");
    o
}

#[cfg(test)]
mod tests {
    #[test]
    fn escapes_and_closes() {
        let s = super::render(&crate::plot::tests::sample().layout());
        assert!(s.starts_with("<?xml"));
        assert!(s.trim_end().ends_with("</svg>"));
        assert!(s.contains("b &lt;&amp;&gt;"));
        assert!(s.contains("stroke-dasharray"));
    }
}
