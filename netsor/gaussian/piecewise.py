"""Closed-form pair expectations of piecewise-linear functions with kinks anywhere.

A piecewise-linear φ of one variable (``hard_tanh``, ``clip(x, lo, hi)``, ``relu(x − 1)``, ``step(x + 0.3)``,
a traced ``relu(x + 1) − relu(x − 1) − 1``; jumps allowed) is, for every x off its kinks,

    φ(x) = α + β x + Σ_i γ_i (x − k_i)₊ + Σ_i δ_i 1{x > k_i},

so ``E[φ(u) ψ(v)]`` of a centred Gaussian pair (``Var u = a``, ``Var v = b``, ``Cov = c``) is a sum of
expectations of products of ``1, x, (x − h)₊, 1{x > h}`` under the standard bivariate normal of
correlation ``ρ = c/√(ab)`` (thresholds ``h = k/√a``), each in closed form (Tallis' truncated moments)
from ``Φ``, ``φ`` and the orthant ``P(X > h, Y > k)`` — Owen's T function, as
``Φ₂(x, y; ρ) = ½(Φ(x) + Φ(y)) − T(x, a_x) − T(y, a_y) − β``. The Mehler series converges slowly for
kinks off the origin (their Hermite coefficients decay algebraically) and the nested quadrature that
took its place cost ~10⁵ nodes a pair: a depth-3 hard_tanh NNGP on 200 inputs took 7.5 s.

Errors: rounding of the parts (64 eps of their absolute sum) and ``SPECIAL_ERROR`` for each special-function
value times the factor it enters with. Pairs within ``MIN_SINE`` of colinear (``√(1 − ρ²)`` in the
denominators) are left to the caller.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass

import numpy as np
from scipy import special

from netsor.activations import Activation

Array = np.ndarray
_EPS = np.finfo(float).eps
#: Absolute error allowed for each value of Φ, φ and Owen's T (scipy's are within ~1e-16).
SPECIAL_ERROR = 1e-15
#: Rounding of ρ (and of s, as a change of ρ: ``s δs = −ρ δρ``) from ``(a, b, c)``.
RHO_ROUNDING = 16 * _EPS
#: Pairs with ``√(1 − ρ²)`` below this are not taken here (their thresholds divide by it).
MIN_SINE = 1e-7
#: Points per cell at which a function is checked to be affine (offsets in units of the cell or the scale).
_INNER = np.array([0.1, 0.35, 0.62, 0.9])
_OUTER = np.array([0.5, 1.7, 4.3, 11.0])
#: Relative departure from affine (per cell, at the check points) still taken as rounding.
_AFFINE_TOL = 1e-12


@dataclass(frozen=True)
class PiecewiseLinear:
    """``φ(x) = const + slope·x + Σ ramps_i (x − kinks_i)₊ + Σ jumps_i 1{x > kinks_i}`` off the kinks."""

    const: float
    slope: float
    kinks: Array
    ramps: Array
    jumps: Array


_CACHE: dict[object, PiecewiseLinear | None] = {}
_LOCK = threading.Lock()


def of(act: Activation) -> PiecewiseLinear | None:
    """``act`` as a :class:`PiecewiseLinear` when it is one with known kinks (affine on every cell between
    them, checked at four points of each), else None; smooth functions (affine or not) are None."""
    if act.smooth or not act.kinks_known or not act.kinks:
        return None
    key = act.key
    with _LOCK:
        if key in _CACHE:
            return _CACHE[key]
    found = _derive(act)
    with _LOCK:
        _CACHE[key] = found
    return found


def _derive(act: Activation) -> PiecewiseLinear | None:
    kinks = np.array(sorted(set(act.kinks)), dtype=float)
    if not np.all(np.isfinite(kinks)):
        return None
    scale = 1.0 + float(np.max(np.abs(kinks)))
    cells = [kinks[0] - scale * _OUTER[::-1]]
    cells += [lo + (hi - lo) * _INNER for lo, hi in zip(kinks[:-1], kinks[1:], strict=True)]
    cells.append(kinks[-1] + scale * _OUTER)
    points = np.stack(cells)  # (m + 1, 4)
    with np.errstate(all="ignore"):
        values = np.asarray(act.fn(points), dtype=float)
    if values.shape != points.shape or not np.all(np.isfinite(values)):
        return None
    slopes = (values[:, -1] - values[:, 0]) / (points[:, -1] - points[:, 0])
    intercepts = values[:, 0] - slopes * points[:, 0]
    fitted = intercepts[:, None] + slopes[:, None] * points
    size = 1.0 + np.abs(intercepts)[:, None] + np.abs(slopes[:, None] * points) + np.abs(values)
    if np.any(np.abs(values - fitted) > _AFFINE_TOL * size):
        return None
    ramps = np.diff(slopes)
    jumps = (intercepts[1:] + slopes[1:] * kinks) - (intercepts[:-1] + slopes[:-1] * kinks)
    # differences of rounded fits: zero to rounding is zero (a kink listed but not there)
    ramps = np.where(np.abs(ramps) <= _AFFINE_TOL * (np.abs(slopes[1:]) + np.abs(slopes[:-1])), 0.0, ramps)
    level = (np.abs(intercepts[1:]) + np.abs(intercepts[:-1])
             + (np.abs(slopes[1:]) + np.abs(slopes[:-1])) * np.abs(kinks))
    jumps = np.where(np.abs(jumps) <= _AFFINE_TOL * (1.0 + level), 0.0, jumps)
    keep = (ramps != 0.0) | (jumps != 0.0)
    return PiecewiseLinear(float(intercepts[0]), float(slopes[0]), kinks[keep], ramps[keep], jumps[keep])


def _basis(F: PiecewiseLinear, sd: Array) -> list[tuple[str, Array, Array | None]]:
    """``F(sd·X)`` as ``(kind, coefficient, threshold)`` over ``1``, ``X``, ``(X − h)₊``, ``1{X > h}``."""
    out: list[tuple[str, Array, Array | None]] = []
    if F.const != 0.0:
        out.append(("1", np.asarray(F.const), None))
    if F.slope != 0.0:
        out.append(("x", F.slope * sd, None))
    for k, ramp, jump in zip(F.kinks, F.ramps, F.jumps, strict=True):
        h = k / sd
        if ramp != 0.0:
            out.append(("r", ramp * sd, h))
        if jump != 0.0:
            out.append(("s", np.asarray(jump), h))
    return out


def _pdf(x: Array) -> Array:
    return np.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)


def _upper(x: Array) -> Array:
    return special.ndtr(-x)


def _orthant(h: Array, k: Array, rho: Array, s: Array) -> Array:
    """``P(X > h, Y > k)`` for the standard bivariate normal of correlation ``rho`` (``s = √(1 − ρ²) > 0``):
    ``Φ₂(−h, −k; ρ)`` by Owen's T."""
    x, y = -h, -k
    with np.errstate(divide="ignore", invalid="ignore"):
        ax = (y - rho * x) / (x * s)
        ay = (x - rho * y) / (y * s)
    # T(0, ±∞) = ±1/4 (the limit x → 0 at fixed y − ρx): owens_t takes infinite a
    ax = np.where(x == 0.0, np.copysign(np.inf, y - rho * x), ax)
    ay = np.where(y == 0.0, np.copysign(np.inf, x - rho * y), ay)
    tx = np.where(np.isnan(ax), 0.0, special.owens_t(x, np.nan_to_num(ax, nan=0.0)))
    ty = np.where(np.isnan(ay), 0.0, special.owens_t(y, np.nan_to_num(ay, nan=0.0)))
    beta = np.where((x * y > 0) | ((x * y == 0) & (x + y >= 0)), 0.0, 0.5)
    p = 0.5 * (special.ndtr(x) + special.ndtr(y)) - tx - ty - beta
    both_zero = (x == 0.0) & (y == 0.0)  # 0/0 above: the centred orthant
    return np.where(both_zero, 0.25 + np.arcsin(rho) / (2.0 * math.pi), np.clip(p, 0.0, 1.0))


def _term(kf: str, hf: Array | None, kg: str, hg: Array | None, rho: Array, s: Array
          ) -> tuple[Array, Array, Array, Array]:
    """``(E[f(X) g(Y)], Σ |parts|, factor of SPECIAL_ERROR, |∂/∂ρ|)`` for basis functions ``f``, ``g`` of
    kinds ``"1"``, ``"x"``, ``"r"`` (``(x − h)₊``), ``"s"`` (``1{x > h}``). The slope in ρ carries the
    rounding of ρ and s themselves: steps near colinear have ``∂P/∂ρ = φ₂(h, k; ρ) ~ 1/s``."""
    one, zero = np.ones(()), np.zeros(())
    if kf == "1" or kg == "1":
        kind, h = (kg, hg) if kf == "1" else (kf, hf)
        if kind == "1":
            return one, one, zero, zero
        if kind == "x":
            return zero, zero, zero, zero
        if kind == "s":
            return _upper(h), _upper(h), one, zero
        m = _pdf(h) - h * _upper(h)
        return m, _pdf(h) + np.abs(h) * _upper(h), 1.0 + np.abs(h), zero
    if kf == "x" and kg == "x":
        return rho, np.abs(rho), zero, one
    if kf == "x" or kg == "x":
        kind, h = (kg, hg) if kf == "x" else (kf, hf)
        part = _upper(h) if kind == "r" else _pdf(h)
        return rho * part, np.abs(rho * part), np.abs(rho), part
    if kf == "s" and kg == "r":  # symmetric in (X, h) ↔ (Y, k)
        return _term(kg, hg, kf, hf, rho, s)
    h, k = hf, hg
    P = _orthant(h, k, rho, s)
    ph, pk = _pdf(h), _pdf(k)
    if kf == "s":  # both steps
        return P, P, one, ph * _pdf((k - rho * h) / s) / s
    A = _upper((k - rho * h) / s)  # P(Y > k | X = h)
    B = _upper((h - rho * k) / s)  # P(X > h | Y = k)
    if kg == "s":  # E[(X − h)₊ 1{Y > k}] = φ(h) A + ρ φ(k) B − h P
        parts = (ph * A, rho * pk * B, -h * P)
        return sum(parts), sum(np.abs(p) for p in parts), 1.0 + np.abs(h), pk * B
    # E[(X − h)₊ (Y − k)₊] = (ρ + hk) P − k φ(h) A − h φ(k) B + s φ(h) φ((k − ρh)/s)
    parts = ((rho + h * k) * P, -k * ph * A, -h * pk * B, s * ph * _pdf((k - rho * h) / s))
    return sum(parts), sum(np.abs(p) for p in parts), (1.0 + np.abs(h)) * (1.0 + np.abs(k)), P


def pair_expectation(F: PiecewiseLinear, G: PiecewiseLinear, a: Array, b: Array, c: Array
                     ) -> tuple[Array, Array, Array]:
    """``(E[F(u) G(v)], error bound, done)`` for broadcastable ``a, b, c`` (variances > 0); ``done`` is
    false (value and error 0) for pairs within ``MIN_SINE`` of colinear."""
    a, b, c = (np.asarray(t, dtype=float) for t in (a, b, c))
    shape = np.broadcast_shapes(a.shape, b.shape, c.shape)
    sa, sb = np.sqrt(a), np.sqrt(b)
    norm = sa * sb
    rho = np.clip(c / norm, -1.0, 1.0)
    s = np.sqrt(np.maximum(a * b - c * c, 0.0)) / norm  # exact 0 for a point with itself
    done = np.broadcast_to(s >= MIN_SINE, shape)
    s_safe = np.where(s >= MIN_SINE, s, 1.0)
    value, size, special_factor, slope = np.zeros(shape), np.zeros(shape), np.zeros(shape), np.zeros(shape)
    for kf, cf, hf in _basis(F, sa):
        for kg, cg, hg in _basis(G, sb):
            v, m, e, d = _term(kf, hf, kg, hg, rho, s_safe)
            w = cf * cg
            value += w * v
            size += np.abs(w) * m
            special_factor += np.abs(w) * e
            slope += np.abs(w) * d
    # ρ = c/√(ab) and s = √(ab − c²)/√(ab) are each within a few eps of those of (a, b, c)
    error = 64 * _EPS * size + SPECIAL_ERROR * special_factor + RHO_ROUNDING * slope
    return np.where(done, value, 0.0), np.where(done, error, 0.0), done
