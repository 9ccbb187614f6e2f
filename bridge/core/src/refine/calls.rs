//! `func.call` and `stablehlo.composite` specialisation. A callee (the
//! `@callee` of a call, the `decomposition` of a composite: StableHLO's
//! refinement treats a composite's decomposition like a called function) is
//! refined to the op's operand types, with its constant operands (dimension
//! values, as `jax.export` passes them to its inner functions) known inside
//! it. A function named by one op is refined in place; otherwise each
//! distinct (operand types, constants) signature gets its own copy,
//! `@f_refined_N`, and identical sites share it. The op's results take the
//! refined function's result types.

use super::lit::Lit;
use super::signature::{entry_args, update_function_type};
use super::span::refinement_error;
use super::Refiner;
use crate::ir::{Attribute, Module, NamedAttr, OpId, Type, TypeId, ValueId};
use crate::Result;
use rustc_hash::FxHashMap;

/// What a specialisation depends on.
pub(crate) type SpecKey = (String, Vec<TypeId>, Vec<Option<Lit>>);

/// The attribute naming the function an op calls: `callee` for
/// `func.call`, `decomposition` for `stablehlo.composite`.
pub(crate) fn callee_key(name: &str) -> Option<&'static str> {
    match name {
        "func.call" => Some("callee"),
        "stablehlo.composite" => Some("decomposition"),
        _ => None,
    }
}

/// The function a `func.call` or `stablehlo.composite` names.
pub(crate) fn callee_name(m: &Module, op: OpId) -> Option<String> {
    let key = callee_key(m.op_name(op))?;
    match m.attr(m.op_attr(op, key)?) {
        Attribute::SymbolRef(path) if path.len() == 1 => {
            Some(m.str(path[0]).trim_matches('"').to_string())
        }
        _ => None,
    }
}

impl Refiner<'_> {
    /// Refine the function `call` names (a `func.call`'s callee, a
    /// composite's decomposition) for its operands, then `call`'s results.
    pub(crate) fn refine_call(&mut self, call: OpId) -> Result<()> {
        if let Some(e) = self.too_deep(call) {
            return Err(e);
        }
        let attr_key = callee_key(self.m.op_name(call)).unwrap_or("callee");
        let name = callee_name(self.m, call).ok_or_else(|| {
            refinement_error(self.m, call, &format!("op without a plain @{attr_key}"))
        })?;
        let &callee = self
            .funcs
            .get(&name)
            .ok_or_else(|| refinement_error(self.m, call, &format!("no function @{name}")))?;
        let operands = self.m.op(call).operands.to_vec();
        let tys: Vec<TypeId> = operands.iter().map(|&v| self.m.value_type(v)).collect();
        let consts: Vec<Option<Lit>> = operands.iter().map(|v| self.lits.get(v).cloned()).collect();
        let key: SpecKey = (name.clone(), tys.clone(), consts.clone());
        let target = match self.specs.get(&key) {
            Some(t) => t.clone(),
            None => {
                let single = self.call_sites.get(&name).copied().unwrap_or(0) <= 1;
                let (target_name, f) = if single && !self.taken.contains(&name) {
                    (name.clone(), callee)
                } else {
                    let new_name = self.fresh_name(&name);
                    let f = clone_func(self.m, callee, &new_name).ok_or_else(|| {
                        refinement_error(self.m, call, &format!("cannot copy @{name}"))
                    })?;
                    self.funcs.insert(new_name.clone(), f);
                    (new_name, f)
                };
                self.taken.insert(target_name.clone());
                self.specs.insert(key, target_name.clone());
                self.specialise(call, f, &tys, &consts)?;
                target_name
            }
        };
        let &f = self
            .funcs
            .get(&target)
            .expect("specialised function is registered");
        if target != name {
            let sym = self.m.sym(&target);
            let value = self.m.add_attr(Attribute::SymbolRef(vec![sym]));
            let key = self.m.sym(attr_key);
            let o = self.m.op_mut(call);
            for a in o.props.iter_mut().chain(o.attrs.iter_mut()) {
                if a.name == key {
                    a.value = value;
                }
            }
        }
        let results = match self.m.op_attr(f, "function_type").map(|a| self.m.attr(a)) {
            Some(Attribute::Type(t)) => match self.m.ty(*t) {
                Type::Function { results, .. } => results.clone(),
                _ => Vec::new(),
            },
            _ => Vec::new(),
        };
        let values = self.m.op(call).results.to_vec();
        if values.len() != results.len() {
            return Err(refinement_error(
                self.m,
                call,
                "call and callee disagree on result count",
            ));
        }
        let returned = return_operands(self.m, f);
        for (i, (v, t)) in values.into_iter().zip(results).enumerate() {
            if let Type::Tensor { dims, .. } = self.m.ty(t).clone() {
                self.set_dims(call, v, &dims)?;
            }
            // The specialisation is per constant operand, so a constant the
            // callee returns is the call's result.
            if let Some(l) = returned.get(i).and_then(|r| self.lits.get(r)).cloned() {
                self.lits.insert(v, l);
            }
        }
        Ok(())
    }

    /// Give `f`'s arguments the call's types and constants, and refine it.
    fn specialise(
        &mut self,
        call: OpId,
        f: OpId,
        tys: &[TypeId],
        consts: &[Option<Lit>],
    ) -> Result<()> {
        let args = entry_args(self.m, f)
            .ok_or_else(|| refinement_error(self.m, call, "callee has no body"))?;
        if args.len() != tys.len() {
            return Err(refinement_error(
                self.m,
                call,
                "call and callee disagree on argument count",
            ));
        }
        for ((&a, &t), c) in args.iter().zip(tys).zip(consts) {
            let old = self.m.value_type(a);
            if !compatible(self.m, old, t) {
                return Err(refinement_error(
                    self.m,
                    call,
                    &format!(
                        "operand type {} does not fit the callee's {}",
                        crate::print::type_to_string(self.m, t),
                        crate::print::type_to_string(self.m, old)
                    ),
                ));
            }
            self.m.values[a.index()].ty = t;
            if let Some(l) = c {
                self.lits.insert(a, l.clone());
            }
        }
        self.depth += 1;
        let r = self.refine_func_body(f);
        self.depth -= 1;
        r?;
        update_function_type(self.m, f);
        Ok(())
    }

    fn fresh_name(&self, base: &str) -> String {
        (0..)
            .map(|i| format!("{base}_refined_{i}"))
            .find(|n| !self.funcs.contains_key(n))
            .expect("some index is free")
    }
}

/// The operands of `f`'s `return` (single-block functions).
fn return_operands(m: &Module, f: OpId) -> Vec<ValueId> {
    let Some(&r) = m.op(f).regions.first() else {
        return Vec::new();
    };
    match m.region(r).blocks.as_slice() {
        [b] => match m.block(*b).ops.last() {
            Some(&ret) if m.op_name(ret) == "func.return" => m.op(ret).operands.to_vec(),
            _ => Vec::new(),
        },
        _ => Vec::new(),
    }
}

/// Same element type and rank, and equal wherever both are static.
fn compatible(m: &Module, a: TypeId, b: TypeId) -> bool {
    match (m.ty(a), m.ty(b)) {
        (
            Type::Tensor {
                dims: da, elem: ea, ..
            },
            Type::Tensor {
                dims: db, elem: eb, ..
            },
        ) => {
            ea == eb
                && da.len() == db.len()
                && da
                    .iter()
                    .zip(db)
                    .all(|(&x, &y)| x == crate::ir::DYNAMIC || y == crate::ir::DYNAMIC || x == y)
        }
        (Type::UnrankedTensor(ea), Type::Tensor { elem: eb, .. }) => ea == eb,
        _ => a == b,
    }
}

/// A copy of function `f` named `name`, placed right after it.
fn clone_func(m: &mut Module, f: OpId, name: &str) -> Option<OpId> {
    let mut map: FxHashMap<ValueId, ValueId> = FxHashMap::default();
    let new = crate::ir::copy_op_within(m, f, &mut map);
    let sym_name = m.sym("sym_name");
    let value = m.add_attr(Attribute::String {
        escaped: name.into(),
        ty: None,
    });
    let vis_key = m.sym("sym_visibility");
    let private = m.add_attr(Attribute::String {
        escaped: "private".into(),
        ty: None,
    });
    let o = m.op_mut(new);
    for a in o.props.iter_mut().chain(o.attrs.iter_mut()) {
        if a.name == sym_name {
            a.value = value;
        }
    }
    if let Some(a) = o.props.iter_mut().find(|a| a.name == vis_key) {
        a.value = private;
    } else {
        o.props.push(NamedAttr {
            name: vis_key,
            value: private,
        });
    }
    let parent = m.op(f).parent?;
    let pos = m.block(parent).ops.iter().position(|&o| o == f)?;
    m.blocks[parent.index()].ops.insert(pos + 1, new);
    m.op_mut(new).parent = Some(parent);
    Some(new)
}
