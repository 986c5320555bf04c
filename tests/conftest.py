"""Test-session setup shared by every test module.

Hypothesis (the versions in our pinned range that have it) sometimes draws "local constants" —
literals it finds in the source of every local module loaded so far (``sys.modules``) — so with
``derandomize=True`` the examples of a test still depended on which test modules and lazily
imported netsor modules were loaded before it: the slow BatchNorm fuzz test drew other programs
in the full suite than alone (8 s alone, 160 s with every test module collected, its draws
diverging at the 70th). Here the pool of local constants is empty, so a derandomized test draws
the same examples however it is run (Hypothesis' own global constants — 0, ±1, powers of two,
NaN, … — stay in use).
"""

from __future__ import annotations

try:  # an internal of Hypothesis (pinned < 7): skipped where it moved, at the cost of that determinism
    from hypothesis.internal.conjecture import providers as _providers
except ImportError:  # pragma: no cover
    _providers = None

if _providers is not None and hasattr(_providers, "_get_local_constants") and hasattr(_providers, "Constants"):
    _NO_LOCAL_CONSTANTS = _providers.Constants()
    _providers._get_local_constants = lambda: _NO_LOCAL_CONSTANTS
