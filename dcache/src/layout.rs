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
//! A layout is built from `core::mem::offset_of!` by
//! [`type_layout!`](macro@crate::type_layout), in
//! the module that owns the type (so private fields are reachable); a
//! type is registered with one line in [`registry`].

use std::fmt::Write as _;

use crate::cache_aligned::{CacheAligned, CACHE_LINE};
use crate::lockref::LockRef;

/// One field of a type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldLayout {
    /// The field's name (or tuple index).
    pub name: &'static str,
    /// The field's type, module paths stripped.
    pub ty: String,
    /// Byte offset from the start of the type.
    pub offset: usize,
    /// Size in bytes.
    pub size: usize,
}

impl FieldLayout {
    /// The cache lines this field touches (None for a zero-sized field).
    pub fn lines(&self) -> Option<(usize, usize)> {
        (self.size > 0).then(|| {
            (
                self.offset / CACHE_LINE,
                (self.offset + self.size - 1) / CACHE_LINE,
            )
        })
    }
}

/// A type's size, alignment and fields.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TypeLayout {
    /// The type's name, module paths stripped.
    pub name: String,
    /// `size_of` the type.
    pub size: usize,
    /// `align_of` the type.
    pub align: usize,
    /// In declaration order as given to `type_layout!`; the printer sorts by
    /// offset (Rust may reorder fields that are not `repr(C)`).
    pub fields: Vec<FieldLayout>,
    /// The write-hot fields whose cache-line neighbours are reported.
    pub hot: Vec<&'static str>,
}

/// The size of the field that `project` points at (a helper for
/// [`type_layout!`](macro@crate::type_layout); the closure is never called).
pub fn field_size<T, F>(_project: impl Fn(&T) -> &F) -> usize {
    std::mem::size_of::<F>()
}

/// The printable type name of the field that `project` points at.
pub fn field_type<T, F>(_project: impl Fn(&T) -> &F) -> String {
    short_type_name(std::any::type_name::<F>())
}

/// `a::b::Foo<c::Bar>` -> `Foo<Bar>`.
pub fn short_type_name(full: &str) -> String {
    let mut out = String::new();
    let mut segment = String::new();
    let mut chars = full.chars().peekable();
    while let Some(c) = chars.next() {
        if c == ':' && chars.peek() == Some(&':') {
            chars.next();
            segment.clear();
        } else if c.is_alphanumeric() || c == '_' {
            segment.push(c);
        } else {
            out.push_str(&segment);
            segment.clear();
            out.push(c);
        }
    }
    out.push_str(&segment);
    out
}

/// Whether two byte ranges `[off, off + size)` touch a common cache line;
/// usable in `const` asserts (`const _: () = assert!(!same_cache_line(..))`).
pub const fn same_cache_line(off_a: usize, size_a: usize, off_b: usize, size_b: usize) -> bool {
    if size_a == 0 || size_b == 0 {
        return false;
    }
    let (a0, a1) = (off_a / CACHE_LINE, (off_a + size_a - 1) / CACHE_LINE);
    let (b0, b1) = (off_b / CACHE_LINE, (off_b + size_b - 1) / CACHE_LINE);
    a0 <= b1 && b0 <= a1
}

/// Build a [`TypeLayout`]:
/// `type_layout!(Dentry { d_flags, d_seq, d_lockref } hot { d_lockref })`.
/// Fields are plain names or tuple indices (`CacheAligned<T> { 0 }`); the
/// `hot { .. }` part is optional.
#[macro_export]
macro_rules! type_layout {
    ($t:ty { $($f:tt),* $(,)? } $(hot { $($h:tt),* $(,)? })?) => {
        $crate::layout::TypeLayout {
            name: $crate::layout::short_type_name(::std::any::type_name::<$t>()),
            size: ::std::mem::size_of::<$t>(),
            align: ::std::mem::align_of::<$t>(),
            fields: vec![$(
                $crate::layout::FieldLayout {
                    name: stringify!($f),
                    ty: $crate::layout::field_type(|v: &$t| &v.$f),
                    offset: ::core::mem::offset_of!($t, $f),
                    size: $crate::layout::field_size(|v: &$t| &v.$f),
                }
            ),*],
            hot: vec![$($(stringify!($h)),*)?],
        }
    };
}

impl TypeLayout {
    /// Fields sorted by offset (ties: the larger first, then by name).
    pub fn sorted_fields(&self) -> Vec<&FieldLayout> {
        let mut v: Vec<&FieldLayout> = self.fields.iter().collect();
        v.sort_by(|a, b| {
            a.offset
                .cmp(&b.offset)
                .then(b.size.cmp(&a.size))
                .then(a.name.cmp(b.name))
        });
        v
    }

    /// The same layout with `fields` as its write-hot fields.
    pub fn with_hot(mut self, fields: &[&'static str]) -> Self {
        self.hot = fields.to_vec();
        self
    }

    /// The field called `name`.
    pub fn field(&self, name: &str) -> Option<&FieldLayout> {
        self.fields.iter().find(|f| f.name == name)
    }

    /// The other fields that touch a cache line `name` touches.
    pub fn sharing_with(&self, name: &str) -> Vec<&'static str> {
        let Some(h) = self.field(name) else {
            return Vec::new();
        };
        self.sorted_fields()
            .into_iter()
            .filter(|f| f.name != h.name && same_cache_line(h.offset, h.size, f.offset, f.size))
            .map(|f| f.name)
            .collect()
    }

    /// Number of cache lines the type spans.
    pub fn cache_lines(&self) -> usize {
        self.size.div_ceil(CACHE_LINE)
    }

    /// The pahole-style listing.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "struct {} {{ /* size {}, align {} */",
            self.name, self.size, self.align
        );
        let width = self
            .fields
            .iter()
            .map(|f| f.name.len() + 2 + f.ty.len())
            .max()
            .unwrap_or(0)
            .max(28);
        // Next cache line whose boundary marker has not been printed yet.
        let mut next_line = 0;
        // Print the markers of every boundary at or before `upto`; a
        // boundary that falls inside a field says so.
        let mut marker = |out: &mut String, upto: usize| {
            while next_line * CACHE_LINE <= upto && next_line * CACHE_LINE < self.size.max(1) {
                let at = next_line * CACHE_LINE;
                let _ = write!(out, "    --- cache line {next_line} (offset {at}) ---");
                if let Some(f) = self
                    .fields
                    .iter()
                    .find(|f| f.offset < at && at < f.offset + f.size)
                {
                    let _ = write!(out, " (inside {})", f.name);
                }
                out.push('\n');
                next_line += 1;
            }
        };
        let mut end = 0; // first byte not yet covered by a field
        let (mut holes, mut hole_bytes, mut member_bytes) = (0, 0, 0);
        for f in self.sorted_fields() {
            if f.offset > end {
                marker(&mut out, end);
                let _ = writeln!(out, "    /* XXX {} bytes hole */", f.offset - end);
                holes += 1;
                hole_bytes += f.offset - end;
            }
            marker(&mut out, f.offset);
            let decl = format!("{}: {}", f.name, f.ty);
            let mut note = String::new();
            if let Some((a, b)) = f.lines() {
                if a != b {
                    note = format!(" /* spans cache lines {a}-{b} */");
                }
            }
            let _ = writeln!(
                out,
                "    {decl:<width$} /* {:>5} {:>5} */{note}",
                f.offset, f.size
            );
            member_bytes += f.size;
            if f.offset + f.size > end {
                end = f.offset + f.size;
            }
        }
        let padding = self.size.saturating_sub(end);
        if padding > 0 {
            marker(&mut out, end);
            let _ = writeln!(out, "    /* XXX {padding} bytes padding */");
        }
        let _ = writeln!(
            out,
            "}}; /* size: {}, cache lines: {}, members: {}, sum members: {member_bytes}, holes: {holes}, sum holes: {hole_bytes}, padding: {padding} */",
            self.size,
            self.cache_lines(),
            self.fields.len()
        );
        for h in &self.hot {
            let Some(f) = self.field(h) else {
                let _ = writeln!(out, "hot {h}: not a listed field");
                continue;
            };
            let lines = match f.lines() {
                Some((a, b)) if a == b => format!("cache line {a}"),
                Some((a, b)) => format!("cache lines {a}-{b}"),
                None => "no cache line (zero-sized)".to_string(),
            };
            let others = self.sharing_with(h);
            let (hot, cold): (Vec<&str>, Vec<&str>) =
                others.iter().partition(|o| self.hot.contains(o));
            if others.is_empty() {
                let _ = writeln!(out, "hot {h}: alone on {lines}");
            } else if cold.is_empty() {
                // Written fields together are fine: nothing read-mostly is
                // evicted by their writes.
                let _ = writeln!(
                    out,
                    "hot {h}: shares {lines} only with hot {}",
                    hot.join(", ")
                );
            } else if hot.is_empty() {
                let _ = writeln!(out, "hot {h}: shares {lines} with {}", cold.join(", "));
            } else {
                let _ = writeln!(
                    out,
                    "hot {h}: shares {lines} with {} (and hot {})",
                    cold.join(", "),
                    hot.join(", ")
                );
            }
        }
        out
    }
}

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
        d_name_ext,
        d_sb,
        d_time,
        d_iname,
        d_lockref,
        d_children
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[repr(C)]
    struct Sample {
        a: u8,
        b: u64,
        c: [u8; 61],
        d: u32,
    }

    fn sample() -> TypeLayout {
        crate::type_layout!(Sample { a, b, c, d } hot { b })
    }

    #[test]
    fn offsets_and_sizes_come_from_the_type() {
        let l = sample();
        assert_eq!(l.name, "Sample");
        assert_eq!((l.size, l.align), (88, 8));
        let f = |n| l.field(n).unwrap().clone();
        assert_eq!((f("a").offset, f("a").size), (0, 1));
        assert_eq!((f("b").offset, f("b").size), (8, 8));
        assert_eq!((f("c").offset, f("c").size), (16, 61));
        assert_eq!((f("d").offset, f("d").size), (80, 4));
        assert_eq!(f("c").ty, "[u8; 61]");
        assert_eq!(l.hot, vec!["b"]);
    }

    #[test]
    fn printer_shows_holes_padding_and_boundaries() {
        let text = sample().render();
        assert!(text.contains("--- cache line 0 (offset 0) ---"), "{text}");
        assert!(
            text.contains("--- cache line 1 (offset 64) --- (inside c)"),
            "{text}"
        );
        assert!(text.contains("XXX 7 bytes hole"), "{text}");
        assert!(text.contains("XXX 3 bytes hole"), "{text}");
        assert!(text.contains("XXX 4 bytes padding"), "{text}");
        assert!(text.contains("spans cache lines 0-1"), "{text}");
        assert!(
            text.contains("hot b: shares cache line 0 with a, c"),
            "{text}"
        );
        assert!(
            text.contains("size: 88, cache lines: 2, members: 4, sum members: 74, holes: 2, sum holes: 10, padding: 4"),
            "{text}"
        );
    }

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

    #[test]
    fn same_cache_line_edges() {
        assert!(same_cache_line(0, 8, 56, 8));
        assert!(!same_cache_line(0, 8, 64, 8));
        assert!(same_cache_line(60, 8, 64, 1));
        assert!(!same_cache_line(0, 0, 0, 8));
        const _: () = assert!(!same_cache_line(0, 64, 64, 64));
    }

    #[test]
    fn type_names_lose_their_paths() {
        assert_eq!(
            short_type_name(
                "dcache::a::CacheAligned<dcache::lockref::LockRef<dcache::lockref::Dcache>>"
            ),
            "CacheAligned<LockRef<Dcache>>"
        );
        assert_eq!(short_type_name("[u8; 4]"), "[u8; 4]");
        assert_eq!(
            short_type_name("core::option::Option<&str>"),
            "Option<&str>"
        );
    }
}
