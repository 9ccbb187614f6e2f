//! Unit tests of the host convolution rewrite: which convolutions it takes
//! (forward, both backward forms, groups), which it leaves with XLA, that
//! the config operand encodes the attributes, that the output parses back,
//! and a snapshot of the printed form.

use super::*;
use crate::{parse_module, print_module, PrintOptions};

fn rewrite(text: &str) -> (String, HostConvReport) {
    let mut m = parse_module(text).expect("parse");
    let r = rewrite_host_conv(&mut m, &HostConvPolicy::default());
    let out = print_module(&m, &PrintOptions::default());
    parse_module(&out).expect("rewritten module parses back");
    (out, r)
}

/// A ResNet block's three convolutions as torch_xla lowers them: forward
/// (NCHW), input gradient (lhs dilation, HWOI kernel) and weight gradient
/// (`[f, b, 0, 1]x[i, o, 0, 1]->[0, 1, b, f]`, rhs dilation).
const RESNET: &str = r#"func.func public @main(%x: tensor<16x64x8x8xf32>, %w: tensor<128x64x3x3xf32>, %dy: tensor<16x128x4x4xf32>, %wt: tensor<3x3x64x128xf32>) -> (tensor<16x128x4x4xf32>, tensor<16x64x8x8xf32>, tensor<3x3x64x128xf32>) {
  %0 = stablehlo.convolution(%x, %w) dim_numbers = [b, f, 0, 1]x[o, i, 0, 1]->[b, f, 0, 1], window = {stride = [2, 2], pad = [[1, 1], [1, 1]], lhs_dilate = [1, 1], rhs_dilate = [1, 1], reverse = [false, false]} {batch_group_count = 1 : i64, feature_group_count = 1 : i64, precision_config = [#stablehlo<precision DEFAULT>, #stablehlo<precision DEFAULT>]} : (tensor<16x64x8x8xf32>, tensor<128x64x3x3xf32>) -> tensor<16x128x4x4xf32>
  %1 = stablehlo.convolution(%dy, %wt) dim_numbers = [b, f, 0, 1]x[0, 1, o, i]->[b, f, 0, 1], window = {stride = [1, 1], pad = [[1, 2], [1, 2]], lhs_dilate = [2, 2], rhs_dilate = [1, 1], reverse = [false, false]} {batch_group_count = 1 : i64, feature_group_count = 1 : i64} : (tensor<16x128x4x4xf32>, tensor<3x3x64x128xf32>) -> tensor<16x64x8x8xf32>
  %2 = stablehlo.convolution(%x, %dy) dim_numbers = [f, b, 0, 1]x[i, o, 0, 1]->[0, 1, b, f], window = {stride = [1, 1], pad = [[1, 0], [1, 0]], lhs_dilate = [1, 1], rhs_dilate = [2, 2], reverse = [false, false]} {batch_group_count = 1 : i64, feature_group_count = 1 : i64} : (tensor<16x64x8x8xf32>, tensor<16x128x4x4xf32>) -> tensor<3x3x64x128xf32>
  return %0, %1, %2 : tensor<16x128x4x4xf32>, tensor<16x64x8x8xf32>, tensor<3x3x64x128xf32>
}"#;

#[test]
fn resnet_convolutions_become_host_conv_calls() {
    let (out, r) = rewrite(RESNET);
    assert_eq!(
        r,
        HostConvReport {
            rewritten: 3,
            onednn: 0,
            channels_last: 0,
            convolutions: 3
        }
    );
    assert_eq!(out.matches("@hlobridge_conv(").count(), 3, "{out}");
    assert!(!out.contains("stablehlo.convolution"), "{out}");
    assert!(!out.contains("feature_group_count"), "{out}");
    insta::assert_snapshot!(out);
}

/// The config operand of the single convolution in `text`.
fn config_of(text: &str) -> Vec<i64> {
    let (out, r) = rewrite(text);
    assert_eq!(r.rewritten, 1, "{out}");
    let body = out
        .split("dense<")
        .nth(1)
        .and_then(|s| s.split_once('>'))
        .map(|(b, _)| b.to_string())
        .expect("config constant");
    body.trim_matches(['[', ']'])
        .split(',')
        .map(|t| t.trim().parse().unwrap())
        .collect()
}

fn one(lhs: &str, rhs: &str, out: &str, dims: &str, window: &str, attrs: &str) -> String {
    format!(
        "func.func @f(%a: {lhs}, %b: {rhs}) -> {out} {{\n  %0 = stablehlo.convolution(%a, %b) dim_numbers = {dims}, window = {{{window}}} {{{attrs}}} : ({lhs}, {rhs}) -> {out}\n  return %0 : {out}\n}}"
    )
}

#[test]
fn config_carries_every_attribute() {
    // NHWC, grouped, reversed, negative padding, both dilations.
    let text = one(
        "tensor<2x9x10x8xf64>",
        "tensor<3x2x4x6xf64>",
        "tensor<2x3x19x6xf64>",
        "[b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f]",
        "stride = [2, 1], pad = [[2, -1], [0, 1]], lhs_dilate = [1, 2], rhs_dilate = [2, 1], reverse = [true, false]",
        "batch_group_count = 1 : i64, feature_group_count = 2 : i64",
    );
    assert_eq!(
        config_of(&text),
        vec![
            CONFIG_VERSION,
            2,
            2,
            1,
            0,
            3,
            1,
            2, // lhs b, f, 0, 1
            2,
            3,
            0,
            1, // rhs i, o, 0, 1
            0,
            3,
            1,
            2, // out b, f, 0, 1
            2,
            1, // stride
            2,
            0, // pad lo
            -1,
            1, // pad hi
            1,
            2, // lhs dilation
            2,
            1, // rhs dilation
            1,
            0, // reversal
        ]
    );
}

#[test]
fn depthwise_weight_gradient_is_taken() {
    // torch_xla's depthwise weight gradient: x [N, C, H, W] as [f, b, 0, 1],
    // dy as the window, batch_group_count = C.
    let text = one(
        "tensor<16x24x8x8xf32>",
        "tensor<16x24x8x8xf32>",
        "tensor<3x3x1x24xf32>",
        "[f, b, 0, 1]x[i, o, 0, 1]->[0, 1, b, f]",
        "stride = [1, 1], pad = [[1, 1], [1, 1]]",
        "batch_group_count = 24 : i64, feature_group_count = 1 : i64",
    );
    let c = config_of(&text);
    assert_eq!(&c[..4], &[CONFIG_VERSION, 2, 1, 24]);
}

#[test]
fn conv1d_and_defaults_are_taken() {
    let text = "func.func @f(%a: tensor<4x16x50xf32>, %b: tensor<32x16x5xf32>) -> tensor<4x32x46xf32> {\n  %0 = stablehlo.convolution(%a, %b) dim_numbers = [b, f, 0]x[o, i, 0]->[b, f, 0], window = {} : (tensor<4x16x50xf32>, tensor<32x16x5xf32>) -> tensor<4x32x46xf32>\n  return %0 : tensor<4x32x46xf32>\n}";
    assert_eq!(
        config_of(text),
        vec![
            CONFIG_VERSION,
            1,
            1,
            1,
            0,
            1,
            2,
            1,
            0,
            2,
            0,
            1,
            2,
            1,
            0,
            0,
            1,
            1,
            0
        ]
    );
}

#[test]
fn convolutions_the_kernel_does_not_run_stay() {
    let nchw = "[b, f, 0, 1]x[o, i, 0, 1]->[b, f, 0, 1]";
    let cases = [
        // batch and feature groups together
        one(
            "tensor<8x16x6x6xf32>",
            "tensor<16x8x3x3xf32>",
            "tensor<4x16x4x4xf32>",
            "[b, f, 0, 1]x[o, i, 0, 1]->[b, f, 0, 1]",
            "",
            "batch_group_count = 2 : i64, feature_group_count = 2 : i64",
        ),
        // bf16
        one(
            "tensor<8x16x6x6xbf16>",
            "tensor<16x16x3x3xbf16>",
            "tensor<8x16x4x4xbf16>",
            nchw,
            "",
            "",
        ),
        // mixed element types
        one(
            "tensor<8x16x6x6xf32>",
            "tensor<16x16x3x3xf32>",
            "tensor<8x16x4x4xf64>",
            nchw,
            "",
            "",
        ),
        // dynamic batch
        one(
            "tensor<?x16x6x6xf32>",
            "tensor<16x16x3x3xf32>",
            "tensor<?x16x4x4xf32>",
            nchw,
            "",
            "",
        ),
        // result shape not XLA's (inconsistent)
        one(
            "tensor<8x16x6x6xf32>",
            "tensor<16x16x3x3xf32>",
            "tensor<8x16x5x5xf32>",
            nchw,
            "",
            "",
        ),
        // 4 spatial dims
        one(
            "tensor<2x4x5x5x5x5xf32>",
            "tensor<8x4x2x2x2x2xf32>",
            "tensor<2x8x4x4x4x4xf32>",
            "[b, f, 0, 1, 2, 3]x[o, i, 0, 1, 2, 3]->[b, f, 0, 1, 2, 3]",
            "",
            "",
        ),
        // tiny: XLA's inline loop
        one(
            "tensor<1x2x4x4xf32>",
            "tensor<2x2x3x3xf32>",
            "tensor<1x2x2x2xf32>",
            nchw,
            "",
            "",
        ),
    ];
    for text in cases {
        let (printed, r) = rewrite(&text);
        assert_eq!(r.rewritten, 0, "rewrote:\n{printed}");
        assert_eq!(r.convolutions, 1, "{text}");
        assert!(printed.contains("stablehlo.convolution"), "{printed}");
    }
}

#[test]
fn dimension_numbers_are_read_in_every_order() {
    assert_eq!(
        read_conv_dims("stablehlo.conv<[b, f, 0, 1]x[o, i, 0, 1]->[b, f, 0, 1]>"),
        Some([vec![0, 1, 2, 3], vec![1, 0, 2, 3], vec![0, 1, 2, 3]])
    );
    assert_eq!(
        read_conv_dims("stablehlo.conv<[f, b, 0, 1]x[i, o, 0, 1]->[0, 1, b, f]>"),
        Some([vec![1, 0, 2, 3], vec![0, 1, 2, 3], vec![2, 3, 0, 1]])
    );
    assert_eq!(
        read_conv_dims("stablehlo.conv<[b, 1, 0, f]x[1, 0, i, o]->[f, 1, 0, b]>"),
        Some([vec![0, 3, 2, 1], vec![2, 3, 1, 0], vec![3, 0, 2, 1]])
    );
    assert_eq!(
        read_conv_dims("stablehlo.conv<[b, f, 0, 0]x[o, i, 0, 1]->[b, f, 0, 1]>"),
        None
    );
    assert_eq!(
        read_conv_dims("#stablehlo.conv<raw input_batch_dimension = 0>"),
        None
    );
}

/// ResNet-50's 3×3 convolution at batch 8 over 56×56 maps (8·56²·64·64·9
/// ≈ 925M multiply-adds) and a depthwise one of the same size.
const LARGE: &str = r#"func.func public @main(%x: tensor<8x64x56x56xf32>, %w: tensor<64x64x3x3xf32>, %wd: tensor<4096x1x3x3xf32>, %xd: tensor<8x4096x56x56xf32>) -> (tensor<8x64x56x56xf32>, tensor<8x4096x56x56xf32>) {
  %0 = stablehlo.convolution(%x, %w) dim_numbers = [b, f, 0, 1]x[o, i, 0, 1]->[b, f, 0, 1], window = {stride = [1, 1], pad = [[1, 1], [1, 1]], lhs_dilate = [1, 1], rhs_dilate = [1, 1], reverse = [false, false]} {batch_group_count = 1 : i64, feature_group_count = 1 : i64} : (tensor<8x64x56x56xf32>, tensor<64x64x3x3xf32>) -> tensor<8x64x56x56xf32>
  %1 = stablehlo.convolution(%xd, %wd) dim_numbers = [b, f, 0, 1]x[o, i, 0, 1]->[b, f, 0, 1], window = {stride = [1, 1], pad = [[1, 1], [1, 1]], lhs_dilate = [1, 1], rhs_dilate = [1, 1], reverse = [false, false]} {batch_group_count = 1 : i64, feature_group_count = 4096 : i64} : (tensor<8x4096x56x56xf32>, tensor<4096x1x3x3xf32>) -> tensor<8x4096x56x56xf32>
  return %0, %1 : tensor<8x64x56x56xf32>, tensor<8x4096x56x56xf32>
}"#;

#[test]
fn large_ungrouped_convolutions_stay_with_xla_and_depthwise_ones_do_not() {
    let (out, r) = rewrite(LARGE);
    assert_eq!(
        r,
        HostConvReport {
            rewritten: 1,
            onednn: 0,
            channels_last: 0,
            convolutions: 2
        }
    );
    assert_eq!(out.matches("stablehlo.convolution").count(), 1, "{out}");
    assert!(out.contains("feature_group_count = 1 "), "{out}");
    let mut m = parse_module(LARGE).expect("parse");
    let all = rewrite_host_conv(&mut m, &HostConvPolicy::all());
    assert_eq!(all.rewritten, 2, "HostConvPolicy::all() takes every size");
}

/// The oneDNN route on the ResNet block: the forward convolution becomes a
/// `__onednn$convolution` call (its config names NCHW / OIHW, the padding,
/// stride and dilation); the 3×3 input gradient (lhs dilation) and the
/// weight gradient (64 input channels, a window as large as the map) keep
/// the host kernel.
#[test]
fn onednn_takes_the_forward_convolution_of_the_block() {
    let mut m = parse_module(RESNET).expect("parse");
    let policy = HostConvPolicy::default().with_onednn(true);
    let r = rewrite_host_conv(&mut m, &policy);
    let out = print_module(&m, &PrintOptions::default());
    parse_module(&out).expect("rewritten module parses back");
    assert_eq!(
        r,
        HostConvReport {
            rewritten: 3,
            onednn: 1,
            channels_last: 0,
            convolutions: 3
        }
    );
    assert_eq!(out.matches("__onednn$convolution").count(), 1, "{out}");
    assert_eq!(out.matches("@hlobridge_conv(").count(), 2, "{out}");
    let want = r#"{\"onednn_conv_config\": {\"dims\": 4, \"input\": {\"dims\": 4, \"data\": {\"batch_dim\": 0, \"feature_dim\": 1, \"spatial_dims\": [2, 3]}}, \"kernel\": {\"dims\": 4, \"filter\": {\"input_feature_dim\": 1, \"output_feature_dim\": 0, \"spatial_dims\": [2, 3]}}, \"output\": {\"dims\": 4, \"data\": {\"batch_dim\": 0, \"feature_dim\": 1, \"spatial_dims\": [2, 3]}}, \"window\": {\"size\": [3, 3], \"pad_left\": [1, 1], \"pad_right\": [1, 1], \"strides\": [2, 2], \"window_dilations\": [1, 1]}, \"feature_groups\": 1}}"#;
    assert!(out.contains(want), "{out}");
}

/// A 7×7/2 stem on RGB (its weight gradient: 3 input channels, window
/// dilation 2, `[f, b, 0, 1]x[i, o, 0, 1]->[0, 1, b, f]`) and a strided
/// 1×1's input gradient (lhs dilation 2, padding [0, 1]): both oneDNN, the
/// latter as the 1×1 call on the undilated operand and a pad spreading it.
const STEM_AND_SPREAD: &str = r#"func.func public @main(%x: tensor<2x3x32x32xf32>, %dy: tensor<2x64x16x16xf32>, %g: tensor<2x32x8x8xf32>, %w: tensor<1x1x16x32xf32>) -> (tensor<7x7x3x64xf32>, tensor<2x16x16x16xf32>) {
  %0 = stablehlo.convolution(%x, %dy) dim_numbers = [f, b, 0, 1]x[i, o, 0, 1]->[0, 1, b, f], window = {stride = [1, 1], pad = [[3, 2], [3, 2]], lhs_dilate = [1, 1], rhs_dilate = [2, 2], reverse = [false, false]} {batch_group_count = 1 : i64, feature_group_count = 1 : i64} : (tensor<2x3x32x32xf32>, tensor<2x64x16x16xf32>) -> tensor<7x7x3x64xf32>
  %1 = stablehlo.convolution(%g, %w) dim_numbers = [b, f, 0, 1]x[0, 1, o, i]->[b, f, 0, 1], window = {stride = [1, 1], pad = [[0, 1], [0, 1]], lhs_dilate = [2, 2], rhs_dilate = [1, 1], reverse = [false, false]} {batch_group_count = 1 : i64, feature_group_count = 1 : i64} : (tensor<2x32x8x8xf32>, tensor<1x1x16x32xf32>) -> tensor<2x16x16x16xf32>
  return %0, %1 : tensor<7x7x3x64xf32>, tensor<2x16x16x16xf32>
}"#;

#[test]
fn onednn_takes_stem_weight_gradients_and_spreads_strided_1x1_input_gradients() {
    let mut m = parse_module(STEM_AND_SPREAD).expect("parse");
    let policy = HostConvPolicy::default().with_onednn(true);
    let r = rewrite_host_conv(&mut m, &policy);
    let out = print_module(&m, &PrintOptions::default());
    parse_module(&out).expect("rewritten module parses back");
    assert_eq!(
        r,
        HostConvReport {
            rewritten: 2,
            onednn: 2,
            channels_last: 0,
            convolutions: 2
        }
    );
    assert!(!out.contains("stablehlo.convolution"), "{out}");
    assert!(
        out.contains("low = [0, 0, 0, 0], high = [0, 0, 1, 1], interior = [0, 0, 1, 1]"),
        "{out}"
    );
    assert!(out.contains("-> tensor<2x16x8x8xf32>"), "{out}");
    insta::assert_snapshot!(out);
}

/// Which backward and depthwise forms oneDNN leaves: a weight gradient
/// with many input channels or window dilation 4, a 3×3 input gradient
/// with lhs dilation, a depthwise 3×3 (a depthwise 7×7 is taken).
#[test]
fn onednn_leaves_wide_weight_gradients_and_small_depthwise() {
    let policy = HostConvPolicy::default().with_onednn(true);
    let route = |text: &str| {
        let mut m = parse_module(text).expect("parse");
        rewrite_host_conv(&mut m, &policy).onednn
    };
    let wgrad = |c: i64, s: i64, k: i64| {
        let o = 32 / s;
        one(
            &format!("tensor<2x{c}x32x32xf32>"),
            &format!("tensor<2x16x{o}x{o}xf32>"),
            &format!("tensor<{k}x{k}x{c}x16xf32>"),
            "[f, b, 0, 1]x[i, o, 0, 1]->[0, 1, b, f]",
            &format!(
                "stride = [1, 1], pad = [[0, {hi}], [0, {hi}]], rhs_dilate = [{s}, {s}]",
                hi = k - 32 + (o - 1) * s
            ),
            "",
        )
    };
    assert_eq!(route(&wgrad(3, 2, 3)), 1);
    assert_eq!(route(&wgrad(8, 2, 3)), 0);
    assert_eq!(route(&wgrad(3, 4, 4)), 0);
    let igrad = one(
        "tensor<2x32x8x8xf32>",
        "tensor<3x3x16x32xf32>",
        "tensor<2x16x16x16xf32>",
        "[b, f, 0, 1]x[0, 1, o, i]->[b, f, 0, 1]",
        "stride = [1, 1], pad = [[1, 2], [1, 2]], lhs_dilate = [2, 2]",
        "",
    );
    assert_eq!(route(&igrad), 0);
    let dw = |k: i64| {
        one(
            "tensor<2x32x16x16xf32>",
            &format!("tensor<32x1x{k}x{k}xf32>"),
            "tensor<2x32x16x16xf32>",
            "[b, f, 0, 1]x[o, i, 0, 1]->[b, f, 0, 1]",
            &format!("stride = [1, 1], pad = [[{p}, {p}], [{p}, {p}]]", p = k / 2),
            "feature_group_count = 32 : i64",
        )
    };
    assert_eq!(route(&dw(3)), 0);
    assert_eq!(route(&dw(7)), 1);
}

/// f64, depthwise and reversed convolutions are not oneDNN's; grouped
/// (several input features per group) ones are.
#[test]
fn onednn_leaves_f64_depthwise_and_reversed() {
    let policy = HostConvPolicy::default().with_onednn(true);
    let route = |text: &str| {
        let mut m = parse_module(text).expect("parse");
        rewrite_host_conv(&mut m, &policy)
    };
    let conv = |ty: &str, c: i64, wi: i64, groups: i64, rev: &str| {
        format!(
            r#"func.func public @main(%x: tensor<2x{c}x8x8x{ty}>, %w: tensor<16x{wi}x3x3x{ty}>) -> tensor<2x16x8x8x{ty}> {{
  %0 = stablehlo.convolution(%x, %w) dim_numbers = [b, f, 0, 1]x[o, i, 0, 1]->[b, f, 0, 1], window = {{stride = [1, 1], pad = [[1, 1], [1, 1]], reverse = [{rev}, false]}} {{batch_group_count = 1 : i64, feature_group_count = {groups} : i64}} : (tensor<2x{c}x8x8x{ty}>, tensor<16x{wi}x3x3x{ty}>) -> tensor<2x16x8x8x{ty}>
  return %0 : tensor<2x16x8x8x{ty}>
}}"#
        )
    };
    assert_eq!(route(&conv("f32", 16, 16, 1, "false")).onednn, 1);
    assert_eq!(route(&conv("f32", 16, 4, 4, "false")).onednn, 1);
    for text in [
        conv("f64", 16, 16, 1, "false"),
        conv("f32", 16, 1, 16, "false"),
        conv("f32", 16, 16, 1, "true"),
    ] {
        let r = route(&text);
        assert_eq!((r.rewritten, r.onednn), (1, 0), "{text}");
    }
}

/// A 1×1 convolution's weight gradient over 28×28 maps (torch_xla's
/// `[f, b, 0, 1]x[i, o, 0, 1]->[0, 1, b, f]`) becomes a per-image
/// `dot_general` summed by a product with ones; over 7×7 maps it does not.
#[test]
fn large_map_1x1_weight_gradients_become_batched_products() {
    let policy = HostConvPolicy::default().with_onednn(true);
    let wgrad = |hw: i64| {
        one(
            &format!("tensor<2x16x{hw}x{hw}xf32>"),
            &format!("tensor<2x32x{hw}x{hw}xf32>"),
            "tensor<1x1x16x32xf32>",
            "[f, b, 0, 1]x[i, o, 0, 1]->[0, 1, b, f]",
            "stride = [1, 1], pad = [[0, 0], [0, 0]]",
            "",
        )
    };
    let mut m = parse_module(&wgrad(28)).expect("parse");
    let r = rewrite_host_conv(&mut m, &policy);
    let out = print_module(&m, &PrintOptions::default());
    parse_module(&out).expect("rewritten module parses back");
    assert_eq!((r.rewritten, r.onednn), (1, 0), "{out}");
    assert!(!out.contains("convolution"), "{out}");
    assert!(
        out.contains("stablehlo.dot_general %a, %b, batching_dims = [0] x [0], contracting_dims = [2, 3] x [2, 3]"),
        "{out}"
    );
    assert!(out.contains("-> tensor<2x16x32xf32>"), "{out}");
    assert!(out.contains("dense<1.000000e+00> : tensor<2xf32>"), "{out}");
    assert!(out.contains("stablehlo.reshape"), "{out}");
    let mut m = parse_module(&wgrad(7)).expect("parse");
    let r = rewrite_host_conv(&mut m, &policy);
    let out = print_module(&m, &PrintOptions::default());
    assert!(!out.contains("dot_general"), "{out}");
    assert_eq!(r.convolutions, 1);
    let mut m = parse_module(&wgrad(28)).expect("parse");
    let r = rewrite_host_conv(&mut m, &HostConvPolicy::default());
    let out = print_module(&m, &PrintOptions::default());
    assert!(
        !out.contains("dot_general"),
        "without the oneDNN route: {out} {r:?}"
    );
}

/// With channels-last activations (rewrite version 6): forward calls pin
/// their input and result channels-last and the kernel row-major, and the
/// host-kernel calls left can then be pinned row-major; a program with
/// backward convolutions (a training step) pins nothing; depthwise 3×3
/// forward convolutions are taken too.
#[test]
fn onednn_channels_last_pins_activation_layouts() {
    let policy = HostConvPolicy::default()
        .with_onednn(true)
        .with_onednn_channels_last(true);
    let run = |text: &str| {
        let mut m = parse_module(text).expect("parse");
        let r = rewrite_host_conv(&mut m, &policy);
        let out = print_module(&m, &PrintOptions::default());
        parse_module(&out).expect("rewritten module parses back");
        (out, r)
    };
    let nhwc = "operand_layouts = [dense<[1, 3, 2, 0]> : tensor<4xindex>, dense<[3, 2, 1, 0]> : tensor<4xindex>], result_layouts = [dense<[1, 3, 2, 0]> : tensor<4xindex>]";
    // A forward f32 convolution (oneDNN) next to an f64 one (host kernel).
    let forward = r#"func.func public @main(%x: tensor<16x64x8x8xf32>, %w: tensor<128x64x3x3xf32>, %a: tensor<2x16x8x8xf64>, %b: tensor<16x16x3x3xf64>) -> (tensor<16x128x4x4xf32>, tensor<2x16x8x8xf64>) {
  %0 = stablehlo.convolution(%x, %w) dim_numbers = [b, f, 0, 1]x[o, i, 0, 1]->[b, f, 0, 1], window = {stride = [2, 2], pad = [[1, 1], [1, 1]]} {batch_group_count = 1 : i64, feature_group_count = 1 : i64} : (tensor<16x64x8x8xf32>, tensor<128x64x3x3xf32>) -> tensor<16x128x4x4xf32>
  %1 = stablehlo.convolution(%a, %b) dim_numbers = [b, f, 0, 1]x[o, i, 0, 1]->[b, f, 0, 1], window = {stride = [1, 1], pad = [[1, 1], [1, 1]]} {batch_group_count = 1 : i64, feature_group_count = 1 : i64} : (tensor<2x16x8x8xf64>, tensor<16x16x3x3xf64>) -> tensor<2x16x8x8xf64>
  return %0, %1 : tensor<16x128x4x4xf32>, tensor<2x16x8x8xf64>
}"#;
    let (out, r) = run(forward);
    assert_eq!((r.rewritten, r.onednn, r.channels_last), (2, 1, 1), "{out}");
    assert_eq!(out.matches(nhwc).count(), 1, "{out}");
    let mut m = parse_module(&out).expect("parse");
    assert_eq!(pin_row_major_host_calls(&mut m), 1);
    assert_eq!(pin_row_major_host_calls(&mut m), 0, "pinned once");
    let pinned = print_module(&m, &PrintOptions::default());
    parse_module(&pinned).expect("pinned module parses back");
    let row_major = "operand_layouts = [dense<[3, 2, 1, 0]> : tensor<4xindex>, dense<[3, 2, 1, 0]> : tensor<4xindex>, dense<[0]> : tensor<1xindex>], result_layouts = [dense<[3, 2, 1, 0]> : tensor<4xindex>]";
    assert_eq!(pinned.matches(row_major).count(), 1, "{pinned}");
    assert_eq!(pinned.matches(nhwc).count(), 1, "{pinned}");
    // Training-step programs (weight gradients, lhs dilation) pin nothing.
    for text in [RESNET, STEM_AND_SPREAD] {
        let (out, r) = run(text);
        assert!(r.onednn > 0 && r.channels_last == 0, "{out}");
        assert!(!out.contains("operand_layouts"), "{out}");
    }
    // Nor does the forward half of one: two convolutions whose inputs the
    // program also returns (the activations its backward half reads).
    let forward_half = r#"func.func public @main(%x: tensor<16x64x8x8xf32>, %w: tensor<64x64x3x3xf32>, %v: tensor<64x64x3x3xf32>) -> (tensor<16x64x8x8xf32>, tensor<16x64x8x8xf32>, tensor<16x64x8x8xf32>) {
  %0 = stablehlo.convolution(%x, %w) dim_numbers = [b, f, 0, 1]x[o, i, 0, 1]->[b, f, 0, 1], window = {stride = [1, 1], pad = [[1, 1], [1, 1]]} {batch_group_count = 1 : i64, feature_group_count = 1 : i64} : (tensor<16x64x8x8xf32>, tensor<64x64x3x3xf32>) -> tensor<16x64x8x8xf32>
  %z = stablehlo.constant dense<0.000000e+00> : tensor<16x64x8x8xf32>
  %1 = stablehlo.maximum %0, %z : tensor<16x64x8x8xf32>
  %2 = stablehlo.convolution(%1, %v) dim_numbers = [b, f, 0, 1]x[o, i, 0, 1]->[b, f, 0, 1], window = {stride = [1, 1], pad = [[1, 1], [1, 1]]} {batch_group_count = 1 : i64, feature_group_count = 1 : i64} : (tensor<16x64x8x8xf32>, tensor<64x64x3x3xf32>) -> tensor<16x64x8x8xf32>
  return %2, %1, %x : tensor<16x64x8x8xf32>, tensor<16x64x8x8xf32>, tensor<16x64x8x8xf32>
}"#;
    let (out, r) = run(forward_half);
    assert!(r.onednn == 2 && r.channels_last == 0, "{out}");
    // Returning only one of them is still inference (a feature map).
    let (out, r) = run(&forward_half.replace("return %2, %1, %x", "return %2, %1, %1"));
    assert!(r.onednn == 2 && r.channels_last == 2, "{out}");
    // Channels-last for other dimension orders: NHWC data, 1-D.
    let nhwc_data = one(
        "tensor<2x8x8x16xf32>",
        "tensor<3x3x16x32xf32>",
        "tensor<2x8x8x32xf32>",
        "[b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f]",
        "stride = [1, 1], pad = [[1, 1], [1, 1]]",
        "",
    );
    let (out, _) = run(&nhwc_data);
    assert!(
        out.contains("operand_layouts = [dense<[3, 2, 1, 0]> : tensor<4xindex>, dense<[3, 2, 1, 0]> : tensor<4xindex>], result_layouts = [dense<[3, 2, 1, 0]> : tensor<4xindex>]"),
        "{out}"
    );
    let conv1d = one(
        "tensor<2x16x32xf32>",
        "tensor<8x16x3xf32>",
        "tensor<2x8x32xf32>",
        "[b, f, 0]x[o, i, 0]->[b, f, 0]",
        "stride = [1], pad = [[1, 1]]",
        "",
    );
    let (out, _) = run(&conv1d);
    assert!(
        out.contains("operand_layouts = [dense<[1, 2, 0]> : tensor<3xindex>, dense<[2, 1, 0]> : tensor<3xindex>], result_layouts = [dense<[1, 2, 0]> : tensor<3xindex>]"),
        "{out}"
    );
    let dw3 = one(
        "tensor<2x32x16x16xf32>",
        "tensor<32x1x3x3xf32>",
        "tensor<2x32x8x8xf32>",
        "[b, f, 0, 1]x[o, i, 0, 1]->[b, f, 0, 1]",
        "stride = [2, 2], pad = [[1, 1], [1, 1]]",
        "feature_group_count = 32 : i64",
    );
    let (out, r) = run(&dw3);
    assert_eq!(r.onednn, 1, "{out}");
    assert!(out.contains(nhwc), "{out}");
}

/// A ResNet bottleneck's tail at inference as the bridge captures it: a 1×1
/// convolution, eval BatchNorm decomposed (`(y - mean) * rsqrt(var + eps) *
/// gamma + beta`), the residual add and ReLU; then a convolution with a bias
/// add read only by a third convolution (the bias folds too).
const BN_BLOCK: &str = r#"func.func public @main(%x: tensor<2x16x8x8xf32>, %w: tensor<32x16x1x1xf32>, %m: tensor<32xf32>, %v: tensor<32xf32>, %g: tensor<32xf32>, %b: tensor<32xf32>, %r: tensor<2x32x8x8xf32>, %w2: tensor<32x32x3x3xf32>) -> (tensor<2x32x8x8xf32>, tensor<2x32x8x8xf32>) {
  %0 = stablehlo.convolution(%x, %w) dim_numbers = [b, f, 0, 1]x[o, i, 0, 1]->[b, f, 0, 1], window = {stride = [1, 1]} {batch_group_count = 1 : i64, feature_group_count = 1 : i64} : (tensor<2x16x8x8xf32>, tensor<32x16x1x1xf32>) -> tensor<2x32x8x8xf32>
  %mb = stablehlo.broadcast_in_dim %m, dims = [1] : (tensor<32xf32>) -> tensor<2x32x8x8xf32>
  %1 = stablehlo.subtract %0, %mb : tensor<2x32x8x8xf32>
  %eps = stablehlo.constant dense<9.99999974E-6> : tensor<32xf32>
  %ve = stablehlo.add %v, %eps : tensor<32xf32>
  %rs = stablehlo.rsqrt %ve : tensor<32xf32>
  %rb = stablehlo.broadcast_in_dim %rs, dims = [1] : (tensor<32xf32>) -> tensor<2x32x8x8xf32>
  %2 = stablehlo.multiply %1, %rb : tensor<2x32x8x8xf32>
  %gb = stablehlo.broadcast_in_dim %g, dims = [1] : (tensor<32xf32>) -> tensor<2x32x8x8xf32>
  %3 = stablehlo.multiply %gb, %2 : tensor<2x32x8x8xf32>
  %bb = stablehlo.broadcast_in_dim %b, dims = [1] : (tensor<32xf32>) -> tensor<2x32x8x8xf32>
  %4 = stablehlo.add %3, %bb : tensor<2x32x8x8xf32>
  %5 = stablehlo.add %4, %r : tensor<2x32x8x8xf32>
  %z = stablehlo.constant dense<0.000000e+00> : tensor<f32>
  %zb = stablehlo.broadcast_in_dim %z, dims = [] : (tensor<f32>) -> tensor<2x32x8x8xf32>
  %6 = stablehlo.maximum %5, %zb : tensor<2x32x8x8xf32>
  %7 = stablehlo.convolution(%6, %w2) dim_numbers = [b, f, 0, 1]x[o, i, 0, 1]->[b, f, 0, 1], window = {stride = [1, 1], pad = [[1, 1], [1, 1]]} {batch_group_count = 1 : i64, feature_group_count = 1 : i64} : (tensor<2x32x8x8xf32>, tensor<32x32x3x3xf32>) -> tensor<2x32x8x8xf32>
  %8 = stablehlo.add %7, %bb : tensor<2x32x8x8xf32>
  %9 = stablehlo.convolution(%8, %w2) dim_numbers = [b, f, 0, 1]x[o, i, 0, 1]->[b, f, 0, 1], window = {stride = [1, 1], pad = [[1, 1], [1, 1]]} {batch_group_count = 1 : i64, feature_group_count = 1 : i64} : (tensor<2x32x8x8xf32>, tensor<32x32x3x3xf32>) -> tensor<2x32x8x8xf32>
  return %6, %9 : tensor<2x32x8x8xf32>, tensor<2x32x8x8xf32>
}"#;

/// Channels-last calls fold their epilogue into oneDNN post-ops (rewrite
/// version 7): BatchNorm into scaled weights and a bias, the residual add
/// as a binary add, ReLU; a bias add before an XLA elementwise op stays;
/// plain (v5) calls and `with_onednn_fuse(false)` (the default) fold
/// nothing.
#[test]
fn onednn_channels_last_calls_fold_their_epilogues() {
    let run_on = |text: &str, policy: HostConvPolicy| {
        let mut m = parse_module(text).expect("parse");
        let r = rewrite_host_conv(&mut m, &policy);
        let out = print_module(&m, &PrintOptions::default());
        parse_module(&out).expect("rewritten module parses back");
        (out, r)
    };
    let run = |policy| run_on(BN_BLOCK, policy);
    let on = HostConvPolicy::default()
        .with_onednn(true)
        .with_onednn_channels_last(true)
        .with_onednn_fuse(true);
    let (out, r) = run(on);
    assert_eq!((r.onednn, r.channels_last), (3, 3), "{out}");
    assert!(
        out.contains(r#"\"fusions\": {\"ops\": [\"BIAS\", \"BINARY_ADD\", \"RELU\"]}"#),
        "{out}"
    );
    assert!(
        out.contains(r#"\"fusions\": {\"ops\": [\"BIAS\"]}"#),
        "{out}"
    );
    // The activation-sized chains are gone (the per-channel vectors'
    // products and the weights' scaling are what multiplies remain).
    assert!(!out.contains("stablehlo.subtract"), "{out}");
    assert!(!out.contains("stablehlo.maximum"), "{out}");
    assert_eq!(out.matches("stablehlo.multiply").count(), 4, "{out}");
    assert_eq!(out.matches("fusions").count(), 2, "{out}");
    // Fused operands' layouts: bias `[0]`, residual channels-last.
    assert!(out.contains("operand_layouts = [dense<[1, 3, 2, 0]> : tensor<4xindex>, dense<[3, 2, 1, 0]> : tensor<4xindex>, dense<0> : tensor<1xindex>, dense<[1, 3, 2, 0]> : tensor<4xindex>]")
        || out.contains("operand_layouts = [dense<[1, 3, 2, 0]> : tensor<4xindex>, dense<[3, 2, 1, 0]> : tensor<4xindex>, dense<[0]> : tensor<1xindex>, dense<[1, 3, 2, 0]> : tensor<4xindex>]"), "{out}");
    insta::assert_snapshot!(out);
    // A bias add before an XLA elementwise op stays (XLA fuses it there).
    let before_xla = BN_BLOCK.replace(
        "%9 = stablehlo.convolution(%8, %w2) dim_numbers = [b, f, 0, 1]x[o, i, 0, 1]->[b, f, 0, 1], window = {stride = [1, 1], pad = [[1, 1], [1, 1]]} {batch_group_count = 1 : i64, feature_group_count = 1 : i64} : (tensor<2x32x8x8xf32>, tensor<32x32x3x3xf32>) -> tensor<2x32x8x8xf32>",
        "%9 = stablehlo.multiply %8, %8 : tensor<2x32x8x8xf32>",
    );
    let (out, _) = run_on(&before_xla, on);
    assert_eq!(out.matches("fusions").count(), 1, "{out}");
    assert!(out.contains(", %bb : tensor<2x32x8x8xf32>"), "{out}");
    for off in [
        on.with_onednn_fuse(false),
        on.with_onednn_channels_last(false),
    ] {
        let (out, _) = run(off);
        assert!(!out.contains("fusions"), "{out}");
        assert!(out.contains("stablehlo.maximum"), "{out}");
    }
}
