//! oneDNN (version 3) through its C API, for host kernels that hand work to
//! it: the library, one checked-call path, and RAII handles.
//!
//! The CPU plugin carries its own oneDNN, but only behind XLA's
//! `__onednn$...` custom calls, which run forward convolutions, matrix
//! products and softmax; none of its `dnnl_*` symbols are exported, and
//! neither are those of the copy inside PyTorch's `libtorch_cpu.so`. The
//! host convolution kernel needs oneDNN's backward-weights and
//! backward-data convolutions (and its forward one in the blocked layouts
//! the thunk does not use), so it loads a separate build: the `onednn-cpu-gomp` wheel's
//! `libdnnl.so.3` (GNU OpenMP threading: it shares the process's
//! `libgomp.so.1`, PyTorch's when torch is loaded), found by
//! [`hlobridge_config::onednn_library`]. Without it, [`OneDnn::get`] is
//! `None` and callers keep their own loops.
//!
//! The declarations below are written here from oneDNN's documented C API
//! (`dnnl.h`, `dnnl_types.h`, `dnnl_common_types.h` of v3.x: the constants
//! are the enumerators' values there), checked against the headers of the
//! `onednn-devel-cpu-gomp` wheel of the version `requirements.txt` pins.
//! Loading refuses any library whose `dnnl_version()` is not 3.x.
//!
//! Every call returns a `dnnl_status_t`; [`check`] is the one path that
//! turns a status into an error naming the call.

#![allow(non_camel_case_types)]

use std::ffi::{c_char, c_int, c_uint, c_void};
use std::ptr::{null, null_mut, NonNull};
use std::sync::OnceLock;

/// `dnnl_status_t` (`dnnl_success` is 0).
pub type Status = c_int;
/// `dnnl_dims_t`: `int64_t[DNNL_MAX_NDIMS]`, `DNNL_MAX_NDIMS` = 12.
pub type Dims = [i64; 12];

type Handle = *mut c_void;

/// `dnnl_f32`.
pub const F32: c_int = 3;
/// `dnnl_format_tag_any`.
pub const FORMAT_ANY: c_int = 1;
/// `dnnl_cpu` (`dnnl_engine_kind_t`).
const ENGINE_CPU: c_int = 1;
/// `dnnl_stream_default_flags` (= `dnnl_stream_in_order`).
const STREAM_IN_ORDER: c_uint = 1;
/// `dnnl_forward_training` (`dnnl_prop_kind_t`).
pub const FORWARD_TRAINING: c_int = 64;
/// `dnnl_convolution_direct` (`dnnl_alg_kind_t`).
pub const CONVOLUTION_DIRECT: c_int = 1;
/// `dnnl_scratchpad_mode_user`: the caller passes each execution its own
/// scratchpad, so one primitive may run on several threads at once.
const SCRATCHPAD_MODE_USER: c_int = 1;
/// `dnnl_query_impl_info_str`: the implementation's name.
pub const QUERY_IMPL_INFO_STR: c_int = 8;
/// `dnnl_query_src_md`.
pub const QUERY_SRC_MD: c_int = 129;
/// `dnnl_query_diff_src_md`.
pub const QUERY_DIFF_SRC_MD: c_int = 130;
/// `dnnl_query_weights_md`.
pub const QUERY_WEIGHTS_MD: c_int = 131;
/// `dnnl_query_diff_weights_md`.
pub const QUERY_DIFF_WEIGHTS_MD: c_int = 132;
/// `dnnl_query_diff_dst_md`.
pub const QUERY_DIFF_DST_MD: c_int = 134;
/// `dnnl_query_dst_md`.
pub const QUERY_DST_MD: c_int = 133;
/// `dnnl_query_scratchpad_md`.
pub const QUERY_SCRATCHPAD_MD: c_int = 136;
/// `DNNL_ARG_SRC`.
pub const ARG_SRC: c_int = 1;
/// `DNNL_ARG_DST`.
pub const ARG_DST: c_int = 17;
/// `DNNL_ARG_SCRATCHPAD`.
pub const ARG_SCRATCHPAD: c_int = 80;
/// `DNNL_ARG_WEIGHTS`.
pub const ARG_WEIGHTS: c_int = 33;
/// `DNNL_ARG_DIFF_SRC`.
pub const ARG_DIFF_SRC: c_int = 129;
/// `DNNL_ARG_DIFF_DST`.
pub const ARG_DIFF_DST: c_int = 145;
/// `DNNL_ARG_DIFF_WEIGHTS`.
pub const ARG_DIFF_WEIGHTS: c_int = 161;

/// `dnnl_exec_arg_t`.
#[repr(C)]
#[derive(Clone, Copy)]
struct ExecArg {
    arg: c_int,
    memory: Handle,
}

/// `dnnl_version_t`.
#[repr(C)]
struct Version {
    major: c_int,
    minor: c_int,
    patch: c_int,
    hash: *const c_char,
    cpu_runtime: c_uint,
    gpu_runtime: c_uint,
}

/// The entry points used, resolved once.
#[allow(clippy::type_complexity)]
struct Fns {
    engine_create: unsafe extern "C" fn(*mut Handle, c_int, usize) -> Status,
    stream_create: unsafe extern "C" fn(*mut Handle, Handle, c_uint) -> Status,
    stream_wait: unsafe extern "C" fn(Handle) -> Status,
    stream_destroy: unsafe extern "C" fn(Handle) -> Status,
    md_create_with_tag:
        unsafe extern "C" fn(*mut Handle, c_int, *const i64, c_int, c_int) -> Status,
    md_create_with_strides:
        unsafe extern "C" fn(*mut Handle, c_int, *const i64, c_int, *const i64) -> Status,
    md_clone: unsafe extern "C" fn(*mut Handle, Handle) -> Status,
    md_destroy: unsafe extern "C" fn(Handle) -> Status,
    md_equal: unsafe extern "C" fn(Handle, Handle) -> c_int,
    md_get_size: unsafe extern "C" fn(Handle) -> usize,
    attr_create: unsafe extern "C" fn(*mut Handle) -> Status,
    attr_destroy: unsafe extern "C" fn(Handle) -> Status,
    attr_set_scratchpad_mode: unsafe extern "C" fn(Handle, c_int) -> Status,
    conv_fwd_pd_create: unsafe extern "C" fn(
        *mut Handle,
        Handle,
        c_int,
        c_int,
        Handle,
        Handle,
        Handle,
        Handle,
        *const i64,
        *const i64,
        *const i64,
        *const i64,
        Handle,
    ) -> Status,
    conv_bwd_weights_pd_create: unsafe extern "C" fn(
        *mut Handle,
        Handle,
        c_int,
        Handle,
        Handle,
        Handle,
        Handle,
        *const i64,
        *const i64,
        *const i64,
        *const i64,
        Handle,
        Handle,
    ) -> Status,
    conv_bwd_data_pd_create: unsafe extern "C" fn(
        *mut Handle,
        Handle,
        c_int,
        Handle,
        Handle,
        Handle,
        *const i64,
        *const i64,
        *const i64,
        *const i64,
        Handle,
        Handle,
    ) -> Status,
    reorder_pd_create:
        unsafe extern "C" fn(*mut Handle, Handle, Handle, Handle, Handle, Handle) -> Status,
    pd_query_md: unsafe extern "C" fn(Handle, c_int, c_int) -> Handle,
    pd_query: unsafe extern "C" fn(Handle, c_int, c_int, *mut c_void) -> Status,
    pd_destroy: unsafe extern "C" fn(Handle) -> Status,
    primitive_create: unsafe extern "C" fn(*mut Handle, Handle) -> Status,
    primitive_execute: unsafe extern "C" fn(Handle, Handle, c_int, *const ExecArg) -> Status,
    primitive_destroy: unsafe extern "C" fn(Handle) -> Status,
    memory_create: unsafe extern "C" fn(*mut Handle, Handle, Handle, *mut c_void) -> Status,
    memory_destroy: unsafe extern "C" fn(Handle) -> Status,
}

/// The loaded library and its CPU engine.
pub struct OneDnn {
    _lib: libloading::Library,
    fns: Fns,
    engine: Handle,
    /// `major.minor.patch`, for logs.
    pub version: String,
}

// SAFETY: the library's functions may be called from any thread; the
// engine is only read after creation (oneDNN engines are thread-safe).
unsafe impl Send for OneDnn {}
// SAFETY: as above.
unsafe impl Sync for OneDnn {}

/// Turns a status into `Err` naming the call: the one checked-call path.
pub fn check(status: Status, what: &str) -> Result<(), String> {
    if status == 0 {
        Ok(())
    } else {
        Err(format!("oneDNN {what} failed (dnnl_status_t {status})"))
    }
}

impl OneDnn {
    /// The process's oneDNN, loaded on first use; `None` when there is no
    /// library ([`hlobridge_config::onednn_library`]) or it was refused
    /// (logged once).
    pub fn get() -> Option<&'static OneDnn> {
        static LIB: OnceLock<Option<OneDnn>> = OnceLock::new();
        LIB.get_or_init(|| {
            let path = hlobridge_config::onednn_library()?;
            match OneDnn::load(&path) {
                Ok(l) => {
                    tracing::info!(path = %path.display(), version = %l.version, "oneDNN loaded");
                    Some(l)
                }
                Err(why) => {
                    tracing::warn!(path = %path.display(), %why, "oneDNN refused; host convolutions keep their own loops");
                    None
                }
            }
        })
        .as_ref()
    }

    fn load(path: &std::path::Path) -> Result<OneDnn, String> {
        // SAFETY: loading oneDNN runs its static initialisers, which only
        // set up its own state.
        let lib = unsafe { libloading::Library::new(path) }.map_err(|e| e.to_string())?;
        macro_rules! sym {
            ($name:literal) => {
                // SAFETY: the symbol is the oneDNN v3 C function of that
                // name, declared with its documented signature (module docs).
                *unsafe { lib.get(concat!($name, "\0").as_bytes()) }
                    .map_err(|e| format!("{}: {e}", $name))?
            };
        }
        let version: unsafe extern "C" fn() -> *const Version = sym!("dnnl_version");
        // SAFETY: `dnnl_version` returns a pointer to a static struct.
        let v = unsafe { version().as_ref() }.ok_or("dnnl_version returned null")?;
        if v.major != 3 {
            return Err(format!(
                "oneDNN {}.{} found; the declarations here are version 3's",
                v.major, v.minor
            ));
        }
        let version = format!("{}.{}.{}", v.major, v.minor, v.patch);
        let fns = Fns {
            engine_create: sym!("dnnl_engine_create"),
            stream_create: sym!("dnnl_stream_create"),
            stream_wait: sym!("dnnl_stream_wait"),
            stream_destroy: sym!("dnnl_stream_destroy"),
            md_create_with_tag: sym!("dnnl_memory_desc_create_with_tag"),
            md_create_with_strides: sym!("dnnl_memory_desc_create_with_strides"),
            md_clone: sym!("dnnl_memory_desc_clone"),
            md_destroy: sym!("dnnl_memory_desc_destroy"),
            md_equal: sym!("dnnl_memory_desc_equal"),
            md_get_size: sym!("dnnl_memory_desc_get_size"),
            attr_create: sym!("dnnl_primitive_attr_create"),
            attr_destroy: sym!("dnnl_primitive_attr_destroy"),
            attr_set_scratchpad_mode: sym!("dnnl_primitive_attr_set_scratchpad_mode"),
            conv_fwd_pd_create: sym!("dnnl_convolution_forward_primitive_desc_create"),
            conv_bwd_weights_pd_create: sym!(
                "dnnl_convolution_backward_weights_primitive_desc_create"
            ),
            conv_bwd_data_pd_create: sym!("dnnl_convolution_backward_data_primitive_desc_create"),
            reorder_pd_create: sym!("dnnl_reorder_primitive_desc_create"),
            pd_query_md: sym!("dnnl_primitive_desc_query_md"),
            pd_query: sym!("dnnl_primitive_desc_query"),
            pd_destroy: sym!("dnnl_primitive_desc_destroy"),
            primitive_create: sym!("dnnl_primitive_create"),
            primitive_execute: sym!("dnnl_primitive_execute"),
            primitive_destroy: sym!("dnnl_primitive_destroy"),
            memory_create: sym!("dnnl_memory_create"),
            memory_destroy: sym!("dnnl_memory_destroy"),
        };
        let mut engine = null_mut();
        // SAFETY: an out-pointer for the engine.
        check(
            unsafe { (fns.engine_create)(&mut engine, ENGINE_CPU, 0) },
            "dnnl_engine_create",
        )?;
        Ok(OneDnn {
            _lib: lib,
            fns,
            engine,
            version,
        })
    }

    /// A plain memory descriptor: `dims` with element `strides`.
    pub fn md_strided(&'static self, dims: &[i64], strides: &[i64]) -> Result<Md, String> {
        let (d, s) = (dims_of(dims)?, dims_of(strides)?);
        let mut h = null_mut();
        // SAFETY: `d` and `s` hold `dims.len()` (≤ 12) entries.
        check(
            unsafe {
                (self.fns.md_create_with_strides)(
                    &mut h,
                    dims.len() as c_int,
                    d.as_ptr(),
                    F32,
                    s.as_ptr(),
                )
            },
            "dnnl_memory_desc_create_with_strides",
        )?;
        Ok(Md { lib: self, h })
    }

    /// A memory descriptor whose layout the primitive chooses.
    pub fn md_any(&'static self, dims: &[i64]) -> Result<Md, String> {
        let d = dims_of(dims)?;
        let mut h = null_mut();
        // SAFETY: `d` holds `dims.len()` (≤ 12) entries.
        check(
            unsafe {
                (self.fns.md_create_with_tag)(
                    &mut h,
                    dims.len() as c_int,
                    d.as_ptr(),
                    F32,
                    FORMAT_ANY,
                )
            },
            "dnnl_memory_desc_create_with_tag",
        )?;
        Ok(Md { lib: self, h })
    }

    /// Primitive attributes with a caller-provided scratchpad.
    fn user_scratchpad_attr(&'static self) -> Result<Attr, String> {
        let mut h = null_mut();
        // SAFETY: an out-pointer for the attributes.
        check(
            unsafe { (self.fns.attr_create)(&mut h) },
            "dnnl_primitive_attr_create",
        )?;
        let attr = Attr { lib: self, h };
        // SAFETY: `attr.h` is a live attribute object.
        check(
            unsafe { (self.fns.attr_set_scratchpad_mode)(attr.h, SCRATCHPAD_MODE_USER) },
            "dnnl_primitive_attr_set_scratchpad_mode",
        )?;
        Ok(attr)
    }

    /// A forward-training convolution's primitive descriptor (the hint a
    /// backward one needs).
    pub fn conv_forward_pd(
        &'static self,
        src: &Md,
        weights: &Md,
        dst: &Md,
        g: &ConvGeometry,
    ) -> Result<Pd, String> {
        let attr = self.user_scratchpad_attr()?;
        let mut h = null_mut();
        // SAFETY: live descriptors and attributes; the geometry's arrays
        // are full `dnnl_dims_t`s.
        check(
            unsafe {
                (self.fns.conv_fwd_pd_create)(
                    &mut h,
                    self.engine,
                    FORWARD_TRAINING,
                    CONVOLUTION_DIRECT,
                    src.h,
                    weights.h,
                    null_mut(),
                    dst.h,
                    g.strides.as_ptr(),
                    g.dilates.as_ptr(),
                    g.pad_l.as_ptr(),
                    g.pad_r.as_ptr(),
                    attr.h,
                )
            },
            "dnnl_convolution_forward_primitive_desc_create",
        )?;
        Ok(Pd { lib: self, h })
    }

    /// A backward-weights convolution's primitive descriptor (no bias).
    pub fn conv_backward_weights_pd(
        &'static self,
        src: &Md,
        diff_weights: &Md,
        diff_dst: &Md,
        g: &ConvGeometry,
        hint: &Pd,
    ) -> Result<Pd, String> {
        let attr = self.user_scratchpad_attr()?;
        let mut h = null_mut();
        // SAFETY: as in `conv_forward_pd`; `hint` is a live forward pd.
        check(
            unsafe {
                (self.fns.conv_bwd_weights_pd_create)(
                    &mut h,
                    self.engine,
                    CONVOLUTION_DIRECT,
                    src.h,
                    diff_weights.h,
                    null_mut(),
                    diff_dst.h,
                    g.strides.as_ptr(),
                    g.dilates.as_ptr(),
                    g.pad_l.as_ptr(),
                    g.pad_r.as_ptr(),
                    hint.h,
                    attr.h,
                )
            },
            "dnnl_convolution_backward_weights_primitive_desc_create",
        )?;
        Ok(Pd { lib: self, h })
    }

    /// A backward-data convolution's primitive descriptor.
    pub fn conv_backward_data_pd(
        &'static self,
        diff_src: &Md,
        weights: &Md,
        diff_dst: &Md,
        g: &ConvGeometry,
        hint: &Pd,
    ) -> Result<Pd, String> {
        let attr = self.user_scratchpad_attr()?;
        let mut h = null_mut();
        // SAFETY: as in `conv_forward_pd`; `hint` is a live forward pd.
        check(
            unsafe {
                (self.fns.conv_bwd_data_pd_create)(
                    &mut h,
                    self.engine,
                    CONVOLUTION_DIRECT,
                    diff_src.h,
                    weights.h,
                    diff_dst.h,
                    g.strides.as_ptr(),
                    g.dilates.as_ptr(),
                    g.pad_l.as_ptr(),
                    g.pad_r.as_ptr(),
                    hint.h,
                    attr.h,
                )
            },
            "dnnl_convolution_backward_data_primitive_desc_create",
        )?;
        Ok(Pd { lib: self, h })
    }

    /// A reorder's primitive descriptor from `src` to `dst`.
    pub fn reorder_pd(&'static self, src: &Md, dst: &Md) -> Result<Pd, String> {
        let attr = self.user_scratchpad_attr()?;
        let mut h = null_mut();
        // SAFETY: live descriptors, both on this library's CPU engine.
        check(
            unsafe {
                (self.fns.reorder_pd_create)(&mut h, src.h, self.engine, dst.h, self.engine, attr.h)
            },
            "dnnl_reorder_primitive_desc_create",
        )?;
        Ok(Pd { lib: self, h })
    }
}

/// An owned oneDNN object: the library that made it and its handle,
/// destroyed with the library's `$destroy` on drop.
macro_rules! owned_handle {
    ($(#[$doc:meta])* $vis:vis $name:ident, $destroy:ident) => {
        $(#[$doc])*
        $vis struct $name {
            lib: &'static OneDnn,
            h: Handle,
        }

        impl Drop for $name {
            fn drop(&mut self) {
                // SAFETY: created by this library and not destroyed before.
                unsafe { (self.lib.fns.$destroy)(self.h) };
            }
        }
    };
}

/// A convolution's spatial parameters in oneDNN's terms (dilation 0 = none).
pub struct ConvGeometry {
    strides: Dims,
    dilates: Dims,
    pad_l: Dims,
    pad_r: Dims,
}

impl ConvGeometry {
    /// One entry per spatial dim in each.
    pub fn new(
        strides: &[i64],
        dilates: &[i64],
        pad_l: &[i64],
        pad_r: &[i64],
    ) -> Result<Self, String> {
        Ok(ConvGeometry {
            strides: dims_of(strides)?,
            dilates: dims_of(dilates)?,
            pad_l: dims_of(pad_l)?,
            pad_r: dims_of(pad_r)?,
        })
    }
}

/// Copies `v` into a `dnnl_dims_t`.
fn dims_of(v: &[i64]) -> Result<Dims, String> {
    let mut d = [0i64; 12];
    if v.len() > d.len() {
        return Err(format!("oneDNN takes at most 12 dims, got {}", v.len()));
    }
    d[..v.len()].copy_from_slice(v);
    Ok(d)
}

owned_handle!(
    /// A memory descriptor (`dnnl_memory_desc_t`), destroyed on drop.
    pub Md, md_destroy
);

// SAFETY: a memory descriptor is immutable after creation.
unsafe impl Send for Md {}
// SAFETY: as above.
unsafe impl Sync for Md {}

impl Md {
    /// Bytes a buffer of this layout takes.
    pub fn size(&self) -> usize {
        // SAFETY: a live descriptor.
        unsafe { (self.lib.fns.md_get_size)(self.h) }
    }

    /// Whether two descriptors describe the same layout.
    pub fn same(&self, other: &Md) -> bool {
        // SAFETY: live descriptors.
        unsafe { (self.lib.fns.md_equal)(self.h, other.h) != 0 }
    }
}

owned_handle!(
    /// Primitive attributes, destroyed on drop.
    Attr, attr_destroy
);

owned_handle!(
    /// A primitive descriptor, destroyed on drop.
    pub Pd, pd_destroy
);

// SAFETY: a primitive descriptor is only queried after creation.
unsafe impl Send for Pd {}
// SAFETY: as above.
unsafe impl Sync for Pd {}

impl Pd {
    /// The descriptor's memory descriptor for `what` (a `QUERY_*_MD`),
    /// cloned so that it outlives the query.
    pub fn md(&self, what: c_int) -> Result<Md, String> {
        // SAFETY: a live primitive descriptor; the result, if not null,
        // lives as long as it.
        let q = unsafe { (self.lib.fns.pd_query_md)(self.h, what, 0) };
        if q.is_null() {
            return Err(format!("oneDNN: no memory descriptor for query {what}"));
        }
        let mut h = null_mut();
        // SAFETY: `q` is a live descriptor.
        check(
            unsafe { (self.lib.fns.md_clone)(&mut h, q) },
            "dnnl_memory_desc_clone",
        )?;
        Ok(Md { lib: self.lib, h })
    }

    /// The implementation's name (`brgconv_bwd_w:avx512_core`, ...).
    pub fn implementation(&self) -> String {
        let mut s: *const c_char = null();
        // SAFETY: the query writes a `const char *` owned by the pd.
        let ok = unsafe {
            (self.lib.fns.pd_query)(
                self.h,
                QUERY_IMPL_INFO_STR,
                0,
                &mut s as *mut _ as *mut c_void,
            )
        };
        if ok != 0 || s.is_null() {
            return "?".into();
        }
        // SAFETY: a NUL-terminated string owned by the live pd.
        unsafe { std::ffi::CStr::from_ptr(s) }
            .to_string_lossy()
            .into_owned()
    }

    /// The primitive for this descriptor.
    pub fn primitive(&self) -> Result<Primitive, String> {
        let mut h = null_mut();
        // SAFETY: a live primitive descriptor.
        check(
            unsafe { (self.lib.fns.primitive_create)(&mut h, self.h) },
            "dnnl_primitive_create",
        )?;
        Ok(Primitive { lib: self.lib, h })
    }
}

owned_handle!(
    /// A primitive, destroyed on drop. Created with a user scratchpad, so
    /// several threads may execute it at once, each with its own scratchpad.
    pub Primitive, primitive_destroy
);

// SAFETY: oneDNN primitives may be executed from several threads at once
// when each execution has its own scratchpad (user scratchpad mode, set by
// every descriptor constructor here).
unsafe impl Send for Primitive {}
// SAFETY: as above.
unsafe impl Sync for Primitive {}

impl Primitive {
    /// Executes on a fresh in-order stream and waits. Each argument is
    /// `(DNNL_ARG_*, layout, buffer)`.
    ///
    /// # Safety
    /// Each buffer must hold `layout.size()` bytes, live and not otherwise
    /// accessed during the call; buffers written by the primitive must not
    /// overlap any other.
    pub unsafe fn execute(&self, args: &[(c_int, &Md, NonNull<u8>)]) -> Result<(), String> {
        let fns = &self.lib.fns;
        let mut mems: Vec<Memory> = Vec::with_capacity(args.len());
        for &(_, md, ptr) in args {
            let mut h = null_mut();
            // SAFETY: a live descriptor and a buffer the caller vouches for.
            check(
                unsafe {
                    (fns.memory_create)(&mut h, md.h, self.lib.engine, ptr.as_ptr() as *mut c_void)
                },
                "dnnl_memory_create",
            )?;
            mems.push(Memory { lib: self.lib, h });
        }
        let exec: Vec<ExecArg> = args
            .iter()
            .zip(&mems)
            .map(|(&(arg, _, _), m)| ExecArg { arg, memory: m.h })
            .collect();
        let mut stream = null_mut();
        // SAFETY: an out-pointer for the stream, on the library's engine.
        check(
            unsafe { (fns.stream_create)(&mut stream, self.lib.engine, STREAM_IN_ORDER) },
            "dnnl_stream_create",
        )?;
        let stream = Stream {
            lib: self.lib,
            h: stream,
        };
        // SAFETY: live primitive, stream and memory objects over buffers
        // the caller vouches for.
        check(
            unsafe {
                (fns.primitive_execute)(self.h, stream.h, exec.len() as c_int, exec.as_ptr())
            },
            "dnnl_primitive_execute",
        )?;
        // SAFETY: a live stream.
        check(unsafe { (fns.stream_wait)(stream.h) }, "dnnl_stream_wait")
    }
}

owned_handle!(
    /// A memory object over a caller's buffer (which stays the caller's),
    /// destroyed on drop.
    Memory, memory_destroy
);

owned_handle!(
    /// A stream, destroyed on drop.
    Stream, stream_destroy
);

/// A 64-byte aligned, uninitialised scratch buffer (oneDNN's layouts and
/// scratchpads), freed on drop.
pub struct Scratch {
    ptr: NonNull<u8>,
    layout: std::alloc::Layout,
}

impl Scratch {
    /// `bytes` bytes (at least one, so the pointer is real).
    pub fn new(bytes: usize) -> Result<Scratch, String> {
        let layout = std::alloc::Layout::from_size_align(bytes.max(64), 64)
            .map_err(|e| format!("oneDNN scratch of {bytes} bytes: {e}"))?;
        // SAFETY: a non-zero size.
        let ptr = NonNull::new(unsafe { std::alloc::alloc(layout) })
            .ok_or_else(|| format!("oneDNN scratch: out of memory for {bytes} bytes"))?;
        Ok(Scratch { ptr, layout })
    }

    /// The buffer's start.
    pub fn ptr(&self) -> NonNull<u8> {
        self.ptr
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        // SAFETY: allocated with this layout in `new`.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), self.layout) };
    }
}

// SAFETY: the buffer is plain memory owned by this value.
unsafe impl Send for Scratch {}
