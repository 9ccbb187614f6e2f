//! Decoding the optimized program of an executable: parameters, fusions and
//! the opcodes inside each fusion (used to prove cross-segment fusion).

use crate::buffer::Dims;
use crate::dtype::ElementType;
use crate::error::{Error, Result};
use crate::executable::ArrayInfo;
use hlobridge_proto::xla::{self, HloComputationProto, HloModuleProto, PrimitiveType, ShapeProto};
use prost::Message;
use std::collections::HashMap;

/// A fusion instruction and what it fused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FusionInfo {
    /// Name of the `fusion` instruction.
    pub name: String,
    /// Fusion kind (`kLoop`, `kInput`, `kOutput`, `kCustom`...).
    pub kind: String,
    /// Name of the computation containing the fusion instruction.
    pub parent: String,
    /// Name of the fused computation.
    pub computation: String,
    /// Opcodes of all instructions inside the fused computation (including
    /// nested called computations), in order, excluding `parameter`.
    pub opcodes: Vec<String>,
}

impl FusionInfo {
    /// Whether every opcode in `ops` appears inside this fusion.
    pub fn contains_all(&self, ops: &[&str]) -> bool {
        ops.iter().all(|o| self.opcodes.iter().any(|x| x == o))
    }
}

/// The optimized HLO module of an executable.
#[derive(Debug, Clone)]
pub struct OptimizedHlo {
    /// The decoded module (our minimal proto subset).
    pub module: HloModuleProto,
}

fn array_info(s: &ShapeProto) -> Option<ArrayInfo> {
    let p = PrimitiveType::try_from(s.element_type).ok()?;
    if p == PrimitiveType::Tuple {
        return None;
    }
    Some(ArrayInfo {
        dtype: ElementType::from_primitive(p)?,
        dims: Dims::from_slice(&s.dimensions),
    })
}

impl OptimizedHlo {
    /// Decodes `hlo_with_config` (`HloModuleProtoWithConfig`) or `hlo`
    /// (`HloModuleProto`) bytes.
    pub fn decode(bytes: &[u8], format: &str) -> Result<OptimizedHlo> {
        let module = match format {
            "hlo_with_config" => xla::HloModuleProtoWithConfig::decode(bytes)
                .map_err(|source| Error::Decode {
                    what: "HloModuleProtoWithConfig",
                    source,
                })?
                .hlo_module
                .unwrap_or_default(),
            "hlo" => HloModuleProto::decode(bytes).map_err(|source| Error::Decode {
                what: "HloModuleProto",
                source,
            })?,
            other => {
                return Err(Error::InvalidArgument(format!(
                    "unsupported optimized program format {other:?}"
                )))
            }
        };
        Ok(OptimizedHlo { module })
    }

    /// The entry computation.
    pub fn entry(&self) -> Option<&HloComputationProto> {
        let m = &self.module;
        m.computations
            .iter()
            .find(|c| c.id == m.entry_computation_id && m.entry_computation_id != 0)
            .or_else(|| {
                m.computations
                    .iter()
                    .find(|c| c.name == m.entry_computation_name)
            })
            .or(m.computations.last())
    }

    /// Entry parameter shapes (array parameters only; `None` if a parameter
    /// is a tuple or the module carries no shapes).
    pub fn entry_parameters(&self) -> Option<Vec<ArrayInfo>> {
        let shapes: Vec<&ShapeProto> = match &self.module.host_program_shape {
            Some(ps) if !ps.parameters.is_empty() || ps.result.is_some() => {
                ps.parameters.iter().collect()
            }
            _ => {
                let entry = self.entry()?;
                let mut params: Vec<(i64, &ShapeProto)> = entry
                    .instructions
                    .iter()
                    .filter(|i| i.opcode == "parameter")
                    .filter_map(|i| i.shape.as_ref().map(|s| (i.parameter_number, s)))
                    .collect();
                params.sort_by_key(|p| p.0);
                params.into_iter().map(|p| p.1).collect()
            }
        };
        shapes.into_iter().map(array_info).collect()
    }

    /// Entry parameter numbers that may donate their buffer (aliased to an
    /// output or declared buffer donors).
    pub fn donatable_parameters(&self) -> Vec<usize> {
        let mut v: Vec<usize> = self
            .module
            .input_output_alias
            .iter()
            .flat_map(|a| a.entries.iter().map(|e| e.parameter_number as usize))
            .chain(
                self.module
                    .buffer_donor
                    .iter()
                    .flat_map(|d| d.entries.iter().map(|e| e.parameter_number as usize)),
            )
            .collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    fn by_id(&self) -> HashMap<i64, &HloComputationProto> {
        self.module.computations.iter().map(|c| (c.id, c)).collect()
    }

    fn collect_opcodes(
        &self,
        comps: &HashMap<i64, &HloComputationProto>,
        c: &HloComputationProto,
        out: &mut Vec<String>,
        depth: usize,
    ) {
        if depth > 32 {
            return;
        }
        for i in &c.instructions {
            if i.opcode != "parameter" {
                out.push(i.opcode.clone());
            }
            for id in &i.called_computation_ids {
                if let Some(sub) = comps.get(id) {
                    self.collect_opcodes(comps, sub, out, depth + 1);
                }
            }
        }
    }

    /// All fusion instructions outside fused computations, with the opcodes
    /// they contain.
    pub fn fusions(&self) -> Vec<FusionInfo> {
        let comps = self.by_id();
        let mut out = Vec::new();
        for c in &self.module.computations {
            if c.is_fusion_computation {
                continue;
            }
            for i in c.instructions.iter().filter(|i| i.opcode == "fusion") {
                let Some(fc) = i
                    .called_computation_ids
                    .first()
                    .and_then(|id| comps.get(id))
                else {
                    continue;
                };
                let mut opcodes = Vec::new();
                self.collect_opcodes(&comps, fc, &mut opcodes, 0);
                out.push(FusionInfo {
                    name: i.name.clone(),
                    kind: i.fusion_kind.clone(),
                    parent: c.name.clone(),
                    computation: fc.name.clone(),
                    opcodes,
                });
            }
        }
        out
    }

    /// Opcode → count over all computations.
    pub fn opcode_counts(&self) -> HashMap<String, usize> {
        let mut m = HashMap::new();
        for c in &self.module.computations {
            for i in &c.instructions {
                *m.entry(i.opcode.clone()).or_insert(0) += 1;
            }
        }
        m
    }

    /// A compact, HLO-like text listing (`name = opcode(operands)` per
    /// instruction). Not the exact XLA HLO text syntax.
    pub fn to_text(&self) -> String {
        use std::fmt::Write;
        let mut names: HashMap<i64, &str> = HashMap::new();
        let comp_names: HashMap<i64, &str> = self
            .module
            .computations
            .iter()
            .map(|c| (c.id, c.name.as_str()))
            .collect();
        let mut s = String::new();
        let _ = writeln!(s, "HloModule {}", self.module.name);
        for c in &self.module.computations {
            for i in &c.instructions {
                names.insert(i.id, &i.name);
            }
            let entry = if c.id == self.module.entry_computation_id {
                "ENTRY "
            } else {
                ""
            };
            let fused = if c.is_fusion_computation {
                " (fused)"
            } else {
                ""
            };
            let _ = writeln!(s, "\n{entry}{}{fused} {{", c.name);
            for i in &c.instructions {
                let shape = i
                    .shape
                    .as_ref()
                    .and_then(array_info)
                    .map(|a| a.to_string())
                    .unwrap_or_else(|| "(...)".into());
                let ops: Vec<&str> = i
                    .operand_ids
                    .iter()
                    .map(|o| names.get(o).copied().unwrap_or("?"))
                    .collect();
                let root = if i.id == c.root_id { "ROOT " } else { "" };
                let _ = write!(
                    s,
                    "  {root}{} = {shape} {}({})",
                    i.name,
                    i.opcode,
                    ops.join(", ")
                );
                if !i.fusion_kind.is_empty() {
                    let _ = write!(s, ", kind={}", i.fusion_kind);
                }
                let called: Vec<&str> = i
                    .called_computation_ids
                    .iter()
                    .map(|id| comp_names.get(id).copied().unwrap_or("?"))
                    .collect();
                if !called.is_empty() {
                    let _ = write!(s, ", calls={}", called.join(","));
                }
                let _ = writeln!(s);
            }
            let _ = writeln!(s, "}}");
        }
        s
    }
}
