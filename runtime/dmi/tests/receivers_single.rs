// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! `DMI_RECEIVERS=single`: one receiver thread (`dmi-recv`) serves every
//! instance of the node; 4 instances making engine calls at the same time
//! get their own values back, and no per-instance receiver thread exists.

mod common;
#[path = "common/receivers.rs"]
mod receivers;

#[test]
fn one_receiver_serves_four_instances_calling_at_once() {
    // Before the first instance: the registry reads it once.
    std::env::set_var("DMI_RECEIVERS", "single");
    let d = common::node();
    let (ended, per, single, samples) = receivers::calls_of(&d, 4);
    for (i, e) in ended.iter().enumerate() {
        assert_eq!(*e, receivers::expected(i as i64), "instance {i}");
    }
    assert!(samples > 5, "{samples} samples");
    assert_eq!((per, single), (0, 1), "dmi-inst-*, dmi-recv threads");
    // The same receiver serves the next instances.
    let (ended, per, single, _) = receivers::calls_of(&d, 2);
    assert_eq!(ended, vec![receivers::expected(0), receivers::expected(1)]);
    assert_eq!((per, single), (0, 1));
    d.finalize().unwrap();
}
