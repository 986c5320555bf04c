"""The lines of a Netsor program (DESIGN §1); a program is a straight-line sequence of them.

Each line defines one vector (``out``) from earlier ones and knows nothing of execution: the
meaning of each line kind under each interpretation (finite, infinite, coupled) lives beside
it in :mod:`netsor.interpret.rules`. ``inputs`` lists the vectors a line reads;
``map_vectors`` rebuilds the line over other vectors (:mod:`netsor.ir.transforms`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from netsor.ir.expr import Expr
from netsor.ir.variables import Matrix, Vector

VectorMap = Callable[[Vector], Vector]


@dataclass(frozen=True, eq=False)
class DataLine:
    """``x := data point`` (``X[:, step, :]`` when ``step`` is set), a vector in the data dim."""

    out: Vector
    step: int | None

    @property
    def inputs(self) -> tuple[Vector, ...]:
        return ()

    def map_vectors(self, out: Vector, f: VectorMap) -> DataLine:
        return DataLine(out, self.step)


@dataclass(frozen=True, eq=False)
class BiasLine:
    """An initial G-vector with iid ``N(0, sigma²)`` coordinates, the same for every input and
    independent of everything else (a bias, or a Gaussian input of a data-free program)."""

    out: Vector
    sigma: float

    @property
    def inputs(self) -> tuple[Vector, ...]:
        return ()

    def map_vectors(self, out: Vector, f: VectorMap) -> BiasLine:
        return BiasLine(out, self.sigma)


@dataclass(frozen=True, eq=False)
class MatMulLine:
    """``out := W @ arg`` (``Wᵀ @ arg`` when ``transposed``)."""

    out: Vector
    matrix: Matrix
    arg: Vector
    transposed: bool = False

    @property
    def inputs(self) -> tuple[Vector, ...]:
        return (self.arg,)

    def map_vectors(self, out: Vector, f: VectorMap, matrix: Matrix | None = None) -> MatMulLine:
        return MatMulLine(out, matrix or self.matrix, f(self.arg), self.transposed)


@dataclass(frozen=True, eq=False)
class LinCombLine:
    """``out := Σ coeffs[i] · args[i]`` over G-vectors (the result is a G-vector)."""

    out: Vector
    coeffs: tuple[float, ...]
    args: tuple[Vector, ...]

    @property
    def inputs(self) -> tuple[Vector, ...]:
        return self.args

    def map_vectors(self, out: Vector, f: VectorMap) -> LinCombLine:
        return LinCombLine(out, self.coeffs, tuple(f(a) for a in self.args))


@dataclass(frozen=True, eq=False)
class NonLinLine:
    """``out := expr(args)`` coordinatewise; ``expr`` is a :mod:`netsor.ir.expr` tree over G-vectors."""

    out: Vector
    expr: Expr

    @property
    def args(self) -> tuple[Vector, ...]:
        return self.expr.args

    @property
    def inputs(self) -> tuple[Vector, ...]:
        return self.expr.args

    def map_vectors(self, out: Vector, f: VectorMap) -> NonLinLine:
        return NonLinLine(out, self.expr.map_vectors(f))


Line = DataLine | BiasLine | MatMulLine | LinCombLine | NonLinLine
