"""How fast finite-width networks converge to their limit: one measurement per width cell.

A *study* fixes a program, inputs, a metric, the number of networks per
measurement ``samples`` and of independent replicates; each cell
``(name, metric, width, replicate)`` draws fresh networks (seed derived from the
cell, so cells can run in any order, be resumed, or be farmed out) and returns a
distance with, depending on the metric, its noise floor or its standard error.

Names
-----
Metric names and every result / JSON key are snake_case identifiers
(:data:`METRICS`); the command line writes the same names with hyphens
(``--metric rb-sw1`` is ``"rb_sw1"``), as click does for option names.

Metrics
-------
``sw1``        sliced W1 between the law of the outputs (S sampled networks) and
               the GP ``N(0, K)``; floor: the same estimator on S draws of the GP.
``rb_sw1``     Rao–Blackwellised sliced W1: given the last hidden layer the outputs
               are exactly ``N(0, K̂)``, so the finite law is the mixture of
               ``N(0, K̂_s)``; floor: the estimator's own sampling spread. Also
               records the plain ``sw1`` (with ``sw1_floor``) and the ``kernel_lln``
               (with ``kernel_lln_stderr``) of the same networks.
``mmd``        unbiased Rao–Blackwellised MMD² (Gaussian kernel, closed form per
               pair of Gaussians); unbiased, so it has no floor.
``coupling``   ``(E |y^fin − y^lim|²)^{1/2}`` of the same-noise coupling (an upper
               bound on W2 between the output laws); no floor, ``stderr`` is the
               standard error of the estimate over the cell's networks.
``kernel_lln`` ``E|K̂ − K|`` (mean absolute entry), the kernel law of large numbers;
               no floor, ``stderr`` as for ``coupling``.
``ntk``        ``E ‖Θ̂ − Θ‖_F / ‖Θ‖_F``, the relative Frobenius deviation of the empirical
               NTK of finite networks (:func:`netsor.empirical_ntk`, dense sampler) from the
               limit's NTK; ``stderr`` as for ``coupling``.

Cell keys: ``distance`` always; ``floor`` (a noise floor, subtracted in quadrature)
for :data:`FLOORED` metrics only; ``stderr`` (a standard error, never subtracted)
for :data:`WITH_STDERR` metrics; ``<metric>``, ``<metric>_floor`` and
``<metric>_stderr`` for the extra metrics recorded beside ``rb_sw1``.

Directions of the sliced metrics are uniform on the sphere of the joint output
vector (all inputs and outputs together) and fixed across widths (common random
numbers). :func:`summarize` turns the cells into floor-corrected distances with
per-width Student-t intervals and a log-log slope with a Student-t interval over
the replicates (:mod:`netsor.stats.rates`).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import KW_ONLY, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from netsor import Program, coupled, empirical_ntk, kernel, run_finite
from netsor.errors import HyperParameterError, InputError
from netsor.interpret.infinite import DEFAULT_RTOL
from netsor.stats import distances as dist
from netsor.stats.rates import (
    LogLogFit,
    above,
    cell_seed,
    fit_loglog,
    fit_with_floor,
    interval_label,
    mean_interval,
    run_sweep,
)
from netsor.validate import Seed, check_choice, check_count, inputs_or_point, seed_sequence

Array = np.ndarray

METRICS = ("sw1", "rb_sw1", "mmd", "coupling", "kernel_lln", "ntk")
#: Metrics whose ``floor`` is an estimate of the sampling noise and gets subtracted (in quadrature).
FLOORED = ("sw1", "rb_sw1")
#: Metrics whose cells carry the ``stderr`` of an unbiased estimate (nothing to subtract).
WITH_STDERR = ("coupling", "kernel_lln", "ntk")
#: Extra series recorded by ``rb_sw1`` cells (the same networks).
RB_EXTRAS = ("sw1", "sw1_floor", "kernel_lln", "kernel_lln_stderr")
#: Columns of :meth:`Summary.csv_rows`.
CSV_COLUMNS = ("width", "distance", "ci_low", "ci_high", "floor", "stderr")
#: Version of the cell contents; part of every store's name, so stores of older versions are not mixed in.
CELL_FORMAT = 2


@dataclass
class Study:
    """A convergence study of ``program`` on inputs ``X``.

    Parameters
    ----------
    program : Program
    X : array, shape (B, d) or (B, T, d), or None (a program that reads no data: one point)
    metric : str
        One of :data:`METRICS`.
    samples : int
        Networks per cell (>= 2).
    replicates : int
        Independent cells per width (>= 2; intervals are Student-t over them).
    seed : int, SeedSequence or Generator
        The project's seed policy (:mod:`netsor.validate`); every cell's seed derives from it.
    directions : int
        Number of slicing directions.
    name : str
        Label used in cell keys and reports.
    rtol, method : float, str
        Accuracy and method of the limit's kernels (:func:`netsor.kernel`); the largest error bound
        of the kernels a study compares with is ``limit_error``.
    """

    program: Program
    X: Any
    _: KW_ONLY
    metric: str = "rb_sw1"
    samples: int = 2000
    replicates: int = 4
    seed: Seed = 0
    directions: int = 64
    name: str = ""
    rtol: float = DEFAULT_RTOL
    method: str = "auto"
    K: Array = field(init=False, repr=False)
    limit_error: float = field(init=False, default=0.0)
    limit_method: str = field(init=False, default="expectations")
    ntk: Array | None = field(init=False, repr=False, default=None)
    thetas: Array = field(init=False, repr=False)
    root_seed: np.random.SeedSequence = field(init=False, repr=False)

    def __post_init__(self) -> None:
        check_choice(self.metric, "metric", METRICS)
        self.samples = check_count(self.samples, "samples", minimum=2)
        self.replicates = check_count(self.replicates, "replicates", minimum=2)
        self.directions = check_count(self.directions, "directions")
        self.root_seed = seed_sequence(self.seed)
        self.X = inputs_or_point(self.program, self.X)
        self.name = self.name or self.program.name
        limit = kernel(self.program, self.X, get=("nngp", "ntk") if self.metric == "ntk" else "nngp",
                       rtol=self.rtol, method=self.method)
        self.K, self.ntk, self.limit_error, self.limit_method = limit.nngp, limit.ntk, limit.error, limit.method
        self.thetas = dist.random_directions(self.K.shape[0], self.directions,
                                             seed=cell_seed(("directions",), seed=self.root_seed))

    def cells(self, widths: Sequence[int]) -> list[tuple[Hashable, ...]]:
        return [(self.name, self.metric, int(w), r) for w in widths for r in range(self.replicates)]

    def measure(self, cell: tuple[Hashable, ...]) -> dict[str, float]:
        """The results of one cell ``(name, metric, width, replicate)`` (keys: module docstring)."""
        _, metric, width, _ = cell
        net_seed, floor_seed = cell_seed(cell, seed=self.root_seed).spawn(2)
        if metric == "ntk":
            assert self.ntk is not None
            theta = empirical_ntk(self.program, self.X, width=width, samples=self.samples, seed=net_seed)
            deviation = np.linalg.norm(theta - self.ntk, axis=(1, 2)) / np.linalg.norm(self.ntk)
            return _mean_with_stderr(deviation)
        if metric == "coupling":
            # An int seed drawn from the cell's sequence (valid under the seed policy).
            seed = int(net_seed.generate_state(2, dtype=np.uint64)[0] >> np.uint64(1))
            run = coupled(self.program, self.X, width=width, samples=self.samples, seed=seed, rtol=self.rtol)
            return _root_mean_with_stderr(run.output_costs_expected.mean(axis=1))
        fin = run_finite(self.program, self.X, width=width, samples=self.samples, seed=net_seed,
                         return_kernels=metric != "sw1")
        if metric == "kernel_lln":
            return _mean_with_stderr(np.abs(fin.kernels - self.K).mean(axis=(1, 2)))
        if metric == "mmd":
            return {"distance": dist.rb_mmd2(fin.kernels, self.K, bandwidth=dist.median_bandwidth(self.K))}
        plain = float(dist.sliced_w1_to_gaussian(fin.outputs, self.K, self.thetas))
        limit_sample = dist.gaussian_samples(self.K, self.samples, seed=floor_seed)
        plain_floor = float(dist.sliced_w1_to_gaussian(limit_sample, self.K, self.thetas))
        if metric == "sw1":
            return {"distance": plain, "floor": plain_floor}
        # 129 quadrature points per direction: 1e-7 relative, far below the sampling noise.
        rb, rb_floor = dist.rb_sliced_w1(fin.kernels, self.K, self.thetas, with_floor=True, num_grid=129)
        lln = _mean_with_stderr(np.abs(fin.kernels - self.K).mean(axis=(1, 2)))
        return {"distance": float(rb), "floor": float(rb_floor), "sw1": plain, "sw1_floor": plain_floor,
                "kernel_lln": lln["distance"], "kernel_lln_stderr": lln["stderr"]}

    def run(self, widths: Sequence[int], store: str | Path, *, progress: bool = True) -> Summary:
        """Measure every cell not yet in ``store`` (JSON lines, resumable) and summarise."""
        widths = check_widths(widths)
        results = run_sweep(self.cells(widths), self.measure, store, progress=progress)
        return summarize(self, widths, results)


def _mean_with_stderr(per_network: Array) -> dict[str, float]:
    """Mean over a cell's networks and its standard error."""
    return {"distance": float(per_network.mean()),
            "stderr": float(per_network.std(ddof=1) / math.sqrt(per_network.size))}


def _root_mean_with_stderr(per_network: Array) -> dict[str, float]:
    """``sqrt`` of the mean over a cell's networks and its standard error (delta method)."""
    m = _mean_with_stderr(per_network)
    root = math.sqrt(m["distance"])
    return {"distance": root, "stderr": m["stderr"] / (2 * root) if root > 0 else 0.0}


def check_widths(widths: Sequence[int], what: str = "widths") -> list[int]:
    """Widths of a sweep: integers >= 1, at least two distinct ones; sorted, duplicates removed."""
    try:
        items = list(widths)
    except TypeError:
        raise HyperParameterError(f"{what} must be a sequence of integers, got {widths!r}") from None
    out = sorted({check_count(w, f"every entry of {what}") for w in items})
    if len(out) < 2:
        raise HyperParameterError(f"{what}: a convergence sweep needs at least two distinct widths, got {items}")
    return out


@dataclass
class Summary:
    """Floor-corrected distances per width and the log-log slope of one series.

    ``floor`` is a noise floor (``None`` for metrics without one), ``stderr`` the
    per-cell standard error of unbiased estimates (``None`` where not recorded); both
    ``(R, W)``. ``distance`` and ``ci`` are the per-width mean over replicates and its
    Student-t interval (after floor correction for floored metrics). ``fit`` is ``None``
    when fewer than two widths are significantly above the floor (or above 0): then
    there is no slope to report, and :attr:`slope` is NaN.
    """

    name: str
    metric: str
    widths: list[int]
    raw: Array  # (R, W)
    floor: Array | None  # (R, W)
    stderr: Array | None  # (R, W)
    distance: Array  # (W,)
    ci: Array  # (W, 2)
    fit: LogLogFit | None
    fitted_widths: list[int]
    extra: dict[str, Array]
    samples: int
    level: float = 0.95

    @property
    def slope(self) -> float:
        return float(self.fit.slope) if self.fit is not None else math.nan

    @property
    def slope_ci(self) -> tuple[float, float]:
        return (float(self.fit.slope_ci[0]), float(self.fit.slope_ci[1])) if self.fit is not None \
            else (math.nan, math.nan)

    @property
    def replicates(self) -> int:
        return int(self.raw.shape[0])

    @property
    def interval(self) -> str:
        """How every interval of this summary was computed, in words."""
        return interval_label(self.level, self.replicates)

    def rows(self) -> list[dict[str, Any]]:
        """One dict per width: ``width``, ``distance``, ``ci``, ``raw`` and ``floor`` / ``stderr`` if any."""
        out = []
        for j, w in enumerate(self.widths):
            row: dict[str, Any] = {"width": int(w), "distance": float(self.distance[j]),
                                   "ci": [float(self.ci[j, 0]), float(self.ci[j, 1])],
                                   "raw": float(self.raw[:, j].mean())}
            if self.floor is not None:
                row["floor"] = float(self.floor[:, j].mean())
            if self.stderr is not None:
                row["stderr"] = float(self.stderr[:, j].mean())
            out.append(row)
        return out

    def csv_rows(self) -> list[list[Any]]:
        """Rows for :data:`CSV_COLUMNS` (empty cells where a series has no floor / stderr)."""
        return [[r["width"], r["distance"], r["ci"][0], r["ci"][1], r.get("floor", ""), r.get("stderr", "")]
                for r in self.rows()]

    def to_json(self) -> dict[str, Any]:
        fitted = self.fit is not None
        return {"name": self.name, "metric": self.metric, "slope": self.slope if fitted else None,
                "slope_ci": list(self.slope_ci) if fitted else None,
                "intercept": float(self.fit.intercept) if fitted else None, "fitted_widths": self.fitted_widths,
                "samples": self.samples, "replicates": self.replicates, "level": self.level,
                "interval": self.interval, "rows": self.rows(),
                "extra": {k: v.mean(axis=0).tolist() for k, v in self.extra.items()}}

    def table(self) -> str:
        last = "floor" if self.floor is not None else "stderr" if self.stderr is not None else ""
        lines = [f"{self.name} — {self.metric} (intervals: {self.interval})",
                 f"{'width':>8} {'distance':>12} {'interval':>25} {last:>12}"]
        for row in self.rows():
            lo, hi = row["ci"]
            tail = f" {row[last]:>12.4g}" if last else ""
            lines.append(f"{row['width']:>8d} {row['distance']:>12.4g} [{lo:>11.4g}, {hi:>11.4g}]{tail}")
        if self.fit is None:
            lines.append("no slope: fewer than two widths are significantly above the floor (or above 0)")
        else:
            lo, hi = self.slope_ci
            lines.append(f"slope {self.slope:.3f}  [{lo:.3f}, {hi:.3f}]  (widths {self.fitted_widths})")
        return "\n".join(lines)


def summarize_series(name: str, metric: str, widths: Sequence[int], raw: Any, *, floor: Any = None,
                     stderr: Any = None, samples: int, extra: dict[str, Array] | None = None,
                     level: float = 0.95) -> Summary:
    """A :class:`Summary` from ``(R, W)`` arrays of one series.

    With a ``floor`` the per-width means are debiased, with intervals that carry both the
    distance's and the floor's noise (:func:`netsor.stats.rates.fit_with_floor`), and the
    slope is fitted on the widths
    where the raw distance is significantly above the floor; without one, on the widths
    where the mean is significantly above 0 (:func:`netsor.stats.rates.above`). Fewer
    than two such widths leave ``fit`` ``None``.
    """
    widths = [int(w) for w in widths]
    raw = np.asarray(raw, dtype=float)
    chosen: LogLogFit | None
    if floor is not None:
        fit = fit_with_floor(widths, raw, floor, level=level)
        center, ci, chosen = fit.corrected.value, fit.corrected.ci, fit.debiased
        fitted = [int(w) for w in fit.kept_widths] if chosen is not None else []
    else:
        center, ci = mean_interval(raw, level=level)
        keep = above(raw, 0.0, level=level)
        fitted = [w for w, ok in zip(widths, keep, strict=True) if ok]
        chosen = fit_loglog(fitted, raw[:, keep], level=level) if len(fitted) >= 2 else None
        fitted = fitted if chosen is not None else []
    return Summary(name, metric, widths, raw, None if floor is None else np.asarray(floor, dtype=float),
                   None if stderr is None else np.asarray(stderr, dtype=float), center, ci, chosen, fitted,
                   extra or {}, samples, level)


def summarize(study: Study, widths: Sequence[int], results: dict[Any, dict[str, Any]], *,
              level: float = 0.95) -> Summary:
    """Assemble the cell results of ``study`` into per-width arrays and fit the slope."""
    cells = study.cells(widths)

    def grid(key: str) -> Array:
        missing = [c for c in cells if key not in results[c]]
        if missing:
            raise InputError(f"cell {missing[0]} has no {key!r}: the cell store was written by another "
                             "version of netsor; remove it and run again")
        return np.array([[results[(study.name, study.metric, int(w), r)][key] for w in widths]
                         for r in range(study.replicates)], dtype=float)

    extras = RB_EXTRAS if study.metric == "rb_sw1" else ()
    return summarize_series(study.name, study.metric, widths, grid("distance"),
                            floor=grid("floor") if study.metric in FLOORED else None,
                            stderr=grid("stderr") if study.metric in WITH_STDERR else None,
                            samples=study.samples, extra={k: grid(k) for k in extras}, level=level)


def plot_summary(summary: Summary, path: str | Path, *, title: str | None = None) -> Path:
    """Log-log PNG: distance with its intervals, the noise floor (floored metrics only) with
    its replicate range, the fitted line and reference slopes −0.5 and −1."""
    from netsor.report.plots import loglog_plot

    tiny = 1e-300
    floor = band = None
    if summary.floor is not None:
        floor = np.maximum(summary.floor.mean(axis=0), tiny)
        band = np.maximum(np.stack([summary.floor.min(axis=0), summary.floor.max(axis=0)], axis=1), tiny)
    return loglog_plot(summary.widths, np.maximum(summary.distance, tiny), np.maximum(summary.ci, tiny), path,
                       floor=floor, floor_band=band, fit=summary.fit,
                       title=title or f"{summary.name}: {summary.metric}", ylabel=summary.metric,
                       interval=summary.interval)
