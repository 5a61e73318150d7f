"""The "What limits each figure" section of BENCHMARKS.md.

Every figure in it comes from the results it is written from: each topic opens
with a lead generated here from this run's samples (or says that the run did
not measure it). `bench/analysis.md` holds only the explanations that follow
each lead, marked `<!-- lead: KEY -->`; where an explanation cites a profile
or a dump, it names the date of the run that made it, since a later run may
not repeat it.
"""

import os
import re


def fmt(x):
    """A figure with three significant digits or so, `—` for none."""
    if x is None:
        return "—"
    if abs(x) >= 100:
        return f"{x:,.0f}"
    if abs(x) >= 10:
        return f"{x:.1f}"
    return f"{x:.2f}"


def verdict(ok):
    return "met" if ok else "missed"


def profile_shares(results, name):
    """Per shared object and per radix-quant kernel, the share of samples in
    this run's `profile-NAME.txt` (perf report by dso, then by symbol)."""
    path = os.path.join(results, f"profile-{name}.txt")
    if not os.path.exists(path):
        return None
    dsos, kernels = {}, {}
    with open(path) as fh:
        for line in fh:
            m = re.match(r"\s+([\d.]+)%\s+(\S+)\s*$", line)
            if m:
                dsos[m.group(2)] = float(m.group(1))
                continue
            m = re.match(r"\s+([\d.]+)%\s+\S+\s+\[.\]\s+radix_quant::kernels::\S+::(\w+)\s*$", line)
            if m:
                kernels[m.group(2)] = kernels.get(m.group(2), 0.0) + float(m.group(1))
    return {"dsos": dsos, "kernels": kernels}


def leads(results, g, runs):
    """KEY -> the opening sentence of that topic, from this run's figures."""
    out = {}

    def ratio(a, b):
        return f"{a.median / b.median:.2f}×"

    call, floor, jaxd = g("radix Executable::call + wait"), g("PJRT execute + wait (floor)"), g(
        "jax.jit call + block_until_ready")
    if call and floor and jaxd:
        out["dispatch"] = (
            f"**Dispatch: {verdict(call.median <= 1.5 * floor.median)} against the floor, "
            f"{verdict(jaxd.median >= 2 * call.median)} against JAX.** In these results radix takes "
            f"{fmt(call.median)} µs, the raw PJRT execute {fmt(floor.median)} µs ({ratio(call, floor)}), "
            f"JAX {fmt(jaxd.median)} µs (radix {ratio(jaxd, call)} faster; the goal is 2×).")
    tr, jtr = g("radix trace + print"), g("jax.jit(f).lower(...).as_text()")
    if tr:
        out["tracing"] = (
            f"**Tracing: {verdict(tr.median <= 45)} ({fmt(tr.median)} ms against ≤ 45 ms"
            + (f"; JAX takes {fmt(jtr.median)} ms, so radix is {ratio(jtr, tr)} faster" if jtr else "")
            + ").**")
    comp, cached = g("radix first compile (trace + compile)"), g("radix cached start (trace + load)")
    jcached = g("jax persistent cache (lower + load)")
    if comp and cached:
        out["warm-start"] = (
            f"**Warm start: {verdict(comp.median >= 10 * cached.median)} (cached start "
            f"{fmt(cached.median)} ms against a first compile of {fmt(comp.median)} ms, "
            f"{comp.median / cached.median:.1f}×; the goal is 10×"
            + (f"; JAX's cached start takes {fmt(jcached.median)} ms" if jcached else "") + ").**")
    parts = []
    for shape in ("1x16", "32x128"):
        r, x, o, s = (g(f"{n} {shape}") for n in ("radix", "radix xla", "onnxruntime",
                                                   "sentence-transformers"))
        if r and o:
            parts.append(
                f"{shape}: radix {fmt(r.median)} sentences/s through its own kernels (the default)"
                + (f", {fmt(x.median)} with XLA's dots" if x else "")
                + f", onnxruntime {fmt(o.median)} ({verdict(r.median > o.median)})"
                + (f", sentence-transformers {fmt(s.median)}" if s else ""))
    if parts:
        out["minilm"] = "**MiniLM in these results:** " + "; ".join(parts) + "."
    pre, dec = g("radix prefill"), g("radix decode")
    f32pre, f32dec = g("radix f32 prefill"), g("radix f32 decode")
    one = g("radix one-program decode")
    lq_dec, lq_pre, lf_pre = g("llama.cpp Q4_1 decode"), g("llama.cpp Q4_1 prefill"), g("llama.cpp F32 prefill")
    if dec and lq_dec:
        text = (f"**Quantized SmolLM2 (issue 13), in these results:** decode reads Q4_1 blocks at {fmt(dec.median)} "
                f"tokens/s against llama.cpp's {fmt(lq_dec.median)} on the same file ({ratio(dec, lq_dec)}, "
                f"goal ≥ 1×: {verdict(dec.median >= lq_dec.median)})")
        if f32dec:
            text += f"; radix's own fp32 path decodes at {fmt(f32dec.median)} (blocks: {ratio(dec, f32dec)} faster)"
        if one:
            text += f"; one program per step (no per-layer dispatch) at {fmt(one.median)}"
        text += "."
        if pre and lq_pre and lf_pre:
            text += (f" Prefill: {fmt(pre.median)} tokens/s against llama.cpp's Q4_1 {fmt(lq_pre.median)} "
                     f"({verdict(pre.median >= lq_pre.median)}) and F32 {fmt(lf_pre.median)} "
                     f"({verdict(pre.median >= lf_pre.median)}).")
        rss, peer_rss = g("per-block warm peak RSS"), g("llama.cpp completion warm peak RSS")
        wall, peer_wall = g("per-block warm wall"), g("llama.cpp completion warm wall")
        if rss and peer_rss and wall and peer_wall:
            text += (f" A whole warm `radix generate`: peak RSS {fmt(rss.median)} MiB against "
                     f"llama-completion's {fmt(peer_rss.median)} ({verdict(rss.median <= peer_rss.median + 100)}), "
                     f"wall {fmt(wall.median)} s against {fmt(peer_wall.median)} s ({ratio(wall, peer_wall)}, "
                     f"goal ≤ 1.5×: {verdict(wall.median <= 1.5 * peer_wall.median)}).")
        shares = profile_shares(results, "decode")
        if shares:
            ks = sorted(shares["kernels"].items(), key=lambda kv: -kv[1])
            plugin = shares["dsos"].get("pjrt_c_api_cpu_plugin.so")
            text += (" The profile of a SmolLM2 load, prefill and decode in these results (`profile-decode.txt` below): "
                     + f"{sum(v for _, v in ks):.0f} % of the samples in radix-quant's kernels ("
                     + ", ".join(f"`{k}` {v:.1f} %" for k, v in ks[:4]) + ")"
                     + (f", {plugin:.0f} % in the plugin" if plugin is not None else "") + ".")
        out["quantized"] = text
    if pre:
        out["prefill"] = (f"**SmolLM2 prefill (the fp32-era goal of ≥ 600 tokens/s): {verdict(pre.median >= 600)} "
                          f"({fmt(pre.median)} tokens/s with Q4_1 blocks"
                          + (f", {fmt(f32pre.median)} with `--dtype f32`" if f32pre else "") + ").**")
    if dec:
        out["decode"] = (f"**SmolLM2 decode (goal ≥ 40 tokens/s): {verdict(dec.median >= 40)} "
                         f"({fmt(dec.median)} tokens/s with Q4_1 blocks"
                         + (f", {fmt(f32dec.median)} with `--dtype f32`" if f32dec else "") + ").**")
    steps = [(name, g(f"radix train {m}"), g(f"jax train {m}"), g(f"torch train {m}"))
             for m, name in (("mnist", "MNIST MLP"), ("lm", "small llama"))]
    steps = [s for s in steps if s[1] and s[2]]
    if steps:
        out["train"] = ("**One training step (issue 17) in these results: "
                        + verdict(all(r.median <= j.median for _, r, j, _ in steps)) + ".** "
                        + "; ".join(f"{name}: radix {fmt(r.median)} ms, JAX {fmt(j.median)} ms "
                                    f"({ratio(r, j)} of JAX's time)"
                                    + (f", PyTorch {fmt(t.median)} ms" if t else "")
                                    for name, r, j, t in steps) + ".")
    r = (runs.get("serve-radix") or {}).get("meta")
    if r:
        peer = (runs.get("serve-llama-server") or {}).get("meta") or {}
        ok = r.get("failed") == 0 and (r.get("speedup_over_single") or 0) >= 3 \
            and abs(r.get("rss_growth_mib") or 1e9) <= 50
        text = (f"**Serving under load (issue 16) in these results: {verdict(ok)}.** `radix serve` failed "
                f"{r.get('failed')} requests, decoded {fmt(r.get('aggregate_decode_tokens_per_s'))} tokens/s "
                f"in aggregate against {fmt(r.get('single_decode_tokens_per_s'))} for one stream alone "
                f"({fmt(r.get('speedup_over_single'))}×, goal ≥ 3×), first tokens at p50 "
                f"{fmt(r.get('ttft_p50_s'))} s and p99 {fmt(r.get('ttft_p99_s'))} s, and its RSS went from "
                f"{fmt(r.get('rss_after_100_mib'))} MiB after 100 requests to {fmt(r.get('rss_after_1000_mib'))} "
                f"after 1,000 (goal: within 50 MiB).")
        if peer:
            text += (f" llama-server under the same script: {peer.get('failed')} failed, "
                     f"{fmt(peer.get('aggregate_decode_tokens_per_s'))} tokens/s in aggregate, "
                     f"{fmt(peer.get('single_decode_tokens_per_s'))} for one stream, RSS "
                     f"{fmt(peer.get('rss_after_100_mib'))} → {fmt(peer.get('rss_after_1000_mib'))} MiB.")
        out["serve"] = text
    return out


def write(w, results, g, analysis_path, runs):
    """Appends the section: each `<!-- lead: KEY -->` of `analysis_path`
    becomes this run's lead for KEY, or says the run did not measure it."""
    if not os.path.exists(analysis_path):
        return
    found = leads(results, g, runs)
    with open(analysis_path) as fh:
        text = fh.read()

    def lead(m):
        key = m.group(1)
        return found.get(key, f"**{key}: not measured in these results.**")

    w(re.sub(r"<!-- lead: ([\w-]+) -->", lead, text).rstrip() + "\n")
