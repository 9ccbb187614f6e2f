//! Printing types.

use super::names::push_int;
use super::Printer;
use crate::ir::{Module, Signedness, Type, TypeId, DYNAMIC};

/// Append the text of type `t`.
pub(crate) fn write_type(m: &Module, t: TypeId, out: &mut String) {
    match m.ty(t) {
        Type::Integer { width, signedness } => {
            out.push_str(match signedness {
                Signedness::Signless => "i",
                Signedness::Signed => "si",
                Signedness::Unsigned => "ui",
            });
            push_int(out, *width as i64);
        }
        Type::Float(k) => out.push_str(k.name()),
        Type::Index => out.push_str("index"),
        Type::None => out.push_str("none"),
        Type::Complex(e) => {
            out.push_str("complex<");
            write_type(m, *e, out);
            out.push('>');
        }
        Type::Tensor {
            dims,
            elem,
            encoding,
        } => {
            out.push_str("tensor<");
            for &d in dims {
                if d == DYNAMIC {
                    out.push('?');
                } else {
                    push_int(out, d);
                }
                out.push('x');
            }
            write_type(m, *elem, out);
            if let Some(e) = encoding {
                out.push_str(", ");
                out.push_str(e);
            }
            out.push('>');
        }
        Type::UnrankedTensor(e) => {
            out.push_str("tensor<*x");
            write_type(m, *e, out);
            out.push('>');
        }
        Type::Tuple(elems) => {
            out.push_str("tuple<");
            write_type_list(m, elems, out);
            out.push('>');
        }
        Type::Function { inputs, results } => {
            out.push('(');
            write_type_list(m, inputs, out);
            out.push_str(") -> ");
            write_result_types(m, results, out);
        }
        Type::Opaque(s) => out.push_str(s),
    }
}

/// Append `T, T, ...`.
pub(crate) fn write_type_list(m: &Module, ts: &[TypeId], out: &mut String) {
    for (i, &t) in ts.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        write_type(m, t, out);
    }
}

/// Append a result type list: `T` for one non-function type, else `(T, ...)`.
pub(crate) fn write_result_types(m: &Module, ts: &[TypeId], out: &mut String) {
    if ts.len() == 1 && !matches!(m.ty(ts[0]), Type::Function { .. }) {
        write_type(m, ts[0], out);
    } else {
        out.push('(');
        write_type_list(m, ts, out);
        out.push(')');
    }
}

/// Printed text of each type, made once per printer: a module names few
/// distinct types but prints them once per op or more.
#[derive(Default)]
pub(crate) struct TypeTexts {
    text: String,
    /// `(start, end)` in `text` per type id; `(0, 0)` when not yet printed
    /// (no type prints as the empty string).
    spans: Vec<(u32, u32)>,
}

impl Printer<'_> {
    /// Write a type.
    #[inline]
    pub fn ty(&mut self, t: TypeId) {
        let i = t.index();
        if let Some(&(a, b)) = self.type_texts.spans.get(i) {
            if b > a {
                self.out
                    .push_str(&self.type_texts.text[a as usize..b as usize]);
                return;
            }
        }
        let tt = &mut self.type_texts;
        let start = tt.text.len();
        write_type(self.m, t, &mut tt.text);
        let end = tt.text.len();
        if tt.spans.len() <= i {
            tt.spans.resize(i + 1, (0, 0));
        }
        tt.spans[i] = (start as u32, end as u32);
        self.out.push_str(&tt.text[start..end]);
    }

    /// Write `T, T, ...`.
    pub fn types(&mut self, ts: &[TypeId]) {
        for (i, &t) in ts.iter().enumerate() {
            if i > 0 {
                self.out.push_str(", ");
            }
            self.ty(t);
        }
    }

    /// Write a result type list (`T` or `(T, ...)`).
    pub fn result_types(&mut self, ts: &[TypeId]) {
        if ts.len() == 1 && !matches!(self.m.ty(ts[0]), Type::Function { .. }) {
            self.ty(ts[0]);
        } else {
            self.out.push('(');
            self.types(ts);
            self.out.push(')');
        }
    }

    /// Write `(operand types) -> result types` for `op`.
    pub fn functional_type(&mut self, op: crate::ir::OpId) {
        let o = self.m.op(op);
        self.out.push('(');
        for (i, &v) in o.operands.iter().enumerate() {
            if i > 0 {
                self.out.push_str(", ");
            }
            self.ty(self.m.value_type(v));
        }
        self.out.push_str(") -> ");
        let res: smallvec::SmallVec<[TypeId; 2]> =
            o.results.iter().map(|&v| self.m.value_type(v)).collect();
        self.result_types(&res);
    }
}
