// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! `run_copy` and `run_mm` write well-formed JSON, SVG and PNG files whose
//! content matches the report (not timing).

use halfproc_bench::opts::{CopyOpts, MmOpts, Placement};
use halfproc_bench::report::Outcome;
use halfproc_bench::{run_copy, run_mm, Strategy};
use std::path::PathBuf;

fn tempdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("halfproc-bench-test-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

#[test]
fn copy_writes_json_table_and_plots() {
    let dir = tempdir("copy");
    let opts = CopyOpts {
        sizes: vec![6, 9, 12],
        strategies: vec![
            Strategy::Shared,
            Strategy::Pipe,
            Strategy::CmaPushPipelined,
            Strategy::Dmread,
        ],
        reps: 2,
        rounds: 2,
        warmup: 1,
        placements: vec![Placement::Same, Placement::Different],
        out: Some(dir.clone()),
        label: "test".into(),
        progress: false,
        backend: "auto".into(),
        ..CopyOpts::default()
    };
    let report = run_copy(&opts).unwrap();

    // JSON: parses, and says what the report says.
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("copy.json")).unwrap()).unwrap();
    assert_eq!(json["benchmark"], "copy");
    assert_eq!(json["sizes"], serde_json::json!([64, 512, 4096]));
    assert!(json["memcpy_bytes_per_s"].as_f64().unwrap() > 0.0);
    let places = json["placements"].as_array().unwrap();
    assert_eq!(places.len(), 2);
    for (p, rp) in places.iter().zip(&report.placements) {
        let series = p["series"].as_array().unwrap();
        assert_eq!(series.len(), 4);
        for (s, rs) in series.iter().zip(&rp.series) {
            assert_eq!(s["strategy"], rs.strategy.name());
            match &rs.outcome {
                Outcome::Measured(cells) => {
                    assert_eq!(s["status"], "measured");
                    let res = s["results"].as_array().unwrap();
                    assert_eq!(res.len(), 3);
                    for (r, c) in res.iter().zip(cells) {
                        assert_eq!(r["samples_ns"].as_array().unwrap().len(), 2);
                        assert_eq!(r["min_ns"].as_u64().unwrap(), c.min());
                        assert!(
                            r["min_ns"].as_u64().unwrap() as f64
                                <= r["median_ns"].as_f64().unwrap()
                        );
                    }
                }
                Outcome::Unavailable(_) => {
                    assert_eq!(s["status"], "unavailable");
                    assert!(!s["reason"].as_str().unwrap().is_empty());
                }
                Outcome::Failed(why) => panic!("{} failed: {why}", rs.strategy),
            }
        }
    }
    // Ratios at the largest size are present for measured pairs.
    assert!(places[0]["ratios_at_largest_size"]
        .as_array()
        .unwrap()
        .iter()
        .any(|r| r["label"] == "half-process vs pipe"));

    // The table names every strategy and the unavailable one with a reason.
    let table = std::fs::read_to_string(dir.join("copy.txt")).unwrap();
    assert_eq!(table, report.table());
    for s in ["shared", "pipe", "cma-push-pipelined"] {
        assert!(table.contains(s));
    }
    if halfproc_bench::backend::detect() == halfproc::BackendKind::Portable {
        assert!(table.contains("UNAVAILABLE dmread:"), "{table}");
    }

    // SVG: well-formed XML with one legend entry per measured line.
    for place in ["same", "different"] {
        let svg_path = dir.join(format!("copy-{place}.svg"));
        if place == "different" && report.placements[1].skipped.is_some() {
            assert!(!svg_path.exists());
            continue;
        }
        let svg = std::fs::read_to_string(&svg_path).unwrap();
        let doc = roxmltree::Document::parse(&svg).expect("well-formed SVG");
        assert_eq!(doc.root_element().tag_name().name(), "svg");
        let texts: Vec<String> = doc
            .descendants()
            .filter(|n| n.has_tag_name("text"))
            .filter_map(|n| n.text().map(String::from))
            .collect();
        assert!(
            texts.iter().any(|t| t == "shared (half-process)"),
            "{texts:?}"
        );
        assert!(texts.iter().any(|t| t.starts_with("ref: memcpy")));
        assert!(
            !texts.iter().any(|t| t.starts_with("dmread")) || report.backend.name() == "kernel"
        );

        // PNG: decodes, has the expected size, and is not blank.
        let png = std::fs::File::open(dir.join(format!("copy-{place}.png"))).unwrap();
        let mut dec = png::Decoder::new(png).read_info().unwrap();
        let mut buf = vec![0; dec.output_buffer_size()];
        let info = dec.next_frame(&mut buf).unwrap();
        assert_eq!((info.width, info.height), (2000, 1280));
        let dark = buf
            .chunks(4)
            .filter(|p| p[0] < 100 && p[1] < 100 && p[2] < 100)
            .count();
        assert!(dark > 2000, "PNG looks blank ({dark} dark pixels)");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn mm_writes_ratios() {
    let dir = tempdir("mm");
    let opts = MmOpts {
        mmaps: 2000,
        faults: 3000,
        reps: 2,
        out: Some(dir.clone()),
        progress: false,
        backend: "auto".into(),
        label: "test".into(),
    };
    let r = run_mm(&opts).unwrap();
    let (a, b) = r.mmap.ratios();
    assert!(a.is_finite() && a > 0.0 && b.is_finite() && b > 0.0);
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("mm.json")).unwrap()).unwrap();
    assert_eq!(json["benchmark"], "mm");
    assert_eq!(json["fault"]["count"], 3000);
    assert_eq!(json["mmap"]["private_ns"].as_array().unwrap().len(), 2);
    assert!((json["mmap"]["paper_ratio"].as_f64().unwrap() - 1.0486).abs() < 1e-3);
    let table = std::fs::read_to_string(dir.join("mm.txt")).unwrap();
    assert!(
        table.contains("mmap+munmap") && table.contains("page fault") && table.contains("+4.9%")
    );
    let _ = std::fs::remove_dir_all(&dir);
}
