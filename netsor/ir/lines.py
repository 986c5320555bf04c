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


Coefficient = float | Vector


@dataclass(frozen=True, eq=False)
class LinCombLine:
    """``out := Σ coeffs[i] · args[i] + offset · 1`` over G-vectors (the result is a G-vector).

    A coefficient is a real number or a scalar of the program (NetsorK: e.g. attention weights,
    LayerNorm's ``1/σ``), deterministic per input in the limit. ``offset`` (a scalar, or None) is
    added to every coordinate; it must vanish in the limit (e.g. ``−μ/σ`` of LayerNorm, where
    ``μ`` is the mean of a G-vector's coordinates): the result stays a G-vector.
    """

    out: Vector
    coeffs: tuple[Coefficient, ...]
    args: tuple[Vector, ...]
    offset: Vector | None = None

    @property
    def scalars(self) -> tuple[Vector, ...]:
        """The scalars the line reads (coefficients and offset)."""
        found = [c for c in self.coeffs if isinstance(c, Vector)]
        return tuple(dict.fromkeys(found + ([self.offset] if self.offset is not None else [])))

    @property
    def inputs(self) -> tuple[Vector, ...]:
        return tuple(dict.fromkeys(self.args + self.scalars))

    def map_vectors(self, out: Vector, f: VectorMap) -> LinCombLine:
        coeffs = tuple(f(c) if isinstance(c, Vector) else c for c in self.coeffs)
        return LinCombLine(out, coeffs, tuple(f(a) for a in self.args),
                           None if self.offset is None else f(self.offset))


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


@dataclass(frozen=True, eq=False)
class MomentLine:
    """NetsorK: the scalar ``out := (1/n) Σ_α expr(args)_α``, the mean over the coordinates of a
    coordinatewise function of vectors of one dim (and of scalars). In the limit it is the
    deterministic ``E expr(Z^{args})``, one number per input."""

    out: Vector
    expr: Expr

    @property
    def inputs(self) -> tuple[Vector, ...]:
        return self.expr.args

    def map_vectors(self, out: Vector, f: VectorMap) -> MomentLine:
        return MomentLine(out, self.expr.map_vectors(f))


Line = DataLine | BiasLine | MatMulLine | LinCombLine | NonLinLine | MomentLine
