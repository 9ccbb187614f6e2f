//! Printing the file level, operations (custom form with generic
//! fallback), regions and blocks.

use super::Printer;
use crate::dialects;
use crate::ir::{AliasValue, BlockId, OpId, RegionId, TopItem, TypeId, ValueId};

impl Printer<'_> {
    /// Print every top-level item.
    pub(crate) fn print_file(&mut self) {
        let m = self.m;
        for item in &m.top {
            match item {
                TopItem::Op(op) => {
                    self.op(*op);
                    self.out.push('\n');
                }
                TopItem::Alias { name, value } => {
                    if matches!(value, AliasValue::Loc(_)) && !self.opts.debug_info {
                        continue;
                    }
                    self.out.push(match value {
                        AliasValue::Type(_) => '!',
                        _ => '#',
                    });
                    self.w(m.str(*name));
                    self.w(" = ");
                    match value {
                        AliasValue::Attr(a) => self.attr(*a),
                        AliasValue::Type(t) => self.ty(*t),
                        AliasValue::Loc(l) => {
                            self.w("loc(");
                            self.loc_body(*l);
                            self.out.push(')');
                        }
                    }
                    self.out.push('\n');
                }
                TopItem::Metadata(body) => {
                    self.w("{-#");
                    self.w(body);
                    self.w("#-}\n");
                }
            }
        }
    }

    /// Print one operation at the current position (no leading newline).
    pub fn op(&mut self, op: OpId) {
        let m = self.m;
        let o = m.op(op);
        let scoped = dialects::is_naming_scope(m, op);
        if !self.opts.generic {
            if let Some(fmt) = dialects::lookup(m.str(o.name)) {
                let mark = self.out.len();
                self.result_prefix(op);
                self.w(self.custom_name(op, fmt.name));
                if scoped {
                    self.names.push_scope();
                }
                let ok = (fmt.print)(self, op);
                if scoped {
                    self.names.pop_scope();
                }
                if ok {
                    self.trailing_loc(o.loc);
                    return;
                }
                self.out.truncate(mark);
            }
        }
        self.generic_op(op, scoped);
    }

    /// The name to print for a custom-form op: default dialects are elided
    /// (`builtin.module` → `module`, `func.return` → `return` inside
    /// functions).
    fn custom_name<'a>(&self, op: OpId, full: &'a str) -> &'a str {
        if let Some(rest) = full.strip_prefix("builtin.") {
            return rest;
        }
        if let Some(rest) = full.strip_prefix("func.") {
            if rest != "func" && self.parent_op_name(op) == Some("func.func") {
                return rest;
            }
        }
        full
    }

    fn parent_op_name(&self, op: OpId) -> Option<&str> {
        let m = self.m;
        let b = m.op(op).parent?;
        let r = m.block(b).parent?;
        let p = m.region(r).parent?;
        Some(m.op_name(p))
    }

    fn result_prefix(&mut self, op: OpId) {
        let m = self.m;
        let res = &m.op(op).results;
        if res.is_empty() {
            return;
        }
        if super::names::results_named_apart(m, res) {
            for (i, &r) in res.iter().enumerate() {
                if i > 0 {
                    self.w(", ");
                }
                self.out.push('%');
                self.names.write(m, r, false, &mut self.out);
            }
            self.w(" = ");
            return;
        }
        self.out.push('%');
        self.names.write(m, res[0], false, &mut self.out);
        if res.len() > 1 {
            self.out.push(':');
            self.int(res.len() as i64);
        }
        self.w(" = ");
    }

    /// Write a value use: `%name` or `%name#N`.
    pub fn operand(&mut self, v: ValueId) {
        let m = self.m;
        self.out.push('%');
        let (base, idx) = self.names.group_of(m, v);
        self.names.write(m, base, false, &mut self.out);
        if let Some(i) = idx {
            self.out.push('#');
            self.int(i as i64);
        }
    }

    /// Write the name of `v` (without `%`); `entry_arg` asks for `argN`
    /// style when it has no name hint.
    pub fn value_name(&mut self, v: ValueId, entry_arg: bool) {
        let m = self.m;
        self.names.write(m, v, entry_arg, &mut self.out);
    }

    /// Name `v` after `base` (`base`, `base_0`, ...) unless it was named
    /// already, ignoring its source hint (MLIR's `getAsmBlockArgumentNames`,
    /// e.g. `%iterArg` for `stablehlo.while`).
    pub fn name_value_as(&mut self, v: ValueId, base: &str) {
        self.names.name_as(v, base);
    }

    /// Make `v` print with the same name as `target`: for ops whose regions
    /// share one printed set of argument names (`stablehlo.while`'s `cond`
    /// and `do` blocks).
    pub fn share_value_name(&mut self, v: ValueId, target: ValueId) {
        let m = self.m;
        self.names.share(m, v, target);
    }

    /// Write `%a, %b, ...`.
    pub fn operands(&mut self, vs: &[ValueId]) {
        for (i, &v) in vs.iter().enumerate() {
            if i > 0 {
                self.w(", ");
            }
            self.operand(v);
        }
    }

    /// Write a block argument definition `%name: type loc(..)`.
    pub fn arg_def(&mut self, v: ValueId, entry: bool) {
        let m = self.m;
        self.out.push('%');
        self.names.write(m, v, entry, &mut self.out);
        self.w(": ");
        self.ty(m.value_type(v));
        self.trailing_loc(m.value(v).loc);
    }

    fn generic_op(&mut self, op: OpId, scoped: bool) {
        let m = self.m;
        let o = m.op(op);
        self.result_prefix(op);
        self.out.push('"');
        self.w(m.str(o.name));
        self.w("\"(");
        let operands = o.operands.clone();
        self.operands(&operands);
        self.out.push(')');
        if !o.successors.is_empty() {
            self.out.push('[');
            for (i, &b) in o.successors.iter().enumerate() {
                if i > 0 {
                    self.w(", ");
                }
                self.block_label(b);
            }
            self.out.push(']');
        }
        if !o.props.is_empty() {
            self.w(" <");
            self.dict(&o.props);
            self.out.push('>');
        }
        if !o.regions.is_empty() {
            if scoped {
                self.names.push_scope();
            }
            self.w(" (");
            for (i, &r) in o.regions.iter().enumerate() {
                if i > 0 {
                    self.w(", ");
                }
                self.region(r, true);
            }
            self.out.push(')');
            if scoped {
                self.names.pop_scope();
            }
        }
        if !o.attrs.is_empty() {
            self.out.push(' ');
            self.dict(&o.attrs);
        }
        self.w(" : (");
        let tys: smallvec::SmallVec<[TypeId; 4]> =
            o.operands.iter().map(|&v| m.value_type(v)).collect();
        self.types(&tys);
        self.w(") -> ");
        let res: smallvec::SmallVec<[TypeId; 2]> =
            o.results.iter().map(|&v| m.value_type(v)).collect();
        self.result_types(&res);
        self.trailing_loc(o.loc);
    }

    fn block_label(&mut self, b: BlockId) {
        let m = self.m;
        let idx = m
            .block(b)
            .parent
            .map(|r| m.region(r).blocks.iter().position(|&x| x == b).unwrap_or(0))
            .unwrap_or(0);
        self.w("^bb");
        self.int(idx as i64);
    }

    /// Print a region `{ ... }`. With `print_entry_args`, the entry block
    /// header is printed when the block has arguments (generic form);
    /// custom formats that print the arguments themselves pass false.
    pub fn region(&mut self, r: RegionId, print_entry_args: bool) {
        let m = self.m;
        let region = m.region(r);
        self.out.push('{');
        self.indent += 1;
        for (i, &b) in region.blocks.iter().enumerate() {
            let block = m.block(b);
            let header = i > 0 || (print_entry_args && !block.args.is_empty());
            if header {
                self.indent -= 1;
                self.newline();
                self.block_label(b);
                if !block.args.is_empty() {
                    self.out.push('(');
                    for (j, &a) in block.args.iter().enumerate() {
                        if j > 0 {
                            self.w(", ");
                        }
                        self.arg_def(a, i == 0);
                    }
                    self.out.push(')');
                }
                self.out.push(':');
                self.indent += 1;
            }
            for &child in &block.ops {
                self.newline();
                self.op(child);
            }
        }
        self.indent -= 1;
        self.newline();
        self.out.push('}');
    }
}
