//! Struct layouts for `dcache layout` (minimal core; the printer lives with the CLI).

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldLayout {
    pub name: &'static str,
    pub offset: usize,
    pub size: usize,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TypeLayout {
    pub name: &'static str,
    pub size: usize,
    pub align: usize,
    pub fields: Vec<FieldLayout>,
}

/// The size of a field, from a projection closure (no value needed).
pub fn field_size<S, F>(_project: fn(&S) -> &F) -> usize {
    std::mem::size_of::<F>()
}

/// `type_layout!(Type { a, b, c })` builds a `TypeLayout` from `offset_of!`.
#[macro_export]
macro_rules! type_layout {
    ($ty:ty { $($field:ident),* $(,)? }) => {
        $crate::layout::TypeLayout {
            name: stringify!($ty),
            size: ::core::mem::size_of::<$ty>(),
            align: ::core::mem::align_of::<$ty>(),
            fields: vec![$($crate::layout::FieldLayout {
                name: stringify!($field),
                offset: ::core::mem::offset_of!($ty, $field),
                size: $crate::layout::field_size::<$ty, _>(|s: &$ty| &s.$field),
            }),*],
        }
    };
}
