"""SmolLM2-135M-Instruct prefill and decode tokens/s through transformers
(PyTorch, fp32, dequantized from the same Q4_1 GGUF as radix reads, as
crates/radix-models/tests/fixtures/reference/smollm2/make.py loads it).

Prefill: one forward over the 128-token prompt filling the KV cache, logits
of the last position only (`logits_to_keep=1`, as radix computes).
Decode: greedy, one token per forward with the KV cache, after that prompt.
"""

import argparse
import os
import time

from common import THREADS, Report, blas_info, prompt_ids

ap = argparse.ArgumentParser()
ap.add_argument("--gguf", required=True)
ap.add_argument("--prompt", type=int, default=128)
ap.add_argument("--decode", type=int, default=128)
ap.add_argument("--prefills", type=int, default=10)
ap.add_argument("--decodes", type=int, default=2)
args = ap.parse_args()

import torch
import transformers
from transformers import AutoModelForCausalLM

torch.set_num_threads(THREADS)
torch.set_num_interop_threads(1)
r = Report("transformers", "smollm2")
t = time.perf_counter()
model = AutoModelForCausalLM.from_pretrained(os.path.dirname(args.gguf), gguf_file=os.path.basename(args.gguf),
                                             dtype=torch.float32).eval()
r.meta.update(load_s=time.perf_counter() - t, torch=torch.__version__, transformers=transformers.__version__,
              attn_implementation=model.config._attn_implementation,
              n_params=sum(p.numel() for p in model.parameters()))
ids = torch.tensor([prompt_ids(args.prompt)])


def prefill():
    out = model(ids, use_cache=True, logits_to_keep=1)
    return out.logits[0, -1], out.cache


with torch.inference_mode():
    # The same warm-up as radix-bench's: one prefill and one decode step.
    t = time.perf_counter()
    _, cache = prefill()
    model(torch.tensor([[0]]), cache=cache, use_cache=True)
    r.meta["first_prefill_and_decode_s"] = time.perf_counter() - t
    rates = []
    for _ in range(args.prefills):
        t = time.perf_counter()
        prefill()
        rates.append(args.prompt / (time.perf_counter() - t))
    r.add("transformers prefill", "tokens/s", rates)

    steps, runs, gen = [], [], []
    for run in range(args.decodes):
        logits, cache = prefill()
        start = time.perf_counter()
        for _ in range(args.decode):
            nxt = int(logits.argmax())
            if run == 0:
                gen.append(nxt)
            t = time.perf_counter()
            out = model(torch.tensor([[nxt]]), cache=cache, use_cache=True)
            logits, cache = out.logits[0, -1], out.cache
            steps.append(1 / (time.perf_counter() - t))
        runs.append(args.decode / (time.perf_counter() - start))
    r.add("transformers decode", "tokens/s", steps)
    r.add("transformers decode (whole runs)", "tokens/s", runs)
r.meta["greedy_ids_first16"] = gen[:16]
r.meta["blas"] = blas_info()
r.finish()
