//! Redirecting one loaded library's imports of a few libc functions.
//!
//! A shared library calls an imported function through a slot of its global
//! offset table (GOT): a `R_X86_64_JUMP_SLOT` relocation for calls through
//! the PLT, a `R_X86_64_GLOB_DAT` one where the code takes the function's
//! address. [`redirect`] finds the slots of the named symbols in ONE loaded
//! object (found by path with `dl_iterate_phdr`), from its dynamic section
//! (`DT_JMPREL`/`DT_RELA` relocations, `DT_SYMTAB`/`DT_STRTAB` names), and
//! stores new addresses in them. Slots inside the object's `PT_GNU_RELRO`
//! segment are made writable for the store and read-only again after it.
//! Nothing outside that object changes: the rest of the process keeps
//! calling libc.
//!
//! The ELF records are declared here from the System V ABI's x86-64
//! supplement (`Elf64_Dyn`, `Elf64_Rela`, `Elf64_Sym`: facts of the format).

use std::ffi::{c_int, c_void, CStr};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};

const PT_DYNAMIC: u32 = 2;
const PT_GNU_RELRO: u32 = 0x6474_e552;
const DT_NULL: i64 = 0;
const DT_PLTRELSZ: i64 = 2;
const DT_STRTAB: i64 = 5;
const DT_SYMTAB: i64 = 6;
const DT_RELA: i64 = 7;
const DT_RELASZ: i64 = 8;
const DT_RELAENT: i64 = 9;
const DT_STRSZ: i64 = 10;
const DT_PLTREL: i64 = 20;
const DT_JMPREL: i64 = 23;
const R_X86_64_GLOB_DAT: u32 = 6;
const R_X86_64_JUMP_SLOT: u32 = 7;

#[repr(C)]
struct Elf64Dyn {
    tag: i64,
    val: u64,
}

#[repr(C)]
struct Elf64Rela {
    offset: u64,
    info: u64,
    addend: i64,
}

#[repr(C)]
struct Elf64Sym {
    name: u32,
    info: u8,
    other: u8,
    shndx: u16,
    value: u64,
    size: u64,
}

/// Where one loaded object lives: its load bias, dynamic section and
/// RELRO range (absolute addresses).
struct Loaded {
    base: usize,
    dynamic: usize,
    relro: Option<(usize, usize)>,
}

struct Search<'a> {
    path: &'a [u8],
    found: Option<Loaded>,
}

unsafe extern "C" fn visit(
    info: *mut libc::dl_phdr_info,
    _size: usize,
    data: *mut c_void,
) -> c_int {
    // SAFETY: `data` is the `Search` that `find` passed to dl_iterate_phdr,
    // and `info` the loader's record of one object, valid during the call.
    let (search, info) = unsafe { (&mut *(data as *mut Search<'_>), &*info) };
    if info.dlpi_name.is_null() {
        return 0;
    }
    // SAFETY: dlpi_name is a NUL-terminated string owned by the loader.
    let name = unsafe { CStr::from_ptr(info.dlpi_name) }.to_bytes();
    if name != search.path {
        return 0;
    }
    let base = info.dlpi_addr as usize;
    let mut loaded = Loaded {
        base,
        dynamic: 0,
        relro: None,
    };
    for i in 0..info.dlpi_phnum as usize {
        // SAFETY: dlpi_phdr points to dlpi_phnum program headers.
        let ph = unsafe { &*info.dlpi_phdr.add(i) };
        match ph.p_type {
            PT_DYNAMIC => loaded.dynamic = base + ph.p_vaddr as usize,
            PT_GNU_RELRO => {
                let start = base + ph.p_vaddr as usize;
                loaded.relro = Some((start, start + ph.p_memsz as usize));
            }
            _ => {}
        }
    }
    search.found = Some(loaded);
    1
}

/// The loaded object whose path (as the loader recorded it) is `path`.
fn find(path: &Path) -> Option<Loaded> {
    use std::os::unix::ffi::OsStrExt;
    let mut search = Search {
        path: path.as_os_str().as_bytes(),
        found: None,
    };
    // SAFETY: `visit` only reads the loader's records and writes `search`,
    // which outlives the call.
    unsafe { libc::dl_iterate_phdr(Some(visit), &mut search as *mut Search<'_> as *mut c_void) };
    search.found
}

/// Stores `new` (symbol name, address) into every GOT slot of the object
/// loaded from `path` that imports one of those symbols. Returns how many
/// slots each symbol had, or why nothing was changed (the object is not
/// loaded, has no dynamic section, uses REL relocations, or does not import
/// the first symbol of `new`, which the caller needs redirected for the
/// others to be safe). Call it before the object runs code that could hand
/// out memory from the functions replaced.
pub(crate) fn redirect(path: &Path, new: &[(&str, usize)]) -> Result<Vec<usize>, String> {
    let obj = find(path).ok_or_else(|| format!("{} is not loaded", path.display()))?;
    if obj.dynamic == 0 {
        return Err("no dynamic section".into());
    }
    let abs = |v: u64| {
        // The loader may have relocated these entries in place (glibc on
        // x86-64 does); an unrelocated one is an offset from the base.
        let v = v as usize;
        if v < obj.base {
            obj.base + v
        } else {
            v
        }
    };
    let (mut symtab, mut strtab, mut strsz) = (0usize, 0usize, 0usize);
    let (mut rela, mut relasz, mut relaent) = (0usize, 0usize, std::mem::size_of::<Elf64Rela>());
    let (mut jmprel, mut pltrelsz, mut pltrel) = (0usize, 0usize, DT_RELA);
    let mut d = obj.dynamic as *const Elf64Dyn;
    // SAFETY: PT_DYNAMIC of a loaded object is an array of Elf64_Dyn ending
    // with DT_NULL.
    unsafe {
        while (*d).tag != DT_NULL {
            let (tag, val) = ((*d).tag, (*d).val);
            match tag {
                DT_SYMTAB => symtab = abs(val),
                DT_STRTAB => strtab = abs(val),
                DT_STRSZ => strsz = val as usize,
                DT_RELA => rela = abs(val),
                DT_RELASZ => relasz = val as usize,
                DT_RELAENT => relaent = val as usize,
                DT_JMPREL => jmprel = abs(val),
                DT_PLTRELSZ => pltrelsz = val as usize,
                DT_PLTREL => pltrel = val as i64,
                _ => {}
            }
            d = d.add(1);
        }
    }
    if symtab == 0
        || strtab == 0
        || pltrel != DT_RELA
        || relaent != std::mem::size_of::<Elf64Rela>()
    {
        return Err("unsupported dynamic section (no symbols, or REL relocations)".into());
    }
    let mut slots: Vec<(usize, usize)> = Vec::new();
    let mut counts = vec![0usize; new.len()];
    for (table, size) in [(rela, relasz), (jmprel, pltrelsz)] {
        if table == 0 {
            continue;
        }
        for k in 0..size / relaent {
            // SAFETY: the relocation table holds size / relaent entries.
            let r = unsafe { &*(table as *const Elf64Rela).add(k) };
            let kind = (r.info & 0xffff_ffff) as u32;
            if kind != R_X86_64_JUMP_SLOT && kind != R_X86_64_GLOB_DAT {
                continue;
            }
            let sym_index = (r.info >> 32) as usize;
            // SAFETY: a relocation's symbol index is within the symbol table.
            let sym = unsafe { &*(symtab as *const Elf64Sym).add(sym_index) };
            if sym.shndx != 0 || sym.name as usize >= strsz {
                continue; // defined here, not imported
            }
            // SAFETY: st_name is an offset into the string table (checked
            // against DT_STRSZ), which holds NUL-terminated names.
            let name =
                unsafe { CStr::from_ptr((strtab + sym.name as usize) as *const libc::c_char) };
            let Ok(name) = name.to_str() else { continue };
            if let Some(i) = new.iter().position(|(n, _)| *n == name) {
                slots.push((abs(r.offset), i));
                counts[i] += 1;
            }
        }
    }
    if counts.first() == Some(&0) {
        return Err(format!("{} does not import {}", path.display(), new[0].0));
    }
    // Every RELRO page made writable first (an error leaves nothing
    // changed), then the stores in the order of `new`: a caller lists the
    // deallocating functions first, so no allocation can come from a new
    // function before its memory can be given back to the new one.
    let page = 4096usize;
    let relro_pages: Vec<usize> = {
        let mut v: Vec<usize> = slots
            .iter()
            .filter(|(s, _)| obj.relro.is_some_and(|(a, b)| *s >= a && *s + 8 <= b))
            .map(|(s, _)| s & !(page - 1))
            .collect();
        v.sort_unstable();
        v.dedup();
        v
    };
    let protect = |pages: &[usize], prot: c_int| -> Result<(), String> {
        for &p in pages {
            // SAFETY: `p` is the page of a GOT slot of this object; changing
            // its protection changes nothing else.
            if unsafe { libc::mprotect(p as *mut c_void, page, prot) } != 0 {
                return Err(format!(
                    "mprotect failed: {}",
                    std::io::Error::last_os_error()
                ));
            }
        }
        Ok(())
    };
    if let Err(e) = protect(&relro_pages, libc::PROT_READ | libc::PROT_WRITE) {
        let _ = protect(&relro_pages, libc::PROT_READ);
        return Err(e);
    }
    slots.sort_by_key(|&(_, i)| i);
    for (slot, i) in slots {
        let addr = new[i].1;
        // SAFETY: `slot` is an 8-byte-aligned, writable GOT slot of this
        // object; one atomic store, so a concurrent call through it reads
        // either the old or the new address.
        unsafe { (*(slot as *const AtomicUsize)).store(addr, Ordering::SeqCst) };
    }
    protect(&relro_pages, libc::PROT_READ)?;
    Ok(counts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_object_that_is_not_loaded_changes_nothing() {
        let e = redirect(Path::new("/nonexistent/libnothing.so"), &[("free", 0)]).unwrap_err();
        assert!(e.contains("is not loaded"), "{e}");
    }
}
