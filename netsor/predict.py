"""Inference with infinite-width kernels: GP regression and gradient-descent training of the
infinite network on the MSE loss (Neural Tangents' ``predict`` conventions).

Kernels are plain arrays (e.g. from :func:`netsor.kernel`): ``k_train_train`` (m, m),
``k_test_train`` (t, m), ``k_test_test`` (t, t); targets ``y_train`` (m,) or (m, k) — k outputs
share the kernel (the kernel is ``K ⊗ I_k``).

Jitter policy: nothing is added silently. :func:`gp` factorises ``k_train_train + noise·I``
(Cholesky); when that fails, or its reciprocal condition number (LAPACK ``pocon``) is below
``RCOND_MIN``, it raises :class:`~netsor.NumericalError` saying how much ``noise`` would make
the system well posed. :func:`gradient_descent_mse` works in the eigenbasis of the NTK; at
``t = None`` (t → ∞) it needs the NTK positive definite to the same tolerance, and at a finite
``t`` it needs the largest weight ``(1 − exp(−η λ t / m)) / λ`` times ``λ_max`` (the factor by which
rounding in the kernels is amplified) to stay below ``1 / RCOND_MIN``.

Scaling: kernels and targets are divided by powers of two near their largest entries (exact) before
any arithmetic, so entries anywhere in float64's range are fine; a result whose true value is beyond
float64's range (e.g. a mean of targets near 1e308 amplified by the kernel) raises
:class:`~netsor.NumericalError` rather than returning Inf or NaN. Inputs must be real: complex,
string, object and boolean arrays raise :class:`~netsor.InputError`.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np
from scipy import linalg

from netsor.errors import HyperParameterError, InputError, NumericalError
from netsor.validate import check_real, real_array

Array = np.ndarray
#: Smallest reciprocal condition number of a system solved without complaint.
RCOND_MIN = 1e-13


@dataclass(frozen=True)
class Prediction:
    """Test-set predictions: ``mean`` (t,) or (t, k); ``covariance`` (t, t) or None."""

    mean: Array
    covariance: Array | None


def _scale(*arrays: Array | None, at_least: float = 0.0) -> float:
    """A power of two ``c`` with ``c ≤ max(|entries|, at_least) < 2c`` (1 if that is 0): dividing by
    it is exact and brings every entry below 2 in absolute value."""
    top = max([float(np.max(np.abs(a), initial=0.0)) for a in arrays if a is not None] + [at_least])
    return 1.0 if top == 0.0 else math.ldexp(1.0, math.frexp(top)[1] - 1)


def _matrix(a: Any, name: str, shape: tuple[int | None, int | None]) -> Array:
    arr = real_array(a, name)
    if arr.ndim != 2 or any(s is not None and s != n for s, n in zip(shape, arr.shape, strict=True)):
        want = " × ".join("·" if s is None else str(s) for s in shape)
        raise InputError(f"{name} must have shape ({want}), got {arr.shape}")
    return arr


def _symmetric(arr: Array, name: str) -> Array:
    """``arr`` symmetrised, or InputError if it is not symmetric to rounding (relative 1e-10)."""
    unit = _scale(arr)
    a = arr / unit  # entries below 2: no overflow near float64's largest values
    if not np.allclose(a, a.T, rtol=1e-10, atol=1e-12 * np.max(np.abs(a), initial=0.0)):
        raise InputError(f"{name} must be symmetric (a kernel of one input set with itself)")
    return 0.5 * (a + a.T) * unit


def _inputs(k_train_train: Any, k_test_train: Any, y_train: Any, k_test_test: Any, kind: str = "k"
            ) -> tuple[Array, Array, Array, Array | None]:
    """The checked arrays; ``kind`` names the kernels in messages (``k`` or ``nngp``: ``k_train_train``)."""
    y = real_array(y_train, "y_train")
    if y.ndim not in (1, 2) or y.shape[0] == 0:
        raise InputError(f"y_train must have shape (m,) or (m, k) with m ≥ 1, got {y.shape}")
    if y.size == 0:
        raise InputError(f"y_train has no output columns (shape {y.shape}); pass at least one target per "
                         "training input, shape (m,) or (m, k) with k ≥ 1")
    m = y.shape[0]
    ktt = _matrix(k_train_train, f"{kind}_train_train", (None, None))
    if ktt.shape != (m, m):
        raise InputError(f"{kind}_train_train has shape {ktt.shape} but y_train has {m} rows: pass the kernel of "
                         f"the training inputs of y_train ({m} × {m})")
    kst = _matrix(k_test_train, f"{kind}_test_train", (None, m))
    kss = None if k_test_test is None else _symmetric(
        _matrix(k_test_test, f"{kind}_test_test", (kst.shape[0], kst.shape[0])), f"{kind}_test_test")
    return _symmetric(ktt, f"{kind}_train_train"), kst, y, kss


def _rescale(values: Array, scale: float, what: str, advice: str) -> Array:
    """``values · scale`` (a power of two: exact), or NumericalError if it leaves float64's range."""
    with np.errstate(over="ignore"):
        out = values * scale
    if not np.all(np.isfinite(out)):
        raise NumericalError(f"{what} exceeds float64's range (about 1.8e308); {advice}")
    return out


def _check_variances(cov: Array, magnitude: Array, tol: float, unit: float, what: str, kernels: str) -> None:
    """NumericalError if a diagonal entry of ``cov`` is negative by more than ``tol · magnitude``
    (its rounding error bound): the ``kernels`` are then not jointly positive semi-definite.
    ``cov`` and ``magnitude`` are in units of ``unit`` (used in the message)."""
    variances = np.diag(cov)
    bad = variances < -tol * magnitude
    if np.any(bad):
        j = int(np.argmax(bad))
        raise NumericalError(
            f"the {what} of test point {j} is {variances[j] * unit:.3g}, negative beyond rounding (relative "
            f"bound {tol:.1e}): {kernels} are not jointly positive semi-definite; compute them from one kernel "
            "on the test and training inputs")


def _cholesky(K: Array, noise: float, what: str, unit: float) -> tuple[tuple[Array, bool], float]:
    """Cholesky factor of ``K + noise·I`` and its reciprocal condition number, or NumericalError saying
    which noise makes it well posed. ``K`` and ``noise`` are in units of ``unit`` (used in messages)."""
    A = K + noise * np.eye(K.shape[0])
    try:
        factor = linalg.cho_factor(A, lower=True, check_finite=False)
    except linalg.LinAlgError:
        raise NumericalError(f"{what} + noise·I is not positive definite (noise = {noise * unit:g}); "
                             f"{_noise_advice(K, what, unit)}") from None
    rcond, info = linalg.lapack.dpocon(factor[0], np.linalg.norm(A, 1), uplo="L")
    if info != 0 or rcond < RCOND_MIN:
        raise NumericalError(f"{what} + noise·I is ill-conditioned (reciprocal condition number {rcond:.1e} < "
                             f"{RCOND_MIN:g}, noise = {noise * unit:g}): the solution would be dominated by "
                             f"rounding; {_noise_advice(K, what, unit)}")
    return factor, float(rcond)


def _noise_advice(K: Array, what: str, unit: float) -> str:
    """What noise makes ``K + noise·I`` well posed, from K's smallest eigenvalue (on failure only: O(m³));
    ``K`` is in units of ``unit``, the advice in the caller's units."""
    scale = max(float(np.max(np.abs(np.diag(K)), initial=0.0)), 1e-300)
    lowest = float(np.linalg.eigvalsh(K)[0])
    enough = f"{(1.001 * max(-lowest, 0.0) + 1e-10 * scale) * unit:.4g}"
    if lowest < -1e-8 * scale:  # beyond rounding: not a Gram matrix of any kernel
        return (f"{what} is not positive semi-definite (smallest eigenvalue {lowest * unit:.3g}, {-lowest / scale:.1e} "
                f"of its largest diagonal entry), as no kernel's Gram matrix is; check how it was computed, or pass "
                f"noise > {-lowest * unit:.3g}, e.g. noise={enough}")
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
    unit, y_unit = _scale(K, Ks, Kss, at_least=noise), _scale(y)
    K, Ks, y, noise = K / unit, Ks / unit, y / y_unit, noise / unit
    factor, rcond = _cholesky(K, noise, "k_train_train", unit)
    mean = _rescale(Ks @ linalg.cho_solve(factor, y, check_finite=False), y_unit, "the posterior mean",
                    "rescale y_train (the mean is linear in it)")
    if Kss is None:
        return Prediction(mean, None)
    Kss = Kss / unit
    half = linalg.solve_triangular(factor[0], Ks.T, lower=True, check_finite=False)
    explained = np.einsum("ij,ij->j", half, half)
    cov = Kss - half.T @ half
    # rounding of K_*x (K + noise·I)⁻¹ K_x*: relative m·ε·cond, plus the 1e-8 of "beyond rounding"
    _check_variances(cov, np.abs(np.diag(Kss)) + explained, 1e-8 + K.shape[0] * np.finfo(float).eps / rcond,
                     unit, "posterior variance", "k_test_test, k_test_train and k_train_train")
    return Prediction(mean, _rescale(0.5 * (cov + cov.T), unit, "the posterior covariance",
                                     "rescale the kernels"))


def _time(t: Any, what: str) -> float | int | None:
    """A training time ``>= 0``: None and ``+inf`` are the end of training (None); an integer is kept
    exact (10**400 is a valid time, beyond float64: the end of training to every digit)."""
    if t is None or (isinstance(t, (float, np.floating)) and t == np.inf):
        return None
    if isinstance(t, numbers.Integral) and not isinstance(t, bool):
        if t < 0:
            raise HyperParameterError(f"{what} must be >= 0, got the negative integer {str(t)[:20]}"
                                      f"{'…' if len(str(t)) > 20 else ''}")
        return int(t)
    return check_real(t, what, minimum=0.0)


def _to_float(x: Fraction) -> float:
    """An exact rational as the nearest float, inf beyond float64's range."""
    try:
        return float(x)
    except OverflowError:
        return math.inf


def _scaled_rate(eta: float, time: float | int | None, m: int, unit: float) -> float:
    """``η·t·unit/m`` (inf for ``time=None`` or beyond float64's range, where ``e^{−λ·rate}`` is 0 for
    every resolved λ > 0), correctly rounded: no intermediate product overflows or underflows."""
    return math.inf if time is None else _to_float(Fraction(eta) * Fraction(time) * Fraction(unit) / m)


def _weights(lam: Array, rate: float) -> Array:
    """``(1 − e^{−λ·rate}) / λ``, with its limit ``rate`` at λ = 0 and ``1/λ`` at ``rate = inf``."""
    positive = np.where(lam > 0, lam, 1.0)
    with np.errstate(over="ignore"):
        decayed = -np.expm1(-positive * rate)  # 1 where λ·rate overflows
    return np.where(lam > 0, decayed / positive, rate)


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
        (T, t, t), one slice per time: the eigendecomposition is shared. Integers are exact; a time
        with ``learning_rate·t/m`` beyond float64's range (e.g. ``10**400``) is the end of training,
        as ``None``. A time at which rounding would be amplified beyond ``1/RCOND_MIN`` (module
        docstring; ``None`` on a singular NTK) raises :class:`~netsor.NumericalError`.
    nngp_train_train, nngp_test_train, nngp_test_test : arrays, optional
        NNGP kernels (m, m), (t, m), (t, t) for the covariance.

    Returns
    -------
    Prediction
    """
    eta = check_real(learning_rate, "learning_rate", minimum=0.0, strict=True)
    curve = t is not None and np.ndim(t) == 1
    if curve:
        times: list[float | int | None] = [_time(x, "each t") for x in np.asarray(t, dtype=object)]
        if not times:
            raise InputError("t is an empty array; pass at least one training time (or t=None)")
    else:
        times = [_time(t, "t")]
    theta, theta_star, y, _ = _inputs(k_train_train, k_test_train, y_train, None)
    unit, y_unit = _scale(theta, theta_star), _scale(y)
    theta, theta_star, y_scaled = theta / unit, theta_star / unit, y / y_unit
    lam, V = np.linalg.eigh(theta)
    top = max(float(lam[-1]), np.finfo(float).tiny)
    if lam[0] < -1e-9 * top:
        raise NumericalError(f"k_train_train is not PSD (eigenvalue {lam[0] * unit:.3g} vs largest "
                             f"{top * unit:.3g}); pass an NTK")
    lam = np.maximum(lam, 0.0)
    rates = [_scaled_rate(eta, time, y.size, unit) for time in times]
    # Rounding in the kernels is amplified by λ_max · (largest weight), the weight of λ_min; at t → ∞
    # that is the condition number, held to the tolerance of gp's solves.
    amplification = top * float(_weights(lam[:1], max(rates))[0])
    if not amplification <= 1 / RCOND_MIN:
        longest = _to_float(Fraction(y.size) / (Fraction(RCOND_MIN) * Fraction(eta) * Fraction(top) * Fraction(unit)))
        raise NumericalError(
            f"the NTK on the training set is singular to working precision (λ_min/λ_max = {lam[0] / top:.1e}): "
            f"at {'t = None (t → ∞)' if None in times else 'the longest t given'} rounding would be amplified "
            f"{amplification:.1e}-fold (> 1/RCOND_MIN = {1 / RCOND_MIN:.0e}); pass a finite t below about "
            f"{longest:.3g}, or remove repeated training inputs")
    given = [a is not None for a in (nngp_train_train, nngp_test_train, nngp_test_test)]
    if any(given) and not all(given):
        raise InputError("the covariance needs all three NNGP kernels: nngp_train_train, nngp_test_train and "
                         "nngp_test_test")
    if all(given):
        K, Ks, _, Kss = _inputs(nngp_train_train, nngp_test_train, y, nngp_test_test, "nngp")
        if Ks.shape[0] != theta_star.shape[0]:
            raise InputError(f"nngp_test_train has {Ks.shape[0]} test rows, k_test_train {theta_star.shape[0]}")
        assert Kss is not None
        nngp_unit = _scale(K, Ks, Kss)
        K, Ks, Kss = K / nngp_unit, Ks / nngp_unit, Kss / nngp_unit
    projected = theta_star @ V  # (t, m)
    eps = np.finfo(float).eps
    means, covs = [], []
    for rate in rates:
        A = (projected * _weights(lam, rate)) @ V.T  # (t, m), dimensionless
        means.append(_rescale(A @ y_scaled, y_unit, "the predicted mean",
                              "rescale y_train (the mean is linear in it)"))
        if all(given):
            cross = A @ Ks.T
            cov = Kss + A @ K @ A.T - cross - cross.T
            # [I, −A] J [I, −A]ᵀ ≥ 0 for a PSD joint NNGP J: only rounding makes it negative
            absA = np.abs(A)
            magnitude = (np.abs(np.diag(Kss)) + np.einsum("ij,ij->i", absA @ np.abs(K), absA)
                         + 2 * np.einsum("ij,ij->i", absA, np.abs(Ks)))
            _check_variances(cov, magnitude, 1e-8 + 4 * K.shape[0] * eps, nngp_unit, "variance over "
                             "initialisations", "nngp_test_test, nngp_test_train and nngp_train_train")
            covs.append(_rescale(0.5 * (cov + cov.T), nngp_unit, "the covariance", "rescale the NNGP kernels"))
    if not curve:
        return Prediction(means[0], covs[0] if covs else None)
    return Prediction(np.stack(means), np.stack(covs) if covs else None)
