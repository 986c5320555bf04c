"""Closed-form pair expectations of piecewise-linear (and exponential-linear) functions with kinks anywhere.

A piecewise-linear φ of one variable (``hard_tanh``, ``clip(x, lo, hi)``, ``relu(x − 1)``, ``step(x + 0.3)``,
a traced ``relu(x + 1) − relu(x − 1) − 1``; jumps allowed) is, for every x off its kinks,

    φ(x) = α + β x + Σ_i γ_i (x − k_i)₊ + Σ_i δ_i 1{x > k_i},

and elu is ``x·1{x > 0} + α e^x 1{x < 0} − α 1{x < 0}``: both are sums of :data:`Piece` terms
``coef · x^p · e^(r x) · 1{x ≷ k}`` (p ∈ {0, 1}). ``E[φ(u) ψ(v)]`` of a centred Gaussian pair (``Var u = a``,
``Var v = b``, ``Cov = c``) is then a sum over pairs of terms; in standard coordinates (``X = u/√a``,
correlation ``ρ = c/√(ab)``, thresholds ``h = k/√a``, a term below its threshold taken in ``−X``) the
exponentials tilt the law — ``E[e^(tX + t'Y) F(X, Y)] = e^((t² + 2ρtt' + t'²)/2) E[F(X + t + ρt', Y + ρt + t')]`` —
and what is left are Tallis' truncated moments ``E[X^i Y^j 1{X > h, Y > k}]`` (i, j ≤ 1), closed forms in
``Φ``, ``φ`` and the orthant ``P(X > h, Y > k)`` — Owen's T function, as
``Φ₂(x, y; ρ) = ½(Φ(x) + Φ(y)) − T(x, a_x) − T(y, a_y) − β``. The Mehler series converges slowly for
kinks off the origin (their Hermite coefficients decay algebraically) and the nested quadrature that
took its place cost ~10⁵ nodes a pair: a depth-3 hard_tanh NNGP on 200 inputs took 7.5 s.

Errors: rounding of the parts (64 eps of their absolute sum), ``SPECIAL_RELATIVE`` of the special-function
values' magnitudes, and the rounding of ρ times the slope in ρ, all times the tilt's weight. Pairs within
``MIN_SINE`` of colinear (``√(1 − ρ²)`` in the denominators), or whose tilt weight exceeds ``e^MAX_TILT`` (an
exponential piece at a large variance: the weight multiplies the errors of far-tail orthants), are left to
the caller.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import special

from netsor.activations import Activation
from netsor.activations.segments import linear_segments
from netsor.gaussian.quadrature import INV_SQRT_2PI
from netsor.memo import BoundedMemo

Array = np.ndarray
_EPS = np.finfo(float).eps
#: Relative error allowed for each value of Φ, φ and Owen's T (measured against 40-digit quadrature: Owen's T
#: within 1.4e-14 of itself for |h| in [2, 9], 5e-17 absolute elsewhere; Φ by erfc, relative), applied to the
#: magnitudes of the parts (of an orthant: of its four Owen's-T terms, whose cancellation it covers).
SPECIAL_RELATIVE = 1e-13
#: Rounding of ρ from ``(a, b, c)`` (s is computed from ρ: its change is ``s δs = −ρ δρ``).
RHO_ROUNDING = 16 * _EPS
#: Pairs with ``√(1 − ρ²)`` below this are not taken here (their thresholds divide by it).
MIN_SINE = 1e-7
#: Largest exponent of a tilt's weight ``e^((t² + 2ρtt' + t'²)/2)`` taken here.
MAX_TILT = 20.0
#: Slope changes and jumps within this share of their sizes are rounding of the fitted segments.
_AFFINE_TOL = 1e-12


#: ``(coef, power, rate, threshold, above)``: ``coef · x^power · e^(rate·x) · 1{x > threshold}`` (``above``), or
#: ``1{x < threshold}``; threshold ±inf for none.
Piece = tuple[float, int, float, float, bool]

_CACHE: BoundedMemo[tuple[Piece, ...] | None] = BoundedMemo()


def of(act: Activation) -> tuple[Piece, ...] | None:
    """``act`` as a sum of :data:`Piece` terms: its declared ``pieces``, or, for a piecewise-linear φ with known
    kinks (affine on every cell between them, checked at six points of each), the ramps and jumps found
    there; None otherwise (smooth functions, affine or not, included)."""
    if act.pieces is not None:
        return act.pieces
    if act.smooth or not act.kinks_known or not act.kinks:
        return None
    return _CACHE.get(act.key, lambda: _derive(act))


def _derive(act: Activation) -> tuple[Piece, ...] | None:
    """The pieces of φ from its :func:`~netsor.activations.segments.linear_segments`: the first cell's line,
    then at each kink the change of slope (a ramp ``γ(x − k)₊ = γ x 1{x > k} − γk 1{x > k}``) and the jump."""
    segments = linear_segments(act)
    if segments is None:
        return None
    kinks = np.array(sorted(set(act.kinks)), dtype=float)
    slopes, intercepts = (np.array(t) for t in zip(*segments, strict=True))
    ramps = np.diff(slopes)
    jumps = (intercepts[1:] + slopes[1:] * kinks) - (intercepts[:-1] + slopes[:-1] * kinks)
    # differences of rounded fits: zero to rounding is zero (a kink listed but not there)
    ramps = np.where(np.abs(ramps) <= _AFFINE_TOL * (np.abs(slopes[1:]) + np.abs(slopes[:-1])), 0.0, ramps)
    level = (np.abs(intercepts[1:]) + np.abs(intercepts[:-1])
             + (np.abs(slopes[1:]) + np.abs(slopes[:-1])) * np.abs(kinks))
    continuous = np.abs(jumps) <= _AFFINE_TOL * (1.0 + level)
    jumps = np.where(continuous, 0.0, jumps)
    # a kink located to δ leaves a jump of ramp·δ between the fitted lines, taken as none: the ramp then starts
    # where the lines meet, else the line beyond it is off by ramp·δ everywhere (an opaque 0.09|x − 0.03| with its
    # kink located 4e-12 off: a kernel 2e-13 off within a bound of 1e-14)
    with np.errstate(divide="ignore", invalid="ignore"):
        meet = (intercepts[:-1] - intercepts[1:]) / (slopes[1:] - slopes[:-1])
    kinks = np.where(continuous & (ramps != 0.0) & np.isfinite(meet), meet, kinks)
    pieces: list[Piece] = [(float(intercepts[0]), 0, 0.0, -np.inf, True), (float(slopes[0]), 1, 0.0, -np.inf, True)]
    for k, ramp, jump in zip(kinks, ramps, jumps, strict=True):
        pieces += [(float(ramp), 1, 0.0, float(k), True), (float(jump - ramp * k), 0, 0.0, float(k), True)]
    return tuple(piece for piece in pieces if piece[0] != 0.0)


def _pdf(x: Array) -> Array:
    return INV_SQRT_2PI * np.exp(-0.5 * x * x)


def _upper(x: Array) -> Array:
    return special.ndtr(-x)


def orthant(h: Array, k: Array, rho: Array, s: Array, *, theta: Array | None = None) -> tuple[Array, Array]:
    """``P(X > h, Y > k)`` for the standard bivariate normal of correlation ``rho`` (``s = √(1 − ρ²) > 0``):
    ``Φ₂(−h, −k; ρ)`` by Owen's T; and the magnitude of the terms it is the sum of.

    ``theta``: the pair's angle (``ρ = cos θ``, ``s = sin θ``), given where it is known better than ``ρ`` (nearly
    parallel pairs: ``ρ`` rounds to 1 at θ < 1e-8): Owen's arguments ``(y − ρx)/(x s)`` take ``y − ρx`` as
    ``(y − x) + 2x sin²(θ/2)`` and the centred orthant is ``(π − θ)/(2π)`` — each accurate to a few ulps of itself,
    where ``y − ρx`` cancels."""
    x, y = -h, -k
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        if theta is None:
            gap_x, gap_y = y - rho * x, x - rho * y
        else:
            versine = 2.0 * np.sin(0.5 * theta) ** 2  # 1 − ρ
            gap_x, gap_y = (y - x) + x * versine, (x - y) + y * versine
        ax = gap_x / (x * s)
        ay = gap_y / (y * s)
    # T(0, ±∞) = ±1/4 (the limit x → 0 at fixed y − ρx): owens_t takes infinite a
    ax = np.where(x == 0.0, np.copysign(np.inf, gap_x), ax)
    ay = np.where(y == 0.0, np.copysign(np.inf, gap_y), ay)
    tx = np.where(np.isnan(ax), 0.0, special.owens_t(x, np.nan_to_num(ax, nan=0.0)))
    ty = np.where(np.isnan(ay), 0.0, special.owens_t(y, np.nan_to_num(ay, nan=0.0)))
    beta = np.where((x * y > 0) | ((x * y == 0) & (x + y >= 0)), 0.0, 0.5)
    half_x, half_y = 0.5 * special.ndtr(x), 0.5 * special.ndtr(y)
    p = half_x + half_y - tx - ty - beta
    both_zero = (x == 0.0) & (y == 0.0)  # 0/0 above: the centred orthant
    centred = 0.25 + np.arcsin(rho) / (2.0 * math.pi) if theta is None else (math.pi - theta) / (2.0 * math.pi)
    p = np.where(both_zero, centred, np.clip(p, 0.0, 1.0))
    # Owen's arguments are ill-conditioned where y − ρx cancels: their rounding (a few ulps of the terms) moves a by
    # ~ε/s, and T by ∂T/∂a = e^(−x²(1 + a²)/2)/(2π(1 + a²)) times that — |x·relu(x)| pairs of nearly parallel inputs
    # with a kink located 1e-16 off 0 were 6.7e-13 off under a bound of 2.8e-14 (its orthants' ρ-terms were exact);
    # counted in the size, which the callers multiply by SPECIAL_RELATIVE (and more)
    if theta is None:
        rounding_x, rounding_y = 4 * _EPS * (np.abs(y) + np.abs(rho * x)), 4 * _EPS * (np.abs(x) + np.abs(rho * y))
    else:
        rounding_x = 4 * _EPS * (np.abs(y - x) + np.abs(x * versine))
        rounding_y = 4 * _EPS * (np.abs(x - y) + np.abs(y * versine))
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        moved = [np.exp(-0.5 * t * t * (1.0 + a * a)) / (2.0 * math.pi * (1.0 + a * a))
                 * (r / (np.abs(t) * s) + 4 * _EPS * np.abs(a))
                 for t, a, r in ((x, ax, rounding_x), (y, ay, rounding_y))]
    conditioning = sum(np.where(np.isfinite(m) & (t != 0.0), m, 0.0) for m, t in zip(moved, (x, y), strict=True))
    conditioning = np.where(both_zero, 0.0, conditioning)
    return p, np.maximum(half_x + half_y + np.abs(tx) + np.abs(ty) + beta, p) + conditioning / SPECIAL_RELATIVE


def _truncated(h: Array | None, k: Array | None, rho: Array, s: Array
               ) -> dict[tuple[int, int], tuple[Array, Array, Array]]:
    """Tallis' moments ``E[X^i Y^j 1{X > h, Y > k}]`` (i, j ≤ 1; None: no threshold) of the standard bivariate
    normal, each as ``(value, Σ |parts| (an orthant counted by the magnitude of its terms), |∂/∂ρ|)``."""
    one, zero = np.ones(()), np.zeros(())
    if h is None and k is None:
        return {(0, 0): (one, one, zero), (1, 0): (zero, zero, zero), (0, 1): (zero, zero, zero),
                (1, 1): (rho, np.abs(rho), one)}
    if h is None or k is None:  # one threshold t on Z (Y if h is None), W the other variable
        t = k if h is None else h
        upper, pdf = _upper(t), _pdf(t)
        second = upper + t * pdf  # E[Z² 1{Z > t}]
        on_z, on_w = ((0, 1), (1, 0)) if h is None else ((1, 0), (0, 1))
        return {(0, 0): (upper, upper, zero), on_z: (pdf, pdf, zero), on_w: (rho * pdf, np.abs(rho) * pdf, pdf),
                (1, 1): (rho * second, np.abs(rho) * (upper + np.abs(t) * pdf), np.abs(second))}
    P, P_size = orthant(h, k, rho, s)
    ph, pk = _pdf(h), _pdf(k)
    A = _upper((k - rho * h) / s)  # P(Y > k | X = h)
    B = _upper((h - rho * k) / s)  # P(X > h | Y = k)
    density = ph * _pdf((k - rho * h) / s) / s  # φ₂(h, k; ρ) = ∂P/∂ρ
    x_part, y_part = (ph * A, rho * pk * B), (pk * B, rho * ph * A)
    xy = (rho * P, rho * h * ph * A, rho * k * pk * B, s * s * density)
    # ∂/∂ρ: of E[X 1] the φ(k)-terms, of E[XY 1] (Price) the orthant and its boundary terms
    return {(0, 0): (P, P_size, density),
            (1, 0): (sum(x_part), sum(np.abs(t) for t in x_part), pk * B + np.abs(k) * density),
            (0, 1): (sum(y_part), sum(np.abs(t) for t in y_part), ph * A + np.abs(h) * density),
            (1, 1): (sum(xy), np.abs(rho) * P_size + sum(np.abs(t) for t in xy[1:]),
                     P + np.abs(h) * pk * B + np.abs(k) * ph * A + np.abs(h * k) * density)}


def interval_moments(lo: Array, hi: Array) -> tuple[tuple[Array, Array], ...]:
    """``(E[X^n 1{lo < X < hi}], Σ |parts|)`` for n = 0, 1, 2 of a standard normal X (``lo``, ``hi`` may be ∓inf;
    an empty interval gives 0)."""
    lo, hi = np.broadcast_arrays(np.asarray(lo, dtype=float), np.asarray(hi, dtype=float))
    hi = np.maximum(hi, lo)
    p_lo, p_hi = _pdf(lo), _pdf(hi)
    q_lo, q_hi = _upper(lo), _upper(hi)
    with np.errstate(invalid="ignore"):  # x φ(x) → 0 at ±inf (inf · 0 is NaN)
        x_lo = np.where(np.isfinite(lo), lo * p_lo, 0.0)
        x_hi = np.where(np.isfinite(hi), hi * p_hi, 0.0)
    m0 = np.maximum(q_lo - q_hi, 0.0)
    return ((m0, q_lo + q_hi), (p_lo - p_hi, p_lo + p_hi),
            (m0 + x_lo - x_hi, q_lo + q_hi + np.abs(x_lo) + np.abs(x_hi)))


def _truncated_colinear(h: Array | None, k: Array | None, sign: float
                        ) -> dict[tuple[int, int], tuple[Array, Array, Array]]:
    """:func:`_truncated` for ``Y = sign·X`` exactly (a law of rank one: one variable at both points, e.g. a
    data-free vector): ``E[X^i Y^j 1{X > h, Y > k}] = sign^j E[X^(i+j) 1{X > h, sign·X > k}]``, one interval of
    one normal; no derivative in ρ (ρ = ±1 is exact, not rounded)."""
    inf = np.full((), np.inf)
    lo = -inf if h is None else h
    if sign > 0:
        lo = lo if k is None else np.maximum(lo, k)
        hi = inf
    else:
        hi = inf if k is None else -k
    moments = interval_moments(lo, hi)
    zero = np.zeros(())
    out = {}
    for i in (0, 1):
        for j in (0, 1):
            value, size = moments[i + j]
            out[(i, j)] = (sign**j * value, size, zero)
    return out


def _standard(piece: Piece, sd: Array) -> tuple[Array, int, Array, Array | None, float]:
    """A piece of ``φ(sd·X)`` as ``(coef, power, tilt, threshold or None, sign)`` over ``sign·X`` above the
    threshold (a piece below its threshold is taken in ``−X``)."""
    coef, power, rate, threshold, above = piece
    sign = 1.0 if above else -1.0
    c = coef * sd**power * sign**power
    h = None if np.isinf(threshold) else sign * threshold / sd
    if np.isinf(threshold) and (threshold > 0) == above:  # 1{x > +inf}: nothing
        c = 0.0 * sd
    return c, power, sign * rate * sd, h, sign


def _grouped(pieces: tuple[Piece, ...], sd: Array) -> dict[tuple[float, float, bool], tuple[dict[int, Array], Array,
                                                                                      Array | None, float]]:
    """The pieces of ``φ(sd·X)`` by (rate, threshold, side) — the moments depend on these only: a ramp and a jump
    at one kink share them — as ``({power: coefficient}, tilt, threshold or None, sign)``."""
    out: dict[tuple[float, float, bool], tuple[dict[int, Array], Array, Array | None, float]] = {}
    for piece in pieces:
        c, power, tilt, h, sign = _standard(piece, sd)
        coefs = out.setdefault(piece[2:], ({}, tilt, h, sign))[0]
        coefs[power] = coefs.get(power, 0.0) + c
    return out


def pair_expectation(F: tuple[Piece, ...], G: tuple[Piece, ...], a: Array, b: Array, c: Array, *,
                     means: tuple[Array, Array] | None = None, colinear: bool = False) -> tuple[Array, Array, Array]:
    """``(E[F(u + μ) G(v + ν)], error bound, done)`` for broadcastable ``a, b, c`` (variances > 0) and
    ``means = (μ, ν)`` (default 0); ``done`` is false (value and error 0) for pairs within ``MIN_SINE`` of
    colinear and pairs tilted beyond ``MAX_TILT``. A mean shifts the law like a tilt: in standard
    coordinates ``E[e^(tX) F(X + m)] = e^(t²/2 + tm) E[F(X + t + m)]``.

    ``colinear``: the law is exactly of rank one, ``v = sign(c)·√(b/a)·u`` (one variable read at two points —
    a data-free vector — not a correlation near ±1 from data): the moments are those of one normal on an
    interval (:func:`_truncated_colinear`), every pair is done but those tilted too far."""
    a, b, c = (np.asarray(t, dtype=float) for t in (a, b, c))
    mu, nu = (np.zeros(()), np.zeros(())) if means is None else (np.asarray(m, dtype=float) for m in means)
    shape = np.broadcast_shapes(a.shape, b.shape, c.shape, mu.shape, nu.shape)
    sa, sb = np.sqrt(a), np.sqrt(b)
    norm = sa * sb
    if colinear:
        if np.ndim(c) or not c != 0.0:
            raise ValueError("piecewise.pair_expectation: a colinear law needs one nonzero covariance (its sign)")
        rho = np.full((), math.copysign(1.0, float(c)))
        s = np.zeros(())
    else:
        rho = np.clip(c / norm, -1.0, 1.0)
        # s from ρ itself, not √(ab − c²)/√(ab): the moments' formulas cancel parts of size ~θ' = √(1 − ρ²) down
        # to O(θ'³) near ρ = ±1 (E[XY 1{X > 0, Y > 0}] = ρP + s/2π) only if P and s are of one ρ; the two
        # roundings, each ~ε/s, made relu(g) + relu(−g) of inputs 1e-6 from anti-parallel 1e-10 off under a
        # 1.7e-12 bound. (1 − ρ)(1 + ρ) is accurate to a few ulps of itself; 0 where ab ≤ c² (a point with itself)
        s = np.where(a * b - c * c > 0.0, np.sqrt(np.maximum((1.0 - rho) * (1.0 + rho), 0.0)), 0.0)
    done = np.broadcast_to(colinear or s >= MIN_SINE, shape).copy()
    s_safe = np.where(s >= MIN_SINE, s, 1.0)
    value, error = np.zeros(shape), np.zeros(shape)
    for (rate_f, *_), (coefs_f, tf, hf, sf) in _grouped(F, sa).items():
        for (rate_g, *_), (coefs_g, tg, hg, sg) in _grouped(G, sb).items():
            r = sf * sg * rho  # the correlation of (sf X, sg Y)
            tilted = rate_f != 0.0 or rate_g != 0.0 or means is not None
            if tilted:
                dx, dy = sf * mu / sa, sg * nu / sb  # the means of (sf X, sg Y)
                exponent = 0.5 * (tf * tf + 2.0 * r * tf * tg + tg * tg) + tf * dx + tg * dy
                done &= np.broadcast_to(exponent <= MAX_TILT, shape)
                weight = np.exp(np.minimum(exponent, MAX_TILT))
                mx, my = tf + r * tg + dx, r * tf + tg + dy  # the tilted means
                h, k = (None if hf is None else hf - mx), (None if hg is None else hg - my)
            else:
                h, k = hf, hg
            moments = _truncated_colinear(h, k, float(r)) if colinear else _truncated(h, k, r, s_safe)
            for p, cp in coefs_f.items():
                for q, cq in coefs_g.items():
                    if not tilted:
                        v, m, d = moments[(p, q)]
                        w = cp * cq
                        value += w * v
                        error += np.abs(w) * ((64 * _EPS + SPECIAL_RELATIVE) * m + RHO_ROUNDING * d)
                        continue
                    # E[(X + mx)^p (Y + my)^q 1{…}] = Σ_{i ≤ p, j ≤ q} mx^(p−i) my^(q−j) E[X^i Y^j 1{…}]
                    for i in range(p + 1):
                        for j in range(q + 1):
                            v, m, d = moments[(i, j)]
                            w = cp * cq * weight * (mx if i < p else 1.0) * (my if j < q else 1.0)
                            value += w * v
                            # rounding of the parts and of the weight, the special functions' own, ρ's
                            error += np.abs(w) * ((64 * _EPS + SPECIAL_RELATIVE) * m
                                                  + 64 * _EPS * np.abs(v * exponent) + RHO_ROUNDING * d)
    return np.where(done, value, 0.0), np.where(done, error, 0.0), done
