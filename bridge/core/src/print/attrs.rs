//! Printing attributes and locations.

use super::Printer;
use crate::ir::{AttrId, Attribute, DenseArrayData, LocId, Location, NamedAttr, OpId};

impl Printer<'_> {
    /// Write an attribute value.
    pub fn attr(&mut self, a: AttrId) {
        let m = self.m;
        match m.attr(a) {
            Attribute::Unit => self.w("unit"),
            Attribute::Bool(b) => self.w(if *b { "true" } else { "false" }),
            Attribute::Integer { text, ty } | Attribute::Float { text, ty } => {
                self.w(text);
                if let Some(t) = ty {
                    self.w(" : ");
                    self.ty(*t);
                }
            }
            Attribute::String { escaped, ty } => {
                self.out.push('"');
                self.w(escaped);
                self.out.push('"');
                if let Some(t) = ty {
                    self.w(" : ");
                    self.ty(*t);
                }
            }
            Attribute::Type(t) => self.ty(*t),
            Attribute::Array(elems) => {
                self.out.push('[');
                for (i, &e) in elems.iter().enumerate() {
                    if i > 0 {
                        self.w(", ");
                    }
                    self.attr(e);
                }
                self.out.push(']');
            }
            Attribute::DenseArray { elem, data } => {
                self.w("array<");
                self.ty(*elem);
                let is_bool = matches!(m.ty(*elem), crate::ir::Type::Integer { width: 1, .. });
                match data {
                    DenseArrayData::Int(v) => {
                        if !v.is_empty() {
                            self.w(": ");
                            for (i, &x) in v.iter().enumerate() {
                                if i > 0 {
                                    self.w(", ");
                                }
                                if is_bool {
                                    self.w(if x != 0 { "true" } else { "false" });
                                } else {
                                    self.int(x);
                                }
                            }
                        }
                    }
                    DenseArrayData::Float(v) => {
                        if !v.is_empty() {
                            self.w(": ");
                            for (i, x) in v.iter().enumerate() {
                                if i > 0 {
                                    self.w(", ");
                                }
                                self.w(x);
                            }
                        }
                    }
                }
                self.out.push('>');
            }
            Attribute::Dict(entries) => self.dict(entries),
            Attribute::SymbolRef(parts) => {
                for (i, &s) in parts.iter().enumerate() {
                    if i > 0 {
                        self.w("::");
                    }
                    self.out.push('@');
                    self.w(m.str(s));
                }
            }
            Attribute::Dense { body, ty } => {
                self.w("dense<");
                self.w(body);
                self.w("> : ");
                self.ty(*ty);
            }
            Attribute::DenseResource { handle, ty } => {
                self.w("dense_resource<");
                self.w(handle);
                self.w("> : ");
                self.ty(*ty);
            }
            Attribute::Location(l) => {
                self.w("loc(");
                self.loc_body(*l);
                self.out.push(')');
            }
            Attribute::Alias(s) => {
                self.out.push('#');
                self.w(m.str(*s));
            }
            Attribute::Opaque(text) => {
                if !is_builtin_opaque(text) {
                    self.out.push('#');
                }
                self.w(text);
            }
        }
    }

    /// Write `{a = 1, b}`, sorted by name as MLIR keeps dictionaries.
    pub fn dict(&mut self, entries: &[NamedAttr]) {
        self.out.push('{');
        let m = self.m;
        let sorted = entries
            .windows(2)
            .all(|w| m.str(w[0].name) <= m.str(w[1].name));
        if sorted {
            for (i, e) in entries.iter().enumerate() {
                if i > 0 {
                    self.w(", ");
                }
                self.named_attr(e);
            }
        } else {
            let mut order: Vec<&NamedAttr> = entries.iter().collect();
            order.sort_by(|a, b| m.str(a.name).cmp(m.str(b.name)));
            for (i, e) in order.into_iter().enumerate() {
                if i > 0 {
                    self.w(", ");
                }
                self.named_attr(e);
            }
        }
        self.out.push('}');
    }

    fn named_attr(&mut self, e: &NamedAttr) {
        self.w(self.m.str(e.name));
        if !matches!(self.m.attr(e.value), Attribute::Unit) {
            self.w(" = ");
            self.attr(e.value);
        }
    }

    /// Write ` {..}` with every attribute of `op` (inherent and
    /// discardable) except those named in `elided`; nothing if none remain.
    pub fn attr_dict(&mut self, op: OpId, elided: &[&str]) {
        self.attr_dict_impl(op, elided, false);
    }

    /// Like [`Printer::attr_dict`] but spelled ` attributes {..}`.
    pub fn attr_dict_with_keyword(&mut self, op: OpId, elided: &[&str]) {
        self.attr_dict_impl(op, elided, true);
    }

    fn attr_dict_impl(&mut self, op: OpId, elided: &[&str], keyword: bool) {
        let m = self.m;
        let o = m.op(op);
        let mut shown: Vec<&NamedAttr> = o
            .props
            .iter()
            .chain(o.attrs.iter())
            .filter(|e| !elided.contains(&m.str(e.name)))
            .collect();
        if shown.is_empty() {
            return;
        }
        shown.sort_by(|a, b| m.str(a.name).cmp(m.str(b.name)));
        self.w(if keyword { " attributes {" } else { " {" });
        for (i, e) in shown.into_iter().enumerate() {
            if i > 0 {
                self.w(", ");
            }
            self.named_attr(e);
        }
        self.out.push('}');
    }

    /// Write ` loc(...)` for `loc` when debug info is on.
    pub fn trailing_loc(&mut self, loc: Option<LocId>) {
        if let (Some(l), true) = (loc, self.opts.debug_info) {
            self.w(" loc(");
            self.loc_body(l);
            self.out.push(')');
        }
    }

    /// Write a location without the `loc(...)` wrapper.
    pub fn loc_body(&mut self, l: LocId) {
        let m = self.m;
        match m.loc(l) {
            Location::Unknown => self.w("unknown"),
            Location::FileLineCol { file, pos } => {
                self.out.push('"');
                self.w(file);
                self.out.push('"');
                self.w(pos);
            }
            Location::Name { name, child } => {
                self.out.push('"');
                self.w(name);
                self.out.push('"');
                if let Some(c) = child {
                    self.out.push('(');
                    self.loc_body(*c);
                    self.out.push(')');
                }
            }
            Location::CallSite { callee, caller } => {
                self.w("callsite(");
                self.loc_body(*callee);
                self.w(" at ");
                self.loc_body(*caller);
                self.out.push(')');
            }
            Location::Fused { metadata, locs } => {
                self.w("fused");
                if let Some(md) = metadata {
                    self.out.push('<');
                    self.attr(*md);
                    self.out.push('>');
                }
                self.out.push('[');
                for (i, &c) in locs.iter().enumerate() {
                    if i > 0 {
                        self.w(", ");
                    }
                    self.loc_body(c);
                }
                self.out.push(']');
            }
            Location::Alias(s) => {
                self.out.push('#');
                self.w(m.str(*s));
            }
            Location::Opaque(t) => self.w(t),
        }
    }
}

/// Builtin attributes kept verbatim that are written without `#`.
fn is_builtin_opaque(text: &str) -> bool {
    [
        "sparse<",
        "affine_map<",
        "affine_set<",
        "strided<",
        "opaque<",
        "distinct[",
    ]
    .iter()
    .any(|p| text.starts_with(p))
}
