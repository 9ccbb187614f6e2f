//! The StableHLO/MLIR text parser.
//!
//! It reads the generic op form of any op, and the custom (pretty) assembly
//! formats registered in [`crate::dialects`]. Literal payloads are kept
//! verbatim, so parse → print loses nothing. Errors render as
//! `file:line:col` with the source line and a caret; the parser never
//! panics and bounds its recursion depth.

mod attrs;
pub(crate) mod cursor;
mod locs;
mod ops;
mod scope;
mod types;

pub use cursor::{parse_int_text, PResult, RawError};
pub use ops::{ArgDef, OperandList, OperandRef, ResultGroup};

use crate::error::ParseError;
use crate::ir::Module;
use cursor::Cursor;
use scope::Scopes;

/// Parse `src` as a module, naming it `<input>` in errors.
pub fn parse_module(src: &str) -> Result<Module, ParseError> {
    parse_module_named("<input>", src)
}

/// Parse `src` as a module; `file` names it in errors.
pub fn parse_module_named(file: &str, src: &str) -> Result<Module, ParseError> {
    let mut p = Parser::new(src);
    match p.parse_file() {
        Ok(()) => Ok(p.m),
        Err(e) => Err(ParseError::at(file, src.as_bytes(), e.pos, e.msg)),
    }
}

/// Parse a standalone type (e.g. `tensor<8x16xf32>`) into `m`.
pub fn parse_type_into(m: &mut Module, text: &str) -> Result<crate::ir::TypeId, ParseError> {
    let mut p = Parser::new(text);
    std::mem::swap(&mut p.m, m);
    let r = p.parse_type().and_then(|t| {
        if p.c.at_end() {
            Ok(t)
        } else {
            p.c.expected("end of type")
        }
    });
    std::mem::swap(&mut p.m, m);
    r.map_err(|e| ParseError::at("<type>", text.as_bytes(), e.pos, e.msg))
}

/// Parser state: the cursor, the module being built and the SSA scopes.
///
/// Custom op formats in [`crate::dialects`] drive it through its public
/// methods, much like MLIR's `OpAsmParser`.
pub struct Parser<'s> {
    /// Scanning position.
    pub c: Cursor<'s>,
    /// The module being built.
    pub m: Module,
    scopes: Scopes<'s>,
    type_cache: rustc_hash::FxHashMap<&'s str, crate::ir::TypeId>,
    format_cache:
        rustc_hash::FxHashMap<&'s str, (&'static crate::dialects::OpFormat, crate::intern::Sym)>,
}

impl<'s> Parser<'s> {
    /// A parser over `src`.
    pub fn new(src: &'s str) -> Self {
        let mut m = Module::new();
        // Real modules average roughly 80 bytes per op.
        m.reserve(src.len() / 80);
        Parser {
            c: Cursor::new(src),
            m,
            scopes: Scopes::default(),
            format_cache: Default::default(),
            type_cache: Default::default(),
        }
    }
}
