"""Kernels of nonlinearities of several G-vectors against independent references.

Every case checks the true error against the reported bound (entry by entry), and that the
default tolerance (1e-8 relative to √(K_ii K_jj)) is met: kinked two-argument terms — products
of kinked functions of independent and of correlated inputs, relu(a)·b, tanh(relu(a) + b),
max(a, b), |a|·step(b) — and three- and four-argument ones. Functions the tracer cannot see
through (kinks unknown) are integrated by randomised QMC and report a standard error.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from references import (
    abs_kernel,
    abs_minus_clip_kernel,
    abs_minus_clip_shared_kernel,
    act_of_a_kink_kernel,
    conditioned_point,
    erf_erf_noncentral,
    erf_kernel,
    factor_times_tanh_of_a_form,
    hard_tanhs_noncentral,
    kinked_factor_pair,
    nested_kink_of_a_bias_kernel,
    one_factor_orthant,
    owens_bvn,
    pairwise,
    piecewise_pair,
    relu4_adaptive,
    relu_kernel,
    relu_of_linear_times_tanh,
    relu_relu_noncentral,
    relu_times_erf_correlated,
    relu_times_linear_correlated,
    relu_times_relu_correlated,
    step_kernel,
    steps_noncentral,
    tanh_of_relu_plus,
    tanh_tanh_noncentral,
    two_factor_orthant,
)
from scipy import integrate, special, stats
from strategies import gate as normal_cdf_gate

import netsor
from netsor import NumericalError
from netsor.activations import abs_ as abs_act
from netsor.activations import erf as erf_act
from netsor.activations import gelu as gelu_act
from netsor.activations import relu as relu_act
from netsor.activations import step as step_act
from netsor.activations import tanh as tanh_act
from netsor.gaussian.joint import (
    JointFunction,
    _conditioned_pairs,
    _nested_nodes,
    onto_forms,
    point_moments,
    rule_size,
    whiten,
)
from netsor.gaussian.orthant import MAX_ORTHANT_DIM, ConeFunction, SingularOrthant, cone_expectation, orthant
from netsor.gaussian.separable import Conditional
from netsor.interpret.functions import cone_function
from netsor.ir import expr as ex

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
        "relu(a)·erf(c), independent": lambda: netsor.relu(a) * netsor.erf(c),
        "relu(a)·erf(b), correlated": lambda: netsor.relu(a) * netsor.erf(b),
        "tanh(relu(a) + c)": lambda: netsor.tanh(netsor.relu(a) + c),
        "erf(2b + relu(a − ½))": lambda: netsor.erf(2 * b + netsor.relu(a - 0.5)),
        "relu(b + tanh(a)), a kink on a curve": lambda: netsor.relu(b + netsor.tanh(a)),
        "max(a, b), correlated": lambda: netsor.nonlin(np.maximum, a, b),
        "|a|·step(c)": lambda: abs(a) * netsor.step(c),
        "relu(a)·relu(c)·relu(e)": lambda: netsor.nonlin(lambda u, v, w: relu(u) * relu(v) * relu(w), a, c, e),
        "relu(a)·relu(c)·relu(e)·step(f)": lambda: netsor.nonlin(
            lambda u, v, w, z: relu(u) * relu(v) * relu(w) * (z > 0), a, c, e, f),
        "c·tanh(a + c/2), correlated": lambda: c * netsor.tanh(a + 0.5 * c),
        "opaque relu(a)·relu(c)": lambda: netsor.nonlin(opaque(lambda u, v: relu(u) * relu(v)), a, c),
        "hard_tanh(a)·hard_tanh(b), correlated": lambda: netsor.hard_tanh(a) * netsor.hard_tanh(b),
        "relu(a − ½)·step(b + 0.3), correlated": lambda: netsor.relu(a - 0.5) * netsor.step(b + 0.3),
        "relu(a − ½)·relu(b), correlated": lambda: netsor.relu(a - 0.5) * netsor.relu(b),
    }[case]()
    p.readout(h)
    return p


def reference(case, X, nodes=(48, 80)):
    """The independent reference kernel of ``case``; ``nodes``: of the tanh(relu(a) + c) quadrature."""
    if case in OFFSET_KINKS:
        return offset_kink_reference(case, X)
    if case in SHIFTED and case != "tanh(relu(a) + c)":
        return shifted_reference(case, X)
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
    if case == "relu(a)·erf(c), independent":
        return k1(Ka) * erf_kernel(*pairwise(Kc))
    if case == "relu(a)·erf(b), correlated":
        return relu_times_erf_correlated(Ka, Kb, Kab)
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
    if case == "c·tanh(a + c/2), correlated":  # a G-vector times a function of a form it enters
        return factor_times_tanh_of_a_form(Kc, Ka + 0.25 * Kc, 0.5 * Kc)
    raise KeyError(case)


#: Kinks off the origin (no cone function): f(a) f(a') and the conditional closed form of the b-side given
#: (a, a') (:func:`references.kinked_factor_pair`), and f, g for the diagonal.
OFFSET_KINKS = {
    "hard_tanh(a)·hard_tanh(b), correlated": (lambda x: np.clip(x, -1, 1), (-1.0, 1.0), hard_tanhs_noncentral,
                                              lambda x: np.clip(x, -1, 1), (-1.0, 1.0)),
    "relu(a − ½)·step(b + 0.3), correlated": (lambda x: relu(x - 0.5), (0.5,),
                                              lambda *law: steps_noncentral(*law, offset=0.3),
                                              lambda x: (x > -0.3) * 1.0, (-0.3,)),
    "relu(a − ½)·relu(b), correlated": (lambda x: relu(x - 0.5), (0.5,), relu_relu_noncentral, relu, (0.0,)),
}


def offset_kink_reference(case, X):
    """The kernel of ``f(a)·g(b)`` (``b = 0.6 a + 0.8 c`` as in :func:`build`): each off-diagonal entry a
    two-dimensional adaptive integral over (a, a') of a closed form in (b, b'), each diagonal one over (a, b)."""
    f, kinks_f, inner, g, kinks_g = OFFSET_KINKS[case]
    G = X @ X.T / X.shape[1]
    Ka, Kc = G, 0.81 * G + 0.04
    Kb, Kab = 0.36 * Ka + 0.64 * Kc, 0.6 * Ka
    K = np.empty_like(G)
    for i in range(len(X)):
        K[i, i] = piecewise_pair(lambda x: f(x) ** 2, lambda x: g(x) ** 2, Ka[i, i], Kb[i, i], Kab[i, i],
                                 kinks_f, kinks_g)
        for j in range(i + 1, len(X)):
            S = np.array([[Ka[i, i], Ka[i, j], Kab[i, i], Kab[j, i]], [Ka[j, i], Ka[j, j], Kab[i, j], Kab[j, j]],
                          [Kab[i, i], Kab[i, j], Kb[i, i], Kb[i, j]], [Kab[j, i], Kab[j, j], Kb[j, i], Kb[j, j]]])
            K[i, j] = K[j, i] = kinked_factor_pair(S, f, kinks_f, inner)
    return K


EXACT = ["relu(a)·relu(c), independent", "relu(a)·relu(b), correlated", "relu(a)·b, correlated",
         "relu(a)·erf(c), independent", "relu(a)·erf(b), correlated",
         "tanh(relu(a) + c)", "max(a, b), correlated", "|a|·step(c)", "relu(a)·relu(c)·relu(e)",
         "relu(a)·relu(c)·relu(e)·step(f)", "c·tanh(a + c/2), correlated", "relu(b + tanh(a)), a kink on a curve"]


def check(case, X, rtol):
    K, E = netsor.limit(build(case), X, rtol=rtol).nngp(with_error=True)
    ref = reference(case, X)
    scale = np.sqrt(np.outer(np.diag(ref), np.diag(ref)))
    true = np.abs(K - ref)
    assert np.all(true <= E + REFERENCE_RTOL * scale), np.max((true - E) / scale)
    return np.max(true / scale), np.max(E / scale)


#: the cases of :data:`EXACT` that take 25–40 s (the default suite keeps the others)
SLOW_EXACT = {"c·tanh(a + c/2), correlated", "relu(b + tanh(a)), a kink on a curve"}


@pytest.mark.parametrize("case", [pytest.param(c, marks=pytest.mark.slow) if c in SLOW_EXACT else c for c in EXACT])
def test_kinked_joint_terms_meet_the_default_tolerance(case):
    X = np.random.default_rng(1).standard_normal((4, 6))
    true, bound = check(case, X, netsor.interpret.infinite.DEFAULT_RTOL)
    assert bound <= 1e-8 and true <= 1e-8


@pytest.mark.slow  # ~30 s
def test_a_kinked_composition_of_two_arguments_meets_1e_8_where_the_whole_tail_bound_did_not():
    """tanh(relu(a) + c) on the benchmark's inputs at the default rtol: one pair's Mehler series at degree 96
    is 1.1e-9 from the reference, and Cauchy–Schwarz over the whole remainder bounded it by 1.02e-8
    (refused); degree-by-degree energies of higher-order tables bound it by 1.8e-9, covering the error.
    (At degree 64 the same held at rtol 1e-7: error 4.8e-8, whole-tail bound 3.0e-7, sharpened 5.9e-8.)"""
    X = np.random.default_rng(0).standard_normal((6, 6))
    K, E = netsor.limit(build("tanh(relu(a) + c)"), X).nngp(with_error=True)
    ref = reference("tanh(relu(a) + c)", X, nodes=(64, 100))  # the default rule is 2e-12 off on these inputs
    scale = np.sqrt(np.outer(np.diag(ref), np.diag(ref)))
    true = np.abs(K - ref)
    assert np.all(true <= E + REFERENCE_RTOL * scale) and np.max(E / scale) <= 1e-8
    assert np.max(true / scale) > 1e-10  # the series' own error is there: the bound is what changed


@pytest.mark.parametrize("case", [pytest.param(c, marks=pytest.mark.slow) if c.startswith("hard_tanh") else c
                                  for c in OFFSET_KINKS])
def test_two_argument_kinks_off_the_origin_meet_1e_7(case):
    """Products of functions kinked off the origin of correlated vectors are not cone functions: Hermite
    tables and a Mehler series per pair. At series degree 64 their bounds were 5e-7 – 1.2e-5 (refused at the
    issue's 1e-7 for two-argument kinked NonLins); at degree 96 they meet it, and the bound covers the true
    error against the conditional references (~1e-12). Inputs: four of ten random ones, with the pair whose
    series converges slowest (input correlation 0.91)."""
    X = np.random.default_rng(0).standard_normal((10, 6))[[0, 1, 4, 7]]
    K, E = netsor.limit(build(case), X, rtol=1e-7).nngp(with_error=True)
    ref = reference(case, X)
    scale = np.sqrt(np.outer(np.diag(ref), np.diag(ref)))
    true = np.abs(K - ref)
    assert np.all(true <= E + 1e-11 * scale), np.max((true - E) / scale)
    assert np.max(E / scale) <= 1e-7


def test_unknown_kinks_fall_back_to_qmc_with_a_standard_error():
    X = np.random.default_rng(2).standard_normal((3, 6))
    lim = netsor.limit(build("opaque relu(a)·relu(c)"), X, rtol=1e-2)
    K, E = lim.nngp(with_error=True)
    ref = reference("opaque relu(a)·relu(c)", X)
    assert lim.stderr > 0
    assert np.all(np.abs(K - ref) <= E)
    with pytest.raises(netsor.NumericalError, match="Monte-Carlo standard error") as refusal:
        netsor.nngp(build("opaque relu(a)·relu(c)"), X)  # 1e-8 is out of reach: said, not hidden
    # and what to do instead: a monomial of two arguments is not simulated by "auto", so it names the method
    assert "method='qmc' (rtol >= 0.001) simulates the limit" in str(refusal.value)
    sim = netsor.limit(build("opaque relu(a)·relu(c)"), X, rtol=1e-2, method="qmc")
    K_sim, E_sim = sim.nngp(with_error=True)
    assert np.all(np.abs(K_sim - ref) <= E_sim)


@pytest.mark.parametrize("transposed", [False, True])
def test_a_kink_on_the_zero_set_of_a_product_is_split_exactly(transposed):
    """``h = relu(g·tanh b)``: relu's kink lies on ``{g = 0} ∪ {b = 0}``, the zero planes of the factors,
    so the nested rule splits its panels there and meets the default rtol (it went to QMC and was
    refused at 1e-6 before, found by the fuzz test on ``g = W Wᵀ b``, whose limit is
    ``Ẑ + σ²·b`` with ``Var Ẑ = σ⁴ Var b``). Reference: a closed form given b, quadrature over b."""
    p = netsor.Program()
    n = p.dim("n")
    b = p.gaussian(n, sigma=1.2)
    if transposed:
        W = p.matrix(n, n, sigma=0.9)
        g, var_u, c = W @ (W.T @ b), 0.9**4 * 1.44, 0.81
    else:
        g, var_u, c = p.gaussian(n, sigma=0.7) - 0.6 * b, 0.49, -0.6
    h = netsor.relu(g * netsor.tanh(b))
    expr = p.line_of(h).expr
    assert not expr.hidden_kinks and len(expr.kink_planes()) == 2
    lim = netsor.limit(p)
    (k_hh,), (e_hh,) = (x.ravel() for x in lim.cov(h, with_error=True))
    (k_hb,), (e_hb,) = (x.ravel() for x in lim.cov(h, b, with_error=True))
    ref_hh, ref_hb = relu_of_linear_times_tanh(var_u, 1.44, c)
    assert abs(k_hh - ref_hh) <= e_hh + 1e-13 * ref_hh and e_hh <= 1e-8 * ref_hh
    scale = np.sqrt(ref_hh * 1.44)
    assert abs(k_hb - ref_hb) <= e_hb + 1e-13 * scale and e_hb <= 1e-8 * scale


def test_kinks_off_the_zero_set_of_a_product_stay_hidden():
    """A kink at a level other than 0, a sum, or a factor whose zeros are not a finite set (sin) leave
    curved or unknown kink sets: the expression says so, and the engine does not split on wrong planes."""
    p = netsor.Program()
    n = p.dim("n")
    g, b = p.gaussian(n), p.gaussian(n)
    for h in (netsor.relu(g * netsor.tanh(b) + 0.3), netsor.relu(g * netsor.sin(b)),
              netsor.hard_tanh(g * netsor.tanh(b))):
        assert p.line_of(h).expr.hidden_kinks
    both = p.line_of(netsor.step(g * netsor.sigmoid(b) * netsor.relu(b - 0.5))).expr
    planes = {(tuple((v.index, c) for v, c in terms), o) for terms, o in both.kink_planes()}
    assert not both.hidden_kinks and planes == {(((g.index, 1.0),), 0.0), (((b.index, 1.0),), -0.5)}


def test_a_product_of_three_gates_of_correlated_forms_covers_its_error():
    """``h = (1 + erf a)(1 + erf d)(1 + erf(a + d))``, a ⟂ d of unequal variances: ``E h²`` sums pairs of
    monomials whose products have up to six gate forms (the Genz rule). A product met first as the
    mirrored pair (``ea·ed | ed·es`` before ``ed·es | ea·ed``) kept that pair's argument order while
    the covariance was taken in the other: the value was off by 0.12 with a bound of 6e-5. Reference:
    two-dimensional adaptive quadrature of a smooth integrand."""
    va, vd = 0.5, 1.5

    def fn(u, v):
        return (1 + special.erf(u)) * (1 + special.erf(v)) * (1 + special.erf(u + v))

    p = netsor.Program()
    n = p.dim("n")
    p.readout(netsor.nonlin(fn, p.gaussian(n, sigma=np.sqrt(va)), p.gaussian(n, sigma=np.sqrt(vd))))
    K, E = netsor.limit(p, rtol=1e-4).nngp(with_error=True)
    ref = integrate.dblquad(lambda t, s: fn(np.sqrt(va) * s, np.sqrt(vd) * t) ** 2
                            * np.exp(-(s * s + t * t) / 2) / (2 * np.pi), -12, 12, -12, 12,
                            epsabs=1e-13, epsrel=1e-12)[0]
    assert abs(K[0, 0] - ref) <= E[0, 0] and E[0, 0] <= 1e-4 * ref


@settings(max_examples=15, deadline=None, derandomize=True, database=None)
@given(forms=st.lists(st.tuples(st.sampled_from([-1.0, -0.5, 0.5, 1.0]), st.sampled_from([-1.0, 0.0, 0.7, 1.0])),
                      min_size=2, max_size=3),
       linear=st.booleans(), sigma_a=st.sampled_from([0.6, 1.0, 1.4]), sigma_d=st.sampled_from([0.5, 1.2]),
       rtol=st.sampled_from([1e-4, 1e-8]))
def test_random_products_of_gates_of_two_gaussians_meet_their_tolerance(forms, linear, sigma_a, sigma_d, rtol):
    """``E h²`` for products ``h`` of 2–3 normal-CDF gates ``Φ(α a + β d)`` (times ``a`` or not) of two
    independent Gaussians: the squares of the monomials have up to 6 gate forms, beyond the exact orthants;
    they are smooth functions of two variables, so the nested rule takes them, exact to rounding at any rtol
    (the Genz rule took them first: it reached 1.1e-4 relative on three gates and was refused at rtol
    1e-4). Reference: two-dimensional adaptive quadrature."""
    def fn(u, v):
        out = u if linear else 1.0
        for alpha, beta in forms:
            out = out * normal_cdf_gate(alpha * u + beta * v)
        return out

    p = netsor.Program()
    n = p.dim("n")
    p.readout(netsor.nonlin(fn, p.gaussian(n, sigma=sigma_a), p.gaussian(n, sigma=sigma_d)))
    K, E = netsor.limit(p, rtol=rtol).nngp(with_error=True)
    ref = integrate.dblquad(lambda t, s: fn(sigma_a * s, sigma_d * t) ** 2 * np.exp(-(s * s + t * t) / 2)
                            / (2 * np.pi), -12, 12, -12, 12, epsabs=1e-15, epsrel=1e-12)[0]
    assert abs(K[0, 0] - ref) <= E[0, 0] + 1e-12 * ref and E[0, 0] <= rtol * ref


def _correlated_inputs(rho, seed):
    """Two inputs of dimension 6 at cosine ≈ ``rho`` (the G-vectors a, a' then correlate at about rho)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(6)
    return np.stack([x, rho * x + np.sqrt(1 - rho**2) * np.linalg.norm(x) / np.sqrt(6) * rng.standard_normal(6)])


@pytest.mark.parametrize("rho", [0.9, 0.99, 0.999, 0.9999])
@pytest.mark.parametrize("case", ["relu(a)·relu(b), correlated", "relu(a)·b, correlated", "relu(a)·erf(b), correlated"])
def test_highly_correlated_inputs_meet_the_default_tolerance(case, rho):
    """Products of relus and linear forms of correlated G-vectors are cone moments, exact up to
    rounding and one-dimensional Plackett integrals: at input correlation up to 0.9999 the default
    rtol (1e-8) is met and the bound covers the true error. References: relu(a)·b by Stein's lemma
    (closed form); relu(a)·relu(b) by adaptive scipy quadrature of a conditional closed form
    (``references.relu4_adaptive``, ~1e-12), for the off-diagonal entry."""
    X = _correlated_inputs(rho, seed=int(rho * 1e4))
    K, E = netsor.limit(build(case), X).nngp(with_error=True)
    if case != "relu(a)·relu(b), correlated":
        ref = reference(case, X)
    else:
        G = X @ X.T / 6
        Ka, Kb, Kab = G, 0.36 * G + 0.64 * (0.81 * G + 0.04), 0.6 * G
        S = np.array([[Ka[0, 0], Ka[0, 1], Kab[0, 0], Kab[0, 1]], [Ka[1, 0], Ka[1, 1], Kab[1, 0], Kab[1, 1]],
                      [Kab[0, 0], Kab[1, 0], Kb[0, 0], Kb[0, 1]], [Kab[0, 1], Kab[1, 1], Kb[1, 0], Kb[1, 1]]])
        ref = reference(case, X)
        ref[0, 1] = ref[1, 0] = relu4_adaptive(S)
    scale = np.sqrt(np.outer(np.diag(ref), np.diag(ref)))
    true = np.abs(K - ref)
    assert np.all(true <= E + 1e-12 * scale), np.max((true - E) / scale)
    assert np.max(E / scale) <= 1e-8


@pytest.mark.parametrize("rho", [0.99, -0.999])
@pytest.mark.parametrize("case", list(OFFSET_KINKS))
def test_nearly_colinear_pairs_of_separable_functions_are_conditioned_to_the_default_tolerance(case, rho):
    """Products of one function of each argument, at input correlation ±0.99–0.999: the Mehler series decays
    like ‖R‖^k and cannot reach them; they went to a 4-D rule over eight kink planes, then to QMC
    (hard_tanh(a)·hard_tanh(b) at input correlation −0.989: 4.5e-4, refused at rtol 1e-4). Conditioned on
    one argument of each side, the other pair is a closed form and the rest a 2-D nested rule: the default
    rtol is met and the bound covers the true error against the conditional references."""
    X = _correlated_inputs(abs(rho), seed=7) * np.array([[1.0], [np.sign(rho)]])
    K, E = netsor.limit(build(case), X).nngp(with_error=True)
    ref = offset_kink_reference(case, X)
    scale = np.sqrt(np.outer(np.diag(ref), np.diag(ref)))
    true = np.abs(K - ref)
    assert np.all(true <= E + 1e-11 * scale), np.max((true - E) / scale)
    assert np.max(E / scale) <= 1e-8


#: Smooth separable products ``f(a)·g(b)``: the program's factor, f, g, and the closed form of the erf pair
#: ``E[g(X) g(Y)]`` of a Gaussian pair with means.
SMOOTH_SEPARABLE = {
    "erf(a + 0.3)·erf(b − 0.2)": (lambda e, f: netsor.erf(e + 0.3) * netsor.erf(f - 0.2),
                                  lambda x: special.erf(x + 0.3), lambda y: special.erf(y - 0.2),
                                  lambda m1, m2, s1, s2, r: erf_erf_noncentral(m1 - 0.2, m2 - 0.2, s1, s2, r)),
    "tanh(a)·erf(b)": (lambda e, f: netsor.tanh(e) * netsor.erf(f), np.tanh, special.erf, erf_erf_noncentral),
}


@pytest.mark.parametrize("rho", [pytest.param(0.99, marks=pytest.mark.slow), -0.999])
@pytest.mark.parametrize("case", list(SMOOTH_SEPARABLE))
def test_nearly_colinear_pairs_of_smooth_separable_functions_are_conditioned(case, rho):
    """Smooth factors of correlated vectors at input correlation ±0.99–0.999: the series cannot reach these
    pairs and they went to QMC (``tanh(a)·tanh(b)`` at −0.984: 2.4e-4, ``erf(a + 0.97)·tanh(b)`` at 0.989:
    1.5e-4, refused at 1e-6). Conditioned, the inner pair is a Gauss–Hermite rule (error estimated by a
    second one), the outer a 2-D nested rule. Reference: adaptive quadrature over (a, a') of the erf
    pair's closed form given them (``erf x = 2 P(x + ε > 0) − 1``, Owen's T); the diagonal by nested
    quadrature (Gauss–Legendre inside: the functions are entire). The 0.99 cases run with the slow tests
    (the engine takes ~2.5 s a pair: a 2-D nested rule over Gauss–Hermite pairs)."""
    factor, outer, g, inner = SMOOTH_SEPARABLE[case]
    p = netsor.Program()
    n = p.dim("n")
    a, c = p.input(n, sigma=1.0), p.input(n, sigma=0.9, bias=0.2)
    b = 0.6 * a + 0.8 * c
    p.readout(factor(a, b))
    X = _correlated_inputs(abs(rho), seed=7) * np.array([[1.0], [np.sign(rho)]])
    K, E = netsor.limit(p, X).nngp(with_error=True)
    G = X @ X.T / X.shape[1]
    Ka, Kb, Kab = G, 0.36 * G + 0.64 * (0.81 * G + 0.04), 0.6 * G
    S = np.array([[Ka[0, 0], Ka[0, 1], Kab[0, 0], Kab[1, 0]], [Ka[1, 0], Ka[1, 1], Kab[0, 1], Kab[1, 1]],
                  [Kab[0, 0], Kab[0, 1], Kb[0, 0], Kb[0, 1]], [Kab[1, 0], Kab[1, 1], Kb[1, 0], Kb[1, 1]]])
    ref_01 = kinked_factor_pair(S, outer, (), inner)
    ref_diag = [piecewise_pair(lambda x: outer(x) ** 2, lambda y: g(y) ** 2, Ka[i, i], Kb[i, i], Kab[i, i])
                for i in (0, 1)]
    scale = np.sqrt(ref_diag[0] * ref_diag[1])
    assert abs(K[0, 1] - ref_01) <= E[0, 1] + 1e-12 * scale and E[0, 1] <= 1e-8 * scale
    for i in (0, 1):
        assert abs(K[i, i] - ref_diag[i]) <= E[i, i] + 1e-12 * ref_diag[i]


@pytest.mark.parametrize("inner, reach", [("erf", 1e-8), pytest.param("tanh", 1e-4, marks=pytest.mark.slow)])
def test_conditioning_agrees_with_the_series_where_both_reach(inner, reach):
    """``tanh(a)·g(b)`` at input correlation 0.8, where the Mehler series reaches the default rtol: the
    conditioned rule, called on the same pair, agrees with it within the sum of their bounds — two
    independent rules (Hermite tables of each point vs. a nested rule of a conditional expectation). The
    inner Gauss–Hermite rule converges fast for an entire g (erf: within 1e-8) and slowly for tanh (poles at
    ±iπ/2: its two rules differ by 3e-6 here, and that is the bound it reports)."""
    g = {"erf": (netsor.erf, special.erf, netsor.activations.erf),
         "tanh": (netsor.tanh, np.tanh, netsor.activations.tanh)}[inner]
    p = netsor.Program()
    n = p.dim("n")
    a, c = p.input(n, sigma=1.0), p.input(n, sigma=0.9, bias=0.2)
    p.readout(netsor.tanh(a) * g[0](0.6 * a + 0.8 * c))
    X = _correlated_inputs(0.8, seed=3)
    K, E = netsor.limit(p, X).nngp(with_error=True)
    G = X @ X.T / X.shape[1]
    Ka, Kb, Kab = G, 0.36 * G + 0.64 * (0.81 * G + 0.04), 0.6 * G
    joint_cov = np.array([[Ka[0, 0], Kab[0, 0], Ka[0, 1], Kab[0, 1]], [Kab[0, 0], Kb[0, 0], Kab[1, 0], Kb[0, 1]],
                          [Ka[1, 0], Kab[1, 0], Ka[1, 1], Kab[1, 1]], [Kab[0, 1], Kb[1, 0], Kab[1, 1], Kb[1, 1]]])
    F = JointFunction(2, lambda u: np.tanh(u[..., 0]) * g[1](u[..., 1]), None, (), False, True, ("tanh·g", inner),
                      conditionals=(Conditional(0, g[2], netsor.activations.tanh),
                                    Conditional(1, netsor.activations.tanh, g[2])))
    done, value, err = _conditioned_pairs(F, F, joint_cov[None], 0, np.array([1e-10]))
    assert done[0] and err[0] <= reach * np.sqrt(K[0, 0] * K[1, 1])
    assert abs(value[0] - K[0, 1]) <= err[0] + E[0, 1]


#: Functions of one argument shifted by a function of another, ``h(κq + s(p))`` (``b = 0.6 a + 0.8 c``
#: correlated with ``a``, ``c`` independent of it; programs in :func:`build`): which vector is q, κ, s and its
#: kinks, h and its kinks (numpy), and ``E[h(κX) h(κY)]`` of a Gaussian pair with means (the reference's inner
#: pair, shifted by s/κ). ``relu(b + tanh(a))`` has a curved kink: before, QMC everywhere.
SHIFTED = {
    "tanh(relu(a) + c)": ("c", 1.0, relu, (0.0,), np.tanh, (), tanh_tanh_noncentral),
    "erf(2b + relu(a − ½))": ("b", 2.0, lambda x: relu(x - 0.5), (0.5,), special.erf, (),
                              lambda m1, m2, s1, s2, r: erf_erf_noncentral(2 * m1, 2 * m2, 2 * s1, 2 * s2, r)),
    "relu(b + tanh(a)), a kink on a curve": ("b", 1.0, np.tanh, (), relu, (0.0,), relu_relu_noncentral),
}


def shifted_reference(case, X):
    """The kernel of ``h(κq + s(p))`` (:data:`SHIFTED`, vectors as in :func:`build`): each off-diagonal entry an
    adaptive integral over (a, a') of the inner pair given them, each diagonal one nested adaptive quadrature
    split where the kink of h crosses the inner axis."""
    q, kappa, shift, kinks, h, h_kinks, inner = SHIFTED[case]
    G = X @ X.T / X.shape[1]
    Ka, Kc = G, 0.81 * G + 0.04
    Kq, Kaq = (Kc, 0.0 * G) if q == "c" else (0.36 * Ka + 0.64 * Kc, 0.6 * Ka)
    K = np.empty_like(G)
    for i in range(len(X)):
        K[i, i] = conditioned_point(lambda u, v: h(kappa * v + shift(u)) ** 2, Ka[i, i], Kq[i, i], Kaq[i, i],
                                    cuts=lambda u: [(k - shift(u)) / kappa for k in h_kinks], kinks_p=kinks)
        for j in range(i + 1, len(X)):
            S = np.array([[Ka[i, i], Ka[i, j], Kaq[i, i], Kaq[i, j]], [Ka[j, i], Ka[j, j], Kaq[j, i], Kaq[j, j]],
                          [Kaq[i, i], Kaq[j, i], Kq[i, i], Kq[i, j]], [Kaq[i, j], Kaq[j, j], Kq[j, i], Kq[j, j]]])
            # 200 Gauss–Legendre nodes on the inner axis: 80 left 2.6e-9 (relu(b + tanh(a)) on random inputs; a
            # 400² product rule agrees with 200 to 1e-16)
            K[i, j] = K[j, i] = kinked_factor_pair(S, np.ones_like, kinks, inner, shift=lambda x: shift(x) / kappa,
                                                   nodes=200)
    return K


@pytest.mark.slow  # 17–44 s a case
@pytest.mark.parametrize("rho", [0.99, -0.999])
@pytest.mark.parametrize("case", list(SHIFTED))
def test_nearly_colinear_pairs_of_shifted_functions_are_conditioned(case, rho):
    """``h(κq + s(p))`` at input correlation ±0.99–0.999 (``tanh(relu(a) + c)``: a bound of 2.5e-4 by QMC at
    −0.989, refused at rtol 1e-6; ``relu(b + tanh(a))``, kinked on a curve, by QMC at every pair and point,
    refused at 1e-6): given (p, p'), the pair (q, q') is Gaussian and the shifts are means, so the inner pair
    is a Gauss–Hermite rule (tanh) or a closed form, the outer a 2-D rule kinked where s is; each point's
    ``E F²`` is a product rule whose inner axis is split where the kink crosses it. The default rtol is met
    and the bounds cover the true errors against adaptive quadrature over (a, a') of the inner pair by
    Gauss–Legendre (tanh) or closed forms (Owen's T), and, on the diagonal, nested adaptive quadrature."""
    X = _correlated_inputs(abs(rho), seed=7) * np.array([[1.0], [np.sign(rho)]])
    K, E = netsor.limit(build(case), X).nngp(with_error=True)
    ref = shifted_reference(case, X)
    scale = np.sqrt(np.outer(np.diag(ref), np.diag(ref)))
    assert np.all(np.abs(K - ref) <= E + 1e-12 * scale), np.max((np.abs(K - ref) - E) / scale)
    assert np.max(E / scale) <= 1e-8


#: One-argument factors of the random separable products: (name, builder of the factor from a vector).
_FACTORS = [("relu(x − k)", lambda x, k: netsor.relu(x - k)), ("step(x + k)", lambda x, k: netsor.step(x + k)),
            ("hard_tanh", lambda x, k: netsor.hard_tanh(x)), ("tanh", lambda x, k: netsor.tanh(x)),
            ("|x − k|", lambda x, k: abs(x - k)), ("relu(x) − relu(x − k)/2", lambda x, k: netsor.relu(x)
                                                  - 0.5 * netsor.relu(x - k)),
            ("erf(x + k)", lambda x, k: netsor.erf(x + k)), ("x", lambda x, k: x)]


def check_separable_conditioning(f, g, k, w, sign, spread, seed, shifted=False):
    """``f(a)·g(b)`` (b = w a + √(1 − w²) c), or with ``shifted`` ``g(b + f(a))``, on three inputs, the second
    ``sign`` × the first plus noise of scale ``spread`` (nearly colinear to 0.8): the engine's kernel against the
    same kernel with conditioning forced on every pair the series leaves at degree 8 (``MAX_DEGREE``): two rules,
    within the sum of their bounds."""
    rng = np.random.default_rng(seed)
    p = netsor.Program()
    n = p.dim("n")
    a, c = p.input(n, sigma=1.2), p.input(n, sigma=0.8, bias=0.3)
    b = w * a + np.sqrt(1 - w * w) * c
    p.readout(_FACTORS[g][1](b + _FACTORS[f][1](a, k), -k / 2) if shifted
              else _FACTORS[f][1](a, k) * _FACTORS[g][1](b, -k / 2))
    X = rng.standard_normal((3, 5))
    X[1] = sign * X[0] + spread * rng.standard_normal(5)
    K1, E1 = netsor.limit(p, X, rtol=1e-6).nngp(with_error=True)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(netsor.gaussian.joint, "MAX_DEGREE", 8)
        try:
            K2, E2 = netsor.limit(p, X, rtol=1e-6).nngp(with_error=True)
        except NumericalError:
            return  # pairs that are not separable-conditionable stay with the degree-8 series: out of reach
    scale = np.sqrt(np.outer(np.diag(K1), np.diag(K1)))
    assert np.all(np.abs(K1 - K2) <= E1 + E2 + 1e-12 * scale), np.max((np.abs(K1 - K2) - E1 - E2) / scale)


SEPARABLE_PRODUCTS = dict(f=st.integers(0, len(_FACTORS) - 1), g=st.integers(0, len(_FACTORS) - 1),
                          k=st.sampled_from([0.0, 0.4, -0.7]), w=st.sampled_from([-0.8, -0.3, 0.01, 0.5, 0.9]),
                          sign=st.sampled_from([-1.0, 1.0]), spread=st.sampled_from([0.03, 0.1, 0.5]),
                          seed=st.integers(0, 2**16), shifted=st.booleans())


@settings(max_examples=8, deadline=None, derandomize=True, database=None)
@given(**SEPARABLE_PRODUCTS)
def test_random_separable_products_conditioned_agree_with_the_default_rules(f, g, k, w, sign, spread, seed, shifted):
    """Random ``f(a)·g(b)`` and ``g(b + f(a))`` of correlated vectors at nearly colinear to moderately correlated
    inputs: the check whose scripted form found the steep kink planes of the nested rule
    (``check_separable_conditioning``)."""
    check_separable_conditioning(f, g, k, w, sign, spread, seed, shifted)


@pytest.mark.slow
@settings(max_examples=60, deadline=None, derandomize=True, database=None)
@given(**SEPARABLE_PRODUCTS)
def test_more_random_separable_products_conditioned_agree_with_the_default_rules(f, g, k, w, sign, spread, seed,
                                                                                 shifted):
    """The same on 60 functions (~80 s)."""
    check_separable_conditioning(f, g, k, w, sign, spread, seed, shifted)


@pytest.mark.parametrize("w, k", [(-0.006, 0.59), (0.02, 0.0), (-0.04, -0.3)])
def test_kink_planes_nearly_normal_to_an_outer_axis_are_resolved(w, k):
    """``E h²`` for ``h = step(a − k)·|b + 0.13|`` with ``b = w a + √(1 − w²) c`` nearly independent of ``a``:
    in the eigenvectors' whitening the plane of b is nearly normal to the outer axis and cut the inner one
    at points racing along it; the outer integrand turned over a width its panels could not see (found by a
    random check of separable products: 2.6e-3 off within a bound of 6e-3, refused at every rtol below).
    The outer axis now has breakpoints where the racing cut passes graded levels of the inner one."""
    p = netsor.Program()
    n = p.dim("n")
    a, c = p.input(n, sigma=1.0), p.input(n, sigma=1.0, bias=0.3)
    b = w * a + np.sqrt(1 - w * w) * c
    p.readout(netsor.step(a - k) * abs(b + 0.13))
    X = np.random.default_rng(0).standard_normal((1, 5))
    K, E = netsor.limit(p, X).nngp(with_error=True)
    va = float(X[0] @ X[0]) / 5
    ref = piecewise_pair(lambda x: (x > k) * 1.0, lambda y: (y + 0.13) ** 2, va, w * w * va + (1 - w * w) * (va + 0.09),
                         w * va, (k,), (-0.13,))
    assert abs(K[0, 0] - ref) <= E[0, 0] + 1e-13 * ref and E[0, 0] <= 1e-8 * ref


def test_orthant_probabilities_against_one_factor_references():
    """Four-dimensional orthant probabilities (Plackett's identity) against the one-factor formula
    ``E_z Π Φ(λᵢ z/√(1 − λᵢ²))`` (adaptive 1-D quadrature), including correlations of 0.9999; the
    reported error covers the difference (plus the reference's 1e-13), and ρ = 1/2 gives 1/5 exactly."""
    lams = [[0.5, 0.6, 0.7, 0.8], [0.9995, 0.9995, 0.999, 0.5], [0.99999, 0.9999, 0.9, -0.3],
            [0.3, -0.2, 0.95, 0.1], [-0.99995, 0.9999, 0.7, 0.99]]
    R = np.stack([np.outer(lam, lam) + np.diag(1 - np.square(lam)) for lam in lams])
    p, err, _ = orthant(R, [0, 1, 2, 3])
    ref = np.array([one_factor_orthant(lam) for lam in lams])
    assert np.all(np.abs(p - ref) <= err + 1e-13)
    assert np.all(err <= 1e-11)
    half = np.full((1, 4, 4), 0.5) + 0.5 * np.eye(4)
    assert abs(orthant(half, [0, 1, 2, 3])[0][0] - 0.2) <= 1e-14


def test_orthant_probabilities_against_two_factor_references():
    """General four-dimensional correlations (two factors: R_ij = ⟨Lᵢ, Lⱼ⟩) against a 2-D adaptive
    quadrature, with the most correlated forms paired each of the three ways (0–1 and 2–3, 0–2 and
    1–3, 0–3 and 1–2: the Plackett path starts from a different split each time) and random loadings
    up to |Lᵢ| = 0.999: the reported error covers the difference."""
    def paired(first, second, angle):
        rows = np.empty((4, 2))
        for k, (i, j) in enumerate((first, second)):
            base = 0.3 + 1.4 * k
            rows[i] = 0.99 * np.array([np.cos(base), np.sin(base)])
            rows[j] = 0.98 * np.array([np.cos(base + angle), np.sin(base + angle)])
        return rows

    loadings = [paired((0, 1), (2, 3), 0.05), paired((0, 2), (1, 3), 0.02), paired((0, 3), (1, 2), -0.03)]
    rng = np.random.default_rng(11)
    for _ in range(4):
        L = rng.standard_normal((4, 2))
        loadings.append(L / np.linalg.norm(L, axis=1, keepdims=True) * rng.uniform(0.3, 0.999, (4, 1)))
    R = np.stack([L @ L.T + np.diag(1 - np.sum(L * L, axis=1)) for L in loadings])
    p, err, _ = orthant(R, [0, 1, 2, 3])
    ref = np.array([two_factor_orthant(L) for L in loadings])
    assert np.all(np.abs(p - ref) <= err + 1e-13), np.abs(p - ref) - err
    assert np.all(err <= 1e-11)


def test_kronrod_rule_is_exact_to_its_degree():
    """The 15-point Gauss–Kronrod rule of the Plackett integrals integrates x^d on [−1, 1] exactly for
    d ≤ 22 and its embedded 7-point Gauss rule for d ≤ 13 (and neither beyond)."""
    from netsor.gaussian.orthant import GAUSS7_WEIGHTS, KRONROD_NODES, KRONROD_WEIGHTS

    for d in range(25):
        exact = (1 - (-1) ** (d + 1)) / (d + 1)
        kronrod, gauss = KRONROD_WEIGHTS @ KRONROD_NODES**d, GAUSS7_WEIGHTS @ KRONROD_NODES**d
        assert (abs(kronrod - exact) <= 1e-15) == (d <= 22 or d % 2 == 1), d
        assert (abs(gauss - exact) <= 1e-15) == (d <= 13 or d % 2 == 1), d


def test_sines_of_the_plackett_path_equal_numpy_sines():
    """The Plackett path's sin(u θ), a matrix product of Taylor terms, equals ``np.sin`` to 1e-15 for
    every |θ| ≤ π/2 (the ends included) at the nodes of every rule; with two terms fewer it does not."""
    from netsor.gaussian import orthant as o

    theta = np.concatenate([np.linspace(-np.pi / 2, np.pi / 2, 1001), [np.pi / 2, -np.pi / 2, 1e-300, 0.0]])
    for nodes, *_, basis in o._LADDER:
        exact = np.sin(np.multiply.outer(nodes, theta))
        assert np.max(np.abs(o.sines(theta, basis) - exact)) <= 1e-15
    nodes = o._LADDER[0][0]
    short = o.sine_basis(nodes)[:-2]
    powers = theta[None, :] ** (2 * np.arange(o.SINE_TERMS - 2) + 1)[:, None]
    assert np.max(np.abs(short.T @ powers - np.sin(np.multiply.outer(nodes, theta)))) > 1e-15


def test_cone_moments_against_monte_carlo_and_wick():
    """Cone moments of a random 4-D Gaussian: E[x₁x₂x₃x₄] (no steps) is Wick's sum exactly;
    E[relu(x₁) relu(x₂) relu(x₃) relu(x₄)] and E[x₁² step(x₂) relu(x₃)] agree with 2²² Monte-Carlo
    samples within 5 standard errors."""
    rng = np.random.default_rng(5)
    A = rng.standard_normal((4, 4))
    S = A @ A.T
    wick = S[0, 1] * S[2, 3] + S[0, 2] * S[1, 3] + S[0, 3] * S[1, 2]
    F = ConeFunction(np.eye(4), ((1.0, (0, 1, 2, 3), ()),))
    assert abs(cone_expectation(F, S[None])[0][0] - wick) <= 1e-14 * np.prod(np.sqrt(np.diag(S)))
    x = rng.standard_normal((1 << 22, 4)) @ np.linalg.cholesky(S).T
    relu4 = ConeFunction(np.eye(4), ((1.0, (0, 1, 2, 3), (0, 1, 2, 3)),))
    square_step_relu = ConeFunction(np.eye(4), ((1.0, (0, 0, 2), (1, 2)),))
    for cone, sample in [(relu4, np.prod(np.maximum(x, 0), axis=1)),
                         (square_step_relu, x[:, 0] ** 2 * (x[:, 1] > 0) * np.maximum(x[:, 2], 0))]:
        value = cone_expectation(cone, S[None])[0][0]
        assert abs(value - sample.mean()) <= 5 * sample.std() / np.sqrt(sample.size)


def test_cone_forms_of_expressions():
    """Sums and products of G-vectors and relu / step / abs / identity of linear forms without offset
    get a cone form that evaluates like the expression; offsets and smooth activations do not; a pair
    needing orthants of dimension above 4 is left to the other rules."""
    p = netsor.Program()
    n = p.dim("n")
    a, b = p.input(n), p.input(n)
    A, B = ex.Var(a), ex.Var(b)
    diff = ex.linear(0.0, [(1.0, A), (-0.5, B)])
    cases = [(ex.product([ex.apply(relu_act, A), ex.apply(relu_act, B)]), True),
             (ex.product([ex.apply(relu_act, A), B]), True),
             (ex.linear(1.5, [(2.0, ex.product([ex.apply(abs_act, diff), ex.apply(step_act, B)])), (1.0, A)]), True),
             (ex.product([ex.apply(relu_act, diff), ex.apply(relu_act, ex.linear(0.0, [(1.0, A), (1.0, B)]))]), True),
             (ex.product([ex.apply(relu_act, ex.linear(0.3, [(1.0, A)])), B]), False),
             (ex.product([ex.apply(tanh_act, A), B]), False)]
    u = np.random.default_rng(3).standard_normal((50, 2))
    for expr, ok in cases:
        cone = cone_function(expr, (a, b))
        assert (cone is not None) == ok
        if ok:
            assert np.allclose(cone(u), expr.evaluate({a: u[:, 0], b: u[:, 1]}), rtol=1e-14, atol=1e-14)
    parallel = cone_function(ex.product([ex.apply(relu_act, A), ex.apply(step_act, ex.linear(0.0, [(2.0, A)])), B]),
                             (a, b))
    assert parallel is not None and parallel.parallel_steps  # δ(a)·step(2a) at 0: left to the other rules
    three = ConeFunction(np.eye(3), ((1.0, (0, 1, 2), (0, 1, 2)),))
    assert 2 * three.orthant_dim > MAX_ORTHANT_DIM


def test_normal_cdf_gates_are_smoothed_steps():
    """erf, the gate (1 + erf)/2 and gelu are steps smoothed by a private Gaussian noise: their cone
    forms evaluate like the expressions, and expectations with correlated arguments equal independent
    references — the trivariate orthant formula 1/8 + Σ asin ρᵢⱼ/(4π) of (u + ε) for a product of
    three gates, adaptive 1-D quadrature of a conditional closed form for gelu(a)·step(b) and for the
    square of relu(a)·erf(b) (two independent noises on the same argument), within the reported bound."""
    p = netsor.Program()
    n = p.dim("n")
    a, b, c = p.input(n), p.input(n), p.input(n)
    A, B, C = ex.Var(a), ex.Var(b), ex.Var(c)
    rng = np.random.default_rng(3)
    L = rng.standard_normal((3, 3))
    S = L @ L.T / 3 + 0.2 * np.eye(3)

    def gate(e):
        return ex.linear(0.5, [(0.5, ex.apply(erf_act, e))])

    three_gates = cone_function(ex.product([gate(A), gate(B), gate(C)]), (a, b, c))
    relu_erf = cone_function(ex.product([ex.apply(relu_act, A), ex.apply(erf_act, B)]), (a, b))
    gelu_step = cone_function(ex.product([ex.apply(gelu_act, A), ex.apply(step_act, B)]), (a, b))
    u = rng.standard_normal((50, 3))
    for cone, expr, args in [(three_gates, ex.product([gate(A), gate(B), gate(C)]), (a, b, c)),
                             (relu_erf, ex.product([ex.apply(relu_act, A), ex.apply(erf_act, B)]), (a, b)),
                             (gelu_step, ex.product([ex.apply(gelu_act, A), ex.apply(step_act, B)]), (a, b))]:
        assert cone is not None and cone.smoothed
        values = {v: u[:, i] for i, v in enumerate(args)}
        assert np.allclose(cone(u[:, :len(args)]), expr.evaluate(values), rtol=1e-14, atol=1e-14)
    with pytest.raises(ValueError, match="smoothed"):
        relu_erf.derivative(0)

    T = S + 0.5 * np.eye(3)
    R = T / np.sqrt(np.outer(np.diag(T), np.diag(T)))
    value, err, _ = cone_expectation(three_gates, S[None])
    ref = 1 / 8 + (np.arcsin(R[0, 1]) + np.arcsin(R[0, 2]) + np.arcsin(R[1, 2])) / (4 * np.pi)
    assert abs(value[0] - ref) <= err[0] + 1e-15 and err[0] <= 1e-13

    S2 = S[:2, :2]
    beta, sd, sa = S2[0, 1] / S2[0, 0], np.sqrt(S2[1, 1] - S2[0, 1] ** 2 / S2[0, 0]), np.sqrt(S2[0, 0])
    density = lambda x: np.exp(-0.5 * (x / sa) ** 2) / (sa * np.sqrt(2 * np.pi))  # noqa: E731
    gelu_step_ref = integrate.quad(lambda x: x * special.ndtr(x) * special.ndtr(beta * x / sd) * density(x),
                                   -40, 40, epsabs=0.0, epsrel=1e-13, limit=200)[0]
    square_ref = integrate.quad(lambda x: x * x * density(x) * erf_erf_noncentral(beta * x, beta * x, sd, sd, 1.0),
                                0, 40, epsabs=0.0, epsrel=1e-13, limit=200)[0]
    for cone, ref in [(gelu_step, gelu_step_ref), (relu_erf.times(relu_erf), square_ref)]:
        value, err, _ = cone_expectation(cone, S2[None])
        assert abs(value[0] - ref) <= err[0] + 1e-13 * abs(ref), (value[0], ref)


def test_orthant_dimension_of_a_product_without_forming_it():
    """``F.product_orthant_dim(G)`` equals ``F.times(G).orthant_dim`` — plain steps on equal forms
    merge, smoothed steps (independent noises) never do — on products of relus, steps and erf gates
    of three arguments, and of a recurrent state's powers."""
    p = netsor.Program()
    n = p.dim("n")
    a, b, c = p.input(n), p.input(n), p.input(n)
    A, B, C = ex.Var(a), ex.Var(b), ex.Var(c)
    relu_a, step_b = ex.apply(relu_act, A), ex.apply(step_act, B)
    erf_c, erf_b = ex.apply(erf_act, C), ex.apply(erf_act, B)
    exprs = [ex.product([relu_a, step_b]), ex.product([relu_a, erf_c]), ex.linear(0.0, [(1.0, relu_a), (2.0, erf_b)]),
             ex.product([step_b, ex.apply(step_act, A), erf_c]), ex.linear(1.0, [(0.5, erf_c)])]
    cones = [cone_function(e, (a, b, c)) for e in exprs]
    assert all(f is not None for f in cones)
    for F in cones:
        for G in cones:
            assert F.product_orthant_dim(G) == F.times(G).orthant_dim
    square = cones[3].times(cones[2])
    assert square.product_orthant_dim(square) == square.times(square).orthant_dim == 6


def test_genz_orthants_beyond_four_forms_cover_their_error():
    """Orthants of 5–12 dependent forms by the Genz rule: equicorrelated ρ = 1/2 gives 1/(n + 1)
    exactly, random one-factor correlations (5–8 forms, loadings in ±0.95) the adaptive 1-D
    reference; the reported error (5.24 standard errors of 16 scramblings) covers the difference, and
    the standard error is small (≤ 2e-5 at 2^11 points per scrambling)."""
    for n in (5, 8, 12):
        R = np.full((1, n, n), 0.5) + 0.5 * np.eye(n)
        p, err, se = orthant(R, list(range(n)))
        assert abs(p[0] - 1 / (n + 1)) <= err[0] and 0 < se[0] <= 2e-5, (n, p[0], err[0])
    rng = np.random.default_rng(11)
    lams = [rng.uniform(-0.95, 0.95, size=n) for n in (5, 6, 6, 7, 8, 8)]
    for lam in lams:
        R = (np.outer(lam, lam) + np.diag(1 - lam * lam))[None]
        p, err, se = orthant(R, list(range(lam.size)))
        ref = one_factor_orthant(lam)
        assert abs(p[0] - ref) <= err[0] + 1e-13 and se[0] <= 2e-5, (lam, p[0], ref, err[0])


def test_independent_groups_of_forms_factorise_exactly():
    """Six step forms in two independent groups of three (zero covariance across): a product of two
    trivariate closed forms, exact (no Genz rule, standard error 0); a singular group of five forms
    is refused with SingularOrthant (the engine then integrates by its other rules)."""
    rng = np.random.default_rng(5)
    A, B = (rng.standard_normal((3, 3)) for _ in range(2))
    S = np.zeros((1, 6, 6))
    S[0, :3, :3], S[0, 3:, 3:] = A @ A.T + 0.1 * np.eye(3), B @ B.T + 0.1 * np.eye(3)
    F = ConeFunction(np.eye(6), ((1.0, (), tuple(range(6))),))
    value, err, se = cone_expectation(F, S)

    def trivariate(C):
        R = C / np.sqrt(np.outer(np.diag(C), np.diag(C)))
        return 1 / 8 + (np.arcsin(R[0, 1]) + np.arcsin(R[0, 2]) + np.arcsin(R[1, 2])) / (4 * np.pi)

    assert se[0] == 0 and err[0] <= 1e-15
    assert abs(value[0] - trivariate(S[0, :3, :3]) * trivariate(S[0, 3:, 3:])) <= 1e-15
    L = rng.standard_normal((5, 3))
    with pytest.raises(SingularOrthant):
        orthant((L @ L.T)[None], list(range(5)))


def test_a_signed_zero_in_the_second_input_set_is_not_an_identical_input():
    """X2 equal to X but for a −0.0: the tile skipped that entry as "identical" (value equality) while the
    per-point values replace only byte-identical pairs, so the entry came out 0 instead of K_00 (0.29);
    both now use one definition, and the cross kernel equals the kernel within its bounds."""
    p = build("tanh(relu(a) + c)")
    X = np.array([[0.0, 1.0, 0.5], [0.3, -0.2, 1.1]])
    X2 = X.copy()
    X2[0, 0] = -0.0
    K, E = netsor.limit(p, X, rtol=1e-6).nngp(with_error=True)
    K2, E2 = netsor.limit(p, X, X2, rtol=1e-6).nngp(with_error=True)
    assert K[0, 0] > 0.2
    assert np.all(np.abs(K2 - K) <= E + E2)


def _tied_program(opaque: bool) -> netsor.Program:
    """``h = where(g' > g, g', g/2)`` with ``g' = a·g``, ``a`` the softmax weight of one token (1 in exact
    arithmetic): a jump exactly on the tie ``g' = g``, so ``h = g/2``. With ``opaque``, ``h = max(h, g)``
    through ``np.asarray`` (the tracer stops: kinks unknown, randomised QMC), ``f(g)`` with ``f(z) = z``
    for ``z > 0`` and ``z/2`` below. Read out with ``g``."""
    p = netsor.Program("tie")
    n = p.dim("n")
    g = p.input(n, sigma=0.8)
    g_tied = netsor.attention([g], [g], [g], temperature=0.5)[0]
    h = netsor.nonlin(lambda u, v: np.where(u > v, u, 0.5 * v), g_tied, g, name="where")
    if opaque:
        h = netsor.nonlin(lambda u, v: np.maximum(np.asarray(u), np.asarray(v)), h, g, name="opaque_max")
    p.readout(g, h)
    return p


@pytest.mark.parametrize("opaque", [False, True])
def test_arguments_equal_in_exact_arithmetic_meet_their_jump_as_a_tie(opaque):
    """The jump of ``where(g' > g, …)`` sits exactly on the tie ``g' = g``; the eigensolver's factor
    of their rank-one covariance differed in the last bits, so every point of the rule fell on a
    rounding-chosen side: cross entries 33 % off within a reported bound of 5e-6, and a non-PSD kernel
    when the inputs were reversed (fuzz seed 23232). Closed forms: ``E[g h'] = K/2``, ``E[h h'] = K/4``;
    with ``f(z) = ¾z + ¼|z|``, ``E[g f(g')] = ¾K``, ``E[f f'] = (9/16)K + (1/16)E|g||g'|``."""
    X = np.random.default_rng(3).standard_normal((2, 3))
    K = 0.64 * X @ X.T / 3
    sd = np.sqrt(np.diag(K))
    rho = np.clip(K / np.outer(sd, sd), -1, 1)
    abs_abs = 2 / np.pi * np.outer(sd, sd) * (rho * np.arcsin(rho) + np.sqrt(1 - rho**2))
    ref = np.empty((4, 4))
    c = 0.75 if opaque else 0.5
    ref[0::2, 0::2], ref[0::2, 1::2], ref[1::2, 0::2] = K, c * K, c * K
    ref[1::2, 1::2] = 0.5625 * K + 0.0625 * abs_abs if opaque else 0.25 * K
    for order in (slice(None), slice(None, None, -1)):
        K_engine, E = netsor.limit(_tied_program(opaque), X[order], rtol=1e-3 if opaque else 1e-8
                                   ).nngp(with_error=True)
        expected = ref.reshape(2, 2, 2, 2)[order][:, :, order].reshape(4, 4)
        assert np.all(np.abs(K_engine - expected) <= E + 1e-12)


def test_whitening_gives_arguments_equal_to_rounding_equal_rows():
    """Rows of ``L`` (Σ = L Lᵀ) for arguments equal in exact arithmetic are bitwise equal, and those of
    arguments of zero variance within the rank tolerance are zero, at every point; distinct arguments
    keep their rows."""
    from netsor.gaussian.joint import whiten

    rng = np.random.default_rng(0)
    A = rng.standard_normal((50, 3, 2))
    A[:, 1] = A[:, 0] * (1.0 + 1e-15)  # one argument, twice (a rounding residue apart)
    A[:, 2] *= 1e-9  # variance 1e-18 relative: zero within the rank tolerance (1e-12)
    cov = A @ np.swapaxes(A, 1, 2)
    L, r = whiten(cov)
    assert r == 1
    np.testing.assert_array_equal(L[:, 1], L[:, 0])
    np.testing.assert_array_equal(L[:, 2], 0.0)
    # the rank reduction's own approximation: entries within √(1e-12 · λ_max · σ²)
    np.testing.assert_allclose(L @ np.swapaxes(L, 1, 2), cov, rtol=0, atol=1e-6 * np.abs(cov).max())
    B = rng.standard_normal((50, 3, 3))
    L, r = whiten(B @ np.swapaxes(B, 1, 2))
    assert r == 3 and np.all(np.abs(L[:, 1] - L[:, 0]).max(axis=-1) > 0)


def test_relu_of_tied_arguments_has_the_kernel_of_one_argument():
    """``relu(g')·relu(g)`` with ``g' = a·g``, ``a`` the softmax weight of one token (1): the kernel of
    ``relu(g)²`` within both bounds (the tied step forms made a singular orthant: bounds 26× the kernel)."""
    X = np.random.default_rng(5).standard_normal((5, 3))
    kernels = []
    for tied in (True, False):
        p = netsor.Program("tie")
        n = p.dim("n")
        g = p.input(n, sigma=0.8)
        g_tied = netsor.attention([g], [g], [g], temperature=0.5)[0] if tied else g
        p.readout(relu_act(g_tied) * relu_act(g))
        kernels.append(netsor.limit(p, X).nngp(with_error=True))
    (K, E), (K_ref, E_ref) = kernels
    assert np.all(np.abs(K - K_ref) <= E + E_ref) and np.max(E) <= 1e-9 * np.max(K)


def test_a_cone_form_in_tied_arguments_equals_the_function_on_their_subspace():
    """``ConeFunction.tied``: with ``u₁ = 2u₀`` and ``u₂ = 0`` the written-down function equals the
    original there — relu(u₀)·relu(u₁) (parallel forms merge, the scale moves into the coefficient),
    step(u₁ − 2u₀)·u₀ (a vanishing plain step: 0), a gate of u₂ (a vanishing smoothed step: ½) — with
    fewer forms, no parallel steps, and nothing of u₁ or u₂ left."""
    from netsor.gaussian.orthant import ConeFunction

    normals = np.array([[1.0, 0, 0], [0, 1.0, 0], [-2.0, 1.0, 0], [0, 0, 1.0], [1.0, 1.0, 0], [0, 0, 1.0]])
    F = ConeFunction(normals, ((1.0, (0, 1), (0, 1)), (0.5, (0,), (2,)), (2.0, (), (4, 5))),
                     noise=np.array([0, 0, 0, 0, 0.5, 0.7]), labels=np.array([0, 0, 0, 0, 1, 2]))
    T = F.tied(np.array([0, 0, -1]), np.array([1.0, 2.0, 0.0]))
    u0 = np.random.default_rng(0).standard_normal(1000)
    u = np.stack([u0, 2.0 * u0, np.zeros_like(u0)], axis=1)
    np.testing.assert_allclose(T(u), F(u), rtol=1e-14, atol=1e-14)
    np.testing.assert_allclose(T(u), 2 * np.maximum(u0, 0) ** 2 + 2 * special.ndtr(3 * u0 / np.sqrt(0.5)) * 0.5,
                               rtol=1e-14, atol=1e-14)
    assert T.normals.shape[0] == 2 and not T.parallel_steps and np.all(T.normals[:, 1:] == 0)


def test_a_jump_of_a_vector_against_its_layernorm_has_the_relu_kernel_of_either_side():
    """``step(g − LN(g))·g = step((1 − 1/σ) g)·g`` (σ² = K(x, x)): ``relu(g)`` where σ > 1 and ``g·1{g < 0}
    = −relu(−g)`` where σ < 1 — arc-cosine kernels with the signs of both sides. The step form and the
    factor g are one form per input, rescaled by an input-dependent 1/σ: a singular orthant whose rounding
    was amplified into a bound of 9× the kernel at every rtol (random-program tests); such points now go to
    the quadrature rules."""
    p = netsor.Program()
    n = p.dim("n")
    g = p.input(n, sigma=1.0)
    p.readout(netsor.nonlin(lambda u, v: np.where(u > v, u, 0.0), g, netsor.layernorm(g), name="step(g − LN g)·g"))
    X = np.random.default_rng(4).standard_normal((4, 3))
    X *= (np.sqrt(3.0) * np.array([0.6, 0.8, 1.3, 2.0]) / np.linalg.norm(X, axis=1))[:, None]  # σ = 0.6 … 2
    K_g = X @ X.T / 3
    sign = np.where(np.diag(K_g) > 1, 1.0, -1.0)  # relu(g) or −relu(−g)
    a, b = np.diag(K_g)[:, None], np.diag(K_g)[None, :]
    ref = np.outer(sign, sign) * relu_kernel(a, b, np.outer(sign, sign) * K_g)
    K, E = netsor.limit(p, X).nngp(with_error=True)  # rtol 1e-8
    assert np.all(np.abs(K - ref) <= E + 1e-15) and np.max(E) <= 1e-8 * np.max(np.abs(K))


def _step_above_relu_kernel(a1, a1p, c1, b, bp, c2):
    """E[1{g > relu(h)} 1{g' > relu(h')}] for independent pairs (g, g') (variances a1, a1p, covariance c1)
    and (h, h') (b, bp, c2): by the quadrants of (h, h'), given which the probability is a bivariate orthant
    of (g, g') (Owen's T); the quadrant h, h' > 0 by adaptive 2-D quadrature."""

    rho1 = c1 / np.sqrt(a1 * a1p)
    sg, sgp = np.sqrt(a1), np.sqrt(a1p)
    above = lambda r, rp: owens_bvn(-r / sg, -rp / sgp, rho1)  # noqa: E731 - P(g > r, g' > r')
    rho2 = c2 / np.sqrt(b * bp)
    negative = (0.25 + np.arcsin(rho2) / (2 * np.pi)) * above(0.0, 0.0)

    def one_positive(var, var_other, cov, first):  # h > 0 (the first or second), the other < 0
        sd_cond = np.sqrt(var_other - cov * cov / var)
        f = lambda t: (np.exp(-0.5 * t * t / var) / np.sqrt(2 * np.pi * var)  # noqa: E731
                       * special.ndtr(-(cov / var * t) / sd_cond) * (above(t, 0.0) if first else above(0.0, t)))
        return integrate.quad(f, 0.0, 12 * np.sqrt(var), epsabs=1e-15, epsrel=1e-13, limit=200)[0]

    det = b * bp - c2 * c2
    density = lambda t, s: np.exp(-0.5 * (bp * t * t - 2 * c2 * s * t + b * s * s) / det) / (2 * np.pi * np.sqrt(det))  # noqa: E731
    both = integrate.dblquad(lambda tp, t: density(t, tp) * above(t, tp), 0.0, 12 * np.sqrt(b), 0.0, 12 * np.sqrt(bp),
                             epsabs=1e-12, epsrel=1e-10)[0]
    return negative + one_positive(b, bp, c2, True) + one_positive(bp, b, c2, False) + both


def test_a_jump_at_a_kinked_level_is_a_sum_of_cones():
    """``step(g − relu(h))`` jumps on the half-lines g = h > 0 and g = 0 > h — a kink at another level
    than a plane, which the rules saw as hidden (randomised QMC, 1e-3 out of reach at a few inputs). On
    each sign of h the argument is one linear form, so the function is a sum of cones and its kernel is
    exact; against a reference by the quadrants of (h, h')."""
    p = netsor.Program()
    n = p.dim("n")
    g, h = p.input(n, sigma=1.0), p.input(n, sigma=0.9)
    p.readout(netsor.nonlin(lambda u, v: np.where(u > np.maximum(v, 0.0), 1.0, 0.0), g, h, name="step(g − relu h)"))
    X = np.random.default_rng(11).standard_normal((3, 4))
    Kx = X @ X.T / 4
    ref = np.array([[_step_above_relu_kernel(Kx[i, i], Kx[j, j], Kx[i, j], 0.81 * Kx[i, i], 0.81 * Kx[j, j],
                                             0.81 * Kx[i, j]) if i != j else np.nan
                     for j in range(3)] for i in range(3)])
    # the diagonal: P(g > relu h) = P(h < 0) P(g > 0) + P(g − h > 0, h > 0), Corr(g − h, h) = −0.9/√1.81
    np.fill_diagonal(ref, 0.25 + 0.25 + np.arcsin(-0.9 / np.sqrt(1.81)) / (2 * np.pi))
    K, E = netsor.limit(p, X).nngp(with_error=True)
    assert np.all(np.abs(K - ref) <= E + 1e-10) and np.max(E) <= 1e-12


@pytest.mark.parametrize("act, offset", [("abs", "half-abs"), ("relu", "relu"), ("relu", "half-abs"), ("abs", "relu")])
def test_relu_and_abs_of_a_kinked_argument_are_sums_of_cones(act, offset):
    """``|g − |g − h|/2|``, ``relu(g − relu(g − h))`` (= relu(min(g, h))), …: on each sign of ``g − h`` the
    argument is one linear form, so the function is a sum of cones and its kernel exact. The pieces are
    linearly dependent (``L₋ = L₊ + (g − h)``): conditioning on two of them leaves the third with a
    variance at rounding, and a rounding amplification taken over the whole family of forms gave bounds
    10³× the kernel (random-program campaign); per form, it amplifies only the moments that use it.
    Reference: the closed form given ``g − h`` at both inputs, adaptive quadrature over it."""
    fn = {"relu": lambda t: np.maximum(t, 0.0), "abs": np.abs}[act]
    off = {"relu": lambda t: np.maximum(t, 0.0), "half-abs": lambda t: 0.5 * np.abs(t)}[offset]
    p = netsor.Program()
    n = p.dim("n")
    g, h = p.input(n, sigma=1.0), p.input(n, sigma=0.9)
    out = netsor.nonlin(lambda u, v: fn(u - off(u - v)), g, h, name=f"{act}(g − {offset}(g − h))")
    p.readout(out)
    assert cone_function(p.line_of(out).expr, (g, h)) is not None  # the exact rule, not the kink planes
    X = np.random.default_rng(11).standard_normal((2, 4))
    ref = act_of_a_kink_kernel(X @ X.T / 4, 1.0, 0.9, act, offset)
    K, E = netsor.limit(p, X).nngp(with_error=True)
    scale = np.sqrt(np.outer(np.diag(ref), np.diag(ref)))
    assert np.all(np.abs(K - ref) <= E + 1e-13 * scale) and np.max(E / scale) <= 1e-11


def test_dependent_forms_in_one_term_are_exact():
    """``F = relu(g)·relu(h)·1{g > h}``: the forms g, h and g − h of one term are linearly dependent, so
    conditioning on two of them determines the third; its conditional variance was the rounding of a
    difference, which the moments could amplify by 1/eps (``gate(g)·relu(b)·g·|g − b|``: bound 281× the
    kernel, strict campaign seed 75, an example of the fuzz test). Now a form whose row over (arguments,
    noises) lies in the span of the conditioned ones is exactly 0 there. Closed forms: with g, h
    independent and exchangeable, ``F + F̃ = relu(g)·relu(h)`` (F̃ = F with g, h swapped), so the four
    blocks of the kernel of (F, F̃) sum to the product of two arc-cosine kernels, and ``E F² = E F̃²
    = ¼ E g² E h² / 2``."""
    X = np.random.default_rng(4).standard_normal((3, 5))
    Kx = 0.81 * X @ X.T / 5

    def kernel(which):
        p = netsor.Program()
        n = p.dim("n")
        g, h = p.input(n, sigma=0.9), p.input(n, sigma=0.9)
        F, Ft = (netsor.relu(g) * netsor.relu(h) * netsor.step(u - v) for u, v in ((g, h), (h, g)))
        p.readout({"F": F, "Ft": Ft, "sum": F + Ft}[which])
        return netsor.limit(p, X).nngp(with_error=True)

    (K, E), (Kt, Et), (Ks, Es) = kernel("F"), kernel("Ft"), kernel("sum")
    ref = relu_kernel(*pairwise(Kx)) ** 2
    scale = np.sqrt(np.outer(np.diag(ref), np.diag(ref)))
    # the default rtol is met (the bounds were 10³–10⁴× the kernel): 4-D orthants carry quadrature errors
    assert np.all(np.abs(Ks - ref) <= Es + 1e-13 * scale) and np.max(Es / scale) <= 1e-8
    np.testing.assert_allclose(np.diag(K), np.diag(Kx) ** 2 / 8, rtol=1e-13)
    assert np.all(np.abs(K - Kt) <= E + Et) and np.max(E / scale) <= 1e-8  # exchangeable


def test_a_jump_against_the_step_of_a_sign_preserving_function_is_exact():
    """``step(g − step(tanh g)) = 1{g > 1}``: ``step(tanh g)`` is ``step(g)``, so the argument is piecewise
    linear and the jump lies on the plane g = 1; as a composite it was a hidden kink, refused at every
    rtol (bound 1.45 of the kernel; strict random-program campaign seed 65). Reference: the bivariate
    normal orthant ``P(g > 1, g' > 1)`` (Owen's T)."""
    p = netsor.Program()
    n = p.dim("n")
    g = p.input(n, sigma=0.8)
    p.readout(netsor.nonlin(lambda u: np.where(u > (np.tanh(u) > 0), 1.0, 0.0), g, name="step(g − step(tanh g))"))
    X = np.random.default_rng(0).standard_normal((3, 4))
    Kg = 0.64 * X @ X.T / 4
    s = np.sqrt(np.diag(Kg))
    ref = owens_bvn(-1.0 / s[:, None], -1.0 / s[None, :], np.clip(Kg / np.outer(s, s), -1.0, 1.0))
    np.fill_diagonal(ref, special.ndtr(-1.0 / s))
    K, E = netsor.limit(p, X).nngp(with_error=True)
    scale = np.sqrt(np.outer(np.diag(ref), np.diag(ref)))
    assert np.all(np.abs(K - ref) <= E + 1e-12 * scale) and np.max(E / scale) <= 1e-8


def test_a_kink_of_a_piecewise_linear_argument_with_offsets_is_on_known_planes():
    """``clip(g + relu(h))`` jumps in slope where g ± 1 = 0 (h < 0) and g + h ± 1 = 0 (h > 0): planes of
    the argument's linear pieces, where the rules saw hidden kinks (randomised QMC, 1.04e-3 at rtol
    1e-3 in a random program). At orthogonal inputs the two points are independent, so the cross kernel
    factorises into the means ``E F = E_h E[clip(g + relu h) | h]`` (a closed form in g); the diagonal
    is ``E_h E[clip(g + relu h)² | h]`` by nested adaptive quadrature."""
    p = netsor.Program()
    n = p.dim("n")
    g, h = p.input(n, sigma=0.8), p.input(n, sigma=0.9)
    p.readout(netsor.nonlin(lambda u, v: np.clip(u + np.maximum(v, 0.0), -1.0, 1.0), g, h,
                            name="clip(g + relu h)"))
    Q, _ = np.linalg.qr(np.random.default_rng(3).standard_normal((4, 3)))
    X = Q.T * np.array([[0.7], [1.3], [2.0]]) * 2.0  # orthogonal rows of different norms
    var_g, var_h = 0.64 * np.sum(X * X, axis=1) / 4, 0.81 * np.sum(X * X, axis=1) / 4

    def clip_mean(m, s):  # E clip(Z), Z ~ N(m, s²): E Z − E(Z − 1)⁺ + E(−1 − Z)⁺
        def excess(k):  # E(Z − k)⁺
            return (m - k) * special.ndtr((m - k) / s) + s * np.exp(-0.5 * ((m - k) / s) ** 2) / np.sqrt(2 * np.pi)
        return m - excess(1.0) + excess(-1.0) - (m + 1.0)  # E(−1 − Z)⁺ = E(Z + 1)⁺ − (m + 1)

    def over_h(f, vh):
        density = lambda t: np.exp(-0.5 * t * t / vh) / np.sqrt(2 * np.pi * vh)  # noqa: E731
        return sum(integrate.quad(lambda t: density(t) * f(t), lo, hi, epsabs=1e-15, epsrel=1e-13, limit=200)[0]
                   for lo, hi in ((-12 * np.sqrt(vh), 0.0), (0.0, 12 * np.sqrt(vh))))

    mean = np.array([over_h(lambda t, i=i: clip_mean(max(t, 0.0), np.sqrt(var_g[i])), var_h[i]) for i in range(3)])

    def second(i):  # E[clip(g + r)² | r] by quadrature split at the kinks g = ±1 − r
        sg = np.sqrt(var_g[i])
        inner = lambda r: integrate.quad(  # noqa: E731
            lambda z: np.exp(-0.5 * z * z / sg**2) / np.sqrt(2 * np.pi) / sg * np.clip(z + r, -1, 1) ** 2,
            -12 * sg, 12 * sg, points=sorted({-1 - r, 1 - r}), epsabs=1e-15, epsrel=1e-13, limit=200)[0]
        return over_h(lambda t: inner(max(t, 0.0)), var_h[i])

    ref = np.outer(mean, mean)
    np.fill_diagonal(ref, [second(i) for i in range(3)])
    K, E = netsor.limit(p, X).nngp(with_error=True)
    assert np.all(np.abs(K - ref) <= E + 1e-12) and np.max(E) <= 1e-8 * np.max(np.abs(np.diag(K)))


def test_a_function_of_fewer_forms_than_arguments_is_integrated_in_their_span():
    """``|a − clip(b + c)|`` of three independent inputs depends on two forms (a and b + c): its point
    moments and pairs run in two dimensions, not three (issue 7's strict fuzz seed 82: 46 s for one
    point's moments, minutes for a 2-input kernel), against a reference given clip(b + c) at both inputs."""
    p = netsor.Program()
    n = p.dim("n")
    a, b, c = p.input(n, sigma=1.0), p.input(n, sigma=0.9, bias=0.2), p.input(n, sigma=1.1)
    p.readout(netsor.nonlin(lambda u, v, w: np.abs(u - np.clip(v + w, -1.0, 1.0)), a, b, c))
    X = np.random.default_rng(3).standard_normal((2, 5))
    K, E = netsor.limit(p, X, rtol=1e-7).nngp(with_error=True)
    G = X @ X.T / X.shape[1]
    ref = abs_minus_clip_kernel(G, 0.81 * G + 0.04 + 1.21 * G)
    scale = np.sqrt(np.outer(np.diag(ref), np.diag(ref)))
    assert np.all(np.abs(K - ref) <= E + 1e-12 * scale)
    assert np.max(E / scale) <= 1e-7


@pytest.mark.slow  # ~20 s
def test_repeated_kink_planes_do_not_change_the_nested_rule():
    """A kink plane listed twice (scaled, or with its sign flipped) or a 'plane' with no normal cuts
    nothing new: the nested rule's nodes and weights are those of the distinct planes. (Both sides of
    a pair list the planes of a form they share; every copy crossed every other plane once more per
    level: 4.7e9 nodes a point for the pairs of strict fuzz seed 82, ~9 s to list them.)"""
    rng = np.random.default_rng(5)
    r, P = 3, 2
    planes = [(rng.standard_normal((P, r)), rng.standard_normal(P)) for _ in range(4)]
    m, o = planes[1]
    noisy = planes + [(-2.5 * m, -2.5 * o), (3.0 * planes[2][0], 3.0 * planes[2][1]), (np.zeros((P, r)), np.ones(P))]
    spread = np.ones(r)
    assert rule_size(noisy, r, spread) == rule_size(planes, r, spread)
    for shifted in (False, True):
        for got, want in zip(_nested_nodes(noisy, r, shifted, P, spread), _nested_nodes(planes, r, shifted, P, spread),
                             strict=True):
            np.testing.assert_array_equal(got, want)


def test_a_bias_shared_by_the_two_points_of_a_pair():
    """``|a − clip(s)|`` with ``a`` a bias vector — one Gaussian for every input, so both points of a
    pair share it and its kink planes ``a = ±1`` — against an independent reference (``E_a`` in closed
    form, quadrature over ``clip(s)`` at both inputs); the bound covers the error. Each pair is a
    three-dimensional expectation with nine distinct kink planes (strict fuzz seed 82's shape: listing
    the crossings of its eleven, repeats included, took ~2 minutes a kernel)."""
    p = netsor.Program()
    n = p.dim("n")
    a, s = p.bias(n, 0.2), p.input(n, sigma=1.0, bias=0.5)
    p.readout(netsor.nonlin(lambda u, v: np.abs(u - np.clip(v, -1.0, 1.0)), a, s))
    X = np.random.default_rng(4).standard_normal((3, 5))
    K, E = netsor.limit(p, X, rtol=1e-3).nngp(with_error=True)
    ref = abs_minus_clip_shared_kernel(X @ X.T / X.shape[1] + 0.25, 0.2)
    scale = np.sqrt(np.outer(np.diag(ref), np.diag(ref)))
    assert np.all(np.abs(K - ref) <= E + 1e-12 * scale), np.max((np.abs(K - ref) - E) / scale)
    assert np.max(E / scale) <= 1e-3


def test_reduced_point_moments_equal_those_of_every_argument():
    """The moments error propagation needs — E F², E F⁴, E (∂ᵢF)², E |∇F|²|U|² (with the variance the
    forms do not see added back), E |∇F|² — are the same whether the quadrature runs over the span of
    F's forms or over all its arguments (here ``tanh(u₁ + u₂ − 0.3)``, one form of two arguments)."""
    fn = lambda u: np.tanh(u[..., 0] + u[..., 1] - 0.3)  # noqa: E731
    grad = lambda u: np.repeat((1.0 / np.cosh(u[..., 0] + u[..., 1] - 0.3) ** 2)[..., None], 2, axis=-1)  # noqa: E731
    full = JointFunction(2, fn, grad, (), False, True, ("test", "tanh-sum"), "tanh(u1 + u2 - 0.3)")
    reduced = replace(full, forms=np.array([[1.0], [1.0]]) / np.sqrt(2.0), key=("test", "tanh-sum", "reduced"))
    cov = np.array([[[1.0, 0.3], [0.3, 0.7]], [[0.5, -0.2], [-0.2, 1.4]]])
    assert onto_forms(reduced, *whiten(cov))[1] == 1
    want, got = point_moments(full, cov), point_moments(reduced, cov)
    for name in ("m2", "m4", "arg_grad2", "joint_euler", "gradnorm2"):
        np.testing.assert_allclose(got[name], want[name], rtol=1e-5, err_msg=name)


@pytest.mark.parametrize("kind", ["relu(relu(g-b)-b)", "relu(0.5|g-b|-b)"])
def test_nested_kinks_of_a_shared_bias_within_their_bounds(kind):
    """Kinks of kinks of one input and a bias b shared by both inputs: ``relu(relu(g − b) − b)`` was 20 %
    off under a bound of 2e-13 (its cone moments took step(0) = 0 where a step of a form made 0 by the δs
    of the others carries 1/2) and ``relu(0.5|g − b| − b)`` 2e-10 off (two forms equal given the δs left
    to asin at a correlation of 1 − ε), each differently from X[[i, j]], X[[j, i]] and the cross kernel
    (strict campaign seed 262). Against an independent reference (closed-form conditional expectations,
    adaptive quadrature), by all three routes."""
    X = np.random.default_rng(413).standard_normal((2, 6))
    p = netsor.Program()
    n = p.dim("n")
    g, b = p.input(n, sigma=0.8), p.bias(n, 0.2)
    if kind == "relu(relu(g-b)-b)":
        p.readout(netsor.relu(netsor.relu(g - b) - b))
    else:
        p.readout(netsor.relu(0.5 * netsor.abs_(g - b) - b))
    G = 0.64 * X @ X.T / 6
    ref = nested_kink_of_a_bias_kernel(G[0, 0], G[1, 1], G[0, 1], 0.2, kind)
    routes = [netsor.limit(p, X).nngp(with_error=True), netsor.limit(p, X[::-1]).nngp(with_error=True),
              netsor.limit(p, X[:1], X[1:]).nngp(with_error=True)]
    for K, E in routes:
        assert abs(K[0, -1] - ref) <= E[0, -1] + 1e-15 * abs(ref)


def test_a_function_of_three_forms_of_two_gaussians_at_a_point():
    """``relu(a)·step(a − b)·relu(b − 0.2a)`` of independent inputs a, b: its arguments a, a − b and
    b − 0.2a (three G-vectors of two sources) had a singular covariance at every point; the cone moments
    tell forms determined by others from their coefficients over the arguments, missed that conditioning
    on two determines the third, and divided by its rounded variance: a bound 819× the value of a point with
    itself (refused at every rtol). Written over the sources, ``E f² = v²·(8/2π)·∫ cos²θ (sin θ − 0.2 cos θ)²
    dθ`` over θ ∈ (atan 0.2, π/4) (polar coordinates), met to rounding. Pairs of points needed six-dimensional
    orthants (randomised QMC, ~1e-6 relative) until the step of ``a``, implied on the wedge ``a > b > 0.2a``,
    was dropped: four-dimensional cone moments, 1e-8 met."""
    p = netsor.Program()
    n = p.dim("n")
    a, b = p.input(n), p.input(n)
    p.readout(netsor.relu(a) * netsor.step(a - b) * netsor.relu(b - 0.2 * a))
    X = np.random.default_rng(0).standard_normal((40, 10))
    K, E = netsor.limit(p, X, rtol=1e-8).nngp(with_error=True)
    v = np.sum(X * X, axis=1) / 10
    nodes, weights = np.polynomial.legendre.leggauss(40)  # an entire integrand: exact to rounding
    lo, hi = np.arctan(0.2), np.pi / 4
    t = lo + (hi - lo) * (nodes + 1) / 2
    angular = (hi - lo) / 2 * weights @ (np.cos(t) ** 2 * (np.sin(t) - 0.2 * np.cos(t)) ** 2)
    exact = v**2 * 8 / (2 * np.pi) * angular
    assert np.all(np.abs(np.diag(K) - exact) <= np.diag(E) + 1e-14 * exact)
    assert np.max(np.diag(E) / exact) < 1e-8


def test_a_step_implied_by_two_others_is_dropped_and_pairs_are_exact():
    """``relu(a)·step(a − c)·relu(c − a/5)`` with ``c = U₂x + U₃x`` (two sources, so its three arguments a, a − c and
    c − a/5 were not rewritten over fewer sources): written over a basis of the arguments (``c − a/5 = 0.8a −
    (a − c)``), its term lives on the wedge ``a > c > a/5``, where ``a > 0`` — two step forms, not three in a
    plane (every orthant singular: a bound 823× the value at a point with itself, refused at every rtol; pairs
    needed six-dimensional orthants). Now 1e-8 is met; at mutually orthogonal inputs the pair is the product of
    the means (independent points), each a polar integral; elsewhere it agrees with the QMC simulation."""
    p = netsor.Program()
    n = p.dim("n")
    a, c = p.input(n), p.input(n, sigma=0.6) + p.input(n, sigma=0.8)
    p.readout(netsor.relu(a) * netsor.step(a - c) * netsor.relu(c - 0.2 * a))
    rng = np.random.default_rng(0)
    X = np.concatenate([np.linalg.qr(rng.standard_normal((8, 3)))[0].T * [[1.0], [1.5], [0.7]],
                        rng.standard_normal((3, 8))])
    K, E = netsor.limit(p, X, rtol=1e-8).nngp(with_error=True)
    scale = np.sqrt(np.outer(np.diag(K), np.diag(K)))
    assert np.all(E <= 1e-8 * scale)
    # the mean at a point: u = a ~ N(0, s_a²) and the wedge in (a, c), c ~ N(0, s_c²): by polar coordinates
    # in the whitened (a/s_a, c/s_c), E[a (c − a/5) 1{a > c > a/5}] = s_a s_c ∫ r³ φ-mass (2/2π) ∫ cos θ
    # (sin θ − 0.2 (s_a/s_c) cos θ) dθ over the wedge's angles
    G = X @ X.T / 8
    sa = sc = np.sqrt(np.diag(G))
    nodes, weights = np.polynomial.legendre.leggauss(40)
    means = np.empty(3)
    for i in range(3):
        r = sa[i] / sc[i]  # c > a/5 and a > c in whitened coordinates: tan θ > 0.2 r and tan θ < r
        lo, hi = np.arctan(0.2 * r), np.arctan(r)
        t = lo + (hi - lo) * (nodes + 1) / 2
        angular = (hi - lo) / 2 * weights @ (np.cos(t) * (np.sin(t) - 0.2 * r * np.cos(t)))
        means[i] = sa[i] * sc[i] * 2 / (2 * np.pi) * angular
    want = np.outer(means, means)
    off = ~np.eye(3, dtype=bool)
    assert np.all(np.abs(K[:3, :3] - want)[off] <= E[:3, :3][off] + 1e-13 * scale[:3, :3][off])
    Kq, Eq = netsor.limit(p, X, method="qmc", rtol=0.1, seed=3).nngp(with_error=True)  # its reach: ~3e-2
    assert np.all(np.abs(K - Kq) <= E + Eq)


def _factor_times_form_program(f):
    p = netsor.Program()
    n = p.dim("n")
    g1, g2 = p.input(n, sigma=1.0), p.input(n, sigma=0.8, bias=0.2)
    p.readout(netsor.nonlin(lambda a, b: b * f(a + 0.5 * b), g1, g2), sigma=1.0)
    return p, g1, g2


def test_a_factor_times_a_cusp_of_a_correlated_form_reaches_1e_7():
    """``g₂ · √|g₁ + g₂/2|`` (growth campaign seed 311: the four-dimensional rules stopped at 2e-3, refused at
    every tighter rtol): conditioned on the forms, the one-dimensional rules of the cusp meet 1e-7, and the
    kernel agrees with the engine's randomised-QMC simulation within the two bounds."""
    p, _, _ = _factor_times_form_program(lambda w: np.sqrt(np.abs(w)))
    X = np.random.default_rng(3).standard_normal((4, 5))
    K, E = netsor.limit(p, X, rtol=1e-7).nngp(with_error=True)
    Kq, Eq = netsor.limit(p, X, method="qmc", rtol=1e-3, seed=5).nngp(with_error=True)
    scale = np.sqrt(np.outer(np.diag(K), np.diag(K)))
    assert np.all(E <= 1e-7 * scale) and np.all(np.abs(K - Kq) <= E + Eq)


def test_a_factor_times_a_kinked_function_of_a_form_stays_one_term():
    """``c · clip(a + c/2)``: the clip factor (traced to relu(w + 1) − relu(w − 1) − 1) stays one atom, so the term
    is a factor times a bounded function of one form — not three cancelling, growing terms c·relu(w ± 1) and c
    whose nine pairs took 160 s on 1000 inputs (and the four-dimensional rules before them refused 1e-7 on 100:
    5e-5). Met at 1e-7, agreeing with the QMC simulation."""
    p = netsor.Program()
    n = p.dim("n")
    a, c = p.input(n), p.input(n, sigma=0.9, bias=0.2)
    h = c * netsor.nonlin(lambda u: np.clip(u, -1.0, 1.0), a + 0.5 * c)
    p.readout(h)
    X = np.random.default_rng(5).standard_normal((5, 6))
    K, E = netsor.limit(p, X, rtol=1e-7).nngp(with_error=True)
    assert len(netsor.interpret.infinite.analysis_of(p).poly(h).terms) == 1
    Kq, Eq = netsor.limit(p, X, method="qmc", rtol=3e-3, seed=2).nngp(with_error=True)
    scale = np.sqrt(np.outer(np.diag(K), np.diag(K)))
    assert np.all(E <= 1e-7 * scale) and np.all(np.abs(K - Kq) <= E + Eq)


def _data_free_source_kernel_and_reference():
    """``f(a)·step(b + 0.25)`` with ``b = 0.6 a + 0.8 c``, ``c = p.gaussian``, on 3 inputs: the kernel, its bounds,
    and the reference entry ``(i, j)`` — given c, the pair in a is a piecewise-linear pair (nested adaptive
    quadrature split at the kinks and the jump), integrated over c split where the jump crosses the kinks of f."""
    p = netsor.Program()
    n = p.dim("n")
    a, c = p.input(n, sigma=1.0), p.gaussian(n, sigma=1.0)
    p.readout((netsor.relu(a) - 0.5 * netsor.relu(a + 0.77)) * netsor.step(0.6 * a + 0.8 * c + 0.25))
    X = np.random.default_rng(0).standard_normal((3, 4))
    K, E = netsor.limit(p, X).nngp(with_error=True)
    Ka = X @ X.T / 4

    def f(x):
        return relu(x) - 0.5 * relu(x + 0.77)

    def given_c(i, j, cv):
        jump = -(0.8 * cv + 0.25) / 0.6
        phi = lambda x: f(x) * (x > jump)  # noqa: E731
        if i == j:
            sd = np.sqrt(Ka[i, i])
            return integrate.quad(lambda z: phi(sd * z) ** 2 * stats.norm.pdf(z), -12, 12, limit=200, epsabs=1e-16,
                                  points=sorted({0.0, -0.77 / sd, jump / sd}))[0]
        return piecewise_pair(phi, phi, Ka[i, i], Ka[j, j], Ka[i, j], kinks_f=(0.0, -0.77, jump),
                              kinks_g=(0.0, -0.77, jump))

    def reference(i, j):
        return integrate.quad(lambda cv: given_c(i, j, cv) * stats.norm.pdf(cv), -10, 10, points=[-0.3125, 0.265],
                              limit=200, epsabs=1e-17, epsrel=1e-12)[0]

    return K, E, reference


def test_a_data_free_source_inside_an_argument_is_one_coordinate_shared_by_the_inputs():
    """``f(a)·step(b + 0.25)`` with ``b = 0.6 a + 0.8 c``, ``c = p.gaussian`` (the same at every input): in (a, b)
    the pair's law at two inputs has an exact null vector (``b − 0.6a`` is ``0.8 c`` at both), which no rule
    saw — the jump's propagated bound was 2× the value, refused at every rtol. Over the sources ``(a, c)``, ``c``
    is one coordinate shared by the two inputs: the default rtol is met, and each point's value is the reference's
    (an off-diagonal entry against it: the slow test below)."""
    K, E, reference = _data_free_source_kernel_and_reference()
    assert np.max(E / np.sqrt(np.outer(np.diag(K), np.diag(K)))) <= 1e-8
    for i in range(3):
        assert abs(K[i, i] - reference(i, i)) <= E[i, i] + 1e-13 * K[i, i]


def _shared_jump_reference(K: np.ndarray, i: int, j: int) -> float:
    """``E[ht(u) ht(u') Φ((0.3 + 0.6 min(u, u'))/0.8)]`` for ``(u, u')`` of covariance ``K[[i, j]][:, [i, j]]`` —
    ``c`` integrated out of ``step(0.6u + 0.8c + 0.3)·step(0.6u' + 0.8c + 0.3)`` by hand — by nested adaptive
    quadrature in whitened coordinates, split where ``u' = ±1`` and ``u' = u`` cross the inner axis."""
    def ht(x):
        return np.clip(x, -1.0, 1.0)

    def gate(x):
        return special.ndtr((0.3 + 0.6 * x) / 0.8)

    s1 = np.sqrt(K[i, i])
    if i == j:
        return integrate.quad(lambda z: ht(s1 * z) ** 2 * gate(s1 * z) * stats.norm.pdf(z), -12, 12,
                              points=[-1 / s1, 1 / s1], limit=200, epsabs=1e-15, epsrel=1e-13)[0]
    s2 = np.sqrt(K[j, j])
    rho = K[i, j] / (s1 * s2)
    sine = np.sqrt(1 - rho * rho)

    def inner(z1):
        u = s1 * z1
        cuts = sorted({(1 / s2 - rho * z1) / sine, (-1 / s2 - rho * z1) / sine, (u / s2 - rho * z1) / sine})
        cuts = [c for c in cuts if -12 < c < 12]

        def f(z2):
            v = s2 * (rho * z1 + sine * z2)
            return ht(u) * ht(v) * gate(min(u, v)) * stats.norm.pdf(z2)

        return integrate.quad(f, -12, 12, points=cuts or None, limit=200, epsabs=1e-15, epsrel=1e-13)[0]

    return integrate.quad(lambda z1: inner(z1) * stats.norm.pdf(z1), -12, 12, points=[-1 / s1, 1 / s1], limit=200,
                          epsabs=1e-15, epsrel=1e-13)[0]


@pytest.mark.slow  # ~20 s
def test_a_shared_data_free_argument_of_a_jump_is_one_normal_of_the_inner_pair():
    """``hard_tanh(u)·step(0.6u + 0.8c + 0.3)``, ``c = p.gaussian`` (the same variable at every input), on four inputs
    within 2 % of one point (a fuzz finding): given ``(u, u')`` the pair of steps reads one normal ``c`` — its law
    has rank one — so no rule took it (the pair's 3-dimensional law went to QMC: bound 2e-3, refused, and the cross
    kernel refused where the full one passed). Conditioned on ``(u, u')`` it is ``P(c > ·)`` at the larger threshold:
    a closed form kinked on the line ``u = u'``. Now the default rtol is met; every entry is the reference's
    within its bound, and the cross kernel is the full kernel's block."""
    p = netsor.Program()
    n = p.dim("n")
    u, c = p.input(n, sigma=1.0), p.gaussian(n, sigma=1.0)
    p.readout(netsor.hard_tanh(u) * netsor.step(0.6 * u + 0.8 * c + 0.3))
    rng = np.random.default_rng(3)
    X = rng.standard_normal((1, 5)) + 0.02 * rng.standard_normal((4, 5))
    K, E = netsor.limit(p, X).nngp(with_error=True)
    scale = np.sqrt(np.outer(np.diag(K), np.diag(K)))
    assert np.max(E / scale) <= 1e-8
    Ka = X @ X.T / 5
    for i, j in [(0, 0), (0, 1)]:  # found 1.7e-16 and 3.1e-12 off (bounds 3.1e-15, 9.8e-12); ~7 s an off-diagonal one
        assert abs(K[i, j] - _shared_jump_reference(Ka, i, j)) <= E[i, j] + 1e-13 * scale[i, j]
    Kc, Ec = netsor.limit(p, X[:2], X[2:]).nngp(with_error=True)
    np.testing.assert_allclose(Kc, K[:2, 2:], rtol=0, atol=2 * np.max(E))


def _relus_given_biases(K: np.ndarray, i: int, j: int, b: np.ndarray, beta: np.ndarray) -> np.ndarray:
    """``E[f(u) f(u')]`` for ``f(u) = relu(u + b − ½)·relu(0.6u + 0.6b + 0.8β) = 0.6 (u − k₁)(u − k₂)`` above both
    kinks, given the biases (arrays, broadcast), ``(u, u')`` of covariance ``K[[i, j]][:, [i, j]]``: ``u'`` given
    ``u`` by the moments of a normal truncated below, then Gauss–Legendre over ``u`` above the kinks."""
    a, c = K[i, i], K[i, j]
    sd, sine = np.sqrt(a), np.sqrt(max(K[j, j] - c * c / a, 0.0))
    k1, k2 = 0.5 - b, -b - 4.0 / 3.0 * beta
    k = np.maximum(k1, k2)[..., None]
    t, w = np.polynomial.legendre.leggauss(120)
    u = k + 7.0 * sd * (t + 1.0)  # to 14 standard deviations above the kinks
    f = 0.6 * (u - k1[..., None]) * (u - k2[..., None])
    if i == j:
        given_u = f
    else:
        m = c / a * u
        z = (k - m) / sine
        tail, density = stats.norm.sf(z), stats.norm.pdf(z)
        e1 = m * tail + sine * density
        e2 = (m * m + sine * sine) * tail + sine * (k + m) * density
        given_u = 0.6 * (e2 - (k1 + k2)[..., None] * e1 + (k1 * k2)[..., None] * tail)
    return (f * given_u * stats.norm.pdf(u / sd) / sd) @ w * 7.0 * sd


@pytest.mark.parametrize("second", ["b", "another bias"])
def test_two_relus_of_forms_sharing_a_bias_match_the_biases_integrated_last(second):
    """``relu(g − ½)·relu(0.6g + 0.8β)`` with ``g = Ux + b`` and ``β = b`` or another bias: functions of two forms
    of their arguments, neither one argument (``(Ux, b)``; over ``(Ux, b, β)`` for another bias). Conditioned on
    ``p = Ux + b`` at both points the inner argument is the bias ``β`` — one variable at both — so the pair is a
    closed form given ``(p, p')``. The engine took them by four-dimensional quadrature: refused rtol 1e-7 (3e-5
    reached, 2 s) with ``β = b``, reached 2.8e-8 (2.3 s) with another; now rtol 1e-8 is met (0.8 s, 0.2 s).
    Reference: given the biases each entry factorises over the two points (:func:`_relus_given_biases`), then
    adaptive quadrature over the biases (split where the two kinks meet, ``β = −3/8``; Gauss–Hermite over ``b``
    where the integrand is analytic in it)."""
    p = netsor.Program()
    n = p.dim("n")
    b = p.bias(n, sigma=0.5)
    beta = b if second == "b" else p.bias(n, sigma=1.0)
    g = p.input(n, sigma=1.0) + b
    p.readout(netsor.relu(g - 0.5) * netsor.relu(0.6 * g + 0.8 * beta))
    X = np.random.default_rng(0).standard_normal((3, 4))
    K, E = netsor.limit(p, X).nngp(with_error=True)
    scale = np.sqrt(np.outer(np.diag(K), np.diag(K)))
    assert np.max(E / scale) <= 1e-8
    Ka = X @ X.T / 4
    z, w = np.polynomial.hermite_e.hermegauss(80)

    def reference(i, j):
        if second == "b":
            def density(x):
                return _relus_given_biases(Ka, i, j, np.array(x), np.array(x)) * stats.norm.pdf(x / 0.5) / 0.5
        else:
            def density(x):
                return (_relus_given_biases(Ka, i, j, 0.5 * z, np.full(z.size, x)) @ w / np.sqrt(2 * np.pi)
                        * stats.norm.pdf(x))
        return integrate.quad(density, -9.0, 9.0, points=[-0.375], epsabs=1e-15, epsrel=1e-13, limit=200)[0]

    # found ≤ 1.0e-11 off (bounds 4e-15 to 5.9e-10)
    for i, j in [(0, 0), (1, 1), (0, 1), (0, 2), (1, 2)]:
        assert abs(K[i, j] - reference(i, j)) <= E[i, j] + 1e-14 * scale[i, j]


def test_a_bias_times_its_distance_to_a_scaled_copy_matches_its_closed_form_in_a_cross_kernel():
    """``b·|θ(x)·b − b|`` with θ = E tanh(g)² a per-input scalar (``netsor.moment``) and b a bias: every argument is a
    multiple of b, with a ratio that varies over the inputs, so ``E[h(x) h(x')] = |θ − 1||θ' − 1|·3σ_b⁴``. Against one
    point of X2 the tie of that side's forms held at every pair of the tile and left the other side's forms
    singular in the tied orthants: the cross kernel's bound was 319× its value (factors campaign seed 553)."""
    p = netsor.Program()
    n = p.dim("n")
    g, b = p.input(n, sigma=1.0), p.bias(n, sigma=0.2)
    theta = netsor.moment(lambda x: np.tanh(x) ** 2, g)
    p.readout(netsor.nonlin(lambda u, v: v * np.abs(u - v), theta * b, b))
    X = np.random.default_rng(1429).standard_normal((3, 4))

    def theta_at(x):
        sd = np.sqrt(x @ x / 4)
        return integrate.quad(lambda z: np.tanh(sd * z) ** 2 * stats.norm.pdf(z), -12, 12, points=[0.0], epsabs=1e-15,
                              epsrel=1e-13)[0]

    t = np.array([theta_at(x) for x in X])
    want = np.outer(np.abs(t - 1), np.abs(t - 1)) * 3 * 0.2**4
    K, E = netsor.limit(p, X[:2], X[2:]).nngp(with_error=True)
    assert np.max(E / np.abs(want[:2, 2:])) <= 1e-8
    assert np.all(np.abs(K - want[:2, 2:]) <= E + 1e-13 * np.abs(want[:2, 2:]))


def test_a_jump_between_a_vector_and_its_layernorm_is_taken_along_their_one_source():
    """``where(g > LN(g), g, LN(g)/2)``: ``LN(g) = λ g`` with a per-input λ, so the pair of arguments has a law of
    rank one at each input, and the joint rule's propagated error of the jump divided by its smallest eigenvalue:
    bounds of 3 % of the values, refused at every rtol (strict campaign seed 550; worst at an input whose λ is
    0.985). Along the one source ``g`` each monomial is ``|g|^d`` times its value at ``±λ``: means and
    arc-cosine pairs in closed form. Against the closed form written by hand: ``h = g·(λ/2 + (1 − λ/2)·1{σg > 0})``,
    ``σ = sign(1 − λ)``, so ``K = a a' c + (a b' + b a') c/2 + b b' σσ' J₁(v, v', σσ'c)``."""
    X = np.random.default_rng(1711).standard_normal((4, 5))  # Var g: 2.91, 1.03, 1.22, 0.45
    p = netsor.Program()
    n = p.dim("n")
    g = p.input(n, sigma=1.2)
    p.readout(netsor.nonlin(lambda u, v: np.where(u > v, u, 0.5 * v), g, netsor.layernorm(g)))
    K, E = netsor.limit(p, X).nngp(with_error=True)
    scale = np.sqrt(np.outer(np.diag(K), np.diag(K)))
    assert np.max(E / scale) <= 1e-8
    C = 1.44 * X @ X.T / 5
    v = np.diag(C)
    lam = 1 / np.sqrt(v)
    a, b, sigma = lam / 2, 1 - lam / 2, np.sign(1 - lam)
    assert sigma[1] > 0 and sigma[3] < 0  # both sides of the tie, one input 1.5 % from it
    ss = np.outer(sigma, sigma)
    c = ss * C
    j1 = (np.sqrt(np.maximum(np.outer(v, v) - c * c, 0.0)) + (np.pi - np.arccos(np.clip(c / np.sqrt(np.outer(v, v)),
                                                                                   -1, 1))) * c) / (2 * np.pi)
    want = np.outer(a, a) * C + (np.outer(a, b) + np.outer(b, a)) * C / 2 + np.outer(b, b) * ss * j1
    assert np.all(np.abs(K - want) <= E + 1e-13 * scale)


@pytest.mark.slow
def test_a_data_free_source_inside_an_argument_pairs_match_the_reference():
    """An off-diagonal entry of the kernel above against the reference: within its bound (found 1e-17 off, as is
    entry (1, 2); one entry is ~2 minutes of reference quadrature)."""
    K, E, reference = _data_free_source_kernel_and_reference()
    assert abs(K[0, 1] - reference(0, 1)) <= E[0, 1] + 1e-13 * np.sqrt(K[0, 0] * K[1, 1])


#: Analytic functions of two correlated vectors written with an elementary function whose singular point the
#: argument never reaches (log1p at −1, sqrt and 1/x at 0): the tracer read that point as a kink on a curve, a
#: hidden kink, and the pairs went to QMC — refused at the default rtol (bounds 8e-4 relative).
ANALYTIC_OF_TWO = {
    "log1p(exp a)·tanh b": lambda u, v: np.log1p(np.exp(u)) * np.tanh(v),
    "sqrt(1 + a²)·tanh b": lambda u, v: np.sqrt(1.0 + u * u) * np.tanh(v),
    "tanh a / (1 + b²)": lambda u, v: np.tanh(u) / (1.0 + v * v),
}


@pytest.mark.parametrize("case", ANALYTIC_OF_TWO)
def test_analytic_functions_of_two_correlated_vectors_meet_the_default_rtol(case):
    """``f(a, b)`` with ``b = 0.6a + 0.8c``: the default rtol is met and every entry is within its bound of a
    4-dimensional Gauss–Legendre product rule (its own error: the change from 48 to 64 nodes an axis)."""
    from references import smooth_pair_by_product_rule

    f = ANALYTIC_OF_TWO[case]
    p = netsor.Program()
    n = p.dim("n")
    a, c = p.input(n, sigma=1.0), p.input(n, sigma=0.9, bias=0.2)
    p.readout(netsor.nonlin(f, a, 0.6 * a + 0.8 * c))
    X = np.random.default_rng(7).standard_normal((3, 4))
    K, E = netsor.limit(p, X).nngp(with_error=True)  # the default rtol 1e-8, or NumericalError
    Ka = X @ X.T / 4
    Kb = 0.36 * Ka + 0.64 * (0.81 * Ka + 0.04)
    scale = np.sqrt(np.outer(np.diag(K), np.diag(K)))
    assert np.all(E <= 1e-8 * scale)
    for i in range(3):
        for j in range(i, 3):
            S = np.array([[Ka[i, i], 0.6 * Ka[i, i], Ka[i, j], 0.6 * Ka[i, j]],
                          [0.6 * Ka[i, i], Kb[i, i], 0.6 * Ka[i, j], Kb[i, j]],
                          [Ka[i, j], 0.6 * Ka[i, j], Ka[j, j], 0.6 * Ka[j, j]],
                          [0.6 * Ka[i, j], Kb[i, j], 0.6 * Ka[j, j], Kb[j, j]]])
            ref, coarse = (smooth_pair_by_product_rule(f, S, nodes) for nodes in (64, 48))
            assert abs(K[i, j] - ref) <= E[i, j] + abs(ref - coarse) + 1e-13 * scale[i, j], (i, j, K[i, j], ref)


def test_a_where_whose_branch_is_not_finite_where_unselected_has_its_exact_kernel():
    """``where(b < 0, a, sqrt(b))`` (a, b independent): ``K = K_a P(b < 0, b' < 0) + E[√b⁺ √b'⁺]`` (a closed form
    and a one-dimensional integral of a parabolic-cylinder closed form). ``sqrt`` of the unselected negative b
    was NaN, and the limit and the finite network refused the function; now the limit meets the default rtol
    (the Hermite coefficients' panels graded towards the √'s singular point: 1.6e-8 reached without) with every
    entry within its bound, and finite networks (no hidden layer: unbiased at any width) agree within 4.5
    standard errors."""
    from references import sqrt_relu_kernel

    p = netsor.Program()
    n = p.dim("n")
    a, b = p.input(n, sigma=1.0), p.input(n, sigma=0.9, bias=0.2)
    p.readout(netsor.nonlin(lambda u, v: np.where(v < 0, u, np.sqrt(v)), a, b))
    X = np.random.default_rng(0).standard_normal((4, 5))
    Ka = X @ X.T / 5
    Kb = 0.81 * Ka + 0.04
    both_negative = 0.25 + np.arcsin(np.clip(Kb / np.sqrt(np.outer(np.diag(Kb), np.diag(Kb))), -1, 1)) / (2 * np.pi)
    ref = Ka * both_negative + np.array([[sqrt_relu_kernel(Kb[i, i], Kb[j, j], Kb[i, j]) for j in range(4)]
                                        for i in range(4)])
    K, E = netsor.limit(p, X).nngp(with_error=True)
    scale = np.sqrt(np.outer(np.diag(ref), np.diag(ref)))
    assert np.all(E <= 1e-8 * scale)
    assert np.all(np.abs(K - ref) <= E + 1e-14 * scale)
    Y = netsor.sample(p, X, width=512, samples=2000, seed=0)
    products = Y[:, :, None] * Y[:, None, :]
    se = products.std(axis=0, ddof=1) / np.sqrt(len(Y))
    assert np.all(np.abs(products.mean(axis=0) - ref) <= 4.5 * se)  # no hidden layer: unbiased at any width


def test_the_square_root_of_relu_meets_the_default_rtol_with_its_bound_above_its_error():
    """``√relu(g)``: its derivative is infinite at the kink, so equal panels (bisected) converge only algebraically
    there — 4.1e-8 reached at rtol 1e-8, refused; the panels graded further towards the kink meet it (bound
    1.3e-10, true error 9e-12 against a parabolic-cylinder closed form integrated adaptively)."""
    from references import sqrt_relu_kernel

    p = netsor.Program()
    n = p.dim("n")
    g = p.input(n, sigma=1.3, bias=0.2)
    p.readout(netsor.nonlin(lambda u: np.sqrt(np.maximum(u, 0.0)), g))
    X = np.random.default_rng(0).standard_normal((6, 5))
    K, E = netsor.limit(p, X).nngp(with_error=True)
    G = 1.69 * X @ X.T / 5 + 0.04
    ref = np.array([[sqrt_relu_kernel(G[i, i], G[j, j], G[i, j]) for j in range(6)] for i in range(6)])
    scale = np.sqrt(np.outer(np.diag(ref), np.diag(ref)))
    assert np.all(E <= 1e-8 * scale)
    assert np.all(np.abs(K - ref) <= E + 1e-14 * scale)
