"""Rules beside the language: for each line kind, its meaning under every interpretation.

``RULES[type(line)]`` is the line kind's :class:`~netsor.interpret.rules.base.LineRule`
(finite, coupled, limit). Adding a line kind is: its class in :mod:`netsor.ir.lines`, a
builder method, and one rule module here.
"""

from __future__ import annotations

from netsor.errors import UnsupportedError
from netsor.interpret.rules.base import (
    DataForm,
    FunctionForm,
    LimitContext,
    LinearForm,
    LineRule,
    MomentForm,
    SourceCovariance,
    SourceForm,
)
from netsor.interpret.rules.bias import BiasRule
from netsor.interpret.rules.data import DataRule, data_view
from netsor.interpret.rules.lincomb import LinCombRule
from netsor.interpret.rules.matmul import MatMulRule
from netsor.interpret.rules.moment import MomentRule
from netsor.interpret.rules.nonlin import NonLinRule
from netsor.ir import BiasLine, DataLine, LinCombLine, Line, MatMulLine, MomentLine, NonLinLine

RULES: dict[type, LineRule] = {
    DataLine: DataRule(),
    BiasLine: BiasRule(),
    MatMulLine: MatMulRule(),
    LinCombLine: LinCombRule(),
    NonLinLine: NonLinRule(),
    MomentLine: MomentRule(),
}


def rule_for(line: Line) -> LineRule:
    """The rule of a line's kind."""
    try:
        return RULES[type(line)]
    except KeyError:
        raise UnsupportedError(f"no interpretation rules for line kind {type(line).__name__}") from None


__all__ = ["RULES", "DataForm", "FunctionForm", "LimitContext", "LineRule", "LinearForm", "MomentForm",
           "SourceCovariance",
           "SourceForm", "data_view", "rule_for"]
