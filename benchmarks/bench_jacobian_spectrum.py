"""Timing of Jacobian-spectrum densities (1000 initial grid points, depth 20) against quoted baselines.

Baselines on these 2-core machines (from the matrix-laws issue): Newton-lilypads
0.31 s (Cython) / 1.2 s (Python) for a depth-20 linear network, 2.1 s for depth-20
ReLU; Pennington et al.'s Algorithm 1, 5.7 s. Also reported: W1 to the exact
Fuss–Catalan law, a depth-20 tanh network (implicit D² law), and the critical tanh
network (q* = 0.5, orthogonal, depth 8) whose density needs the adaptive grid. The
timings include the adaptive refinement and the mass check (``law.grid`` and ``law.cdf``
build the same table). Medians of 7 runs (3 for tanh), all in one process.
Run: ``python benchmarks/bench_jacobian_spectrum.py [--json FILE]``.
"""

from __future__ import annotations

import argparse
import os

import numpy as np
from common import finish, median_time

from netsor.matrixlaws import FussCatalan, jacobian_spectrum


def _density(act: str, sigma_w: float, sigma_b: float = 0.0, depth: int = 20, weights: str = "gaussian"):
    law = jacobian_spectrum(act, depth, sigma_w, sigma_b, weights=weights, grid_size=1000)
    _ = law.grid  # the density on the adaptive grid (1000 initial points) and its mass check
    law.cdf(np.zeros(1))
    return law


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", default=None, help="write the figures to this JSON file")
    args = parser.parse_args()
    fig: dict = {"loadavg_start": os.getloadavg()}
    t_lin = median_time(lambda: _density("identity", 1.0))
    t_relu = median_time(lambda: _density("relu", np.sqrt(2.0)))
    law = _density("identity", 1.0)
    fc = FussCatalan(20)
    xx = np.linspace(0.0, fc.support[1], 200001)
    w1 = float(np.trapezoid(np.abs(law.cdf(xx) - fc.cdf(xx)), xx))
    print(f"depth-20 linear : {t_lin * 1e3:7.1f} ms   (goal ≤ 100 ms)  ratios: "
          f"lilypads-Cython {0.31 / t_lin:5.1f}x  lilypads-Python {1.2 / t_lin:5.1f}x  "
          f"Algorithm-1 {5.7 / t_lin:5.1f}x faster   ({law.grid[0].size} grid points)")
    print(f"depth-20 ReLU   : {t_relu * 1e3:7.1f} ms   (goal ≤ 500 ms)  ratio: "
          f"lilypads {2.1 / t_relu:5.1f}x  Algorithm-1 {5.7 / t_relu:5.1f}x faster")
    print(f"W1(linear depth 20, exact Fuss–Catalan) = {w1:.2e}   (goal ≤ 5e-3); mass defect "
          f"{law.mass_defect:.1e}")
    t_tanh = median_time(lambda: _density("tanh", 1.05, 0.05), repeats=3)
    print(f"depth-20 tanh (implicit D² law, 48-node Gauss rule): {t_tanh:.2f} s")
    crit = ("tanh", 1.2992209668018506, 0.19504153688706546)
    t_crit = median_time(lambda: _density(*crit, depth=8, weights="orthogonal"), repeats=3)
    law_c = _density(*crit, depth=8, weights="orthogonal")
    print(f"critical tanh, q* = 0.5, orthogonal, depth 8: {t_crit:.2f} s, {law_c.grid[0].size} grid points, "
          f"mass defect {law_c.mass_defect:.1e}")
    fig.update(linear_s=t_lin, relu_s=t_relu, w1_fuss_catalan=w1, tanh_s=t_tanh, critical_tanh_s=t_crit,
               critical_tanh_points=int(law_c.grid[0].size), critical_tanh_mass_defect=law_c.mass_defect)
    return finish(fig, args.json)


if __name__ == "__main__":
    raise SystemExit(main())
