//! Custom (pretty) assembly formats, one file per dialect or op family.
//!
//! Each format is an [`OpFormat`]: a parse function that fills an op from
//! its pretty syntax (operands, inherent attributes, regions, result
//! types) and a print function that writes the same syntax back. A print
//! function returns `false` when the op does not fit its format (missing
//! attribute, odd operand count); the printer then falls back to the
//! generic form, so printing never loses information.

pub mod common;

mod builtin;
mod chlo;
mod func;
mod mhlo;
mod sdy;
pub(crate) mod stablehlo_control;
mod stablehlo_data;
pub(crate) mod stablehlo_dot_conv;
mod stablehlo_elementwise;
mod stablehlo_misc;

use crate::ir::{Module, OpId, TypeId};
use crate::parse::{PResult, Parser};
use crate::print::Printer;
use rustc_hash::FxHashMap;
use smallvec::SmallVec;
use std::sync::OnceLock;

/// Result types collected by a custom parser.
pub type ResultTypes = SmallVec<[TypeId; 1]>;

/// Parses an op's custom syntax (after its name) onto `op`.
pub type ParseFn = fn(&mut Parser<'_>, OpId, &mut ResultTypes) -> PResult<()>;

/// Prints an op's custom syntax (after its name); `false` means "use the
/// generic form instead".
pub type PrintFn = fn(&mut Printer<'_>, OpId) -> bool;

/// A registered custom assembly format.
pub struct OpFormat {
    /// Full op name, e.g. `stablehlo.add`.
    pub name: &'static str,
    /// Parser.
    pub parse: ParseFn,
    /// Printer.
    pub print: PrintFn,
}

fn registry() -> &'static FxHashMap<&'static str, &'static OpFormat> {
    static REG: OnceLock<FxHashMap<&'static str, &'static OpFormat>> = OnceLock::new();
    REG.get_or_init(|| {
        let mut map = FxHashMap::default();
        let lists: [&'static [OpFormat]; 11] = [
            builtin::FORMATS,
            func::FORMATS,
            stablehlo_elementwise::SAME_TYPE,
            stablehlo_elementwise::OTHERS,
            stablehlo_data::FORMATS,
            stablehlo_control::FORMATS,
            stablehlo_dot_conv::FORMATS,
            stablehlo_misc::FORMATS,
            chlo::FORMATS,
            sdy::FORMATS,
            mhlo::FORMATS,
        ];
        for list in lists {
            for f in list {
                map.insert(f.name, f);
            }
        }
        map
    })
}

/// The custom format registered for `name`, if any.
pub fn lookup(name: &str) -> Option<&'static OpFormat> {
    registry().get(name).copied()
}

/// Every op name with a registered custom format.
pub fn registered_ops() -> Vec<&'static str> {
    let mut v: Vec<_> = registry().keys().copied().collect();
    v.sort_unstable();
    v
}

/// True if `op` starts a new SSA naming scope when printed (ops that are
/// isolated from above, such as functions and modules).
pub fn is_naming_scope(m: &Module, op: OpId) -> bool {
    matches!(m.op_name(op), "builtin.module" | "func.func")
}
