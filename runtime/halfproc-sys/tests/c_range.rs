// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! The two copies of the shared-range bounds check, one per language, agree
//! at the edges: this crate's [`in_shared_range`] and `in_range()` of
//! `tests/lib/halfproc_test.h`, which the in-guest C tests use. The C one is
//! compiled here with the system's `cc` and run on the same cases.

use std::fmt::Write as _;
use std::process::Command;

use halfproc_sys::range::{in_shared_range, HALFPROC_RANGE_END, HALFPROC_RANGE_START};

fn cases() -> Vec<(u64, u64)> {
    let (s, e) = (HALFPROC_RANGE_START, HALFPROC_RANGE_END);
    let mut v = Vec::new();
    for addr in [
        0,
        1,
        s - 1,
        s,
        s + 1,
        e - 4096,
        e - 1,
        e,
        e + 1,
        u64::MAX - 1,
        u64::MAX,
    ] {
        for len in [
            0,
            1,
            2,
            4096,
            e - s,
            e - s + 1,
            s,
            u64::MAX - s + 1,
            u64::MAX,
        ] {
            v.push((addr, len));
        }
    }
    v
}

#[test]
fn c_helper_agrees_with_rust_at_the_edges() {
    let header = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/lib");
    let dir = std::env::temp_dir().join(format!("halfproc-sys-c-range-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cases = cases();
    let mut src = String::from(
        "#include \"halfproc_test.h\"\nint main(void)\n{\n\tstatic const unsigned long long c[][2] = {\n",
    );
    for (a, l) in &cases {
        writeln!(src, "\t\t{{ {a:#x}ULL, {l:#x}ULL }},").unwrap();
    }
    src.push_str(
        "\t};\n\tfor (unsigned i = 0; i < sizeof(c) / sizeof(c[0]); i++)\n\
         \t\tputchar(in_range((const void *)(uintptr_t)c[i][0], (size_t)c[i][1]) ? '1' : '0');\n\
         \treturn 0;\n}\n",
    );
    let c = dir.join("range.c");
    let exe = dir.join("range");
    std::fs::write(&c, src).unwrap();
    let cc = Command::new("cc")
        .args([
            "-std=gnu11",
            "-Wall",
            "-Werror",
            "-Wno-unused-function",
            "-O2",
            "-I",
            header,
        ])
        .arg(&c)
        .arg("-o")
        .arg(&exe)
        .output()
        .expect("cc (the C compiler the guest tests are built with) runs");
    assert!(
        cc.status.success(),
        "cc: {}",
        String::from_utf8_lossy(&cc.stderr)
    );
    let out = Command::new(&exe).output().unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    let got = String::from_utf8(out.stdout).unwrap();
    assert_eq!(got.len(), cases.len());
    for ((a, l), c) in cases.iter().zip(got.chars()) {
        assert_eq!(
            c == '1',
            in_shared_range(*a, *l),
            "in_range({a:#x}, {l:#x}): C says {c}"
        );
    }
    // The table is not trivial: both answers occur.
    assert!(got.contains('1') && got.contains('0'));
}
