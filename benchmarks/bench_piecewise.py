"""Speed and accuracy of kernels of piecewise-linear activations with kinks off the origin.

hard_tanh (kinks at ±1) and a shifted step have closed-form pair expectations (Tallis' truncated moments
with Owen's T, :mod:`netsor.gaussian.piecewise`); before, their pairs went to the Mehler series (which
converges algebraically for such kinks) and to nested 2-D quadrature. Rows: the NNGP of a depth-3
MLP (σ_w 1.5, σ_b 0.1) on N inputs (``--n``, default 200 and 1000), with its largest reported bound
relative to √(K_ii K_jj), and the ratio to a tanh MLP of the same size measured in the same run
(medians of ``--repeats``, interleaved).

Run::

    python benchmarks/bench_piecewise.py
"""

from __future__ import annotations

import argparse
import os

import numpy as np
from common import finish, interleaved_medians

import netsor


def _row(n: int, repeats: int) -> dict:
    X = np.random.default_rng(0).standard_normal((n, 10))
    progs = {act: netsor.zoo.mlp(3, act, 1.5, 0.1) for act in ("hard_tanh", "tanh")}
    calls = {act: (lambda p=p: netsor.limit(p, X).nngp(with_error=True)) for act, p in progs.items()}
    med, res = interleaved_medians(calls, repeats)
    K, E = res["hard_tanh"]
    d = np.sqrt(np.diag(K))
    row = {"n": n, "median_s": med, "ratio_to_tanh": med["hard_tanh"] / med["tanh"],
           "relative_bound": float(np.max(E / np.outer(d, d)))}
    print(f"  N = {n:5d}: hard_tanh {med['hard_tanh']:7.3f} s, tanh {med['tanh']:7.3f} s "
          f"({row['ratio_to_tanh']:.1f}×); largest bound {row['relative_bound']:.1e} of √(K_ii K_jj)")
    return row


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, nargs="*", default=[200, 1000])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    print(f"NNGP of a depth-3 MLP, rtol 1e-8 ({os.cpu_count()} CPUs), medians of {args.repeats}")
    fig = {"loadavg_start": os.getloadavg(), "cpus": os.cpu_count(), "rows": [_row(n, args.repeats) for n in args.n]}
    return finish(fig, args.json)


if __name__ == "__main__":
    raise SystemExit(main())
