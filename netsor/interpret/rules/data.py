"""DataLine: the data point ``x`` (``X[:, step, :]`` for sequences)."""

from __future__ import annotations

import numpy as np

from netsor.interpret.forward import FiniteState
from netsor.interpret.rules.base import DataForm, LimitContext, LineRule
from netsor.ir import DataLine

Array = np.ndarray


def data_view(X: Array, step: int | None) -> Array:
    """The (B, d) slice of the data read by a DataLine with this ``step``."""
    return X if step is None else X[:, step, :]


class DataRule(LineRule):
    def finite(self, line: DataLine, state: FiniteState) -> Array:
        x = data_view(state.X, line.step)
        return np.broadcast_to(x, (state.chunk.size, *x.shape))

    def limit(self, line: DataLine, context: LimitContext) -> DataForm:
        return DataForm(line.step)
