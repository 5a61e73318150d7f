"""The SmolLM2 prefill program in JAX, written as a JAX user would, the same
computation `radix-bench` traces from `radix_models::llama::Llama`:
30 unrolled blocks (d=576, 9 query / 3 key-value heads of 64, SwiGLU 1536,
RMSNorm eps 1e-5, adjacent-pair rotary with theta 1e5), 128 tokens written
into a 256-position KV cache, logits of the last token through the tied
embedding. Weights are arguments.

  trace:      jax.jit(f).lower(shapes).as_text(), a fresh function each run
  warm-start: lower + compile into an empty persistent compilation cache,
              then (in-memory caches cleared) lower + compile hitting it
"""

import argparse
import os
import shutil
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np

from common import Report

N_LAYERS, D, HEADS, KV_HEADS, HD, FFN, VOCAB = 30, 576, 9, 3, 64, 1536, 49152
THETA, EPS, PROMPT, CAPACITY = 1e5, 1e-5, 128, 256
DESCRIPTION = ("SmolLM2-135M prefill: 30 unrolled llama blocks (d=576, 9/3 heads, FFN 1536), "
               "128 tokens, 256-position KV cache, weights as arguments")


def param_shapes():
    f32 = lambda *s: jax.ShapeDtypeStruct(s, jnp.float32)
    layer = dict(attn_norm=f32(D), q=f32(HEADS * HD, D), k=f32(KV_HEADS * HD, D),
                 v=f32(KV_HEADS * HD, D), o=f32(D, HEADS * HD), ffn_norm=f32(D),
                 gate=f32(FFN, D), up=f32(FFN, D), down=f32(D, FFN))
    return dict(embed=f32(VOCAB, D), layers=[dict(layer) for _ in range(N_LAYERS)], norm=f32(D))


def input_shapes():
    i32 = lambda *s: jax.ShapeDtypeStruct(s, jnp.int32)
    return i32(1, PROMPT), i32(), i32()


def rms_norm(x, w):
    return x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + EPS) * w


def rope(x, pos):
    # x: (b, s, h, hd), rotating adjacent pairs (x[2i], x[2i+1]).
    inv = THETA ** (-np.arange(0, HD, 2, dtype=np.float32) / HD)
    ang = pos[..., None].astype(jnp.float32) * inv  # (b, s, hd/2)
    cos, sin = jnp.cos(ang)[:, :, None, :], jnp.sin(ang)[:, :, None, :]
    x0, x1 = x[..., 0::2], x[..., 1::2]
    return jnp.stack([x0 * cos - x1 * sin, x0 * sin + x1 * cos], axis=-1).reshape(x.shape)


def block(p, x, pos, start):
    b, s, _ = x.shape
    h = rms_norm(x, p["attn_norm"])
    q = rope((h @ p["q"].T).reshape(b, s, HEADS, HD), pos)
    k = rope((h @ p["k"].T).reshape(b, s, KV_HEADS, HD), pos)
    v = (h @ p["v"].T).reshape(b, s, KV_HEADS, HD)
    zeros = jnp.zeros((b, CAPACITY, KV_HEADS, HD), jnp.float32)
    ck = jax.lax.dynamic_update_slice(zeros, k, (0, start, 0, 0))
    cv = jax.lax.dynamic_update_slice(zeros, v, (0, start, 0, 0))
    qg = q.reshape(b, s, KV_HEADS, HEADS // KV_HEADS, HD)
    scores = jnp.einsum("bqgrd,bkgd->bgrqk", qg, ck) / np.sqrt(HD).astype(np.float32)
    mask = jnp.arange(CAPACITY)[None, :] <= pos[0][:, None]  # (q, k)
    scores = jnp.where(mask, scores, -jnp.inf)
    attn = jnp.einsum("bgrqk,bkgd->bqgrd", jax.nn.softmax(scores, axis=-1), cv)
    x = x + attn.reshape(b, s, HEADS * HD) @ p["o"].T
    h = rms_norm(x, p["ffn_norm"])
    x = x + (jax.nn.silu(h @ p["gate"].T) * (h @ p["up"].T)) @ p["down"].T
    return x, (ck, cv)


def make_forward():
    """A new function object each time, so that no JAX cache keyed on it hits."""
    def forward(params, ids, start, last):
        pos = jnp.arange(ids.shape[1], dtype=jnp.int32)[None, :] + start
        x = params["embed"][ids]
        caches = []
        for p in params["layers"]:
            x, c = block(p, x, pos, start)
            caches.append(c)
        x = jax.lax.dynamic_slice_in_dim(x, last, 1, axis=1)[:, 0]
        logits = rms_norm(x, params["norm"]) @ params["embed"].T
        return logits, caches
    return forward


def lower():
    return jax.jit(make_forward()).lower(param_shapes(), *input_shapes())


def trace(runs):
    r = Report("jax", "trace")
    text = lower().as_text()
    r.meta.update(jax=jax.__version__, stablehlo_lines=text.count("\n"), stablehlo_bytes=len(text),
                  program=DESCRIPTION)
    total, lowered = [], []
    for _ in range(runs):
        jax.clear_caches()
        t = time.perf_counter()
        l = lower()
        t_lower = time.perf_counter() - t
        l.as_text()
        total.append((time.perf_counter() - t) * 1e3)
        lowered.append(t_lower * 1e3)
    r.add("jax.jit(f).lower(...).as_text()", "ms", total)
    r.add("jax.jit(f).lower(...) only", "ms", lowered)
    return r


def warm_start(loads):
    events = []
    jax.monitoring.register_event_listener(lambda name, **kw: events.append(name))
    r = Report("jax", "warm-start")
    r.meta.update(jax=jax.__version__, program=DESCRIPTION,
                  cache_dir=jax.config.jax_compilation_cache_dir)
    t = time.perf_counter()
    lower().compile()
    r.add("jax first compile (lower + compile)", "ms", [(time.perf_counter() - t) * 1e3])
    times, loads_only = [], []
    for _ in range(loads):
        jax.clear_caches()
        t = time.perf_counter()
        lowered = lower()
        t_lower = time.perf_counter()
        lowered.compile()
        times.append((time.perf_counter() - t) * 1e3)
        loads_only.append((time.perf_counter() - t_lower) * 1e3)
    r.add("jax persistent cache (lower + load)", "ms", times)
    r.add("jax persistent cache: compile() only", "ms", loads_only)
    r.meta["cache_hits"] = sum(e == "/jax/compilation_cache/cache_hits" for e in events)
    r.meta["cache_misses"] = sum(e == "/jax/compilation_cache/cache_misses" for e in events)
    return r


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["trace", "warm-start"])
    ap.add_argument("--runs", type=int, default=10)
    args = ap.parse_args()
    if args.mode == "trace":
        trace(args.runs).finish()
    else:
        cache = tempfile.mkdtemp(prefix="jax-cache-")
        jax.config.update("jax_compilation_cache_dir", cache)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
        try:
            warm_start(args.runs).finish()
        finally:
            shutil.rmtree(cache, ignore_errors=True)
