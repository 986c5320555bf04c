"""Program names of the zoo's architectures."""

from __future__ import annotations

import numbers
from typing import Any


def number(x: Any) -> str:
    """A real parameter as ``%g`` for a program's name, anything else by ``repr``: the name is made
    before the builder validates the value, which then refuses it with its own message."""
    if isinstance(x, numbers.Real) and not isinstance(x, bool):
        return f"{float(x):g}"
    return repr(x)
