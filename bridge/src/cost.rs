//! Static work estimates of a module, for choosing compile options: how
//! much matrix-multiply work its `dot` / `dot_general` ops do.
//!
//! The estimate needs only the operand and result types: for
//! `lhs = B×M×K`, `rhs = B×K×N`, `result = B×M×N` the multiply-accumulate
//! count is `B·M·N·K = sqrt(|lhs|·|rhs|·|result| / B)`. Batch dimensions
//! are not read from the attribute, so a batched dot is over-estimated by
//! `sqrt(B)`; that is fine for a threshold. Dynamic dimensions count as 1.

use crate::ir::{Module, Type};

/// Matrix-multiply work of a module.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct DotWork {
    /// Number of `stablehlo.dot` / `stablehlo.dot_general` ops.
    pub dots: usize,
    /// Estimated multiply-accumulates of the largest one.
    pub max_macs: f64,
    /// Estimated multiply-accumulates of all of them together (each op
    /// counted once, loops not unrolled).
    pub total_macs: f64,
}

/// Estimates the dot work of every function in `module`.
pub fn dot_work(module: &Module) -> DotWork {
    let mut work = DotWork::default();
    for top in module.top_ops() {
        module.walk(top, &mut |op| {
            let name = module.op_name(op);
            if name != "stablehlo.dot_general" && name != "stablehlo.dot" {
                return;
            }
            let data = module.op(op);
            let (Some(&lhs), Some(&rhs), Some(&res)) =
                (data.operands.first(), data.operands.get(1), data.results.first())
            else {
                return;
            };
            let size = |v| elements(module.ty(module.value_type(v)));
            let macs = (size(lhs) * size(rhs) * size(res)).sqrt();
            work.dots += 1;
            work.total_macs += macs;
            work.max_macs = work.max_macs.max(macs);
        });
    }
    work
}

/// Element count of a ranked tensor type (dynamic dims as 1); 1 otherwise.
fn elements(ty: &Type) -> f64 {
    match ty {
        Type::Tensor { dims, .. } => dims.iter().map(|&d| d.max(1) as f64).product(),
        _ => 1.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse::parse_module;

    #[test]
    fn counts_matmuls_and_their_work() {
        let src = r#"
func.func @main(%a: tensor<64x256xf32>, %b: tensor<256x512xf32>, %c: tensor<512x8xf32>) -> tensor<64x8xf32> {
  %0 = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0] : (tensor<64x256xf32>, tensor<256x512xf32>) -> tensor<64x512xf32>
  %1 = stablehlo.dot %0, %c : (tensor<64x512xf32>, tensor<512x8xf32>) -> tensor<64x8xf32>
  return %1 : tensor<64x8xf32>
}
"#;
        let m = parse_module(src).unwrap();
        let w = dot_work(&m);
        assert_eq!(w.dots, 2);
        let big = 64.0 * 256.0 * 512.0;
        let small = 64.0 * 512.0 * 8.0;
        assert!((w.max_macs - big).abs() < 1e-6 * big, "{w:?}");
        assert!((w.total_macs - big - small).abs() < 1e-6 * big, "{w:?}");
    }

    #[test]
    fn finds_dots_nested_in_regions() {
        let src = r#"
func.func @main(%a: tensor<8x8xf32>, %n: tensor<i32>) -> tensor<8x8xf32> {
  %r:2 = stablehlo.while(%i = %n, %x = %a) : tensor<i32>, tensor<8x8xf32>
    cond {
      %c = stablehlo.constant dense<0> : tensor<i32>
      %p = stablehlo.compare GT, %i, %c : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %p : tensor<i1>
    } do {
      %y = stablehlo.dot_general %x, %x, contracting_dims = [1] x [0] : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
      stablehlo.return %i, %y : tensor<i32>, tensor<8x8xf32>
    }
  return %r#1 : tensor<8x8xf32>
}
"#;
        let m = parse_module(src).unwrap();
        let w = dot_work(&m);
        assert_eq!(w.dots, 1);
        assert!((w.max_macs - 512.0).abs() < 1e-9);
    }

    #[test]
    fn no_dots_no_work() {
        let m = parse_module("func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> {\n  return %a : tensor<4xf32>\n}\n").unwrap();
        assert_eq!(dot_work(&m), DotWork::default());
    }
}
