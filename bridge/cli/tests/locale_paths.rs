//! The CLI does not depend on the locale or on ASCII file names: `fmt`,
//! `inspect --json` and `run` give the same bytes under `LC_ALL=C` (where a
//! locale-aware program would mangle non-ASCII names or print decimal
//! commas) and `C.UTF-8`, for a module and an output directory whose names
//! are UTF-8 (and, for `fmt`, not even valid UTF-8); a parse error names
//! such a file readably.

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// `1.5 + 2.25` into a tensor<3xf32>: no parameters, so `run` needs no inputs.
const MODULE: &str = "module @m {
  func.func public @main() -> tensor<3xf32> {
    %a = stablehlo.constant dense<1.5> : tensor<3xf32>
    %b = stablehlo.constant dense<[2.25, -0.125, 1.0e+03]> : tensor<3xf32>
    %0 = stablehlo.add %a, %b : tensor<3xf32>
    return %0 : tensor<3xf32>
  }
}
";

fn scratch(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("hlobridge-locale-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn cli(locale: &str, args: &[&std::ffi::OsStr]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_hlobridge"))
        .args(args)
        .env("LC_ALL", locale)
        .env("LANG", locale)
        .env_remove("LANGUAGE")
        .output()
        .expect("run hlobridge")
}

fn ok(out: Output, what: &str) -> Vec<u8> {
    assert!(
        out.status.success(),
        "{what}: exit {:?}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// The f32 payload of a little-endian `.npy` file (after its header).
fn npy_f32(path: &Path) -> Vec<f32> {
    let b = std::fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    assert_eq!(&b[..6], b"\x93NUMPY", "{}", path.display());
    let header_len = u16::from_le_bytes([b[8], b[9]]) as usize;
    let header = String::from_utf8_lossy(&b[10..10 + header_len]);
    assert!(header.contains("<f4"), "{header}");
    b[10 + header_len..]
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

#[test]
fn utf8_names_and_locales_give_the_same_bytes() {
    let dir = scratch("utf8");
    let module = dir.join("modèle ü 模型.mlir");
    std::fs::write(&module, MODULE).unwrap();
    let mut seen: Vec<(Vec<u8>, Vec<u8>, Vec<f32>)> = Vec::new();
    for locale in ["C", "C.UTF-8", "POSIX"] {
        let pretty = ok(cli(locale, &["fmt".as_ref(), module.as_os_str()]), "fmt");
        let json = ok(
            cli(
                locale,
                &["inspect".as_ref(), "--json".as_ref(), module.as_os_str()],
            ),
            "inspect",
        );
        serde_json::from_slice::<serde_json::Value>(&json).expect("inspect --json is JSON");
        let out_dir = dir.join(format!("résultat {locale}"));
        ok(
            cli(
                locale,
                &[
                    "run".as_ref(),
                    module.as_os_str(),
                    "--out".as_ref(),
                    out_dir.as_os_str(),
                ],
            ),
            "run",
        );
        let values = npy_f32(&out_dir.join("0.npy"));
        assert_eq!(values, vec![3.75, 1.375, 1001.5], "locale {locale}");
        seen.push((pretty, json, values));
    }
    let text = String::from_utf8(seen[0].0.clone()).unwrap();
    assert!(
        text.contains("dense<1.500000e+00>") || text.contains("dense<1.5"),
        "{text}"
    );
    assert!(!text.contains("1,5"), "decimal comma in {text}");
    for s in &seen[1..] {
        assert_eq!(s, &seen[0], "output differs between locales");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn non_utf8_file_names_are_read_and_reported() {
    let dir = scratch("bytes");
    let mut name = b"bad\xff".to_vec();
    name.extend_from_slice(b".mlir");
    let good = dir.join(OsString::from_vec(name.clone()));
    std::fs::write(&good, MODULE).unwrap();
    let pretty = ok(cli("C", &["fmt".as_ref(), good.as_os_str()]), "fmt");
    assert!(String::from_utf8(pretty).unwrap().contains("stablehlo.add"));

    let broken = dir.join(OsString::from_vec(
        [b"err\xfe ".as_slice(), b".mlir"].concat(),
    ));
    std::fs::write(&broken, MODULE.replace("%a, %b", "%nope, %b")).unwrap();
    let out = cli("C", &["fmt".as_ref(), broken.as_os_str()]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("err\u{fffd} .mlir:5:") && err.contains("use of undefined value '%nope'"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}
