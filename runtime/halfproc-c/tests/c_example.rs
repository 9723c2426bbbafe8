// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! Builds `examples/example.c` against the static and the shared library
//! through the generated `halfproc.pc` (pkg-config), runs both, and checks
//! their output.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Where cargo put libhalfproc_c.{a,so}: `target/<profile>/` after a
/// build of the package, `target/<profile>/deps/` when only tests were built.
fn lib_dir() -> PathBuf {
    // target/<profile>/deps/c_example-<hash>
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap().to_path_buf();
    let profile = deps.parent().unwrap().to_path_buf();
    [profile, deps]
        .into_iter()
        .find(|d| d.join("libhalfproc_c.a").exists() && d.join("libhalfproc_c.so").exists())
        .expect("libhalfproc_c.a and libhalfproc_c.so built next to the test")
}

fn write_pc(dir: &Path, libdir: &Path) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"));
    let tpl = std::fs::read_to_string(src.join("halfproc.pc.in")).unwrap();
    let pc = tpl
        .replace("@PREFIX@", src.to_str().unwrap())
        .replace("@LIBDIR@", libdir.to_str().unwrap())
        .replace("@INCLUDEDIR@", src.join("include").to_str().unwrap())
        .replace("@VERSION@", env!("CARGO_PKG_VERSION"))
        .replace("@LIBNAME@", "halfproc_c");
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("halfproc.pc"), pc).unwrap();
    dir.to_path_buf()
}

fn pkg_config(pcdir: &Path, args: &[&str]) -> Vec<String> {
    let out = Command::new("pkg-config")
        .env("PKG_CONFIG_PATH", pcdir)
        .args(args)
        .arg("halfproc")
        .output()
        .expect("pkg-config is installed");
    assert!(
        out.status.success(),
        "pkg-config: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .split_whitespace()
        .map(String::from)
        .collect()
}

fn build_and_run(out: &Path, link: &[String], extra_env: Option<(&str, &Path)>) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/example.c");
    let st = Command::new("cc")
        .args(["-std=c11", "-D_GNU_SOURCE", "-Wall", "-Werror", "-o"])
        .arg(out)
        .arg(&src)
        .args(link)
        .status()
        .expect("a C compiler (cc) is installed");
    assert!(st.success(), "compiling {} failed", src.display());
    let mut cmd = Command::new(out);
    if let Some((k, v)) = extra_env {
        cmd.env(k, v);
    }
    let o = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{} failed: {}\n{}",
        out.display(),
        stdout,
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        stdout.contains("counter=4000"),
        "unexpected output: {stdout}"
    );
}

#[test]
fn c_example_links_statically_and_dynamically() {
    let libdir = lib_dir();
    let work = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("halfproc-c-example");
    let pcdir = write_pc(&work.join("pkgconfig"), &libdir);

    // Static: the archive itself plus Libs.private.
    let mut link = pkg_config(&pcdir, &["--cflags"]);
    link.push(libdir.join("libhalfproc_c.a").to_str().unwrap().to_string());
    link.extend(
        pkg_config(&pcdir, &["--libs-only-l", "--static"])
            .into_iter()
            .filter(|l| l != "-lhalfproc_c"),
    );
    build_and_run(&work.join("example-static"), &link, None);

    // Shared: -lhalfproc_c through pkg-config; at run time the loader looks
    // for the soname it is installed under (scripts/install), found via rpath.
    let soname = work.join(format!(
        "libhalfproc.so.{}",
        env!("CARGO_PKG_VERSION_MAJOR")
    ));
    let _ = std::fs::remove_file(&soname);
    std::os::unix::fs::symlink(libdir.join("libhalfproc_c.so"), &soname).unwrap();
    let mut link = pkg_config(&pcdir, &["--cflags", "--libs"]);
    link.push(format!("-Wl,-rpath,{}", work.display()));
    build_and_run(&work.join("example-shared"), &link, None);
}
