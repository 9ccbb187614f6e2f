//! Timings run by hand (`cargo test --release -p pjrt-client
//! timing -- --ignored --nocapture`): the depthwise, im2col and
//! weight-gradient kernels against their alternatives.

use super::*;

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
