"""The interface every line kind implements, once per interpretation.

* ``finite(line, state)`` — the line's values in a chunk of finite-width networks, an array of
  shape (S, B, n) (S networks, B inputs, n the width of the line's dim);
* ``simulated(line, state)`` — the line's values in ``n`` iid copies of the limit's random
  variables (:mod:`netsor.interpret.simulation`); the finite rule for every line but MatMul;
* ``coupled(line, state)`` — the pair (finite, limit) of a same-noise coupled run; for a
  deterministic line it is the finite rule applied in each world;
* ``limit(line, context)`` — how the line's random variable ``Z^out`` of the infinite-width
  limit is expressed (:class:`LimitForm`), given what the analysis knows of the lines before it
  (:class:`LimitContext`); the infinite interpreter turns these into covariances (and, for
  scalars, into one deterministic number per input).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

if TYPE_CHECKING:
    from netsor.interpret.forward import CoupledState, FiniteState
    from netsor.ir import Line, MatMulLine, Matrix, Vector
    from netsor.ir.expr import Expr

Array = np.ndarray


@dataclass(frozen=True)
class DataForm:
    """``Z`` is a data point: second moments are inner products of the inputs (``/ d``)."""

    step: int | None


@dataclass(frozen=True)
class SourceForm:
    """``Z = Ẑ + Σ coef · Z^vector``: a Gaussian source ``Ẑ`` (its covariance with other sources is
    the rule's :meth:`LineRule.source_covariance`) plus a ``correction`` linear in earlier
    G-vectors (the ``Ż`` of a MatMul in a program with transposes; empty otherwise), each
    coefficient — a number, or a scalar of the limit where it differs from input to input — with
    a bound on its numerical error in ``errors`` (same order; empty: exact)."""

    correction: tuple[tuple[float | Vector, Vector], ...] = ()
    errors: tuple[float, ...] = ()


@dataclass(frozen=True)
class LinearForm:
    """``Z = Σ coef · Z^vector`` over G-vectors; a coefficient is a number or a scalar of the
    program (deterministic per input in the limit)."""

    terms: tuple[tuple[float | Vector, Vector], ...]


@dataclass(frozen=True)
class MomentForm:
    """A scalar ``θ = E expr(Z^{args})`` (NetsorK), one number per input."""

    expr: Expr


@dataclass(frozen=True)
class FunctionForm:
    """``Z = expr(Z^{args})`` coordinatewise (an H-vector)."""

    expr: Expr


@dataclass(frozen=True)
class SourceCovariance:
    """``Cov(Z^s, Z^t) = scale · E[Z^{moment[0]} Z^{moment[1]}]`` (or ``scale`` when ``moment`` is None)."""

    scale: float
    moment: tuple[Vector, Vector] | None = None


LimitForm = DataForm | SourceForm | LinearForm | FunctionForm | MomentForm


class LimitContext(Protocol):
    """What a rule's :meth:`LineRule.limit` may ask about the lines before its own (the
    infinite-width analysis so far)."""

    def uses(self, matrix: Matrix) -> Sequence[MatMulLine]:
        """The MatMul lines of ``matrix`` before the current line, in program order."""
        ...

    def derivative(self, vector: Vector, source: Vector, scale: float = 1.0) -> tuple[float | Vector, float]:
        """``scale · E[∂Z^vector / ∂Ẑ^source]`` for a source vector ``source`` and a bound on its
        numerical error: a number, or — where it differs from input to input (a nonlinear
        ``vector`` of a program that reads data) — a scalar of the limit (kind ``"scalar"``, not a
        line of the program) whose per-input value carries its own error (raises
        :class:`~netsor.errors.UnsupportedError` where it cannot be computed)."""
        ...


class LineRule:
    """Base class: the meaning of one line kind under every interpretation."""

    def finite(self, line: Line, state: FiniteState) -> Array:
        raise NotImplementedError

    def simulated(self, line: Line, state: FiniteState) -> Array:
        """Lines other than MatMul act on the copies as on coordinates: the finite rule."""
        return self.finite(line, state)

    def coupled(self, line: Line, state: CoupledState) -> tuple[Array, Array]:
        """Deterministic lines: the finite rule in each world."""
        return self.finite(line, state.fin), self.finite(line, state.lim)

    def limit(self, line: Line, context: LimitContext) -> LimitForm:
        raise NotImplementedError

    def source_covariance(self, line: Line, other: Line) -> SourceCovariance | None:
        """For source lines: the covariance with another source line (None: independent)."""
        return None

    def describe(self) -> Any:
        return type(self).__name__
