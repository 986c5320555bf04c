"""Per-input coefficients of linear forms (NetsorK): ``Σ_k w_k Π_{θ ∈ S_k} θ(x)``.

A LinComb line with scalar coefficients (attention weights, LayerNorm's ``1/σ``) makes a G-vector
whose expansion over Gaussian sources has coefficients that depend on the input through the
program's scalars, which are deterministic per input in the limit. Plain programs keep float
coefficients; a coefficient becomes a :class:`PointCoefficient` only when a scalar enters.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from netsor.ir import Vector

Array = np.ndarray
EPS = np.finfo(float).eps


@dataclass(frozen=True)
class PointCoefficient:
    """``Σ weight · Π scalars`` over ``terms = ((weight, scalars), ...)`` (scalars sorted by index)."""

    terms: tuple[tuple[float, tuple[Vector, ...]], ...]

    @property
    def scalars(self) -> tuple[Vector, ...]:
        return tuple(dict.fromkeys(s for _, ss in self.terms for s in ss))

    def evaluate(self, lookup: Callable[[Vector], tuple[Array, Array]]) -> tuple[Array, Array]:
        """The coefficient at each point and a bound on its error, from ``lookup(θ) = (value,
        error)`` (arrays that broadcast): products of values with bounded errors, exactly bounded."""
        total, bound, size = 0.0, 0.0, 0.0
        for weight, scalars in self.terms:
            value, err = np.asarray(weight, dtype=float), np.zeros(1)
            for s in scalars:
                v, e = lookup(s)
                err = np.abs(value) * e + err * (np.abs(v) + e)
                value = value * v
            total = total + value
            bound = bound + err
            size = size + np.abs(value)
        return np.asarray(total), bound + (len(self.terms) + 1) * EPS * size


Coefficient = float | PointCoefficient


def scale(coef: float | Vector, c: Coefficient) -> Coefficient:
    """``coef · c`` for a number or scalar ``coef`` and a coefficient ``c``."""
    if isinstance(coef, Vector):
        terms = terms_of(c)
        return PointCoefficient(tuple((w, tuple(sorted((*ss, coef), key=lambda s: s.index))) for w, ss in terms))
    if isinstance(c, PointCoefficient):
        return PointCoefficient(tuple((coef * w, ss) for w, ss in c.terms))
    return coef * c


def add(a: Coefficient, b: Coefficient) -> Coefficient:
    if not isinstance(a, PointCoefficient) and not isinstance(b, PointCoefficient):
        return a + b
    acc: dict[tuple[Vector, ...], float] = {}
    for w, ss in terms_of(a) + terms_of(b):
        acc[ss] = acc.get(ss, 0.0) + w
    return PointCoefficient(tuple((w, ss) for ss, w in acc.items() if w != 0.0))


def is_zero(c: Coefficient) -> bool:
    return not c.terms if isinstance(c, PointCoefficient) else c == 0.0


def terms_of(c: Coefficient) -> tuple[tuple[float, tuple[Vector, ...]], ...]:
    """``((weight, scalars), …)`` of a coefficient (a number: one term without scalars)."""
    return c.terms if isinstance(c, PointCoefficient) else ((float(c), ()),)
