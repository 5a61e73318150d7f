"""One training step, as `radix-bench train` times it: the MNIST MLP
(784-128-10, ReLU, batch 128) and the small llama of radix's
`examples/train_lm.rs` (2 layers, width 64, 4 query / 2 key-value heads,
FFN 192, byte vocabulary, 65 tokens), each the mean cross-entropy, its
gradient and an AdamW update (lr 1e-3, weight decay 0.01).

`jax`: `jax.jit` of `jax.grad` and the update in one function, parameters
and state donated; with `--plugin PATH`, the same on that PJRT plugin (radix's
pinned CPU plugin) instead of jaxlib's own CPU client, named `jax-plugin`:
the same program on the runtime radix runs on. `torch`: autograd and
`torch.optim.AdamW`. `torch --lora GGUF` also times a LoRA step on that
SmolLM2 file as PEFT takes it (transformers dequantizes the GGUF weights to
f32): rank 8, alpha 16 on every projection, 64 next tokens, AdamW on the
adapters, 5 steps a sample, as `radix-bench train` times radix's.
Run: python train.py jax|torch [--plugin PATH] [--lora GGUF] [--samples N] [--steps-per-sample K]
"""

import argparse

import numpy as np

from common import THREADS, Report, time_per_call

ap = argparse.ArgumentParser()
ap.add_argument("system", choices=["jax", "torch"])
ap.add_argument("--samples", type=int, default=10)
ap.add_argument("--steps-per-sample", type=int, default=20)
ap.add_argument("--plugin", help="with jax: run on this PJRT plugin instead of jaxlib's CPU client")
ap.add_argument("--lora", help="with torch: also time a PEFT LoRA step on this SmolLM2 GGUF file")
args = ap.parse_args()
if args.plugin and args.system != "jax":
    ap.error("--plugin is for jax")
if args.lora and args.system != "torch":
    ap.error("--lora is for torch")
LORA_STEPS = 5

rng = np.random.default_rng(0)
BATCH, WINDOW, D, H, KV, FFN, VOC, LAYERS = 128, 65, 64, 4, 2, 192, 256, 2
HD = D // H
# u8 pixels, as radix's MLP takes them (it scales them to [0, 1] in its
# step), so that both steps do the same work.
images = rng.integers(0, 256, size=(BATCH, 784)).astype(np.uint8)
labels = rng.integers(0, 10, size=BATCH)
ids = rng.integers(0, 256, size=WINDOW)
normal = lambda *s: (rng.normal(size=s) / np.sqrt(s[-1])).astype(np.float32)
mlp0 = {"w0": normal(128, 784), "b0": np.zeros(128, np.float32), "w1": normal(10, 128), "b1": np.zeros(10, np.float32)}
lm0 = {"embd": normal(VOC, D), "norm": np.ones(D, np.float32)}
for l in range(LAYERS):
    lm0.update({f"{l}.an": np.ones(D, np.float32), f"{l}.q": normal(D, D), f"{l}.k": normal(KV * HD, D),
                f"{l}.v": normal(KV * HD, D), f"{l}.o": normal(D, D), f"{l}.fn": np.ones(D, np.float32),
                f"{l}.gate": normal(FFN, D), f"{l}.up": normal(FFN, D), f"{l}.down": normal(D, FFN)})
inv = 10000.0 ** (-np.arange(0, HD, 2) / HD)
ang = np.arange(WINDOW)[:, None] * inv[None]
cos, sin = np.cos(ang)[:, None, :].astype(np.float32), np.sin(ang)[:, None, :].astype(np.float32)
mask = np.triu(np.full((WINDOW, WINDOW), -np.inf, np.float32), 1)


def llama_loss(p, ids, o):
    """The small llama's next-token loss, written once for both systems;
    `o` holds the array functions of one (see `Ops`)."""
    rms = lambda x, w: x / o.sqrt(o.mean_last(x * x) + 1e-5) * w

    def rope(x):
        x0, x1 = x[..., 0::2], x[..., 1::2]
        return o.stack([x0 * o.cos - x1 * o.sin, x0 * o.sin + x1 * o.cos], -1).reshape(x.shape)

    x = p["embd"][ids]
    for l in range(LAYERS):
        h = rms(x, p[f"{l}.an"])
        q = rope((h @ p[f"{l}.q"].T).reshape(WINDOW, H, HD))
        k = rope((h @ p[f"{l}.k"].T).reshape(WINDOW, KV, HD))
        v = (h @ p[f"{l}.v"].T).reshape(WINDOW, KV, HD)
        k, v = o.repeat(k, H // KV, 1), o.repeat(v, H // KV, 1)
        s = o.einsum("thd,shd->hts", q, k) / np.sqrt(HD) + o.mask
        x = x + o.einsum("hts,shd->thd", o.softmax(s), v).reshape(WINDOW, D) @ p[f"{l}.o"].T
        h = rms(x, p[f"{l}.fn"])
        x = x + (o.silu(h @ p[f"{l}.gate"].T) * (h @ p[f"{l}.up"].T)) @ p[f"{l}.down"].T
    logits = rms(x, p["norm"]) @ p["embd"].T
    return cross_entropy(logits[:-1], ids[1:], o)


def cross_entropy(logits, targets, o):
    m = o.max_last(logits)
    logp = logits - m - o.log(o.sum_last(o.exp(logits - m)))
    onehot = o.arange(logits.shape[-1])[None, :] == targets[:, None]
    return -(logp * onehot).sum(-1).mean()


def mlp_loss(p, pixels, y, o):
    x = o.to_f32(pixels) / 255
    h = o.relu(x @ p["w0"].T + p["b0"])
    return cross_entropy(h @ p["w1"].T + p["b1"], y, o)


class Ops:
    """The array functions the losses use, from a numpy-like module `xp`."""

    def __init__(self, xp, keepdim, **extra):
        self.sqrt, self.exp, self.log, self.stack, self.einsum = xp.sqrt, xp.exp, xp.log, xp.stack, xp.einsum
        self.arange = xp.arange
        kw = {keepdim: True}
        self.mean_last = lambda x: x.mean(-1, **kw)
        self.sum_last = lambda x: x.sum(-1, **kw)
        self.__dict__.update(extra)


r = Report("jax-plugin" if args.plugin else args.system, "train")
if args.system == "jax":
    import jax
    import jax.numpy as jnp

    name = "jax"
    if args.plugin:
        from jax._src import xla_bridge

        xla_bridge.register_plugin("radix_plugin", library_path=args.plugin)
        jax.config.update("jax_platforms", "radix_plugin")
        name = "jax-plugin"

    def adamw(loss):
        def step(p, s, *batch):
            value, g = jax.value_and_grad(loss)(p, *batch)
            t = s["t"] + 1
            m = jax.tree.map(lambda m, g: 0.9 * m + 0.1 * g, s["m"], g)
            v = jax.tree.map(lambda v, g: 0.999 * v + 0.001 * g * g, s["v"], g)
            bc1, bc2 = 1 - 0.9**t, jnp.sqrt(1 - 0.999**t)
            p = jax.tree.map(lambda p, m, v: p * (1 - 1e-3 * 0.01) - 1e-3 / bc1 * m / (jnp.sqrt(v) / bc2 + 1e-8), p, m, v)
            return value, p, {"t": t, "m": m, "v": v}
        return jax.jit(step, donate_argnums=(0, 1))

    def timed(name, loss, p0, *batch):
        p = jax.tree.map(jnp.asarray, p0)
        s = {"t": jnp.zeros((), jnp.float32), "m": jax.tree.map(jnp.zeros_like, p), "v": jax.tree.map(jnp.zeros_like, p)}
        step = adamw(loss)
        state = [p, s]

        def once():
            value, state[0], state[1] = step(state[0], state[1], *batch)
            value.block_until_ready()

        once()
        r.add(name, "ms", [time_per_call(args.steps_per_sample, once) * 1e3 for _ in range(args.samples)])

    o = Ops(jnp, "keepdims", max_last=lambda x: x.max(-1, keepdims=True), repeat=jnp.repeat,
            softmax=lambda s: jax.nn.softmax(s, -1), silu=jax.nn.silu, relu=jax.nn.relu,
            to_f32=lambda x: x.astype(jnp.float32), mask=jnp.asarray(mask), cos=jnp.asarray(cos), sin=jnp.asarray(sin))
    timed(f"{name} train mnist", lambda p, x, y: mlp_loss(p, x, y, o), mlp0, jnp.asarray(images), jnp.asarray(labels))
    timed(f"{name} train lm", lambda p, ids: llama_loss(p, ids, o), lm0, jnp.asarray(ids))
    r.meta.update(jax=jax.__version__, devices=str(jax.devices()), plugin=args.plugin)
else:
    import torch

    torch.set_num_threads(THREADS)

    def timed(name, loss, p0, *batch):
        p = {k: torch.tensor(v, requires_grad=True) for k, v in p0.items()}
        opt = torch.optim.AdamW(p.values(), lr=1e-3, weight_decay=0.01)

        def once():
            opt.zero_grad()
            loss(p, *batch).backward()
            opt.step()

        once()
        r.add(name, "ms", [time_per_call(args.steps_per_sample, once) * 1e3 for _ in range(args.samples)])

    o = Ops(torch, "keepdim", max_last=lambda x: x.max(-1, keepdim=True)[0],
            repeat=lambda x, n, axis: x.repeat_interleave(n, axis), softmax=lambda s: torch.softmax(s, -1),
            silu=torch.nn.functional.silu, relu=torch.relu, to_f32=lambda x: x.float(),
            mask=torch.tensor(mask), cos=torch.tensor(cos),
            sin=torch.tensor(sin))
    timed(f"{args.system} train mnist", lambda p, x, y: mlp_loss(p, x, y, o), mlp0, torch.tensor(images), torch.tensor(labels))
    timed(f"{args.system} train lm", lambda p, ids: llama_loss(p, ids, o), lm0, torch.tensor(ids))
    r.meta.update(torch=torch.__version__)
    if args.lora:
        import os

        import peft
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(
            os.path.dirname(args.lora), gguf_file=os.path.basename(args.lora), dtype=torch.float32)
        model = peft.get_peft_model(model, peft.LoraConfig(
            r=8, lora_alpha=16, lora_dropout=0.0,
            target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]))
        opt = torch.optim.AdamW([q for q in model.parameters() if q.requires_grad], lr=2e-3,
                                betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)
        window = torch.tensor(rng.integers(0, model.config.vocab_size, size=(1, WINDOW)))

        def lora_step():
            opt.zero_grad()
            # The mean cross-entropy of the 64 next tokens, as radix's
            # `next_token_loss` of the 65-token window.
            model(input_ids=window, labels=window).loss.backward()
            opt.step()

        lora_step()
        r.add("torch train lora", "ms",
              [time_per_call(LORA_STEPS, lora_step) * 1e3 for _ in range(args.samples)])
        r.meta.update(peft=peft.__version__)
r.finish()
