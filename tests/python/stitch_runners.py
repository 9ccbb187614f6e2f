"""Building stitch plans on disk and running them: the fused program
(``hlobridge stitch PLAN --run``) and the segment-by-segment reference
(``hlobridge run`` per segment, every handoff through host memory as
``.npy``). Split from ``stitch_plans.py``, which holds the live modules and
the plan list."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import zlib
from dataclasses import dataclass
from pathlib import Path

from stitch_plans import (
    CORPUS,
    FIXTURES,
    HERE,
    WORKERS,
    In,
    PlanSpec,
    _main_param_types,
    sharded_names,
)

# -------------------------------------------------- plans on disk, inputs --

_ELEM_DTYPES = {
    "f16": "float16", "f32": "float32", "f64": "float64", "bf16": "bfloat16",
    "i1": "bool", "i8": "int8", "i16": "int16", "i32": "int32", "i64": "int64",
    "ui8": "uint8", "ui16": "uint16", "ui32": "uint32", "ui64": "uint64",
    "complex<f32>": "complex64", "complex<f64>": "complex128",
}


def parse_type(t: str) -> tuple[tuple[int, ...], str]:
    """``tensor<4x32xbf16>`` -> ((4, 32), 'bf16')."""
    m = re.fullmatch(r"tensor<(.*)>", t.strip())
    assert m, t
    parts = m.group(1)
    dims = []
    while True:
        d = re.match(r"(\d+)x", parts)
        if not d:
            break
        dims.append(int(d.group(1)))
        parts = parts[d.end():]
    return tuple(dims), parts


def np_dtype(elem: str):
    import ml_dtypes
    import numpy as np

    name = _ELEM_DTYPES[elem]
    return np.dtype(getattr(ml_dtypes, name)) if name == "bfloat16" else np.dtype(name)


def load_npy(path: Path, type_str: str | None = None):
    """Load an .npy; raw-bit types (bf16 '<V2') get their real dtype from ``type_str``."""
    import numpy as np

    a = np.load(path)
    if a.dtype.kind == "V":
        assert type_str, f"{path}: raw {a.dtype} needs a type"
        a = a.view(np_dtype(parse_type(type_str)[1]))
    return a


def draw(rng, type_str: str, gen: tuple):
    import numpy as np

    shape, elem = parse_type(type_str)
    dt = np_dtype(elem)
    kind = gen[0] if gen else None
    if elem == "i1":
        return rng.random(shape) < 0.5
    if dt.kind in "iu":
        lo, hi = gen[1:] if kind == "int" else ((0, 16) if dt.kind == "u" else (-8, 8))
        if kind is None and elem == "ui32":
            lo, hi = 0, 2 ** 32
        return rng.integers(lo, hi, size=shape, dtype=np.int64 if hi < 2 ** 63 else np.uint64).astype(dt)
    if kind == "uniform":
        x = rng.uniform(gen[1], gen[2], size=shape)
    else:
        x = rng.standard_normal(size=shape) * (gen[1] if kind == "normal" else 1.0)
    return np.asarray(x).astype(dt)


@dataclass
class BuiltSeg:
    name: str
    module: Path
    inputs: list
    outputs: list
    casts: tuple
    producer: str
    write_producer: bool
    param_types: list
    sharded_fn: str | None   # live name when its reference runs in jax


@dataclass
class Built:
    spec: PlanSpec
    plan_path: Path
    inputs: list             # In, auto inputs included
    segments: list           # BuiltSeg, plan order
    handle_types: dict       # handle -> MLIR type (where known before running)


def resolve_module(ref: str, live_dir: Path, live: dict) -> tuple[Path, str | None]:
    kind, _, what = ref.partition(":")
    if kind == "live":
        return live_dir / live[what]["file"], what
    if kind == "corpus":
        return CORPUS / what, None
    if kind == "fixture":
        return FIXTURES / what, None
    raise ValueError(ref)


def _toml_str(s) -> str:
    return json.dumps(str(s))  # a JSON string is a valid TOML basic string


def build(spec: PlanSpec, live_dir: Path, live: dict, out_dir: Path) -> Built:
    """Resolve modules and bindings, add automatic inputs, write ``plan.toml``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    inputs = list(spec.inputs)
    known = {i.name for i in inputs}
    segs = []
    for s in spec.segments:
        path, live_name = resolve_module(s.module, live_dir, live)
        ptypes = _main_param_types(path.read_text())
        if isinstance(s.inputs, dict):
            names = live[live_name]["args"]
            unknown = set(s.inputs) - set(names)
            assert not unknown, f"{spec.name}/{s.name}: no parameters {unknown} in {names}"
            handles = []
            for arg, t in zip(names, ptypes):
                h = s.inputs.get(arg)
                if h is None:
                    # Unbound live parameters (torch parameters, scalar
                    # constants of lazy traces) become program inputs.
                    h = f"{s.name}.{arg.split(':')[-1]}"
                    if h not in known:
                        inputs.append(In(h, t))
                        known.add(h)
                handles.append(h)
        else:
            handles = list(s.inputs)
        assert len(handles) == len(ptypes), f"{spec.name}/{s.name}: {len(handles)} inputs for {len(ptypes)} params"
        segs.append(BuiltSeg(s.name, path, handles, list(s.outputs), tuple(s.casts), s.producer, s.write_producer,
                             ptypes, live_name if live_name in sharded_names() else None))
    lines = [f"# {spec.name}: {spec.covers}"]
    for i in inputs:
        lines += ["[[input]]", f"name = {_toml_str(i.name)}", f"type = {_toml_str(i.type)}"]
        if i.donate:
            lines.append("donate = true")
    for s in segs:
        lines += ["[[segment]]", f"name = {_toml_str(s.name)}", f"module = {_toml_str(s.module)}",
                  f"inputs = [{', '.join(map(_toml_str, s.inputs))}]",
                  f"outputs = [{', '.join(map(_toml_str, s.outputs))}]"]
        if s.write_producer:
            lines.append(f"producer = {_toml_str(s.producer)}")
        if s.casts:
            lines.append(f"casts = [{', '.join(map(_toml_str, s.casts))}]")
    for o in spec.outputs:
        lines += ["[[output]]", f"handle = {_toml_str(o)}"]
    plan_path = out_dir / "plan.toml"
    plan_path.write_text("\n".join(lines) + "\n")
    return Built(spec, plan_path, inputs, segs, {i.name: i.type for i in inputs})


def write_inputs(built: Built, seed: int, out_dir: Path) -> dict:
    """Fresh random program inputs; returns handle -> .npy path."""
    import numpy as np

    rng = np.random.default_rng(seed)
    out_dir.mkdir(parents=True, exist_ok=True)
    files = {}
    for k, i in enumerate(built.inputs):
        p = out_dir / f"in{k}.npy"
        np.save(p, draw(rng, i.type, i.gen))
        files[i.name] = p
    return files


# --------------------------------------------------------------- runners --


def _run(cmd, env=None, timeout=300) -> str:
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    if r.returncode != 0:
        raise RuntimeError(f"command failed ({r.returncode}): {' '.join(map(str, cmd))}\n"
                           f"stdout: {r.stdout[-3000:]}\nstderr: {r.stderr[-6000:]}")
    return r.stdout


def _receipt_outputs(receipt: dict) -> list:
    outs = []
    for o in receipt["outputs"]:
        assert o["shards"] == 1 and len(o["files"]) == 1, f"output {o['index']} came back per device: {o}"
        outs.append(load_npy(Path(o["files"][0]), o["type"]))
    return outs


def _input_flag(built: Built, k: int) -> str:
    name = built.inputs[k].name
    # Plain names bind by name (the fused @main's parameters carry the plan's
    # input names); others by index.
    return name if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) else str(k)


def run_fused(binary: list, built: Built, files: dict, out_dir: Path, inline: bool) -> tuple[dict, list, str]:
    """``hlobridge stitch PLAN --run``: returns (receipt, outputs, fused text)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    fused = out_dir / "fused.mlir"
    cmd = binary + ["stitch", str(built.plan_path), "-o", str(fused), "--run", "--json",
                    "--out", str(out_dir / "out"), "--devices", str(built.spec.devices)]
    if not inline:
        cmd.append("--no-inline")
    for k, i in enumerate(built.inputs):
        cmd += ["-i", f"{_input_flag(built, k)}={files[i.name]}"]
    receipt = json.loads(_run(cmd))
    return receipt, _receipt_outputs(receipt), fused.read_text()


def topo(built: Built) -> list:
    have = {i.name for i in built.inputs}
    order, rest = [], list(built.segments)
    while rest:
        ready = [s for s in rest if all(h in have for h in s.inputs)]
        assert ready, f"{built.spec.name}: no segment is ready among {[s.name for s in rest]}"
        s = ready[0]
        order.append(s)
        rest.remove(s)
        have |= {h for h in s.outputs if h != "_"}
    return order


def run_reference(binary: list, built: Built, files: dict, out_dir: Path) -> tuple[dict, dict]:
    """Each segment on its own, handoffs through .npy files on the host.
    Returns (handle -> array, handle -> MLIR type)."""
    import numpy as np

    files = dict(files)
    types = dict(built.handle_types)
    for s in topo(built):
        d = out_dir / s.name
        d.mkdir(parents=True, exist_ok=True)
        args = []
        for k, (h, want) in enumerate(zip(s.inputs, s.param_types)):
            p = files[h]
            if types[h] != want:
                # A 'casts' seam: the fused program converts with
                # stablehlo.convert; here the host converts (numpy / ml_dtypes
                # round to nearest even, as XLA does).
                assert h in s.casts, f"{s.name}: {h} is {types[h]} but the parameter is {want}"
                a = load_npy(p, types[h]).astype(np_dtype(parse_type(want)[1]))
                p = d / f"cast{k}.npy"
                np.save(p, a)
            args.append(p)
        if s.sharded_fn:
            env = dict(os.environ)
            env.update(WORKERS["jax"])
            env["PYTHONWARNINGS"] = "ignore"
            _run([sys.executable, str(HERE), "--sharded-ref", s.sharded_fn, "--module", str(s.module),
                  "--out", str(d / "out")] + [str(a) for a in args], env=env)
            outs = []
            for k in range(len(s.outputs)):
                a = np.load(d / "out" / f"{k}.npy")
                outs.append((d / "out" / f"{k}.npy", type_of(a)))
        else:
            cmd = binary + ["run", str(s.module), "--json", "--out", str(d / "out")]
            for k, a in enumerate(args):
                cmd += ["-i", f"{k}={a}"]
            receipt = json.loads(_run(cmd))
            assert len(receipt["outputs"]) == len(s.outputs), (s.name, receipt["outputs"])
            outs = [(Path(o["files"][0]), o["type"]) for o in receipt["outputs"]]
        for h, (p, t) in zip(s.outputs, outs):
            if h != "_":
                files[h] = p
                types[h] = t
    return {h: load_npy(files[h], types[h]) for h in built.spec.outputs}, types


def type_of(a) -> str:
    rev = {v: k for k, v in _ELEM_DTYPES.items()}
    name = "bfloat16" if a.dtype.name == "bfloat16" else a.dtype.name
    return "tensor<" + "".join(f"{d}x" for d in a.shape) + rev[name] + ">"


def test_seed(base: int, plan: str) -> int:
    return zlib.crc32(f"{base}:{plan}".encode())
