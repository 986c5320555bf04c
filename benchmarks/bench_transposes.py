"""Time Netsor⊤ limits: the engine's exact matrix laws against the simulation's Stein-lemma ``Ż``,
what only the simulation computes (Jacobian moments of a nonlinear MLP against the Free
Independence Principle), and the exact NTK of a transposed program that reads data by both.

Rows (each with its largest error against an independent reference, and its reported bound, both
relative to ``√(K_ii K_jj)``):

* semicircle moments up to order 8: engine (exact) and simulation (rtol 2e-3), against Catalan numbers;
* Jacobian moments m₁…m₄ of a depth-2 tanh MLP by simulation (rtol 1e-2), against
  ``netsor.matrixlaws.jacobian_spectrum(...).moments`` (S-transforms of the FIP);
* NTK of ``Wᵀ tanh(W U x)`` on 3 inputs, exact backward pass: by the engine (default rtol; its
  ``E[∂φ]`` are per-input scalars), with the gradient-independent NTK beside it for the difference,
  and by simulation (rtol 5e-3) against the engine's.

Medians of ``--repeats`` (default 3). Run::

    python benchmarks/bench_transposes.py
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from math import comb

import numpy as np
from common import finish

import netsor


def _timed(fn, repeats: int):
    times, out = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def _relative(A: np.ndarray, ref: np.ndarray) -> float:
    d = np.sqrt(np.abs(np.diag(ref)))
    return float(np.max(np.abs(A) / np.outer(d, d)))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    fig: dict = {"loadavg_start": os.getloadavg(), "cpus": os.cpu_count(), "rows": []}
    print(f"Netsor⊤ limits ({os.cpu_count()} CPUs), medians of {args.repeats}")
    hankel = np.array([[comb(i + j, (i + j) // 2) // ((i + j) // 2 + 1) if (i + j) % 2 == 0 else 0
                        for j in range(5)] for i in range(5)], dtype=float)
    semicircle = netsor.zoo.semicircle_moments(4)
    for method, rtol in (("expectations", 1e-8), ("qmc", 2e-3)):
        t, (K, E) = _timed(lambda m=method, r=rtol: netsor.limit(semicircle, method=m, rtol=r).nngp(with_error=True),
                           args.repeats)
        fig["rows"].append({"what": f"semicircle k<=4 ({method})", "s": t, "error": _relative(K - hankel, hankel),
                            "bound": _relative(E, hankel)})
    jac = netsor.zoo.jacobian_moments(2, 2, "tanh", 1.3, 0.2, q0=1.0)
    m = netsor.matrixlaws.jacobian_spectrum("tanh", 2, 1.3, 0.2, q0=1.0).moments(4)
    ref = np.array([[m[i + j - 1] if i + j else 1.0 for j in range(3)] for i in range(3)])
    t, (K, E) = _timed(lambda: netsor.limit(jac, method="qmc", rtol=1e-2).nngp(with_error=True), args.repeats)
    fig["rows"].append({"what": "Jacobian moments, tanh depth 2 (qmc)", "s": t, "error": _relative(K - ref, ref),
                        "bound": _relative(E, ref)})
    p = netsor.Program("transposed with data")
    n = p.dim("n")
    W = p.matrix(n, n, sigma=1.2)
    p.readout(W.T @ netsor.tanh(W @ p.input(n)))
    X = np.random.default_rng(9).standard_normal((3, 3))
    t, exact = _timed(lambda: netsor.kernel(p, X, get="ntk", method="expectations"), args.repeats)
    gia = netsor.kernel(p, X, get="ntk", backward="independent").ntk
    fig["rows"].append({"what": "exact NTK of W^T tanh(W U x), 3 inputs (expectations)", "s": t,
                        "error": float("nan"), "bound": _relative(exact.ntk_error, exact.ntk),
                        "independent_off_by": _relative(gia - exact.ntk, exact.ntk)})
    t, k = _timed(lambda: netsor.kernel(p, X, get="ntk", rtol=5e-3, method="qmc"), args.repeats)
    fig["rows"].append({"what": "exact NTK of W^T tanh(W U x), 3 inputs (qmc)", "s": t,
                        "error": _relative(k.ntk - exact.ntk, exact.ntk), "bound": _relative(k.ntk_error, exact.ntk)})
    for row in fig["rows"]:
        extra = (f"   gradient independence off by {row['independent_off_by']:.2f}"
                 if "independent_off_by" in row else "")
        error = "   —   " if np.isnan(row["error"]) else f"{row['error']:.1e}"
        print(f"  {row['what']:<46} {row['s']:7.2f} s   error {error}   bound {row['bound']:.1e}{extra}")
    return finish(fig, args.json)


if __name__ == "__main__":
    raise SystemExit(main())
