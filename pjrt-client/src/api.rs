//! Loading a PJRT plugin and the single checked path for every C call.
//!
//! [`Plugin`] owns the `dlopen`ed library (never unloaded: XLA plugins do not
//! support being unloaded) and a private copy of the plugin's `PJRT_Api`
//! table truncated to the plugin's `struct_size`, so slots beyond what the
//! plugin provides read as `None`. All calls go through [`pjrt_call!`], which
//! checks that the slot is covered by the plugin's table, calls it, and
//! turns a returned `PJRT_Error*` into [`Error::Pjrt`] (always destroying it).

use crate::error::{Error, ErrorCode, Result};
use crate::ffi::{self, PJRT_Api, PJRT_Error, PjrtStruct};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

/// Calls a PJRT C function through the plugin's table with full checking.
///
/// `pjrt_call!(api, PJRT_Name, &mut args)` evaluates to `Result<()>`. It must
/// be used inside `unsafe` because `args` must be valid for the function.
#[macro_export]
#[doc(hidden)]
macro_rules! pjrt_call {
    ($api:expr, $f:ident, $args:expr) => {{
        let api: &$crate::api::Api = $api;
        match api.lookup(
            ::std::mem::offset_of!($crate::ffi::PJRT_Api, $f),
            stringify!($f),
            |t| t.$f,
        ) {
            Ok(f) => api.invoke(f, stringify!($f), $args),
            Err(e) => Err(e),
        }
    }};
}

/// Information about one extension in the plugin's extension chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExtensionInfo {
    /// `PJRT_Extension_Type` value.
    pub type_id: i32,
    /// The extension's `struct_size`.
    pub struct_size: usize,
}

/// A loaded PJRT API table (see module docs). Usually used via [`Plugin`].
pub struct Api {
    table: Box<PJRT_Api>,
    raw_table: *const PJRT_Api,
    struct_size: usize,
    version: (i32, i32),
    path: PathBuf,
    extensions: Vec<ExtensionInfo>,
    _lib: libloading::Library,
}

// SAFETY: the PJRT C API is thread-safe; the table is immutable after load.
unsafe impl Send for Api {}
// SAFETY: see above.
unsafe impl Sync for Api {}

impl std::fmt::Debug for Api {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Api")
            .field("path", &self.path)
            .field("version", &self.version)
            .field("struct_size", &self.struct_size)
            .finish()
    }
}

impl Api {
    /// Returns the function pointer in `offset` if the plugin's table covers
    /// it and it is non-null.
    #[inline(always)]
    pub fn lookup<F: Copy>(
        &self,
        offset: usize,
        function: &'static str,
        get: impl FnOnce(&PJRT_Api) -> Option<F>,
    ) -> Result<F> {
        if offset + std::mem::size_of::<usize>() > self.struct_size {
            return Err(Error::Unsupported { function });
        }
        get(&self.table).ok_or(Error::Unsupported { function })
    }

    /// Calls `f(args)` and converts a returned error.
    ///
    /// # Safety
    /// `args` must be a valid, fully initialised argument struct for `f`.
    #[inline(always)]
    pub unsafe fn invoke<A>(
        &self,
        f: unsafe extern "C" fn(*mut A) -> *mut PJRT_Error,
        function: &'static str,
        args: &mut A,
    ) -> Result<()> {
        // SAFETY: caller guarantees `args` is valid for `f`.
        let err = unsafe { f(args) };
        if err.is_null() {
            Ok(())
        } else {
            Err(self.consume_error(err, function))
        }
    }

    /// Converts a non-null `PJRT_Error*` into [`Error::Pjrt`] and destroys it.
    #[cold]
    pub fn consume_error(&self, err: *mut PJRT_Error, function: &'static str) -> Error {
        let mut code = ErrorCode::Unknown;
        let mut message = String::new();
        if let Some(get_code) = self.table.PJRT_Error_GetCode {
            let mut a = ffi::PJRT_Error_GetCode_Args::new();
            a.error = err;
            // SAFETY: `err` is a live error from this plugin.
            let e2 = unsafe { get_code(&mut a) };
            if e2.is_null() {
                code = ErrorCode::from_raw(a.code);
            } else {
                self.destroy_error(e2);
            }
        }
        if let Some(get_msg) = self.table.PJRT_Error_Message {
            let mut a = ffi::PJRT_Error_Message_Args::new();
            a.error = err;
            // SAFETY: `err` is live; message has the lifetime of `err`, and we
            // copy it before destroying `err`.
            unsafe {
                get_msg(&mut a);
                message = str_from_raw(a.message, a.message_size);
            }
        }
        self.destroy_error(err);
        tracing::debug!(function, ?code, %message, "PJRT call failed");
        Error::Pjrt {
            function,
            code,
            message,
        }
    }

    /// Destroys an error we own without reading it.
    pub(crate) fn destroy_error(&self, err: *mut PJRT_Error) {
        if let Some(destroy) = self.table.PJRT_Error_Destroy {
            let mut a = ffi::PJRT_Error_Destroy_Args::new();
            a.error = err;
            // SAFETY: `err` is a live error owned by us; destroyed once.
            unsafe { destroy(&mut a) };
        }
    }

    /// The plugin's `PJRT_Api` version `(major, minor)`.
    pub fn version(&self) -> (i32, i32) {
        self.version
    }

    /// The plugin table's `struct_size`.
    pub fn struct_size(&self) -> usize {
        self.struct_size
    }

    /// The plugin library path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Extensions advertised by the plugin.
    pub fn extensions(&self) -> &[ExtensionInfo] {
        &self.extensions
    }

    /// Our truncated copy of the function table (slots the plugin does not
    /// provide are `None`). For benchmarks and low-level callers.
    pub fn table(&self) -> &PJRT_Api {
        &self.table
    }

    /// The plugin's own table pointer.
    pub fn raw_table(&self) -> *const PJRT_Api {
        self.raw_table
    }
}

/// A loaded, initialised PJRT plugin. Cheap to clone (`Arc`).
#[derive(Clone, Debug)]
pub struct Plugin {
    api: Arc<Api>,
}

fn registry() -> &'static Mutex<HashMap<PathBuf, Plugin>> {
    static R: OnceLock<Mutex<HashMap<PathBuf, Plugin>>> = OnceLock::new();
    R.get_or_init(|| Mutex::new(HashMap::new()))
}

impl Plugin {
    /// Loads the plugin at `path` (or returns the already loaded instance),
    /// validates its API table and calls `PJRT_Plugin_Initialize`.
    pub fn load(path: impl AsRef<Path>) -> Result<Plugin> {
        let path = path.as_ref();
        if !path.exists() {
            return Err(Error::PluginNotFound {
                path: path.to_path_buf(),
            });
        }
        let canon = path.canonicalize()?;
        let mut reg = registry().lock().unwrap_or_else(|e| e.into_inner());
        if let Some(p) = reg.get(&canon) {
            return Ok(p.clone());
        }
        let api = Arc::new(load_api(&canon)?);
        // SAFETY: args struct is zeroed and valid for Plugin_Initialize.
        unsafe {
            let mut a = ffi::PJRT_Plugin_Initialize_Args::new();
            match pjrt_call!(&api, PJRT_Plugin_Initialize, &mut a) {
                Ok(()) | Err(Error::Unsupported { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        tracing::info!(path = %canon.display(), version = ?api.version, "loaded PJRT plugin");
        let plugin = Plugin { api };
        reg.insert(canon, plugin.clone());
        Ok(plugin)
    }

    /// Finds a plugin via [`crate::discovery`] and loads it.
    pub fn discover() -> Result<Plugin> {
        let found = crate::discovery::find_plugin(&crate::discovery::DiscoveryOptions::default())?;
        Plugin::load(found.path)
    }

    /// The checked API table.
    pub fn api(&self) -> &Api {
        &self.api
    }

    /// Plugin attributes (`xla_version`, `stablehlo_current_version`, ...).
    pub fn attributes(&self) -> Result<Vec<(String, crate::client::OptionValue)>> {
        let mut a = ffi::PJRT_Plugin_Attributes_Args::new();
        // SAFETY: valid args; attributes live for the process lifetime.
        unsafe {
            pjrt_call!(self.api(), PJRT_Plugin_Attributes, &mut a)?;
            Ok(crate::client::read_named_values(
                a.attributes,
                a.num_attributes,
            ))
        }
    }
}

#[cfg(test)]
impl Plugin {
    /// A second, unregistered handle on this plugin's library whose private
    /// function table `patch` may change: unit tests use it to make single
    /// PJRT calls fail.
    pub(crate) fn patched_for_tests(&self, patch: impl FnOnce(&mut PJRT_Api)) -> Result<Plugin> {
        let mut api = load_api(self.api.path())?;
        patch(&mut api.table);
        Ok(Plugin { api: Arc::new(api) })
    }
}

/// Copies `len` bytes at `ptr` into a `String` (lossy UTF-8).
///
/// # Safety
/// `ptr` must be null or point to `len` readable bytes.
pub(crate) unsafe fn str_from_raw(ptr: *const std::os::raw::c_char, len: usize) -> String {
    if ptr.is_null() || len == 0 {
        return String::new();
    }
    // SAFETY: guaranteed by the caller.
    let bytes = unsafe { std::slice::from_raw_parts(ptr as *const u8, len) };
    String::from_utf8_lossy(bytes).into_owned()
}

type GetPjrtApiFn = unsafe extern "C" fn() -> *const PJRT_Api;

fn load_api(path: &Path) -> Result<Api> {
    // SAFETY: loading a shared library runs its initialisers; this is the
    // inherent contract of loading a PJRT plugin chosen by the user.
    let lib = unsafe { libloading::Library::new(path) }.map_err(|e| Error::PluginLoad {
        path: path.to_path_buf(),
        message: e.to_string(),
    })?;
    // Before any plugin code beyond its initialisers runs (docs there).
    crate::plugin_memory::install(path);
    // SAFETY: the symbol type matches PJRT's `const PJRT_Api* GetPjrtApi()`.
    let get: GetPjrtApiFn = match unsafe { lib.get::<GetPjrtApiFn>(b"GetPjrtApi\0") } {
        Ok(sym) => *sym,
        Err(_) => {
            return Err(Error::NotAPjrtPlugin {
                path: path.to_path_buf(),
            })
        }
    };
    // SAFETY: calling the plugin's exported entry point.
    let raw = unsafe { get() };
    let incompatible = |reason: String| Error::IncompatibleApi {
        path: path.to_path_buf(),
        reason,
    };
    if raw.is_null() {
        return Err(incompatible("GetPjrtApi returned null".into()));
    }
    // SAFETY: every PJRT_Api starts with a size_t struct_size.
    let struct_size = unsafe { *(raw as *const usize) };
    let header = std::mem::offset_of!(PJRT_Api, PJRT_Error_GetCode) + std::mem::size_of::<usize>();
    if struct_size < header {
        return Err(incompatible(format!(
            "PJRT_Api struct_size {struct_size} < {header}"
        )));
    }
    let mut table = Box::new(PJRT_Api::new());
    let n = struct_size.min(std::mem::size_of::<PJRT_Api>());
    // SAFETY: the plugin guarantees `struct_size` readable bytes at `raw`; we
    // copy at most that many into our zeroed table of at least `n` bytes.
    unsafe {
        std::ptr::copy_nonoverlapping(raw as *const u8, &mut *table as *mut PJRT_Api as *mut u8, n);
    }
    table.struct_size = struct_size;
    let v = &table.pjrt_api_version;
    let vend = std::mem::offset_of!(ffi::PJRT_Api_Version, minor_version) + 4;
    if v.struct_size < vend {
        return Err(incompatible(format!(
            "PJRT_Api_Version struct_size {} too small",
            v.struct_size
        )));
    }
    let version = (v.major_version, v.minor_version);
    if version.0 != 0 {
        return Err(incompatible(format!(
            "major version {} (this crate supports 0.x)",
            version.0
        )));
    }
    if table.PJRT_Error_Destroy.is_none() || table.PJRT_Error_Message.is_none() {
        return Err(incompatible(
            "missing PJRT_Error_Destroy/PJRT_Error_Message".into(),
        ));
    }
    let extensions = read_extensions(table.extension_start);
    tracing::debug!(?version, struct_size, ?extensions, "PJRT_Api table");
    Ok(Api {
        table,
        raw_table: raw,
        struct_size,
        version,
        path: path.to_path_buf(),
        extensions,
        _lib: lib,
    })
}

fn read_extensions(mut ext: *mut ffi::PJRT_Extension_Base) -> Vec<ExtensionInfo> {
    let mut out = Vec::new();
    let need = std::mem::size_of::<ffi::PJRT_Extension_Base>();
    while !ext.is_null() && out.len() < 64 {
        // SAFETY: every extension starts with a size_t struct_size.
        let size = unsafe { *(ext as *const usize) };
        if size < need {
            tracing::warn!(size, "PJRT extension too small; stopping extension walk");
            break;
        }
        // SAFETY: struct_size covers the whole PJRT_Extension_Base header.
        let base = unsafe { &*ext };
        out.push(ExtensionInfo {
            type_id: base.type_,
            struct_size: size,
        });
        ext = base.next;
    }
    out
}
