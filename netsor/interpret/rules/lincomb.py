"""LinCombLine: ``g := Σ aᵢ gⁱ (+ offset)`` over G-vectors; coefficients may be scalars (NetsorK).

At finite width a scalar coefficient is an array of shape (S, B, 1) and broadcasts over the
coordinates; the offset (a scalar that vanishes in the limit, e.g. LayerNorm's ``−μ/σ``) is
added to every coordinate. In the limit the offset is exactly 0 and the line is the linear form
``Σ aᵢ Z^{gⁱ}`` with per-input coefficients.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from netsor.interpret.forward import FiniteState
from netsor.interpret.rules.base import LimitContext, LinearForm, LineRule
from netsor.ir import LinCombLine, Vector

Array = np.ndarray


class LinCombRule(LineRule):
    def finite(self, line: LinCombLine, state: FiniteState) -> Array:
        # an empty sum is the zero vector (the tangent of a vector constant in the parameters)
        out: Any = np.zeros((state.chunk.size, state.batch, state.sizes[line.out.dim])) if not line.args else 0.0
        for c, a in zip(line.coeffs, line.args, strict=True):
            out = out + (state.values[c] if isinstance(c, Vector) else c) * state.values[a]
        if line.offset is not None:
            out = out + state.values[line.offset]
        return np.asarray(out, dtype=float)

    def limit(self, line: LinCombLine, context: LimitContext) -> LinearForm:
        return LinearForm(tuple(zip(line.coeffs, line.args, strict=True)))
