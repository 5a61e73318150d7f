"""SmolLM2 requantized by llama.cpp's `llama-quantize` (Q4_K_M, Q6_K, Q8_0):
each file loads in `radix generate` and its greedy ids equal those of
transformers loading the same file (dequantized to fp32), 16 new tokens after
each prompt. radix stops at the end-of-sequence token, transformers goes on
past it: ids are compared up to radix's stop.

    python bench/peers/requantized.py RADIX LLAMA_QUANTIZE SMOLLM2_Q4_1_GGUF WORKDIR

Prints one line per file and prompt and a JSON report last; exits 1 when an
id differs.
"""
import json
import subprocess
import sys
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

FORMATS = ["Q4_K_M", "Q6_K", "Q8_0"]
PROMPTS = ["The capital of France is", "Once upon a time,"]
NEW = 16


def main():
    radix, quantize, source, work = sys.argv[1], sys.argv[2], Path(sys.argv[3]), Path(sys.argv[4])
    torch.set_num_threads(2)
    work.mkdir(parents=True, exist_ok=True)
    report, ok = {}, True
    for fmt in FORMATS:
        name = f"SmolLM2-135M-Instruct.{fmt}.gguf"
        if not (work / name).exists():
            subprocess.run([quantize, "--allow-requantize", str(source), str(work / name), fmt, "2"],
                           check=True, capture_output=True)
        tok = AutoTokenizer.from_pretrained(work, gguf_file=name)
        model = AutoModelForCausalLM.from_pretrained(work, gguf_file=name, dtype=torch.float32).eval()
        for prompt in PROMPTS:
            ids = tok(prompt, return_tensors="pt", add_special_tokens=False).input_ids
            with torch.no_grad():
                gen = model.generate(ids, max_new_tokens=NEW, do_sample=False, num_beams=1,
                                     pad_token_id=tok.eos_token_id)
            want = gen[0, ids.shape[1]:].tolist()
            out = subprocess.run([radix, "generate", "--model", str(work / name), "--max-tokens",
                                  str(NEW), "--json", prompt], capture_output=True, text=True)
            got = json.loads(out.stdout)["ids"] if out.returncode == 0 else None
            equal = got is not None and got == want[:len(got)] and (
                len(got) == NEW or got[-1] == tok.eos_token_id)
            ok &= equal
            report[f"{fmt} {prompt}"] = {"transformers": want, "radix": got or out.stderr[-500:],
                                         "equal": equal}
            print(fmt, repr(prompt), "equal" if equal else "DIFFERENT", flush=True)
    print(json.dumps(report))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
