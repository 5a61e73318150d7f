"""Exports small JAX functions as StableHLO text for the `radix run` tests.

Run from anywhere: `python3 make_jax_modules.py`. For each module NAME it
writes NAME.mlir (`jax.jit(f).lower(*args).as_text()`), NAME_inputs.npz (the
arguments as arr_0, arr_1, ...) and NAME_expected.npz (JAX's outputs as out0,
out1, ...) next to this file.
"""

import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=4")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import pathlib

import jax
import jaxlib
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

HERE = pathlib.Path(__file__).resolve().parent
rng = np.random.default_rng(0)


def save(name, f, args, **jit_kwargs):
    """Lowers f on args, runs it, and writes the module, inputs and outputs."""
    jitted = jax.jit(f, **jit_kwargs)
    text = jitted.lower(*args).as_text()
    outs = jitted(*args)
    if not isinstance(outs, (tuple, list)):
        outs = (outs,)
    (HERE / f"{name}.mlir").write_text(text)
    np.savez(HERE / f"{name}_inputs.npz", *[np.asarray(a) for a in args])
    np.savez(
        HERE / f"{name}_expected.npz",
        **{f"out{i}": np.asarray(o) for i, o in enumerate(outs)},
    )
    print(f"{name}: {len(args)} inputs, {len(outs)} outputs")


def f32(*shape):
    return rng.standard_normal(shape).astype(np.float32)


# An MLP layer: tanh(x @ w + b).
def mlp(x, w, b):
    return jnp.tanh(x @ w + b)


save("mlp", mlp, (f32(4, 8), f32(8, 16), f32(16)))


# Softmax over the last axis, and the row sums of the logits: two outputs.
def softmax_sum(x):
    return jax.nn.softmax(x, axis=-1), jnp.sum(x, axis=-1)


save("softmax", softmax_sum, (f32(3, 5),))


# Integers and booleans: i32 arithmetic, an i8 cast, a u8 mask, a comparison.
def ints(a, b, mask):
    s = a * 3 - b // 2
    return s, (a > b), jnp.where(mask, a, -b).astype(jnp.int8), mask.astype(jnp.uint8) + 1


save(
    "ints",
    ints,
    (
        rng.integers(-50, 50, (2, 6), dtype=np.int32),
        rng.integers(1, 50, (2, 6), dtype=np.int32),
        rng.integers(0, 2, (2, 6)).astype(np.bool_),
    ),
)


# A scan (a while loop in StableHLO): a running recurrence h = tanh(h * a + x_t).
def scan(h0, xs, a):
    def step(h, x):
        h = jnp.tanh(h * a + x)
        return h, h.sum()

    return jax.lax.scan(step, h0, xs)


save("scan", scan, (f32(4), f32(6, 4), np.float32(0.5)))


# f64 and i64 (needs x64 mode) plus a f16 input.
jax.config.update("jax_enable_x64", True)


def wide(x, n, h):
    return x * 2.0 + n.astype(jnp.float64), n + 1, h.astype(jnp.float32) * 2


save(
    "wide",
    wide,
    (
        rng.standard_normal((3,)),
        np.arange(3, dtype=np.int64),
        rng.standard_normal((2, 2)).astype(np.float16),
    ),
)
jax.config.update("jax_enable_x64", False)


# bf16 in and out (numpy stores ml_dtypes' bfloat16 as the raw type '<V2').
def bf16(x, y):
    return x * y + 1, (x * y).astype(jnp.float32)


save("bf16", bf16, (f32(2, 3).astype(jnp.bfloat16), f32(2, 3).astype(jnp.bfloat16)))


# Sharded over 4 devices: rows of x split 4 ways, w replicated; the output
# keeps the row sharding, and a reduced sum is replicated.
mesh = Mesh(np.array(jax.devices()[:4]).reshape(2, 2), ("x", "y"))


def sharded(x, w):
    y = jnp.tanh(x @ w)
    return y, jnp.sum(y)


def sharded_2d(x):
    return x * 2 + 1


def save_sharded(suffix):
    save(
        f"sharded_{suffix}",
        sharded,
        (f32(8, 4), f32(4, 6)),
        in_shardings=(NamedSharding(mesh, P(("x", "y"), None)), NamedSharding(mesh, P())),
        out_shardings=(NamedSharding(mesh, P(("x", "y"), None)), NamedSharding(mesh, P())),
    )
    save(
        f"sharded2d_{suffix}",
        sharded_2d,
        (f32(4, 6),),
        in_shardings=(NamedSharding(mesh, P("x", "y")),),
        out_shardings=NamedSharding(mesh, P("y", "x")),
    )


if hasattr(jax.config, "jax_use_shardy_partitioner"):
    jax.config.update("jax_use_shardy_partitioner", False)
    save_sharded("gspmd")
    jax.config.update("jax_use_shardy_partitioner", True)
save_sharded("shardy")

# The CPU matters: XLA emits other code for AVX2 and AVX-512, so float
# outputs move in their last digits between machines (the tests' tolerances
# allow for it).
flags = next((l for l in open("/proc/cpuinfo") if l.startswith("flags")), "").split()
vector = " ".join(f for f in ("avx2", "fma", "avx512f", "avx512_bf16") if f in flags)
(HERE / "README.md").write_text(
    "Test data for `radix run`, made by `make_jax_modules.py` with "
    f"jax {jax.__version__} (jaxlib {jaxlib.__version__}) on CPU "
    f"({vector}); run it again to remake the files.\n"
)
