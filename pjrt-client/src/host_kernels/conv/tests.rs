//! Unit tests of the host convolution: config round trip, plans, and the
//! kernel against a naive convolution.

use super::*;

fn cfg2(groups: i64, batch_groups: i64, stride: [i64; 2], pad: [i64; 4]) -> ConvConfig {
    ConvConfig {
        groups,
        batch_groups,
        lhs: vec![0, 1, 2, 3],
        rhs: vec![1, 0, 2, 3],
        out: vec![0, 1, 2, 3],
        stride: stride.to_vec(),
        pad_lo: vec![pad[0], pad[2]],
        pad_hi: vec![pad[1], pad[3]],
        lhs_dilation: vec![1, 2],
        rhs_dilation: vec![2, 1],
        reverse: vec![true, false],
    }
}

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

/// XLA's convolution semantics, element by element (NCHW / OIHW).
#[allow(clippy::too_many_arguments)]
fn naive(
    c: &ConvConfig,
    x: &[f64],
    xd: [usize; 4],
    w: &[f64],
    wd: [usize; 4],
    yd: [usize; 4],
) -> Vec<f64> {
    let (g, bg) = (c.groups as usize, c.batch_groups as usize);
    let (cin, cout) = (wd[1], wd[0] / (g * bg));
    let mut y = vec![0.0; yd.iter().product()];
    for b in 0..yd[0] {
        for o in 0..yd[1] {
            let grp = o / cout;
            for oy in 0..yd[2] {
                for ox in 0..yd[3] {
                    let mut acc = 0.0;
                    for ci in 0..cin {
                        for ky in 0..wd[2] {
                            for kx in 0..wd[3] {
                                let k = [ky, kx];
                                let o2 = [oy, ox];
                                let mut idx = [0usize; 2];
                                let mut ok = true;
                                for i in 0..2 {
                                    let kk = if c.reverse[i] {
                                        wd[2 + i] - 1 - k[i]
                                    } else {
                                        k[i]
                                    } as i64;
                                    let p = o2[i] as i64 * c.stride[i] + kk * c.rhs_dilation[i]
                                        - c.pad_lo[i];
                                    let d = c.lhs_dilation[i];
                                    if p < 0 || p % d != 0 || (p / d) as usize >= xd[2 + i] {
                                        ok = false;
                                    } else {
                                        idx[i] = (p / d) as usize;
                                    }
                                }
                                if !ok {
                                    continue;
                                }
                                let (xb, xf) = if bg > 1 {
                                    (grp * yd[0] + b, ci)
                                } else {
                                    (b, grp * cin + ci)
                                };
                                let xv = x[((xb * xd[1] + xf) * xd[2] + idx[0]) * xd[3] + idx[1]];
                                let wv = w[((o * wd[1] + ci) * wd[2] + ky) * wd[3] + kx];
                                acc += xv * wv;
                            }
                        }
                    }
                    y[((b * yd[1] + o) * yd[2] + oy) * yd[3] + ox] = acc;
                }
            }
        }
    }
    y
}

fn check(c: &ConvConfig, xd: [usize; 4], wd: [usize; 4]) {
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
        .unwrap() as usize
    };
    let yd = [xd[0] / c.batch_groups as usize, wd[0], out(0), out(1)];
    let x: Vec<f64> = (0..xd.iter().product())
        .map(|i| (i as f64 * 0.37).sin())
        .collect();
    let w: Vec<f64> = (0..wd.iter().product())
        .map(|i| (i as f64 * 0.71).cos())
        .collect();
    let mut y = vec![f64::NAN; yd.iter().product()];
    let dims = |d: [usize; 4]| -> &'static [i64] { Box::leak(Box::new(d.map(|v| v as i64))) };
    let (xs, ws, ys) = (dims(xd), dims(wd), dims(yd));
    let plan = ConvPlan::new(c, xs, ws, ys).unwrap();
    let view = |p: *mut f64, d: &'static [i64]| BufferView {
        dtype: XLA_FFI_DataType_F64,
        data: p.cast(),
        dims: d,
    };
    let want = naive(c, &x, xd, &w, wd, yd);
    // The general kernel (im2col + GEMM, or its direct depthwise loop), then
    // the dispatch (the depthwise kernel where it takes the convolution).
    for general in [true, false] {
        y.fill(f64::NAN);
        // SAFETY: the vectors have the planned dims.
        unsafe {
            let (xv, wv, yv) = (
                view(x.as_ptr() as *mut f64, xs),
                view(w.as_ptr() as *mut f64, ws),
                view(y.as_mut_ptr(), ys),
            );
            if general {
                conv_typed::<f64>(&plan, &xv, &wv, &yv)
            } else {
                conv_dispatch::<f64>(c, &xv, &wv, &yv)
            }
        }
        .unwrap();
        for (i, (a, b)) in y.iter().zip(&want).enumerate() {
            assert!(
                (a - b).abs() < 1e-9,
                "{c:?} {xd:?} x {wd:?} (general kernel: {general}) element {i}: {a} vs {b}"
            );
        }
    }
}

/// A 2-D NCHW / OIHW convolution config with every attribute set.
#[allow(clippy::too_many_arguments)]
fn dw_cfg(
    groups: i64,
    batch_groups: i64,
    stride: [i64; 2],
    pad_lo: [i64; 2],
    pad_hi: [i64; 2],
    lhs_dilation: [i64; 2],
    rhs_dilation: [i64; 2],
    reverse: [bool; 2],
) -> ConvConfig {
    ConvConfig {
        groups,
        batch_groups,
        lhs: vec![0, 1, 2, 3],
        rhs: vec![1, 0, 2, 3],
        out: vec![0, 1, 2, 3],
        stride: stride.to_vec(),
        pad_lo: pad_lo.to_vec(),
        pad_hi: pad_hi.to_vec(),
        lhs_dilation: lhs_dilation.to_vec(),
        rhs_dilation: rhs_dilation.to_vec(),
        reverse: reverse.to_vec(),
    }
}

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

/// XLA's convolution semantics for any dimension order (feature groups
/// only), in f64 from f32 operands: the result and, per element, the sum
/// of the products' magnitudes (the scale of float32 rounding).
fn naive_any(
    c: &ConvConfig,
    x: &[f32],
    xd: &[i64],
    w: &[f32],
    wd: &[i64],
    yd: &[i64],
) -> (Vec<f64>, Vec<f64>) {
    let (ls, rs, ys) = (
        row_major_strides(xd),
        row_major_strides(wd),
        row_major_strides(yd),
    );
    let at = |d: &[i64], i: usize| d[i] as usize;
    let (ki, ko) = (at(wd, c.rhs[0]), at(wd, c.rhs[1]));
    let cout = ko / c.groups as usize;
    let ks = [at(wd, c.rhs[2]), at(wd, c.rhs[3])];
    let ins = [at(xd, c.lhs[2]), at(xd, c.lhs[3])];
    let os = [at(yd, c.out[2]), at(yd, c.out[3])];
    let len = yd.iter().product::<i64>() as usize;
    let (mut y, mut mag) = (vec![0.0; len], vec![0.0; len]);
    for b in 0..at(yd, c.out[0]) {
        for o in 0..ko {
            for oy in 0..os[0] {
                for ox in 0..os[1] {
                    let (mut acc, mut m) = (0.0f64, 0.0f64);
                    for ci in 0..ki {
                        for ky in 0..ks[0] {
                            for kx in 0..ks[1] {
                                let (k, o2) = ([ky, kx], [oy, ox]);
                                let mut idx = [0usize; 2];
                                let ok = (0..2).all(|i| {
                                    let kk = if c.reverse[i] { ks[i] - 1 - k[i] } else { k[i] };
                                    let p = o2[i] as i64 * c.stride[i]
                                        + kk as i64 * c.rhs_dilation[i]
                                        - c.pad_lo[i];
                                    let d = c.lhs_dilation[i];
                                    idx[i] = (p / d.max(1)) as usize;
                                    p >= 0 && p % d == 0 && ((p / d) as usize) < ins[i]
                                });
                                if !ok {
                                    continue;
                                }
                                let xo = b * ls[c.lhs[0]]
                                    + ((o / cout) * ki + ci) * ls[c.lhs[1]]
                                    + idx[0] * ls[c.lhs[2]]
                                    + idx[1] * ls[c.lhs[3]];
                                let wo = ci * rs[c.rhs[0]]
                                    + o * rs[c.rhs[1]]
                                    + ky * rs[c.rhs[2]]
                                    + kx * rs[c.rhs[3]];
                                let p = x[xo] as f64 * w[wo] as f64;
                                acc += p;
                                m += p.abs();
                            }
                        }
                    }
                    let yo =
                        b * ys[c.out[0]] + o * ys[c.out[1]] + oy * ys[c.out[2]] + ox * ys[c.out[3]];
                    y[yo] = acc;
                    mag[yo] = m;
                }
            }
        }
    }
    (y, mag)
}

/// The f32 kernel against [`naive_any`] on operands of physical dims `xd`,
/// `wd`, `yd` whose data start at `skew` elements into their allocations
/// (not 32-byte aligned), with NaN in the result beforehand.
fn check_f32(c: &ConvConfig, xd: &[i64], wd: &[i64], yd: &[i64], skew: usize) {
    let n = |d: &[i64]| d.iter().product::<i64>() as usize;
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut rand = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        // Half of them near zero, as post-ReLU data and sparse gradients.
        let v = (seed >> 40) as f32 / (1u64 << 24) as f32 - 0.5;
        if seed & 1 == 0 {
            v * 1e-3
        } else {
            v
        }
    };
    let xa: Vec<f32> = (0..n(xd) + skew).map(|_| rand()).collect();
    let wa: Vec<f32> = (0..n(wd) + skew).map(|_| rand()).collect();
    let mut ya = vec![f32::NAN; n(yd) + skew];
    let view = |p: *const f32, d: &[i64]| BufferView {
        dtype: XLA_FFI_DataType_F32,
        data: p as *mut f32 as *mut std::ffi::c_void,
        dims: Box::leak(d.to_vec().into_boxed_slice()),
    };
    // SAFETY: each allocation holds skew + its dims' elements.
    unsafe {
        conv_dispatch::<f32>(
            c,
            &view(xa.as_ptr().add(skew), xd),
            &view(wa.as_ptr().add(skew), wd),
            &view(ya.as_mut_ptr().add(skew), yd),
        )
    }
    .unwrap();
    let (want, mag) = naive_any(c, &xa[skew..], xd, &wa[skew..], wd, yd);
    for (i, ((&a, &b), &m)) in ya[skew..].iter().zip(&want).zip(&mag).enumerate() {
        assert!(
            (a as f64 - b).abs() <= 1e-6 * m + 1e-30,
            "{c:?} {xd:?} x {wd:?} -> {yd:?} element {i}: {a} vs {b} (scale {m})"
        );
    }
    assert!(
        ya[..skew].iter().all(|v| v.is_nan()),
        "wrote before the result"
    );
}

fn conv(
    lhs: [usize; 4],
    rhs: [usize; 4],
    out: [usize; 4],
    stride: i64,
    pad: (i64, i64),
    dil: (i64, i64),
    reverse: bool,
) -> ConvConfig {
    ConvConfig {
        groups: 1,
        batch_groups: 1,
        lhs: lhs.to_vec(),
        rhs: rhs.to_vec(),
        out: out.to_vec(),
        stride: vec![stride; 2],
        pad_lo: vec![pad.0; 2],
        pad_hi: vec![pad.1; 2],
        lhs_dilation: vec![dil.0; 2],
        rhs_dilation: vec![dil.1; 2],
        reverse: vec![reverse; 2],
    }
}

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

/// Timing of the depthwise kernel against the general kernel's direct
/// loop on ConvNeXt's 7x7 (run by hand: `--ignored --nocapture`).
#[test]
#[ignore]
fn depthwise_timing() {
    let c = dw_cfg(
        192,
        1,
        [1, 1],
        [3, 3],
        [3, 3],
        [1, 1],
        [1, 1],
        [false, false],
    );
    let (xd, wd, yd) = ([8i64, 192, 28, 28], [192i64, 1, 7, 7], [8i64, 192, 28, 28]);
    let n = |d: &[i64]| d.iter().product::<i64>() as usize;
    let x = vec![0.5f32; n(&xd)];
    let w = vec![0.25f32; n(&wd)];
    let mut y = vec![0f32; n(&yd)];
    let view = |p: *const f32, d: &[i64]| BufferView {
        dtype: XLA_FFI_DataType_F32,
        data: p as *mut f32 as *mut std::ffi::c_void,
        dims: Box::leak(d.to_vec().into_boxed_slice()),
    };
    let plan = ConvPlan::new(&c, &xd, &wd, &yd).unwrap();
    let cpu = || {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: a valid timespec to fill.
        unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
        ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
    };
    for general in [false, true, false, true] {
        let t = cpu();
        for _ in 0..5 {
            // SAFETY: the vectors have these dims.
            unsafe {
                let (xv, wv, yv) = (
                    view(x.as_ptr(), &xd),
                    view(w.as_ptr(), &wd),
                    view(y.as_mut_ptr(), &yd),
                );
                if general {
                    conv_typed::<f32>(&plan, &xv, &wv, &yv)
                } else {
                    conv_dispatch::<f32>(&c, &xv, &wv, &yv)
                }
            }
            .unwrap();
        }
        eprintln!(
            "general {general}: {:.3} ms thread CPU",
            (cpu() - t) * 1e3 / 5.0
        );
    }
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

/// Where a ResNet-50 3x3 convolution's time goes (run by hand: `--ignored
/// --nocapture`): the whole kernel against the GEMM alone on a patch
/// matrix of the same shape, thread CPU time.
#[test]
#[ignore]
fn im2col_share_timing() {
    let cpu = || {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: a valid timespec to fill.
        unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
        ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
    };
    for (cin, hw) in [(64usize, 56usize), (256, 14)] {
        let c = dw_cfg(1, 1, [1, 1], [1, 1], [1, 1], [1, 1], [1, 1], [false, false]);
        let (xd, wd, yd) = (
            [8i64, cin as i64, hw as i64, hw as i64],
            [cin as i64, cin as i64, 3, 3],
            [8i64, cin as i64, hw as i64, hw as i64],
        );
        let n = |d: &[i64]| d.iter().product::<i64>() as usize;
        let x = vec![0.5f32; n(&xd)];
        let w = vec![0.25f32; n(&wd)];
        let mut y = vec![0f32; n(&yd)];
        let view = |p: *const f32, d: &[i64]| BufferView {
            dtype: XLA_FFI_DataType_F32,
            data: p as *mut f32 as *mut std::ffi::c_void,
            dims: Box::leak(d.to_vec().into_boxed_slice()),
        };
        let t = cpu();
        let plan = ConvPlan::new(&c, &xd, &wd, &yd).unwrap();
        let tplan = cpu() - t;
        let t = cpu();
        // SAFETY: the vectors have these dims.
        unsafe {
            conv_typed::<f32>(
                &plan,
                &view(x.as_ptr(), &xd),
                &view(w.as_ptr(), &wd),
                &view(y.as_mut_ptr(), &yd),
            )
        }
        .unwrap();
        let tconv = cpu() - t;
        let (m, k) = (8 * hw * hw, cin * 9);
        let a = vec![0.5f32; m * k];
        let mut cc = vec![0f32; m * cin];
        let t = cpu();
        // SAFETY: row-major m x k, k x cin, m x cin.
        unsafe {
            <f32 as GemmElement>::mul(
                m,
                k,
                cin,
                a.as_ptr(),
                k as isize,
                1,
                w.as_ptr(),
                1,
                k as isize,
                cc.as_mut_ptr(),
                cin as isize,
                1,
            )
        };
        let tgemm = cpu() - t;
        eprintln!(
            "3x3 {cin}@{hw} b8: plan {:.2} ms, kernel {:.2} ms, GEMM alone {:.2} ms",
            tplan * 1e3,
            tconv * 1e3,
            tgemm * 1e3
        );
    }
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
    let f = conv(
        [0, 1, 2, 3],
        [1, 0, 2, 3],
        [0, 1, 2, 3],
        1,
        (1, 1),
        (1, 1),
        false,
    );
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

/// Timing of the weight-gradient kernel at ResNet-50's 3×3 and strided
/// shapes, batch 8 (run by hand: `--ignored --nocapture`): thread CPU time
/// of the kernel, of the general kernel on the same convolution, and of one
/// GEMM of the same `[rows, images·taps] x [images·taps, F]` shape.
#[test]
#[ignore]
fn wgrad_timing() {
    let cpu = || {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: a valid timespec to fill.
        unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
        ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
    };
    let only = std::env::var("WGRAD_SHAPES").unwrap_or_default();
    // (C, O, k, stride, input size)
    for (c, o, k, s, hw) in [
        (64i64, 64i64, 3i64, 1i64, 56i64),
        (128, 128, 3, 1, 28),
        (256, 256, 3, 1, 14),
        (512, 512, 3, 1, 7),
        (128, 128, 3, 2, 56),
        (256, 512, 1, 2, 56),
        (1024, 256, 1, 1, 14),
        (512, 2048, 1, 1, 7),
    ] {
        let name = format!("{k}x{k}/{s} {c}>{o}@{hw}");
        if !only.is_empty() && !only.split(',').any(|p| name.contains(p)) {
            continue;
        }
        let pad = k / 2;
        let oh = (hw + 2 * pad - k) / s + 1;
        let reach = (oh - 1) * s + 1; // window extent of dy dilated by s
        let hi = k - 1 - hw - pad + reach; // so the result is k×k
        let cfg = conv(
            [1, 0, 2, 3],
            [0, 1, 2, 3],
            [2, 3, 0, 1],
            1,
            (pad, hi),
            (1, s),
            false,
        );
        let (xd, dyd, wd) = ([8, c, hw, hw], [8, o, oh, oh], [k, k, c, o]);
        let n = |d: &[i64]| d.iter().product::<i64>() as usize;
        let x = vec![0.5f32; n(&xd)];
        let dy = vec![0.25f32; n(&dyd)];
        let mut y = vec![0f32; n(&wd)];
        let view = |p: *const f32, d: &[i64]| BufferView {
            dtype: XLA_FFI_DataType_F32,
            data: p as *mut f32 as *mut std::ffi::c_void,
            dims: Box::leak(d.to_vec().into_boxed_slice()),
        };
        let plan = WgradPlan::new(&cfg, &xd, &dyd, &wd).expect("taken");
        let mut best = f64::MAX;
        for _ in 0..3 {
            let t = cpu();
            // SAFETY: the vectors have these dims.
            unsafe {
                wgrad::run::<f32>(
                    &plan,
                    &view(x.as_ptr(), &xd),
                    &view(dy.as_ptr(), &dyd),
                    &view(y.as_mut_ptr(), &wd),
                )
            }
            .unwrap();
            best = best.min(cpu() - t);
        }
        let general = ConvPlan::new(&cfg, &xd, &dyd, &wd).unwrap();
        let t = cpu();
        // SAFETY: the vectors have these dims.
        unsafe {
            conv_typed::<f32>(
                &general,
                &view(x.as_ptr(), &xd),
                &view(dy.as_ptr(), &dyd),
                &view(y.as_mut_ptr(), &wd),
            )
        }
        .unwrap();
        let tgen = cpu() - t;
        let (m, kk, f) = (plan.rows(), plan.kdim(), o as usize);
        let a = vec![0.5f32; m * kk];
        let b = vec![0.5f32; kk * f];
        let mut cc = vec![0f32; m * f];
        let t = cpu();
        // SAFETY: row-major m x kk, kk x f, m x f.
        unsafe {
            <f32 as GemmElement>::mul(
                m,
                kk,
                f,
                a.as_ptr(),
                kk as isize,
                1,
                b.as_ptr(),
                f as isize,
                1,
                cc.as_mut_ptr(),
                f as isize,
                1,
            )
        };
        let tgemm = cpu() - t;
        let gmac = plan.work() as f64 * 1e-9;
        eprintln!(
            "wgrad {name} b8: kernel {:.2} ms ({:.0} GMAC/s), general kernel {:.2} ms, one GEMM {:.2} ms ({:.0} GMAC/s)",
            best * 1e3,
            gmac / best,
            tgen * 1e3,
            tgemm * 1e3,
            gmac / tgemm
        );
    }
}

/// Timing of the depthwise kernel's weight gradient at MobileNetV3-Large's
/// shapes, batch 8, as torch_xla spells it (x `[N, C, H, W]` as `[f, b, 0,
/// 1]`, dy `[N, C, OH, OW]` as `[i, o, 0, 1]`, dW `[KH, KW, 1, C]`; run by
/// hand: `--ignored --nocapture`), thread CPU time.
#[test]
#[ignore]
fn depthwise_wgrad_timing() {
    let cpu = || {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: a valid timespec to fill.
        unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
        ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
    };
    let mut total = 0.0;
    // (C, input size, k, stride)
    for (c, hw, k, s) in [
        (16i64, 112i64, 3i64, 1i64),
        (64, 112, 3, 2),
        (72, 56, 3, 1),
        (72, 56, 5, 2),
        (120, 28, 5, 1),
        (240, 28, 3, 2),
        (200, 14, 3, 1),
        (480, 14, 3, 1),
        (672, 14, 5, 2),
        (960, 7, 5, 1),
    ] {
        let pad = k / 2;
        let oh = (hw + 2 * pad - k) / s + 1;
        let reach = (oh - 1) * s + 1;
        let hi = k - 1 - hw - pad + reach;
        let cfg = ConvConfig {
            groups: 1,
            batch_groups: c,
            lhs: vec![1, 0, 2, 3],
            rhs: vec![0, 1, 2, 3],
            out: vec![2, 3, 0, 1],
            stride: vec![1, 1],
            pad_lo: vec![pad; 2],
            pad_hi: vec![hi; 2],
            lhs_dilation: vec![1, 1],
            rhs_dilation: vec![s, s],
            reverse: vec![false, false],
        };
        let (xd, dyd, wd) = ([8, c, hw, hw], [8, c, oh, oh], [k, k, 1, c]);
        let n = |d: &[i64]| d.iter().product::<i64>() as usize;
        let x = vec![0.5f32; n(&xd)];
        let dy = vec![0.25f32; n(&dyd)];
        let mut y = vec![0f32; n(&wd)];
        let view = |p: *const f32, d: &[i64]| BufferView {
            dtype: XLA_FFI_DataType_F32,
            data: p as *mut f32 as *mut std::ffi::c_void,
            dims: Box::leak(d.to_vec().into_boxed_slice()),
        };
        assert!(DwPlan::new(&cfg, &xd, &dyd, &wd).is_some());
        let mut best = f64::MAX;
        let mut best_elem = f64::MAX;
        for round in 0..14 {
            let elem = round % 2 == 1;
            depthwise::set_dot_element_outer_for_tests(elem);
            let t = cpu();
            // SAFETY: the vectors have these dims.
            unsafe {
                conv_dispatch::<f32>(
                    &cfg,
                    &view(x.as_ptr(), &xd),
                    &view(dy.as_ptr(), &dyd),
                    &view(y.as_mut_ptr(), &wd),
                )
            }
            .unwrap();
            let dt = cpu() - t;
            if elem {
                best_elem = best_elem.min(dt);
            } else {
                best = best.min(dt);
            }
        }
        depthwise::set_dot_element_outer_for_tests(false);
        total += best;
        let mac = (8 * c * oh * oh * k * k) as f64;
        eprintln!(
            "dw wgrad {k}x{k}/{s} {c}@{hw} b8: {:.3} ms ({:.1} GMAC/s); element outer {:.3} ms",
            best * 1e3,
            mac * 1e-9 / best,
            best_elem * 1e3
        );
    }
    eprintln!("total {:.2} ms", total * 1e3);
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
