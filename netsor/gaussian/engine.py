"""Expectations of functions of Gaussian vectors: ``E[f(Z)]``, ``Z ~ N(0, Σ)``.

The infinite-width interpreter's inner loop. Methods, in order of preference:

1. closed forms of the activation registry (arc-cosine, arcsine, exp, ...);
2. Stein's identity for a pair (φ, identity): ``E[φ(u) v] = (c/a) E[u φ(u)]``;
3. for a pair ``E[φ(u) ψ(v)]`` without closed form: the Mehler (Hermite) series
   ``Σ_k α_k(a) β_k(b) ρ^k``, coefficients per distinct variance by the 1-D rule
   below, truncated per pair by a Parseval tail bound; colinear pairs by a 1-D
   rule, and the pairs where the series converges too slowly by the nested rule;
   panelled Gauss–Legendre quadrature against the Gaussian density in one
   dimension, panels graded towards the activation's kinks (~1e-14 for
   piecewise-smooth, bounded φ; growing φ such as exp needs moderate variances,
   the rule stops at |z| = Z_MAX);
4. tensor Gauss–Hermite quadrature for joint terms of dimension ≤ 3;
5. randomised quasi-Monte-Carlo (scrambled Sobol) above, with a standard error.

Everything is vectorised over the leading "pair" axis: callers pass arrays of
variances/covariances of any broadcastable shape (one entry per input pair).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
from scipy import special, stats
from scipy.linalg.blas import dger as _dger

from netsor.activations import Activation

Array = np.ndarray

#: Standard-normal coordinates beyond this are ignored (tail mass 1.5e-23).
Z_MAX = 10.0
_PANEL_EDGES = np.linspace(-Z_MAX, Z_MAX, 11)
#: Panel edges around each feature, graded towards it: φ(√a z) varies on the scale 1/√a in z,
#: down to 0.1 for the largest variances (1e2) and steeper at kinks.
_GRADING = np.array([0.0, -1.0, -4.0**-1, -4.0**-2, -4.0**-3, 4.0**-3, 4.0**-2, 4.0**-1, 1.0])
_GL_T, _GL_W = np.polynomial.legendre.leggauss(20)
_INV_SQRT_2PI = 1.0 / np.sqrt(2.0 * np.pi)
#: Variances at or below this are treated as exactly zero (a constant coordinate).
ZERO_VARIANCE = 1e-13
#: Pairs processed at once by the nested 2-D rule (bounds the working memory to ~200 MB).
_PAIR_CHUNK = 512


def _features(act: Activation) -> tuple[float, ...]:
    # Smooth activations vary fastest near 0; kinked ones are split at their kinks.
    return act.kinks or (0.0,)


def gaussian_rule(loc: Array, scale: Array, features: tuple[float, ...] = (0.0,),
                  extra_z: Array | None = None) -> tuple[Array, Array]:
    """Nodes and weights for ``E f(loc + scale·Z)``, ``Z ~ N(0, 1)``.

    Parameters
    ----------
    loc, scale : array, shape (P,)
        Location and (non-negative) scale of each of P Gaussians.
    features : tuple of float
        Points ``x`` where f has a kink or varies fastest; panels are split where
        ``loc + scale·z = x`` and graded towards it.
    extra_z : array, shape (P, k), optional
        Further panel edges in standardised coordinates.

    Returns
    -------
    x, w : arrays, shape (P, Q)
        ``Σ_q w[p, q] f(x[p, q]) ≈ E f(loc[p] + scale[p] Z)``.
    """
    loc = np.asarray(loc, dtype=float).reshape(-1)
    scale = np.asarray(scale, dtype=float).reshape(-1)
    safe = np.where(scale > 0, scale, 1.0)
    cuts = [np.broadcast_to(_PANEL_EDGES, (loc.size, _PANEL_EDGES.size))]
    for x in features:
        cuts.append(np.where(scale > 0, (x - loc) / safe, Z_MAX)[:, None] + _GRADING)
    if extra_z is not None:
        cuts.append(np.nan_to_num(extra_z, nan=Z_MAX, posinf=Z_MAX, neginf=-Z_MAX))
    edges = np.sort(np.clip(np.concatenate(cuts, axis=1), -Z_MAX, Z_MAX), axis=1)
    half = 0.5 * (edges[:, 1:] - edges[:, :-1])
    mid = 0.5 * (edges[:, 1:] + edges[:, :-1])
    z = (mid[..., None] + half[..., None] * _GL_T).reshape(loc.size, -1)
    w = (half[..., None] * _GL_W).reshape(loc.size, -1) * _INV_SQRT_2PI * np.exp(-0.5 * z * z)
    return loc[:, None] + scale[:, None] * z, w


def expect_1d(f: Callable[[Array], Array], variance: Array, features: tuple[float, ...] = (0.0,)) -> Array:
    """``E f(u)`` for ``u ~ N(0, variance)``, elementwise over ``variance`` (any shape)."""
    var = np.asarray(variance, dtype=float)
    x, w = gaussian_rule(np.zeros(var.size), np.sqrt(np.maximum(var.reshape(-1), 0.0)), features)
    return np.sum(w * f(x), axis=1).reshape(var.shape)


def mean(act: Activation, variance: Array) -> Array:
    """``E φ(u)``, ``u ~ N(0, variance)`` (closed form when known)."""
    var = np.asarray(variance, dtype=float)
    if act.odd:
        return np.zeros(var.shape)
    if act.mean is not None:
        return np.asarray(act.mean(np.maximum(var, 0.0)), dtype=float) * np.ones(var.shape)
    return expect_1d(act.fn, var, _features(act))


def _same_kernel(phi: Activation, psi: Activation) -> bool:
    return phi.kernel is not None and (phi is psi or (phi.name == psi.name and phi.params == psi.params))


def pair_expectation(phi: Activation, psi: Activation, a: Array, b: Array, c: Array,
                     memo: CoefficientMemo | None = None) -> Array:
    """``E[φ(u) ψ(v)]`` for centred Gaussian ``(u, v)`` with ``Var u = a, Var v = b, Cov = c``.

    Parameters
    ----------
    phi, psi : Activation
    a, b, c : array_like
        Broadcastable variances and covariance. Row/column layouts such as
        ``a : (B1, 1)``, ``b : (1, B2)``, ``c : (B1, B2)`` are exploited: the
        Hermite coefficients are computed once per distinct variance.
    memo : CoefficientMemo, optional
        Reuses Hermite coefficients across calls that meet the same variances.

    Returns
    -------
    array, shape ``broadcast(a, b, c).shape``
        Accurate to ``~1e-12 · sqrt(E φ(u)² E ψ(v)²)`` for every pair (closed forms,
        Stein's identity, a truncated Mehler series with a rigorous tail bound, or
        exact panelled quadrature where the series converges too slowly).
    """
    a, b, c = (np.asarray(t, dtype=float) for t in (a, b, c))
    shape = np.broadcast_shapes(a.shape, b.shape, c.shape)
    zero_a, zero_b = a <= ZERO_VARIANCE, b <= ZERO_VARIANCE
    if not (zero_a.any() or zero_b.any()):
        out = np.asarray(_regular_pair(phi, psi, a, b, c, memo), dtype=float)
        return out if out.shape == shape else np.broadcast_to(out, shape).copy()
    a, b, c, zero_a, zero_b = np.broadcast_arrays(a, b, c, zero_a, zero_b)
    out = np.empty(shape)
    regular = ~(zero_a | zero_b)
    if regular.any():
        out[regular] = _regular_pair(phi, psi, a[regular], b[regular], c[regular], memo)
    # A zero-variance coordinate is the constant 0: E[φ(0) ψ(v)] = φ(0) E ψ(v).
    phi0, psi0 = float(phi.fn(np.zeros(1))[0]), float(psi.fn(np.zeros(1))[0])
    only_a = zero_a & ~zero_b
    if only_a.any():
        out[only_a] = phi0 * mean(psi, b[only_a])
    only_b = zero_b & ~zero_a
    if only_b.any():
        out[only_b] = psi0 * mean(phi, a[only_b])
    out[zero_a & zero_b] = phi0 * psi0
    return out


def is_elementary(phi: Activation, psi: Activation) -> bool:
    """True when ``E[φ(u) ψ(v)]`` has a closed form (or Stein's identity): a few array passes.

    Otherwise each call runs the Mehler series, whose fixed setup cost favours fewer, larger calls.
    """
    return _same_kernel(phi, psi) or phi.name == "identity" or psi.name == "identity"


def _regular_pair(phi: Activation, psi: Activation, a: Array, b: Array, c: Array,
                  memo: CoefficientMemo | None = None) -> Array:
    if _same_kernel(phi, psi):
        return phi.kernel(a, b, c)
    if phi.name == "identity" and psi.name == "identity":
        return c.copy()
    if psi.name == "identity":
        return stein_identity(phi, a, c)
    if phi.name == "identity":
        return stein_identity(psi, b, c)
    return _series_pair(phi, psi, a, b, c, memo)


def stein_identity(phi: Activation, a: Array, c: Array) -> Array:
    """``E[φ(u) v] = (c / a) E[u φ(u)]`` (v regressed on u), for ``a > 0``."""
    return c / a * expect_1d(lambda x: x * phi.fn(x), a, _features(phi))


# --- Mehler series -------------------------------------------------------------------------
# E[φ(u) ψ(v)] = Σ_k α_k(a) β_k(b) ρ^k with α_k(a) = E[φ(√a Z) He_k(Z)] / √k!, ρ = c/√(ab).
# Parseval bounds the truncation error after order K by ρ^{K+1} √(T_φ(a, K) T_ψ(b, K)),
# T(a, K) = E φ² − Σ_{k≤K} α_k². The coefficients are those of φ restricted to |Z| ≤ Z_MAX
# (a change of 1e-23 relative), so the computed E φ² and α_k satisfy Parseval consistently.

#: Relative truncation error allowed to the series (the interface promises 1e-11).
SERIES_TOL = 1e-12
#: Floor of T / E φ², covering rounding in E φ² − Σ α_k².
_TAIL_FLOOR = 1e-14
#: Truncation orders tried, in increasing cost; a table of order 63 serves the first ones,
#: one of order 255 (built only when needed) the others.
_ORDERS = (5, 7, 11, 15, 19, 23, 31, 39, 47, 63, 95, 127, 191, 255)
_SMALL_TABLE, _LARGE_TABLE = 31, 255
#: Pairs per block of the series evaluation (the block's work arrays stay in cache).
_BLOCK = 1 << 16
#: Variances from which the Hermite coefficients are computed on two threads.
_PARALLEL_MIN = 256
#: Coefficients gathered per block at most (bounds the memory for long flat inputs).
_GATHER = 1 << 20
#: |ρ| ≥ 1 − this is treated as colinear (a 1-D integral).
_COLINEAR = 1e-14
#: Relative cost of one pair: one dense Horner step, one sparse step, a colinear pair and a
#: nested-quadrature pair (used only to choose the order of the dense pass).
_COST_SPARSE, _COST_COLINEAR, _COST_NESTED = 5.0, 500.0, 5e4


def _hermite_functions(z: Array, order: int) -> Array:
    """Normalised probabilists' Hermite polynomials ``He_k(z)/√k!``, shape ``(order+1, *z.shape)``."""
    h = np.empty((order + 1, *z.shape))
    h[0] = 1.0
    if order:
        h[1] = z
    for k in range(1, order):
        h[k + 1] = (z * h[k] - np.sqrt(k) * h[k - 1]) / np.sqrt(k + 1.0)
    return h


def _hermite_coefficients(act: Activation, var: Array, order: int) -> tuple[Array, Array]:
    """Hermite coefficients and second moment of ``φ(√var Z)`` (large batches on two threads).

    The work is numpy calls that release the GIL (φ on the nodes, one matrix product), and for
    a kernel it runs once per layer on all points before the tiles start, so it would otherwise
    leave the other cores idle.
    """
    if var.size < _PARALLEL_MIN or (os.cpu_count() or 1) < 2:
        return _hermite_coefficients_serial(act, var, order)
    half = var.size // 2
    with ThreadPoolExecutor(2) as pool:
        parts = list(pool.map(lambda v: _hermite_coefficients_serial(act, v, order), (var[:half], var[half:])))
    return np.concatenate([parts[0][0], parts[1][0]], axis=1), np.concatenate([parts[0][1], parts[1][1]])


def _hermite_coefficients_serial(act: Activation, var: Array, order: int) -> tuple[Array, Array]:
    """Hermite coefficients and second moment of ``φ(√var Z)``.

    Parameters
    ----------
    act : Activation
    var : array, shape (n,)
        Positive variances.
    order : int
        Highest order K.

    Returns
    -------
    alpha : array, shape (K+1, n)
        ``E[φ(√var Z) He_k(Z)] / √k!``.
    m2 : array, shape (n,)
        ``E φ(√var Z)²`` by the same rule.
    """
    # Panels narrow enough for the oscillation of He_K (frequency ≈ √(2K+1)) under 20 GL nodes.
    width = min(2.0, 12.0 / np.sqrt(2.0 * order + 1.0))
    edges = np.linspace(-Z_MAX, Z_MAX, int(np.ceil(2.0 * Z_MAX / width)) + 1)
    sd = np.sqrt(var)
    if all(k == 0.0 for k in act.kinks):  # one rule in z serves every variance
        z, w = gaussian_rule(np.zeros(1), np.ones(1), (0.0,), extra_z=edges[None])
        f = act.fn(sd[:, None] * z)
        fw = f * w
        return _hermite_functions(z[0], order) @ fw.T, np.sum(fw * f, axis=1)
    alpha, m2 = np.empty((order + 1, var.size)), np.empty(var.size)
    step = max(1, _GATHER // ((order + 1) * 20 * edges.size))
    for i in range(0, var.size, step):
        s = sd[i:i + step]
        x, w = gaussian_rule(np.zeros(s.size), s, act.kinks,
                             extra_z=np.broadcast_to(edges, (s.size, edges.size)))
        f = act.fn(x)
        fw = f * w
        alpha[:, i:i + step] = np.einsum("kpq,pq->kp", _hermite_functions(x / s[:, None], order), fw)
        m2[i:i + step] = np.sum(fw * f, axis=1)
    return alpha, m2


class CoefficientMemo:
    """Hermite coefficients already computed, per (activation, order) and variance value.

    A kernel is computed tile by tile and every tile meets the same per-point variances
    again; one memo per kernel computation (see :class:`netsor.interpret.infinite.Limit`) computes
    them once per point instead of once per tile. Safe to share between threads.
    """

    def __init__(self) -> None:
        self._tables: dict[tuple[Any, int], _MemoTable] = {}

    def table(self, act: Activation, order: int) -> _MemoTable:
        return self._tables.setdefault((act.key, order), _MemoTable(order))


class _MemoTable:
    """Columns ``α(var)`` (order+1,) and ``E φ²(var)`` stored contiguously, found by variance value
    (a sorted key array, so a lookup is one vectorised ``searchsorted``)."""

    def __init__(self, order: int) -> None:
        # (sorted variances, their columns in alpha / m2), replaced as one object so that a
        # reader on another thread never pairs new keys with old columns
        self.index: tuple[Array, Array] = (np.empty(0), np.empty(0, dtype=np.intp))
        self.alpha = np.empty((order + 1, 0))
        self.m2 = np.empty(0)
        self.lock = threading.Lock()

    def _find(self, var: Array) -> tuple[Array, Array]:
        keys, cols = self.index
        pos = np.minimum(np.searchsorted(keys, var), max(keys.size - 1, 0))
        found = keys[pos] == var if keys.size else np.zeros(var.shape, dtype=bool)
        return found, np.where(found, cols[pos] if keys.size else 0, -1)

    def lookup(self, act: Activation, var: Array, order: int) -> tuple[Array, Array]:
        found, cols = self._find(var)
        if not found.all():
            new = np.unique(var[~found])
            alpha, m2 = _hermite_coefficients(act, new, order)
            with self.lock:
                start = self.m2.size
                self.alpha = np.concatenate([self.alpha, alpha], axis=1)
                self.m2 = np.concatenate([self.m2, m2])
                keys = np.concatenate([self.index[0], new])
                cols = np.concatenate([self.index[1], start + np.arange(new.size)])
                order_ = np.argsort(keys, kind="stable")
                self.index = (keys[order_], cols[order_])
            found, cols = self._find(var)
        alpha, m2 = self.alpha, self.m2  # never shrink, so these hold every column found above
        return alpha[:, cols], m2[cols]


def _memo_hermite_coefficients(act: Activation, var: Array, order: int,
                               memo: CoefficientMemo | None) -> tuple[Array, Array]:
    """:func:`_hermite_coefficients`, looked up in / stored to ``memo`` when given."""
    if memo is None:
        return _hermite_coefficients(act, var, order)
    return memo.table(act, order).lookup(act, var, order)


class _HermiteTable:
    """Hermite coefficients of one activation at n distinct variances, with tail bounds."""

    def __init__(self, act: Activation, var: Array, order: int, memo: CoefficientMemo | None = None):
        self.order = order
        self.alpha, m2 = _memo_hermite_coefficients(act, var, order, memo)
        self.m2 = m2
        tail = m2 - np.cumsum(self.alpha * self.alpha, axis=0)
        self.tail = np.maximum(tail, 0.0) + _TAIL_FLOOR * m2
        #: orders whose coefficient is not zero for every variance (parity of odd/even φ)
        self.active = np.any(np.abs(self.alpha) > 1e-15 * np.sqrt(m2), axis=1)
        self._reach: dict[int, Array] = {}

    def reach(self, order: int) -> Array:
        """``g`` of shape (n,) such that order ``order`` meets SERIES_TOL when ``|ρ| ≤ g_φ g_ψ``."""
        if order not in self._reach:
            with np.errstate(divide="ignore", invalid="ignore"):
                g = (SERIES_TOL * self.m2 / self.tail[order]) ** (0.5 / (order + 1))
            self._reach[order] = np.where(self.tail[order] > 0, g, np.inf)
        return self._reach[order]


def _lift(x: Array, ndim: int) -> Array:
    return x.reshape((1,) * (ndim - x.ndim) + x.shape)


def _rows(x: Array, sl: slice) -> Array:
    return x[sl] if x.shape[0] > 1 else x


def _horner(alpha: Array, beta: Array, x: Array, active: Array, top: int, out: Array) -> None:
    """``out = Σ α_k β_k x^{(k − top mod 2)/2}`` over active ``k ≡ top (mod 2)``, ``k ≤ top``.

    When the coefficients are a column (rows, 1) times a row (1, cols) — the layout of a tile —
    each step adds the outer product with one BLAS rank-1 update (``dger``) instead of forming it.
    """
    outer = (alpha.ndim == 3 and alpha.shape[2] == 1 and beta.shape[1] == 1
             and out.ndim == 2 and out.flags.c_contiguous)
    np.multiply(alpha[top], beta[top], out=out)
    tmp = None if outer else np.empty(out.shape)
    for k in range(top - 2, -1, -2):
        np.multiply(out, x, out=out)
        if active[k]:
            if outer:
                # out.T is Fortran-ordered, so dger updates out in place: out += α_k β_kᵀ.
                _dger(1.0, beta[k, 0], alpha[k, :, 0], a=out.T, overwrite_a=True)
            else:
                np.multiply(alpha[k], beta[k], out=tmp)
                np.add(out, tmp, out=out)


def _mehler(ta: _HermiteTable, tb: _HermiteTable, ia: Array, ib: Array, sa: Array, sb: Array,
            c: Array, order: int, out: Array) -> Array:
    """Series of order ``order`` for every pair, blockwise; returns the pairs it does not meet.

    Parameters
    ----------
    ta, tb : _HermiteTable
        Tables of φ and ψ.
    ia, ib : int arrays, broadcastable to ``out.shape``
        Table columns of each pair's variances.
    sa, sb, c : arrays, broadcastable to ``out.shape`` (same ndim ≥ 1)
        Standard deviations and covariance (``ρ = c / (sa sb)``).
    out : array
        Receives the series values.

    Returns
    -------
    array of int
        Flat indices (into ``out``) of the pairs whose tail bound exceeds SERIES_TOL.
    """
    active = ta.active[:order + 1] & tb.active[:order + 1]
    # Highest active order of each parity: Σ_even α_k β_k ρ^k + ρ Σ_odd, each by Horner in ρ².
    tops = [max(k for k in range(p, order + 1, 2) if active[k])
            for p in (0, 1) if active[p:order + 1:2].any()]
    limit_a, limit_b = ta.reach(order)[ia] ** 2, tb.reach(order)[ib] ** 2
    inner = int(np.prod(out.shape[1:]))
    rows = max(1, min(_BLOCK, _GATHER // (order + 1)) // max(inner, 1))
    rejected = []
    for i in range(0, out.shape[0], rows):
        sl = slice(i, i + rows)
        blk = out[sl]
        rho = _rows(c, sl) / (_rows(sa, sl) * _rows(sb, sl))
        x = rho * rho
        alpha, beta = ta.alpha[:order + 1, _rows(ia, sl)], tb.alpha[:order + 1, _rows(ib, sl)]
        if not tops:
            blk[...] = 0.0
        part = np.empty(blk.shape) if len(tops) > 1 else None
        for n, top in enumerate(tops):
            dst = part if n else blk
            _horner(alpha, beta, x, active, top, dst)
            if top % 2:
                np.multiply(dst, rho, out=dst)
            if n:
                np.add(blk, part, out=blk)
        bad = x > _rows(limit_a, sl) * _rows(limit_b, sl)
        rejected.append(np.flatnonzero(bad) + i * inner)
    return np.concatenate(rejected)


def _colinear_pair(phi: Activation, psi: Activation, a: Array, b: Array, sign: Array) -> Array:
    """``E[φ(√a Z) ψ(±√b Z)]`` (ρ = ±1), shape (P,) for inputs of shape (P,)."""
    out = np.empty(a.size)
    for i in range(0, a.size, _PAIR_CHUNK * 16):
        sl = slice(i, i + _PAIR_CHUNK * 16)
        sa, sb, sg = np.sqrt(a[sl]), np.sqrt(b[sl]), sign[sl]
        # Uniform panels of width ≲ 4/√max(a, b) also resolve oscillating φ (sin, cos).
        width = min(2.0, 4.0 / max(float(np.max(sa)), float(np.max(sb))))
        grid = np.linspace(-Z_MAX, Z_MAX, int(np.ceil(2.0 * Z_MAX / width)) + 1)
        extra = [k / sa for k in phi.kinks] + [sg * k / sb for k in psi.kinks]
        extra = np.concatenate([np.stack(extra, axis=1) if extra else np.empty((sa.size, 0)),
                                np.broadcast_to(grid, (sa.size, grid.size))], axis=1)
        z, w = gaussian_rule(np.zeros(sa.size), np.ones(sa.size), (0.0,), extra_z=extra)
        out[sl] = np.sum(w * phi.fn(sa[:, None] * z) * psi.fn((sg * sb)[:, None] * z), axis=1)
    return out


def _nested_pair(phi: Activation, psi: Activation, a: Array, b: Array, c: Array) -> Array:
    """Exact nested panelled quadrature, shape (P,) for inputs of shape (P,) (~5·10⁴ nodes a pair)."""
    return np.concatenate([
        _nested_chunk(phi, psi, a[i:i + _PAIR_CHUNK], b[i:i + _PAIR_CHUNK], c[i:i + _PAIR_CHUNK])
        for i in range(0, a.size, _PAIR_CHUNK)
    ]) if a.size else np.empty(0)


def _nested_chunk(phi: Activation, psi: Activation, a: Array, b: Array, c: Array) -> Array:
    # u = √a z1, v = √b (ρ z1 + s z2): integrate z2 (inner, ψ's kinks) then z1 (outer, φ's kinks
    # and the places where ψ's kinks cross the z1 axis as s → 0).
    sa, sb = np.sqrt(a), np.sqrt(b)
    rho = np.clip(c / (sa * sb), -1.0, 1.0)
    s = np.sqrt(np.maximum(1.0 - rho * rho, 0.0))
    slope = sb * rho
    safe = np.where(np.abs(slope) > 0, slope, 1.0)
    extra = np.stack([np.where(np.abs(slope) > 0, k / safe, Z_MAX) for k in _features(psi)]
                     + [k / sa for k in phi.kinks], axis=1)
    z1, w1 = gaussian_rule(np.zeros(a.size), np.ones(a.size), (0.0,), extra_z=extra)
    P, Q1 = z1.shape
    loc = (slope[:, None] * z1).reshape(-1)
    scale = np.repeat(sb * s, Q1)
    x2, w2 = gaussian_rule(loc, scale, _features(psi))
    inner = np.sum(w2 * psi.fn(x2), axis=1).reshape(P, Q1)
    return np.sum(w1 * phi.fn(sa[:, None] * z1) * inner, axis=1)


def _same_activation(phi: Activation, psi: Activation) -> bool:
    return phi is psi or (phi.fn is psi.fn and phi.kinks == psi.kinks)


def _tables(phi: Activation, psi: Activation, va: Array, vb: Array, order: int,
            memo: CoefficientMemo | None) -> tuple[_HermiteTable, _HermiteTable]:
    ta = _HermiteTable(phi, va, order, memo)
    return ta, ta if _same_activation(phi, psi) and va is vb else _HermiteTable(psi, vb, order, memo)


def _series_pair(phi: Activation, psi: Activation, a: Array, b: Array, c: Array,
                 memo: CoefficientMemo | None = None) -> Array:
    """Mehler series with exact fallbacks, for broadcastable ``a, b, c`` (all variances > 0)."""
    shape = np.broadcast_shapes(a.shape, b.shape, c.shape)
    full = shape or (1,)
    a, b, c = (_lift(t, len(full)) for t in (a, b, c))
    if _same_activation(phi, psi):
        va, inv = np.unique(np.concatenate([a.ravel(), b.ravel()]), return_inverse=True)
        vb, ia, ib = va, inv[:a.size].reshape(a.shape), inv[a.size:].reshape(b.shape)
    else:
        va, ia = np.unique(a, return_inverse=True)
        vb, ib = np.unique(b, return_inverse=True)
        ia, ib = ia.reshape(a.shape), ib.reshape(b.shape)
    sa, sb = np.sqrt(a), np.sqrt(b)
    tables = {_SMALL_TABLE: _tables(phi, psi, va, vb, _SMALL_TABLE, memo)}

    # Order of the dense pass: minimise the estimated cost over a strided sample of pairs.
    size = int(np.prod(full))
    sub = np.unravel_index(np.linspace(0, size - 1, min(size, 4096)).astype(np.intp), full)
    ia_s, ib_s = np.broadcast_to(ia, full)[sub], np.broadcast_to(ib, full)[sub]
    rho_s = np.abs(np.broadcast_to(c, full)[sub]) / (
        np.broadcast_to(sa, full)[sub] * np.broadcast_to(sb, full)[sub])
    colinear_s = rho_s >= 1.0 - _COLINEAR
    beyond = rho_s > _orders_reach(tables[_SMALL_TABLE], _SMALL_TABLE, ia_s, ib_s)
    if np.mean(beyond & ~colinear_s) > 0.5:
        tables[_LARGE_TABLE] = _tables(phi, psi, va, vb, _LARGE_TABLE, memo)
    top = max(tables)
    orders = [k for k in _ORDERS if k <= top]
    need = np.full(rho_s.size, len(orders))
    for j in range(len(orders) - 1, -1, -1):
        ok = rho_s <= _orders_reach(tables[_table_for(orders[j], tables)], orders[j], ia_s, ib_s)
        need[ok] = j
    steps = np.array([k / 2.0 + 4.0 for k in orders])
    fallback = np.where(colinear_s, _COST_COLINEAR, _COST_NESTED)
    sparse = np.where(need < len(orders), _COST_SPARSE * steps[np.minimum(need, len(orders) - 1)],
                      fallback)
    costs = [steps[j] + np.mean(np.where(need > j, sparse, 0.0)) for j in range(len(orders))]
    order = orders[int(np.argmin(costs))]
    out = np.empty(full)
    rest = _mehler(*tables[_table_for(order, tables)], ia, ib, sa, sb, c, order, out)
    if rest.size:
        sub = np.unravel_index(rest, full)
        sa_r, sb_r = np.broadcast_to(sa, full)[sub], np.broadcast_to(sb, full)[sub]
        out.reshape(-1)[rest] = _sparse_pairs(
            phi, psi, va, vb, tables, np.broadcast_to(ia, full)[sub], np.broadcast_to(ib, full)[sub],
            np.broadcast_to(c, full)[sub] / (sa_r * sb_r), order, memo)
    return out.reshape(shape)


def _table_for(order: int, tables: dict[int, tuple[_HermiteTable, _HermiteTable]]) -> int:
    return min(k for k in tables if k >= order)


def _orders_reach(tabs: tuple[_HermiteTable, _HermiteTable], order: int, ia: Array, ib: Array) -> Array:
    return tabs[0].reach(order)[ia] * tabs[1].reach(order)[ib]


def _sparse_pairs(phi: Activation, psi: Activation, va: Array, vb: Array,
                  tables: dict[int, tuple[_HermiteTable, _HermiteTable]], ia: Array, ib: Array,
                  rho: Array, done: int, memo: CoefficientMemo | None = None) -> Array:
    """Pairs (flat, shape (m,)) left by a dense pass of order ``done``: higher orders, then exact rules."""
    rho = np.clip(rho, -1.0, 1.0)
    out = np.empty(rho.size)
    colinear = np.abs(rho) >= 1.0 - _COLINEAR
    small = tables[_SMALL_TABLE]
    if small[0] is small[1]:  # E φ(u)² on the diagonal is in the table already
        diagonal = colinear & (rho > 0) & (ia == ib)
        out[diagonal] = small[0].m2[ia[diagonal]]
        line = colinear & ~diagonal
    else:
        line = colinear
    if line.any():
        out[line] = _colinear_pair(phi, psi, va[ia[line]], vb[ib[line]], np.sign(rho[line]))
    todo = np.flatnonzero(~colinear)
    ones = np.ones(1)
    for size in sorted(set(tables) | {_LARGE_TABLE}):
        if not todo.size:
            return out
        if size in tables:
            tabs, ja, jb = tables[size], ia[todo], ib[todo]
        else:  # the large table, for the variances still needed only
            ua, ja = np.unique(ia[todo], return_inverse=True)
            ub, jb = np.unique(ib[todo], return_inverse=True)
            tabs = _tables(phi, psi, va[ua], vb[ub], size, memo)
        for order in (k for k in _ORDERS if done < k <= size):
            ok = np.abs(rho[todo]) <= _orders_reach(tabs, order, ja, jb)
            if ok.any():
                val = np.empty(int(ok.sum()))
                _mehler(*tabs, ja[ok], jb[ok], ones, ones, rho[todo[ok]], order, val)
                out[todo[ok]] = val
                todo, ja, jb = todo[~ok], ja[~ok], jb[~ok]
        done = size
    if todo.size:
        out[todo] = _nested_pair(phi, psi, va[ia[todo]], vb[ib[todo]],
                                 rho[todo] * np.sqrt(va[ia[todo]] * vb[ib[todo]]))
    return out
def _sqrt_psd(cov: Array) -> Array:
    """A matrix square root L with L Lᵀ = cov for a stack of PSD matrices (P, D, D)."""
    vals, vecs = np.linalg.eigh(cov)
    return vecs * np.sqrt(np.maximum(vals, 0.0))[:, None, :]


_GH_POINTS = {1: 64, 2: 40, 3: 20, 4: 12}
_QMC_LOG2_POINTS = 14
_QMC_REPLICATES = 8
#: Points (P·Q·D) evaluated at once by :func:`expectation`.
_EXPECTATION_CHUNK = 1 << 22


def expectation(fn: Callable[[Array], Array], cov: Array, seed: int = 0) -> tuple[Array, Array]:
    """``E fn(Z)``, ``Z ~ N(0, cov[p])`` for each p.

    Tensor Gauss–Hermite quadrature for D ≤ 4 (exact for polynomials of degree < 2·nodes);
    above, randomised QMC: ``_QMC_REPLICATES``
    independently scrambled Sobol' sets of ``2**_QMC_LOG2_POINTS`` points, the scrambles
    drawn from ``np.random.default_rng(seed)`` (deterministic for a seed).

    Parameters
    ----------
    fn : callable
        Maps points of shape (P', Q, D) to values of shape (P', Q) (called on chunks of P).
    cov : array, shape (P, D, D)
        Covariance matrices (PSD; singular allowed).
    seed : int
        Seed of the QMC scrambles (unused for D ≤ 4).

    Returns
    -------
    value, stderr : arrays, shape (P,)
        The estimate and its standard error (0 for deterministic quadrature,
        where the error is far below the other errors of the interpreter).
    """
    cov = np.asarray(cov, dtype=float)
    P, D = cov.shape[0], cov.shape[-1]
    L = _sqrt_psd(cov)
    if D in _GH_POINTS:
        t, w = np.polynomial.hermite_e.hermegauss(_GH_POINTS[D])
        w = w / w.sum()
        z = np.stack([g.reshape(-1) for g in np.meshgrid(*([t] * D), indexing="ij")], axis=1)
        weights = np.prod(np.stack(np.meshgrid(*([w] * D), indexing="ij")).reshape(D, -1), axis=0)
        return _apply_chunked(fn, L, z) @ weights, np.zeros(P)
    estimates = np.empty((_QMC_REPLICATES, P))
    for r, rng in enumerate(np.random.default_rng(seed).spawn(_QMC_REPLICATES)):
        u = stats.qmc.Sobol(d=D, scramble=True, seed=rng).random_base2(_QMC_LOG2_POINTS)
        z = special.ndtri(np.clip(u, 1e-16, 1 - 1e-16))
        estimates[r] = _apply_chunked(fn, L, z).mean(axis=1)
    return estimates.mean(axis=0), estimates.std(axis=0, ddof=1) / np.sqrt(_QMC_REPLICATES)


def _apply_chunked(fn: Callable[[Array], Array], L: Array, z: Array) -> Array:
    """``fn(L z)`` for factors L (P, D, D) and points z (Q, D), in chunks of P; shape (P, Q)."""
    P, (Q, D) = L.shape[0], z.shape
    step = max(1, _EXPECTATION_CHUNK // (Q * D))
    return np.concatenate([fn(np.einsum("pde,qe->pqd", L[i:i + step], z))
                           for i in range(0, P, step)]) if P else np.empty((0, Q))
