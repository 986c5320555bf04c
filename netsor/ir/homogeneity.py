"""Positive homogeneity of a program's vectors in its data (a structural fact).

A vector ``v`` has *input degree* ``k`` when, at every width and for every draw of the weights,
``v(s·x) = sᵏ v(x)`` for all inputs ``x`` and every ``s > 0``: data has degree 1, biases and
Gaussian inputs degree 0, a MatMul (with ``W`` or ``Wᵀ``) the degree of its argument, a
positively homogeneous activation of degree ``p`` (``Activation.homogeneous``) multiplies it by
``p``, products add degrees, sums need equal degrees, and any function of degree-0 vectors has
degree 0. A bias-free ReLU or step MLP is homogeneous; adding a bias makes it not (None).

Because the identity holds draw by draw, it holds for the joint law of the limit too:
``E[Z^u(x) Z^v(s·x)] = s^{deg v} E[Z^u(x) Z^v(x)]``; with a parity π (``v(−x) = ±v(x)``,
:func:`input_parities`) also for ``s < 0``, with the factor ``sign(s)^π |s|^k``. The
infinite-width interpreter uses it for pairs of exactly proportional inputs, where a kernel
computed from the pair's covariances would meet the ½-Hölder conditioning of jump kernels at
correlation ±1.
"""

from __future__ import annotations

import numpy as np

from netsor.ir.expr import Apply, BatchNormalized, BatchNormPartial, Const, Expr, Prod, Sum, Var
from netsor.ir.lines import BiasLine, DataLine, LinCombLine, MatMulLine, MomentLine, NonLinLine
from netsor.ir.program import Program
from netsor.ir.variables import Vector

Degrees = dict[Vector, float | None]
Array = np.ndarray


def input_degrees(program: Program) -> Degrees:
    """The input degree of every vector and scalar of ``program`` (None: not homogeneous)."""
    return program.derived("input degrees", _degrees)


def _degrees(program: Program) -> Degrees:
    deg: Degrees = {}
    for line in program.lines:
        if isinstance(line, DataLine):
            deg[line.out] = 1.0
        elif isinstance(line, BiasLine):
            deg[line.out] = 0.0
        elif isinstance(line, MatMulLine):
            deg[line.out] = deg[line.arg]
        elif isinstance(line, LinCombLine):
            terms = [_add(deg[c] if isinstance(c, Vector) else 0.0, deg[a])
                     for c, a in zip(line.coeffs, line.args, strict=True) if isinstance(c, Vector) or c != 0.0]
            if line.offset is not None:
                terms.append(deg[line.offset])
            deg[line.out] = _common(terms)
        elif isinstance(line, (NonLinLine, MomentLine)):
            deg[line.out] = _expression_degree(line.expr, deg)
    return deg


def _add(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a + b


def _common(degrees: list[float | None]) -> float | None:
    """The degree of a sum: the terms' common degree (a sum of no terms is 0, of any degree)."""
    found = set(degrees)
    if not found:
        return 0.0
    return found.pop() if len(found) == 1 else None


def _expression_degree(e: Expr, deg: Degrees) -> float | None:
    if isinstance(e, Var):
        return deg[e.vector]
    if isinstance(e, Const):
        return 0.0
    children = [_expression_degree(c, deg) for c in e.children()]
    if isinstance(e, Sum):
        return _common(([0.0] if e.const != 0.0 else [])
                       + [d for (coef, _), d in zip(e.terms, children, strict=True) if coef != 0.0])
    if isinstance(e, Prod):
        total: float | None = 0.0
        for d in children:
            total = _add(total, d)
        return total
    if all(d == 0.0 for d in children):  # any function of scale-invariant arguments is scale-invariant
        return 0.0
    if isinstance(e, Apply):
        (k,) = children
        return None if k is None or e.act.homogeneous is None else e.act.homogeneous * k
    if isinstance(e, (BatchNormalized, BatchNormPartial)):
        k = _common(children)
        if k is None:
            return None
        return 0.0 if isinstance(e, BatchNormalized) else -k  # ∂u_b/∂e_j carries the 1/s
    return None  # an opaque function of scaled arguments: unknown



def input_scaling(program: Program, v: Vector, s: Array) -> Array:
    """``λ`` with ``v(s·x) = λ v(x)`` draw by draw, per entry of ``s`` (real, non-zero):
    ``sign(s)^π |s|^k`` from the input degree k and parity π of ``v``; NaN where they do not
    determine it (no degree, or ``s < 0`` and no parity)."""
    k, parity = input_degrees(program)[v], input_parities(program)[v]
    s = np.asarray(s, dtype=float)
    out = np.full(s.shape, np.nan)
    if k is not None:
        positive = s > 0
        out[positive] = s[positive] ** k
        if parity is not None:
            out[~positive] = (-1.0) ** parity * np.abs(s[~positive]) ** k
    return out


def input_parities(program: Program) -> dict[Vector, int | None]:
    """The parity of every vector in the data: 1 when ``v(−x) = −v(x)`` draw by draw, 0 when
    ``v(−x) = v(x)``, None when neither is known. Data is odd, biases even; MatMuls keep their
    argument's parity, products add parities (mod 2), sums need equal ones, an odd activation of
    an odd argument is odd, an even one (``Activation.even``) even, any function of even arguments
    even. With the input degree k: ``v(s·x) = sign(s)^π |s|^k v(x)`` for every real ``s ≠ 0``."""
    return program.derived("input parities", _parities)


def _parities(program: Program) -> dict[Vector, int | None]:
    par: dict[Vector, int | None] = {}
    for line in program.lines:
        if isinstance(line, DataLine):
            par[line.out] = 1
        elif isinstance(line, BiasLine):
            par[line.out] = 0
        elif isinstance(line, MatMulLine):
            par[line.out] = par[line.arg]
        elif isinstance(line, LinCombLine):
            terms = [_add_parity(par[c] if isinstance(c, Vector) else 0, par[a])
                     for c, a in zip(line.coeffs, line.args, strict=True) if isinstance(c, Vector) or c != 0.0]
            if line.offset is not None:
                terms.append(par[line.offset])
            par[line.out] = _common_parity(terms)
        elif isinstance(line, (NonLinLine, MomentLine)):
            par[line.out] = _expression_parity(line.expr, par)
    return par


def _add_parity(a: int | None, b: int | None) -> int | None:
    return None if a is None or b is None else (a + b) % 2


def _common_parity(parities: list[int | None]) -> int | None:
    found = set(parities)
    if not found:
        return 0
    return found.pop() if len(found) == 1 else None


def _expression_parity(e: Expr, par: dict[Vector, int | None]) -> int | None:
    if isinstance(e, Var):
        return par[e.vector]
    if isinstance(e, Const):
        return 0
    children = [_expression_parity(c, par) for c in e.children()]
    if isinstance(e, Sum):
        return _common_parity(([0] if e.const != 0.0 else [])
                              + [p for (coef, _), p in zip(e.terms, children, strict=True) if coef != 0.0])
    if isinstance(e, Prod):
        total: int | None = 0
        for p in children:
            total = _add_parity(total, p)
        return total
    if all(p == 0 for p in children):  # any function of even arguments is even
        return 0
    if isinstance(e, Apply) and children == [1]:
        return 1 if e.act.odd else 0 if e.act.even else None
    return None  # an activation without a parity, BatchNorm, an opaque function
