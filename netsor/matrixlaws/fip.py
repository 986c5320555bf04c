"""The FIP check: finite networks approach the *free* prediction, not the classical one.

For each width, finite Jacobian spectra are compared (W1) with

* the free prediction :func:`~netsor.matrixlaws.jacobian_spectrum`, and
* a *wrong* prediction that treats every ``D_l`` and ``W_l`` as classically
  independent commuting scalars: ``λ = Π_l d_l² · w_l`` with ``d_l² ~ φ'(h_l)²`` and
  ``w_l`` an eigenvalue of ``W_lW_lᵀ`` (Marchenko–Pastur or ``σ_w²``), sampled by
  Monte Carlo.

The W1 distances are regressed on width in log-log; the slope of the free
distance is negative (it decays like a power of the width), the classical one
plateaus (slope ≈ 0). Slopes carry 95 % confidence intervals from the
regression over independent replicates.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

from netsor.activations import Activation
from netsor.errors import HyperParameterError
from netsor.matrixlaws.empirical import empirical_jacobian_spectrum
from netsor.matrixlaws.esd import EmpiricalSpectrum, esd, w1_distance
from netsor.matrixlaws.jacobian import JacobianLaw, jacobian_spectrum
from netsor.matrixlaws.laws import MarchenkoPastur
from netsor.stats.distances import w1_1d
from netsor.validate import Seed, check_count, generator, seed_sequence

Array = np.ndarray


def classical_prediction(law: JacobianLaw, *, size: int = 200_000, seed: Seed = 0) -> EmpiricalSpectrum:
    """Samples of ``Π_l d_l² w_l`` with independent scalars (the wrong, commuting model):
    ``d_l² ~ φ'(h_l)²``, ``h_l ~ N(0, q_l)``, and ``w_l`` an eigenvalue of ``W_lW_lᵀ``
    (Marchenko–Pastur(1, σ_w²) by its quantile function, or ``σ_w²``)."""
    if not isinstance(law, JacobianLaw):
        raise HyperParameterError(
            f"classical_prediction needs a JacobianLaw (from jacobian_spectrum), got {type(law).__name__}")
    size = check_count(size, "size", minimum=1)
    rng = generator(seed)
    prod = np.ones(size)
    sigma2 = law.sigma_w**2
    mp = MarchenkoPastur(1.0, 1.0)
    for q in law.q:
        h = rng.standard_normal(size) * np.sqrt(q)
        prod *= law.activation.deriv(h) ** 2
        prod *= sigma2 * (mp.quantile(rng.random(size)) if law.weights == "gaussian" else 1.0)
    return esd(prod)


@dataclass(frozen=True)
class FIPReport:
    """Result of :func:`fip_check`.

    Attributes
    ----------
    widths : ndarray, shape (w,)
    w1_free, w1_classical : ndarray, shape (w, replicates)
        W1 distances of the empirical spectra to the two predictions.
    slope_free, slope_classical : (float, float, float)
        Log-log slope and its 95 % confidence interval ``(slope, lo, hi)``.
    mean_eigenvalue : float
        Mean of the predicted law (scale for the W1 values).
    """

    widths: Array
    w1_free: Array
    w1_classical: Array
    slope_free: tuple[float, float, float]
    slope_classical: tuple[float, float, float]
    mean_eigenvalue: float


def _slope(widths: Array, values: Array) -> tuple[float, float, float]:
    x = np.repeat(np.log(widths), values.shape[1])
    fit = stats.linregress(x, np.log(values.ravel()))
    half = stats.t.ppf(0.975, x.size - 2) * fit.stderr
    return float(fit.slope), float(fit.slope - half), float(fit.slope + half)


def fip_check(activation: str | Activation, depth: int, sigma_w: float, sigma_b: float = 0.0, *,
              weights: str = "gaussian", widths: Sequence[int] = (64, 128, 256, 512),
              replicates: int = 3, seed: Seed = 0) -> FIPReport:
    """W1 of finite-network Jacobian spectra to the free and to the classical prediction,
    as a function of width, with log-log slopes (module docstring).

    The seed (policy of :mod:`netsor.validate`) is split into one stream for the classical
    samples and one per (width, replicate) network, so the same seed object gives the same
    report. The W1 to the free law uses its cdf (:func:`~netsor.matrixlaws.w1_distance`), the
    W1 between the two samples :func:`netsor.stats.distances.w1_1d` (exact).
    """
    w = np.asarray(widths)
    if w.ndim != 1 or w.size < 2:
        raise HyperParameterError(f"widths must be at least two integers >= 2, got {widths!r}")
    w = np.array([check_count(v, "each width", minimum=2) for v in w.tolist()])
    replicates = check_count(replicates, "replicates", minimum=1)
    law = jacobian_spectrum(activation, depth, sigma_w, sigma_b, weights=weights)
    streams = seed_sequence(seed).spawn(1 + w.size * replicates)
    wrong = classical_prediction(law, seed=streams[0])
    free_d = np.empty((w.size, replicates))
    class_d = np.empty((w.size, replicates))
    for i, n in enumerate(w):
        for r in range(replicates):
            ev = esd(empirical_jacobian_spectrum(law.activation, depth, sigma_w, sigma_b,
                                                 weights=weights, width=int(n),
                                                 seed=streams[1 + i * replicates + r]))
            free_d[i, r] = w1_distance(ev, law)
            class_d[i, r] = float(w1_1d(ev.eigenvalues, wrong.eigenvalues))
    return FIPReport(w, free_d, class_d, _slope(w, free_d), _slope(w, class_d), law.mean)
