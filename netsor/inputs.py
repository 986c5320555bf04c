"""Validation of data arrays against a program (shared by every interpreter)."""

from __future__ import annotations

from typing import Any

import numpy as np

from netsor.errors import InputError, ProgramError
from netsor.program import DataLine, Program


def check_inputs(program: Program, X: Any, name: str = "X") -> np.ndarray:
    """Return ``X`` as a float64 array of shape (B, d), or (B, T, d) for programs with steps.

    Raises :class:`InputError` for wrong shapes, empty batches and non-finite entries.
    """
    try:
        arr = np.asarray(X, dtype=float)
    except (TypeError, ValueError):
        raise InputError(f"{name} must be a numeric array, got {type(X).__name__}") from None
    steps = program.steps
    uses_plain = any(isinstance(ln, DataLine) and ln.step is None for ln in program.lines)
    if steps is not None and uses_plain:
        raise ProgramError(
            "the program uses both p.data() and p.data(step=t); use p.data(step=t) everywhere"
        )
    if steps is None:
        if arr.ndim == 1:
            raise InputError(f"{name} must have shape (B, d); for one input use {name}[None, :]")
        if arr.ndim != 2:
            raise InputError(f"{name} must have shape (B, d), got shape {arr.shape}")
    else:
        if arr.ndim != 3:
            raise InputError(
                f"this program reads time steps, so {name} must have shape (B, T, d) with "
                f"T >= {steps}; got shape {arr.shape}"
            )
        if arr.shape[1] < steps:
            raise InputError(f"{name} has {arr.shape[1]} steps but the program reads step {steps - 1}")
    if arr.shape[0] == 0 or arr.shape[-1] == 0:
        raise InputError(f"{name} is empty (shape {arr.shape}); pass at least one input of dimension >= 1")
    if not np.all(np.isfinite(arr)):
        bad = int(np.sum(~np.isfinite(arr)))
        raise InputError(f"{name} has {bad} NaN/Inf entries; clean or impute the data first")
    return arr


def data_view(X: np.ndarray, step: int | None) -> np.ndarray:
    """The (B, d) slice of the data read by a DataLine with this ``step``."""
    return X if step is None else X[:, step, :]


def check_same_layout(X1: np.ndarray, X2: np.ndarray) -> None:
    if X1.shape[1:] != X2.shape[1:]:
        raise InputError(
            f"X1 and X2 must agree in all but the batch axis: shapes {X1.shape} and {X2.shape}"
        )
