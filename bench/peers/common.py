"""What every peer script shares: thread settings, timing, and the JSON report.

Each script prints one JSON object on its last stdout line, the same shape as
`radix-bench` prints: {"system", "bench", "samples": {name: {"unit", "values"}},
"meta", "peak_rss_mb", "threads"}. `bench/report.py` computes the statistics.
"""

import json
import os
import resource
import subprocess
import sys
import tempfile
import time

THREADS = int(os.environ.get("BENCH_THREADS", "2"))


class Report:
    def __init__(self, system, bench):
        self.system, self.bench = system, bench
        self.samples, self.meta = {}, {}

    def add(self, name, unit, values):
        self.samples[name] = {"unit": unit, "values": [float(v) for v in values]}

    def finish(self):
        rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
        print(json.dumps({"system": self.system, "bench": self.bench, "samples": self.samples,
                          "meta": self.meta, "peak_rss_mb": rss_mb, "threads": THREADS}))
        sys.stdout.flush()


def time_per_call(n, f):
    """Mean seconds per call of `n` calls of `f`."""
    t = time.perf_counter()
    for _ in range(n):
        f()
    return (time.perf_counter() - t) / n


class Process:
    """One finished child process: exit code, output, wall seconds and peak RSS (MiB)."""

    def __init__(self, returncode, stdout, stderr, wall_s, peak_rss_mb):
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr
        self.wall_s, self.peak_rss_mb = wall_s, peak_rss_mb


def run_process(cmd, env=None):
    """Runs `cmd` to its end with no stdin. The wall time is from the start
    to the exit; the peak RSS is the kernel's `ru_maxrss` of that process
    alone (from `wait4`), the same figure `/usr/bin/time -v` prints."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t = time.perf_counter()
        p = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=err)
        _, status, usage = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t
        p.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        text = lambda f: f.read().decode("utf-8", "replace")
        return Process(p.returncode, text(out), text(err), wall, usage.ru_maxrss / 1024)  # KiB on Linux


def blas_info():
    """Which BLAS kernels numpy (and torch, if loaded) run: threadpoolctl's view."""
    try:
        from threadpoolctl import threadpool_info
        return [{k: d.get(k) for k in ("internal_api", "num_threads", "version", "architecture")}
                for d in threadpool_info()]
    except Exception as e:  # threadpoolctl is optional information
        return str(e)


def hello_text(n_tokens):
    """A text of exactly n_tokens MiniLM tokens with [CLS] and [SEP]; radix-bench builds the same."""
    return " ".join(["hello"] * (n_tokens - 2))


def prompt_ids(n):
    """The SmolLM2 prompt radix-bench uses: ordinary word ids."""
    return [1000 + 37 * i for i in range(n)]
