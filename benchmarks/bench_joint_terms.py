"""Accuracy and speed of kernels of nonlinearities of several G-vectors (joint terms).

For every case of ``tests/test_joint_terms.py`` (products and compositions of kinked functions
of independent and correlated G-vectors, three- and four-argument products, a function the
tracer cannot see through):

1. accuracy on ``--n-accuracy`` inputs at ``--rtol`` (1e-7; the opaque case at ``--qmc-rtol``; a
   case refused there — its bound cannot meet it — is printed as refused and run at the next of
   1e-6, 1e-4, 1e-2): the largest true error against the independent reference of
   ``tests/references.py`` and the largest reported bound, both relative to √(K_ii K_jj), and
   whether the bound covers the error at every entry;
2. time of the whole NNGP on ``--n`` inputs (median of ``--repeats`` after a warm-up), with the
   time per pair, and the ratio to the NNGP of a one-argument tanh program on the same inputs
   measured in the same run (the baseline: one Mehler series per layer);
3. the same on ``--n-large`` inputs (1000) for every case with an exact path (and, with
   ``--large-all``, the cases of ``SLOW_LARGE`` at the rtol they met: tens of minutes to hours — the
   conditioned pairs cost 10–30 ms each), with the ratio to a tanh NNGP of that size measured in the
   same run.

Run::

    python benchmarks/bench_joint_terms.py                 # n = 200, 3 repeats, N = 1000 figure
    python benchmarks/bench_joint_terms.py --n 100 --repeats 1 --json joint.json
    python benchmarks/bench_joint_terms.py --cases "c·tanh(a + c/2), correlated"   # one case
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np
from common import finish, median_time

import netsor

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from test_joint_terms import EXACT, OFFSET_KINKS, build, reference  # noqa: E402  (the test suite's cases and references)

OPAQUE = "opaque relu(a)·relu(c)"
#: Tolerances tried in turn after ``--rtol`` when a case's bound cannot meet it (each refusal is printed).
RTOL_LADDER = [1e-6, 1e-4, 1e-2]
#: Cases timed on ``--n-large`` inputs only with ``--large-all`` (the compositions: nearly colinear pairs, or for
#: the curved kink every pair, conditioned at 10–30 ms a pair; kinks off the origin: Hermite tables and a Mehler
#: series per pair, minutes).
SLOW_LARGE = ("tanh(relu(a) + c)", "relu(b + tanh(a)), a kink on a curve", *OFFSET_KINKS)



def accuracy(case: str, X: np.ndarray, rtol: float) -> tuple[float, float, bool]:
    """(largest true error, largest bound, bound ≥ error everywhere), relative to √(K_ii K_jj)."""
    K, E = netsor.limit(build(case), X, rtol=rtol).nngp(with_error=True)
    ref = reference(case, X, nodes=(64, 100))  # the finer reference rule: good to 1e-14 on any inputs
    scale = np.sqrt(np.outer(np.diag(ref), np.diag(ref)))
    true = np.abs(K - ref)
    return float(np.max(true / scale)), float(np.max(E / scale)), bool(np.all(true <= E + 1e-13 * scale))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=200, help="inputs of the timed kernel")
    parser.add_argument("--n-accuracy", type=int, default=6, help="inputs of the accuracy check")
    parser.add_argument("--d", type=int, default=6, help="input dimension")
    parser.add_argument("--n-large", type=int, default=1000, help="inputs of the large timing (0: skip)")
    parser.add_argument("--rtol", type=float, default=1e-7, help="tolerance of the accuracy check and timings")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--qmc-rtol", type=float, default=1e-2, help="rtol of the opaque (QMC) case")
    parser.add_argument("--no-opaque", action="store_true", help="skip the opaque (QMC) case (minutes at n = 100)")
    parser.add_argument("--large-all", action="store_true",
                        help="also time " + ", ".join(SLOW_LARGE) + " on --n-large inputs (at the rtol their accuracy "
                             "check met)")
    parser.add_argument("--cases", nargs="+", default=None, help="only these cases (their names as printed)")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    every = [*EXACT, *OFFSET_KINKS] + ([] if args.no_opaque else [OPAQUE])
    cases = [c for c in every if args.cases is None or c in args.cases]

    fig: dict = {"loadavg_start": os.getloadavg(), "n": args.n, "d": args.d, "cases": {}}
    rng = np.random.default_rng(0)
    X_acc = rng.standard_normal((args.n_accuracy, args.d))
    X = rng.standard_normal((args.n, args.d))
    p_tanh = netsor.zoo.mlp(1, "tanh", 1.0, 0.2)
    base = median_time(lambda: netsor.nngp(p_tanh, X), args.repeats)
    pairs = args.n * (args.n + 1) // 2
    print(f"joint-term kernels, d = {args.d}; accuracy on {args.n_accuracy} inputs, time on {args.n} inputs "
          f"({os.cpu_count()} CPUs)")
    print(f"  baseline: one-argument tanh NNGP {base * 1e3:.1f} ms")
    print(f"  {'case':36s} {'rtol':>7s} {'true err':>9s} {'bound':>9s} {'covers':>6s} {'time':>9s} {'µs/pair':>8s}"
          f" {'/ tanh':>7s}")
    for case in cases:
        # the smallest rtol of the ladder whose bound is met on both input sets (refusals printed)
        first = args.qmc_rtol if case == OPAQUE else args.rtol
        for rtol in [first] + [r for r in RTOL_LADDER if r > first]:
            try:
                true, bound, covers = accuracy(case, X_acc, rtol)
                p = build(case)
                t = median_time(lambda p=p, rtol=rtol: netsor.nngp(p, X, rtol=rtol), args.repeats)
                break
            except netsor.NumericalError as exc:
                print(f"  {case:36s} refused at rtol = {rtol:g}: {str(exc)[:80]}...")
        else:
            continue
        fig["cases"][case] = {"rtol": rtol, "true_error": true, "bound": bound, "covers": covers,
                              "time_s": t, "us_per_pair": t / pairs * 1e6, "ratio_to_tanh": t / base}
        print(f"  {case:36s} {rtol:7.0e} {true:9.1e} {bound:9.1e} {'yes' if covers else 'NO':>6s} {t * 1e3:7.0f} ms "
              f"{t / pairs * 1e6:8.2f} {t / base:7.1f}")
    fig["baseline_tanh_s"] = base
    if args.n_large:
        X_large = rng.standard_normal((args.n_large, args.d))
        base_large = median_time(lambda: netsor.nngp(p_tanh, X_large), args.repeats)
        print(f"  N = {args.n_large}: one-argument tanh NNGP {base_large:.2f} s")
        fig["large"] = {"n": args.n_large, "baseline_tanh_s": base_large, "cases": {}}
        for case in cases:
            if case == OPAQUE or case not in fig["cases"] or (case in SLOW_LARGE and not args.large_all):
                continue
            p, rtol = build(case), fig["cases"][case]["rtol"]
            if case in SLOW_LARGE:  # one call, no warm-up: minutes, so start-up costs are negligible
                t0 = time.perf_counter()
                netsor.nngp(p, X_large, rtol=rtol)
                t = time.perf_counter() - t0
            else:
                t = median_time(lambda p=p, rtol=rtol: netsor.nngp(p, X_large, rtol=rtol), args.repeats)
            fig["large"]["cases"][case] = {"rtol": rtol, "time_s": t, "ratio_to_tanh": t / base_large}
            print(f"  {case:36s} {rtol:7.0e} {t:7.2f} s  {t / base_large:5.1f}× tanh")
    return finish(fig, args.json)


if __name__ == "__main__":
    raise SystemExit(main())
