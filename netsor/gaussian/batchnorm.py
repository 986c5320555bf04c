"""Exact expectations of homogeneous functions of BatchNorm outputs of a Gaussian batch.

For a batch ``g = (g₁, …, g_B) ~ N(0, Σ)`` the BatchNorm outputs are
``u_b = (g_b − ḡ) / s = √B w_b / ‖w‖`` with ``w = P g`` (``P = I − 11ᵀ/B``), so ``w ~ N(0, C)``,
``C = P Σ P``. For positively homogeneous φ, ψ of degrees ``k₁, k₂`` (``Activation.homogeneous``)
and ``m = (k₁ + k₂)/2``

    E[φ(u_b) ψ(u_c)] = B^m E[φ(w_b) ψ(w_c) ‖w‖^{−2m}].

For ``m = 0`` that is a pair expectation under ``N(0, C)``. For ``m > 0`` the Laplace identity
``‖w‖^{−2m} = Γ(m)⁻¹ ∫₀^∞ s^{m−1} e^{−s‖w‖²} ds`` and
``E[f(w) e^{−s‖w‖²}] = det(I + 2sC)^{−1/2} E_{N(0, C_s)}[f]`` with ``C_s = C (I + 2sC)⁻¹`` turn it
into a one-dimensional integral of closed-form pair kernels (:func:`netsor.gaussian.pairs.pair_expectation`
at the entries of ``C_s``; by homogeneity at unit variances and the correlation, so coefficient
memos are reused). ``C`` is eigen-decomposed once, in an orthonormal basis of ``1^⊥``. In
``t = log s`` the integrand is analytic in a strip and decays like ``e^{mt}`` (``t → −∞``) and
``e^{−rt/2}`` (``t → +∞``, ``r`` = rank of C), so the trapezoid rule converges geometrically:
its error is estimated by comparing steps ``h`` and ``2h``, and the truncated tails are bounded
analytically (``Var_s w_b ≤ min(C_bb, 1/(2s))``, ``det(I + 2sC) ≥ Π (2sλᵢ)``).

Errors of ``Σ`` are propagated to first order by central differences in each entry of ``Σ``
(times its bound), plus the second-order term from the same differences.
"""

from __future__ import annotations

import math

import numpy as np

from netsor.activations import Activation
from netsor.errors import UnsupportedError
from netsor.gaussian.pairs import CoefficientMemo, mean, pair_expectation, second_moment

Array = np.ndarray

#: Share of the absolute tolerance given to each truncated tail of the integral.
TAIL_SHARE = 0.05
#: Finest trapezoid step in ``log s`` (the integrand has no singularity closer than ~π/2 to the axis).
MIN_STEP = 1.0 / 64
#: Relative size (to √(Σ_ii Σ_jj)) of the central-difference steps in Σ for error propagation.
FD_STEP = 1e-4
_EPS = np.finfo(float).eps


def centred_covariance(cov: Array) -> Array:
    """``P Σ P`` with ``P = I − 11ᵀ/B`` for covariances ``cov`` of shape (..., B, B)."""
    B = cov.shape[-1]
    P = np.eye(B) - 1.0 / B
    return P @ cov @ P


def batchnorm_expectation(phi: Activation, psi: Activation | None, b: int, c: int, cov: Array,
                          d_cov: Array | None = None, *, rtol: float = 1e-10,
                          memo: CoefficientMemo | None = None) -> tuple[Array, Array]:
    """``E[φ(u_b) ψ(u_c)]`` (or ``E[φ(u_b)]`` when ``psi`` is None) for the BatchNorm outputs ``u``
    of a batch ``g ~ N(0, Σ)``.

    Parameters
    ----------
    phi, psi : Activation
        Positively homogeneous (``homogeneous`` set); else :class:`UnsupportedError`.
    b, c : int
        Indices in the batch (``0 ≤ b, c < B``).
    cov : array, shape (P, B, B)
        ``Σ`` at P points; its centred part ``PΣP`` must be non-zero (the caller checks).
    d_cov : array, shape (P, B, B), optional
        Entrywise error bounds of ``cov``, propagated into the returned bound.
    rtol : float
        Target of the numerical error relative to ``√(E φ(z)² E ψ(z)²)``, ``z ~ N(0, 1)``
        (the scale of the result: ``Σ_b u_b² = B``).
    memo : CoefficientMemo, optional

    Returns
    -------
    value, error : arrays, shape (P,)
    """
    k1, k2 = phi.homogeneous, (0.0 if psi is None else psi.homogeneous)
    if k1 is None or k2 is None:
        raise UnsupportedError("the exact BatchNorm expectation needs positively homogeneous activations")
    cov = np.asarray(cov, dtype=float)
    P, B = cov.shape[0], cov.shape[-1]
    scale = math.sqrt(float(second_moment(phi, np.ones(1))[0][0])
                      * (1.0 if psi is None else float(second_moment(psi, np.ones(1))[0][0])))
    atol = 0.1 * rtol * scale
    if d_cov is None:
        value, err = _expectation(phi, psi, k1, k2, b, c, cov, np.zeros_like(cov), rtol, atol, scale, memo)
        return value, err
    # Σ itself, then Σ ± t E_ij for every entry i ≤ j (symmetric perturbations), in one stack
    d_cov = np.asarray(d_cov, dtype=float)
    iu, ju = np.triu_indices(B)
    K = iu.size
    diag = np.sqrt(np.abs(np.einsum("pii->pi", cov)))
    delta = d_cov[:, iu, ju]  # (P, K)
    step = np.maximum(delta, FD_STEP * diag[:, iu] * diag[:, ju])
    unit = np.zeros((K, B, B))
    unit[np.arange(K), iu, ju] = 1.0
    unit[np.arange(K), ju, iu] = 1.0
    shift = step[:, :, None, None] * unit[None]  # (P, K, B, B)
    stack = np.concatenate([cov[:, None], cov[:, None] + shift, cov[:, None] - shift], axis=1)
    noise = np.concatenate([d_cov[:, None]] + 2 * [np.broadcast_to(d_cov[:, None], shift.shape)], axis=1)
    values, errs = _expectation(phi, psi, k1, k2, b, c, stack.reshape(-1, B, B), noise.reshape(-1, B, B),
                                rtol, atol, scale, memo)
    values, errs = values.reshape(P, 1 + 2 * K), errs.reshape(P, 1 + 2 * K)
    v0, up, down = values[:, 0], values[:, 1:K + 1], values[:, K + 1:]
    slope = np.abs(up - down) / (2 * step)
    curvature = np.abs(up + down - 2 * v0[:, None]) / step**2
    numeric = (errs[:, 1:K + 1] + errs[:, K + 1:] + 2 * errs[:, :1]) / step  # error of the differences
    propagated = np.sum((slope + numeric) * delta + 0.5 * curvature * delta**2, axis=1)
    return v0, errs[:, 0] + propagated


def _expectation(phi: Activation, psi: Activation | None, k1: float, k2: float, b: int, c: int, cov: Array,
                 d_cov: Array, rtol: float, atol: float, scale: float,
                 memo: CoefficientMemo | None) -> tuple[Array, Array]:
    """The expectation and its numerical error for each of N covariances (N, B, B) (``d_cov``:
    their error bounds, to decide which eigenvalues of the centred covariance are zero)."""
    B = cov.shape[-1]
    m = 0.5 * (k1 + k2)
    basis = _orthocomplement(B)  # (B, B−1): orthonormal basis of 1^⊥
    reduced = np.einsum("ia,nij,jb->nab", basis, cov, basis)
    lam, vecs = np.linalg.eigh(reduced)
    # eigenvalues within the perturbation bound of zero (Weyl) or rounding of Σ are zero: the batch spans less
    floor = B * np.max(np.abs(d_cov) + 16 * _EPS * np.abs(cov), axis=(1, 2))
    kept = lam > floor[:, None]
    # no spread left within the error bounds: only the range |φ(u_b) ψ(u_c)| ≤ (B−1)^m max|φ(±1)| max|ψ(±1)| is known
    flat = ~kept.any(axis=1)
    kept[flat], lam[flat] = True, 1.0
    lam = np.where(kept, lam, 0.0)
    qb = basis[b] @ vecs  # (N, B−1): coordinates of w_b in the eigenbasis
    qc = basis[c] @ vecs
    if m == 0.0:
        value, err = _inner(phi, psi, k1, k2, qb, qc, lam, rtol, memo)
    else:
        value, err = _integral(phi, psi, k1, k2, m, qb, qc, lam, kept, rtol, atol, scale, memo)
    if flat.any():
        ones = np.array([-1.0, 1.0])
        size = float(np.max(np.abs(phi.fn(ones)))) * (1.0 if psi is None else float(np.max(np.abs(psi.fn(ones)))))
        value[flat], err[flat] = 0.0, (B - 1) ** m * size
    return value, err


def _integral(phi: Activation, psi: Activation | None, k1: float, k2: float, m: float, qb: Array, qc: Array,
              lam: Array, kept: Array, rtol: float, atol: float, scale: float,
              memo: CoefficientMemo | None) -> tuple[Array, Array]:
    """``B^m E[φ(w_b) ψ(w_c) ‖w‖^{−2m}]`` for ``m > 0`` by the Laplace integral, and its numerical error."""
    N, B = qb.shape[0], qb.shape[1] + 1
    # ∫ F(t) dt, F(t) = s^m det(I + 2sC)^{−1/2} E_{C_s}[φψ] with s = e^t; then · B^m / Γ(m)
    factor = B**m / math.gamma(m)
    tau = TAIL_SHARE * atol / factor
    a0 = np.maximum(np.einsum("ni,ni,ni->n", qb, qb, lam), 1e-300)
    b0 = np.maximum(np.einsum("ni,ni,ni->n", qc, qc, lam), 1e-300) if psi is not None else np.ones(N)
    rank = kept.sum(axis=1)
    log_lam = np.sum(np.log(np.where(kept, lam, 1.0)), axis=1)
    # tails: ∫_{−∞}^{t_lo} ≤ S a0^{k1/2} b0^{k2/2} e^{m t_lo} / m,
    #        ∫_{t_hi}^∞ ≤ S 2^{−m−r/2} Πλ^{−1/2} (2/r) e^{−r t_hi/2}
    low_const = scale * a0 ** (k1 / 2) * b0 ** (k2 / 2) / m
    high_log = (math.log(scale) - (m + rank / 2) * math.log(2.0) - 0.5 * log_lam + np.log(2.0 / rank))
    t_lo = float(np.min(np.log(tau / low_const) / m))
    t_hi = float(np.max((high_log - math.log(tau)) * 2.0 / rank))
    step = 0.5
    while True:
        intervals = 2 * math.ceil((t_hi - t_lo) / (2 * step))
        t = t_lo + step * np.arange(intervals + 1)
        F, F_err = _integrand(phi, psi, k1, k2, m, qb, qc, lam, t, rtol, memo)
        weights = np.full(t.size, step)
        weights[[0, -1]] *= 0.5
        fine = F @ weights
        coarse_w = np.full((t.size + 1) // 2, 2 * step)
        coarse_w[[0, -1]] *= 0.5
        coarse = F[:, ::2] @ coarse_w
        discretisation = np.abs(fine - coarse)
        if np.max(discretisation) <= 0.5 * atol / factor or step <= MIN_STEP:
            break
        step /= 2
    tails = low_const * np.exp(m * t_lo) + np.exp(high_log - rank * t_hi / 2)
    rounding = (intervals + 1) * _EPS * (np.abs(F) @ weights)
    err = discretisation + tails + F_err @ weights + rounding
    value = factor * fine
    return value, factor * err + 4 * _EPS * np.abs(value)


def _integrand(phi: Activation, psi: Activation | None, k1: float, k2: float, m: float, qb: Array, qc: Array,
               lam: Array, t: Array, rtol: float, memo: CoefficientMemo | None) -> tuple[Array, Array]:
    """``F(t)`` on the grid ``t`` (G,) for each covariance (N, ...), and the error of its inner expectation."""
    s = np.exp(t)
    shrunk = lam[:, None, :] / (1.0 + 2.0 * s[None, :, None] * lam[:, None, :])  # eigenvalues of C_s
    log_weight = m * t[None, :] - 0.5 * np.sum(np.log1p(2.0 * s[None, :, None] * lam[:, None, :]), axis=2)
    value, err = _inner(phi, psi, k1, k2, qb[:, None, :], qc[:, None, :], shrunk, rtol, memo)
    weight = np.exp(log_weight)
    return weight * value, weight * err


def _inner(phi: Activation, psi: Activation | None, k1: float, k2: float, qb: Array, qc: Array, lam: Array,
           rtol: float, memo: CoefficientMemo | None) -> tuple[Array, Array]:
    """``E[φ(w_b) ψ(w_c)]`` (or ``E φ(w_b)``) for ``w ~ N(0, Q diag(lam) Qᵀ)`` given the eigen-coordinates
    ``qb, qc`` of rows b, c (…, r): by homogeneity, unit variances and the correlation."""
    a = np.einsum("...i,...i,...i->...", qb, qb, lam)
    if psi is None:
        unit, unit_err = mean(phi, np.ones(1), rtol)
        size = np.maximum(a, 0.0) ** (k1 / 2)
        return size * unit[0], size * unit_err[0]
    bb = np.einsum("...i,...i,...i->...", qc, qc, lam)
    cc = np.einsum("...i,...i,...i->...", qb, qc, lam)
    a, bb = np.maximum(a, 1e-300), np.maximum(bb, 1e-300)
    rho = np.clip(cc / np.sqrt(a * bb), -1.0, 1.0)
    value, err = pair_expectation(phi, psi, np.ones_like(rho), np.ones_like(rho), rho, memo=memo, rtol=rtol)
    size = a ** (k1 / 2) * bb ** (k2 / 2)
    return size * value, size * err


def _orthocomplement(B: int) -> Array:
    """An orthonormal basis (B, B−1) of the vectors orthogonal to ``1``."""
    q, _ = np.linalg.qr(np.column_stack([np.ones(B), np.eye(B)[:, :B - 1]]))
    return q[:, 1:]
