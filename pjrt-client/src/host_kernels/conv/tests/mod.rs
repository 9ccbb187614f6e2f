//! Unit tests of the host convolution, one file per kernel family; the
//! naive reference convolutions and config builders they share are here.

use super::*;

mod backward;
mod depthwise_kernel;
mod general;
mod onednn;
mod onednn_data_route;
mod timing;

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

/// XLA's convolution semantics for any dimension order (feature groups,
/// or batch groups), in f64 from f32 operands: the result and, per element, the sum
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
    // Batch groups: result feature `o` reads the lhs batch block of its group.
    let bout = ko / c.batch_groups as usize;
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
                                let lb = (o / bout) * at(yd, c.out[0]) + b;
                                let xo = lb * ls[c.lhs[0]]
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

/// The f32 kernel's own loops (oneDNN skipped) against [`naive_any`] on
/// operands of physical dims `xd`, `wd`, `yd` whose data start at `skew`
/// elements into their allocations (not 32-byte aligned), with NaN in the
/// result beforehand.
fn check_f32(c: &ConvConfig, xd: &[i64], wd: &[i64], yd: &[i64], skew: usize) {
    onednn_conv::without_onednn(|| check_f32_any_route(c, xd, wd, yd, skew))
}

/// [`check_f32`] through whatever route the dispatch takes (oneDNN's when
/// the library is loaded and takes the form).
fn check_f32_any_route(c: &ConvConfig, xd: &[i64], wd: &[i64], yd: &[i64], skew: usize) {
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

/// A plain NCHW/OIHW forward convolution, stride 1, padding 1: a form the
/// weight-gradient paths must not take.
fn forward_nchw() -> ConvConfig {
    conv(
        [0, 1, 2, 3],
        [1, 0, 2, 3],
        [0, 1, 2, 3],
        1,
        (1, 1),
        (1, 1),
        false,
    )
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
