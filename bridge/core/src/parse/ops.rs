//! Operations, regions, blocks and the file level: the generic op form,
//! dispatch to custom formats, result binding and the operand API that
//! custom formats use.

use super::cursor::{PResult, RawError};
use super::Parser;
use crate::dialects::{self, OpFormat};
use crate::ir::{AliasValue, Attribute, BlockId, LocId, NamedAttr, OpId, TopItem, TypeId, ValueId};
use smallvec::SmallVec;

/// A use of an SSA value before its type is known: `%name` or `%name#N`.
#[derive(Clone, Copy, Debug)]
pub struct OperandRef<'s> {
    /// The name without `%`.
    pub name: &'s str,
    /// The result number after `#` (0 if absent).
    pub num: u32,
    /// Byte offset of the `%`.
    pub pos: usize,
}

/// A list of operand uses (inline up to four).
pub type OperandList<'s> = SmallVec<[OperandRef<'s>; 4]>;

/// One group on the left of `=`: `%name` or `%name:N`.
#[derive(Clone, Copy, Debug)]
pub struct ResultGroup<'s> {
    /// The name without `%`.
    pub name: &'s str,
    /// How many results it binds.
    pub count: u32,
    /// Byte offset of the `%`.
    pub pos: usize,
}

/// A block argument definition: `%name: type loc(...)`.
#[derive(Clone, Copy, Debug)]
pub struct ArgDef<'s> {
    /// The name without `%`.
    pub name: &'s str,
    /// Its type.
    pub ty: TypeId,
    /// Its location, if written.
    pub loc: Option<LocId>,
    /// Byte offset of the `%`.
    pub pos: usize,
}

impl<'s> Parser<'s> {
    /// Parse a whole file: ops, alias definitions and metadata blocks.
    pub(crate) fn parse_file(&mut self) -> PResult<()> {
        self.scopes.push();
        loop {
            self.c.ws();
            let Some(b) = self.c.cur() else { break };
            match b {
                b'#' | b'!' => self.parse_alias_def()?,
                b'{' if self.c.src[self.c.pos..].starts_with(b"{-#") => {
                    let start = self.c.pos + 3;
                    let Some(end) = find(&self.c.src[start..], b"#-}") else {
                        return self.c.err("unterminated file metadata block '{-#'");
                    };
                    let body = String::from_utf8_lossy(&self.c.src[start..start + end]);
                    self.m.top.push(TopItem::Metadata(body.into_owned().into()));
                    self.c.pos = start + end + 3;
                }
                _ => {
                    let op = self.parse_operation()?;
                    self.m.top.push(TopItem::Op(op));
                }
            }
        }
        self.scopes.pop()
    }

    fn parse_alias_def(&mut self) -> PResult<()> {
        let sigil = self.c.cur();
        let start = self.c.pos;
        self.c.pos += 1;
        let Some(name) = self.c.suffix_id() else {
            return self.c.expected("alias name");
        };
        if !self.c.eat(b'=') {
            return self
                .c
                .err_at(start, "expected '=' in alias definition (or an operation)");
        }
        let value = if sigil == Some(b'!') {
            AliasValue::Type(self.parse_type()?)
        } else if self.c.peek_ident() == Some("loc") {
            self.c.pos += 3;
            AliasValue::Loc(self.parse_loc_parens()?)
        } else {
            AliasValue::Attr(self.parse_attribute()?)
        };
        let name = self.m.sym(name);
        self.m.top.push(TopItem::Alias { name, value });
        Ok(())
    }

    /// Parse one operation (with its result bindings and location).
    pub fn parse_operation(&mut self) -> PResult<OpId> {
        self.c.enter()?;
        let groups = self.parse_result_groups()?;
        self.c.ws();
        let name_pos = self.c.pos;
        let (op, result_types) = if self.c.cur() == Some(b'"') {
            let name = self.c.string()?;
            self.parse_generic_op(name)?
        } else {
            let Some(name) = self.c.ident() else {
                return self.c.expected("operation name");
            };
            let Some((format, sym)) = self.lookup_format_cached(name) else {
                return self.c.err_at(
                    name_pos,
                    format!(
                        "unknown operation '{name}': no custom assembly format is registered for it (write it in generic form, \"{name}\"(...))"
                    ),
                );
            };
            let op = self.m.add_op(sym);
            let mut result_types = SmallVec::new();
            (format.parse)(self, op, &mut result_types)?;
            (op, result_types)
        };
        if let Some(loc) = self.parse_optional_loc()? {
            self.m.ops[op.index()].loc = Some(loc);
        }
        self.bind_results(op, &groups, &result_types, name_pos)?;
        self.c.leave();
        Ok(op)
    }

    fn parse_result_groups(&mut self) -> PResult<SmallVec<[ResultGroup<'s>; 1]>> {
        let mut groups = SmallVec::new();
        if self.c.peek() != Some(b'%') {
            return Ok(groups);
        }
        loop {
            self.c.ws();
            let pos = self.c.pos;
            if !self.c.eat(b'%') {
                return self.c.expected("result name");
            }
            let Some(name) = self.c.suffix_id() else {
                return self.c.expected("result name after '%'");
            };
            let count = if self.c.cur() == Some(b':') {
                self.c.pos += 1;
                let n = self.c.uint()?;
                if n == 0 || n > u32::MAX as i64 {
                    return self.c.err_at(pos, "result group size must be positive");
                }
                n as u32
            } else {
                1
            };
            groups.push(ResultGroup { name, count, pos });
            if !self.c.eat(b',') {
                break;
            }
        }
        self.c.expect(b'=')?;
        Ok(groups)
    }

    fn bind_results(
        &mut self,
        op: OpId,
        groups: &[ResultGroup<'s>],
        types: &[TypeId],
        pos: usize,
    ) -> PResult<()> {
        let declared: u64 = groups.iter().map(|g| g.count as u64).sum();
        if declared != types.len() as u64 {
            let name = self.m.op_name(op).to_string();
            return self.c.err_at(
                groups.first().map_or(pos, |g| g.pos),
                format!(
                    "operation '{name}' defines {} result(s) but {declared} name(s) were bound",
                    types.len()
                ),
            );
        }
        let mut it = types.iter();
        for g in groups {
            let hint = name_hint(g.name).map(|h| self.m.sym(h));
            let mut vals: SmallVec<[ValueId; 1]> = SmallVec::new();
            for _ in 0..g.count {
                let ty = *it.next().unwrap_or(&types[0]);
                vals.push(self.m.add_result(op, ty, hint));
            }
            self.scopes.define(&mut self.m, g.name, vals, g.pos)?;
        }
        Ok(())
    }

    /// Parse the rest of a generic op after its quoted name.
    fn parse_generic_op(&mut self, name: &str) -> PResult<(OpId, SmallVec<[TypeId; 1]>)> {
        let sym = self.m.sym(name);
        let op = self.m.add_op(sym);
        self.c.expect(b'(')?;
        let operands = self.parse_operand_list_until(b')')?;
        if self.c.eat(b'[') {
            loop {
                self.c.ws();
                let pos = self.c.pos;
                if !self.c.eat(b'^') {
                    return self.c.expected("successor block");
                }
                let Some(label) = self.c.suffix_id() else {
                    return self.c.expected("block label");
                };
                let b = self.scopes.block_ref(&mut self.m, label, pos)?;
                self.m.ops[op.index()].successors.push(b);
                if self.c.eat(b']') {
                    break;
                }
                self.c.expect(b',')?;
            }
        }
        if self.c.eat_str("<{") {
            self.c.pos -= 1;
            let props = self.parse_attr_dict_body()?;
            self.c.expect(b'>')?;
            self.m.ops[op.index()].props = props.into();
        }
        if self.c.peek() == Some(b'(') {
            self.c.pos += 1;
            loop {
                self.parse_region(op, None)?;
                if self.c.eat(b')') {
                    break;
                }
                self.c.expect(b',')?;
            }
        }
        if self.c.peek() == Some(b'{') {
            let attrs = self.parse_attr_dict_body()?;
            self.m.ops[op.index()].attrs = attrs.into();
        }
        self.c.expect(b':')?;
        self.c.ws();
        let fpos = self.c.pos;
        let (inputs, results) = self.parse_function_type_parts()?;
        if inputs.len() != operands.len() {
            return self.c.err_at(
                fpos,
                format!(
                    "'{name}' has {} operand(s) but its type lists {}",
                    operands.len(),
                    inputs.len()
                ),
            );
        }
        let vals = self.resolve_operands(&operands, &inputs)?;
        self.m.ops[op.index()].operands = vals;
        Ok((op, results.into_iter().collect()))
    }

    // ----- operand API for custom formats -----

    /// True if an SSA value use starts at the cursor.
    pub fn at_operand(&mut self) -> bool {
        self.c.peek() == Some(b'%')
    }

    /// Parse `%name` or `%name#N`.
    pub fn parse_operand(&mut self) -> PResult<OperandRef<'s>> {
        self.c.ws();
        let pos = self.c.pos;
        if !self.c.eat(b'%') {
            return self.c.expected("SSA value ('%...')");
        }
        let Some(name) = self.c.suffix_id() else {
            return self.c.expected("value name after '%'");
        };
        let num = if self.c.cur() == Some(b'#') {
            self.c.pos += 1;
            let n = self.c.uint()?;
            u32::try_from(n).map_err(|_| RawError {
                pos,
                msg: "result number out of range".into(),
            })?
        } else {
            0
        };
        Ok(OperandRef { name, num, pos })
    }

    /// Parse a possibly empty comma-separated operand list (no brackets).
    pub fn parse_operand_list(&mut self) -> PResult<OperandList<'s>> {
        let mut out = OperandList::new();
        if !self.at_operand() {
            return Ok(out);
        }
        loop {
            out.push(self.parse_operand()?);
            if !self.c.eat(b',') {
                return Ok(out);
            }
        }
    }

    /// Parse operands up to and including `close`.
    pub fn parse_operand_list_until(&mut self, close: u8) -> PResult<OperandList<'s>> {
        let list = self.parse_operand_list()?;
        if !self.c.eat(close) {
            return self.c.expected(&format!("',' or '{}'", close as char));
        }
        Ok(list)
    }

    /// Resolve one operand use against its type.
    pub fn resolve_operand(&mut self, r: &OperandRef<'s>, ty: TypeId) -> PResult<ValueId> {
        self.scopes.resolve(&mut self.m, r.name, r.num, ty, r.pos)
    }

    /// Resolve operand uses against a type list of the same length.
    pub fn resolve_operands(
        &mut self,
        refs: &[OperandRef<'s>],
        types: &[TypeId],
    ) -> PResult<SmallVec<[ValueId; 3]>> {
        if refs.len() != types.len() {
            let pos = refs.first().map_or(self.c.pos, |r| r.pos);
            return self.c.err_at(
                pos,
                format!("{} operand(s) but {} type(s)", refs.len(), types.len()),
            );
        }
        refs.iter()
            .zip(types)
            .map(|(r, &t)| self.resolve_operand(r, t))
            .collect()
    }

    /// Append operands to `op`.
    pub fn push_operands(&mut self, op: OpId, vals: &[ValueId]) {
        self.m.ops[op.index()].operands.extend_from_slice(vals);
    }

    /// Set an inherent attribute on `op`.
    pub fn set_prop(&mut self, op: OpId, name: &str, value: Attribute) {
        let name = self.m.sym(name);
        let value = self.m.add_attr(value);
        self.m.ops[op.index()].props.push(NamedAttr { name, value });
    }

    /// Set an already-built inherent attribute on `op`.
    pub fn set_prop_id(&mut self, op: OpId, name: &str, value: crate::ir::AttrId) {
        let name = self.m.sym(name);
        self.m.ops[op.index()].props.push(NamedAttr { name, value });
    }

    /// Parse an optional `{...}` attribute dictionary onto `op`; names in
    /// `inherent` become inherent attributes, the rest discardable.
    pub fn parse_optional_attr_dict(&mut self, op: OpId, inherent: &[&str]) -> PResult<()> {
        if self.c.peek() != Some(b'{') {
            return Ok(());
        }
        let dict = self.parse_attr_dict_body()?;
        self.distribute_attrs(op, dict, inherent);
        Ok(())
    }

    /// Parse `attributes {...}` if present (used by `module` and `func`).
    pub fn parse_optional_attr_dict_with_keyword(
        &mut self,
        op: OpId,
        inherent: &[&str],
    ) -> PResult<()> {
        if self.c.eat_kw("attributes") {
            let dict = self.parse_attr_dict_body()?;
            self.distribute_attrs(op, dict, inherent);
        }
        Ok(())
    }

    fn distribute_attrs(&mut self, op: OpId, dict: Vec<NamedAttr>, inherent: &[&str]) {
        for a in dict {
            let is_inherent = inherent.contains(&self.m.str(a.name));
            let o = &mut self.m.ops[op.index()];
            if is_inherent {
                o.props.push(a);
            } else {
                o.attrs.push(a);
            }
        }
    }

    // ----- regions and blocks -----

    /// Parse `%name: type loc(...)?` (a block argument definition).
    pub fn parse_arg_def(&mut self) -> PResult<ArgDef<'s>> {
        self.c.ws();
        let pos = self.c.pos;
        if !self.c.eat(b'%') {
            return self.c.expected("argument name ('%...')");
        }
        let Some(name) = self.c.suffix_id() else {
            return self.c.expected("argument name after '%'");
        };
        self.c.expect(b':')?;
        let ty = self.parse_type()?;
        let loc = self.parse_optional_loc()?;
        Ok(ArgDef { name, ty, loc, pos })
    }

    /// Parse a `{ ... }` region attached to `op`. When `entry_args` is
    /// given (custom formats that print the entry block's arguments
    /// elsewhere), the entry block is created with them.
    pub fn parse_region(&mut self, op: OpId, entry_args: Option<&[ArgDef<'s>]>) -> PResult<()> {
        self.c.enter()?;
        self.c.expect(b'{')?;
        let region = self.m.add_region(op);
        if crate::dialects::is_naming_scope(&self.m, op) {
            // Function bodies hold most values: size the table up front.
            self.scopes
                .push_with_capacity((self.c.src.len() - self.c.pos) / 64);
        } else {
            self.scopes.push();
        }
        let mut current: Option<BlockId> = None;
        if let Some(args) = entry_args {
            let b = self.m.add_block();
            self.m.push_block(region, b);
            self.define_block_args(b, args)?;
            current = Some(b);
        }
        loop {
            self.c.ws();
            match self.c.cur() {
                None => return self.c.expected("'}' to close region"),
                Some(b'}') => {
                    self.c.pos += 1;
                    break;
                }
                Some(b'^') => {
                    let pos = self.c.pos;
                    if entry_args.is_some()
                        && current.is_some()
                        && self.m.region(region).blocks.len() == 1
                        && self.m.block(current.unwrap_or(BlockId(0))).ops.is_empty()
                    {
                        return self
                            .c
                            .err_at(pos, "invalid block name in region with named arguments");
                    }
                    self.c.pos += 1;
                    let Some(label) = self.c.suffix_id() else {
                        return self.c.expected("block label");
                    };
                    let b = self.scopes.block_def(&mut self.m, label, pos)?;
                    let lsym = self.m.sym(label);
                    self.m.blocks[b.index()].label = Some(lsym);
                    self.m.push_block(region, b);
                    if self.c.eat(b'(') {
                        let mut args = Vec::new();
                        if !self.c.eat(b')') {
                            loop {
                                args.push(self.parse_arg_def()?);
                                if self.c.eat(b')') {
                                    break;
                                }
                                self.c.expect(b',')?;
                            }
                        }
                        self.define_block_args(b, &args)?;
                    }
                    self.c.expect(b':')?;
                    current = Some(b);
                }
                Some(_) => {
                    let b = match current {
                        Some(b) => b,
                        None => {
                            let b = self.m.add_block();
                            self.m.push_block(region, b);
                            current = Some(b);
                            b
                        }
                    };
                    let op = self.parse_operation()?;
                    self.m.push_op(b, op);
                }
            }
        }
        self.scopes.pop()?;
        self.c.leave();
        Ok(())
    }

    fn define_block_args(&mut self, b: BlockId, args: &[ArgDef<'s>]) -> PResult<()> {
        for a in args {
            let hint = name_hint(a.name).map(|h| self.m.sym(h));
            let v = self.m.add_block_arg(b, a.ty, hint);
            self.m.values[v.index()].loc = a.loc;
            let mut one: SmallVec<[ValueId; 1]> = SmallVec::new();
            one.push(v);
            self.scopes.define(&mut self.m, a.name, one, a.pos)?;
        }
        Ok(())
    }
}

impl<'s> Parser<'s> {
    /// [`lookup_format`] with a per-parse cache that also holds the
    /// interned op name.
    fn lookup_format_cached(
        &mut self,
        name: &'s str,
    ) -> Option<(&'static OpFormat, crate::intern::Sym)> {
        if let Some(&hit) = self.format_cache.get(name) {
            return Some(hit);
        }
        let f = lookup_format(name)?;
        let sym = self.m.sym(f.name);
        self.format_cache.insert(name, (f, sym));
        Some((f, sym))
    }
}

/// The printer's name hint for a value written `%name`: none for MLIR's
/// plain numbers, and without the `_N` uniquing suffix MLIR adds to repeated
/// names (`%cst_12` → `cst`), since the printer re-uniquifies the same way.
/// Interning only the base keeps the string table small.
fn name_hint(name: &str) -> Option<&str> {
    let b = name.as_bytes();
    if b.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let digits = b.iter().rev().take_while(|c| c.is_ascii_digit()).count();
    if digits > 0 && digits < b.len() - 1 && b[b.len() - digits - 1] == b'_' {
        let base = &name[..b.len() - digits - 1];
        if !base.bytes().all(|c| c.is_ascii_digit()) {
            return Some(base);
        }
    }
    Some(name)
}

/// Find the custom format for a bare op name, applying default dialects
/// (`module` → `builtin.module`, `return` → `func.return`).
fn lookup_format(name: &str) -> Option<&'static OpFormat> {
    if let Some(f) = dialects::lookup(name) {
        return Some(f);
    }
    if !name.contains('.') {
        for prefix in ["builtin.", "func."] {
            let full = format!("{prefix}{name}");
            if let Some(f) = dialects::lookup(&full) {
                return Some(f);
            }
        }
    }
    None
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}
