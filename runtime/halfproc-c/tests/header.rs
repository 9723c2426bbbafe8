// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! `include/halfproc.h` must be exactly what cbindgen generates from
//! `src/lib.rs`. Set `HALFPROC_BLESS=1` to rewrite it after an ABI change.

use std::path::Path;

#[test]
fn header_is_up_to_date() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(dir.join("cbindgen.toml")).expect("cbindgen.toml");
    let mut out = Vec::new();
    cbindgen::Builder::new()
        .with_crate(dir)
        .with_config(config)
        .generate()
        .expect("cbindgen generates the header")
        .write(&mut out);
    let generated = String::from_utf8(out).unwrap();
    let path = dir.join("include/halfproc.h");
    if std::env::var_os("HALFPROC_BLESS").is_some() {
        std::fs::write(&path, &generated).unwrap();
    }
    let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        on_disk == generated,
        "include/halfproc.h is stale: rerun with HALFPROC_BLESS=1\n--- generated ---\n{generated}"
    );
    for f in [
        "halfproc_init",
        "halfproc_create",
        "halfproc_join",
        "halfproc_detach",
        "halfproc_mutex_lock",
        "halfproc_cond_wait",
        "halfproc_malloc",
        "halfproc_free",
        "halfproc_dmread",
        "halfproc_dmwrite",
        "halfproc_yield",
    ] {
        assert!(
            generated.contains(&format!("{f}(")),
            "{f} missing from the header"
        );
    }
}
