//! Checks every Rust `#[repr(C)]` declaration against the installed
//! `pjrt_c_api.h` by compiling a C program that prints `sizeof`/`offsetof`.

use pjrt_client::ElementType;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Compiles and runs a C program that prints `name value` lines (with
/// `include` on the include path) and returns the values by name.
fn run_c_program(tag: &str, include: &Path, source: &str) -> HashMap<String, i64> {
    let dir = std::env::temp_dir().join(format!("hlobridge_{tag}_{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (src, exe) = (dir.join(format!("{tag}.c")), dir.join(tag));
    std::fs::write(&src, source).unwrap();
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let st = Command::new(&cc)
        .arg("-std=c11")
        .arg("-I")
        .arg(include)
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .status()
        .expect("run C compiler");
    assert!(st.success(), "C compile failed");
    let out = Command::new(&exe).output().expect("run layout program");
    assert!(out.status.success());
    std::fs::remove_dir_all(&dir).ok();
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter_map(|l| l.rsplit_once(' '))
        .map(|(k, v)| (k.to_string(), v.parse().unwrap()))
        .collect()
}

/// Compiles a C program against `header` that prints `sizeof`/`offsetof`
/// of every struct in `layouts` and the value of every C expression in
/// `enums`, and asserts that they equal the Rust side. Returns how many
/// values were checked.
fn check_against_header(
    tag: &str,
    include: &Path,
    header: &str,
    layouts: &[pjrt_client::ffi::StructLayout],
    enums: &[(String, i64)],
) -> usize {
    let mut c = format!(
        "#include <stdio.h>\n#include <stddef.h>\n#include \"{header}\"\nint main(void) {{\n"
    );
    for l in layouts {
        c.push_str(&format!("  printf(\"{0} %zu\\n\", sizeof({0}));\n", l.name));
        for (f, _) in l.fields {
            c.push_str(&format!(
                "  printf(\"{0}.{1} %zu\\n\", offsetof({0}, {1}));\n",
                l.name, f
            ));
        }
    }
    for (expr, _) in enums {
        c.push_str(&format!("  printf(\"enum.{expr} %d\\n\", (int){expr});\n"));
    }
    c.push_str("  return 0;\n}\n");
    let c_vals = run_c_program(tag, include, &c);
    let mut mismatches = Vec::new();
    let mut checked = 0;
    let mut expect = |key: String, rust: i64, what: &str| {
        checked += 1;
        let cv = c_vals[&key];
        if cv != rust {
            mismatches.push(format!("{what}: C {cv} vs Rust {rust}"));
        }
    };
    for l in layouts {
        expect(
            l.name.to_string(),
            l.size as i64,
            &format!("sizeof({})", l.name),
        );
        for (f, off) in l.fields {
            let key = format!("{}.{}", l.name, f);
            expect(key.clone(), *off as i64, &format!("offsetof({key})"));
        }
    }
    for (expr, v) in enums {
        expect(format!("enum.{expr}"), *v, expr);
    }
    assert!(
        mismatches.is_empty(),
        "layout mismatches against {header}:\n{}",
        mismatches.join("\n")
    );
    checked
}

fn find_header() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("PJRT_C_API_HEADER") {
        return Some(PathBuf::from(p));
    }
    // Next to the discovered plugin (the xla-cpu-pjrt wheel ships it there).
    if let Ok(found) = pjrt_client::find_plugin(&Default::default()) {
        if let Some(dir) = found.path.parent() {
            for cand in [dir.join("include/pjrt_c_api.h"), dir.join("pjrt_c_api.h")] {
                if cand.exists() {
                    return Some(cand);
                }
            }
        }
    }
    // Anywhere under site-packages (bounded depth).
    fn walk(dir: &Path, depth: usize) -> Option<PathBuf> {
        if depth == 0 {
            return None;
        }
        for e in std::fs::read_dir(dir).ok()?.flatten() {
            let p = e.path();
            if p.file_name().is_some_and(|n| n == "pjrt_c_api.h") {
                return Some(p);
            }
            if p.is_dir() && !p.is_symlink() {
                if let Some(h) = walk(&p, depth - 1) {
                    return Some(h);
                }
            }
        }
        None
    }
    pjrt_client::discovery::site_packages_dirs()
        .iter()
        .find_map(|sp| walk(sp, 6))
}

#[test]
fn rust_layouts_match_pjrt_c_api_header() {
    let Some(header) = find_header() else {
        eprintln!(
            "SKIPPED: pjrt_c_api.h not found (set PJRT_C_API_HEADER or install the xla-cpu-pjrt wheel into .venv via `make`)"
        );
        return;
    };
    eprintln!("checking against {}", header.display());
    let layouts = pjrt_client::layout::all();
    let enums: Vec<(String, i64)> = ElementType::ALL
        .iter()
        .map(|t| {
            let name = format!("{t:?}").to_uppercase();
            (format!("PJRT_Buffer_Type_{name}"), t.to_raw() as i64)
        })
        .collect();
    let checked = check_against_header(
        "layout",
        header.parent().unwrap(),
        "pjrt_c_api.h",
        &layouts,
        &enums,
    );
    eprintln!(
        "checked {checked} sizes/offsets/enum values over {} structs",
        layouts.len()
    );
}

/// jaxlib's copy of the XLA FFI C API header (`xla/ffi/api/c_api.h`).
fn find_xla_ffi_header() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("XLA_FFI_C_API_HEADER") {
        return Some(PathBuf::from(p));
    }
    pjrt_client::discovery::site_packages_dirs()
        .iter()
        .map(|sp| sp.join("jaxlib/include/xla/ffi/api/c_api.h"))
        .find(|p| p.exists())
}

#[test]
fn host_kernel_layouts_match_the_xla_ffi_header() {
    let Some(header) = find_xla_ffi_header() else {
        eprintln!("SKIPPED: jaxlib's xla/ffi/api/c_api.h not found (install jaxlib into .venv via `make`)");
        return;
    };
    eprintln!("checking against {}", header.display());
    let include = header
        .ancestors()
        .nth(4)
        .expect("include dir")
        .to_path_buf();
    let layouts = pjrt_client::host_kernels::xla_ffi::layouts();
    use pjrt_client::host_kernels::xla_ffi as x;
    let enums = [
        (
            "XLA_FFI_Extension_Metadata",
            x::XLA_FFI_Extension_Metadata as i64,
        ),
        (
            "XLA_FFI_ExecutionStage_EXECUTE",
            x::XLA_FFI_ExecutionStage_EXECUTE as i64,
        ),
        ("XLA_FFI_DataType_F32", x::XLA_FFI_DataType_F32 as i64),
        ("XLA_FFI_DataType_F64", x::XLA_FFI_DataType_F64 as i64),
        ("XLA_FFI_DataType_F16", x::XLA_FFI_DataType_F16 as i64),
        ("XLA_FFI_DataType_BF16", x::XLA_FFI_DataType_BF16 as i64),
        ("XLA_FFI_ArgType_BUFFER", x::XLA_FFI_ArgType_BUFFER as i64),
        ("XLA_FFI_RetType_BUFFER", x::XLA_FFI_RetType_BUFFER as i64),
        (
            "XLA_FFI_Error_Code_INVALID_ARGUMENT",
            x::XLA_FFI_Error_Code_INVALID_ARGUMENT as i64,
        ),
        (
            "XLA_FFI_Error_Code_INTERNAL",
            x::XLA_FFI_Error_Code_INTERNAL as i64,
        ),
        ("XLA_FFI_API_MAJOR", x::XLA_FFI_API_MAJOR as i64),
        ("XLA_FFI_API_MINOR", x::XLA_FFI_API_MINOR as i64),
    ];
    let enums: Vec<(String, i64)> = enums.iter().map(|(n, v)| (n.to_string(), *v)).collect();
    check_against_header(
        "ffi_layout",
        &include,
        "xla/ffi/api/c_api.h",
        &layouts,
        &enums,
    );
}
