"""Human-readable listings of programs."""

from __future__ import annotations

from netsor.ir.lines import BiasLine, DataLine, LinCombLine, Line, MatMulLine, MomentLine, NonLinLine
from netsor.ir.variables import Vector


def describe_line(line: Line) -> str:
    """One human-readable row for :meth:`netsor.Program.pretty`."""
    out = line.out
    head = f"{out.name}:{out.kind}({out.dim.name}) = "
    if isinstance(line, DataLine):
        return head + ("data" if line.step is None else f"data[step {line.step}]")
    if isinstance(line, BiasLine):
        return head + f"N(0, {line.sigma:g}²)"
    if isinstance(line, MatMulLine):
        return head + f"{line.matrix.name}{'ᵀ' if line.transposed else ''} @ {line.arg.name}"
    if isinstance(line, LinCombLine):
        terms = [f"{c.name if isinstance(c, Vector) else format(c, 'g')}*{a.name}"
                 for c, a in zip(line.coeffs, line.args, strict=True)]
        return head + " + ".join(terms + ([f"{line.offset.name}*1"] if line.offset is not None else []))
    if isinstance(line, MomentLine):
        return head + f"mean_α[{line.expr.describe()}]"
    assert isinstance(line, NonLinLine)
    return head + line.expr.describe()
