//! Round trips of the StableHLO control-flow, contraction and misc custom
//! formats (`reduce`, `while`, `dot_general`, `convolution`, `custom_call`,
//! ...). Expected texts are what MLIR (jaxlib 0.10.2) prints.

use hlobridge::{parse_module, print_module, PrintOptions};

fn fmt(src: &str) -> String {
    let m = parse_module(src).unwrap_or_else(|e| panic!("parse failed: {e}\n{src}"));
    print_module(&m, &PrintOptions::default())
}

fn fmt_generic(src: &str) -> String {
    let m = parse_module(src).unwrap_or_else(|e| panic!("parse failed: {e}\n{src}"));
    let opts = PrintOptions {
        generic: true,
        ..PrintOptions::default()
    };
    print_module(&m, &opts)
}

/// `src` prints back unchanged, and so does its generic form.
fn assert_round_trip(src: &str) {
    let out = fmt(src);
    assert_eq!(out, src);
    let generic = fmt_generic(src);
    assert_eq!(fmt(&generic), src, "via generic:\n{generic}");
}

fn wrap(body: &str, args: &str) -> String {
    format!("func.func @main({args}) {{\n{body}  return\n}}\n")
}

#[test]
fn reduce_compact_and_region_forms() {
    let args = "%a: tensor<2x3xf32>, %c: tensor<f32>, %ai: tensor<2x3xi32>, %ci: tensor<i32>";
    let body = "  %0 = stablehlo.reduce(%a init: %c) applies stablehlo.add across dimensions = [1] : (tensor<2x3xf32>, tensor<f32>) -> tensor<2xf32>
  %1 = stablehlo.reduce(%a init: %c) applies stablehlo.maximum across dimensions = [] {foo = \"bar\"} : (tensor<2x3xf32>, tensor<f32>) -> tensor<2x3xf32>
  %2:2 = stablehlo.reduce(%a init: %c), (%ai init: %ci) across dimensions = [0, 1] : (tensor<2x3xf32>, tensor<2x3xi32>, tensor<f32>, tensor<i32>) -> (tensor<f32>, tensor<i32>)
   reducer(%x: tensor<f32>, %y: tensor<f32>) (%xi: tensor<i32>, %yi: tensor<i32>)  {
    %r = stablehlo.maximum %x, %y : tensor<f32>
    %ri = stablehlo.maximum %xi, %yi : tensor<i32>
    stablehlo.return %r, %ri : tensor<f32>, tensor<i32>
  }
  %3 = stablehlo.reduce(%a init: %c) across dimensions = [1] : (tensor<2x3xf32>, tensor<f32>) -> tensor<2xf32>
   reducer(%p: tensor<f32>, %q: tensor<f32>)  {
    %s = stablehlo.subtract %p, %q : tensor<f32>
    stablehlo.return %s : tensor<f32>
  }
";
    assert_round_trip(&wrap(body, args));
}

#[test]
fn reduce_prints_compact_only_when_eligible() {
    let generic = r#"func.func @main(%a: tensor<2x3xf32>, %c: tensor<f32>) {
  %0 = "stablehlo.reduce"(%a, %c) <{dimensions = array<i64: 1>}> ({
  ^bb0(%x: tensor<f32>, %y: tensor<f32>):
    %r = "stablehlo.add"(%x, %y) : (tensor<f32>, tensor<f32>) -> tensor<f32>
    "stablehlo.return"(%r) : (tensor<f32>) -> ()
  }) : (tensor<2x3xf32>, tensor<f32>) -> tensor<2xf32>
  %1 = "stablehlo.reduce"(%a, %c) <{dimensions = array<i64: 1>}> ({
  ^bb0(%x: tensor<f32>, %y: tensor<f32>):
    %r = "stablehlo.add"(%y, %x) : (tensor<f32>, tensor<f32>) -> tensor<f32>
    "stablehlo.return"(%r) : (tensor<f32>) -> ()
  }) : (tensor<2x3xf32>, tensor<f32>) -> tensor<2xf32>
  return
}
"#;
    let out = fmt(generic);
    assert!(out.contains(
        "%0 = stablehlo.reduce(%a init: %c) applies stablehlo.add across dimensions = [1] : (tensor<2x3xf32>, tensor<f32>) -> tensor<2xf32>\n"
    ));
    // Swapped operands: not eligible, printed with its region.
    assert!(out.contains("%1 = stablehlo.reduce(%a init: %c) across dimensions = [1] : (tensor<2x3xf32>, tensor<f32>) -> tensor<2xf32>\n   reducer(%x: tensor<f32>, %y: tensor<f32>)  {\n"));
    // The compact form rebuilds the same body.
    assert_eq!(fmt(&fmt_generic(&out)), out);
}

#[test]
fn while_names_its_arguments_once() {
    let src = "func.func @main(%c: tensor<f32>, %ci: tensor<i32>) {
  %0:2 = stablehlo.while(%iterArg = %c, %iterArg_0 = %ci) : tensor<f32>, tensor<i32> attributes {attr = 3 : i64}
  cond {
    %1 = stablehlo.custom_call @lt(%iterArg_0) : (tensor<i32>) -> tensor<i1>
    stablehlo.return %1 : tensor<i1>
  } do {
    stablehlo.return %iterArg, %iterArg_0 : tensor<f32>, tensor<i32>
  }
  return
}
";
    assert_eq!(fmt(src), src);
    // In generic form the two regions name their arguments independently.
    let generic = fmt_generic(src);
    assert_eq!(fmt(&generic), src);
    let generic2 = r#"func.func @main(%c: tensor<f32>) {
  %0 = "stablehlo.while"(%c) ({
  ^bb0(%arg6: tensor<f32>):
    %t = "stablehlo.constant"() <{value = dense<true> : tensor<i1>}> : () -> tensor<i1>
    "stablehlo.return"(%t) : (tensor<i1>) -> ()
  }, {
  ^bb0(%arg4: tensor<f32>):
    "stablehlo.return"(%arg4) : (tensor<f32>) -> ()
  }) : (tensor<f32>) -> tensor<f32>
  "stablehlo.while"() ({
    %t = "stablehlo.constant"() <{value = dense<true> : tensor<i1>}> : () -> tensor<i1>
    "stablehlo.return"(%t) : (tensor<i1>) -> ()
  }, {
    "stablehlo.return"() : () -> ()
  }) : () -> ()
  return
}
"#;
    let out = fmt(generic2);
    assert!(out.contains("%0 = stablehlo.while(%iterArg = %c) : tensor<f32>\n  cond {\n"));
    assert!(out.contains("} do {\n    stablehlo.return %iterArg : tensor<f32>\n  }\n"));
    assert!(out.contains("  stablehlo.while()\n  cond {\n"));
    assert_eq!(fmt(&out), out);
}

#[test]
fn dot_and_dot_general() {
    let args =
        "%a: tensor<2x3xf32>, %b: tensor<3x4xf32>, %bb: tensor<5x2x3xf32>, %bc: tensor<5x3x4xf32>";
    let body = "  %0 = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0] : (tensor<2x3xf32>, tensor<3x4xf32>) -> tensor<2x4xf32>
  %1 = stablehlo.dot_general %bb, %bc, batching_dims = [0] x [0], contracting_dims = [2] x [1], precision = [DEFAULT, HIGHEST] {foo = 1 : i64} : (tensor<5x2x3xf32>, tensor<5x3x4xf32>) -> tensor<5x2x4xf32>
  %2 = stablehlo.dot_general %bb, %bc, batching_dims = [0] x [0], contracting_dims = [2] x [1], algorithm = <lhs_precision_type = tf32, rhs_precision_type = tf32, accumulation_type = f32, lhs_component_count = 1, rhs_component_count = 1, num_primitive_operations = 1, allow_imprecise_accumulation = false> : (tensor<5x2x3xf32>, tensor<5x3x4xf32>) -> tensor<5x2x4xf32>
  %3 = stablehlo.dot_general %bb, %bc, batching_dims = [0] x [0], contracting_dims = [2] x [1], precision = [], algorithm = <lhs_precision_type = tf32, rhs_precision_type = tf32, accumulation_type = f32, lhs_component_count = 1, rhs_component_count = 1, num_primitive_operations = 1, allow_imprecise_accumulation = false> : (tensor<5x2x3xf32>, tensor<5x3x4xf32>) -> tensor<5x2x4xf32>
  %4 = stablehlo.dot %a, %b : (tensor<2x3xf32>, tensor<3x4xf32>) -> tensor<2x4xf32>
  %5 = stablehlo.dot %a, %b, precision = [DEFAULT, HIGH] : (tensor<2x3xf32>, tensor<3x4xf32>) -> tensor<2x4xf32>
  %6 = stablehlo.dot_general %a, %b, contracting_dims = [] x [] : (tensor<2x3xf32>, tensor<3x4xf32>) -> tensor<2x3x3x4xf32>
";
    let src = wrap(body, args);
    assert_round_trip(&src);
    let generic = fmt_generic(&src);
    assert!(generic.contains("dot_dimension_numbers = #stablehlo.dot<lhs_batching_dimensions = [0], rhs_batching_dimensions = [0], lhs_contracting_dimensions = [2], rhs_contracting_dimensions = [1]>, precision_config = [#stablehlo<precision DEFAULT>, #stablehlo<precision HIGHEST>]"));
    assert!(generic.contains("<{dot_dimension_numbers = #stablehlo.dot<>}>"));
}

#[test]
fn convolution() {
    let args = "%a: tensor<1x8x8x3xf32>, %k: tensor<3x3x3x16xf32>";
    let body = "  %0 = stablehlo.convolution(%a, %k) dim_numbers = [b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f], window = {stride = [1, 1], pad = [[1, 1], [1, 1]], rhs_dilate = [1, 1]} {batch_group_count = 1 : i64, feature_group_count = 1 : i64} : (tensor<1x8x8x3xf32>, tensor<3x3x3x16xf32>) -> tensor<1x8x8x16xf32>
  %1 = stablehlo.convolution(%a, %k) dim_numbers = [b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f], window = {} {batch_group_count = 1 : i64, feature_group_count = 1 : i64} : (tensor<1x8x8x3xf32>, tensor<3x3x3x16xf32>) -> tensor<1x6x6x16xf32>
  %2 = stablehlo.convolution(%a, %k) dim_numbers = [b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f], window = {stride = [1, 1], pad = [[0, 0], [0, 1]], lhs_dilate = [1, 1], rhs_dilate = [1, 1], reverse = [false, true]} {batch_group_count = 1 : i64, feature_group_count = 1 : i64, precision_config = [#stablehlo<precision DEFAULT>, #stablehlo<precision DEFAULT>]} : (tensor<1x8x8x3xf32>, tensor<3x3x3x16xf32>) -> tensor<1x6x7x16xf32>
";
    let src = wrap(body, args);
    assert_round_trip(&src);
    let generic = fmt_generic(&src);
    assert!(generic
        .contains("dimension_numbers = #stablehlo.conv<[b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f]>"));
    assert!(generic.contains("padding = dense<1> : tensor<2x2xi64>"));
    assert!(generic.contains("padding = dense<[[0, 0], [0, 1]]> : tensor<2x2xi64>"));
    assert!(generic.contains("window_reversal = array<i1: false, true>"));
    // Loose spacing and integer booleans are accepted.
    let loose = wrap(
        "  %0 = stablehlo.convolution(%a, %k) dim_numbers = [b,0,1,f]x[0,1,i,o]->[b,0,1,f], window = {reverse = [0, 1], pad = [[0,0],[0,1]], stride = [1,1]} {batch_group_count = 1 : i64, feature_group_count = 1 : i64} : (tensor<1x8x8x3xf32>, tensor<3x3x3x16xf32>) -> tensor<1x6x7x16xf32>\n",
        args,
    );
    assert!(fmt(&loose).contains("dim_numbers = [b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f], window = {stride = [1, 1], pad = [[0, 0], [0, 1]], reverse = [false, true]}"));
}

#[test]
fn custom_call_and_friends() {
    let args =
        "%r: tensor<4x4xf32>, %c: tensor<f32>, %s: tensor<2xui64>, %z: tensor<8x8xcomplex<f32>>";
    let body = "  %0 = stablehlo.custom_call @foo(%r) : (tensor<4x4xf32>) -> tensor<4x4xf32>
  %1 = stablehlo.custom_call @foo.bar$baz(%r) {api_version = 4 : i32, backend_config = {a = 1 : i32}, called_computations = [@dec], has_side_effect = true, mhlo.frontend_attributes = {x = \"y\"}, operand_layouts = [dense<[1, 0]> : tensor<2xindex>], output_operand_aliases = [#stablehlo.output_operand_alias<output_tuple_indices = [], operand_index = 0, operand_tuple_indices = []>], result_layouts = [dense<[1, 0]> : tensor<2xindex>]} : (tensor<4x4xf32>) -> tensor<4x4xf32>
  %2 = stablehlo.custom_call @\"has space\"(%r) {api_version = 2 : i32, backend_config = \"\"} : (tensor<4x4xf32>) -> tensor<4x4xf32>
  stablehlo.custom_call @x() : () -> ()
  %3 = stablehlo.composite \"my.op\" %r, %r {composite_attributes = {a = 1 : i32}, decomposition = @dec2, version = 2 : i32} : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  %4 = stablehlo.composite \"a.b\"  {decomposition = @dec3} : () -> tensor<4x4xf32>
  %5 = stablehlo.rng %c, %c, %s, distribution = NORMAL {foo} : (tensor<f32>, tensor<f32>, tensor<2xui64>) -> tensor<4x4xf32>
  %6:2 = stablehlo.rng_bit_generator %s, algorithm = THREE_FRY : (tensor<2xui64>) -> (tensor<2xui64>, tensor<4xui32>)
  %7 = stablehlo.fft %z, type = FFT, length = [8, 8] : (tensor<8x8xcomplex<f32>>) -> tensor<8x8xcomplex<f32>>
  %8 = stablehlo.cholesky %r, lower = true : tensor<4x4xf32>
  %9 = stablehlo.cholesky %r : tensor<4x4xf32>
  %10 = stablehlo.einsum %r, %r, config = \"ab,bc->ac\" : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  %11 = stablehlo.unary_einsum %r, config = \"ab->ba\" : (tensor<4x4xf32>) -> tensor<4x4xf32>
  %12:2 = stablehlo.optimization_barrier %r, %c : tensor<4x4xf32>, tensor<f32>
  stablehlo.optimization_barrier {foo}()
  %13 = stablehlo.create_token : !stablehlo.token
  %14 = stablehlo.after_all %13, %13 : !stablehlo.token
  %15 = stablehlo.after_all  {foo} : !stablehlo.token
  %16 = stablehlo.replica_id : tensor<ui32>
  %17 = stablehlo.partition_id {x = 2 : i64} : tensor<ui32>
";
    assert_round_trip(&wrap(body, args));
}

#[test]
fn default_valued_attributes_are_left_out() {
    let generic = r#"func.func @main(%r: tensor<4x4xf32>) {
  %0 = "stablehlo.custom_call"(%r) <{api_version = 1 : i32, backend_config = "", call_target_name = "foo", called_computations = [], has_side_effect = false, output_operand_aliases = []}> : (tensor<4x4xf32>) -> tensor<4x4xf32>
  %1 = "stablehlo.cholesky"(%r) <{lower = false}> : (tensor<4x4xf32>) -> tensor<4x4xf32>
  %2 = "stablehlo.composite"(%r) <{composite_attributes = {}, decomposition = @d, name = "a.b", version = 0 : i32}> : (tensor<4x4xf32>) -> tensor<4x4xf32>
  return
}
"#;
    let out = fmt(generic);
    assert!(out.contains("%0 = stablehlo.custom_call @foo(%r) {backend_config = \"\"} : (tensor<4x4xf32>) -> tensor<4x4xf32>\n"));
    assert!(out.contains("%1 = stablehlo.cholesky %r : tensor<4x4xf32>\n"));
    assert!(out.contains("%2 = stablehlo.composite \"a.b\" %r {decomposition = @d} : (tensor<4x4xf32>) -> tensor<4x4xf32>\n"));
}

#[test]
fn unexpressible_ops_fall_back_to_generic() {
    let generic = r#"func.func @main(%a: tensor<1x8x8x3xf32>, %k: tensor<3x3x3x16xf32>, %r: tensor<4x4xf32>) {
  %0 = "stablehlo.convolution"(%a, %k) <{batch_group_count = 1 : i64, dimension_numbers = #stablehlo.conv<raw input_batch_dimension = 0, input_feature_dimension = 3, input_spatial_dimensions = [1, 2], kernel_input_feature_dimension = 2, kernel_output_feature_dimension = 3, kernel_spatial_dimensions = [0, 1], output_batch_dimension = 0, output_feature_dimension = 3, output_spatial_dimensions = [1, 2]>, feature_group_count = 1 : i64}> : (tensor<1x8x8x3xf32>, tensor<3x3x3x16xf32>) -> tensor<1x6x6x16xf32>
  %1 = "stablehlo.custom_call"(%r) <{call_target_name = ""}> : (tensor<4x4xf32>) -> tensor<4x4xf32>
  %2 = "stablehlo.dot"(%r, %r) <{precision_config = [1]}> : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  return
}
"#;
    assert_eq!(fmt(generic), generic);
}

#[test]
fn malformed_input_is_an_error() {
    for body in [
        "  %0 = stablehlo.reduce(%a init: %c) applies stablehlo.subtract across dimensions = [1] : (tensor<2x3xf32>, tensor<f32>) -> tensor<2xf32>\n",
        "  %0 = stablehlo.reduce(%a init: %c) across dimensions = [1] : (tensor<2x3xf32>, tensor<f32>) -> tensor<2xf32>\n",
        "  %0 = stablehlo.reduce(%a init: %c) applies stablehlo.add across dimensions = [1] : () -> tensor<2xf32>\n",
        "  %0 = stablehlo.while(%x#1 = %c) : tensor<f32>\n  cond {\n  } do {\n  }\n",
        "  %0 = stablehlo.convolution(%a, %a) dim_numbers = [b, 0, 0, f]x[0, 1, i, o]->[b, 0, 1, f], window = {} : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>\n",
        "  %0 = stablehlo.convolution(%a, %a) dim_numbers = [b, 0, 1]x[0, 1, i, o]->[b, 0, 1, f], window = {} : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>\n",
        "  %0 = stablehlo.convolution(%a, %a) dim_numbers = [b, 0, f]x[0, i, o]->[b, 0, f], window = {pad = [[1, 2, 3]]} : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>\n",
        "  %0 = stablehlo.convolution(%a, %a) dim_numbers = [b, 0, f]x[0, i, o]->[b, 0, f], window = {stride = [1], stride = [1]} : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>\n",
        "  %0 = stablehlo.dot_general %a, %a, batching_dims = [0] x [0] : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>\n",
        "  %0 = stablehlo.custom_call foo(%a) : (tensor<2x3xf32>) -> tensor<2x3xf32>\n",
        "  %0 = stablehlo.rng %a, %a, distribution : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>\n",
    ] {
        let src = wrap(body, "%a: tensor<2x3xf32>, %c: tensor<f32>");
        assert!(parse_module(&src).is_err(), "accepted:\n{src}");
    }
}
