"""Facts about the machine and the run, for BENCHMARKS.md.

    machine.py                  the machine's facts, as a JSON report
    machine.py end              the load average at the end of the run
    machine.py stamp LOAD       reads a step's JSON report on stdin and prints
                                it with its stamp (LOAD: the load average
                                before the step, from /proc/loadavg)

The stamp says where a figure comes from: the run (`bench/run`'s start,
BENCH_RUN), the commit and the sha256 of an uncommitted diff (BENCH_COMMIT,
BENCH_DIRTY_SHA256, fixed by `bench/run` when it starts), the machine's
fingerprint and the load average before and after the step. `bench/report.py`
compares the stamps of every section.
"""

import datetime
import json
import os
import platform
import subprocess
import sys

# The vector extensions that decide which code XLA, the kernels and the peers
# run, in /proc/cpuinfo's spelling.
VECTOR = ["sse4_2", "avx", "avx2", "fma", "f16c", "avx_vnni", "avx512f", "avx512bw", "avx512vl",
          "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_int8", "amx_bf16"]


def sh(cmd):
    try:
        return subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=30).stdout.strip()
    except Exception as e:  # a missing tool leaves its fact out
        return f"? ({e})"


def now():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def load_average():
    """The 1, 5 and 15-minute load averages, as /proc/loadavg writes them."""
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def fingerprint():
    """What makes figures of two machines comparable or not. The model name
    alone ("AMD EPYC" on these virtual machines) does not tell a Zen 2 from a
    Zen 5: the family and model numbers do, and the vector extensions decide
    which code runs."""
    cpu = sh("lscpu | sed -n 's/^Model name: *//p' | head -1")
    family = sh("lscpu | sed -n 's/^CPU family: *//p' | head -1")
    model = sh("lscpu | sed -n 's/^Model: *//p' | head -1")
    flags = set(sh("grep -m1 '^flags' /proc/cpuinfo").split())
    return {"cpu": f"{cpu} (family {family}, model {model})",
            "vector extensions": " ".join(f for f in VECTOR if f in flags) or "?",
            "kernel": platform.release()}


def stamp(load_before):
    """The stamp of a step that has just ended."""
    res = {"run": os.environ.get("BENCH_RUN", "?"), "date": now(),
           "commit": os.environ.get("BENCH_COMMIT") or sh("git rev-parse --short=12 HEAD")}
    if os.environ.get("BENCH_DIRTY_SHA256"):
        res["dirty diff sha256"] = os.environ["BENCH_DIRTY_SHA256"]
    res.update(fingerprint())
    res["load before"] = load_before
    res["load after"] = load_average()
    return res


def facts():
    return {
        "date": now(),
        **fingerprint(),
        "cores": os.cpu_count(),
        "threads": int(os.environ.get("BENCH_THREADS", "2")),
        "memory": sh("free -h | awk '/^Mem:/ {print $2}'"),
        "load average at start": load_average(),
        "rustc": sh("rustc --version"),
        "python": platform.python_version(),
        "OPENBLAS_CORETYPE (machine setting, unset for the Python peers)":
            os.environ.get("BENCH_OPENBLAS_CORETYPE") or "not set",
    }


def main(args):
    if args[:1] == ["stamp"]:
        report = json.loads(sys.stdin.read().strip().splitlines()[-1])
        report["stamp"] = stamp(args[1])
        print(json.dumps(report))
    elif args == ["end"]:
        print(json.dumps({"system": "machine", "bench": "machine-end", "samples": {},
                          "meta": {"date": now(), "load average at end": load_average()}}))
    elif not args:
        print(json.dumps({"system": "machine", "bench": "machine", "samples": {}, "meta": facts()}))
    else:
        sys.exit(f"usage: machine.py [end | stamp LOAD_BEFORE], not {args}")


if __name__ == "__main__":
    main(sys.argv[1:])
