//! Helpers shared by the `dmi` command's integration tests: a command's
//! output for assertion messages, and building C examples against libdmi.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A command's status, stdout and stderr, for assertion messages.
pub fn text(o: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Builds libdmi in this test binary's profile; returns its directory.
pub fn libdmi() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let lib = exe.parent().unwrap().parent().unwrap().to_path_buf();
    let mut cargo = Command::new(env!("CARGO"));
    cargo.args(["build", "-q", "-j2", "-p", "dmi", "--lib"]);
    if lib.ends_with("release") {
        cargo.arg("--release");
    }
    assert!(
        cargo.status().expect("cargo runs").success(),
        "cargo build -p dmi --lib"
    );
    assert!(
        lib.join("libdmi.so").exists(),
        "libdmi.so in {}",
        lib.display()
    );
    lib
}

/// How a C example finds libdmi.
#[derive(Clone, Copy)]
pub enum Link {
    /// `-I`, `-L` and an rpath to the build.
    Direct,
    /// `pkg-config --cflags --libs dmi`, from a `dmi.pc` made from
    /// `dmi.pc.in` in the output directory (the path users take).
    PkgConfig,
}

/// Compiles `runtime/dmi/examples/NAME.c` into `dir/out_name` against the
/// libdmi in `lib` (see [`libdmi`]), with `flags` before the others.
pub fn build_example(
    lib: &Path,
    name: &str,
    dir: &Path,
    out_name: &str,
    flags: &[&str],
    how: Link,
) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../runtime/dmi");
    std::fs::create_dir_all(dir).unwrap();
    let link: Vec<String> = match how {
        Link::Direct => vec![
            format!("-I{}", root.join("include").display()),
            format!("-L{}", lib.display()),
            format!("-Wl,-rpath,{}", lib.display()),
            "-ldmi".into(),
        ],
        Link::PkgConfig => {
            let pc = std::fs::read_to_string(root.join("dmi.pc.in"))
                .unwrap()
                .replace("@PREFIX@", root.to_str().unwrap())
                .replace("@LIBDIR@", lib.to_str().unwrap())
                .replace("@INCLUDEDIR@", root.join("include").to_str().unwrap())
                .replace("@VERSION@", "0.1.0")
                .replace("@LIBNAME@", "dmi");
            std::fs::write(dir.join("dmi.pc"), pc).unwrap();
            let o = Command::new("pkg-config")
                .env("PKG_CONFIG_PATH", dir)
                .args(["--cflags", "--libs", "dmi"])
                .output()
                .expect("pkg-config is installed");
            assert!(o.status.success(), "pkg-config dmi: {}", text(&o));
            String::from_utf8(o.stdout)
                .unwrap()
                .split_whitespace()
                .map(String::from)
                .collect()
        }
    };
    // Tests of one binary run in parallel and build the same program: each
    // compiles to a name of its own and renames it into place, so nobody
    // runs a file the linker is still writing ("Permission denied").
    static BUILDS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = BUILDS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let out = dir.join(out_name);
    let part = dir.join(format!("{out_name}.{}-{n}.part", std::process::id()));
    let cc = Command::new("cc")
        .args(flags)
        .args(["-std=c11", "-D_GNU_SOURCE", "-O2", "-Wall", "-Werror", "-o"])
        .arg(&part)
        .arg(root.join(format!("examples/{name}.c")))
        .args(&link)
        .output()
        .expect("cc is installed");
    assert!(cc.status.success(), "compiling {name}.c: {}", text(&cc));
    std::fs::rename(&part, &out).unwrap();
    out
}
