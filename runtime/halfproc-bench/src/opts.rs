// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! Options of `bench copy` and `bench mm`, and their parsing.
//!
//! The parsers take plain argument lists (without the subcommand) so that
//! the `halfproc` CLI can forward its arguments unchanged. Every rejection
//! is an [`Error::Usage`] that names the argument and what is allowed.

use crate::error::{Error, Result};
use crate::strategy::Strategy;
use std::path::PathBuf;

/// Smallest size exponent (2^6 = 64 bytes), as in the paper.
pub const MIN_EXP: u32 = 6;
/// Largest size exponent (2^28 = 256 MiB), as in the paper.
pub const MAX_EXP: u32 = 28;

/// Default `--out` directory of both subcommands.
const DEFAULT_OUT: &str = "halfproc-bench-out";

/// Default `--backend`: `$HALFPROC_BACKEND`, else `auto`.
fn default_backend() -> String {
    std::env::var("HALFPROC_BACKEND").unwrap_or_else(|_| "auto".into())
}

/// Where the two processes run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Placement {
    /// Both pinned to one core (the paper's Fig. 7, "same CPU").
    Same,
    /// Pinned to two different cores (the paper's Fig. 8).
    Different,
}

impl Placement {
    /// `"same"` / `"different"`.
    pub const fn name(self) -> &'static str {
        match self {
            Placement::Same => "same",
            Placement::Different => "different",
        }
    }

    /// Words for titles.
    pub const fn title(self) -> &'static str {
        match self {
            Placement::Same => "both processes on the same core",
            Placement::Different => "processes on different cores",
        }
    }

    /// Parse `same`, `different` or `both`.
    pub fn parse_list(s: &str) -> Result<Vec<Placement>> {
        match s {
            "same" => Ok(vec![Placement::Same]),
            "different" => Ok(vec![Placement::Different]),
            "both" => Ok(vec![Placement::Same, Placement::Different]),
            other => Err(Error::usage(format!(
                "--placement `{other}`: expected same, different or both"
            ))),
        }
    }
}

/// Options of `bench copy`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CopyOpts {
    /// Size exponents: `d` is `2^e` bytes.
    pub sizes: Vec<u32>,
    /// Strategies, in order.
    pub strategies: Vec<Strategy>,
    /// Timed repetitions per strategy and size.
    pub reps: usize,
    /// Untimed warm-up repetitions per size (in every round).
    pub warmup: usize,
    /// Rounds: the repetitions are spread over this many passes over all
    /// strategies, so that slow drifts of the machine (other jobs) hit every
    /// strategy alike. `reps` must be a multiple of `rounds`.
    pub rounds: usize,
    /// Placements to measure.
    pub placements: Vec<Placement>,
    /// Chunk size of pipelined strategies, bytes.
    pub chunk: usize,
    /// `auto`, `kernel` or `portable`.
    pub backend: String,
    /// Where to write JSON, tables and plots (`None`: nowhere).
    pub out: Option<PathBuf>,
    /// Free text that names the machine in titles (`host`, `guest`, ...).
    pub label: String,
    /// Print progress to stderr.
    pub progress: bool,
}

impl Default for CopyOpts {
    fn default() -> Self {
        CopyOpts {
            sizes: (MIN_EXP..=MAX_EXP).collect(),
            strategies: Strategy::ALL.to_vec(),
            reps: 5,
            warmup: 1,
            rounds: 5,
            placements: vec![Placement::Same, Placement::Different],
            chunk: 64 << 10,
            backend: default_backend(),
            out: Some(PathBuf::from(DEFAULT_OUT)),
            label: String::new(),
            progress: true,
        }
    }
}

/// Options of `bench mm`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MmOpts {
    /// `mmap`+`munmap` pairs per repetition and range.
    pub mmaps: usize,
    /// First-touch page faults per repetition and range.
    pub faults: usize,
    /// Repetitions (alternating private/shared).
    pub reps: usize,
    /// `auto`, `kernel` or `portable`.
    pub backend: String,
    /// Where to write JSON and the table.
    pub out: Option<PathBuf>,
    /// Machine label.
    pub label: String,
    /// Print progress to stderr.
    pub progress: bool,
}

impl Default for MmOpts {
    fn default() -> Self {
        MmOpts {
            mmaps: 1_000_000,
            faults: 1_000_000,
            reps: 5,
            backend: default_backend(),
            out: Some(PathBuf::from(DEFAULT_OUT)),
            label: String::new(),
            progress: true,
        }
    }
}

/// Parse `--sizes`: `6..28`, `6..28:2` (step), `6,10,20`, or a mix.
///
/// # Examples
///
/// ```
/// use halfproc_bench::opts::parse_sizes;
/// assert_eq!(parse_sizes("6..9").unwrap(), vec![6, 7, 8, 9]);
/// assert_eq!(parse_sizes("6..12:3,28").unwrap(), vec![6, 9, 12, 28]);
/// assert!(parse_sizes("5..10").is_err());
/// assert!(parse_sizes("29").is_err());
/// ```
pub fn parse_sizes(s: &str) -> Result<Vec<u32>> {
    let exp = |t: &str| -> Result<u32> {
        let t = t.trim();
        let t = t.strip_prefix("2^").unwrap_or(t);
        let e: u32 = t.parse().map_err(|_| {
            Error::usage(format!(
                "--sizes: `{t}` is not a size exponent (e.g. 6..28, 10,20,28)"
            ))
        })?;
        if !(MIN_EXP..=MAX_EXP).contains(&e) {
            return Err(Error::usage(format!(
                "--sizes: 2^{e} bytes is out of range; sizes are exponents from {MIN_EXP} (64 B) to {MAX_EXP} (256 MiB)"
            )));
        }
        Ok(e)
    };
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        if let Some((lo, rest)) = part.split_once("..") {
            let (hi, step) = match rest.split_once(':') {
                Some((hi, step)) => (
                    hi,
                    step.trim()
                        .parse::<u32>()
                        .ok()
                        .filter(|&s| s > 0)
                        .ok_or_else(|| Error::usage(format!("--sizes: bad step in `{part}`")))?,
                ),
                None => (rest, 1),
            };
            let (lo, hi) = (exp(lo)?, exp(hi)?);
            if lo > hi {
                return Err(Error::usage(format!("--sizes: empty range `{part}`")));
            }
            out.extend((lo..=hi).step_by(step as usize));
        } else {
            out.push(exp(part)?);
        }
    }
    if out.is_empty() {
        return Err(Error::usage("--sizes: no sizes given"));
    }
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

/// A tiny `--flag value` / `--flag=value` scanner.
struct Args<'a> {
    items: std::iter::Peekable<std::slice::Iter<'a, String>>,
}

impl<'a> Args<'a> {
    fn next(&mut self) -> Option<Result<(String, Option<String>)>> {
        let a = self.items.next()?;
        let Some(flag) = a.strip_prefix("--") else {
            return Some(Err(Error::usage(format!("unexpected argument `{a}`"))));
        };
        Some(Ok(match flag.split_once('=') {
            Some((f, v)) => (f.to_string(), Some(v.to_string())),
            None => (flag.to_string(), None),
        }))
    }

    fn value(&mut self, flag: &str, inline: Option<String>) -> Result<String> {
        if let Some(v) = inline {
            return Ok(v);
        }
        match self.items.next() {
            Some(v) => Ok(v.clone()),
            None => Err(Error::usage(format!("--{flag} needs a value"))),
        }
    }

    /// Handle a flag that `copy` and `mm` share (`--backend`, `--out`,
    /// `--label`, `--quiet`, `--help`); any other flag is unknown.
    fn shared_flag(&mut self, flag: &str, inline: Option<String>, o: Shared<'_>) -> Result<()> {
        match flag {
            "backend" => *o.backend = self.value(flag, inline)?,
            "out" => {
                let v = self.value(flag, inline)?;
                *o.out = (v != "-").then(|| PathBuf::from(v));
            }
            "label" => *o.label = self.value(flag, inline)?,
            "quiet" => *o.progress = false,
            "help" => return Err(Error::Usage(o.help.into())),
            other => {
                return Err(Error::usage(format!(
                    "unknown option --{other} (see --help)"
                )))
            }
        }
        Ok(())
    }
}

/// The fields of [`CopyOpts`] and [`MmOpts`] that [`Args::shared_flag`] sets.
struct Shared<'o> {
    backend: &'o mut String,
    out: &'o mut Option<PathBuf>,
    label: &'o mut String,
    progress: &'o mut bool,
    help: &'static str,
}

fn count(flag: &str, v: &str, min: usize) -> Result<usize> {
    match v.parse::<usize>() {
        Ok(n) if n >= min => Ok(n),
        _ => Err(Error::usage(format!(
            "--{flag}: `{v}` is not a whole number >= {min}"
        ))),
    }
}

/// Help text of `bench copy`.
pub const COPY_HELP: &str = "\
halfproc-bench copy: inter-process copy experiment (paper section 4.4.2, Figs. 7/8)

Options:
  --sizes LIST        size exponents, 6..28 (default), e.g. 6..28:2 or 10,20,28
  --strategies LIST   comma-separated names, `all` (default) or `paper`; names:
                      tcp unix pipe vmsplice shared posix-shm double-copy
                      double-copy-pipelined cma cma-pull-pipelined
                      cma-push-pipelined cma-push-pull dmread dmread-pipelined
                      dmwrite-pipelined dm-push-pull
                      (paper labels socket, half-process, inter-process,
                      doublecopy are accepted too)
  --reps N            timed repetitions per size (default 5)
  --rounds N          spread the repetitions over N passes over the strategies
                      (default: = reps; must divide reps)
  --warmup N          untimed repetitions per size and round (default 1)
  --placement P       same | different | both (default both)
  --chunk BYTES       chunk of the pipelined strategies (default 64K)
  --backend B         auto | kernel | portable (default $HALFPROC_BACKEND or auto)
  --out DIR           write copy.json, copy.txt, copy-<placement>.svg/.png
                      (default ./halfproc-bench-out; `-` for none)
  --label TEXT        machine name for titles (e.g. host, guest)
  --quick             sizes 6..24:2, 3 reps (for slow machines and emulators)
  --quiet             no progress on stderr
";

/// Help text of `bench mm`.
pub const MM_HELP: &str = "\
halfproc-bench mm: mmap/munmap and first-touch page faults, shared range against
private memory (paper section 4.4.3)

Options:
  --mmaps N           mmap+munmap pairs per repetition (default 1000000)
  --faults N          page faults per repetition (default 1000000)
  --reps N            repetitions, private and shared alternating (default 5)
  --backend B         auto | kernel | portable
  --out DIR           write mm.json and mm.txt (default ./halfproc-bench-out; `-` for none)
  --label TEXT        machine name for titles
  --quick             20000 mmaps, 20000 faults, 3 reps (emulators)
  --quiet             no progress on stderr
";

impl CopyOpts {
    /// Parse the arguments after `copy`.
    pub fn parse(args: &[String]) -> Result<CopyOpts> {
        let mut o = CopyOpts::default();
        let mut rounds = None;
        let mut reps_given = false;
        let mut a = Args {
            items: args.iter().peekable(),
        };
        while let Some(item) = a.next() {
            let (flag, inline) = item?;
            match flag.as_str() {
                "sizes" => o.sizes = parse_sizes(&a.value(&flag, inline)?)?,
                "strategies" | "strategy" => {
                    o.strategies = Strategy::parse_list(&a.value(&flag, inline)?)?
                }
                "reps" => {
                    o.reps = count(&flag, &a.value(&flag, inline)?, 1)?;
                    reps_given = true;
                }
                "rounds" => rounds = Some(count(&flag, &a.value(&flag, inline)?, 1)?),
                "warmup" => o.warmup = count(&flag, &a.value(&flag, inline)?, 0)?,
                "placement" => o.placements = Placement::parse_list(&a.value(&flag, inline)?)?,
                "chunk" => {
                    let v = a.value(&flag, inline)?;
                    o.chunk = halfproc_sys::parse_size(&v)
                        .and_then(|c| usize::try_from(c).ok())
                        .filter(|c| c.is_power_of_two() && (4096..=1 << 24).contains(c))
                        .ok_or_else(|| {
                            Error::usage(format!("--chunk `{v}`: a power of two from 4K to 16M"))
                        })?;
                }
                "quick" => {
                    o.sizes = (MIN_EXP..=24).step_by(2).collect();
                    if !reps_given {
                        o.reps = 3;
                    }
                }
                _ => a.shared_flag(&flag, inline, o.shared(COPY_HELP))?,
            }
        }
        o.rounds = rounds.unwrap_or(o.reps);
        o.validate()?;
        Ok(o)
    }

    /// The fields [`Args::shared_flag`] sets.
    fn shared(&mut self, help: &'static str) -> Shared<'_> {
        Shared {
            backend: &mut self.backend,
            out: &mut self.out,
            label: &mut self.label,
            progress: &mut self.progress,
            help,
        }
    }

    /// Check the combination of options.
    pub fn validate(&self) -> Result<()> {
        if self.sizes.is_empty() {
            return Err(Error::usage("no sizes"));
        }
        if let Some(e) = self
            .sizes
            .iter()
            .find(|e| !(MIN_EXP..=MAX_EXP).contains(*e))
        {
            return Err(Error::usage(format!(
                "size 2^{e} out of range 2^{MIN_EXP}..2^{MAX_EXP}"
            )));
        }
        if self.strategies.is_empty() || self.placements.is_empty() || self.reps == 0 {
            return Err(Error::usage("nothing to measure"));
        }
        if self.rounds == 0 || self.reps % self.rounds != 0 {
            return Err(Error::usage(format!(
                "--rounds {} must divide --reps {}",
                self.rounds, self.reps
            )));
        }
        if !self.chunk.is_power_of_two() || self.chunk < 4096 {
            return Err(Error::usage("--chunk must be a power of two >= 4K"));
        }
        Ok(())
    }
}

impl MmOpts {
    /// Parse the arguments after `mm`.
    pub fn parse(args: &[String]) -> Result<MmOpts> {
        let mut o = MmOpts::default();
        let mut a = Args {
            items: args.iter().peekable(),
        };
        while let Some(item) = a.next() {
            let (flag, inline) = item?;
            match flag.as_str() {
                "mmaps" => o.mmaps = count(&flag, &a.value(&flag, inline)?, 1)?,
                "faults" => o.faults = count(&flag, &a.value(&flag, inline)?, 1)?,
                "reps" => o.reps = count(&flag, &a.value(&flag, inline)?, 1)?,
                "quick" => {
                    o.mmaps = 20_000;
                    o.faults = 20_000;
                    o.reps = 3;
                }
                _ => a.shared_flag(&flag, inline, o.shared(MM_HELP))?,
            }
        }
        Ok(o)
    }

    /// The fields [`Args::shared_flag`] sets.
    fn shared(&mut self, help: &'static str) -> Shared<'_> {
        Shared {
            backend: &mut self.backend,
            out: &mut self.out,
            label: &mut self.label,
            progress: &mut self.progress,
            help,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn copy_defaults_and_flags() {
        let o = CopyOpts::parse(&args("--sizes 6..8 --strategies tcp,shared --reps 4 --rounds 2 --placement same --out - --chunk 128K")).unwrap();
        assert_eq!(o.sizes, vec![6, 7, 8]);
        assert_eq!(o.strategies, vec![Strategy::Tcp, Strategy::Shared]);
        assert_eq!((o.reps, o.rounds), (4, 2));
        assert_eq!(o.placements, vec![Placement::Same]);
        assert_eq!(o.out, None);
        assert_eq!(o.chunk, 128 << 10);
        let o = CopyOpts::parse(&args("--strategies=paper --quick")).unwrap();
        assert_eq!(o.strategies.len(), 6);
        assert_eq!(o.sizes.last(), Some(&24));
        assert_eq!(o.reps, 3);
    }

    #[test]
    fn bad_arguments_say_what_is_wrong() {
        let msg = |s: &str| CopyOpts::parse(&args(s)).unwrap_err().to_string();
        assert!(msg("--sizes 4..10").contains("out of range"));
        assert!(msg("--sizes 6..40").contains("out of range"));
        assert!(msg("--sizes x").contains("not a size exponent"));
        assert!(
            msg("--strategies tcp,carrier-pigeon").contains("unknown strategy `carrier-pigeon`")
        );
        assert!(msg("--placement moon").contains("expected same, different or both"));
        assert!(msg("--reps 0").contains("--reps"));
        assert!(msg("--reps 5 --rounds 2").contains("must divide"));
        assert!(msg("--chunk 1000").contains("power of two"));
        assert!(msg("--frobnicate").contains("unknown option --frobnicate"));
        assert!(msg("--sizes").contains("needs a value"));
        assert!(matches!(
            CopyOpts::parse(&args("stray")),
            Err(Error::Usage(_))
        ));
    }

    #[test]
    fn mm_flags() {
        let o = MmOpts::parse(&args("--mmaps 10 --faults 20 --reps 2 --out -")).unwrap();
        assert_eq!((o.mmaps, o.faults, o.reps, o.out), (10, 20, 2, None));
        assert!(MmOpts::parse(&args("--mmaps 0")).is_err());
    }
}
