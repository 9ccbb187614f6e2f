//! Backward convolutions against float64: ResNet-18's input and weight
//! gradients as the rewrite receives them, and the weight-gradient kernel
//! (`wgrad.rs`) on the forms it takes.

use super::*;

/// The backward convolutions of ResNet-18's 3x3 layers at 32x32 images,
/// batch 16, as the rewrite receives them (the ones on the steps where the
/// step replay first looked off, `layer2.1` and `layer4.0`): input
/// gradients (reversed window, `[i, o]` swapped, lhs dilation for stride 2)
/// and weight gradients (`[f, b, 0, 1] x [i, o, 0, 1] -> [0, 1, b, f]`,
/// rhs dilation for stride 2), several row chunks, misaligned buffers.
#[test]
fn resnet_backward_convolutions_match_float64() {
    let _board = crate::host_kernels::donation::test_serial();
    let nchw = [0, 1, 2, 3];
    // layer2.1.conv2, input gradient: dy [16,128,4,4], w [128(o),128(i),3,3].
    let c = conv(nchw, [0, 1, 2, 3], nchw, 1, (1, 1), (1, 1), true);
    for skew in [0, 1, 3] {
        check_f32(
            &c,
            &[16, 128, 4, 4],
            &[128, 128, 3, 3],
            &[16, 128, 4, 4],
            skew,
        );
    }
    // layer2.1.conv2, weight gradient: x [16,128,4,4] as [f, b, 0, 1],
    // dy [16,128,4,4] as [i, o, 0, 1], result [3, 3, 128(i), 128(o)].
    let c = conv(
        [1, 0, 2, 3],
        [0, 1, 2, 3],
        [2, 3, 0, 1],
        1,
        (1, 1),
        (1, 1),
        false,
    );
    check_f32(&c, &[16, 128, 4, 4], &[16, 128, 4, 4], &[3, 3, 128, 128], 1);
    // layer4.0.conv1 (3x3 stride 2, 2x2 -> 1x1), input gradient.
    let c = conv(nchw, [0, 1, 2, 3], nchw, 1, (1, 2), (2, 1), true);
    check_f32(&c, &[16, 512, 1, 1], &[512, 256, 3, 3], &[16, 256, 2, 2], 3);
    // ... and its weight gradient (dy as a window dilated by 2).
    let c = conv(
        [1, 0, 2, 3],
        [0, 1, 2, 3],
        [2, 3, 0, 1],
        1,
        (1, 0),
        (1, 2),
        false,
    );
    check_f32(&c, &[16, 256, 2, 2], &[16, 512, 1, 1], &[3, 3, 256, 512], 2);
    // layer1 (8x8, 64 features): many row chunks, in place and scattered.
    let c = conv(nchw, [0, 1, 2, 3], nchw, 1, (1, 1), (1, 1), true);
    check_f32(&c, &[16, 64, 8, 8], &[64, 64, 3, 3], &[16, 64, 8, 8], 1);
    let c = conv(
        [1, 0, 2, 3],
        [0, 1, 2, 3],
        [2, 3, 0, 1],
        1,
        (1, 1),
        (1, 1),
        false,
    );
    check_f32(&c, &[16, 64, 8, 8], &[16, 64, 8, 8], &[3, 3, 64, 64], 0);
}

/// The weight-gradient kernel (`wgrad.rs`) on the forms it takes, against
/// float64 (17² and larger output-gradient maps: at least `MIN_TAPS`): 3x3
/// with padding 1 (odd sizes), a stride-2 forward (window dilated by 2, odd
/// input), padding 0, a strided 1x1, 5x5 padding 2, a
/// channels-last (NHWC) input and output gradient, split contractions
/// and several row chunks; misaligned buffers.
#[test]
fn weight_gradients_match_float64() {
    let _board = crate::host_kernels::donation::test_serial();
    let wg = |stride_fwd: i64, pad: (i64, i64)| {
        conv(
            [1, 0, 2, 3],
            [0, 1, 2, 3],
            [2, 3, 0, 1],
            1,
            pad,
            (1, stride_fwd),
            false,
        )
    };
    // (config, x [N, C, H, W], dy [N, O, OH, OW], dW [KH, KW, C, O])
    type Case = (ConvConfig, [i64; 4], [i64; 4], [i64; 4]);
    let cases: Vec<Case> = vec![
        (wg(1, (1, 1)), [3, 5, 17, 17], [3, 7, 17, 17], [3, 3, 5, 7]),
        (wg(2, (1, 1)), [3, 5, 33, 33], [3, 7, 17, 17], [3, 3, 5, 7]),
        (wg(2, (1, 0)), [2, 4, 34, 34], [2, 6, 17, 17], [3, 3, 4, 6]),
        (wg(1, (0, 0)), [2, 3, 18, 20], [2, 5, 16, 18], [3, 3, 3, 5]),
        (wg(2, (0, 0)), [2, 6, 33, 33], [2, 5, 17, 17], [1, 1, 6, 5]),
        (wg(1, (2, 2)), [2, 3, 16, 16], [2, 4, 16, 16], [5, 5, 3, 4]),
        // One row chunk, contraction split in two (4·32·32 columns).
        (wg(1, (1, 1)), [4, 4, 32, 32], [4, 8, 32, 32], [3, 3, 4, 8]),
        // 360 rows: two row chunks.
        (
            wg(1, (1, 1)),
            [2, 40, 16, 16],
            [2, 9, 16, 16],
            [3, 3, 40, 9],
        ),
    ];
    for (i, (c, xd, yd, wd)) in cases.iter().enumerate() {
        assert!(
            WgradPlan::new(c, xd, yd, wd).is_some(),
            "case {i} takes the weight-gradient kernel"
        );
        check_f32(c, xd, yd, wd, i % 3);
    }
    // Channels-last: x [N, H, W, C] as [f, 0, 1, b], dy [N, OH, OW, O] as
    // [i, 0, 1, o], dW [O, KH, KW, C] as [f, 0, 1, b].
    let c = ConvConfig {
        lhs: vec![3, 0, 1, 2],
        rhs: vec![0, 3, 1, 2],
        out: vec![3, 0, 1, 2],
        ..wg(2, (1, 1))
    };
    assert!(WgradPlan::new(&c, &[3, 33, 33, 5], &[3, 17, 17, 7], &[7, 3, 3, 5]).is_some());
    check_f32(&c, &[3, 33, 33, 5], &[3, 17, 17, 7], &[7, 3, 3, 5], 1);
    // Not taken: a forward convolution (window smaller than the result),
    // a window under MIN_TAPS (the general kernel runs it), dims that do
    // not match (the general kernel reports them).
    let f = forward_nchw();
    assert!(WgradPlan::new(&f, &[2, 3, 8, 8], &[4, 3, 3, 3], &[2, 4, 8, 8]).is_none());
    let c = wg(1, (1, 1));
    assert!(WgradPlan::new(&c, &[3, 5, 9, 9], &[3, 7, 9, 9], &[3, 3, 5, 7]).is_none());
    check_f32(&c, &[3, 5, 9, 9], &[3, 7, 9, 9], &[3, 3, 5, 7], 2);
    assert!(WgradPlan::new(&c, &[3, 5, 17, 17], &[3, 7, 17, 17], &[3, 3, 5, 8]).is_none());
    let mut y = vec![0f32; 3 * 3 * 5 * 8];
    let (x, w) = (vec![0f32; 3 * 5 * 289], vec![0f32; 3 * 7 * 289]);
    let view = |p: *const f32, d: &'static [i64]| BufferView {
        dtype: XLA_FFI_DataType_F32,
        data: p as *mut f32 as *mut std::ffi::c_void,
        dims: d,
    };
    // SAFETY: the buffers hold their dims' elements.
    let err = unsafe {
        conv_dispatch::<f32>(
            &c,
            &view(x.as_ptr(), &[3, 5, 17, 17]),
            &view(w.as_ptr(), &[3, 7, 17, 17]),
            &view(y.as_mut_ptr(), &[3, 3, 5, 8]),
        )
    };
    assert!(err.unwrap_err().contains("shapes do not match"));
}
