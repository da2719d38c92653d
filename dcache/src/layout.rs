//! Field layouts of the hot structures, printed pahole-style.
//!
//! dcache's speed rests on where fields sit: a word that every CPU writes
//! (a `LockRef`, a file's count) must not share a cache line with fields
//! that lock-free readers only read, or every write evicts the readers'
//! copy (false sharing). `dcache layout` shows each registered type's fields
//! with offsets, sizes, holes and cache-line boundaries, and which fields
//! share a line with the type's hot field, so the claim can be checked
//! rather than believed.
//!
//! This module only collects: a type is registered with one line in
//! [`registry`]. A layout is built from `core::mem::offset_of!` by
//! [`type_layout!`](macro@crate::type_layout), in the module that owns the
//! type (so private fields are reachable); the layout types and the
//! printer are in [`pahole`](crate::pahole), which names no dcache type,
//! and are re-exported here.

pub use crate::pahole::{
    field_size, field_type, same_cache_line, short_type_name, FieldLayout, TypeLayout,
};

use crate::cache_aligned::CacheAligned;
use crate::lockref::LockRef;

/// Every type `dcache layout` prints. Register one with one line:
/// `crate::type_layout!(Type { field, .. } hot { field })`, or a
/// `layout()` written with it in the type's own module (private fields are
/// reachable there), plus `.with_hot(&[..])`.
pub fn registry() -> Vec<TypeLayout> {
    #[allow(unused_mut)]
    let mut all = vec![
        crate::type_layout!(CacheAligned<LockRef> { 0 } hot { 0 }),
        dentry_layout().with_hot(&["d_lockref", "d_children"]),
        // An open file as the Vfs makes them: its path is a dentry reference.
        crate::file::type_layout::<crate::vfs::DentryRef<'static>, crate::file::Split>(),
    ];
    // The benchmark's comparison layout (`experiments` feature).
    #[cfg(any(test, feature = "experiments"))]
    all.push(crate::file::type_layout::<
        crate::vfs::DentryRef<'static>,
        crate::file::Packed,
    >());
    all
}

/// The layout of `Dentry` for `dcache layout`.
fn dentry_layout() -> TypeLayout {
    crate::type_layout!(crate::dentry::Dentry {
        d_flags,
        d_seq,
        d_hash_next,
        d_parent,
        d_hash_len,
        d_inode,
        d_iname,
        d_name_ext,
        d_sb,
        d_time,
        d_lockref,
        d_children
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_aligned_lockref_is_alone() {
        let l = registry().remove(0);
        // type_name elides the default policy parameter.
        assert_eq!(l.name, "CacheAligned<LockRef>");
        assert_eq!((l.size, l.align), (64, 64));
        assert!(l.sharing_with("0").is_empty());
        let text = l.render();
        assert!(text.contains("hot 0: alone on cache line 0"), "{text}");
        assert!(text.contains("XXX 56 bytes padding"), "{text}");
    }

    #[test]
    fn file_layouts_show_the_count_apart_only_when_split() {
        let all = registry();
        let find = |prefix: &str| {
            all.iter()
                .find(|t| t.name.starts_with(prefix))
                .unwrap_or_else(|| panic!("{prefix} not registered"))
        };
        let split = find("SplitFile<");
        let packed = find("PackedFile<");
        for t in [split, packed] {
            assert_eq!(t.hot, crate::file::HOT_FIELDS.to_vec(), "{}", t.name);
            assert_eq!(t.fields.len(), 9, "{}", t.name);
        }
        let cold = |t: &TypeLayout| -> Vec<&str> {
            t.sharing_with("f_count")
                .into_iter()
                .filter(|f| !t.hot.contains(f))
                .collect()
        };
        assert!(cold(split).is_empty(), "{:?}", cold(split));
        assert!(cold(packed).contains(&"f_op"), "{:?}", cold(packed));
        assert!(cold(packed).contains(&"f_inode"), "{:?}", cold(packed));
        // The mode is read together with the count: in packed it rides the
        // written line, in split it does not.
        assert!(cold(packed).contains(&"f_mode"), "{:?}", cold(packed));
        let text = split.render();
        assert!(
            text.contains("hot f_count: shares cache line 0 only with hot f_pos_lock, f_pos"),
            "{text}"
        );
        let text = packed.render();
        assert!(
            text.contains("hot f_count: shares cache line 0 with f_path, f_op, f_inode"),
            "{text}"
        );
        assert!(
            text.contains(
                "with f_path, f_op, f_inode, f_flags, f_mode (and hot f_pos_lock, f_pos)"
            ),
            "{text}"
        );
    }
}
