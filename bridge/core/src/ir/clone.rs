//! Deep copies of ops, regions, types, attributes and locations from one
//! [`Module`] into another, with symbol renaming (the stitcher uses it to
//! move segments into the fused module), and of an op within one module
//! ([`copy_op_within`]: the refiner's function copies, the CPU lowering's
//! reduction stages).

use super::{
    AliasValue, AttrId, Attribute, BlockId, LocId, Location, Module, NamedAttr, OpId, RegionId,
    TopItem, Type, TypeId, ValueId,
};
use crate::intern::Sym;
use rustc_hash::FxHashMap;
use smallvec::SmallVec;

/// Copies IR from `src` into `dst`, remembering what it mapped.
pub struct Cloner<'a> {
    src: &'a Module,
    /// Destination module.
    pub dst: &'a mut Module,
    /// Source type index → destination type (dense memo).
    types: Vec<Option<TypeId>>,
    /// Source string index → destination string (dense memo).
    syms: Vec<Option<Sym>>,
    /// Source value index → destination value (dense memo). Pre-seed it
    /// with [`Cloner::bind`] to substitute values (e.g. map an entry block
    /// argument to a handle).
    values: Vec<Option<ValueId>>,
    /// Symbol renames applied to symbol references (`@old` → `@new`) and
    /// to `@name` mentions inside verbatim dialect attributes.
    pub symbols: FxHashMap<String, String>,
    loc_aliases: FxHashMap<Sym, LocId>,
    attr_aliases: FxHashMap<Sym, AttrId>,
    /// `dst` started as a clone of `src`, so every id is shared: nothing is
    /// copied, [`Cloner::op`] moves the op (rewriting bound operands) and
    /// symbol renames are applied in place ([`Cloner::rename_in_place`]).
    identity: bool,
}

impl<'a> Cloner<'a> {
    /// A cloner from `src` into `dst`.
    pub fn new(src: &'a Module, dst: &'a mut Module) -> Self {
        let mut loc_aliases = FxHashMap::default();
        let mut attr_aliases = FxHashMap::default();
        for item in &src.top {
            if let TopItem::Alias { name, value } = item {
                match value {
                    AliasValue::Loc(l) => {
                        loc_aliases.insert(*name, *l);
                    }
                    AliasValue::Attr(a) => {
                        attr_aliases.insert(*name, *a);
                    }
                    AliasValue::Type(_) => {}
                }
            }
        }
        Cloner {
            src,
            dst,
            types: vec![None; src.types.len()],
            syms: vec![None; src.strings.len()],
            values: vec![None; src.values.len()],
            symbols: FxHashMap::default(),
            loc_aliases,
            attr_aliases,
            identity: false,
        }
    }

    /// A cloner for a `dst` that is a clone of `src` (see
    /// [`Module::adopt`]): ids map to themselves and ops are moved, so
    /// taking over a large module costs a bulk copy, not an op-by-op one.
    pub fn adopting(src: &'a Module, dst: &'a mut Module) -> Self {
        let mut c = Cloner::new(src, dst);
        c.identity = true;
        c
    }

    /// Apply [`Cloner::symbols`] to the symbol references and `@name`
    /// mentions of every attribute that came from `src` (identity mode).
    pub fn rename_in_place(&mut self) {
        if !self.identity || self.symbols.is_empty() {
            return;
        }
        for i in 0..self.src.attrs.len().min(self.dst.attrs.len()) {
            let renamed = match &self.dst.attrs[i] {
                Attribute::SymbolRef(parts) => {
                    let Some(&first) = parts.first() else {
                        continue;
                    };
                    let Some(new) = self.symbols.get(self.dst.str(first)).cloned() else {
                        continue;
                    };
                    let mut parts = parts.clone();
                    parts[0] = self.dst.sym(&new);
                    Attribute::SymbolRef(parts)
                }
                Attribute::Opaque(text) if text.contains('@') => {
                    Attribute::Opaque(self.rename_in_text(text).into())
                }
                _ => continue,
            };
            self.dst.attrs[i] = renamed;
        }
    }

    /// Identity mode: point the operands of `op` and everything nested in
    /// it at the values bound with [`Cloner::bind`].
    fn rebind_operands(&mut self, op: OpId) {
        let mut nested = Vec::new();
        self.dst.walk(op, &mut |o| nested.push(o));
        for o in nested {
            for i in 0..self.dst.ops[o.index()].operands.len() {
                let v = self.dst.ops[o.index()].operands[i];
                if let Some(Some(b)) = self.values.get(v.index()) {
                    self.dst.ops[o.index()].operands[i] = *b;
                }
            }
        }
    }

    /// Map source value `src` to destination value `dst`.
    pub fn bind(&mut self, src: ValueId, dst: ValueId) {
        if let Some(slot) = self.values.get_mut(src.index()) {
            *slot = Some(dst);
        }
    }

    /// The source module.
    pub fn src(&self) -> &'a Module {
        self.src
    }

    /// Re-intern a string.
    pub fn sym(&mut self, s: Sym) -> Sym {
        if self.identity {
            return s;
        }
        if let Some(Some(d)) = self.syms.get(s.0 as usize) {
            return *d;
        }
        let d = self.dst.sym(self.src.str(s));
        if let Some(slot) = self.syms.get_mut(s.0 as usize) {
            *slot = Some(d);
        }
        d
    }

    /// Copy a type.
    pub fn ty(&mut self, t: TypeId) -> TypeId {
        if self.identity {
            return t;
        }
        if let Some(Some(d)) = self.types.get(t.index()) {
            return *d;
        }
        let copied = match self.src.ty(t).clone() {
            Type::Complex(e) => Type::Complex(self.ty(e)),
            Type::Tensor {
                dims,
                elem,
                encoding,
            } => Type::Tensor {
                dims,
                elem: self.ty(elem),
                encoding,
            },
            Type::UnrankedTensor(e) => Type::UnrankedTensor(self.ty(e)),
            Type::Tuple(es) => Type::Tuple(es.into_iter().map(|e| self.ty(e)).collect()),
            Type::Function { inputs, results } => Type::Function {
                inputs: inputs.into_iter().map(|e| self.ty(e)).collect(),
                results: results.into_iter().map(|e| self.ty(e)).collect(),
            },
            other => other,
        };
        let d = self.dst.intern_type(copied);
        if let Some(slot) = self.types.get_mut(t.index()) {
            *slot = Some(d);
        }
        d
    }

    /// Copy an attribute (aliases are resolved to their definitions).
    pub fn attr(&mut self, a: AttrId) -> AttrId {
        if self.identity {
            return a;
        }
        let copied = match self.src.attr(a).clone() {
            Attribute::Integer { text, ty } => Attribute::Integer {
                text,
                ty: ty.map(|t| self.ty(t)),
            },
            Attribute::Float { text, ty } => Attribute::Float {
                text,
                ty: ty.map(|t| self.ty(t)),
            },
            Attribute::String { escaped, ty } => Attribute::String {
                escaped,
                ty: ty.map(|t| self.ty(t)),
            },
            Attribute::Type(t) => Attribute::Type(self.ty(t)),
            Attribute::Array(es) => {
                Attribute::Array(es.into_iter().map(|e| self.attr(e)).collect())
            }
            Attribute::DenseArray { elem, data } => Attribute::DenseArray {
                elem: self.ty(elem),
                data,
            },
            Attribute::Dict(entries) => Attribute::Dict(self.named_attrs(&entries)),
            Attribute::SymbolRef(parts) => {
                let mut out: Vec<Sym> = Vec::with_capacity(parts.len());
                for (i, p) in parts.iter().enumerate() {
                    let text = self.src.str(*p);
                    let renamed = if i == 0 {
                        self.symbols.get(text).cloned()
                    } else {
                        None
                    };
                    out.push(match renamed {
                        Some(r) => self.dst.sym(&r),
                        None => self.dst.sym(text),
                    });
                }
                Attribute::SymbolRef(out)
            }
            Attribute::Dense { body, ty } => Attribute::Dense {
                body,
                ty: self.ty(ty),
            },
            Attribute::DenseResource { handle, ty } => Attribute::DenseResource {
                handle,
                ty: self.ty(ty),
            },
            Attribute::Location(l) => Attribute::Location(self.loc(l)),
            Attribute::Alias(name) => match self.attr_aliases.get(&name).copied() {
                Some(def) => return self.attr(def),
                None => Attribute::Alias(self.sym(name)),
            },
            Attribute::Opaque(text) => Attribute::Opaque(self.rename_in_text(&text).into()),
            other => other,
        };
        self.dst.add_attr(copied)
    }

    /// Copy a list of named attributes.
    pub fn named_attrs<C: FromIterator<NamedAttr>>(&mut self, list: &[NamedAttr]) -> C {
        list.iter()
            .map(|e| NamedAttr {
                name: self.sym(e.name),
                value: self.attr(e.value),
            })
            .collect()
    }

    /// Apply symbol renames to `@name` mentions in verbatim text (dialect
    /// attributes such as `#sdy.sharding<@mesh, ...>`).
    pub fn rename_in_text(&self, text: &str) -> String {
        if self.symbols.is_empty() || !text.contains('@') {
            return text.to_string();
        }
        let mut out = String::with_capacity(text.len());
        let mut rest = text;
        while let Some(at) = rest.find('@') {
            out.push_str(&rest[..at]);
            let after = &rest[at + 1..];
            let end = after
                .find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '$' | '.' | '-')))
                .unwrap_or(after.len());
            let name = &after[..end];
            out.push('@');
            match self.symbols.get(name) {
                Some(r) => out.push_str(r),
                None => out.push_str(name),
            }
            rest = &after[end..];
        }
        out.push_str(rest);
        out
    }

    /// Copy a location (aliases are resolved to their definitions).
    pub fn loc(&mut self, l: LocId) -> LocId {
        if self.identity {
            return l;
        }
        let copied = match self.src.loc(l).clone() {
            Location::Name { name, child } => Location::Name {
                name,
                child: child.map(|c| self.loc(c)),
            },
            Location::CallSite { callee, caller } => Location::CallSite {
                callee: self.loc(callee),
                caller: self.loc(caller),
            },
            Location::Fused { metadata, locs } => Location::Fused {
                metadata: metadata.map(|m| self.attr(m)),
                locs: locs.into_iter().map(|c| self.loc(c)).collect(),
            },
            Location::Alias(name) => match self.loc_aliases.get(&name).copied() {
                Some(def) if def != l => return self.loc(def),
                _ => Location::Unknown,
            },
            other => other,
        };
        self.dst.add_loc(copied)
    }

    /// Copy `op` (with its regions). Its operands must already be mapped
    /// (defined earlier in the copy, or pre-seeded in [`Cloner::values`]).
    pub fn op(&mut self, op: OpId) -> OpId {
        if self.identity {
            self.rebind_operands(op);
            return op;
        }
        let src = self.src;
        let o = src.op(op);
        let name = self.sym(o.name);
        let new = self.dst.add_op(name);
        let operands: SmallVec<[ValueId; 3]> = o.operands.iter().map(|v| self.value(*v)).collect();
        self.dst.op_mut(new).operands = operands;
        let props = self.named_attrs(&o.props);
        let attrs = self.named_attrs(&o.attrs);
        let loc = o.loc.map(|l| self.loc(l));
        {
            let d = self.dst.op_mut(new);
            d.props = props;
            d.attrs = attrs;
            d.loc = loc;
        }
        for &r in &o.results {
            let ty = self.ty(src.value_type(r));
            let hint = src.value(r).name.map(|s| self.sym(s));
            let nv = self.dst.add_result(new, ty, hint);
            self.bind(r, nv);
        }
        for &r in &o.regions {
            self.region(r, new);
        }
        new
    }

    /// The destination value for source value `v`; unmapped values (which
    /// only malformed IR has) become fresh placeholders of the same type.
    pub fn value(&mut self, v: ValueId) -> ValueId {
        if self.identity {
            return self.values.get(v.index()).copied().flatten().unwrap_or(v);
        }
        if let Some(Some(d)) = self.values.get(v.index()) {
            return *d;
        }
        let ty = self.ty(self.src.value_type(v));
        let d = self.dst.add_value(ty, super::ValueDef::Pending, None);
        self.bind(v, d);
        d
    }

    /// Copy region `r` onto `new_op`.
    pub fn region(&mut self, r: RegionId, new_op: OpId) -> RegionId {
        let nr = self.dst.add_region(new_op);
        let blocks = self.src.region(r).blocks.clone();
        // Create all blocks first so successors can refer forward.
        let mut map: FxHashMap<BlockId, BlockId> = FxHashMap::default();
        for &b in &blocks {
            let nb = self.dst.add_block();
            self.dst.push_block(nr, nb);
            map.insert(b, nb);
            for &a in &self.src.block(b).args.clone() {
                let ty = self.ty(self.src.value_type(a));
                let hint = self.src.value(a).name.map(|s| self.sym(s));
                let na = self.dst.add_block_arg(nb, ty, hint);
                let loc = self.src.value(a).loc.map(|l| self.loc(l));
                self.dst.values[na.index()].loc = loc;
                self.bind(a, na);
            }
        }
        for &b in &blocks {
            let nb = map[&b];
            for &child in &self.src.block(b).ops.clone() {
                let nc = self.op(child);
                let succ: SmallVec<[BlockId; 1]> = self
                    .src
                    .op(child)
                    .successors
                    .iter()
                    .map(|s| map.get(s).copied().unwrap_or(*s))
                    .collect();
                self.dst.op_mut(nc).successors = succ;
                self.dst.push_op(nb, nc);
            }
        }
        nr
    }
}

/// Deep copy of `op` inside the same module (operands defined outside the
/// copy keep pointing at the originals).
pub fn copy_op_within(m: &mut Module, op: OpId, map: &mut FxHashMap<ValueId, ValueId>) -> OpId {
    let src = m.op(op).clone();
    let new = m.add_op(src.name);
    {
        let o = m.op_mut(new);
        o.props = src.props.clone();
        o.attrs = src.attrs.clone();
        o.loc = src.loc;
        o.operands = src
            .operands
            .iter()
            .map(|v| *map.get(v).unwrap_or(v))
            .collect();
    }
    for &r in &src.results {
        let (ty, hint) = (m.value_type(r), m.value(r).name);
        let nv = m.add_result(new, ty, hint);
        map.insert(r, nv);
    }
    for &r in &src.regions {
        copy_region_within(m, r, new, map);
    }
    new
}

fn copy_region_within(
    m: &mut Module,
    r: RegionId,
    new_op: OpId,
    map: &mut FxHashMap<ValueId, ValueId>,
) {
    let nr = m.add_region(new_op);
    let blocks = m.region(r).blocks.clone();
    let mut bmap: FxHashMap<BlockId, BlockId> = FxHashMap::default();
    for &b in &blocks {
        let nb = m.add_block();
        m.push_block(nr, nb);
        bmap.insert(b, nb);
        m.blocks[nb.index()].label = m.block(b).label;
        for a in m.block(b).args.clone() {
            let (ty, hint, loc) = (m.value_type(a), m.value(a).name, m.value(a).loc);
            let na = m.add_block_arg(nb, ty, hint);
            m.values[na.index()].loc = loc;
            map.insert(a, na);
        }
    }
    for &b in &blocks {
        let nb = bmap[&b];
        for child in m.block(b).ops.clone() {
            let nc = copy_op_within(m, child, map);
            let succ = m
                .op(child)
                .successors
                .iter()
                .map(|s| *bmap.get(s).unwrap_or(s))
                .collect();
            m.op_mut(nc).successors = succ;
            m.push_op(nb, nc);
        }
    }
    // Operands used before their definition inside the copy (graph regions)
    // are remapped once everything exists.
    for &b in &blocks {
        for &nc in &m.block(bmap[&b]).ops.clone() {
            let ops: Vec<ValueId> = m
                .op(nc)
                .operands
                .iter()
                .map(|v| *map.get(v).unwrap_or(v))
                .collect();
            m.op_mut(nc).operands = ops.into_iter().collect();
        }
    }
}
