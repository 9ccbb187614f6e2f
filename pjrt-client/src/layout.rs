//! Rust-side layout table of every PJRT struct this crate declares.
//!
//! `tests/layout.rs` compiles a C program against the installed
//! `pjrt_c_api.h` that prints `sizeof`/`offsetof` for every entry and
//! compares them with these values.

pub use crate::ffi::StructLayout;

/// Layouts of all declared PJRT structs (name, size, field offsets).
pub fn all() -> Vec<StructLayout> {
    crate::ffi::all_layouts()
}
