//! What the host lowering did to one program, in a form every front end's
//! receipt or log prints the same way, and that travels with the program
//! through the disk cache (a program loaded from disk names the same
//! kernels as the one compiled).

use std::collections::BTreeMap;

/// The host lowering's effect on one program.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostReport {
    /// The lowering's cache tag (settings and rewrite versions), or empty
    /// when no lowering applied (not `cpu`, no host kernels, or off).
    pub lowering: String,
    /// Products turned into host GEMM calls.
    pub gemm_rewritten: usize,
    /// Products seen.
    pub gemm_products: usize,
    /// Convolutions turned into host convolution calls.
    pub conv_rewritten: usize,
    /// Convolutions seen.
    pub convolutions: usize,
    /// Products left to XLA given their operands unmerged
    /// (`hlobridge::lower::dot_operands`).
    pub dot_operands: usize,
    /// Reductions run in two stages (`hlobridge::lower::reduce_stages`).
    pub reduce_stages: usize,
    /// Host-kernel custom calls in the compiled program, by target name
    /// (`hlobridge_gemm_nn`, `hlobridge_conv`, ...).
    pub kernels: BTreeMap<String, usize>,
    /// The lowered program did not compile and the original was compiled
    /// instead (so `kernels` is empty).
    pub fell_back: bool,
}

impl HostReport {
    /// `name=count` per kernel, comma-separated (`-` for none): the one
    /// spelling of the kernel list in receipts and logs.
    pub fn kernels_line(&self) -> String {
        if self.kernels.is_empty() {
            return "-".into();
        }
        self.kernels
            .iter()
            .map(|(k, n)| format!("{k}={n}"))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The encoding stored in front of a disk-cache payload.
    pub(crate) fn encode(&self) -> String {
        format!(
            "lowering={}\ngemm={}/{}\nconv={}/{}\nfell_back={}\nkernels={}\ndot_operands={}\nreduce_stages={}",
            self.lowering,
            self.gemm_rewritten,
            self.gemm_products,
            self.conv_rewritten,
            self.convolutions,
            self.fell_back as u8,
            self.kernels_line(),
            self.dot_operands,
            self.reduce_stages
        )
    }

    /// Reads [`Self::encode`] back; `None` if it is not one.
    pub(crate) fn decode(s: &str) -> Option<HostReport> {
        let mut r = HostReport::default();
        let mut lines = s.split('\n');
        let mut field = |name: &str| -> Option<String> {
            lines
                .next()?
                .strip_prefix(name)?
                .strip_prefix('=')
                .map(str::to_string)
        };
        r.lowering = field("lowering")?;
        let pair = |v: String| -> Option<(usize, usize)> {
            let (a, b) = v.split_once('/')?;
            Some((a.parse().ok()?, b.parse().ok()?))
        };
        (r.gemm_rewritten, r.gemm_products) = pair(field("gemm")?)?;
        (r.conv_rewritten, r.convolutions) = pair(field("conv")?)?;
        r.fell_back = field("fell_back")? == "1";
        let k = field("kernels")?;
        if k != "-" {
            for item in k.split(',') {
                let (name, n) = item.split_once('=')?;
                r.kernels.insert(name.to_string(), n.parse().ok()?);
            }
        }
        r.dot_operands = field("dot_operands")?.parse().ok()?;
        r.reduce_stages = field("reduce_stages")?.parse().ok()?;
        Some(r)
    }
}

/// Host-kernel custom calls (`stablehlo.custom_call @hlobridge_...`) and
/// the plugin's oneDNN calls the lowering wrote
/// ([`hlobridge::lower::onednn_call`]) in module text, by target.
pub(crate) fn count_kernels(text: &str) -> BTreeMap<String, usize> {
    use hlobridge::lower::onednn_call::{CONVOLUTION, MATMUL, SOFTMAX};
    let mut out = BTreeMap::new();
    for onednn in [CONVOLUTION, MATMUL, SOFTMAX] {
        let n = text.matches(&format!("custom_call @\"{onednn}\"")).count()
            + text.matches(&format!("custom_call @{onednn}(")).count();
        if n > 0 {
            out.insert(onednn.to_string(), n);
        }
    }
    for (at, _) in text.match_indices("custom_call @hlobridge_") {
        let name: String = text[at + "custom_call @".len()..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        *out.entry(name).or_insert(0) += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encoding_round_trips() {
        let mut r = HostReport {
            lowering: "host_gemm.v5:1:2:3;host_conv.v2:4".into(),
            gemm_rewritten: 2,
            gemm_products: 3,
            conv_rewritten: 1,
            convolutions: 1,
            dot_operands: 2,
            reduce_stages: 5,
            ..HostReport::default()
        };
        r.kernels.insert("hlobridge_gemm_nn".into(), 2);
        r.kernels.insert("hlobridge_conv".into(), 1);
        assert_eq!(HostReport::decode(&r.encode()), Some(r.clone()));
        assert_eq!(r.kernels_line(), "hlobridge_conv=1,hlobridge_gemm_nn=2");
        let empty = HostReport::default();
        assert_eq!(HostReport::decode(&empty.encode()), Some(empty));
        assert_eq!(HostReport::decode("garbage"), None);
    }

    #[test]
    fn kernels_are_counted_by_target() {
        let t = "%0 = stablehlo.custom_call @hlobridge_gemm_nt(%a, %b)\n\
                 %1 = stablehlo.custom_call @hlobridge_gemm_nt(%0, %b)\n\
                 %2 = stablehlo.custom_call @hlobridge_conv(%x, %w, %c)\n\
                 %3 = stablehlo.custom_call @other(%x)";
        let k = count_kernels(t);
        assert_eq!(k.len(), 2);
        assert_eq!(k["hlobridge_gemm_nt"], 2);
        assert_eq!(k["hlobridge_conv"], 1);
    }
}
