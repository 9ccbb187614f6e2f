//! [`Lit`]: a small integer (or boolean) tensor known at refinement time —
//! a `stablehlo.constant`, or the value the folder computed for shape
//! arithmetic — with parsing from and printing to `dense<...>` bodies.

use crate::ir::{Module, Signedness, Type, TypeId};

/// Largest number of elements a folded value may have: shape vectors and
/// scalar dimension arithmetic are tiny; bigger integer tensors are data
/// and stay as they are (jaxlib's refinement uses a similar small bound).
pub const FOLD_LIMIT: usize = 16;

/// The integer element type of a folded value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct IntKind {
    /// Bit width (1 for `i1`).
    pub width: u32,
    /// `uiN` (and `i1`, whose values are 0 and 1).
    pub unsigned: bool,
}

impl IntKind {
    /// The kind of an element type, if it is an integer or `index`.
    pub fn of(m: &Module, elem: TypeId) -> Option<IntKind> {
        match m.ty(elem) {
            Type::Integer { width, signedness } if *width <= 64 => Some(IntKind {
                width: *width,
                unsigned: *width == 1 || *signedness == Signedness::Unsigned,
            }),
            Type::Index => Some(IntKind {
                width: 64,
                unsigned: false,
            }),
            _ => None,
        }
    }

    /// `v` truncated to this width and sign- or zero-extended back.
    pub fn wrap(self, v: i64) -> i64 {
        if self.width >= 64 {
            return v;
        }
        let bits = v & ((1i64 << self.width) - 1);
        if self.unsigned || bits >> (self.width - 1) == 0 {
            bits
        } else {
            bits - (1i64 << self.width)
        }
    }
}

/// A known integer tensor, row-major.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Lit {
    /// Static dimensions.
    pub dims: Vec<i64>,
    /// Elements, already wrapped to `kind`.
    pub vals: Vec<i64>,
    /// Element type.
    pub kind: IntKind,
}

/// Static dims and integer kind of a tensor type small enough to fold.
pub fn foldable_type(m: &Module, ty: TypeId) -> Option<(Vec<i64>, IntKind)> {
    typed_within(m, ty, FOLD_LIMIT)
}

/// Static dims and integer kind of a tensor type of at most `limit` elements.
pub fn typed_within(m: &Module, ty: TypeId, limit: usize) -> Option<(Vec<i64>, IntKind)> {
    let Type::Tensor {
        dims,
        elem,
        encoding: None,
    } = m.ty(ty)
    else {
        return None;
    };
    let kind = IntKind::of(m, *elem)?;
    if dims.iter().any(|&d| d < 0) {
        return None;
    }
    let n = dims
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d as usize))?;
    (n <= limit).then(|| (dims.to_vec(), kind))
}

impl Lit {
    /// Number of elements.
    pub fn len(&self) -> usize {
        self.vals.len()
    }

    /// True when it has no elements.
    pub fn is_empty(&self) -> bool {
        self.vals.is_empty()
    }

    /// Parse the body of `dense<BODY> : ty` (`3`, `true`, `[1, 2]`,
    /// `[[1], [2]]`, `"0x0100000002000000"`).
    pub fn parse(m: &Module, body: &str, ty: TypeId) -> Option<Lit> {
        Self::parse_within(m, body, ty, FOLD_LIMIT)
    }

    /// [`Lit::parse`] for values of up to `limit` elements (attributes).
    pub fn parse_within(m: &Module, body: &str, ty: TypeId, limit: usize) -> Option<Lit> {
        let (dims, kind) = typed_within(m, ty, limit)?;
        let n: usize = dims.iter().map(|&d| d as usize).product();
        let body = body.trim();
        let mut vals = Vec::with_capacity(n);
        if let Some(hex) = body.strip_prefix("\"0x").and_then(|b| b.strip_suffix('"')) {
            let bytes = (kind.width as usize).div_ceil(8).max(1);
            if hex.len() % (2 * bytes) != 0 || !hex.is_ascii() {
                return None;
            }
            for chunk in hex.as_bytes().chunks(2 * bytes) {
                let mut v: u64 = 0;
                for (i, pair) in chunk.chunks(2).enumerate() {
                    let s = std::str::from_utf8(pair).ok()?;
                    v |= (u64::from_str_radix(s, 16).ok()?) << (8 * i);
                }
                vals.push(kind.wrap(v as i64));
            }
        } else {
            for tok in body.split(['[', ']', ',']) {
                let tok = tok.trim();
                if tok.is_empty() {
                    continue;
                }
                let v = match tok {
                    "true" => 1,
                    "false" => 0,
                    t => crate::parse::parse_int_text(t)
                        .or_else(|| t.parse::<u64>().ok().map(|u| u as i64))?,
                };
                vals.push(kind.wrap(v));
            }
        }
        match vals.len() {
            1 if n != 1 => vals = vec![vals[0]; n],
            k if k == n => {}
            _ => return None,
        }
        Some(Lit { dims, vals, kind })
    }

    /// The `dense<...>` body that prints this value.
    pub fn body(&self) -> String {
        let one = |v: i64| -> String {
            if self.kind.width == 1 {
                if v != 0 { "true" } else { "false" }.to_string()
            } else if self.kind.unsigned && self.kind.width == 64 {
                (v as u64).to_string()
            } else {
                v.to_string()
            }
        };
        if let Some(&first) = self.vals.first() {
            if self.vals.iter().all(|&v| v == first) {
                return one(first);
            }
        } else {
            return String::new();
        }
        fn nest(dims: &[i64], vals: &[i64], one: &dyn Fn(i64) -> String, out: &mut String) {
            out.push('[');
            if dims.len() <= 1 {
                for (i, v) in vals.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    out.push_str(&one(*v));
                }
            } else {
                let inner = vals.len() / (dims[0].max(1) as usize);
                for (i, chunk) in vals.chunks(inner.max(1)).enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    nest(&dims[1..], chunk, one, out);
                }
            }
            out.push(']');
        }
        let mut out = String::new();
        nest(&self.dims, &self.vals, &one, &mut out);
        out
    }

    /// The single element of a one-element value.
    pub fn scalar(&self) -> Option<i64> {
        (self.vals.len() == 1).then(|| self.vals[0])
    }
}

/// Row-major strides of `dims`.
pub fn strides(dims: &[i64]) -> Vec<usize> {
    let mut s = vec![1usize; dims.len()];
    for i in (0..dims.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * dims[i + 1].max(0) as usize;
    }
    s
}

/// The multi-index of flat position `flat` in `dims`.
pub fn unflatten(mut flat: usize, dims: &[i64]) -> Vec<usize> {
    let mut idx = vec![0usize; dims.len()];
    for i in (0..dims.len()).rev() {
        let d = dims[i].max(1) as usize;
        idx[i] = flat % d;
        flat /= d;
    }
    idx
}
