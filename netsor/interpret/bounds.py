"""Error bounds on a tile of the pair grid, in O(B) instead of O(B²).

Every quantity ``Q_ij`` of a tile is a second moment or a Gaussian expectation of a product,
so Cauchy–Schwarz gives it an *envelope* ``|Q_ij| ≤ l_i r_j`` from per-point quantities (the
square roots of the diagonal moments of its two sides). A :class:`Bound` is

    |error_ij| ≤ eta · l_i · r_j  +  dense_ij,

a scalar relative part — what closed forms, the Mehler series and rounding produce, and what
propagates through smooth activations with per-point gains — plus an optional dense part for
sensitivities that differ from pair to pair (jumps near colinear pairs). Combining bounds of
quantities with other envelopes rescales ``eta`` by the largest per-point ratios (an upper
bound); the dense part stays None unless some step needed it, so a chain of closed forms
tracks its errors at the cost of a few vector operations per tile.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from netsor.linalg import largest_ratio, symmetrized_upper

Array = np.ndarray
EPS = np.finfo(float).eps


@dataclass(frozen=True)
class Bound:
    """``|error_ij| ≤ eta · left_i · right_j + dense_ij`` (left (b1, 1), right (1, b2))."""

    eta: float
    left: Array
    right: Array
    dense: Array | None = None

    def array(self) -> Array:
        """The bound of every entry, shape (b1, b2) (inf everywhere for an infinite ``eta``: on an envelope of 0 it
        bounds nothing, and ``inf · 0`` would be NaN)."""
        if np.isinf(self.eta):
            return np.full(np.broadcast_shapes(np.shape(self.left), np.shape(self.right)), np.inf)
        out = self.eta * (self.left * self.right)
        return out if self.dense is None else out + self.dense

    def relative(self, left: Array, right: Array, ratio: float | None = None) -> float:
        """``eta'`` with ``eta · self.left ⊗ self.right ≤ eta' · left ⊗ right`` (the scalar part only);
        ``ratio``: :meth:`envelope_ratio` on ``(left, right)`` when the caller has it."""
        if self.eta == 0.0:
            return 0.0
        if np.isinf(self.eta):  # an error relative to an envelope of 0 (a second moment that underflowed): unbounded
            return np.inf
        return self.eta * (self.envelope_ratio(left, right) if ratio is None else ratio)

    def envelope_ratio(self, left: Array, right: Array) -> float:
        """``max self.left/left · max self.right/right``: this envelope measured on ``left ⊗ right``."""
        return largest_ratio(self.left, left) * largest_ratio(self.right, right)

    def largest(self) -> float:
        """The largest bound of an entry relative to its envelope (inf where not finite)."""
        return self.eta + (0.0 if self.dense is None else largest_ratio(self.dense, self.left * self.right))

    def to(self, left: Array, right: Array) -> Bound:
        """The same bound on the envelope ``left ⊗ right``."""
        return Bound(self.relative(left, right), left, right, self.dense)

    def scaled(self, c: float) -> Bound:
        return Bound(abs(c) * self.eta, self.left, self.right, None if self.dense is None else abs(c) * self.dense)

    def plus_rounding(self, units: float) -> Bound:
        """Add ``units · eps`` relative (the rounding of an operation on this quantity)."""
        return Bound(self.eta + units * EPS, self.left, self.right, self.dense)


def zero(left: Array, right: Array) -> Bound:
    return Bound(0.0, left, right)


def from_dense(err: Array, left: Array, right: Array, keep_dense: bool = False) -> Bound:
    """A dense bound on the envelope: as ``eta = max(err / envelope)``, or kept dense — also where
    that ratio is not finite (an error on a zero envelope, e.g. the mean of a monomial whose
    variance is 0 up to its bound: ``eta = inf`` would make ``eta · 0`` NaN downstream)."""
    if not keep_dense:
        eta = largest_ratio(err, left * right)
        if eta < np.inf:
            return Bound(eta, left, right)
    return Bound(0.0, left, right, np.broadcast_to(np.asarray(err, dtype=float), np.broadcast_shapes(
        np.shape(err), np.shape(left), np.shape(right))).copy())


def combination(parts: Sequence[tuple[float, Bound]], left: Array, right: Array, size: float = 1.0,
                ratios: Sequence[float] | None = None) -> Bound:
    """Bound of ``Σ coef · Q_k`` on the envelope ``left ⊗ right``, with the rounding of the sum
    (``len(parts)`` operations on values of relative size ``size``); ``ratios``: each part's
    :meth:`Bound.envelope_ratio` on ``(left, right)`` when the caller has them."""
    if ratios is None:
        ratios = [None] * len(parts)
    eta = sum(abs(c) * b.relative(left, right, r) for (c, b), r in zip(parts, ratios, strict=True))
    dense = [abs(c) * b.dense for c, b in parts if b.dense is not None]
    return Bound(eta + len(parts) * size * EPS, left, right, sum(dense) if dense else None)


def product(factors: Sequence[tuple[Array, Bound]], left: Array, right: Array) -> Bound:
    """Bound of ``Π_c v_c`` with ``|v_c| ≤`` its envelope, on ``left ⊗ right = Π_c`` envelopes:
    ``Σ_c e_c Π_{c' ≠ c} (|v_c'| + e_c')`` in relative terms, plus dense parts times the others'."""
    etas = [b.relative(b.left, b.right) for _, b in factors]
    eta = 0.0
    for k in range(len(etas)):
        term = etas[k]
        for j, e in enumerate(etas):
            if j != k:
                term *= 1.0 + e
        eta += term
    dense_terms = []
    for k, (_, b) in enumerate(factors):
        if b.dense is not None:
            others = 1.0
            for j, (v, bj) in enumerate(factors):
                if j != k:
                    others = others * (np.abs(v) + bj.array())
            dense_terms.append(b.dense * others)
    # the factors' envelopes multiply to the product's (independent groups); allow its rounding
    base = Bound(eta + 4 * len(factors) * EPS, left, right)
    return base if not dense_terms else Bound(base.eta, left, right, sum(dense_terms))


def compact(dense: Array, left: Array, right: Array, threshold: float) -> Bound:
    """A dense bound on the envelope ``left ⊗ right``, as the scalar ``eta = max(dense / envelope)``
    when that is at most ``threshold`` (pair-dependent sensitivities far below what is asked: later
    steps then combine in O(B) per tile), kept dense otherwise (e.g. a step kernel near colinear
    pairs, where the dense form is much tighter away from them)."""
    eta = largest_ratio(dense, left * right)
    if eta <= threshold:
        return Bound(eta, left, right)
    return Bound(0.0, left, right, np.asarray(dense, dtype=float))


def transposed(b: Bound) -> Bound:
    """The bound of the transposed quantity."""
    return Bound(b.eta, b.right.T, b.left.T, None if b.dense is None else b.dense.T)


class TiledBound:
    """The error bound of an (n1, n2) result held as one :class:`Bound` per tile, materialised
    only when asked for: its maximum, its largest ratio to a rank-one scale and its Frobenius
    norm cost O(B) per tile when the tiles carry no dense part.

    The bound of the result is ``coef · (tile bounds) + offset`` (a readout's ``σ²`` and the
    rounding of its ``bias²``); ``overrides`` replace the bounds of some entries (per-point
    values at pairs of identical inputs).
    """

    def __init__(self, shape: tuple[int, int]) -> None:
        self.shape = shape
        #: (rows, cols, bound, symmetric block): the bound of ``result[rows, cols]``
        self.tiles: list[tuple[slice, slice, Bound, bool]] = []
        self.overrides: tuple[Array, Array, Array] | None = None
        self.coef, self.offset = 1.0, 0.0

    def add(self, rows: slice, cols: slice, bound: Bound, symmetric: bool = False) -> None:
        """The bound of one block; ``symmetric``: the block's lower triangle is a copy of its upper one."""
        self.tiles.append((rows, cols, bound, symmetric))

    @property
    def has_dense(self) -> bool:
        """Some tile carries a dense part (pair-dependent sensitivities)."""
        return any(b.dense is not None for _, _, b, _ in self.tiles)

    def override(self, rows: Array, cols: Array, values: Array) -> None:
        self.overrides = (rows, cols, np.asarray(values, dtype=float))

    def affine(self, coef: float, offset: float) -> TiledBound:
        """The bound of ``coef · result + (a constant whose rounding is offset)``."""
        out = TiledBound(self.shape)
        out.tiles, out.overrides = self.tiles, self.overrides
        out.coef, out.offset = self.coef * abs(coef), self.offset * abs(coef) + offset
        return out

    def array(self) -> Array:
        """The bound of every entry, shape (n1, n2)."""
        out = np.empty(self.shape)
        for rows, cols, b, symmetric in self.tiles:
            block = b.array()
            if symmetric:
                block = symmetrized_upper(block)
            out[rows, cols] = block
        if self.overrides is not None:
            ii, jj, values = self.overrides
            out[ii, jj] = values
        out *= self.coef
        out += self.offset
        return out

    def max(self) -> float:
        """The largest entry of the bound (an upper bound of it when tiles carry dense parts)."""
        best = 0.0
        for _, _, b, _ in self.tiles:
            top = b.eta * float(np.max(b.left, initial=0.0)) * float(np.max(b.right, initial=0.0))
            best = max(best, top + (0.0 if b.dense is None else float(np.max(b.dense, initial=0.0))))
        if self.overrides is not None:
            best = max(best, float(np.max(self.overrides[2], initial=0.0)))
        return self.coef * best + self.offset

    def max_ratio(self, scale_left: Array, scale_right: Array) -> float:
        """Largest ``bound_ij / (scale_left_i scale_right_j)`` (an upper bound of it)."""
        scale_left, scale_right = np.ravel(scale_left), np.ravel(scale_right)
        best = 0.0
        for rows, cols, b, _ in self.tiles:
            sl, sr = scale_left[rows], scale_right[cols]
            ratio = b.eta * largest_ratio(b.left.ravel(), sl) * largest_ratio(b.right.ravel(), sr)
            if b.dense is not None:
                ratio += largest_ratio(b.dense, np.outer(sl, sr))
            best = max(best, ratio)
        if self.overrides is not None:
            ii, jj, values = self.overrides
            best = max(best, largest_ratio(values, scale_left[ii] * scale_right[jj]))
        if self.offset:
            best += self.offset * largest_ratio(np.ones(1), np.min(scale_left, initial=np.inf)
                                            * np.min(scale_right, initial=np.inf))
        return self.coef * best

    def frobenius(self) -> float:
        """An upper bound of the Frobenius norm of the bound."""
        total = 0.0
        for _, _, b, symmetric in self.tiles:
            norm = b.eta * float(np.linalg.norm(b.left)) * float(np.linalg.norm(b.right))
            if b.dense is not None:
                norm += float(np.linalg.norm(b.dense)) * (np.sqrt(2.0) if symmetric else 1.0)
            total += norm * norm
        if self.overrides is not None:
            total += float(np.sum(self.overrides[2] ** 2))
        n1, n2 = self.shape
        return self.coef * np.sqrt(total) + self.offset * np.sqrt(n1 * n2)
