"""PNG plots of the e2e results (matplotlib, Agg backend, small files)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib
import matplotlib.ticker
import numpy as np

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

DPI = 80


def _err(stats: list[dict[str, float]]) -> list[list[float]]:
    return [[s["median_us"] - s["p10_us"] for s in stats], [s["p90_us"] - s["median_us"] for s in stats]]


def _save(fig: Any, out: Path) -> Path:
    fig.tight_layout()
    fig.savefig(out, dpi=DPI)
    plt.close(fig)
    return out


def step_plot(step: dict[str, Any], out: Path) -> Path:
    sizes = list(step)
    variants = list(next(iter(step.values()))["variants"])
    fig, ax = plt.subplots(figsize=(8, 4))
    width = 0.8 / len(variants)
    for i, v in enumerate(variants):
        st = [step[s]["variants"].get(v) for s in sizes]
        xs = [j + i * width for j, s in enumerate(st) if s]
        st = [s for s in st if s]
        ax.bar(xs, [s["median_us"] for s in st], width, yerr=_err(st), label=v, capsize=2)
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(sizes))])
    ax.set_xticklabels([f"{s}\n{step[s]['shape']}" for s in sizes])
    ax.set_yscale("log")
    ax.set_ylabel("µs per step (median, p10-p90)")
    ax.set_title("Hybrid training step (torch + JAX act/loss + JAX SGD)")
    ax.legend(fontsize=7)
    return _save(fig, out)


def dispatch_plot(disp: dict[str, Any], out: Path) -> Path:
    names = list(disp)
    st = [disp[n] for n in names]
    fig, ax = plt.subplots(figsize=(6, 3))
    ax.barh(names, [s["median_us"] for s in st], xerr=_err(st), capsize=2)
    ax.set_xscale("log")
    ax.set_xlabel("µs per call (median, p10-p90)")
    ax.set_title("Dispatch of a tiny program (x*2+1, 8 floats)")
    return _save(fig, out)


def parse_plot(rows: list[dict[str, Any]], out: Path) -> Path:
    fig, ax = plt.subplots(figsize=(6, 3))
    labels = [f"{r['file']}\n{r['mb']:.1f} MB" for r in rows]
    xs = range(len(rows))
    ax.bar([x - 0.2 for x in xs], [r["ours_mb_s"] for r in rows], 0.4, label="hlobridge parse+print")
    ax.bar([x + 0.2 for x in xs], [r["mlir_mb_s"] for r in rows], 0.4, label="MLIR (jaxlib) parse+print")
    ax.set_xticks(list(xs))
    ax.set_xticklabels(labels, fontsize=7)
    ax.set_ylabel("MB/s (median)")
    ax.set_title("Parse + print throughput")
    ax.legend(fontsize=7)
    return _save(fig, out)


def ragged_plot(rows: list[dict[str, Any]], out: Path) -> Path:
    fig, ax = plt.subplots(figsize=(6, 3))
    xs = range(len(rows))
    for off, key in ((-0.2, "ragged"), (0.2, "padded")):
        st = [r[key] for r in rows]
        ax.bar([x + off for x in xs], [s["median_us"] / 1e3 for s in st], 0.4, label=key,
               yerr=[[e / 1e3 for e in side] for side in _err(st)], capsize=2)
    ax.set_xticks(list(xs))
    ax.set_xticklabels([f"{r['seqs']} seqs\n{r['tokens']} q tokens" for r in rows], fontsize=7)
    ax.set_yscale("log")
    ax.set_ylabel("ms per batch (median, p10-p90)")
    ax.set_title("Ragged paged attention vs padded (CPU reference)")
    ax.legend(fontsize=7)
    return _save(fig, out)


def stitch_plot(rows: list[dict[str, Any]], cache: dict[str, Any] | None, out: Path) -> Path:
    fig, axes = plt.subplots(1, 2 if cache else 1, figsize=(8 if cache else 4, 3), squeeze=False)
    ax = axes[0][0]
    ax.plot([r["mb_in"] for r in rows], [r["mb_s"] for r in rows], "o-")
    ax.set_xscale("log")
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_xlabel("segment text in (MB)")
    ax.set_ylabel("MB/s (median)")
    ax.set_title("Stitch (parse + splice + print)")
    if cache:
        ax = axes[0][1]
        sizes = cache.get("sizes", [cache])
        labels = [z["module"].split("_train")[0].replace("transformer", "T") for z in sizes]
        x = np.arange(len(sizes))
        bars = [("hlobridge cold", "cold_s"), ("hlobridge warm", "warm_s"),
                ("jaxlib cold", "jaxlib_cold_s"), ("jaxlib warm", "jaxlib_warm_s")]
        bars = [(n, k) for n, k in bars if all(k in z for z in sizes)]
        w = 0.8 / len(bars)
        for i, (name, key) in enumerate(bars):
            ax.bar(x + i * w, [z[key] for z in sizes], w, label=name)
        ax.set_xticks(x + w * (len(bars) - 1) / 2, labels)
        ax.set_yscale("log")
        ax.set_ylabel("seconds (median)")
        ax.set_title(f"Compile cache ({cache['mode']})")
        top = max(z[k] for z in sizes for _, k in bars)
        ax.set_ylim(top=top * 12)  # room for the legend above the bars
        ax.legend(fontsize=6, ncol=2, loc="upper left")
    return _save(fig, out)


def zoo_plot(rows: list[dict[str, Any]], out: Path, note: str = "") -> Path:
    """Model zoo: hlobridge / eager and inductor / eager per model, one
    panel per path, models on a shared axis (log scale, 1 = eager; bars:
    median of paired rounds, whiskers p10-p90; rows that failed are absent)."""
    rows = [r for r in rows if "error" not in r]
    paths = list(dict.fromkeys(r["path"] for r in rows)) or ["infer"]
    models = list(dict.fromkeys(r["model"] for r in rows))
    fig, axes = plt.subplots(1, len(paths), figsize=(2.2 + 2.6 * len(paths), 1.3 + 0.22 * len(models)),
                             squeeze=False, sharey=True)
    ys = np.arange(len(models))
    for ax, path in zip(axes[0], paths):
        by_model = {r["model"]: r for r in rows if r["path"] == path}
        for off, key, label in ((-0.2, "hlobridge/eager", "hlobridge"),
                                (0.2, "inductor/eager", "inductor")):
            rs = [by_model[m]["ratios"].get(key) if m in by_model else None for m in models]
            med = [x["median"] if x else np.nan for x in rs]
            err = [[x["median"] - x["p10"] if x else 0 for x in rs],
                   [x["p90"] - x["median"] if x else 0 for x in rs]]
            ax.barh(ys + off, med, 0.4, xerr=err, label=label, capsize=1.5,
                    error_kw={"lw": 0.6})
        ax.axvline(1.0, color="k", lw=0.8)
        ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.set_xlabel("time / eager (lower is better)", fontsize=7)
        ax.tick_params(labelsize=7)
        ax.set_title({"infer": "torch.compile inference", "step_sgd": "compile_train_step + SGD",
                      "train": "torch.compile training"}.get(path, path), fontsize=8)
    ax0 = axes[0][0]
    ax0.set_yticks(ys)
    ax0.set_yticklabels(models, fontsize=7)
    ax0.set_ylim(len(models) - 0.5, -0.5)
    axes[0][-1].legend(fontsize=6, loc="best")
    if note:
        fig.suptitle(note, fontsize=8, color="tab:red")
    return _save(fig, out)
