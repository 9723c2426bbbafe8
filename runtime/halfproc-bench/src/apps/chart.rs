// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! The app comparison's figure, like the half-process paper's Figs. 15-22:
//! one panel per app, seconds per iteration (linear, from 0) against the
//! node count, DMI and MPI as lines through the medians with a bar from the
//! fastest to the slowest run. Laid out as a [`Scene`], so the SVG and the
//! PNG renderers of `plot/` draw it.

use super::report::{summarize, AppsReport, Impl, Run};
use crate::plot::{font, Anchor, Prim, Rgb, Scene};

const PANEL_W: f32 = 430.0;
const PANEL_H: f32 = 300.0;
const COLS: usize = 2;
const MARGIN_L: f32 = 78.0;
const MARGIN_T: f32 = 116.0;
const GAP_X: f32 = 110.0;
const GAP_Y: f32 = 90.0;
const INK: Rgb = Rgb(0x20, 0x20, 0x20);
const GRID: Rgb = Rgb(0xdd, 0xdd, 0xdd);
const DMI: Rgb = Rgb(0xd6, 0x27, 0x28);
const MPI: Rgb = Rgb(0x1f, 0x77, 0xb4);
const HP: Rgb = Rgb(0x2c, 0xa0, 0x2c);

fn text(at: (f32, f32), s: String, size: f32, anchor: Anchor) -> Prim {
    Prim::Text {
        at,
        text: s,
        size,
        anchor,
        vertical: false,
        color: INK,
    }
}

fn line(pts: Vec<(f32, f32)>, color: Rgb, width: f32, dash: Option<(f32, f32)>) -> Prim {
    Prim::Path {
        pts,
        color,
        width,
        dash,
    }
}

/// A step of 1, 2 or 5 times a power of ten giving about 5 ticks to `max`.
fn tick_step(max: f64) -> f64 {
    let raw = max / 5.0;
    let p = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * p)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * p)
}

/// Seconds to a unit that suits `max` (`ms` below 1 s).
fn unit(max: f64) -> (f64, &'static str) {
    if max < 1.0 {
        (1e3, "ms")
    } else {
        (1.0, "s")
    }
}

fn times(runs: &[Run]) -> Vec<f64> {
    runs.iter()
        .filter_map(|r| match r {
            Run::Ok(p) => Some(p.time_per_iter),
            Run::Failed(_) => None,
        })
        .collect()
}

/// Lays out the figure (one panel per app, in the report's order).
pub fn layout(r: &AppsReport) -> Scene {
    let mut apps: Vec<&str> = Vec::new();
    for c in &r.cells {
        if !apps.contains(&c.app.as_str()) {
            apps.push(&c.app);
        }
    }
    let rows = apps.len().div_ceil(COLS).max(1);
    let cols = apps.len().clamp(1, COLS);
    let width = MARGIN_L + cols as f32 * (PANEL_W + GAP_X);
    let height = MARGIN_T + rows as f32 * (PANEL_H + GAP_Y);
    let mut prims = vec![Prim::Polygon {
        pts: vec![(0.0, 0.0), (width, 0.0), (width, height), (0.0, height)],
        fill: Some(Rgb(255, 255, 255)),
        stroke: None,
    }];
    prims.push(text(
        (MARGIN_L, 28.0),
        if r.machine.label.is_empty() {
            format!(
                "Apps: DMI vs MPI, size {}, {} runs ({} CPUs, oversubscribed above that)",
                r.size, r.runs, r.machine.cpus
            )
        } else {
            format!(
                "Apps: DMI vs MPI, size {}, {} runs, {}",
                r.size, r.runs, r.machine.label
            )
        },
        18.0,
        Anchor::Start,
    ));
    prims.push(text(
        (MARGIN_L, 50.0),
        format!(
            "time per iteration; line: median, bar: fastest to slowest run; load average {} before, {} after",
            r.load.0.map_or("?".into(), |l| l.to_string()),
            r.load.1.map_or("?".into(), |l| l.to_string())
        ),
        13.0,
        Anchor::Start,
    ));
    let mut lx = MARGIN_L;
    // This machine's launchers by default; elsewhere the notes say how
    // the runs were placed (table and JSON), too long for a legend.
    let this_machine = r.dmi_note == super::DMI_NOTE && r.mpi_note == super::MPI_NOTE;
    let (mpi, dmi) = if this_machine {
        ("MPI (apps/mpirun.sh)", "DMI (dmi run, loopback TCP)")
    } else {
        ("MPI", "DMI")
    };
    let mut keys = vec![(mpi, MPI, Some((6.0, 4.0))), (dmi, DMI, None)];
    if r.has_yield() {
        keys.push(("DMI+half-process (APP_yield)", HP, Some((2.0, 3.0))));
    }
    for (name, color, dash) in keys {
        prims.push(line(vec![(lx, 68.0), (lx + 26.0, 68.0)], color, 2.0, dash));
        prims.push(text((lx + 32.0, 72.0), name.into(), 13.0, Anchor::Start));
        lx += 60.0 + font::width(name, 13.0);
    }
    for (k, app) in apps.iter().enumerate() {
        let x0 = MARGIN_L + (k % COLS) as f32 * (PANEL_W + GAP_X);
        let y0 = MARGIN_T + (k / COLS) as f32 * (PANEL_H + GAP_Y);
        panel(&mut prims, r, app, (x0, y0));
    }
    Scene {
        width,
        height,
        prims,
    }
}

fn panel(prims: &mut Vec<Prim>, r: &AppsReport, app: &str, (x0, y0): (f32, f32)) {
    let cells: Vec<_> = r.cells.iter().filter(|c| c.app == app).collect();
    let bottom = y0 + PANEL_H;
    let ymax = cells
        .iter()
        .flat_map(|c| times(&c.dmi).into_iter().chain(times(&c.mpi)))
        .fold(0.0, f64::max);
    let (scale, unit_name) = unit(ymax);
    let top_val = if ymax > 0.0 {
        let st = tick_step(ymax * scale);
        ((ymax * scale / st).ceil() * st, st)
    } else {
        (1.0, 0.2)
    };
    let sy = |s: f64| bottom - PANEL_H * ((s * scale) / top_val.0) as f32;
    let n = cells.len().max(1);
    let sx = |i: usize| x0 + PANEL_W * (i as f32 + 0.5) / n as f32;

    prims.push(text(
        (x0 + PANEL_W / 2.0, y0 - 8.0),
        app.to_string(),
        16.0,
        Anchor::Middle,
    ));
    let decimals = (-top_val.1.log10().floor()).max(0.0) as usize;
    let ticks = (top_val.0 / top_val.1).round() as usize;
    for k in 0..=ticks {
        let v = k as f64 * top_val.1;
        let y = bottom - PANEL_H * (v / top_val.0) as f32;
        prims.push(line(vec![(x0, y), (x0 + PANEL_W, y)], GRID, 1.0, None));
        prims.push(text(
            (x0 - 6.0, y + 4.0),
            format!("{v:.decimals$}"),
            12.0,
            Anchor::End,
        ));
    }
    prims.push(Prim::Polygon {
        pts: vec![
            (x0, y0),
            (x0 + PANEL_W, y0),
            (x0 + PANEL_W, bottom),
            (x0, bottom),
        ],
        fill: None,
        stroke: Some((INK, 1.0)),
    });
    prims.push(Prim::Text {
        at: (x0 - 48.0, y0 + PANEL_H / 2.0),
        text: format!("time per iteration [{unit_name}]"),
        size: 13.0,
        anchor: Anchor::Middle,
        vertical: true,
        color: INK,
    });
    for (i, c) in cells.iter().enumerate() {
        prims.push(text(
            (sx(i), bottom + 18.0),
            c.nodes.to_string(),
            13.0,
            Anchor::Middle,
        ));
    }
    prims.push(text(
        (x0 + PANEL_W / 2.0, bottom + 38.0),
        "nodes (processes)".into(),
        13.0,
        Anchor::Middle,
    ));

    for (imp, color, dash, dx) in [
        (Impl::Mpi, MPI, Some((6.0, 4.0)), -5.0),
        (Impl::Dmi, DMI, None, 5.0),
        (Impl::Yield, HP, Some((2.0, 3.0)), 0.0),
    ] {
        let mut pts = Vec::new();
        for (i, c) in cells.iter().enumerate() {
            let t = times(c.runs(imp));
            let Some(s) = summarize(c.runs(imp)) else {
                continue;
            };
            let x = sx(i) + dx;
            let (lo, hi) = (s.min, t.iter().copied().fold(0.0, f64::max));
            prims.push(line(vec![(x, sy(lo)), (x, sy(hi))], color, 1.5, None));
            prims.push(line(
                vec![(x - 4.0, sy(lo)), (x + 4.0, sy(lo))],
                color,
                1.5,
                None,
            ));
            prims.push(line(
                vec![(x - 4.0, sy(hi)), (x + 4.0, sy(hi))],
                color,
                1.5,
                None,
            ));
            pts.push((x, sy(s.median)));
        }
        if pts.len() > 1 {
            prims.push(line(pts.clone(), color, 2.0, dash));
        }
        for p in pts {
            prims.push(Prim::Circle {
                c: p,
                r: 4.0,
                fill: Some(color),
                stroke: None,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::report::{AppsReport, Cell, Run};
    use super::super::{AppsOpts, Printed};
    use super::*;

    fn ok(t: f64) -> Run {
        Run::Ok(Printed {
            iterations: 1,
            time_per_iter: t,
            checksum: "0".into(),
        })
    }

    #[test]
    fn ticks_are_round() {
        assert_eq!(tick_step(10.0), 2.0);
        assert_eq!(tick_step(0.9), 0.2);
        assert_eq!(tick_step(37.0), 10.0);
    }

    #[test]
    fn every_point_lies_inside_its_panel() {
        let cells = [1, 2, 4]
            .into_iter()
            .map(|n| Cell {
                app: "jacobi".into(),
                nodes: n,
                mpi: vec![ok(0.01 / n as f64), ok(0.02)],
                dmi: vec![ok(0.012), Run::Failed("x".into())],
                yld: vec![ok(0.013)],
            })
            .collect();
        let r = AppsReport::new(&AppsOpts::default(), cells);
        let s = layout(&r);
        for p in &s.prims {
            if let Prim::Circle { c, .. } = p {
                assert!(c.0 > MARGIN_L && c.0 < MARGIN_L + PANEL_W, "{c:?}");
                assert!(c.1 >= MARGIN_T && c.1 <= MARGIN_T + PANEL_H, "{c:?}");
            }
        }
        let svg = crate::plot::svg::render(&s);
        assert!(svg.contains("jacobi") && svg.contains("time per iteration [ms]"));
        assert!(svg.contains("apps/mpirun.sh") && svg.contains("oversubscribed"));
        assert!(svg.contains("DMI+half-process"));
        // Elsewhere (two guests): the label in the title, not this machine's launchers.
        let o = AppsOpts {
            label: "two guests".into(),
            mpi_note: "one rank per guest".into(),
            ..AppsOpts::default()
        };
        let r = AppsReport::new(&o, r.cells.clone());
        let svg = crate::plot::svg::render(&layout(&r));
        assert!(svg.contains("two guests"), "{svg}");
        assert!(!svg.contains("apps/mpirun.sh") && !svg.contains("oversubscribed"));
    }
}
