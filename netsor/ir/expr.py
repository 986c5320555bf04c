"""Coordinatewise functions of G-vectors: the φ of a NonLin line.

A NonLin line stores an :class:`Affine` expression ``c₀ + Σₖ cₖ · termₖ``
whose terms are either :class:`Apply` (one registered activation of one
G-vector — identity included) or :class:`Custom` (any vectorised function of
several G-vectors: products, compositions, user callables). Keeping this
structure lets the infinite-width interpreter expand ``E[h h']`` bilinearly
and use a closed form (or a 2-D rule) for each pair of one-argument terms,
falling back to multi-dimensional quadrature only for genuinely joint terms.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from netsor.activations import Activation, identity

if TYPE_CHECKING:
    from netsor.ir.variables import Vector

Array = np.ndarray


@dataclass(frozen=True, eq=False)
class Apply:
    """``act(arg)`` for one G-vector ``arg``."""

    act: Activation
    arg: Vector

    @property
    def args(self) -> tuple[Vector, ...]:
        return (self.arg,)

    def __call__(self, *values: Array) -> Array:
        return self.act.fn(values[0])

    def describe(self) -> str:
        return self.arg.name if self.act is identity else f"{self.act.name}({self.arg.name})"


@dataclass(frozen=True, eq=False)
class Custom:
    """``fn(*args)`` for G-vectors ``args``; ``fn`` is vectorised and elementwise."""

    fn: Callable[..., Array]
    args: tuple[Vector, ...]
    name: str

    def __call__(self, *values: Array) -> Array:
        return np.asarray(self.fn(*values), dtype=float)

    def describe(self) -> str:
        return f"{self.name}({', '.join(a.name for a in self.args)})"


Term = Apply | Custom


def _unique(vectors: list[Vector]) -> tuple[Vector, ...]:
    return tuple(dict.fromkeys(vectors))


@dataclass(frozen=True, eq=False)
class Affine:
    """``const + Σ coef · term``: the normal form of every H-vector's function."""

    const: float
    terms: tuple[tuple[float, Term], ...]

    @property
    def args(self) -> tuple[Vector, ...]:
        """The distinct G-vectors the expression depends on, in first-use order."""
        return _unique([a for _, t in self.terms for a in t.args])

    @staticmethod
    def of_vector(g: Vector) -> Affine:
        return Affine(0.0, ((1.0, Apply(identity, g)),))

    def evaluate(self, values: Mapping[Vector, Array]) -> Array:
        """Evaluate coordinatewise given arrays for every argument (all broadcastable)."""
        out: Array | float = self.const
        for coef, term in self.terms:
            out = out + coef * term(*(values[a] for a in term.args))
        return np.asarray(out, dtype=float)

    def as_function(self) -> Callable[..., Array]:
        """``f(*arrays)`` taking one array per element of :attr:`args`."""
        args = self.args

        def f(*values: Array) -> Array:
            return self.evaluate(dict(zip(args, values, strict=True)))

        return f

    def scaled(self, s: float) -> Affine:
        return Affine(self.const * s, tuple((c * s, t) for c, t in self.terms))

    def plus(self, other: Affine) -> Affine:
        return Affine(self.const + other.const, self.terms + other.terms)

    def shifted(self, c: float) -> Affine:
        return Affine(self.const + c, self.terms)

    def is_constant(self) -> bool:
        return not self.terms

    def single_apply(self) -> Apply | None:
        """The term when the expression is exactly ``act(g)`` (coefficient 1, no constant)."""
        if self.const == 0.0 and len(self.terms) == 1 and self.terms[0][0] == 1.0:
            t = self.terms[0][1]
            return t if isinstance(t, Apply) else None
        return None

    def times(self, other: Affine) -> Affine:
        """The coordinatewise product (a single :class:`Custom` term unless one side is constant)."""
        if other.is_constant():
            return self.scaled(other.const)
        if self.is_constant():
            return other.scaled(self.const)
        left, right = self.as_function(), other.as_function()
        args = _unique([*self.args, *other.args])
        pos_l = [args.index(a) for a in self.args]
        pos_r = [args.index(a) for a in other.args]

        def product(*values: Array) -> Array:
            return left(*(values[i] for i in pos_l)) * right(*(values[i] for i in pos_r))

        return Affine(0.0, ((1.0, Custom(product, args, f"({self.describe()})*({other.describe()})")),))

    def compose(self, act: Activation) -> Affine:
        """``act`` applied to this expression."""
        if act is identity:
            return self
        inner = self.single_apply()
        if inner is not None and inner.act is identity:
            return Affine(0.0, ((1.0, Apply(act, inner.arg)),))
        f = self.as_function()
        return Affine(
            0.0, ((1.0, Custom(lambda *v: act.fn(f(*v)), self.args, f"{act.name}[{self.describe()}]")),)
        )

    def describe(self) -> str:
        parts = [f"{c:g}*{t.describe()}" if c != 1.0 else t.describe() for c, t in self.terms]
        if self.const != 0.0 or not parts:
            parts.append(f"{self.const:g}")
        return " + ".join(parts)
