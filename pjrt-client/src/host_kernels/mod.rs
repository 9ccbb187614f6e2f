//! Host kernels: native code that XLA:CPU runs as typed FFI custom calls,
//! registered with the plugin through the PJRT FFI extension.
//!
//! Two families: [`gemm`], small and medium matrix products, which the CPU
//! plugin's own dot runs slowly because it wakes its thread pool for them;
//! and [`conv`], convolutions as im2col plus that GEMM, in the operands'
//! own layout (no NCHW/NHWC transposes), whose f32 ones run on oneDNN's
//! convolutions (backward weights, forward, backward data) when [`onednn`]
//! finds the library.
//! Registration happens once per plugin, when a client for
//! the `cpu` platform is created; programs use the kernels only after the
//! bridge's `host_gemm` / `host_conv` rewrites have turned dots and
//! convolutions into calls to them.
//!
//! `HLOBRIDGE_HOST_KERNELS=0` turns registration off (and with it the
//! rewrite, since [`HostKernels::gemm`] is then false).

pub mod conv;
pub mod donation;
pub mod fp_env;
mod frame;
pub mod gemm;
pub mod onednn;
pub mod xla_ffi;

use crate::api::Api;
use crate::error::{Error, Result};
use crate::ffi::{self, PJRT_FFI_Extension, PJRT_FFI_Register_Handler_Args};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};

/// The XLA platform name host kernels are registered for.
pub const HOST_PLATFORM: &str = "Host";

/// Which host kernels a plugin has registered.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostKernels {
    /// The `hlobridge_gemm_*` targets are registered (and `hlobridge_conv`
    /// with them: registration is all or nothing).
    pub gemm: bool,
    /// Why they are not, when they are not.
    pub reason: Option<String>,
}

impl HostKernels {
    fn unavailable(reason: impl Into<String>) -> Self {
        HostKernels {
            gemm: false,
            reason: Some(reason.into()),
        }
    }
}

/// Whether `HLOBRIDGE_HOST_KERNELS` allows host kernels (default: yes).
pub fn enabled_by_env() -> bool {
    !hlobridge_config::is_off(hlobridge_config::Var::HostKernels)
}

/// Registers the host kernels with `api`'s XLA runtime once per plugin and
/// returns what is available. Never fails: a plugin without the FFI
/// extension, or one that refuses a registration, simply has none.
pub fn ensure_registered(api: &Api) -> HostKernels {
    static DONE: OnceLock<Mutex<HashMap<PathBuf, HostKernels>>> = OnceLock::new();
    let map = DONE.get_or_init(|| Mutex::new(HashMap::new()));
    let mut map = map.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(k) = map.get(api.path()) {
        return k.clone();
    }
    let k = if enabled_by_env() {
        match register_all(api) {
            Ok(()) => HostKernels {
                gemm: true,
                reason: None,
            },
            Err(e) => {
                tracing::info!(error = %e, "host kernels not registered");
                HostKernels::unavailable(e.to_string())
            }
        }
    } else {
        HostKernels::unavailable("disabled by HLOBRIDGE_HOST_KERNELS")
    };
    tracing::debug!(?k, plugin = %api.path().display(), "host kernels");
    map.insert(api.path().to_path_buf(), k.clone());
    k
}

fn ffi_extension(api: &Api) -> Result<&PJRT_FFI_Extension> {
    // SAFETY: the table pointer is the plugin's own, valid while loaded.
    let mut ext = unsafe { (*api.raw_table()).extension_start };
    let mut hops = 0;
    while !ext.is_null() && hops < 64 {
        // SAFETY: every extension starts with PJRT_Extension_Base.
        let base = unsafe { &*ext };
        if base.type_ == ffi::PJRT_Extension_Type_FFI {
            if base.struct_size < std::mem::size_of::<PJRT_FFI_Extension>() {
                return Err(Error::Unsupported {
                    function: "PJRT_FFI_Register_Handler (FFI extension too old)",
                });
            }
            // SAFETY: the tag and size say this is a PJRT_FFI_Extension.
            return Ok(unsafe { &*(ext as *const PJRT_FFI_Extension) });
        }
        ext = base.next;
        hops += 1;
    }
    Err(Error::Unsupported {
        function: "PJRT_FFI_Register_Handler (no FFI extension)",
    })
}

/// A host kernel's FFI entry point.
type HostHandler =
    unsafe extern "C" fn(*mut xla_ffi::XLA_FFI_CallFrame) -> *mut xla_ffi::XLA_FFI_Error;

fn register_all(api: &Api) -> Result<()> {
    let ext = ffi_extension(api)?;
    let register = ext.register_handler.ok_or(Error::Unsupported {
        function: "PJRT_FFI_Register_Handler",
    })?;
    let conv = [(conv::TARGET, conv::conv_handler as HostHandler)];
    let gemm = gemm::TARGETS
        .iter()
        .zip(gemm::HANDLERS)
        .map(|((name, _, _), h)| (*name, h as HostHandler));
    for (name, handler) in gemm.chain(conv) {
        let mut args = PJRT_FFI_Register_Handler_Args {
            struct_size: ffi::PJRT_FFI_Register_Handler_Args_STRUCT_SIZE,
            target_name: name.as_ptr().cast(),
            target_name_size: name.len(),
            handler: handler as *mut std::ffi::c_void,
            platform_name: HOST_PLATFORM.as_ptr().cast(),
            platform_name_size: HOST_PLATFORM.len(),
            traits: 0,
        };
        // SAFETY: `args` is fully initialised; the names outlive the call
        // (the plugin copies them) and the handler is a 'static function.
        unsafe { api.invoke(register, "PJRT_FFI_Register_Handler", &mut args)? };
    }
    Ok(())
}
