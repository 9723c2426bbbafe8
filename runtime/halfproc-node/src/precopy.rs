//! Source side of a live migration's pre-copy: which dirty tracker to use
//! (probed once at run time), and the dump thread's work: pre-copy rounds
//! while the program runs, then freeze, dump, and the pages that still have
//! to travel. See `halfproc_migrate::precopy`.

use crate::proto::Msg;
use halfproc_migrate::precopy::{self, ContentHash, DirtyTracker, Live, Policy, SoftDirty};
use halfproc_migrate::{image, Dumped, PortableReader};
use std::sync::OnceLock;

/// Environment variable choosing the mechanism: `auto` (default:
/// soft-dirty if the probe passes, else stop-and-copy), `off`, or `hash`
/// (content comparison; for kernels without soft-dirty, and for tests).
pub const PRECOPY_ENV: &str = "HALFPROC_PRECOPY";

/// How a migration copies memory.
#[derive(Debug, Clone)]
pub enum Mode {
    SoftDirty,
    Hash,
    /// Stop-and-copy, for this reason.
    Off(String),
}

/// The mode for this daemon (the soft-dirty probe runs once).
pub fn mode() -> Mode {
    static PROBE: OnceLock<Result<(), String>> = OnceLock::new();
    match std::env::var(PRECOPY_ENV).unwrap_or_default().as_str() {
        "off" => Mode::Off(format!("pre-copy disabled by {PRECOPY_ENV}=off")),
        "hash" => Mode::Hash,
        _ => match PROBE.get_or_init(halfproc_migrate::probe_soft_dirty) {
            Ok(()) => Mode::SoftDirty,
            Err(e) => Mode::Off(format!("pre-copy unavailable: {e}")),
        },
    }
}

impl Mode {
    pub fn on(&self) -> bool {
        !matches!(self, Mode::Off(_))
    }
}

/// The frozen image as it travels.
pub struct Image {
    pub manifest: Vec<u8>,
    /// Page contents to send (all, or the included ones after a pre-copy).
    pub pages: halfproc_migrate::PageBuf,
    pub included: Option<Vec<bool>>,
    /// What happened, for the user: mechanism, rounds, pages frozen.
    pub mode: String,
}

/// The program read by the rounds; its first read is followed by
/// [`crate::access::test_precopy_delay`] (a test changes it meanwhile).
struct Held<'a> {
    live: Live<'a>,
    first: bool,
}

impl precopy::Target for Held<'_> {
    fn present(&mut self) -> halfproc_migrate::Result<Vec<u64>> {
        self.live.present()
    }

    fn read(&mut self, addr: u64, buf: &mut [u8]) -> std::io::Result<()> {
        let r = self.live.read(addr, buf);
        if std::mem::take(&mut self.first) {
            crate::access::test_precopy_delay();
        }
        r
    }
}

/// On the dump thread (which stays the tracer): pre-copy rounds if `mode`
/// is on, each run of pages sent as `PrePages` through `pre` (dropped when
/// the rounds end), `pre_check` run after each run's read and before its
/// send (an error ends the migration there, the program never stopped),
/// then freeze and dump; `check` runs once it is stopped
/// ([`halfproc_migrate::AfterFreeze`]).
pub fn dump(
    pid: i32,
    relayed: &[u64],
    mode: &Mode,
    pre: Option<tokio::sync::mpsc::Sender<Msg>>,
    pre_check: &mut dyn FnMut() -> Result<(), String>,
    check: Option<halfproc_migrate::AfterFreeze>,
) -> Result<(Dumped, Image), String> {
    let reader = PortableReader::new(pid).map_err(|e| format!("open /proc/{pid}/mem: {e}"))?;
    let mut tracker: Option<Box<dyn DirtyTracker>> = match mode {
        Mode::SoftDirty => Some(Box::new(
            SoftDirty::open(pid).map_err(|e| format!("soft-dirty of pid {pid}: {e}"))?,
        )),
        Mode::Hash => Some(Box::new(ContentHash::new(
            PortableReader::new(pid).map_err(|e| format!("open /proc/{pid}/mem: {e}"))?,
        ))),
        Mode::Off(_) => None,
    };
    let done = match (&mut tracker, pre) {
        (Some(t), Some(tx)) => {
            let mut send = |addr: u64, data: &[u8]| {
                tx.blocking_send(Msg::PrePages {
                    addr,
                    data: data.to_vec(),
                })
                .map_err(|_| std::io::Error::other("connection to the destination closed"))
            };
            let mut target = Held {
                live: Live {
                    pid,
                    reader: &reader,
                },
                first: true,
            };
            let d = precopy::precopy(
                &mut target,
                t.as_mut(),
                &Policy::default(),
                pre_check,
                &mut send,
            )
            .map_err(|e| format!("pre-copy: {e}"))?;
            Some(d)
        }
        _ => None,
    };
    let mut d = halfproc_migrate::freeze_and_dump_checked(pid, relayed, check)
        .map_err(|e| e.to_string())?;
    let manifest = image::manifest_bytes(&d.manifest).map_err(|e| e.to_string())?;
    let all = std::mem::take(&mut d.pages);
    let total = all.len() / 4096;
    let (pages, included, mode) = match (tracker, done) {
        (Some(mut t), Some(done)) => {
            let inc =
                precopy::included(&precopy::image_pages(&d.manifest), &done, t.as_mut(), &all)
                    .map_err(|e| e.to_string())?;
            let pages = precopy::delta(&all, &inc.pages).map_err(|e| e.to_string())?;
            let name = if matches!(mode, Mode::SoftDirty) {
                "soft-dirty"
            } else {
                "content hash"
            };
            let m = format!(
                "pre-copy ({name}): {} round(s) of {:?} pages ({:.1} MiB) while running; \
                 {} of {total} pages sent frozen ({} of them changed unseen by the tracker)",
                done.rounds.len(),
                done.rounds,
                done.bytes as f64 / 1048576.0,
                pages.len() / 4096,
                inc.missed
            );
            (pages, Some(inc.pages), m)
        }
        _ => {
            let why = match mode {
                Mode::Off(w) => w.clone(),
                _ => "no pre-copy".into(),
            };
            (all, None, format!("stop-and-copy ({why})"))
        }
    };
    Ok((
        d,
        Image {
            manifest,
            pages,
            included,
            mode,
        },
    ))
}
