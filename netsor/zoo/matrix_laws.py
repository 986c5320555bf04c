"""Random-matrix laws as Netsor⊤ programs (DESIGN §4): Krylov vectors of a Gaussian vector.

The programs read no data: they start from a Gaussian vector ``v`` (:meth:`Program.gaussian`)
and read out ``v, Av, …, A^k v`` for a random matrix ``A`` built from one Gaussian ``W`` and its
transpose. In the infinite-width limit (``netsor.limit(p)``, one symbolic point) the NNGP
kernel of the outputs is the Hankel matrix of the spectral moments of ``A``:
``netsor.nngp(p)[i, j] = E[Z^{A^i v} Z^{A^j v}] = m_{i+j}`` (``A`` is symmetric). Nothing in the
engine knows these laws: the moments come from the Netsor⊤ Master Theorem alone.
"""

from __future__ import annotations

from netsor.ir.program import Program
from netsor.validate import check_count, check_real


def semicircle_moments(k: int, sigma: float = 1.0) -> Program:
    """Outputs ``X^j v`` for ``j = 0..k`` with ``X = (W + Wᵀ)/√2``, ``W : n × n`` with entries
    ``N(0, sigma²/n)`` and ``v ~ N(0, I)``.

    ``X`` is a Wigner matrix: in the limit ``E[Z^{X^i v} Z^{X^j v}]`` is the ``(i+j)``-th moment of
    the semicircle law of variance ``sigma²`` (``sigma^{2m} Catalan(m)`` for ``i + j = 2m``, 0 for
    odd ``i + j``; :class:`netsor.matrixlaws.Semicircle`). Outputs are ordered by ``j``.
    """
    k = check_count(k, "k", minimum=0)
    sigma = check_real(sigma, "sigma", minimum=0.0, strict=True)
    p = Program(f"semicircle_moments(k={k}, sigma={sigma:g})")
    n = p.dim("n")
    W = p.matrix(n, n, sigma=sigma, name="W")
    x = v = p.gaussian(n)
    krylov = [v]
    for _ in range(k):
        x = (W @ x + W.T @ x) * 2**-0.5
        krylov.append(x)
    p.readout(*krylov, sigma=1.0)
    return p


def marchenko_pastur_moments(k: int, ratio: float = 1.0) -> Program:
    """Outputs ``(WᵀW)^j v`` for ``j = 0..k``: dims ``n`` (ratio 1) and ``m`` (ratio ``λ = ratio``),
    ``W : n × m`` with entries ``N(0, 1/n)`` (``sigma = √λ``: the variance is ``sigma²/n_in``),
    ``v ~ N(0, I_m)``.

    ``WᵀW`` (``m × m``) follows the Marchenko–Pastur law of ratio ``λ = m/n``: in the limit
    ``E[Z^{(WᵀW)^i v} Z^{(WᵀW)^j v}]`` is its ``(i+j)``-th moment, the Narayana polynomial
    ``Σ_r N(i+j, r) λ^{r−1}`` (:class:`netsor.matrixlaws.MarchenkoPastur` with ``ratio = λ``).
    At width ``w`` the sampler uses ``n = w``, ``m = round(λ w)``. Outputs are ordered by ``j``.
    """
    k = check_count(k, "k", minimum=0)
    ratio = check_real(ratio, "ratio", minimum=0.0, strict=True)
    p = Program(f"marchenko_pastur_moments(k={k}, ratio={ratio:g})")
    n, m = p.dim("n"), p.dim("m", ratio=ratio)
    W = p.matrix(n, m, sigma=ratio**0.5, name="W")
    x = v = p.gaussian(m)
    krylov = [v]
    for _ in range(k):
        x = W.T @ (W @ x)
        krylov.append(x)
    p.readout(*krylov, sigma=1.0)
    return p
