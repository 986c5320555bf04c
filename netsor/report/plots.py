"""Plots of width sweeps, drawn on a bare :class:`matplotlib.figure.Figure` with the
Agg canvas: no pyplot, no global backend, safe on headless machines and in threads."""

from __future__ import annotations

import os
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import NullFormatter

from netsor.errors import InputError
from netsor.validate import check_count, real_array


class _Line(Protocol):
    slope: float
    intercept: float


def _per_width(x: Any, name: str, num: int, shape: tuple[int, ...] = ()) -> np.ndarray:
    arr = real_array(x, name)
    if arr.shape != (num, *shape):
        raise InputError(f"{name} must have shape {(num, *shape)}, got {arr.shape}.")
    return arr


def loglog_plot(
    widths: Any,
    values: Any,
    ci: Any,
    path: str | os.PathLike,
    *,
    floor: Any = None,
    floor_band: Any = None,
    fit: _Line | None = None,
    title: str = "",
    interval: str | None = None,
    reference_slopes: Sequence[float] = (-0.5, -1.0),
    xlabel: str = "width",
    ylabel: str = "distance",
    dpi: int = 120,
) -> Path:
    """Log-log plot of a width sweep, written as a PNG.

    Parameters
    ----------
    widths : array, shape ``(W,)``
    values : array, shape ``(W,)``
        Positive centre values (e.g. :attr:`netsor.stats.rates.LogLogFit.center`).
    ci : array, shape ``(W, 2)``
        Lower and upper interval ends, drawn as error bars.
    path : path
        Output PNG (parent directory created if missing).
    floor : array, shape ``(W,)``, or None
        Noise floor, drawn as a dashed line.
    floor_band : array, shape ``(W, 2)``, or None
        Interval of the floor, drawn as a shaded band.
    fit : object with ``slope`` and ``intercept``, or None
        E.g. a :class:`netsor.stats.rates.LogLogFit`; drawn as ``exp(intercept)·width^slope``
        and its slope (with ``slope_ci`` if present) given in the legend.
    title, xlabel, ylabel : str
    interval : str, optional
        How ``ci`` (and the fit's interval) was computed, e.g. "95 % Student-t interval over
        4 replicates"; shown in the legend.
    reference_slopes : sequence of float
        Reference lines ``∝ width^s`` drawn through the first data point.
    dpi : int

    Returns
    -------
    pathlib.Path
        The written file.
    """
    w = real_array(widths, "widths", ndim=1)
    dpi = check_count(dpi, "dpi")
    v = _per_width(values, "values", len(w))
    ends = _per_width(ci, "ci", len(w), (2,))
    if len(w) == 0 or np.any(w <= 0) or np.any(v <= 0):
        raise InputError("widths and values must be non-empty and positive on log axes.")
    fig = Figure(figsize=(6.0, 4.5))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    if floor_band is not None:
        band = _per_width(floor_band, "floor_band", len(w), (2,))
        ax.fill_between(w, band[:, 0], band[:, 1], color="0.8", label="noise floor, range over replicates")
    if floor is not None:
        ax.plot(w, _per_width(floor, "floor", len(w)), ls="--", color="0.4", label="noise floor")
    err = np.abs(np.stack([v - ends[:, 0], ends[:, 1] - v]))
    ax.errorbar(w, v, yerr=err, fmt="o", color="C0", capsize=3,
                label=f"{ylabel} ({interval})" if interval else ylabel)
    grid = np.geomspace(w.min(), w.max(), 50)
    if fit is not None:
        label = f"fit: slope {fit.slope:.3f}"
        slope_ci = getattr(fit, "slope_ci", None)
        if slope_ci is not None:
            label += f" [{slope_ci[0]:.3f}, {slope_ci[1]:.3f}]"
        ax.plot(grid, np.exp(fit.intercept) * grid**fit.slope, color="C1", label=label)
    for i, s in enumerate(reference_slopes):
        ax.plot(grid, v[0] * (grid / w[0]) ** s, ls=":", color=f"C{i + 2}", label=f"slope {s:g}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    # Label the measured widths themselves; log-scale minor labels collide on short ranges.
    ax.set_xticks(w, [f"{x:g}" for x in w])
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(textwrap.fill(title, 60), fontsize="medium")
    ax.legend(fontsize="small")
    fig.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, format="png", dpi=dpi)
    return out
