"""Draws bench/results.png from the JSON files of one `bench/run`: one panel
per comparison, medians as bars, p10-p90 as error bars."""

import os
import sys

import matplotlib
import matplotlib.ticker

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

import provenance  # noqa: E402
from report import HERE, figures, load, meta  # noqa: E402

RADIX, PEER, FLOOR = "#c0392b", "#7f8c8d", "#2c3e50"


def label(y):
    return f"{y:,.0f}" if y >= 100 else f"{y:.3g}"


def bars(ax, items, title, unit, log=False, target=None):
    items = [(label, fig, color) for label, fig, color in items if fig is not None]
    if not items:
        ax.set_visible(False)
        return
    ys = [fig.median for _, fig, _ in items]
    err = [[fig.median - fig.p10 for _, fig, _ in items], [fig.p90 - fig.median for _, fig, _ in items]]
    pos = range(len(items))
    ax.bar(pos, ys, yerr=err, color=[c for _, _, c in items], capsize=3)
    ax.set_xticks(list(pos), [label for label, _, _ in items], rotation=20, ha="right", fontsize=8)
    ax.set_title(title, fontsize=10)
    ax.set_ylabel(unit, fontsize=8)
    if log:
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda y, _: label(y)))
        ax.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    for p, y in zip(pos, ys):
        ax.annotate(label(y), (p, y), ha="center", va="bottom", fontsize=7,
                    xytext=(0, 2), textcoords="offset points")
    if target:
        value, text = target
        ax.axhline(value, color="#27ae60", linestyle=":", linewidth=1.2)
        ax.text(0.98, value, text, transform=ax.get_yaxis_transform(), ha="right", va="bottom",
                fontsize=7, color="#27ae60")
        lo, hi = ax.get_ylim()
        ax.set_ylim(min(lo, value / 1.5) if log else lo, max(hi, value * 1.15))


def main(results):
    runs = load(results)
    f = figures(runs)
    g = f.get
    fig, axes = plt.subplots(2, 4, figsize=(16, 8))
    a = axes.flat
    bars(next(a), [("radix call", g("radix Executable::call + wait"), RADIX),
                   ("PJRT floor", g("PJRT execute + wait (floor)"), FLOOR),
                   ("jax.jit", g("jax.jit call + block_until_ready"), PEER)],
         "1. Dispatch, tiny add (lower is better)", "µs")
    bars(next(a), [("radix", g("radix trace + print"), RADIX),
                   ("JAX", g("jax.jit(f).lower(...).as_text()"), PEER)],
         "2. Trace 30-layer SmolLM2 to StableHLO", "ms (log)", log=True, target=(45, "target 45 ms"))
    bars(next(a), [("radix compile", g("radix first compile (trace + compile)"), RADIX),
                   ("radix cached", g("radix cached start (trace + load)"), RADIX),
                   ("JAX compile", g("jax first compile (lower + compile)"), PEER),
                   ("JAX cached", g("jax persistent cache (lower + load)"), PEER)],
         "3. Warm start: code to executable", "ms (log)", log=True)
    for shape in ("1x16", "32x128"):
        bars(next(a), [("radix", g(f"radix {shape}"), RADIX),
                       ("onnxruntime", g(f"onnxruntime {shape}"), PEER),
                       ("sentence-transformers", g(f"sentence-transformers {shape}"), PEER)],
             f"4. MiniLM {shape.replace('x', ' × ')} (higher is better)", "sentences/s")
    bars(next(a), [("radix", g("radix prefill"), RADIX), ("transformers", g("transformers prefill"), PEER),
                   ("llama.cpp Q4_1", g("llama.cpp Q4_1 prefill"), PEER),
                   ("llama.cpp F32", g("llama.cpp F32 prefill"), PEER)],
         "5. SmolLM2 prefill, 128 tokens", "tokens/s", target=(600, "target 600"))
    ax = next(a)
    bars(ax, [("radix", g("radix decode"), RADIX), ("transformers", g("transformers decode"), PEER),
              ("llama.cpp Q4_1", g("llama.cpp Q4_1 decode"), PEER),
              ("llama.cpp F32", g("llama.cpp F32 decode"), PEER)],
         "5. SmolLM2 decode, fp32", "tokens/s", target=(40, "target 40"))
    wbytes = meta(runs, "smollm2-radix").get("weight_bytes_f32")
    bws = [b.median for b in (g("copy, 1 thread"), g("copy, 2 threads")) if b]
    if wbytes and bws:
        bound = max(bws) * 1e9 / wbytes
        ax.axhline(bound, color=FLOOR, linestyle="--", linewidth=1)
        ax.annotate(f"copy-bandwidth bound {bound:.0f}", (-0.4, bound), fontsize=7, xytext=(0, 3),
                    textcoords="offset points")
        top = bound
        read = g("read (sum), 2 threads")
        if read:
            rb = read.median * 1e9 / wbytes
            ax.axhline(rb, color=FLOOR, linestyle="-.", linewidth=1)
            ax.annotate(f"read-bandwidth bound {rb:.0f}", (-0.4, rb), fontsize=7, xytext=(0, 3),
                        textcoords="offset points")
            top = max(top, rb)
        ax.set_ylim(top=max(ax.get_ylim()[1], top * 1.15))
    ax = next(a)
    rss = [(name, r.get("peak_rss_mb")) for name, r in sorted(runs.items())
           if r.get("bench") in ("minilm", "smollm2") and r.get("peak_rss_mb")]
    ax.barh([n.replace("-", " ") for n, _ in rss], [v for _, v in rss],
            color=[RADIX if "radix" in n else PEER for n, _ in rss])
    ax.set_title("Peak RSS per process (lower is better)", fontsize=10)
    ax.set_xlabel("MiB", fontsize=8)
    ax.tick_params(labelsize=8)
    one = provenance.one_run(runs)
    source = f"one bench/run ({one['run']}, {one['commit']})" if one else "several runs (see BENCHMARKS.md)"
    fig.suptitle(f"radix vs peers, {source}, 2 threads: medians, p10–p90 bars", fontsize=12)
    fig.tight_layout()
    fig.savefig(os.path.join(HERE, "results.png"), dpi=90)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "results"))
