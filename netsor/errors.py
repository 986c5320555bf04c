"""Errors a user can cause.

Every error raised on purpose by netsor is a :class:`NetsorError`; its message
says what to change. Subclasses let callers catch one family of mistakes.
"""

from __future__ import annotations


class NetsorError(ValueError):
    """Base class of all errors raised on purpose by netsor."""


class ProgramError(NetsorError):
    """An ill-formed or ill-typed Netsor program (wrong variable kinds, foreign vectors)."""


class DimensionError(ProgramError):
    """A line mixes dimensions, or a matrix is applied to a vector of the wrong dimension."""


class HyperParameterError(NetsorError):
    """A bad hyper-parameter: negative variance, impossible width, unknown activation, ..."""


class InputError(NetsorError):
    """Bad data: wrong shape, NaN or Inf entries."""


class NumericalError(NetsorError):
    """A numerical guarantee failed: a kernel is not PSD beyond tolerance, a NaN appeared."""


class UnsupportedError(NetsorError):
    """The program uses a feature that this interpreter does not execute (yet)."""
