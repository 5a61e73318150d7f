"""Dispatch: a tiny add through `jax.jit`, with `block_until_ready`."""

import argparse

import jax
import jax.numpy as jnp
import numpy as np

from common import Report, time_per_call

ap = argparse.ArgumentParser()
ap.add_argument("--samples", type=int, default=200)
ap.add_argument("--calls-per-sample", type=int, default=500)
args = ap.parse_args()

add = jax.jit(lambda x, y: x + y)
a = jnp.asarray(np.array([1, 2, 3, 4], np.float32))
b = jnp.asarray(np.array([1, 2, 3, 4], np.float32))
assert np.array_equal(np.asarray(add(a, b)), [2, 4, 6, 8])
per_call = [time_per_call(args.calls_per_sample, lambda: add(a, b).block_until_ready()) * 1e6
            for _ in range(args.samples + 5)]
r = Report("jax", "dispatch")
r.add("jax.jit call + block_until_ready", "us", per_call[5:])
r.meta.update(jax=jax.__version__, devices=str(jax.devices()), calls_per_sample=args.calls_per_sample)
r.finish()
