"""How a program's vectors scale with its data (a structural fact): input degree and parity.

A vector ``v`` has *input degree* ``k`` when, at every width and for every draw of the weights,
``v(s·x) = sᵏ v(x)`` for all inputs ``x`` and every ``s > 0``, and *parity* π when
``v(−x) = (−1)^π v(x)``; together ``v(s·x) = sign(s)^π |s|^k v(x)`` for every real ``s ≠ 0``.
Data has degree 1 and is odd, biases and Gaussian inputs degree 0 and even; a MatMul (with
``W`` or ``Wᵀ``) keeps its argument's; products add degrees and parities (mod 2), sums need
equal ones; a positively homogeneous activation of degree ``p`` (``Activation.homogeneous``)
multiplies the degree by ``p``, an odd one keeps an odd argument odd, an even one
(``Activation.even``) makes it even; any function of degree-0 (even) vectors has degree 0 (is
even). A bias-free ReLU MLP has degrees but no parity beyond its first layer; a bias makes it
not homogeneous (None).

Because the identity holds draw by draw, it holds for the joint law of the limit too:
``E[Z^u(x) Z^v(s·x)] = λ_v(s) E[Z^u(x) Z^v(x)]`` (:func:`input_scaling`). The infinite-width
interpreter uses it for pairs of exactly proportional inputs, where a kernel computed from the
pair's covariances would meet the ½-Hölder conditioning of jump kernels at correlation ±1.
"""

from __future__ import annotations

import numpy as np

from netsor.ir.expr import Apply, BatchNormalized, BatchNormPartial, Const, Expr, Prod, Sum, Var
from netsor.ir.lines import BiasLine, DataLine, LinCombLine, MatMulLine, MomentLine, NonLinLine
from netsor.ir.program import Program
from netsor.ir.variables import Vector

Array = np.ndarray
#: ``(degree, parity)`` of a vector; either is None where the program does not determine it.
Scaling = tuple[float | None, int | None]
_DATA: Scaling = (1.0, 1)
_CONSTANT: Scaling = (0.0, 0)


def input_degrees(program: Program) -> dict[Vector, float | None]:
    """The input degree of every vector and scalar of ``program`` (None: not homogeneous)."""
    return {v: k for v, (k, _) in _scalings(program).items()}


def input_parities(program: Program) -> dict[Vector, int | None]:
    """The parity of every vector in the data: 1 when ``v(−x) = −v(x)`` draw by draw, 0 when
    ``v(−x) = v(x)``, None when neither is known."""
    return {v: p for v, (_, p) in _scalings(program).items()}


def input_scaling(program: Program, v: Vector, s: Array) -> Array:
    """``λ`` with ``v(s·x) = λ v(x)`` draw by draw, per entry of ``s`` (real, non-zero):
    ``sign(s)^π |s|^k`` from the input degree k and parity π of ``v``; NaN where they do not
    determine it (no degree, or ``s < 0`` and no parity)."""
    k, parity = _scalings(program)[v]
    s = np.asarray(s, dtype=float)
    out = np.full(s.shape, np.nan)
    if k is not None:
        positive = s > 0
        out[positive] = s[positive] ** k
        if parity is not None:
            out[~positive] = (-1.0) ** parity * np.abs(s[~positive]) ** k
    return out


def _scalings(program: Program) -> dict[Vector, Scaling]:
    return program.derived("input scalings", _walk)


def _walk(program: Program) -> dict[Vector, Scaling]:
    found: dict[Vector, Scaling] = {}
    for line in program.lines:
        if isinstance(line, DataLine):
            found[line.out] = _DATA
        elif isinstance(line, BiasLine):
            found[line.out] = _CONSTANT
        elif isinstance(line, MatMulLine):
            found[line.out] = found[line.arg]
        elif isinstance(line, LinCombLine):
            terms = [_product([found[c] if isinstance(c, Vector) else _CONSTANT, found[a]])
                     for c, a in zip(line.coeffs, line.args, strict=True) if isinstance(c, Vector) or c != 0.0]
            found[line.out] = _common(terms + ([found[line.offset]] if line.offset is not None else []))
        elif isinstance(line, (NonLinLine, MomentLine)):
            found[line.out] = _expression(line.expr, found)
    return found


def _product(factors: list[Scaling]) -> Scaling:
    """Degrees add, parities add mod 2."""
    k: float | None = 0.0
    p: int | None = 0
    for fk, fp in factors:
        k = None if k is None or fk is None else k + fk
        p = None if p is None or fp is None else (p + fp) % 2
    return k, p


def _common(terms: list[Scaling]) -> Scaling:
    """A sum's: the terms' common degree and parity (a sum of no terms is 0: any)."""
    degrees, parities = {k for k, _ in terms}, {p for _, p in terms}
    return (degrees.pop() if len(degrees) == 1 else None if degrees else 0.0,
            parities.pop() if len(parities) == 1 else None if parities else 0)


def _expression(e: Expr, found: dict[Vector, Scaling]) -> Scaling:
    if isinstance(e, Var):
        return found[e.vector]
    if isinstance(e, Const):
        return _CONSTANT
    children = [_expression(c, found) for c in e.children()]
    if isinstance(e, Sum):
        return _common(([_CONSTANT] if e.const != 0.0 else [])
                       + [s for (coef, _), s in zip(e.terms, children, strict=True) if coef != 0.0])
    if isinstance(e, Prod):
        return _product(children)
    # a function of its arguments: scale-invariant (even) when they all are
    degree = 0.0 if all(k == 0.0 for k, _ in children) else None
    parity = 0 if all(p == 0 for _, p in children) else None
    if isinstance(e, Apply):
        (k, p), = children
        if degree is None and k is not None and e.act.homogeneous is not None:
            degree = e.act.homogeneous * k
        if parity is None and p == 1:
            parity = 1 if e.act.odd else 0 if e.act.even else None
    elif isinstance(e, (BatchNormalized, BatchNormPartial)) and degree is None:
        k = _common(children)[0]  # normalised: degree 0; its partial carries 1/s: degree −k
        degree = None if k is None else 0.0 if isinstance(e, BatchNormalized) else -k
    return degree, parity
