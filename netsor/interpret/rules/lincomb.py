"""LinCombLine: ``g := Σ aᵢ gⁱ`` over G-vectors."""

from __future__ import annotations

from typing import Any

import numpy as np

from netsor.interpret.forward import FiniteState
from netsor.interpret.rules.base import LimitContext, LinearForm, LineRule
from netsor.ir import LinCombLine

Array = np.ndarray


class LinCombRule(LineRule):
    def finite(self, line: LinCombLine, state: FiniteState) -> Array:
        out: Any = 0.0
        for c, a in zip(line.coeffs, line.args, strict=True):
            out = out + c * state.values[a]
        return np.asarray(out, dtype=float)

    def limit(self, line: LinCombLine, context: LimitContext) -> LinearForm:
        return LinearForm(tuple(zip(line.coeffs, line.args, strict=True)))
