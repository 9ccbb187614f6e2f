//! The config operand of the `hlobridge_conv` custom call: a convolution's
//! attributes (dimension numbers, strides, padding, dilations, reversal,
//! groups) as a versioned `i64` vector (a `tensor<Kxi64>` constant
//! operand), its encoding, its checked decoding, and the output size XLA
//! infers from them (both sides check a convolution's result shape with it).

/// The custom-call target.
pub const TARGET: &str = "hlobridge_conv";

/// Version tag, the first element of the config operand.
pub const CONFIG_VERSION: i64 = 2;

/// Most spatial dimensions taken.
pub const MAX_SPATIAL: usize = 3;

/// A convolution's attributes as the kernel reads them. Encoded as
///
/// `[CONFIG_VERSION, nsp, feature_group_count, batch_group_count,
///   lhs_batch, lhs_feature, lhs_spatial[nsp],
///   rhs_in_feature, rhs_out_feature, rhs_spatial[nsp],
///   out_batch, out_feature, out_spatial[nsp],
///   stride[nsp], pad_lo[nsp], pad_hi[nsp], lhs_dilation[nsp],
///   rhs_dilation[nsp], reversal[nsp] (0/1)]`,
///
/// `10 + 9·nsp` values; the dimension entries are dimension indices of the
/// lhs, rhs and result (the op's `dimension_numbers`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConvConfig {
    /// `feature_group_count`.
    pub groups: i64,
    /// `batch_group_count` (at most one of the two counts exceeds 1).
    pub batch_groups: i64,
    /// Lhs dims: `[batch, feature, spatial...]`.
    pub lhs: Vec<usize>,
    /// Rhs dims: `[input feature, output feature, spatial...]`.
    pub rhs: Vec<usize>,
    /// Result dims: `[batch, feature, spatial...]`.
    pub out: Vec<usize>,
    /// Window strides.
    pub stride: Vec<i64>,
    /// Low padding (may be negative).
    pub pad_lo: Vec<i64>,
    /// High padding (may be negative).
    pub pad_hi: Vec<i64>,
    /// Input (lhs) dilation.
    pub lhs_dilation: Vec<i64>,
    /// Window (rhs) dilation.
    pub rhs_dilation: Vec<i64>,
    /// Window reversal.
    pub reverse: Vec<bool>,
}

impl ConvConfig {
    /// Number of spatial dimensions.
    pub fn spatial(&self) -> usize {
        self.stride.len()
    }

    /// The operand encoding (see the type's docs).
    pub fn encode(&self) -> Vec<i64> {
        let nsp = self.spatial();
        let mut v = vec![CONFIG_VERSION, nsp as i64, self.groups, self.batch_groups];
        for dims in [&self.lhs, &self.rhs, &self.out] {
            v.extend(dims.iter().map(|&d| d as i64));
        }
        for xs in [
            &self.stride,
            &self.pad_lo,
            &self.pad_hi,
            &self.lhs_dilation,
            &self.rhs_dilation,
        ] {
            v.extend_from_slice(xs);
        }
        v.extend(self.reverse.iter().map(|&r| r as i64));
        v
    }

    /// Reads the operand encoding back; checks its length and ranges.
    pub fn decode(v: &[i64]) -> Result<ConvConfig, String> {
        if v.len() < 3 || v[0] != CONFIG_VERSION {
            return Err(format!(
                "hlobridge_conv: config operand is not version {CONFIG_VERSION}: {v:?}"
            ));
        }
        let nsp = usize::try_from(v[1])
            .ok()
            .filter(|&n| (1..=MAX_SPATIAL).contains(&n))
            .ok_or_else(|| format!("hlobridge_conv: {} spatial dims (1..=3 taken)", v[1]))?;
        if v.len() != 10 + 9 * nsp {
            return Err(format!(
                "hlobridge_conv: config has {} values, expected {} for {nsp} spatial dims",
                v.len(),
                10 + 9 * nsp
            ));
        }
        let rank = nsp + 2;
        let mut at = 4;
        let mut dims = || -> Result<Vec<usize>, String> {
            let d: Vec<usize> = v[at..at + rank]
                .iter()
                .map(|&x| usize::try_from(x).ok().filter(|&x| x < rank))
                .collect::<Option<_>>()
                .ok_or_else(|| format!("hlobridge_conv: bad dimension numbers {v:?}"))?;
            let mut seen = vec![false; rank];
            for &x in &d {
                if std::mem::replace(&mut seen[x], true) {
                    return Err(format!("hlobridge_conv: repeated dimension in {v:?}"));
                }
            }
            at += rank;
            Ok(d)
        };
        let (lhs, rhs, out) = (dims()?, dims()?, dims()?);
        let mut at = 4 + 3 * rank;
        let mut take = || {
            let s = v[at..at + nsp].to_vec();
            at += nsp;
            s
        };
        let (stride, pad_lo, pad_hi, lhs_dilation, rhs_dilation, rev) =
            (take(), take(), take(), take(), take(), take());
        if stride
            .iter()
            .chain(&lhs_dilation)
            .chain(&rhs_dilation)
            .any(|&s| s < 1)
            || v[2] < 1
            || v[3] < 1
            || (v[2] > 1 && v[3] > 1)
        {
            return Err(format!(
                "hlobridge_conv: strides, dilations and groups must be >= 1: {v:?}"
            ));
        }
        Ok(ConvConfig {
            groups: v[2],
            batch_groups: v[3],
            lhs,
            rhs,
            out,
            stride,
            pad_lo,
            pad_hi,
            lhs_dilation,
            rhs_dilation,
            reverse: rev.iter().map(|&r| r != 0).collect(),
        })
    }
}

/// The output size of one spatial dimension (XLA's shape inference), or
/// `None` if it does not fit in `i64`.
pub fn output_size(
    input: i64,
    window: i64,
    stride: i64,
    pad_lo: i64,
    pad_hi: i64,
    lhs_dilation: i64,
    rhs_dilation: i64,
) -> Option<i64> {
    let dilated = if input == 0 {
        0
    } else {
        (input - 1).checked_mul(lhs_dilation)?.checked_add(1)?
    };
    let padded = dilated.checked_add(pad_lo)?.checked_add(pad_hi)?;
    let win = if window == 0 {
        0
    } else {
        (window - 1).checked_mul(rhs_dilation)?.checked_add(1)?
    };
    Some(if padded < win || padded < 0 {
        0
    } else {
        (padded - win) / stride + 1
    })
}
