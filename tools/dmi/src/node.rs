// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! `dmi node join` / `dmi node leave RANK`: requests to a running
//! reconfigurable program through its control socket (`dmi run --control
//! PATH --spares K`).

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Subcommand};

/// Make a node join or leave a running reconfigurable program.
///
/// The program (DMI_main) was started with `dmi run --control PATH
/// --spares K`; a join brings in the next spare node, a leave hands over
/// everything node RANK holds and ends it. Both take effect at the next
/// DMI_check_rescale of the running itergroup (or when it ends).
#[derive(Args)]
pub struct NodeArgs {
    /// The run's control socket.
    #[arg(long, value_name = "PATH")]
    control: PathBuf,
    #[command(subcommand)]
    what: What,
}

#[derive(Subcommand)]
enum What {
    /// Bring the next spare node into the run.
    Join,
    /// Make node RANK leave the run (not 0).
    Leave { rank: u32 },
}

pub fn node(a: NodeArgs) -> i32 {
    let line = match a.what {
        What::Join => "join\n".to_string(),
        What::Leave { rank } => format!("leave {rank}\n"),
    };
    let r = UnixStream::connect(&a.control).and_then(|mut s| {
        s.set_read_timeout(Some(Duration::from_secs(10)))?;
        s.write_all(line.as_bytes())?;
        let mut reply = String::new();
        BufReader::new(&s).read_line(&mut reply)?;
        Ok(reply)
    });
    match r {
        Ok(reply) if reply.starts_with("ok") => {
            print!("{reply}");
            0
        }
        Ok(reply) => {
            eprint!(
                "dmi node: {}",
                if reply.is_empty() {
                    "no answer\n"
                } else {
                    &reply
                }
            );
            1
        }
        Err(e) => {
            eprintln!("dmi node: {}: {e}", a.control.display());
            1
        }
    }
}
