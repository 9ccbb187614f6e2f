//! Unit tests of the collectives rewrite: torch_xla's all-reduce becomes the
//! global-device-id form (snapshots), the output parses back and prints the
//! same, global forms are kept, and everything else is a named error.

use super::*;
use crate::{parse_module, print_module, PrintOptions};

fn target(n: u32) -> CollectiveTarget {
    CollectiveTarget {
        num_devices: n,
        ..Default::default()
    }
}

/// Rewrites `text`, checks parse -> print -> parse -> print is a fixed point.
fn rewrite(text: &str, t: &CollectiveTarget) -> (String, CollectivesReport) {
    let (out, r) = rewrite_collectives_text(text, t).expect("rewrite");
    let again = print_module(
        &parse_module(&out).expect("rewritten module parses back"),
        &PrintOptions::default(),
    );
    assert_eq!(out, again, "printer round trip");
    (out, r)
}

/// What torch_xla 2.9 emits for `funcol.all_reduce(x @ w, "sum", WORLD) * 2`.
const TORCH_XLA_SUM: &str = r#"module @IrToHlo.19 attributes {mhlo.cross_program_prefetches = [], mhlo.input_output_alias = [], mhlo.is_dynamic = false, mhlo.use_auto_spmd_partitioning = false} {
  func.func @main(%arg0: tensor<f32>, %arg1: tensor<3x5xf32>, %arg2: tensor<4x3xf32>) -> tensor<4x5xf32> {
    %cst = stablehlo.constant dense<2.000000e+00> : tensor<4x5xf32>
    %0 = stablehlo.dot_general %arg2, %arg1, contracting_dims = [1] x [0], precision = [DEFAULT, DEFAULT] : (tensor<4x3xf32>, tensor<3x5xf32>) -> tensor<4x5xf32>
    %1:2 = "stablehlo.all_reduce"(%0, %arg0) <{replica_groups = dense<> : tensor<0x0xi64>}> ({
    ^bb0(%arg3: tensor<f32>, %arg4: tensor<f32>):
      %3 = stablehlo.add %arg3, %arg4 : tensor<f32>
      stablehlo.return %3 : tensor<f32>
    }) : (tensor<4x5xf32>, tensor<f32>) -> (tensor<4x5xf32>, tensor<f32>)
    %2 = stablehlo.multiply %1#0, %cst : tensor<4x5xf32>
    return %2 : tensor<4x5xf32>
  }
}"#;

/// Two chained torch_xla all-reduces (max, then min on the first's token).
const TORCH_XLA_CHAIN: &str = r#"func.func @main(%arg0: tensor<f32>, %arg1: tensor<4x3xf32>) -> (tensor<4x3xf32>, tensor<4x3xf32>, tensor<f32>) {
  %6:2 = "stablehlo.all_reduce"(%arg1, %arg0) <{replica_groups = dense<> : tensor<0x0xi64>}> ({
  ^bb0(%arg2: tensor<f32>, %arg3: tensor<f32>):
    %9 = stablehlo.maximum %arg2, %arg3 : tensor<f32>
    stablehlo.return %9 : tensor<f32>
  }) : (tensor<4x3xf32>, tensor<f32>) -> (tensor<4x3xf32>, tensor<f32>)
  %7:2 = "stablehlo.all_reduce"(%arg1, %6#1) <{replica_groups = dense<> : tensor<0x0xi64>}> ({
  ^bb0(%arg2: tensor<f32>, %arg3: tensor<f32>):
    %9 = stablehlo.minimum %arg2, %arg3 : tensor<f32>
    stablehlo.return %9 : tensor<f32>
  }) : (tensor<4x3xf32>, tensor<f32>) -> (tensor<4x3xf32>, tensor<f32>)
  return %6#0, %7#0, %7#1 : tensor<4x3xf32>, tensor<4x3xf32>, tensor<f32>
}"#;

/// What JAX emits for `psum` over 4 devices inside `shard_map`.
const JAX_PSUM: &str = r#"func.func @main(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "stablehlo.all_reduce"(%arg0) <{channel_handle = #stablehlo.channel_handle<handle = 7, type = 1>, replica_groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>, use_global_device_ids}> ({
  ^bb0(%a: tensor<f32>, %b: tensor<f32>):
    %1 = stablehlo.add %a, %b : tensor<f32>
    stablehlo.return %1 : tensor<f32>
  }) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}"#;

/// torch_xla's all_gather for a group of ONE rank (output shape = input's).
const TORCH_XLA_GATHER: &str = r#"func.func @main(%arg0: tensor<4x3xf32>) -> tensor<4x3xf32> {
  %2 = "stablehlo.all_gather"(%arg0) <{all_gather_dim = 0 : i64, replica_groups = dense<0> : tensor<1x1xi64>}> : (tensor<4x3xf32>) -> tensor<4x3xf32>
  return %2 : tensor<4x3xf32>
}"#;

/// torch_xla's reduce_scatter for a group of one rank, global ids.
const TORCH_XLA_SCATTER: &str = r#"func.func @main(%arg1: tensor<4x3xf32>) -> tensor<4x3xf32> {
  %8 = "stablehlo.reduce_scatter"(%arg1) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 0>, replica_groups = dense<0> : tensor<1x1xi64>, scatter_dimension = 0 : i64, use_global_device_ids}> ({
  ^bb0(%arg2: tensor<f32>, %arg3: tensor<f32>):
    %9 = stablehlo.add %arg2, %arg3 : tensor<f32>
    stablehlo.return %9 : tensor<f32>
  }) : (tensor<4x3xf32>) -> tensor<4x3xf32>
  return %8 : tensor<4x3xf32>
}"#;

#[test]
fn torch_xla_all_reduce_becomes_global_form() {
    let (out, r) = rewrite(TORCH_XLA_SUM, &target(4));
    assert_eq!(r.rewritten, 1);
    assert_eq!(r.tokens_dropped, 1);
    assert_eq!(r.kept, 0);
    assert_eq!(r.channels, vec![1]);
    assert!(out.contains("use_global_device_ids"), "{out}");
    assert!(
        out.contains("dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>"),
        "{out}"
    );
    assert!(
        out.contains("#stablehlo.channel_handle<handle = 1, type = 1>"),
        "{out}"
    );
    assert!(
        out.contains("(tensor<4x5xf32>) -> tensor<4x5xf32>"),
        "{out}"
    );
    insta::assert_snapshot!(out);
}

#[test]
fn chained_tokens_pass_through() {
    let t = CollectiveTarget {
        num_devices: 2,
        groups: None,
        first_channel: Some(100),
    };
    let (out, r) = rewrite(TORCH_XLA_CHAIN, &t);
    assert_eq!(r.rewritten, 2);
    assert_eq!(r.tokens_dropped, 2);
    assert_eq!(r.channels, vec![100, 101]);
    // The second all-reduce's token result was returned: the token itself is.
    assert!(!out.contains("#1"), "{out}");
    insta::assert_snapshot!(out);
}

#[test]
fn global_form_is_kept_and_new_channels_follow_it() {
    let (out, r) = rewrite(JAX_PSUM, &target(4));
    assert_eq!(
        r,
        CollectivesReport {
            kept: 1,
            ..Default::default()
        }
    );
    assert_eq!(
        out,
        print_module(&parse_module(JAX_PSUM).unwrap(), &PrintOptions::default())
    );
    // A module with both: the torch all-reduce gets the next free channel.
    let both = JAX_PSUM.replace(
        "  return %0 : tensor<4xf32>",
        r#"  %t = stablehlo.constant dense<0.0> : tensor<f32>
  %2:2 = "stablehlo.all_reduce"(%0, %t) <{replica_groups = dense<> : tensor<0x0xi64>}> ({
  ^bb0(%a: tensor<f32>, %b: tensor<f32>):
    %1 = stablehlo.add %a, %b : tensor<f32>
    stablehlo.return %1 : tensor<f32>
  }) : (tensor<4xf32>, tensor<f32>) -> (tensor<4xf32>, tensor<f32>)
  return %2#0 : tensor<4xf32>"#,
    );
    let (_, r) = rewrite(&both, &target(4));
    assert_eq!((r.kept, r.rewritten, r.channels.clone()), (1, 1, vec![8]));
}

#[test]
fn no_collectives_is_identity() {
    let text = "func.func @f(%a: tensor<2xf32>) -> tensor<2xf32> {\n  return %a : tensor<2xf32>\n}";
    let (out, r) = rewrite_collectives_text(text, &target(4)).unwrap();
    assert_eq!(out, text);
    assert_eq!(r, CollectivesReport::default());
}

fn err(text: &str, n: u32) -> String {
    match rewrite_collectives_text(text, &target(n)) {
        Err(e @ Error::Collective(_)) => e.to_string(),
        other => panic!("expected a collective error, got {other:?}"),
    }
}

#[test]
fn unrewritable_collectives_are_named_errors() {
    let e = err(TORCH_XLA_GATHER, 4);
    assert!(e.contains("all_gather") && e.contains("4 ranks"), "{e}");
    let e = err(TORCH_XLA_SCATTER, 4);
    assert!(e.contains("reduce_scatter") && e.contains("[[0]]"), "{e}");
    // The JAX psum over 4 devices does not fit a program on 2.
    let e = err(JAX_PSUM, 2);
    assert!(e.contains("all_reduce") && e.contains("2 devices"), "{e}");
    // Explicit non-global groups: ambiguous.
    let grouped = TORCH_XLA_SUM.replace(
        "dense<> : tensor<0x0xi64>",
        "dense<[[0, 1]]> : tensor<1x2xi64>",
    );
    let e = err(&grouped, 2);
    assert!(e.contains("cannot tell"), "{e}");
    insta::assert_snapshot!(err(TORCH_XLA_GATHER, 4));
    assert!(matches!(
        rewrite_collectives_text(TORCH_XLA_SUM, &target(0)),
        Err(Error::Collective(_))
    ));
}

#[test]
fn reduce_scatter_over_all_devices_is_kept() {
    let text = TORCH_XLA_SCATTER
        .replace(
            "dense<0> : tensor<1x1xi64>",
            "dense<[[0, 1]]> : tensor<1x2xi64>",
        )
        .replace(
            "tensor<4x3xf32>) -> tensor<4x3xf32>\n  return",
            "tensor<4x3xf32>) -> tensor<2x3xf32>\n  return",
        )
        .replace("-> tensor<4x3xf32> {", "-> tensor<2x3xf32> {")
        .replace("return %8 : tensor<4x3xf32>", "return %8 : tensor<2x3xf32>");
    let (_, r) = rewrite(&text, &target(2));
    assert_eq!(r.kept, 1);
}

#[test]
fn explicit_groups_for_one_mesh_axis() {
    // Mesh (dp=2, tp=2): the tensor-parallel axis groups [[0, 1], [2, 3]].
    let t = CollectiveTarget {
        num_devices: 4,
        groups: Some(vec![vec![0, 1], vec![2, 3]]),
        first_channel: Some(5),
    };
    let (out, r) = rewrite(TORCH_XLA_SUM, &t);
    assert_eq!((r.rewritten, r.channels.clone()), (1, vec![5]));
    assert!(
        out.contains("replica_groups = dense<[[0, 1], [2, 3]]> : tensor<2x2xi64>"),
        "{out}"
    );
    for bad in [
        vec![vec![0, 1], vec![2]],
        vec![vec![0, 1], vec![1, 2]],
        vec![vec![0, 1]],
        vec![vec![0, 1], vec![2, 4]],
        vec![],
    ] {
        let t = CollectiveTarget {
            num_devices: 4,
            groups: Some(bad.clone()),
            first_channel: None,
        };
        match rewrite_collectives_text(TORCH_XLA_SUM, &t) {
            Err(Error::Collective(msg)) => assert!(msg.contains("do not split"), "{msg}"),
            other => panic!("{bad:?}: {other:?}"),
        }
    }
}
