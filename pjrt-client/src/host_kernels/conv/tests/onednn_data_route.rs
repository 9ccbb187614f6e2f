//! The oneDNN data route (`onednn_data.rs`) against float64: depthwise
//! forwards (strided, dilated, channels-last, negatively padded) and
//! ungrouped ones, strided
//! convolutions' input gradients as backward-data convolutions (windows
//! reversed by the config or arriving reversed, a 1×1/2 whose forward left
//! its input's last row unread, depthwise ones), and the forms it leaves to
//! the host kernel.

use super::*;

/// Whether oneDNN is loaded (see `onednn.rs`).
fn loaded() -> bool {
    super::onednn::onednn().is_some()
}

/// Runs `check_f32_any_route` and asserts that the data route ran it.
fn check_on_onednn(c: &ConvConfig, xd: &[i64], wd: &[i64], yd: &[i64], skew: usize) {
    super::onednn::check_ran(
        (onednn_data::implementation, onednn_data::calls),
        c,
        xd,
        wd,
        yd,
        skew,
    );
}

/// A depthwise NCHW forward: `c` groups, weights `[C·m, 1, K, K]`.
fn depthwise(c: i64, stride: i64, pad: (i64, i64), dil: i64) -> ConvConfig {
    ConvConfig {
        groups: c,
        ..conv(
            [0, 1, 2, 3],
            [1, 0, 2, 3],
            [0, 1, 2, 3],
            stride,
            pad,
            (1, dil),
            false,
        )
    }
}

/// The input gradient of a stride-`s` NCHW forward in torch_xla's form:
/// lhs `dY [N, O, Ho, Wo]`, rhs the forward's weights `[O, C, K, K]` (its
/// input feature dim 0), lhs dilation `s`, padding `(K−1−p, …)`.
fn input_grad(s: i64, pad: (i64, i64), reverse: bool) -> ConvConfig {
    conv(
        [0, 1, 2, 3],
        [0, 1, 2, 3],
        [0, 1, 2, 3],
        1,
        pad,
        (s, 1),
        reverse,
    )
}

#[test]
fn onednn_depthwise_forwards_match_float64() {
    let _board = crate::host_kernels::donation::test_serial();
    if !loaded() {
        return;
    }
    // (config, x, w, y)
    type Case = (ConvConfig, [i64; 4], [i64; 4], [i64; 4]);
    let cases: Vec<Case> = vec![
        (
            depthwise(32, 1, (1, 1), 1),
            [4, 32, 32, 32],
            [32, 1, 3, 3],
            [4, 32, 32, 32],
        ),
        (
            depthwise(24, 2, (2, 2), 1),
            [8, 24, 33, 33],
            [24, 1, 5, 5],
            [8, 24, 17, 17],
        ),
        (
            depthwise(24, 2, (1, 0), 1),
            [8, 24, 66, 66],
            [24, 1, 3, 3],
            [8, 24, 33, 33],
        ),
        (
            depthwise(16, 1, (2, 2), 2),
            [8, 16, 32, 32],
            [16, 1, 3, 3],
            [8, 16, 32, 32],
        ),
        (
            depthwise(16, 1, (-1, -1), 1),
            [8, 16, 36, 36],
            [16, 1, 3, 3],
            [8, 16, 32, 32],
        ),
    ];
    for (i, (c, xd, wd, yd)) in cases.iter().enumerate() {
        check_on_onednn(c, xd, wd, yd, i % 3);
    }
    // Reversed in the config (a stride-1 depthwise input gradient).
    let mut rev = depthwise(32, 1, (1, 1), 1);
    rev.reverse = vec![true; 2];
    check_on_onednn(&rev, &[4, 32, 32, 32], &[32, 1, 3, 3], &[4, 32, 32, 32], 1);
    // Channels-last: x [N, H, W, C], w [K, K, 1, C], y [N, H, W, C].
    let cl = ConvConfig {
        lhs: vec![0, 3, 1, 2],
        rhs: vec![2, 3, 0, 1],
        out: vec![0, 3, 1, 2],
        ..depthwise(32, 1, (1, 1), 1)
    };
    check_on_onednn(&cl, &[4, 32, 32, 32], &[3, 3, 1, 32], &[4, 32, 32, 32], 2);
    // An ungrouped forward (a training program's, as the lowering sends
    // them), strided and not.
    let f = forward_nchw();
    check_on_onednn(&f, &[4, 32, 32, 32], &[32, 32, 3, 3], &[4, 32, 32, 32], 1);
    let f2 = ConvConfig {
        stride: vec![2, 2],
        ..forward_nchw()
    };
    check_on_onednn(&f2, &[4, 32, 33, 33], &[48, 32, 3, 3], &[4, 48, 17, 17], 2);
    // Not taken: a channel multiplier of 2 (oneDNN's generic kernel) and
    // one below the size floor; both still right.
    let m2 = depthwise(16, 1, (1, 1), 1);
    let (xd, wd, yd) = ([4, 16, 32, 32], [32, 1, 3, 3], [4, 32, 32, 32]);
    if let Ok(imp) = onednn_data::implementation(&m2, &xd, &wd, &yd) {
        assert!(!imp.contains("gemm") && !imp.contains("ref"), "{imp}");
    }
    check_f32_any_route(&m2, &xd, &wd, &yd, 1);
    let small = depthwise(8, 1, (1, 1), 1);
    assert!(
        onednn_data::implementation(&small, &[1, 8, 8, 8], &[8, 1, 3, 3], &[1, 8, 8, 8]).is_err()
    );
}

#[test]
fn onednn_input_gradients_match_float64() {
    let _board = crate::host_kernels::donation::test_serial();
    if !loaded() {
        return;
    }
    // 3×3/2, padding 1, on 28² (Ho 14): padding (1, 2); the window reversed
    // by the config, and arriving reversed.
    for reverse in [true, false] {
        check_on_onednn(
            &input_grad(2, (1, 2), reverse),
            &[2, 24, 14, 14],
            &[24, 16, 3, 3],
            &[2, 16, 28, 28],
            usize::from(reverse),
        );
    }
    // On 29² (odd): padding (1, 1).
    check_on_onednn(
        &input_grad(2, (1, 1), true),
        &[2, 24, 15, 15],
        &[24, 16, 3, 3],
        &[2, 16, 29, 29],
        0,
    );
    // 1×1/2 on 28²: the forward never read row 27, whose gradient is 0
    // (oneDNN's padding would be -1: floored at 0).
    check_on_onednn(
        &input_grad(2, (0, 1), true),
        &[2, 64, 14, 14],
        &[64, 32, 1, 1],
        &[2, 32, 28, 28],
        2,
    );
    // A depthwise one: 5×5/2, padding 2, on 28².
    let dw = ConvConfig {
        groups: 32,
        ..conv(
            [0, 1, 2, 3],
            [1, 0, 2, 3],
            [0, 1, 2, 3],
            1,
            (2, 3),
            (2, 1),
            true,
        )
    };
    check_on_onednn(&dw, &[4, 32, 14, 14], &[32, 1, 5, 5], &[4, 32, 28, 28], 1);
    // Not taken: a window stride with lhs dilation, and padding beyond
    // the window (its low rows read only padding).
    let strided = conv(
        [0, 1, 2, 3],
        [0, 1, 2, 3],
        [0, 1, 2, 3],
        2,
        (1, 1),
        (2, 1),
        true,
    );
    let (xd, wd) = ([2, 24, 14, 14], [24, 16, 3, 3]);
    let yd = [2, 16, 14, 14];
    assert!(onednn_data::implementation(&strided, &xd, &wd, &yd).is_err());
    check_f32_any_route(&strided, &xd, &wd, &yd, 0);
    let wide = input_grad(2, (3, 2), true);
    let yd = [2, 16, 30, 30];
    assert!(onednn_data::implementation(&wide, &xd, &wd, &yd).is_err());
    check_f32_any_route(&wide, &xd, &wd, &yd, 0);
}
