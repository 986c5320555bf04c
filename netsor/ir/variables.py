"""Variables of a Netsor program: dimensions, matrices and vectors (DESIGN §1).

* :class:`Dim` — a width dimension (infinite in the limit);
* :class:`Matrix` (type A) ``W : out_dim × in_dim`` with iid ``N(0, σ²/n_in)`` entries;
* :class:`Vector` of kind ``"G"`` (Gaussian coordinates in the limit), ``"H"`` (image of a
  nonlinearity), ``"data"`` (the symbolic data point, in ``program.data_dim``) or ``"scalar"``
  (NetsorK: a scalar such as a moment ``(1/n) Σ_α ψ(x_α)``, a vector of the one-coordinate
  ``program.scalar_dim``; deterministic per input in the limit).

Arithmetic on vectors (``W @ h``, ``a + b``, ``netsor.relu(a)``) adds lines to the vector's
program; it is implemented in :mod:`netsor.builder`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from netsor.errors import ProgramError

if TYPE_CHECKING:
    from netsor.ir.program import Program


@dataclass(frozen=True, eq=False)
class Dim:
    """A width dimension. At finite width ``w`` it has ``round(ratio · w)`` coordinates; in the
    limit it is infinite, and the ratios of dims stay fixed (they matter with transposes).

    Two special dims per program: the data dim (its size is read off the inputs) and the
    scalar dim (one coordinate: scalars are its vectors)."""

    name: str
    program: Program
    is_data: bool = False
    is_scalar: bool = False
    ratio: float = 1.0

    def __repr__(self) -> str:
        return f"Dim({self.name!r})" if self.ratio == 1.0 else f"Dim({self.name!r}, ratio={self.ratio:g})"


@dataclass(frozen=True, eq=False)
class Matrix:
    """A random matrix ``W : out_dim × in_dim`` with iid ``N(0, sigma²/n_in)`` entries."""

    index: int
    out_dim: Dim
    in_dim: Dim
    sigma: float
    name: str
    program: Program

    def __matmul__(self, other: Any) -> Vector:
        from netsor.builder import matmul

        return matmul(self, other, transposed=False)

    @property
    def T(self) -> TransposedMatrix:  # noqa: N802 - numpy spelling
        """``Wᵀ``: a MatMul by it is a transposed MatMul line (Netsor⊤)."""
        return TransposedMatrix(self)

    @property
    def is_input(self) -> bool:
        """True for matrices that multiply the data point (``in_dim`` is the data dim)."""
        return self.in_dim.is_data

    def __repr__(self) -> str:
        return f"{self.name}: {self.out_dim.name}×{self.in_dim.name}, σ={self.sigma:g}"

    def _no_arithmetic(self, *_: Any) -> Any:
        raise ProgramError(
            f"matrix {self.name} is a random variable that MatMul lines use; matrices are not added, "
            f"scaled or indexed. For (W + V) @ h write W @ h + V @ h; for c·W write c * (W @ h) or make the "
            f"matrix with p.matrix(out_dim, in_dim, sigma=c·σ)"
        )

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _no_arithmetic
    __truediv__ = __rtruediv__ = __pow__ = __rpow__ = __neg__ = __getitem__ = _no_arithmetic


@dataclass(frozen=True, eq=False)
class TransposedMatrix:
    """``Wᵀ`` of a :class:`Matrix` (only used to build transposed MatMul lines)."""

    matrix: Matrix

    @property
    def T(self) -> Matrix:  # noqa: N802 - numpy's name
        """``(Wᵀ)ᵀ = W``."""
        return self.matrix

    def __matmul__(self, other: Any) -> Vector:
        from netsor.builder import matmul

        return matmul(self.matrix, other, transposed=True)


@dataclass(frozen=True, eq=False)
class Vector:
    """A symbolic vector of a program: kind ``"G"``, ``"H"`` or ``"data"``.

    Arithmetic builds lines: ``W @ h`` (MatMul), ``a + b``, ``a - b``, ``s * a``
    (LinComb when all operands are G-vectors, NonLin otherwise), ``a * b``
    (NonLin), and activations ``netsor.relu(a)`` (NonLin).
    """

    index: int
    dim: Dim
    kind: str
    name: str
    program: Program

    def __repr__(self) -> str:
        return f"{self.name}:{self.kind}({self.dim.name})"

    # Arithmetic is implemented in netsor.builder (imported lazily: builder imports this module).
    def _binary(self, other: Any, op: str, reflected: bool = False) -> Vector:
        from netsor.builder import binary_op

        return binary_op(self, other, op, reflected)

    def __netsor_apply__(self, act: Any) -> Vector:
        """``act(self)``: called by :class:`netsor.activations.Activation` on symbolic vectors."""
        from netsor.builder import apply_nonlin

        return apply_nonlin(act, self)

    def __add__(self, other: Any) -> Vector:
        return self._binary(other, "+")

    def __radd__(self, other: Any) -> Vector:
        return self._binary(other, "+", reflected=True)

    def __sub__(self, other: Any) -> Vector:
        return self._binary(other, "-")

    def __rsub__(self, other: Any) -> Vector:
        return self._binary(other, "-", reflected=True)

    def __mul__(self, other: Any) -> Vector:
        return self._binary(other, "*")

    def __rmul__(self, other: Any) -> Vector:
        return self._binary(other, "*", reflected=True)

    def __truediv__(self, other: Any) -> Vector:
        return self._binary(other, "/")

    def __rtruediv__(self, other: Any) -> Vector:
        return self._binary(other, "/", reflected=True)

    def __pow__(self, other: Any) -> Vector:
        return self._binary(other, "**")

    def __rpow__(self, other: Any) -> Vector:
        return self._binary(other, "**", reflected=True)

    def __abs__(self) -> Vector:
        from netsor.activations import abs_

        return self.__netsor_apply__(abs_)

    def __neg__(self) -> Vector:
        return self._binary(-1.0, "*")

    def __pos__(self) -> Vector:
        return self

    def __matmul__(self, other: Any) -> Any:
        if isinstance(other, Vector):
            raise ProgramError(f"{self.name} @ {other.name}: for the scalar xᵀy/n write netsor.inner(x, y)")
        raise ProgramError("write W @ h (matrix on the left); a vector cannot multiply a matrix")

    def __bool__(self) -> bool:
        raise ProgramError(
            "a symbolic vector has no truth value; inside a custom nonlinearity use numpy "
            "operations such as np.where, and pass it with netsor.nonlin(fn, *vectors)"
        )

    def _no_comparison(self, _: Any) -> Any:
        raise ProgramError(
            f"a comparison of symbolic vectors is not a line; for the indicator of {self.name} > c write "
            f"netsor.step({self.name} - c), or compare inside a nonlinearity: "
            f"netsor.nonlin(lambda x: (x > c) * 1.0, {self.name})"
        )

    __lt__ = __le__ = __gt__ = __ge__ = _no_comparison

    def _no_coordinates(self, *_: Any) -> Any:
        raise ProgramError(
            f"{self.name} is a symbolic vector: it has no coordinates (and no length) until the program is run; "
            "draw finite-width networks with netsor.sample(...) or read the limit's covariances with "
            "netsor.limit(p, X).cov(a, b)"
        )

    __getitem__ = __len__ = __iter__ = __float__ = _no_coordinates

    def __array_ufunc__(self, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Vector:
        """numpy functions of symbolic vectors build lines as the operators do: ``np.tanh(g)`` is
        ``netsor.tanh(g)`` and ``np.multiply(2.0, g)`` is ``2.0 * g``; other ufuncs are refused
        with the nonlinearity to write instead."""
        from netsor.activations.registry import from_ufunc
        from netsor.builder import apply_nonlin, binary_op

        name = getattr(ufunc, "__name__", str(ufunc))
        if method == "__call__" and not kwargs:
            act = from_ufunc(ufunc) if len(inputs) == 1 else None
            if act is not None:
                return apply_nonlin(act, self)
            op = _BINARY_UFUNCS.get(name) if len(inputs) == 2 else None
            if op is not None:
                reflected = inputs[0] is not self
                return binary_op(self, inputs[0] if reflected else inputs[1], op, reflected)
        names = ", ".join(f"x{k}" for k in range(1, len(inputs) + 1))
        raise ProgramError(
            f"np.{name}{'' if method == '__call__' else '.' + method} does not act on symbolic vectors; apply it "
            f"coordinatewise as a nonlinearity: netsor.nonlin(lambda {names}: np.{name}({names}), ...)"
        )

    __hash__ = object.__hash__


# numpy's binary ufuncs that are vector operators (Vector.__array_ufunc__).
_BINARY_UFUNCS = {"add": "+", "subtract": "-", "multiply": "*", "true_divide": "/", "power": "**"}
