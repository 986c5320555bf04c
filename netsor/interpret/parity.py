"""Parity of a program's vectors under its declared sign symmetry (:meth:`Program.mark_odd`).

Flipping the sign of the odd matrices and biases leaves the law of the program unchanged. Each
vector is then *even* (+1: unchanged by the flip), *odd* (−1: negated) or of no definite parity
(0). In the limit ``E[Z^a Z^b] = 0`` for an even ``a`` and an odd ``b`` — exactly, without
computing it — so Gaussian sources of opposite parities are independent. The tangent program of the
NTK (:mod:`netsor.ir.tangent`) is built so: its forward vectors are even and its tangents odd, and
the engine factorises ``E[φ'(g)ġ · φ'(g')ġ']`` into ``E[φ'(g)φ'(g')] · E[ġ ġ']``.
"""

from __future__ import annotations

from netsor.ir.expr import Apply, Const, Expr, Prod, Sum, Var
from netsor.ir.lines import BiasLine, DataLine, LinCombLine, MatMulLine, MomentLine, NonLinLine
from netsor.ir.program import Program
from netsor.ir.variables import Vector

EVEN, ODD, NONE = 1, -1, 0


def vector_parities(program: Program) -> dict[Vector, int]:
    """The parity of every vector of ``program`` (all even when nothing is declared odd)."""
    odd = set(program.odd_sources)
    parity: dict[Vector, int] = {}
    for line in program.lines:
        out = line.out
        if not odd or isinstance(line, DataLine):
            parity[out] = EVEN
        elif isinstance(line, BiasLine):
            parity[out] = ODD if out in odd else EVEN
        elif isinstance(line, MatMulLine):
            parity[out] = (ODD if line.matrix in odd else EVEN) * parity[line.arg]
        elif isinstance(line, LinCombLine):
            terms = [parity[a] * (parity[c] if isinstance(c, Vector) else EVEN)
                     for c, a in zip(line.coeffs, line.args, strict=True)]
            if line.offset is not None:
                terms.append(parity[line.offset])
            parity[out] = _common(terms)
        elif isinstance(line, NonLinLine | MomentLine):
            parity[out] = expression_parity(line.expr, parity)
        else:  # pragma: no cover - every line kind is handled above
            raise TypeError(f"no parity rule for {type(line).__name__}")
    return parity


def expression_parity(e: Expr, parity: dict[Vector, int]) -> int:
    """The parity of an expression over vectors of known parity (0 where none is certain)."""
    if all(parity[v] == EVEN for v in e.args):
        return EVEN
    if isinstance(e, Var):
        return parity[e.vector]
    if isinstance(e, Prod):
        result = EVEN
        for f in e.factors:
            result *= expression_parity(f, parity)
        return result
    if isinstance(e, Sum):
        return _common([expression_parity(t, parity) for _, t in e.terms] + ([EVEN] if e.const else []))
    if isinstance(e, Apply) and e.act.odd:
        return expression_parity(e.child, parity)
    if isinstance(e, Const):
        return EVEN
    return NONE


def _common(parities: list[int]) -> int:
    """The parity of a sum: the parity of its terms where they all have the same one."""
    first = parities[0] if parities else EVEN
    return first if all(p == first for p in parities) else NONE
