"""Inference with infinite-width kernels: GP regression and gradient-descent training of the
infinite network on the MSE loss (Neural Tangents' ``predict`` conventions).

Kernels are plain arrays (e.g. from :func:`netsor.kernel`): ``k_train_train`` (m, m),
``k_test_train`` (t, m), ``k_test_test`` (t, t); targets ``y_train`` (m,) or (m, k) — k outputs
share the kernel (the kernel is ``K ⊗ I_k``).

Jitter policy: nothing is added silently. :func:`gp` factorises ``k_train_train + noise·I``
(Cholesky); when that fails, or its reciprocal condition number (LAPACK ``pocon``) is below
``RCOND_MIN``, it raises :class:`~netsor.NumericalError` saying how much ``noise`` would make
the system well posed. :func:`gradient_descent_mse` works in the eigenbasis of the NTK; at
``t = None`` (t → ∞) it needs the NTK positive definite to the same tolerance.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import linalg

from netsor.errors import InputError, NumericalError
from netsor.validate import check_real

Array = np.ndarray
#: Smallest reciprocal condition number of a system solved without complaint.
RCOND_MIN = 1e-13


@dataclass(frozen=True)
class Prediction:
    """Test-set predictions: ``mean`` (t,) or (t, k); ``covariance`` (t, t) or None."""

    mean: Array
    covariance: Array | None


def _matrix(a: Any, name: str, shape: tuple[int | None, int | None]) -> Array:
    try:
        arr = np.asarray(a, dtype=float)
    except (TypeError, ValueError):
        raise InputError(f"{name} must be a numeric array, got {type(a).__name__}") from None
    if arr.ndim != 2 or any(s is not None and s != n for s, n in zip(shape, arr.shape, strict=True)):
        want = " × ".join("·" if s is None else str(s) for s in shape)
        raise InputError(f"{name} must have shape ({want}), got {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise InputError(f"{name} contains NaN or Inf; pass finite kernel values")
    return arr


def _inputs(k_train_train: Any, k_test_train: Any, y_train: Any, k_test_test: Any
            ) -> tuple[Array, Array, Array, Array | None]:
    y = np.asarray(y_train, dtype=float)
    if y.ndim not in (1, 2) or y.shape[0] == 0:
        raise InputError(f"y_train must have shape (m,) or (m, k) with m ≥ 1, got {y.shape}")
    if not np.all(np.isfinite(y)):
        raise InputError("y_train contains NaN or Inf")
    m = y.shape[0]
    ktt = _matrix(k_train_train, "k_train_train", (None, None))
    if ktt.shape != (m, m):
        raise InputError(f"k_train_train has shape {ktt.shape} but y_train has {m} rows: pass the kernel of the "
                         f"training inputs of y_train ({m} × {m})")
    if not np.allclose(ktt, ktt.T, rtol=1e-10, atol=1e-12 * np.max(np.abs(ktt), initial=0.0)):
        raise InputError("k_train_train must be symmetric (a kernel of one input set)")
    kst = _matrix(k_test_train, "k_test_train", (None, m))
    kss = None if k_test_test is None else _matrix(k_test_test, "k_test_test", (kst.shape[0], kst.shape[0]))
    return 0.5 * (ktt + ktt.T), kst, y, kss


def _cholesky(K: Array, noise: float, what: str) -> tuple[Array, bool]:
    """Cholesky factor of ``K + noise·I``, or NumericalError saying which noise makes it well posed."""
    A = K + noise * np.eye(K.shape[0])
    try:
        factor = linalg.cho_factor(A, lower=True, check_finite=False)
    except linalg.LinAlgError:
        raise NumericalError(f"{what} + noise·I is not positive definite (noise = {noise:g}); "
                             f"{_noise_advice(K, what)}") from None
    rcond, info = linalg.lapack.dpocon(factor[0], np.linalg.norm(A, 1), uplo="L")
    if info != 0 or rcond < RCOND_MIN:
        raise NumericalError(f"{what} + noise·I is ill-conditioned (reciprocal condition number {rcond:.1e} < "
                             f"{RCOND_MIN:g}, noise = {noise:g}): the solution would be dominated by rounding; "
                             f"{_noise_advice(K, what)}")
    return factor


def _noise_advice(K: Array, what: str) -> str:
    """What noise makes ``K + noise·I`` well posed, from K's smallest eigenvalue (on failure only: O(m³))."""
    scale = max(float(np.max(np.abs(np.diag(K)), initial=0.0)), 1e-300)
    lowest = float(np.linalg.eigvalsh(K)[0])
    enough = f"{1.001 * max(-lowest, 0.0) + 1e-10 * scale:.4g}"
    if lowest < -1e-8 * scale:  # beyond rounding: not a Gram matrix of any kernel
        return (f"{what} is not positive semi-definite (smallest eigenvalue {lowest:.3g}, {-lowest / scale:.1e} of "
                f"its largest diagonal entry), as no kernel's Gram matrix is; check how it was computed, or pass "
                f"noise > {-lowest:.3g}, e.g. noise={enough}")
    return f"pass noise > 0, e.g. noise={enough}, or remove repeated inputs"


def gp(k_train_train: Any, k_test_train: Any, y_train: Any, *, noise: float = 0.0,
       k_test_test: Any = None) -> Prediction:
    """Posterior of a GP with kernel ``k`` given ``y_train`` observed with Gaussian noise of variance
    ``noise``: mean ``K_*x (K_xx + noise·I)⁻¹ y`` and, with ``k_test_test``, covariance
    ``K_** − K_*x (K_xx + noise·I)⁻¹ K_x*`` (of the noiseless test outputs).

    Parameters
    ----------
    k_train_train : array (m, m)
    k_test_train : array (t, m)
    y_train : array (m,) or (m, k)
    noise : float, keyword-only
        Observation-noise variance added to the diagonal (≥ 0). No other jitter is added.
    k_test_test : array (t, t), optional

    Returns
    -------
    Prediction
        ``.mean`` (t,) or (t, k); ``.covariance`` (t, t) or None.
    """
    noise = check_real(noise, "noise", minimum=0.0)
    K, Ks, y, Kss = _inputs(k_train_train, k_test_train, y_train, k_test_test)
    factor = _cholesky(K, noise, "k_train_train")
    mean = Ks @ linalg.cho_solve(factor, y, check_finite=False)
    if Kss is None:
        return Prediction(mean, None)
    half = linalg.solve_triangular(factor[0], Ks.T, lower=True, check_finite=False)
    cov = Kss - half.T @ half
    return Prediction(mean, 0.5 * (cov + cov.T))


def _time(t: Any, what: str) -> float | None:
    """A training time ``>= 0``; None and ``+inf`` are the end of training (None)."""
    if t is None or (isinstance(t, (float, np.floating)) and t == np.inf):
        return None
    return check_real(t, what, minimum=0.0)


def gradient_descent_mse(k_train_train: Any, y_train: Any, k_test_train: Any, *, learning_rate: float = 1.0,
                         t: float | Any | None = None, nngp_train_train: Any = None, nngp_test_train: Any = None,
                         nngp_test_test: Any = None) -> Prediction:
    """Test outputs of the infinite-width network trained by gradient flow on the MSE loss.

    Neural Tangents' conventions (``predict.gradient_descent_mse`` and
    ``gradient_descent_mse_ensemble``): loss ``‖f − y‖² / (2·y_train.size)``, time ``t`` in units
    of the learning rate, outputs at initialisation of mean 0. With the NTK ``Θ = V diag(λ) Vᵀ``
    on the training set and ``Λ_t = diag((1 − exp(−η λ t / m)) / λ)`` (``m = y_train.size``;
    ``1/λ`` at ``t = None``, i.e. t → ∞):

    ``mean = Θ_*x V Λ_t Vᵀ y``.

    With the NNGP kernels (all three) also the covariance over random initialisations:
    ``K_** + A K_xx Aᵀ − (A K_x* + K_*x Aᵀ)`` with ``A = Θ_*x V Λ_t Vᵀ``.

    Parameters
    ----------
    k_train_train : array (m, m)
        NTK on the training inputs.
    y_train : array (m,) or (m, k)
    k_test_train : array (t, m)
        NTK between test and training inputs.
    learning_rate : float, keyword-only
    t : float, 1-D array of floats, or None, keyword-only
        Training time (None or ``inf``: the end of training). An array of times (a training curve, as Neural
        Tangents' ``predict_fn(t=ts)``) gives ``mean`` of shape (T, t[, k]) and ``covariance``
        (T, t, t), one slice per time: the eigendecomposition is shared.
    nngp_train_train, nngp_test_train, nngp_test_test : arrays, optional
        NNGP kernels (m, m), (t, m), (t, t) for the covariance.

    Returns
    -------
    Prediction
    """
    eta = check_real(learning_rate, "learning_rate", minimum=0.0, strict=True)
    curve = t is not None and np.ndim(t) == 1
    if curve:
        times: list[float | None] = [_time(x, "each t") for x in np.asarray(t, dtype=object)]
        if not times:
            raise InputError("t is an empty array; pass at least one training time (or t=None)")
    else:
        times = [_time(t, "t")]
    theta, theta_star, y, _ = _inputs(k_train_train, k_test_train, y_train, None)
    lam, V = np.linalg.eigh(theta)
    top = max(float(lam[-1]), np.finfo(float).tiny)
    if lam[0] < -1e-9 * top:
        raise NumericalError(f"k_train_train is not PSD (eigenvalue {lam[0]:.3g} vs largest {top:.3g}); pass an NTK")
    lam = np.maximum(lam, 0.0)
    if None in times and lam[0] < RCOND_MIN * top:
        raise NumericalError(f"the NTK on the training set is singular to working precision (λ_min/λ_max = "
                             f"{lam[0] / top:.1e}); pass a finite t, or remove repeated training inputs")
    given = [a is not None for a in (nngp_train_train, nngp_test_train, nngp_test_test)]
    if any(given) and not all(given):
        raise InputError("the covariance needs all three NNGP kernels: nngp_train_train, nngp_test_train and "
                         "nngp_test_test")
    if all(given):
        K, Ks, _, Kss = _inputs(nngp_train_train, nngp_test_train, y, nngp_test_test)
        if Ks.shape[0] != theta_star.shape[0]:
            raise InputError(f"nngp_test_train has {Ks.shape[0]} test rows, k_test_train {theta_star.shape[0]}")
        assert Kss is not None
    means, covs = [], []
    for time in times:
        if time is None:
            weights = 1.0 / lam
        else:
            rate = eta * time / y.size
            # (1 − e^{−λ r}) / λ, with its limit r at λ = 0
            weights = np.where(lam > 0, -np.expm1(-lam * rate) / np.where(lam > 0, lam, 1.0), rate)
        A = theta_star @ (V * weights) @ V.T  # (t, m)
        means.append(A @ y)
        if all(given):
            cross = A @ Ks.T
            cov = Kss + A @ K @ A.T - cross - cross.T
            covs.append(0.5 * (cov + cov.T))
    if not curve:
        return Prediction(means[0], covs[0] if covs else None)
    return Prediction(np.stack(means), np.stack(covs) if covs else None)
