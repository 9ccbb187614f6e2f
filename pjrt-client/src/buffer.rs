//! [`Buffer`]: device arrays, host↔device transfers and zero-copy views.

use crate::client::Client;
use crate::device::Device;
use crate::dtype::{as_bytes, ElementType, NativeType};
use crate::error::{Error, ErrorCode, Result};
use crate::event::{Completion, Event};
use crate::ffi::{self, PjrtStruct};
use crate::pjrt_call;
use smallvec::SmallVec;
use std::os::raw::c_void;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// Dims storage without heap allocation for rank ≤ 6.
pub type Dims = SmallVec<[i64; 6]>;

#[derive(Debug, Clone)]
pub(crate) struct Meta {
    pub(crate) dtype: ElementType,
    pub(crate) dims: Dims,
}

pub(crate) struct BufferInner {
    pub(crate) client: Client,
    pub(crate) raw: *mut ffi::PJRT_Buffer,
    pub(crate) deleted: AtomicBool,
    pub(crate) meta: OnceLock<Meta>,
}

// SAFETY: PJRT buffers are thread-safe handles; our state is atomic.
unsafe impl Send for BufferInner {}
// SAFETY: see above.
unsafe impl Sync for BufferInner {}

impl Drop for BufferInner {
    fn drop(&mut self) {
        let mut a = ffi::PJRT_Buffer_Destroy_Args::new();
        a.buffer = self.raw;
        // SAFETY: we own the buffer handle; destroyed exactly once. Valid
        // even if the buffer was deleted or donated.
        if let Err(e) = unsafe { pjrt_call!(self.client.api(), PJRT_Buffer_Destroy, &mut a) } {
            tracing::warn!(error = %e, "PJRT_Buffer_Destroy failed");
        }
    }
}

/// A device buffer. Cheap to clone (`Arc`); clones share deletion state.
/// Keeps its client alive.
#[derive(Clone)]
pub struct Buffer {
    pub(crate) inner: Arc<BufferInner>,
}

impl std::fmt::Debug for Buffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.meta() {
            Ok(m) => write!(f, "Buffer({}{:?})", m.dtype, &m.dims[..]),
            Err(_) => write!(f, "Buffer(<deleted>)"),
        }
    }
}

impl Buffer {
    pub(crate) fn from_raw(client: Client, raw: *mut ffi::PJRT_Buffer) -> Buffer {
        Buffer {
            inner: Arc::new(BufferInner {
                client,
                raw,
                deleted: AtomicBool::new(false),
                meta: OnceLock::new(),
            }),
        }
    }

    /// The owning client.
    pub fn client(&self) -> &Client {
        &self.inner.client
    }

    /// Raw `PJRT_Buffer*` without checks (owned by this buffer).
    pub fn raw(&self) -> *mut ffi::PJRT_Buffer {
        self.inner.raw
    }

    /// Fails with [`Error::BufferDeleted`] if deleted/donated (our flag only).
    #[inline]
    pub(crate) fn check_flag(&self, context: &dyn Fn() -> String) -> Result<()> {
        if self.inner.deleted.load(Ordering::Acquire) {
            return Err(Error::BufferDeleted { context: context() });
        }
        Ok(())
    }

    /// Checks both our deletion flag and `PJRT_Buffer_IsDeleted`.
    pub(crate) fn ensure_live(&self, context: &str) -> Result<()> {
        self.check_flag(&|| context.to_string())?;
        if self.plugin_is_deleted()? {
            self.inner.deleted.store(true, Ordering::Release);
            return Err(Error::BufferDeleted {
                context: context.to_string(),
            });
        }
        Ok(())
    }

    pub(crate) fn plugin_is_deleted(&self) -> Result<bool> {
        let mut a = ffi::PJRT_Buffer_IsDeleted_Args::new();
        a.buffer = self.inner.raw;
        // SAFETY: valid buffer handle (IsDeleted is allowed after Delete).
        unsafe { pjrt_call!(self.client().api(), PJRT_Buffer_IsDeleted, &mut a)? };
        Ok(a.is_deleted)
    }

    /// Whether the buffer was deleted or donated.
    pub fn is_deleted(&self) -> bool {
        self.inner.deleted.load(Ordering::Acquire) || self.plugin_is_deleted().unwrap_or(true)
    }

    pub(crate) fn mark_deleted(&self) {
        self.inner.deleted.store(true, Ordering::Release);
    }

    /// Frees the device memory now (`PJRT_Buffer_Delete`); later uses fail.
    pub fn delete(&self) -> Result<()> {
        if self.inner.deleted.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        let mut a = ffi::PJRT_Buffer_Delete_Args::new();
        a.buffer = self.inner.raw;
        // SAFETY: valid buffer handle.
        unsafe { pjrt_call!(self.client().api(), PJRT_Buffer_Delete, &mut a) }
    }

    pub(crate) fn meta(&self) -> Result<&Meta> {
        if let Some(m) = self.inner.meta.get() {
            return Ok(m);
        }
        self.ensure_live("querying buffer shape")?;
        let api = self.client().api();
        let mut t = ffi::PJRT_Buffer_ElementType_Args::new();
        t.buffer = self.inner.raw;
        let mut d = ffi::PJRT_Buffer_Dimensions_Args::new();
        d.buffer = self.inner.raw;
        // SAFETY: live buffer; dims array lives with the buffer, copied.
        let dims = unsafe {
            pjrt_call!(api, PJRT_Buffer_ElementType, &mut t)?;
            pjrt_call!(api, PJRT_Buffer_Dimensions, &mut d)?;
            if d.dims.is_null() {
                Dims::new()
            } else {
                Dims::from_slice(std::slice::from_raw_parts(d.dims, d.num_dims))
            }
        };
        let dtype = ElementType::from_raw(t.type_).unwrap_or(ElementType::Invalid);
        Ok(self.inner.meta.get_or_init(|| Meta { dtype, dims }))
    }

    /// Array dimensions.
    pub fn dims(&self) -> Result<&[i64]> {
        Ok(&self.meta()?.dims)
    }

    /// Element type.
    pub fn element_type(&self) -> Result<ElementType> {
        Ok(self.meta()?.dtype)
    }

    /// Number of elements.
    pub fn element_count(&self) -> Result<usize> {
        Ok(self
            .meta()?
            .dims
            .iter()
            .map(|&d| d.max(0) as usize)
            .product())
    }

    /// Bytes the buffer occupies on device.
    pub fn on_device_size(&self) -> Result<usize> {
        self.ensure_live("PJRT_Buffer_OnDeviceSizeInBytes")?;
        let mut a = ffi::PJRT_Buffer_OnDeviceSizeInBytes_Args::new();
        a.buffer = self.inner.raw;
        // SAFETY: live buffer.
        unsafe { pjrt_call!(self.client().api(), PJRT_Buffer_OnDeviceSizeInBytes, &mut a)? };
        Ok(a.on_device_size_in_bytes)
    }

    /// The device holding the buffer.
    pub fn device(&self) -> Result<Device> {
        self.ensure_live("PJRT_Buffer_Device")?;
        let mut a = ffi::PJRT_Buffer_Device_Args::new();
        a.buffer = self.inner.raw;
        // SAFETY: live buffer; device is client-owned.
        unsafe { pjrt_call!(self.client().api(), PJRT_Buffer_Device, &mut a)? };
        Ok(Device::new(self.client().clone(), a.device))
    }

    /// Waits until the buffer's data is ready (or reports its error).
    pub fn ready(&self) -> Result<()> {
        self.ensure_live("waiting for buffer")?;
        let mut a = ffi::PJRT_Buffer_ReadyEvent_Args::new();
        a.buffer = self.inner.raw;
        // SAFETY: live buffer; the event is owned by us afterwards.
        unsafe { pjrt_call!(self.client().api(), PJRT_Buffer_ReadyEvent, &mut a)? };
        Event::from_raw(self.client().plugin().clone(), a.event).wait()
    }

    /// Copies the buffer into `dst` (dense, major-to-minor), waiting for
    /// completion. `dst` must have exactly the host size.
    pub fn copy_to_host_bytes(&self, dst: &mut [u8]) -> Result<()> {
        // SAFETY: `dst` is valid for writes of `dst.len()` bytes for as long
        // as it is borrowed, and the borrow outlives this call, which
        // returns only once the copy is known to have completed.
        match unsafe { self.start_copy_to_host(dst.as_mut_ptr(), dst.len())? } {
            None => Ok(()),
            Some(event) => event.wait_until_confirmed(),
        }
    }

    /// Copies the buffer to a new host byte vector.
    pub fn to_host_bytes(&self) -> Result<Vec<u8>> {
        let m = self.meta()?;
        let need = m
            .dtype
            .host_size_of(&m.dims)
            .ok_or_else(|| Error::InvalidArgument("buffer too large".into()))?;
        self.to_host_vec::<u8>(need)
    }

    /// Copies the buffer to a host `Vec<T>`; `T` must match the element type.
    pub fn to_host<T: NativeType>(&self) -> Result<Vec<T>> {
        let m = self.meta()?;
        if m.dtype != T::TYPE {
            return Err(Error::InvalidArgument(format!(
                "buffer is {}, requested {}",
                m.dtype,
                T::TYPE
            )));
        }
        let n = m
            .dims
            .iter()
            .try_fold(1usize, |acc, &d| acc.checked_mul(d.max(0) as usize))
            .ok_or_else(|| Error::InvalidArgument("buffer too large".into()))?;
        self.to_host_vec::<T>(n)
    }

    /// Copies the buffer into a new `Vec<T>` of `n` elements (whose bytes
    /// the copy fills completely: the caller checked the element type or
    /// `T` is `u8`). A failed host allocation is an error naming its size,
    /// not an abort. If the copy's completion cannot be confirmed, the
    /// vector's memory is leaked rather than freed under the transfer.
    fn to_host_vec<T: Copy>(&self, n: usize) -> Result<Vec<T>> {
        let bytes = n
            .checked_mul(std::mem::size_of::<T>())
            .ok_or_else(|| Error::InvalidArgument("buffer too large".into()))?;
        let mut v: Vec<T> = Vec::new();
        if v.try_reserve_exact(n).is_err() {
            let m = self.meta()?;
            return Err(Error::Pjrt {
                function: "host allocation for a device-to-host copy",
                code: ErrorCode::ResourceExhausted,
                message: format!(
                    "Out of memory allocating {bytes} bytes for the host copy of a {}{:?} buffer.",
                    m.dtype,
                    &m.dims[..]
                ),
            });
        }
        // Written through a raw pointer into the spare capacity: no
        // reference to uninitialised memory is ever made.
        let dst = v.spare_capacity_mut().as_mut_ptr() as *mut u8;
        // SAFETY: the spare capacity holds at least `n` elements, i.e.
        // `bytes` writable bytes, and `v` is neither used nor dropped until
        // the copy is known to have completed (it is leaked otherwise).
        match unsafe { self.start_copy_to_host(dst, bytes)? } {
            None => {}
            Some(event) => match event.wait_completion() {
                Completion::Done(r) => r?,
                Completion::Unknown(e) => {
                    tracing::error!(error = %e, bytes, "device-to-host copy not confirmed complete; leaking its host memory");
                    // SAFETY: the plugin may still be writing into `v`'s
                    // allocation; freeing it could let that write land in
                    // memory reused elsewhere, so it is leaked instead.
                    std::mem::forget(v);
                    return Err(e);
                }
            },
        }
        // SAFETY: the completed copy wrote all `bytes` bytes, i.e. `n`
        // elements; every byte pattern is a valid `T` (a `NativeType`
        // matching the buffer's element type, or `u8`).
        unsafe { v.set_len(n) };
        Ok(v)
    }

    /// Starts `PJRT_Buffer_ToHostBuffer` into `len` bytes at `dst`, after
    /// checking that `len` is the buffer's host size. Returns the event to
    /// wait for (`None`: already complete). `Err` means no copy was started.
    ///
    /// # Safety
    /// `dst` must be valid for writes of `len` bytes until the returned
    /// event is known to have completed.
    unsafe fn start_copy_to_host(&self, dst: *mut u8, len: usize) -> Result<Option<Event>> {
        self.ensure_live("PJRT_Buffer_ToHostBuffer")?;
        let m = self.meta()?;
        let need = m.dtype.host_size_of(&m.dims).unwrap_or(usize::MAX);
        if len != need {
            return Err(Error::HostSize {
                dims: m.dims.to_vec(),
                dtype: m.dtype,
                expected: need,
                got: len,
            });
        }
        let mut a = ffi::PJRT_Buffer_ToHostBuffer_Args::new();
        a.src = self.inner.raw;
        a.dst = dst as *mut c_void;
        a.dst_size = len;
        // SAFETY: live buffer; `dst` is valid for `len` bytes until the
        // event completes (the caller's contract).
        unsafe { pjrt_call!(self.client().api(), PJRT_Buffer_ToHostBuffer, &mut a)? };
        Ok((!a.event.is_null()).then(|| Event::from_raw(self.client().plugin().clone(), a.event)))
    }

    /// Platform-dependent address of the data (`PJRT_Buffer_UnsafePointer`).
    pub fn unsafe_pointer(&self) -> Result<usize> {
        self.ensure_live("PJRT_Buffer_UnsafePointer")?;
        let mut a = ffi::PJRT_Buffer_UnsafePointer_Args::new();
        a.buffer = self.inner.raw;
        // SAFETY: live buffer.
        unsafe { pjrt_call!(self.client().api(), PJRT_Buffer_UnsafePointer, &mut a)? };
        Ok(a.buffer_pointer)
    }

    /// Opaque device memory pointer (`PJRT_Buffer_OpaqueDeviceMemoryDataPointer`).
    pub fn opaque_device_pointer(&self) -> Result<*mut c_void> {
        self.ensure_live("PJRT_Buffer_OpaqueDeviceMemoryDataPointer")?;
        let mut a = ffi::PJRT_Buffer_OpaqueDeviceMemoryDataPointer_Args::new();
        a.buffer = self.inner.raw;
        // SAFETY: live buffer.
        unsafe {
            pjrt_call!(
                self.client().api(),
                PJRT_Buffer_OpaqueDeviceMemoryDataPointer,
                &mut a
            )?
        };
        Ok(a.device_memory_ptr)
    }

    /// Copies the buffer to another device of the same client.
    pub fn copy_to_device(&self, device: &Device) -> Result<Buffer> {
        self.ensure_live("PJRT_Buffer_CopyToDevice")?;
        let mut a = ffi::PJRT_Buffer_CopyToDevice_Args::new();
        a.buffer = self.inner.raw;
        a.dst_device = device.raw;
        // SAFETY: live buffer and device of the same client.
        unsafe { pjrt_call!(self.client().api(), PJRT_Buffer_CopyToDevice, &mut a)? };
        Ok(Buffer::from_raw(self.client().clone(), a.dst_buffer))
    }

    pub(crate) fn external_ref(&self, increase: bool) -> Result<()> {
        let api = self.client().api();
        // SAFETY: live buffer handle.
        unsafe {
            if increase {
                let mut a = ffi::PJRT_Buffer_IncreaseExternalReferenceCount_Args::new();
                a.buffer = self.inner.raw;
                pjrt_call!(api, PJRT_Buffer_IncreaseExternalReferenceCount, &mut a)
            } else {
                let mut a = ffi::PJRT_Buffer_DecreaseExternalReferenceCount_Args::new();
                a.buffer = self.inner.raw;
                pjrt_call!(api, PJRT_Buffer_DecreaseExternalReferenceCount, &mut a)
            }
        }
    }
}

/// Callback run when a zero-copy view no longer needs its memory.
pub type OnDelete = Box<dyn FnOnce() + Send + 'static>;

type ViewCallbackSlot = Mutex<Option<OnDelete>>;

unsafe extern "C" fn view_on_delete(_ptr: *mut c_void, user_arg: *mut c_void) {
    // SAFETY: `user_arg` came from `Arc::into_raw` in `create_view`, and the
    // plugin calls this at most once, consuming that reference.
    let slot = unsafe { Arc::from_raw(user_arg as *const ViewCallbackSlot) };
    let f = slot.lock().ok().and_then(|mut g| g.take());
    if let Some(f) = f {
        if std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).is_err() {
            tracing::error!("zero-copy view on_delete callback panicked");
        }
    }
}

fn check_dims(dims: &[i64]) -> Result<()> {
    if let Some(d) = dims.iter().find(|&&d| d < 0) {
        return Err(Error::InvalidArgument(format!(
            "negative dimension {d} in {dims:?}"
        )));
    }
    Ok(())
}

impl Client {
    fn pick_device(&self, device: Option<&Device>) -> Result<*mut ffi::PJRT_Device> {
        match device {
            Some(d) => Ok(d.raw),
            None => {
                self.inner.addressable.first().copied().ok_or_else(|| {
                    Error::InvalidArgument("client has no addressable devices".into())
                })
            }
        }
    }

    /// Copies dense host bytes (major-to-minor) to a new device buffer and
    /// waits until the host memory is no longer needed.
    pub fn buffer_from_host_bytes(
        &self,
        data: &[u8],
        dtype: ElementType,
        dims: &[i64],
        device: Option<&Device>,
    ) -> Result<Buffer> {
        check_dims(dims)?;
        let need = dtype
            .host_size_of(dims)
            .ok_or_else(|| Error::InvalidArgument(format!("shape {dims:?} too large")))?;
        if matches!(dtype, ElementType::Invalid | ElementType::Token) {
            return Err(Error::UnsupportedType(dtype));
        }
        if data.len() != need {
            return Err(Error::HostSize {
                dims: dims.to_vec(),
                dtype,
                expected: need,
                got: data.len(),
            });
        }
        let mut a = ffi::PJRT_Client_BufferFromHostBuffer_Args::new();
        a.client = self.raw();
        a.data = data.as_ptr() as *const c_void;
        a.type_ = dtype.to_raw();
        a.dims = dims.as_ptr();
        a.num_dims = dims.len();
        a.host_buffer_semantics = ffi::PJRT_HostBufferSemantics_kImmutableUntilTransferCompletes;
        a.device = self.pick_device(device)?;
        // SAFETY: `data` and `dims` outlive the call; we wait on
        // `done_with_host_buffer` below before the borrow of `data` ends.
        unsafe { pjrt_call!(self.api(), PJRT_Client_BufferFromHostBuffer, &mut a)? };
        let buf = Buffer::from_raw(self.clone(), a.buffer);
        // `data` is borrowed, so it cannot be leaked: return only once the
        // plugin is known to be done reading it.
        Event::from_raw(self.plugin().clone(), a.done_with_host_buffer).wait_until_confirmed()?;
        let _ = buf.inner.meta.set(Meta {
            dtype,
            dims: Dims::from_slice(dims),
        });
        Ok(buf)
    }

    /// Copies a typed host slice to a new device buffer of shape `dims`.
    pub fn buffer_from_host<T: NativeType>(
        &self,
        data: &[T],
        dims: &[i64],
        device: Option<&Device>,
    ) -> Result<Buffer> {
        self.buffer_from_host_bytes(as_bytes(data), T::TYPE, dims, device)
    }

    /// Creates a buffer over existing host memory at `ptr` that an
    /// execution may also write in place: `PJRT_Client_BufferFromHostBuffer`
    /// with `kMutableZeroCopy`, so a donated argument aliased to an output
    /// (`tf.aliasing_output`) is updated in that memory. (A view made by
    /// [`Client::create_view`] is read-only to the CPU plugin: donating it
    /// makes the plugin copy it into a fresh output buffer.) Whether the
    /// plugin really used the memory is for the caller to check
    /// ([`Buffer::unsafe_pointer`]); it may copy instead. `on_done` runs once
    /// the plugin no longer uses the memory (`done_with_host_buffer`); if
    /// that cannot be observed, `on_done` is leaked (never run).
    ///
    /// # Safety
    /// `ptr` must point to host memory valid for the array's dense size,
    /// 64-byte aligned, which stays alive until `on_done` runs and which no
    /// one else writes or frees while the buffer (or an output it was
    /// donated to) exists.
    pub unsafe fn create_mutable_view(
        &self,
        ptr: *mut c_void,
        dtype: ElementType,
        dims: &[i64],
        device: Option<&Device>,
        on_done: OnDelete,
    ) -> Result<Buffer> {
        check_dims(dims)?;
        if ptr.is_null() {
            return Err(Error::InvalidArgument(
                "null pointer for a mutable host buffer".into(),
            ));
        }
        if matches!(dtype, ElementType::Invalid | ElementType::Token) {
            return Err(Error::UnsupportedType(dtype));
        }
        let mut a = ffi::PJRT_Client_BufferFromHostBuffer_Args::new();
        a.client = self.raw();
        a.data = ptr as *const c_void;
        a.type_ = dtype.to_raw();
        a.dims = dims.as_ptr();
        a.num_dims = dims.len();
        a.host_buffer_semantics = ffi::PJRT_HostBufferSemantics_kMutableZeroCopy;
        a.device = self.pick_device(device)?;
        // SAFETY: the caller guarantees `ptr` as documented; `dims` outlives
        // the call.
        unsafe { pjrt_call!(self.api(), PJRT_Client_BufferFromHostBuffer, &mut a)? };
        let buf = Buffer::from_raw(self.clone(), a.buffer);
        let done = Event::from_raw(self.plugin().clone(), a.done_with_host_buffer);
        if let Err(e) = done.on_ready_run(on_done) {
            // `on_done` is leaked: the memory's owner is never released, so
            // the memory stays valid for the buffer, which is dropped here.
            tracing::warn!(error = %e, "done_with_host_buffer cannot be observed");
            return Err(e);
        }
        let _ = buf.inner.meta.set(Meta {
            dtype,
            dims: Dims::from_slice(dims),
        });
        Ok(buf)
    }

    /// Creates a buffer that aliases existing memory at `ptr`
    /// (`PJRT_Client_CreateViewOfDeviceBuffer`). On CPU, host memory aligned
    /// to 64 bytes is used without copying. `on_delete` runs once the plugin
    /// no longer uses the memory (it is dropped without running if creation
    /// fails).
    ///
    /// # Safety
    /// `ptr` must point to memory on `device` valid for the array's dense
    /// size, which stays alive (and is not freed) until `on_delete` runs.
    pub unsafe fn create_view(
        &self,
        ptr: *mut c_void,
        dtype: ElementType,
        dims: &[i64],
        device: Option<&Device>,
        on_delete: Option<OnDelete>,
    ) -> Result<Buffer> {
        check_dims(dims)?;
        if ptr.is_null() {
            return Err(Error::InvalidArgument(
                "null pointer for device buffer view".into(),
            ));
        }
        let mut a = ffi::PJRT_Client_CreateViewOfDeviceBuffer_Args::new();
        a.client = self.raw();
        a.device_buffer_ptr = ptr;
        a.dims = dims.as_ptr();
        a.num_dims = dims.len();
        a.element_type = dtype.to_raw();
        a.device = self.pick_device(device)?;
        let slot: Option<Arc<ViewCallbackSlot>> = on_delete.map(|f| Arc::new(Mutex::new(Some(f))));
        if let Some(s) = &slot {
            a.on_delete_callback = Some(view_on_delete);
            a.on_delete_callback_arg = Arc::into_raw(s.clone()) as *mut c_void;
        }
        // SAFETY: caller guarantees `ptr`; `dims` outlives the call; the
        // callback arg is a leaked Arc reference consumed by the callback.
        match unsafe { pjrt_call!(self.api(), PJRT_Client_CreateViewOfDeviceBuffer, &mut a) } {
            Ok(()) => {
                let buf = Buffer::from_raw(self.clone(), a.buffer);
                let _ = buf.inner.meta.set(Meta {
                    dtype,
                    dims: Dims::from_slice(dims),
                });
                Ok(buf)
            }
            Err(e) => {
                // The plugin did not take the callback: drop it without
                // running it (the leaked Arc reference stays leaked, in case
                // the plugin still calls it).
                if let Some(s) = slot {
                    if let Ok(mut g) = s.lock() {
                        g.take();
                    }
                }
                Err(e)
            }
        }
    }
}
