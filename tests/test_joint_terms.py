"""Kernels of nonlinearities of several G-vectors against independent references.

Every case checks the true error against the reported bound (entry by entry), and that the
default tolerance (1e-8 relative to √(K_ii K_jj)) is met: kinked two-argument terms — products
of kinked functions of independent and of correlated inputs, relu(a)·b, tanh(relu(a) + b),
max(a, b), |a|·step(b) — and three- and four-argument ones. Functions the tracer cannot see
through (kinks unknown) are integrated by randomised QMC and report a standard error.
"""

from __future__ import annotations

import numpy as np
import pytest
from references import (
    abs_kernel,
    pairwise,
    relu_kernel,
    relu_times_linear_correlated,
    relu_times_relu_correlated,
    step_kernel,
    tanh_of_relu_plus,
)

import netsor

#: The references' own accuracy, relative to the scale: on these tests' inputs the tanh(relu(a) + c)
#: reference (48×80 Gauss–Legendre nodes off the diagonal) moves by 7e-14 when refined to 160×240
#: nodes. On other inputs it can be off by 3e-12 (found by the benchmark); ``nodes=(64, 100)``
#: agrees with 120×160 nodes to 1e-14 there, at 2.3 times the cost.
REFERENCE_RTOL = 1e-13


def opaque(f):
    """Hide ``f`` from the tracer (np.asarray of a tracer raises): its kinks become unknown."""
    def g(*xs):
        return f(*(np.asarray(x) for x in xs))
    return g


def relu(x):
    return np.maximum(x, 0.0)


def build(case):
    """Inputs: a = U₁x (σ 1), c = U₂x + b (σ 0.9, bias 0.2), e = U₃x (σ 1.1), f = U₄x + b' (σ 0.7,
    bias 0.4), all independent; b = 0.6 a + 0.8 c is correlated with a."""
    p = netsor.Program()
    n = p.dim("n")
    a = p.input(n, sigma=1.0)
    c = p.input(n, sigma=0.9, bias=0.2)
    e = p.input(n, sigma=1.1)
    f = p.input(n, sigma=0.7, bias=0.4)
    b = 0.6 * a + 0.8 * c
    h = {
        "relu(a)·relu(c), independent": lambda: netsor.relu(a) * netsor.relu(c),
        "relu(a)·relu(b), correlated": lambda: netsor.relu(a) * netsor.relu(b),
        "relu(a)·b, correlated": lambda: netsor.relu(a) * b,
        "tanh(relu(a) + c)": lambda: netsor.tanh(netsor.relu(a) + c),
        "max(a, b), correlated": lambda: netsor.nonlin(np.maximum, a, b),
        "|a|·step(c)": lambda: abs(a) * netsor.step(c),
        "relu(a)·relu(c)·relu(e)": lambda: netsor.nonlin(lambda u, v, w: relu(u) * relu(v) * relu(w), a, c, e),
        "relu(a)·relu(c)·relu(e)·step(f)": lambda: netsor.nonlin(
            lambda u, v, w, z: relu(u) * relu(v) * relu(w) * (z > 0), a, c, e, f),
        "opaque relu(a)·relu(c)": lambda: netsor.nonlin(opaque(lambda u, v: relu(u) * relu(v)), a, c),
    }[case]()
    p.readout(h)
    return p


def reference(case, X, nodes=(48, 80)):
    """The independent reference kernel of ``case``; ``nodes``: of the tanh(relu(a) + c) quadrature."""
    G = X @ X.T / X.shape[1]
    Ka, Kc, Ke, Kf = G, 0.81 * G + 0.04, 1.21 * G, 0.49 * G + 0.16
    Kb, Kab = 0.36 * Ka + 0.64 * Kc, 0.6 * Ka
    k1 = lambda K: relu_kernel(*pairwise(K))  # noqa: E731
    if case in ("relu(a)·relu(c), independent", "opaque relu(a)·relu(c)"):
        return k1(Ka) * k1(Kc)
    if case == "relu(a)·relu(b), correlated":
        return relu_times_relu_correlated(Ka, Kb, Kab)
    if case == "relu(a)·b, correlated":
        return relu_times_linear_correlated(Ka, Kb, Kab)
    if case == "tanh(relu(a) + c)":
        return tanh_of_relu_plus(Ka, Kc, *nodes)
    if case == "max(a, b), correlated":  # b + relu(a − b): Stein for E[b relu(w')] = Cov(b, w')/2
        Kw = Ka - Kab - Kab.T + Kb
        Kbw = Kab.T - Kb
        return Kb + Kbw / 2 + Kbw.T / 2 + relu_kernel(*pairwise(Kw))
    if case == "|a|·step(c)":
        return abs_kernel(*pairwise(Ka)) * step_kernel(*pairwise(Kc))
    if case == "relu(a)·relu(c)·relu(e)":
        return k1(Ka) * k1(Kc) * k1(Ke)
    if case == "relu(a)·relu(c)·relu(e)·step(f)":
        return k1(Ka) * k1(Kc) * k1(Ke) * step_kernel(*pairwise(Kf))
    raise KeyError(case)


EXACT = ["relu(a)·relu(c), independent", "relu(a)·relu(b), correlated", "relu(a)·b, correlated",
         "tanh(relu(a) + c)", "max(a, b), correlated", "|a|·step(c)", "relu(a)·relu(c)·relu(e)",
         "relu(a)·relu(c)·relu(e)·step(f)"]


def check(case, X, rtol):
    K, E = netsor.limit(build(case), X, rtol=rtol).nngp(with_error=True)
    ref = reference(case, X)
    scale = np.sqrt(np.outer(np.diag(ref), np.diag(ref)))
    true = np.abs(K - ref)
    assert np.all(true <= E + REFERENCE_RTOL * scale), np.max((true - E) / scale)
    return np.max(true / scale), np.max(E / scale)


@pytest.mark.parametrize("case", EXACT)
def test_kinked_joint_terms_meet_the_default_tolerance(case):
    X = np.random.default_rng(1).standard_normal((4, 6))
    true, bound = check(case, X, netsor.interpret.infinite.DEFAULT_RTOL)
    assert bound <= 1e-8 and true <= 1e-8


def test_unknown_kinks_fall_back_to_qmc_with_a_standard_error():
    X = np.random.default_rng(2).standard_normal((3, 6))
    lim = netsor.limit(build("opaque relu(a)·relu(c)"), X, rtol=1e-2)
    K, E = lim.nngp(with_error=True)
    ref = reference("opaque relu(a)·relu(c)", X)
    assert lim.stderr > 0
    assert np.all(np.abs(K - ref) <= E)
    with pytest.raises(netsor.NumericalError, match="Monte-Carlo standard error"):
        netsor.nngp(build("opaque relu(a)·relu(c)"), X)  # 1e-8 is out of reach: said, not hidden


@pytest.mark.parametrize("case", ["relu(a)·relu(b), correlated", "relu(a)·b, correlated"])
def test_highly_correlated_inputs_take_the_series_at_its_largest_degree(case):
    """Inputs at correlation 0.91: the Mehler series of the 2+2-dimensional term cannot reach 1e-8
    within its largest degree, and its bound there (~2e-7) is what is reported — not the ~1e-4 of
    the randomised-QMC fallback (no Monte-Carlo part: stderr 0). The default rtol is refused."""
    X = np.random.default_rng(0).standard_normal((8, 6))[[1, 4, 6]]
    lim = netsor.limit(build(case), X, rtol=1e-6)
    K, E = lim.nngp(with_error=True)
    ref = reference(case, X)
    scale = np.sqrt(np.outer(np.diag(ref), np.diag(ref)))
    assert np.all(np.abs(K - ref) <= E + REFERENCE_RTOL * scale)
    assert lim.stderr == 0.0 and np.max(E / scale) < 1e-6
    with pytest.raises(netsor.NumericalError, match="above rtol = 1e-08"):
        netsor.nngp(build(case), X)
