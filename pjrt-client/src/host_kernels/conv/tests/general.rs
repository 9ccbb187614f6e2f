//! The general kernel against a naive convolution: config round trip,
//! shape errors, and the 1x1 fast path.

use super::*;

#[test]
fn config_round_trips_and_bad_configs_are_errors() {
    let c = cfg2(2, 1, [2, 1], [1, -1, 0, 2]);
    assert_eq!(ConvConfig::decode(&c.encode()).unwrap(), c);
    let mut v = c.encode();
    v[0] = 99;
    assert!(ConvConfig::decode(&v).is_err());
    let v = c.encode();
    assert!(ConvConfig::decode(&v[..v.len() - 1]).is_err());
    let mut v = c.encode();
    v[3] = 2; // both group counts above 1
    assert!(ConvConfig::decode(&v).is_err());
    let mut v = c.encode();
    v[5] = 0; // repeated lhs dim
    assert!(ConvConfig::decode(&v).is_err());
}

#[test]
fn matches_a_naive_convolution() {
    let _board = crate::host_kernels::donation::test_serial();
    // dilations, reversal, negative padding, strides
    check(
        &cfg2(1, 1, [2, 1], [1, -1, 0, 2]),
        [2, 3, 7, 6],
        [4, 3, 3, 2],
    );
    // feature groups
    check(
        &cfg2(2, 1, [1, 2], [2, 2, 1, 1]),
        [2, 4, 6, 7],
        [6, 2, 2, 3],
    );
    // depthwise (one input feature per group)
    check(
        &cfg2(3, 1, [1, 1], [1, 1, 1, 1]),
        [2, 3, 5, 5],
        [6, 1, 3, 3],
    );
    // batch groups
    check(
        &cfg2(1, 2, [1, 1], [0, 0, 1, 0]),
        [4, 3, 5, 5],
        [4, 3, 2, 2],
    );
}

#[test]
fn mismatched_shapes_are_errors() {
    let c = cfg2(1, 1, [1, 1], [0, 0, 0, 0]);
    assert!(ConvPlan::new(&c, &[2, 3, 5, 5], &[4, 3, 2, 2], &[2, 4, 9, 9]).is_err());
    assert!(ConvPlan::new(&c, &[2, 3, 5, 5], &[4, 2, 2, 2], &[2, 4, 3, 9]).is_err());
    assert!(ConvPlan::new(&c, &[2, 3, 5], &[4, 3, 2], &[2, 4, 3]).is_err());
}

/// 1x1 stride-1 convolutions run as one product per batch entry, the lhs
/// read in place (NCHW with groups, NHWC); a strided 1x1 does not.
#[test]
fn pointwise_convolutions_skip_the_patch_matrix() {
    let _board = crate::host_kernels::donation::test_serial();
    let f = [false, false];
    let c = dw_cfg(2, 1, [1, 1], [0, 0], [0, 0], [1, 1], [1, 1], f);
    let plan = ConvPlan::new(&c, &[3, 4, 5, 6], &[6, 2, 1, 1], &[3, 6, 5, 6]).unwrap();
    assert_eq!(plan.direct(), Some((30, 1, 1)));
    check(&c, [3, 4, 5, 6], [6, 2, 1, 1]);
    let c = dw_cfg(1, 1, [1, 1], [0, 0], [0, 0], [1, 1], [1, 1], f);
    check(&c, [2, 7, 9, 4], [5, 7, 1, 1]);
    check(&c, [1, 3, 1, 1], [4, 3, 1, 1]);
    let s2 = dw_cfg(1, 1, [2, 2], [0, 0], [0, 0], [1, 1], [1, 1], f);
    let plan = ConvPlan::new(&s2, &[2, 4, 6, 6], &[8, 4, 1, 1], &[2, 8, 3, 3]).unwrap();
    assert_eq!(plan.direct(), None);
    check(&s2, [2, 4, 6, 6], [8, 4, 1, 1]);
    let nhwc = conv(
        [0, 3, 1, 2],
        [2, 3, 0, 1],
        [0, 3, 1, 2],
        1,
        (0, 0),
        (1, 1),
        false,
    );
    let plan = ConvPlan::new(&nhwc, &[2, 5, 7, 12], &[1, 1, 12, 20], &[2, 5, 7, 20]).unwrap();
    assert_eq!(plan.direct(), Some((35, 12, 20)));
    check_f32(&nhwc, &[2, 5, 7, 12], &[1, 1, 12, 20], &[2, 5, 7, 20], 1);
    // Enough work to be cut into chunks: 8 entries of 56x56 positions.
    check_f32(&c, &[8, 16, 56, 56], &[24, 16, 1, 1], &[8, 24, 56, 56], 3);
}
