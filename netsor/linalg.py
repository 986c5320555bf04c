"""Small dense linear algebra shared by the interpreters and the statistics: one PSD square root,
one PSD tolerance and check, exact symmetrisation of kernel tiles, the largest ratio of two
arrays (how error bounds are put on an envelope), exact linear dependence of coefficient rows."""

from __future__ import annotations

import functools
import math

import numpy as np

from netsor.errors import NumericalError

Array = np.ndarray

#: Relative tolerance on negative eigenvalues before a matrix is declared non-PSD.
PSD_TOLERANCE = 1e-9
#: Kernels larger than this are not eigen-checked for PSD (O(B³)); their diagonal still is.
PSD_CHECK_MAX = 5000


def largest_ratio(num: Array, den: Array) -> float:
    """``max(num / den)`` over entries with ``num > 0`` (inf where ``den = 0 < num``, or NaN); 0 if none."""
    if num is den and isinstance(num, np.ndarray) and num.dtype == float:
        # an envelope against itself (common): 1 where positive, inf at +inf (inf/inf) — one pass, no
        # division; NaN entries (ignored below) take the general path
        top = float(np.max(num, initial=0.0))
        if top == top:
            return np.inf if top == np.inf else (1.0 if top > 0.0 else 0.0)
    num, den = np.asarray(num, dtype=float), np.asarray(den, dtype=float)
    if not num.size:
        return 0.0
    if den.min() > 0.0:  # the usual case: one division, no masks
        top = float(np.max(num / den))
    else:
        with np.errstate(divide="ignore", invalid="ignore"):
            top = float(np.max(np.where(num > 0, num / den, 0.0)))
    return np.inf if top != top else max(top, 0.0)


def combination_of(basis: Array, v: Array) -> Array | None:
    """Coefficients ``x`` with ``basis @ x = v`` to rounding (every entry within 8 eps of the sizes of its
    terms), for ``basis`` (n, k) of independent columns; None where ``v`` is not in their span. For
    structural coefficients (forms over sources), where a combination is exact or absent."""
    if np.linalg.matrix_rank(basis) < basis.shape[1]:
        return None
    x, *_ = np.linalg.lstsq(basis, v, rcond=None)
    if np.any(np.abs(basis @ x - v) > 8 * np.finfo(float).eps * (np.abs(basis) @ np.abs(x) + np.abs(v))):
        return None
    return x


def symmetrized_upper(block: Array) -> Array:
    """A square block with its upper triangle copied onto the lower one (a new array): kernel tiles
    on the diagonal compute (or trust) only their upper triangle."""
    return mirror_upper(np.array(block, dtype=float))


def mirror_upper(A: Array, tile: int = 256) -> Array:
    """Copy the upper triangle of the square array ``A`` onto its lower one, in place, and return
    ``A``: tile by tile, so that each transposed read stays in cache (a whole-matrix ``A.T`` read
    of a 1000² kernel strides across memory, ~3× slower)."""
    n = A.shape[0]
    for r in range(0, n, tile):
        rows = slice(r, min(r + tile, n))
        diagonal = A[rows, rows]
        # a masked copy (6× faster than fancy indexing); it reads only the upper triangle, which it
        # never writes, so the overlap of source and destination is harmless
        np.copyto(diagonal, diagonal.T, where=_strictly_lower(diagonal.shape[0]))
        if r + tile < n:
            mirror_tile(A, rows, slice(r + tile, n), tile)
    return A


def mirror_tile(A: Array, rows: slice, cols: slice, tile: int = 256) -> None:
    """Copy the tile ``A[rows, cols]`` of the upper triangle of the square array ``A`` onto its mirror
    image ``A[cols, rows]`` (a tile on the diagonal: its upper triangle onto its lower one), in place,
    in cache-sized transposes: :func:`mirror_upper` one tile at a time (so that the worker thread that
    filled a tile of a kernel mirrors it while it is in cache)."""
    if rows == cols:
        mirror_upper(A[rows, rows], tile)
        return
    for r in range(rows.start, rows.stop, tile):
        for c in range(cols.start, cols.stop, tile):
            sub_rows, sub_cols = slice(r, min(r + tile, rows.stop)), slice(c, min(c + tile, cols.stop))
            A[sub_cols, sub_rows] = A[sub_rows, sub_cols].T


@functools.lru_cache(maxsize=8)
def _strictly_lower(n: int) -> Array:
    mask = np.tril(np.ones((n, n), dtype=bool), -1)
    mask.flags.writeable = False
    return mask


def psd_sqrt(cov: Array) -> Array:
    """The symmetric square root of a stack of PSD matrices (..., B, B) (singular allowed;
    eigenvalues below 0 from rounding are clipped).

    The symmetric root is continuous in ``cov``, so two executions that share the noise and
    have close covariances get close draws (what the coupling needs).
    """
    cov = np.asarray(cov, dtype=float)
    vals, vecs = np.linalg.eigh(0.5 * (cov + np.swapaxes(cov, -1, -2)))
    return np.matmul(vecs * np.sqrt(np.maximum(vals, 0.0))[..., None, :], np.swapaxes(vecs, -1, -2))


def ensure_psd(K: Array, clip: bool = True, tol: float = PSD_TOLERANCE, what: str = "kernel") -> Array:
    """Check that a symmetric matrix is PSD; clip eigenvalues in ``[−tol·λ_max, 0)`` if ``clip``.

    Raises :class:`NumericalError` when an eigenvalue is below ``−tol·λ_max``. Matrices larger
    than ``PSD_CHECK_MAX`` only get their diagonal checked.
    """
    diag = np.diag(K)
    scale = max(float(np.max(np.abs(diag))), np.finfo(float).tiny)
    if np.min(diag) < -tol * scale:
        raise NumericalError(f"{what} has a negative variance {np.min(diag):.3g}: not PSD")
    if K.shape[0] > PSD_CHECK_MAX:
        return K
    try:
        np.linalg.cholesky(K)
        return K
    except np.linalg.LinAlgError:
        pass
    vals, vecs = np.linalg.eigh(K)
    lmax = max(float(vals[-1]), np.finfo(float).tiny)
    if vals[0] < -tol * lmax:
        raise NumericalError(
            f"{what} is not PSD: smallest eigenvalue {vals[0]:.3g} vs largest {lmax:.3g} (tolerance "
            f"{tol:g}); an expectation was less accurate than its error bound says — please report it")
    if not clip or vals[0] >= 0:
        return K
    K = (vecs * np.maximum(vals, 0.0)) @ vecs.T
    return 0.5 * (K + K.T)


def colinear_rows(A: Array, B: Array, *, negative: bool = False) -> tuple[Array, Array, Array]:
    """Pairs of rows that are exactly positive multiples: ``B[j] = s·A[i]`` in real arithmetic for
    a real ``s > 0`` (any real ``s ≠ 0`` with ``negative``; rows flattened; zero rows and
    byte-identical rows excluded).

    Returns index arrays ``i, j`` and ``s`` (the correctly rounded ratio). Candidates share their
    rounded direction ``fl(row / row[k₀])`` (``k₀`` the first non-zero coordinate: equal for
    exactly colinear rows, as both are the rounding of one real number); each is then confirmed
    exactly by ``B[j]_m A[i]_k₀ = A[i]_m B[j]_k₀`` with error-free products. O(B·d) plus the
    candidates (none for generic data).
    """
    a, b = _flat(A), _flat(B)
    keys, valid = _direction_keys(a if B is A else np.vstack([a, b]), signed=not negative)
    # rows of equal keys have equal hashes; a collision only costs an exact check
    hashes = _row_hashes(keys.view(np.uint64))
    hash_a, hash_b = (hashes, hashes) if B is A else (hashes[:len(a)], hashes[len(a):])
    valid_a, valid_b = (valid, valid) if B is A else (valid[:len(a)], valid[len(a):])
    ii, jj = equal_key_pairs(hash_a, hash_b)
    # rows without a key (zero, non-finite) match nothing; byte-identical rows are not wanted
    keep = valid_a[ii] & valid_b[jj] & ~_same_rows(a, b, ii, jj, B is A)
    found: list[tuple[int, int, float]] = []
    for i, j in zip(ii[keep], jj[keep], strict=True):  # none for generic data
        if _exactly_proportional(a[i], b[j]):
            k0 = int(np.flatnonzero(a[i])[0])
            found.append((int(i), int(j), float(b[j, k0] / a[i, k0])))
    if not found:
        return np.empty(0, dtype=int), np.empty(0, dtype=int), np.empty(0)
    ii, jj, s = zip(*found, strict=True)
    return np.array(ii), np.array(jj), np.array(s)


def identical_rows(A: Array, B: Array) -> tuple[Array, Array]:
    """Index arrays ``(i, j)`` of all pairs of byte-identical rows ``A[i] == B[j]`` (rows flattened),
    ``i`` ascending, then ``j``: rows hashed, candidates of equal hashes compared, no loop."""
    a, b = _flat(A), _flat(B)
    hash_a = _row_hashes(_bits(a))
    ii, jj = equal_key_pairs(hash_a, hash_a if B is A else _row_hashes(_bits(b)))
    same = _same_rows(a, b, ii, jj, B is A)  # a hash collision only costs this check
    return ii[same], jj[same]


def _bits(rows: Array) -> Array:
    return np.ascontiguousarray(rows).view(np.uint64)


def _same_rows(a: Array, b: Array, ii: Array, jj: Array, one_set: bool) -> Array:
    """Whether ``a[i]`` and ``b[j]`` are byte-identical, for each pair ``(i, j)`` of ``(ii, jj)``."""
    bits_a = _bits(a)
    return np.all(bits_a[ii] == (bits_a if one_set else _bits(b))[jj], axis=1)


def _row_hashes(bits: Array) -> Array:
    """A 64-bit hash of each row of ``bits`` (uint64; equal rows, equal hashes)."""
    powers = np.cumprod(np.full(bits.shape[1], 0x9E3779B97F4A7C15, dtype=np.uint64))
    return (bits * powers).sum(axis=1, dtype=np.uint64)


def equal_key_pairs(keys_a: Array, keys_b: Array) -> tuple[Array, Array]:
    """Index arrays ``(i, j)`` of all pairs with ``keys_a[i] == keys_b[j]`` (1-D sortable keys), ``i``
    ascending, then ``j`` — one sort and two searches, no loop over pairs."""
    order = np.argsort(keys_b, kind="stable")
    ordered = keys_b[order]
    lo, hi = np.searchsorted(ordered, keys_a, "left"), np.searchsorted(ordered, keys_a, "right")
    counts = hi - lo
    ii = np.repeat(np.arange(len(keys_a)), counts)
    # the k-th pair of row i is the (lo_i + k)-th of the sorted keys: k = pair index − pairs before i
    jj = order[np.arange(ii.size) + np.repeat(lo - (np.cumsum(counts) - counts), counts)]
    return ii, jj


def _flat(A: Array) -> Array:
    A = np.asarray(A, dtype=float)
    return A.reshape(A.shape[0], math.prod(A.shape[1:]))


def _direction_keys(rows: Array, signed: bool = True) -> tuple[Array, Array]:
    """Per row the key ``[k₀, sign of row[k₀] (1 unless signed), fl(row / row[k₀])]`` (``+ 0.0``
    makes −0 and +0 one key), and whether the row has one (not zero, all finite)."""
    nonzero = rows != 0.0
    k0 = np.argmax(nonzero, axis=1)
    pivot = rows[np.arange(rows.shape[0]), k0]
    keys = np.empty((rows.shape[0], rows.shape[1] + 2))
    keys[:, 0], keys[:, 1] = k0, np.sign(pivot) if signed else 1.0
    with np.errstate(all="ignore"):
        np.divide(rows, np.where(pivot == 0.0, 1.0, pivot)[:, None], out=keys[:, 2:])
    keys[:, 2:] += 0.0
    return keys, nonzero.any(axis=1) & np.isfinite(rows).all(axis=1)


def _exactly_proportional(x: Array, y: Array) -> bool:
    """``y_m x_k = x_m y_k`` exactly for all m (``k`` the first non-zero of ``x``), by Dekker's
    error-free products; False where a product could over- or underflow (not decided)."""
    k = int(np.flatnonzero(x)[0])
    left, right = _two_product(y, np.full_like(y, x[k])), _two_product(x, np.full_like(x, y[k]))
    if left is None or right is None:
        return False
    return bool(np.array_equal(left[0], right[0]) and np.array_equal(left[1], right[1]))


_SPLIT = 134217729.0  # 2^27 + 1: Veltkamp's split of a double into two 26-bit halves
#: Factors within [2^-450, 2^450] keep every partial product of the split normal (exact).
_SAFE_RANGE = (2.0 ** -450, 2.0 ** 450)


def _two_product(a: Array, b: Array) -> tuple[Array, Array] | None:
    """``a·b = p + e`` exactly (``p = fl(a·b)``), or None when a non-zero factor is outside
    the range where the split is exact."""
    magnitudes = np.abs(np.concatenate([a, b]))
    nonzero = magnitudes[magnitudes > 0]
    if nonzero.size and (nonzero.min() < _SAFE_RANGE[0] or nonzero.max() > _SAFE_RANGE[1]):
        return None
    p = a * b
    a_hi = _SPLIT * a - (_SPLIT * a - a)
    b_hi = _SPLIT * b - (_SPLIT * b - b)
    a_lo, b_lo = a - a_hi, b - b_hi
    return p, ((a_hi * b_hi - p) + a_hi * b_lo + a_lo * b_hi) + a_lo * b_lo
