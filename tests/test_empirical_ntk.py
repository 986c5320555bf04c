"""The finite-width NTK (exact reverse mode through the finite interpreter) and its convergence."""

from __future__ import annotations

import numpy as np
import pytest
from programs import weight_sharing

import netsor
from netsor import ProgramError
from netsor.stats.convergence import Study


def test_linear_network_ntk_is_its_conditional_kernel_plus_the_input_layer_term() -> None:
    """``y = σ_v v̂ᵀ U x/√n``: Θ = σ_v² ⟨Ux, Ux'⟩/n + σ_u² σ_v² (|v̂|²/n) ⟨x, x'⟩/d exactly. The first
    part is the dense sampler's conditional kernel (same seed, same draws); the rest must be a
    multiple of XXᵀ/d, with factor σ_u²σ_v² χ²_n/n."""
    p = netsor.Program()
    n = p.dim("n")
    p.readout(p.input(n, sigma=1.3), sigma=0.7)
    X = np.random.default_rng(0).standard_normal((4, 3))
    theta = netsor.empirical_ntk(p, X, width=400, samples=3, seed=9)
    khat = netsor.run_finite(p, X, width=400, samples=3, seed=9, method="dense", return_kernels=True).kernels
    gram = X @ X.T / 3
    for t, k in zip(theta, khat, strict=True):
        rest = t - k
        factor = np.sum(rest * gram) / np.sum(gram * gram)
        assert np.allclose(rest, factor * gram, rtol=0, atol=1e-12)
        assert abs(factor / (1.3**2 * 0.7**2) - 1) < 5 * np.sqrt(2 / 400)  # χ²_n / n: sd √(2/n)


def test_cross_kernel_is_a_block_of_the_joint_kernel_and_each_network_is_psd() -> None:
    prog = weight_sharing().p
    rng = np.random.default_rng(1)
    X, X2 = rng.standard_normal((3, 4)), rng.standard_normal((2, 4))
    joint = netsor.empirical_ntk(prog, np.concatenate([X, X2]), width=64, samples=4, seed=2)
    cross = netsor.empirical_ntk(prog, X, X2, width=64, samples=4, seed=2)
    assert np.allclose(cross, joint[:, :3, 3:], rtol=1e-12, atol=1e-12)
    assert np.allclose(joint, joint.transpose(0, 2, 1), rtol=1e-12, atol=1e-12)
    assert min(np.linalg.eigvalsh(t).min() for t in joint) >= -1e-10 * np.abs(joint).max()


def test_gradients_flow_through_netsork_scalars() -> None:
    """LayerNorm at finite width: the empirical NTK converges to the limit (whose backward pass
    holds the scalars fixed) — the gradient through μ and σ is an O(1/√n) correction. At n = 1024 the
    O(1/n) bias (~1e-3 of Θ) is far below the standard error of 30 networks (~2e-2 of Θ)."""
    p = netsor.zoo.layernorm_mlp(2, "erf", 1.2, 0.1)
    X = np.random.default_rng(2).standard_normal((3, 4))
    limit = netsor.ntk(p, X)
    theta = netsor.empirical_ntk(p, X, width=1024, samples=30, seed=3)
    se = theta.std(axis=0, ddof=1) / np.sqrt(len(theta))
    assert np.all(np.abs(theta.mean(axis=0) - limit) <= 4 * se)


def transposed_program(sigma: float = 1.3) -> netsor.Program:
    """``y = uᵀ Wᵀ tanh(W v)/√n`` of a Gaussian ``v`` (no data): the forward pass uses ``Wᵀ``."""
    p = netsor.Program()
    n = p.dim("n")
    W = p.matrix(n, n, sigma=sigma)
    p.readout(W.T @ netsor.tanh(W @ p.gaussian(n)))
    return p


def test_gradient_independence_is_wrong_with_transposes() -> None:
    """Finite networks (exact gradients, width 256, 200 networks) reject the NTK of gradient
    independence (Θ = 4.54) by more than 10 standard errors; the default backward pass of a
    transposed program uses the real transposes."""
    p = transposed_program()
    theta = netsor.empirical_ntk(p, width=256, samples=200, seed=1)[:, 0, 0]
    se = theta.std(ddof=1) / np.sqrt(len(theta))
    independent = netsor.ntk(p, backward="independent")[0, 0]
    assert abs(theta.mean() - independent) > 10 * se
    assert netsor.ntk(p)[0, 0] == netsor.ntk(p, backward="exact")[0, 0] != independent


def transposed_program_with_a_scalar(sigma: float = 1.2) -> netsor.Program:
    """``y = uᵀ Wᵀ (θ tanh(h))/√n`` with ``h = W g``, ``θ = ⟨tanh h, tanh h⟩/n`` (no data): transposes
    and a NetsorK scalar in one forward pass."""
    p = netsor.Program()
    n = p.dim("n")
    W = p.matrix(n, n, sigma=sigma)
    t = netsor.tanh(W @ p.gaussian(n))
    p.readout(W.T @ (netsor.inner(t, t) * t))
    return p


def scalar_program_kernels(sigma: float) -> tuple[float, float]:
    """NNGP and NTK of :func:`transposed_program_with_a_scalar` by hand, with scipy's quadrature:
    with ``θ = E tanh²(σZ)`` (so ``E tanh' = 1 − θ``), ``Z^x = Ẑ + σ² θ (1 − θ) Z^g``, ``Var Ẑ = σ² θ³``,
    so NNGP = ``σ² θ³ + σ⁴ θ² (1 − θ)²``; the NTK adds ``σ² (E δh² + θ³)`` (both uses of ``W``; their
    cross term has ``E[g v] = 0``), ``E δg² = σ² E δh² + σ⁴ θ² (1 − θ)²`` (the bias ``g``) with
    ``E δh² = σ² θ² E tanh'(σZ)²``, the scalar held (its gradient vanishes in the limit)."""
    from scipy import integrate, stats

    def expect(f):
        return integrate.quad(lambda z: f(sigma * z) * stats.norm.pdf(z), -np.inf, np.inf, epsabs=1e-15)[0]

    th = expect(lambda x: np.tanh(x) ** 2)
    d2 = expect(lambda x: (1 - np.tanh(x) ** 2) ** 2)
    nngp = sigma**2 * th**3 + sigma**4 * th**2 * (1 - th) ** 2
    dh2 = sigma**2 * th**2 * d2
    return nngp, nngp + sigma**2 * (dh2 + th**3) + sigma**2 * dh2 + sigma**4 * th**2 * (1 - th) ** 2


def test_transposes_with_a_netsork_scalar() -> None:
    """The limit (exact transposes, the scalar held) equals the hand derivation to 1e-12, the
    simulation agrees within its bound, and 40 finite networks of width 1024 (exact gradients,
    through the scalar too) agree within 4 standard errors."""
    p = transposed_program_with_a_scalar(1.2)
    nngp, ntk = scalar_program_kernels(1.2)
    k = netsor.kernel(p)
    assert k.nngp[0, 0] == pytest.approx(nngp, rel=1e-12) and k.ntk[0, 0] == pytest.approx(ntk, rel=1e-12)
    assert k.ntk_error[0, 0] <= 1e-8 * ntk
    simulated = netsor.kernel(p, method="qmc", rtol=1e-3)
    assert abs(simulated.ntk[0, 0] - ntk) <= simulated.ntk_error[0, 0]
    theta = netsor.empirical_ntk(p, width=1024, samples=40, seed=6)[:, 0, 0]
    assert abs(theta.mean() - ntk) <= 4 * theta.std(ddof=1) / np.sqrt(len(theta))


@pytest.mark.parametrize("scale", [1.0, 0.1])
def test_a_linear_network_scaled_by_moments_has_three_equal_ntk_terms(scale: float) -> None:
    """``y = vᵀ θ₃ W₀ᵀ (θ₂ θ₁ U x)/√m`` with moments ``θ = ⟨tanh² g⟩`` held: U, W₀ and v each
    contribute the NNGP, so Θ = 3 K exactly — also when the moments make the kernels 1e-24 (scale
    1) or 1e-77 (scale 0.1), where an absolute zero-variance threshold used to drop the U term and
    a zero envelope made the bound NaN."""
    p = netsor.Program()
    n, m = p.dim("n"), p.dim("m", ratio=0.5)
    W = p.matrix(n, m, sigma=0.8)
    g = p.input(n)
    for _ in range(2):
        g = netsor.moment(lambda x: np.tanh(x) ** 2, g) * g
    g = W.T @ g
    p.readout(netsor.moment(lambda x: np.tanh(x) ** 2, g) * g)
    X = scale * np.random.default_rng(0).standard_normal((2, 3))
    for backward in ("exact", "independent"):
        k = netsor.kernel(p, X, backward=backward)
        assert 0 < k.nngp.max() < 1e-20
        np.testing.assert_allclose(k.ntk, 3 * k.nngp, rtol=1e-12)
        assert np.all(k.ntk_error <= 1e-8 * np.abs(k.ntk).max())


def test_transposes_with_layernorm_by_the_engine_and_by_simulation() -> None:
    """``y = uᵀ Wᵀ tanh(LN(W g))/√n``: LayerNorm's 1/σ is a NetsorK scalar in the coefficients of a
    vector with Netsor⊤ corrections (the engine refused it; now each correction's coefficient is a
    scalar of the limit). The engine's NTK and the simulation's agree within their bounds, and both
    with 40 finite networks of width 1024 within the bound plus 4 standard errors."""
    p = netsor.Program()
    n = p.dim("n")
    W = p.matrix(n, n, sigma=1.1)
    p.readout(W.T @ netsor.tanh(netsor.layernorm(W @ p.gaussian(n))))
    engine = netsor.kernel(p, get="ntk")
    assert engine.method == "expectations" and engine.ntk_error[0, 0] <= 1e-8 * engine.ntk[0, 0]
    simulated = netsor.kernel(p, get="ntk", method="qmc", rtol=1e-3)
    assert abs(engine.ntk[0, 0] - simulated.ntk[0, 0]) <= engine.ntk_error[0, 0] + simulated.ntk_error[0, 0]
    theta = netsor.empirical_ntk(p, width=1024, samples=40, seed=7)[:, 0, 0]
    se = theta.std(ddof=1) / np.sqrt(len(theta))
    for limit in (engine, simulated):
        assert abs(theta.mean() - limit.ntk[0, 0]) <= limit.ntk_error[0, 0] + 4 * se


def hand_written_ntk(ratio: float, sigma: float, width: int, samples: int, seed: int) -> np.ndarray:
    """Θ of ``y = uᵀ Wᵀ tanh(W g)/√m``, ``W : n × m`` (``m = ratio·n``, entries N(0, σ²/m)), ``g ~ N(0, I_m)``
    trained like a bias: ``|∂y/∂Ŵ|² + |x|²/m + |∂y/∂g|²`` by hand-written numpy back-propagation."""
    rng = np.random.default_rng(seed)
    n, m = width, round(ratio * width)
    out = np.empty(samples)
    for s in range(samples):
        W = rng.standard_normal((n, m)) * sigma / np.sqrt(m)
        g, u = rng.standard_normal(m), rng.standard_normal(m)
        h = np.tanh(W @ g)
        x = W.T @ h
        dx = u / np.sqrt(m)
        da = (1 - h**2) * (W @ dx)
        dW = np.outer(da, g) + np.outer(h, dx)
        out[s] = sigma**2 / m * np.sum(dW**2) + x @ x / m + np.sum((W.T @ da) ** 2)
    return out


@pytest.mark.parametrize("ratio", [2.0, 0.5])
def test_exact_transposed_ntk_with_rectangular_matrices(ratio: float) -> None:
    """``W : n × m`` with ``m = ratio·n``: the backward ``Wᵀ δg`` carries √(n_h/n_g) and a transposed
    use's weight gradient √(n_out/n_in) per factor. The limit agrees with 40 hand-written networks
    of width 1024 (numpy back-propagation, no netsor) within 4 standard errors, and with
    ``empirical_ntk`` of the same program; the simulation agrees within its bound."""
    p = netsor.Program()
    n, m = p.dim("n"), p.dim("m", ratio=ratio)
    W = p.matrix(n, m, sigma=1.2)
    p.readout(W.T @ netsor.tanh(W @ p.gaussian(m)))
    limit = netsor.ntk(p)[0, 0]
    for theta in (hand_written_ntk(ratio, 1.2, 1024, 40, 4), netsor.empirical_ntk(p, width=1024, samples=40,
                                                                                    seed=5)[:, 0, 0]):
        assert abs(theta.mean() - limit) <= 4 * theta.std(ddof=1) / np.sqrt(len(theta))
    simulated = netsor.kernel(p, get="ntk", method="qmc", rtol=1e-3)
    assert abs(simulated.ntk[0, 0] - limit) <= simulated.ntk_error[0, 0]


@pytest.mark.slow
@pytest.mark.parametrize("with_scalar", [False, True])
def test_exact_transposed_ntk_is_the_limit_of_finite_networks(with_scalar: bool) -> None:
    """Widths 256 … 1024, 100 networks each, extrapolated in 1/n: within 4 standard errors (with a
    scalar, its finite-width gradient included, the limit holding it)."""
    p = transposed_program_with_a_scalar() if with_scalar else transposed_program()
    a, se = extrapolated(p, None, [256, 512, 1024], 100)
    assert np.all(np.abs(a - netsor.ntk(p)) <= 4 * se)


def test_bad_input() -> None:
    p = netsor.Program()
    n = p.dim("n")
    p.input(n)
    with pytest.raises(ProgramError, match="no outputs"):
        netsor.empirical_ntk(p, np.ones((2, 3)))
    with pytest.raises(ProgramError, match="memory_budget"):
        netsor.empirical_ntk(netsor.zoo.mlp(2), np.ones((2, 3)), width=4096, memory_budget=2**20)


def extrapolated(program: netsor.Program, X: np.ndarray | None, widths: list[int],
                 samples: int) -> tuple[np.ndarray, ...]:
    """Weighted least squares of the mean empirical NTK on ``a + c/n`` per entry: (a, its standard error)."""
    means, ses = [], []
    for i, w in enumerate(widths):
        theta = netsor.empirical_ntk(program, X, width=w, samples=samples, seed=100 + i)
        means.append(theta.mean(axis=0))
        ses.append(theta.std(axis=0, ddof=1) / np.sqrt(samples))
    A = np.stack([np.ones(len(widths)), 1.0 / np.array(widths)], axis=1)
    m, s = np.stack(means), np.stack(ses)
    weights = 1.0 / s**2
    a = np.empty(m.shape[1:])
    se = np.empty(m.shape[1:])
    for idx in np.ndindex(*m.shape[1:]):
        wts = weights[(slice(None), *idx)]
        normal = A.T @ (A * wts[:, None])
        cov = np.linalg.inv(normal)
        coef = cov @ (A.T @ (wts * m[(slice(None), *idx)]))
        a[idx], se[idx] = coef[0], np.sqrt(cov[0, 0])
    return a, se


@pytest.mark.slow
@pytest.mark.parametrize("name", ["rnn", "shared"])
def test_empirical_ntk_extrapolates_to_the_limit(name: str) -> None:
    """Widths 256 … 2048, 24 networks each, extrapolated in 1/n: within 4 standard errors."""
    rng = np.random.default_rng(5)
    if name == "rnn":
        program, X = netsor.zoo.rnn(3, "tanh", 1.1, 0.9, 0.2), rng.standard_normal((2, 3, 4))
    else:
        program, X = weight_sharing().p, rng.standard_normal((3, 4))
    limit = netsor.ntk(program, X)
    a, se = extrapolated(program, X, [256, 512, 1024, 2048], 24)
    assert np.all(np.abs(a - limit) <= 4 * se)


@pytest.mark.slow
def test_ntk_of_dims_with_ratios_is_the_limit_of_finite_networks() -> None:
    """Non-square matrices (a dim of ratio 0.5): gradient independence with each backward copy of
    fan-in ``n_out`` needs no per-dim factor; widths 256 … 1024, 40 networks each, extrapolated in
    1/n, within 4 standard errors. The exact backward pass (real transposes, with the √(n_h/n_g)
    factors; simulated — the engine does not take nonlinear transposes with data) gives the same
    NTK within its bound, as it must without transposes in the forward pass."""
    p = netsor.Program()
    n, m = p.dim("n"), p.dim("m", ratio=0.5)
    g1 = p.input(n, sigma=1.2, bias=0.2)
    g2 = p.matrix(m, n, sigma=1.4) @ netsor.relu(g1) + p.bias(m, 0.3)
    p.readout(netsor.relu(p.matrix(n, m, sigma=0.9) @ netsor.erf(g2)), sigma=1.1, bias=0.1)
    X = np.random.default_rng(0).standard_normal((3, 4))
    a, se = extrapolated(p, X, [256, 512, 1024], 40)
    assert np.all(np.abs(a - netsor.ntk(p, X)) <= 4 * se)
    exact = netsor.kernel(p, X, get="ntk", backward="exact", rtol=1e-2)
    assert exact.method == "qmc"
    assert np.all(np.abs(exact.ntk - netsor.ntk(p, X)) <= exact.ntk_error)


@pytest.mark.slow
def test_ntk_deviation_decays_like_inverse_square_root_width(tmp_path) -> None:
    study = Study(netsor.zoo.rnn(3, "tanh", 1.1, 0.9, 0.2), np.random.default_rng(6).standard_normal((2, 3, 4)),
                  metric="ntk", samples=24, replicates=4, seed=0)
    summary = study.run([64, 128, 256, 512, 1024], tmp_path / "ntk.jsonl", progress=False)
    low, high = summary.slope_ci
    assert low < -0.5 < high or abs(summary.slope + 0.5) < 0.1
    assert high - low < 0.3


def test_the_derivative_of_an_opaque_function_beside_a_jump_is_its_derivative_almost_everywhere() -> None:
    """Finite-width gradients of an opaque function take its derivative by central differences (step h = 1e-6).
    Where the stencil straddled a jump it was a spike of height jump/2h (0.3/2e-6 = 1.5e5): a network with one
    coordinate there (chance ~1e-6 per coordinate) had an empirical NTK ~1e10 off. It is now the difference beside
    the stencil on the far side from the jump, within ~2h·|f''| of f' (as an activation and as a NonLin's
    partial derivative, of one and of two arguments)."""
    jump_at = 0.2
    x = jump_at + np.array([-2.5e-6, -1.5e-6, -5e-7, -1e-9, 0.0, 1e-9, 5e-7, 1.5e-6, 2.5e-6, -0.7, 1.3])
    exact = 1.0 / np.cosh(x) ** 2  # of 0.3·1{x > 0.2} + tanh x, almost everywhere
    tolerance = 4e-6  # 2h·max|tanh''| ≈ 1.5e-6, and rounding
    activation = netsor.activation(lambda t: 0.3 * (np.asarray(t) > jump_at) + np.tanh(np.asarray(t)))
    np.testing.assert_allclose(activation.deriv(x), exact, rtol=0, atol=tolerance)
    p = netsor.Program()
    n = p.dim("n")
    u, v = p.input(n), p.input(n)
    one = p.line_of(netsor.nonlin(lambda t: 0.3 * (np.asarray(t) > jump_at) + np.tanh(np.asarray(t)), u)).expr
    np.testing.assert_allclose(one.derivative({u: x}, u), exact, rtol=0, atol=1.3 * tolerance)
    two = p.line_of(netsor.nonlin(lambda s, t: np.asarray(s) * (np.asarray(t) > jump_at) + np.tanh(np.asarray(t)),
                                  u, v)).expr
    at = {u: np.full_like(x, 2.0), v: x}
    np.testing.assert_allclose(two.derivative(at, v), exact, rtol=0, atol=1.3 * tolerance)
    np.testing.assert_allclose(two.derivative(at, u), (x > jump_at).astype(float), rtol=0, atol=1e-8)


def test_a_where_whose_branch_is_not_finite_where_unselected_has_the_ntk_of_finite_networks() -> None:
    """``where(v > 0, log1p(v), tanh(u))`` under a hidden layer: log1p of the unselected ``v ≤ −1`` was NaN, in the
    gradients of finite networks as in the limit (both refused the function). The limit's NTK at rtol 1e-6 and
    the mean empirical NTK (reverse mode through the finite interpreter, widths 256 and 512, 150 networks each,
    extrapolated in 1/n) agree within 4 standard errors plus the limit's bound."""
    p = netsor.Program()
    n = p.dim("n")
    a, b = p.input(n), p.input(n, sigma=0.8)
    h = netsor.nonlin(lambda u, v: np.where(v > 0, np.log1p(v), np.tanh(u)), a, b)
    p.readout(p.matrix(n, n, sigma=1.2) @ h)
    X = np.random.default_rng(0).standard_normal((3, 4))
    k = netsor.kernel(p, X, get="ntk", rtol=1e-6)
    a_hat, se = extrapolated(p, X, [256, 512], 150)
    assert np.all(np.isfinite(a_hat))
    assert np.all(np.abs(a_hat - k.ntk) <= 4 * se + k.ntk_error)


def test_a_finite_ntk_through_a_derivative_infinite_where_its_argument_is_flat_is_finite() -> None:
    """√relu(g): the chain rule's ``sqrt'(relu g)·step(g)`` is ``inf·0`` wherever g < 0, and the finite network's NTK
    was refused as "not finite (overflow)". Where the argument does not move, the composite does not either: the
    derivative is 0 there. The NTK (finite at finite width; infinite in the limit, which refuses it) equals that of
    the same function written with a selection, ``np.where(g > 0, √|g|, 0)``, draw by draw (the same program shape,
    the same seed), and is finite and positive on its diagonal."""
    X = np.random.default_rng(0).standard_normal((4, 3))
    composed = netsor.zoo.mlp(2, lambda x: np.sqrt(np.maximum(x, 0.0)), 1.0, 0.1)
    selected = netsor.zoo.mlp(2, lambda x: np.where(x > 0, np.sqrt(np.abs(x)), 0.0), 1.0, 0.1)
    a = netsor.empirical_ntk(composed, X, width=64, samples=3, seed=1)
    b = netsor.empirical_ntk(selected, X, width=64, samples=3, seed=1)
    assert np.all(np.isfinite(a)) and np.all(np.diagonal(a, axis1=1, axis2=2) > 0)
    np.testing.assert_allclose(a, b, rtol=1e-12, atol=0)
