//! The registry of workloads `dcache bench` knows.
//!
//! To add one: write `workloads/NAME.rs` with a type implementing
//! [`Workload`], add `mod NAME;` below and one
//! entry to [`REGISTRY`]. The default tour is listed in `plan.rs`.

use super::workload::Workload;

mod create;
mod data;
pub mod dup;
pub mod kernfs;
mod lockref;
mod lookup_dir;
mod mdtest;
mod stat;
mod stat_random;

/// Every workload, in the order `dcache bench --list` shows them.
pub static REGISTRY: &[&dyn Workload] = &[
    &lockref::LOCKREF,
    &lockref::LOCKREF_INTRUDER,
    &lockref::LOCKREF_HERD,
    &stat::STAT_SAME,
    &stat::STAT_SEPARATE,
    &stat::STAT_MISSING,
    &stat_random::STAT_RANDOM,
    &lookup_dir::LOOKUP_DIR,
    &stat::OPEN_SAME,
    &stat::OPEN_SEPARATE,
    &kernfs::KERNFS_FILES,
    &kernfs::KERNFS_MISSING,
    &dup::DUP_CLOSE,
    &dup::FILE_SHARING,
    &create::CREATE,
    &mdtest::MDTEST,
    &data::DATA,
];

/// The workload called `name`.
pub fn find(name: &str) -> Option<&'static dyn Workload> {
    REGISTRY.iter().copied().find(|w| w.name() == name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::TARGETS;

    #[test]
    fn names_are_unique_and_declarations_are_sane() {
        for (i, w) in REGISTRY.iter().enumerate() {
            assert!(
                REGISTRY[i + 1..].iter().all(|o| o.name() != w.name()),
                "{} twice",
                w.name()
            );
            assert!(!w.variants().is_empty(), "{} has no variant", w.name());
            assert!(!w.targets().is_empty(), "{} has no target", w.name());
            assert!(w.targets().iter().all(|t| TARGETS.contains(t)));
            assert!(find(w.name()).is_some());
        }
        assert!(find("no-such-workload").is_none());
    }
}
