"""Distances between a finite-width output law and its Gaussian-process limit.

Conventions
-----------
A finite network's outputs on ``B`` inputs form a vector ``y ∈ R^D`` (``D = B·R``
for ``R`` readouts). The limit is ``N(0, K)`` with ``K`` of shape ``(D, D)``.
Samples of ``y`` from ``S`` independent networks are an array ``Y`` of shape
``(S, D)``. Given its last hidden layer a network's output is exactly
``N(0, K̂_s)``; ``S`` such conditional kernels form ``Khat`` of shape
``(S, D, D)``, and the finite law is the mixture ``E_s N(0, K̂_s)``. Estimators
that integrate the Gaussian part out analytically ("Rao–Blackwellised", ``rb_*``)
take ``Khat``; the others take ``Y``.

Sliced distances average a 1-D distance over unit directions ``θ`` (an array
``(num, D)`` from :func:`random_directions`). Reuse the same directions at every
width: they are then common random numbers and cancel out of width-to-width
comparisons.

Noise floors and debiasing
--------------------------
A distance estimated from ``S`` samples is biased upwards: even a sample *of the
limit* is at distance ``≈ c / sqrt(S)`` from it. The **noise floor** of an
estimator is its expected value on a sample of the limit of the same size
(:func:`noise_floor` computes it by Monte Carlo from a sampler of the limit, e.g.
:func:`gaussian_samples`). For the Rao–Blackwellised W1 the analogue is zero —
``S`` copies of ``K`` are *exactly* the limit — so its floor is defined from its
own sampling noise instead: the per-``t`` error of the mixture CDF has standard
deviation ``s(t) = sd_s Φ(t/σ_s) / sqrt(S)``, and the floor is
``sqrt(2/π) ∫ s(t) dt``, the value of the estimator if the true mixture were at
distance 0 from the limit with the same noise level (``E|N(0, s²)| = sqrt(2/π) s``).
It is computed from the same ``Khat`` (``with_floor=True``).

:func:`debias` removes a floor. Default ``rule="quadrature"``:
``sqrt(max(d² − f², 0))`` — signal and noise add in quadrature, which is exact
for the squared L2 norm of a signal plus independent centred noise and is the
better approximation for W1 too (``tests/test_distances.py`` measures both rules
on a scale mixture with known W1; subtracting, ``d − f``, under-estimates badly
when the signal is comparable to the floor). Its known weakness: when the signal
``d`` dominates, the true bias of ``d`` vanishes fast while the rule still removes
``≈ f²/(2d)``, a slight over-correction (the tests allow for exactly that term). The MMD² U-statistics are unbiased
and need no debiasing; their floor is 0 and their noise is the replicate spread.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import ot
from scipy import special, stats

from netsor.errors import HyperParameterError, InputError, NumericalError
from netsor.validate import Seed, check_choice, check_count, check_real, generator, real_array, seed_sequence

Array = np.ndarray

#: Rules of :func:`debias`, and the exponent ``κ`` of each (``debias = max(q, 0)^κ``).
DEBIAS_RULES = ("quadrature", "subtract")
DEBIAS_EXPONENT = {"quadrature": 0.5, "subtract": 1.0}
#: Largest sample size accepted by :func:`w2_pot` (its cost matrix is ``n × m``).
W2_POT_MAX_SAMPLES = 5000

_SQRT_2_OVER_PI = float(np.sqrt(2.0 / np.pi))
_CHUNK_ELEMENTS = 1 << 22  # elements of the largest temporary array built per chunk


# --------------------------------------------------------------------------- validation


def _samples(y: Any, name: str, *, min_samples: int = 1) -> Array:
    """Samples as ``(S, D)``; a 1-D array is ``S`` scalar samples (``D = 1``)."""
    arr = real_array(y, name, min_ndim=1)
    if arr.ndim == 1:
        arr = arr[:, None]
    if arr.ndim != 2:
        raise InputError(f"{name} must have shape (S, D), got {arr.shape}.")
    if arr.shape[0] < min_samples:
        raise InputError(f"{name} needs at least {min_samples} samples, got {arr.shape[0]}.")
    return arr


def _kernel(k: Any, name: str) -> Array:
    """A symmetric ``(D, D)`` matrix."""
    arr = real_array(k, name, ndim=2)
    if arr.shape[0] != arr.shape[1]:
        raise InputError(f"{name} must be square (D, D), got {arr.shape}.")
    if not np.allclose(arr, arr.T, rtol=1e-10, atol=1e-12 * max(1.0, np.abs(arr).max(initial=0))):
        raise InputError(f"{name} must be symmetric; symmetrise it with (K + K.T) / 2.")
    return arr


def _kernels(khat: Any, dim: int) -> Array:
    """Conditional kernels as ``(S, D, D)``."""
    arr = real_array(khat, "Khat", ndim=3)
    if arr.shape[1:] != (dim, dim):
        raise InputError(f"Khat must have shape (S, {dim}, {dim}) to match K, got {arr.shape}.")
    return arr


def _directions(directions: Any, dim: int) -> Array:
    arr = real_array(directions, "directions", ndim=2)
    if arr.shape[1] != dim or arr.shape[0] < 1:
        raise InputError(
            f"directions must have shape (num, {dim}) to match the data, got {arr.shape}."
        )
    return arr


def _psd_sqrt(k: Array, name: str) -> Array:
    """Symmetric square root of a PSD matrix; small negative eigenvalues are clipped."""
    w, v = np.linalg.eigh(k)
    tol = 1e-8 * max(1.0, float(np.abs(w).max(initial=0.0)))
    if w.min(initial=0.0) < -tol:
        raise NumericalError(
            f"{name} is not positive semi-definite (smallest eigenvalue {w.min():.3g}); "
            "check how it was computed."
        )
    return (v * np.sqrt(np.clip(w, 0.0, None))) @ v.T


def _projected_scales(k: Array, directions: Array) -> Array:
    """``sqrt(θᵀ K θ)`` for every direction; ``k`` is ``(..., D, D)``, result ``(num, ...)``."""
    var = np.einsum("nd,...de,ne->n...", directions, k, directions)
    tol = 1e-12 * max(1.0, float(np.abs(var).max(initial=0.0)))
    if var.min(initial=0.0) < -tol:
        raise NumericalError("a kernel has a negative projected variance; it is not PSD.")
    return np.sqrt(np.clip(var, 0.0, None))


def _float_or_array(x: Array) -> float | Array:
    return float(x) if np.ndim(x) == 0 else x


# --------------------------------------------------------------------------- 1-D W1


def w1_1d(x: Any, y: Any) -> float | Array:
    """Exact Wasserstein-1 distance between two empirical 1-D samples.

    Parameters
    ----------
    x : array, shape ``(..., n)``
        Samples along the last axis; leading axes are batch axes.
    y : array, shape ``(..., m)``
        Samples; leading axes broadcast against those of ``x``. ``m`` may differ from ``n``.

    Returns
    -------
    float or array of the broadcast batch shape
        ``∫_0^1 |Q_x(u) − Q_y(u)| du`` with ``Q`` the empirical quantile functions
        (exact: both are constant between the breakpoints ``i/n`` and ``j/m``).
    """
    xs = np.sort(real_array(x, "x", min_ndim=1), axis=-1)
    ys = np.sort(real_array(y, "y", min_ndim=1), axis=-1)
    n, m = xs.shape[-1], ys.shape[-1]
    if n == 0 or m == 0:
        raise InputError("w1_1d needs at least one sample on each side.")
    if n == m:
        return _float_or_array(np.mean(np.abs(xs - ys), axis=-1))
    # Breakpoints i/n and j/m, as integers over the common denominator n·m.
    breaks = np.union1d(np.arange(n + 1) * m, np.arange(m + 1) * n)
    left = breaks[:-1]
    du = np.diff(breaks) / (n * m)
    gap = np.abs(xs[..., left // m] - ys[..., left // n])
    return _float_or_array(gap @ du)


def _gauss_cdf_antiderivative(t: Array, sigma: Array) -> Array:
    """``∫_{-∞}^t Φ(s/σ) ds = t Φ(t/σ) + σ φ(t/σ)``."""
    z = t / sigma
    return t * special.ndtr(z) + sigma * stats.norm.pdf(z)


def w1_to_gaussian(x: Any, sigma: Any) -> float | Array:
    """Exact Wasserstein-1 distance between an empirical 1-D sample and ``N(0, σ²)``.

    ``∫ |F_n(t) − Φ(t/σ)| dt`` in closed form: on each gap between order statistics
    ``F_n`` is constant and the integral of ``|c − Φ|`` splits at ``σ Φ⁻¹(c)``.

    Parameters
    ----------
    x : array, shape ``(..., n)``
        Samples along the last axis.
    sigma : float or array broadcastable to ``x.shape[:-1]``
        Standard deviation(s) of the Gaussian, ``> 0``.

    Returns
    -------
    float or array of shape ``x.shape[:-1]``
    """
    xs = np.sort(real_array(x, "x", min_ndim=1), axis=-1)
    sig = real_array(sigma, "sigma")
    if np.any(sig <= 0):
        raise HyperParameterError(
            "sigma must be > 0; a zero projected variance means a degenerate limit direction."
        )
    n = xs.shape[-1]
    if n == 0:
        raise InputError("w1_to_gaussian needs at least one sample.")
    s = np.broadcast_to(sig, xs.shape[:-1])[..., None]
    lo, hi = xs[..., :1], xs[..., -1:]
    tails = _gauss_cdf_antiderivative(lo, s) + (
        s * stats.norm.pdf(hi / s) - hi * special.ndtr(-hi / s)
    )
    a, b = xs[..., :-1], xs[..., 1:]
    c = np.arange(1, n) / n
    t = np.clip(s * special.ndtri(c), a, b)
    g_a, g_t, g_b = (_gauss_cdf_antiderivative(v, s) for v in (a, t, b))
    inner = c * (t - a) - (g_t - g_a) + (g_b - g_t) - c * (b - t)
    return _float_or_array(tails[..., 0] + inner.sum(axis=-1))


# --------------------------------------------------------------------------- scale mixtures


def _abs_integral(d: Array, h: Array) -> Array:
    """``∫ |d(u)| du`` on a uniform grid (last axis, odd length, step ``h``).

    Simpson's rule on pairs of intervals where ``d`` keeps its sign, trapezoid with the
    linearly interpolated root on pairs where it changes sign (the kink of ``|d|``).
    """
    a = np.abs(d)
    d0, d1, d2 = d[..., 0:-2:2], d[..., 1:-1:2], d[..., 2::2]
    a0, a1, a2 = a[..., 0:-2:2], a[..., 1:-1:2], a[..., 2::2]
    simpson = (a0 + 4.0 * a1 + a2) / 3.0

    def trapezoid(da: Array, db: Array, aa: Array, ab: Array) -> Array:
        with np.errstate(invalid="ignore", divide="ignore"):
            crossed = (da * da + db * db) / (2.0 * (aa + ab))
        return np.where(da * db < 0, crossed, 0.5 * (aa + ab))

    crossing = (d0 * d1 < 0) | (d1 * d2 < 0)
    pairs = trapezoid(d0, d1, a0, a1) + trapezoid(d1, d2, a1, a2)
    return h * np.where(crossing, pairs, simpson).sum(axis=-1)


def w1_scale_mixture_to_gaussian(
    scales: Any,
    sigma: Any,
    *,
    with_floor: bool = False,
    num_grid: int = 513,
    upper: float = 9.0,
) -> float | Array | tuple[float | Array, float | Array]:
    """W1 between the scale mixture ``(1/S) Σ_s N(0, σ_s²)`` and ``N(0, σ²)``.

    ``∫ |F(t) − Φ(t/σ)| dt`` with ``F(t) = mean_s Φ(t/σ_s)``, by quadrature on
    ``t ∈ [0, upper·max(σ, max σ_s)]`` (both laws are symmetric, so the integral over
    ``R`` is twice that) with ``num_grid`` points: Simpson's rule where the difference
    keeps its sign, the trapezoid rule with the interpolated root where it changes sign
    (the kink of the absolute value). Measured relative quadrature error at the default
    grid: ``1e-8`` without sign changes, up to a few ``1e-5`` with them (far below sampling
    noise; ``tests/test_distances.py`` checks both bounds).

    Parameters
    ----------
    scales : array, shape ``(..., S)``
        Mixture standard deviations ``σ_s ≥ 0`` along the last axis.
    sigma : float or array broadcastable to ``scales.shape[:-1]``
        Standard deviation of the Gaussian, ``> 0``.
    with_floor : bool
        Also return the noise floor ``sqrt(2/π) ∫ sd_s Φ(t/σ_s) / sqrt(S) dt`` (see the
        module docstring); needs ``S ≥ 2``.
    num_grid : int
        Odd number of quadrature points on the half line.
    upper : float
        Truncation point in units of the largest standard deviation.

    Returns
    -------
    w1 : float or array of shape ``scales.shape[:-1]``
    floor : same, only if ``with_floor``
    """
    sc = real_array(scales, "scales", min_ndim=1)
    sig = real_array(sigma, "sigma")
    if np.any(sc < 0) or np.any(sig <= 0):
        raise HyperParameterError(
            "scales must be >= 0 and sigma > 0 (they are standard deviations)."
        )
    num_grid = check_count(num_grid, "num_grid", minimum=3)
    if num_grid % 2 == 0:
        raise HyperParameterError(f"num_grid must be odd and >= 3, got {num_grid}.")
    upper = check_real(upper, "upper", minimum=0.0, strict=True)
    num = sc.shape[-1]
    if num < (2 if with_floor else 1):
        raise InputError(f"need at least {2 if with_floor else 1} mixture components, got {num}.")
    batch = np.broadcast_shapes(sc.shape[:-1], sig.shape)
    sig = np.broadcast_to(sig, batch).reshape(-1)
    # Ratios σ_s / σ; work in u = t / σ. Zero scales become tiny (a point mass at 0).
    ratio = np.broadcast_to(sc, batch + (num,)).reshape(-1, num) / sig[:, None]
    ratio = np.maximum(ratio, 1e-300)
    top = upper * np.maximum(1.0, ratio.max(axis=-1))
    step = top / (num_grid - 1)
    w1 = np.empty(len(sig))
    floor = np.empty(len(sig))
    cols = max(1, min(num, _CHUNK_ELEMENTS // num_grid))
    rows = max(1, _CHUNK_ELEMENTS // (num_grid * cols))
    for start in range(0, len(sig), rows):
        blk = slice(start, start + rows)
        u = step[blk, None] * np.arange(num_grid)
        base = special.ndtr(u)[:, None, :]
        # Per-component CDF minus the Gaussian CDF: small numbers, so the moments from
        # running sums lose nothing to cancellation.
        total = np.zeros_like(u)
        total_sq = np.zeros_like(u)
        for c0 in range(0, num, cols):
            diff = special.ndtr(u[:, None, :] / ratio[blk, c0 : c0 + cols, None]) - base
            total += diff.sum(axis=1)
            total_sq += (diff * diff).sum(axis=1)
        w1[blk] = 2.0 * sig[blk] * _abs_integral(total / num, step[blk])
        if with_floor:
            var = np.maximum(total_sq - total * total / num, 0.0) / (num - 1)
            noise = np.sqrt(var / num)
            floor[blk] = 2.0 * sig[blk] * _SQRT_2_OVER_PI * _abs_integral(noise, step[blk])
    w1_out = _float_or_array(w1.reshape(batch))
    return (w1_out, _float_or_array(floor.reshape(batch))) if with_floor else w1_out


# --------------------------------------------------------------------------- sliced W1


def random_directions(dim: int, num: int, *, seed: Seed = 0) -> Array:
    """``num`` directions uniform on the unit sphere of ``R^dim``, shape ``(num, dim)``.

    Draw them once and reuse them at every width (common random numbers). ``seed``
    follows the project's seed policy (:mod:`netsor.validate`).
    """
    dim, num = check_count(dim, "dim"), check_count(num, "num")
    g = generator(seed).standard_normal((num, dim))
    return g / np.linalg.norm(g, axis=1, keepdims=True)


def _mean_or_all(values: Array, per_direction: bool) -> float | Array:
    return values if per_direction else float(values.mean())


def sliced_w1(Y1: Any, Y2: Any, directions: Any, *, per_direction: bool = False) -> float | Array:
    """Sliced W1 between two samples: mean over ``θ`` of ``W1(θᵀY1, θᵀY2)`` (exact 1-D W1).

    Parameters
    ----------
    Y1 : array, shape ``(S1, D)``
    Y2 : array, shape ``(S2, D)``
    directions : array, shape ``(num, D)``
        Unit vectors, e.g. from :func:`random_directions`.
    per_direction : bool
        Return the ``(num,)`` per-direction distances instead of their mean.
    """
    y1, y2 = _samples(Y1, "Y1"), _samples(Y2, "Y2")
    if y1.shape[1] != y2.shape[1]:
        raise InputError(f"Y1 and Y2 have different dimensions ({y1.shape[1]}, {y2.shape[1]}).")
    th = _directions(directions, y1.shape[1])
    return _mean_or_all(np.asarray(w1_1d(th @ y1.T, th @ y2.T)), per_direction)


def sliced_w1_to_gaussian(
    Y: Any, K: Any, directions: Any, *, per_direction: bool = False
) -> float | Array:
    """Sliced W1 between a sample and ``N(0, K)``: mean over ``θ`` of the exact
    ``W1(θᵀY, N(0, θᵀKθ))`` (:func:`w1_to_gaussian`).

    Parameters
    ----------
    Y : array, shape ``(S, D)``
    K : array, shape ``(D, D)``
        Limit covariance.
    directions : array, shape ``(num, D)``
    per_direction : bool
        Return the ``(num,)`` per-direction distances instead of their mean.
    """
    k = _kernel(K, "K")
    y = _samples(Y, "Y")
    if y.shape[1] != k.shape[0]:
        raise InputError(f"Y has dimension {y.shape[1]} but K is {k.shape}.")
    th = _directions(directions, k.shape[0])
    return _mean_or_all(
        np.asarray(w1_to_gaussian(th @ y.T, _projected_scales(k, th))), per_direction
    )


def rb_sliced_w1(
    Khat: Any,
    K: Any,
    directions: Any,
    *,
    with_floor: bool = False,
    per_direction: bool = False,
    num_grid: int = 513,
) -> float | Array | tuple[float | Array, float | Array]:
    """Rao–Blackwellised sliced W1 between ``(1/S) Σ_s N(0, K̂_s)`` and ``N(0, K)``.

    For each direction the projected finite law is the scale mixture with CDF
    ``mean_s Φ(t / sqrt(θᵀK̂_sθ))``; its W1 to ``N(0, θᵀKθ)`` is computed by quadrature
    (:func:`w1_scale_mixture_to_gaussian`). Needs no output samples and has far less
    noise than :func:`sliced_w1_to_gaussian` on the same number of networks.

    Parameters
    ----------
    Khat : array, shape ``(S, D, D)``
        Conditional output kernels of ``S`` independent networks.
    K : array, shape ``(D, D)``
        Limit kernel.
    directions : array, shape ``(num, D)``
    with_floor : bool
        Also return the estimator's noise floor (module docstring), from the same ``Khat``.
    per_direction : bool
        Return ``(num,)`` arrays instead of means over directions.
    num_grid : int
        Quadrature points per direction.

    Returns
    -------
    distance : float or ``(num,)`` array
    floor : same, only if ``with_floor``
    """
    k = _kernel(K, "K")
    kh = _kernels(Khat, k.shape[0])
    th = _directions(directions, k.shape[0])
    scales = _projected_scales(kh, th)  # (num, S)
    out = w1_scale_mixture_to_gaussian(
        scales, _projected_scales(k, th), with_floor=with_floor, num_grid=num_grid
    )
    if with_floor:
        return _mean_or_all(np.asarray(out[0]), per_direction), _mean_or_all(
            np.asarray(out[1]), per_direction
        )
    return _mean_or_all(np.asarray(out), per_direction)


# --------------------------------------------------------------------------- MMD


def median_bandwidth(K: Any) -> float:
    """Median-heuristic RBF bandwidth for ``N(0, K)``: ``ℓ = sqrt(median ‖X − X'‖²)``.

    ``X, X'`` are independent ``N(0, K)``, so ``‖X − X'‖² = Σ_i 2λ_i χ²_1`` (``λ`` the
    eigenvalues of ``K``); its median is taken from the moment-matched scaled ``χ²_ν``
    (Satterthwaite), exact when the eigenvalues are equal, deterministic always.

    Parameters
    ----------
    K : array, shape ``(D, D)``
    """
    lam = np.clip(np.linalg.eigvalsh(_kernel(K, "K")), 0.0, None)
    if lam.sum() <= 0:
        raise NumericalError("K is zero: no bandwidth can be derived; pass bandwidth explicitly.")
    nu = lam.sum() ** 2 / (lam**2).sum()
    scale = 2.0 * (lam**2).sum() / lam.sum()
    return float(np.sqrt(scale * stats.chi2.ppf(0.5, nu)))


def _rbf_sum(x: Array, y: Array, ell: float) -> float:
    """``Σ_{i,j} exp(−‖x_i − y_j‖² / (2ℓ²))``, in blocks of rows of ``x``.

    From the differences divided by ``ℓ`` (not the Gram expansion ``‖x‖² + ‖y‖² − 2xᵀy``, whose
    rounding ``≈ ε‖x‖²`` swamps small bandwidths): equal points give exactly 1, and a scaled
    distance beyond float64's range gives exactly 0, so every ``ℓ > 0`` gets its correct value
    (``ℓ → 0``: the count of equal pairs; ``ℓ → ∞``: the count of all pairs).
    """
    rows = max(1, _CHUNK_ELEMENTS // max(1, len(y) * x.shape[1]))
    total = 0.0
    with np.errstate(over="ignore"):
        for start in range(0, len(x), rows):
            z = (x[start : start + rows, None, :] - y[None, :, :]) / ell
            total += float(np.exp(-0.5 * np.einsum("ijk,ijk->ij", z, z)).sum())
    return total


def mmd2_unbiased(Y1: Any, Y2: Any, *, bandwidth: float) -> float:
    """Unbiased U-statistic of MMD² with the RBF kernel ``exp(−‖x − y‖² / (2ℓ²))``.

    ``mean_{i≠j} k(x_i, x_j) + mean_{i≠j} k(y_i, y_j) − 2 mean_{i,j} k(x_i, y_j)``; it can
    be negative (its expectation is the true MMD² ≥ 0).

    Parameters
    ----------
    Y1 : array, shape ``(S1, D)``, ``S1 ≥ 2``
    Y2 : array, shape ``(S2, D)``, ``S2 ≥ 2``
    bandwidth : float
        ``ℓ > 0``, e.g. :func:`median_bandwidth` of the limit kernel. Any positive float is
        computed exactly in the limits: tiny ``ℓ`` counts equal points only, huge ``ℓ`` gives 0.
    """
    x, y = _samples(Y1, "Y1", min_samples=2), _samples(Y2, "Y2", min_samples=2)
    if x.shape[1] != y.shape[1]:
        raise InputError(f"Y1 and Y2 have different dimensions ({x.shape[1]}, {y.shape[1]}).")
    ell = check_real(bandwidth, "bandwidth", minimum=0.0, strict=True)
    n, m = len(x), len(y)
    kxx = (_rbf_sum(x, x, ell) - n) / (n * (n - 1))
    kyy = (_rbf_sum(y, y, ell) - m) / (m * (m - 1))
    return kxx + kyy - 2.0 * _rbf_sum(x, y, ell) / (n * m)


def _gaussian_rbf_mean(cov_sum: Array, ell: float) -> Array:
    """``E k(X, Y) = det(I + (A + B)/ℓ²)^{-1/2}`` for ``X ~ N(0, A)``, ``Y ~ N(0, B)``
    independent, given ``cov_sum = A + B`` of shape ``(..., D, D)``.

    As ``Π_i (1 + μ_i/ℓ²)^{-1/2}`` over the eigenvalues ``μ`` of ``A + B`` divided by ``ℓ`` twice:
    no ``ℓ²`` that underflows, and an overflowing ``μ/ℓ²`` gives its limit 0, so every ``ℓ > 0`` is
    fine. Eigenvalues negative by more than ``1e-8`` of the largest raise (not PSD); smaller ones
    are rounding and are clipped to 0.
    """
    mu = np.linalg.eigvalsh(cov_sum)
    tol = 1e-8 * np.max(np.abs(mu), axis=-1, initial=0.0)
    if np.any(mu[..., 0] < -tol):
        raise NumericalError("a conditional kernel is not PSD: A + B has a negative eigenvalue beyond "
                             "rounding; check how the kernels were computed.")
    with np.errstate(over="ignore"):
        logdet = np.log1p(np.maximum(mu, 0.0) / ell / ell).sum(axis=-1)
    return np.exp(-0.5 * logdet)


def rb_mmd2(
    Khat: Any, K: Any, *, bandwidth: float | None = None, max_pairs: int = 1_000_000
) -> float:
    """Rao–Blackwellised unbiased MMD² between ``E_s N(0, K̂_s)`` and ``N(0, K)``.

    ``mean_{s≠s'} E k(X_s, X_s') − 2 mean_s E k(X_s, Y) + E k(Y, Y')`` with every
    expectation in closed form (:func:`_gaussian_rbf_mean`): a U-statistic in the
    independent networks ``s``, unbiased for the MMD² of the finite-width law.
    Above ``max_pairs`` unordered pairs the first term uses the pairs ``(s, s + k mod S)``
    for ``k = 1 .. max_pairs // S`` only (an incomplete U-statistic, still unbiased).

    Parameters
    ----------
    Khat : array, shape ``(S, D, D)``, ``S ≥ 2``
    K : array, shape ``(D, D)``
    bandwidth : float, optional
        ``ℓ``; default :func:`median_bandwidth` of ``K``.
    max_pairs : int
        Budget of determinants for the ``s ≠ s'`` term.
    """
    k = _kernel(K, "K")
    kh = _kernels(Khat, k.shape[0])
    num = len(kh)
    if num < 2:
        raise InputError("rb_mmd2 needs at least 2 conditional kernels (pairs s != s').")
    max_pairs = check_count(max_pairs, "max_pairs")
    ell = median_bandwidth(k) if bandwidth is None else check_real(bandwidth, "bandwidth", minimum=0.0, strict=True)
    half = (num - 1) // 2  # shifts giving S distinct unordered pairs each
    shifts = min(half, max(1, int(max_pairs) // num))
    pair_sum, pair_count = 0.0, 0
    for shift in range(1, shifts + 1):
        pair_sum += float(_gaussian_rbf_mean(kh + np.roll(kh, -shift, axis=0), ell).sum())
        pair_count += num
    if shifts == half and num % 2 == 0:  # complete: the antipodal shift, each pair once
        mid = num // 2
        pair_sum += float(_gaussian_rbf_mean(kh[:mid] + kh[mid:], ell).sum())
        pair_count += mid
    kxy = float(_gaussian_rbf_mean(kh + k, ell).mean())
    kyy = float(_gaussian_rbf_mean(2.0 * k, ell))
    return pair_sum / pair_count - 2.0 * kxy + kyy


# --------------------------------------------------------------------------- W2


def w2_pot(Y1: Any, Y2: Any, *, max_samples: int = W2_POT_MAX_SAMPLES) -> float:
    """Exact W2 between two empirical samples (uniform weights) by linear programming (POT).

    Parameters
    ----------
    Y1 : array, shape ``(S1, D)``
    Y2 : array, shape ``(S2, D)``
    max_samples : int
        Refuse larger samples: the cost matrix is ``S1 × S2`` and the solver is
        super-quadratic. Use the sliced or Rao–Blackwellised estimators instead.
    """
    x, y = _samples(Y1, "Y1"), _samples(Y2, "Y2")
    if x.shape[1] != y.shape[1]:
        raise InputError(f"Y1 and Y2 have different dimensions ({x.shape[1]}, {y.shape[1]}).")
    max_samples = check_count(max_samples, "max_samples")
    if max(len(x), len(y)) > max_samples:
        raise InputError(
            f"w2_pot is exact but O(n³): {max(len(x), len(y))} samples exceed max_samples="
            f"{max_samples}; subsample, or use sliced_w1 / rb_sliced_w1."
        )
    cost = ot.dist(x, y, metric="sqeuclidean")
    a = np.full(len(x), 1.0 / len(x))
    b = np.full(len(y), 1.0 / len(y))
    value, log = ot.emd2(a, b, cost, numItermax=10_000_000, log=True)
    if log.get("warning"):
        raise NumericalError(f"the exact transport solver did not converge: {log['warning']}")
    return float(np.sqrt(max(float(value), 0.0)))


def bures_w2(K1: Any, K2: Any) -> float:
    """W2 between ``N(0, K1)`` and ``N(0, K2)`` (Bures distance).

    ``W2² = tr K1 + tr K2 − 2 tr (K1^{1/2} K2 K1^{1/2})^{1/2}``, by symmetric
    eigendecompositions; singular PSD matrices are fine (tiny negative eigenvalues
    from round-off are clipped). Absolute accuracy ``≈ sqrt(ε · tr K)``.

    Parameters
    ----------
    K1, K2 : arrays, shape ``(D, D)``
    """
    k1, k2 = _kernel(K1, "K1"), _kernel(K2, "K2")
    if k1.shape != k2.shape:
        raise InputError(f"K1 and K2 have different shapes {k1.shape}, {k2.shape}.")
    r = _psd_sqrt(k1, "K1")
    _psd_sqrt(k2, "K2")  # PSD check only
    cross = r @ k2 @ r
    mu = np.clip(np.linalg.eigvalsh(0.5 * (cross + cross.T)), 0.0, None)
    return float(np.sqrt(max(np.trace(k1) + np.trace(k2) - 2.0 * np.sqrt(mu).sum(), 0.0)))


# --------------------------------------------------------------------------- floors


def gaussian_samples(K: Any, num: int, *, seed: Seed = 0) -> Array:
    """``num`` draws from ``N(0, K)``, shape ``(num, D)``; ``K`` may be singular PSD.

    ``seed`` follows the project's seed policy (:mod:`netsor.validate`).
    """
    num = check_count(num, "num")
    root = _psd_sqrt(_kernel(K, "K"), "K")
    return generator(seed).standard_normal((num, root.shape[0])) @ root


@dataclass(frozen=True)
class Floor:
    """Monte Carlo noise floor: the estimator on independent samples of the limit.

    Attributes
    ----------
    mean : float
        The floor.
    std : float
        Spread of the estimator on samples of the limit (one replicate).
    values : array, shape ``(num_reps,)``
    """

    mean: float
    std: float
    values: Array

    @property
    def sem(self) -> float:
        """Standard error of :attr:`mean`."""
        return self.std / np.sqrt(len(self.values))


def noise_floor(
    estimator: Callable[[Array], float],
    sampler: Callable[[np.random.Generator], Array],
    *,
    num_reps: int = 20,
    seed: Seed = 0,
) -> Floor:
    """Noise floor of an estimator: its value on ``num_reps`` samples of the limit.

    Parameters
    ----------
    estimator : callable
        Maps a sample (whatever ``sampler`` returns) to a distance, a finite real number, e.g.
        ``lambda Y: sliced_w1_to_gaussian(Y, K, directions)``; a NaN or Inf raises
        :class:`~netsor.NumericalError` naming the replicate.
    sampler : callable
        Maps a Generator to a sample *of the limit* of the size used for the real
        estimate, e.g. ``lambda rng: gaussian_samples(K, S, rng)``.
    num_reps : int
        Independent replicates (``≥ 2``).
    seed : int, Generator or SeedSequence
        Replicate ``i`` uses the ``i``-th child of this seed (the seed policy of
        :mod:`netsor.validate`: the same seed object always gives the same floor).

    Examples
    --------
    >>> floor = noise_floor(lambda Y: sliced_w1_to_gaussian(Y, K, dirs),
    ...                     lambda rng: gaussian_samples(K, len(Y_finite), seed=rng))
    >>> debias(sliced_w1_to_gaussian(Y_finite, K, dirs), floor.mean)
    """
    num_reps = check_count(num_reps, "num_reps", minimum=2)
    for name, fn in (("estimator", estimator), ("sampler", sampler)):
        if not callable(fn):
            raise InputError(f"{name} must be a callable, got {type(fn).__name__}")
    children = seed_sequence(seed).spawn(num_reps)
    values = np.empty(num_reps)
    for i, child in enumerate(children):
        value = estimator(sampler(np.random.default_rng(child)))
        if np.ndim(value) != 0 or np.asarray(value).dtype.kind not in "iuf":
            raise InputError(f"estimator must return one real number (a distance), got {value!r} on replicate {i}")
        values[i] = float(value)
        if not np.isfinite(values[i]):
            raise NumericalError(f"estimator returned {values[i]!r} on replicate {i} (a sample of the limit): the "
                                 "floor would be NaN/Inf; check the estimator on that sample (its seed is child "
                                 f"{i} of seed)")
    return Floor(mean=float(values.mean()), std=float(values.std(ddof=1)), values=values)


def debias(distance: Any, floor: Any, *, rule: str = "quadrature") -> float | Array:
    """Remove a noise floor from a distance (elementwise).

    Parameters
    ----------
    distance, floor : float or arrays (broadcast)
    rule : {"quadrature", "subtract"}
        ``"quadrature"``: ``sqrt(max(d² − f², 0))`` (default; see the module docstring);
        ``"subtract"``: ``max(d − f, 0)``. Both are ``max(q, 0)^κ`` of the
        :func:`debias_argument` ``q`` with the :data:`DEBIAS_EXPONENT` ``κ``.
    """
    q, _, _ = debias_argument(distance, floor, rule=rule)
    return _float_or_array(np.maximum(q, 0.0) ** DEBIAS_EXPONENT[rule])


def debias_argument(distance: Any, floor: Any, *, rule: str = "quadrature") -> tuple[Array, Array, Array]:
    """The quantity ``q`` that :func:`debias` maps to ``max(q, 0)^κ``, and its gradient.

    ``"quadrature"``: ``q = d² − f²`` (``∂q/∂d = 2d``, ``∂q/∂f = −2f``, ``κ = 1/2``);
    ``"subtract"``: ``q = d − f`` (gradient ``1, −1``, ``κ = 1``). Being monotone in
    ``q``, the map carries an interval for ``q`` to one for the debiased distance, also
    where it is clipped at 0 (:func:`netsor.stats.rates.debias_replicates`).

    Both ``distance`` and ``floor`` must be ``≥ 0`` (distances); an MMD² U-statistic, which can be
    negative, is unbiased and needs no debiasing.

    Returns
    -------
    q, dq_dd, dq_df : arrays of the broadcast shape
    """
    d, f = np.broadcast_arrays(real_array(distance, "distance"), real_array(floor, "floor"))
    for name, value in (("distance", d), ("floor", f)):
        if np.any(value < 0):
            raise InputError(f"{name} must be >= 0 (a distance), got {float(value.min())!r}; an MMD² U-statistic "
                             "can be negative but is unbiased: do not debias it")
    if check_choice(rule, "rule", DEBIAS_RULES) == "quadrature":
        return d * d - f * f, 2.0 * d, -2.0 * f
    return d - f, np.ones_like(d), -np.ones_like(f)
