"""How fast finite-width networks converge to their limit: one measurement per width cell.

A *study* fixes a program, inputs, a metric, the number of networks per
measurement ``samples`` and of independent replicates; each cell
``(width, replicate)`` draws fresh networks (seed derived from the cell, so
cells can run in any order, be resumed, or be farmed out) and returns the
distance and its noise floor. Metrics:

``sw1``        sliced W1 between the law of the outputs (S sampled networks) and
               the GP ``N(0, K)``; floor: the same estimator on S draws of the GP.
``rb-sw1``     Rao–Blackwellised sliced W1: given the last hidden layer the outputs
               are exactly ``N(0, K̂)``, so the finite law is the mixture of
               ``N(0, K̂_s)``; floor: the estimator's own sampling spread. Also
               records the plain ``sw1`` of the same networks for comparison.
``mmd``        unbiased Rao–Blackwellised MMD² (Gaussian kernel, closed form per
               pair of Gaussians); unbiased, so its floor is 0.
``coupling``   ``(E |y^fin − y^lim|²)^{1/2}`` of the same-noise coupling (an upper
               bound on W2 between the output laws); exact expectation, floor 0.
``kernel-lln`` ``E|K̂ − K|`` (mean absolute entry), the kernel law of large numbers.

Directions of the sliced metrics are uniform on the sphere of the joint output
vector (all inputs and outputs together) and fixed across widths (common random
numbers). :func:`summarize` turns the cells into floor-corrected distances,
per-width intervals and a log-log slope with a bootstrap 95 % CI.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from netsor.errors import HyperParameterError
from netsor.interpret.coupled import coupled
from netsor.interpret.finite import run_finite
from netsor.interpret.infinite import nngp
from netsor.ir.program import Program
from netsor.stats import distances as dist
from netsor.stats.rates import LogLogFit, cell_seed, fit_loglog, fit_with_floor, run_sweep
from netsor.validate import check_count, check_inputs

Array = np.ndarray

METRICS = ("sw1", "rb-sw1", "mmd", "coupling", "kernel-lln")
#: Metrics whose floor is an estimate of the sampling noise and gets subtracted (in quadrature).
FLOORED = ("sw1", "rb-sw1")


@dataclass
class Study:
    """A convergence study of ``program`` on inputs ``X``.

    Parameters
    ----------
    program : Program
    X : array, shape (B, d) or (B, T, d)
    metric : str
        One of :data:`METRICS`.
    samples : int
        Networks per cell.
    replicates : int
        Independent cells per width (>= 2; slope CIs bootstrap over them).
    seed : int
    directions : int
        Number of slicing directions.
    name : str
        Label used in cell keys and reports.
    """

    program: Program
    X: Any
    metric: str = "rb-sw1"
    samples: int = 2000
    replicates: int = 4
    seed: int = 0
    directions: int = 64
    name: str = ""
    K: Array = field(init=False, repr=False)
    thetas: Array = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if self.metric not in METRICS:
            raise HyperParameterError(f"unknown metric {self.metric!r}; choose one of {', '.join(METRICS)}")
        for what, value, low in (("samples", self.samples, 2), ("replicates", self.replicates, 2),
                                 ("directions", self.directions, 1)):
            check_count(value, what, low)
        self.X = check_inputs(self.program, self.X)
        self.name = self.name or self.program.name
        self.K = nngp(self.program, self.X)
        rng = np.random.default_rng(np.random.SeedSequence([self.seed, 7919]))
        self.thetas = dist.random_directions(self.K.shape[0], self.directions, rng)

    def cells(self, widths: Sequence[int]) -> list[tuple[Hashable, ...]]:
        return [(self.name, self.metric, int(w), r) for w in widths for r in range(self.replicates)]

    def measure(self, cell: tuple[Hashable, ...]) -> dict[str, float]:
        """Distance (and floor) for one cell ``(name, metric, width, replicate)``."""
        _, metric, width, _ = cell
        seq = cell_seed(cell, self.seed)
        net_seed, floor_seed = seq.spawn(2)
        if metric == "coupling":
            run = coupled(self.program, self.X, width=width, samples=self.samples, seed=_int_seed(net_seed))
            return _mean_with_error(run.output_costs_expected.mean(axis=1), root=True)
        fin = run_finite(self.program, self.X, width=width, samples=self.samples, seed=net_seed,
                         return_kernels=metric != "sw1")
        if metric == "kernel-lln":
            return _mean_with_error(np.abs(fin.kernels - self.K).mean(axis=(1, 2)))
        if metric == "mmd":
            return {"distance": dist.rb_mmd2(fin.kernels, self.K, bandwidth=dist.median_bandwidth(self.K)),
                    "floor": 0.0}
        plain = float(dist.sliced_w1_to_gaussian(fin.outputs, self.K, self.thetas))
        limit_sample = dist.gaussian_samples(self.K, self.samples, np.random.default_rng(floor_seed))
        plain_floor = float(dist.sliced_w1_to_gaussian(limit_sample, self.K, self.thetas))
        if metric == "sw1":
            return {"distance": plain, "floor": plain_floor}
        # 129 quadrature points per direction: 1e-7 relative, far below the sampling noise.
        rb, rb_floor = dist.rb_sliced_w1(fin.kernels, self.K, self.thetas, with_floor=True, num_grid=129)
        return {"distance": float(rb), "floor": float(rb_floor), "sw1": plain, "sw1_floor": plain_floor,
                "kernel_lln": float(np.abs(fin.kernels - self.K).mean())}

    def run(self, widths: Sequence[int], store: str | Path, progress: bool = True) -> Summary:
        """Measure every cell not yet in ``store`` (JSON lines, resumable) and summarise."""
        widths = _check_widths(widths)
        results = run_sweep(self.cells(widths), self.measure, store, progress=progress)
        return summarize(self, widths, results)


def _mean_with_error(per_network: Array, root: bool = False) -> dict[str, float]:
    """Mean over networks (its square root if ``root``) and its standard error as the "floor".

    For exactly-computed expectations (coupling, kernel LLN) nothing is to be subtracted;
    the standard error is the level below which changes with width are noise.
    """
    m = float(per_network.mean())
    se = float(per_network.std(ddof=1) / math.sqrt(per_network.size))
    if root:
        return {"distance": math.sqrt(m), "floor": se / (2 * math.sqrt(m)) if m > 0 else 0.0}
    return {"distance": m, "floor": se}


def _int_seed(seq: np.random.SeedSequence) -> int:
    return int(seq.generate_state(1, dtype=np.uint32)[0])


def _check_widths(widths: Sequence[int]) -> list[int]:
    out = [check_count(w, "every width") for w in widths]
    if len(set(out)) < 2:
        raise HyperParameterError("a convergence sweep needs at least two distinct widths")
    return sorted(set(out))


@dataclass
class Summary:
    """Floor-corrected distances per width and the log-log slope of a study."""

    name: str
    metric: str
    widths: list[int]
    raw: Array  # (R, W)
    floor: Array  # (R, W)
    distance: Array  # (W,) floor-corrected centre
    ci: Array  # (W, 2)
    fit: LogLogFit
    fitted_widths: list[int]
    extra: dict[str, Array]
    samples: int

    @property
    def slope(self) -> float:
        return float(self.fit.slope)

    @property
    def slope_ci(self) -> tuple[float, float]:
        return float(self.fit.slope_ci[0]), float(self.fit.slope_ci[1])

    def to_json(self) -> dict[str, Any]:
        rows = [{"width": w, "distance": float(d), "ci": [float(c) for c in ci], "floor": float(f),
                 "raw": float(r)}
                for w, d, ci, f, r in zip(self.widths, self.distance, self.ci, self.floor.mean(axis=0),
                                          self.raw.mean(axis=0), strict=True)]
        return {"name": self.name, "metric": self.metric, "slope": self.slope, "slope_ci": list(self.slope_ci),
                "intercept": float(self.fit.intercept), "fitted_widths": self.fitted_widths, "samples": self.samples,
                "replicates": int(self.raw.shape[0]), "rows": rows,
                "extra": {k: v.mean(axis=0).tolist() for k, v in self.extra.items()}}

    def table(self) -> str:
        lines = [f"{self.name} — {self.metric}", f"{'width':>8} {'distance':>12} {'95% CI':>25} {'floor':>12}"]
        for row in self.to_json()["rows"]:
            lo, hi = row["ci"]
            lines.append(f"{row['width']:>8d} {row['distance']:>12.4g} [{lo:>11.4g}, {hi:>11.4g}] "
                         f"{row['floor']:>12.4g}")
        lo, hi = self.slope_ci
        lines.append(f"slope {self.slope:.3f}  95% CI [{lo:.3f}, {hi:.3f}]  (widths {self.fitted_widths})")
        return "\n".join(lines)


def summarize(study: Study, widths: list[int], results: dict[Any, dict[str, Any]]) -> Summary:
    """Assemble cell results into per-width arrays and fit the slope."""
    def grid(key: str) -> Array:
        return np.array([[results[(study.name, study.metric, w, r)][key] for w in widths]
                         for r in range(study.replicates)], dtype=float)

    raw, floor = grid("distance"), grid("floor")
    extra = {k: grid(k) for k in ("sw1", "sw1_floor", "kernel_lln")
             if all(k in results[c] for c in study.cells(widths))}
    if study.metric in FLOORED:
        fit = fit_with_floor(widths, raw, floor, seed=study.seed)
        deb = fit.debiased_values
        center = deb.mean(axis=0)
        chosen = fit.debiased or fit.raw
        fitted = [int(w) for w in (fit.kept_widths if fit.debiased else widths)]
    else:
        positive = raw.mean(axis=0) > 0
        keep = [w for w, ok in zip(widths, positive, strict=True) if ok]
        cols = [i for i, ok in enumerate(positive) if ok]
        chosen = fit_loglog(keep, raw[:, cols], seed=study.seed)
        deb, center, fitted = raw, raw.mean(axis=0), keep
    R = deb.shape[0]
    half = 2.0 * deb.std(axis=0, ddof=1) / math.sqrt(R) if R > 1 else np.zeros(len(widths))
    ci = np.stack([center - half, center + half], axis=1)
    return Summary(study.name, study.metric, widths, raw, floor, center, ci, chosen, fitted, extra, study.samples)


def plot_summary(summary: Summary, path: str | Path, title: str | None = None) -> Path:
    """Log-log PNG: distance with CIs, floor band, fitted line, reference slopes −0.5 and −1."""
    from netsor.report.plots import loglog_plot

    floor = summary.floor.mean(axis=0)
    band = np.stack([summary.floor.min(axis=0), summary.floor.max(axis=0)], axis=1)
    positive = np.any(floor > 0)
    tiny = 1e-300
    return loglog_plot(summary.widths, np.maximum(summary.distance, tiny), np.maximum(summary.ci, tiny),
                       np.maximum(floor, tiny) if positive else None, np.maximum(band, tiny) if positive else None,
                       summary.fit, path, title or f"{summary.name}: {summary.metric}", ylabel=summary.metric)
