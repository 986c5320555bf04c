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

Between two batches (:func:`batchnorm_cross_expectation`) each batch's norm takes its own Laplace
integral: a two-dimensional integral of the same closed-form kernels.

Errors of ``Σ`` are propagated to first order by central differences in each entry of ``Σ``
(times its bound), plus the second-order term from the same differences.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from netsor.activations import Activation
from netsor.errors import UnsupportedError
from netsor.gaussian.pairs import CoefficientMemo, mean, pair_expectation, second_moment

Array = np.ndarray

#: Share of the absolute tolerance given to each truncated tail of the integral.
TAIL_SHARE = 0.05
#: Finest trapezoid step in ``log s`` (the integrand has no singularity closer than ~π/2 to the axis).
MIN_STEP = 1.0 / 64
#: Width of the bulk of a cross-batch Laplace integrand in ``log s``, in decay lengths of its bounds
#: (the scale of its ``sinh`` map, :func:`_trapezoid`).
WIDTH = 1.0
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
    if k1 is None or k2 is None or k1 < 0 or k2 < 0:
        raise UnsupportedError("the exact BatchNorm expectation needs positively homogeneous activations of "
                               "degree ≥ 0")
    cov = np.asarray(cov, dtype=float)
    scale = _unit_scale(phi, psi)
    atol = 0.1 * rtol * scale
    return _propagated(lambda stack, noise, tol: _expectation(phi, psi, k1, k2, b, c, stack, noise, rtol, tol, scale,
                                                              memo), cov, d_cov, atol)


def batchnorm_cross_expectation(phi: Activation, psi: Activation, cov: Array, d_cov: Array | None = None, *,
                                rtol: float = 1e-10, memo: CoefficientMemo | None = None) -> tuple[Array, Array]:
    """``E[φ(u_b) ψ(v_c)]`` for all ``b, c`` for the BatchNorm outputs ``u`` of a batch ``g`` and ``v``
    of another batch ``g'`` of the same size, ``(g, g') ~ N(0, Σ)`` jointly — the kernel between
    two batches.

    With ``y, y'`` the coordinates of the centred batches in an orthonormal basis ``V`` of ``1^⊥``
    (``u_b = √B V_b·y/‖y‖``) and ``m₁ = k₁/2``, ``m₂ = k₂/2``::

        E[φ(u_b) ψ(v_c)] = B^{m₁+m₂} E[φ(V_b·y) ψ(V_c·y') ‖y‖^{−2m₁} ‖y'‖^{−2m₂}],

    and a Laplace integral per norm turns it into a two-dimensional integral in ``(log s₁, log s₂)``
    of closed-form pair kernels under the tilted covariance ``C_S = C (I + 2SC)⁻¹``,
    ``S = diag(s₁ I, s₂ I)``, weighted by ``det(I + 2SC)^{−1/2}`` (one dimension when a degree is 0:
    a step does not see its batch's scale). For each ``s₁`` one small symmetric eigenproblem
    diagonalises the ``s₂`` direction, so the grid costs a few flops per node and pair ``(b, c)``. The trapezoid rule
    converges geometrically (step halving estimates its error); the truncated tails are bounded
    by Cauchy–Schwarz, ``|F(t₁, t₂)| ≤ g₁(t₁) g₂(t₂)`` with each ``gᵢ`` bounded in closed form
    (``Var ≤ min(C_bb, 1/(4s))``, ``det(I + 4sC) ≥ Π 4sλ``).

    Parameters
    ----------
    phi, psi : Activation
        Positively homogeneous (``homogeneous`` set); else :class:`UnsupportedError`.
    cov : array, shape (P, 2B, 2B)
        ``Σ`` of ``(g, g')`` at P pairs of points (``g`` first); each batch's centred part must be
        non-zero.
    d_cov : array, shape (P, 2B, 2B), optional
        Entrywise error bounds of ``cov``, propagated into the returned bound.
    rtol, memo
        As for :func:`batchnorm_expectation`.

    Returns
    -------
    value, error : arrays, shape (P, B, B)
        Indexed by the example ``b`` of the first batch and ``c`` of the second.
    """
    k1, k2 = phi.homogeneous, psi.homogeneous
    if k1 is None or k2 is None or k1 < 0 or k2 < 0:
        raise UnsupportedError("the exact BatchNorm expectation needs positively homogeneous activations of "
                               "degree ≥ 0")
    cov = np.asarray(cov, dtype=float)
    if k1 == 0 and k2 == 0 and phi.kernel_modulus is not None and phi.key == psi.key:
        return _cross_scale_free(phi, psi, cov, d_cov, rtol, memo)
    scale = _unit_scale(phi, psi)
    atol = 0.1 * rtol * scale
    return _propagated(lambda stack, noise, tol: _cross(phi, psi, k1, k2, stack, noise, rtol, tol, memo),
                       cov, d_cov, atol)


def _cross_scale_free(phi: Activation, psi: Activation, cov: Array, d_cov: Array | None, rtol: float,
                      memo: CoefficientMemo | None) -> tuple[Array, Array]:
    """Degree-0 φ = ψ with a closed-form kernel and its modulus (step): BatchNorm does not change
    them (``φ(u_b) = φ(w_b)``), so the expectation is the kernel at the centred covariance, and
    Σ's errors (and the rounding of the centring) go through the kernel's modulus — exact near
    colinear pairs, where the kernel is not Lipschitz (an example in both batches)."""
    B = cov.shape[-1] // 2
    centre = np.kron(np.eye(2), np.eye(B) - 1.0 / B)
    centred = centre @ cov @ centre
    d_cov = np.zeros_like(cov) if d_cov is None else np.asarray(d_cov, dtype=float)
    noise = np.abs(centre) @ (d_cov + 4 * B * _EPS * np.abs(cov)) @ np.abs(centre)
    a, da = np.einsum("nii->ni", centred)[:, :B, None], np.einsum("nii->ni", noise)[:, :B, None]
    b, db = np.einsum("nii->ni", centred)[:, None, B:], np.einsum("nii->ni", noise)[:, None, B:]
    c, dc = centred[:, :B, B:], noise[:, :B, B:]
    a, b = np.maximum(a, 1e-300), np.maximum(b, 1e-300)
    value, err = pair_expectation(phi, psi, a, b, c, memo=memo, rtol=rtol)
    # the kernel evaluates c/√(ab) to a few eps: a change of c by that much, besides Σ's errors
    delta = dc + np.abs(c) * 0.5 * (da / a + db / b) + 8 * _EPS * np.sqrt(a * b)
    err = np.broadcast_to(err, value.shape) + phi.kernel_modulus(a, b, c, delta)
    flat = (a <= da) | (b <= db)  # a batch without spread within its bounds: only the range is known
    return np.where(flat, 0.0, value), np.where(flat, _range(phi, psi, B, 0.0), err)


def _unit_scale(phi: Activation, psi: Activation | None) -> float:
    """``√(E φ(z)² E ψ(z)²)``, ``z ~ N(0, 1)`` (``E ψ² = 1`` for no ψ): the scale of the results."""
    return math.sqrt(float(second_moment(phi, np.ones(1))[0][0])
                     * (1.0 if psi is None else float(second_moment(psi, np.ones(1))[0][0])))


def _range(phi: Activation, psi: Activation | None, B: int, m: float) -> float:
    """``(B−1)^m max|φ(±1)| max|ψ(±1)| ≥ |φ(u_b) ψ(u_c)|`` for homogeneous φ, ψ of total degree 2m
    (``|u_b| ≤ √(B−1)``): all that is known of a batch without spread within its bounds."""
    ones = np.array([-1.0, 1.0])
    size = float(np.max(np.abs(phi.fn(ones)))) * (1.0 if psi is None else float(np.max(np.abs(psi.fn(ones)))))
    return (B - 1) ** m * size


def _propagated(evaluate: Callable[[Array, Array, Array], tuple[Array, Array]], cov: Array,
                d_cov: Array | None, atol: float) -> tuple[Array, Array]:
    """``evaluate(Σ, its error bounds, absolute tolerances)`` (values and errors of shape (P, ...))
    for covariances (P, n, n), with the
    errors ``d_cov`` of Σ propagated by central differences in each entry (first order, plus the
    second-order term).

    A difference's evaluations enter the bound scaled by ``δ/t`` (the entry's error over the
    difference step, usually ≪ 1), so they are asked for ``atol · t/(2Kδ)`` only (K entries: their
    errors add up to at most ``atol``; capped at 10¹² atol)."""
    P, n = cov.shape[0], cov.shape[-1]
    if d_cov is None:
        return evaluate(cov, np.zeros_like(cov), np.full(P, atol))
    # Σ itself, then Σ ± t E_ij for every entry i ≤ j (symmetric perturbations), in one stack
    d_cov = np.asarray(d_cov, dtype=float)
    iu, ju = np.triu_indices(n)
    K = iu.size
    diag = np.sqrt(np.abs(np.einsum("pii->pi", cov)))
    delta = d_cov[:, iu, ju]  # (P, K)
    step = np.maximum(delta, FD_STEP * diag[:, iu] * diag[:, ju])
    unit = np.zeros((K, n, n))
    unit[np.arange(K), iu, ju] = 1.0
    unit[np.arange(K), ju, iu] = 1.0
    shift = step[:, :, None, None] * unit[None]  # (P, K, n, n)
    stack = np.concatenate([cov[:, None], cov[:, None] + shift, cov[:, None] - shift], axis=1)
    noise = np.concatenate([d_cov[:, None]] + 2 * [np.broadcast_to(d_cov[:, None], shift.shape)], axis=1)
    # an exact entry of a coordinate without variance (step 0: no shift, its evaluations are Σ itself) is
    # asked for atol like Σ, and its differences enter with δ = 0 (a tolerance 0 broke the integral's tails,
    # and 0/0 its slope: BatchNorm of a vector that is 0 at one input, random-program campaign seed 1001)
    exact = step == 0.0
    loose = atol * np.where(exact, 1.0, np.minimum(step / (2 * K * np.maximum(delta, 1e-300)), 1e12))  # (P, K)
    tolerances = np.concatenate([np.full((P, 1), atol), loose, loose], axis=1)
    values, errs = evaluate(stack.reshape(-1, n, n), noise.reshape(-1, n, n), tolerances.ravel())
    rest = values.shape[1:]
    values, errs = values.reshape(P, 1 + 2 * K, -1), errs.reshape(P, 1 + 2 * K, -1)
    v0, up, down = values[:, 0], values[:, 1:K + 1], values[:, K + 1:]
    step, delta = np.where(exact, 1.0, step)[:, :, None], delta[:, :, None]
    slope = np.abs(up - down) / (2 * step)
    curvature = np.abs(up + down - 2 * v0[:, None]) / step**2
    numeric = (errs[:, 1:K + 1] + errs[:, K + 1:] + 2 * errs[:, :1]) / step  # error of the differences
    propagated = np.sum((slope + numeric) * delta + 0.5 * curvature * delta**2, axis=1)
    v0, err0 = v0.reshape(P, *rest), (errs[:, 0] + propagated).reshape(P, *rest)
    return v0, err0


def _expectation(phi: Activation, psi: Activation | None, k1: float, k2: float, b: int, c: int, cov: Array,
                 d_cov: Array, rtol: float, atol: Array, scale: float,
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
        value[flat], err[flat] = 0.0, _range(phi, psi, B, m)
    return value, err


def _integral(phi: Activation, psi: Activation | None, k1: float, k2: float, m: float, qb: Array, qc: Array,
              lam: Array, kept: Array, rtol: float, atol: Array, scale: float,
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
    t_hi = float(np.max((high_log - np.log(tau)) * 2.0 / rank))
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
        if np.all(discretisation <= 0.5 * atol / factor) or step <= MIN_STEP:
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


def _cross(phi: Activation, psi: Activation, k1: float, k2: float, cov: Array, d_cov: Array, rtol: float,
           atol: Array, memo: CoefficientMemo | None) -> tuple[Array, Array]:
    """:func:`batchnorm_cross_expectation` and its numerical error, (N, B, B), for each of N joint
    covariances (N, 2B, 2B) (``d_cov``: their error bounds, to decide which directions are zero;
    ``atol``: the absolute tolerance of each)."""
    N, B = cov.shape[0], cov.shape[-1] // 2
    basis = _orthocomplement(B)
    both = np.zeros((2 * B, 2 * B - 2))  # the two batches' centred coordinates y, y'
    both[:B, :B - 1], both[B:, B - 1:] = basis, basis
    reduced = np.einsum("ia,nij,jb->nab", both, cov, both)
    lam, vecs = np.linalg.eigh(reduced)
    # directions within the perturbation bound of zero (Weyl) or rounding of Σ are dropped
    floor = 2 * B * np.max(np.abs(d_cov) + 16 * _EPS * np.abs(cov), axis=(1, 2))
    root = vecs * np.sqrt(np.where(lam > floor[:, None], lam, 0.0))[:, None, :]  # reduced ≈ root rootᵀ
    first, second = root[:, :B - 1], root[:, B - 1:]
    value, err = np.empty((N, B, B)), np.empty((N, B, B))
    for p in range(N):
        spreads = [np.linalg.eigvalsh(r @ r.T) for r in (first[p], second[p])]
        spreads = [s[s > floor[p]] for s in spreads]
        if not (spreads[0].size and spreads[1].size):
            # a batch without spread within the bounds: only the range |φ(u_b)| ≤ (B−1)^{k/2} max|φ(±1)| is known
            value[p], err[p] = 0.0, _range(phi, psi, B, 0.5 * (k1 + k2))
            continue
        value[p], err[p] = _cross_integral(phi, psi, k1, k2, first[p], second[p], basis @ first[p],
                                           basis @ second[p], spreads, rtol, float(atol[p]), memo)
    return value, err


class _Envelope:
    """A bound ``g(t) ≤ min(A e^{mt}, D e^{−ρt})`` of one batch's Cauchy–Schwarz factor
    ``g(t) = e^{mt} √E[φ(V_b·y)² e^{−2s‖y‖²}]`` (``s = e^t``) for every ``b``, from
    ``Var ≤ min(max_b C_bb, 1/(4s))`` and ``det(I + 4sC) ≥ Π 4sλᵢ``; for ``m = 0`` (no Laplace
    integral on its axis) the constant ``√E φ(V_b·y)²``."""

    def __init__(self, m: float, unit: float, var: float, spread: Array) -> None:
        self.m = m
        self.A = math.sqrt(unit) * var**m
        self.rho = spread.size / 4
        self.D = math.sqrt(unit) * 4.0 ** (-m - self.rho) * float(np.prod(spread ** -0.25))

    @property
    def crossing(self) -> float:
        """Where the two bounds of ``g`` cross (its bulk)."""
        return math.log(self.D / self.A) / (self.m + self.rho)

    def total(self) -> float:
        """``∫ g`` over the whole line (or the constant, for m = 0)."""
        if self.m == 0.0:
            return self.A
        return self.tails(self.crossing, self.crossing)

    def interval(self, tau: float) -> tuple[float, float, float, float]:
        """``(t_lo, t_hi)`` whose tails of ``g`` are each at most ``tau``, and the centre and width of
        the bulk of ``g`` (where its two bounds cross; their decay lengths ``1/m + 1/ρ``)."""
        lo = math.log(tau * self.m / self.A) / self.m
        hi = math.log(self.D / (tau * self.rho)) / self.rho
        return lo, max(hi, lo + 1.0), min(max(self.crossing, lo), hi), WIDTH * (1 / self.m + 1 / self.rho)

    def tails(self, lo: float, hi: float, *_: float) -> float:
        """``∫ g`` below ``lo`` and above ``hi`` (at the crossing from both sides: the whole line)."""
        return self.A * math.exp(self.m * lo) / self.m + self.D * math.exp(-self.rho * hi) / self.rho


def _cross_integral(phi: Activation, psi: Activation, k1: float, k2: float, first: Array, second: Array,
                    ends1: Array, ends2: Array, spreads: list[Array], rtol: float, atol: float,
                    memo: CoefficientMemo | None) -> tuple[Array, Array]:
    """``B^{m₁+m₂} E[φ(V_b·y) ψ(V_c·y') ‖y‖^{−2m₁} ‖y'‖^{−2m₂}]`` (B, B) for ``(y, y') = (first, second) z``,
    ``z ~ N(0, I)`` (``ends1 = V first``, rows ``V_bᵀ first``; likewise ``ends2``), and its numerical error."""
    m1, m2 = 0.5 * k1, 0.5 * k2
    B = ends1.shape[0]
    units = [float(second_moment(act, np.ones(1))[0][0]) for act in (phi, psi)]
    envelopes = [_Envelope(m1, units[0], float(np.max(np.sum(ends1 * ends1, axis=1))), spreads[0]),
                 _Envelope(m2, units[1], float(np.max(np.sum(ends2 * ends2, axis=1))), spreads[1])]
    factor = B ** (m1 + m2) / math.prod(math.gamma(m) for m in (m1, m2) if m > 0)
    budget = TAIL_SHARE * atol / factor
    intervals = [None if env.m == 0.0 else env.interval(budget / other.total())
                 for env, other in zip(envelopes, envelopes[::-1], strict=True)]
    # the s₁-dependence in the eigenbasis of first's Gram matrix, so that each s₁ is one small
    # symmetric eigenproblem in s₂ (no inverse of the ill-conditioned I + 2s₁A₁ at large s₁)
    alpha, W = np.linalg.eigh(first.T @ first)
    # the Gram matrices have exactly the batches' ranks: eigenvalues of their null spaces are rounding
    # (~eps), which s up to 1e16 would turn into O(1) tilts of directions the batch does not have
    nulls = (alpha.size - spreads[0].size, alpha.size - spreads[1].size)
    alpha[:nulls[0]] = 0.0
    alpha = np.maximum(alpha, 0.0)
    second_w = W.T @ (second.T @ second) @ W
    ends = (ends1 @ W, ends2 @ W)
    step = 0.5
    while True:
        axes = [_trapezoid(interval, step) for interval in intervals]
        F, F_err = _cross_integrand(phi, psi, k1, k2, axes, alpha, second_w, nulls[1], ends, rtol, memo)
        (_, w1, c1), (_, w2, c2) = axes
        fine = np.einsum("q,qrbc,r->bc", w1, F, w2)
        discretisation = np.abs(fine - np.einsum("q,qrbc,r->bc", c1, F[::2, ::2], c2))
        if np.all(discretisation <= 0.5 * atol / factor) or step <= MIN_STEP:
            break
        step /= 2
    tails = sum(env.tails(*interval) * other.total()
                for env, other, interval in zip(envelopes, envelopes[::-1], intervals, strict=True)
                if interval is not None)
    rounding = (w1.size + w2.size) * _EPS * np.einsum("q,qrbc,r->bc", w1, np.abs(F), w2)
    err = discretisation + tails + np.einsum("q,qrbc,r->bc", w1, F_err, w2) + rounding
    value = factor * fine
    return value, factor * err + 4 * _EPS * np.abs(value)


def _trapezoid(interval: tuple[float, float, float, float] | None, step: float) -> tuple[Array, Array, Array]:
    """Nodes ``t``, and weights at ``step`` and at ``2·step`` (on every other node) of the trapezoid
    rule in ``τ`` with ``t = centre + width·sinh τ`` over ``[t_lo, t_hi]`` (``interval``): the
    exponential tails of the integrand in ``t`` decay doubly exponentially in ``τ``, so a few
    dozen nodes cover what a uniform grid in ``t`` needs hundreds for. An axis without integral
    (``None``) is the single node ``s = 0`` (``t = −inf``) of weight 1."""
    if interval is None:
        return np.array([-np.inf]), np.ones(1), np.ones(1)
    lo, hi, centre, width = interval
    tau_lo, tau_hi = math.asinh((lo - centre) / width), math.asinh((hi - centre) / width)
    count = 2 * math.ceil((tau_hi - tau_lo) / (2 * step))
    tau = tau_lo + step * np.arange(count + 1)
    jacobian = width * np.cosh(tau)
    fine = np.full(tau.size, step)
    fine[[0, -1]] *= 0.5
    coarse = np.full(count // 2 + 1, 2 * step)
    coarse[[0, -1]] *= 0.5
    return centre + width * np.sinh(tau), fine * jacobian, coarse * jacobian[::2]


def _cross_integrand(phi: Activation, psi: Activation, k1: float, k2: float, axes: list[tuple[Array, Array, Array]],
                     alpha: Array, second_w: Array, null2: int, ends: tuple[Array, Array], rtol: float,
                     memo: CoefficientMemo | None) -> tuple[Array, Array]:
    """``F(t₁, t₂) = e^{m₁t₁ + m₂t₂} det(I + 2SC)^{−1/2} E_{C_S}[φ(V_b·y) ψ(V_c·y')]`` on the grid,
    (n₁, n₂, B, B), and the error of its inner expectation; in the eigenbasis of
    ``A₁ = firstᵀfirst`` (eigenvalues ``alpha``), ``second_w = Wᵀ A₂ W``, ``ends`` the forms'
    coefficients there (B, r) per batch; ``null2`` the dimension of ``A₂``'s null space."""
    (t1, _, _), (t2, _, _) = axes
    s1, s2 = np.exp(t1), np.exp(t2)  # exp(−inf) = 0: an axis without integral
    # I + 2S(LLᵀ) ~ I + 2 s₁ A₁ + 2 s₂ A₂ = R (I + 2 s₂ R⁻¹A₂R⁻ᵀ) Rᵀ with R = W diag(√(1 + 2 s₁ α))
    shrink = 1.0 / np.sqrt(1.0 + 2.0 * s1[:, None] * alpha[None, :])  # (n₁, r)
    mu, U = np.linalg.eigh(shrink[:, :, None] * second_w[None] * shrink[:, None, :])
    mu[:, :null2] = 0.0  # R⁻¹A₂R⁻ᵀ has A₂'s null space (rotated): its smallest eigenvalues are exactly 0
    mu = np.maximum(mu, 0.0)
    p1 = np.einsum("qki,qbk->qbi", U, ends[0][None] * shrink[:, None, :])  # (n₁, B, r)
    p2 = np.einsum("qki,qbk->qbi", U, ends[1][None] * shrink[:, None, :])
    damp = 1.0 / (1.0 + 2.0 * s2[None, :, None] * mu[:, None, :])  # (n₁, n₂, r)
    a = np.maximum(np.matmul(damp, np.swapaxes(p1 * p1, 1, 2)), 1e-300)  # (n₁, n₂, B)
    bb = np.maximum(np.matmul(damp, np.swapaxes(p2 * p2, 1, 2)), 1e-300)
    cc = np.matmul(p1[:, None] * damp[:, :, None, :], np.swapaxes(p2, 1, 2)[:, None])  # (n₁, n₂, B, B)
    log_det = (np.sum(np.log1p(2.0 * s1[:, None] * alpha[None, :]), axis=1)[:, None]
               + np.sum(np.log1p(2.0 * s2[None, :, None] * mu[:, None, :]), axis=2))
    rho = np.clip(cc / np.sqrt(a[..., :, None] * bb[..., None, :]), -1.0, 1.0)
    value, err = pair_expectation(phi, psi, np.ones_like(rho), np.ones_like(rho), rho, memo=memo, rtol=rtol)
    exponent = -0.5 * log_det
    if k1:
        exponent += 0.5 * k1 * t1[:, None]
    if k2:
        exponent += 0.5 * k2 * t2[None, :]
    weight = np.exp(exponent)[..., None, None] * (a ** (k1 / 2))[..., :, None] * (bb ** (k2 / 2))[..., None, :]
    return weight * value, weight * err
