"""Facts about the machine and the run, for BENCHMARKS.md."""

import datetime
import json
import os
import platform
import subprocess
import sys


def sh(cmd):
    try:
        return subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=30).stdout.strip()
    except Exception as e:  # a missing tool leaves its fact out
        return f"? ({e})"


if sys.argv[1:] == ["end"]:
    print(json.dumps({"system": "machine", "bench": "machine-end", "samples": {}, "meta": {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "load average at end": sh("cut -d' ' -f1-3 /proc/loadavg")}}))
    sys.exit(0)

cpu = sh("lscpu | sed -n 's/^Model name: *//p' | head -1")
# The model name alone ("AMD EPYC" on these virtual machines) does not tell
# a Zen 2 from a Zen 5: the family and model numbers do, and the vector
# extensions decide which code XLA and the kernels run. Figures from
# machines that differ here are not comparable.
family = sh("lscpu | sed -n 's/^CPU family: *//p' | head -1")
model = sh("lscpu | sed -n 's/^Model: *//p' | head -1")
VECTOR = ["sse4_2", "avx", "avx2", "fma", "f16c", "avx_vnni", "avx512f", "avx512bw", "avx512vl",
          "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_tile"]
flags = set(sh("grep -m1 '^flags' /proc/cpuinfo").split())
meta = {
    "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    "cpu": f"{cpu} (family {family}, model {model})",
    "vector extensions": " ".join(f for f in VECTOR if f in flags) or "?",
    "cores": os.cpu_count(),
    "threads": int(os.environ.get("BENCH_THREADS", "2")),
    "memory": sh("free -h | awk '/^Mem:/ {print $2}'"),
    "kernel": platform.release(),
    "load average at start": sh("cut -d' ' -f1-3 /proc/loadavg"),
    "radix commit": sh("git rev-parse --short HEAD") + (" (+ uncommitted changes)" if sh("git status --porcelain --untracked-files=no") else ""),
    "rustc": sh("rustc --version"),
    "python": platform.python_version(),
    "OPENBLAS_CORETYPE (machine setting, unset for the Python peers)": os.environ.get("BENCH_OPENBLAS_CORETYPE") or "not set",
}
print(json.dumps({"system": "machine", "bench": "machine", "samples": {}, "meta": meta}))
