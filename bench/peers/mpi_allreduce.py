"""mpi4py's `Allreduce` (sum) of an f32 vector between processes on this
machine: the peer of `radix-bench all-reduce`, the same vector and the same
mpich build (the `mpich` wheel of the pin radix fetches).

Run plainly, it starts itself as a job of `--ranks` processes through the
wheel's `mpiexec` and prints rank 0's report; as a rank, it times
`--samples` samples of `--calls-per-sample` calls, after two warm-up samples.
"""

import argparse
import os
import subprocess
import sys
import time

from common import Report

RANK_ENV = "MPI_ALLREDUCE_RANK"


def rank_main(a):
    import numpy as np
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank, n = comm.Get_rank(), comm.Get_size()
    assert n == a.ranks, f"a job of {n} ranks, {a.ranks} asked"
    length = a.mib * (1 << 20) // 4
    i = np.arange(length)
    x = (rank + (i % 1024) / 1024).astype(np.float32)
    out = np.empty_like(x)
    comm.Allreduce(x, out, op=MPI.SUM)
    want = (n * (n - 1) / 2 + n * (i % 1024) / 1024).astype(np.float32)
    assert np.array_equal(out, want), "the sum differs from the exact one"
    values = []
    for _ in range(a.samples + 2):
        t = time.perf_counter()
        for _ in range(a.calls_per_sample):
            comm.Allreduce(x, out, op=MPI.SUM)
        values.append((time.perf_counter() - t) / a.calls_per_sample * 1e3)
    if rank == 0:
        r = Report("mpi4py", "all_reduce")
        r.add(f"mpi4py Allreduce {a.mib} MiB {n} ranks", "ms", values[2:])
        r.meta.update(ranks=n, bytes=int(x.nbytes), calls_per_sample=a.calls_per_sample,
                      mpi=MPI.Get_library_version().splitlines()[0],
                      mpi4py=__import__("mpi4py").__version__)
        r.finish()


def launch(a):
    mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    cmd = [mpiexec, "-n", str(a.ranks), sys.executable, os.path.abspath(__file__), *sys.argv[1:]]
    env = dict(os.environ, **{RANK_ENV: "1"})
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        raise SystemExit(f"the mpi4py job failed ({out.returncode}):\n{out.stderr[-3000:]}")
    lines = [l for l in out.stdout.splitlines() if '"bench": "all_reduce"' in l]
    if not lines:
        raise SystemExit(f"rank 0 printed no report:\n{out.stdout[-3000:]}")
    print(lines[-1])


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--mib", type=int, default=4)
    p.add_argument("--samples", type=int, default=20)
    p.add_argument("--calls-per-sample", type=int, default=20)
    a = p.parse_args()
    if os.environ.get(RANK_ENV):
        rank_main(a)
    else:
        launch(a)


if __name__ == "__main__":
    main()
