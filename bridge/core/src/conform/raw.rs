//! Raw conformance rewrite: the textual counterpart of
//! [`super::rewrite_checks`], for feeding a test module to a plugin without
//! hlobridge's parser and printer in the way.
//!
//! Differential conformance (`hlobridge conform --differential`) runs every
//! module twice: through hlobridge (parse → [`super::rewrite_checks`] →
//! print → lowering → runtime) and "raw", where the plugin compiles the
//! file's own text. The checks still have to become outputs on the raw path
//! (the plugin cannot run `check.*` ops), so [`rewrite_checks_text`] edits
//! the text as little as possible and never re-prints an op:
//!
//! * every check op line in `@main` is blanked (an empty line keeps the line
//!   numbers of the file); a `*_const` check becomes one generic
//!   `stablehlo.constant` line holding its `value` attribute verbatim, and a
//!   `check.eq` whose verdict is named becomes
//!   `%verdict = "stablehlo.constant"() <{value = dense<true> ...}>` (its
//!   users see `true`, as on hlobridge's path);
//! * the check operands are appended to `@main`'s `return` (pretty
//!   `return`/`func.return` or generic `"func.return"`), and their types to
//!   the result list of `@main`'s signature;
//! * everything else (constants, other ops, attributes, locations, the other
//!   functions) is passed through byte for byte.
//!
//! The check kinds, output indices, ordinals and lines are the same as
//! [`super::rewrite_checks`] computes for the same file, so one comparator
//! serves both paths. Only single-line check ops at the top level of a
//! pretty-printed `func.func @main` (or the single public function, renamed
//! `main` in its definition) are understood; anything else is
//! [`ConformError::Unsupported`] with the reason.

use super::{check_kind_from, Check, ConformError};

/// The result of [`rewrite_checks_text`].
#[derive(Clone, Debug, PartialEq)]
pub struct RawRewrite {
    /// The edited module text.
    pub text: String,
    /// Every check, in source order, with its source line.
    pub checks: Vec<Check>,
    /// Number of `@main` results before the rewrite.
    pub original_outputs: usize,
    /// Number of `@main` results after the rewrite.
    pub total_outputs: usize,
    /// Number of `@main` parameters.
    pub entry_params: usize,
}

/// Turn the checks of module text `src` into outputs of `@main` by editing
/// the text (see the module docs). `first_line` is the 1-based line of
/// `src`'s first line in its file (for files split into several modules).
pub fn rewrite_checks_text(src: &str, first_line: u32) -> Result<RawRewrite, ConformError> {
    let unsupported = |ordinal: usize, target: &str, reason: String| ConformError::Unsupported {
        target: target.to_string(),
        ordinal,
        function: "main".into(),
        reason: format!("raw path: {reason}"),
    };
    let no_entry = |why: &str| ConformError::NoEntry(format!("raw path: {why}"));
    let sig = find_entry(src).map_err(|e| no_entry(&e))?;
    let mut edits: Vec<(usize, usize, String)> = Vec::new();
    if let Some((at, len)) = sig.rename {
        edits.push((at, at + len, "@main".into()));
    }

    // Check lines of the whole module, in source order.
    let mut checks = Vec::new();
    let mut new_vals: Vec<(String, String)> = Vec::new();
    let original_outputs = sig.results.len();
    let lines = line_spans(src);
    let depths = line_depths(src, &lines);
    for (idx, &(start, end)) in lines.iter().enumerate() {
        let line = &src[start..end];
        let Some(target) = check_target(line) else {
            continue;
        };
        let ordinal = checks.len();
        let err = |r: String| unsupported(ordinal, &target, r);
        if start < sig.body_open || end > sig.body_close {
            return Err(err("the check is not in @main".into()));
        }
        if depths[idx] != sig.body_depth {
            return Err(err(
                "the check sits inside a nested region (loop, branch, ...)".into(),
            ));
        }
        let op = parse_check_line(line, &target).map_err(err)?;
        let kind = check_kind_from(
            &target,
            op.attr_int("min_ulp_difference").map_err(err)?,
            op.attr_int("max_ulp_difference").map_err(err)?,
            op.attr_float("tolerance").map_err(err)?,
        )
        .map_err(err)?;
        let indent = &line[..line.len() - line.trim_start().len()];
        let (actual, expected, replacement) = if target.ends_with("_const") {
            let [operand] = op.operands.as_slice() else {
                return Err(err(format!(
                    "expected 1 operand, found {}",
                    op.operands.len()
                )));
            };
            let value = op
                .attr_raw("value")
                .ok_or_else(|| err("missing `value` attribute".into()))?;
            let ty = match rsplit_top(value, b':') {
                Some((_, t)) => t.trim().to_string(),
                None => op.types.first().cloned().unwrap_or_default(),
            };
            let name = format!("%__hb_check_{ordinal}");
            let line = format!(
                "{indent}{name} = \"stablehlo.constant\"() <{{value = {value}}}> : () -> {ty}"
            );
            let actual_ty = op.types.first().cloned().unwrap_or_default();
            ((operand.clone(), actual_ty), (name, ty), line)
        } else {
            let [a, b] = op.operands.as_slice() else {
                return Err(err(format!(
                    "expected 2 operands, found {}",
                    op.operands.len()
                )));
            };
            let [ta, tb] = op.types.as_slice() else {
                return Err(err("operand types not understood".into()));
            };
            let replacement = match &op.result {
                Some(r) if target == "check.eq" => format!(
                    "{indent}{r} = \"stablehlo.constant\"() <{{value = dense<true> : tensor<i1>}}> : () -> tensor<i1>"
                ),
                Some(r) => return Err(err(format!("its result {r} is used"))),
                None => String::new(),
            };
            let ((a, ta), (b, tb)) = ((a.clone(), ta.clone()), (b.clone(), tb.clone()));
            if target == "check.eq" {
                // `check.eq(expected, actual)`.
                ((b, tb), (a, ta), replacement)
            } else {
                ((a, ta), (b, tb), replacement)
            }
        };
        let n = original_outputs + new_vals.len();
        checks.push(Check {
            kind,
            target: target.clone(),
            actual_output: n,
            expected_output: n + 1,
            function: "main".into(),
            ordinal,
            line: Some(first_line + idx as u32),
        });
        new_vals.push(actual);
        new_vals.push(expected);
        edits.push((start, end, replacement));
    }

    if !new_vals.is_empty() {
        let ops: Vec<&str> = new_vals.iter().map(|(v, _)| v.as_str()).collect();
        let tys: Vec<&str> = new_vals.iter().map(|(_, t)| t.as_str()).collect();
        edits.push(
            return_edit(src, &sig, &ops.join(", "), &tys.join(", ")).map_err(|e| no_entry(&e))?,
        );
        edits.push(signature_edit(&sig, &tys.join(", ")));
    }
    edits.sort_by_key(|e| std::cmp::Reverse(e.0));
    let mut text = src.to_string();
    for (s, e, r) in edits {
        text.replace_range(s..e, &r);
    }
    Ok(RawRewrite {
        text,
        checks,
        original_outputs,
        total_outputs: original_outputs + new_vals.len(),
        entry_params: sig.params,
    })
}

/// Where `@main`'s signature and body are.
#[derive(Debug)]
struct EntrySig {
    /// The results: byte range of the whole result list (`(...)`, a single
    /// type, or an empty range right after the arguments), and the types.
    results_span: (usize, usize),
    results: Vec<String>,
    /// Whether the results are written in parentheses.
    parenthesized: bool,
    /// Number of parameters.
    params: usize,
    /// Byte offsets of the body's `{` and `}`.
    body_open: usize,
    body_close: usize,
    /// Brace depth of the body's ops (line starts).
    body_depth: usize,
    /// `@name` to replace with `@main` (offset, length), when the entry is
    /// the single public function.
    rename: Option<(usize, usize)>,
}

fn find_entry(src: &str) -> Result<EntrySig, String> {
    // `func.func [visibility] @name(` at line starts.
    let mut defs: Vec<(usize, String, bool)> = Vec::new();
    for (start, end) in line_spans(src) {
        let line = &src[start..end];
        let t = line.trim_start();
        if !t.starts_with("func.func ") {
            continue;
        }
        let Some(at) = t.find('@') else { continue };
        let name: String = t[at + 1..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || "_$.-".contains(*c))
            .collect();
        let head = &t[..at];
        let private = head.contains("private") || head.contains("nested");
        let off = start + (line.len() - t.len()) + at;
        defs.push((off, name, private));
    }
    if src.contains("\"func.func\"") {
        return Err("generic `\"func.func\"` functions are not understood".into());
    }
    let (at, name) = match defs.iter().find(|d| d.1 == "main") {
        Some(d) => (d.0, d.1.clone()),
        None => {
            let public: Vec<_> = defs.iter().filter(|d| !d.2).collect();
            match public.as_slice() {
                [d] => (d.0, d.1.clone()),
                [] => return Err("no @main and no public function".into()),
                many => return Err(format!("no @main and {} public functions", many.len())),
            }
        }
    };
    let b = src.as_bytes();
    let args_open = at + 1 + name.len();
    if b.get(args_open) != Some(&b'(') {
        return Err(format!("@{name}'s signature not understood"));
    }
    let args_close = close_of(src, args_open).ok_or("unbalanced argument list")?;
    let params = split_top(&src[args_open + 1..args_close], b',')
        .iter()
        .filter(|a| !a.trim().is_empty())
        .count();
    let mut p = skip_ws(src, args_close + 1);
    let (results_span, results, parenthesized);
    if src[p..].starts_with("->") {
        p = skip_ws(src, p + 2);
        if b[p] == b'(' {
            let c = close_of(src, p).ok_or("unbalanced result list")?;
            results = split_top(&src[p + 1..c], b',')
                .into_iter()
                .map(|r| first_type(r).to_string())
                .filter(|r| !r.is_empty())
                .collect();
            results_span = (p, c + 1);
            parenthesized = true;
            p = c + 1;
        } else {
            let e = type_end(src, p);
            results = vec![src[p..e].to_string()];
            results_span = (p, e);
            parenthesized = false;
            p = e;
        }
    } else {
        results = Vec::new();
        results_span = (args_close + 1, args_close + 1);
        parenthesized = false;
    }
    p = skip_ws(src, p);
    if src[p..].starts_with("attributes") {
        p = skip_ws(src, p + "attributes".len());
        if b.get(p) != Some(&b'{') {
            return Err("`attributes` without a dictionary".into());
        }
        p = skip_ws(src, close_of(src, p).ok_or("unbalanced attributes")? + 1);
    }
    if b.get(p) != Some(&b'{') {
        return Err(format!("@{name} has no body"));
    }
    let body_close = brace_close(src, p).ok_or("unbalanced function body")?;
    let lines = line_spans(src);
    let depths = line_depths(src, &lines);
    let body_depth = lines
        .iter()
        .position(|&(s, e)| s <= p && p < e)
        .map_or(1, |i| depths[i] + 1);
    Ok(EntrySig {
        results_span,
        results,
        parenthesized,
        params,
        body_open: p,
        body_close,
        body_depth,
        rename: (name != "main").then_some((at, name.len() + 1)),
    })
}

fn signature_edit(sig: &EntrySig, tys: &str) -> (usize, usize, String) {
    let (s, e) = sig.results_span;
    if sig.parenthesized {
        if sig.results.is_empty() {
            (s, e, format!("({tys})"))
        } else {
            (e - 1, e - 1, format!(", {tys}"))
        }
    } else if sig.results.is_empty() {
        (s, e, format!(" -> ({tys})"))
    } else {
        (s, e, format!("({}, {tys})", sig.results[0]))
    }
}

/// Append `ops : tys` to the last op of the entry body, its return.
fn return_edit(
    src: &str,
    sig: &EntrySig,
    ops: &str,
    tys: &str,
) -> Result<(usize, usize, String), String> {
    let body = &src[sig.body_open + 1..sig.body_close];
    let trimmed = body.trim_end();
    let start = trimmed.rfind('\n').map_or(0, |i| i + 1);
    let stmt = &trimmed[start..];
    let lead = stmt.len() - stmt.trim_start().len();
    let stmt_at = sig.body_open + 1 + start + lead;
    let stmt = stmt.trim_start();
    let stmt_end = stmt_at + stmt.len();
    if let Some(rest) = stmt.strip_prefix("\"func.return\"") {
        // "func.return"(%a) : (T) -> ()
        let open = stmt_at + (stmt.len() - rest.len());
        if src.as_bytes()[open] != b'(' {
            return Err("generic return not understood".into());
        }
        let close = close_of(src, open).ok_or("unbalanced return")?;
        let after = &src[close + 1..stmt_end];
        let colon = after.find(':').ok_or("generic return without a type")?;
        let topen = close
            + 1
            + colon
            + 1
            + (after[colon + 1..].len() - after[colon + 1..].trim_start().len());
        if src.as_bytes().get(topen) != Some(&b'(') {
            return Err("generic return type not understood".into());
        }
        let tclose = close_of(src, topen).ok_or("unbalanced return type")?;
        let sep = |s: &str| if s.trim().is_empty() { "" } else { ", " };
        let text = format!(
            "\"func.return\"({}{}{ops}){}({}{}{tys}){}",
            &src[open + 1..close],
            sep(&src[open + 1..close]),
            &src[close + 1..topen],
            &src[topen + 1..tclose],
            sep(&src[topen + 1..tclose]),
            &src[tclose + 1..stmt_end]
        );
        return Ok((stmt_at, stmt_end, text));
    }
    let kw = if stmt.starts_with("func.return") {
        "func.return"
    } else if stmt.starts_with("return") {
        "return"
    } else {
        return Err(format!(
            "the entry's last op is not a return: {}",
            stmt.chars().take(60).collect::<String>()
        ));
    };
    let rest = stmt[kw.len()..].trim();
    let text = if rest.is_empty() {
        format!("{kw} {ops} : {tys}")
    } else {
        let (vals, types) = split_once_top(rest, b':').ok_or("return without a type")?;
        format!("{kw} {}, {ops} : {}, {tys}", vals.trim(), types.trim())
    };
    Ok((stmt_at, stmt_end, text))
}

/// A check op read from its line.
#[derive(Debug, Default)]
struct CheckOp {
    /// `%r` when the op names a result.
    result: Option<String>,
    operands: Vec<String>,
    /// Operand types, from the trailing function type.
    types: Vec<String>,
    /// The text of the attribute dictionaries (`<{...}>` and `{...}`).
    attrs: Vec<String>,
}

impl CheckOp {
    /// The raw text of attribute `name`'s value.
    fn attr_raw(&self, name: &str) -> Option<&str> {
        for d in &self.attrs {
            for entry in split_top(d, b',') {
                if let Some((k, v)) = entry.split_once('=') {
                    if k.trim() == name {
                        return Some(v.trim());
                    }
                }
            }
        }
        None
    }

    fn attr_int(&self, name: &str) -> Result<Option<u64>, String> {
        let Some(v) = self.attr_raw(name) else {
            return Ok(None);
        };
        let num = split_once_top(v, b':').map_or(v, |(n, _)| n).trim();
        crate::parse::parse_int_text(num)
            .and_then(|v| u64::try_from(v).ok())
            .map(Some)
            .ok_or_else(|| format!("bad `{name}` value {v}"))
    }

    fn attr_float(&self, name: &str) -> Result<Option<f64>, String> {
        let Some(v) = self.attr_raw(name) else {
            return Ok(None);
        };
        let num = split_once_top(v, b':').map_or(v, |(n, _)| n).trim();
        super::parse_float(num)
            .or_else(|| crate::parse::parse_int_text(num).map(|i| i as f64))
            .map(Some)
            .ok_or_else(|| format!("bad `{name}` value {v}"))
    }
}

/// The check target named on `line`, if it holds a check op.
fn check_target(line: &str) -> Option<String> {
    let t = line.trim_start();
    if t.starts_with("//") {
        return None;
    }
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '.')
            .collect()
    };
    for pat in ["@check.", "call_target_name = \"check.", "\"check."] {
        if let Some(i) = t.find(pat) {
            let at = i + pat.len() - "check.".len();
            return Some(ident(&t[at..]));
        }
    }
    None
}

/// Reads one check op: pretty `stablehlo.custom_call @check.x(%a, %b)
/// {attrs} : (A, B) -> ()`, generic `"stablehlo.custom_call"(%a, %b)
/// <{call_target_name = "check.x", ...}> {attrs} : (A, B) -> ()`, or the
/// generic `"check.x"(...)` form; an optional `%r = ` in front.
fn parse_check_line(line: &str, target: &str) -> Result<CheckOp, String> {
    let mut t = line.trim();
    // A trailing `//` comment (outside strings).
    let b = t.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'/' && b.get(i + 1) == Some(&b'/') {
            t = t[..i].trim_end();
            break;
        }
        i = scan_step(b, i, &mut |_| {});
    }
    let mut op = CheckOp::default();
    if t.starts_with('%') {
        let (r, rest) = t.split_once('=').ok_or("result without `=`")?;
        op.result = Some(r.trim().to_string());
        t = rest.trim_start();
    }
    let rest = if let Some(r) = t.strip_prefix("stablehlo.custom_call ") {
        r.trim_start()
            .strip_prefix(&format!("@{target}"))
            .ok_or("custom call target not understood")?
    } else if let Some(r) = t.strip_prefix("\"stablehlo.custom_call\"") {
        r
    } else if let Some(r) = t.strip_prefix(&format!("\"{target}\"")) {
        r
    } else {
        return Err(
            "check op form not understood (pretty or generic custom_call, or generic check op)"
                .into(),
        );
    };
    let rest = rest.trim_start();
    if !rest.starts_with('(') {
        return Err("operand list not found".into());
    }
    let close = close_of(rest, 0).ok_or("the op spans several lines")?;
    op.operands = split_top(&rest[1..close], b',')
        .into_iter()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect();
    if op.operands.iter().any(|o| !o.starts_with('%')) {
        return Err("operands are not SSA values".into());
    }
    let mut p = skip_ws(rest, close + 1);
    while p < rest.len() {
        let b = rest.as_bytes()[p];
        if rest[p..].starts_with("<{") {
            let c = close_of(rest, p).ok_or("unbalanced properties")?;
            op.attrs.push(rest[p + 2..c - 1].to_string());
            p = skip_ws(rest, c + 1);
        } else if b == b'{' {
            let c = close_of(rest, p).ok_or("unbalanced attributes")?;
            op.attrs.push(rest[p + 1..c].to_string());
            p = skip_ws(rest, c + 1);
        } else if b == b':' {
            p = skip_ws(rest, p + 1);
            if rest.as_bytes().get(p) != Some(&b'(') {
                return Err("operand types not understood".into());
            }
            let c = close_of(rest, p).ok_or("unbalanced operand types")?;
            op.types = split_top(&rest[p + 1..c], b',')
                .into_iter()
                .map(|s| s.trim().to_string())
                .collect();
            break;
        } else {
            return Err(format!(
                "unexpected text after the operands: {}",
                rest[p..].chars().take(40).collect::<String>()
            ));
        }
    }
    if op.types.len() != op.operands.len() {
        return Err("operand types not understood".into());
    }
    Ok(op)
}

// ----- text scanning -----

/// `(start, end)` of every line (without its newline).
fn line_spans(s: &str) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut start = 0;
    for (i, b) in s.bytes().enumerate() {
        if b == b'\n' {
            out.push((start, i));
            start = i + 1;
        }
    }
    if start < s.len() {
        out.push((start, s.len()));
    }
    out
}

/// Brace depth at the start of every line (strings and `//` comments
/// skipped).
fn line_depths(s: &str, lines: &[(usize, usize)]) -> Vec<usize> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(lines.len());
    let mut depth = 0usize;
    let mut li = 0;
    let mut i = 0;
    while li < lines.len() {
        if i >= lines[li].0 {
            out.push(depth);
            li += 1;
            continue;
        }
        i = scan_step(b, i, &mut |c| match c {
            b'{' => depth += 1,
            b'}' => depth = depth.saturating_sub(1),
            _ => {}
        });
    }
    out
}

/// Advances over one token: a whole string literal, a whole `//` comment,
/// or one byte (reported to `f`). Returns the next index.
fn scan_step(b: &[u8], i: usize, f: &mut impl FnMut(u8)) -> usize {
    match b[i] {
        b'"' => {
            let mut j = i + 1;
            while j < b.len() && b[j] != b'"' {
                j += if b[j] == b'\\' { 2 } else { 1 };
            }
            j + 1
        }
        b'/' if b.get(i + 1) == Some(&b'/') => {
            let mut j = i;
            while j < b.len() && b[j] != b'\n' {
                j += 1;
            }
            j
        }
        c => {
            f(c);
            i + 1
        }
    }
}

/// The `}` closing the `{` at `open`, counting braces only.
fn brace_close(s: &str, open: usize) -> Option<usize> {
    let b = s.as_bytes();
    let (mut depth, mut i) = (0usize, open);
    while i < b.len() {
        let c = b[i];
        let next = scan_step(b, i, &mut |_| {});
        if next == i + 1 {
            if c == b'{' {
                depth += 1;
            } else if c == b'}' {
                depth -= 1;
                if depth == 0 {
                    return Some(i);
                }
            }
        }
        i = next;
    }
    None
}

/// The bracket closing the one at `open` (`(`, `[`, `{`, `<`), counting
/// every bracket kind; the `>` of `->` is not a bracket.
fn close_of(s: &str, open: usize) -> Option<usize> {
    let b = s.as_bytes();
    let mut stack: Vec<u8> = Vec::new();
    let mut i = open;
    while i < b.len() {
        let c = b[i];
        let next = scan_step(b, i, &mut |_| {});
        if next == i + 1 {
            match c {
                b'(' => stack.push(b')'),
                b'[' => stack.push(b']'),
                b'{' => stack.push(b'}'),
                b'<' => stack.push(b'>'),
                b'>' if i > 0 && b[i - 1] == b'-' => {}
                b')' | b']' | b'}' | b'>' => {
                    if stack.pop() != Some(c) {
                        return None;
                    }
                    if stack.is_empty() {
                        return Some(i);
                    }
                }
                b'\n' if stack.last() == Some(&b'>') => return None,
                _ => {}
            }
        }
        i = next;
    }
    None
}

/// Splits `s` at `sep` outside brackets and strings.
fn split_top(s: &str, sep: u8) -> Vec<&str> {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let (mut depth, mut start, mut i) = (0i32, 0usize, 0usize);
    while i < b.len() {
        let c = b[i];
        let next = scan_step(b, i, &mut |_| {});
        if next == i + 1 {
            match c {
                b'(' | b'[' | b'{' | b'<' => depth += 1,
                b'>' if i > 0 && b[i - 1] == b'-' => {}
                b')' | b']' | b'}' | b'>' => depth -= 1,
                _ if c == sep && depth == 0 => {
                    out.push(&s[start..i]);
                    start = i + 1;
                }
                _ => {}
            }
        }
        i = next;
    }
    out.push(&s[start..]);
    out
}

/// Splits at the first top-level `sep`.
fn split_once_top(s: &str, sep: u8) -> Option<(&str, &str)> {
    let parts = split_top(s, sep);
    if parts.len() < 2 {
        return None;
    }
    let at = parts[0].len();
    Some((&s[..at], &s[at + 1..]))
}

/// Splits at the last top-level `sep`.
fn rsplit_top(s: &str, sep: u8) -> Option<(&str, &str)> {
    let parts = split_top(s, sep);
    if parts.len() < 2 {
        return None;
    }
    let at = s.len() - parts[parts.len() - 1].len() - 1;
    Some((&s[..at], &s[at + 1..]))
}

fn skip_ws(s: &str, mut p: usize) -> usize {
    let b = s.as_bytes();
    while p < b.len() && b[p].is_ascii_whitespace() {
        p += 1;
    }
    p
}

/// End of the type starting at `p` (up to top-level whitespace).
fn type_end(s: &str, p: usize) -> usize {
    let b = s.as_bytes();
    let mut i = p;
    while i < b.len() && !b[i].is_ascii_whitespace() {
        if matches!(b[i], b'<' | b'(' | b'[') {
            match close_of(s, i) {
                Some(c) => i = c + 1,
                None => return b.len(),
            }
        } else {
            i += 1;
        }
    }
    i
}

/// The type of a result-list entry (`tensor<2xf32> {attrs}` → the type).
fn first_type(entry: &str) -> &str {
    let e = entry.trim();
    &e[..type_end(e, 0)]
}

#[cfg(test)]
mod tests;
