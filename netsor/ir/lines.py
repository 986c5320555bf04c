"""The lines of a Netsor program (DESIGN §1); a program is a straight-line sequence of them.

Each line defines one vector (``out``) from earlier ones and knows nothing of execution: the
meaning of each line kind under each interpretation (finite, infinite, coupled) lives in
:mod:`netsor.interpret.rules`. ``inputs`` lists the vectors a line reads; ``map_vectors``
rebuilds the line over other vectors (program transforms, :mod:`netsor.ir.transforms`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from netsor.ir.variables import Matrix, Vector

if TYPE_CHECKING:
    from netsor.ir.expr import Affine


@dataclass(frozen=True, eq=False)
class DataLine:
    """``x := data point`` (``X[:, step, :]`` when ``step`` is set), a vector in the data dim."""

    out: Vector
    step: int | None


@dataclass(frozen=True, eq=False)
class BiasLine:
    """An initial G-vector with iid ``N(0, sigma²)`` coordinates, the same for every input."""

    out: Vector
    sigma: float


@dataclass(frozen=True, eq=False)
class MatMulLine:
    """``out := W @ arg`` (``Wᵀ @ arg`` when ``transposed``)."""

    out: Vector
    matrix: Matrix
    arg: Vector
    transposed: bool = False


@dataclass(frozen=True, eq=False)
class LinCombLine:
    """``out := Σ coeffs[i] · args[i]`` over G-vectors (the result is a G-vector)."""

    out: Vector
    coeffs: tuple[float, ...]
    args: tuple[Vector, ...]


@dataclass(frozen=True, eq=False)
class NonLinLine:
    """``out := expr(args)`` coordinatewise; ``expr`` is a :class:`netsor.expr.Affine`."""

    out: Vector
    expr: Affine

    @property
    def args(self) -> tuple[Vector, ...]:
        return self.expr.args


Line = DataLine | BiasLine | MatMulLine | LinCombLine | NonLinLine
