"""One place for every check of user-supplied values: numbers, counts, seeds, budgets, data arrays.

Every function returns the value in canonical form (``float``, ``int``, ``SeedSequence``,
float64 array) or raises a :class:`~netsor.errors.NetsorError` subclass whose message says
what to change. The rest of the library calls these instead of writing its own checks.

Seed policy
-----------
Wherever a ``seed`` is accepted it may be an ``int >= 0``, a :class:`numpy.random.SeedSequence`
or a :class:`numpy.random.Generator`. :func:`seed_sequence` turns any of them into a
``SeedSequence`` from which all streams of a computation are spawned. A ``SeedSequence`` is
never spawned from in place (its ``spawn`` counter would make a second call with the same
object give different numbers): it is copied first, so the same seed object always gives the
same results. A ``Generator`` is consumed: one 128-bit draw seeds the computation, so two
calls with one generator give different (independent) results, as numpy users expect.
"""

from __future__ import annotations

import math
import numbers
from typing import TYPE_CHECKING, Any

import numpy as np

from netsor.errors import HyperParameterError, InputError

if TYPE_CHECKING:
    from netsor.ir.program import Program

Seed = int | np.random.SeedSequence | np.random.Generator

#: Largest number of float64 entries a single requested array may have (2**40 bytes).
MAX_ARRAY_ENTRIES = 2**37


def _is_real_number(value: Any) -> bool:
    return (isinstance(value, numbers.Real) and not isinstance(value, bool)) or (
        isinstance(value, np.ndarray) and value.ndim == 0 and value.dtype.kind in "iuf")


def check_real(value: Any, what: str, *, minimum: float | None = None, maximum: float | None = None,
               strict: bool = False) -> float:
    """``value`` as a finite float in ``[minimum, maximum]`` (``(minimum, …`` when ``strict``).

    Booleans, strings and complex numbers are refused: ``sigma=True`` or ``sigma="1"`` is a
    mistake more often than a 1.
    """
    if not _is_real_number(value):
        raise HyperParameterError(f"{what} must be a real number, got {value!r} ({type(value).__name__})")
    x = float(value)
    if not math.isfinite(x):
        raise HyperParameterError(f"{what} must be finite, got {x!r}")
    if minimum is not None and (x < minimum or (strict and x == minimum)):
        raise HyperParameterError(f"{what} must be {'>' if strict else '>='} {minimum:g}, got {x!r}")
    if maximum is not None and x > maximum:
        raise HyperParameterError(f"{what} must be <= {maximum:g}, got {x!r}")
    return x


#: Largest standard deviation accepted: its square (the variance every rule uses) must be a float.
MAX_SIGMA = 1e150


def check_sigma(value: Any, what: str) -> float:
    """A standard deviation: a finite real in ``[0, MAX_SIGMA]`` (pass σ, not σ²)."""
    if _is_real_number(value) and math.isfinite(float(value)) and float(value) < 0:
        raise HyperParameterError(
            f"{what} must be a standard deviation >= 0, got {float(value)!r}; pass sigma (not sigma²) "
            "as a non-negative number")
    if _is_real_number(value) and math.isfinite(float(value)) and float(value) > MAX_SIGMA:
        raise HyperParameterError(f"{what} must be at most {MAX_SIGMA:g} (its square is a variance), got "
                                  f"{float(value)!r}; rescale the inputs instead")
    return check_real(value, what, minimum=0.0)


def check_count(value: Any, what: str, minimum: int = 1, maximum: int | None = None) -> int:
    """``value`` as an int in ``[minimum, maximum]`` (depths, widths, sample counts); bools refused."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral | np.integer):
        raise HyperParameterError(f"{what} must be an integer >= {minimum}, got {value!r}")
    if value < minimum:
        raise HyperParameterError(f"{what} must be an integer >= {minimum}, got {value!r}")
    if maximum is not None and value > maximum:
        raise HyperParameterError(f"{what} must be an integer <= {maximum}, got {value!r}")
    return int(value)


def check_choice(value: Any, what: str, choices: tuple[str, ...]) -> str:
    """``value`` if it is one of ``choices``."""
    if not isinstance(value, str) or value not in choices:
        raise HyperParameterError(f"{what} must be one of {', '.join(map(repr, choices))}; got {value!r}")
    return value


def check_memory_budget(value: Any, what: str = "memory_budget") -> int:
    """A working-memory budget in bytes: an integer of at least 1 MiB."""
    if _is_real_number(value) and float(value).is_integer():
        value = int(value)
    return check_count(value, f"{what} (bytes)", minimum=2**20)


def check_threads(value: Any) -> int | None:
    """``None`` (the library's default) or a positive integer number of worker threads."""
    return None if value is None else check_count(value, "threads", minimum=1, maximum=1024)


def check_size(entries: int, what: str) -> None:
    """Refuse arrays that could never fit in memory (``MAX_ARRAY_ENTRIES`` float64 values)."""
    if entries > MAX_ARRAY_ENTRIES:
        raise HyperParameterError(
            f"{what} would hold {entries:.3g} float64 values ({entries * 8 / 2**40:.3g} TiB); "
            "reduce the width, the number of samples or of inputs")


def seed_sequence(seed: Any) -> np.random.SeedSequence:
    """The ``SeedSequence`` of a seed under the seed policy (module docstring)."""
    if isinstance(seed, np.random.SeedSequence):
        # a copy, so that spawning from it never advances the caller's object
        return np.random.SeedSequence(seed.entropy, spawn_key=seed.spawn_key, pool_size=seed.pool_size)
    if isinstance(seed, np.random.Generator):
        return np.random.SeedSequence(int.from_bytes(seed.bytes(16), "little"))
    return np.random.SeedSequence(check_count(seed, "seed", minimum=0))


def generator(seed: Any) -> np.random.Generator:
    """A ``Generator`` under the seed policy (a ``Generator`` passed in is used as it is)."""
    return seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed_sequence(seed))


def real_array(x: Any, what: str, *, ndim: int | None = None, min_ndim: int = 0) -> np.ndarray:
    """``x`` as a finite float64 array; complex, string, object and boolean arrays are refused."""
    try:
        raw = np.asarray(x)
    except (TypeError, ValueError):
        raise InputError(f"{what} must be a numeric array, got {type(x).__name__}") from None
    if raw.dtype.kind not in "iuf":
        kind = {"c": "complex", "U": "string", "S": "bytes", "O": "object", "b": "boolean"}.get(
            raw.dtype.kind, str(raw.dtype))
        raise InputError(f"{what} must hold real numbers, got a {kind} array; convert it to float first")
    arr = raw.astype(float, copy=False)
    if ndim is not None and arr.ndim != ndim:
        raise InputError(f"{what} must have {ndim} axes, got shape {arr.shape}")
    if arr.ndim < min_ndim:
        raise InputError(f"{what} must have at least {min_ndim} axes, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        bad = int(np.sum(~np.isfinite(arr)))
        raise InputError(f"{what} has {bad} NaN/Inf entries; clean or impute the data first")
    return arr


#: Largest input entry: products of two stay finite in float64 (√1.8e308 ≈ 1.3e154).
MAX_INPUT = 1e154
#: Smallest largest entry of a nonzero input: the products of two of its kernels' variances (~x⁴) stay in
#: float64's normal range (1e-60⁴ = 1e-240 > 2.2e-308; at 1e-80 the kernels of smooth networks at exactly
#: proportional inputs came out 100 % off).
MIN_INPUT = 1e-60


def check_inputs(program: Program, X: Any, what: str = "X") -> np.ndarray:
    """Data for ``program``: a float64 array of shape (B, d), or (B, T, d) for programs with steps.

    Raises :class:`InputError` for wrong shapes, empty batches and non-finite or non-real entries.
    """
    arr = real_array(X, what)
    steps = program.steps
    if steps is None:
        if arr.ndim == 1:
            fix = "save one input as shape (1, d): numpy.save(path, x[None, :])" if what.startswith("--") else \
                f"for one input use {what}[None, :]"
            raise InputError(f"{what} must have shape (B, d); {fix}")
        if arr.ndim != 2:
            raise InputError(f"{what} must have shape (B, d), got shape {arr.shape}")
    else:
        if arr.ndim != 3:
            raise InputError(
                f"this program reads time steps, so {what} must have shape (B, T, d) with "
                f"T = {steps}; got shape {arr.shape}")
        if arr.shape[1] != steps:
            # more steps than the program reads were dropped silently: a cnn of 8 positions on sequences of
            # 10 is another network (its circular padding wraps at 8), an rnn of 3 steps ignores the 4th
            raise InputError(
                f"{what} has {arr.shape[1]} steps but the program reads {steps} (steps 0–{steps - 1}): build the "
                f"program for {arr.shape[1]} steps (positions, tokens), or pass {what}[:, :{steps}]"
                if arr.shape[1] > steps else
                f"{what} has {arr.shape[1]} steps but the program reads step {steps - 1}")
    if arr.shape[0] == 0 or arr.shape[-1] == 0:
        raise InputError(f"{what} is empty (shape {arr.shape}); pass at least one input of dimension >= 1")
    sizes = np.max(np.abs(arr.reshape(arr.shape[0], -1)), axis=1)  # each input's largest entry
    largest = float(np.max(sizes))
    if largest > MAX_INPUT:
        raise InputError(
            f"{what} has entries of size {largest:.1e}: their products (the inputs' inner products) overflow "
            f"float64 beyond {MAX_INPUT:.0e}; rescale the inputs (kernels of positively homogeneous networks "
            "such as ReLU scale exactly with the input norm)")
    tiny = np.flatnonzero((sizes > 0.0) & (sizes < MIN_INPUT))
    if tiny.size:
        raise InputError(
            f"{what}[{int(tiny[0])}] has no entry larger than {float(sizes[tiny[0]]):.1e} ({tiny.size} such inputs): "
            f"below {MIN_INPUT:.0e}, products of kernel entries (~|x|⁴) underflow float64; rescale the inputs "
            "(kernels of positively homogeneous networks such as ReLU scale exactly with the input norm), or pass "
            "exact zeros")
    return arr


def inputs_or_point(program: Program, X: Any, what: str = "X") -> np.ndarray:
    """:func:`check_inputs`, or for ``X=None`` and a program that reads no data (only Gaussian
    vectors, :meth:`Program.gaussian`) one symbolic point: an array of shape (1, 1)."""
    if X is not None:
        return check_inputs(program, X, what)
    if program.reads_data:
        raise InputError(f"this program reads the data point: pass {what} of shape (B, d)"
                         + (" or (B, T, d)" if program.steps is not None else ""))
    return np.zeros((1, 1))


def limit_inputs(program: Program, X: Any, X2: Any) -> tuple[np.ndarray, np.ndarray]:
    """The inputs of an infinite-width limit: ``X`` (one symbolic point for a program that reads no
    data) and ``X2`` (default ``X``), checked to share their layout."""
    X1 = inputs_or_point(program, X, "X")
    X2_ = X1 if X2 is None else inputs_or_point(program, X2, "X2")
    check_same_layout(X1, X2_)
    return X1, X2_


def check_same_layout(X1: np.ndarray, X2: np.ndarray) -> None:
    """Two input sets of one program must agree in every axis but the batch axis."""
    if X1.shape[1:] != X2.shape[1:]:
        raise InputError(f"X and X2 must agree in all but the batch axis: shapes {X1.shape} and {X2.shape}")


def physical_memory() -> int | None:
    """Bytes of physical memory of this machine, or ``None`` where the OS does not say."""
    import os

    try:
        pages, size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None
    return pages * size if pages > 0 and size > 0 else None


def check_fits_in_memory(entries: int, what: str) -> None:
    """Refuse an array of ``entries`` float64 values larger than this machine's physical memory.

    Checked before the work starts, so that an impossible request (a width of 10¹², 10¹³
    samples) is a :class:`HyperParameterError` instead of a crash or hours of swapping.
    """
    check_size(entries, what)
    total = physical_memory()
    if total is not None and entries * 8 > total:
        raise HyperParameterError(
            f"{what} would need {entries * 8 / 2**30:.3g} GiB, more than this machine's "
            f"{total / 2**30:.3g} GiB of memory; reduce the width, the number of samples or of inputs")


def complex_array(z: Any, what: str) -> np.ndarray:
    """``z`` as a finite complex128 array (real input accepted); string, object and boolean arrays
    are refused, as by :func:`real_array`."""
    try:
        raw = np.asarray(z)
    except (TypeError, ValueError):
        raise InputError(f"{what} must be a numeric array, got {type(z).__name__}") from None
    if raw.dtype.kind not in "iufc":
        raise InputError(f"{what} must hold real or complex numbers, got dtype {raw.dtype}")
    arr = raw.astype(complex, copy=False)
    if not np.all(np.isfinite(arr)):
        bad = int(np.sum(~np.isfinite(arr)))
        raise InputError(f"{what} has {bad} NaN/Inf entries; pass finite numbers")
    return arr
