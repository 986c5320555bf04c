"""The friendly way to write programs: arithmetic and activations on symbolic vectors.

``W @ h`` adds a MatMul line; ``a + b``, ``a - b``, ``s * a`` of G-vectors add a LinComb line
(a G-vector); anything involving an H-vector, a product of vectors, a constant shift, a
division or a power adds a NonLin line whose expression is written over G-vectors (Netsor
NonLins take G-vectors as arguments: compositions are folded into one expression tree,
:mod:`netsor.ir.expr`). ``netsor.nonlin(fn, *vectors)`` traces ``fn`` into such a tree when it
is made of numpy operations the tracer knows (:mod:`netsor.ir.trace`), and keeps it as an
opaque function otherwise.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable
from typing import Any

import numpy as np

from netsor.activations import Activation, exp, identity
from netsor.activations.registry import call_user_function, from_ufunc
from netsor.errors import DimensionError, ProgramError
from netsor.ir import LinCombLine, MatMulLine, Matrix, MomentLine, NonLinLine, TransposedMatrix, Vector
from netsor.ir.expr import Const, Expr, Opaque, Var, apply, constant, linear, product
from netsor.ir.trace import applied, trace_or_reason


def expression_of(v: Vector) -> Expr:
    """The expression over G-vectors (and scalars) that ``v`` equals coordinatewise."""
    if v.kind in ("G", "scalar"):
        return Var(v)
    if v.kind == "H":
        line = v.program.line_of(v)
        assert isinstance(line, NonLinLine)
        return line.expr
    raise ProgramError(
        "the data point can only be multiplied by an input matrix "
        "(p.matrix(n, p.data_dim, sigma) @ p.data()); it takes no arithmetic or activations"
    )


def _as_scalar(x: Any) -> float | None:
    if isinstance(x, bool):
        raise ProgramError("booleans are not constants of a program; use 0.0 or 1.0")
    if isinstance(x, numbers.Real) or (isinstance(x, np.ndarray | np.generic) and np.ndim(x) == 0
                                       and np.asarray(x).dtype.kind in "iuf"):
        value = float(x)
        if not np.isfinite(value):
            raise ProgramError(f"constants in a program must be finite, got {value}")
        return value
    return None


def _new_nonlin(v: Vector, expr: Expr) -> Vector:
    """A NonLin line in ``v``'s dim (a scalar when ``v`` is one)."""
    program = v.program
    kind = "scalar" if v.kind == "scalar" else "H"
    return program.add_line(NonLinLine(program.new_vector(v.dim, kind), expr))


def expression_line(v: Vector, expr: Expr) -> Vector:
    """A NonLin line ``h := expr`` in ``v``'s dim, for layers that build the expression tree of
    their nonlinearity themselves (:func:`netsor.batchnorm`); ``expr`` is over vectors of ``v``'s program."""
    v.program.check_own(v)
    return _new_nonlin(v, expr)


def _new_lincomb(v: Vector, terms: list[tuple[float | Vector, Vector]], offset: Vector | None = None) -> Vector:
    program = v.program
    coeffs = tuple(c if isinstance(c, Vector) else float(c) for c, _ in terms)
    args = tuple(a for _, a in terms)
    return program.add_line(LinCombLine(program.new_vector(v.dim, "G"), coeffs, args, offset))


def matmul(W: Matrix, h: Any, transposed: bool) -> Vector:
    """``W @ h`` (``Wᵀ @ h`` when ``transposed``): a MatMul line."""
    program = W.program
    if isinstance(h, (Matrix, TransposedMatrix)):
        raise ProgramError(f"{W.name} @ {getattr(h, 'name', None) or h.matrix.name}...: a product of matrices is not a "
                           "line; multiply vectors one matrix at a time, as in W @ (V @ h)")
    if not isinstance(h, Vector):
        raise ProgramError(f"{W.name} @ ... needs a vector of the program, got {type(h).__name__}")
    program.check_own(h)
    in_dim, out_dim = (W.out_dim, W.in_dim) if transposed else (W.in_dim, W.out_dim)
    if h.dim is not in_dim:
        op = f"{W.name}{'.T' if transposed else ''}"
        hint = (f"write {W.name}{'' if transposed else '.T'} @ {h.name} to use the "
                f"{'matrix' if transposed else 'transpose'}" if h.dim is out_dim and not out_dim.is_data
                else f"multiply a vector of dim {in_dim.name!r}, or make the matrix with p.matrix(out_dim, "
                     f"{h.dim.name!r} dim)" if not transposed
                else f"multiply a vector of dim {in_dim.name!r}, or make the matrix with p.matrix("
                     f"{h.dim.name!r} dim, in_dim)")
        raise DimensionError(
            f"{op} @ {h.name}: {W.name} is {W.out_dim.name}×{W.in_dim.name}, so {op} maps dim {in_dim.name!r} "
            f"to {out_dim.name!r}, but {h.name} lives in {h.dim.name!r}; {hint}"
        )
    if out_dim.is_data:
        raise DimensionError("a transposed input matrix would map into the data dimension")
    if h.kind == "data" and not W.is_input:
        raise ProgramError("only input matrices (in_dim = program.data_dim) multiply the data point")
    return program.add_line(MatMulLine(program.new_vector(out_dim, "G"), W, h, transposed))


def _other_vector(v: Vector, other: Vector) -> None:
    v.program.check_own(other)
    if other.dim is not v.dim and "scalar" not in (v.kind, other.kind):
        raise DimensionError(
            f"{v.name} lives in dim {v.dim.name!r} but {other.name} in {other.dim.name!r}; "
            "coordinatewise operations need vectors of one dimension"
        )


def binary_op(v: Vector, other: Any, op: str, reflected: bool) -> Vector:
    """``v op other`` (or ``other op v`` when ``reflected``) for op in ``+ - * / **``.

    With scalars (NetsorK): arithmetic of scalars makes scalars; a scalar times a G-vector (or a
    G-vector divided by a scalar) is a LinComb with a scalar coefficient (a G-vector), and so is a
    G-vector plus a scalar that vanishes in the limit (:mod:`netsor.ir.scalars`); anything else
    is a NonLin with scalar parameters.
    """
    left = expression_of(v)  # rejects data vectors with a clear message
    scalar = _as_scalar(other)
    if scalar is None:
        if not isinstance(other, Vector):
            raise ProgramError(
                f"cannot combine vector {v.name} with {type(other).__name__}; "
                "use vectors of the same program or real constants"
            )
        _other_vector(v, other)
        if v.kind == "scalar" and other.kind != "scalar":  # the result lives in the vector's dim
            return binary_op(other, v, op, not reflected)
        if other.kind == "scalar" and v.kind != "scalar":
            scaled = _scalar_lincomb(v, other, op, reflected)
            if scaled is not None:
                return scaled
    right = Const(scalar) if scalar is not None else expression_of(other)
    a, b = (right, left) if reflected else (left, right)
    if op == "**":
        return _new_nonlin(v, _power(a, b))
    if op == "/":
        if isinstance(b, Const):
            if b.value == 0.0:
                raise ProgramError(f"division of {v.name} by zero")
            return binary_op(v, 1.0 / b.value, "*", False)
        return _new_nonlin(v, product([a, apply(from_ufunc(np.reciprocal), b)]))
    sign = -1.0 if op == "-" else 1.0
    if op in "+-":
        if v.kind == "G" and isinstance(other, Vector) and other.kind == "G":
            first, second = (other, v) if reflected else (v, other)
            return _new_lincomb(v, [(1.0, first), (sign, second)])
        return _new_nonlin(v, linear(0.0, [(1.0, a), (sign, b)]))
    # op == "*"
    if scalar is not None and v.kind == "G":
        return _new_lincomb(v, [(scalar, v)])
    return _new_nonlin(v, product([a, b]))


def linear_combination(terms: list[tuple[float | Vector, Vector]]) -> Vector:
    """``Σ cₖ gₖ`` of G-vectors of one dim as one LinComb line; a coefficient is a real number or
    a scalar of the program (NetsorK: attention weights)."""
    if not terms:
        raise ProgramError("a linear combination needs at least one term")
    first = terms[0][1]
    for c, g in terms:
        if not isinstance(g, Vector) or g.kind != "G":
            raise ProgramError("a linear combination takes G-vectors (MatMul outputs, biases and their "
                               f"combinations); {getattr(g, 'name', g)!r} is not one")
        _other_vector(first, g)
        if isinstance(c, Vector):
            first.program.check_own(c)
            if c.kind != "scalar":
                raise ProgramError(f"coefficient {c.name} is a vector; coefficients are numbers or scalars")
        elif _as_scalar(c) is None:
            raise ProgramError(f"coefficients are real numbers or scalars of the program, got {c!r}")
    return _new_lincomb(first, list(terms))


def _scalar_lincomb(g: Vector, s: Vector, op: str, reflected: bool) -> Vector | None:
    """``g op s`` for a G-vector ``g`` and a scalar ``s`` as a LinComb line, when it is one."""
    from netsor.ir.scalars import vanishing_scalars

    if g.kind != "G":
        return None
    if op == "*":
        return _new_lincomb(g, [(s, g)])
    if op == "/" and not reflected:
        return _new_lincomb(g, [(binary_op(s, -1.0, "**", False), g)])
    if op in "+-" and s in vanishing_scalars(g.program):
        sign = -1.0 if op == "-" else 1.0
        if reflected:  # s ± g
            return _new_lincomb(g, [(sign, g)], s)
        return _new_lincomb(g, [(1.0, g)], s if sign > 0 else binary_op(s, -1.0, "*", False))
    return None


def _power(base: Expr, exponent: Expr) -> Expr:
    if isinstance(base, Const) and not isinstance(exponent, Const):  # c ** v = exp(v ln c)
        if not base.value > 0.0:
            raise ProgramError(f"c ** v needs a positive base c, got {base.value!r}")
        return apply(exp, linear(0.0, [(float(np.log(base.value)), exponent)]))
    if not isinstance(exponent, Const):
        raise ProgramError("a power needs a constant exponent; for v ** w write netsor.nonlin(fn, v, w)")
    p = exponent.value
    if float(p).is_integer() and 0 <= p <= 8:
        return product([base] * int(p)) if p else Const(1.0)
    if p == 0.5:
        return apply(from_ufunc(np.sqrt), base)
    if p == -1.0:
        return apply(from_ufunc(np.reciprocal), base)
    if p == -0.5:
        return apply(from_ufunc(np.reciprocal), apply(from_ufunc(np.sqrt), base))
    raise ProgramError(f"powers of vectors are integers 0..8, 0.5, -0.5 or -1, got {p!r}; "
                       "for other powers write netsor.nonlin(lambda x: x ** p, v)")


def apply_nonlin(act: Activation, v: Vector) -> Vector:
    """``act(v)``: a NonLin line (compositions of activations are folded into one expression)."""
    expr = expression_of(v)
    if act is identity:
        return v
    return _new_nonlin(v, applied(act, expr))


def nonlin(fn: Callable[..., Any], *vectors: Vector, name: str | None = None) -> Vector:
    """A custom NonLin line ``h := fn(v¹, …, vᵏ)`` applied coordinatewise.

    ``fn`` must be vectorised: it receives numpy arrays of equal shape, one per vector, and
    returns an array of that shape. All vectors must live in one dimension of one program
    (scalars of the program may be among them: they are parameters of ``fn``).
    When ``fn`` is made of numpy arithmetic and elementwise functions, it is traced into an
    expression tree (so the infinite-width engine knows its kinks and independent factors);
    otherwise it is kept as an opaque function.
    """
    first, expr = _traced(fn, vectors, name, "nonlin")
    return _new_nonlin(first, expr)


def moment(fn: Callable[..., Any], *vectors: Vector, name: str | None = None) -> Vector:
    """NetsorK: the scalar ``θ := (1/n) Σ_α fn(v¹_α, …, vᵏ_α)``, the mean over the coordinates.

    ``fn`` is as for :func:`nonlin` (vectorised, elementwise; scalars may be parameters). At
    finite width it is the mean over the ``n`` coordinates; in the limit the deterministic
    ``E fn(Z^{v¹}, …, Z^{vᵏ})``, one number per input. Scalars take arithmetic (``+ - * / **``,
    activations such as ``netsor.exp``) and multiply vectors (``θ * g``: for a G-vector a LinComb
    with a scalar coefficient, again a G-vector).

    Examples
    --------
    >>> import netsor
    >>> p = netsor.Program(); n = p.dim("n")
    >>> g = p.input(n)
    >>> second_moment = netsor.moment(lambda a: a * a, g)   # → E[(Z^g)²] = σ²⟨x, x⟩/d in the limit
    """
    first, expr = _traced(fn, vectors, name, "moment")
    return _new_moment(first, expr)


def inner(x: Vector, y: Vector) -> Vector:
    """NetsorK: the scalar ``xᵀy / n`` (in the limit ``E[Z^x Z^y]``)."""
    for v in (x, y):
        if not isinstance(v, Vector) or v.kind in ("scalar", "data"):
            raise ProgramError("netsor.inner(x, y) takes two hidden vectors of one program (G or H)")
    _other_vector(x, y)
    return _new_moment(x, product([expression_of(x), expression_of(y)]))


def _new_moment(v: Vector, expr: Expr) -> Vector:
    if v.kind == "scalar":
        raise ProgramError("a moment averages over the coordinates of vectors; pass at least one hidden vector")
    program = v.program
    return program.add_line(MomentLine(program.new_vector(program.scalar_dim, "scalar"), expr))


def _traced(fn: Callable[..., Any], vectors: tuple[Vector, ...], name: str | None,
            what: str) -> tuple[Vector, Expr]:
    """Check ``fn`` and its vectors and trace it: (a non-scalar vector if any, the expression)."""
    if not callable(fn):
        raise ProgramError(f"netsor.{what}(fn, *vectors): fn must be callable")
    if not vectors:
        raise ProgramError(f"netsor.{what}(fn, *vectors) needs at least one vector")
    for v in vectors:
        if not isinstance(v, Vector):
            raise ProgramError(f"netsor.{what}: arguments must be vectors, got {type(v).__name__}")
    first = next((v for v in vectors if v.kind != "scalar"), vectors[0])
    for v in vectors:
        _other_vector(first, v)
    label = name or getattr(fn, "__name__", "fn")
    if not isinstance(label, str) or not label:
        raise ProgramError(f"name must be a non-empty string, got {label!r}")
    probe = tuple(np.linspace(-1.0, 1.0, 3) + 0.1 * i for i in range(len(vectors)))
    with np.errstate(all="ignore"):  # values out of a domain (log of a negative) show later, where they matter
        out = call_user_function(fn, probe, label)
    if out.shape != (3,):
        kind = "nonlinearity" if what == "nonlin" else "moment function"
        raise ProgramError(f"custom {kind} {label!r} must be vectorised and elementwise")
    operands = [expression_of(v) for v in vectors]
    expr, untraced = trace_or_reason(fn, operands)
    if expr is None and all(isinstance(e, Const) for e in operands):  # a function of constants is one
        expr = constant(float(call_user_function(fn, tuple(np.array([e.value]) for e in operands), label)[0]))
    if expr is None:
        _check_elementwise(fn, len(vectors), label, what)
        expr = Opaque(fn, tuple(operands), label, untraced=untraced)
    return first, expr


def _check_elementwise(fn: Callable[..., Any], arity: int, label: str, what: str) -> None:
    """A function the tracer could not see through must act coordinate by coordinate: on random
    values, permuting the coordinates permutes its output and a prefix of them gives the prefix
    (``np.sort(a)`` or ``a·0 + max(a)`` are functions of the whole vector, not nonlinearities)."""
    rng = np.random.default_rng(0)
    values = tuple(rng.standard_normal(64) for _ in range(arity))
    perm = rng.permutation(64)
    with np.errstate(all="ignore"):
        out = call_user_function(fn, values, label)
        moved = call_user_function(fn, tuple(v[perm] for v in values), label)
        prefix = call_user_function(fn, tuple(v[:7] for v in values), label)
    if not (np.allclose(moved, out[perm], rtol=1e-12, atol=0.0, equal_nan=True)
            and np.allclose(prefix, out[:7], rtol=1e-12, atol=0.0, equal_nan=True)):
        kind = "nonlinearity" if what == "nonlin" else "moment function"
        raise ProgramError(f"custom {kind} {label!r} does not act coordinate by coordinate (its output at one "
                           "coordinate depends on the others, e.g. a sort or a max over the vector); write it "
                           "elementwise, or use netsor.moment for a mean over the coordinates")
