"""Finite random MLPs: Jacobian spectra of actual networks.

Same conventions as :mod:`netsor.matrixlaws.jacobian`: ``h_l = W_l x_{l−1} + b_l``,
``x_l = φ(h_l)``, ``J = D_L W_L ⋯ D_1 W_1``; Gaussian weights ``N(0, σ_w²/n_{l−1})`` or
``σ_w`` × Haar orthogonal; biases ``N(0, σ_b²)``; the input has iid ``N(0, 1)``
coordinates rescaled so that its per-coordinate second moment is exactly ``m_0``
(``q0``, or the value that puts layer 1 at ``q*``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy import linalg

from netsor.activations import Activation, activation
from netsor.errors import HyperParameterError
from netsor.matrixlaws.jacobian import _depth, _weights_kind, _widths, layer_variances
from netsor.matrixlaws.laws import as_generator, positive

Array = np.ndarray


def haar_orthogonal(n: int, rng: np.random.Generator) -> Array:
    """An ``n × n`` Haar-distributed orthogonal matrix (QR with sign correction).

    Uses :func:`scipy.linalg.qr` (blocked LAPACK): ``numpy.linalg.qr`` is about 50 times
    slower at ``n = 2000`` on the reference machines.
    """
    q, r = linalg.qr(rng.standard_normal((n, n)))
    return q * np.sign(np.diag(r))


def _positive_int(value: int, name: str) -> int:
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 1:
        raise HyperParameterError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


def empirical_jacobian_spectrum(activation_: str | Activation, depth: int, sigma_w: float,
                                sigma_b: float = 0.0, weights: str = "gaussian",
                                width: int = 1000, samples: int = 1, q0: float | None = None,
                                width_ratios: Sequence[float] | None = None,
                                seed: int | np.random.Generator = 0) -> Array:
    """Eigenvalues of ``JJᵀ`` for ``samples`` independent finite networks.

    Parameters
    ----------
    activation_, depth, sigma_w, sigma_b, weights, q0, width_ratios
        As in :func:`~netsor.matrixlaws.jacobian_spectrum`.
    width : int
        Output width ``n_L``; other widths are ``round(width · n_l / n_L)``.
    samples : int
        Independent networks (and inputs).
    seed : int or numpy.random.Generator

    Returns
    -------
    ndarray, shape (samples, n_L)
        Eigenvalues of ``JJᵀ`` in increasing order, clipped at 0 (``JJᵀ`` is PSD;
        rounding makes zero eigenvalues slightly negative).
    """
    act = activation(activation_)
    depth = _depth(depth)
    sigma_w = positive(sigma_w, "sigma_w")
    sigma_b = positive(sigma_b, "sigma_b", allow_zero=True)
    weights = _weights_kind(weights)
    width = _positive_int(width, "width")
    samples = _positive_int(samples, "samples")
    ratios = _widths(width_ratios, depth)
    if weights == "orthogonal" and not np.allclose(ratios, 1.0):
        raise HyperParameterError("orthogonal weights need equal widths; drop width_ratios")
    n = np.maximum(1, np.round(width * ratios).astype(int))
    _, _, m0 = layer_variances(act, depth, sigma_w, sigma_b, q0)
    rng = as_generator(seed)
    out = np.empty((samples, n[-1]))
    for s in range(samples):
        z = rng.standard_normal(n[0])
        x = z * np.sqrt(m0 * n[0] / np.dot(z, z))
        jac = np.eye(n[0])
        for layer in range(depth):
            fan_in, fan_out = n[layer], n[layer + 1]
            if weights == "gaussian":
                w = rng.standard_normal((fan_out, fan_in)) * (sigma_w / np.sqrt(fan_in))
            else:
                w = sigma_w * haar_orthogonal(fan_in, rng)
            h = w @ x + sigma_b * rng.standard_normal(fan_out)
            x = act.fn(h)
            jac = act.deriv(h)[:, None] * (w @ jac)
        gram = jac @ jac.T
        out[s] = np.maximum(np.linalg.eigvalsh(gram), 0.0)
    return out


def moment_table(eigenvalues: Array, k: int = 4) -> tuple[Array, Array]:
    """Mean over networks of the first ``k`` spectral moments and their standard errors.

    ``eigenvalues`` has shape ``(samples, n)``; the standard error is the standard
    deviation of the per-network moments over ``√samples`` (eigenvalues of one
    matrix are strongly dependent, so they are not treated as independent); it
    needs ``samples ≥ 2``. Returns two arrays of shape ``(k,)``.
    """
    ev = np.asarray(eigenvalues, dtype=float)
    if ev.ndim != 2 or ev.shape[0] < 2:
        raise HyperParameterError("moment_table needs eigenvalues of shape (samples ≥ 2, n)")
    per = np.stack([np.mean(ev**j, axis=1) for j in range(1, k + 1)], axis=1)
    return per.mean(axis=0), per.std(axis=0, ddof=1) / np.sqrt(ev.shape[0])
