"""Pair expectations of functions separable given one argument, by conditioning on it on each side.

``F(p, q) = f(p) · h(κq + s(p))`` — a product of functions of one G-vector each (``hard_tanh(a)·hard_tanh(b)``,
``relu(a − ½)·step(b + 0.3)``, ``tanh(a)·erf(b + 0.2)``: s = 0), or a function of one argument shifted by a
function of the other (``tanh(relu(a) + c)``: f = 1, s = relu): given ``(p, p')`` (one argument of each side),
the pair ``(q, q')`` is Gaussian with means ``K (p, p')`` and a fixed covariance, so

    E[F G] = E[f(p) g(p') · E[h(κq + s(p)) h'(κ'q' + s'(p')) | p, p']]

is a two-dimensional integral of a function kinked only where ``f``, ``g`` and the shifts are. The inner pair
is a closed form where ``h`` and ``h'`` are piecewise linear (Tallis' truncated moments,
:mod:`~netsor.gaussian.piecewise`, the means shifting the thresholds), and Gauss–Hermite product rules where
both are smooth (growing until the difference of the last two meets the target). This is the rule for the
pairs the Mehler series cannot reach — nearly colinear inputs, whose series terms decay like ‖R‖^k with
‖R‖ → 1 — and that a four-dimensional rule could not afford (it went to randomised QMC:
``hard_tanh(a)·hard_tanh(b)`` at input correlation −0.989 reached 4.5e-4 relative, ``tanh(a)·tanh(b)`` at
−0.984 2.4e-4, ``tanh(relu(a) + c)`` at −0.989 2.8e-4).

This module does the linear algebra and states the integrand; :mod:`~netsor.gaussian.joint` integrates it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from netsor.activations import Activation, erf
from netsor.gaussian import piecewise
from netsor.gaussian.quadrature import hermite_rule, rule_on_panels

Array = np.ndarray
Plane = tuple[Array, float]
#: A conditional variance below this share of the variance it is left of counts as zero (the inner
#: argument is a multiple of the outer ones: nothing to condition on).
MIN_CONDITIONAL_SHARE = 1e-10
#: The outer pair's correlation must stay this far from ±1 (its whitening divides by √(1 − ρ²)).
MIN_OUTER_SINE = 1e-6


#: Gauss–Hermite nodes per axis of the smooth inner pair's rules, tried in turn: each value's error is
#: estimated by its difference with the previous rule's, and the ladder stops where that meets the target
#: (GH converges slowly where the function has poles near the real axis: tanh at variance 2, 24 nodes
#: 4e-5 off, 96 nodes 4e-9; erf, entire, 1e-13 at 96).
SMOOTH_NODES = (24, 40, 64, 96)
#: Inner integrand evaluations one conditioned pair may spend (values times the Gauss–Hermite rule's nodes, or
#: one per value of a closed form) before it gives way to the other rules (~15 s of work): a cusp of the outer
#: pair (``√|a|·tanh b``) made the outer quadrature refine for minutes a pair (6.6e-7 after 55 s on one pair;
#: a fresh-seed fuzz program ran for over 40 minutes); the conditioned pairs of the tests spend at most
#: 1.4·10⁹ (a kinked composition of two arguments to 1e-8).
CONDITIONED_PAIR_EVALUATIONS = 2**31
#: Values of the smooth inner rule evaluated at once (bounds its working memory to ~16 MB per array).
_BLOCK_VALUES = 1 << 21


#: ``erf x = E[2·1{x + ε > 0} − 1]`` with ``ε ~ N(0, ½)`` independent: a pair of erfs with means is a pair of
#: these steps (pieces of :mod:`~netsor.gaussian.piecewise`) of the law widened by ½ on the diagonal.
ERF_AS_STEP = ((-1.0, 0, 0.0, -np.inf, True), (2.0, 0, 0.0, 0.0, True))


class InnerPair:
    """``E[φ(X + μ) ψ(Y + ν)]`` for ``(X, Y)`` centred Gaussian of covariance ``(a, b, c)`` and arrays of means:
    :meth:`expect` returns ``(value, error bound or estimate, done)``."""

    def __init__(self, phi: Activation, psi: Activation, a: float, b: float, c: float, colinear: bool = False
                 ) -> None:
        """``colinear``: ``Y = (c/a) X`` exactly — one variable read at two points (a data-free vector)."""
        self.phi, self.psi, self.law, self.colinear = phi, psi, (a, b, c), colinear
        self.evaluations = 0  # of the integrands, for CONDITIONED_PAIR_EVALUATIONS
        self.pieces = (piecewise.of(phi), piecewise.of(psi))
        if phi.key == erf.key and psi.key == erf.key:  # a closed form too (Gauss–Hermite is slow for steep erfs)
            # (the private noises of the two erfs make even a colinear law a regular one)
            self.pieces, self.law, self.colinear = (ERF_AS_STEP, ERF_AS_STEP), (a + 0.5, b + 0.5, c), False

    @staticmethod
    def closed(phi: Activation, psi: Activation) -> bool:
        """Both piecewise linear, or both erf: a closed form."""
        return (piecewise.of(phi) is not None and piecewise.of(psi) is not None) or phi.key == psi.key == erf.key

    @staticmethod
    def takes(phi: Activation, psi: Activation) -> bool:
        """A closed form (:meth:`closed`), or both smooth (Gauss–Hermite)."""
        return InnerPair.closed(phi, psi) or (phi.smooth and psi.smooth)

    def expect(self, mu: Array, nu: Array, target: float = 0.0) -> tuple[Array, Array, Array]:
        """``target``: the largest error wanted at any node (the smooth rule's ladder stops there)."""
        a, b, c = self.law
        if self.pieces[0] is not None and self.pieces[1] is not None:
            self.evaluations += np.size(mu)
            return piecewise.pair_expectation(*self.pieces, a, b, c, means=(mu, nu), colinear=self.colinear)
        mu, nu = np.broadcast_arrays(np.asarray(mu, dtype=float), np.asarray(nu, dtype=float))
        shape = mu.shape
        mu, nu = mu.reshape(-1), nu.reshape(-1)
        value, error = self._hermite(mu, nu, SMOOTH_NODES[0]), np.full(mu.size, np.inf)
        todo = np.arange(mu.size)
        for n in SMOOTH_NODES[1:]:  # each value to the first rule that agrees with the previous one within target
            finer = self._hermite(mu[todo], nu[todo], n)
            error[todo] = np.abs(finer - value[todo])
            value[todo] = finer
            todo = todo[~(error[todo] <= target)]  # (NaN goes on, and is not done at the end)
            if not todo.size:
                break
        value, error = value.reshape(shape), error.reshape(shape)
        return value, error, np.isfinite(value) & np.isfinite(error)

    def _hermite(self, mu: Array, nu: Array, n: int) -> Array:
        """The product rule of n nodes on ``z₁`` at the means ``mu``, ``nu`` (1-D): ``X = √a z₁``,
        ``Y = (c/√a) z₁ + √(b − c²/a) z₂``, and on ``z₂`` as many, or 16 or 8 where the residual ``√(b − c²/a)``
        is below 1e-2 or 1e-4 of ``√b``: a law of rank one to rounding (``q`` and ``q'`` whose difference is
        fixed by the outer pair) needs no more — ψ analytic near the real axis, the rule's error on ``z₂`` falls
        like that share to the power 2m — where n² nodes at every outer node took a fuzz program 15 s."""
        a, b, c = self.law
        l11, l21 = math.sqrt(a), c / math.sqrt(a)
        l22 = math.sqrt(max(b - l21 * l21, 0.0))
        z, w = hermite_rule(n)
        residual = l22 / math.sqrt(b) if b > 0.0 else 0.0
        z2, w2 = hermite_rule(n if residual > 1e-2 else 16 if residual > 1e-4 else 8)
        out = np.empty(mu.size)
        self.evaluations += mu.size * n * z2.size
        step = max(1, _BLOCK_VALUES // (n * z2.size))
        for i in range(0, mu.size, step):
            m, v = mu[i:i + step, None], nu[i:i + step, None]
            inner = self.psi.fn((v + l21 * z)[..., None] + l22 * z2) @ w2  # (block, n): the z₂ sums
            out[i:i + step] = (self.phi.fn(m + l11 * z) * inner) @ w
        return out


@dataclass(frozen=True)
class Conditional:
    """``F(u) = outer(p) · inner(scale · q + shift(p))`` with ``p = u[arg]`` and ``q`` the other argument of a
    two-argument function: given ``p`` it is a function of ``q`` alone (``outer`` None: 1, ``shift`` None: 0).

    ``f(a)·g(b)`` has two (either argument outside), ``tanh(relu(a) + c)`` one (``a`` outside, tanh inside
    with the shift relu(a)); :func:`netsor.interpret.functions.joint_function` finds them."""

    arg: int
    inner: Activation
    outer: Activation | None = None
    shift: Activation | None = None
    scale: float = 1.0
    #: ``(slope, intercept)`` of the shift when it is affine in ``p`` (``(0, 0)`` without one), else None.
    affine_shift: tuple[float, float] | None = (0.0, 0.0)
    #: ``p = form·u``, a linear form of the arguments, instead of ``u[arg]``, and ``q = u[other]`` instead of
    #: ``u[1 − arg]`` (``relu(a + b − ½)·relu(0.6a + 1.4b)``: ``p = a + b``, ``q = b``, inner
    #: ``relu(0.8q + 0.6p)``; a function of k > 2 arguments through two such forms).
    form: tuple[float, ...] | None = None
    other: int | None = None

    def rows(self, k: int) -> tuple[Array, Array]:
        """The coefficients (k,) of ``p`` and of ``q`` on the k arguments ``u``."""
        p, q = np.zeros(k), np.zeros(k)
        if self.form is None:
            p[self.arg] = 1.0
        else:
            p[:] = self.form
        q[1 - self.arg if self.other is None else self.other] = 1.0
        return p, q

    def arguments(self, p: Array, q: Array, k: int) -> Array:
        """Arguments ``u`` (..., k) with these values of ``p`` and ``q`` (those of a form, the least-squares
        point: the function depends on ``u`` through ``p`` and ``q`` alone)."""
        row_p, row_q = self.rows(k)
        if self.form is None:
            u = np.zeros((*np.shape(p), k))
            u[..., self.arg], u[..., 1 - self.arg] = p, q
            return u
        return np.stack([p, q], axis=-1) @ np.linalg.pinv(np.stack([row_p, row_q]), rcond=1e-12).T

    def outside(self) -> tuple[Activation, ...]:
        """The functions of the outer argument: kinks of the conditioned integrand are theirs."""
        return tuple(f for f in (self.outer, self.shift) if f is not None)


@dataclass(frozen=True)
class ConditionedPair:
    """``E[F(U) G(V)]`` as ``E[f(p) g(p') · c(p, p')]`` with ``(p, p') ~ N(0, outer_cov)``.

    Attributes
    ----------
    sides : (Conditional, Conditional)
        How ``F`` and ``G`` read their outer arguments ``p`` and ``p'``.
    inner : InnerPair
        ``c(p, p') = inner.expect(κ gain[0] @ (p, p') + s(p), κ' gain[1] @ (p, p') + s'(p'))``: the inner
        functions given (p, p'), their law scaled by ``(κ, κ')``.
    outer_cov : array (2, 2)
    gain : array (2, 2)
        ``E[(q, q') | p, p'] = gain @ (p, p')``.
    """

    sides: tuple[Conditional, Conditional]
    inner: InnerPair
    outer_cov: Array
    gain: Array
    #: Lines where a kink of one inner function meets one of the other (a colinear inner pair's only kinks).
    crossings: tuple[Plane, ...] = ()

    @property
    def continuous(self) -> bool:
        """The integrand is continuous in ``(p, p')``: its outer factors and shifts are."""
        return all(f.continuous for side in self.sides for f in side.outside())

    def planes(self) -> tuple[Plane, ...]:
        """The kink lines of the integrand: ``p = k`` and ``p' = k'`` at the kinks of the outer factors and
        shifts, and the :attr:`crossings` (a regular inner pair's expectation is smooth in its means)."""
        return tuple((np.eye(2)[i], -float(k)) for i, side in enumerate(self.sides) for f in side.outside()
                     for k in f.kinks) + self.crossings

    def integrand(self, inner_error: list[float], target: float) -> Callable[[Array], Array]:
        """``f(p) g(p') c(p, p')`` for ``u = (p, p')`` of shape (..., 2); appends to ``inner_error`` the
        largest error of the inner expectation (times ``|f g|``, wanted below ``target``) over the nodes of
        each call. Raises :class:`NotConditioned` where it does not apply (a closed-form pair within
        ``MIN_SINE`` of colinear, a tilt too large, a non-finite rule)."""
        (left, right), K = self.sides, self.gain

        def fn(u: Array) -> Array:
            p, q = u[..., 0], u[..., 1]
            outer = _value(left.outer, p, 1.0) * _value(right.outer, q, 1.0)
            largest = float(np.max(np.abs(outer), initial=0.0))
            mu = left.scale * (K[0, 0] * p + K[0, 1] * q) + _value(left.shift, p, 0.0)
            nu = right.scale * (K[1, 0] * p + K[1, 1] * q) + _value(right.shift, q, 0.0)
            value, error, done = self.inner.expect(mu, nu, target=target / largest if largest > 0 else np.inf)
            if not np.all(done) or self.inner.evaluations > CONDITIONED_PAIR_EVALUATIONS:
                raise NotConditioned
            inner_error.append(float(np.max(np.abs(outer) * error, initial=0.0)))
            return outer * value

        return fn


def _value(f: Activation | None, x: Array, default: float) -> Array | float:
    return default if f is None else f.fn(x)


class NotConditioned(Exception):
    """The inner pair's rule does not apply at some node (the caller uses its other rules)."""


def conditionings(F: tuple[Conditional, ...], G: tuple[Conditional, ...], joint_cov: Array, k1: int = 2
                  ) -> list[ConditionedPair]:
    """``E[F(U) G(V)]`` for ``F`` of ``k1`` arguments and ``G`` (two each, or more read through two forms), ``(U, V)``
    of covariance ``joint_cov`` (k₁ + k₂, k₁ + k₂), as
    :class:`ConditionedPair` objects, one per pair of their :class:`Conditional` forms whose inner functions
    :meth:`InnerPair.takes` (piecewise-linear inner pairs first: their closed form is exact); none where none
    applies: outer functions with unknown kinks, an outer pair nearly colinear, or an inner argument that is a
    multiple of the outer ones.

    Where the two inner arguments are one variable (``q = q'`` in the law, bitwise: a data-free vector read at
    both points, ``hard_tanh(a)·step(0.6a + 0.8c + 0.3)`` with ``c = p.gaussian``), the inner pair is one normal
    (:class:`InnerPair` ``colinear``), whose expectation is kinked where a kink of one inner function meets
    one of the other: lines of ``(p, p')`` when the shifts are affine (:func:`_crossings`; else not taken)."""
    choices = [(f, g) for f in F for g in G if InnerPair.takes(f.inner, g.inner)
               and all(h.kinks_known for h in f.outside() + g.outside())]
    choices.sort(key=lambda fg: not InnerPair.closed(fg[0].inner, fg[1].inner))  # stable: closed forms first
    out = []
    for f, g in choices:
        S = _law_of(f, g, joint_cov, k1)
        A, B = S[:2, :2], S[2:, :2]
        if min(A[0, 0], A[1, 1]) <= 0.0 or A[0, 0] * A[1, 1] - A[0, 1] ** 2 <= MIN_OUTER_SINE**2 * A[0, 0] * A[1, 1]:
            continue
        gain = np.linalg.solve(A, B.T).T
        inner = S[2:, 2:] - gain @ B.T
        if np.any(np.diag(inner) <= MIN_CONDITIONAL_SHARE * np.diag(S[2:, 2:])):
            continue
        kf, kg = f.scale, g.scale
        shared = S[2, 2] == S[3, 3] == S[2, 3] == S[3, 2] and np.array_equal(S[2], S[3])  # q and q' are one variable
        if shared:
            if not InnerPair.closed(f.inner, g.inner):
                continue  # a smooth pair of one normal: the other rules took relu(u)·tanh(0.6u + 0.8c) 5–15× faster
            v = float(inner[0, 0])
            law = (kf * kf * v, kg * kg * v, kf * kg * v)
            gain[1] = gain[0]  # one variable: one conditional mean
        else:
            law = (float(kf * kf * inner[0, 0]), float(kg * kg * inner[1, 1]),
                   float(kf * kg * 0.5 * (inner[0, 1] + inner[1, 0])))
        pair = InnerPair(f.inner, g.inner, *law, colinear=shared)
        crossings: tuple[Plane, ...] = ()
        if pair.colinear:  # one normal through two piecewise functions: kinked where their kinks meet
            if f.affine_shift is None or g.affine_shift is None:
                continue  # they meet on curves
            crossings = _crossings(f, g, gain)
        out.append(ConditionedPair((f, g), pair, A, gain, crossings))
    return out


def _law_of(f: Conditional, g: Conditional, joint_cov: Array, k1: int) -> Array:
    """The covariance (4, 4) of ``(p, p', q, q')`` from that of ``(u, v)`` (``u`` the first ``k1``), ``T Σ Tᵀ``, each
    entry summed in one fixed order: rows of ``T`` that select one argument give its entries exactly, so a
    variable read at both points keeps bitwise equal rows (what :func:`conditionings` tests)."""
    k = joint_cov.shape[0]
    (pf, qf), (pg, qg) = f.rows(k1), g.rows(k - k1)
    zf, zg = np.zeros(k1), np.zeros(k - k1)
    T = np.array([np.concatenate(r) for r in ((pf, zg), (zf, pg), (qf, zg), (zf, qg))])
    half = sum(T[:, i, None] * joint_cov[i] for i in range(k))  # T Σ
    law = sum(half[:, i, None] * T[:, i] for i in range(k))  # (T Σ) Tᵀ
    return 0.5 * (law + law.T)


def _crossings(f: Conditional, g: Conditional, gain: Array) -> tuple[Plane, ...]:
    """Where a kink ``k`` of ``f.inner`` at ``κq + μ`` and a kink ``k'`` of ``g.inner`` at ``κ'q + ν`` are at the
    same ``q`` (``κ'(k − μ) = κ(k' − ν)``), with ``μ = κ gain[0]·(p, p') + s(p)`` and ``ν = κ' gain[1]·(p, p') +
    s'(p')`` affine: lines ``normal·(p, p') + offset = 0``."""
    (af, bf), (ag, bg) = f.affine_shift, g.affine_shift  # type: ignore[misc]
    kf, kg = f.scale, g.scale
    grad_mu = kf * gain[0] + np.array([af, 0.0])
    grad_nu = kg * gain[1] + np.array([0.0, ag])
    normal = kf * grad_nu - kg * grad_mu
    if not np.any(np.abs(normal) > 1e-12 * (np.abs(kf * grad_nu) + np.abs(kg * grad_mu)).max()):
        return ()  # the two breakpoints move together: they meet everywhere or nowhere
    return tuple((normal, float(kg * (k - bf) - kf * (k2 - bg))) for k in f.inner.kinks for k2 in g.inner.kinks)


#: Standard-normal breakpoints of the conditioned point rule's axes (the kinks are added): panels on which
#: Gauss–Legendre integrates the density times a smooth function to rounding with a few dozen nodes.
_POINT_LEVELS = np.array([-12.0, -8.0, -5.5, -3.5, -2.0, -1.0, 0.0, 1.0, 2.0, 3.5, 5.5, 8.0, 12.0])
#: Gauss–Legendre nodes per panel of the two point rules (their difference is the error estimate).
POINT_NODES = (12, 18)


def point_nodes(conditional: Conditional, cov: Array, nodes: int) -> tuple[Array, Array] | None:
    """Nodes ``u`` (Q, k) and weights (Q,) of a product rule for ``E F(U)``, ``U ~ N(0, cov)`` (k, k), where ``F``
    reads its arguments as ``conditional`` says: the outer argument ``p`` on panels split at the kinks of the
    outer functions, and, at each outer node, ``q | p ~ N(g p, v)`` on panels split where ``κq + s(p)`` crosses
    a kink of the inner function — curved kinks (``relu(b + tanh(a))``) become breakpoints of the inner axis.
    ``nodes`` Gauss–Legendre nodes per panel. None where it does not apply (unknown kinks, an argument of zero
    variance, or ``q`` a multiple of ``p``)."""
    c = conditional
    if not (c.inner.kinks_known and all(f.kinks_known for f in c.outside())):
        return None
    k = cov.shape[0]
    row_p, row_q = c.rows(k)
    var_p, var_q, cross = row_p @ cov @ row_p, row_q @ cov @ row_q, row_p @ cov @ row_q
    if not var_p > 0.0:
        return None
    gain = cross / var_p
    v = var_q - gain * cross
    if not v > MIN_CONDITIONAL_SHARE * var_q:
        return None
    sd_p, sd_v = math.sqrt(var_p), math.sqrt(v)
    t, w = np.polynomial.legendre.leggauss(nodes)
    z, wz = _panels(np.array([[k / sd_p for f in c.outside() for k in f.kinks]]), t, w)
    p = sd_p * z[0]
    shift = 0.0 if c.shift is None else c.shift.fn(p)
    # the inner kinks, κ(g p + √v y) + s(p) = k, in the standard inner variable y at each outer node
    cuts = np.zeros((p.size, 0))
    if c.inner.kinks:
        cuts = np.stack([np.broadcast_to(((k - shift) / c.scale - gain * p) / sd_v, p.shape) for k in c.inner.kinks],
                        axis=-1)
    y, wy = _panels(cuts, t, w)
    u = c.arguments(np.broadcast_to(p[:, None], y.shape), gain * p[:, None] + sd_v * y, k)
    return u.reshape(-1, k), (wz[0][:, None] * wy).reshape(-1)


def _panels(cuts: Array, t: Array, w: Array) -> tuple[Array, Array]:
    """Gauss–Legendre nodes ``t`` (weights ``w``) on each panel of [−12, 12] between :data:`_POINT_LEVELS` and the
    row's ``cuts`` (R, c), times the standard normal density (:func:`~netsor.gaussian.quadrature.rule_on_panels`):
    nodes and weights (R, m), the same count per row (cuts outside [−12, 12] make empty panels, of zero weight)."""
    ends = np.sort(np.concatenate([np.broadcast_to(_POINT_LEVELS, (cuts.shape[0], _POINT_LEVELS.size)),
                                   np.clip(cuts, _POINT_LEVELS[0], _POINT_LEVELS[-1])], axis=1), axis=1)
    return rule_on_panels(ends, t, w)
