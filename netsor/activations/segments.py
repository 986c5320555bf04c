"""The linear pieces of an activation: ``(slope, intercept)`` on each interval between its kinks, when φ is
affine on every one (relu, |·|, step, leaky relu, hard tanh, clip, shifted relus, the identity)."""

from __future__ import annotations

import numpy as np

from netsor.activations.registry import Activation
from netsor.memo import BoundedMemo

_SEGMENTS: BoundedMemo[tuple[tuple[float, float], ...] | None] = BoundedMemo()
#: Where φ is read on each interval between its kinks (fractions of the interval).
_SAMPLE = np.array([0.03, 0.19, 0.42, 0.61, 0.88, 0.97])


def linear_segments(act: Activation) -> tuple[tuple[float, float], ...] | None:
    """``(slope, intercept)`` of φ on each interval between its (sorted, distinct) kinks when φ is linear on
    every one, else None; read from φ's values at six points of each interval (unbounded ones: width 3
    beside the last kink), once per activation. Values at a few points prove nothing of a user's φ
    between them: callers decide whom to trust."""
    return _SEGMENTS.get(act.key, lambda: _segments(act))


def _segments(act: Activation) -> tuple[tuple[float, float], ...] | None:
    edges = [-np.inf, *sorted(set(act.kinks)), np.inf]
    segments: list[tuple[float, float]] | None = []
    for lo, hi in zip(edges[:-1], edges[1:], strict=True):
        if np.isinf(lo) and np.isinf(hi):
            lo, hi = -1.5, 1.5
        elif np.isinf(lo):
            lo = hi - 3.0
        elif np.isinf(hi):
            hi = lo + 3.0
        x = lo + (hi - lo) * _SAMPLE  # not symmetric: an odd φ (tanh) is not linear at −t, 0, t
        with np.errstate(all="ignore"):
            y = np.asarray(act.fn(x), dtype=float)
        slope = (y[-1] - y[0]) / (x[-1] - x[0])
        intercept = y[0] - slope * x[0]
        misfit = np.max(np.abs(slope * x + intercept - y)) if y.shape == x.shape else np.inf
        if not np.all(np.isfinite(y)) or not misfit <= 1e-12 * (1.0 + np.max(np.abs(y))):
            segments = None
            break
        segments.append((float(slope), float(intercept)))
    return None if segments is None else tuple(segments)
