// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! Slurm's compressed host lists (`SLURM_STEP_NODELIST`,
//! `SLURM_JOB_NODELIST`): `node[01-03,07],login,r[1-2]n[1-2]` expands to
//! the hosts in order. A range keeps the zero padding of its lower bound.

use crate::error::DmiError;

fn bad(list: &str, why: &str) -> DmiError {
    DmiError::Setup(format!("host list {list:?}: {why}"))
}

/// Splits at the commas outside brackets.
fn top_level(list: &str) -> Result<Vec<&str>, DmiError> {
    let (mut depth, mut start, mut out) = (0i32, 0, Vec::new());
    for (i, c) in list.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&list[start..i]);
                start = i + 1;
            }
            _ => {}
        }
        if !(0..=1).contains(&depth) {
            return Err(bad(list, "unbalanced or nested brackets"));
        }
    }
    if depth != 0 {
        return Err(bad(list, "unbalanced brackets"));
    }
    out.push(&list[start..]);
    Ok(out)
}

/// The values of one bracket's contents, e.g. `01-03,7`.
fn ranges(list: &str, inner: &str) -> Result<Vec<String>, DmiError> {
    let mut out = Vec::new();
    for part in inner.split(',') {
        let (lo, hi) = part.split_once('-').unwrap_or((part, part));
        let num = |s: &str| -> Result<u64, DmiError> {
            if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
                return Err(bad(list, &format!("{part:?} is not a number or range")));
            }
            s.parse()
                .map_err(|_| bad(list, &format!("{s:?} is too large")))
        };
        let (a, b) = (num(lo)?, num(hi)?);
        if a > b || b - a > 65_536 {
            return Err(bad(list, &format!("range {part:?} is empty or too large")));
        }
        let width = lo.len();
        out.extend((a..=b).map(|v| format!("{v:0width$}")));
    }
    Ok(out)
}

/// Expands one item (no top-level commas), brackets anywhere in it.
fn expand_item(list: &str, item: &str) -> Result<Vec<String>, DmiError> {
    let Some(open) = item.find('[') else {
        if item.contains(']') {
            return Err(bad(list, "unbalanced brackets"));
        }
        return Ok(vec![item.to_string()]);
    };
    let close = item[open..]
        .find(']')
        .map(|c| open + c)
        .ok_or_else(|| bad(list, "unbalanced brackets"))?;
    let (prefix, inner, rest) = (&item[..open], &item[open + 1..close], &item[close + 1..]);
    let tails = expand_item(list, rest)?;
    let mut out = Vec::new();
    for v in ranges(list, inner)? {
        for t in &tails {
            out.push(format!("{prefix}{v}{t}"));
        }
    }
    Ok(out)
}

/// Expands a compressed host list into host names, in order.
pub fn expand(list: &str) -> Result<Vec<String>, DmiError> {
    let list = list.trim();
    if list.is_empty() {
        return Err(bad(list, "empty"));
    }
    let mut out = Vec::new();
    for item in top_level(list)? {
        if item.is_empty() {
            return Err(bad(list, "empty host name"));
        }
        out.extend(expand_item(list, item)?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::expand;

    #[test]
    fn plain_and_ranges() {
        assert_eq!(expand("localhost").unwrap(), ["localhost"]);
        assert_eq!(expand("a,b").unwrap(), ["a", "b"]);
        assert_eq!(
            expand("node[01-03,07],login").unwrap(),
            ["node01", "node02", "node03", "node07", "login"]
        );
        assert_eq!(expand("n[8-10]").unwrap(), ["n8", "n9", "n10"]);
        assert_eq!(
            expand("r[1-2]n[1-2]-ib").unwrap(),
            ["r1n1-ib", "r1n2-ib", "r2n1-ib", "r2n2-ib"]
        );
    }

    #[test]
    fn bad_lists_are_errors() {
        for l in [
            "",
            "a[1-2",
            "a]1",
            "a[2-1]",
            "a[x]",
            "a,,b",
            "a[1-[2]]",
            "a[1-99999999]",
        ] {
            let e = expand(l).unwrap_err().to_string();
            assert!(e.contains("host list"), "{l:?}: {e}");
        }
    }
}
