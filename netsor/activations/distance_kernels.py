"""Squared distances ``E[(φ(u) − φ(v))²]`` of a Gaussian pair, from the pair's own distance.

Conventions as in :mod:`netsor.activations.kernels`: ``(u, v)`` centred Gaussian, ``Var u = a``,
``Var v = b``, and here ``D = E[(u − v)²]`` (= ``a + b − 2c``) instead of the covariance ``c``;
``θ`` is the angle between the two, ``1 − cos θ = (D − (√a − √b)²) / (2√(ab))``.

Why a distance. Deep networks in the ordered phase drive the correlation of two inputs towards 1:
``1 − ρ`` shrinks geometrically (relu at σ_w = 1: it halves a layer). A covariance ``c`` carries
``1 − ρ`` only to a few ulps *of 1*, and the step kernel of the NTK's backward pass has slope
``1/(2π sin θ)`` in ρ — with ``1 − ρ`` at rounding, no bound on ``c`` certifies the kernel better
than its ½-Hölder modulus, ~1e-8 a layer. The distance ``D`` of the two points carries ``1 − ρ`` to
a few ulps *of itself* (its recursion never subtracts nearly equal numbers: relu's distance is
``D/2 − √(ab)(sin θ − θ cos θ)/π``, whose second term is ``O(θ³)``), so the angle, and the kernels
of positively homogeneous activations, keep their relative accuracy at any depth.

Every rule returns the value and a bound on its absolute error given absolute bounds ``da, db, dD``
on its arguments (their errors may be anything within them) — the rounding of its own arithmetic
included. Arrays broadcast (``a``: (B1, 1), ``b``: (1, B2), ``D``: (B1, B2) on a tile of pairs).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

Array = np.ndarray

_EPS = np.finfo(float).eps

#: Below this angle ``sin θ − θ cos θ`` is summed from its series (the closed form cancels: at
#: θ = 0.1 its two terms are ~300× the difference).
_SERIES_ANGLE = 0.1


@dataclass(frozen=True)
class Angle:
    """The angle ``θ`` of a Gaussian pair computed from its distance, and an interval ``[lo, hi]``
    that holds the angle of every pair within the arguments' bounds (rounding included)."""

    theta: Array
    lo: Array
    hi: Array

    def width(self) -> Array:
        """``max(hi − θ, θ − lo)``: a bound on the error of ``θ``."""
        return np.maximum(self.hi - self.theta, self.theta - self.lo)

    def within(self, other: Angle) -> Angle:
        """The angle in the intersection of two intervals that both hold the true angle (its value clipped
        into it): the tighter of two enclosures at every entry."""
        lo, hi = np.maximum(self.lo, other.lo), np.minimum(self.hi, other.hi)
        apart = lo > hi  # cannot be if both hold the angle; should one not, their union still does
        if np.any(apart):
            lo = np.where(apart, np.minimum(self.lo, other.lo), lo)
            hi = np.where(apart, np.maximum(self.hi, other.hi), hi)
        return Angle(np.clip(self.theta, lo, hi), lo, hi)

    def at(self, rows: Array, cols: Array, exact: Array) -> Angle:
        """The angle with the entries ``(rows, cols)`` known exactly (``exact``, no interval)."""
        theta, lo, hi = (np.array(np.broadcast_to(x, np.shape(self.theta))) for x in (self.theta, self.lo, self.hi))
        theta[rows, cols] = lo[rows, cols] = hi[rows, cols] = exact
        return Angle(theta, lo, hi)


#: ``(a, δa, b, δb, D, δD, angle) ↦ (E[(φ(u) − φ(v))²], its bound)``.
DistanceRule = Callable[[Array, Array, Array, Array, Array, Array, Angle], tuple[Array, Array]]


def _angle(one_minus_cos_half: Array) -> Array:
    """``θ = 2 asin √x`` for ``x = (1 − cos θ)/2`` (clipped to [0, 1]): accurate relative to θ itself
    where ``arccos(1 − 2x)`` would lose θ's digits to the rounding of ``1 − 2x``."""
    x = np.clip(one_minus_cos_half, 0.0, 1.0)
    return 2.0 * np.arcsin(np.sqrt(x))


def _root_gap(a: Array, da: Array, b: Array, db: Array, a_lo: Array, b_lo: Array) -> tuple[Array, Array, Array]:
    """``s = (√a − √b)²`` written ``(a − b)²/(√a + √b)²`` — second order in ``a − b``, so nothing cancels where
    the variances are nearly equal — and its ends over the variances' box ``[a_lo, a + da] × [b_lo, b + db]``
    (``|a − b|`` moves by at most ``da + db`` in it), the ends' rounding included (8 ulps)."""
    diff = np.abs(a - b)
    diff_lo, diff_hi = np.maximum(diff - da - db, 0.0), diff + da + db
    s = diff * diff / np.maximum((np.sqrt(a) + np.sqrt(b)) ** 2, 1e-300)
    s_lo = diff_lo * diff_lo / np.maximum((np.sqrt(a + da) + np.sqrt(b + db)) ** 2, 1e-300) * (1.0 - 8 * _EPS)
    s_hi = diff_hi * diff_hi / np.maximum((np.sqrt(a_lo) + np.sqrt(b_lo)) ** 2, 1e-300) * (1.0 + 8 * _EPS)
    return s, s_lo, s_hi


def angle(a: Array, da: Array, b: Array, db: Array, D: Array, dD: Array) -> Angle:
    """The angle of a pair from ``(a, b, D)`` with its interval (see :class:`Angle`).

    ``(1 − cos θ)/2 = (D − s)/(4√(ab))`` with ``s = (√a − √b)² = (a − b)²/(√a + √b)²`` — second order
    in ``a − b``, so it subtracts nothing comparable to ``D`` where the two points have nearly equal
    variances, and is bounded over the interval of ``a − b`` where they do not. ``θ`` is nondecreasing
    in that ratio, whose extremes over the arguments' box give the interval. Requires ``a > da`` and
    ``b > db`` (else the interval is [0, π])."""
    a, b, D = (np.asarray(x, dtype=float) for x in (a, b, D))
    a_lo, b_lo = a - da, b - db
    positive = bool(np.all(a_lo > 0.0) and np.all(b_lo > 0.0))  # else a (full) mask of the pairs that are
    if not positive:
        positive = (a_lo > 0.0) & (b_lo > 0.0)
        a_lo, b_lo = np.where(a_lo > 0.0, a_lo, 1.0), np.where(b_lo > 0.0, b_lo, 1.0)  # no NaN where refused
    a_hi, b_hi = a + da, b + db
    s, s_lo, s_hi = _root_gap(a, da, b, db, a_lo, b_lo)
    theta = _angle((D - s) / (4.0 * np.sqrt(a * b)))
    # rounding: the differences to an ulp of their largest term, the quotients to 16 ulps, asin and the
    # doubling to 4 more
    pad = dD + 2 * _EPS * (D + dD + s_hi)
    x_lo = np.maximum(D - pad - s_hi, 0.0) / (4.0 * np.sqrt(a_hi * b_hi)) * (1.0 - 16 * _EPS)
    x_hi = (D + pad - s_lo) / (4.0 * np.sqrt(a_lo * b_lo)) * (1.0 + 16 * _EPS)
    lo = _angle(x_lo) * (1.0 - 4 * _EPS)
    hi = np.minimum(_angle(x_hi) * (1.0 + 4 * _EPS), np.pi)
    if positive is not True:
        lo, hi = np.where(positive, lo, 0.0), np.where(positive, hi, np.pi)
    return Angle(theta, np.minimum(lo, theta), np.maximum(hi, theta))


def sine_gap(theta: Array) -> tuple[Array, Array]:
    """``sin θ − θ cos θ`` (≥ 0 on [0, π], ~θ³/3 at small θ) without cancellation, and the magnitude its
    rounding is relative to: the gap itself where it is summed from its series, ``sin θ + θ |cos θ|`` where
    the closed form subtracts."""
    theta = np.asarray(theta, dtype=float)
    t2 = theta * theta
    series = theta * t2 * (1.0 / 3.0 - t2 * (1.0 / 30.0 - t2 * (1.0 / 840.0 - t2 / 45360.0)))
    sine, cosine = np.sin(theta), theta * np.cos(theta)
    small = theta < _SERIES_ANGLE
    return np.where(small, series, sine - cosine), np.where(small, series, sine + np.abs(cosine))


@dataclass(frozen=True)
class PiecewiseLinearDistance:
    """The distance rule of ``φ(x) = above·x`` for ``x > 0`` and ``below·x`` for ``x < 0`` (relu: (1, 0),
    leaky_relu: (1, α), abs: (1, −1), identity: (1, 1)). With ``φ = β x + γ relu(x)``, ``β = below``,
    ``γ = above − below``, and ``E[(u − v)(relu u − relu v)] = D/2`` (Stein)::

        E[(φ(u) − φ(v))²] = (β² + βγ + γ²/2) D − γ² √(ab) (sin θ − θ cos θ)/π

    The second term is ``O(θ³)``: nothing cancels where the points are nearly parallel. Its partial
    derivatives: in ``D`` (at fixed variances) ``β² + βγ + γ²(π − θ)/(2π)`` (relu's kernel has slope
    ``E[step u step v]`` in ``c = (a + b − D)/2``), between ``β² + βγ`` and ``β² + βγ + γ²/2`` (abs: ±1, not the
    triangle inequality's 3, which compounded 3× a layer); in ``a`` (at fixed ``b, D``)
    ``γ²(θ − √(b/a) sin θ)/(2π)`` — of the order of θ, so errors of the variances barely move the distance of
    nearly parallel points — bounded over the arguments' box by the angle's interval."""

    above: float
    below: float

    def sides(self, k: float) -> tuple[int, Fraction, Fraction]:
        """``(1, A, B)`` with ``φ(k x) = A x`` for ``x > 0`` and ``B x`` for ``x < 0`` (``k ≠ 0``; a negative
        ``k`` swaps the slopes), in exact rationals."""
        up, down = (self.above, self.below) if k > 0 else (self.below, self.above)
        return 1, Fraction(k) * Fraction(up), Fraction(k) * Fraction(down)

    @property
    def even(self) -> bool:
        """``φ(−x) = φ(x)`` (abs): the distance of ``(u, v)`` is that of ``(u, −v)``."""
        return self.above == -self.below and self.above != 0.0

    @property
    def odd(self) -> bool:
        """``φ(−x) = −φ(x)`` (a linear φ): ``E[(φ(u) + φ(v))²]`` is the distance of ``(u, −v)``."""
        return self.above == self.below

    def __call__(self, a: Array, da: Array, b: Array, db: Array, D: Array, dD: Array, ang: Angle
                 ) -> tuple[Array, Array]:
        value, err = self._formula(a, da, b, db, D, dD, ang)
        if self.even:
            # nearly anti-parallel points: the formula's two terms (each ~4√(ab)) cancel to a distance of order
            # (π − θ)²; for an even φ it is the distance of (u, −v), whose angle π − θ is small — no cancellation
            flip = np.asarray(ang.theta) > 0.5 * np.pi
            if np.any(flip):
                D_m, dD_m, psi = _antipodal(a, da, b, db, ang)
                value_m, err_m = self._formula(a, da, b, db, D_m, dD_m, psi)
                value, err = np.where(flip, value_m, value), np.where(flip, err_m, err)
        return value, err

    def _formula(self, a: Array, da: Array, b: Array, db: Array, D: Array, dD: Array, ang: Angle
                 ) -> tuple[Array, Array]:
        beta, gamma = float(self.below), float(self.above) - float(self.below)
        linear, g2 = beta * beta + beta * gamma, gamma * gamma
        if g2 == 0.0:  # linear
            return linear * D, abs(linear) * (dD + 2 * _EPS * D)
        root_ab = np.sqrt(a * b)
        gap, magnitude = sine_gap(ang.theta)
        value = (linear + 0.5 * g2) * D - g2 * root_ab * gap / np.pi
        hi = ang.hi
        sine_hi = np.minimum(hi, 1.0)
        a_lo, b_lo = np.maximum(a - da, 1e-300), np.maximum(b - db, 1e-300)
        # where the box reaches θ = π the formula holds θ there (rounded arguments past anti-parallel):
        # its slopes are then ½ in D and √(b/a)/2 in a
        clipped = hi >= np.pi
        # linear + γ² t with t = (π − θ)/(2π) over the interval, or ½ (θ held at 0 or π): its ends
        slope_d = np.maximum(np.abs(linear + g2 * (np.pi - hi) / (2.0 * np.pi)), abs(linear + 0.5 * g2))
        ratio_a, ratio_b = np.sqrt((b + db) / a_lo), np.sqrt((a + da) / b_lo)
        slope_a = g2 * ((hi + ratio_a * sine_hi) / (2.0 * np.pi) + 0.5 * ratio_a * clipped)
        slope_b = g2 * ((hi + ratio_b * sine_hi) / (2.0 * np.pi) + 0.5 * ratio_b * clipped)
        # rounding: the series or the closed form of the gap (its terms to 8 ulps each, and θ's own rounding
        # through the gap's slope θ sin θ), the products and the difference
        gap_rounding = 8 * _EPS * (magnitude + ang.theta * ang.theta * sine_hi)
        rounding = (4 * _EPS * (abs(linear + 0.5 * g2) * D + g2 * root_ab * gap / np.pi)
                    + g2 * root_ab * gap_rounding / np.pi)
        err = slope_d * dD + slope_a * da + slope_b * db + rounding
        return np.maximum(value, 0.0), err


def piecewise_linear_angle(rule: PiecewiseLinearDistance, ang: Angle) -> Angle | None:
    """The angle of ``(φ(u), φ(v))`` — of their second moments, ``cos θ_φ = E[φ(u)φ(v)]/√(E φ(u)² E φ(v)²)``, the
    angle of ``W φ(g)`` between two points — from the angle ``θ`` of ``(u, v)``, for ``φ`` of :class:`rule
    <PiecewiseLinearDistance>` (positively homogeneous: the variances drop out). With ``Q = β² + βγ + γ²/2``::

        (1 − cos θ_φ)/2 = sin²(θ/2) − γ² (sin θ − θ cos θ)/(4π Q)

    (``O(θ²)`` minus ``O(θ³)``: nothing cancels at small angles, whatever the two points' variances — where the
    distance form of the angle, ``(D − (√a − √b)²)/(4√(ab))``, cancels for points of different norms). The map
    increases up to ``θ* = 2πQ/γ²`` and decreases beyond (abs: θ* = π/2), which the interval follows. None for
    ``φ = 0``."""
    beta, gamma = rule.below, rule.above - rule.below
    q = beta * beta + beta * gamma + 0.5 * gamma * gamma
    if q <= 0.0:
        return None
    weight = gamma * gamma / (4.0 * np.pi * q)

    def half_versine(theta: Array) -> tuple[Array, Array]:
        gap, magnitude = sine_gap(theta)
        square = np.sin(0.5 * theta) ** 2
        return np.maximum(square - weight * gap, 0.0), 16 * _EPS * (square + weight * magnitude)

    if rule.even:  # φ(u) = φ(−u): the map is symmetric about π/2 (its peak), read from min(θ, π − θ)
        ang = _folded(ang)
    value, _ = half_versine(ang.theta)
    (at_lo, pad_lo), (at_hi, pad_hi) = half_versine(ang.lo), half_versine(ang.hi)
    peak = np.pi if gamma == 0.0 else min(2.0 * np.pi * q / (gamma * gamma), np.pi)
    at_peak, pad_peak = half_versine(np.clip(peak, ang.lo, ang.hi))
    low = np.minimum(at_lo - pad_lo, at_hi - pad_hi)
    high = np.maximum(np.maximum(at_lo + pad_lo, at_hi + pad_hi), at_peak + pad_peak)
    theta = _angle(value)
    lo = np.minimum(_angle(np.maximum(low, 0.0)) * (1.0 - 4 * _EPS), theta)
    hi = np.maximum(np.minimum(_angle(high) * (1.0 + 4 * _EPS), np.pi), theta)
    return Angle(theta, lo, hi)


#: ``π − np.pi`` rounded up: the float π is below the true one by 1.2e-16.
_PI_DEFECT = 1.3e-16


#: Half an ulp of π: the rounding of ``π − x`` for ``x < π/2`` (exact for ``x ≥ π/2``, Sterbenz).
_PI_HALF_ULP = 2.3e-16


def reflected(ang: Angle) -> Angle:
    """The angle ``π − θ`` — of ``(u, −v)`` when ``ang`` is that of ``(u, v)`` — with its interval: the
    differences are exact where the subtracted end is at least π/2, padded by half an ulp of π elsewhere."""
    theta, lo, hi = (np.asarray(x, dtype=float) for x in (ang.theta, ang.lo, ang.hi))
    half = 0.5 * np.pi
    new_lo = np.maximum(np.pi - hi - np.where(hi < half, _PI_HALF_ULP, 0.0), 0.0)
    new_hi = np.pi - lo + _PI_DEFECT + np.where(lo < half, _PI_HALF_ULP, 0.0)
    value = np.pi - theta
    return Angle(value, np.minimum(new_lo, value), np.maximum(new_hi, value))


def _folded(ang: Angle) -> Angle:
    """``min(θ, π − θ)`` with its interval: an interval on one side of π/2 is mirrored onto [0, π/2], one
    across it becomes ``[min(lo, π − hi), π/2]``."""
    theta, lo, hi = (np.asarray(x, dtype=float) for x in (ang.theta, ang.lo, ang.hi))
    mirrored = reflected(ang)
    half = 0.5 * np.pi
    upper = lo >= half
    across = (lo < half) & (hi > half)
    return Angle(np.where(theta > half, mirrored.theta, theta),
                 np.where(upper, mirrored.lo, np.where(across, np.minimum(lo, mirrored.lo), lo)),
                 np.where(upper, mirrored.hi, np.where(across, half, hi)))


def _antipodal(a: Array, da: Array, b: Array, db: Array, ang: Angle) -> tuple[Array, Array, Angle]:
    """The distance ``E[(u + v)²] = (√a − √b)² + 4√(ab) sin²(ψ/2)`` of ``(u, −v)``, its bound, and its angle
    ``ψ = π − θ``, from the variances' box and the angle's interval (each part is monotone in its arguments,
    so the ends of the box give the distance's interval)."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    psi = reflected(ang)
    a_lo, b_lo = np.maximum(a - da, 0.0), np.maximum(b - db, 0.0)
    a_hi, b_hi = a + da, b + db
    s, s_lo, s_hi = _root_gap(a, da, b, db, a_lo, b_lo)
    D = s + 4.0 * np.sqrt(a * b) * np.sin(0.5 * psi.theta) ** 2
    D_lo = s_lo + 4.0 * np.sqrt(a_lo * b_lo) * np.sin(0.5 * psi.lo) ** 2
    D_hi = s_hi + 4.0 * np.sqrt(a_hi * b_hi) * np.sin(0.5 * np.minimum(psi.hi, np.pi)) ** 2
    # rounding: the quotient, the square root, the sine and the products to 16 ulps of the largest end
    dD = np.maximum(D_hi - D, D - D_lo) + 16 * _EPS * D_hi
    return D, dD, psi


@dataclass(frozen=True)
class JumpDistance:
    """The distance rule of a positively homogeneous function of degree 0 that jumps by ``jump`` at 0 (one
    value above, another below: step 1, sign 2): ``E[(φ(u) − φ(v))²] = jump² · θ/π`` (the two differ
    exactly when the signs of u and v do, with probability θ/π).

    ``levels``: the two values ``(above, below)`` where they are known (``above − below = jump``): step
    ``(1, 0)``, sign ``(1, −1)``, ``2 step(x) − step(−x)`` ``(2, −1)``. Any pair of such functions of one
    G-vector at two points is then linear in the points' angle (:func:`angle_pair_line`)."""

    jump: float
    levels: tuple[float, float] | None = None

    def sides(self, k: float) -> tuple[int, Fraction, Fraction] | None:
        """``(0, A, B)`` with ``φ(k x) = A`` for ``x > 0`` and ``B`` for ``x < 0`` (``k ≠ 0``; a negative ``k``
        swaps the levels), in exact rationals; None where the levels are not known."""
        if self.levels is None:
            return None
        up, down = self.levels if k > 0 else self.levels[::-1]
        return 0, Fraction(up), Fraction(down)

    @property
    def odd(self) -> bool:
        """``φ(−x) = −φ(x)`` (sign): levels known and opposite."""
        return self.levels is not None and self.levels[0] == -self.levels[1]

    def __call__(self, a: Array, da: Array, b: Array, db: Array, D: Array, dD: Array, ang: Angle
                 ) -> tuple[Array, Array]:
        scale = float(self.jump) ** 2 / np.pi
        value = scale * ang.theta
        return value, scale * ang.width() + 4 * _EPS * value


def combination(parts: Iterable[tuple[float, float, DistanceRule]], const: float | None = None
                ) -> DistanceRule | None:
    """The distance rule of ``const + Σ α φ(k x)`` from the parts ``(α, k, rule of φ)``, when every ``φ`` is
    piecewise linear with its kink at 0 or every ``φ`` jumps at 0 (``relu(x) + 0.01 x``, ``relu(−2x) + 3|x|``,
    ``2 step(x) − step(−x)``); None for a mix or another rule.

    ``φ(kx)`` with ``k < 0`` swaps the two slopes (times ``k``) or the two levels. The slopes, the jump and the
    levels are summed in rational arithmetic and rounded once: a sum that cancels (``relu(x) − relu(x)``)
    is 0, not a rounding residue. No distance sees the constant; a jump rule has its levels only where
    ``const`` is given (None: the sum is a function of x up to terms the rule does not describe) and every
    part's levels are known."""
    above, below, jump = Fraction(0), Fraction(0), Fraction(0)  # slopes or levels; the jump
    levels_known = const is not None
    kinds = set()
    for alpha, k, rule in parts:
        if alpha == 0.0:
            continue
        if k == 0.0:  # the constant α φ(0), which a jump rule does not know
            levels_known = levels_known and not isinstance(rule, JumpDistance)
            continue
        if not isinstance(rule, (PiecewiseLinearDistance, JumpDistance)):
            return None
        kinds.add(type(rule))
        if isinstance(rule, JumpDistance):
            jump += Fraction(alpha) * (1 if k > 0 else -1) * Fraction(rule.jump)
        sides = rule.sides(k)
        if sides is None:
            levels_known = False
        else:
            above, below = above + Fraction(alpha) * sides[1], below + Fraction(alpha) * sides[2]
    if len(kinds) > 1:
        return None
    if JumpDistance in kinds:
        levels = (float(Fraction(const) + above), float(Fraction(const) + below)) if levels_known else None
        return JumpDistance(float(jump), levels)
    return PiecewiseLinearDistance(float(above), float(below))


def angle_pair_line(left: tuple[float, float], right: tuple[float, float]) -> tuple[float, float]:
    """``(A, B)`` with ``E[φ(u) ψ(v)] = A + B θ`` for functions of degree 0 with levels ``left = (φ₊, φ₋)``
    and ``right = (ψ₊, ψ₋)`` (values where the argument is positive, negative) of two centred Gaussians ``u, v``
    at the angle θ: the signs agree with probability ``(π − θ)/π``, half of it on each orthant, so
    ``A = (φ₊ψ₊ + φ₋ψ₋)/2`` and ``B = −(φ₊ − φ₋)(ψ₊ − ψ₋)/(2π)``. Step with itself: ``(π − θ)/(2π)``."""
    (lp, lm), (rp, rm) = left, right
    return 0.5 * (lp * rp + lm * rm), -(lp - lm) * (rp - rm) / (2.0 * np.pi)
