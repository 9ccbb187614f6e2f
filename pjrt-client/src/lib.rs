//! Safe, fast Rust bindings to PJRT C API plugins.
//!
//! This crate declares its own `#[repr(C)]` subset of the PJRT C API
//! ([`ffi`]), loads a plugin with `libloading` ([`Plugin`]), and wraps the
//! PJRT objects in RAII handles that are `Send + Sync` and keep their parents
//! alive ([`Client`] → [`Device`]/[`Memory`], [`LoadedExecutable`],
//! [`Buffer`], [`Event`]).
//!
//! Every C call goes through one checked path (`pjrt_call!`): it verifies
//! the plugin's function table covers the slot, calls it, and converts a
//! returned `PJRT_Error*` into [`Error::Pjrt`] (always destroying it).
//!
//! ```no_run
//! use pjrt_client::{Client, ClientOptions, CompileOptions, Program};
//! let client = Client::discover(&ClientOptions::new().cpu_device_count(1))?;
//! let exe = client.compile(
//!     &Program::mlir_text("func.func public @main(%a: tensor<4xf32>) -> tensor<4xf32> {\n  %0 = stablehlo.sine %a : tensor<4xf32>\n  return %0 : tensor<4xf32>\n}"),
//!     &CompileOptions::default(),
//! )?;
//! let x = client.buffer_from_host(&[1.0f32, 2.0, 3.0, 4.0], &[4], None)?;
//! let y = exe.execute(&[&x])?;
//! println!("{:?}", y[0].to_host::<f32>()?);
//! # Ok::<(), pjrt_client::Error>(())
//! ```

#![warn(missing_docs)]

pub mod accel;
pub mod api;
pub mod buffer;
pub mod client;
pub mod compile;
pub mod cuda;
pub mod device;
pub mod discovery;
pub mod disk_cache;
pub mod dlpack;
pub mod dlpack_import;
pub mod dtype;
pub mod error;
pub mod event;
pub mod executable;
pub mod execute;
pub mod ffi;
pub mod hlo;
pub mod host_kernels;
pub mod layout;
pub mod plugin_memory;
pub mod targets;
pub mod topology;
pub mod wait_policy;

pub use api::{Api, ExtensionInfo, Plugin};
pub use buffer::{Buffer, Dims, OnDelete};
pub use client::{Client, ClientOptions, OptionValue};
pub use compile::{
    with_cpu_semantics, CompileOptions, Partitioner, Program, ProgramFormat, XlaOption,
    CPU_SEMANTICS,
};
pub use device::{Device, Memory};
pub use discovery::{find_plugin, DiscoveryOptions, FoundPlugin};
pub use dtype::{ElementType, NativeType};
pub use error::{Error, ErrorCode, Result};
pub use event::{Completion, Event};
pub use executable::{ArrayInfo, Executable, LoadedExecutable};
pub use execute::{next_launch_id, Donation, ExecuteOptions};
pub use hlo::{FusionInfo, OptimizedHlo};
pub use hlobridge_proto as proto;
pub use host_kernels::HostKernels;
pub use targets::{compile_for_target, Target, TargetCompile, TargetKind};
pub use topology::{CompiledMemoryStats, DeviceDescription, Topology, UnloadedExecutable};
