//! The depthwise kernel against a naive convolution: every form a
//! depthwise convolution and its gradients reach it in, channels-last, and
//! the weight gradient's element-outer loop order.

use super::*;

/// The forms a depthwise convolution and its gradients reach the kernel
/// in, each checked against the naive convolution through the dispatch
/// (which must pick the depthwise kernel) and the general kernel.
#[test]
fn depthwise_kernel_matches_a_naive_convolution() {
    let _board = crate::host_kernels::donation::test_serial();
    let f = [false, false];
    // (config, lhs dims, rhs dims [O, I, KH, KW], dot algorithm expected)
    let cases: Vec<(ConvConfig, [usize; 4], [usize; 4], bool)> = vec![
        // ConvNeXt's 7x7, padding 3, odd size; batch 1.
        (
            dw_cfg(5, 1, [1, 1], [3, 3], [3, 3], [1, 1], [1, 1], f),
            [2, 5, 13, 11],
            [5, 1, 7, 7],
            false,
        ),
        (
            dw_cfg(3, 1, [1, 1], [3, 3], [3, 3], [1, 1], [1, 1], f),
            [1, 3, 7, 7],
            [3, 1, 7, 7],
            false,
        ),
        // 3x3 stride 2, 5x5 stride 2 with multiplier 2, asymmetric padding.
        (
            dw_cfg(4, 1, [2, 2], [1, 1], [1, 1], [1, 1], [1, 1], f),
            [2, 4, 11, 12],
            [4, 1, 3, 3],
            false,
        ),
        (
            dw_cfg(3, 1, [2, 3], [2, 0], [1, 2], [1, 1], [1, 1], f),
            [2, 3, 12, 17],
            [6, 1, 5, 5],
            false,
        ),
        // dilation, negative padding, reversal.
        (
            dw_cfg(3, 1, [1, 1], [2, -1], [2, 0], [1, 1], [2, 2], [true, false]),
            [2, 3, 9, 10],
            [3, 1, 3, 3],
            false,
        ),
        // input gradient of a stride-2 depthwise conv: lhs dilation 2,
        // reversed window, padding k-1-p (+1 output padding).
        (
            dw_cfg(4, 1, [1, 1], [1, 1], [2, 2], [2, 2], [1, 1], [true, true]),
            [2, 4, 6, 5],
            [4, 1, 3, 3],
            false,
        ),
        (
            dw_cfg(2, 1, [1, 1], [2, 2], [3, 3], [2, 2], [1, 1], [true, true]),
            [1, 2, 5, 6],
            [4, 1, 5, 5],
            false,
        ),
        // weight gradient (batch groups; lhs = x as [C, N, H, W], rhs = dy
        // as [O, N, OH, OW]): a large window, small result. Stride-2 forward
        // (window dilation 2), padding 3, 1 and 2 images.
        (
            dw_cfg(1, 5, [1, 1], [3, 3], [3, 3], [1, 1], [1, 1], f),
            [5, 2, 13, 11],
            [5, 2, 13, 11],
            true,
        ),
        (
            dw_cfg(1, 3, [1, 1], [1, 1], [1, 1], [1, 1], [2, 2], f),
            [3, 1, 11, 12],
            [6, 1, 6, 6],
            false,
        ),
        (
            dw_cfg(1, 3, [1, 1], [1, 1], [0, 0], [1, 1], [2, 2], f),
            [3, 2, 40, 37],
            [3, 2, 20, 19],
            true,
        ),
        (
            dw_cfg(1, 2, [2, 1], [2, 2], [2, 2], [1, 1], [1, 1], f),
            [2, 3, 30, 30],
            [4, 3, 14, 30],
            true,
        ),
    ];
    for (c, xd, wd, dot) in &cases {
        let out = |i: usize| {
            output_size(
                xd[2 + i] as i64,
                wd[2 + i] as i64,
                c.stride[i],
                c.pad_lo[i],
                c.pad_hi[i],
                c.lhs_dilation[i],
                c.rhs_dilation[i],
            )
            .unwrap()
        };
        let yd = [
            (xd[0] / c.batch_groups as usize) as i64,
            wd[0] as i64,
            out(0),
            out(1),
        ];
        let dims = |d: [usize; 4]| d.map(|v| v as i64);
        let p = DwPlan::new(c, &dims(*xd), &dims(*wd), &yd)
            .unwrap_or_else(|| panic!("depthwise kernel does not take {c:?} {xd:?} x {wd:?}"));
        assert_eq!(p.uses_dot(), *dot, "{c:?} {xd:?} x {wd:?}");
        check(c, *xd, *wd);
    }
    // Not depthwise: left to the general kernel.
    let c = dw_cfg(2, 1, [1, 1], [1, 1], [1, 1], [1, 1], [1, 1], [false, false]);
    assert!(DwPlan::new(&c, &[2, 4, 5, 5], &[4, 2, 3, 3], &[2, 4, 5, 5]).is_none());
    // Mismatched result dims: the dispatch reports them.
    let c = dw_cfg(3, 1, [1, 1], [1, 1], [1, 1], [1, 1], [1, 1], [false, false]);
    assert!(DwPlan::new(&c, &[2, 3, 5, 5], &[3, 1, 3, 3], &[2, 3, 4, 5]).is_none());
}

/// Channels-last depthwise (NHWC x HWIO with one input feature per group,
/// JAX's spelling), float32, misaligned buffers.
#[test]
fn channels_last_depthwise_matches_float64() {
    let _board = crate::host_kernels::donation::test_serial();
    let mut c = conv(
        [0, 3, 1, 2],
        [2, 3, 0, 1],
        [0, 3, 1, 2],
        1,
        (1, 1),
        (1, 1),
        false,
    );
    c.groups = 8;
    check_f32(&c, &[2, 9, 10, 8], &[3, 3, 1, 16], &[2, 9, 10, 16], 1);
    c.stride = vec![2, 2];
    check_f32(&c, &[2, 9, 10, 8], &[3, 3, 1, 16], &[2, 5, 5, 16], 3);
}

/// The depthwise weight gradient's other loop order (result element outer,
/// `HLOBRIDGE_CONV_DW_WGRAD=elements`) on the same forms.
#[test]
fn depthwise_element_outer_dot_matches_a_naive_convolution() {
    depthwise::set_dot_element_outer_for_tests(true);
    let r = std::panic::catch_unwind(depthwise_kernel_matches_a_naive_convolution);
    depthwise::set_dot_element_outer_for_tests(false);
    assert!(r.is_ok());
}
