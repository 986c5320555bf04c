"""Time the matrix-free finite-width sampler against the dense one (DESIGN §3).

Network: ``netsor.zoo.mlp(--depth, "relu", 1, 0)`` (depth 10 by default) on B = ``--b`` random
Gaussian inputs of dimension ``--d`` (8 and 100 by default), float64, ``netsor.sample``.
What is measured, in this order (the width-10⁶ run comes first so that the process's peak RSS,
``ru_maxrss``, is its own and not the dense sampler's):

1. Width ``--big-width`` (10⁶) with ``method="matrix-free"``: one call of ``--big-samples``
   networks (4) after a small warm-up; time per network and peak RSS before / after.
2. Width ``--width`` (4096): ``method="dense"`` on ``--dense-samples`` networks (4; each one
   materialises ``depth - 1`` matrices of width² Gaussians), median of ``--dense-repeats`` calls,
   against ``method="matrix-free"`` on ``--mf-samples`` networks (1000), median of ``--repeats``
   calls. Reported: time per network of each and the ratio dense / matrix-free (goal >= 100).
3. Networks per second of the matrix-free sampler at widths 256 and 4096 with S = ``--mf-samples``
   (the 4096 figure is the run of step 2).

Each timed configuration gets one warm-up call on a small problem first. Machines are noisy:
medians are quoted, and the ratio comes from timings of the same run.

Run::

    python benchmarks/bench_samplers.py
    python benchmarks/bench_samplers.py --json samplers.json --dense-repeats 3
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import statistics
import sys
import time

import numpy as np
from common import finish

import netsor

GIB = 2**30


def maxrss_bytes() -> int:
    """Peak resident set size of this process so far (Linux reports KiB, macOS bytes)."""
    r = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(r) if sys.platform == "darwin" else int(r) * 1024


def median_time(fn, repeats: int) -> tuple[float, list[float]]:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), times


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--depth", type=int, default=10)
    p.add_argument("--b", type=int, default=8, help="number of inputs B (default 8)")
    p.add_argument("--d", type=int, default=100, help="input dimension (default 100)")
    p.add_argument("--width", type=int, default=4096, help="width of the dense comparison (default 4096)")
    p.add_argument("--dense-samples", type=int, default=4)
    p.add_argument("--dense-repeats", type=int, default=1)
    p.add_argument("--mf-samples", type=int, default=1000, help="S of the matrix-free runs (default 1000)")
    p.add_argument("--repeats", type=int, default=3, help="timed calls of each matrix-free run (default 3)")
    p.add_argument("--small-width", type=int, default=256)
    p.add_argument("--big-width", type=int, default=10**6)
    p.add_argument("--big-samples", type=int, default=4)
    p.add_argument("--no-big", action="store_true", help="skip the width --big-width run")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default=None, metavar="OUT", help="write all figures to this JSON file")
    args = p.parse_args(argv)
    for name in ("dense_samples", "dense_repeats", "mf_samples", "repeats", "big_samples"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    X = np.random.default_rng(args.seed).standard_normal((args.b, args.d))
    net = netsor.zoo.mlp(args.depth, "relu", 1.0, 0.0)
    fig: dict = {"depth": args.depth, "B": args.b, "d": args.d, "cpu_count": os.cpu_count(),
                 "numpy": np.__version__, "netsor": netsor.__version__, "python": platform.python_version(),
                 "loadavg_start": os.getloadavg()}

    def run(method: str, width: int, samples: int, seed: int = args.seed):
        return netsor.sample(net, X, width=width, samples=samples, seed=seed, method=method)

    print(f"netsor samplers: MLP depth {args.depth} relu, B = {args.b}, d = {args.d}, float64 "
          f"({os.cpu_count()} CPUs)")
    run("matrix-free", 256, 4)
    run("dense", 256, 2)

    # 1. width 10⁶, matrix-free
    if not args.no_big:
        rss0 = maxrss_bytes()
        t0 = time.perf_counter()
        out = run("matrix-free", args.big_width, args.big_samples)
        t_big = time.perf_counter() - t0
        rss1 = maxrss_bytes()
        fig.update(big_width=args.big_width, big_samples=args.big_samples, big_s=t_big,
                   big_per_network_s=t_big / args.big_samples, big_rss_before=rss0, big_rss_after=rss1,
                   big_finite=bool(np.isfinite(out).all()))
        print(f"  matrix-free, width {args.big_width:,}: {args.big_samples} networks in {t_big:.2f} s = "
              f"{t_big / args.big_samples:.3f} s / network; peak RSS {rss0 / GIB:.2f} -> {rss1 / GIB:.2f} GiB")

    # 2. dense vs matrix-free at --width
    w = args.width
    t_dense, dense_times = median_time(lambda: run("dense", w, args.dense_samples), args.dense_repeats)
    t_mf, mf_times = median_time(lambda: run("matrix-free", w, args.mf_samples), args.repeats)
    per_dense, per_mf = t_dense / args.dense_samples, t_mf / args.mf_samples
    ratio = per_dense / per_mf
    fig.update(width=w, dense_samples=args.dense_samples, dense_times_s=dense_times,
               dense_per_network_s=per_dense, mf_samples=args.mf_samples, mf_times_s=mf_times,
               mf_per_network_s=per_mf, dense_over_mf=ratio, rss_after_dense=maxrss_bytes())
    print(f"  width {w}: dense {args.dense_samples} networks, median {t_dense:.2f} s = "
          f"{per_dense * 1e3:.1f} ms / network;  matrix-free {args.mf_samples} networks, median "
          f"{t_mf:.2f} s = {per_mf * 1e3:.3f} ms / network")
    print(f"  dense / matrix-free per network = {ratio:.0f}x (goal >= 100: {'met' if ratio >= 100 else 'MISSED'})")

    # 3. networks per second
    t_small, small_times = median_time(lambda: run("matrix-free", args.small_width, args.mf_samples),
                                       args.repeats)
    fig.update(small_width=args.small_width, small_times_s=small_times,
               nets_per_s={str(args.small_width): args.mf_samples / t_small, str(w): args.mf_samples / t_mf})
    for width, t in ((args.small_width, t_small), (w, t_mf)):
        print(f"  matrix-free width {width:5d}, S = {args.mf_samples}: median {t:.2f} s = "
              f"{args.mf_samples / t:,.0f} networks / s")

    return finish(fig, args.json)


if __name__ == "__main__":
    raise SystemExit(main())
