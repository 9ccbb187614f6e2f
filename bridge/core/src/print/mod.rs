//! The printer: generic op form for every op, and the custom (pretty) form
//! for ops whose format is registered in [`crate::dialects`], matching
//! MLIR's own output closely. The output always parses back.

mod attrs;
mod names;
mod ops;
mod types;

pub use names::{push_int, Names};

use crate::ir::{Module, TypeId};

/// How to print.
#[derive(Clone, Debug)]
pub struct PrintOptions {
    /// Print every op in generic form.
    pub generic: bool,
    /// Print locations (`loc(...)`) and location aliases.
    pub debug_info: bool,
}

impl Default for PrintOptions {
    fn default() -> Self {
        PrintOptions {
            generic: false,
            debug_info: true,
        }
    }
}

/// Print a whole module.
pub fn print_module(m: &Module, opts: &PrintOptions) -> String {
    let mut p = Printer::new(m, opts.clone());
    // About 85 bytes per op in pretty form: reserving up front saves the
    // output's repeated doubling (each a copy of everything printed so far).
    p.out.reserve(m.ops.len() * 96);
    p.print_file();
    p.out
}

/// Print one type.
pub fn type_to_string(m: &Module, t: TypeId) -> String {
    let mut out = String::new();
    types::write_type(m, t, &mut out);
    out
}

/// Printer state, used by custom op formats much like MLIR's
/// `OpAsmPrinter`.
pub struct Printer<'m> {
    /// The module being printed.
    pub m: &'m Module,
    /// Output text.
    pub out: String,
    /// Options.
    pub opts: PrintOptions,
    indent: usize,
    names: Names,
    type_texts: types::TypeTexts,
}

impl<'m> Printer<'m> {
    /// A printer for `m`.
    pub fn new(m: &'m Module, opts: PrintOptions) -> Self {
        Printer {
            m,
            out: String::with_capacity(1 << 16),
            opts,
            indent: 0,
            names: Names::new(m),
            type_texts: types::TypeTexts::default(),
        }
    }

    /// Write raw text.
    #[inline]
    pub fn w(&mut self, s: &str) {
        self.out.push_str(s);
    }

    /// Write a decimal integer.
    #[inline]
    pub fn int(&mut self, v: i64) {
        names::push_int(&mut self.out, v);
    }

    /// Start a new line at the current indentation.
    pub fn newline(&mut self) {
        self.out.push('\n');
        for _ in 0..self.indent {
            self.out.push_str("  ");
        }
    }
}
