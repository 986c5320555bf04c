"""Timing of Jacobian-spectrum densities (1000 grid points, depth 20) against quoted baselines.

Baselines on these 2-core machines (from the matrix-laws issue): Newton-lilypads
0.31 s (Cython) / 1.2 s (Python) for a depth-20 linear network, 2.1 s for depth-20
ReLU; Pennington et al.'s Algorithm 1, 5.7 s. Also reported: W1 to the exact
Fuss–Catalan law and a depth-20 tanh network (implicit D² law). Medians of 7 runs.
Run: ``python benchmarks/bench_jacobian_spectrum.py``.
"""

from __future__ import annotations

import time

import numpy as np

from netsor.matrixlaws import FussCatalan, jacobian_spectrum


def _median_time(fn, repeats: int = 7) -> float:
    fn()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return float(np.median(times))


def _density(act: str, sigma_w: float):
    law = jacobian_spectrum(act, 20, sigma_w, grid_size=1000)
    _ = law.grid  # the density on 1000 points
    return law


def main() -> None:
    t_lin = _median_time(lambda: _density("identity", 1.0))
    t_relu = _median_time(lambda: _density("relu", np.sqrt(2.0)))
    law = _density("identity", 1.0)
    fc = FussCatalan(20)
    xx = np.linspace(0.0, fc.support[1], 200001)
    w1 = float(np.trapezoid(np.abs(law.cdf(xx) - fc.cdf(xx)), xx))
    print(f"depth-20 linear : {t_lin * 1e3:7.1f} ms   (goal ≤ 100 ms)  ratios: "
          f"lilypads-Cython {0.31 / t_lin:5.1f}x  lilypads-Python {1.2 / t_lin:5.1f}x  "
          f"Algorithm-1 {5.7 / t_lin:5.1f}x faster")
    print(f"depth-20 ReLU   : {t_relu * 1e3:7.1f} ms   (goal ≤ 500 ms)  ratio: "
          f"lilypads {2.1 / t_relu:5.1f}x  Algorithm-1 {5.7 / t_relu:5.1f}x faster")
    print(f"W1(linear depth 20, exact Fuss–Catalan) = {w1:.2e}   (goal ≤ 5e-3)")
    t_tanh = _median_time(lambda: jacobian_spectrum("tanh", 20, 1.05, 0.05).grid, repeats=3)
    print(f"depth-20 tanh (implicit D² law, 48-node Gauss rule): {t_tanh:.2f} s")


if __name__ == "__main__":
    main()
