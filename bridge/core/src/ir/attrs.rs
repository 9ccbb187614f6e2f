//! Attributes. Literal payloads (numbers, dense element bodies, strings) are
//! kept verbatim as written, which makes printing lossless and parsing fast;
//! structured forms (arrays, dictionaries, dense arrays) are modelled so the
//! printer and stitcher can work with them.

use super::{AttrId, LocId, TypeId};
use crate::intern::Sym;
use compact_str::CompactString;

/// Literal text of an attribute: short literals (most numbers and splat
/// bodies) are stored inline, without a heap allocation.
pub type LiteralText = CompactString;

/// One `name = value` entry of an attribute dictionary.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct NamedAttr {
    /// The attribute name.
    pub name: Sym,
    /// The value; a unit entry written as just `name` holds [`Attribute::Unit`].
    pub value: AttrId,
}

/// Payload of `array<T: ...>`.
#[derive(Clone, Debug, PartialEq)]
pub enum DenseArrayData {
    /// Integer or boolean elements (booleans as 0/1).
    Int(Vec<i64>),
    /// Float elements, verbatim.
    Float(Vec<Box<str>>),
}

/// An attribute value.
#[derive(Clone, Debug, PartialEq)]
pub enum Attribute {
    /// `unit`.
    Unit,
    /// `true` / `false`.
    Bool(bool),
    /// An integer literal with optional `: type` (default `i64`).
    Integer {
        /// The literal as written (decimal or hex, with sign).
        text: LiteralText,
        /// The explicit type, if written.
        ty: Option<TypeId>,
    },
    /// A float literal with optional `: type` (default `f64`).
    Float {
        /// The literal as written (decimal, exponent or hex bit pattern).
        text: LiteralText,
        /// The explicit type, if written.
        ty: Option<TypeId>,
    },
    /// A string literal with optional `: type`; escapes kept verbatim.
    String {
        /// The string body between the quotes, still escaped.
        escaped: LiteralText,
        /// The explicit type, if written.
        ty: Option<TypeId>,
    },
    /// A type used as an attribute.
    Type(TypeId),
    /// `[a, b, ...]`.
    Array(Vec<AttrId>),
    /// `array<T: ...>`.
    DenseArray {
        /// Element type.
        elem: TypeId,
        /// Elements.
        data: DenseArrayData,
    },
    /// `{name = value, ...}`.
    Dict(Vec<NamedAttr>),
    /// `@a` or `@a::@b::@c` (names without `@`, still quoted if they were).
    SymbolRef(Vec<Sym>),
    /// `dense<...> : type`; the body between the angle brackets verbatim.
    Dense {
        /// The body text, e.g. `"0x0000803F"` or `[[1.0, 2.0]]`.
        body: LiteralText,
        /// The shaped type.
        ty: TypeId,
    },
    /// `dense_resource<handle> : type`.
    DenseResource {
        /// The resource handle.
        handle: Box<str>,
        /// The shaped type.
        ty: TypeId,
    },
    /// `loc(...)` used as an attribute value.
    Location(LocId),
    /// A reference to an attribute alias, `#name` (name without `#`).
    Alias(Sym),
    /// Any other attribute, verbatim: dialect attributes such as
    /// `#stablehlo<comparison_direction LT>`, `#stablehlo.dot<...>`,
    /// `#sdy.sharding<...>`, `affine_map<...>`, `sparse<...>`, ...
    Opaque(Box<str>),
}
