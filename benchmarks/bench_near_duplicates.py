"""Kernels (NNGP and NTK) at nearly duplicate inputs: the cost of kinks off the origin there, in one run.

Rows, depth-3 MLP (σ_w 1.5, σ_b 0.3), N inputs of dimension 8, rtol 1e-8:

* hard_tanh on N random inputs, and on N/2 random inputs with a copy of each 1e-6 away — the engine carries the
  distances between the points from the start there (``NEAR_INPUTS_ANGLE``), against the same call whose first
  attempt goes without them and is retried (``NEAR_INPUTS_ANGLE = 0``: the previous behaviour), and tanh on the
  nearly duplicate inputs as the baseline;
* ``relu(x) + 0.1 tanh(x)`` (traced) on ``--n-mixed`` inputs, half of them copies 1e-3 away from the others: its NTK's
  pair ``step + 0.1 tanh'`` has no closed form (refused before at 3.4e-7 relative), with the bound reached.

Each time is a median of ``--repeats`` after a warm-up; calls interleaved. Run::

    python benchmarks/bench_near_duplicates.py            # N = 200, 40 mixed, 3 repeats (~6 min on 2 cores)
"""

from __future__ import annotations

import argparse
import os

import numpy as np
from common import finish, interleaved_medians

import netsor
from netsor.interpret import infinite


def _with_copies(n: int, d: int, apart: float, seed: int = 0) -> np.ndarray:
    """n/2 standard-normal inputs and a copy of each moved by ``apart`` times a standard-normal direction."""
    rng = np.random.default_rng(seed)
    base = rng.standard_normal((n // 2, d))
    return np.concatenate([base, base + apart * rng.standard_normal(base.shape)])


def _retried(program: netsor.Program, X: np.ndarray) -> netsor.Kernels:
    """The kernel with the first attempt made without distances (the behaviour before they were given up front)."""
    saved = infinite.NEAR_INPUTS_ANGLE
    infinite.NEAR_INPUTS_ANGLE = 0.0
    try:
        return netsor.kernel(program, X)
    finally:
        infinite.NEAR_INPUTS_ANGLE = saved


def _relative_bound(k: netsor.Kernels) -> float:
    scale = np.sqrt(np.outer(np.diag(k.ntk), np.diag(k.ntk)))
    return float(np.max(k.ntk_error / scale))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=200)
    p.add_argument("--n-mixed", type=int, default=40)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    load = os.getloadavg()
    far = np.random.default_rng(1).standard_normal((args.n, 8))
    near = _with_copies(args.n, 8, 1e-6)
    hard_tanh, tanh = netsor.zoo.mlp(3, "hard_tanh", 1.5, 0.3), netsor.zoo.mlp(3, "tanh", 1.5, 0.3)
    calls = {"hard_tanh, far": lambda: netsor.kernel(hard_tanh, far),
             "hard_tanh, copies 1e-6 apart": lambda: netsor.kernel(hard_tanh, near),
             "hard_tanh, copies 1e-6 apart, retried": lambda: _retried(hard_tanh, near),
             "tanh, copies 1e-6 apart": lambda: netsor.kernel(tanh, near)}
    med, res = interleaved_medians(calls, args.repeats)
    print(f"Depth-3 MLP kernels (NNGP + NTK), N = {args.n}, d = 8, rtol 1e-8 ({os.cpu_count()} CPUs), "
          f"medians of {args.repeats}")
    for name, t in med.items():
        print(f"  {name:40s} {t:8.2f} s   NTK bound {_relative_bound(res[name]):.1e} relative")
    ratio = med["hard_tanh, copies 1e-6 apart, retried"] / med["hard_tanh, copies 1e-6 apart"]
    print(f"  distances from the start: {ratio:.1f}× faster than the retry; "
          f"{med['hard_tanh, copies 1e-6 apart'] / med['tanh, copies 1e-6 apart']:.0f}× tanh")
    mixed = netsor.zoo.mlp(3, lambda x: np.maximum(x, 0.0) + 0.1 * np.tanh(x), 1.5, 0.3)
    close = _with_copies(args.n_mixed, 8, 1e-3)
    med_mixed, res_mixed = interleaved_medians({"mixed": lambda: netsor.kernel(mixed, close)}, args.repeats)
    print(f"  relu + 0.1 tanh, N = {args.n_mixed}, copies 1e-3 apart {med_mixed['mixed']:8.2f} s   NTK bound "
          f"{_relative_bound(res_mixed['mixed']):.1e} relative")
    fig = {"loadavg_start": load, "n": args.n, "n_mixed": args.n_mixed, "cpus": os.cpu_count(),
           "median_s": med | med_mixed, "retried_over_up_front": ratio}
    return finish(fig, args.json)


if __name__ == "__main__":
    raise SystemExit(main())
