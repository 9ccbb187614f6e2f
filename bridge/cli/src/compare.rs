//! Host-side comparison of conformance outputs: decoding every PJRT element
//! type (integers, booleans, IEEE and 8/6/4-bit floats, complex) and the
//! `eq` / `close` (ULP) / `almost_eq` rules of [`crate::cmd_conform::COMPARISON`].

use crate::error::{CliError, Result};
use crate::runtime::{self, HostArray};
use hlobridge::conform::CheckKind;
use pjrt_client::ElementType;

/// How one element of a dtype decodes.
#[derive(Clone, Copy)]
enum Elem {
    Bool,
    Int {
        signed: bool,
        bits: u32,
    },
    /// A float of `exp` exponent and `man` mantissa bits (plus a sign bit).
    Float(FloatFmt),
    Complex(FloatFmt),
}

/// Binary float layout and special-value convention.
#[derive(Clone, Copy)]
struct FloatFmt {
    exp: u32,
    man: u32,
    bias: i32,
    special: Special,
}

#[derive(Clone, Copy, PartialEq)]
enum Special {
    /// All-ones exponent: infinity (zero mantissa) or NaN.
    Ieee,
    /// No infinities; all-ones exponent and mantissa is NaN (`*FN`).
    Fn,
    /// No infinities, no -0; the negative-zero pattern is NaN (`*FNUZ`).
    Fnuz,
    /// No infinities or NaNs (`f4E2M1FN`).
    Finite,
    /// `f8E8M0FNU`: unsigned powers of two; 0xFF is NaN.
    E8M0,
}

const fn ff(exp: u32, man: u32, bias: i32, special: Special) -> FloatFmt {
    FloatFmt {
        exp,
        man,
        bias,
        special,
    }
}

fn elem_of(t: ElementType) -> Option<Elem> {
    use ElementType::*;
    use Special::*;
    Some(match t {
        Pred => Elem::Bool,
        S2 | S4 | S8 | S16 | S32 | S64 => Elem::Int {
            signed: true,
            bits: t.bit_width() as u32,
        },
        U2 | U4 | U8 | U16 | U32 | U64 => Elem::Int {
            signed: false,
            bits: t.bit_width() as u32,
        },
        F16 => Elem::Float(ff(5, 10, 15, Ieee)),
        Bf16 => Elem::Float(ff(8, 7, 127, Ieee)),
        F32 => Elem::Float(ff(8, 23, 127, Ieee)),
        F64 => Elem::Float(ff(11, 52, 1023, Ieee)),
        F8E5M2 => Elem::Float(ff(5, 2, 15, Ieee)),
        F8E4M3 => Elem::Float(ff(4, 3, 7, Ieee)),
        F8E4M3FN => Elem::Float(ff(4, 3, 7, Fn)),
        F8E5M2FNUZ => Elem::Float(ff(5, 2, 16, Fnuz)),
        F8E4M3FNUZ => Elem::Float(ff(4, 3, 8, Fnuz)),
        F8E4M3B11FNUZ => Elem::Float(ff(4, 3, 11, Fnuz)),
        F8E3M4 => Elem::Float(ff(3, 4, 3, Ieee)),
        F8E8M0FNU => Elem::Float(ff(8, 0, 127, E8M0)),
        F4E2M1FN => Elem::Float(ff(2, 1, 1, Finite)),
        C64 => Elem::Complex(ff(8, 23, 127, Ieee)),
        C128 => Elem::Complex(ff(11, 52, 1023, Ieee)),
        Invalid | Token => return None,
    })
}

fn le_bits(b: &[u8]) -> u64 {
    let mut v = 0u64;
    for (i, &x) in b.iter().take(8).enumerate() {
        v |= (x as u64) << (8 * i);
    }
    v
}

impl FloatFmt {
    fn sign_bit(self) -> u32 {
        self.exp + self.man
    }

    /// Decode bits to f64 (exact for every format up to f64).
    fn decode(self, bits: u64) -> f64 {
        if self.exp == 11 && self.man == 52 {
            return f64::from_bits(bits);
        }
        if self.exp == 8 && self.man == 23 {
            return f32::from_bits(bits as u32) as f64;
        }
        let emax = (1u64 << self.exp) - 1;
        let mmask = (1u64 << self.man) - 1;
        if self.special == Special::E8M0 {
            let e = bits & 0xff;
            return if e == 0xff {
                f64::NAN
            } else {
                (2f64).powi(e as i32 - 127)
            };
        }
        let neg = (bits >> self.sign_bit()) & 1 == 1;
        let e = (bits >> self.man) & emax;
        let m = bits & mmask;
        let sign = if neg { -1.0 } else { 1.0 };
        match self.special {
            Special::Ieee if e == emax => {
                return if m == 0 {
                    sign * f64::INFINITY
                } else {
                    f64::NAN
                };
            }
            Special::Fn if e == emax && m == mmask => return f64::NAN,
            Special::Fnuz if neg && e == 0 && m == 0 => return f64::NAN,
            _ => {}
        }
        let scale = (1u64 << self.man) as f64;
        let v = if e == 0 {
            m as f64 / scale * (2f64).powi(1 - self.bias)
        } else {
            (1.0 + m as f64 / scale) * (2f64).powi(e as i32 - self.bias)
        };
        sign * v
    }

    /// ULP distance as the StableHLO interpreter defines it.
    fn ulp(self, a: u64, b: u64) -> u64 {
        if a == b {
            return 0;
        }
        let (fa, fb) = (self.decode(a), self.decode(b));
        if fa.is_finite() && fb.is_finite() {
            let sb = self.sign_bit();
            let mask = (1u64 << sb) - 1;
            let signed = self.special != Special::E8M0;
            let (ma, mb) = if signed { (a & mask, b & mask) } else { (a, b) };
            let (na, nb) = if signed {
                ((a >> sb) & 1, (b >> sb) & 1)
            } else {
                (0, 0)
            };
            return if na != nb {
                ma.saturating_add(mb)
            } else {
                ma.abs_diff(mb)
            };
        }
        if fa.is_nan() && fb.is_nan() {
            0
        } else {
            u64::MAX
        }
    }
}

/// Compare one float component: `None` when it holds, else the detail of
/// the difference (possibly empty).
fn cmp_float(kind: CheckKind, f: FloatFmt, a: u64, b: u64) -> Option<String> {
    let (x, y) = (f.decode(a), f.decode(b));
    match kind {
        CheckKind::Eq => {
            if x == y || (x.is_nan() && y.is_nan()) {
                None
            } else {
                Some(String::new())
            }
        }
        CheckKind::Close {
            min_ulp_difference,
            max_ulp_difference,
        } => {
            let d = f.ulp(a, b);
            if d >= min_ulp_difference && d <= max_ulp_difference {
                None
            } else if d == u64::MAX {
                Some("ULP distance: infinite".into())
            } else {
                Some(format!("ULP distance {d}"))
            }
        }
        CheckKind::AlmostEq { tolerance } => {
            let ok = (x.is_nan() && y.is_nan())
                || x == y
                || (x - y).abs() <= tolerance * y.abs().max(1.0);
            if ok {
                None
            } else {
                Some(format!("|diff| {:e}", (x - y).abs()))
            }
        }
    }
}

fn fmt_float(f: FloatFmt, bits: u64) -> String {
    let v = f.decode(bits);
    if f.exp == 11 {
        format!("{v:?}")
    } else {
        format!("{:?}", v as f32)
    }
}

/// Compare two host arrays under `kind`.
pub(crate) fn compare(kind: CheckKind, act: &HostArray, exp: &HostArray) -> Result<()> {
    let (at, adims, abytes) = act;
    let (et, edims, ebytes) = exp;
    if at != et || adims != edims {
        return Err(CliError::Mismatch(format!(
            "type mismatch: actual {} vs expected {}",
            runtime::type_string(*at, adims),
            runtime::type_string(*et, edims)
        )));
    }
    let elem =
        elem_of(*at).ok_or_else(|| CliError::Mismatch(format!("cannot compare {at} values")))?;
    let size = at.host_byte_size();
    if abytes.len() != ebytes.len() || size == 0 {
        return Err(CliError::Mismatch("output sizes differ".into()));
    }
    let n = abytes.len() / size;
    let mut bad = 0usize;
    let mut first: Option<String> = None;
    for i in 0..n {
        let (x, y) = (
            &abytes[i * size..(i + 1) * size],
            &ebytes[i * size..(i + 1) * size],
        );
        let res: Result<(), (String, String, String)> = match elem {
            Elem::Bool => {
                let (p, q) = (x[0] != 0, y[0] != 0);
                if p == q {
                    Ok(())
                } else {
                    Err((p.to_string(), q.to_string(), String::new()))
                }
            }
            Elem::Int { signed, bits } => {
                let (p, q) = (
                    int_value(le_bits(x), signed, bits),
                    int_value(le_bits(y), signed, bits),
                );
                if p == q {
                    Ok(())
                } else {
                    Err((p.to_string(), q.to_string(), String::new()))
                }
            }
            Elem::Float(f) => {
                let (p, q) = (le_bits(x), le_bits(y));
                match cmp_float(kind, f, p, q) {
                    None => Ok(()),
                    Some(d) => Err((fmt_float(f, p), fmt_float(f, q), d)),
                }
            }
            Elem::Complex(f) => {
                let h = size / 2;
                let (pr, pi, qr, qi) = (
                    le_bits(&x[..h]),
                    le_bits(&x[h..]),
                    le_bits(&y[..h]),
                    le_bits(&y[h..]),
                );
                let re = cmp_float(kind, f, pr, qr);
                let im = cmp_float(kind, f, pi, qi);
                match (re, im) {
                    (None, None) => Ok(()),
                    (r, i) => Err((
                        format!("({}, {})", fmt_float(f, pr), fmt_float(f, pi)),
                        format!("({}, {})", fmt_float(f, qr), fmt_float(f, qi)),
                        [r, i]
                            .into_iter()
                            .flatten()
                            .filter(|s| !s.is_empty())
                            .collect::<Vec<_>>()
                            .join(", "),
                    )),
                }
            }
        };
        if let Err((p, q, detail)) = res {
            bad += 1;
            if first.is_none() {
                let d = if detail.is_empty() {
                    String::new()
                } else {
                    format!(" ({detail})")
                };
                first = Some(format!(
                    "index {:?}: actual {p} vs expected {q}{d}",
                    unflatten(i, adims)
                ));
            }
        }
    }
    match first {
        None => Ok(()),
        Some(f) => Err(CliError::Mismatch(format!(
            "{bad} of {n} elements differ ({kind}); first at {f}"
        ))),
    }
}

fn int_value(bits: u64, signed: bool, width: u32) -> i128 {
    if width >= 64 {
        return if signed {
            bits as i64 as i128
        } else {
            bits as i128
        };
    }
    let v = bits & ((1u64 << width) - 1);
    if signed && (v >> (width - 1)) & 1 == 1 {
        v as i128 - (1i128 << width)
    } else {
        v as i128
    }
}

fn unflatten(mut i: usize, dims: &[i64]) -> Vec<usize> {
    let mut idx = vec![0; dims.len()];
    for k in (0..dims.len()).rev() {
        let d = dims[k].max(1) as usize;
        idx[k] = i % d;
        i /= d;
    }
    idx
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arr(t: ElementType, vals: &[u64]) -> HostArray {
        let size = t.host_byte_size();
        let mut bytes = Vec::new();
        for &v in vals {
            bytes.extend_from_slice(&v.to_le_bytes()[..size]);
        }
        (t, vec![vals.len() as i64], bytes)
    }

    const CLOSE3: CheckKind = CheckKind::Close {
        min_ulp_difference: 0,
        max_ulp_difference: 3,
    };

    #[test]
    fn float_decoding() {
        let f16 = match elem_of(ElementType::F16) {
            Some(Elem::Float(f)) => f,
            _ => unreachable!(),
        };
        assert_eq!(f16.decode(0x3C00), 1.0);
        assert_eq!(f16.decode(0xC000), -2.0);
        assert_eq!(f16.decode(0x0001), 2f64.powi(-24));
        assert!(f16.decode(0x7E00).is_nan());
        assert_eq!(f16.decode(0x7C00), f64::INFINITY);
        let bf16 = match elem_of(ElementType::Bf16) {
            Some(Elem::Float(f)) => f,
            _ => unreachable!(),
        };
        assert_eq!(bf16.decode(0x3F80), 1.0);
        assert_eq!(bf16.decode(0x4049), 3.140625);
        let e4m3fn = match elem_of(ElementType::F8E4M3FN) {
            Some(Elem::Float(f)) => f,
            _ => unreachable!(),
        };
        assert_eq!(e4m3fn.decode(0x7E), 448.0);
        assert!(e4m3fn.decode(0x7F).is_nan());
        // ULP across zero adds magnitudes; -0 vs 0 is 0.
        assert_eq!(bf16.ulp(0x0001, 0x8001), 2);
        assert_eq!(bf16.ulp(0x0000, 0x8000), 0);
        assert_eq!(bf16.ulp(0x7FC0, 0x7FC1), 0);
        assert_eq!(bf16.ulp(0x7F80, 0x3F80), u64::MAX);
    }

    #[test]
    fn comparisons() {
        let f32s = |v: &[f32]| {
            arr(
                ElementType::F32,
                &v.iter().map(|x| x.to_bits() as u64).collect::<Vec<_>>(),
            )
        };
        let a = f32s(&[1.0, f32::NAN, -0.0]);
        let b = f32s(&[1.0, f32::NAN, 0.0]);
        compare(CheckKind::Eq, &a, &b).unwrap();
        compare(CLOSE3, &a, &b).unwrap();
        let c = f32s(&[1.0 + 4.0 * f32::EPSILON, f32::NAN, 0.0]);
        let e = compare(CLOSE3, &c, &b).unwrap_err().to_string();
        assert!(e.contains("1 of 3 elements differ"), "{e}");
        assert!(
            e.contains("index [0]") && e.contains("ULP distance 4"),
            "{e}"
        );
        compare(CheckKind::AlmostEq { tolerance: 1e-3 }, &c, &b).unwrap();
        let big = f32s(&[1000.5]);
        compare(
            CheckKind::AlmostEq { tolerance: 1e-3 },
            &big,
            &f32s(&[1000.0]),
        )
        .unwrap();
        assert!(compare(
            CheckKind::AlmostEq { tolerance: 1e-3 },
            &f32s(&[1.01]),
            &f32s(&[1.0])
        )
        .is_err());
        let i = arr(ElementType::S8, &[0xff, 2]);
        let e = compare(CheckKind::Eq, &i, &arr(ElementType::S8, &[0xfe, 2]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("actual -1 vs expected -2"), "{e}");
        let e = compare(CheckKind::Eq, &i, &arr(ElementType::U8, &[0xff, 2]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("type mismatch"), "{e}");
        let z = arr(ElementType::C64, &[(2.0f32.to_bits() as u64) << 32]);
        let e = compare(CheckKind::Eq, &z, &arr(ElementType::C64, &[0]))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("actual (0.0, 2.0) vs expected (0.0, 0.0)"),
            "{e}"
        );
    }
}
