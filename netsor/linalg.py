"""Small dense linear algebra shared by the interpreters and the statistics: one PSD square root,
one PSD tolerance and check, exact symmetrisation of kernel tiles, the largest ratio of two
arrays (how error bounds are put on an envelope)."""

from __future__ import annotations

import numpy as np

from netsor.errors import NumericalError

Array = np.ndarray

#: Relative tolerance on negative eigenvalues before a matrix is declared non-PSD.
PSD_TOLERANCE = 1e-9
#: Kernels larger than this are not eigen-checked for PSD (O(B³)); their diagonal still is.
PSD_CHECK_MAX = 5000


def largest_ratio(num: Array, den: Array) -> float:
    """``max(num / den)`` over entries with ``num > 0`` (inf where ``den = 0 < num``, or NaN); 0 if none."""
    num, den = np.asarray(num, dtype=float), np.asarray(den, dtype=float)
    if not num.size:
        return 0.0
    if den.min() > 0.0:  # the usual case: one division, no masks
        top = float(np.max(num / den))
    else:
        with np.errstate(divide="ignore", invalid="ignore"):
            top = float(np.max(np.where(num > 0, num / den, 0.0)))
    return np.inf if top != top else max(top, 0.0)


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
        lower = np.tril_indices(diagonal.shape[0], -1)
        diagonal[lower] = diagonal.T[lower]
        for c in range(r + tile, n, tile):
            cols = slice(c, min(c + tile, n))
            A[cols, rows] = A[rows, cols].T
    return A


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
