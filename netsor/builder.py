"""The friendly way to write programs: arithmetic and activations on symbolic vectors.

``a + b``, ``a - b``, ``s * a`` of G-vectors give a LinComb line (a G-vector);
anything involving an H-vector, a product of vectors or a constant shift gives
a NonLin line whose expression is fused into a function of G-vectors (Netsor
NonLins take G-vectors as arguments; compositions are folded in).
"""

from __future__ import annotations

import numbers
from collections.abc import Callable
from typing import Any

import numpy as np

from netsor.activations import Activation
from netsor.errors import DimensionError, ProgramError
from netsor.ir import LinCombLine, NonLinLine, Program, Vector
from netsor.ir.expr import Affine, Custom


def is_symbolic(x: Any) -> bool:
    return isinstance(x, Vector)


def expression_of(v: Vector) -> Affine:
    """The :class:`Affine` function of G-vectors that ``v`` equals coordinatewise."""
    if v.kind == "G":
        return Affine.of_vector(v)
    if v.kind == "H":
        line = v.program.line_of(v)
        assert isinstance(line, NonLinLine)
        return line.expr
    raise ProgramError(
        "the data point can only be multiplied by an input matrix "
        "(p.matrix(n, p.data_dim, sigma) @ p.data()); it takes no arithmetic or activations"
    )


def _as_scalar(x: Any) -> float | None:
    if isinstance(x, numbers.Real) or (isinstance(x, np.ndarray) and x.ndim == 0):
        value = float(x)
        if not np.isfinite(value):
            raise ProgramError(f"constants in a program must be finite, got {value}")
        return value
    return None


def _nonlin_vector(program: Program, dim: Any, expr: Affine) -> Vector:
    return program._add(NonLinLine(program._new_vector(dim, "H"), expr))


def _lincomb(program: Program, dim: Any, terms: list[tuple[float, Vector]]) -> Vector:
    coeffs = tuple(c for c, _ in terms)
    args = tuple(v for _, v in terms)
    return program._add(LinCombLine(program._new_vector(dim, "G"), coeffs, args))


def binary_op(v: Vector, other: Any, op: str, reflected: bool) -> Vector:
    """``v op other`` (or ``other op v`` when ``reflected``) for op in + - * /."""
    program = v.program
    expression_of(v)  # rejects data vectors with a clear message
    scalar = _as_scalar(other)
    if scalar is None:
        if not isinstance(other, Vector):
            raise ProgramError(
                f"cannot combine vector {v.name} with {type(other).__name__}; "
                "use vectors of the same program or real constants"
            )
        program._check_own(other)
        if other.dim is not v.dim:
            raise DimensionError(
                f"{v.name} lives in dim {v.dim.name!r} but {other.name} in {other.dim.name!r}; "
                "coordinatewise operations need vectors of one dimension"
            )
    if op == "/":
        if scalar is None:
            raise ProgramError("divide by constants only; for v / w write netsor.nonlin(fn, v, w)")
        if reflected:
            raise ProgramError("constant / vector is not linear; write netsor.nonlin(fn, v)")
        if scalar == 0:
            raise ProgramError(f"division of {v.name} by zero")
        return binary_op(v, 1.0 / scalar, "*", False)

    sign = -1.0 if (op == "-" and reflected) else 1.0
    other_sign = -1.0 if (op == "-" and not reflected) else 1.0
    if op == "*":
        sign = other_sign = 1.0

    if scalar is not None:
        if op == "*":
            if v.kind == "G":
                return _lincomb(program, v.dim, [(scalar, v)])
            return _nonlin_vector(program, v.dim, expression_of(v).scaled(scalar))
        # v ± constant: not centred, so an H-vector.
        return _nonlin_vector(program, v.dim, expression_of(v).scaled(sign).shifted(other_sign * scalar))

    assert isinstance(other, Vector)
    if op in "+-" and v.kind == "G" and other.kind == "G":
        return _lincomb(program, v.dim, [(sign, v), (other_sign, other)])
    left, right = expression_of(v), expression_of(other)
    if op == "*":
        return _nonlin_vector(program, v.dim, left.times(right))
    return _nonlin_vector(program, v.dim, left.scaled(sign).plus(right.scaled(other_sign)))


def apply_nonlin(act: Activation, v: Vector) -> Vector:
    """``act(v)``: a NonLin line (compositions of activations are fused)."""
    expr = expression_of(v)
    if act.name == "identity":
        return v
    return _nonlin_vector(v.program, v.dim, expr.compose(act))


def nonlin(fn: Callable[..., Any], *vectors: Vector, name: str | None = None) -> Vector:
    """A custom NonLin line ``h := fn(v¹, …, vᵏ)`` applied coordinatewise.

    ``fn`` must be vectorised: it receives numpy arrays of equal shape, one per
    vector, and returns an array of that shape. All vectors must live in one
    dimension of one program.
    """
    if not callable(fn):
        raise ProgramError("netsor.nonlin(fn, *vectors): fn must be callable")
    if not vectors:
        raise ProgramError("netsor.nonlin(fn, *vectors) needs at least one vector")
    for v in vectors:
        if not isinstance(v, Vector):
            raise ProgramError(f"netsor.nonlin: arguments must be vectors, got {type(v).__name__}")
    program, dim = vectors[0].program, vectors[0].dim
    for v in vectors:
        program._check_own(v)
        if v.dim is not dim:
            raise DimensionError("netsor.nonlin: all vectors must live in the same dimension")
    probe = [np.linspace(-1.0, 1.0, 3) + 0.1 * i for i in range(len(vectors))]
    try:
        out = np.asarray(fn(*probe), dtype=float)
    except Exception as exc:  # noqa: BLE001 - report any failure of user code clearly
        raise ProgramError(f"custom nonlinearity failed on a test array: {exc!r}") from None
    if out.shape != (3,):
        raise ProgramError(
            f"custom nonlinearity must be vectorised and elementwise: on {len(vectors)} arrays of "
            f"shape (3,) it returned shape {out.shape}"
        )
    exprs = [expression_of(v) for v in vectors]
    inner = [e.as_function() for e in exprs]
    args = tuple(dict.fromkeys(a for e in exprs for a in e.args))
    positions = [[args.index(a) for a in e.args] for e in exprs]

    def composed(*values: Any) -> Any:
        return fn(*(f(*(values[i] for i in pos)) for f, pos in zip(inner, positions, strict=True)))

    label = name or getattr(fn, "__name__", "fn")
    return _nonlin_vector(program, dim, Affine(0.0, ((1.0, Custom(composed, args, label)),)))
