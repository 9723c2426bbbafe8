// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! The default (`DMI_RECEIVERS` unset): a receiver thread per instance
//! (`dmi-inst-ID`), 4 of them while 4 instances make engine calls at once,
//! none named `dmi-recv`; the same calls as `receivers_single.rs`.

mod common;
#[path = "common/receivers.rs"]
mod receivers;

#[test]
fn four_instances_calling_at_once_have_four_receivers() {
    std::env::remove_var("DMI_RECEIVERS");
    let d = common::node();
    let (ended, per, single, samples) = receivers::calls_of(&d, 4);
    for (i, e) in ended.iter().enumerate() {
        assert_eq!(*e, receivers::expected(i as i64), "instance {i}");
    }
    assert!(samples > 5, "{samples} samples");
    assert_eq!((per, single), (4, 0), "dmi-inst-*, dmi-recv threads");
    d.finalize().unwrap();
}
