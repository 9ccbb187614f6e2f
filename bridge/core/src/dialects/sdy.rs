//! Custom assembly formats of the Shardy (`sdy`) ops.
//!
//! Shardy's formats print their dialect attributes *stripped*: the
//! sharding `#sdy.sharding<@mesh, [{"x"}, {}]>` appears as
//! `<@mesh, [{"x"}, {}]>`, `#sdy<manual_axes{"x"}>` as `{"x"}`, and so on.
//! The attribute bodies are kept verbatim as [`Attribute::Opaque`] text;
//! parsing adds the `sdy.sharding`-style prefix back and printing strips
//! it (see [`Kind`]).
//!
//! - `sdy.mesh @mesh = <["x"=2, "y"=2]>`
//! - `%r = sdy.sharding_constraint %x <@mesh, [{"x"}, {}]> : T` (and `sdy.reshard`)
//! - `%r:2 = sdy.manual_computation(%a, %b) in_shardings=[<..>, <..>]
//!   out_shardings=[<..>, <..>] manual_axes={"x"} (%arg1: T, %arg2: U) { ... } : (..) -> (..)`
//! - `%r = sdy.named_computation<"name">(%a) in_shardings=[..]? out_shardings=[..]? (%arg1: T) { ... } : (T) -> T`
//! - `sdy.return %r : T`, `sdy.sharding_group %x group_id=0 : T`,
//!   `%r = sdy.propagation_barrier %x allowed_direction=FORWARD : T`,
//!   `%r = sdy.data_flow_edge %x sharding=<..> : T`, `sdy.func_data_flow_edge`,
//!   `sdy.constant`
//! - collectives: `%r = sdy.all_gather [{"y"}, {}] %x out_sharding=<..> : T`,
//!   `all_slice`, `all_to_all`, `all_reduce`, `reduce_scatter`,
//!   `collective_permute`, `sharded_to_unreduced`, `replicated_to_unreduced`

use super::builtin::print_symbol_text;
use super::chlo::{
    get_typed_int, has_only_props, is_plain, parse_elements_constant, print_elements_constant,
};
use super::common::int_attr;
use super::{OpFormat, ParseFn, PrintFn, ResultTypes};
use crate::ir::{AttrId, Attribute, OpId, RegionId, TypeId};
use crate::parse::cursor::Cursor;
use crate::parse::{ArgDef, PResult, Parser};
use crate::print::Printer;

const fn f(name: &'static str, parse: ParseFn, print: PrintFn) -> OpFormat {
    OpFormat { name, parse, print }
}

/// Formats registered by this file.
pub(crate) const FORMATS: &[OpFormat] = &[
    f("sdy.mesh", parse_mesh, print_mesh),
    f("sdy.sharding_constraint", parse_sharded, print_sharded),
    f("sdy.reshard", parse_sharded, print_sharded),
    f("sdy.return", parse_return, super::func::print_return),
    f(
        "sdy.manual_computation",
        parse_manual_computation,
        print_manual_computation,
    ),
    f(
        "sdy.named_computation",
        parse_named_computation,
        print_named_computation,
    ),
    f(
        "sdy.sharding_group",
        parse_sharding_group,
        print_sharding_group,
    ),
    f(
        "sdy.constant",
        parse_elements_constant,
        print_elements_constant,
    ),
    f(
        "sdy.data_flow_edge",
        parse_data_flow_edge,
        print_data_flow_edge,
    ),
    f(
        "sdy.func_data_flow_edge",
        parse_func_data_flow_edge,
        print_func_data_flow_edge,
    ),
    f(
        "sdy.propagation_barrier",
        parse_propagation_barrier,
        print_propagation_barrier,
    ),
    f("sdy.all_gather", parse_collective, print_collective),
    f("sdy.all_slice", parse_collective, print_collective),
    f("sdy.all_to_all", parse_collective, print_collective),
    f("sdy.all_reduce", parse_collective, print_collective),
    f("sdy.reduce_scatter", parse_collective, print_collective),
    f("sdy.collective_permute", parse_collective, print_collective),
    f(
        "sdy.sharded_to_unreduced",
        parse_collective,
        print_collective,
    ),
    f(
        "sdy.replicated_to_unreduced",
        parse_collective,
        print_collective,
    ),
];

// ----- stripped dialect attributes -----

/// How a Shardy attribute kind is spelled: its generic text is
/// `prefix` + a bracketed group opened by `open` + `suffix`, and its
/// stripped (pretty) form is the group alone.
#[derive(Clone, Copy)]
struct Kind {
    prefix: &'static str,
    open: u8,
    suffix: &'static str,
}

/// `#sdy.sharding<...>` ↔ `<...>`.
const SHARDING: Kind = Kind {
    prefix: "sdy.sharding",
    open: b'<',
    suffix: "",
};
/// `#sdy.mesh<...>` ↔ `<...>`.
const MESH: Kind = Kind {
    prefix: "sdy.mesh",
    open: b'<',
    suffix: "",
};
/// `#sdy.sharding_per_value<[...]>` ↔ `[...]`.
const PER_VALUE: Kind = Kind {
    prefix: "sdy.sharding_per_value<",
    open: b'[',
    suffix: ">",
};
/// `#sdy<manual_axes{...}>` ↔ `{...}`.
const MANUAL_AXES: Kind = Kind {
    prefix: "sdy<manual_axes",
    open: b'{',
    suffix: ">",
};
/// `#sdy<axis_ref_list{...}>` ↔ `{...}`.
const AXIS_LIST: Kind = Kind {
    prefix: "sdy<axis_ref_list",
    open: b'{',
    suffix: ">",
};
/// `#sdy<list_of_axis_ref_lists[...]>` ↔ `[...]`.
const AXIS_LISTS: Kind = Kind {
    prefix: "sdy<list_of_axis_ref_lists",
    open: b'[',
    suffix: ">",
};
/// `#sdy<all_to_all_param_list[...]>` ↔ `[...]`.
const ALL_TO_ALL_PARAMS: Kind = Kind {
    prefix: "sdy<all_to_all_param_list",
    open: b'[',
    suffix: ">",
};

/// Parse a stripped attribute of `kind` (or a full `#...` attribute) and
/// set it as inherent attribute `name` of `op`.
fn parse_stripped(p: &mut Parser<'_>, op: OpId, name: &str, kind: Kind) -> PResult<()> {
    p.c.ws();
    if p.c.cur() == Some(b'#') {
        let a = p.parse_attribute()?;
        p.set_prop_id(op, name, a);
        return Ok(());
    }
    let start = p.c.pos;
    if p.c.cur() != Some(kind.open) {
        return p
            .c
            .expected(&format!("'{}' (an sdy attribute)", kind.open as char));
    }
    p.c.pos += 1;
    p.c.balanced(start)?;
    let group = p.c.slice(start, p.c.pos);
    let text = format!("{}{}{}", kind.prefix, group, kind.suffix);
    p.set_prop(op, name, Attribute::Opaque(text.into()));
    Ok(())
}

/// The stripped text of `a` if it is an attribute of `kind` whose body is
/// one bracketed group.
fn stripped<'m>(pr: &Printer<'m>, a: AttrId, kind: Kind) -> Option<&'m str> {
    let Attribute::Opaque(text) = pr.m.attr(a) else {
        return None;
    };
    let group = text.strip_prefix(kind.prefix)?.strip_suffix(kind.suffix)?;
    if group.as_bytes().first() != Some(&kind.open) {
        return None;
    }
    let mut c = Cursor::new(group);
    c.pos = 1;
    match c.balanced(0) {
        Ok(_) if c.pos == group.len() => Some(group),
        _ => None,
    }
}

/// Print inherent attribute `name` of `op` stripped; false if it is
/// missing or not of `kind`.
fn print_stripped(pr: &mut Printer<'_>, op: OpId, name: &str, kind: Kind) -> bool {
    let Some(a) = pr.m.op_attr(op, name) else {
        return false;
    };
    match stripped(pr, a, kind) {
        Some(s) => {
            pr.w(s);
            true
        }
        None => false,
    }
}

// ----- shared pieces -----

/// `%x` ... `: T` where the operand and the (optional) result share `T`:
/// resolves `x` against `T` and pushes the result type if `has_result`.
fn finish_same_type<'s>(
    p: &mut Parser<'s>,
    op: OpId,
    x: crate::parse::OperandRef<'s>,
    has_result: bool,
    results: &mut ResultTypes,
) -> PResult<()> {
    p.c.expect(b':')?;
    let t = p.parse_type()?;
    let v = p.resolve_operand(&x, t)?;
    p.push_operands(op, &[v]);
    if has_result {
        results.push(t);
    }
    Ok(())
}

/// The single operand type of `op` if its results (zero or one) all have
/// that type.
fn same_type(pr: &Printer<'_>, op: OpId) -> Option<TypeId> {
    let m = pr.m;
    let o = m.op(op);
    let t = m.value_type(*o.operands.first()?);
    o.results.iter().all(|&r| m.value_type(r) == t).then_some(t)
}

/// Parse `(%arg: T loc(..)?, ...)` (possibly empty) and then the region.
fn parse_region_with_args(p: &mut Parser<'_>, op: OpId) -> PResult<()> {
    p.c.expect(b'(')?;
    let mut args: Vec<ArgDef<'_>> = Vec::new();
    if !p.c.eat(b')') {
        loop {
            args.push(p.parse_arg_def()?);
            if p.c.eat(b')') {
                break;
            }
            p.c.expect(b',')?;
        }
    }
    p.parse_region(op, Some(&args))
}

/// The single-block region of `op`, if it has exactly that.
fn single_block_region(pr: &Printer<'_>, op: OpId) -> Option<RegionId> {
    let m = pr.m;
    let o = m.op(op);
    match o.regions.as_slice() {
        [r] if m.region(*r).blocks.len() == 1 && o.successors.is_empty() => Some(*r),
        _ => None,
    }
}

/// Print `(%arg: T, ...) {...}` for a single-block region.
fn print_region_with_args(pr: &mut Printer<'_>, r: RegionId) {
    let m = pr.m;
    let b = m.region(r).blocks[0];
    pr.w(" (");
    for (i, &a) in m.block(b).args.iter().enumerate() {
        if i > 0 {
            pr.w(", ");
        }
        pr.arg_def(a, true);
    }
    pr.w(") ");
    pr.region(r, false);
}

// ----- sdy.mesh -----

fn parse_mesh(p: &mut Parser<'_>, op: OpId, _results: &mut ResultTypes) -> PResult<()> {
    let name = p.parse_symbol_name()?;
    let text = p.m.str(name).trim_matches('"').to_string();
    p.set_prop(
        op,
        "sym_name",
        Attribute::String {
            escaped: text.into(),
            ty: None,
        },
    );
    p.c.expect(b'=')?;
    parse_stripped(p, op, "mesh", MESH)?;
    p.parse_optional_attr_dict(op, &["sym_name", "mesh"])?;
    Ok(())
}

fn print_mesh(pr: &mut Printer<'_>, op: OpId) -> bool {
    let m = pr.m;
    if !is_plain(m, op, 0, 0, &["sym_name", "mesh"]) {
        return false;
    }
    let (Some(name), Some(mesh)) = (m.op_attr(op, "sym_name"), m.op_attr(op, "mesh")) else {
        return false;
    };
    let Attribute::String { escaped, ty: None } = m.attr(name) else {
        return false;
    };
    pr.w(" @");
    print_symbol_text(pr, escaped);
    pr.w(" = ");
    match m.attr(mesh) {
        Attribute::Alias(s) => {
            pr.w("#");
            pr.w(m.str(*s));
        }
        _ => match stripped(pr, mesh, MESH) {
            Some(s) => pr.w(s),
            None => return false,
        },
    }
    pr.attr_dict(op, &["sym_name", "mesh"]);
    true
}

// ----- sharding_constraint, reshard -----

fn parse_sharded(p: &mut Parser<'_>, op: OpId, results: &mut ResultTypes) -> PResult<()> {
    let x = p.parse_operand()?;
    parse_stripped(p, op, "sharding", SHARDING)?;
    p.parse_optional_attr_dict(op, &["sharding"])?;
    finish_same_type(p, op, x, true, results)
}

fn print_sharded(pr: &mut Printer<'_>, op: OpId) -> bool {
    let m = pr.m;
    if !is_plain(m, op, 1, 1, &["sharding"]) {
        return false;
    }
    let Some(t) = same_type(pr, op) else {
        return false;
    };
    pr.w(" ");
    pr.operand(m.op(op).operands[0]);
    pr.w(" ");
    if !print_stripped(pr, op, "sharding", SHARDING) {
        return false;
    }
    pr.attr_dict(op, &["sharding"]);
    pr.w(" : ");
    pr.ty(t);
    true
}

// ----- sdy.return -----

fn parse_return(p: &mut Parser<'_>, op: OpId, _results: &mut ResultTypes) -> PResult<()> {
    p.parse_optional_attr_dict(op, &[])?;
    let refs = p.parse_operand_list()?;
    if !refs.is_empty() {
        p.c.expect(b':')?;
        let types = p.parse_type_list()?;
        let vals = p.resolve_operands(&refs, &types)?;
        p.push_operands(op, &vals);
    }
    Ok(())
}

// ----- manual_computation, named_computation -----

const MANUAL_INHERENT: &[&str] = &["in_shardings", "out_shardings", "manual_axes"];

fn parse_manual_computation(
    p: &mut Parser<'_>,
    op: OpId,
    results: &mut ResultTypes,
) -> PResult<()> {
    p.c.expect(b'(')?;
    let refs = p.parse_operand_list_until(b')')?;
    p.c.expect_kw("in_shardings")?;
    p.c.expect(b'=')?;
    parse_stripped(p, op, "in_shardings", PER_VALUE)?;
    p.c.expect_kw("out_shardings")?;
    p.c.expect(b'=')?;
    parse_stripped(p, op, "out_shardings", PER_VALUE)?;
    p.c.expect_kw("manual_axes")?;
    p.c.expect(b'=')?;
    parse_stripped(p, op, "manual_axes", MANUAL_AXES)?;
    parse_region_with_args(p, op)?;
    p.parse_optional_attr_dict(op, MANUAL_INHERENT)?;
    super::common::parse_functional_type(p, op, &refs, results)?;
    Ok(())
}

fn print_manual_computation(pr: &mut Printer<'_>, op: OpId) -> bool {
    let m = pr.m;
    let Some(r) = single_block_region(pr, op) else {
        return false;
    };
    if !has_only_props(m, op, MANUAL_INHERENT) {
        return false;
    }
    pr.w("(");
    pr.operands(&m.op(op).operands);
    pr.w(") in_shardings=");
    if !print_stripped(pr, op, "in_shardings", PER_VALUE) {
        return false;
    }
    pr.w(" out_shardings=");
    if !print_stripped(pr, op, "out_shardings", PER_VALUE) {
        return false;
    }
    pr.w(" manual_axes=");
    if !print_stripped(pr, op, "manual_axes", MANUAL_AXES) {
        return false;
    }
    print_region_with_args(pr, r);
    pr.attr_dict(op, MANUAL_INHERENT);
    pr.w(" : ");
    pr.functional_type(op);
    true
}

const NAMED_INHERENT: &[&str] = &["name", "in_shardings", "out_shardings"];

fn parse_named_computation(p: &mut Parser<'_>, op: OpId, results: &mut ResultTypes) -> PResult<()> {
    p.c.expect(b'<')?;
    let name = p.c.string()?;
    p.set_prop(
        op,
        "name",
        Attribute::String {
            escaped: name.into(),
            ty: None,
        },
    );
    p.c.expect(b'>')?;
    p.c.expect(b'(')?;
    let refs = p.parse_operand_list_until(b')')?;
    for key in ["in_shardings", "out_shardings"] {
        if p.c.eat_kw(key) {
            p.c.expect(b'=')?;
            parse_stripped(p, op, key, PER_VALUE)?;
        }
    }
    parse_region_with_args(p, op)?;
    p.parse_optional_attr_dict(op, NAMED_INHERENT)?;
    super::common::parse_functional_type(p, op, &refs, results)?;
    Ok(())
}

fn print_named_computation(pr: &mut Printer<'_>, op: OpId) -> bool {
    let m = pr.m;
    let Some(r) = single_block_region(pr, op) else {
        return false;
    };
    if !has_only_props(m, op, NAMED_INHERENT) {
        return false;
    }
    let Some(Attribute::String { escaped, ty: None }) = m.op_attr(op, "name").map(|a| m.attr(a))
    else {
        return false;
    };
    pr.w("<\"");
    pr.w(escaped);
    pr.w("\">(");
    pr.operands(&m.op(op).operands);
    pr.w(")");
    for key in ["in_shardings", "out_shardings"] {
        if m.op_attr(op, key).is_some() {
            pr.w(" ");
            pr.w(key);
            pr.w("=");
            if !print_stripped(pr, op, key, PER_VALUE) {
                return false;
            }
        }
    }
    print_region_with_args(pr, r);
    pr.attr_dict(op, NAMED_INHERENT);
    pr.w(" : ");
    pr.functional_type(op);
    true
}

// ----- sharding_group, data_flow_edge, func_data_flow_edge -----

fn parse_sharding_group(p: &mut Parser<'_>, op: OpId, results: &mut ResultTypes) -> PResult<()> {
    let x = p.parse_operand()?;
    p.c.expect_kw("group_id")?;
    p.c.expect(b'=')?;
    let id = p.c.int()?;
    let id = int_attr(&mut p.m, id, 64);
    p.set_prop(op, "group_id", id);
    p.parse_optional_attr_dict(op, &["group_id"])?;
    finish_same_type(p, op, x, false, results)
}

fn print_sharding_group(pr: &mut Printer<'_>, op: OpId) -> bool {
    let m = pr.m;
    if !is_plain(m, op, 1, 0, &["group_id"]) {
        return false;
    }
    let Some(id) = m
        .op_attr(op, "group_id")
        .and_then(|a| get_typed_int(m, a, 64))
    else {
        return false;
    };
    let o = m.op(op);
    pr.w(" ");
    pr.operand(o.operands[0]);
    pr.w(" group_id=");
    pr.int(id);
    pr.attr_dict(op, &["group_id"]);
    pr.w(" : ");
    pr.ty(m.value_type(o.operands[0]));
    true
}

fn parse_data_flow_edge(p: &mut Parser<'_>, op: OpId, results: &mut ResultTypes) -> PResult<()> {
    let x = p.parse_operand()?;
    if p.c.eat_kw("sharding") {
        p.c.expect(b'=')?;
        parse_stripped(p, op, "sharding", SHARDING)?;
    }
    p.parse_optional_attr_dict(op, &["sharding"])?;
    finish_same_type(p, op, x, true, results)
}

fn print_data_flow_edge(pr: &mut Printer<'_>, op: OpId) -> bool {
    let m = pr.m;
    if !is_plain(m, op, 1, 1, &["sharding"]) {
        return false;
    }
    let Some(t) = same_type(pr, op) else {
        return false;
    };
    pr.w(" ");
    pr.operand(m.op(op).operands[0]);
    if m.op_attr(op, "sharding").is_some() {
        pr.w(" sharding=");
        if !print_stripped(pr, op, "sharding", SHARDING) {
            return false;
        }
    }
    pr.attr_dict(op, &["sharding"]);
    pr.w(" : ");
    pr.ty(t);
    true
}

fn parse_func_data_flow_edge(
    p: &mut Parser<'_>,
    op: OpId,
    results: &mut ResultTypes,
) -> PResult<()> {
    let x = p.parse_operand()?;
    p.parse_optional_attr_dict(op, &[])?;
    finish_same_type(p, op, x, true, results)
}

fn print_func_data_flow_edge(pr: &mut Printer<'_>, op: OpId) -> bool {
    let m = pr.m;
    if !is_plain(m, op, 1, 1, &[]) {
        return false;
    }
    let Some(t) = same_type(pr, op) else {
        return false;
    };
    pr.w(" ");
    pr.operand(m.op(op).operands[0]);
    pr.attr_dict(op, &[]);
    pr.w(" : ");
    pr.ty(t);
    true
}

// ----- propagation_barrier -----

/// `Sdy_PropagationDirection` values, in enum order.
const DIRECTIONS: [&str; 4] = ["NONE", "FORWARD", "BACKWARD", "BOTH"];

fn parse_propagation_barrier(
    p: &mut Parser<'_>,
    op: OpId,
    results: &mut ResultTypes,
) -> PResult<()> {
    let x = p.parse_operand()?;
    p.c.expect_kw("allowed_direction")?;
    p.c.expect(b'=')?;
    p.c.ws();
    let pos = p.c.pos;
    let kw = p.c.expect_ident("propagation direction")?;
    let Some(n) = DIRECTIONS.iter().position(|&d| d == kw) else {
        return p.c.err_at(
            pos,
            format!("expected one of NONE, FORWARD, BACKWARD, BOTH, found '{kw}'"),
        );
    };
    let a = int_attr(&mut p.m, n as i64, 32);
    p.set_prop(op, "allowed_direction", a);
    p.parse_optional_attr_dict(op, &["allowed_direction"])?;
    finish_same_type(p, op, x, true, results)
}

fn print_propagation_barrier(pr: &mut Printer<'_>, op: OpId) -> bool {
    let m = pr.m;
    if !is_plain(m, op, 1, 1, &["allowed_direction"]) {
        return false;
    }
    let Some(t) = same_type(pr, op) else {
        return false;
    };
    let Some(dir) = m
        .op_attr(op, "allowed_direction")
        .and_then(|a| get_typed_int(m, a, 32))
        .and_then(|n| usize::try_from(n).ok())
        .and_then(|n| DIRECTIONS.get(n))
    else {
        return false;
    };
    pr.w(" ");
    pr.operand(m.op(op).operands[0]);
    pr.w(" allowed_direction=");
    pr.w(dir);
    pr.attr_dict(op, &["allowed_direction"]);
    pr.w(" : ");
    pr.ty(t);
    true
}

// ----- collectives -----

/// The axes attribute (name and kind) written before the operand of a
/// collective, if it has one.
fn collective_axes(op_name: &str) -> Option<(&'static str, Kind)> {
    Some(match op_name {
        "sdy.all_gather" => ("gathering_axes", AXIS_LISTS),
        "sdy.all_slice" => ("slicing_axes", AXIS_LISTS),
        "sdy.all_to_all" => ("params", ALL_TO_ALL_PARAMS),
        "sdy.all_reduce" => ("reduction_axes", AXIS_LIST),
        "sdy.reduce_scatter" => ("reduce_scatter_axes", AXIS_LISTS),
        "sdy.sharded_to_unreduced" => ("axes", AXIS_LISTS),
        "sdy.replicated_to_unreduced" => ("axes", AXIS_LIST),
        _ => return None,
    })
}

/// `$axes? $tensor out_sharding=$out_sharding attr-dict : type($result)`.
fn parse_collective(p: &mut Parser<'_>, op: OpId, results: &mut ResultTypes) -> PResult<()> {
    let axes = collective_axes(p.m.op_name(op));
    let mut inherent = vec!["out_sharding"];
    if let Some((name, kind)) = axes {
        parse_stripped(p, op, name, kind)?;
        inherent.push(name);
    }
    let x = p.parse_operand()?;
    p.c.expect_kw("out_sharding")?;
    p.c.expect(b'=')?;
    parse_stripped(p, op, "out_sharding", SHARDING)?;
    p.parse_optional_attr_dict(op, &inherent)?;
    finish_same_type(p, op, x, true, results)
}

fn print_collective(pr: &mut Printer<'_>, op: OpId) -> bool {
    let m = pr.m;
    let axes = collective_axes(m.op_name(op));
    let mut inherent = vec!["out_sharding"];
    if let Some((name, _)) = axes {
        inherent.push(name);
    }
    if !is_plain(m, op, 1, 1, &inherent) {
        return false;
    }
    let Some(t) = same_type(pr, op) else {
        return false;
    };
    if let Some((name, kind)) = axes {
        pr.w(" ");
        if !print_stripped(pr, op, name, kind) {
            return false;
        }
    }
    pr.w(" ");
    pr.operand(m.op(op).operands[0]);
    pr.w(" out_sharding=");
    if !print_stripped(pr, op, "out_sharding", SHARDING) {
        return false;
    }
    pr.attr_dict(op, &inherent);
    pr.w(" : ");
    pr.ty(t);
    true
}
