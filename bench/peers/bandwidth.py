"""This machine's memory copy bandwidth, measured in the same run: numpy
copies of a 512 MiB array (much larger than the caches), on 1 thread and on
2 threads each copying half, reported as bytes read per second (a copy
reads N bytes and writes N); and, for reference, a read-only sum on 2 threads."""

import argparse
import threading
import time

import numpy as np

from common import Report, blas_info

ap = argparse.ArgumentParser()
ap.add_argument("--mib", type=int, default=512)
ap.add_argument("--samples", type=int, default=10)
args = ap.parse_args()

n = args.mib * 2**20 // 4
src = np.ones(n, np.float32)
dst = np.zeros_like(src)
np.copyto(dst, src)


def one():
    t = time.perf_counter()
    np.copyto(dst, src)
    return src.nbytes / (time.perf_counter() - t) / 1e9


def two():
    h = n // 2
    parts = [threading.Thread(target=np.copyto, args=(dst[i * h:(i + 1) * h], src[i * h:(i + 1) * h]))
             for i in range(2)]
    t = time.perf_counter()
    for p in parts:
        p.start()
    for p in parts:
        p.join()
    return src.nbytes / (time.perf_counter() - t) / 1e9


def read(threads):
    """Bytes read per second by a sum over the array (no writes), in `threads` parts."""
    h = n // threads
    parts = [threading.Thread(target=np.add.reduce, args=(src[i * h:(i + 1) * h],)) for i in range(threads)]
    t = time.perf_counter()
    for p in parts:
        p.start()
    for p in parts:
        p.join()
    return src.nbytes / (time.perf_counter() - t) / 1e9


r = Report("numpy", "bandwidth")
r.add("copy, 1 thread", "GB/s", [one() for _ in range(args.samples)])
r.add("copy, 2 threads", "GB/s", [two() for _ in range(args.samples)])
r.add("read (sum), 2 threads", "GB/s", [read(2) for _ in range(args.samples)])
r.meta.update(numpy=np.__version__, mib=args.mib, blas=blas_info())
r.finish()
