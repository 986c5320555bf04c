"""Netsor⊤: programs with transposed MatMuls at infinite and finite width.

Reference numbers come from closed forms computed here (Catalan numbers ``binom(2m, m)/(m+1)``,
Narayana numbers ``binom(k, r) binom(k, r−1)/k``), never from netsor. Finite-width checks are
seeded, and their tolerance is ``Z_MAX`` standard errors of the Monte-Carlo mean (each network
gives one independent value).
"""

from __future__ import annotations

from math import comb

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import netsor

Z_MAX = 4.0
RTOL = 1e-12


def catalan(m: int) -> int:
    return comb(2 * m, m) // (m + 1)


def narayana_polynomial(k: int, lam: float) -> float:
    """``Σ_r N(k, r) λ^{r−1}``, the k-th Marchenko–Pastur moment (k ≥ 1)."""
    return sum(comb(k, r) * comb(k, r - 1) // k * lam ** (r - 1) for r in range(1, k + 1))


def krylov(p: netsor.Program) -> list[netsor.Vector]:
    """The read-out vectors ``A^j v`` of a matrix-law program, in order of ``j``."""
    return [v for _, (v,) in p.outputs]


def z_scores(samples: np.ndarray, expected: np.ndarray) -> np.ndarray:
    """(mean − expected) / standard error over axis 0 (entries with no spread must be exact)."""
    mean = samples.mean(axis=0)
    se = samples.std(axis=0, ddof=1) / np.sqrt(samples.shape[0])
    return np.where(se > 0, (mean - expected) / np.where(se > 0, se, 1.0), np.inf * (mean != expected))


# ---- infinite width: exact moments ------------------------------------------------------------------
def test_semicircle_moments_are_catalan_numbers() -> None:
    p = netsor.zoo.semicircle_moments(16)
    vs = krylov(p)
    lim = netsor.limit(p)
    for k, x in enumerate(vs):
        got = lim.cov(vs[0], x)
        assert got.shape == (1, 1)
        if k % 2:
            assert abs(got[0, 0]) <= RTOL
        else:
            assert got[0, 0] == pytest.approx(catalan(k // 2), rel=RTOL)
    # the NNGP kernel of the outputs v, Xv, …: the Hankel matrix of the moments
    K = netsor.nngp(netsor.zoo.semicircle_moments(4, sigma=0.5))
    hankel = np.array([[catalan((i + j) // 2) * 0.25 ** ((i + j) // 2) if (i + j) % 2 == 0 else 0.0
                        for j in range(5)] for i in range(5)])
    np.testing.assert_allclose(K, hankel, rtol=RTOL, atol=RTOL)


@pytest.mark.parametrize("lam", [0.25, 0.5, 1.0, 2.0])
def test_marchenko_pastur_moments_are_narayana_polynomials(lam: float) -> None:
    p = netsor.zoo.marchenko_pastur_moments(6, lam)
    vs = krylov(p)
    lim = netsor.limit(p)
    got = np.array([lim.cov(vs[0], x)[0, 0] for x in vs[1:]])
    expected = np.array([narayana_polynomial(k, lam) for k in range(1, 7)])
    np.testing.assert_allclose(got, expected, rtol=RTOL)
    assert lim.cov(vs[0])[0, 0] == 1.0


def test_moments_agree_with_matrixlaws() -> None:
    K = netsor.nngp(netsor.zoo.semicircle_moments(3, sigma=1.5))
    np.testing.assert_allclose(K[0, 1:], netsor.matrixlaws.Semicircle(variance=2.25).moments(3), rtol=RTOL, atol=RTOL)
    np.testing.assert_allclose(K[-1, 1:], netsor.matrixlaws.Semicircle(variance=2.25).moments(6)[3:], rtol=RTOL)
    for lam in (0.3, 1.7):
        K = netsor.nngp(netsor.zoo.marchenko_pastur_moments(3, lam))
        np.testing.assert_allclose(K[0, 1:], netsor.matrixlaws.MarchenkoPastur(ratio=lam).moments(3), rtol=RTOL)
        np.testing.assert_allclose(K[-1, 1:], netsor.matrixlaws.MarchenkoPastur(ratio=lam).moments(6)[3:], rtol=RTOL)


def test_ratio_factors_of_a_rectangular_matrix() -> None:
    """``W : n × m`` with ``m = λ n``, entries ``N(0, σ²/m)``: ``Var(Wᵀu) = σ² (n/m) E u²`` and the
    correction of ``Wᵀ W v`` is ``σ² (n/m) v``."""
    lam, sigma = 0.4, 1.3
    p = netsor.Program()
    n, m = p.dim("n"), p.dim("m", ratio=lam)
    W = p.matrix(n, m, sigma=sigma)
    u, v = p.gaussian(n, sigma=0.7), p.gaussian(m)
    a, b = W.T @ u, W.T @ (W @ v)
    lim = netsor.limit(p)
    assert lim.cov(a)[0, 0] == pytest.approx(sigma**2 / lam * 0.49, rel=RTOL)
    assert lim.cov(v, b)[0, 0] == pytest.approx(sigma**2 / lam, rel=RTOL)
    assert lim.cov(a, b)[0, 0] == 0.0  # Ẑ of Wᵀu and Wᵀ(Wv) correlate through u ⊥ Wv: none


# ---- finite width against the limit ------------------------------------------------------------------
@pytest.mark.parametrize("program", [netsor.zoo.semicircle_moments(4), netsor.zoo.marchenko_pastur_moments(3, 0.5),
                                     netsor.zoo.marchenko_pastur_moments(3, 2.0)],
                         ids=["semicircle", "marchenko-pastur-0.5", "marchenko-pastur-2"])
@pytest.mark.parametrize(("method", "width"), [("dense", 200), ("matrix-free", 1000)])
def test_samplers_match_the_limit(program: netsor.Program, method: str, width: int) -> None:
    """Per network, ``K̂ = ⟨A^i v, A^j v⟩ / n`` (200 networks); the matrix-free sampler conditions
    each use of ``W`` or ``Wᵀ`` on the earlier uses of both."""
    run = netsor.run_finite(program, width=width, samples=200, seed=3, return_kernels=True, method=method)
    assert run.kernels is not None
    lam = program.dims[-1].ratio
    assert run.widths["n"] == width and run.widths.get("m", width) == round(lam * width)
    z = z_scores(run.kernels, netsor.nngp(program))
    assert np.all(np.abs(z) < Z_MAX), z


def test_linear_transposed_program_with_data() -> None:
    """``y = Wᵀ W (U x)`` on several inputs: the corrections are per input, the limit exact."""
    p = netsor.Program()
    n = p.dim("n")
    g = p.input(n, sigma=1.0)
    W = p.matrix(n, n, sigma=0.8)
    y = W.T @ (W @ g) + W @ g
    p.readout(y, sigma=1.0)
    X = np.random.default_rng(0).standard_normal((3, 4))
    G = X @ X.T / 4
    K = netsor.nngp(p, X)
    # y = Ẑ² + σ² g + Ẑ¹ with Ẑ² = Ẑ^{Wᵀ(Wg)}, Ẑ¹ = Ẑ^{Wg}: σ² E[(Wg)²] + σ⁴ G + σ² G, E[(Wg)²] = σ² G
    np.testing.assert_allclose(K, (2 * 0.64**2 + 0.64) * G, rtol=1e-12)
    run = netsor.run_finite(p, X, width=300, samples=200, seed=4, return_kernels=True, method="dense")
    assert np.all(np.abs(z_scores(run.kernels, K)) < Z_MAX)


def test_nonlinear_transposed_program() -> None:
    """``y = Wᵀ tanh(W v)``: ``Z^y = Ẑ + σ² E[tanh'(Z^{Wv})] Z^v``, against 100 dense networks of width
    400 and 48 matrix-free ones of width 1000."""
    sigma = 1.3
    p = netsor.Program()
    n = p.dim("n")
    v = p.gaussian(n)
    W = p.matrix(n, n, sigma=sigma)
    y = W.T @ netsor.tanh(W @ v)
    p.readout(v, y, sigma=1.0)
    lim = netsor.limit(p)
    t = np.linspace(-12, 12, 200001)
    weight = np.exp(-t**2 / (2 * sigma**2)) / np.sqrt(2 * np.pi * sigma**2) * (t[1] - t[0])
    assert lim.cov(v, y)[0, 0] == pytest.approx(sigma**2 * np.sum(weight / np.cosh(t) ** 2), rel=1e-9)
    assert lim.cov(y)[0, 0] == pytest.approx(sigma**2 * np.sum(weight * np.tanh(t) ** 2)
                                             + lim.cov(v, y)[0, 0] ** 2, rel=1e-9)
    assert lim.analysis.derivative_error < 1e-12
    K = netsor.nngp(p)
    for method, width, samples in (("dense", 400, 100), ("matrix-free", 1000, 48)):
        run = netsor.run_finite(p, width=width, samples=samples, seed=5, return_kernels=True, method=method)
        z = z_scores(run.kernels, K)
        assert np.all(np.abs(z) < Z_MAX), (method, z)


@pytest.mark.parametrize("act", ["tanh", "gelu", "silu", "softplus"])
def test_corrections_carry_the_error_of_their_expectations(act: str) -> None:
    """``Cov(v, Wᵀφ(Wv)) = σ² E[φ'(u)]``, ``u ~ N(0, σ²)``: the coefficient ``E[φ']`` is numerical (no
    closed form), and its error bound reaches the covariance's bound (at least σ² times it); the
    bound covers the distance to the trapezoidal rule of step 0.004 on [−16σ, 16σ] (geometrically
    convergent for these analytic integrands: exact to rounding)."""
    sigma = 1.3
    p = netsor.Program()
    n = p.dim("n")
    v = p.gaussian(n)
    W = p.matrix(n, n, sigma=sigma)
    y = W.T @ netsor.activation(act)(W @ v)
    p.readout(v, y, sigma=1.0)
    lim = netsor.limit(p)
    value, bound = lim.cov(v, y, with_error=True)
    t = np.linspace(-16, 16, 8001) * sigma
    weight = np.exp(-t**2 / (2 * sigma**2)) / np.sqrt(2 * np.pi * sigma**2) * (32 * sigma / 8000)
    reference = sigma**2 * np.sum(weight * netsor.activation(act).deriv(t))
    assert lim.analysis.derivative_error > 0
    assert bound[0, 0] >= sigma**2 * lim.analysis.derivative_error
    assert abs(value[0, 0] - reference) <= bound[0, 0]


def test_nonlinear_transpose_of_several_arguments() -> None:
    """``h = tanh(a + 0.3 b)·b + relu(a)``, ``a = Wv``, ``b = W(u + v)``, ``W : n × m`` (m = 1.5 n):
    by symmetry ``E[∂h/∂Ẑ^a] = E[step(a)] = ½`` and ``E[∂h/∂Ẑ^b] = 0``, so
    ``Z^{Wᵀh} = Ẑ + ½ σ² (n/m) Z^v`` (a multi-argument joint expectation at one symbolic point)."""
    p = netsor.Program()
    n, m = p.dim("n"), p.dim("m", ratio=1.5)
    v, u = p.gaussian(m), p.gaussian(m, sigma=0.5)
    W = p.matrix(n, m, sigma=1.1)
    a, b = W @ v, W @ (u + v)
    y = W.T @ (netsor.tanh(a + 0.3 * b) * b + netsor.relu(a))
    p.readout(v, u, y, sigma=1.0)
    K = netsor.nngp(p)
    assert K[0, 2] == pytest.approx(0.5 * 1.21 / 1.5, rel=1e-9)
    assert abs(K[1, 2]) < 1e-12
    run = netsor.run_finite(p, width=1000, samples=64, seed=7, return_kernels=True, method="matrix-free")
    z = z_scores(run.kernels, K)
    assert np.all(np.abs(z) < Z_MAX), z


def test_a_derivative_needed_in_the_middle_of_the_walk_is_a_clear_refusal() -> None:
    """``a = W1ᵀv``, ``b = W1 a``, ``c = W1ᵀ tanh(b)``, ``y = W1 tanh(c)`` (found by the fuzz test):
    ``Ż^y`` integrates ``tanh'`` over ``Z^c`` while the analysis is still walking, and ``Var Ẑ^c``
    reads ``E[Z^v tanh(Z^b)]`` — the G-vector's monomial was registered only after the walk, and
    this raised a bare KeyError. Now: the engine's UnsupportedError (``Ż^y`` is not Gaussian), and
    the simulation computes it."""
    p = netsor.Program()
    n, m = p.dim("n"), p.dim("m", ratio=0.5)
    W = p.matrix(n, m, sigma=0.8)
    c = W.T @ netsor.tanh(W @ (W.T @ p.gaussian(n)))
    p.readout(W @ netsor.tanh(c), sigma=1.0)
    with pytest.raises(netsor.UnsupportedError, match="not Gaussian"):
        netsor.nngp(p)
    K, E = netsor.limit(p, method="qmc", rtol=1e-2).nngp(with_error=True)
    assert np.all(np.isfinite(K)) and K[0, 0] > 0 and E[0, 0] <= 1e-2 * K[0, 0]


def test_a_moment_of_a_transposed_program_meets_a_small_rtol() -> None:
    """``g = W Wᵀ W v``, ``h = g·tanh(v)``, ``y = mean[tanh(h)²]·h`` (found by the fuzz test): the
    moment's expectation stopped at an error estimate of 1.1e-6 relative, whatever rtol asked
    (the nested rule did not refine); now it meets 1e-8, and its value agrees with 400 dense
    networks of width 400 within 4 standard errors."""
    p = netsor.Program()
    n = p.dim("n")
    v = p.gaussian(n)
    W = p.matrix(n, n, sigma=0.9)
    h = (W @ (W.T @ (W @ v))) * netsor.tanh(v)
    p.readout(netsor.moment(lambda x: np.tanh(x) ** 2, h) * h, sigma=1.0)
    K, E = netsor.limit(p, rtol=1e-8).nngp(with_error=True)
    assert E[0, 0] <= 1e-8 * K[0, 0]
    run = netsor.run_finite(p, width=400, samples=400, seed=3, return_kernels=True, method="dense")
    z = z_scores(run.kernels, K)
    assert np.all(np.abs(z) < 4), z


def test_two_forward_and_two_transposed_uses_of_one_matrix() -> None:
    """``a = Wv``, ``b = W(v + u)``, ``y₁ = Wᵀ tanh(a)``, ``y₂ = Wᵀ (relu(b) tanh(a))``: the Gaussian parts
    of the two ``Wᵀ`` uses are correlated (``σ² E[tanh(a) relu(b) tanh(a)]``) and each ``Ż`` sums over
    both forward uses; against 100 dense networks of width 400."""
    p = netsor.Program()
    n = p.dim("n")
    v, u = p.gaussian(n), p.gaussian(n, sigma=0.7)
    W = p.matrix(n, n, sigma=1.2)
    a, b = W @ v, W @ (v + u)
    p.readout(v, u, W.T @ netsor.tanh(a), W.T @ (netsor.relu(b) * netsor.tanh(a)), sigma=1.0)
    K = netsor.nngp(p)
    run = netsor.run_finite(p, width=400, samples=100, seed=5, return_kernels=True, method="dense")
    z = z_scores(run.kernels, K)
    assert np.all(np.abs(z) < Z_MAX), z


def test_data_free_programs() -> None:
    p = netsor.zoo.semicircle_moments(2)
    assert netsor.sample(p, width=16, samples=5).shape == (5, 3)
    assert netsor.nngp(p).shape == (3, 3)
    with pytest.raises(netsor.InputError, match="pass X"):
        netsor.limit(netsor.zoo.mlp(1))


# ---- the simulation (method="qmc"): Ż by Stein's lemma ----------------------------------------------
def test_simulated_matrix_laws_meet_catalan_and_narayana_within_their_bounds() -> None:
    """Semicircle moments up to order 8 (X = (W + Wᵀ)/√2 needs Ż at every step) and
    Marchenko–Pastur moments (ratio 0.5, Ż with the ratio's factor) by the joint simulation."""
    K, E = netsor.limit(netsor.zoo.semicircle_moments(4), method="qmc", rtol=2e-3).nngp(with_error=True)
    hankel = np.array([[catalan((i + j) // 2) if (i + j) % 2 == 0 else 0.0 for j in range(5)] for i in range(5)])
    assert np.all(np.abs(K - hankel) <= E)
    assert np.max(E / np.sqrt(np.outer(np.diag(hankel), np.diag(hankel)))) <= 2e-3
    p = netsor.zoo.marchenko_pastur_moments(3, 0.5)
    K, E = netsor.limit(p, method="qmc", rtol=2e-3).nngp(with_error=True)
    hankel = np.array([[narayana_polynomial(i + j, 0.5) if i + j else 1.0 for j in range(4)] for i in range(4)])
    assert np.all(np.abs(K - hankel) <= E)


def tanh_derivative_mean(variance: float) -> float:
    """``E[tanh'(u)]``, ``u ~ N(0, variance)``, by a fine midpoint rule (errors ~1e-12)."""
    t = np.linspace(-14, 14, 400001) * np.sqrt(variance)
    weight = np.exp(-t**2 / (2 * variance)) / np.sqrt(2 * np.pi * variance) * (28 * np.sqrt(variance) / 400000)
    return float(np.sum(weight / np.cosh(t) ** 2))


def test_nonlinear_transpose_of_a_program_that_reads_data_by_the_engine_and_by_simulation() -> None:
    """``y = Wᵀ tanh(W g)``, ``g = U x``: ``Ż^y`` at input i is ``σ² E[tanh'(Z^{Wg}_i)] Z^g_i`` (a
    different coefficient at every input: the engine carries it as a per-input scalar of the limit), so
    ``K_ij = σ² E[tanh(u_i) tanh(u_j)] + σ⁴ e_i e_j G_ij`` with ``u ~ N(0, σ² G)``, ``e_i = E tanh'(u_i)``.
    The first term is the engine's kernel of ``tanh(W g)`` (no transposes), ``e_i`` a one-dimensional
    midpoint rule. The engine meets the default rtol with bounds covering the error; the simulation
    agrees within its own bounds."""
    sigma = 1.3
    p = netsor.Program()
    n = p.dim("n")
    g = p.input(n, sigma=1.0)
    W = p.matrix(n, n, sigma=sigma)
    h = netsor.tanh(W @ g)
    p.readout(W.T @ h, sigma=1.0)
    q = netsor.Program()
    m = q.dim("n")
    q.readout(netsor.tanh(q.matrix(m, m, sigma=sigma) @ q.input(m, sigma=1.0)), sigma=1.0)
    X = np.random.default_rng(2).standard_normal((4, 3)) * [[0.5], [1.0], [1.5], [1.0]]
    G = X @ X.T / 3
    e = np.array([tanh_derivative_mean(sigma**2 * G[i, i]) for i in range(4)])
    K_q, E_q = netsor.limit(q, X).nngp(with_error=True)
    expected = sigma**2 * K_q + sigma**4 * np.outer(e, e) * G
    scale = np.sqrt(np.outer(np.diag(expected), np.diag(expected)))
    K, E = netsor.limit(p, X).nngp(with_error=True)
    reference_error = sigma**2 * E_q + 1e-11 * scale  # the first term's own bound, the midpoint rule's error
    assert np.all(np.abs(K - expected) <= E + reference_error)
    assert np.max(np.abs(K - expected) / scale) <= 1e-9 and np.max(E / scale) <= 1e-8
    lim = netsor.limit(p, X, rtol=1e-3, method="qmc")
    K_s, E_s = lim.nngp(with_error=True)
    assert isinstance(lim, netsor.SimulatedLimit)
    assert np.all(np.abs(K_s - expected) <= E_s)
    assert np.max(E_s / scale) <= 1e-3


@pytest.mark.parametrize("data", [True, False], ids=["with data", "no data"])
def test_layernorm_between_a_matrix_and_its_transpose_is_exact(data) -> None:
    """``y = Wᵀ LN(W g + b)``: in the limit LN(u) = u/√q_i (the mean of a centred vector is 0, its
    population variance ``q_i = σ² G_ii + σ_b²``), so ``Ż^y_i = σ² Z^g_i / √q_i`` — a NetsorK scalar in
    the coefficient of the correction, which the engine refused — and
    ``K_ij = (σ² (σ² G_ij + σ_b²) + σ⁴ G_ij) / √(q_i q_j)``. With ``tanh`` after the LayerNorm the
    correction is a derived per-input moment times the scalar; it agrees with the simulation."""
    sigma, sigma_b = 1.2, 0.5
    X = np.random.default_rng(0).standard_normal((3, 3)) * [[0.6], [1.0], [1.4]] if data else None
    G = X @ X.T / 3 if data else np.ones((1, 1))
    q = sigma**2 * np.diag(G) + sigma_b**2
    expected = (sigma**2 * (sigma**2 * G + sigma_b**2) + sigma**4 * G) / np.sqrt(np.outer(q, q))
    for act in (None, netsor.tanh):
        p = netsor.Program()
        n = p.dim("n")
        W = p.matrix(n, n, sigma=sigma)
        z = netsor.layernorm(W @ (p.input(n) if data else p.gaussian(n)) + p.bias(n, sigma=sigma_b))
        p.readout(W.T @ (z if act is None else act(z)))
        K, E = netsor.limit(p, X).nngp(with_error=True)
        scale = np.sqrt(np.outer(np.diag(K), np.diag(K)))
        assert np.max(E / scale) <= 1e-8
        if act is None:
            assert np.all(np.abs(K - expected) <= E + 1e-14 * scale)
        else:
            K_s, E_s = netsor.limit(p, X, method="qmc", rtol=2e-3).nngp(with_error=True)
            assert np.all(np.abs(K - K_s) <= E + E_s)


def test_non_gaussian_correction_by_simulation() -> None:
    """``y = W (Wᵀ tanh(g))``: ``Ż^y = σ² tanh(g)`` (a nonlinear vector), so
    ``Var y = 2σ⁴ E tanh(g)²`` and ``Cov(y, g) = σ² s² E tanh'(g)`` for ``g ~ N(0, s²)``."""
    sigma, s = 1.2, 0.8
    p = netsor.Program()
    n = p.dim("n")
    g = p.gaussian(n, sigma=s)
    W = p.matrix(n, n, sigma=sigma)
    y = W @ (W.T @ netsor.tanh(g))
    p.readout(y, sigma=1.0)
    t = np.linspace(-14, 14, 400001) * s
    weight = np.exp(-t**2 / (2 * s**2)) / np.sqrt(2 * np.pi * s**2) * (28 * s / 400000)
    lim = netsor.limit(p, method="qmc", rtol=1e-3)
    var, var_err = lim.cov(y, with_error=True)
    cross, cross_err = lim.cov(y, g, with_error=True)
    assert abs(var[0, 0] - 2 * sigma**4 * np.sum(weight * np.tanh(t) ** 2)) <= var_err[0, 0]
    assert abs(cross[0, 0] - sigma**2 * s**2 * tanh_derivative_mean(s**2)) <= cross_err[0, 0]


@pytest.mark.parametrize("act, sigma_w, sigma_b", [
    ("tanh", 1.3, 0.2), pytest.param("relu", 1.4, 0.1, marks=pytest.mark.slow)])
def test_jacobian_moments_of_a_nonlinear_mlp_by_the_master_theorem(act: str, sigma_w: float,
                                                                     sigma_b: float) -> None:
    """``(JᵀJ)^j v`` of a depth-2 MLP (W_l used both ways with vectors that depend on them through
    φ'(g_l)): the simulated limit's Hankel matrix equals the moments m₁…m₄ that the Free
    Independence Principle gives (``netsor.matrixlaws.jacobian_spectrum``, S-transforms) within
    its bounds; no code of either knows the other."""
    p = netsor.zoo.jacobian_moments(2, 2, act, sigma_w, sigma_b, q0=1.0)
    lim = netsor.limit(p, rtol=1e-2)  # auto: the engine refuses the non-Gaussian Ż, so the simulation
    assert isinstance(lim, netsor.SimulatedLimit)
    K, E = lim.nngp(with_error=True)
    m = netsor.matrixlaws.jacobian_spectrum(act, 2, sigma_w, sigma_b, q0=1.0).moments(4)
    hankel = np.array([[m[i + j - 1] if i + j else 1.0 for j in range(3)] for i in range(3)])
    assert np.all(np.abs(K - hankel) <= E)
    assert np.max(E / np.sqrt(np.outer(np.diag(hankel), np.diag(hankel)))) <= 1e-2


# ---- refusals ----------------------------------------------------------------------------------------
def test_transposes_that_do_not_chain() -> None:
    p = netsor.Program()
    n, m = p.dim("n"), p.dim("m", ratio=2.0)
    W = p.matrix(n, m)
    with pytest.raises(netsor.DimensionError, match=r"W0.T maps dim 'n' to 'm'.*write W0 @ b"):
        W.T @ p.gaussian(m)
    with pytest.raises(netsor.DimensionError, match=r"write W0.T @ b"):
        W @ p.gaussian(n)


@pytest.mark.parametrize("ratio", [0.0, -1.0, float("nan")])
def test_bad_ratio(ratio: float) -> None:
    with pytest.raises(netsor.HyperParameterError, match="ratio"):
        netsor.Program().dim("m", ratio=ratio)


def test_ratio_with_no_coordinates() -> None:
    p = netsor.Program()
    p.readout(p.gaussian(p.dim("m", ratio=0.01)))
    with pytest.raises(netsor.HyperParameterError, match="0 coordinates; use a width of at least 51"):
        netsor.sample(p, width=10)


def test_unsupported_transposed_programs() -> None:
    # a correction that is a nonlinear vector: not Gaussian
    r = netsor.Program()
    n = r.dim("n")
    W = r.matrix(n, n)
    r.readout(W @ (W.T @ netsor.tanh(r.gaussian(n))))
    with pytest.raises(netsor.UnsupportedError, match="not Gaussian"):
        netsor.limit(r).cov(r.outputs[0][1][0])


@settings(max_examples=12, deadline=None, derandomize=True, database=None)
@given(act=st.sampled_from(["tanh", "erf", "relu", "identity"]), depth=st.integers(1, 3),
       sigma_w=st.floats(0.8, 1.6), sigma_b=st.floats(0.0, 0.4), q0=st.floats(0.5, 2.0))
def test_random_jacobian_moment_programs_meet_free_probability(act, depth, sigma_w, sigma_b, q0):
    """The Jacobian-moment program over random activations, depths, σ's and input variances: its limit
    (the simulation at rtol 1e-2, or the engine where Ż is Gaussian: the linear network) holds the
    moments m₁…m₄ that ``netsor.matrixlaws.jacobian_spectrum`` derives by free probability, within its
    bounds."""
    p = netsor.zoo.jacobian_moments(2, depth, act, sigma_w, sigma_b, q0=q0)
    K, E = netsor.limit(p, rtol=1e-2).nngp(with_error=True)
    m = netsor.matrixlaws.jacobian_spectrum(act, depth, sigma_w, sigma_b, q0=q0).moments(4)
    hankel = np.array([[m[i + j - 1] if i + j else 1.0 for j in range(3)] for i in range(3)])
    assert np.all(np.abs(K - hankel) <= E + 1e-10 * np.abs(hankel))
