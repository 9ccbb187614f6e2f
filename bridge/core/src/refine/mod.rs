//! Shape refinement: specialise a module with dynamic (`?`) dimensions to
//! the concrete argument shapes of one call, and return a fully static
//! module — what `jax.export` does with jaxlib's `refine_polymorphic_shapes`
//! before compiling, done here on hlobridge's IR.
//!
//! The pass, one concept per file:
//! - [`signature`]: the public `@main`'s arguments take the given shapes;
//!   every refined function's `function_type` follows its body;
//! - [`infer`]: result shapes of the static ops from their operands;
//! - [`fold`] / [`lit`]: `get_dimension_size` and small integer shape
//!   arithmetic evaluated, folded ops turned into `stablehlo.constant`;
//! - [`dynamic_ops`]: `dynamic_broadcast_in_dim`, `dynamic_reshape`,
//!   `dynamic_iota`, `real_dynamic_slice`, `dynamic_pad`, `dynamic_gather`
//!   and `dynamic_conv` with constant shape operands become static ops;
//! - [`calls`]: `func.call` specialises its callee, and
//!   `stablehlo.composite` its `decomposition`, to the op's operand types
//!   and constant operands (a function called with different ones is
//!   cloned per signature); the op's results follow the function's;
//! - [`assertions`]: `custom_call @shape_assertion` checked and removed;
//! - [`clean`]: dead shape arithmetic and unreferenced private functions
//!   removed, then every type checked static.
//!
//! Ops are visited once, in order (functions are refined at their first
//! call), so refinement is linear in the module's size. Errors are
//! [`crate::Error::ShapeRefinement`] and [`crate::Error::ShapeAssertion`],
//! pointing at the op (`file:line:col` when the module has locations).

pub mod assertions;
mod attr_text;
mod calls;
pub mod clean;
pub mod dynamic_ops;
pub mod fold;
pub mod infer;
pub mod lit;
pub mod signature;
mod span;

use crate::ir::{Attribute, Module, OpId, Type, TypeId, ValueId, DYNAMIC};
use crate::{Error, Result};
use lit::Lit;
use rustc_hash::FxHashMap;
use span::refinement_error;

/// Refine module text to `arg_shapes` (one list of dims per `@main`
/// argument) and print the static module.
pub fn refine_text(text: &str, arg_shapes: &[Vec<i64>]) -> Result<String> {
    let mut m = crate::parse_module(text)?;
    refine_module(&mut m, arg_shapes)?;
    Ok(crate::print_module(&m, &crate::PrintOptions::default()))
}

/// Refine `m` in place to `arg_shapes`.
pub fn refine_module(m: &mut Module, arg_shapes: &[Vec<i64>]) -> Result<()> {
    let main = signature::find_main(m)?;
    signature::specialise_main(m, main, arg_shapes)?;
    let mut r = Refiner::new(m);
    r.refine_func_body(main)?;
    signature::update_function_type(r.m, main);
    clean::remove_dead(r.m, main);
    clean::check_static(r.m)
}

/// Maximum depth of nested calls being specialised.
const MAX_CALL_DEPTH: u32 = 64;

/// The pass's state over one module.
pub(crate) struct Refiner<'m> {
    pub(crate) m: &'m mut Module,
    /// Values known at refinement time.
    pub(crate) lits: FxHashMap<ValueId, Lit>,
    /// Function name → `func.func` op.
    pub(crate) funcs: FxHashMap<String, OpId>,
    /// How many `func.call`s name each function.
    pub(crate) call_sites: FxHashMap<String, usize>,
    /// (callee, operand types, constant operands) → specialised callee.
    pub(crate) specs: FxHashMap<calls::SpecKey, String>,
    /// Functions already specialised in place (not to be reused as is).
    pub(crate) taken: rustc_hash::FxHashSet<String>,
    pub(crate) depth: u32,
}

impl<'m> Refiner<'m> {
    fn new(m: &'m mut Module) -> Self {
        let mut funcs = FxHashMap::default();
        for f in m.top_level_funcs() {
            if let Some(Attribute::String { escaped, .. }) =
                m.op_attr(f, "sym_name").map(|a| m.attr(a))
            {
                funcs.insert(escaped.to_string(), f);
            }
        }
        let mut call_sites: FxHashMap<String, usize> = FxHashMap::default();
        for (i, o) in m.ops.iter().enumerate() {
            if calls::callee_key(m.str(o.name)).is_some() {
                if let Some(c) = calls::callee_name(m, OpId(i as u32)) {
                    *call_sites.entry(c).or_default() += 1;
                }
            }
        }
        Refiner {
            m,
            lits: FxHashMap::default(),
            funcs,
            call_sites,
            specs: FxHashMap::default(),
            taken: Default::default(),
            depth: 0,
        }
    }

    /// Refine every op of function `f`'s body, in order.
    pub(crate) fn refine_func_body(&mut self, f: OpId) -> Result<()> {
        let regions = self.m.op(f).regions.to_vec();
        for r in regions {
            self.refine_region(r)?;
        }
        Ok(())
    }

    fn refine_region(&mut self, r: crate::ir::RegionId) -> Result<()> {
        let blocks = self.m.region(r).blocks.clone();
        for b in blocks {
            let ops = self.m.block(b).ops.clone();
            let mut removed = Vec::new();
            for op in ops {
                if self.refine_op(op)? {
                    removed.push(op);
                }
            }
            if !removed.is_empty() {
                self.m.blocks[b.index()]
                    .ops
                    .retain(|o| !removed.contains(o));
            }
        }
        Ok(())
    }

    /// Refine one op; `true` when it is to be removed (a checked assertion).
    fn refine_op(&mut self, op: OpId) -> Result<bool> {
        let name = self.m.op_name(op).to_string();
        let name = name.as_str();
        if name.starts_with("shape.") {
            return Err(refinement_error(
                self.m,
                op,
                "shape dialect ops are not supported (refine a module as jax.export writes it)",
            ));
        }
        if assertions::is_assertion(self.m, op) {
            assertions::check(self.m, op, &self.lits)?;
            return Ok(true);
        }
        if calls::callee_key(name).is_some() {
            self.refine_call(op)?;
            return Ok(false);
        }
        let mut forced: Option<Vec<i64>> = None;
        if dynamic_ops::is_dynamic(name) {
            match dynamic_ops::rewrite(self.m, op, &self.lits) {
                Ok(d) => forced = d,
                Err(dynamic_ops::Unrefinable::NotConstant(_))
                    if name == "stablehlo.real_dynamic_slice"
                        && dynamic_ops::slice_with_constant_sizes(self.m, op, &self.lits)
                            .map(|d| forced = Some(d))
                            .is_some() => {}
                Err(dynamic_ops::Unrefinable::NotConstant(i)) => {
                    return Err(refinement_error(
                        self.m,
                        op,
                        &format!("shape operand #{i} does not fold to a constant"),
                    ))
                }
                Err(dynamic_ops::Unrefinable::Malformed(why)) => {
                    return Err(refinement_error(self.m, op, why))
                }
            }
        }
        self.refine_regions_of(op)?;
        if let Some((k, a, b)) = infer::operand_conflict(self.m, op) {
            return Err(refinement_error(
                self.m,
                op,
                &format!("operands disagree in dimension {k}: {a} vs {b}"),
            ));
        }
        let inferred = match forced {
            Some(d) => Some(vec![d]),
            None => infer::infer(self.m, op),
        };
        if let Some(all) = inferred {
            let results = self.m.op(op).results.to_vec();
            for (v, dims) in results.into_iter().zip(all) {
                self.set_dims(op, v, &dims)?;
            }
        }
        if let Some(l) = fold::fold(self.m, op, &self.lits) {
            let v = self.m.op(op).results[0];
            if self.m.op_name(op) != "stablehlo.constant" {
                self.materialize(op, &l);
            }
            self.lits.insert(v, l);
        }
        Ok(false)
    }

    /// Nested regions: `while` bodies take the loop's operand types,
    /// `if`/`case` results follow their branches; other regions (reduction
    /// bodies, comparators) are refined as they stand.
    fn refine_regions_of(&mut self, op: OpId) -> Result<()> {
        let regions = self.m.op(op).regions.to_vec();
        if regions.is_empty() {
            return Ok(());
        }
        let name = self.m.op_name(op).to_string();
        if name == "stablehlo.while" {
            let tys: Vec<TypeId> = self
                .m
                .op(op)
                .operands
                .iter()
                .map(|&v| self.m.value_type(v))
                .collect();
            for &r in &regions {
                if let Some(&b) = self.m.region(r).blocks.first() {
                    let args = self.m.block(b).args.clone();
                    for (a, t) in args.into_iter().zip(&tys) {
                        self.m.values[a.index()].ty = *t;
                    }
                }
            }
            let results = self.m.op(op).results.to_vec();
            for (v, t) in results.into_iter().zip(tys) {
                self.m.values[v.index()].ty = t;
            }
        }
        for &r in &regions {
            self.refine_region(r)?;
        }
        if name == "stablehlo.if" || name == "stablehlo.case" {
            let r = regions[0];
            let ret = self
                .m
                .region(r)
                .blocks
                .first()
                .and_then(|&b| self.m.block(b).ops.last().copied());
            if let Some(ret) = ret {
                let tys: Vec<TypeId> = self
                    .m
                    .op(ret)
                    .operands
                    .iter()
                    .map(|&v| self.m.value_type(v))
                    .collect();
                let results = self.m.op(op).results.to_vec();
                for (v, t) in results.into_iter().zip(tys) {
                    if let Type::Tensor { dims, .. } = self.m.ty(t).clone() {
                        self.set_dims(op, v, &dims)?;
                    }
                }
            }
        }
        Ok(())
    }

    /// Give value `v` (a result of `op`) the dims `inferred`, merged with
    /// what its type declares.
    pub(crate) fn set_dims(&mut self, op: OpId, v: ValueId, inferred: &[i64]) -> Result<()> {
        let ty = self.m.value_type(v);
        let declared = match self.m.ty(ty) {
            Type::Tensor { dims, .. } => dims.to_vec(),
            Type::UnrankedTensor(_) => vec![DYNAMIC; inferred.len()],
            _ => return Ok(()),
        };
        if declared.len() != inferred.len() {
            return Err(refinement_error(
                self.m,
                op,
                &format!(
                    "result has rank {} but its operands give rank {}",
                    declared.len(),
                    inferred.len()
                ),
            ));
        }
        let mut out = declared.clone();
        for (k, (d, &i)) in out.iter_mut().zip(inferred).enumerate() {
            if i == DYNAMIC {
                continue;
            }
            if i < 0 {
                return Err(refinement_error(
                    self.m,
                    op,
                    &format!("result dimension {k} would be negative ({i})"),
                ));
            }
            if *d != DYNAMIC && *d != i {
                return Err(refinement_error(
                    self.m,
                    op,
                    &format!(
                        "result dimension {k} is {} in {} but the operands give {i}",
                        *d,
                        crate::print::type_to_string(self.m, ty)
                    ),
                ));
            }
            *d = i;
        }
        let keeps_encoding = out.contains(&DYNAMIC);
        if out != declared || (!keeps_encoding && has_encoding(self.m, ty)) {
            if let Some(nt) = signature::with_dims(self.m, ty, &out) {
                self.m.values[v.index()].ty = nt;
            }
        }
        Ok(())
    }

    /// Turn `op` into `stablehlo.constant` holding `l`.
    fn materialize(&mut self, op: OpId, l: &Lit) {
        let ty = self.m.value_type(self.m.op(op).results[0]);
        let value = self.m.add_attr(Attribute::Dense {
            body: l.body().into(),
            ty,
        });
        let name = self.m.sym("stablehlo.constant");
        let key = self.m.sym("value");
        let o = self.m.op_mut(op);
        o.name = name;
        o.operands.clear();
        o.props.clear();
        o.attrs.clear();
        o.props.push(crate::ir::NamedAttr { name: key, value });
    }

    fn too_deep(&self, op: OpId) -> Option<Error> {
        (self.depth >= MAX_CALL_DEPTH)
            .then(|| refinement_error(self.m, op, "calls nest too deeply (recursive functions?)"))
    }
}

fn has_encoding(m: &Module, ty: TypeId) -> bool {
    matches!(
        m.ty(ty),
        Type::Tensor {
            encoding: Some(_),
            ..
        }
    )
}
