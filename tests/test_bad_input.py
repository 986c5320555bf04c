"""What random programs and bad input broke (the engine issue's list): each case ends as a correct
result, checked against an independent value, or a NetsorError that says what to change."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import integrate

import netsor
from netsor.errors import HyperParameterError, InputError, NetsorError, NumericalError, ProgramError

X = np.random.default_rng(0).standard_normal((5, 3))


def one_input(build, sigma=1.0):
    p = netsor.Program()
    n = p.dim("n")
    g = p.input(n, sigma=sigma)
    build(p, n, g)
    return p


def gauss_expect(f, var):
    """E f(u), u ~ N(0, var), by scipy quad (independent reference)."""
    return integrate.quad(lambda z: f(np.sqrt(var) * z) * np.exp(-z * z / 2) / np.sqrt(2 * np.pi), -14, 14,
                          epsabs=1e-14, epsrel=1e-13, limit=200, points=[0.0])[0]


# ---- a vector plus a constant (crashed the limit with a raw ValueError)
def test_a_constant_shift_is_an_h_vector_with_the_right_kernel():
    p = one_input(lambda p, n, g: p.readout(netsor.tanh(g) + 1.0))
    K = netsor.nngp(p, X)
    a = np.diag(X @ X.T / 3)
    # E[(tanh(u) + 1)²] = E tanh(u)² + 1 (tanh is odd)
    want = np.array([gauss_expect(lambda x: np.tanh(x) ** 2, v) + 1.0 for v in a])
    np.testing.assert_allclose(np.diag(K), want, rtol=1e-10)


def test_a_matmul_of_a_shifted_vector():
    """W(relu(g) + 0.5): Cov = σ² E[(relu(u) + 0.5)(relu(u') + 0.5)] = σ²(K_relu + 0.5(m + m') + 0.25)."""
    def build(p, n, g):
        p.readout(p.matrix(n, n, sigma=1.3) @ (netsor.relu(g) + 0.5))
    K = netsor.nngp(one_input(build), X)
    G = X @ X.T / 3
    d = np.sqrt(np.diag(G))
    rho = np.clip(G / np.outer(d, d), -1, 1)
    th = np.arccos(rho)
    krelu = np.outer(d, d) * (np.sin(th) + (np.pi - th) * rho) / (2 * np.pi)
    m = d / np.sqrt(2 * np.pi)
    np.testing.assert_allclose(K, 1.69 * (krelu + 0.5 * (m[:, None] + m[None, :]) + 0.25), rtol=1e-12)


# ---- compositions of one-argument activations are exact
@pytest.mark.parametrize("outer, inner, same", [("relu", "relu", "relu"), ("hard_tanh", "step", "step"),
                                                ("abs", "relu", "relu")])
def test_compositions_equal_to_one_activation(outer, inner, same):
    """relu∘relu = relu, hard_tanh∘step = step, |relu| = relu: the composite (a numerical
    one-argument function) agrees with the closed form within its bound."""
    f, g, h = (netsor.activation(name) for name in (outer, inner, same))
    K1, E1 = netsor.limit(one_input(lambda p, n, x: p.readout(f(g(x)))), X).nngp(with_error=True)
    K2 = netsor.nngp(one_input(lambda p, n, x: p.readout(h(x))), X)
    assert np.all(np.abs(K1 - K2) <= E1 + 1e-15 * np.abs(K2).max())
    assert np.max(np.abs(K1 - K2)) <= 1e-8 * np.abs(K2).max()


def test_custom_product_of_independent_arguments_factorises():
    """nonlin(tanh(x)·y) of independent u, v: E = E tanh(u)² · E v²."""
    p = netsor.Program()
    n = p.dim("n")
    u, v = p.input(n, sigma=1.0), p.input(n, sigma=0.8)
    p.readout(netsor.nonlin(lambda x, y: np.tanh(x) * y, u, v))
    x = np.array([[2.0]])
    K = netsor.nngp(p, x)
    want = gauss_expect(lambda t: np.tanh(t) ** 2, 4.0) * 0.64 * 4.0
    np.testing.assert_allclose(K[0, 0], want, rtol=1e-11)


def test_var_is_the_diagonal_of_cov():
    p = netsor.Program()
    n = p.dim("n")
    u, v = p.input(n), p.input(n, bias=0.3)
    h = netsor.nonlin(lambda x, y: np.tanh(x) * y + np.abs(x - 2 * y), u, v)
    p.readout(h)
    lim = netsor.limit(p, X)
    np.testing.assert_array_equal(lim.var(h), np.diag(lim.cov(h)))


# ---- symmetric and PSD results
def test_kernels_with_numerical_terms_are_symmetric_and_psd():
    p = netsor.Program()
    n = p.dim("n")
    u, v = p.input(n), p.input(n, bias=0.2)
    p.readout(netsor.relu(u) * netsor.relu(0.5 * u + v), netsor.tanh(netsor.relu(u) + v))
    # inputs in 4 dimensions: highly correlated pairs whose joint terms reach ~1e-4 (Monte Carlo)
    K = netsor.nngp(p, np.random.default_rng(3).standard_normal((12, 4)), rtol=1e-3)
    np.testing.assert_array_equal(K, K.T)
    assert np.linalg.eigvalsh(K).min() >= -1e-9 * np.abs(K).max()


# ---- functions that are not defined for Gaussian arguments, overflow, misbehaving user code
@pytest.mark.parametrize("fn", [np.log, lambda x: 1.0 / x])
def test_activations_without_a_gaussian_expectation_are_refused(fn):
    with np.errstate(all="ignore"):
        p = one_input(lambda p, n, g: p.readout(netsor.activation(fn)(g)))
        with pytest.raises(NumericalError):
            netsor.nngp(p, X)


def test_overflowing_inputs_are_reported_not_zero():
    """Inputs whose products overflow float64 are refused up front, naming their size (they were refused
    later with advice about the activation or sigma_w: "E tanh(u)²: the function returned NaN", "reduce
    sigma_w"); an overflow inside the network is still reported, not returned as zeros."""
    for act in ("gelu", "tanh", "relu"):
        for call in (lambda p, X_: netsor.nngp(p, X_), lambda p, X_: netsor.sample(p, X_, width=8, samples=3)):
            with pytest.raises(netsor.InputError, match=r"entries of size [0-9.]+e\+160.*rescale"):
                call(netsor.zoo.mlp(3, act), X * 1e160)
    with pytest.raises(NumericalError, match="non-finite|overflow|NaN or Inf"):
        netsor.nngp(netsor.zoo.mlp(3, "exp", 3.0), X * 30)


@pytest.mark.parametrize("act, degree", [("step", 0), ("relu", 2), ("abs", 2), ("tanh", None)])
def test_tiny_inputs_are_refused_and_small_ones_scale_exactly(act, degree):
    """Inputs whose entries are all below 1e-60 are refused naming their size (at 1e-80 the products of
    kernel entries underflow: a step network gave 0.5 instead of 0.379 at 1e-100, relu networks exact
    zeros, smooth ones 100 % off at exactly proportional inputs — all under bounds of 1e-15); exact zeros
    are inputs like any other. At 1e-55 the kernels are those of the scaled inputs to rounding:
    positively homogeneous networks scale exactly (step unchanged, relu and abs by scale²); tanh is linear
    at that size (its kernel is the identity network's)."""
    X = np.random.default_rng(0).standard_normal((4, 3))
    X[3] = 2 * X[1]  # an exactly proportional pair
    with pytest.raises(InputError, match=r"X\[0\] has no entry larger than [0-9.]+e-81 \(4 such.*rescale"):
        netsor.nngp(netsor.zoo.mlp(2, act), X * 1e-80)
    scale = 1e-55
    K, E = netsor.limit(netsor.zoo.mlp(2, act), X * scale).nngp(with_error=True)
    linear = degree is None
    ref = netsor.nngp(netsor.zoo.mlp(2, "identity" if linear else act), X) * scale ** (2 if linear else degree)
    root = np.sqrt(np.diag(ref))  # √ first: the product of two diagonals underflows
    assert np.max(np.abs(K - ref) / root[:, None] / root[None, :]) < 1e-14
    assert np.all(np.abs(K - ref) <= E + 1e-15 * root[:, None] * root[None, :])
    X[0] = 0.0  # an exact zero is accepted: relu, abs and tanh networks map it to 0
    K = netsor.nngp(netsor.zoo.mlp(2, act), X)
    assert np.all(np.isfinite(K)) and (act == "step" or np.all(K[0, 1:] == 0.0))


@pytest.mark.parametrize("act", ["relu", "abs"])
@pytest.mark.parametrize("depth", [80, 120])
def test_deep_networks_whose_variances_fall_below_1e_154_keep_their_kernel(act, depth):
    """Weights of σ_w = 0.1 shrink a bias-free relu/abs network's variances by 100 per layer: past ~1e-154
    the product of two of them underflows, and the arc-cosine kernels' ``ab − c²`` went wrong (2.4e-3 off at
    depth 80, 4.5e-3 at 120, under bounds of 1e-10); they now scale both variances by powers of four first.
    Reference: the same network at σ_w = 1 times 0.01^(depth + 1) (positive homogeneity, exact)."""
    X = np.random.default_rng(0).standard_normal((4, 3))
    X[3] = 2 * X[1]
    K, E = netsor.limit(netsor.zoo.mlp(depth, act, 0.1), X).nngp(with_error=True)
    ref = netsor.nngp(netsor.zoo.mlp(depth, act, 1.0), X) * 0.01 ** (depth + 1)
    root = np.sqrt(np.diag(ref))
    assert np.max(np.abs(K - ref) / root[:, None] / root[None, :]) < 1e-13
    assert np.all(np.abs(K - ref) <= E)


def test_a_kernel_whose_variances_underflow_is_refused():
    """A tanh network at σ_w = 0.3 without bias shrinks its variances ~10× per layer: at depth 300 they are
    subnormal (2e-316) and the correlations came out 0 under a bound of 4e-8 relative; now refused, naming
    the size reached (depth 200, variances 1e-211, is still computed)."""
    X = np.random.default_rng(0).standard_normal((4, 3))
    with pytest.raises(NumericalError, match=r"diagonal reaches [0-9.]+e-31[0-9].*underflow"):
        netsor.nngp(netsor.zoo.mlp(300, "tanh", 0.3), X)
    assert np.all(np.isfinite(netsor.nngp(netsor.zoo.mlp(200, "tanh", 0.3), X)))


@pytest.mark.parametrize("act", ["tanh", "gelu", "erf", "relu", "step"])
def test_inputs_of_extreme_or_mixed_scales_give_a_kernel_or_a_clear_error(act):
    """Norms from 1e-8 to 1e8 in one batch, and norms of 1e150: a kernel whose bound meets rtol, or
    a NumericalError (never a raw MemoryError from a quadrature grid of 1e8 panels, or a ValueError)."""
    rng = np.random.default_rng(0)
    mixed = rng.standard_normal((4, 3)) * np.array([[1e-8], [1.0], [1e8], [1e-1]])
    for X_ in (mixed, rng.standard_normal((3, 3)) * 1e150):
        try:
            k = netsor.kernel(netsor.zoo.mlp(3, act, 1.2, 0.1), X_)
        except NumericalError:
            continue
        assert np.all(np.isfinite(k.nngp)) and np.all(np.isfinite(k.ntk))
        assert np.all(k.ntk_error <= 1e-8 * np.sqrt(np.outer(np.diag(k.ntk), np.diag(k.ntk))) + 1e-300)


def boom_on_large(x):
    if x.size > 100:
        raise RuntimeError("boom")
    return np.tanh(x)


def shrink_on_large(x):
    return np.tanh(x) if x.size <= 100 else np.tanh(x).ravel()[:10]


@pytest.mark.parametrize("fn", [boom_on_large, shrink_on_large])
def test_user_code_failing_on_large_arrays_is_a_clear_error(fn):
    p = one_input(lambda p, n, g: p.readout(netsor.activation(fn)(g)))
    with pytest.raises(ProgramError, match="custom nonlinearity"):
        netsor.nngp(p, X)
    q = one_input(lambda p, n, g: p.readout(netsor.nonlin(lambda x: fn(x) * 2.0, g)))
    with pytest.raises(ProgramError, match="custom nonlinearity"):
        netsor.sample(q, X, width=64, samples=4)


def test_products_of_independent_terms_are_fast_and_within_budget():
    """relu(g)·tanh(g2) on 200 inputs took 143 s and 12.8 GB: it factorises into two kernels."""
    import time

    p = netsor.Program()
    n = p.dim("n")
    g, g2 = p.input(n), p.input(n)
    p.readout(netsor.relu(g) * netsor.tanh(g2))
    Xb = np.random.default_rng(1).standard_normal((200, 10))
    t0 = time.perf_counter()
    K = netsor.nngp(p, Xb, memory_budget=2**28)
    assert time.perf_counter() - t0 < 20.0
    Kr = netsor.nngp(one_input(lambda p, n, g: p.readout(netsor.relu(g))), Xb)
    Kt = netsor.nngp(one_input(lambda p, n, g: p.readout(netsor.tanh(g))), Xb)
    np.testing.assert_allclose(K, Kr * Kt, rtol=1e-9, atol=1e-12)


# ---- argument validation
@pytest.mark.parametrize("kwargs, error", [
    (dict(memory_budget=-5), HyperParameterError), (dict(memory_budget=None), HyperParameterError),
    (dict(threads=-1), HyperParameterError), (dict(threads="2"), HyperParameterError),
    (dict(rtol=0.0), HyperParameterError), (dict(rtol=float("nan")), HyperParameterError),
    (dict(psd="maybe"), HyperParameterError),
])
def test_bad_kernel_options(kwargs, error):
    with pytest.raises(error):
        netsor.nngp(netsor.zoo.mlp(2), X, **kwargs)


@pytest.mark.parametrize("kwargs", [dict(width=10**12), dict(width=0), dict(width=2.5), dict(samples=0),
                                    dict(seed=-1), dict(seed="x"), dict(method="fast"),
                                    dict(memory_budget=10)])
def test_bad_sampler_options(kwargs):
    with pytest.raises(HyperParameterError):
        netsor.sample(netsor.zoo.mlp(2), X, **{"width": 8, "samples": 2, **kwargs})


@pytest.mark.parametrize("bad", ["x", float("nan"), True, None])
def test_bad_activation_parameters(bad):
    with pytest.raises(HyperParameterError):
        netsor.activation("leaky_relu", alpha=bad)


@pytest.mark.parametrize("sigma", ["1", True, -1.0, float("inf"), 1 + 2j])
def test_bad_variances(sigma):
    p = netsor.Program()
    n = p.dim("n")
    with pytest.raises(HyperParameterError):
        p.matrix(n, n, sigma=sigma)


@pytest.mark.parametrize("data", [X + 1j, np.array([["a", "b", "c"]]), np.array([[True, False, True]]),
                                  np.array([[1.0, np.nan, 0.0]]), np.zeros((0, 3)), np.zeros(3)])
def test_bad_data_arrays(data):
    with pytest.raises(InputError):
        netsor.nngp(netsor.zoo.mlp(2), data)


def test_reciprocals_and_powers_of_vectors_are_programs():
    p = netsor.Program()
    n = p.dim("n")
    g = p.input(n)
    p.readout(g**2, 1 / (1 + g * g))
    Y = netsor.sample(p, X, width=16, samples=4)
    assert np.all(np.isfinite(Y))
    # E[u⁴] = 3a², E[1/(1+u²)²] by quad
    lim = netsor.limit(p, X)
    K = lim.nngp().reshape(5, 2, 5, 2)
    a = np.diag(X @ X.T / 3)
    np.testing.assert_allclose(K[np.arange(5), 0, np.arange(5), 0], 3 * a**2, rtol=1e-12)
    want = [gauss_expect(lambda x: (1 / (1 + x * x)) ** 2, v) for v in a]
    np.testing.assert_allclose(K[np.arange(5), 1, np.arange(5), 1], want, rtol=1e-9)
    with pytest.raises(ProgramError, match="powers"):
        _ = g**2.5


def test_cov_of_the_data_point_and_a_vector_is_an_error():
    p = netsor.Program()
    n = p.dim("n")
    g = p.input(n)
    p.readout(g)
    with pytest.raises(ProgramError, match="data point"):
        netsor.limit(p, X).cov(p.data(), g)
    np.testing.assert_allclose(netsor.limit(p, X).cov(p.data(), p.data()), X @ X.T / 3, rtol=1e-14)


def test_a_seed_sequence_used_twice_gives_the_same_networks():
    seq = np.random.SeedSequence(5)
    p = netsor.zoo.mlp(2)
    a = netsor.sample(p, X, width=8, samples=3, seed=seq)
    b = netsor.sample(p, X, width=8, samples=3, seed=seq)
    np.testing.assert_array_equal(a, b)
    rng = np.random.default_rng(1)
    c, d = netsor.sample(p, X, width=8, samples=3, seed=rng), netsor.sample(p, X, width=8, samples=3, seed=rng)
    assert not np.array_equal(c, d)  # a Generator is consumed, as numpy users expect


def test_every_error_is_a_netsor_error():
    for err in (HyperParameterError, InputError, NumericalError, ProgramError):
        assert issubclass(err, NetsorError)


def test_a_per_input_quantity_beyond_rtol_is_a_clear_error():
    """``Limit.var`` (and ``scalar``) refusing their tolerance raised a raw ValueError (the message
    unpacked a kernel entry (i, j) from a 1-D array); now the NumericalError names the input."""
    p = netsor.zoo.mlp(4, "tanh", 1.5, 0.3)
    X = np.random.default_rng(0).standard_normal((2, 3)) * 30
    h = [ln.out for ln in p.lines if ln.out.kind == "H"][-1]
    with pytest.raises(netsor.NumericalError, match="relative to its value at input"):
        netsor.limit(p, X, rtol=1e-15).var(h)


def test_kernels_follow_the_program_as_it_grows_and_a_stale_limit_is_refused():
    """A readout adds no line: the NTK was cached by line count and kept the old output set ((5, 5)
    after a second readout, where the NNGP was (10, 10)). A Limit built before the program grew raised
    a raw KeyError; now it says to build it again. The second output's NTK block equals a fresh
    program's."""
    p = netsor.Program()
    n = p.dim("n")
    g = p.input(n)
    h = netsor.relu(g)
    p.readout(netsor.tanh(g))
    first = netsor.ntk(p, X)
    lim = netsor.limit(p, X)
    p.readout(h)
    assert netsor.nngp(p, X).shape == netsor.ntk(p, X).shape == netsor.kernel(p, X).ntk.shape == (10, 10)
    fresh = netsor.Program()
    m = fresh.dim("n")
    fresh.readout(netsor.relu(fresh.input(m)))
    np.testing.assert_allclose(netsor.ntk(p, X).reshape(5, 2, 5, 2)[:, 1, :, 1], netsor.ntk(fresh, X), rtol=1e-12)
    np.testing.assert_allclose(netsor.ntk(p, X).reshape(5, 2, 5, 2)[:, 0, :, 0], first, rtol=1e-12)
    with pytest.raises(ProgramError, match="call netsor.limit"):
        lim.cov(h)


def test_covariances_of_scalars_are_refused_with_the_method_to_use():
    p = netsor.Program()
    n = p.dim("n")
    g = p.input(n)
    s = netsor.inner(g, g)
    p.readout(netsor.relu(g))
    lim = netsor.limit(p, X)
    for ask in (lambda: lim.var(s), lambda: lim.cov(s), lambda: lim.cov(g, s)):
        with pytest.raises(ProgramError, match="scalar"):
            ask()
    np.testing.assert_allclose(lim.scalar(s), np.sum(X * X, axis=1) / 3, rtol=1e-14)


def test_softmax_of_scores_beyond_the_exponential_range_is_exact():
    """Scores of 1000·|x|²/3 (up to ~3000): unshifted, exp overflowed and the limit was refused ("exp(scalar)
    is not finite"), also a transformer on inputs of norm ~30. Shifted by the largest score, the
    weights are exp(−1000 |x|²/3) and 1 − that (closed form), and the transformer's kernel exists."""
    p = netsor.Program()
    n = p.dim("n")
    g = p.input(n)
    big, zero = netsor.inner(g, g) * 1000.0, netsor.inner(g, g) * 0.0
    small_weight, large_weight = netsor.softmax([zero, big])
    p.readout(g)
    lim = netsor.limit(p, X)
    want = np.exp(-1000.0 * np.sum(X * X, axis=1) / 3)
    np.testing.assert_allclose(lim.scalar(small_weight), want, rtol=1e-12, atol=1e-300)
    np.testing.assert_allclose(lim.scalar(large_weight), 1.0 - want, rtol=1e-14)
    tokens = np.random.default_rng(0).standard_normal((3, 2, 3)) * 30.0
    K = netsor.nngp(netsor.zoo.transformer(1, tokens=2), tokens)
    assert np.all(np.isfinite(K)) and np.allclose(K, K.T)


@pytest.mark.parametrize("fn, match", [
    (lambda a: np.sort(a), "coordinate by coordinate"),
    (lambda a: a * 0 + np.max(a), "coordinate by coordinate"),
    (lambda a: a * 1j, "complex"),
])
def test_nonlinearities_that_are_not_real_and_elementwise_are_refused(fn, match):
    """Only the output's shape was checked: a sort gave an NNGP entry of −0.137 where width-512 networks
    give +0.386, and a complex function lost its imaginary part (kernel 0)."""
    p = netsor.Program()
    n = p.dim("n")
    with pytest.raises(ProgramError, match=match):
        p.readout(netsor.nonlin(fn, p.input(n)))


@pytest.mark.parametrize("call, match", [
    (lambda: netsor.nngp(netsor.zoo.mlp(2, "relu", 1e300), X), "at most"),
    (lambda: netsor.nngp(netsor.zoo.mlp(2, "relu", 1.0, 1e300), X), "at most"),
    (lambda: netsor.sample(netsor.zoo.mlp(2, "relu", 1e200), X, width=4, samples=2), "at most"),
    (lambda: netsor.zoo.mlp(2, "relu", np.array([1.0, 2.0])), "real number"),
    (lambda: netsor.kernel(netsor.zoo.mlp(2), X, get=None), "get must be"),
    (lambda: netsor.kernel(netsor.zoo.mlp(2), X, get=[]), "at least one"),
    (lambda: netsor.nngp(netsor.zoo.mlp(2), X, seed="x"), "seed"),
    (lambda: netsor.limit(netsor.zoo.mlp(2), X).var(netsor.zoo.mlp(2).lines[1].out), "another program|not of this"),
])
def test_more_bad_options_are_refused_with_what_to_change(call, match):
    """Standard deviations whose square overflows raised OverflowError inside the rules; a sigma array
    failed formatting the program's name; get=None a TypeError; get=[] and seed="x" were accepted."""
    with pytest.raises(NetsorError, match=match):
        call()


def test_with_error_must_be_a_boolean():
    p = netsor.zoo.mlp(1)
    g = p.lines[1].out
    with pytest.raises(HyperParameterError, match="with_error"):
        netsor.limit(p, X).cov(g, with_error="yes")


def test_matrices_vectors_lists_and_kernels_too_large_for_memory_get_clear_errors(monkeypatch):
    p = netsor.zoo.mlp(2)
    g = p.lines[1].out
    W = p.matrices[-1]
    for bad in (g, 3):  # one vector, not a list of them: a raw TypeError
        with pytest.raises(ProgramError, match="list of vectors"):
            netsor.run_finite(p, X, width=4, samples=2, vectors=bad)
    with pytest.raises(HyperParameterError, match="applies to vectors"):
        netsor.relu(W)
    assert W.T.T is W  # was an AttributeError
    # the kernel and its bounds are refused before any work when they cannot fit (a raw MemoryError)
    monkeypatch.setattr("netsor.validate.physical_memory", lambda: 2**20)
    with pytest.raises(HyperParameterError, match="GiB"):
        netsor.nngp(p, np.random.default_rng(0).standard_normal((300, 3)))


def test_a_bound_as_large_as_the_kernel_does_not_advise_a_larger_rtol():
    """At rtol = 1 (its largest value) the advice "pass a larger rtol" could not be followed."""
    with pytest.raises(NumericalError, match="no rtol accepts"):
        # chaotic with the correlations' fixed point near 1 (σ_b = 1), where the pairs' slope bounds exceed 1
        netsor.nngp(netsor.zoo.mlp(200, "hard_tanh", 3.0, 1.0), X, rtol=1.0)


@pytest.mark.parametrize("then", [1.0, 0.0])
def test_constants_whose_product_overflows_are_refused_naming_the_vector(then):
    """``g·1e300·1e300`` has finite constants line by line and an infinite coefficient over its source;
    times 0 that was NaN and numpy's "SVD did not converge" (a raw LinAlgError) reached the user."""
    p = netsor.Program()
    g = p.input(p.dim("n"))
    y = g * 1e300 * 1e300 * then
    p.readout(netsor.relu(y) + g)
    with pytest.raises(NumericalError, match=r"inf times g1: the product of its lines' constants overflows"):
        netsor.nngp(p, np.eye(3))


@pytest.mark.parametrize("call", ["softmax", "attention", "batchnorm"])
def test_one_vector_where_a_list_is_expected_is_refused_with_the_fix(call):
    """softmax, attention and batchnorm take lists; one vector raised Python's "'Vector' object is not
    iterable" from inside netsor.layers."""
    p = netsor.Program()
    g = p.input(p.dim("n"))
    s = netsor.inner(g, g)
    with pytest.raises(ProgramError, match=r"got one vector: pass \[v\]"):
        {"softmax": lambda: netsor.softmax(s), "attention": lambda: netsor.attention(g, [g], [g]),
         "batchnorm": lambda: netsor.batchnorm(g)}[call]()


@pytest.mark.parametrize("build", ["cnn", "rnn", "transformer"])
def test_sequences_longer_than_the_program_are_refused(build):
    """Inputs with more steps than the program reads were cut silently: a cnn of 8 positions on
    sequences of 10 is another network (its circular padding wraps at 8), an rnn of 3 steps ignored
    the 4th, a transformer of 4 tokens dropped the 5th and 6th. Now refused, with both fixes named."""
    program = {"cnn": lambda: netsor.zoo.cnn(1, length=8), "rnn": lambda: netsor.zoo.rnn(3),
               "transformer": lambda: netsor.zoo.transformer(1, tokens=4)}[build]()
    T = program.steps
    X = np.random.default_rng(0).standard_normal((2, T + 2, 3))
    with pytest.raises(InputError, match=rf"has {T + 2} steps but the program reads {T} .*X\[:, :{T}\]"):
        netsor.nngp(program, X)
    with pytest.raises(InputError, match=rf"has {T + 2} steps"):
        netsor.sample(program, X, width=8, samples=2)
    R = program.num_outputs
    assert netsor.nngp(program, X[:, :T]).shape == (2 * R, 2 * R)


def test_messages_name_the_call_that_was_misused():
    """``p.input(3)`` said "out_dim must be a Dim" (the matrix it builds), ``p.gaussian(n, sigma=-1)`` "bias
    sigma"; they name the call now."""
    p = netsor.Program()
    n = p.dim("n")
    with pytest.raises(ProgramError, match=r"the dim of p\.input must be a Dim made by program\.dim"):
        p.input(3)
    with pytest.raises(HyperParameterError, match="^gaussian sigma must be"):
        p.gaussian(n, sigma=-1.0)
    with pytest.raises(ProgramError, match=r"the dim of p\.gaussian"):
        p.gaussian(3)


def test_an_activation_given_a_parameter_at_the_call_says_where_parameters_go():
    """``netsor.leaky_relu(g, 0.1)`` raised Python's "takes 2 positional arguments"; parameters belong to
    the activation (``netsor.activation("leaky_relu", alpha=0.1)``), which is then applied to ``g``."""
    p = netsor.Program()
    g = p.input(p.dim("n"))
    for call in (lambda: netsor.leaky_relu(g, 0.1), lambda: netsor.leaky_relu(g, alpha=0.1)):
        with pytest.raises(HyperParameterError, match=r"leaky_relu takes one vector.*netsor\.activation\('leaky_relu'"):
            call()
    p.readout(netsor.activation("leaky_relu", alpha=0.1)(g))
    X = np.random.default_rng(0).standard_normal((3, 2))
    K = netsor.nngp(p, X)
    # leaky(u) = relu(u) − α relu(−u): E = (1 + α²) k1(c) − 2α k1(−c), k1 the arc-cosine kernel of order 1
    G = X @ X.T / 2
    d = np.sqrt(np.diag(G))
    rho = np.clip(G / np.outer(d, d), -1, 1)

    def k1(r):
        return np.outer(d, d) * (np.sqrt(1 - r**2) + (np.pi - np.arccos(r)) * r) / (2 * np.pi)

    np.testing.assert_allclose(K, 1.01 * k1(rho) - 0.2 * k1(-rho), rtol=1e-12)


def test_numpy_functions_and_constant_powers_of_vectors_build_lines():
    """``np.sin(g)``, ``np.multiply(2, g)`` and ``2 ** g`` raised Python's TypeError; they are lines,
    with closed-form kernels: E sin u sin v = e^{−(a+b)/2} sinh c, E 2^u 2^v = e^{ln²2 (a+b+2c)/2}."""
    p = netsor.Program()
    g = p.input(p.dim("n"))
    doubled = np.multiply(2.0, g)
    assert doubled.kind == "G"
    p.readout(np.sin(g), doubled, 2 ** g)
    G = X @ X.T / 3
    a = np.diag(G)
    K = netsor.nngp(p, X).reshape(5, 3, 5, 3)
    np.testing.assert_allclose(K[:, 0, :, 0], np.exp(-(a[:, None] + a[None, :]) / 2) * np.sinh(G), rtol=1e-12)
    np.testing.assert_allclose(K[:, 1, :, 1], 4 * G, rtol=1e-14)
    ln2 = np.log(2.0)
    np.testing.assert_allclose(K[:, 2, :, 2], np.exp(ln2**2 * (a[:, None] + a[None, :] + 2 * G) / 2), rtol=1e-12)
    with pytest.raises(ProgramError, match="positive base"):
        _ = (-2.0) ** g


@pytest.mark.parametrize("misuse, match", [
    (lambda g, W: g > 0, r"netsor\.step\(g1 - c\)"),
    (lambda g, W: g <= 1.0, "comparison"),
    (lambda g, W: g[0], "no coordinates"),
    (lambda g, W: len(g), "no coordinates"),
    (lambda g, W: list(g), "no coordinates"),
    (lambda g, W: float(g), "no coordinates"),
    (lambda g, W: np.maximum(g, 0.0), r"netsor\.nonlin\(lambda x1, x2: np\.maximum"),
    (lambda g, W: np.add.reduce(g), "does not act on symbolic vectors"),
    (lambda g, W: g @ g, r"netsor\.inner"),
    (lambda g, W: W + W, r"W @ h \+ V @ h"),
    (lambda g, W: 2.0 * W, "not added, scaled"),
    (lambda g, W: -W, "not added, scaled"),
    (lambda g, W: W @ W, "product of matrices"),
    (lambda g, W: W @ W.T, "product of matrices"),
])
def test_operations_a_symbolic_vector_or_matrix_does_not_have_say_what_to_write(misuse, match):
    """These raised Python's TypeError (or returned a meaningless bool)."""
    p = netsor.Program()
    n = p.dim("n")
    g = p.input(n)
    W = p.matrix(n, n)
    with pytest.raises(ProgramError, match=match):
        misuse(g, W)


def test_limit_error_is_none_until_a_result_is_computed():
    """``Limit.error`` read 0.0 — an exact result — before anything was computed."""
    lim = netsor.limit(netsor.zoo.mlp(2, "tanh"), X)
    assert lim.error is None and lim.relative_error is None
    K, E = lim.nngp(with_error=True)
    assert lim.error == np.max(E) > 0.0


def test_a_custom_nonlinearity_in_single_precision_is_refused_at_the_call():
    """float32 output made the kink finder report a 'flickering traced expression' much later."""
    p = netsor.Program()
    g = p.input(p.dim("n"))
    with pytest.raises(ProgramError, match="returned float32 values.*return float64"):
        netsor.nonlin(lambda x: np.tanh(x).astype(np.float32), g)


def test_a_ratio_no_width_can_serve_is_named_without_a_300_digit_width():
    p = netsor.Program()
    n, m = p.dim("n"), p.dim("m", ratio=1e-300)
    p.readout(p.matrix(m, n) @ p.gaussian(n))
    with pytest.raises(HyperParameterError, match=r"needs a width above 5e\+299.*width=\{'m': k"):
        netsor.sample(p, width=100, samples=2)


def test_the_exact_backward_program_refused_by_the_engine_points_to_the_default():
    """``ntk(mlp(2, "erf"), backward="exact")``: the real transposes make a non-Gaussian correction the
    engine does not take; the default (tangent) program gives the same, exact, NTK."""
    p = netsor.zoo.mlp(2, "erf")
    with pytest.raises(netsor.errors.UnsupportedError, match="keep backward='auto'"):
        netsor.ntk(p, X, backward="exact")
    assert np.all(np.isfinite(netsor.ntk(p, X)))


def test_an_error_bound_is_never_nan():
    """``relu(0.14·relu(x + 0.27) − 1.2878) + 0.39`` (a kink ~23σ out at the second layer): a part whose second
    moment underflowed to 0 got an infinite error relative to that envelope, and ``inf · 0`` made the NNGP's error
    bound NaN, returned silently (found by a campaign of random activations); then it was refused. That error is
    now carried as an absolute (dense) bound: NNGP and NTK meet the default rtol, with finite bounds, and agree
    within them with the same function given opaque with its kinks and derivative declared."""
    def fn(x):
        return np.maximum(0.14 * np.maximum(x, -0.27) - 0.86, 0.39)

    kinks = (-0.27, (0.39 + 0.86) / 0.14 - 0.27)
    declared = netsor.activation(lambda x: fn(np.asarray(x, dtype=float)), kinks=kinks, name="declared",
                                 deriv=lambda x: 0.14 * ((np.asarray(x) > kinks[0]) & (np.asarray(x) > kinks[1])))
    for seed in range(2, 6):
        X = np.random.default_rng(seed).standard_normal((3, 4)) * 1.3
        traced = netsor.kernel(netsor.zoo.mlp(2, fn), X)
        other = netsor.kernel(netsor.zoo.mlp(2, declared), X)
        for a, ea, b, eb in ((traced.nngp, traced.nngp_error, other.nngp, other.nngp_error),
                             (traced.ntk, traced.ntk_error, other.ntk, other.ntk_error)):
            assert np.all(np.isfinite(ea)) and np.all(np.isfinite(eb))
            assert np.all(np.abs(a - b) <= ea + eb)


def test_a_refusal_decided_by_qmc_names_the_untraced_function_of_several_vectors_and_why():
    """``tanh(a)·sin(b)`` written through ``np.asarray`` is opaque: its pair expectations (4-dimensional) go to
    QMC, whose ~1e-3 is refused at the default rtol; the error says which function and what to change."""
    p = netsor.Program()
    n = p.dim("n")
    u, v = p.input(n), p.input(n)
    h = netsor.nonlin(lambda a, b: np.tanh(np.asarray(a)) * np.sin(np.asarray(b)), u, v, name="gate")
    p.readout(h)
    X = np.random.default_rng(0).standard_normal((3, 2))
    with pytest.raises(NumericalError) as refusal:
        netsor.nngp(p, X)
    message = str(refusal.value)
    assert "'gate': the function converts its argument to a plain array" in message
    assert "np.asarray" in message and "method='qmc'" in message
    # the NTK's tangent program holds its partials by differences: named by the user's function, once
    with pytest.raises(NumericalError) as refusal:
        netsor.ntk(p, X)
    assert "('gate': the function converts its argument to a plain array)" in str(refusal.value)
    # written with numpy's elementwise functions it is traced, and its kernel exact
    p2 = netsor.Program()
    n2 = p2.dim("n")
    u2, v2 = p2.input(n2), p2.input(n2)
    p2.readout(netsor.nonlin(lambda a, b: np.tanh(a) * np.sin(b), u2, v2))
    assert netsor.kernel(p2, X, get="nngp").error < 1e-10


def test_a_pair_no_rule_integrates_in_reasonable_time_is_refused_not_run_for_hours():
    """``|sin(x²) − 0.13|`` has 655 kinks in range; at two inputs 1e-3 apart the nested 2-D rule graded panels around
    every crossing and ran an inner rule over every kink at each outer node (~10¹¹ values a pair): the NNGP of a
    one-layer MLP did not finish in 15 minutes (fresh-seed fuzz). It now gives up past a budget and the entry is
    refused saying what to change; the simulation it suggests computes the kernel."""
    rng = np.random.default_rng(13)
    X = rng.standard_normal((3, 4))
    X[1] = X[0] + 1e-3 * rng.standard_normal(4)
    p = netsor.zoo.mlp(1, lambda x: np.abs(np.sin(x * x) - 0.13), sigma_b=0.0)
    with pytest.raises(NumericalError, match=r"no finite error bound.*nearly parallel inputs.*method='qmc'"):
        netsor.nngp(p, X, rtol=1e-3)
    K = netsor.nngp(p, X, rtol=1e-3, method="qmc")
    assert np.all(np.isfinite(K)) and np.allclose(K, K.T)


def test_a_conditioned_pair_that_does_not_converge_gives_way_within_its_budget(monkeypatch):
    """``√|a|·tanh b`` (b correlated with a): conditioned on the outer pair, the cusp kept the outer quadrature
    refining — one pair of two inputs took 55 s, to be refused at rtol anyway; a fresh-seed fuzz program ran for
    over 40 minutes. A pair's inner evaluations are capped (here at 2^24, to be quick): it gives way to the other
    rules and the kernel is refused saying what was reached, having spent no more than the cap and one call."""
    from netsor.gaussian import separable

    spent = []
    expect = separable.InnerPair.expect

    def counted(self, *args, **kwargs):
        before = self.evaluations
        out = expect(self, *args, **kwargs)
        spent.append((before, self.evaluations))
        return out

    monkeypatch.setattr(separable, "CONDITIONED_PAIR_EVALUATIONS", 2**24)
    monkeypatch.setattr(separable.InnerPair, "expect", counted)
    p = netsor.Program()
    n = p.dim("n")
    a, b = p.input(n, sigma=1.0), p.input(n, sigma=1.0, bias=0.3)
    p.readout(netsor.nonlin(lambda u, v: np.sqrt(np.abs(u)) * np.tanh(v), a, 0.6 * a + 0.8 * b))
    X = np.random.default_rng(0).standard_normal((2, 4))
    with pytest.raises(NumericalError, match="rtol"):
        netsor.nngp(p, X)
    assert spent and all(before <= 2**24 for before, _ in spent)  # no call starts past the cap


@pytest.mark.parametrize(("fn", "where"), [(lambda x: np.abs(x - 0.3) ** -0.6, "0.3"),
                                           (lambda x: np.tan(0.3 * x), "5.236")])
def test_an_opaque_function_with_a_pole_is_refused_naming_the_pole(fn, where):
    """An opaque φ unbounded at a point (a non-integer negative power, ``tan``'s poles at ±π/0.6) was refused by the
    kink locator as "a fast oscillation, or noise — declare it smooth": advice that would have hidden an infinite
    expectation. The refusal now names the point nearest the Gaussian's centre where φ grows without bound."""
    X = np.random.default_rng(0).standard_normal((3, 3))
    with pytest.raises(netsor.NumericalError, match=f"grows without bound near x = {where}"):
        netsor.nngp(netsor.zoo.mlp(1, fn, 1.0, 0.1), X)
