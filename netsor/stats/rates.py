"""Width sweeps: geometric widths, log-log slope fits with Student-t confidence
intervals, floor-aware fits, the kernel LLN error, and a resumable sweep runner.

Conventions
-----------
A sweep measures a positive quantity (a distance, a kernel error) at widths
``widths`` of shape ``(W,)`` in ``R`` independent replicates: ``values`` has shape
``(R, W)``. The fitted model is ``log(value) = intercept + slope · log(width)`` on
the per-width mean over replicates.

Intervals
---------
Every interval here is a Student-t interval over the ``R`` replicates with
``R − 1`` degrees of freedom (:data:`INTERVAL_METHOD`; :func:`interval_label` says it in
words). With the 4 replicates of ``netsor reproduce`` the t quantile is 3.18, not the
normal 1.96: a bootstrap over 4 rows has at most 35 distinct resamples and under-covers,
and so does ``2·sd/√R`` (coverage 86 % at R = 4).

* Per width: ``mean ± t_{R−1} · sd / √R`` (:func:`mean_interval`).
* Slope and intercept: the slope of ``log(mean)`` is a smooth function of the replicate
  rows; to first order (delta method) it is the mean over replicates of the
  *linearised per-replicate slopes* ``s_r = slope + Σ_j a_j (v_rj − c_j) / c_j``
  (``c`` the per-width means, ``a`` the least-squares weights of ``log width``), which
  are independent across replicates. The interval is ``slope ± t_{R−1} · sd(s) / √R``.
  A replicate's widths enter its ``s_r`` together, so correlation across widths (common
  random directions, shared networks) is kept; ``s_r`` needs no logarithm of a single
  replicate, so replicates with a zero value (a debiased distance at the floor) are fine.
* Debiased distances (:func:`debias_replicates`): the interval of ``q = d² − f²`` (raw
  and floor of each replicate linearised together) mapped through ``sqrt(max(q, 0))``,
  so near the floor it reads ``[0, upper]``; debiased slopes use the same linearisation.

``tests/test_rates.py`` checks the coverage of each kind by simulation.
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
from netsor.stats.distances import DEBIAS_EXPONENT, debias_argument
from netsor.validate import Seed, check_choice, check_count, check_real, real_array, seed_sequence

Array = np.ndarray

#: How every interval of this module is computed.
INTERVAL_METHOD = "Student-t over independent replicates (R − 1 degrees of freedom)"


def interval_label(level: float, replicates: int) -> str:
    """The interval method in words, e.g. ``"95 % Student-t interval over 4 replicates"``."""
    return f"{100 * level:g} % Student-t interval over {replicates} replicates"


def geometric_widths(lo: int, hi: int, num: int) -> Array:
    """About ``num`` integer widths from ``lo`` to ``hi``, evenly spaced in log scale.

    Rounding can merge neighbours at small widths; the result is strictly increasing
    and may then hold fewer than ``num`` widths. Both ends are included.

    Returns
    -------
    array of int64, shape ``(≤ num,)``
    """
    lo = check_count(lo, "lo")
    hi = check_count(hi, "hi", minimum=lo)
    num = check_count(num, "num", minimum=1 if hi == lo else 2)
    return np.unique(np.round(np.geomspace(lo, hi, num)).astype(np.int64))


def _level(level: Any) -> float:
    """A confidence level in (0, 1)."""
    level = check_real(level, "level", minimum=0.0, strict=True)
    if level >= 1.0:
        raise HyperParameterError(f"level must be < 1 (a confidence level such as 0.95), got {level!r}")
    return level


def t_quantile(level: float, replicates: int) -> float:
    """Two-sided Student-t quantile ``t_{R−1, (1 + level)/2}`` for ``R`` replicates."""
    return float(stats.t.ppf((1.0 + _level(level)) / 2.0, check_count(replicates, "replicates", minimum=2) - 1))


def _replicates(values: Any, what: str = "values") -> Array:
    v = real_array(values, what, min_ndim=1)
    v = v[:, None] if v.ndim == 1 else v
    if v.ndim != 2 or v.shape[0] < 2:
        raise InputError(f"{what} must have shape (R, W) with R >= 2 independent replicates, got {v.shape}.")
    return v


def mean_interval(values: Any, *, level: float = 0.95) -> tuple[Array, Array]:
    """Mean over replicates and its Student-t interval, per column.

    Parameters
    ----------
    values : array, shape ``(R, W)`` (or ``(R,)``), ``R ≥ 2`` independent replicates
    level : float

    Returns
    -------
    mean : array, shape ``(W,)``
    interval : array, shape ``(W, 2)``
        ``mean ± t_{R−1} · sd / √R``.
    """
    v = _replicates(values)
    mean = v.mean(axis=0)
    half = t_quantile(level, v.shape[0]) * v.std(axis=0, ddof=1) / np.sqrt(v.shape[0])
    return mean, np.stack([mean - half, mean + half], axis=1)


def above(values: Any, baseline: Any, *, level: float = 0.95) -> Array:
    """Columns where ``mean(values − baseline)`` is above 0 by a one-sided paired t-test.

    ``values`` and ``baseline`` are ``(R, W)`` arrays whose rows are the same replicates
    (e.g. a distance and the noise floor of the same cell); the test is on the
    differences of the rows, so it is valid whatever the correlation of the two, with
    ``R − 1`` degrees of freedom. A scalar or ``(W,)`` baseline is a known constant.

    Returns
    -------
    array of bool, shape ``(W,)``
    """
    v = _replicates(values)
    diff = v - real_array(baseline, "baseline")
    num = v.shape[0]
    margin = stats.t.ppf(_level(level), num - 1) * diff.std(axis=0, ddof=1) / np.sqrt(num)
    return diff.mean(axis=0) > margin


@dataclass(frozen=True)
class LogLogFit:
    """A log-log fit ``value ≈ exp(intercept) · width^slope``.

    Attributes
    ----------
    slope, intercept : float
        Fitted to the per-width mean of the replicates.
    slope_ci, intercept_ci : (float, float)
        Student-t intervals over the replicates (delta method, module docstring).
    slope_se : float
        Standard error of the slope (before the t quantile).
    replicate_slopes : array, shape ``(R,)``
        Linearised per-replicate slopes ``s_r``; their mean is :attr:`slope`.
    widths : array, shape ``(W,)``
        The widths used in the fit.
    center : array, shape ``(W,)``
        Mean over replicates at each width.
    value_ci : array, shape ``(W, 2)``
        Student-t interval of the mean at each width.
    num_replicates : int
    level : float
    """

    slope: float
    slope_ci: tuple[float, float]
    slope_se: float
    replicate_slopes: Array
    intercept: float
    intercept_ci: tuple[float, float]
    widths: Array
    center: Array
    value_ci: Array
    num_replicates: int
    level: float

    @property
    def interval(self) -> str:
        """How the intervals were computed, in words."""
        return interval_label(self.level, self.num_replicates)

    def predict(self, widths: Any) -> Array:
        """The fitted curve ``exp(intercept) · widths^slope``."""
        return np.exp(self.intercept) * real_array(widths, "widths") ** self.slope


def _sweep_arrays(widths: Any, values: Any) -> tuple[Array, Array]:
    w = real_array(widths, "widths", ndim=1)
    v = real_array(values, "values")
    if v.ndim == 1:
        v = v[None, :]
    if v.ndim != 2 or v.shape[1] != len(w):
        raise InputError(f"values must have shape (R, {len(w)}) to match widths, got {v.shape}.")
    if np.any(w <= 0):
        raise InputError("widths must be positive.")
    if v.shape[0] < 2:
        raise InputError(f"intervals need at least 2 independent replicates (rows of values), got {v.shape[0]}.")
    return w, v


def fit_loglog(widths: Any, values: Any, *, level: float = 0.95) -> LogLogFit:
    """Fit ``log(mean value) = intercept + slope · log(width)`` with Student-t intervals.

    Parameters
    ----------
    widths : array, shape ``(W,)``, ``W ≥ 2`` distinct positive widths
    values : array, shape ``(R, W)``, ``R ≥ 2``
        Independent replicates (rows); every per-width mean must be positive (single
        values may be zero or negative, e.g. linearised or debiased ones).
    level : float
        Confidence level of all intervals.
    """
    w, v = _sweep_arrays(widths, values)
    if len(np.unique(w)) < 2:
        raise InputError("a slope needs at least 2 distinct widths.")
    c = v.mean(axis=0)
    if np.any(c <= 0):
        bad = w[c <= 0].tolist()
        raise InputError(f"the mean is not positive at widths {bad}; drop them (see fit_with_floor).")
    num = v.shape[0]
    x = np.log(w)
    xc = x - x.mean()
    a = xc / (xc @ xc)  # slope = a · log c
    b = 1.0 / len(x) - x.mean() * a  # intercept = b · log c
    slope, intercept = float(a @ np.log(c)), float(b @ np.log(c))
    rel = (v - c) / c  # first-order change of log c_j contributed by replicate r, times R
    reps_slope, reps_intercept = slope + rel @ a, intercept + rel @ b
    t = t_quantile(level, num)
    se_slope = float(reps_slope.std(ddof=1) / np.sqrt(num))
    se_intercept = float(reps_intercept.std(ddof=1) / np.sqrt(num))
    _, value_ci = mean_interval(v, level=level)
    return LogLogFit(
        slope=slope,
        slope_ci=(slope - t * se_slope, slope + t * se_slope),
        slope_se=se_slope,
        replicate_slopes=reps_slope,
        intercept=intercept,
        intercept_ci=(intercept - t * se_intercept, intercept + t * se_intercept),
        widths=w,
        center=c,
        value_ci=value_ci,
        num_replicates=num,
        level=level,
    )


@dataclass(frozen=True)
class Debiased:
    """Floor-corrected distances per width, from ``R`` replicates of a distance and its floor.

    Attributes
    ----------
    value : array, shape ``(W,)``
        ``debias(mean raw, mean floor)``.
    ci : array, shape ``(W, 2)``
        The Student-t interval of the :func:`~netsor.stats.distances.debias_argument`
        ``q`` (linearised per replicate: raw and floor noise of each replicate together)
        carried through the monotone map ``max(q, 0)^κ``: never degenerate at 0, e.g.
        ``[0, 0.003]`` where the distance is lost in the floor.
    replicates : array, shape ``(R, W)``
        Per-replicate linearised debiased values (delta method): their mean is ``value``
        and their spread its uncertainty. Where ``q ≤ 0`` they all equal ``value`` = 0.
    """

    value: Array
    ci: Array
    replicates: Array


def debias_replicates(raw: Any, floor: Any, *, rule: str = "quadrature", level: float = 0.95) -> Debiased:
    """Debias the per-width means of ``raw`` by those of ``floor``, with intervals.

    ``raw`` and ``floor`` are ``(R, W)`` arrays whose rows are the same replicates (the
    floor of each cell), so any correlation between a distance and its floor is kept.
    """
    r, f = _replicates(raw, "raw"), _replicates(floor, "floor")
    if r.shape != f.shape:
        raise InputError(f"raw and floor must have the same shape (R, W) (row r = replicate r), "
                         f"got {r.shape} and {f.shape}.")
    r_mean, f_mean = r.mean(axis=0), f.mean(axis=0)
    q, dq_dr, dq_df = debias_argument(r_mean, f_mean, rule=rule)
    q_reps = q + dq_dr * (r - r_mean) + dq_df * (f - f_mean)
    _, q_ci = mean_interval(q_reps, level=level)
    kappa = DEBIAS_EXPONENT[rule]
    value = np.maximum(q, 0.0) ** kappa
    with np.errstate(divide="ignore", invalid="ignore"):
        reps = np.where(q > 0, value * (1.0 + kappa * (q_reps - q) / q), value)
    return Debiased(value, np.maximum(q_ci, 0.0) ** kappa, reps)


@dataclass(frozen=True)
class FloorAwareFit:
    """Raw, floor and debiased log-log fits of one sweep.

    Attributes
    ----------
    raw, floor : LogLogFit
        Fits of the raw distances and of the noise floor at all widths.
    debiased : LogLogFit or None
        Fit of the debiased distances at the kept widths (None if fewer than 2 kept), on
        the linearised replicates of :class:`Debiased`: its slope is that of
        ``log debias(mean raw, mean floor)`` and its interval includes the floor's noise.
    corrected : Debiased
        Debiased distances with intervals at all widths.
    kept_widths, dropped_widths : arrays of widths
        Widths where the raw distance is / is not significantly above the floor
        (:func:`above`, one-sided at the fit's level).
    rule : str
        Debiasing rule (:func:`netsor.stats.distances.debias`).
    """

    raw: LogLogFit
    floor: LogLogFit
    debiased: LogLogFit | None
    corrected: Debiased
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
) -> FloorAwareFit:
    """Fit raw distances, their noise floor and the debiased distances.

    A width is kept for the debiased fit when the raw distance is above the floor by a
    one-sided paired t-test at ``level`` (:func:`above`). The debiased values are
    :func:`debias_replicates`, so the debiased slope's interval includes the noise of
    the floor as well as that of the distance.

    Parameters
    ----------
    widths : array, shape ``(W,)``
    raw : array, shape ``(R, W)``, ``R ≥ 2``
    floor : array, shape ``(R, W)``
        The noise floor of each cell: row ``r`` belongs to the same replicate as ``raw[r]``.
    rule, level
        As in :func:`netsor.stats.distances.debias` and :func:`fit_loglog`.
    """
    w, r = _sweep_arrays(widths, raw)
    corrected = debias_replicates(r, floor, rule=rule, level=level)
    f = real_array(floor, "floor")
    keep = above(r, f, level=level)
    return FloorAwareFit(
        raw=fit_loglog(w, r, level=level),
        floor=fit_loglog(w, f, level=level),
        debiased=fit_loglog(w[keep], corrected.replicates[:, keep], level=level) if keep.sum() >= 2 else None,
        corrected=corrected,
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
    kh = real_array(Khat, "Khat", min_ndim=1)
    k = real_array(K, "K")
    if kh.shape[1:] != k.shape:
        raise InputError(f"Khat must have shape (S, *{k.shape}), got {kh.shape}.")
    diff = (kh - k).reshape(len(kh), -1)
    if check_choice(norm, "norm", ("abs", "fro")) == "abs":
        return float(np.abs(diff).mean())
    return float(np.sqrt((diff * diff).mean(axis=1)).mean())


# --------------------------------------------------------------------------- sweep runner


def jsonable(obj: Any) -> Any:
    """A JSON-ready copy: tuples become lists, numpy scalars/arrays become Python ones,
    paths become strings."""
    if isinstance(obj, np.ndarray | np.generic):
        return obj.tolist()
    if isinstance(obj, tuple | list):
        return [jsonable(o) for o in obj]
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, os.PathLike):
        return os.fspath(obj)
    if obj is None or isinstance(obj, str | bool | int | float):
        return obj
    raise InputError(
        f"cannot store {type(obj).__name__} {obj!r}: cells and results must be made of "
        "str, int, float, bool, None, tuples, lists, dicts and numpy arrays."
    )


def cell_key(cell: Hashable) -> str:
    """Canonical string of a cell (stable across runs and Python processes)."""
    return json.dumps(jsonable(cell), sort_keys=True, separators=(",", ":"))


def cell_seed(cell: Hashable, *, seed: Seed = 0) -> np.random.SeedSequence:
    """A SeedSequence determined by ``cell`` and ``seed`` only (not by run order).

    ``seed`` follows the project's seed policy (:mod:`netsor.validate`); the cell's
    canonical key is hashed into the spawn key of the seed's sequence. Use
    ``numpy.random.default_rng(cell_seed(cell, seed=seed))`` inside a sweep function so
    that a resumed or reordered sweep draws exactly the same numbers per cell.
    """
    root = seed_sequence(seed)
    digest = hashlib.sha256(cell_key(cell).encode()).digest()
    words = tuple(int(w) for w in np.frombuffer(digest[:16], dtype=np.uint32))
    return np.random.SeedSequence(root.entropy, spawn_key=(*root.spawn_key, *words), pool_size=root.pool_size)


def _store(store_path: Any) -> Path:
    """``store_path`` as a Path (InputError for anything that is not a path)."""
    try:
        return Path(store_path)
    except TypeError:
        raise InputError(f"store_path must be a path to a JSON-lines file, got {type(store_path).__name__}") from None


def load_sweep(store_path: str | os.PathLike) -> dict[str, dict[str, Any]]:
    """Finished cells of a sweep store, ``{cell_key: result}``.

    ``store_path`` is the JSON-lines file written by :func:`run_sweep` (missing: no cell is
    finished). A half-written last line (an interrupted write) is ignored; a corrupt line
    elsewhere, or a path that is not a file, raises :class:`InputError`.
    """
    path = _store(store_path)
    if not path.exists():
        return {}
    if not path.is_file():
        raise InputError(f"{path} is not a file: pass the JSON-lines file written by run_sweep, e.g. "
                         f"{path / 'sweep.jsonl'}")
    lines = path.read_bytes().split(b"\n")
    done: dict[str, dict[str, Any]] = {}
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            done[cell_key(record["cell"])] = record["result"]
        except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError) as exc:
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

    if not callable(fn):
        raise InputError(f"fn must be a callable cell -> dict, got {type(fn).__name__}.")
    try:
        cells = list(cells)
    except TypeError:
        raise InputError(f"cells must be an iterable of cells, got {type(cells).__name__}.") from None
    for cell in cells:
        try:
            hash(cell)
        except TypeError:
            raise InputError(f"cell {cell!r} is not hashable (the result is a dict keyed by cell); use tuples "
                             "instead of lists, e.g. (1, 2) for [1, 2].") from None
    keys = [cell_key(c) for c in cells]
    if len(set(keys)) != len(keys) or len(set(cells)) != len(cells):
        raise InputError("cells contain duplicates (equal cells, such as 1 and 1.0, count as one); give every "
                         "cell a distinct key.")
    path = _store(store_path)
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
            record = jsonable({"cell": cell, "result": result})
            fh.write(json.dumps(record) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
            done[key] = record["result"]
            bar.update()
    return {c: done[k] for c, k in zip(cells, keys, strict=True)}
