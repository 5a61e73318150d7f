"""all-MiniLM-L6-v2 sentences/s at 1 x 16 and 32 x 128 tokens (and 1 x 20 and
32 x 100, which are no padded size of radix's, so it pays for its padding), through
sentence-transformers (PyTorch) or onnxruntime. Tokenization, pooling and
normalization are timed, as in radix's `Embedder::embed`.

  st:  SentenceTransformer(dir).encode(texts, normalize_embeddings=True)
  ort: the model exported with torch.onnx (TorchScript exporter), optimized by
       onnxruntime's BERT fusions, run by an InferenceSession; tokenizers + numpy pooling
"""

import argparse
import os
import sys
import time

import numpy as np

from common import THREADS, Report, blas_info, hello_text, time_per_call

# batch, tokens, calls per sample; the same list as radix-bench's `minilm`.
SHAPES = [(1, 16, 10), (32, 128, 1), (1, 20, 10), (32, 100, 1)]


def sentence_transformers(model_dir, r):
    import torch
    from sentence_transformers import SentenceTransformer
    import sentence_transformers
    torch.set_num_threads(THREADS)
    torch.set_num_interop_threads(1)
    st = SentenceTransformer(model_dir, device="cpu")
    r.meta.update(torch=torch.__version__, sentence_transformers=sentence_transformers.__version__,
                  modules=[type(m).__name__ for m in st])
    return lambda texts: st.encode(texts, batch_size=32, convert_to_numpy=True,
                                   normalize_embeddings=True, show_progress_bar=False)


def export_onnx(model_dir, path):
    """The TorchScript exporter with eager attention: the graph onnxruntime's
    BERT optimizer recognizes (it fuses Attention, SkipLayerNormalization,
    EmbedLayerNormalization and Gelu there)."""
    import torch
    from transformers import AutoModel
    torch.set_num_threads(THREADS)
    bert = AutoModel.from_pretrained(model_dir, attn_implementation="eager").eval()

    class Encoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.bert = bert

        def forward(self, input_ids, attention_mask, token_type_ids):
            return self.bert(input_ids=input_ids, attention_mask=attention_mask,
                             token_type_ids=token_type_ids).last_hidden_state

    model = Encoder().eval()
    ids = torch.randint(1000, 2000, (2, 16), dtype=torch.int64)
    mask, types = torch.ones(2, 16, dtype=torch.int64), torch.zeros(2, 16, dtype=torch.int64)
    axes = {0: "batch", 1: "seq"}
    torch.onnx.export(model, (ids, mask, types), path, dynamo=False, opset_version=17,
                      input_names=["input_ids", "attention_mask", "token_type_ids"],
                      output_names=["last_hidden_state"],
                      dynamic_axes=dict(input_ids=axes, attention_mask=axes, token_type_ids=axes))


def export(model_dir, cache_dir):
    """Exports and fuses the model once, in its own process (so that the timed
    onnxruntime process never loads torch)."""
    from onnxruntime.transformers.optimizer import optimize_model
    raw, fused = os.path.join(cache_dir, "minilm.onnx"), os.path.join(cache_dir, "minilm.opt.onnx")
    export_onnx(model_dir, raw)
    optimize_model(raw, model_type="bert", num_heads=12, hidden_size=384).save_model_to_file(fused)


def onnxruntime(model_dir, cache_dir, r):
    import onnx
    import onnxruntime as ort
    from tokenizers import Tokenizer
    fused = os.path.join(cache_dir, "minilm.opt.onnx")
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = THREADS
    opts.inter_op_num_threads = 1
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    sess = ort.InferenceSession(fused, opts, providers=["CPUExecutionProvider"])
    tok = Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
    tok.enable_padding(pad_id=0, pad_token="[PAD]")
    tok.enable_truncation(max_length=256)
    names = {i.name for i in sess.get_inputs()}
    r.meta.update(onnxruntime=ort.__version__, onnx_inputs=sorted(names),
                  fused_ops=sorted({n.op_type for n in onnx.load(fused).graph.node}))

    def embed(texts):
        enc = tok.encode_batch(texts)
        ids = np.array([e.ids for e in enc], np.int64)
        mask = np.array([e.attention_mask for e in enc], np.int64)
        feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        h = sess.run(None, {k: v for k, v in feed.items() if k in names})[0]
        m = mask[..., None].astype(np.float32)
        pooled = (h * m).sum(1) / np.maximum(m.sum(1), 1e-9)
        return pooled / np.linalg.norm(pooled, axis=1, keepdims=True)
    return embed


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("system", choices=["st", "ort", "export"])
    ap.add_argument("--dir", required=True)
    ap.add_argument("--cache", default=os.path.join(os.path.dirname(__file__), "..", ".cache"))
    ap.add_argument("--samples", type=int, default=10)
    args = ap.parse_args()
    os.makedirs(args.cache, exist_ok=True)
    if args.system == "export":
        export(args.dir, args.cache)
        sys.exit(0)
    name = {"st": "sentence-transformers", "ort": "onnxruntime"}[args.system]
    r = Report(name, "minilm")
    embed = sentence_transformers(args.dir, r) if args.system == "st" else onnxruntime(args.dir, args.cache, r)
    for batch, n_tokens, calls in SHAPES:
        texts = [hello_text(n_tokens)] * batch
        t = time.perf_counter()
        first = embed(texts)
        r.meta[f"first_call_s_{batch}x{n_tokens}"] = time.perf_counter() - t
        r.meta[f"embedding_first4_{batch}x{n_tokens}"] = [float(v) for v in first[0][:4]]
        rates = [batch / time_per_call(calls, lambda: embed(texts)) for _ in range(args.samples)]
        r.add(f"{name} {batch}x{n_tokens}", "sentences/s", rates)
    r.meta["blas"] = blas_info()
    r.finish()
