//! Running a [`LoadedExecutable`]: argument checks, donation, outputs.
//!
//! The hot path avoids heap allocation except for the returned output
//! buffers: argument/output pointer tables live in `SmallVec`s and no
//! completion events are requested (outputs carry their own readiness).
//! Deletion is checked against our own flag before the call (donation and
//! `Buffer::delete` set it); if the plugin rejects the call anyway,
//! `PJRT_Buffer_IsDeleted` is consulted to name the deleted argument.
//!
//! Every execution gets its own launch id unless the caller sets one: the
//! CPU plugin turns the launch id into the `RunId` that keys its in-process
//! collective rendezvous (with the device ids and the op), so two
//! multi-device executions in flight at once under the same id (two
//! threads, or two clients whose devices are both numbered from 0) would
//! meet in one all-reduce and read each other's buffers.

use crate::buffer::Buffer;
use crate::error::{Error, Result};
use crate::executable::LoadedExecutable;
use crate::ffi::{self, PjrtStruct};
use crate::pjrt_call;
use smallvec::SmallVec;

/// Which inputs an execution may donate (reuse for outputs). Donated inputs
/// are deleted by the runtime; using them later fails with
/// [`Error::BufferDeleted`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Donation<'a> {
    /// Never donate (inputs stay valid). Default.
    #[default]
    None,
    /// Allow donating any input the executable aliases to an output.
    All,
    /// Allow donating only these argument indices.
    Only(&'a [usize]),
}

/// Per-call execution options.
#[derive(Debug, Clone, Copy, Default)]
pub struct ExecuteOptions<'a> {
    /// Donation policy.
    pub donation: Donation<'a>,
    /// Launch id for multi-device launches. 0 (unset) takes a fresh
    /// process-wide id per execution ([`next_launch_id`]); set it only to
    /// match a launch coordinated with other processes.
    pub launch_id: i32,
}

/// A launch id no other execution in this process has used (1..=`i32::MAX`,
/// wrapping after 2³¹ − 1 launches, never 0).
pub fn next_launch_id() -> i32 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    (NEXT.fetch_add(1, Ordering::Relaxed) % i32::MAX as u32) as i32 + 1
}

type Ptrs = SmallVec<[*mut ffi::PJRT_Buffer; 16]>;

impl LoadedExecutable {
    /// Runs on the executable's single device; inputs are never donated.
    pub fn execute(&self, args: &[&Buffer]) -> Result<Vec<Buffer>> {
        self.execute_with(args, &ExecuteOptions::default())
    }

    /// Runs on the executable's single device with options.
    pub fn execute_with(&self, args: &[&Buffer], opts: &ExecuteOptions<'_>) -> Result<Vec<Buffer>> {
        let nd = self.inner.devices.len();
        if nd != 1 {
            return Err(Error::DeviceCount {
                expected: nd,
                got: 1,
            });
        }
        let mut out = Vec::with_capacity(self.inner.num_outputs);
        self.run(&[args], opts, &mut |_, b| out.push(b))?;
        Ok(out)
    }

    /// Runs on every device (SPMD / replicated): `per_device[d]` are the
    /// arguments for device `d` (see [`LoadedExecutable::devices`]). Returns
    /// outputs per device.
    pub fn execute_sharded<'a, A: AsRef<[&'a Buffer]>>(
        &self,
        per_device: &[A],
        opts: &ExecuteOptions<'_>,
    ) -> Result<Vec<Vec<Buffer>>> {
        let lists: SmallVec<[&[&Buffer]; 8]> = per_device.iter().map(|a| a.as_ref()).collect();
        let mut out: Vec<Vec<Buffer>> = (0..lists.len())
            .map(|_| Vec::with_capacity(self.inner.num_outputs))
            .collect();
        self.run(&lists, opts, &mut |d, b| out[d].push(b))?;
        Ok(out)
    }

    fn check_args(&self, per_device: &[&[&Buffer]]) -> Result<usize> {
        let nd = self.inner.devices.len();
        if per_device.len() != nd {
            return Err(Error::DeviceCount {
                expected: nd,
                got: per_device.len(),
            });
        }
        let table = self.param_table();
        let na = match table {
            Some(t) => t.params.len(),
            None => per_device.first().map_or(0, |l| l.len()),
        };
        for list in per_device {
            if list.len() != na {
                return Err(Error::ArgumentCount {
                    expected: na,
                    got: list.len(),
                });
            }
            for (i, b) in list.iter().enumerate() {
                b.check_flag(&|| format!("argument {i} of execute"))?;
                if !std::ptr::eq(b.client().inner.as_ref(), self.client().inner.as_ref()) {
                    return Err(Error::InvalidArgument(format!(
                        "argument {i} belongs to a different client"
                    )));
                }
                if let Some(t) = table {
                    let m = b.meta()?;
                    let p = &t.params[i];
                    if m.dtype != p.dtype {
                        return Err(Error::ArgumentDtype {
                            index: i,
                            expected: p.dtype,
                            got: m.dtype,
                        });
                    }
                    if m.dims != p.dims {
                        return Err(Error::ArgumentShape {
                            index: i,
                            expected: p.dims.to_vec(),
                            got: m.dims.to_vec(),
                        });
                    }
                }
            }
        }
        Ok(na)
    }

    fn run(
        &self,
        per_device: &[&[&Buffer]],
        opts: &ExecuteOptions<'_>,
        sink: &mut dyn FnMut(usize, Buffer),
    ) -> Result<()> {
        let na = self.check_args(per_device)?;
        let nd = per_device.len();
        let no = self.inner.num_outputs;

        let mut arg_ptrs: Ptrs = SmallVec::with_capacity(nd * na);
        for list in per_device {
            arg_ptrs.extend(list.iter().map(|b| b.raw()));
        }
        let arg_lists: SmallVec<[*const *mut ffi::PJRT_Buffer; 8]> = (0..nd)
            .map(|d| arg_ptrs.as_ptr().wrapping_add(d * na) as *const _)
            .collect();
        let mut out_ptrs: Ptrs = SmallVec::from_elem(std::ptr::null_mut(), nd * no);
        let out_lists: SmallVec<[*mut *mut ffi::PJRT_Buffer; 8]> = (0..nd)
            .map(|d| out_ptrs.as_mut_ptr().wrapping_add(d * no))
            .collect();

        let owned_indices: SmallVec<[i64; 16]>;
        let non_donatable: &[i64] = match opts.donation {
            Donation::None => match self.param_table() {
                Some(t) => &t.all_indices[..na],
                None => {
                    owned_indices = (0..na as i64).collect();
                    &owned_indices
                }
            },
            Donation::All => &[],
            Donation::Only(idx) => {
                if let Some(&bad) = idx.iter().find(|&&i| i >= na) {
                    return Err(Error::InvalidArgument(format!(
                        "donation index {bad} out of range ({na} arguments)"
                    )));
                }
                owned_indices = (0..na)
                    .filter(|i| !idx.contains(i))
                    .map(|i| i as i64)
                    .collect();
                &owned_indices
            }
        };

        let mut eo = ffi::PJRT_ExecuteOptions::new();
        eo.launch_id = match opts.launch_id {
            0 => next_launch_id(),
            id => id,
        };
        eo.non_donatable_input_indices = non_donatable.as_ptr();
        eo.num_non_donatable_input_indices = non_donatable.len();
        let mut a = ffi::PJRT_LoadedExecutable_Execute_Args::new();
        a.executable = self.inner.raw;
        a.options = &mut eo;
        a.argument_lists = arg_lists.as_ptr();
        a.num_devices = nd;
        a.num_args = na;
        a.output_lists = out_lists.as_ptr();
        // SAFETY: all pointer tables have nd x na / nd x no entries and live
        // until the call returns; argument buffers are live (checked above)
        // and kept alive by `per_device` borrows; the plugin writes owned
        // output handles into `out_ptrs`.
        let status =
            unsafe { pjrt_call!(self.client().api(), PJRT_LoadedExecutable_Execute, &mut a) };
        if let Err(e) = status {
            // Deleted/donated behind our back (e.g. via a raw handle): report
            // it precisely using PJRT_Buffer_IsDeleted.
            for list in per_device {
                for (i, b) in list.iter().enumerate() {
                    if b.plugin_is_deleted().unwrap_or(false) {
                        b.mark_deleted();
                        return Err(Error::BufferDeleted {
                            context: format!("argument {i} of execute"),
                        });
                    }
                }
            }
            return Err(e);
        }

        for (i, &p) in out_ptrs.iter().enumerate() {
            if !p.is_null() {
                sink(i / no.max(1), Buffer::from_raw(self.client().clone(), p));
            }
        }
        if opts.donation != Donation::None {
            for list in per_device {
                for (i, b) in list.iter().enumerate() {
                    let candidate = match opts.donation {
                        Donation::Only(idx) => idx.contains(&i),
                        _ => true,
                    };
                    if candidate && b.plugin_is_deleted().unwrap_or(false) {
                        tracing::trace!(arg = i, "input donated");
                        b.mark_deleted();
                    }
                }
            }
        }
        Ok(())
    }
}
