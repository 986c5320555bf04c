"""Random-matrix laws as Netsor⊤ programs (DESIGN §4): Krylov vectors of a Gaussian vector.

The programs read no data: they start from a Gaussian vector ``v`` (:meth:`Program.gaussian`)
and read out ``v, Av, …, A^k v`` for a random matrix ``A`` built from one Gaussian ``W`` and its
transpose. In the infinite-width limit (``netsor.limit(p)``, one symbolic point) the NNGP
kernel of the outputs is the Hankel matrix of the spectral moments of ``A``:
``netsor.nngp(p)[i, j] = E[Z^{A^i v} Z^{A^j v}] = m_{i+j}`` (``A`` is symmetric). Nothing in the
engine knows these laws: the moments come from the Netsor⊤ Master Theorem alone.
"""

from __future__ import annotations

from netsor.activations import Activation
from netsor.activations import activation as resolve_activation
from netsor.builder import expression_line
from netsor.ir.differentiate import differentiate
from netsor.ir.expr import Var
from netsor.ir.program import Program
from netsor.ir.trace import applied
from netsor.validate import check_count, check_real
from netsor.zoo.naming import number


def semicircle_moments(k: int, sigma: float = 1.0) -> Program:
    """Outputs ``X^j v`` for ``j = 0..k`` with ``X = (W + Wᵀ)/√2``, ``W : n × n`` with entries
    ``N(0, sigma²/n)`` and ``v ~ N(0, I)``.

    ``X`` is a Wigner matrix: in the limit ``E[Z^{X^i v} Z^{X^j v}]`` is the ``(i+j)``-th moment of
    the semicircle law of variance ``sigma²`` (``sigma^{2m} Catalan(m)`` for ``i + j = 2m``, 0 for
    odd ``i + j``; :class:`netsor.matrixlaws.Semicircle`). Outputs are ordered by ``j``.
    """
    k = check_count(k, "k", minimum=0)
    sigma = check_real(sigma, "sigma", minimum=0.0, strict=True)
    p = Program(f"semicircle_moments(k={k}, sigma={number(sigma)})")
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
    p = Program(f"marchenko_pastur_moments(k={k}, ratio={number(ratio)})")
    n, m = p.dim("n"), p.dim("m", ratio=ratio)
    W = p.matrix(n, m, sigma=ratio**0.5, name="W")
    x = v = p.gaussian(m)
    krylov = [v]
    for _ in range(k):
        x = W.T @ (W @ x)
        krylov.append(x)
    p.readout(*krylov, sigma=1.0)
    return p


def jacobian_moments(k: int, depth: int, activation: str | Activation = "tanh", sigma_w: float = 1.0,
                     sigma_b: float = 0.0, q0: float = 1.0) -> Program:
    """Outputs ``(JᵀJ)^j v`` for ``j = 0..k``, ``J = D_L W_L ⋯ D_1 W_1`` the input–output Jacobian
    of a deep MLP at a Gaussian input (the convention of :func:`netsor.jacobian_spectrum`).

    The network: ``x_0 ~ N(0, q0 I)`` (an initial Gaussian vector: no data), ``g_l = W_l x_{l−1} +
    b_l``, ``x_l = φ(g_l)``, ``W_l : n × n`` with entries ``N(0, sigma_w²/n)``, ``b_l ~ N(0,
    sigma_b²)``; ``D_l = diag φ'(g_l)`` and ``v ~ N(0, I)``. ``J u`` applies ``W_1, D_1, …, W_L,
    D_L`` and ``Jᵀ u`` their transposes in reverse order, so the ``W_l`` are used both ways with
    vectors that depend on them nonlinearly. In the limit ``E[Z^{(JᵀJ)^i v} Z^{(JᵀJ)^j v}]`` is the
    ``(i+j)``-th moment of the law of the squared singular values of ``J``
    (``jacobian_spectrum(activation, depth, sigma_w, sigma_b, q0=q0).moments``), which the Free
    Independence Principle gives; here it follows from the Netsor⊤ Master Theorem alone. The
    corrections ``Ż`` are non-Gaussian (``φ'(g)`` times earlier vectors), so the limit comes from
    the simulation (``netsor.limit(p, method="qmc")``). Outputs are ordered by ``j``.
    """
    k = check_count(k, "k", minimum=0)
    depth = check_count(depth, "depth")
    sigma_w = check_real(sigma_w, "sigma_w", minimum=0.0, strict=True)
    sigma_b = check_real(sigma_b, "sigma_b", minimum=0.0)
    q0 = check_real(q0, "q0", minimum=0.0, strict=True)
    act = resolve_activation(activation)
    p = Program(f"jacobian_moments(k={k}, depth={depth}, activation={act.name}, sigma_w={number(sigma_w)}, "
                f"sigma_b={number(sigma_b)}, q0={number(q0)})")
    n = p.dim("n")
    Ws = [p.matrix(n, n, sigma=sigma_w, name=f"W{layer + 1}") for layer in range(depth)]
    x = p.gaussian(n, sigma=q0**0.5)
    slopes = []
    for W in Ws:
        g = W @ x + p.bias(n, sigma_b) if sigma_b > 0 else W @ x
        slopes.append(expression_line(g, differentiate(applied(act, Var(g)), g)))  # φ'(g_l)
        x = act(g)
    u = v = p.gaussian(n)
    krylov = [v]
    for _ in range(k):
        for W, slope in zip(Ws, slopes, strict=True):
            u = slope * (W @ u)
        for W, slope in zip(reversed(Ws), reversed(slopes), strict=True):
            u = W.T @ (slope * u)
        krylov.append(u)
    p.readout(*krylov, sigma=1.0)
    return p
