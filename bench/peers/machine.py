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
meta = {
    "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    "cpu": cpu,
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
