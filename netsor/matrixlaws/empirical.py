"""Finite random MLPs: Jacobian spectra of actual networks.

Same conventions as :mod:`netsor.matrixlaws.jacobian`: ``h_l = W_l x_{l−1} + b_l``,
``x_l = φ(h_l)``, ``J = D_L W_L ⋯ D_1 W_1``; Gaussian weights ``N(0, σ_w²/n_{l−1})`` or
``σ_w`` × Haar orthogonal; biases ``N(0, σ_b²)``; the input has iid ``N(0, 1)``
coordinates rescaled so that its per-coordinate second moment is exactly ``m_0``
(``q0``, or the value that puts layer 1 at ``q*``).

This sampler is separate from the finite-width interpreter (:mod:`netsor.interpret`) on
purpose: that one executes Netsor programs forward and has no Jacobians (products of
``D_l W_l`` with the *same* ``W_l`` as the forward pass) and no Haar-orthogonal weights,
which are what the matrix laws are about.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy import linalg
from threadpoolctl import ThreadpoolController

from netsor.activations import Activation
from netsor.errors import HyperParameterError, InputError
from netsor.matrixlaws.jacobian import check_network, is_homogeneous, layer_variances, width_profile
from netsor.matrixlaws.laws import check_memory
from netsor.validate import Seed, check_count, generator, real_array, seed_sequence

Array = np.ndarray
#: BLAS runs single-threaded in the sampler: numpy and scipy each load an OpenBLAS whose idle
#: threads spin, and interleaving their calls (matmul, then QR) on a busy 2-core machine was
#: 10–40 times slower than one thread (measured: width 1000, depth 6, orthogonal, 2 networks:
#: 35.7 s threaded, 1.9 s single-threaded).
_BLAS = ThreadpoolController()


def haar_orthogonal(n: int, seed: Seed = 0) -> Array:
    """An ``n × n`` Haar-distributed orthogonal matrix (QR with sign correction); ``seed`` an int,
    ``SeedSequence`` or ``Generator`` (a Generator is advanced, as every sampler here does).

    Uses :func:`scipy.linalg.qr` (blocked LAPACK): ``numpy.linalg.qr`` is about 50 times
    slower at ``n = 2000`` on the reference machines.
    """
    n = check_count(n, "matrix size n", minimum=1)
    check_memory(3 * n * n, f"haar_orthogonal({n}) (a Gaussian matrix and its QR factors)", "use a smaller n")
    q, r = linalg.qr(generator(seed).standard_normal((n, n)))
    return q * np.sign(np.diag(r))


def empirical_jacobian_spectrum(activation: str | Activation, depth: int, sigma_w: float,
                                sigma_b: float = 0.0, *, weights: str = "gaussian",
                                width: int = 1000, samples: int = 1, q0: float | None = None,
                                width_ratios: Sequence[float] | None = None,
                                seed: Seed = 0) -> Array:
    """Eigenvalues of ``JJᵀ`` for ``samples`` independent finite networks.

    Parameters
    ----------
    activation, depth, sigma_w, sigma_b, weights, q0, width_ratios
        As in :func:`~netsor.matrixlaws.jacobian_spectrum`.
    width : int
        Output width ``n_L``; other widths are ``round(width · n_l / n_L)``.
    samples : int
        Independent networks (and inputs).
    seed : int, SeedSequence or Generator
        Seed policy of :mod:`netsor.validate`: network ``s`` draws from the ``s``-th child of
        the seed's ``SeedSequence``, so the first networks do not depend on ``samples`` and
        the same seed object gives the same spectra.

    Returns
    -------
    ndarray, shape (samples, n_L)
        Eigenvalues of ``JJᵀ`` in increasing order, clipped at 0 (``JJᵀ`` is PSD;
        rounding makes zero eigenvalues slightly negative).
    """
    act, depth, sigma_w, sigma_b, weights, q0 = check_network(activation, depth, sigma_w, sigma_b, weights, q0)
    width = check_count(width, "width", minimum=1)
    samples = check_count(samples, "samples", minimum=1)
    ratios = width_profile(width_ratios, depth)
    if weights == "orthogonal" and not np.allclose(ratios, 1.0):
        raise HyperParameterError("orthogonal weights need equal widths; drop width_ratios")
    n = np.maximum(1, np.round(width * ratios).astype(int))
    check_memory(5 * int(n.max()) ** 2, f"a network of width {int(n.max())} (its weights, Jacobian and "
                 "their products)", "use a smaller width")
    q, _, m0 = layer_variances(act, depth, sigma_w, sigma_b, q0)
    if q[0] == 0.0 and is_homogeneous(act):
        # q = 0 puts every pre-activation at the kink of a positively homogeneous φ (relu: φ'(0) is a convention,
        # 0 here, which made every Jacobian 0 while jacobian_spectrum predicted χ = σ_w²/2 per layer); its Jacobian
        # law is the same at every q > 0, and the predicted law at q = 0 is that limit: inputs of second moment 1
        m0 = 1.0
    streams = seed_sequence(seed).spawn(samples)
    out = np.empty((samples, n[-1]))
    with _BLAS.limit(limits=1, user_api="blas"):
        for s in range(samples):
            out[s] = _network_spectrum(act, depth, sigma_w, sigma_b, weights, n, m0,
                                       np.random.default_rng(streams[s]))
    return out


def _network_spectrum(act: Activation, depth: int, sigma_w: float, sigma_b: float, weights: str,
                      n: Array, m0: float, rng: np.random.Generator) -> Array:
    """Eigenvalues of ``JJᵀ`` for one network of widths ``n`` (clipped at 0)."""
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
    return np.maximum(np.linalg.eigvalsh(jac @ jac.T), 0.0)


def moment_table(eigenvalues: Array, k: int = 4) -> tuple[Array, Array]:
    """Mean over networks of the first ``k`` spectral moments and their standard errors.

    ``eigenvalues`` has shape ``(samples, n)``; the standard error is the standard
    deviation of the per-network moments over ``√samples`` (eigenvalues of one
    matrix are strongly dependent, so they are not treated as independent); it
    needs ``samples ≥ 2``. Returns two arrays of shape ``(k,)``.
    """
    ev = real_array(eigenvalues, "eigenvalues", ndim=2)
    k = check_count(k, "number of moments k", minimum=1)
    if ev.shape[0] < 2 or ev.shape[1] < 1:
        raise InputError("moment_table needs eigenvalues of shape (samples ≥ 2, n ≥ 1), got "
                         f"shape {ev.shape}: a standard error needs at least two networks")
    per = np.stack([np.mean(ev**j, axis=1) for j in range(1, k + 1)], axis=1)
    return per.mean(axis=0), per.std(axis=0, ddof=1) / np.sqrt(ev.shape[0])
