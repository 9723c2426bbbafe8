//! `halfproc checkpoint PID -o DIR` through the daemon: the program, or
//! the process tree it forked (see `halfproc_migrate::tree`), written
//! into an image directory with the client's rights; `halfproc restore
//! DIR` reads either (`restore_dir.rs`).

use crate::access::Admitted;
use crate::daemon::Node;
use crate::migrate::take;
use crate::migrate_tree::NotTaken;
use crate::proto::{End, Exit, Msg};
use halfproc_migrate::image_dir::ImageOut;
use halfproc_migrate::tree::TreeProc;
use halfproc_migrate::{Leave, TreeOut};
use std::sync::Arc;
use std::time::Duration;

/// Where a checkpoint writes: one process's image, or a tree image.
enum Out {
    One(ImageOut),
    Tree(Vec<TreeProc>, TreeOut),
}

/// What a checkpoint wrote, for the reply.
struct Written {
    processes: usize,
    pages_bytes: u64,
    vmas: Option<usize>,
    files_bytes: u64,
    frozen: Duration,
}

/// Checkpoints local `pid` into `dir`; with `kill` the program ends there;
/// `with_files` writes its mapped files' contents too. A program with
/// children is written as a process tree (each process under `DIR/PID`,
/// `tree.json` last), each of its processes admitted as the program is.
/// The image directory and files are made with `fs`'s rights when given
/// (a local client's: [`crate::access::file_creds`]), before anything is
/// stopped: a client that may not write there gets `Denied` and the
/// program is untouched.
pub async fn checkpoint(
    node: Arc<Node>,
    (pid, admitted): (i32, Option<Admitted>),
    dir: String,
    kill: bool,
    with_files: bool,
    fs: Option<halfproc_migrate::Creds>,
) -> Msg {
    let prog = match take(&node, pid, "checkpointed") {
        Ok(p) => p,
        Err(e) => return Msg::Error(e),
    };
    let _ = prog.pause_stdin().await;
    let inos = prog.inos.clone();
    let (d, i) = (dir.clone(), inos.clone());
    let opened =
        tokio::task::spawn_blocking(move || open_image(pid, &d, &i, with_files, fs, admitted))
            .await
            .unwrap_or_else(|e| Err(Box::new(Msg::Error(e.to_string()))));
    let (out, admitted) = match opened {
        Ok(out) => out,
        Err(reply) => {
            prog.release();
            prog.resume_here();
            return *reply;
        }
    };
    if kill {
        prog.leave(End::Exited(Exit::Checkpointed(dir.clone())));
    }
    let leave = if kill { Leave::Kill } else { Leave::Continue };
    let r = tokio::task::spawn_blocking(move || {
        crate::access::test_admit_delay();
        let check = || admitted.iter().try_for_each(Admitted::recheck);
        match out {
            Out::One(o) => {
                halfproc_migrate::checkpoint_into_checked(pid, o, leave, &inos, Some(&check)).map(
                    |st| Written {
                        processes: 1,
                        pages_bytes: st.pages_bytes,
                        vmas: Some(st.vmas),
                        files_bytes: st.files_bytes,
                        frozen: st.frozen,
                    },
                )
            }
            Out::Tree(procs, o) => {
                halfproc_migrate::checkpoint_tree_into(pid, &procs, o, leave, &inos, Some(&check))
                    .map(|st| Written {
                        processes: st.processes,
                        pages_bytes: st.pages_bytes,
                        vmas: None,
                        files_bytes: st.files_bytes,
                        frozen: st.frozen,
                    })
            }
        }
    })
    .await;
    let r = match r {
        Ok(Err(halfproc_migrate::Error::Changed(why))) => {
            prog.set_running();
            prog.resume_here();
            return Msg::Denied(format!(
                "{why}; checkpoint of pid {pid} into {dir} refused (nothing was written \
                 there: an earlier image is left as it was), it keeps running"
            ));
        }
        Ok(r) => r.map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    };
    match r {
        Ok(st) => {
            if !kill {
                prog.release();
                prog.resume_here();
            }
            Msg::Done(format!(
                "checkpointed pid {pid}{} into {dir}: {:.1} MiB of pages{}{}, stopped {} ms{}",
                match st.processes {
                    1 => String::new(),
                    n => format!(" and its {} descendant(s), a process tree,", n - 1),
                },
                st.pages_bytes as f64 / 1048576.0,
                st.vmas.map(|v| format!(", {v} VMAs")).unwrap_or_default(),
                if with_files {
                    format!(
                        ", {:.1} MiB of mapped files",
                        st.files_bytes as f64 / 1048576.0
                    )
                } else {
                    String::new()
                },
                st.frozen.as_millis(),
                if kill {
                    "; the program was stopped"
                } else {
                    "; it keeps running"
                }
            ))
        }
        Err(e) => {
            prog.set_running();
            prog.resume_here();
            Msg::Error(format!(
                "checkpoint of pid {pid} failed: {e}; it keeps running"
            ))
        }
    }
}

/// The request's admission and the refusals that need nothing stopped, for
/// every process of the tree if `pid` has children
/// ([`crate::migrate_tree::admit_and_check`]), then
/// `dir`'s image files made with `fs`'s rights
/// ([`halfproc_migrate::image_dir::create`] on a thread that has them;
/// renamed into place, or removed, with them too). The error is the
/// reply: `Denied` when the client may not act on a process of the tree
/// or write there.
fn open_image(
    pid: i32,
    dir: &str,
    relayed: &[u64],
    with_files: bool,
    fs: Option<halfproc_migrate::Creds>,
    admitted: Option<Admitted>,
) -> Result<(Out, Vec<Admitted>), Box<Msg>> {
    let failed = |e: String| {
        Box::new(Msg::Error(format!(
            "checkpoint of pid {pid} failed: {e}; it keeps running"
        )))
    };
    let (procs, admitted) =
        crate::migrate_tree::admit_and_check(pid, relayed, admitted).map_err(|e| match e {
            NotTaken::Denied(why) => Box::new(Msg::Denied(format!(
                "{why}; checkpoint of pid {pid} refused, nothing was stopped"
            ))),
            NotTaken::Refused(why) => failed(why),
        })?;
    let path = crate::access::image_path(dir).map_err(failed)?;
    let r = match procs.len() {
        1 => {
            let create = || halfproc_migrate::image_dir::create(path, with_files);
            match &fs {
                Some(c) => c.with_fs(create).and_then(|r| r),
                None => create(),
            }
            // Renamed into place (or removed) with the same rights.
            .map(|out| Out::One(out.with_creds(fs.clone())))
        }
        _ => halfproc_migrate::tree_out(path, &procs, with_files, fs.clone())
            .map(|out| Out::Tree(procs, out)),
    };
    let out = r.map_err(|e| match crate::access::file_denied(&e, fs.as_ref()) {
        Some(why) => Box::new(Msg::Denied(format!(
            "permission denied: checkpoint of pid {pid} into {dir}: {why}; nothing was stopped"
        ))),
        None => failed(e.to_string()),
    })?;
    Ok((out, admitted))
}
