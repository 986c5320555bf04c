"""Which scalars of a program vanish in the infinite-width limit (a structural fact).

The mean ``(1/n) Σ_α g_α`` of a G-vector (or of any linear combination of G-vectors) tends to
``E Z^g = 0``; sums and products of vanishing scalars, and odd activations of them, vanish too.
A LinComb line may add such a scalar to every coordinate (LayerNorm's ``−μ/σ``) and stay a
G-vector: the offset is there at finite width and exactly zero in the limit.
"""

from __future__ import annotations

from netsor.ir.expr import Apply, Const, Expr, Prod, Sum, Var, expand
from netsor.ir.lines import MomentLine, NonLinLine
from netsor.ir.program import Program
from netsor.ir.variables import Vector


def vanishing_scalars(program: Program) -> frozenset[Vector]:
    """The scalars of ``program`` whose limit is exactly 0 whatever the inputs."""
    return program.derived("vanishing scalars", _vanishing)


def _vanishing(program: Program) -> frozenset[Vector]:
    zero: set[Vector] = set()
    for line in program.lines:
        if line.out.kind != "scalar":
            continue
        if isinstance(line, MomentLine):
            poly = expand(line.expr)
            if poly.const == 0.0 and all(len(m.atoms) == 1 and isinstance(m.atoms[0], Var)
                                         and m.atoms[0].vector.kind == "G" for _, m in poly.terms):
                zero.add(line.out)
        elif isinstance(line, NonLinLine) and _vanishes(line.expr, zero):
            zero.add(line.out)
    return frozenset(zero)


def _vanishes(e: Expr, zero: set[Vector]) -> bool:
    if isinstance(e, Var):
        return e.vector in zero
    if isinstance(e, Const):
        return e.value == 0.0
    if isinstance(e, Prod):
        return any(_vanishes(f, zero) for f in e.factors)
    if isinstance(e, Sum):
        return e.const == 0.0 and all(_vanishes(t, zero) for _, t in e.terms)
    if isinstance(e, Apply):
        return e.act.at_zero == 0.0 and e.act.continuous and _vanishes(e.child, zero)
    return False
