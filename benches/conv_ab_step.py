"""hlobridge-only A/B of one real-size model's fwd+bwd training step (cross-entropy,
``loss.backward()``; ``benches/real_size/models.py``): each variant is compiled in this
process with its own HLOBRIDGE_* settings (through its own wrapper code object, so dynamo
keeps one entry per variant; the settings are also set around each of its calls, for those
read at run time), then the variants run interleaved. Prints, per variant, the loss and the
gradients against eager (worst tensors, global relative L2), wall and process CPU time per
step (min / median), and each variant's per-round ratio to the first. Ratios from one
process survive a shared machine better than absolute times.

    PJRT_DEVICE=CPU OMP_WAIT_POLICY=PASSIVE .venv/bin/python benches/conv_ab_step.py \
        mobilenetv3-l "HLOBRIDGE_CONV_DW_WGRAD=elements;HLOBRIDGE_CONV_DW_WGRAD=rows" 9
"""
import os, sys, time, statistics, resource
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "real_size"))
import torch
import torch.nn.functional as F
import hlobridge as hb  # noqa
import models

name = sys.argv[1]
variants = [dict(kv.split("=", 1) for kv in v.split(",") if kv) for v in sys.argv[2].split(";")]
rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 5
spec = models.get(name)
torch.manual_seed(0)
model = spec.build()
x, = spec.inputs()
y = spec.target((x,))

# Distinct code objects per variant (dynamo caches per code object).
srcs = []
for i in range(len(variants)):
    ns = {}
    exec(f"def step_{i}(m, x, y):\n    out = m(x)\n    return F.cross_entropy(out, y)\n",
         {"F": F}, ns)
    srcs.append(ns[f"step_{i}"])

def grads():
    return [p.grad.detach().clone() for p in model.parameters() if p.grad is not None]

def run_eager():
    model.zero_grad(set_to_none=True)
    l = F.cross_entropy(model(x), y)
    l.backward()
    return l.item(), grads()

l0, g0 = run_eager()
fns = []
for i, env in enumerate(variants):
    c = torch.compile(srcs[i], backend="hlobridge", dynamic=False)
    def f(c=c, env=env):
        # The env is set around each call too (some settings are read at run time).
        old = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        try:
            model.zero_grad(set_to_none=True)
            l = c(model, x, y)
            l.backward()
            return l
        finally:
            for k, v in old.items():
                if v is None: os.environ.pop(k, None)
                else: os.environ[k] = v
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        t = time.time(); l = f().item(); print(f"variant {i} {env}: compiled in {time.time()-t:.1f}s, loss {l:.6f} (eager {l0:.6f})", flush=True)
        g = grads()
        names = [n for n, p in model.named_parameters() if p.grad is not None]
        errs = sorted((((a - b).abs().max() / b.abs().max().clamp_min(1e-30)).item(), n, b.abs().max().item(), a.abs().max().item()) for a, b, n in zip(g, g0, names))
        print(f"  worst grads (rel err to eager max, name, eager max, hb max): {errs[-3:]}", flush=True)
        tot = (sum(((a - b) ** 2).sum() for a, b in zip(g, g0)) / sum((b ** 2).sum() for b in g0)).sqrt().item()
        print(f"  global grad rel L2 err: {tot:.2e}", flush=True)
    finally:
        for k, v in old.items():
            if v is None: os.environ.pop(k, None)
            else: os.environ[k] = v
    f()
    fns.append(f)

def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime

wall = [[] for _ in fns]; cput = [[] for _ in fns]
print("load:", open("/proc/loadavg").read().strip(), flush=True)
for r in range(rounds):
    for i, f in enumerate(fns):
        c0, t0 = cpu(), time.perf_counter()
        f()
        wall[i].append(time.perf_counter() - t0); cput[i].append(cpu() - c0)
print("load:", open("/proc/loadavg").read().strip())
for i, env in enumerate(variants):
    print(f"variant {i} {env}: wall min {min(wall[i])*1e3:.0f} med {statistics.median(wall[i])*1e3:.0f} ms; "
          f"cpu min {min(cput[i])*1e3:.0f} med {statistics.median(cput[i])*1e3:.0f} ms")
for i in range(1, len(fns)):
    rw = [a / b for a, b in zip(wall[i], wall[0])]; rc = [a / b for a, b in zip(cput[i], cput[0])]
    print(f"variant {i}/variant 0: wall per-round ratios median {statistics.median(rw):.3f} "
          f"(min-ratio {min(wall[i])/min(wall[0]):.3f}); cpu median {statistics.median(rc):.3f}")
