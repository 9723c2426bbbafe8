// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! `halfproc`: the runtime's command-line tool.
//!
//! ```text
//! halfproc info [--backend auto|kernel|portable] [--probe]
//! ```
//!
//! The top of the crate graph: it depends on the runtime and the
//! benchmarks (and will on migration and DMI); nothing depends on it.
//! Adding a subcommand: add a variant to `Command` with its own `Args`
//! struct and a `run_*` function returning an exit code.

fn main() -> std::process::ExitCode {
    cli::main()
}

mod cli {
    use std::process::ExitCode;
    use std::sync::atomic::{AtomicU64, Ordering};

    use clap::{Args, Parser, Subcommand};
    use halfproc::backend::{Backend, Request};
    use halfproc::{Member, Set, SetConfig};

    #[derive(Parser)]
    #[command(name = "halfproc", version, about = "halfproc runtime tool")]
    struct Cli {
        #[command(subcommand)]
        command: Command,
    }

    #[derive(Subcommand)]
    enum Command {
        /// Print the detected backend and which half-process semantics hold.
        Info(InfoArgs),
        /// Benchmarks: `bench copy` (intra-node copy strategies, the paper's
        /// Figs. 7/8) and `bench mm` (mmap/fault overhead of the shared
        /// range, section 4.4.3). `halfproc bench copy --help` lists options.
        Bench {
            /// `copy|mm` and its options.
            #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
            args: Vec<String>,
        },
    }

    #[derive(Args)]
    struct InfoArgs {
        /// Backend to use: auto (default: $HALFPROC_BACKEND or detection), kernel, portable.
        #[arg(long)]
        backend: Option<String>,
        /// Also create a set and check it works (member, shared memory, lock, dmread).
        #[arg(long)]
        probe: bool,
    }

    pub(crate) fn main() -> ExitCode {
        let cli = Cli::parse();
        match cli.command {
            Command::Info(a) => run_info(a),
            Command::Bench { args } => {
                ExitCode::from(halfproc_bench::main_with_args(&args).clamp(0, 255) as u8)
            }
        }
    }

    fn run_info(a: InfoArgs) -> ExitCode {
        let backend = match a.backend.as_deref() {
            Some(s) => s.parse::<Request>().and_then(Backend::select),
            None => Backend::from_env(),
        };
        let backend = match backend {
            Ok(b) => b,
            Err(e) => {
                eprintln!("halfproc: {e}");
                return ExitCode::from(2);
            }
        };
        println!("backend: {}", backend.kind());
        println!("reason: {}", backend.reason());
        println!(
            "kernel module: {}",
            if Backend::kernel_available() {
                "loaded"
            } else {
                "not loaded"
            }
        );
        println!("semantics:");
        for s in backend.semantics() {
            println!(
                "  [{}] {:<44} {}",
                if s.holds { "x" } else { " " },
                s.name,
                s.note
            );
        }
        if !a.probe {
            return ExitCode::SUCCESS;
        }
        match probe(&backend) {
            Ok(()) => {
                println!("probe: ok");
                ExitCode::SUCCESS
            }
            Err(e) => {
                println!("probe: FAILED: {e}");
                ExitCode::FAILURE
            }
        }
    }

    static PRIVATE: AtomicU64 = AtomicU64::new(0x5eed);

    fn probe_member(cell: &halfproc::sync::Mutex<u64>) -> i32 {
        *cell
            .lock()
            .unwrap_or_else(|e| e.into_inner().expect("member of the set")) += 41;
        0
    }

    fn probe(backend: &Backend) -> Result<(), Box<dyn std::error::Error>> {
        let req = Request::Exactly(backend.kind());
        let set = Set::init(SetConfig::from_env()?.backend(req))?;
        println!(
            "probe: arena {:#x} + {} MiB, creator pid {}",
            set.base() as usize,
            set.size() >> 20,
            set.creator_pid()
        );
        let cell: &'static halfproc::sync::Mutex<u64> = halfproc::SharedBox::leak(
            halfproc::alloc::shared_box(halfproc::sync::Mutex::new(1u64))?,
        );
        let m = Member::spawn(set, move || probe_member(cell))?;
        let st = m.join()?;
        let v = *cell.lock().map_err(|e| e.to_string())?;
        println!("probe: member {st}, shared counter {v}");
        if !st.success() || v != 42 {
            return Err("member did not update shared memory".into());
        }
        let mut buf = [0u8; 8];
        let n = halfproc::dmread(set.creator_pid(), PRIVATE.as_ptr() as usize, 8, &mut buf)?;
        PRIVATE.fetch_add(0, Ordering::Relaxed);
        println!("probe: dmread copied {n} bytes");
        if u64::from_ne_bytes(buf) != 0x5eed {
            return Err("dmread returned wrong bytes".into());
        }
        Ok(())
    }
}
