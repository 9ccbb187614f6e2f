//! [`Module`]: the arenas that own every op, value, block, region, type,
//! attribute and location of one parsed file, plus its top-level items.

use super::{AttrId, Attribute, BlockId, LocId, Location, OpId, RegionId, Type, TypeId, ValueId};
use super::{FloatKind, NamedAttr, Signedness};
use crate::intern::{Interner, Sym};
use rustc_hash::FxHashMap;
use smallvec::SmallVec;

/// Where an SSA value comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ValueDef {
    /// Result `index` of `op`.
    OpResult {
        /// The defining op.
        op: OpId,
        /// Result number.
        index: u32,
    },
    /// Argument `index` of `block`.
    BlockArg {
        /// The owning block.
        block: BlockId,
        /// Argument number.
        index: u32,
    },
    /// Used before its definition while parsing; never survives a
    /// successful parse.
    Pending,
}

/// An SSA value.
#[derive(Clone, Debug)]
pub struct ValueData {
    /// Its type.
    pub ty: TypeId,
    /// Its definition.
    pub def: ValueDef,
    /// The name it was written with (without `%`, without `#N`), if any;
    /// the printer uses it as a hint.
    pub name: Option<Sym>,
    /// Location of a block argument, if written.
    pub loc: Option<LocId>,
}

/// An operation.
#[derive(Debug)]
pub struct OpData {
    /// Full op name, e.g. `stablehlo.add`.
    pub name: Sym,
    /// Operands.
    pub operands: SmallVec<[ValueId; 3]>,
    /// Results.
    pub results: SmallVec<[ValueId; 1]>,
    /// Inherent attributes (printed as `<{...}>` in generic form).
    pub props: SmallVec<[NamedAttr; 2]>,
    /// Discardable attributes (printed as `{...}`).
    pub attrs: SmallVec<[NamedAttr; 2]>,
    /// Attached regions.
    pub regions: SmallVec<[RegionId; 1]>,
    /// Successor blocks.
    pub successors: SmallVec<[BlockId; 1]>,
    /// Location, if written.
    pub loc: Option<LocId>,
    /// The block containing this op (None for top-level ops).
    pub parent: Option<BlockId>,
}

impl Clone for OpData {
    /// Field-wise copy with `from_slice` (a memcpy for these `Copy`
    /// elements; the derived clone goes element by element, which made
    /// bulk module copies in the stitcher twice as slow).
    fn clone(&self) -> Self {
        OpData {
            name: self.name,
            operands: SmallVec::from_slice(&self.operands),
            results: SmallVec::from_slice(&self.results),
            props: SmallVec::from_slice(&self.props),
            attrs: SmallVec::from_slice(&self.attrs),
            regions: SmallVec::from_slice(&self.regions),
            successors: SmallVec::from_slice(&self.successors),
            loc: self.loc,
            parent: self.parent,
        }
    }
}

/// A basic block.
#[derive(Clone, Debug, Default)]
pub struct BlockData {
    /// The label it was written with (without `^`), if any.
    pub label: Option<Sym>,
    /// Block arguments.
    pub args: Vec<ValueId>,
    /// Ops in order.
    pub ops: Vec<OpId>,
    /// The owning region.
    pub parent: Option<RegionId>,
}

/// A region: a list of blocks owned by an op.
#[derive(Clone, Debug, Default)]
pub struct RegionData {
    /// Blocks in order; the first is the entry block.
    pub blocks: Vec<BlockId>,
    /// The owning op.
    pub parent: Option<OpId>,
}

/// The value of a top-level alias definition.
#[derive(Clone, Debug)]
pub enum AliasValue {
    /// `#name = attr`.
    Attr(AttrId),
    /// `#loc = loc(...)`.
    Loc(LocId),
    /// `!name = type`.
    Type(TypeId),
}

/// One top-level item of a file, in source order.
#[derive(Clone, Debug)]
pub enum TopItem {
    /// An operation (normally `builtin.module`).
    Op(OpId),
    /// `#name = ...` or `!name = ...`; the name without its sigil.
    Alias {
        /// Alias name.
        name: Sym,
        /// What it stands for.
        value: AliasValue,
    },
    /// A `{-# ... #-}` file metadata block, verbatim (without the braces).
    Metadata(Box<str>),
}

/// One parsed file: the arenas and the top-level items.
#[derive(Clone, Debug, Default)]
pub struct Module {
    /// All strings.
    pub strings: Interner,
    /// Operation arena.
    pub ops: Vec<OpData>,
    /// Value arena.
    pub values: Vec<ValueData>,
    /// Block arena.
    pub blocks: Vec<BlockData>,
    /// Region arena.
    pub regions: Vec<RegionData>,
    /// Attribute arena.
    pub attrs: Vec<Attribute>,
    /// Location arena.
    pub locs: Vec<Location>,
    /// Interned types.
    pub types: Vec<Type>,
    type_ids: FxHashMap<Type, TypeId>,
    /// Top-level items in order.
    pub top: Vec<TopItem>,
}

impl Module {
    /// An empty module.
    pub fn new() -> Self {
        Self::default()
    }

    /// Reserve room for about `ops` more operations (and their values
    /// and attributes).
    pub fn reserve(&mut self, ops: usize) {
        self.ops.reserve(ops);
        self.values.reserve(ops + ops / 4);
        self.attrs.reserve(ops / 2);
    }

    /// A copy of `src` to build a new module on: all of `src`'s arenas
    /// (so its ids stay valid here) but none of its top-level items except
    /// alias definitions and metadata. Used by the stitcher to take over
    /// the largest segment with a bulk copy.
    pub fn adopt(src: &Module) -> Module {
        Self::adopt_with_room(src, 0)
    }

    /// [`Module::adopt`], with room for about `ops` more operations (and
    /// their values and attributes) reserved in the same allocation, so that
    /// growing the copy later does not move the arenas again.
    pub fn adopt_with_room(src: &Module, ops: usize) -> Module {
        fn with_room<T: Clone>(v: &[T], extra: usize) -> Vec<T> {
            let mut out = Vec::with_capacity(v.len() + extra);
            out.extend_from_slice(v);
            out
        }
        Module {
            strings: src.strings.clone(),
            ops: with_room(&src.ops, ops),
            values: with_room(&src.values, ops + ops / 4),
            blocks: src.blocks.clone(),
            regions: src.regions.clone(),
            attrs: with_room(&src.attrs, ops / 2),
            locs: src.locs.clone(),
            types: src.types.clone(),
            type_ids: src.type_ids.clone(),
            top: src
                .top
                .iter()
                .filter(|t| !matches!(t, TopItem::Op(_)))
                .cloned()
                .collect(),
        }
    }

    // ----- strings -----

    /// Intern a string.
    pub fn sym(&mut self, s: &str) -> Sym {
        self.strings.intern(s)
    }

    /// The string of a [`Sym`].
    pub fn str(&self, s: Sym) -> &str {
        self.strings.resolve(s)
    }

    // ----- types -----

    /// Intern a type.
    pub fn intern_type(&mut self, ty: Type) -> TypeId {
        if let Some(&id) = self.type_ids.get(&ty) {
            return id;
        }
        let id = TypeId(self.types.len() as u32);
        self.types.push(ty.clone());
        self.type_ids.insert(ty, id);
        id
    }

    /// The type of an id.
    pub fn ty(&self, id: TypeId) -> &Type {
        &self.types[id.index()]
    }

    /// Convenience: intern a float type.
    pub fn float_type(&mut self, kind: FloatKind) -> TypeId {
        self.intern_type(Type::Float(kind))
    }

    /// Convenience: intern a signless integer type.
    pub fn int_type(&mut self, width: u32) -> TypeId {
        self.intern_type(Type::Integer {
            width,
            signedness: Signedness::Signless,
        })
    }

    // ----- attributes and locations -----

    /// Add an attribute to the arena.
    pub fn add_attr(&mut self, a: Attribute) -> AttrId {
        let id = AttrId(self.attrs.len() as u32);
        self.attrs.push(a);
        id
    }

    /// The attribute of an id.
    pub fn attr(&self, id: AttrId) -> &Attribute {
        &self.attrs[id.index()]
    }

    /// Add a location to the arena.
    pub fn add_loc(&mut self, l: Location) -> LocId {
        let id = LocId(self.locs.len() as u32);
        self.locs.push(l);
        id
    }

    /// The location of an id.
    pub fn loc(&self, id: LocId) -> &Location {
        &self.locs[id.index()]
    }

    // ----- values, ops, blocks, regions -----

    /// Add a value.
    pub fn add_value(&mut self, ty: TypeId, def: ValueDef, name: Option<Sym>) -> ValueId {
        let id = ValueId(self.values.len() as u32);
        self.values.push(ValueData {
            ty,
            def,
            name,
            loc: None,
        });
        id
    }

    /// The value of an id.
    pub fn value(&self, id: ValueId) -> &ValueData {
        &self.values[id.index()]
    }

    /// The type of a value.
    pub fn value_type(&self, id: ValueId) -> TypeId {
        self.values[id.index()].ty
    }

    /// Add an op with no operands, results or attributes.
    pub fn add_op(&mut self, name: Sym) -> OpId {
        let id = OpId(self.ops.len() as u32);
        self.ops.push(OpData {
            name,
            operands: SmallVec::new(),
            results: SmallVec::new(),
            props: SmallVec::new(),
            attrs: SmallVec::new(),
            regions: SmallVec::new(),
            successors: SmallVec::new(),
            loc: None,
            parent: None,
        });
        id
    }

    /// Add an op named `name` (interned) with nothing attached yet.
    pub fn add_op_named(&mut self, name: &str) -> OpId {
        let sym = self.sym(name);
        self.add_op(sym)
    }

    /// The op of an id.
    pub fn op(&self, id: OpId) -> &OpData {
        &self.ops[id.index()]
    }

    /// Mutable access to an op.
    pub fn op_mut(&mut self, id: OpId) -> &mut OpData {
        &mut self.ops[id.index()]
    }

    /// The name of an op.
    pub fn op_name(&self, id: OpId) -> &str {
        self.str(self.ops[id.index()].name)
    }

    /// Append a result of type `ty` to `op`.
    pub fn add_result(&mut self, op: OpId, ty: TypeId, name: Option<Sym>) -> ValueId {
        let index = self.ops[op.index()].results.len() as u32;
        let v = self.add_value(ty, ValueDef::OpResult { op, index }, name);
        self.ops[op.index()].results.push(v);
        v
    }

    /// Add an empty block.
    pub fn add_block(&mut self) -> BlockId {
        let id = BlockId(self.blocks.len() as u32);
        self.blocks.push(BlockData::default());
        id
    }

    /// The block of an id.
    pub fn block(&self, id: BlockId) -> &BlockData {
        &self.blocks[id.index()]
    }

    /// Append an argument of type `ty` to `block`.
    pub fn add_block_arg(&mut self, block: BlockId, ty: TypeId, name: Option<Sym>) -> ValueId {
        let index = self.blocks[block.index()].args.len() as u32;
        let v = self.add_value(ty, ValueDef::BlockArg { block, index }, name);
        self.blocks[block.index()].args.push(v);
        v
    }

    /// Append `op` to `block`.
    pub fn push_op(&mut self, block: BlockId, op: OpId) {
        self.blocks[block.index()].ops.push(op);
        self.ops[op.index()].parent = Some(block);
    }

    /// Add an empty region owned by `op`.
    pub fn add_region(&mut self, op: OpId) -> RegionId {
        let id = RegionId(self.regions.len() as u32);
        self.regions.push(RegionData {
            blocks: Vec::new(),
            parent: Some(op),
        });
        self.ops[op.index()].regions.push(id);
        id
    }

    /// The region of an id.
    pub fn region(&self, id: RegionId) -> &RegionData {
        &self.regions[id.index()]
    }

    /// Append `block` to `region`.
    pub fn push_block(&mut self, region: RegionId, block: BlockId) {
        self.regions[region.index()].blocks.push(block);
        self.blocks[block.index()].parent = Some(region);
    }

    // ----- attribute lookup on ops -----

    /// Find an attribute of `op` by name, inherent first, then discardable.
    pub fn op_attr(&self, op: OpId, name: &str) -> Option<AttrId> {
        let sym = self.strings.get(name)?;
        let o = &self.ops[op.index()];
        o.props
            .iter()
            .chain(o.attrs.iter())
            .find(|a| a.name == sym)
            .map(|a| a.value)
    }

    /// Replace attribute `name` of `op` (inherent first, then discardable),
    /// or add it as an inherent one.
    pub fn set_op_attr(&mut self, op: OpId, name: &str, value: AttrId) {
        let sym = self.sym(name);
        let o = &mut self.ops[op.index()];
        if let Some(na) = o.props.iter_mut().find(|a| a.name == sym) {
            na.value = value;
        } else if let Some(na) = o.attrs.iter_mut().find(|a| a.name == sym) {
            na.value = value;
        } else {
            o.props.push(NamedAttr { name: sym, value });
        }
    }

    /// The top-level ops of the file.
    pub fn top_ops(&self) -> impl Iterator<Item = OpId> + '_ {
        self.top.iter().filter_map(|t| match t {
            TopItem::Op(o) => Some(*o),
            _ => None,
        })
    }

    /// The `func.func` ops at the top level or directly inside a top-level
    /// op (a `builtin.module`), in order: where functions live. No deep walk.
    pub fn top_level_funcs(&self) -> Vec<OpId> {
        let mut out = Vec::new();
        for top in self.top_ops() {
            if self.op_name(top) == "func.func" {
                out.push(top);
                continue;
            }
            for &r in &self.op(top).regions {
                for &b in &self.region(r).blocks {
                    out.extend(
                        self.block(b)
                            .ops
                            .iter()
                            .copied()
                            .filter(|&o| self.op_name(o) == "func.func"),
                    );
                }
            }
        }
        out
    }

    /// Walk `op` and everything nested in it, pre-order.
    pub fn walk(&self, op: OpId, f: &mut dyn FnMut(OpId)) {
        let mut stack = vec![op];
        while let Some(o) = stack.pop() {
            f(o);
            for &r in self.ops[o.index()].regions.iter().rev() {
                for &b in self.regions[r.index()].blocks.iter().rev() {
                    for &child in self.blocks[b.index()].ops.iter().rev() {
                        stack.push(child);
                    }
                }
            }
        }
    }
}
