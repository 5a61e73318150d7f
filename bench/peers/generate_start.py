"""`radix generate` as a user runs it: whole processes, cold and warm.

Runs one radix binary (`--radix`) with `generate --max-tokens N PROMPT`:
- cold: an executable cache with no entries (a fresh `RADIX_CACHE_DIR` whose
  `packages/` and `hashes/` link to the real cache, so nothing is fetched
  and only the executables are compiled);
- warm: the same folder again, every executable loaded from the cache.

For each run it records the wall time and the peak RSS of the process and,
from radix's `RUST_LOG=info` lines (printed by every radix version this
compares), the weight load and the time until every executable was ready
(compiled, or loaded from the cache). Any binary that prints those two lines works, so an
older build can be run beside the current one.
"""

import argparse
import os
import re
import shlex
import shutil
import tempfile
import time
from pathlib import Path

from common import Report, run_process

LOADED = re.compile(r"loaded \S+ in ([0-9.]+)(ms|s|µs)")
READY = re.compile(r"executables .* ready in ([0-9.]+)(ms|s|µs)")
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def seconds(match):
    value, unit = float(match.group(1)), match.group(2)
    return value * {"s": 1.0, "ms": 1e-3, "µs": 1e-6}[unit]


def cache_root():
    return Path(os.environ.get("RADIX_CACHE_DIR") or Path.home() / ".cache" / "radix")


def fresh_cache(parent):
    """A cache folder sharing the real one's packages and plugin hashes."""
    root = Path(tempfile.mkdtemp(prefix="radix-start-", dir=parent))
    for shared in ("packages", "hashes"):
        if (cache_root() / shared).exists():
            (root / shared).symlink_to(cache_root() / shared)
    return root


def run(binary, cache, args):
    env = dict(os.environ, RADIX_CACHE_DIR=str(cache), RUST_LOG="info", NO_COLOR="1")
    out = run_process([binary, "generate", *args], env=env)
    if out.returncode != 0:
        raise SystemExit(f"{binary} failed: {out.stderr[-2000:]}")
    err = ANSI.sub("", out.stderr)
    loaded, ready = LOADED.search(err), READY.search(err)
    if not (loaded and ready):
        raise SystemExit(f"{binary} printed no load or ready line:\n{err[-2000:]}")
    return out.wall_s, seconds(loaded), seconds(ready), out.stdout, out.peak_rss_mb


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--radix", required=True)
    p.add_argument("--label", required=True)
    p.add_argument("--cold", type=int, default=3)
    p.add_argument("--warm", type=int, default=5)
    p.add_argument("--max-tokens", type=int, default=30)
    p.add_argument("--prompt", default="The capital of France is")
    p.add_argument("--plan", help="generate's --plan (left out when not given)")
    p.add_argument("--model", help="generate's --model, a GGUF file (its default model when not given)")
    a = p.parse_args()
    plan = ["--plan", a.plan] if a.plan else []
    model = ["--model", a.model] if a.model else []
    args = ["--max-tokens", str(a.max_tokens), *model, *plan, a.prompt]
    report = Report(f"radix {a.label}", "generate-start")
    report.meta["command"] = shlex.join(["radix", "generate", *args])
    report.meta["date"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    parent = tempfile.mkdtemp(prefix="radix-start-")
    try:
        cold = [run(a.radix, fresh_cache(parent), args) for _ in range(a.cold)]
        warm_cache = fresh_cache(parent)
        run(a.radix, warm_cache, args)  # fills the cache
        warm = [run(a.radix, warm_cache, args) for _ in range(a.warm)]
    finally:
        shutil.rmtree(parent, ignore_errors=True)
    for name, runs, part in [("cold wall", cold, 0), ("cold executables", cold, 2),
                             ("warm wall", warm, 0), ("warm executables", warm, 2),
                             ("warm load", warm, 1), ("cold peak RSS", cold, 4), ("warm peak RSS", warm, 4)]:
        if runs:  # `--cold 0` measures warm processes only
            report.add(f"{a.label} {name}", "MiB" if part == 4 else "s", [r[part] for r in runs])
    report.meta["text"] = warm[-1][3].strip()
    report.finish()


if __name__ == "__main__":
    main()
