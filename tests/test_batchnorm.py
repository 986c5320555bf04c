"""BatchNorm across a batch: the expression node, the exact limit of homogeneous activations
(:mod:`netsor.gaussian.batchnorm`), ``zoo.batchnorm_mlp`` against finite networks, and bad inputs."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import integrate

import netsor
from netsor import NumericalError, UnsupportedError
from netsor.activations import Activation, abs_, identity, relu, step
from netsor.cli import main
from netsor.gaussian import joint
from netsor.gaussian.batchnorm import batchnorm_cross_expectation, batchnorm_expectation

PAIRS = [(relu, relu), (relu, identity), (step, step)]


def _random_cov(rng: np.random.Generator, B: int) -> np.ndarray:
    A = rng.standard_normal((B, B + 2))
    return A @ A.T / (B + 2) + 0.2 * np.ones((B, B))  # a common part: BatchNorm must remove it


def _normalised(g: np.ndarray) -> np.ndarray:
    """BatchNorm of samples g (S, B) across the last axis (population variance)."""
    w = g - g.mean(axis=1, keepdims=True)
    return w / np.sqrt(np.mean(w * w, axis=1, keepdims=True))


def _angular_reference(phi: Activation, psi: Activation, b: int, c: int, cov: np.ndarray) -> tuple[float, float]:
    """``E[φ(u_b) ψ(u_c)]`` for B = 3 by the angle of the centred batch: ``w = P g`` lies in the plane
    ⟂ 1 (orthonormal basis Q), ``w = Q z`` with ``z ~ N(0, A)``, ``A = Qᵀ Σ Q``, and ``u = √3 Q z/‖z‖``
    depends only on the direction ``e(θ)`` of ``z``, whose density is the angular central Gaussian
    ``det(A)^{−1/2} / (2π eᵀA⁻¹e)``. Integrated by ``quad`` with breakpoints where ``u_b`` or ``u_c``
    changes sign (the kinks of relu and step). Returns quad's value and its error estimate."""
    Q = np.linalg.qr(np.column_stack([np.ones(3), np.eye(3)[:, :2]]))[0][:, 1:]
    A = Q.T @ cov @ Q
    A_inv = np.linalg.inv(A)
    norm = 1.0 / (2 * np.pi * np.sqrt(np.linalg.det(A)))

    def integrand(theta: float) -> float:
        e = np.array([np.cos(theta), np.sin(theta)])
        u = np.sqrt(3.0) * (Q @ e)
        return float(phi.fn(u[b:b + 1])[0] * psi.fn(u[c:c + 1])[0]) * norm / float(e @ A_inv @ e)

    kinks = sorted({float((np.arctan2(-Q[i, 0], Q[i, 1]) + k * np.pi) % (2 * np.pi)) for i in (b, c) for k in (0, 1)})
    value, err = integrate.quad(integrand, 0.0, 2 * np.pi, points=kinks, epsabs=1e-14, epsrel=1e-13, limit=200)
    return value, err


# ------------------------------------------------------------------ the expression node
def test_expression_node_values_and_derivative() -> None:
    p = netsor.Program()
    n = p.dim("n")
    gs = [p.input(n) for _ in range(4)]
    us = netsor.batchnorm(gs)
    exprs = [p.line_of(u).expr for u in us]
    rng = np.random.default_rng(0)
    values = {g: rng.standard_normal(5) for g in gs}
    g = np.stack([values[v] for v in gs], axis=1)
    u = np.stack([e.evaluate(values) for e in exprs], axis=1)
    np.testing.assert_allclose(u, _normalised(g), rtol=1e-14, atol=1e-14)
    assert exprs[0].smooth and exprs[0].continuous and not exprs[0].kink_planes() and not exprs[0].hidden_kinks
    assert exprs[0].key != exprs[1].key and "batchnorm[1]" in exprs[1].describe()
    # the analytic derivative against central differences
    h = 1e-6
    for v in gs:
        up = {**values, v: values[v] + h}
        down = {**values, v: values[v] - h}
        for e in exprs:
            fd = (e.evaluate(up) - e.evaluate(down)) / (2 * h)
            np.testing.assert_allclose(e.derivative(values, v), fd, rtol=1e-6, atol=1e-7)
    mapped = exprs[2].map_vectors(lambda v: gs[(v.index - gs[0].index + 1) % 4])
    assert mapped.describe() != exprs[2].describe() and mapped.index == 2


# ------------------------------------------------------------------ exact expectations
@pytest.mark.parametrize("phi, psi", PAIRS, ids=lambda a: a.name)
def test_three_examples_equal_the_angular_integral(phi: Activation, psi: Activation) -> None:
    """B = 3 against an independent route (the angle of the centred batch): 1e-10, and the
    reported bound covers the difference (up to quad's own error estimate)."""
    rng = np.random.default_rng(3)
    for _ in range(3):
        cov = _random_cov(rng, 3)
        for b, c in ((0, 0), (0, 1), (2, 1)):
            value, err = batchnorm_expectation(phi, psi, b, c, cov[None], rtol=1e-12)
            reference, quad_err = _angular_reference(phi, psi, b, c, cov)
            assert abs(value[0] - reference) <= 1e-10
            assert abs(value[0] - reference) <= err[0] + quad_err + 4e-16


def test_three_example_network_kernel_equals_the_angular_integral() -> None:
    """The same through a program: relu(BN(U x_b)), one batch X (1, 3, d); the kernel's bound covers
    the difference to the reference."""
    rng = np.random.default_rng(4)
    X = rng.standard_normal((1, 3, 4))
    p = netsor.zoo.batchnorm_mlp(1, batch=3)
    K, E = netsor.limit(p, X).nngp(with_error=True)
    cov = X[0] @ X[0].T / 4
    for b in range(3):
        for c in range(3):
            reference, quad_err = _angular_reference(relu, relu, b, c, cov)
            assert abs(K[b, c] - reference) <= min(1e-10, E[b, c] + quad_err + 4e-16)


def test_four_examples_against_monte_carlo_and_invariants() -> None:
    """B = 4: seeded Monte Carlo with 4·10⁵ batches, within 5 standard errors (the CLT: a false
    alarm has probability ~6e-7 per entry), and exact invariants of BatchNorm to 1e-11:
    Σ_b u_b² = B gives Σ_b E|u_b|² = B and Σ_b E relu(u_b)² = B/2 (g → −g symmetry), and
    Σ_b u_b = 0 gives Σ_b E[u_b u_c] = 0 and Σ_b E u_b = 0."""
    rng = np.random.default_rng(5)
    cov = _random_cov(rng, 4)
    u = _normalised(rng.multivariate_normal(np.zeros(4), cov, size=400_000))
    for phi, psi in (*PAIRS, (abs_, abs_)):
        for b, c in ((0, 0), (1, 3), (2, 0)):
            value = batchnorm_expectation(phi, psi, b, c, cov[None], rtol=1e-12)[0][0]
            x = phi.fn(u[:, b]) * psi.fn(u[:, c])
            assert abs(value - x.mean()) <= 5 * x.std() / np.sqrt(x.size)
    d_cov = np.full((1, 4, 4), 1e-15)

    def total(phi: Activation, psi: Activation | None, c: int | None = None) -> float:
        return sum(batchnorm_expectation(phi, psi, b, b if c is None else c, cov[None], d_cov)[0][0]
                   for b in range(4))

    assert abs(total(abs_, abs_) - 4) <= 1e-11
    assert abs(total(relu, relu) - 2) <= 1e-11
    assert abs(total(identity, identity, 1)) <= 1e-11
    assert abs(total(identity, None)) <= 1e-11


def test_kernel_errors_propagate_from_the_covariance() -> None:
    """The bound grows with the error bound of Σ (first order) and covers a perturbation of that size."""
    cov = _random_cov(np.random.default_rng(6), 4)[None]
    v0, e0 = batchnorm_expectation(relu, relu, 0, 1, cov)
    delta = 1e-7
    v1, e1 = batchnorm_expectation(relu, relu, 0, 1, cov, np.full(cov.shape, delta))
    # the value is the unperturbed Σ's (computed in a stack with the perturbed ones: equal up to
    # rounding of the batched sums, far inside its own numerical bound)
    assert abs(v1[0] - v0[0]) <= 1e-14 * abs(v0[0]) + e0[0] and e1[0] > 100 * e0[0]
    sign = np.sign(np.random.default_rng(7).standard_normal((4, 4)))
    moved = batchnorm_expectation(relu, relu, 0, 1, cov + delta * (sign + sign.T) / 2)[0]
    assert abs(moved[0] - v0[0]) <= e1[0]


# ------------------------------------------------------------------ the zoo network
@pytest.mark.parametrize("depth", [1, 2, 3])
def test_batchnorm_mlp_matches_finite_networks(depth: int) -> None:
    """2000 seeded networks of width 1024: the output covariance, and the mean of the per-network
    kernels (1/n) h_b·h_c (far less noisy), within 4 standard errors of the limit (the finite-width
    bias is O(1/n): |mean − K| measured at most 1.2/n here, inside the 4-standard-error band)."""
    X = np.random.default_rng(8).standard_normal((1, 4, 5))
    p = netsor.zoo.batchnorm_mlp(depth, sigma_b=0.3)
    K = netsor.nngp(p, X)
    run = netsor.run_finite(p, X, width=1024, samples=2000, seed=depth, return_kernels=True)
    Y = run.outputs.reshape(2000, 4)
    products = Y[:, :, None] * Y[:, None, :]
    se = products.std(axis=0, ddof=1) / np.sqrt(2000)
    assert np.all(np.abs(products.mean(axis=0) - K) <= 4 * se)
    kernels = run.kernels
    se_k = kernels.std(axis=0, ddof=1) / np.sqrt(len(kernels))
    assert np.all(np.abs(kernels.mean(axis=0) - K) <= 4 * se_k)


def test_batchnorm_mlp_kernel_is_exact_and_fast(monkeypatch: pytest.MonkeyPatch) -> None:
    """B = 4, depth 3: the default tolerance is met with bounds far below it, the invariant
    Σ_b K_bb = B/2 of relu holds to the bounds, and the multi-dimensional engine (QMC) is never called."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the multi-dimensional engine was called")

    for name in ("point_expectation", "pair_expectation", "point_moments"):
        monkeypatch.setattr(joint, name, refuse)
    X = np.random.default_rng(9).standard_normal((1, 4, 5))
    lim = netsor.limit(netsor.zoo.batchnorm_mlp(3, sigma_b=0.5), X)
    K, E = lim.nngp(with_error=True)
    assert lim.stderr == 0.0 and E.max() <= 1e-9 * np.max(np.diag(K))
    assert abs(np.trace(K) - 2.0) <= np.trace(E) + 1e-14
    assert np.linalg.eigvalsh(K).min() > 0


def test_cli_random_batch(capsys: pytest.CaptureFixture[str]) -> None:
    """``--random 1,5`` makes one batch (1, batch, 5) (the program reads ``batch`` steps)."""
    main(["kernel", "batchnorm_mlp", "--depth", "2", "--random", "1,5"])
    out = capsys.readouterr().out
    assert "inputs (1, 4, 5) -> NNGP kernel (4, 4)" in out


# ------------------------------------------------------------------ bad inputs
def test_equal_examples_in_a_batch_name_the_line() -> None:
    X = np.ones((1, 4, 3))
    with pytest.raises(NumericalError, match=r"h\d+ = relu\(batchnorm\[\d\]\(g\d+, .*no spread"):
        netsor.nngp(netsor.zoo.batchnorm_mlp(2), X)


def test_equal_examples_in_a_batch_are_refused_at_finite_width() -> None:
    """Finite networks normalised a batch of identical examples by its rounding-level spread and
    returned O(1) values that differed between identical examples (1.15 and −0.36); now the sampler
    and the empirical NTK say there is no spread. Two identical examples among four are fine."""
    p = netsor.zoo.batchnorm_mlp(1, batch=4)
    for run in (lambda X: netsor.sample(p, X, width=16, samples=2),
                lambda X: netsor.empirical_ntk(p, X, width=16, samples=2, seed=0)):
        with pytest.raises(NumericalError, match="no spread.*remove repeated examples"):
            run(np.ones((1, 4, 3)))
        X = np.concatenate([np.ones((1, 2, 3)), np.random.default_rng(0).standard_normal((1, 2, 3))], axis=1)
        out = run(X)
        assert np.all(np.isfinite(out))


# ------------------------------------------------------------------ two batches
CROSS_PAIRS = [(relu, relu), (relu, step), (step, relu), (abs_, relu), (identity, identity)]


def _joint_cov(rng: np.random.Generator, B: int) -> np.ndarray:
    A = rng.standard_normal((2 * B, 2 * B + 1))
    return A @ A.T / (2 * B + 1) + 0.3 * np.ones((2 * B, 2 * B))  # correlated batches with common parts


@pytest.mark.parametrize("phi, psi", CROSS_PAIRS, ids=lambda a: a.name)
def test_two_independent_batches_factorise(phi: Activation, psi: Activation) -> None:
    """Independent batches: E[φ(u_b) ψ(v_c)] = E φ(u_b) · E ψ(v_c), each a one-batch expectation (its own
    one-dimensional rule); the two-dimensional Laplace integral meets it within its bound, ≤ 1e-12."""
    rng = np.random.default_rng(20)
    B = 4
    cov = _joint_cov(rng, B)
    cov[:B, B:] = cov[B:, :B] = 0.0
    value, err = batchnorm_cross_expectation(phi, psi, cov[None], rtol=1e-12)
    means = [[batchnorm_expectation(act, None, b, b, block[None], rtol=1e-13)[0][0] for b in range(B)]
             for act, block in ((phi, cov[:B, :B]), (psi, cov[B:, B:]))]
    want = np.outer(*means)
    assert np.all(np.abs(value[0] - want) <= err[0] + 1e-15) and np.max(err) <= 1e-12


@pytest.mark.parametrize("phi, psi", [(relu, relu), (relu, step), (identity, identity), (step, step)],
                         ids=lambda a: a.name)
def test_the_same_batch_twice_is_the_one_batch_expectation(phi: Activation, psi: Activation) -> None:
    """g' = g (a singular joint covariance, every direction of the second batch a direction of the
    first): the two-batch expectation is the one-batch E[φ(u_b) ψ(u_c)], b = c included (for step·step
    a correlation of exactly 1, where the kernel is not Lipschitz: the bound still covers)."""
    rng = np.random.default_rng(21)
    B = 4
    one = _random_cov(rng, B)
    value, err = batchnorm_cross_expectation(phi, psi, np.block([[one, one], [one, one]])[None], rtol=1e-12)
    want = np.array([[batchnorm_expectation(phi, psi, b, c, one[None], rtol=1e-13)[0][0] for c in range(B)]
                     for b in range(B)])
    assert np.all(np.abs(value[0] - want) <= err[0] + 1e-15)
    assert np.max(err) <= (1e-7 if phi is step else 1e-12)


@pytest.mark.parametrize("phi, psi", [(relu, relu), (relu, step), (abs_, identity), (step, step)],
                         ids=lambda a: a.name)
def test_two_batches_of_two_equal_orthant_probabilities(phi: Activation, psi: Activation) -> None:
    """B = 2: BatchNorm makes u = ±(1, −1) by the sign of g₁ − g₂, so E[φ(u_b) ψ(v_c)] is a sum of
    φ(±1) ψ(±1) weighted by the quadrant probabilities of (g₁ − g₂, g₁' − g₂'), 1/4 ± asin ρ/(2π) —
    an independent closed form for the two-dimensional integral of any homogeneous pair."""
    rng = np.random.default_rng(22)
    cov = _joint_cov(rng, 2)
    diff = np.array([[1.0, -1.0, 0.0, 0.0], [0.0, 0.0, 1.0, -1.0]])
    d = diff @ cov @ diff.T
    rho = d[0, 1] / np.sqrt(d[0, 0] * d[1, 1])
    value, err = batchnorm_cross_expectation(phi, psi, cov[None], np.full((1, 4, 4), 1e-13), rtol=1e-12)
    for b in range(2):
        for c in range(2):
            want = 0.0
            for s1 in (1.0, -1.0):  # the sign of g₁ − g₂, and so u = s1·(1, −1)
                for s2 in (1.0, -1.0):
                    quadrant = 0.25 + s1 * s2 * np.arcsin(rho) / (2 * np.pi)
                    u_b, v_c = s1 * (1 - 2 * b), s2 * (1 - 2 * c)
                    want += quadrant * phi.fn(np.array([u_b]))[0] * psi.fn(np.array([v_c]))[0]
            assert abs(value[0, b, c] - want) <= err[0, b, c], (b, c, value[0, b, c] - want)
    assert np.max(err) <= 1e-10


def test_two_batches_against_monte_carlo() -> None:
    """Generic correlated batches of 4 (relu·relu): within 4.5 standard errors of 4·10⁶ draws."""
    rng = np.random.default_rng(23)
    B = 4
    cov = _joint_cov(rng, B)
    value, err = batchnorm_cross_expectation(relu, relu, cov[None], rtol=1e-10)
    g = rng.standard_normal((4_000_000, 2 * B)) @ np.linalg.cholesky(cov).T
    u, v = _normalised(g[:, :B]), _normalised(g[:, B:])
    draws = np.maximum(u, 0)[:, :, None] * np.maximum(v, 0)[:, None, :]
    mean, se = draws.mean(axis=0), draws.std(axis=0) / np.sqrt(len(draws))
    assert np.all(np.abs(value[0] - mean) <= 4.5 * se + err[0]) and np.max(err) <= 1e-10


def test_two_batches_in_the_engine() -> None:
    """A BatchNorm MLP on two batches: the within-batch blocks are the one-batch kernels; a second batch
    that repeats the first's examples in another order gives the permuted one-batch kernel across
    (relu; for step the kernel is not Lipschitz where an example is in both batches, and its honest
    bound there is ~1e-4); across two generic batches the kernel meets the default rtol 1e-8 and
    agrees with the simulation (relu, step); the NTK and a BatchNorm output paired with a vector
    outside its BatchNorm across batches are still refused, saying what to do."""
    X = np.random.default_rng(10).standard_normal((2, 4, 3))
    p = netsor.zoo.batchnorm_mlp(2, "relu", 1.2, 0.3)
    one, one_err = netsor.limit(p, X[:1], rtol=1e-6).nngp(with_error=True)
    perm = [2, 0, 3, 1]
    K, E = netsor.limit(p, np.stack([X[0], X[0][perm]]), rtol=1e-6).nngp(with_error=True)
    assert np.all(np.abs(K[:4, :4] - one) <= E[:4, :4] + one_err)
    assert np.all(np.abs(K[:4, 4:] - one[:, perm]) <= E[:4, 4:] + one_err[:, perm])
    assert np.max(E) <= 1e-6
    for activation in ("relu", "step"):
        p = netsor.zoo.batchnorm_mlp(2, activation)
        K, E = netsor.limit(p, X).nngp(with_error=True)
        assert np.max(E / np.sqrt(np.outer(np.diag(K), np.diag(K)))) <= 1e-8
        Kq, Eq = netsor.limit(p, X, rtol=1e-2, method="qmc").nngp(with_error=True)
        assert np.all(np.abs(K - Kq) <= Eq + E)
    np.testing.assert_allclose(netsor.nngp(p, X[:1], X[1:]), K[:4, 4:], rtol=1e-12, atol=1e-14)
    with pytest.raises(UnsupportedError, match="only the QMC simulation computes"):
        netsor.ntk(netsor.zoo.batchnorm_mlp(2), X[:1])  # B-dimensional backward expectations (test_simulation)
    q = netsor.Program("residual batchnorm")
    xs = [q.data(step=b) for b in range(3)]
    U = q.matrix(q.dim("n"), xs[0].dim)
    gs = [U @ x for x in xs]
    q.readout(*[netsor.relu(u) + g for g, u in zip(gs, netsor.batchnorm(gs), strict=True)])
    with pytest.raises(UnsupportedError, match="both sides are BatchNorm outputs"):
        netsor.nngp(q, np.random.default_rng(11).standard_normal((2, 3, 2)))




def test_negative_degree_after_batchnorm_is_a_clear_error() -> None:
    """1/u_b (homogeneous of degree −1, infinite moments) has no Laplace representation: the exact rule
    refuses it (it crashed with a math domain error), and the engine says its bound is out of reach."""
    reciprocal = netsor.activations.activation(np.reciprocal)
    with pytest.raises(UnsupportedError, match="degree ≥ 0"):
        batchnorm_expectation(reciprocal, reciprocal, 0, 1, np.eye(4)[None])
    with pytest.raises(UnsupportedError, match="degree ≥ 0"):
        batchnorm_cross_expectation(reciprocal, relu, np.eye(8)[None])
    p = netsor.Program("batchnorm reciprocal")
    xs = [p.data(step=b) for b in range(4)]
    U = p.matrix(p.dim("n"), xs[0].dim)
    gs = [U @ x for x in xs]
    p.readout(*[netsor.nonlin(np.reciprocal, u) for u in netsor.batchnorm(gs)])
    with pytest.raises(netsor.NetsorError):
        netsor.nngp(p, np.random.default_rng(0).standard_normal((1, 4, 3)))
