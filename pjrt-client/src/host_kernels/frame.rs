//! The safe edge of an XLA FFI handler: the metadata handshake, the
//! execution-stage filter, typed access to argument and result buffers, and
//! turning a Rust error or panic into an `XLA_FFI_Error` (a host kernel never
//! unwinds into the plugin and never aborts it).

use super::xla_ffi::*;
use std::ffi::CString;
use std::mem::{offset_of, size_of};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr;

/// One argument or result buffer, as the handler sees it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BufferView<'a> {
    /// `XLA_FFI_DataType`.
    pub dtype: XLA_FFI_DataType,
    /// Base address (row-major, the default layout of custom-call operands).
    pub data: *mut std::os::raw::c_void,
    /// Dimension sizes.
    pub dims: &'a [i64],
}

/// The execute-stage view of a call frame.
pub(crate) struct Frame<'a> {
    raw: &'a XLA_FFI_CallFrame,
}

impl<'a> Frame<'a> {
    /// Argument `i` as a buffer.
    pub fn arg(&self, i: usize) -> Result<BufferView<'a>, String> {
        let a = &self.raw.args;
        // SAFETY: XLA guarantees `types`/`args` hold `size` entries.
        unsafe { buffer_at(a.size, a.types, a.args, i, "argument") }
    }

    /// Result `i` as a buffer.
    pub fn ret(&self, i: usize) -> Result<BufferView<'a>, String> {
        let r = &self.raw.rets;
        // SAFETY: as for `arg`.
        unsafe { buffer_at(r.size, r.types, r.rets, i, "result") }
    }

    /// Number of arguments and results.
    pub fn arity(&self) -> (i64, i64) {
        (self.raw.args.size, self.raw.rets.size)
    }
}

/// # Safety
/// `types` and `items` must hold `size` valid entries.
unsafe fn buffer_at<'a>(
    size: i64,
    types: *const i32,
    items: *const *mut std::os::raw::c_void,
    i: usize,
    what: &str,
) -> Result<BufferView<'a>, String> {
    if i as i64 >= size || types.is_null() || items.is_null() {
        return Err(format!("{what} {i} missing (the call has {size})"));
    }
    // SAFETY: `i < size`, per the caller's contract.
    let (ty, item) = unsafe { (*types.add(i), *items.add(i)) };
    if ty != XLA_FFI_ArgType_BUFFER || item.is_null() {
        return Err(format!("{what} {i} is not a buffer"));
    }
    // SAFETY: a BUFFER entry points to an `XLA_FFI_Buffer`.
    let b = unsafe { &*(item as *const XLA_FFI_Buffer) };
    if b.rank < 0 || (b.rank > 0 && b.dims.is_null()) {
        return Err(format!("{what} {i} has an invalid rank {}", b.rank));
    }
    let dims = if b.rank == 0 {
        &[][..]
    } else {
        // SAFETY: `dims` has `rank` entries and lives as long as the frame.
        unsafe { std::slice::from_raw_parts(b.dims, b.rank as usize) }
    };
    Ok(BufferView {
        dtype: b.dtype,
        data: b.data,
        dims,
    })
}

/// Runs `body` for the execute stage of `frame`: answers the metadata
/// handshake, ignores other stages, and converts errors and panics.
///
/// # Safety
/// `frame` must be null or a call frame passed by XLA to a handler.
pub(crate) unsafe fn handle(
    frame: *mut XLA_FFI_CallFrame,
    body: impl FnOnce(&Frame<'_>) -> Result<(), String>,
) -> *mut XLA_FFI_Error {
    if frame.is_null() {
        return ptr::null_mut();
    }
    // SAFETY: non-null frames come from XLA and are valid for this call.
    let raw = unsafe { &*frame };
    if !raw.extension_start.is_null() {
        // SAFETY: every extension starts with `XLA_FFI_Extension_Base`.
        let ext = unsafe { &*raw.extension_start };
        if ext.type_ == XLA_FFI_Extension_Metadata {
            // SAFETY: a metadata extension has this type tag.
            unsafe { answer_metadata(raw, raw.extension_start as *mut XLA_FFI_Metadata_Extension) };
            return ptr::null_mut();
        }
    }
    if raw.struct_size < offset_of!(XLA_FFI_CallFrame, attrs)
        || raw.stage != XLA_FFI_ExecutionStage_EXECUTE
    {
        return ptr::null_mut();
    }
    let f = Frame { raw };
    match catch_unwind(AssertUnwindSafe(|| body(&f))) {
        Ok(Ok(())) => ptr::null_mut(),
        Ok(Err(msg)) => make_error(raw.api, XLA_FFI_Error_Code_INVALID_ARGUMENT, &msg),
        Err(payload) => make_error(
            raw.api,
            XLA_FFI_Error_Code_INTERNAL,
            &format!(
                "hlobridge host kernel panicked: {}",
                super::donation::panic_message(payload.as_ref())
            ),
        ),
    }
}

/// The FFI minor version we declare: ours, or the runtime's if older (the
/// subset used here has not changed across 0.x minors).
fn declared_minor(api: *const XLA_FFI_Api) -> i32 {
    if api.is_null() {
        return XLA_FFI_API_MINOR;
    }
    // SAFETY: XLA passes its own live API table.
    let a = unsafe { &*api };
    if a.struct_size < offset_of!(XLA_FFI_Api, internal_api)
        || a.api_version.struct_size < offset_of!(XLA_FFI_Api_Version, minor_version) + 4
    {
        return XLA_FFI_API_MINOR;
    }
    a.api_version.minor_version.min(XLA_FFI_API_MINOR)
}

/// # Safety
/// `ext` must point to the metadata extension of `raw`.
unsafe fn answer_metadata(raw: &XLA_FFI_CallFrame, ext: *mut XLA_FFI_Metadata_Extension) {
    // SAFETY: the caller checked the tag; struct_size bounds what we read.
    let ext = unsafe { &*ext };
    if ext.extension_base.struct_size < size_of::<XLA_FFI_Metadata_Extension>()
        || ext.metadata.is_null()
    {
        return;
    }
    let md = ext.metadata;
    // SAFETY: XLA owns `md` for the call; every write stays within the
    // struct_size it declared.
    unsafe {
        let size = (*md).struct_size;
        if size >= offset_of!(XLA_FFI_Metadata, api_version) + size_of::<XLA_FFI_Api_Version>() {
            (*md).api_version = XLA_FFI_Api_Version {
                struct_size: size_of::<XLA_FFI_Api_Version>(),
                extension_start: ptr::null_mut(),
                major_version: XLA_FFI_API_MAJOR,
                minor_version: declared_minor(raw.api),
            };
        }
        if size >= offset_of!(XLA_FFI_Metadata, traits) + 4 {
            (*md).traits = 0;
        }
        if size >= offset_of!(XLA_FFI_Metadata, state_type_id) + 8 {
            (*md).state_type_id = XLA_FFI_TypeId { type_id: 0 };
        }
    }
}

fn make_error(api: *const XLA_FFI_Api, code: XLA_FFI_Error_Code, msg: &str) -> *mut XLA_FFI_Error {
    tracing::warn!(message = msg, "host kernel failed");
    if api.is_null() {
        return ptr::null_mut();
    }
    // SAFETY: XLA passes its own live API table.
    let a = unsafe { &*api };
    if a.struct_size < offset_of!(XLA_FFI_Api, XLA_FFI_Error_Create) + size_of::<usize>() {
        return ptr::null_mut();
    }
    let Some(create) = a.XLA_FFI_Error_Create else {
        return ptr::null_mut();
    };
    let text = CString::new(msg.replace('\0', " ")).unwrap_or_default();
    let mut args = XLA_FFI_Error_Create_Args {
        struct_size: size_of::<XLA_FFI_Error_Create_Args>(),
        extension_start: ptr::null_mut(),
        message: text.as_ptr(),
        errc: code,
    };
    // SAFETY: `args` is fully initialised; XLA copies the message.
    unsafe { create(&mut args) }
}
