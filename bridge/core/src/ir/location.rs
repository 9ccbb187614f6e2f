//! Source locations (`loc(...)`), including references to `#loc` aliases.

use super::{AttrId, LocId};
use crate::intern::Sym;

/// A location attribute.
#[derive(Clone, Debug, PartialEq)]
pub enum Location {
    /// `loc(unknown)`.
    Unknown,
    /// `loc("file":line:col)` or `loc("file":l:c to l2:c2)`, kept verbatim
    /// after the file name (e.g. `:3:7` or `:3:7 to :4:2`).
    FileLineCol {
        /// The escaped file name, without quotes.
        file: Box<str>,
        /// The `:line:col...` suffix, verbatim.
        pos: Box<str>,
    },
    /// `loc("name")` or `loc("name"(child))`.
    Name {
        /// The escaped name, without quotes.
        name: Box<str>,
        /// The nested location, if any.
        child: Option<LocId>,
    },
    /// `loc(callsite(callee at caller))`.
    CallSite {
        /// Callee location.
        callee: LocId,
        /// Caller location.
        caller: LocId,
    },
    /// `loc(fused[...])` or `loc(fused<metadata>[...])`.
    Fused {
        /// Optional metadata attribute.
        metadata: Option<AttrId>,
        /// The fused locations.
        locs: Vec<LocId>,
    },
    /// A reference to a location alias, `#loc3`; the name without `#`.
    Alias(Sym),
    /// Anything else inside `loc(...)`, verbatim (dialect locations).
    Opaque(Box<str>),
}
