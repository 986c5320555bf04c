"""BiasLine: an initial G-vector with iid ``N(0, σ²)`` coordinates shared by every input."""

from __future__ import annotations

import numpy as np

from netsor.interpret.forward import CoupledState, FiniteState
from netsor.interpret.rules.base import LimitContext, LineRule, SourceCovariance, SourceForm
from netsor.ir import BiasLine, Line

Array = np.ndarray


class BiasRule(LineRule):
    def finite(self, line: BiasLine, state: FiniteState) -> Array:
        b = state.chunk.normal((state.sizes[line.out.dim],)) * line.sigma
        return np.broadcast_to(b[:, None, :], (state.chunk.size, state.batch, b.shape[-1]))

    def coupled(self, line: BiasLine, state: CoupledState) -> tuple[Array, Array]:
        b = self.finite(line, state.fin)  # one draw: both worlds share the bias
        return b, b

    def limit(self, line: BiasLine, context: LimitContext) -> SourceForm:
        return SourceForm()

    def source_covariance(self, line: BiasLine, other: Line) -> SourceCovariance | None:
        return SourceCovariance(line.sigma**2) if other is line else None
