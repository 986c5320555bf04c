"""MomentLine (NetsorK): ``θ := (1/n) Σ_α ψ(x¹_α, …, xᵏ_α)``, a scalar per input.

Finite width: the mean over the coordinates, stored as an array of shape (S, B, 1) (a vector of
the one-coordinate scalar dim, so that it broadcasts against the vectors it parameterises).
Coupled: the finite world takes the mean; the limit world uses the deterministic limit
``E ψ(Z)`` (the scalars of the limit execution are constants, not empirical means).
Infinite width: ``E ψ(Z^{x¹}, …, Z^{xᵏ})`` at each input (:class:`MomentForm`).
"""

from __future__ import annotations

import numpy as np

from netsor.errors import NumericalError
from netsor.interpret.forward import CoupledState, FiniteState
from netsor.interpret.rules.base import LimitContext, LineRule, MomentForm
from netsor.ir import MomentLine
from netsor.ir.expr import evaluate_shared

Array = np.ndarray


class MomentRule(LineRule):
    def finite(self, line: MomentLine, state: FiniteState) -> Array:
        args = line.expr.args
        n = max((state.sizes[a.dim] for a in args if a.kind != "scalar"), default=1)
        with np.errstate(all="ignore"):
            values = evaluate_shared(line.expr, {a: state.values[a] for a in args})
            out = np.broadcast_to(values, (state.chunk.size, state.batch, n)).mean(axis=-1, keepdims=True)
        if not np.all(np.isfinite(out)):
            raise NumericalError(f"the moment {line.out.name} = mean[{line.expr.describe()}] is NaN or Inf on a "
                                 "finite network (a value out of the function's domain, or an overflow)")
        return out

    def coupled(self, line: MomentLine, state: CoupledState) -> tuple[Array, Array]:
        limit = state.limit.limit.scalar(line.out)
        lim = np.broadcast_to(limit[None, :, None], (state.lim.chunk.size, state.lim.batch, 1))
        return self.finite(line, state.fin), lim

    def limit(self, line: MomentLine, context: LimitContext) -> MomentForm:
        return MomentForm(line.expr)
