//! Minimal protobuf messages shared between hlobridge and PJRT plugins.
//!
//! The `.proto` in `proto/xla_subset.proto` is hlobridge's own description of
//! the subset of XLA's `CompileOptionsProto`, `ExecutableBuildOptionsProto`,
//! `DebugOptions`, `ShapeProto` and `HloModuleProto` messages that hlobridge
//! needs. Field numbers follow XLA's wire format; unknown fields are skipped
//! on decode. Code is generated at build time with `prost-build` + `protox`
//! (no system `protoc` needed).

#![allow(clippy::all, missing_docs)]

/// Messages of the `xla` protobuf package (subset).
pub mod xla {
    include!(concat!(env!("OUT_DIR"), "/xla.rs"));
}

pub use prost::Message;

#[cfg(test)]
mod tests {
    use super::xla::*;
    use prost::Message;

    #[test]
    fn compile_options_roundtrip() {
        let opts = CompileOptionsProto {
            executable_build_options: Some(ExecutableBuildOptionsProto {
                num_replicas: 1,
                num_partitions: 4,
                use_spmd_partitioning: true,
                use_shardy_partitioner: true,
                device_ordinal: -1,
                ..Default::default()
            }),
            ..Default::default()
        };
        let bytes = opts.encode_to_vec();
        assert!(!bytes.is_empty());
        let back = CompileOptionsProto::decode(bytes.as_slice()).unwrap();
        assert_eq!(back, opts);
    }

    #[test]
    fn known_wire_bytes() {
        // field 3 (executable_build_options), length-delimited, containing
        // field 4 (num_replicas) = 1 and field 5 (num_partitions) = 2.
        let opts = CompileOptionsProto {
            executable_build_options: Some(ExecutableBuildOptionsProto {
                num_replicas: 1,
                num_partitions: 2,
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(
            opts.encode_to_vec(),
            vec![0x1a, 0x04, 0x20, 0x01, 0x28, 0x02]
        );
    }

    #[test]
    fn hlo_module_with_config_decodes_unknown_fields() {
        let module = HloModuleProto {
            name: "m".into(),
            computations: vec![HloComputationProto {
                name: "fused".into(),
                is_fusion_computation: true,
                instructions: vec![HloInstructionProto {
                    name: "s".into(),
                    opcode: "sine".into(),
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        };
        let mut bytes = HloModuleProtoWithConfig {
            hlo_module: Some(module.clone()),
        }
        .encode_to_vec();
        // Append an unknown field 2 (length-delimited) as the config.
        bytes.extend_from_slice(&[0x12, 0x02, 0x08, 0x01]);
        let back = HloModuleProtoWithConfig::decode(bytes.as_slice()).unwrap();
        assert_eq!(back.hlo_module.unwrap(), module);
    }
}
