//! What `hlobridge run` does differently from jax when both run the same
//! StableHLO text on the same CPU plugin (docs/conformance.md): hlobridge
//! sends no `DebugOptions`, so the plugin compiles with its own defaults,
//! while jaxlib sends its own full `DebugOptions`, in which
//! `xla_cpu_experimental_ynn_fusion_type` (jaxlib 0.10.2: reduce and
//! individual-dot YNNPACK fusions) changes how the plugin computes
//! reductions.
//!
//! A JAX program (matmul, layer norm, softmax) on fresh seeded inputs is run
//! through the plugin by jaxlib twice: with jaxlib's default
//! `CompileOptions`, and with the `CompileOptionsProto` hlobridge sends.
//! With the host lowering off (`HLOBRIDGE_HOST_GEMM=off`,
//! `HLOBRIDGE_REDUCE_STAGES=0`), `hlobridge run` must match the second
//! bitwise (parse, print and the runtime change nothing), and with
//! `--xla-option xla_cpu_experimental_ynn_fusion_type=...` the first. Skipped
//! with a message when the venv's python (with jax) is missing.

use std::path::PathBuf;
use std::process::Command;

const PY_GEN: &str = r#"
import sys, os, numpy as np
d = sys.argv[1]
import jax, jax.numpy as jnp
from jax._src import xla_bridge as xb
from jax._src.lib import xla_client as xc
plugin = sys.argv[2]
xb.register_plugin("hb_ref", library_path=plugin)
jax.config.update("jax_platforms", "cpu,hb_ref")
def f(x, w, g):
    h = x @ w
    mu = h.mean(-1, keepdims=True)
    var = ((h - mu) ** 2).mean(-1, keepdims=True)
    h = (h - mu) / jnp.sqrt(var + 1e-5) * g
    return jax.nn.softmax(h * 3.0, axis=-1) @ w.T + h.sum(-1, keepdims=True)
rng = np.random.default_rng(11)
x = rng.standard_normal((256, 192)).astype(np.float32)
w = rng.standard_normal((192, 256)).astype(np.float32)
g = (1 + 0.1 * rng.standard_normal(256)).astype(np.float32)
text = jax.jit(f).lower(x, w, g).as_text()
open(f"{d}/m.mlir", "w").write(text)
for i, a in enumerate((x, w, g)):
    np.save(f"{d}/in{i}.npy", a)
dev = jax.devices("hb_ref")[0]
def varint(n):
    n &= (1 << 64) - 1
    out = b""
    while True:
        b = n & 0x7F; n >>= 7
        if n: out += bytes([b | 0x80])
        else: return out + bytes([b])
def field(num, payload):  # varint fields, or bytes for length-delimited
    if isinstance(payload, bytes):
        return varint(num << 3 | 2) + varint(len(payload)) + payload
    return varint(num << 3) + varint(payload)
# hlobridge's CompileOptionsProto: build options {device_ordinal -1, 1 replica, 1 partition}, no DebugOptions.
plain = xc.CompileOptions.ParseFromString(field(3, field(1, -1) + field(4, 1) + field(5, 1)))
for name, opts in (("jaxlib", xc.CompileOptions()), ("plain", plain)):
    exe = dev.client.compile_and_load(text, xc.DeviceList((dev,)), opts)
    out = exe.execute_sharded([jax.device_put(a, dev) for a in (x, w, g)])
    np.save(f"{d}/ref_{name}.npy", np.asarray(out.disassemble_into_single_device_arrays()[0][0]))
print("ok")
"#;

const PY_CMP: &str = r#"
import sys, numpy as np
d = sys.argv[1]
L = lambda p: np.load(f"{d}/{p}")
default, ynn = L("default/0.npy"), L("ynn/0.npy")
plain, jaxlib = L("ref_plain.npy"), L("ref_jaxlib.npy")
print(f"hlobridge default vs jaxlib options: max |diff| {np.abs(default - jaxlib).max():.3e} (max |y| {np.abs(jaxlib).max():.3g})")
assert default.view(np.uint32).tolist() == plain.view(np.uint32).tolist(), "hlobridge run != plugin with hlobridge's options"
assert ynn.view(np.uint32).tolist() == jaxlib.view(np.uint32).tolist(), "hlobridge run --xla-option ynn != plugin with jaxlib's options"
print("ok")
"#;

/// jaxlib 0.10.2's YNNPACK fusion types, as the plugin names them.
const JAXLIB_YNN: &str = "xla_cpu_experimental_ynn_fusion_type=LIBRARY_FUSION_TYPE_REDUCE,LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT";

fn manifest() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn run_matches_the_plugin_defaults_and_jaxlib_with_its_ynn_option() {
    let py = manifest().join("../../.venv/bin/python");
    let has_jax = py.exists()
        && Command::new(&py)
            .args(["-c", "import jax, numpy"])
            .status()
            .is_ok_and(|s| s.success());
    if !has_jax {
        eprintln!("skipping: no python with jax at {}", py.display());
        return;
    }
    let plugin = match pjrt_plugin() {
        Some(p) => p,
        None => {
            eprintln!("skipping: no CPU PJRT plugin found");
            return;
        }
    };
    let dir =
        std::env::temp_dir().join(format!("hlobridge-compile-options-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let d = dir.to_str().unwrap();
    let o = Command::new(&py)
        .args(["-c", PY_GEN, d, plugin.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    for (out, extra) in [("default", None), ("ynn", Some(JAXLIB_YNN))] {
        let mut args = vec!["run".to_string(), format!("{d}/m.mlir")];
        for i in 0..3 {
            args.push("-i".into());
            args.push(format!("{i}={d}/in{i}.npy"));
        }
        args.push("--out".into());
        args.push(format!("{d}/{out}"));
        if let Some(x) = extra {
            args.push("--xla-option".into());
            args.push(x.into());
        }
        let o = Command::new(env!("CARGO_BIN_EXE_hlobridge"))
            .args(&args)
            .env("HLOBRIDGE_HOST_GEMM", "off")
            .env("HLOBRIDGE_REDUCE_STAGES", "0")
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    let o = Command::new(&py).args(["-c", PY_CMP, d]).output().unwrap();
    let (out, err) = (
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr),
    );
    eprintln!("{out}");
    assert!(o.status.success(), "{out}\n{err}");
    let _ = std::fs::remove_dir_all(dir);
}

/// The plugin `hlobridge run` finds (the venv's xla-cpu-pjrt wheel).
fn pjrt_plugin() -> Option<PathBuf> {
    let site = manifest().join("../../.venv/lib");
    for e in std::fs::read_dir(site).ok()?.flatten() {
        let p = e
            .path()
            .join("site-packages/xla_plugins/xla_cpu_pjrt/xla_cpu_pjrt.so");
        if p.exists() {
            return Some(p);
        }
    }
    None
}
