"""Pair expectations of separable functions by conditioning on one argument of each side.

``F(u) = f₁(u₁) f₂(u₂)`` and ``G(v) = g₁(v₁) g₂(v₂)`` (products of functions of one G-vector each, such as
``hard_tanh(a)·hard_tanh(b)`` or ``relu(a − ½)·step(b + 0.3)``) with ``f₂`` and ``g₂`` piecewise linear
(:mod:`~netsor.gaussian.piecewise`): given ``(p, p') = (u₁, v₁)``, the pair ``(q, q') = (u₂, v₂)`` is
Gaussian with means ``K (p, p')`` and a fixed covariance, so ``E[f₂(q) g₂(q') | p, p']`` is a closed form
(Tallis' truncated moments, the means shifting the thresholds), and

    E[F(U) G(V)] = E[f₁(p) g₁(p') · E[f₂(q) g₂(q') | p, p']]

is a two-dimensional integral of a function kinked only where ``f₁`` and ``g₁`` are. This is the rule for
the pairs the Mehler series cannot reach — nearly colinear inputs, whose series terms decay like ‖R‖^k with
‖R‖ → 1 — and that a four-dimensional rule over eight kink planes could not afford (it went to randomised
QMC: ``hard_tanh(a)·hard_tanh(b)`` at input correlation −0.989 reached 4.5e-4 relative).

This module does the linear algebra and states the integrand; :mod:`~netsor.gaussian.joint` integrates it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from netsor.activations import Activation
from netsor.gaussian import piecewise

Array = np.ndarray
Plane = tuple[Array, float]
#: A conditional variance below this share of the variance it is left of counts as zero (the inner
#: argument is a multiple of the outer ones: nothing to condition on).
MIN_CONDITIONAL_SHARE = 1e-10
#: The outer pair's correlation must stay this far from ±1 (its whitening divides by √(1 − ρ²)).
MIN_OUTER_SINE = 1e-6


@dataclass(frozen=True)
class ConditionedPair:
    """``E[F(U) G(V)]`` as ``E[f(p) g(p') · c(p, p')]`` with ``(p, p') ~ N(0, outer_cov)``.

    Attributes
    ----------
    outer : (Activation, Activation)
        ``f`` and ``g``, the factors left outside.
    inner : (pieces, pieces)
        The piecewise-linear factors integrated in closed form.
    outer_cov : array (2, 2)
    gain : array (2, 2)
        ``E[(q, q') | p, p'] = gain @ (p, p')``.
    inner_cov : (float, float, float)
        ``(Var, Var, Cov)`` of ``(q, q')`` given ``(p, p')``.
    """

    outer: tuple[Activation, Activation]
    inner: tuple[tuple[piecewise.Piece, ...], tuple[piecewise.Piece, ...]]
    outer_cov: Array
    gain: Array
    inner_cov: tuple[float, float, float]

    def planes(self) -> tuple[Plane, ...]:
        """The kink lines of ``f(p) g(p')``: ``p = k`` and ``p' = k'`` (the inner closed form is smooth)."""
        return tuple((np.array([1.0, 0.0]), -float(k)) for k in self.outer[0].kinks) + tuple(
            (np.array([0.0, 1.0]), -float(k)) for k in self.outer[1].kinks)

    def integrand(self, inner_error: list[float]) -> Callable[[Array], Array]:
        """``f(p) g(p') c(p, p')`` for ``u = (p, p')`` of shape (..., 2); appends to ``inner_error`` the
        largest error bound of the closed form over the nodes of each call. Raises :class:`NotConditioned`
        where the closed form does not apply (a conditional pair within ``MIN_SINE`` of colinear, a tilt
        too large)."""
        (f, g), (fi, gi), K = self.outer, self.inner, self.gain
        a, b, c = self.inner_cov

        def fn(u: Array) -> Array:
            p, q = u[..., 0], u[..., 1]
            means = (K[0, 0] * p + K[0, 1] * q, K[1, 0] * p + K[1, 1] * q)
            value, error, done = piecewise.pair_expectation(fi, gi, a, b, c, means=means)
            if not np.all(done):
                raise NotConditioned
            outer = f.fn(p) * g.fn(q)
            inner_error.append(float(np.max(np.abs(outer) * error, initial=0.0)))
            return outer * value

        return fn


class NotConditioned(Exception):
    """The closed form of the inner pair does not apply at some node (the caller uses its other rules)."""


def condition(F: tuple[Activation, ...], G: tuple[Activation, ...], joint_cov: Array) -> ConditionedPair | None:
    """``E[F(U) G(V)]`` for separable ``F = Π φᵢ(uᵢ)``, ``G = Π ψⱼ(vⱼ)`` of two arguments each, ``(U, V)`` of
    covariance ``joint_cov`` (4, 4), as a :class:`ConditionedPair`; None where it does not apply: a side
    with no piecewise-linear factor, an outer factor with unknown kinks, an outer pair nearly colinear, or
    an inner argument that is a multiple of the outer ones."""
    if len(F) != 2 or len(G) != 2:
        return None
    sides = []
    for acts in (F, G):
        inner = next((i for i in (1, 0) if piecewise.of(acts[i]) is not None), None)
        if inner is None or not acts[1 - inner].kinks_known:
            return None
        sides.append(inner)
    i_f, i_g = sides
    order = [1 - i_f, 2 + 1 - i_g, i_f, 2 + i_g]  # (p, p', q, q')
    S = joint_cov[np.ix_(order, order)]
    A, B = S[:2, :2], S[2:, :2]
    if min(A[0, 0], A[1, 1]) <= 0.0 or A[0, 0] * A[1, 1] - A[0, 1] ** 2 <= MIN_OUTER_SINE**2 * A[0, 0] * A[1, 1]:
        return None
    gain = np.linalg.solve(A, B.T).T
    inner = S[2:, 2:] - gain @ B.T
    if np.any(np.diag(inner) <= MIN_CONDITIONAL_SHARE * np.diag(S[2:, 2:])):
        return None
    return ConditionedPair((F[1 - i_f], G[1 - i_g]), (piecewise.of(F[i_f]), piecewise.of(G[i_g])), A, gain,
                           (float(inner[0, 0]), float(inner[1, 1]), float(0.5 * (inner[0, 1] + inner[1, 0]))))
