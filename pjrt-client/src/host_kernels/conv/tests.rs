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
    // SAFETY: the vectors have the planned dims.
    unsafe {
        conv_typed::<f64>(
            &plan,
            &view(x.as_ptr() as *mut f64, xs),
            &view(w.as_ptr() as *mut f64, ws),
            &view(y.as_mut_ptr(), ys),
        )
    }
    .unwrap();
    let want = naive(c, &x, xd, &w, wd, yd);
    for (i, (a, b)) in y.iter().zip(&want).enumerate() {
        assert!((a - b).abs() < 1e-9, "{c:?} element {i}: {a} vs {b}");
    }
}

#[test]
fn matches_a_naive_convolution() {
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
