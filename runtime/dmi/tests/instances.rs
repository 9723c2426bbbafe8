// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! The Rust side of compute instances (`serve::create`): a one-node run in
//! this process; instances are forked members that reach the node through
//! their mailboxes. Checks their data, their thread count, the errors they
//! get, and how `join` reports a returned value and a killed instance.

mod common;
use common::node;

use dmi::serve::{self, Ended, NodeRef};
use dmi::{Dmi, DmiError, ReadMode, WriteMode};

fn threads() -> usize {
    std::fs::read_dir("/proc/self/task").unwrap().count()
}

/// One test: the node and its instance registry are per process, and a
/// killed instance fails every later barrier and creation (so it comes last).
#[test]
fn instances_of_a_node_in_this_process() {
    let d = node();
    staging_is_freed(&d);
    share_the_node_and_have_one_thread(&d);
    d.finalize().unwrap();
}

fn share_the_node_and_have_one_thread(d: &Dmi) {
    let base = d.mmap(4096, 4).unwrap();
    let ids: Vec<i64> = (0..3)
        .map(|i| {
            let body = move |dmi: &Dmi, i: i64| {
                if threads() != 1 {
                    return 100;
                }
                let mine = vec![i as u8 + 1; 4096];
                if dmi
                    .write(base + i * 4096, &mine, WriteMode::Exclusive)
                    .is_err()
                {
                    return 101;
                }
                if dmi.barrier().is_err() {
                    return 102;
                }
                let mut all = vec![0u8; 3 * 4096];
                if dmi.read(base, &mut all, ReadMode::Get).is_err() {
                    return 103;
                }
                for (k, b) in all.iter().enumerate() {
                    if *b != (k / 4096) as u8 + 1 {
                        return 104;
                    }
                }
                // Errors come back through the mailbox unchanged.
                match dmi.read(base + 4 * 4096, &mut [0u8; 8], ReadMode::Get) {
                    Err(DmiError::BadAddress(_)) | Err(DmiError::OutOfRange(_)) => {}
                    _ => return 105,
                }
                if threads() != 1 {
                    return 107;
                }
                i + 40
            };
            serve::create(NodeRef::of(d).unwrap(), false, body, i).unwrap()
        })
        .collect();
    for (i, id) in ids.into_iter().enumerate() {
        assert_eq!(serve::join(id).unwrap(), Ended::Returned(i as i64 + 40));
    }
    assert!(matches!(serve::join(0), Err(DmiError::BadArgument(_))));
    let mut all = vec![0u8; 3 * 4096];
    d.read(base, &mut all, ReadMode::Get).unwrap();
    assert!(all
        .iter()
        .enumerate()
        .all(|(k, b)| *b == (k / 4096) as u8 + 1));

    // A detached instance runs on and cannot be joined or detached again;
    // its slot goes when it ends.
    let id = serve::create(
        NodeRef::of(d).unwrap(),
        false,
        |_, _| {
            std::thread::sleep(std::time::Duration::from_millis(100));
            0
        },
        0,
    )
    .unwrap();
    serve::detach(id).unwrap();
    assert!(matches!(serve::join(id), Err(DmiError::BadArgument(m)) if m.contains("detached")));
    assert!(matches!(serve::detach(id), Err(DmiError::BadArgument(_))));
    std::thread::sleep(std::time::Duration::from_millis(400));
    assert!(matches!(serve::join(id), Err(DmiError::BadArgument(m)) if m.contains("no instance")));

    // A killed instance: join says how it ended.
    let id = serve::create(
        NodeRef::of(d).unwrap(),
        false,
        |_, _| {
            // SAFETY: the instance kills itself.
            unsafe { libc::raise(libc::SIGKILL) };
            0
        },
        0,
    )
    .unwrap();
    assert_eq!(
        serve::join(id).unwrap(),
        Ended::Failed("was killed by signal 9".into())
    );
    let r = serve::create(NodeRef::of(d).unwrap(), false, |_, _| 0, 0);
    assert!(matches!(r, Err(DmiError::Instance(_))), "{:?}", r.err());
}

/// Mailboxes and staging buffers are freed when instances end.
fn staging_is_freed(d: &Dmi) {
    let base = d.mmap(65536, 2).unwrap();
    let body = move |dmi: &Dmi, _| {
        let mut b = vec![0u8; 100_000];
        dmi.read(base, &mut b, ReadMode::Get).map_or(1, |_| 0)
    };
    let mut in_use = Vec::new();
    for _ in 0..30 {
        let id = serve::create(NodeRef::of(d).unwrap(), false, body, 0).unwrap();
        assert_eq!(serve::join(id).unwrap(), Ended::Returned(0));
        let set = halfproc::Set::get().unwrap();
        in_use.push(halfproc::alloc::stats(set).pages_in_use);
    }
    // Each instance had a 128 KiB staging buffer (two 64 KiB arena pages):
    // kept, 30 of them would hold 60 more pages at the end than after the
    // fifth.
    assert!(in_use[29] <= in_use[4] + 4, "pages in use: {in_use:?}");
}
