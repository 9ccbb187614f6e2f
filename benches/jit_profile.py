"""Where a real-size model's hlobridge call spends its time, by kernel name:
XLA:CPU's JIT-compiled fusions included, which `perf` alone shows only as
anonymous addresses (the plugin registers no perf map or jitdump for them).

How: the model's hlobridge call, built as ``make bench-real`` builds it
(``benches/real_size/worker.py``; ``--path infer`` or ``train``, the whole
``hb.compile_train_step`` with AdamW), runs in a child process with ``--xla_dump_to`` (so every kernel's object file is on disk)
and ``ONEDNN_JIT_PROFILE=2`` (oneDNN's JIT kernels named in
``/tmp/perf-PID.map``). After the warm-up, ``perf record -p`` samples the
timed calls; the child then waits while its executable anonymous memory is
read (``/proc/PID/mem``). Each dumped object's text section is found in
that memory by a run of bytes no relocation touches, which gives every
fusion's address range; the samples are then counted per fusion kind
(``multiply_add_fusion.12`` → ``multiply_add_fusion``), per oneDNN kernel,
and per library. Identical fusions compile to identical code and are
counted under the first one's name.

With oneDNN's library loaded as well (the host convolution kernel's,
``HLOBRIDGE_ONEDNN_LIBRARY``), its copy and the plugin's both write
``/tmp/perf-PID.map`` and overwrite each other's lines: most oneDNN kernels
then count as ``onednn:[unknown]`` (XLA's fusions are unaffected). Run with
``HLOBRIDGE_ONEDNN_LIBRARY=0`` for the plugin's kernel names (that also
moves the convolutions the library ran, so compare shares with care).

Needs ``perf``, ``readelf`` and ``nm``, and the right to read the child's
memory (same user). Timings under ``perf`` are a little slower; use the
shares, not the times.

    .venv/bin/python benches/jit_profile.py resnet50 --path train --steps 5
"""

from __future__ import annotations

import argparse
import bisect
import collections
import glob
import json
import os
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))

CHILD = r"""
import os, sys, time
sys.path.insert(0, {real!r})
import worker
call = worker._build(dict(model={model!r}, variant="hlobridge", path={path!r},
                          threads={threads}, optimizer="adamw", lr=1e-4))
for _ in range(3): worker._sync(call())
open({hold!r} + ".pid", "w").write(str(os.getpid()))
time.sleep(0.5)
ts = []
for _ in range({steps}):
    t = time.perf_counter(); worker._sync(call()); ts.append(time.perf_counter() - t)
print("ms per call:", [round(x * 1e3, 1) for x in ts], flush=True)
open({hold!r}, "w").write("done")
while not os.path.exists({hold!r} + ".release"): time.sleep(0.2)
"""


def _wait(path: str, proc: subprocess.Popen) -> None:
    while not os.path.exists(path):
        if proc.poll() is not None:
            sys.exit(f"jit_profile: the model process exited ({proc.returncode})")
        time.sleep(0.2)


def _dump_memory(pid: int) -> list[tuple[int, bytes]]:
    """Executable anonymous mappings of ``pid`` (where JIT code lives)."""
    out = []
    with open(f"/proc/{pid}/mem", "rb") as mem, open(f"/proc/{pid}/maps") as maps:
        for line in maps:
            f = line.split()
            if "x" not in f[1] or len(f) >= 6:
                continue
            lo, hi = (int(x, 16) for x in f[0].split("-"))
            if hi - lo > 512 << 20:
                continue
            try:
                mem.seek(lo)
                out.append((lo, mem.read(hi - lo)))
            except OSError:
                continue
    return out


def _run(*cmd: str) -> str:
    return subprocess.run(cmd, capture_output=True, text=True, check=False).stdout


def _functions(dump: str, memory: list[tuple[int, bytes]]) -> list[tuple[int, int, str]]:
    """``(start, end, name)`` of every dumped kernel found in ``memory``."""
    funcs = []
    for obj in glob.glob(os.path.join(dump, "*.o")):
        data = open(obj, "rb").read()
        sections = {m.group(2): (int(m.group(3), 16), int(m.group(4), 16))
                    for m in re.finditer(r"\[\s*(\d+)\]\s+(\S+)\s+\S+\s+[0-9a-f]+\s+([0-9a-f]+)"
                                         r"\s+([0-9a-f]+)", _run("readelf", "-SW", obj))}
        relocs = _run("readelf", "-rW", obj)
        for name in (".ltext", ".text"):
            off, size = sections.get(name, (0, 0))
            if size < 48:
                continue
            text = data[off:off + size]
            touched: set[int] = set()
            current = None
            for line in relocs.splitlines():
                m = re.match(r"Relocation section '\.rela(\S+)'", line)
                if m:
                    current = m.group(1)
                    continue
                m = re.match(r"^([0-9a-f]{8,})\s", line)
                if m and current == name:
                    r = int(m.group(1), 16)
                    touched.update(range(r - 4, r + 8))
            start = next((s for s in range(0, size - 40, 8)
                          if not touched.intersection(range(s, s + 40))), None)
            if start is None:
                continue
            base = next((lo + k - start for lo, mem in memory
                         if (k := mem.find(text[start:start + 40])) >= 0), None)
            if base is None:
                continue
            for line in _run("nm", "-S", "--defined-only", obj).splitlines():
                f = line.split()
                if len(f) == 4 and f[2] in "Tt":
                    s0, sz = int(f[0], 16), int(f[1], 16)
                    funcs.append((base + s0, base + s0 + sz, f[3]))
    return sorted(funcs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("--path", choices=("infer", "train"), default="infer")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--json", default="", help="write the per-name sample counts here")
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="jit_profile_")
    hold, dump = os.path.join(work, "hold"), os.path.join(work, "dump")
    code = CHILD.format(real=os.path.join(HERE, "real_size"), model=args.model,
                        path=args.path, steps=args.steps, hold=hold,
                        threads=os.cpu_count() or 1)
    env = dict(os.environ, PJRT_DEVICE="CPU", ONEDNN_JIT_PROFILE="2",
               XLA_FLAGS=(os.environ.get("XLA_FLAGS", "") + f" --xla_dump_to={dump}").strip())
    env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    child = subprocess.Popen([sys.executable, "-c", code], env=env)
    _wait(hold + ".pid", child)
    pid = int(open(hold + ".pid").read())
    data = os.path.join(work, "perf.data")
    perf = subprocess.Popen(["perf", "record", "-q", "-F", "999", "-p", str(pid), "-o", data],
                            stderr=subprocess.DEVNULL)
    _wait(hold, child)
    perf.send_signal(2)
    perf.wait()
    memory = _dump_memory(pid)
    open(hold + ".release", "w").close()
    child.wait()
    funcs = _functions(dump, memory)
    starts = [f[0] for f in funcs]
    counts: collections.Counter[str] = collections.Counter()
    for line in _run("perf", "script", "-i", data, "-F", "ip,sym,dso").splitlines():
        f = line.split()
        try:
            ip = int(f[0], 16)
        except (ValueError, IndexError):
            continue
        i = bisect.bisect_right(starts, ip) - 1
        if i >= 0 and funcs[i][0] <= ip < funcs[i][1]:
            counts[funcs[i][2]] += 1
        elif len(f) > 2 and (f[1].startswith("jit_") or f[1] == "[unknown]"):
            counts["onednn:" + re.sub(r"\.\d+$", "", f[1])] += 1
        else:
            counts["<" + f[-1].strip("()").rsplit("/", 1)[-1] + ">"] += 1
    total = sum(counts.values()) or 1
    kinds: collections.Counter[str] = collections.Counter()
    for k, v in counts.items():
        kinds[re.sub(r"\.\d+$", "", k)] += v
    xla = sum(v for k, v in counts.items() if not k.startswith(("<", "onednn:")))
    print(f"{total} samples; {len(funcs)} XLA kernels located; XLA fusions {100 * xla / total:.1f}%")
    print("(onednn:[unknown] is anonymous code that is neither a located XLA kernel nor in "
          "oneDNN's perf map)")
    for k, v in kinds.most_common(args.top):
        print(f"{100 * v / total:6.2f}%  {k}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(counts), f, indent=1)


if __name__ == "__main__":
    main()
