"""NetsorK layers written with the builder: LayerNorm, softmax, attention, BatchNorm.

Each returns new vectors (or scalars) of the program of its arguments; none is a new line kind.
LayerNorm and attention use scalars (moments ``(1/n) Σ_α ψ(x_α)``): at finite width they are
empirical means over the coordinates, in the limit deterministic numbers per input, so that
LayerNorm of a G-vector and attention over G-vectors are again G-vectors (LinComb lines with
scalar coefficients). BatchNorm normalises each coordinate across a list of vectors (the batch
is part of the program) and needs no scalar: it is a NonLin of the batch's vectors.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from netsor.activations import exp, relu
from netsor.builder import expression_line, expression_of, inner, linear_combination, moment
from netsor.errors import DimensionError, ProgramError
from netsor.ir import Vector
from netsor.ir.expr import BatchNormalized
from netsor.validate import check_real


def layernorm(g: Vector) -> Vector:
    """``(g − μ) / σ`` with ``μ = (1/n) Σ_α g_α`` and the population ``σ² = (1/n) Σ_α g_α² − μ²``
    (no epsilon), as Neural Tangents' ``stax.LayerNorm``.

    For a G-vector (a pre-activation) the result is a G-vector: in the limit ``μ → 0`` and
    ``Z = Z^g / √E[(Z^g)²]``. A vector whose limiting variance is 0 at some input raises a
    :class:`~netsor.errors.NumericalError` naming the scalar.
    """
    _check_hidden(g, "layernorm")
    mean = moment(_identity, g, name="mean")
    variance = inner(g, g) - mean * mean
    return (g - mean) * variance ** -0.5


def _as_list(items: Any, what: str, of: str) -> list[Any]:
    """``items`` as a list; a single vector where a list is expected is refused with the fix."""
    if isinstance(items, Vector):
        raise ProgramError(f"{what} takes a list of {of}, got one vector: pass [v] (or the list of all of them)")
    try:
        return list(items)
    except TypeError:
        raise ProgramError(f"{what} takes a list of {of}, got {type(items).__name__}") from None


def softmax(scores: Sequence[Vector]) -> list[Vector]:
    """``exp(sⱼ − m) / Σₖ exp(sₖ − m)`` of scalars, with ``m = maxₖ sₖ`` (``max(a, b) = a + relu(b − a)``)
    so that no exponential exceeds 1, whatever the scale of the scores (unshifted, scores above ~709 —
    inputs of norm ~30 in a transformer, or a small temperature — overflowed and were refused)."""
    scores = _as_list(scores, "softmax", "scalars")
    if not scores or not all(isinstance(s, Vector) and s.kind == "scalar" for s in scores):
        raise ProgramError("softmax takes a non-empty list of scalars of one program")
    top = scores[0]
    for s in scores[1:]:
        top = top + relu(s - top)
    weights = [exp(s - top) for s in scores]
    total = weights[0]
    for w in weights[1:]:
        total = total + w
    inverse = total ** -1.0
    return [w * inverse for w in weights]


def attention(queries: Sequence[Vector], keys: Sequence[Vector], values: Sequence[Vector], *,
              temperature: float = 1.0, mask: Any = None) -> list[Vector]:
    """Dot-product attention over token vectors: ``o_t = Σ_j a_tj v_j`` with
    ``a_t = softmax_j(q_tᵀ k_j / n / temperature)`` over the ``j`` that ``mask[t, j]`` allows.

    Parameters
    ----------
    queries : list of T_q vectors; keys, values : lists of T_k vectors (one dim for all).
        ``values`` must be G-vectors (e.g. ``W_V x_t``): the outputs are then G-vectors (LinComb
        lines with the attention weights as scalar coefficients).
    temperature : float > 0
    mask : None, "causal" or a boolean array (T_q, T_k)
        None: every key; "causal": ``j ≤ t``; every row must allow at least one key.

    Returns
    -------
    list of T_q vectors.
    """
    queries, keys, values = (_as_list(x, f"attention's {name}", "token vectors")
                             for x, name in ((queries, "queries"), (keys, "keys"), (values, "values")))
    if not queries or not keys or len(keys) != len(values):
        raise ProgramError("attention needs queries and as many keys as values (non-empty lists)")
    for v in (*queries, *keys, *values):
        _check_hidden(v, "attention")
    dim = queries[0].dim
    if any(v.dim is not dim for v in (*keys, *values)):
        raise DimensionError("queries, keys and values of attention must live in one dim")
    temperature = check_real(temperature, "temperature", minimum=1e-12)
    allowed = _mask(mask, len(queries), len(keys))
    out = []
    for t, q in enumerate(queries):
        js = np.flatnonzero(allowed[t])
        weights = softmax([inner(q, keys[j]) * (1.0 / temperature) for j in js])
        out.append(linear_combination([(a, values[j]) for a, j in zip(weights, js, strict=True)]))
    return out


def batchnorm(gs: Sequence[Vector]) -> list[Vector]:
    """Normalise each coordinate across the batch ``gs`` (B ≥ 2 vectors of one dim):
    ``u_b = (g_b − ḡ) / s`` with ``ḡ = (1/B) Σ_b g_b`` and the population ``s² = (1/B) Σ_b (g_b − ḡ)²``
    (no epsilon). Returns the B outputs, NonLin lines of the batch's vectors
    (:class:`~netsor.ir.expr.BatchNormalized` expressions; the batch is part of the program).

    In the limit, ``φ(u_b)`` of G-vectors with a positively homogeneous φ (relu, step, identity,
    abs, leaky_relu) has exact second moments at one input (:mod:`netsor.gaussian.batchnorm`).
    """
    gs = _as_list(gs, "batchnorm", "vectors (the batch)")
    if len(gs) < 2:
        raise ProgramError("batchnorm normalises across a batch: pass at least two vectors")
    for g in gs:
        _check_hidden(g, "batchnorm")
    if any(g.dim is not gs[0].dim for g in gs):
        raise DimensionError("the vectors of a batch must live in one dim")
    operands = tuple(expression_of(g) for g in gs)
    return [expression_line(gs[0], BatchNormalized(b, operands)) for b in range(len(gs))]


def _identity(x: Any) -> Any:
    return x


def _check_hidden(v: Any, what: str) -> None:
    if not isinstance(v, Vector) or v.kind not in ("G", "H"):
        raise ProgramError(f"{what} takes hidden vectors (G or H) of a program, got {getattr(v, 'name', v)!r}")


def _mask(mask: Any, tq: int, tk: int) -> np.ndarray:
    if mask is None:
        return np.ones((tq, tk), dtype=bool)
    if isinstance(mask, str):
        if mask != "causal":
            raise ProgramError(f"mask must be None, 'causal' or a boolean array, got {mask!r}")
        return np.tri(tq, tk, dtype=bool)
    allowed = np.asarray(mask)
    if allowed.shape != (tq, tk) or allowed.dtype != bool:
        raise ProgramError(f"mask must be a boolean array of shape ({tq}, {tk}), got {allowed.dtype} {allowed.shape}")
    if not allowed.any(axis=1).all():
        raise ProgramError("every query must attend to at least one key: a row of the mask is all False")
    return allowed
