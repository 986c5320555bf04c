"""Kernels of functions with kinks and jumps off the origin at nearly parallel points, from the pair's angle.

Conventions as in :mod:`netsor.activations.distance_kernels`: ``(u, v)`` a centred Gaussian pair, ``Var u = a``,
``Var v = b``, angle ``θ`` (``Cov = √(ab) cos θ``), each with a bound (``da``, ``db``, an
:class:`~netsor.activations.distance_kernels.Angle` interval).

Why the angle. Two inputs a perturbation apart (1e-5, 1e-8) have ``1 − ρ`` of 1e-10 … 1e-16, which a
covariance holds to a few ulps *of 1* and, after a layer of quadrature, to its bound (~1e-11). A step kernel
``E[1{u > s} 1{v > t}]`` has slope ``φ₂(s, t) ~ 1/(2π sin θ)`` in the covariance: no covariance bound certifies it
there (relu6, hard_tanh and ``max(x, 0.7)`` NTKs of depth 3 at inputs 1e-5 apart: bounds 5e-8 … 1e-5 relative,
refused). In the angle the slope of any orthant ``P(X > x, Y > y)`` is ``e^(−Q/2)/(2π) ≤ 1/(2π)``, and the engine
carries the angle from the pair's distance to a few ulps of itself (:class:`~netsor.interpret.infinite.Distance`).
So here:

* :func:`step_pair`: ``E[F(u) G(v)]`` of piecewise-constant ``F, G`` (:class:`Steps`) — orthants by Owen's T with
  ``θ`` itself (:func:`~netsor.gaussian.piecewise.orthant`) — with a bound Lipschitz in the arguments' bounds;
* :func:`kinked_distance`: ``E[(φ(u) − φ(v))²]`` of a continuous piecewise-linear ``φ`` (``φ'`` a :class:`Steps`),
  accurate relative to itself, which carries the distance through a layer of such ``φ``. At fixed variances its
  change in θ is ``2√(ab) sin θ E[φ'(u) φ'(v)]`` (Price), so it is
  ``F₀ + 2√(ab) ∫₀^θ sin t K(t) dt`` with ``F₀ = E[(φ(√a X) − φ(√b X))²]`` (the proportional pair, in closed form
  by cells) and ``K`` the step kernel of ``φ'`` — the midpoint rule on :data:`PANELS` or more panels, with the bound of
  its second derivative (:func:`kinked_distance`). Meant for small angles (the engine takes it below
  :data:`SMALL_ANGLE`, the covariances elsewhere): its relative error ``~ Mθ/(12·panels²·K)``, M of the order of
  ``sup φ'² + (Σ|jumps|)²``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import special

from netsor.activations.distance_kernels import Angle
from netsor.gaussian import piecewise
from netsor.gaussian.quadrature import INV_SQRT_2PI

Array = np.ndarray
_EPS = np.finfo(float).eps

#: Panels of the distance's integral over the angle: at least PANELS, doubled (up to MAX_PANELS) until their width
#: is at most ``PANEL_STEP/√(M Σ|Jᵢ||Jⱼ|)`` (M the bound on the integrand's curvature): the distance's error then
#: moves the next step kernel by ~1e-10 of its scale.
PANELS = 8
MAX_PANELS = 32
PANEL_STEP = 5e-5
#: Angles (upper ends of their intervals) at which the engine takes these rules; beyond it the covariances are
#: as good (their slope 1/sin θ is moderate) and the panels' bound is not.
SMALL_ANGLE = 0.05
#: ``max |x| φ(x) = φ(1)``: the largest change of an orthant as its threshold scales, ``|∂P/∂a| ≤ Σ|J| ·
#: x φ(x)/(2a)``.
_X_PDF_MAX = INV_SQRT_2PI * float(np.exp(-0.5))
#: Gauss–Legendre rule on [−1, 1] for cells of width ``w ≤ 1/(1 + |x|)`` (x their centre): a line squared times
#: the normal density, which changes by at most a factor e over such a cell, integrated to ``_GL_RELATIVE``.
_GL_NODES, _GL_WEIGHTS = np.polynomial.legendre.leggauss(12)
_GL_RELATIVE = 1e-14


@dataclass(frozen=True)
class Steps:
    """A piecewise-constant function ``base + Σᵢ jumps[i] · 1{x > thresholds[i]}`` (thresholds finite, sorted,
    distinct; jumps nonzero). As the derivative of a continuous piecewise-linear ``φ`` it stands for
    ``φ(x) = const + base·x + Σᵢ jumps[i] (x − thresholds[i])₊``."""

    base: float
    thresholds: tuple[float, ...]
    jumps: tuple[float, ...]

    @classmethod
    def of(cls, pieces: tuple[piecewise.Piece, ...], *, derivative: bool = False) -> Steps | None:
        """The step function of :mod:`~netsor.gaussian.piecewise` pieces without exponentials, or (``derivative``)
        the derivative of a continuous piecewise-linear function given by its pieces; None for other functions
        (exponential or quadratic pieces, jumps of a function said continuous)."""
        found = cls._parts(pieces, derivative)
        if found is None:
            return None
        base, jumps, masses, scale = found
        if derivative and any(abs(m) > 1e-12 * scale for m in masses.values()):
            return None  # a jump: not continuous
        return cls._from_jumps(float(base), jumps)

    @classmethod
    def split(cls, pieces: tuple[piecewise.Piece, ...]) -> tuple[Steps, Steps] | None:
        """``(φ', s)`` of a piecewise-linear φ with jumps given by its pieces: φ' almost everywhere and the
        piecewise-constant ``s`` of φ's jumps (``φ − s`` continuous, with derivative φ'; x·1{x > ½}: φ' = 1{x > ½},
        s = ½·1{x > ½}); None for other functions."""
        found = cls._parts(pieces, True)
        if found is None:
            return None
        base, jumps, masses, _ = found
        return cls._from_jumps(float(base), jumps), cls._from_jumps(0.0, masses)

    @classmethod
    def _parts(cls, pieces: tuple[piecewise.Piece, ...], derivative: bool
               ) -> tuple[float, dict[float, float], dict[float, float], float] | None:
        """The base level, the jumps at each threshold, and (``derivative``) the point masses of the derivative at
        each threshold — φ's own jumps — and their scale."""
        base, jumps, masses = 0.0, {}, {}  # masses: the derivative's point masses at each threshold
        scale = 0.0
        for coef, power, rate, threshold, above in pieces:
            if rate != 0.0 or power > (1 if derivative else 0):
                return None
            if np.isinf(threshold):
                if (threshold < 0) == above:  # on the whole line
                    base += coef if power == (1 if derivative else 0) else 0.0
                continue
            # x^p 1{x < t} = x^p − x^p 1{x > t}
            sign = 1.0 if above else -1.0
            if not above:
                base += coef if power == (1 if derivative else 0) else 0.0
            if derivative:
                # d/dx [c x^p 1{x > t}] = c p x^(p−1) 1{x > t} + c t^p δ(x − t)
                if power == 1:
                    jumps[threshold] = jumps.get(threshold, 0.0) + sign * coef
                masses[threshold] = masses.get(threshold, 0.0) + sign * coef * threshold**power
                scale = max(scale, abs(coef) * (1.0 + abs(threshold)))
            else:
                jumps[threshold] = jumps.get(threshold, 0.0) + sign * coef
        return base, jumps, masses, scale

    @classmethod
    def _from_jumps(cls, base: float, jumps: dict[float, float]) -> Steps:
        """The function of ``base`` and the jumps at each threshold (zero jumps dropped, thresholds sorted)."""
        kept = sorted((t, j) for t, j in jumps.items() if j != 0.0)
        return cls(base, tuple(t for t, _ in kept), tuple(j for _, j in kept))

    def scaled(self, k: float) -> Steps:
        """``x ↦ F(k x)`` (``k ≠ 0``): thresholds ``t/k``; for ``k < 0``, ``1{kx > t} = 1 − 1{x > t/k}`` (almost
        surely)."""
        if k > 0:
            return Steps(self.base, tuple(t / k for t in self.thresholds), self.jumps)
        flipped = sorted((t / k, -j) for t, j in zip(self.thresholds, self.jumps, strict=True))
        return Steps(self.base + sum(self.jumps), tuple(t for t, _ in flipped), tuple(j for _, j in flipped))

    def times(self, alpha: float) -> Steps:
        """``α F``."""
        return Steps(alpha * self.base, self.thresholds, tuple(alpha * j for j in self.jumps))

    def plus(self, other: Steps) -> Steps:
        """``F + G``: the jumps at a shared threshold summed (those that cancel dropped)."""
        jumps: dict[float, float] = {}
        for t, j in (*zip(self.thresholds, self.jumps, strict=True), *zip(other.thresholds, other.jumps, strict=True)):
            jumps[t] = jumps.get(t, 0.0) + j
        return Steps._from_jumps(self.base + other.base, jumps)

    @property
    def largest(self) -> float:
        """``sup |F|``: the largest of its levels."""
        levels = self.base + np.concatenate([[0.0], np.cumsum(self.jumps)])
        return float(np.max(np.abs(levels)))

    @property
    def total_jump(self) -> float:
        """``Σ |jumps|``."""
        return float(sum(abs(j) for j in self.jumps))

    def level_at(self, x: Array) -> Array:
        """``F(x)`` (the value above a threshold at the threshold itself is not needed: it has probability 0)."""
        out = np.full(np.shape(x), self.base)
        for t, j in zip(self.thresholds, self.jumps, strict=True):
            out = out + j * (x > t)
        return out


def _step_pair_at(F: Steps, G: Steps, sa: Array, sb: Array, theta: Array) -> tuple[Array, Array]:
    """``E[F(u) G(v)]`` at standard deviations ``sa, sb`` and angle ``theta`` (arrays broadcast), and a bound on
    its evaluation error (Owen's T to ``SPECIAL_RELATIVE`` of the orthants' magnitudes, the sums' rounding)."""
    sine, cosine = np.sin(theta), np.cos(theta)
    value = np.full(np.broadcast_shapes(np.shape(sa), np.shape(sb), np.shape(theta)), F.base * G.base)
    error = 4 * _EPS * np.abs(value)
    rel = piecewise.SPECIAL_RELATIVE + 64 * _EPS
    for t, j in zip(F.thresholds, F.jumps, strict=True):
        tail = special.ndtr(-t / sa)
        value = value + G.base * j * tail
        error = error + abs(G.base * j) * rel * tail
    for t, j in zip(G.thresholds, G.jumps, strict=True):
        tail = special.ndtr(-t / sb)
        value = value + F.base * j * tail
        error = error + abs(F.base * j) * rel * tail
    exact = sine == 0.0  # θ = 0: one variable, P(X > max(h, k))
    safe = np.where(exact, 1.0, sine)
    for t, j in zip(F.thresholds, F.jumps, strict=True):
        h = t / sa
        for t2, j2 in zip(G.thresholds, G.jumps, strict=True):
            k = t2 / sb
            p, size = piecewise.orthant(h, k, cosine, safe, theta=theta)
            p = np.where(exact, special.ndtr(-np.maximum(h, k)), p)
            value = value + j * j2 * p
            error = error + abs(j * j2) * rel * size
    return value, error


def step_pair(F: Steps, G: Steps, a: Array, da: Array, b: Array, db: Array, ang: Angle) -> tuple[Array, Array]:
    """``E[F(u) G(v)]`` and a bound on its error, for piecewise-constant ``F, G`` of a pair within the bounds
    (variances ``a ± da``, ``b ± db`` with ``a > da``, ``b > db``; the angle in ``ang``'s interval).

    The bound: the evaluation's, plus the arguments' through slopes bounded over the whole box — in θ,
    ``Σ|Jᵢ||Kⱼ|/(2π)`` (each orthant's ``e^(−Q/2)/(2π)``); in ``a``, ``Σ|Jᵢ| · max|x φ(x)|/(2a) · sup|G|`` (a threshold
    ``t/√a`` moves by ``x/(2a)`` per unit of ``a``; the orthant by ``φ(x)`` per unit of it), the same in ``b`` —
    and the rounding of the thresholds ``t/√a`` (a few ulps: a relative change of ``a`` of as many)."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    value, error = _step_pair_at(F, G, np.sqrt(a), np.sqrt(b), ang.theta)
    a_lo, b_lo = a - da, b - db
    slope_theta = F.total_jump * G.total_jump / (2.0 * np.pi)
    slope_a = F.total_jump * _X_PDF_MAX / (2.0 * a_lo) * G.largest
    slope_b = G.total_jump * _X_PDF_MAX / (2.0 * b_lo) * F.largest
    error = (error + slope_theta * ang.width() + slope_a * (da + 8 * _EPS * a) + slope_b * (db + 8 * _EPS * b)
             + slope_theta * 8 * _EPS * ang.theta)
    return value, error


def _proportional_distance(slopes: Steps, a: Array, b: Array) -> tuple[Array, Array]:
    """``F₀ = E[(φ(√a X) − φ(√b X))²]`` for ``φ' = slopes`` and a bound on its rounding: on each cell between the
    thresholds ``t/√a`` and ``t/√b`` the difference is ``A + B X`` — a ramp active at both points contributes
    ``γ (√a − √b) X`` with ``√a − √b = (a − b)/(√a + √b)`` (no cancellation), one active at one point its own line —
    and ``E[(A + BX)² 1{cell}]`` is a truncated moment."""
    a, b = np.broadcast_arrays(np.asarray(a, dtype=float), np.asarray(b, dtype=float))
    sa, sb = np.sqrt(a), np.sqrt(b)
    delta = (a - b) / (sa + sb)
    ts = np.array(slopes.thresholds, dtype=float)
    js = np.array(slopes.jumps, dtype=float)
    # the cells' ends: every threshold at both points, sorted per entry
    ends = np.sort(np.concatenate([t / sa[..., None] for t in ts] + [t / sb[..., None] for t in ts]
                                  + [np.full(sa.shape + (1,), -np.inf), np.full(sa.shape + (1,), np.inf)], axis=-1)
                   if ts.size else np.stack([np.full(sa.shape, -np.inf), np.full(sa.shape, np.inf)], axis=-1),
                   axis=-1)
    value, size = np.zeros(sa.shape), np.zeros(sa.shape)
    for c in range(ends.shape[-1] - 1):
        lo, hi = ends[..., c], ends[..., c + 1]
        mid = np.where(np.isinf(lo), np.where(np.isinf(hi), 0.0, hi - 1.0), np.where(np.isinf(hi), lo + 1.0,
                                                                                     0.5 * (lo + hi)))
        A, B = np.zeros(sa.shape), slopes.base * delta
        for t, j in zip(ts, js, strict=True):
            on_a, on_b = sa * mid > t, sb * mid > t
            both = on_a & on_b
            B = B + j * np.where(both, delta, np.where(on_a, sa, np.where(on_b, -sb, 0.0)))
            A = A + j * np.where(both, 0.0, np.where(on_a, -t, np.where(on_b, t, 0.0)))
        (m0, s0), (m1, s1), (m2, s2) = piecewise.interval_moments(lo, hi)
        by_moments = A * A * m0 + 2.0 * A * B * m1 + B * B * m2
        size_moments = 32 * _EPS * (1 + len(ts)) * (A * A * s0 + 2.0 * np.abs(A * B) * s1 + B * B * s2)
        # a cell between t/√a and t/√b, where A + BX vanishes at one end: the moments cancel (each ~ the cell's
        # mass, their sum ~ its cube), the line evaluated at Gauss–Legendre nodes does not
        half = 0.5 * np.where(np.isfinite(hi - lo), hi - lo, 0.0)
        centre = np.where(np.isfinite(hi - lo), 0.5 * (lo + hi), 0.0)
        line = A[..., None] + B[..., None] * (centre[..., None] + half[..., None] * _GL_NODES)
        rounding = 4 * _EPS * (np.abs(A)[..., None] + np.abs(B[..., None] * (centre[..., None] + half[..., None]
                                                                                * _GL_NODES)))
        density = INV_SQRT_2PI * np.exp(-0.5 * (centre[..., None] + half[..., None] * _GL_NODES) ** 2) * _GL_WEIGHTS
        by_nodes = half * np.sum(line * line * density, axis=-1)
        size_nodes = half * np.sum((2.0 * np.abs(line) * rounding + rounding * rounding) * density, axis=-1)
        narrow = np.isfinite(hi - lo) & ((hi - lo) * (1.0 + np.abs(centre)) <= 1.0)
        value = value + np.where(narrow, by_nodes, by_moments)
        size = size + np.where(narrow, size_nodes * (1.0 + 64 * _EPS) + _GL_RELATIVE * by_nodes, size_moments)
    return np.maximum(value, 0.0), size + 16 * _EPS * value


def kinked_distance(slopes: Steps, a: Array, da: Array, b: Array, db: Array, ang: Angle, *,
                    limit: Array | None = None) -> tuple[Array, Array]:
    """``E[(φ(u) − φ(v))²]`` and a bound on its error for a continuous piecewise-linear ``φ`` with ``φ' = slopes``,
    a pair within the bounds (``a > da``, ``b > db``, the angle in ``ang``'s interval); see the module docstring.
    ``limit``: a bound another rule has (broadcast with the result); entries whose midpoint rule alone would
    exceed it are not integrated (bound inf).

    The bound: ``F₀``'s rounding; the midpoint rule's on the panels (``2√(ab) θ h² sup|f''|/24``, ``h = θ/panels``,
    ``f = sin t K(t)``, whose second derivative is bounded: ``sin t K''`` is, though ``K''`` is ~1/sin t) and their step
    kernels' evaluation errors; and the arguments' through slopes bounded over the box — in θ
    ``2√(ab) sin θ · K`` with ``K`` at most ``K(θ) + L·width`` over the angle's interval; in ``a`` (at fixed ``b``,
    θ) ``sup φ'² |√a − √b|/√a`` (of ``F₀``) plus ``(1 − cos θ)(√(b/a) sup φ'² + 2√(ab) · max|xφ(x)| Σ|Jᵢ| sup|φ'|/a)``
    (of the integral), the same in ``b``;
    the rounding of ``√a``, ``√b`` as a few ulps of ``a``, ``b``."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    sa, sb = np.sqrt(a), np.sqrt(b)
    theta = np.asarray(ang.theta, dtype=float)
    f0, f0_err = _proportional_distance(slopes, a, b)
    root = sa * sb
    # the midpoint rule's error, θ h² sup|f''|/24 for f(t) = sin t K(t): f'' = −sin t K + 2 cos t K' + sin t K'' with
    # K' = −Σ JᵢJⱼ e^(−Q/2)/(2π) and sin t · K'' = Σ JᵢJⱼ e^(−Q/2) (xᵢxⱼ − Q cos t)/(2π) (Q' = 2(xy − Q cos t)/sin t,
    # Q e^(−Q/2) ≤ 2/e), thresholds xᵢ = tᵢ/√a at most |tᵢ|/√(a − δa) (the same for b)
    jumps = np.abs(np.array(slopes.jumps))
    reach = np.abs(np.array(slopes.thresholds))
    cross = float(np.sum(np.outer(jumps, jumps)))
    spread = np.sum(np.outer(jumps * reach, jumps * reach)) / np.sqrt(np.maximum((a - da) * (b - db), 1e-300))
    curvature = slopes.largest**2 + (2.0 * cross + spread + 2.0 / np.e * cross) / (2.0 * np.pi)
    # panels per entry: from PANELS, doubled until the step h is at most PANEL_STEP/√(curvature · Σ|Jᵢ||Jⱼ|)
    shape = np.broadcast_shapes(np.shape(root), theta.shape, np.shape(curvature))
    theta_b, sa_b, sb_b = (np.broadcast_to(x, shape) for x in (theta, sa, sb))
    needed = theta_b * np.sqrt(np.broadcast_to(curvature, shape) * max(cross, 1.0)) / PANEL_STEP
    panels = np.minimum(PANELS * 2 ** np.ceil(np.log2(np.maximum(needed / PANELS, 1.0))), MAX_PANELS)
    midpoint = 2.0 * np.broadcast_to(root, shape) * theta_b**3 / panels**2 * curvature / 24.0
    beaten = np.zeros(shape, dtype=bool) if limit is None else midpoint > limit
    panels = np.where(beaten, 0, panels)
    integral, kernel_err = np.zeros(shape), np.zeros(shape)
    for n in np.unique(panels[panels > 0]):
        at = panels == n
        h = theta_b[at] / n
        for i in range(int(n)):
            mid = (i + 0.5) * h
            k, k_err = _step_pair_at(slopes, slopes, sa_b[at], sb_b[at], mid)
            weight = h * np.sin(mid)
            integral[at] += k * weight
            kernel_err[at] += k_err * weight
    h = theta_b / np.maximum(panels, 1)
    value = f0 + 2.0 * root * integral
    top = slopes.largest
    a_lo, b_lo = a - da, b - db
    a_hi, b_hi = a + da, b + db
    hi = np.minimum(ang.hi, np.pi)
    sine_hi = np.where(hi >= 0.5 * np.pi, 1.0, np.sin(hi))
    versine_hi = 2.0 * np.sin(0.5 * hi) ** 2
    root_gap = (np.abs(a - b) + da + db) / (np.sqrt(a_lo) + np.sqrt(b_lo))
    root_hi = np.sqrt(a_hi * b_hi)
    kernel_in_a = 2.0 * root_hi * _X_PDF_MAX * slopes.total_jump * top
    slope_a = top * top * root_gap / np.sqrt(a_lo) + versine_hi * (np.sqrt(b_hi / a_lo) * top * top
                                                                    + kernel_in_a / (2.0 * a_lo))
    slope_b = top * top * root_gap / np.sqrt(b_lo) + versine_hi * (np.sqrt(a_hi / b_lo) * top * top
                                                                    + kernel_in_a / (2.0 * b_lo))
    # the slope in θ, 2√(ab) sin θ K(θ), over the angle's interval: K there within L·width of K(θ) (L = Σ|JᵢJⱼ|/(2π))
    # — not sup φ'², which is K's bound at θ = 0 only: with it, a relu-like φ's distance doubled its relative error a
    # layer (K = ½ of sup φ'²), refused at depth 40
    at_theta, at_theta_err = _step_pair_at(slopes, slopes, sa, sb, theta)
    kernel_hi = np.minimum(top * top, np.abs(at_theta) + at_theta_err + cross / (2.0 * np.pi) * ang.width())
    slope_theta = 2.0 * root_hi * sine_hi * kernel_hi
    error = (f0_err + 2.0 * root * (theta * h * h * curvature / 24.0 + kernel_err)
             + slope_theta * (ang.width() + 8 * _EPS * theta) + slope_a * (da + 8 * _EPS * a)
             + slope_b * (db + 8 * _EPS * b)
             + 16 * _EPS * value)
    return value, np.where(beaten, np.inf, error)


def jumped_pair(slopes: Steps, jumps: Steps, pieces: tuple[piecewise.Piece, ...], a: Array, da: Array, b: Array,
                db: Array, ang: Angle) -> tuple[Array, Array]:
    """``E[φ(u) φ(v)]`` and a bound on its error for a piecewise-linear φ with jumps (x·1{x > ½}, hard shrink) at a
    small angle: φ = ℓ + s with ``s`` the piecewise-constant ``jumps`` and ``ℓ`` continuous (``ℓ' = slopes``), and
    ``E[φ(u)φ(v)] = (E φ(u)² + E φ(v)² − D)/2`` with ``D = E[(φ(u) − φ(v))²] = D_ℓ + D_s + 2E[Δℓ Δs]``: ``D_ℓ`` by
    :func:`kinked_distance` (~θ²), ``D_s = E s(u)² + E s(v)² − 2E[s(u)s(v)]`` by :func:`step_pair` (~θ, whose
    evaluation is absolute), and the cross term only bounded, ``|E[Δℓ Δs]| ≤ √(D_ℓ D_s)`` (Cauchy–Schwarz, ~θ^{3/2}:
    3e-11 of the scale at θ = 1e-7; the covariances' bound, ~1e-16/θ, is the smaller above θ ~ 1e-6). The second
    moments are closed forms (:func:`~netsor.gaussian.piecewise.pair_expectation`); their change over the variances'
    bounds is at most ``√2 √(E φ⁴)/(2(a − δa))`` a unit (``∂_a`` of the Gaussian density, Cauchy–Schwarz), with
    ``|φ(x)| ≤ A + B|x|``, ``A = |φ(0)| + Σ|jumps|``, ``B = sup|ℓ'|``."""
    D_l, dD_l = kinked_distance(slopes, a, da, b, db, ang)
    s_uv, e_uv = step_pair(jumps, jumps, a, da, b, db, ang)
    flat = Angle(np.zeros(np.shape(ang.theta)), np.zeros(np.shape(ang.theta)), np.zeros(np.shape(ang.theta)))
    s_uu, e_uu = step_pair(jumps, jumps, a, da, a, da, flat)
    s_vv, e_vv = step_pair(jumps, jumps, b, db, b, db, flat)
    D_s = np.maximum(s_uu + s_vv - 2.0 * s_uv, 0.0)
    dD_s = e_uu + e_vv + 2.0 * e_uv + 4 * _EPS * (s_uu + s_vv + 2.0 * np.abs(s_uv))
    offset = abs(value_at_zero(pieces)) + jumps.total_jump
    top = slopes.largest
    halves = []
    for var, dvar in ((np.asarray(a, dtype=float), da), (np.asarray(b, dtype=float), db)):
        m2, m2_err, _ = piecewise.pair_expectation(pieces, pieces, var, var, 1.0, colinear=True)
        v = var + dvar
        fourth = (offset**4 + 4 * offset**3 * top * np.sqrt(2 * v / np.pi) + 6 * offset**2 * top**2 * v
                  + 8 * offset * top**3 * np.sqrt(2 / np.pi) * v**1.5 + 3 * top**4 * v * v)
        change = np.sqrt(2.0 * fourth) / (2.0 * (var - dvar)) * dvar
        halves.append((m2, m2_err + change))
    (ma, ea), (mb, eb) = halves
    value = 0.5 * (ma + mb - D_l - D_s)
    cross = np.sqrt((D_l + dD_l) * (D_s + dD_s))
    err = 0.5 * (ea + eb + dD_l + dD_s) + cross + 4 * _EPS * (ma + mb + D_l + D_s)
    return value, err


def value_at_zero(pieces: tuple[piecewise.Piece, ...]) -> float:
    """``φ(0⁻)`` of a function given by its pieces."""
    return float(sum(coef for coef, power, _, threshold, above in pieces
                     if power == 0 and ((above and threshold < 0) or (not above and threshold >= 0))))
