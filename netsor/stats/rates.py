"""Width sweeps: geometric widths, log-log slope fits with bootstrap confidence
intervals, floor-aware fits, the kernel LLN error, and a resumable sweep runner.

Conventions
-----------
A sweep measures a positive quantity (a distance, a kernel error) at widths
``widths`` of shape ``(W,)`` in ``R`` independent replicates: ``values`` has shape
``(R, W)``. The fitted model is ``log(value) = intercept + slope · log(width)`` on
the per-width centre (mean or median over replicates). Confidence intervals come
from resampling *replicates* (rows of ``values``, all widths together, so any
correlation across widths — e.g. common random directions — is kept).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats

from netsor.errors import HyperParameterError, InputError
from netsor.stats.distances import Seed, _finite_array, debias

Array = np.ndarray


def geometric_widths(lo: int, hi: int, num: int) -> Array:
    """About ``num`` integer widths from ``lo`` to ``hi``, evenly spaced in log scale.

    Rounding can merge neighbours at small widths; the result is strictly increasing
    and may then hold fewer than ``num`` widths. Both ends are included.

    Returns
    -------
    array of int64, shape ``(≤ num,)``
    """
    if int(lo) != lo or int(hi) != hi or lo < 1 or hi < lo:
        raise HyperParameterError(f"need integers 1 <= lo <= hi, got lo={lo}, hi={hi}.")
    if int(num) != num or num < 1 or (num == 1 and hi != lo):
        raise HyperParameterError(f"num must be >= 2 (or 1 with lo == hi), got {num}.")
    return np.unique(np.round(np.geomspace(lo, hi, int(num))).astype(np.int64))


def _two_sided(level: float) -> tuple[float, float]:
    if not 0.0 < level < 1.0:
        raise HyperParameterError(f"level must be in (0, 1), got {level}.")
    return (1.0 - level) / 2.0, (1.0 + level) / 2.0


def _ols(x: Array, y: Array) -> tuple[Array, Array]:
    """Least-squares slope and intercept of ``y`` (``(..., W)``) on ``x`` (``(W,)``)."""
    xc = x - x.mean()
    slope = (y - y.mean(axis=-1, keepdims=True)) @ xc / (xc @ xc)
    return slope, y.mean(axis=-1) - slope * x.mean()


@dataclass(frozen=True)
class LogLogFit:
    """A log-log fit ``value ≈ exp(intercept) · width^slope``.

    Attributes
    ----------
    slope, intercept : float
        Fitted to the per-width centre of the replicates.
    slope_ci, intercept_ci : (float, float)
        Bootstrap percentile intervals (resampling replicates).
    widths : array, shape ``(W,)``
        The widths used in the fit.
    center : array, shape ``(W,)``
        Mean (or median) over replicates at each width.
    value_ci : array, shape ``(W, 2)``
        Interval for the centre at each width: Student t for the mean, bootstrap
        percentile for the median.
    num_replicates : int
    num_boot_valid : int
        Bootstrap draws used for the intervals (draws with a non-positive centre at some
        width cannot be logged and are left out).
    level : float
    """

    slope: float
    slope_ci: tuple[float, float]
    intercept: float
    intercept_ci: tuple[float, float]
    widths: Array
    center: Array
    value_ci: Array
    num_replicates: int
    num_boot_valid: int
    level: float

    def predict(self, widths: Any) -> Array:
        """The fitted curve ``exp(intercept) · widths^slope``."""
        return np.exp(self.intercept) * np.asarray(widths, dtype=np.float64) ** self.slope


def _sweep_arrays(widths: Any, values: Any) -> tuple[Array, Array]:
    w = _finite_array(widths, "widths", ndim=1)
    v = _finite_array(values, "values")
    if v.ndim == 1:
        v = v[None, :]
    if v.ndim != 2 or v.shape[1] != len(w):
        raise InputError(f"values must have shape (R, {len(w)}) to match widths, got {v.shape}.")
    if np.any(w <= 0):
        raise InputError("widths must be positive.")
    return w, v


def fit_loglog(
    widths: Any,
    values: Any,
    *,
    center: str = "mean",
    level: float = 0.95,
    num_boot: int = 2000,
    seed: Seed = 0,
) -> LogLogFit:
    """Fit ``log(value) = intercept + slope · log(width)`` with bootstrap intervals.

    Parameters
    ----------
    widths : array, shape ``(W,)``, ``W ≥ 2`` distinct positive widths
    values : array, shape ``(R, W)``
        Independent replicates (rows); every per-width centre must be positive.
    center : {"mean", "median"}
        Per-width summary that is fitted.
    level : float
        Confidence level of all intervals.
    num_boot : int
        Bootstrap draws (replicate rows resampled with replacement).
    seed : int, Generator or SeedSequence
    """
    w, v = _sweep_arrays(widths, values)
    if len(np.unique(w)) < 2:
        raise InputError("a slope needs at least 2 distinct widths.")
    if center not in ("mean", "median"):
        raise HyperParameterError(f"center must be 'mean' or 'median', got {center!r}.")
    if int(num_boot) != num_boot or num_boot < 100:
        raise HyperParameterError(f"num_boot must be an integer >= 100, got {num_boot}.")
    summary = np.mean if center == "mean" else np.median
    c = summary(v, axis=0)
    if np.any(c <= 0):
        bad = w[c <= 0].tolist()
        raise InputError(
            f"the {center} is not positive at widths {bad}; drop them (see fit_with_floor)."
        )
    lo_q, hi_q = _two_sided(level)
    num_rep = v.shape[0]
    x = np.log(w)
    slope, intercept = _ols(x, np.log(c))
    idx = np.random.default_rng(seed).integers(0, num_rep, size=(int(num_boot), num_rep))
    boot = summary(v[idx], axis=1)  # (num_boot, W)
    valid = np.all(boot > 0, axis=1)
    if valid.sum() < num_boot / 2:
        raise InputError(
            "most bootstrap resamples have a non-positive centre at some width: the values "
            "are not distinguishable from zero there; drop those widths (see fit_with_floor)."
        )
    b_slope, b_intercept = _ols(x, np.log(boot[valid]))
    if center == "mean" and num_rep >= 2:
        half = stats.t.ppf(hi_q, num_rep - 1) * v.std(axis=0, ddof=1) / np.sqrt(num_rep)
        value_ci = np.stack([c - half, c + half], axis=1)
    else:
        value_ci = np.quantile(boot, [lo_q, hi_q], axis=0).T
    return LogLogFit(
        slope=float(slope),
        slope_ci=tuple(float(q) for q in np.quantile(b_slope, [lo_q, hi_q])),
        intercept=float(intercept),
        intercept_ci=tuple(float(q) for q in np.quantile(b_intercept, [lo_q, hi_q])),
        widths=w,
        center=c,
        value_ci=value_ci,
        num_replicates=num_rep,
        num_boot_valid=int(valid.sum()),
        level=level,
    )


@dataclass(frozen=True)
class FloorAwareFit:
    """Raw, floor and debiased log-log fits of one sweep.

    Attributes
    ----------
    raw, floor : LogLogFit
        Fits of the raw distances and of the noise floor at all widths.
    debiased : LogLogFit or None
        Fit of the debiased distances at the kept widths (None if fewer than 2 kept).
    debiased_values : array, shape ``(R, W)``
        Per-replicate debiased distances at all widths.
    kept_widths, dropped_widths : arrays of widths
        Widths where the raw distance is / is not significantly above the floor
        (one-sided test at the fit's level).
    rule : str
        Debiasing rule (:func:`netsor.stats.distances.debias`).
    """

    raw: LogLogFit
    floor: LogLogFit
    debiased: LogLogFit | None
    debiased_values: Array
    kept_widths: Array
    dropped_widths: Array
    rule: str


def fit_with_floor(
    widths: Any,
    raw: Any,
    floor: Any,
    *,
    rule: str = "quadrature",
    level: float = 0.95,
    num_boot: int = 2000,
    seed: Seed = 0,
) -> FloorAwareFit:
    """Fit raw distances, their noise floor and the debiased distances.

    A width is kept for the debiased fit when ``mean(raw) − mean(floor)`` is above zero
    by more than its one-sided ``level`` Welch margin (replicates treated as
    independent; for a floor computed from the same samples, as the Rao–Blackwellised
    one is, the test is then conservative). Per-replicate debiased values are
    ``debias(raw[r], mean(floor), rule)``.

    Parameters
    ----------
    widths : array, shape ``(W,)``
    raw : array, shape ``(R, W)``
    floor : array, shape ``(R_f, W)``, ``R_f ≥ 2``
        Replicates of the noise floor at each width.
    rule, level, num_boot, seed
        As in :func:`netsor.stats.distances.debias` and :func:`fit_loglog`.
    """
    w, r = _sweep_arrays(widths, raw)
    _, f = _sweep_arrays(widths, floor)
    if r.shape[0] < 2 or f.shape[0] < 2:
        raise InputError("fit_with_floor needs at least 2 replicates of raw and of floor.")
    _two_sided(level)
    f_mean = f.mean(axis=0)
    se = np.sqrt(r.var(axis=0, ddof=1) / r.shape[0] + f.var(axis=0, ddof=1) / f.shape[0])
    keep = r.mean(axis=0) - f_mean > stats.norm.ppf(level) * se
    deb = np.asarray(debias(r, f_mean[None, :], rule=rule))
    fit = {"level": level, "num_boot": num_boot, "seed": seed}
    return FloorAwareFit(
        raw=fit_loglog(w, r, **fit),
        floor=fit_loglog(w, f, **fit),
        debiased=fit_loglog(w[keep], deb[:, keep], **fit) if keep.sum() >= 2 else None,
        debiased_values=deb,
        kept_widths=w[keep],
        dropped_widths=w[~keep],
        rule=rule,
    )


def kernel_lln_error(Khat: Any, K: Any, *, norm: str = "abs") -> float:
    """Kernel law-of-large-numbers error ``E |K̂ − K|`` (expected ``O(n^{-1/2})``).

    Parameters
    ----------
    Khat : array, shape ``(S, ...)``
        ``S`` finite-width Gram matrices (e.g. ``(S, B, B)``).
    K : array, shape ``(...)``
        Their infinite-width limit.
    norm : {"abs", "fro"}
        ``"abs"``: mean over samples and entries of ``|K̂ − K|`` (the default; the
        entrywise form of the LLN statement). ``"fro"``: mean over samples of
        ``‖K̂ − K‖_F / sqrt(number of entries)`` (root mean square entry).

    Returns
    -------
    float
    """
    kh = _finite_array(Khat, "Khat", min_ndim=1)
    k = _finite_array(K, "K")
    if kh.shape[1:] != k.shape:
        raise InputError(f"Khat must have shape (S, *{k.shape}), got {kh.shape}.")
    diff = (kh - k).reshape(len(kh), -1)
    if norm == "abs":
        return float(np.abs(diff).mean())
    if norm == "fro":
        return float(np.sqrt((diff * diff).mean(axis=1)).mean())
    raise HyperParameterError(f"norm must be 'abs' or 'fro', got {norm!r}.")


# --------------------------------------------------------------------------- sweep runner


def _to_json(obj: Any) -> Any:
    """A JSON-ready copy: tuples become lists, numpy scalars/arrays become Python ones."""
    if isinstance(obj, np.ndarray | np.generic):
        return obj.tolist()
    if isinstance(obj, tuple | list):
        return [_to_json(o) for o in obj]
    if isinstance(obj, dict):
        return {str(k): _to_json(v) for k, v in obj.items()}
    if obj is None or isinstance(obj, str | bool | int | float):
        return obj
    raise InputError(
        f"cannot store {type(obj).__name__} {obj!r}: cells and results must be made of "
        "str, int, float, bool, None, tuples, lists, dicts and numpy arrays."
    )


def cell_key(cell: Hashable) -> str:
    """Canonical string of a cell (stable across runs and Python processes)."""
    return json.dumps(_to_json(cell), sort_keys=True, separators=(",", ":"))


def cell_seed(cell: Hashable, seed: int = 0) -> np.random.SeedSequence:
    """A SeedSequence determined by ``cell`` and ``seed`` only (not by run order).

    Use ``numpy.random.default_rng(cell_seed(cell, seed))`` inside a sweep function so
    that a resumed or reordered sweep draws exactly the same numbers per cell.
    """
    digest = hashlib.sha256(cell_key(cell).encode()).digest()
    return np.random.SeedSequence([int(seed), *np.frombuffer(digest[:16], dtype=np.uint32)])


def load_sweep(store_path: str | os.PathLike) -> dict[str, dict[str, Any]]:
    """Finished cells of a sweep store, ``{cell_key: result}``.

    A half-written last line (an interrupted write) is ignored; a corrupt line
    elsewhere raises :class:`InputError`.
    """
    path = Path(store_path)
    if not path.exists():
        return {}
    lines = path.read_bytes().split(b"\n")
    done: dict[str, dict[str, Any]] = {}
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            done[cell_key(record["cell"])] = record["result"]
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            if number == len(lines):  # unterminated last line: an interrupted write
                break
            raise InputError(
                f"{path}:{number} is not a sweep record ({exc}); remove that line."
            ) from exc
    return done


def _truncate_partial_line(path: Path) -> None:
    """Cut an unterminated last line so that appended records start on a fresh line."""
    if not path.exists():
        return
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        with path.open("r+b") as fh:
            fh.truncate(data.rfind(b"\n") + 1)


def run_sweep(
    cells: Iterable[Hashable],
    fn: Callable[[Hashable], dict[str, Any]],
    store_path: str | os.PathLike,
    *,
    progress: bool = True,
) -> dict[Hashable, dict[str, Any]]:
    """Run ``fn`` on every cell not already stored, appending each result at once.

    Each finished cell is written as one JSON line ``{"cell": ..., "result": ...}``
    and flushed to disk (``fsync``) before the next starts, so an interrupted sweep
    resumes where it stopped: a re-run skips stored cells. Seed randomness per cell
    (:func:`cell_seed`) so that results do not depend on what ran before.

    Parameters
    ----------
    cells : iterable of hashable, JSON-representable keys
        E.g. ``(architecture, width, replicate)`` tuples; no duplicates.
    fn : callable
        ``fn(cell) -> dict`` of floats, lists or numpy arrays.
    store_path : path
        JSON-lines file (created with its parent directory if missing).
    progress : bool
        Show a tqdm progress bar with ETA.

    Returns
    -------
    dict
        ``{cell: result}`` for the requested cells, in their order; arrays come back
        as lists.
    """
    from tqdm.auto import tqdm

    cells = list(cells)
    keys = [cell_key(c) for c in cells]
    if len(set(keys)) != len(keys):
        raise InputError("cells contain duplicates; give every cell a distinct key.")
    path = Path(store_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    done = load_sweep(path)
    _truncate_partial_line(path)
    todo = [(c, k) for c, k in zip(cells, keys, strict=True) if k not in done]
    with (
        path.open("a", encoding="utf-8") as fh,
        tqdm(
            total=len(cells),
            initial=len(cells) - len(todo),
            disable=not progress,
            desc=path.name,
            unit="cell",
        ) as bar,
    ):
        for cell, key in todo:
            result = fn(cell)
            if not isinstance(result, dict):
                raise InputError(f"fn must return a dict, got {type(result).__name__}.")
            record = _to_json({"cell": cell, "result": result})
            fh.write(json.dumps(record) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
            done[key] = record["result"]
            bar.update()
    return {c: done[k] for c, k in zip(cells, keys, strict=True)}
