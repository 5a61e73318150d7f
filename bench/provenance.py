"""Where each section of BENCHMARKS.md comes from: the stamps of its results.

`bench/run` stamps every result file (bench/peers/machine.py): the run (its
start time), the commit and the sha256 of an uncommitted diff, the machine's
fingerprint (CPU model, vector extensions, kernel) and the load average before
and after the step. Two results come from the same run when these agree, the
load aside; a partial run (`BENCH_ONLY=...`) keeps the other sections' results
of earlier runs, so the report says "one run" only when every section's
stamps agree and otherwise lists which sections come from which run.
"""

from fnmatch import fnmatch

# Section key -> its title in the lists and the result files (patterns of
# their names without `.json`) whose figures it shows.
SECTIONS = {
    "dispatch": ("§1 dispatch", ["dispatch-*"]),
    "trace": ("§2 tracing", ["trace-*"]),
    "warm-start": ("§3 warm start", ["warm-start-*"]),
    "start": ("§3b `radix generate`", ["start-*"]),
    "minilm": ("§4 MiniLM", ["minilm-*"]),
    "smollm2": ("§5 SmolLM2", ["smollm2-*", "bandwidth-*"]),
    "llamacpp": ("§5b llama.cpp", ["llamacpp", "smollm2-radix-[0-9]*", "smollm2-radix-one-program-*",
                                   "start-per-block"]),
    "files": ("§5e three files beside llama-bench", ["files-*"]),
    "serve": ("§5c serving", ["serve-*"]),
    "train": ("§6 training", ["train-*"]),
    "mpi": ("§7 all-reduce", ["mpi-*"]),
    "profile-trace": ("the trace profile", ["profile-trace"]),
    "profile-decode": ("the decode profile", ["profile-decode"]),
}

# The fields that identify a run; the load average differs from step to step.
IDENTITY = ("run", "commit", "dirty diff sha256", "cpu", "vector extensions", "kernel")


def stamp(result):
    """A result's stamp; results written before stamps existed get one that
    agrees with no other: their run time at most (or "?")."""
    return result.get("stamp") or {"run": result.get("run") or "?", "unstamped": True}


def identity(s):
    return ("unstamped", s["run"]) if s.get("unstamped") else tuple(s.get(k) for k in IDENTITY)


def describe(s):
    """One run's stamp in words, the load aside."""
    if s.get("unstamped"):
        return f"run {s['run']}, unstamped (written before results carried their commit and machine)"
    dirty = s.get("dirty diff sha256")
    return (f"run {s['run']}, commit `{s['commit']}`"
            + (f" + uncommitted changes (diff sha256 `{dirty[:16]}`)" if dirty else "")
            + f", {s['cpu']}, {s['vector extensions']}, kernel {s['kernel']}")


def section_files(runs, section):
    """The names of the result files of `section` that are present."""
    patterns = SECTIONS.get(section, (section, [section]))[1]
    return [name for name in runs if any(fnmatch(name, p) for p in patterns)]


def section_stamps(runs, section):
    """identity -> (a stamp of that run, [stamps of this section's files from it])."""
    out = {}
    for name in section_files(runs, section):
        s = stamp(runs[name])
        out.setdefault(identity(s), (s, []))[1].append(s)
    return out


def load_range(stamps, key):
    """The 1-minute load averages `key` of these stamps, as `min–max`."""
    loads = sorted(float(s[key].split()[0]) for s in stamps if s.get(key))
    if not loads:
        return "?"
    lo, hi = f"{loads[0]:.2f}", f"{loads[-1]:.2f}"
    return lo if lo == hi else f"{lo}–{hi}"


def stamp_line(runs, section):
    """The line under a section's heading saying which run its figures come
    from ("" when it has no results)."""
    by_run = section_stamps(runs, section)
    parts = []
    for s, stamps in sorted(by_run.values(), key=lambda st: st[0]["run"]):
        load = ("" if s.get("unstamped") else
                f"; load average (1 min) {load_range(stamps, 'load before')} before its steps, "
                f"{load_range(stamps, 'load after')} after")
        parts.append(describe(s) + load)
    if not parts:
        return ""
    if len(parts) == 1:
        return f"*From {parts[0]}.*\n"
    return (f"*Not one run: this section's figures come from {len(parts)} runs: "
            + "; ".join(f"({i + 1}) {p}" for i, p in enumerate(parts)) + ".*\n")


def runs_of_sections(runs):
    """[(a stamp of the run, [titles of the sections with figures from it])],
    in order of run time."""
    out = {}
    for section, (title, _) in SECTIONS.items():
        for key, (s, _) in section_stamps(runs, section).items():
            out.setdefault(key, (s, []))[1].append(title)
    return sorted(out.values(), key=lambda st: st[0]["run"])


def one_run(runs):
    """The stamp every section agrees on, or None when they do not agree (or
    are unstamped, or there are no sections)."""
    found = runs_of_sections(runs)
    if len(found) == 1 and not found[0][0].get("unstamped"):
        return found[0][0]
    return None


def header(runs):
    """The header's sentence on where the figures come from."""
    s = one_run(runs)
    if s:
        return f"One run: every section below comes from the same `bench/run` ({describe(s)})."
    found = runs_of_sections(runs)
    if not found:
        return "No results."
    return ("**Not one run.** The sections below come from " + f"{len(found)} runs of `bench/run`; "
            "compare figures within a section, and across sections only of the same run:\n\n"
            + "\n".join(f"- {describe(s)}: {', '.join(titles)}" for s, titles in found))
