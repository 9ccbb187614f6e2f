//! The host GEMM custom calls: one target per operand transposition. The
//! operands are `(lhs, rhs)` with the batch dims leading; the transposition
//! says whether the contracting dim of the lhs comes first (`t`) or last
//! (`n`), and of the rhs last (`t`) or first (`n`). No config operand.

/// Every GEMM target: `(name, lhs transposed, rhs transposed)`.
pub const TARGETS: [(&str, bool, bool); 4] = [
    ("hlobridge_gemm_nn", false, false),
    ("hlobridge_gemm_tn", true, false),
    ("hlobridge_gemm_nt", false, true),
    ("hlobridge_gemm_tt", true, true),
];

/// The custom-call target for a product with the given operand
/// transpositions.
pub fn target_name(lhs_transposed: bool, rhs_transposed: bool) -> &'static str {
    match (lhs_transposed, rhs_transposed) {
        (false, false) => TARGETS[0].0,
        (true, false) => TARGETS[1].0,
        (false, true) => TARGETS[2].0,
        (true, true) => TARGETS[3].0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_table() {
        for (name, lt, rt) in TARGETS {
            assert_eq!(target_name(lt, rt), name);
        }
    }
}
