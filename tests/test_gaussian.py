"""Tests of netsor.gaussian: closed forms vs quadrature, the Mehler series vs independent
references, Stein's identity, 1-D expectations and the D-dimensional `expectation`."""

from __future__ import annotations

import dataclasses
import importlib

import numpy as np
import pytest
from scipy import integrate

from netsor import gaussian as g
from netsor.gaussian import engine

nl = importlib.import_module("netsor.activations.registry")

CLOSED = ["relu", "step", "erf", "abs", "leaky_relu", "exp", "sin", "cos", "gaussian", "identity"]


def quadrature_copy(act):
    """The same activation without its closed form: forces the quadrature/series path."""
    return dataclasses.replace(act, kernel=None, name=act.name + "_q")


def second_moment(act, var):
    return g.expect_1d(lambda x: act.fn(x) ** 2, var, act.kinks or (0.0,))


def relative_error(phi, psi, got, want, a, b):
    scale = np.sqrt(second_moment(phi, a) * second_moment(psi, b))
    return np.max(np.abs(got - want) / np.broadcast_to(scale, np.shape(got)))


def pair_grid(rng, rows, cols, lo=1e-3, hi=1e2):
    """Row/column layout (a: (rows, 1), b: (1, cols)) with ρ = ±1, 0, ±0.999 and random rows."""
    a = 10 ** rng.uniform(np.log10(lo), np.log10(hi), (rows, 1))
    b = 10 ** rng.uniform(np.log10(lo), np.log10(hi), (1, cols))
    rho = rng.uniform(-1, 1, (rows, cols))
    rho[:5] = np.array([1.0, -1.0, 0.0, 0.999, -0.9999])[:, None]
    return a, b, rho * np.sqrt(a) * np.sqrt(b)


@pytest.mark.parametrize("name", CLOSED)
def test_closed_forms_match_quadrature(name):
    act = nl.activation(name)
    rng = np.random.default_rng(abs(hash(name)) % 2**32)
    # E exp(u)² lives around z = 2√a; the rules stop at Z_MAX = 10 (a known limit for growing φ).
    hi = 1.0 if name == "exp" else 1e2
    a, b, c = pair_grid(rng, 30, 30, hi=hi)
    want = act.kernel(a, b, c)
    if name == "step":  # the arc-cosine form is ill-conditioned at |ρ| = 1 (θ ~ √eps)
        want[0], want[1] = 0.5, 0.0
    got = g.pair_expectation(quadrature_copy(act), quadrature_copy(act), a, b, c)
    assert got.shape == (30, 30)
    assert relative_error(act, act, got, want, a, b) < 1e-12
    # Zero variances: a zero-variance coordinate is the constant 0.
    z = g.pair_expectation(quadrature_copy(act), quadrature_copy(act), np.array([0.0, 0.0, 2.0]),
                           np.array([0.0, 3.0, 0.0]), 0.0)
    f0 = float(act.fn(np.zeros(1))[0])
    np.testing.assert_allclose(z, [f0 * f0, f0 * g.mean(act, 3.0), f0 * g.mean(act, 2.0)],
                               rtol=1e-12, atol=1e-14)


def reference(phi, psi, a, b, c):
    """Nested adaptive scipy quad of E[φ(√a z1) ψ(√b (ρ z1 + s z2))] (independent of netsor)."""
    sa, sb = np.sqrt(a), np.sqrt(b)
    rho = c / (sa * sb)
    s = np.sqrt(max(1.0 - rho * rho, 0.0))

    def pdf(z):
        return np.exp(-0.5 * z * z) / np.sqrt(2 * np.pi)

    def f(act, x):
        return float(act.fn(np.array([x]))[0])

    kinks_phi = [k / sa for k in (*phi.kinks, 0.0)]
    kw = dict(epsabs=1e-15, epsrel=1e-13, limit=400)
    if s == 0.0:
        pts = kinks_phi + [k / (sb * rho) for k in (*psi.kinks, 0.0)]
        return integrate.quad(lambda z: pdf(z) * f(phi, sa * z) * f(psi, sb * rho * z), -12, 12,
                              points=[p for p in pts if abs(p) < 12], **kw)[0]

    def inner(z1):
        pts = [(k / sb - rho * z1) / s for k in (*psi.kinks, 0.0)]
        return integrate.quad(lambda z2: pdf(z2) * f(psi, sb * (rho * z1 + s * z2)), -12, 12,
                              points=[p for p in pts if abs(p) < 12], **kw)[0]

    pts = kinks_phi + ([k / (sb * rho) for k in (*psi.kinks, 0.0)] if rho else [])
    return integrate.quad(lambda z: pdf(z) * f(phi, sa * z) * inner(z), -12, 12,
                          points=[p for p in pts if abs(p) < 12], **kw)[0]


@pytest.mark.parametrize("phi, psi", [("tanh", "tanh"), ("gelu", "gelu"), ("sigmoid", "sigmoid"),
                                      ("softplus", "softplus"), ("hard_tanh", "hard_tanh"),
                                      ("relu", "erf"), ("tanh", "relu")])
def test_series_against_scipy_reference(phi, psi):
    phi, psi = nl.activation(phi), nl.activation(psi)
    a = np.array([1.0, 0.3, 20.0, 1e-3, 2.0])
    b = np.array([0.7, 5.0, 1.5, 0.5, 2.0])
    rho = np.array([0.3, -0.85, 0.995, 0.6, 1.0])
    c = rho * np.sqrt(a * b)
    got = g.pair_expectation(phi, psi, a, b, c)
    want = np.array([reference(phi, psi, *t) for t in zip(a, b, c, strict=True)])
    assert relative_error(phi, psi, got, want, a, b) < 1e-10


@pytest.mark.parametrize("phi, psi", [("tanh", "tanh"), ("gelu", "softplus"), ("hard_tanh", "tanh"),
                                      ("sigmoid", "relu")])
def test_fast_path_matches_nested_rule(phi, psi):
    phi, psi = nl.activation(phi), nl.activation(psi)
    rng = np.random.default_rng(3)
    a = 10 ** rng.uniform(-3, 2, (8, 1))
    b = 10 ** rng.uniform(-3, 2, (1, 8))
    rho = np.concatenate([rng.uniform(-0.5, 0.5, (4, 8)), rng.choice([-1, 1], (4, 8))
                          * (1 - 10 ** rng.uniform(-8, -1, (4, 8)))])
    c = rho * np.sqrt(a * b)
    got = g.pair_expectation(phi, psi, a, b, c)
    A, B, C = (np.broadcast_to(t, c.shape).ravel() for t in (a, b, c))
    want = engine._nested_pair(phi, psi, A, B, C).reshape(c.shape)
    assert relative_error(phi, psi, got, want, a, b) < 1e-11
    # Same-shape flat arrays and scalars give the same numbers.
    flat = g.pair_expectation(phi, psi, A, B, C)
    np.testing.assert_allclose(flat.reshape(c.shape), got, rtol=0, atol=1e-13)
    one = g.pair_expectation(phi, psi, A[7], B[7], C[7])
    assert np.shape(one) == () and abs(one - flat[7]) < 1e-13


def test_nngp_layer_shapes_and_diagonal():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((24, 100))
    k = x @ x.T / 100
    q = np.diag(k).copy()
    got = g.pair_expectation(nl.tanh, nl.tanh, q[:, None], q[None, :], k)
    ref = engine._nested_pair(nl.tanh, nl.tanh, *(np.broadcast_to(t, k.shape).ravel()
                                             for t in (q[:, None], q[None, :], k)))
    np.testing.assert_allclose(got.ravel(), ref, rtol=0, atol=1e-12)
    np.testing.assert_allclose(np.diag(got), second_moment(nl.tanh, q), rtol=1e-13)


def test_stein_identity_and_identity_series():
    a, b = np.array([0.5, 3.0, 40.0]), np.array([2.0, 0.1, 1.0])
    c = np.array([0.4, -0.5, 0.6]) * np.sqrt(a * b)
    for act in (nl.tanh, nl.relu, nl.gelu):
        stein = g.pair_expectation(act, nl.identity, a, b, c)
        series = g.pair_expectation(act, quadrature_copy(nl.identity), a, b, c)
        assert relative_error(act, nl.identity, stein, series, a, b) < 1e-12
        swapped = g.pair_expectation(nl.identity, act, b, a, c)
        np.testing.assert_allclose(swapped, stein, rtol=1e-14)
    # relu: E[relu(u) v] = c / 2.
    np.testing.assert_allclose(g.stein_identity(nl.relu, a, c), c / 2, rtol=1e-13)


def test_mean_and_expect_1d():
    var = np.array([1e-3, 0.5, 1.0, 7.0, 100.0])
    np.testing.assert_allclose(g.mean(nl.relu, var), np.sqrt(var / (2 * np.pi)), rtol=1e-14)
    np.testing.assert_allclose(g.mean(nl.gelu, var), var / np.sqrt(2 * np.pi * (1 + var)),
                               rtol=1e-13)
    np.testing.assert_allclose(g.mean(quadrature_copy(nl.relu), var),
                               np.sqrt(var / (2 * np.pi)), rtol=1e-13)
    assert np.all(g.mean(nl.tanh, var) == 0)
    np.testing.assert_allclose(g.expect_1d(np.cos, var), np.exp(-var / 2), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(g.expect_1d(lambda x: x**4, var), 3 * var**2, rtol=1e-13)


def random_cov(rng, p, d):
    m = rng.standard_normal((p, d, d)) / np.sqrt(d)
    return m @ np.swapaxes(m, 1, 2) + 0.1 * np.eye(d)


def test_expectation_quadrature_low_dimension():
    rng = np.random.default_rng(5)
    cov = random_cov(rng, 4, 2)
    val, se = g.expectation(lambda x: x[..., 0] ** 2 * x[..., 1] ** 2, cov)
    want = cov[:, 0, 0] * cov[:, 1, 1] + 2 * cov[:, 0, 1] ** 2
    np.testing.assert_allclose(val, want, rtol=1e-12)
    assert np.all(se == 0)
    # Tensor Gauss–Hermite (40² nodes) is a low-accuracy rule: ~1e-5 for tanh, ~5% for relu.
    val, _ = g.expectation(lambda x: np.tanh(x[..., 0]) * np.tanh(x[..., 1]), cov)
    want = g.pair_expectation(nl.tanh, nl.tanh, cov[:, 0, 0], cov[:, 1, 1], cov[:, 0, 1])
    np.testing.assert_allclose(val, want, rtol=1e-4)
    cov3 = random_cov(rng, 3, 3)
    val, _ = g.expectation(lambda x: x[..., 0] * x[..., 1] * x[..., 2] ** 2, cov3)
    want = cov3[:, 0, 1] * cov3[:, 2, 2] + 2 * cov3[:, 0, 2] * cov3[:, 1, 2]
    np.testing.assert_allclose(val, want, rtol=1e-12)
    # Many covariances at once are processed in bounded chunks.
    big = np.broadcast_to(cov3[0], (3000, 3, 3))
    val, _ = g.expectation(lambda x: x[..., 0] * x[..., 1], big)
    np.testing.assert_allclose(val, cov3[0, 0, 1], rtol=1e-12)


def test_expectation_qmc_high_dimension():
    rng = np.random.default_rng(6)
    cov = random_cov(rng, 5, 5)

    def isserlis(x):
        return x[..., 0] * x[..., 1] * x[..., 2] * x[..., 3]

    val, se = g.expectation(isserlis, cov, seed=1)
    c = cov
    want = c[:, 0, 1] * c[:, 2, 3] + c[:, 0, 2] * c[:, 1, 3] + c[:, 0, 3] * c[:, 1, 2]
    assert np.all(se > 0)
    assert np.all(np.abs(val - want) < 4 * se)
    val2, se2 = g.expectation(lambda x: np.maximum(x[..., 0], 0) * np.maximum(x[..., 3], 0), cov)
    want2 = nl.relu.kernel(c[:, 0, 0], c[:, 3, 3], c[:, 0, 3])
    assert np.all(np.abs(val2 - want2) < 4 * se2)
    again, _ = g.expectation(isserlis, cov, seed=1)
    other, _ = g.expectation(isserlis, cov, seed=2)
    np.testing.assert_array_equal(again, val)
    assert np.all(other != val)
