//! The oneDNN backward-weights route (`onednn_wgrad.rs`) against float64,
//! in every form it takes: torch_xla's `[f, b, 0, 1]x[i, o, 0, 1]->[0, 1,
//! b, f]`, channels-last, strided and dilated forwards, negative padding,
//! depthwise weight gradients (batch groups), misaligned buffers; and the
//! grouped forms it leaves to the host kernel.

use super::*;

/// oneDNN, or `None` where it is not installed; a library named by
/// `HLOBRIDGE_ONEDNN_LIBRARY` must load (`make test` names the venv's).
pub(super) fn onednn() -> Option<&'static crate::host_kernels::onednn::OneDnn> {
    let lib = crate::host_kernels::onednn::OneDnn::get();
    if lib.is_none() {
        assert!(
            hlobridge_config::get(hlobridge_config::Var::OneDnnLibrary).is_none(),
            "HLOBRIDGE_ONEDNN_LIBRARY is set but oneDNN did not load (see the log)"
        );
        eprintln!("skipped: no oneDNN library (HLOBRIDGE_ONEDNN_LIBRARY unset)");
    }
    lib
}

/// A oneDNN route's `implementation` and `calls` functions.
pub(super) type Route = (
    fn(&ConvConfig, &[i64], &[i64], &[i64]) -> Result<String, String>,
    fn() -> usize,
);

/// Runs `check_f32_any_route` and asserts that `route` took the
/// convolution and ran it on oneDNN.
pub(super) fn check_ran(
    route: Route,
    c: &ConvConfig,
    xd: &[i64],
    wd: &[i64],
    yd: &[i64],
    skew: usize,
) {
    let (implementation, calls) = route;
    let imp = implementation(c, xd, wd, yd)
        .unwrap_or_else(|e| panic!("{c:?} {xd:?} x {wd:?} -> {yd:?}: {e}"));
    let before = calls();
    check_f32_any_route(c, xd, wd, yd, skew);
    assert!(
        calls() > before,
        "{xd:?} x {wd:?} -> {yd:?} ({imp}) did not run on oneDNN"
    );
}

/// Runs `check_f32` and asserts that the weight-gradient route ran it.
fn check_on_onednn(c: &ConvConfig, xd: &[i64], wd: &[i64], yd: &[i64], skew: usize) {
    check_ran(
        (onednn_wgrad::implementation, onednn_wgrad::calls),
        c,
        xd,
        wd,
        yd,
        skew,
    );
}

#[test]
fn onednn_weight_gradients_match_float64() {
    let _board = crate::host_kernels::donation::test_serial();
    if onednn().is_none() {
        return;
    }
    // torch_xla's form: stride = forward dilation, rhs dilation = forward
    // stride.
    let wg = |dil_fwd: i64, stride_fwd: i64, pad: (i64, i64)| {
        conv(
            [1, 0, 2, 3],
            [0, 1, 2, 3],
            [2, 3, 0, 1],
            dil_fwd,
            pad,
            (1, stride_fwd),
            false,
        )
    };
    // (config, x [N, C, H, W], dy [N, O, OH, OW], dW [KH, KW, C, O])
    type Case = (ConvConfig, [i64; 4], [i64; 4], [i64; 4]);
    let cases: Vec<Case> = vec![
        (
            wg(1, 1, (1, 1)),
            [3, 5, 17, 17],
            [3, 7, 17, 17],
            [3, 3, 5, 7],
        ),
        // Small maps (fewer taps than the im2col path's minimum).
        (wg(1, 1, (1, 1)), [4, 6, 7, 7], [4, 5, 7, 7], [3, 3, 6, 5]),
        // Strided forwards, with and without the high padding used.
        (
            wg(1, 2, (1, 1)),
            [3, 5, 33, 33],
            [3, 7, 17, 17],
            [3, 3, 5, 7],
        ),
        (
            wg(1, 2, (1, 0)),
            [2, 4, 34, 34],
            [2, 6, 17, 17],
            [3, 3, 4, 6],
        ),
        (
            wg(1, 2, (0, 0)),
            [2, 6, 33, 33],
            [2, 5, 17, 17],
            [1, 1, 6, 5],
        ),
        // Unpadded, non-square, and a 5×5 window.
        (
            wg(1, 1, (0, 0)),
            [2, 3, 18, 20],
            [2, 5, 16, 18],
            [3, 3, 3, 5],
        ),
        (
            wg(1, 1, (2, 2)),
            [2, 3, 16, 16],
            [2, 4, 16, 16],
            [5, 5, 3, 4],
        ),
        // A dilated forward (dilation 2, padding 2).
        (
            wg(2, 1, (2, 2)),
            [2, 3, 12, 12],
            [2, 4, 12, 12],
            [3, 3, 3, 4],
        ),
        // Negative padding: the forward cropped its input.
        (
            wg(1, 1, (-1, -1)),
            [2, 3, 12, 12],
            [2, 4, 8, 8],
            [3, 3, 3, 4],
        ),
    ];
    for (i, (c, xd, yd, wd)) in cases.iter().enumerate() {
        check_on_onednn(c, xd, yd, wd, i % 3);
    }
    // Channels-last: x [N, H, W, C] as [f, 0, 1, b], dy [N, OH, OW, O] as
    // [i, 0, 1, o], dW [O, KH, KW, C] as [f, 0, 1, b].
    let c = ConvConfig {
        lhs: vec![3, 0, 1, 2],
        rhs: vec![0, 3, 1, 2],
        out: vec![3, 0, 1, 2],
        ..wg(1, 2, (1, 1))
    };
    check_on_onednn(&c, &[3, 33, 33, 5], &[3, 17, 17, 7], &[7, 3, 3, 5], 1);
    // A depthwise weight gradient (16 groups of one channel: batch groups)
    // runs on oneDNN's depthwise kernel; a channel multiplier of 2 and a
    // 2-group one would run on its generic `gemm` fallback, so the host
    // kernel keeps them (checked all the same).
    let grouped = |g: i64| ConvConfig {
        batch_groups: g,
        ..wg(1, 1, (1, 1))
    };
    check_on_onednn(
        &grouped(16),
        &[2, 16, 15, 15],
        &[2, 16, 15, 15],
        &[3, 3, 1, 16],
        2,
    );
    for (g, xd, yd, wd) in [
        (8, [2, 8, 15, 15], [2, 16, 15, 15], [3, 3, 1, 16]),
        (2, [2, 6, 15, 15], [2, 4, 15, 15], [3, 3, 3, 4]),
    ] {
        let why = onednn_wgrad::implementation(&grouped(g), &xd, &yd, &wd).unwrap_err();
        assert!(why.contains("gemm"), "{why}");
        check_f32(&grouped(g), &xd, &yd, &wd, 1);
    }
    // Not taken: a forward convolution (window smaller than the result).
    let f = forward_nchw();
    assert!(onednn_wgrad::implementation(&f, &[2, 3, 8, 8], &[4, 3, 3, 3], &[2, 4, 8, 8]).is_err());
}
