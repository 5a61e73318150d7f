"""Tests of the report's provenance on small fake results, no benchmark run.

    bench/.venv/bin/python -m unittest discover -s bench -p 'test_*.py'
"""

import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import report  # noqa: E402

RUN = {"run": "2026-12-05 10:00 UTC", "date": "2026-12-05 10:01 UTC", "commit": "0123456789ab",
       "cpu": "AMD EPYC (family 25, model 1)", "vector extensions": "sse4_2 avx avx2 fma f16c",
       "kernel": "6.18.44", "load before": "0.20 0.30 0.40", "load after": "1.90 0.80 0.50"}


def result(system, samples, stamp):
    """A result file's content: `samples` maps a series name to its values."""
    res = {"system": system, "bench": "fake", "meta": {},
           "samples": {name: {"unit": "us", "values": values} for name, values in samples.items()}}
    if stamp is not None:
        res["stamp"] = stamp
    return res


def dispatch(stamp):
    return {"dispatch-radix": result("radix", {"radix Executable::call + wait": [5, 6, 7, 9],
                                               "PJRT execute + wait (floor)": [4, 5, 5, 6]}, stamp),
            "dispatch-jax": result("jax", {"jax.jit call + block_until_ready": [9, 10, 12]}, stamp)}


def train(stamp):
    return {f"train-{system}-1": result(system, {f"{system} train mnist": [1.0, 1.5, 2.0]}, stamp)
            for system in ("radix", "jax", "torch")}


def check(files, profiles=()):
    """BENCHMARKS.md written from these result files (name -> content) and
    profiles (names of `profile-NAME.txt` to write)."""
    with tempfile.TemporaryDirectory() as results:
        for name, content in files.items():
            with open(os.path.join(results, f"{name}.json"), "w") as f:
                json.dump(content, f)
        for name in profiles:
            with open(os.path.join(results, f"profile-{name}.txt"), "w") as f:
                f.write("    50.00%  libc.so.6\n")
        out = os.path.join(results, "BENCHMARKS.md")
        report.main(results, out)
        with open(out) as f:
            return f.read()


def line_after(md, heading):
    """The first non-empty line after the line starting with `heading`."""
    lines = md.splitlines()
    i = next(i for i, line in enumerate(lines) if line.startswith(heading))
    return next(line for line in lines[i + 1:] if line.strip())


class Provenance(unittest.TestCase):
    def test_one_run_when_every_stamp_agrees(self):
        other_load = dict(RUN, **{"load before": "0.10 0.1 0.1", "load after": "0.60 0.5 0.5"})
        md = check({**dispatch(RUN), **train(other_load)})
        self.assertIn("One run: every section below comes from the same `bench/run` (run 2026-12-05 10:00 UTC, "
                      "commit `0123456789ab`, AMD EPYC (family 25, model 1), sse4_2 avx avx2 fma f16c, "
                      "kernel 6.18.44).", md)
        self.assertNotIn("Not one run", md)
        self.assertEqual(line_after(md, "## 1. Dispatch"),
                         "*From run 2026-12-05 10:00 UTC, commit `0123456789ab`, AMD EPYC (family 25, model 1), "
                         "sse4_2 avx avx2 fma f16c, kernel 6.18.44; load average (1 min) 0.20 before its steps, "
                         "1.90 after.*")
        self.assertIn("load average (1 min) 0.10 before its steps, 0.60 after.*", line_after(md, "## 6. One"))

    def test_another_commit_is_another_run(self):
        md = check({**dispatch(RUN), **train(dict(RUN, commit="fedcba987654"))})
        self.assertNotIn("One run", md)
        self.assertIn("**Not one run.** The sections below come from 2 runs", md)
        self.assertIn("- run 2026-12-05 10:00 UTC, commit `0123456789ab`, AMD EPYC (family 25, model 1), "
                      "sse4_2 avx avx2 fma f16c, kernel 6.18.44: §1 dispatch\n", md)
        self.assertIn("commit `fedcba987654`, AMD EPYC (family 25, model 1), sse4_2 avx avx2 fma f16c, "
                      "kernel 6.18.44: §6 training\n", md)
        self.assertIn("commit `fedcba987654`", line_after(md, "## 6. One"))
        self.assertIn("*Not one run: a row may set", line_after(md, "## Targets"))

    def test_another_cpu_or_run_or_diff_is_another_run(self):
        for change in [{"cpu": "Intel Xeon (family 6, model 143)"}, {"vector extensions": "avx2 avx512f"},
                       {"run": "2026-12-05 11:00 UTC"}, {"dirty diff sha256": "ab" * 32}]:
            with self.subTest(change=change):
                md = check({**dispatch(RUN), **train(dict(RUN, **change))})
                self.assertIn("**Not one run.**", md)
        md = check({**dispatch(dict(RUN, **{"dirty diff sha256": "ab" * 32})), **train(dict(RUN))})
        self.assertIn("commit `0123456789ab` + uncommitted changes (diff sha256 `abababababababab`)",
                      line_after(md, "## 1. Dispatch"))

    def test_unstamped_results_are_never_one_run(self):
        md = check(dispatch(None))
        self.assertIn("**Not one run.** The sections below come from 1 runs", md)
        self.assertIn("- run ?, unstamped (written before results carried their commit and machine): "
                      "§1 dispatch", md)

    def test_a_section_from_two_runs_says_so(self):
        files = dispatch(RUN)
        files["dispatch-jax"]["stamp"] = dict(RUN, run="2026-12-04 09:00 UTC")
        line = line_after(check(files), "## 1. Dispatch")
        self.assertTrue(line.startswith("*Not one run: this section's figures come from 2 runs: (1) run "
                                        "2026-12-04 09:00 UTC"), line)
        self.assertIn("(2) run 2026-12-05 10:00 UTC", line)

    def test_a_profile_carries_its_stamp(self):
        profile = {"system": "perf", "bench": "profile", "samples": {}, "stamp": RUN}
        md = check({**dispatch(RUN), "profile-trace": profile}, profiles=["trace", "decode"])
        self.assertIn("One run:", md)
        self.assertTrue(line_after(md, "**trace**").startswith("*From run 2026-12-05 10:00 UTC"))
        self.assertEqual(line_after(md, "**decode**"), "*Unstamped: from a run before profiles carried stamps.*")

    def test_a_profile_of_another_run_breaks_one_run(self):
        profile = {"system": "perf", "bench": "profile", "samples": {}, "stamp": dict(RUN, commit="fedcba987654")}
        md = check({**dispatch(RUN), "profile-trace": profile}, profiles=["trace"])
        self.assertIn("kernel 6.18.44: the trace profile\n", md)


class Training(unittest.TestCase):
    def test_the_bf16_step_is_a_row_of_the_llama_table_when_measured(self):
        lm = {"radix train lm": [4.0, 4.5, 5.0], "radix train lm bf16": [5.0, 6.0, 7.0]}
        files = {**dispatch(RUN), **train(RUN)}
        files["train-radix-1"]["samples"].update(
            {name: {"unit": "ms", "values": values} for name, values in lm.items()})
        md = check(files)
        lm_table = md[md.index("**small llama"):]
        self.assertIn("| radix, bf16 mixed precision (radix = its f32 step) | 6.00 ms |", lm_table)
        self.assertNotIn("bf16", md[md.index("**MNIST MLP"):md.index("**small llama")])
        self.assertIn("The llama's step also in mixed precision", md)
        without = check({**dispatch(RUN), **train(RUN)})
        self.assertNotIn("bf16 mixed precision (radix", without)
        self.assertNotIn("The llama's step also in mixed precision", without)


    def test_the_lora_step_and_jax_on_the_plugin_are_rows_when_measured(self):
        files = {**dispatch(RUN), **train(RUN)}
        files["train-radix-1"]["samples"]["radix train lora"] = {"unit": "ms", "values": [600.0, 700.0]}
        files["train-torch-1"]["samples"]["torch train lora"] = {"unit": "ms", "values": [900.0, 1000.0]}
        files["train-jaxplugin-1"] = result("jax-plugin", {}, RUN)
        files["train-jaxplugin-1"]["samples"]["jax-plugin train lm"] = {"unit": "ms", "values": [2.0, 2.5, 3.0]}
        md = check(files)
        lora = md[md.index("**LoRA on SmolLM2"):]
        self.assertIn("| radix (`LoraTrainer`) | 650 ms |", lora)
        self.assertIn("| PyTorch + PEFT | 950 ms |", lora)
        self.assertIn("| JAX on radix's CPU plugin (the same runtime) | 2.50 ms |", md[md.index("**small llama"):])
        without = check({**dispatch(RUN), **train(RUN)})
        self.assertNotIn("LoRA on SmolLM2", without)
        self.assertNotIn("radix's CPU plugin (the same", without)

    def test_the_trace_before_issue_27_is_a_row_and_a_target_when_measured(self):
        def trace(prefix, total, passes):
            return result("radix", {f"{prefix}radix trace + print": total,
                                    f"{prefix}radix trace (with passes)": passes}, RUN)
        files = {**dispatch(RUN), "trace-radix-1": trace("", [30.0, 32.0], [20.0, 22.0]),
                 "trace-before-1": trace("before issue 27: ", [31.0, 33.0], [21.0, 23.0])}
        files["trace-before-1"]["meta"]["built_from"] = "723b688f232f"
        md = check(files)
        self.assertIn("| radix before issue 27 (`723b688f232f`): trace + print | 32.0 µs |", md)
        self.assertIn("| trace with passes vs before issue 27 (every node checked by its rule) "
                      "| 21.0 ms vs 22.0 ms (0.95×) | ≤ 1× (as fast) | **met** |", md)
        without = check({**dispatch(RUN), "trace-radix-1": trace("", [30.0], [20.0])})
        self.assertNotIn("before issue 27", without)


class Spread(unittest.TestCase):
    def test_tables_print_min_and_max_beside_the_median(self):
        md = check(dispatch(RUN))
        self.assertIn("| system | median | min–max | n | radix / this |", md)
        self.assertIn("| radix `Executable::call` + wait | 6.50 µs | 5.00–9.00 | 4 | 1 |", md)
        self.assertIn("| `jax.jit` call + `block_until_ready` | 10.0 µs | 9.00–12.0 | 3 |", md)


class Stamp(unittest.TestCase):
    def stamp(self, env):
        report_line = '{"system": "x", "bench": "y", "samples": {}}'
        p = subprocess.run([sys.executable, os.path.join(HERE, "peers", "machine.py"), "stamp", "0.25 0.5 0.75"],
                           input="a log line\n" + report_line + "\n", capture_output=True, text=True,
                           env={**os.environ, **env}, check=True)
        return json.loads(p.stdout)["stamp"]

    def test_the_stamp_names_run_commit_diff_machine_and_load(self):
        s = self.stamp({"BENCH_RUN": "2026-12-05 10:00 UTC", "BENCH_COMMIT": "0123456789ab",
                        "BENCH_DIRTY_SHA256": "cd" * 32})
        self.assertEqual((s["run"], s["commit"], s["dirty diff sha256"], s["load before"]),
                         ("2026-12-05 10:00 UTC", "0123456789ab", "cd" * 32, "0.25 0.5 0.75"))
        self.assertEqual(len(s["load after"].split()), 3)
        for key in ("date", "cpu", "vector extensions", "kernel"):
            self.assertTrue(s[key], key)

    def test_a_clean_tree_has_no_diff(self):
        env = {"BENCH_RUN": "r", "BENCH_COMMIT": "c", "BENCH_DIRTY_SHA256": ""}
        self.assertNotIn("dirty diff sha256", self.stamp(env))


if __name__ == "__main__":
    unittest.main()
