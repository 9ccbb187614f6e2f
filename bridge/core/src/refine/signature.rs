//! Signature specialisation: the public `@main`'s argument types take the
//! concrete shapes of a call, and any function's `function_type` is
//! rewritten from its (refined) entry-block arguments and `return`.

use super::span::refinement_error;
use crate::ir::{Attribute, Module, NamedAttr, OpId, Type, TypeId, DYNAMIC};
use crate::{Error, Result};

/// The public `func.func @main`, or the only public function.
pub fn find_main(m: &Module) -> Result<OpId> {
    let funcs = m.top_level_funcs();
    let name_of = |f: OpId| -> Option<&str> {
        match m.attr(m.op_attr(f, "sym_name")?) {
            Attribute::String { escaped, .. } => Some(escaped.as_str()),
            _ => None,
        }
    };
    let public = |f: OpId| match m.op_attr(f, "sym_visibility").map(|a| m.attr(a)) {
        Some(Attribute::String { escaped, .. }) => escaped.as_str() == "public",
        _ => true,
    };
    if let Some(&f) = funcs
        .iter()
        .find(|&&f| name_of(f) == Some("main") && public(f))
    {
        return Ok(f);
    }
    let publics: Vec<OpId> = funcs.iter().copied().filter(|&f| public(f)).collect();
    match publics.as_slice() {
        [f] => Ok(*f),
        _ => Err(Error::ShapeRefinement {
            at: "<module>".into(),
            message: format!(
                "no public @main function to specialise ({} public functions)",
                publics.len()
            ),
        }),
    }
}

/// The entry block's arguments of function `f`.
pub fn entry_args(m: &Module, f: OpId) -> Option<Vec<crate::ir::ValueId>> {
    let r = *m.op(f).regions.first()?;
    let b = *m.region(r).blocks.first()?;
    Some(m.block(b).args.clone())
}

/// A tensor type with `dims` and the element type of `like`, no encoding.
pub fn with_dims(m: &mut Module, like: TypeId, dims: &[i64]) -> Option<TypeId> {
    let elem = match m.ty(like) {
        Type::Tensor { elem, .. } | Type::UnrankedTensor(elem) => *elem,
        _ => return None,
    };
    Some(m.intern_type(Type::Tensor {
        dims: dims.iter().copied().collect(),
        elem,
        encoding: None,
    }))
}

/// Give `main`'s arguments the concrete `shapes`.
pub fn specialise_main(m: &mut Module, main: OpId, shapes: &[Vec<i64>]) -> Result<()> {
    let args = entry_args(m, main).ok_or_else(|| refinement_error(m, main, "@main has no body"))?;
    if args.len() != shapes.len() {
        return Err(refinement_error(
            m,
            main,
            &format!(
                "@main takes {} arguments but {} shapes were given",
                args.len(),
                shapes.len()
            ),
        ));
    }
    for (i, (&a, shape)) in args.iter().zip(shapes).enumerate() {
        let ty = m.value_type(a);
        if let Some(&bad) = shape.iter().find(|&&d| d < 0) {
            return Err(refinement_error(
                m,
                main,
                &format!("argument {i}: shape {shape:?} has a negative dimension {bad}"),
            ));
        }
        let new = match m.ty(ty).clone() {
            Type::Tensor { dims, .. } => {
                if dims.len() != shape.len() {
                    return Err(refinement_error(
                        m,
                        main,
                        &format!(
                            "argument {i}: rank {} shape {shape:?} given for {}",
                            shape.len(),
                            crate::print::type_to_string(m, ty)
                        ),
                    ));
                }
                for (k, (&d, &s)) in dims.iter().zip(shape).enumerate() {
                    if d != DYNAMIC && d != s {
                        return Err(refinement_error(
                            m,
                            main,
                            &format!(
                                "argument {i}: dimension {k} is {d} in {} but {s} was given",
                                crate::print::type_to_string(m, ty)
                            ),
                        ));
                    }
                }
                with_dims(m, ty, shape)
            }
            Type::UnrankedTensor(_) => with_dims(m, ty, shape),
            _ if shape.is_empty() => Some(ty),
            _ => {
                return Err(refinement_error(
                    m,
                    main,
                    &format!(
                        "argument {i}: {} is not a tensor, but shape {shape:?} was given",
                        crate::print::type_to_string(m, ty)
                    ),
                ))
            }
        };
        if let Some(new) = new {
            m.values[a.index()].ty = new;
        }
    }
    Ok(())
}

/// Rewrite `f`'s `function_type` from its entry-block arguments and the
/// operands of its first `return`.
pub fn update_function_type(m: &mut Module, f: OpId) {
    let Some(args) = entry_args(m, f) else {
        return;
    };
    let inputs: Vec<TypeId> = args.iter().map(|&a| m.value_type(a)).collect();
    let mut results: Option<Vec<TypeId>> = None;
    if let Some(&r) = m.op(f).regions.first() {
        for &b in &m.region(r).blocks {
            if let Some(&last) = m.block(b).ops.last() {
                if m.op_name(last) == "func.return" {
                    results = Some(
                        m.op(last)
                            .operands
                            .iter()
                            .map(|&v| m.value_type(v))
                            .collect(),
                    );
                    break;
                }
            }
        }
    }
    let results = match results {
        Some(r) => r,
        None => match m.op_attr(f, "function_type").map(|a| m.attr(a)) {
            Some(Attribute::Type(t)) => match m.ty(*t) {
                Type::Function { results, .. } => results.clone(),
                _ => return,
            },
            _ => return,
        },
    };
    let fty = m.intern_type(Type::Function { inputs, results });
    let value = m.add_attr(Attribute::Type(fty));
    let name = m.sym("function_type");
    let o = m.op_mut(f);
    if let Some(a) = o.props.iter_mut().find(|a| a.name == name) {
        a.value = value;
    } else {
        o.props.push(NamedAttr { name, value });
    }
}
