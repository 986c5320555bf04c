"""The Gaussian engine against independent references, and its error bounds against true errors.

References: the closed forms of the registry (arc-cosine, arcsine, |·|, exp, sin, cos, Gaussian
kernels — textbook formulas, independent of the quadrature and series code they check), scipy's
adaptive ``quad`` (nested for pairs), Isserlis' theorem, and products of one-dimensional closed
forms for functions of independent arguments. Every test of a value also checks that the
reported error bound is at least the true error (up to the reference's own rounding).
"""

from __future__ import annotations

import dataclasses
import math

import mpmath
import numpy as np
import pytest
import references
from scipy import integrate, special, stats

import netsor
from netsor import gaussian as g
from netsor.activations import activation
from netsor.gaussian import joint

CLOSED = ["relu", "step", "erf", "abs", "leaky_relu", "exp", "sin", "cos", "gaussian", "identity"]
RTOL = 1e-10
EPS = np.finfo(float).eps


def quadrature_copy(act):
    """The same activation without its closed form (and not registered): the series path."""
    return dataclasses.replace(act, kernel=None, mean=None, name=act.name + "_q", registered=False,
                               cache_key=("copy", act.name))


def scale_of(phi, psi, a, b):
    return np.sqrt(g.second_moment(phi, a)[0] * g.second_moment(psi, b)[0])


def pair_grid(rng, rows, cols, lo=1e-3, hi=1e2):
    """Row/column layout (a: (rows, 1), b: (1, cols)) with ρ = ±1, 0, ±0.999 and random rows."""
    a = 10 ** rng.uniform(np.log10(lo), np.log10(hi), (rows, 1))
    b = 10 ** rng.uniform(np.log10(lo), np.log10(hi), (1, cols))
    rho = rng.uniform(-1, 1, (rows, cols))
    rho[:5] = np.array([1.0, -1.0, 0.0, 0.999, -0.9999])[:, None]
    return a, b, rho * np.sqrt(a) * np.sqrt(b)


@pytest.mark.parametrize("name", CLOSED)
def test_series_and_quadrature_meet_the_closed_forms_within_their_bounds(name):
    act = activation(name)
    rng = np.random.default_rng(CLOSED.index(name))
    # E exp(u)² lives around z = 2√a; the rules stop at Z_MAX = 10 (a known limit for growing φ).
    hi = 1.0 if name == "exp" else 1e2
    a, b, c = pair_grid(rng, 30, 30, hi=hi)
    want = act.kernel(a, b, c)
    if name == "step":  # θ of the closed form is ill-conditioned at |ρ| = 1 (√eps); the exact values
        want[0], want[1] = 0.5, 0.0
    got, err = g.pair_expectation(quadrature_copy(act), quadrature_copy(act), a, b, c, rtol=RTOL)
    assert got.shape == err.shape == (30, 30)
    scale = scale_of(act, act, a, b)
    true = np.abs(got - want)
    # the closed forms themselves round at ~1e-15 relative (cosh(c)·e^{−(a+b)/2} at variances 100)
    assert np.all(true <= err + 64 * EPS * scale), np.max((true - err) / scale)
    # the series meets the tolerance where it converges; the quadrature fallbacks (pairs with
    # |ρ| near 1, oscillating φ at variance 100) report what they reached, which the interpreter
    # then checks against the user's tolerance
    assert np.median(err / scale) < 10 * RTOL
    assert np.max(err / scale) < 1e-6
    if name in ("relu", "erf"):  # a kinked φ (sparse fallbacks) and a smooth one
        # The error as one number on the envelope (what a tile of the engine asks for): the same
        # values, at least the largest ratio of the error array, and so at least every true error.
        left, right = np.sqrt(g.second_moment(act, a)[0]), np.sqrt(g.second_moment(act, b)[0])
        same, relative = g.pair_expectation(quadrature_copy(act), quadrature_copy(act), a, b, c, rtol=RTOL,
                                            errors="relative", envelope=(left, right))
        envelope = left * right
        np.testing.assert_array_equal(same, got)
        assert relative >= np.max(err / envelope) * (1 - 1e-12)
        assert np.all(true <= relative * envelope + 64 * EPS * scale)
    # Zero variances: a zero-variance coordinate is the constant 0.
    z, _ = g.pair_expectation(quadrature_copy(act), quadrature_copy(act), np.array([0.0, 0.0, 2.0]),
                              np.array([0.0, 3.0, 0.0]), 0.0)
    f0 = float(act.fn(np.zeros(1))[0])
    want0 = [f0 * f0, f0 * g.mean(act, 3.0)[0], f0 * g.mean(act, 2.0)[0]]
    np.testing.assert_allclose(z, want0, rtol=1e-12, atol=1e-14)


def test_the_dense_series_pass_reports_the_largest_squared_correlation_it_met():
    """``_mehler`` returns the pairs beyond the series' reach and the largest ``ρ²`` of the others, from which
    a tile's relative bound is taken (``_series_relative``); it returned the Horner loop's order instead (≥ 1,
    so every such bound fell back to its cap ``rtol``)."""
    from netsor.gaussian import pairs

    rng = np.random.default_rng(7)
    act = activation("tanh")
    a, b = 10 ** rng.uniform(-1, 0.5, (20, 1)), 10 ** rng.uniform(-1, 0.5, (1, 20))
    rho = rng.uniform(-0.95, 0.95, (20, 20))
    va, inv = np.unique(np.concatenate([a.ravel(), b.ravel()]), return_inverse=True)
    ia, ib = inv[:20].reshape(a.shape), inv[20:].reshape(b.shape)
    table = pairs.HermiteTable(act, va, 31, 1e-8)
    out = np.empty((20, 20))
    rejected, widest = pairs._mehler(table, table, ia, ib, np.sqrt(a), np.sqrt(b), rho * np.sqrt(a * b), 15, out,
                                     largest=True)
    met = np.ones(400, dtype=bool)
    met[rejected] = False
    assert 0 < rejected.size < 400  # both kinds of pairs are there
    assert widest == pytest.approx(np.max((rho * rho).ravel()[met]), rel=1e-12)


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
                                      ("relu", "erf"), ("tanh", "relu"), ("tanh", "identity")])
def test_pairs_against_scipy_within_their_bounds(phi, psi):
    phi, psi = activation(phi), activation(psi)
    a = np.array([1.0, 0.3, 20.0, 1e-3, 2.0])
    b = np.array([0.7, 5.0, 1.5, 0.5, 2.0])
    rho = np.array([0.3, -0.85, 0.995, 0.6, 1.0])
    c = rho * np.sqrt(a * b)
    got, err = g.pair_expectation(phi, psi, a, b, c, rtol=RTOL)
    want = np.array([reference(phi, psi, *t) for t in zip(a, b, c, strict=True)])
    scale = scale_of(phi, psi, a, b)
    assert np.max(np.abs(got - want) / scale) < 1e-9
    # scipy's own accuracy is ~1e-13 relative: allow it on top of the bound
    assert np.all(np.abs(got - want) <= err + 1e-13 * scale)
    # the same numbers flat, in a row/column layout, and as scalars
    one, _ = g.pair_expectation(phi, psi, a[2], b[2], c[2], rtol=RTOL)
    assert np.shape(one) == () and abs(one - got[2]) <= 2 * err[2] + 1e-15


def test_kernel_layer_uses_the_series_and_is_bounded():
    """A tanh layer on 24 inputs (row/column layout, the series' dense pass) against scipy on a
    few entries, and the diagonal E tanh(u)² against a 1-D scipy quad."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((24, 100))
    k = x @ x.T / 100
    q = np.diag(k).copy()
    got, err = g.pair_expectation(netsor.tanh, netsor.tanh, q[:, None], q[None, :], k, rtol=RTOL)
    for i, j in [(0, 1), (3, 17), (5, 5), (20, 2)]:
        want = reference(netsor.tanh, netsor.tanh, q[i], q[j], k[i, j])
        assert abs(got[i, j] - want) <= err[i, j] + 1e-13
    diag = [integrate.quad(lambda z, v=v: np.tanh(np.sqrt(v) * z) ** 2 * np.exp(-z * z / 2) / np.sqrt(2 * np.pi),
                           -12, 12, epsabs=1e-15)[0] for v in q]
    np.testing.assert_allclose(np.diag(got), diag, rtol=1e-12)


def test_stein_identity_against_known_values():
    a = np.array([0.5, 3.0, 40.0])
    c = np.array([0.4, -0.5, 0.6]) * np.sqrt(a * np.array([2.0, 0.1, 1.0]))
    value, err = g.stein_identity(netsor.relu, a, c)
    np.testing.assert_allclose(value, c / 2, rtol=1e-13)  # E[relu(u) v] = c/2
    assert np.all(np.abs(value - c / 2) <= err + 4 * EPS * np.abs(c))
    # E[tanh(u) v] = c E[tanh'(u)] (Stein), E tanh'(u) by scipy quad
    t, e = g.stein_identity(netsor.tanh, a, c)
    dt = [integrate.quad(lambda z, v=v: (1 - np.tanh(np.sqrt(v) * z) ** 2) * np.exp(-z * z / 2) / np.sqrt(2 * np.pi),
                         -12, 12, epsabs=1e-15)[0] for v in a]
    np.testing.assert_allclose(t, c * np.array(dt), rtol=1e-12)


def test_means_and_one_dimensional_rules():
    var = np.array([1e-3, 0.5, 1.0, 7.0, 100.0])
    np.testing.assert_allclose(g.mean(netsor.relu, var)[0], np.sqrt(var / (2 * np.pi)), rtol=1e-14)
    gelu, err = g.mean(netsor.gelu, var)
    want = var / np.sqrt(2 * np.pi * (1 + var))  # E[u Φ(u)] = Var u · E[φ(u)] = a / √(2π(1 + a))
    np.testing.assert_allclose(gelu, want, rtol=1e-13)
    assert np.all(np.abs(gelu - want) <= err + 4 * EPS * want)
    relu_q, err = g.mean(quadrature_copy(netsor.relu), var)
    assert np.all(np.abs(relu_q - np.sqrt(var / (2 * np.pi))) <= err + 4 * EPS * relu_q)
    assert np.all(g.mean(netsor.tanh, var)[0] == 0)
    np.testing.assert_allclose(g.expect_1d(np.cos, var), np.exp(-var / 2), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(g.expect_1d(lambda x: x**4, var), 3 * var**2, rtol=1e-13)


def test_adaptive_rule_finds_kinks_nobody_declared_and_bounds_its_error():
    """|x − 0.37| has a kink the rule is not told about: bisection finds it, and the estimate
    covers the true error; E|u − t| = σ √(2/π) e^{−t²/2σ²} + t (2Φ(t/σ) − 1)."""
    var = np.array([0.25, 1.0, 4.0])
    sd = np.sqrt(var)
    t = 0.37
    want = sd * np.sqrt(2 / np.pi) * np.exp(-t * t / (2 * var)) + t * (2 * special.ndtr(t / sd) - 1)
    value, err = g.expect_1d_err(lambda x: np.abs(x - t), var, atol=1e-12)
    assert np.all(np.abs(value - want) <= err + 1e-15)
    assert np.all(err <= 1e-11)


@pytest.mark.parametrize("fn", [np.log, np.sqrt])
def test_functions_undefined_on_the_line_are_refused(fn):
    with pytest.raises(netsor.NumericalError, match="NaN or Inf"), np.errstate(all="ignore"):
        g.expect_1d_err(fn, np.array([1.0]))


def test_singular_and_divergent_expectations_are_not_reported_as_accurate():
    """E|u|^{-3/4} is finite (an integrable singularity at 0): the bound covers the error;
    E u^{-2} diverges: the estimate stays large instead of a number being passed as accurate."""
    value, err = g.expect_1d_err(lambda x: 1.0 / np.maximum(np.abs(x), 1e-300) ** 0.75, np.array([1.0]),
                                 atol=1e-10)
    want = 2 ** (-0.375) * special.gamma(0.125) / np.sqrt(np.pi)  # E|Z|^{-3/4}
    assert abs(value[0] - want) <= err[0]
    _, err2 = g.expect_1d_err(lambda x: 1.0 / np.maximum(x * x, 1e-300), np.array([1.0]), atol=1e-10)
    assert err2[0] > 1e-6


# ------------------------------------------------------------------ several arguments
def random_cov(rng, p, d):
    m = rng.standard_normal((p, d, d)) / np.sqrt(d)
    return m @ np.swapaxes(m, 1, 2) + 0.1 * np.eye(d)


def joint_fn(dim, fn, planes=(), continuous=True, grad=None, key="f"):
    return joint.JointFunction(dim, fn, grad, tuple((np.asarray(n, float), o) for n, o in planes), False,
                               continuous, key)


def test_point_expectations_of_polynomials_are_exact():
    rng = np.random.default_rng(5)
    cov = random_cov(rng, 4, 2)
    F = joint_fn(2, lambda u: u[..., 0] ** 2 * u[..., 1] ** 2, key="x2y2")
    value, err, se = joint.point_expectation(F, cov)
    want = cov[:, 0, 0] * cov[:, 1, 1] + 2 * cov[:, 0, 1] ** 2  # Isserlis
    np.testing.assert_allclose(value, want, rtol=1e-12)
    assert np.all(np.abs(value - want) <= err + 16 * EPS * want) and np.all(se == 0)
    cov3 = random_cov(rng, 3, 3)
    F3 = joint_fn(3, lambda u: u[..., 0] * u[..., 1] * u[..., 2] ** 2, key="xyz2")
    value, err, _ = joint.point_expectation(F3, cov3)
    want = cov3[:, 0, 1] * cov3[:, 2, 2] + 2 * cov3[:, 0, 2] * cov3[:, 1, 2]
    np.testing.assert_allclose(value, want, rtol=1e-11, atol=1e-14)


def test_point_expectation_with_kink_planes_meets_closed_forms():
    """E[relu(u₁) relu(u₂)] and E[|u₁ − u₂| step(u₂)] with their kink planes declared."""
    rng = np.random.default_rng(7)
    cov = random_cov(rng, 6, 2)
    F = joint_fn(2, lambda u: np.maximum(u[..., 0], 0) * np.maximum(u[..., 1], 0),
                 planes=[([1, 0], 0.0), ([0, 1], 0.0)], key="relu*relu")
    value, err, _ = joint.point_expectation(F, cov)
    want = netsor.relu.kernel(cov[:, 0, 0], cov[:, 1, 1], cov[:, 0, 1])
    assert np.all(np.abs(value - want) <= err + 16 * EPS * want)
    assert np.max(np.abs(value - want) / want) < 1e-10


def test_point_expectation_refines_its_panels_until_it_meets_atol():
    """``E tanh(x·tanh(y))²`` of independent x, y (found by the fuzz test, from a NetsorK moment of a
    transposed program): along y the singularities approach the real line as |x| grows, so the
    panels the scales of the arguments suggest leave an error estimate of 1.9e-7 — the limit then
    refused any rtol below 1.1e-6. Narrower panels meet atol = 1e-12, and the true error (against
    scipy's adaptive 2-D quadrature) is within the reported one."""
    S = np.array([[2.657205, 0.0], [0.0, 1.0]])
    F = joint_fn(2, lambda u: np.tanh(u[..., 0] * np.tanh(u[..., 1])) ** 2, key="tanh(x tanh y)^2")
    want = adaptive_expectation(lambda u: np.tanh(u[0] * np.tanh(u[1])) ** 2, S)
    value, err, se = joint.point_expectation(F, S[None], atol=1e-12)
    assert err[0] <= 1e-12 and se[0] == 0.0
    assert abs(value[0] - want) <= err[0] + 1e-13


def adaptive_expectation(h, S):
    """``E h(u)``, ``u ~ N(0, S)`` in 2 dimensions, by scipy's adaptive 2-D quadrature split at u₁ = 0
    (the kink of the functions tested here); ``h`` takes the pair ``(u₁, u₂)`` of floats."""
    (a, b), (_, c) = np.linalg.inv(S)
    norm = 1.0 / (2 * np.pi * np.sqrt(np.linalg.det(S)))

    def integrand(u2, u1):
        return h((u1, u2)) * norm * math.exp(-0.5 * (a * u1 * u1 + 2 * b * u1 * u2 + c * u2 * u2))

    box = 12 * np.sqrt(np.max(np.diag(S)))
    return sum(integrate.dblquad(integrand, lo, hi, -box, box, epsabs=1e-13, epsrel=1e-11)[0]
               for lo, hi in ((-box, 0.0), (0.0, box)))


def test_point_moments_of_kinked_compositions_are_never_below_their_values():
    """The moments that scale error bounds (E F², E F⁴, E (∂ᵢF)², E |∇F|², E |∇F|²|U|²) of
    F = tanh(relu(u₁) + u₂) come from a coarse nested rule with a margin: each is at least the value
    (2-D adaptive quadrature, split at the kink) and exceeds it by at most 1e-4 relative. (Its error
    estimate alone, without the margin, left E F² 3e-10 below the value.)"""

    rng = np.random.default_rng(13)
    cov = random_cov(rng, 3, 2) * np.array([1.0, 2.5, 0.4])[:, None, None]

    def grad(u):
        t = 1.0 - np.tanh(np.maximum(u[..., 0], 0) + u[..., 1]) ** 2
        return np.stack([t * (u[..., 0] > 0), t], axis=-1)

    F = joint_fn(2, lambda u: np.tanh(np.maximum(u[..., 0], 0) + u[..., 1]), planes=[([1, 0], 0.0)], grad=grad,
                 key="tanh(relu+u2)")
    got = joint.point_moments(F, cov)

    # the reference integrands in scalar arithmetic (math, not the vectorised F): the gradient is
    # (step(u₁)·sech², sech²) of the argument relu(u₁) + u₂
    def value(u):
        return math.tanh(max(u[0], 0.0) + u[1])

    def partial(u, i):
        return (1.0 - value(u) ** 2) * (1.0 if i == 1 or u[0] > 0 else 0.0)

    def gradnorm2(u):
        return partial(u, 0) ** 2 + partial(u, 1) ** 2

    for p, S in enumerate(cov):
        def expect(h, S=S):
            return adaptive_expectation(h, S)

        want = {"m2": expect(lambda u: value(u) ** 2), "m4": expect(lambda u: value(u) ** 4),
                "gradnorm2": expect(gradnorm2),
                "joint_euler": expect(lambda u: gradnorm2(u) * (u[0] ** 2 + u[1] ** 2))}
        for i in range(2):
            want[f"arg{i}"] = expect(lambda u, i=i: partial(u, i) ** 2)
        values = {k: got[k][p] for k in ("m2", "m4", "gradnorm2", "joint_euler")}
        values |= {f"arg{i}": got["arg_grad2"][p, i] for i in range(2)}
        for k, v in values.items():
            assert want[k] * (1 - 1e-13) <= v <= want[k] * (1 + 1e-4), (p, k, v, want[k])


@pytest.mark.parametrize("which", ["relu(u1)·erf(u2)", "gelu(u1)·step(u2)", "gelu(u1)·gelu(u2)"])
def test_point_moments_of_smoothed_steps_are_never_below_their_values(which):
    """Products with normal-CDF gates (erf, gelu: smoothed steps of the cone engine) take their
    error-bound scales from functions of plain forms that dominate F and its gradient: each moment
    is at least its value (2-D adaptive quadrature, split at the kink) and, to stay useful, at most
    30× it for relu·erf, 1000× with gelu (where |x| bounds gelu(x) = xΦ(x) for x < 0; these scales
    enter the bounds by square or fourth roots, and gelu(a)·gelu(b) kernels still get bounds of
    ~1e-12 relative). E F⁴ enters the bounds only for discontinuous F (continuous ones use the
    gradient moments), so for continuous F only its lower side is checked."""
    from netsor.activations import erf, gelu, relu, step
    from netsor.interpret.functions import joint_function
    from netsor.ir import expr as ex

    p = netsor.Program()
    n = p.dim("n")
    a, b = p.input(n), p.input(n)
    A, B = ex.Var(a), ex.Var(b)
    # the reference integrands in scalar arithmetic (math): F and its gradient
    d_erf = lambda x: 2 / math.sqrt(math.pi) * math.exp(-x * x)  # noqa: E731
    gelu_ = lambda x: 0.5 * x * math.erfc(-x / math.sqrt(2))  # noqa: E731
    gelu_d = lambda x: 0.5 * math.erfc(-x / math.sqrt(2)) + x * math.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)  # noqa: E731
    expr, fn, grad = {
        "relu(u1)·erf(u2)": (ex.product([ex.apply(relu, A), ex.apply(erf, B)]),
                             lambda u: max(u[0], 0.0) * math.erf(u[1]),
                             lambda u: ((u[0] > 0) * math.erf(u[1]), max(u[0], 0.0) * d_erf(u[1]))),
        "gelu(u1)·gelu(u2)": (ex.product([ex.apply(gelu, A), ex.apply(gelu, B)]),
                              lambda u: gelu_(u[0]) * gelu_(u[1]),
                              lambda u: (gelu_d(u[0]) * gelu_(u[1]), gelu_(u[0]) * gelu_d(u[1]))),
        "gelu(u1)·step(u2)": (ex.product([ex.apply(gelu, A), ex.apply(step, B)]),
                              lambda u: gelu_(u[0]) * (u[1] > 0), None),
    }[which]
    gradnorm2 = lambda u: grad(u)[0] ** 2 + grad(u)[1] ** 2  # noqa: E731
    F = joint_function(expr, (a, b))
    assert F.cone is not None and F.cone.smoothed and F.continuous == (grad is not None)
    cov = random_cov(np.random.default_rng(17), 2, 2) * np.array([2.5, 0.4])[:, None, None]
    got = joint.point_moments(F, cov)
    for q, S in enumerate(cov):
        def expect(h, S=S):
            return adaptive_expectation(h, S)

        want = {"m2": expect(lambda u: fn(u) ** 2), "m4": expect(lambda u: fn(u) ** 4)}
        values = {"m2": got["m2"][q], "m4": got["m4"][q]}
        if grad is not None:
            want |= {"gradnorm2": expect(gradnorm2),
                     "joint_euler": expect(lambda u: gradnorm2(u) * (u[0] ** 2 + u[1] ** 2))}
            want |= {f"arg{i}": expect(lambda u, i=i: grad(u)[i] ** 2) for i in range(2)}
            values |= {k: got[k][q] for k in ("gradnorm2", "joint_euler")}
            values |= {f"arg{i}": got["arg_grad2"][q, i] for i in range(2)}
        else:
            assert np.all(np.isinf(got["gradnorm2"]))
        for k, v in values.items():
            top = 30.0 if which == "relu(u1)·erf(u2)" else 1000.0
            top = np.inf if k == "m4" and grad is not None else top
            assert want[k] * (1 - 1e-12) <= v <= want[k] * top, (q, k, v / want[k])


def test_qmc_reports_a_standard_error_that_covers_the_error():
    rng = np.random.default_rng(6)
    cov = random_cov(rng, 5, 5)
    F = joint_fn(5, lambda u: u[..., 0] * u[..., 1] * u[..., 2] * u[..., 3], key="isserlis4")
    value, err, se = joint.point_expectation(F, cov, seed=1)
    c = cov
    want = c[:, 0, 1] * c[:, 2, 3] + c[:, 0, 2] * c[:, 1, 3] + c[:, 0, 3] * c[:, 1, 2]
    assert np.all(se > 0) and np.all(np.abs(value - want) <= err)
    again, _, _ = joint.point_expectation(F, cov, seed=1)
    np.testing.assert_array_equal(again, value)


def test_qmc_errors_of_a_polynomially_growing_integrand_follow_student_t():
    """``E relu(u)²·relu(v)²`` (every diagonal entry of a product's kernel; Cho and Saul's closed form
    ``J₂(θ)/2π``) at random correlations in 0.5–0.95 by randomised QMC, 300 independent estimates
    (one seed each): Student's t with 15 degrees of freedom puts 0.9 % beyond 3 standard errors and
    1e-4 beyond ``MC_ERROR_SIGMAS``. With standard normals the replicate means were skewed by the
    points in extreme strata (here 12 beyond 3 and 2 beyond 5.24, up to 8.0; a CI run failed on such
    a diagonal): the wider proposal bounds the integrand (3 beyond 3, largest 3.9)."""
    rng = np.random.default_rng(12)
    F = joint_fn(2, lambda u: np.maximum(u[..., 0], 0) ** 2 * np.maximum(u[..., 1], 0) ** 2, key="relu2relu2")
    rho = rng.uniform(0.5, 0.95, 300)
    theta = np.arccos(rho)
    want = (3 * np.sin(theta) * np.cos(theta) + (np.pi - theta) * (1 + 2 * np.cos(theta) ** 2)) / (2 * np.pi)
    t = np.empty(rho.size)
    for seed, r in enumerate(rho):
        value, se = joint.qmc_expectation(F, np.array([[[1.0, r], [r, 1.0]]]), seed=seed)
        t[seed] = abs(value[0] - want[seed]) / se[0]
    # Poisson(2.7) beyond 3: P(more than 9) ≈ 5e-4
    assert np.all(t <= joint.MC_ERROR_SIGMAS) and np.sum(t > 3) <= 9, np.sort(t)[-12:]


def test_qmc_refines_only_the_points_that_miss_atol_and_stops_when_out_of_reach():
    """Randomised QMC in 5 dimensions: with an ``atol`` in reach, only the points whose error misses
    it get 4× more points (until they meet it: Isserlis' value within the error); points whose
    ``atol`` no rate (points^-1.5) could bring within reach stop after the first round, the others
    go on."""
    rng = np.random.default_rng(8)
    cov = random_cov(rng, 4, 5)
    cov[0] *= 1e-2  # a point of small variance: its first round already meets atol
    rounds = []

    def fn(u):
        rounds.append(u.shape[:2])  # (points, QMC points per replicate)
        return u[..., 0] * u[..., 1] * u[..., 2] * u[..., 3]

    F = joint_fn(5, fn, key="isserlis4-rounds")
    c = cov
    want = c[:, 0, 1] * c[:, 2, 3] + c[:, 0, 2] * c[:, 1, 3] + c[:, 0, 3] * c[:, 1, 2]
    _, first, _ = joint.point_expectation(F, cov, seed=2)
    assert set(rounds) == {(4, 2**joint.QMC_LOG2_POINTS)}
    atol = first[1:].min() / 2
    assert first[0] <= atol
    rounds.clear()
    value, err, se = joint.point_expectation(F, cov, seed=2, atol=atol)
    assert rounds[0] == (4, 2**joint.QMC_LOG2_POINTS) and all(r[0] <= 3 for r in rounds[joint.MC_REPLICATES:])
    assert len(rounds) > joint.MC_REPLICATES and np.all(err <= atol) and np.all(np.abs(value - want) <= err)
    # an atol that the small point can still reach (its error falls ≥ 64× by 2^17 points, points^-1.5)
    # and the others cannot (even at that rate they would stay above 10× it): only the small one goes on
    rounds.clear()
    tiny = math.sqrt(first[0] * first[1:].min()) / 640
    assert first[0] * 2.0**-6 <= joint.QMC_SLACK * tiny < first[1:].min() * 2.0**-6
    _, err, _ = joint.point_expectation(F, cov, seed=2, atol=tiny)
    first_round, later = rounds[:joint.MC_REPLICATES], rounds[joint.MC_REPLICATES:]
    assert set(first_round) == {(4, 2**joint.QMC_LOG2_POINTS)} and later and {r[0] for r in later} == {1}
    assert np.all(err[1:] > tiny)


def test_joint_pair_series_of_separable_functions_meets_products_of_closed_forms():
    """F(u₁, u₂) = relu(u₁)·erf(u₂) with independent arguments: E[F(U) F(V)] is the product of
    the arc-cosine and the arcsine kernels — through the two-dimensional Hermite series."""
    rng = np.random.default_rng(11)
    P = 6
    s1, s2 = rng.uniform(0.5, 2.0, P), rng.uniform(0.3, 1.5, P)
    cov_pts = np.zeros((P, 2, 2))
    cov_pts[:, 0, 0], cov_pts[:, 1, 1] = s1, s2
    i, j = np.meshgrid(np.arange(P), np.arange(P), indexing="ij")
    i, j = i.ravel(), j.ravel()
    r1, r2 = rng.uniform(-0.6, 0.6, (P, P)), rng.uniform(-0.6, 0.6, (P, P))
    r1, r2 = (r1 + r1.T) / 2, (r2 + r2.T) / 2
    np.fill_diagonal(r1, 1.0)
    np.fill_diagonal(r2, 1.0)
    C = np.zeros((P * P, 2, 2))
    C[:, 0, 0] = r1.ravel() * np.sqrt(s1[i] * s1[j])
    C[:, 1, 1] = r2.ravel() * np.sqrt(s2[i] * s2[j])
    F = joint_fn(2, lambda u: np.maximum(u[..., 0], 0) * special.erf(u[..., 1]), planes=[([1, 0], 0.0)],
                 key="relu*erf")
    value, err, _ = joint.pair_expectation(F, F, cov_pts[i], cov_pts[j], C, rtol=1e-10)
    want = (netsor.relu.kernel(s1[i], s1[j], C[:, 0, 0]) * netsor.erf.kernel(s2[i], s2[j], C[:, 1, 1]))
    scale = np.sqrt(netsor.relu.kernel(s1[i], s1[i], s1[i]) * netsor.relu.kernel(s1[j], s1[j], s1[j])
                    * netsor.erf.kernel(s2[i], s2[i], s2[i]) * netsor.erf.kernel(s2[j], s2[j], s2[j]))
    assert np.max(np.abs(value - want) / scale) < 1e-9
    assert np.all(np.abs(value - want) <= err + 16 * EPS * scale)


def test_hermite_tables_turned_to_a_slanted_kink_meet_products_of_closed_forms():
    """relu(a)·erf(c) of independent a, c seen through correlated arguments u = M(a, c): the kink
    plane a = 0 is slanted in the eigenvectors' whitening, and the tables turn it onto ξ₁
    (:func:`joint.table_factors`, whose inner axis then has one rule for all nodes). The turned factors
    must still factor each covariance with the kink's normal along ξ₁, and the pair series must give
    the product of the arc-cosine and arcsine kernels within its bound."""
    rng = np.random.default_rng(12)
    P = 5
    M = np.array([[1.0, 0.5], [-0.3, 1.0]])
    Minv = np.linalg.inv(M)
    s1, s2 = rng.uniform(0.5, 2.0, P), rng.uniform(0.3, 1.5, P)
    cov_pts = np.einsum("ij,pj,kj->pik", M, np.stack([s1, s2], axis=1), M)
    F = joint_fn(2, lambda u: (np.maximum(u @ Minv[0], 0) * special.erf(u @ Minv[1])), planes=[(Minv[0], 0.0)],
                 key="relu*erf slanted")
    L, r = joint.table_factors(F, cov_pts)
    np.testing.assert_allclose(L @ np.swapaxes(L, 1, 2), cov_pts, atol=1e-14)
    normal = np.einsum("pkr,k->pr", L, Minv[0])
    assert r == 2 and np.all(np.abs(normal[:, 1]) <= 1e-14 * np.abs(normal[:, 0]))
    i, j = np.triu_indices(P, 1)
    r1, r2 = rng.uniform(-0.7, 0.7, i.size), rng.uniform(-0.7, 0.7, i.size)
    ca, cc = r1 * np.sqrt(s1[i] * s1[j]), r2 * np.sqrt(s2[i] * s2[j])
    C = np.einsum("ij,mj,kj->mik", M, np.stack([ca, cc], axis=1), M)
    value, err, _ = joint.pair_expectation(F, F, cov_pts[i], cov_pts[j], C, rtol=1e-10)
    want = netsor.relu.kernel(s1[i], s1[j], ca) * netsor.erf.kernel(s2[i], s2[j], cc)
    scale = np.sqrt(netsor.relu.kernel(s1[i], s1[i], s1[i]) * netsor.relu.kernel(s1[j], s1[j], s1[j])
                    * netsor.erf.kernel(s2[i], s2[i], s2[i]) * netsor.erf.kernel(s2[j], s2[j], s2[j]))
    assert np.max(np.abs(value - want) / scale) < 1e-9
    assert np.all(np.abs(value - want) <= err + 16 * EPS * scale)


@pytest.mark.parametrize("va, vc, vb, rho, r2, reach", [(4.0, 3.0, 0.5, 0.6, 0.5, 1e-8),
                                                         (6.0, 2.0, 1.0, -0.4, -0.3, 1e-8),
                                                         (2.5, 5.0, 0.8, 0.3, 0.7, 2e-8)])
def test_pair_series_meets_its_tolerance_when_the_tables_coefficients_need_finer_panels(va, vc, vb, rho, r2, reach):
    """``E[F(U) relu(V)]`` for ``F = erf(relu(a)·tanh(c))·relu(a)`` of wide arguments: ``V | U`` is Gaussian, so
    the reference is a 2-D adaptive quadrature of ``F`` times ``E[relu(V) | U]`` in closed form. The series'
    tails met 1e-8 at degree 16, but the coefficients of that order's table carried quadrature errors of 2e-8
    of ‖F‖ times √(their number): bounds of 2e-8 to 1.8e-7 (random-program campaign seed 134, a cross kernel
    refused at 1e-8 that the symmetric one met). The tables now grow their order — finer panels — until the
    coefficients meet the tolerance too (1.8e-7 → 7e-9, 2e-8 → 6e-9), or, at the largest order, the series is
    taken at its best degree (the third case: 1.5e-8, where the bound was 1e-6, and the nested quadrature
    the pair went to was 2000× less accurate; a limit retries such a near miss with a smaller share)."""
    F = joint_fn(2, lambda u: special.erf(np.maximum(u[..., 0], 0) * np.tanh(u[..., 1])) * np.maximum(u[..., 0], 0),
                 planes=[([1.0, 0.0], 0.0)], key="erf(relu·tanh)·relu")
    G = joint_fn(1, lambda u: np.maximum(u[..., 0], 0), planes=[([1.0], 0.0)], key="relu")
    cross = r2 * np.sqrt(va * vc)
    cov_x, cov_y = np.array([[[va, cross], [cross, vc]]]), np.array([[[vb]]])
    C = np.array([[[rho * np.sqrt(va * vb)], [0.2 * np.sqrt(vc * vb)]]])
    value, err, _ = joint.pair_expectation(F, G, cov_x, cov_y, C, rtol=1e-8)
    w = np.linalg.solve(cov_x[0], C[0, :, 0])  # E[V | U] = w·U
    s = np.sqrt(vb - C[0, :, 0] @ w)

    def f(u):
        return math.erf(max(u[0], 0.0) * math.tanh(u[1])) * max(u[0], 0.0)

    def conditional(u):
        mu = w @ u
        return f(u) * (mu * special.ndtr(mu / s) + s * math.exp(-0.5 * (mu / s) ** 2) / math.sqrt(2 * math.pi))

    ref = adaptive_expectation(conditional, cov_x[0])
    scale = np.sqrt(adaptive_expectation(lambda u: f(u) ** 2, cov_x[0]) * vb / 2)
    assert abs(value[0] - ref) <= err[0] and err[0] <= reach * scale


def test_a_jump_nearly_along_an_eigenvector_of_a_rank_two_law_is_integrated_exactly():
    """``E[step(u − v − 0.3)·v·w]`` with ``w`` in the span of ``u, v`` (rank 2): with ``z = u − v``, it is
    ``αβ E[z² 1{z > 0.3}] + Cov(v, w | z) P(z > 0.3)`` (α, β the regressions of v, w on z), truncated
    normal moments in closed form. The first covariance is a random program's (campaign seed 135, an
    attention mix w): in its eigenvectors' whitening the kink's normal is (−0.87, 0.009), the inner axis
    was cut far out at a point racing along it as the outer node crossed the line, and the rule was off by
    1.5e-3 (bound 7e-3, refused at rtol 1e-3). The nested rule now turns the whitening so that ξ₁ is
    normal to the kink, as the Hermite tables do."""
    F = joint_fn(3, lambda u: (u[..., 0] - u[..., 1] - 0.3 > 0) * u[..., 1] * u[..., 2],
                 planes=[([1.0, -1.0, 0.0], -0.3)], continuous=False, key="step(u − v − 0.3)·v·w")
    rng = np.random.default_rng(4)
    covs = [np.array([[0.48938, 0.08154, 0.23179], [0.08154, 0.42793, 0.30032], [0.23179, 0.30032, 0.27507]])]
    for _ in range(3):  # w = a u + b v
        A = np.vstack([np.eye(2), rng.uniform(-1, 1, 2)]) @ rng.standard_normal((2, 2))
        covs.append(A @ A.T)
    cov = np.stack(covs)
    cov[0] = _rank_two(cov[0])
    value, err, _ = joint.point_expectation(F, cov)
    want = np.array([_gated_product(S, np.array([1.0, -1.0, 0.0]), 0.3, 1, 2) for S in cov])
    scale = np.sqrt(cov[:, 1, 1] * cov[:, 2, 2])
    assert np.all(np.abs(value - want) <= err + 16 * EPS * scale) and np.all(err <= 1e-12 * scale)


def test_two_kink_lines_at_any_angle_nearly_parallel_included_give_their_orthant_within_the_bound():
    """``P(u − a v > o₁, u − b v > o₂)`` (bivariate normal by Owen's T) for random laws, slopes and offsets,
    every other case with nearly parallel lines (|a − b| < 1e-2). In the eigenvectors' whitening such lines
    cut the inner axis at points racing along it: correlation 0.9992 was 1.5e-13 off within a bound of 1.6e-14,
    0.99972 reached only 2e-5. Nearly parallel lines are now turned nearly normal to the inner axis."""
    from references import owens_bvn

    rng = np.random.default_rng(3)
    for trial in range(40):
        A = rng.standard_normal((2, 2))
        S = A @ A.T + 0.05 * np.eye(2)
        a, b = rng.uniform(-1, 1, 2)
        o1, o2 = rng.uniform(-0.5, 0.5, 2)
        if trial % 2:
            b = a + rng.uniform(-1e-2, 1e-2)
        n1, n2 = np.array([1.0, -a]), np.array([1.0, -b])
        F = joint_fn(2, lambda u, a=a, b=b, o1=o1, o2=o2: ((u[..., 0] - a * u[..., 1] > o1)
                                                          & (u[..., 0] - b * u[..., 1] > o2)).astype(float),
                     planes=[(n1, -o1), (n2, -o2)], continuous=False, key=("two lines", trial))
        value, err, _ = joint.point_expectation(F, S[None])
        s1, s2 = np.sqrt(n1 @ S @ n1), np.sqrt(n2 @ S @ n2)
        want = owens_bvn(-o1 / s1, -o2 / s2, n1 @ S @ n2 / (s1 * s2))
        assert abs(value[0] - want) <= err[0] + 1e-15 and err[0] <= 1e-9, trial  # rtol 1e-8 within reach


@pytest.mark.slow  # ~10 s
def test_one_kink_plane_of_three_arguments_is_turned_normal_to_the_outer_axis():
    """``E[1{n·u > o}·u₁u₂]`` of three correlated arguments for random laws, normals (every third nearly along
    an eigenvector) and offsets: ``αβ E[z² 1{z > o}] + Cov(u₁, u₂ | z) P(z > o)`` with ``z = n·u``, as in the
    rank-two test. In the eigenvectors' whitening the nested rule was up to 1 % off (bounds up to 1.3 %: a
    normal (0.38, −1e-4, −1e-3) cut the inner axes at points racing along them); the whitening is now
    turned so that ξ₁ is normal to the plane (a reflection), and the inner axes are not cut at all. The
    bound leaves out the whitening's own rounding (L Lᵀ = Σ to ~1e-15), hence 64 eps beside it."""
    rng = np.random.default_rng(7)
    for trial in range(20):
        A = rng.standard_normal((3, 3))
        S = A @ A.T + 0.05 * np.eye(3)
        n, o = rng.standard_normal(3), rng.uniform(-0.5, 0.5)
        if trial % 3 == 0:
            n = np.linalg.eigh(S)[1][:, rng.integers(3)] + 1e-3 * rng.standard_normal(3)
        F = joint_fn(3, lambda u, n=n, o=o: (u @ n > o) * u[..., 0] * u[..., 1], planes=[(n, -o)],
                     continuous=False, key=("one plane", trial))
        value, err, _ = joint.point_expectation(F, S[None])
        want = _gated_product(S, n, o, 0, 1)
        scale = np.sqrt(S[0, 0] * S[1, 1])
        assert abs(value[0] - want) <= err[0] + 64 * EPS * scale and err[0] <= 1e-9 * scale, trial


def _gated_product(S, n, o, i, j):
    """``E[1{z > o} u_i u_j]`` for ``u ~ N(0, S)``, ``z = n·u``: with ``α, β`` the regressions of ``u_i, u_j`` on
    z, ``αβ E[z² 1{z > o}] + Cov(u_i, u_j | z) P(z > o)``, and ``E[z² 1{z > o}] = Var z (Q(t) + t φ(t))`` for
    ``t = o / sd(z)`` (truncated normal moments)."""
    var_z, ci, cj = n @ S @ n, S[i] @ n, S[j] @ n
    t = o / np.sqrt(var_z)
    tail = special.ndtr(-t)
    return ci * cj / var_z * (tail + t * np.exp(-t * t / 2) / np.sqrt(2 * np.pi)) + (S[i, j] - ci * cj / var_z) * tail


def _rank_two(S):
    """``S`` with its smallest eigenvalue set to 0 (a rounded covariance of three vectors in a plane)."""
    w, V = np.linalg.eigh(S)
    w[0] = 0.0
    return (V * w) @ V.T


def test_point_square_bound_covers_the_change_of_the_second_moment():
    """``|E φ(u')² − E φ(u)²|`` for ``Var u' = a ± δa`` (scipy quadrature, independent of the engine)
    is within ``point_square`` for δa/a = 1e-3 and 1e-2 (first order with a second-order allowance), and
    tight: a bound 0.9× as large fails."""
    from scipy import integrate, stats

    from netsor.activations.registry import activation
    from netsor.gaussian.pairs import moments_1d
    from netsor.interpret.propagation import point_square

    def second(act, var):
        return integrate.quad(lambda z: act.fn(np.sqrt(var) * np.array([z]))[0] ** 2 * stats.norm.pdf(z),
                              -12, 12, epsabs=1e-15, epsrel=1e-13, limit=200)[0]

    ratios = []
    for name in ("tanh", "erf", "gelu", "sin", "softplus"):
        act = activation(name)
        a = np.array([0.01, 1.0, 25.0])
        for step in (1e-3, 1e-2):
            da = step * a
            bound = point_square(a, da, moments_1d(act, a))
            for i in range(a.size):
                change = max(abs(second(act, a[i] + s * da[i]) - second(act, a[i])) for s in (-1, 1))
                assert change <= bound[i], (name, a[i], step, change, bound[i])
                ratios.append(change / bound[i])
    assert max(ratios) > 0.9  # first order: tight where the variance map is not flat


def test_one_dimensional_moments_meet_closed_forms_at_every_scale():
    """The per-point moments behind every propagated bound, for erf at variances 1e-4 … 1e16 against
    closed forms: ``E erf² = (2/π) asin(2a/(1+2a))``, ``E erf'² = (4/π)/√(1+4a)``,
    ``E erf'² u² = (4/π) a/(1+4a)^{3/2}`` (a rule graded only to 4⁻³ in z stepped over erf'(σz) for
    σ ≥ 1e4: E erf'² 23 % low at 1e8 and 0 at 1e12, so propagated bounds were too small there)."""
    from netsor.activations.registry import activation
    from netsor.gaussian.pairs import moments_1d

    a = np.array([1e-4, 1.0, 1e4, 1e8, 1e12, 1e16])
    m = moments_1d(activation("erf"), a)
    # (2/π) asin(1 − δ) = 1 − (4/π) asin(√(δ/2)) with δ = 1/(1 + 2a): no cancellation at large a
    np.testing.assert_allclose(m["m2"], 1 - 4 / np.pi * np.arcsin(np.sqrt(0.5 / (1 + 2 * a))), rtol=1e-12)
    np.testing.assert_allclose(m["grad2"], 4 / np.pi / np.sqrt(1 + 4 * a), rtol=1e-12)
    np.testing.assert_allclose(m["euler"], 4 / np.pi * a / (1 + 4 * a) ** 1.5, rtol=1e-11)


def test_closed_forms_are_stable_at_large_variances():
    """At a point with itself of variance 1e16 the Gaussian-type kernels are their exact limits
    (the product forms cancelled to 0 or a negative determinant, and sin/cos gave inf · 0)."""
    from netsor.activations import kernels

    a = np.array([1e16, 2.5])
    gauss, erf_d = kernels.gaussian_kernel(a, a, a), kernels.erf_deriv_kernel(a, a, a)
    np.testing.assert_allclose(gauss, 1 / np.sqrt(1 + 2 * a), rtol=1e-14)  # det(I + Σ) = 1 + 2a for c = a = b
    np.testing.assert_allclose(erf_d, 4 / np.pi / np.sqrt(1 + 4 * a), rtol=1e-14)
    np.testing.assert_allclose(kernels.sin_kernel(a, a, a), 0.5 * (1 - np.exp(-2 * a)), rtol=1e-14)
    np.testing.assert_allclose(kernels.cos_kernel(a, a, a), 0.5 * (1 + np.exp(-2 * a)), rtol=1e-14)


def test_step_kernel_modulus_bounds_its_change_over_the_interval():
    """``kernel_modulus`` of step bounds ``max |K(c') − K(c)|`` over ``|c' − c| ≤ δ``: checked on
    a dense sweep of c' (clipped to the admissible correlations) from ρ = 0 to colinear pairs,
    δ from rounding size to the whole range; the excess allowed is the kernel's own rounding."""
    step = activation("step")
    rng = np.random.default_rng(11)
    a, b = 10 ** rng.uniform(-2, 2, (2, 400))
    root = np.sqrt(a * b)
    u = rng.uniform(-1, 1, 400)
    rho = np.sign(u) * np.abs(u) ** rng.choice([1, 1 / 7, 1 / 25], 400)  # many near ±1
    c, delta = rho * root, 10 ** rng.uniform(-16, 0.5, 400) * root
    shifts = np.linspace(-1, 1, 4001)[:, None] * delta
    moved = np.clip(c + shifts, -root, root)
    true = np.max(np.abs(step.kernel(a, b, moved) - step.kernel(a, b, c)), axis=0)
    bound = step.kernel_modulus(a, b, c, delta)
    assert np.all(true <= bound + 8 * EPS)
    # and it is not loose far from colinearity: within 1 % of the change there (for changes
    # well above the kernel's rounding)
    inner = (np.abs(rho) < 0.9) & (delta < 1e-3 * root) & (delta > 1e-10 * root)
    assert np.all(bound[inner] <= 1.01 * true[inner] + 8 * EPS)


@pytest.mark.parametrize("colinear", [False, True], ids=["spread", "near-colinear"])
def test_step_jump_bound_of_a_tile_covers_every_pair(colinear):
    """:func:`propagation.jump_relative` — one scalar for a whole tile of step kernels, from
    per-point maxima and the largest |ρ| — bounds the change of every pair when its variances
    and covariance move anywhere within their bounds (corners of the box, where ρ is extreme).
    Near-colinear tiles (one pair at 1 − 1e-9) must give a large bound, not a wrong small one."""
    from netsor.interpret import bounds, propagation

    step = activation("step")
    rng = np.random.default_rng(7)
    B1, B2 = 30, 40
    Z = rng.standard_normal((B1 + B2, 8))
    if colinear:
        Z[B1] = Z[0] + 4e-5 * rng.standard_normal(8)
    G = Z @ Z.T / 8
    a, b, c = np.diag(G)[:B1, None], np.diag(G)[None, B1:], G[:B1, B1:]
    rel = 10 ** rng.uniform(-9, -6, 3)
    da, db = rel[0] * a * rng.uniform(0, 1, a.shape), rel[1] * b * rng.uniform(0, 1, b.shape)
    root_a, root_b = np.sqrt(a), np.sqrt(b)
    dense = rel[2] * 0.5 * np.sqrt(a * b) * rng.uniform(0, 1, c.shape)
    c_bound = bounds.Bound(rel[2] * 0.5, root_a, root_b, dense)
    env_l, env_r = np.full(a.shape, np.sqrt(0.5)), np.full(b.shape, np.sqrt(0.5))
    eta = propagation.jump_relative(step.kernel_modulus, a, b, da, db, c, c_bound, env_l, env_r, False)
    dc = c_bound.array()
    true = np.zeros(c.shape)
    for sa in (-1, 1):
        for sb in (-1, 1):
            for sc in (-1, 1):
                aa, bb = a + sa * da, b + sb * db
                cc = np.clip(c + sc * dc, -np.sqrt(aa * bb), np.sqrt(aa * bb))
                true = np.maximum(true, np.abs(step.kernel(aa, bb, cc) - step.kernel(a, b, c)))
    assert np.all(true <= eta * env_l * env_r + 8 * EPS)
    if colinear:
        assert eta > 1e-6  # dominated by the near-colinear pair: the engine then keeps a dense bound
    else:
        assert eta < 10 * rel.max()  # first order in the intervals (not the Hölder √ form)


def test_joint_point_bound_covers_covariance_moves_at_a_nearly_singular_law():
    """:func:`propagation.point_joint` of ``E[Φ(√2 u₁)² relu(u₂)²]`` at a covariance of correlation 1 − 5e-9
    (λmin/λmax 2.5e-9) covers the change of the expectation when the covariance moves anywhere within
    entrywise bounds of 1e-9 of its scale — the regime where the whitened bound (``λmin^{-3/2}``) is
    useless and the ½-Hölder coupling bound takes over. Reference: the inner expectation over u₂ given
    u₁ in closed form, the outer by adaptive quadrature."""
    from netsor.interpret import propagation
    from netsor.interpret.functions import joint_function

    p = netsor.Program()
    n = p.dim("n")
    u, v = p.input(n), p.input(n)
    expr = p.line_of(netsor.nonlin(lambda x, y: (0.5 * (1 + special.erf(x)) * np.maximum(y, 0.0)) ** 2,
                                   u, v)).expr
    F = joint_function(expr, expr.args)

    def expectation(S):
        beta, sd = S[0, 1] / S[0, 0], np.sqrt(max(S[1, 1] - S[0, 1] ** 2 / S[0, 0], 0.0))

        def inner(x):
            m = beta * x
            return (m * m + sd * sd) * stats.norm.cdf(m / sd) + m * sd * stats.norm.pdf(m / sd)

        r = np.sqrt(S[0, 0])
        return integrate.quad(lambda z: (0.5 * (1 + special.erf(r * z))) ** 2 * inner(r * z) * stats.norm.pdf(z),
                              -12, 12, points=[0.0], epsabs=1e-16, epsrel=1e-13, limit=200)[0]

    a = 0.8
    cov = np.array([[a, a], [a, a * (1 + 1e-8)]])
    D = np.full((2, 2), 1e-9 * a)
    stats_ = joint.point_moments(F, cov[None])
    bound = float(propagation.point_joint(cov[None], D[None], stats_)[0])
    base = expectation(cov)
    moves = [np.array([[s0, s1], [s1, s2]]) * D for s0 in (-1, 1) for s1 in (-1, 1) for s2 in (-1, 1)]
    changes = [abs(expectation(cov + m) - base) for m in moves if np.linalg.eigvalsh(cov + m)[0] >= 0]
    assert changes and max(changes) <= bound
    # the whitened form alone, ½ √(λmax/λmin) (‖D‖/λmin) √(E|∇H|²|U|²), is of the order of the value itself
    lmin, lmax = np.linalg.eigvalsh(cov)
    whitened = 0.5 * np.sqrt(lmax / lmin) * np.linalg.norm(D) / lmin * np.sqrt(stats_["joint_euler"][0])
    assert whitened > base and bound <= 2e-3 * base


def test_shared_arc_cosine_angles_equal_fresh_ones_and_writeable_inputs_are_not_remembered():
    """The relu and step kernels at the same read-only ``(a, b, c)`` share one angle; a writeable
    ``c`` changed in place between calls is recomputed, never served from the store."""
    from netsor.activations.kernels import arccos_kernel_0, arccos_kernel_1, remembered_angles

    rng = np.random.default_rng(2)
    Z = rng.standard_normal((20, 5))
    G = Z @ Z.T / 5
    a, b, c = np.diag(G)[:, None].copy(), np.diag(G)[None, :].copy(), G.copy()
    fresh = arccos_kernel_1(a, b, c), arccos_kernel_0(a, b, c)
    store: dict = {}
    frozen = [x.copy() for x in (a, b, c)]
    for x in frozen:
        x.flags.writeable = False
    with remembered_angles(store):
        shared = arccos_kernel_1(*frozen), arccos_kernel_0(*frozen)
        assert len(store) == 1
        assert np.array_equal(shared[0], fresh[0]) and np.array_equal(shared[1], fresh[1])
        before = arccos_kernel_0(a, b, c)
        c *= 0.5  # writeable: changed in place, must not be served stale
        after = arccos_kernel_0(a, b, c)
    assert len(store) == 1
    assert np.array_equal(before, fresh[1]) and np.array_equal(after, arccos_kernel_0(a, b, c))
    assert not np.array_equal(after, before)


def test_the_arc_cosine_angle_equals_arctan2_to_one_ulp_of_pi_and_is_exact_at_colinear_pairs():
    """``supplement(S, c)`` (π − θ as π/2 + atan(c/S)) against ``π − arctan2(S, c) = arctan2(S, −c)`` over 600
    orders of magnitude of both arguments, signed zeros included: within one ulp of π; exactly π and 0 where
    S = 0 (a point with itself and with its negative), π/2 where c = ±0, and π for an angle below one ulp of
    π/2."""
    from netsor.activations.kernels import supplement

    rng = np.random.default_rng(4)
    S = np.abs(rng.standard_normal(200_000)) * 10.0 ** rng.uniform(-300, 300, 200_000)
    c = rng.standard_normal(200_000) * 10.0 ** rng.uniform(-300, 300, 200_000)
    with np.errstate(all="raise"):  # no warning escapes (S/c overflows and divides by zero here)
        got = supplement(S, c)
        edge = supplement(np.array([0.0, 0.0, 1.0, 1.0, 5e-324]), np.array([2.0, -2.0, 0.0, -0.0, 1.0]))
    assert np.max(np.abs(got - np.arctan2(S, -c))) <= np.spacing(np.pi)
    assert list(edge) == [np.pi, 0.0, np.pi / 2, np.pi / 2, np.pi]
    assert supplement(np.zeros(1), np.zeros(1))[0] == np.pi / 2  # ab below the smallest float: uncorrelated


def test_arc_cosine_kernels_of_per_point_variances_whose_product_underflows_are_uncorrelated():
    """Per-point variances (a column and a row, as on a tile) whose product underflows to 0 at one pair with
    c = 0 there: that pair's angle is π/2 (E step·step = 1/4, E relu·relu = √(ab)/2π = 1e-200/2π — it was
    0, and the angle NaN before the scan for 0/0), and the other pairs as for any variances."""
    from netsor.activations.kernels import arccos_kernel_0, arccos_kernel_1

    a, b = np.array([[1e-200], [1.0], [3.0]]), np.array([[1e-200, 2.0, 0.5]])
    c = np.array([[0.0, 1e-100, 0.0], [-0.5e-100, 0.5, 0.6], [0.0, -1.0, 0.3]])
    k0, k1 = arccos_kernel_0(a, b, c), arccos_kernel_1(a, b, c)
    assert k0[0, 0] == 0.25 and k1[0, 0] == pytest.approx(1e-200 / (2 * np.pi), rel=1e-15)
    scale = np.sqrt(a) * np.sqrt(b)
    rho = np.where(scale > 0, c / np.where(scale > 0, scale, 1.0), 0.0)
    theta = np.arccos(np.clip(rho, -1, 1))
    np.testing.assert_allclose(k0, (np.pi - theta) / (2 * np.pi), rtol=1e-14)
    np.testing.assert_allclose(k1, scale * (np.sin(theta) + (np.pi - theta) * np.cos(theta)) / (2 * np.pi),
                               rtol=1e-13, atol=1e-300)


@pytest.mark.parametrize("name, lo, hi", [("tanh", 0.05, 20.0), ("gelu", 0.5, 3.0), ("hard_tanh", 0.2, 5.0),
                                          ("sin", 0.01, 40.0)])
def test_interpolated_hermite_coefficients_are_within_their_reported_error(name, lo, hi):
    """Coefficients interpolated in the standard deviation (Chebyshev–Lobatto nodes of log sd)
    against the same coefficients computed directly at every variance: within the reported
    ``qerr`` (which carries the interpolation's estimate), or refused (None) where the estimate
    is above the tolerance — sin at variance 40 oscillates too fast in sd for the nodes allowed."""
    from netsor.gaussian import pairs

    act = activation(name)
    var = np.sort(10 ** np.random.default_rng(3).uniform(np.log10(lo), np.log10(hi), 400))
    direct = pairs.hermite_coefficients(act, var, 31)
    tol = 1e-11
    got = pairs._interpolated_coefficients(act, var, 31, tol)
    if name == "sin":
        assert got is None
        return
    assert got is not None
    alpha, m2, qerr = got
    assert np.all(qerr <= tol * np.sqrt(m2))
    assert np.all(np.abs(alpha - direct[0]) <= qerr + direct[2])
    assert np.all(np.abs(m2 - direct[1]) <= 2 * (qerr + direct[2]) * np.sqrt(m2))


@pytest.mark.parametrize("kwargs, match", [(dict(errors="relative"), "envelope"), (dict(errors="x"), "errors must")])
def test_pair_expectation_error_forms_are_validated(kwargs, match):
    tanh = activation("tanh")
    with pytest.raises(netsor.HyperParameterError, match=match):
        g.pair_expectation(tanh, tanh, np.ones((2, 1)), np.ones((1, 2)), np.full((2, 2), 0.3), **kwargs)


@pytest.mark.parametrize("kind", ["jump", "kink"])
def test_undeclared_jumps_and_kinks_at_random_positions_are_located_and_bounded(kind):
    """A custom φ with a jump (``1{u > p}``) or a kink (``1.3 (u − p)⁺ + 0.2 tanh u``) nobody declared, at
    150 random positions p: the locator finds p, and ``E φ(u)`` meets its closed form within its bound
    (plus the reference's rounding).
    The locator compared 20- and 10-node Gauss rules, which count half their nodes for a jump near a
    panel's midpoint and all of them near an edge: it lost 80 % of such jumps and 7 % of the kinks, and
    the means were off by up to 5e12 times their bounds. It now tests the Chebyshev coefficients of an
    interpolant whose nodes include the panel's ends, where no jump can hide."""
    rng = np.random.default_rng(7)
    sd = 0.7
    for i, p0 in enumerate(rng.uniform(-3.0, 3.0, 150)):
        if kind == "jump":
            act = activation(lambda u, p0=p0: np.where(u > p0, 1.0, 0.0), name=f"jump{i}")
            want = special.ndtr(-p0 / sd)
        else:
            act = activation(lambda u, p0=p0: 1.3 * np.maximum(u - p0, 0.0) + 0.2 * np.tanh(u), name=f"kink{i}")
            want = 1.3 * (sd * stats.norm.pdf(p0 / sd) - p0 * special.ndtr(-p0 / sd))  # E tanh u = 0
        # a jump is placed to rounding; a kink to within the narrow panel where its lack of smoothness
        # falls below 1e-13 (a misplacement δ moves E φ by ~|Δφ'|·δ²)
        located = g.pairs.with_located_kinks(act, sd).kinks
        assert any(abs(k - p0) <= (1e-12 if kind == "jump" else 1e-5) for k in located), (p0, located)
        value, err = g.pairs.mean(act, np.array([sd * sd]), 1e-8)
        assert abs(value[0] - want) <= err[0] + 4 * np.finfo(float).eps * abs(want), (p0, value[0] - want, err[0])


@pytest.mark.parametrize("sd", [0.7, 3.0])
def test_narrow_undeclared_bumps_are_located_and_bounded(sd):
    """A custom φ that is 1 on a narrow interval ``(p, p + w)`` and 0 elsewhere — two jumps closer than the
    spacing of the locator's nodes are invisible to any test of the values (both sides agree) — at 100
    random positions, ``w = sd/200``: ``E φ(u)`` meets its closed form ``Φ((p + w)/sd) − Φ(p/sd)`` within its
    bound. With 64 first panels (node spacing ~sd/30) most such bumps were missed and ``E φ`` was 0 within a
    bound of 1e-300 (a random activation written with numpy, ``where(x > 0.6, 0.5, x) + max(x, 0.56)``, had
    its derivative's bump of width 0.04 missed at sd ≈ 3)."""
    rng = np.random.default_rng(11)
    width = sd / 200
    for i, p0 in enumerate(rng.uniform(-2.0 * sd, 2.0 * sd, 100)):
        act = activation(lambda u, p0=p0: np.where((u > p0) & (u < p0 + width), 1.0, 0.0), name=f"bump{i}")
        upper, lower = special.ndtr((p0 + width) / sd), special.ndtr(p0 / sd)
        want = upper - lower  # rounded to a few ulps of ``upper``
        value, err = g.pairs.mean(act, np.array([sd * sd]), 1e-8)
        assert abs(value[0] - want) <= err[0] + 4 * np.finfo(float).eps * upper, (p0, value[0], want, err[0])


@pytest.mark.filterwarnings("ignore::scipy.integrate.IntegrationWarning")  # the reference's, on a jump
@pytest.mark.parametrize("case", ["relu(clip(2g))", "relu(tanh(g) - 0.3)", "step(relu(g) - 0.5)·g"])
def test_hidden_kinks_at_round_numbers_are_found(case):
    """Kinks of compositions (relu of a non-affine expression) are located numerically. The
    locator's panels had their edges at 0, ±1/2, …, so a kink there was invisible, and the kinks
    already known (±1/2 of clip) were dropped from the result: relu(clip(2g)) was refused at
    rtol 1e-8 (bound 9.5e-5) and at rtol 1e-3 its error 5.1e-5 exceeded its bound 3.7e-5 (a random
    BatchNorm program found it); a jump at 1/2 was placed 4e-10 off, so step(relu(g) − 1/2)·g was
    4e-11 off with a bound of 2e-15. Against scipy's adaptive quadrature split at the kinks."""
    p = netsor.Program()
    n = p.dim("n")
    g = p.input(n, sigma=0.8)
    fn, kinks = {
        "relu(clip(2g))": (lambda z: np.clip(2 * z, 0.0, 1.0), [0.0, 0.5]),
        "relu(tanh(g) - 0.3)": (lambda z: np.maximum(np.tanh(z) - 0.3, 0.0), [np.arctanh(0.3)]),
        "step(relu(g) - 0.5)·g": (lambda z: (np.maximum(z, 0.0) > 0.5) * z, [0.5]),
    }[case]
    h = {
        "relu(clip(2g))": lambda: netsor.relu(netsor.relu(2 * g + 1) - netsor.relu(2 * g - 1) - 1),
        "relu(tanh(g) - 0.3)": lambda: netsor.relu(netsor.tanh(g) - 0.3),
        "step(relu(g) - 0.5)·g": lambda: netsor.step(netsor.relu(g) - 0.5) * g,
    }[case]()
    p.readout(h)
    X = np.array([[1.3, -0.4, 0.9]])
    K, E = netsor.limit(p, X).nngp(with_error=True)
    sd = np.sqrt(0.64 * X[0] @ X[0] / 3)
    edges = [-12 * sd, *kinks, 12 * sd]
    true = sum(integrate.quad(lambda z: fn(z) ** 2 * stats.norm.pdf(z, scale=sd), lo, hi,
                              epsabs=1e-16, epsrel=1e-14)[0] for lo, hi in zip(edges[:-1], edges[1:], strict=True))
    assert abs(K[0, 0] - true) <= E[0, 0] + 1e-14 * true
    assert E[0, 0] <= 1e-8 * true


# sin(u²) oscillates at frequency 2·var·z in z, faster than the uniform grids resolve (they follow sin(√var z)):
# (a, b, c) with the series (first two) and the nested 2-D rule (the rest, ρ near 1) taking the pair
@pytest.mark.parametrize("a, b, c", [(0.23022173, 5.04423609, -0.89998805), (1.0, 20.0, 3.0), (5.0, 5.0, 4.9),
                                     (5.0, 5.0, 4.99), (3.0, 3.0, 2.99)])
def test_pairs_of_a_function_oscillating_faster_than_its_argument_meet_the_tolerance_by_refined_panels(a, b, c):
    """E[sin(u²) sin(v²)] against its characteristic-function closed form
    (``references.sin_of_square_kernel``): the Hermite tables' and the nested rule's panels are
    bisected where their estimates ask, so rtol 1e-8 is met, the bound covering the true error (the
    fixed grids gave bounds of 0.008–0.013 at every rtol, and 2e-3 with a true error of 9e-5 at
    (5, 5, 4.99))."""
    sin2 = activation(lambda x: np.sin(x * x), name="sin_of_square", smooth=True)
    K = np.array([[a, c], [c, b]])
    want = references.sin_of_square_kernel(K)
    for rtol in (1e-4, 1e-8):
        value, err = g.pair_expectation(sin2, sin2, np.array([a]), np.array([b]), np.array([c]), rtol=rtol)
        assert abs(value[0] - want[0, 1]) <= err[0]
        assert err[0] <= rtol * np.sqrt(want[0, 0] * want[1, 1])
    for v in (a, b):  # a point with itself: E φ², not a truncated series
        value, err = g.pair_expectation(sin2, sin2, np.array([v]), np.array([v]), np.array([v]), rtol=1e-4)
        same = references.sin_of_square_kernel(np.full((1, 1), v))[0, 0]
        assert abs(value[0] - same) <= err[0] <= 1e-10 * same  # the series would stop near rtol


def test_an_opaque_function_not_smooth_to_rounding_anywhere_is_refused_with_the_fix():
    """sin(x²) without a promise of smoothness at standard deviation 4.5: at |x| ~ 45 the rounding of
    x² alone fails the kink locator's smoothness test on every panel, which bisected them all until
    memory ran out (an 8.6e6 × 33 array); now a NumericalError says what to declare."""
    opaque = activation(lambda x: np.sin(x * x), name="sin_of_square")
    with pytest.raises(netsor.NumericalError, match="smooth=True"):
        g.pair_expectation(opaque, opaque, np.array([1.0]), np.array([20.0]), np.array([3.0]))


def test_the_sine_kernel_keeps_its_relative_accuracy_at_small_variances():
    """E[sin u sin v] = e^{−(a+b)/2} sinh c (Gaussian characteristic function), evaluated in 50-digit
    arithmetic: at variances 1e-12 the difference ½(e^{c−h} − e^{−c−h}) had lost all its digits (relative
    error 3.5e-5 at σ = 1e-6, bound 1e6 times smaller)."""
    for var in (1e-2, 1e-8, 1e-12, 1e-16):
        a, b, c = var, 2.0 * var, 0.6 * var
        with mpmath.workdps(50):
            want = float(mpmath.exp(-(mpmath.mpf(a) + mpmath.mpf(b)) / 2) * mpmath.sinh(mpmath.mpf(c)))
        got = float(netsor.sin.kernel(np.array(a), np.array(b), np.array(c)))
        assert abs(got - want) <= 4 * np.finfo(float).eps * abs(want)
    big = netsor.sin.kernel(np.array(400.0), np.array(400.0), np.array(390.0))  # no inf·0 at large variances
    assert np.isfinite(big) and abs(big - 0.5 * np.exp(-10.0)) <= 1e-15


@pytest.mark.parametrize("var, rho", [(4.0, 0.99), (9.0, 0.9), (16.0, 0.5), (25.0, 0.7)])
def test_functions_growing_exponentially_keep_the_mass_beyond_the_box(var, rho):
    """cosh(u) at variance 16 has E cosh² from z = 8 ± 1 in standard units (e^{2σz} against e^{−z²/2}),
    close to the rules' box |z| ≤ 10: the kernel was 2.3e-2 off with a bound of 3e-14. Variances whose
    E φ² has mass at the box ends are integrated out to |z| = 40. Closed forms: E[cosh u cosh v] =
    e^{(a+b)/2} cosh c, E cosh⁴ u = (3 + 4e^{2a} + e^{8a})/8."""
    cosh = activation(np.cosh, name="cosh_opaque", smooth=True)
    a, b = var, 1.2 * var
    c = rho * np.sqrt(a * b)
    for x, y, z in ((a, a, a), (a, b, c)):
        value, err = g.pair_expectation(cosh, cosh, np.array([x]), np.array([y]), np.array([z]), rtol=1e-8)
        want = np.exp((x + y) / 2) * np.cosh(z)
        assert abs(value[0] - want) <= err[0] <= 1e-8 * np.sqrt(np.exp(x) * np.cosh(x) * np.exp(y) * np.cosh(y))
    m = g.moments_1d(cosh, np.array([a]))
    np.testing.assert_allclose(m["m4"], (3 + 4 * np.exp(2 * a) + np.exp(8 * a)) / 8, rtol=1e-12)


def test_a_cusp_in_the_coefficients_is_in_their_error_estimate():
    """√|u| of two independent inputs: E[√|u| √|v|] = (E√|z|)² = (2^{1/4} Γ(3/4)/√π)². E φ² = E|z| is exact on
    both rules of the tables, so the coefficients' error was estimated from it alone and the cusp went
    unseen: 3.1e-8 off under a bound of 8e-10. Each coefficient is now compared between the rules."""
    p = netsor.Program()
    n = p.dim("n")
    p.readout(netsor.nonlin(lambda u: np.sqrt(np.abs(u)), p.input(n)))
    want = (2**0.25 * special.gamma(0.75) / np.sqrt(np.pi)) ** 2
    for rtol in (1e-8, 1e-6):
        try:
            K, E = netsor.limit(p, np.sqrt(2.0) * np.eye(2), rtol=rtol).nngp(with_error=True)
        except netsor.NumericalError:
            assert rtol < 1e-6  # a refusal is honest; a bound below the error is not
            continue
        assert abs(K[0, 1] - want) <= E[0, 1] <= rtol * np.sqrt(K[0, 0] * K[1, 1])


def test_cone_moments_of_dependent_forms_are_exact():
    """Forms ``x1, x2`` iid N(0, 1) and ``x0 = x1 + x2``: on ``{x1 > 0, x2 > 0}`` the step of x0 is 1, so
    every moment is a product of half-normal moments. Conditioning on two of the forms (the δs of Stein's
    lemma) determines the third; its step then counts 1/2 (step(0) = 0 there lost a quarter of
    ``E[x0 x2 1{·}]``), and two forms equal given the δs are one step (asin at a correlation of 1 − ε was
    off by √ε ≈ 1e-8)."""
    from netsor.gaussian.orthant import _Moments

    rows = np.array([[1.0, 1.0], [1.0, 0.0], [0.0, 1.0]])
    cov = (rows @ rows.T)[None]
    half_mean, pi2 = 1 / np.sqrt(2 * np.pi), 2 * np.pi
    exact = {((), (0, 1, 2)): 0.25, ((2,), (0, 1, 2)): 0.5 * half_mean, ((0,), (0, 1, 2)): half_mean,
             ((0, 2), (0, 1, 2)): 0.25 + 1 / pi2, ((0, 0), (0, 1, 2)): 0.5 + 2 / pi2, ((2, 2), (0, 1, 2)): 0.25,
             ((0, 1, 2), (0, 1, 2)): 2 * half_mean * 0.5, ((1, 2), (1, 2)): 1 / pi2}
    for (poly, steps), value in exact.items():
        got = _Moments(cov, rows).moment(frozenset(), poly, frozenset(steps))[0][0]
        assert abs(got - value) <= 4 * np.finfo(float).eps, (poly, steps, got, value)


def _sech2(x):
    return 1.0 / np.cosh(x) ** 2


_TANH = (np.tanh, _sech2, lambda x: -2.0 * np.tanh(x) * _sech2(x))
_CUSP = (lambda x: np.sqrt(np.abs(x)), lambda x: np.sign(x) / (2.0 * np.sqrt(np.abs(x))), None)
_CLIP = (lambda x: np.clip(x, -1.0, 1.0), lambda x: (np.abs(x) < 1.0).astype(float), None)


@pytest.mark.parametrize("case", ["tanh·factor both sides", "cusp·factor | tanh", "tanh | cusp·factor",
                                  "clip·factor | tanh"])
def test_a_factor_times_a_function_of_a_form_conditioned_on_the_forms_matches_steins_lemma(case):
    """``E[g f(L) · g' h(L')]`` (``L = u₁/2 + u₂`` over the factor ``g = u₁`` and another argument) by
    conditioning on ``(L, L')`` (one-dimensional pair rules) against Stein's lemma on the factors (expectations of
    derivatives of f and h by nested quadrature, ``references.factor_times_function_by_stein``), on random
    covariances; the bound covers the difference and meets 1e-7 of the envelope. A cusp √|L| times a factor was
    a four-dimensional term whose bound stopped at 2e-3 (growth campaign seed 311)."""
    from netsor.gaussian.conditioned import FactorTimesForm, pair_expectation

    tanh, cusp = activation("tanh"), activation(lambda x: np.sqrt(np.abs(x)))
    clip = activation(lambda x: np.clip(x, -1.0, 1.0))
    sides = {"tanh·factor both sides": ((True, tanh, _TANH), (True, tanh, _TANH)),
             "cusp·factor | tanh": ((True, cusp, _CUSP), (False, tanh, _TANH)),
             "tanh | cusp·factor": ((False, tanh, _TANH), (True, cusp, _CUSP)),
             "clip·factor | tanh": ((True, clip, _CLIP), (False, tanh, _TANH))}[case]
    form = np.array([0.5, 1.0])
    (lf, lact, lfun), (rf, ract, rfun) = sides
    left, right = (FactorTimesForm(0 if has else None, form, act) for has, act, _ in sides)
    rng = np.random.default_rng(7)
    T = np.array([[1.0, 0.0, 0.0, 0.0], [0.5, 1.0, 0.0, 0.0], [0.0, 0.0, 1.0, 0.0], [0.0, 0.0, 0.5, 1.0]])
    for _ in range(4):
        A = rng.standard_normal((4, 4))
        joint_cov = A @ A.T / 4 + 0.2 * np.eye(4)  # of (u₁, u₂, v₁, v₂)
        value, err, done = pair_expectation(left, right, joint_cov[None, :2, :2], joint_cov[None, 2:, 2:],
                                            joint_cov[None, :2, 2:], rtol=1e-10)
        assert done[0]
        S = T @ joint_cov @ T.T  # of (g, L, g', L')
        # tanh only: no breaks; the cusp's derivative: split at 0; clip's: at ±1
        breaks = () if lact is ract else (-1.0, 1.0) if clip in (lact, ract) else (0.0,)
        if lf:
            want = references.factor_times_function_by_stein(S, (True, *lfun), (rf, *rfun), breaks)
        else:  # Stein on the right factor: the sides swapped
            P = np.array([2, 3, 0, 1])
            want = references.factor_times_function_by_stein(S[np.ix_(P, P)], (True, *rfun), (False, *lfun), breaks)
        envelope = np.sqrt(S[0, 0] * S[2, 2] * (S[1, 1] + 1) * (S[3, 3] + 1))
        assert abs(value[0] - want) <= err[0] + 1e-11 * envelope, (value[0], want, err[0])
        assert err[0] <= 1e-7 * envelope


def test_a_factor_times_a_function_of_a_form_at_one_point_by_conditioning_matches_the_joint_rules():
    """At one point (``U`` over ``(u₁, u₂)``, ``w = u₁/2 + u₂``): ``E[u₁² tanh(w)²]``, ``E[u₁ tanh(w) · gelu(w)]`` and
    ``E[u₁ tanh(w)]`` conditioned on ``w`` (one-dimensional means) against the joint engine's two-dimensional
    nested rules; the moments that scale error bounds are upper bounds of the joint engine's (never below them:
    a scale below a true moment would shrink a propagated bound), ``E F²`` equal to the rules' accuracy."""
    from netsor.gaussian.conditioned import FactorTimesForm, point_mean, point_moments, point_pair
    from netsor.interpret.functions import joint_function
    from netsor.ir import Program
    from netsor.ir.expr import Apply, Var, linear, product

    p = Program()
    n = p.dim("n")
    u1, u2 = p.input(n), p.input(n)
    tanh, erf = activation("tanh"), activation("gelu")  # tanh·gelu is not even: the mean is not 0
    w = linear(0.0, [(0.5, Var(u1)), (1.0, Var(u2))])
    F = FactorTimesForm(0, np.array([0.5, 1.0]), tanh)
    G = FactorTimesForm(None, np.array([0.5, 1.0]), erf)
    rng = np.random.default_rng(11)
    A = rng.standard_normal((5, 2, 2))
    cov = A @ np.swapaxes(A, 1, 2) + 0.3 * np.eye(2)
    f_expr = product([Var(u1), Apply(tanh, w)])
    cases = [(F, F, product([f_expr, f_expr])), (F, G, product([f_expr, Apply(erf, w)]))]
    for left, right, expr in cases:
        value, err, done = point_pair(left, right, cov, rtol=1e-12)
        want, want_err, _ = joint.point_expectation(joint_function(expr, (u1, u2)), cov)
        assert done.all() and np.all(np.abs(value - want) <= err + want_err + 1e-12 * np.abs(want))
        assert np.all(err <= 1e-10 * np.abs(want))
    value, err = point_mean(F, cov, rtol=1e-12)
    want, want_err, _ = joint.point_expectation(joint_function(f_expr, (u1, u2)), cov)
    assert np.all(np.abs(value - want) <= err + want_err + 1e-12 * np.abs(want))
    bounds_ = point_moments(F, cov)
    exact = joint.point_moments(joint_function(f_expr, (u1, u2)), cov)
    for key in ("m2", "m4", "arg_grad2", "gradnorm2", "joint_euler"):
        assert np.all(bounds_[key] >= exact[key] * (1 - 1e-5)), key  # the joint rule's own margin is 1e-6
    # E F² itself (no inequality in its form; both are scales: 64-node and nested rules, 1e-4 apart at var ~ 10)
    assert np.allclose(bounds_["m2"], exact["m2"], rtol=1e-3)


def test_steps_implied_by_two_others_are_dropped_and_the_function_is_unchanged():
    """``1{x > 0}`` is implied by ``1{y > 0}·1{0.8x − y > 0}``: a step whose normal is a nonnegative
    combination of two others of its term is dropped (the orthant loses a dimension), values unchanged off the
    kinks; a step that is not implied (an empty wedge, ``x > 0, y > 0, x + y < 0``) stays."""
    from netsor.gaussian.orthant import ConeFunction

    u = np.random.default_rng(4).standard_normal((2000, 2))
    implied = ConeFunction(np.array([[1.0, 0.0], [0.0, 1.0], [0.8, -1.0]]), ((1.0, (0, 2), (0, 1, 2)),))
    empty = ConeFunction(np.array([[1.0, 0.0], [0.0, 1.0], [-1.0, -1.0]]), ((1.0, (), (0, 1, 2)),))
    reduced = implied.without_redundant_steps()
    assert implied.orthant_dim == 3 and reduced.orthant_dim == 2
    assert np.array_equal(reduced(u), implied(u))
    assert empty.without_redundant_steps().orthant_dim == 3 and not np.any(empty(u))


def test_whitening_keeps_a_computed_ratio_and_rounds_a_written_one():
    """Arguments ``u₂ = λ u₁`` get exactly ``λ`` times ``u₁``'s rows: the literal a program wrote
    (``2(1 + 2⁻⁵²)`` computed is 2.0) but a ratio of limit scalars as computed (rounded to 12 digits,
    1/s of a LayerNorm moved a kernel by 3e-11 of itself)."""
    for ratio, expected in ((2.0 * (1 + 2.0**-52), 2.0), (1.1312946199556078, 1.1312946199556078)):
        cov = np.array([[[1.0, ratio], [ratio, ratio * ratio]]])
        L, r = g.joint.whiten(cov)
        assert r == 1
        assert L[0, 1, 0] / L[0, 0, 0] == expected


_PIECEWISE = {
    "hard_tanh": (netsor.activations.hard_tanh, lambda x: np.clip(x, -1.0, 1.0), (-1.0, 1.0)),
    "clip(x, −0.5, 2)": (netsor.activation(lambda x: np.clip(x, -0.5, 2.0), kinks=(-0.5, 2.0), smooth=False),
                         lambda x: np.minimum(np.maximum(x, -0.5), 2.0), (-0.5, 2.0)),
    "step(x − 0.3)": (netsor.activation(lambda x: (x > 0.3).astype(float), kinks=(0.3,), smooth=False),
                      lambda x: (x > 0.3) * 1.0, (0.3,)),
    "relu(x − 1)": (netsor.activation(lambda x: np.maximum(x - 1.0, 0.0), kinks=(1.0,), smooth=False),
                    lambda x: np.maximum(x - 1.0, 0.0), (1.0,)),
    "elu": (netsor.activation("elu", alpha=1.0), lambda x: np.where(x > 0, x, np.expm1(np.minimum(x, 0.0))), (0.0,)),
    "elu(α = 0.4)": (netsor.activation("elu", alpha=0.4),
                     lambda x: np.where(x > 0, x, 0.4 * np.expm1(np.minimum(x, 0.0))), (0.0,)),
    "elu′": (netsor.ir.differentiate.derived_activation(netsor.activation("elu", alpha=0.4)),
             lambda x: np.where(x > 0, 1.0, 0.4 * np.exp(np.minimum(x, 0.0))), (0.0,)),
    "|x + 0.5| + 2·1{x > 1} − 0.3x": (
        netsor.activation(lambda x: np.abs(x + 0.5) + 2.0 * (x > 1.0) - 0.3 * x, kinks=(-0.5, 1.0), smooth=False),
        lambda x: abs(x + 0.5) + 2.0 * (x > 1.0) - 0.3 * x, (-0.5, 1.0)),
}


@pytest.mark.parametrize("pair", [("hard_tanh", "hard_tanh"), ("clip(x, −0.5, 2)", "step(x − 0.3)"),
                                  ("relu(x − 1)", "|x + 0.5| + 2·1{x > 1} − 0.3x"),
                                  ("step(x − 0.3)", "step(x − 0.3)"), ("elu", "elu"), ("elu(α = 0.4)", "hard_tanh"),
                                  pytest.param(("step(x − 0.3)", "elu"), marks=pytest.mark.slow),  # 6–9 s each
                                  pytest.param(("elu′", "elu′"), marks=pytest.mark.slow)])
def test_piecewise_linear_pairs_have_closed_forms_within_their_bounds(pair):
    """Kinks and jumps off the origin: Tallis' truncated moments with Owen's T, against nested adaptive
    quadrature, from far apart to nearly colinear (1 − ρ² = 1e-6) and a variance small against the kinks;
    bounds at rounding level (the Mehler series could not reach these: their coefficients decay
    algebraically, and the nested quadrature that took them cost 10⁵ nodes a pair). elu's exponential piece
    tilts the law (Cameron–Martin) into the same moments."""
    (phi, f, kf), (psi, h, kh) = _PIECEWISE[pair[0]], _PIECEWISE[pair[1]]
    F, G = g.piecewise.of(phi), g.piecewise.of(psi)
    assert F is not None and G is not None
    for a, b, rho in ((1.0, 2.0, 0.3), (0.3, 4.0, -0.8), (2.0, 2.0, 1 - 5e-7), (5.0, 0.5, 0.0), (1e-2, 2.0, 0.6)):
        c = rho * np.sqrt(a * b)
        value, err, done = g.piecewise.pair_expectation(F, G, np.array(a), np.array(b), np.array(c))
        assert done
        ref = references.piecewise_pair(f, h, a, b, c, kf, kh)
        assert abs(float(value) - ref) <= float(err) + 2e-14, (a, b, rho, float(value), ref, float(err))
        # the bound is the special functions' own accuracy (1e-13 of the parts' magnitudes) and that of ρ,
        # amplified as the orthant's slope φ₂ ~ 1/√(1 − ρ²) near colinear: 1e-11 of the values at most
        assert float(err) <= 1e-11 + 1e-14 / np.sqrt(1 - rho * rho)


@pytest.mark.parametrize("off", [4e-12, pytest.param(-3e-10, marks=pytest.mark.slow)])  # ~13 s each
def test_a_kink_placed_a_little_off_keeps_the_lines_on_either_side(off):
    """``0.09·|x − 0.03|`` with its kink given 4e-12 off (as the locator placed it, at some ranges, before it
    refined kinks): the lines fitted on either side meet with a gap of ramp·δ, taken as none, and the ramp began at
    the given kink — the whole line beyond it moved by ramp·δ: pairs 35–52× their bound (found by random numpy
    activations opaque against traced). The ramp now begins where the lines meet. Against nested adaptive
    quadrature of the true function."""
    f = lambda x: 0.09 * np.abs(x - 0.03)  # noqa: E731
    phi = netsor.activation(lambda x: f(np.asarray(x, dtype=float)), kinks=(0.03 + off,), name="abs_off")
    F = g.piecewise.of(phi)
    for sd in (0.45, 1.3):
        for ra, rb, rho in ((1.0, 0.95, 0.87), (1.0, 0.5, -0.4), (0.8, 1.0, 0.3)):
            a, b = (ra * sd) ** 2, (rb * sd) ** 2
            c = rho * np.sqrt(a * b)
            value, err, done = g.piecewise.pair_expectation(F, F, np.array(a), np.array(b), np.array(c))
            ref = references.piecewise_pair(f, f, a, b, c, (0.03,), (0.03,))
            assert done and abs(float(value) - ref) <= float(err), (sd, rho, float(value) - ref, float(err))


@pytest.mark.parametrize("sd", [0.042, 0.3, 0.57, 2.0])
def test_kinks_nobody_declared_are_placed_to_rounding(sd):
    """The locator places a kink in the narrow panel where it stops showing, ~1e-6 of the range wide: an opaque
    ``max(x, −0.01)·x`` (slope jump 0.01) was placed 6e-7 off, and ``E φ²`` at variance 0.0018 came out 7e-13 of
    itself off within a bound of 2e-14 (the two panels' rules err alike; random numpy activations, opaque against
    traced). Kinks are now moved to where the parabolas through φ on either side meet: to rounding here, and ``E φ²``
    equals its closed form within the bound."""
    phi = netsor.activation(lambda x: np.maximum(np.asarray(x, dtype=float), -0.01) * np.asarray(x, dtype=float))
    located = g.pairs.with_located_kinks(phi, sd)
    assert len(located.kinks) == 1 and abs(located.kinks[0] + 0.01) <= 1e-15
    var = np.array([0.0018, 0.02, sd * sd])
    m2, err = g.pairs.second_moment(phi, var)
    with mpmath.workdps(40):
        for v, got, e in zip(var, m2, err, strict=True):
            s, k = mpmath.sqrt(mpmath.mpf(v)), mpmath.mpf("-0.01")
            # E[x⁴ 1{x > k}] + k² E[x² 1{x < k}] for x ~ N(0, v)
            above = mpmath.quad(lambda x, s=s: x**4 * mpmath.npdf(x, 0, s), [k, 0, mpmath.inf])
            below = mpmath.quad(lambda x, s=s: x**2 * mpmath.npdf(x, 0, s), [-mpmath.inf, k])
            assert abs(got - float(above + k * k * below)) <= e, (v, got - float(above + k * k * below), e)


def test_piecewise_linear_pairs_of_rounded_nearly_colinear_covariances_are_within_their_bounds():
    """(a, b, c) as a program computes them from inputs 1e-9 … 1e-5 from parallel or anti-parallel: ρ and
    √(ab − c²)/√(ab) were rounded apart (each ~ε/s), and the moments cancel parts of size s down to O(s³)
    (E[XY 1{X > 0, Y > 0}] = ρP + s/2π): relu(g) + relu(−g) was 1e-10 off under a 1.7e-12 bound (random-chain
    campaign). Against the arc-cosine kernels in 50 digits at the same float (a, b, c)."""
    relu = netsor.activations.relu
    p = netsor.Program()
    x = p.input(p.dim("n"), sigma=1.0)
    h = relu(x) + relu(-1.0 * x) + 0.5 * relu(-2.0 * x)  # slopes 1 above 0, −2 below: β = −2, γ = 3
    p.readout(h, sigma=1.0)
    an = netsor.interpret.infinite.analysis_of(p)
    F = g.piecewise.of(an.projection(an.polys[h].terms[0][1]).act)
    rng = np.random.default_rng(7)
    for sign in (1.0, -1.0):
        for gap in (1e-9, 1e-7, 1e-5):
            u = rng.standard_normal(6)
            v = sign * u + gap * rng.standard_normal(6)
            a, b, c = u @ u / 6, v @ v / 6, u @ v / 6
            value, err, done = g.piecewise.pair_expectation(F, F, np.array(a), np.array(b), np.array(c))
            if not done:  # within MIN_SINE of colinear: left to the other rules
                continue
            with mpmath.workdps(50):
                A, B, C = mpmath.mpf(a), mpmath.mpf(b), mpmath.mpf(c)
                root = mpmath.sqrt(A * B)
                theta = mpmath.acos(C / root)
                k1 = root * (mpmath.sin(theta) + (mpmath.pi - theta) * mpmath.cos(theta)) / (2 * mpmath.pi)
                ref = float((4 - 6) * C + 9 * k1)  # (β² + βγ) c + γ² K₁
            assert abs(float(value) - ref) <= float(err), (sign, gap, float(value) - ref, float(err))


def test_piecewise_pairs_at_random_rounded_near_colinear_covariances_are_within_their_bounds():
    """Random pairs of the piecewise functions above (kinks and jumps off the origin; relu; relu(x) + 2 relu(−x)) at
    (a, b, c) computed in floats from inputs 1e-7 … 1e-4 from parallel or anti-parallel, against the pieces'
    expectation in 30 digits (the conditional expectation in closed form, one exact ρ). Before ρ and
    √(1 − ρ²) were of one ρ, nearly every pair of relu(x) + 2 relu(−x) with itself was outside its bound (by up to
    260×)."""
    functions = dict(_PIECEWISE)
    functions["relu"] = (netsor.activations.relu, None, (0.0,))
    functions["relu(x) + 2 relu(−x)"] = (netsor.activation(lambda x: np.maximum(x, 0.0) + 2 * np.maximum(-x, 0.0),
                                                           kinks=(0.0,), smooth=False), None, (0.0,))
    names = [k for k in functions if "elu" not in k]  # (exponential pieces: the reference has none)
    rng = np.random.default_rng(11)
    compared = 0
    for trial in range(12):
        # every other pair: one kink at 0 on both sides, whose γ² K₁ parts cancel down to O(s³) near ρ = −1 or 1
        first, second = ("relu(x) + 2 relu(−x)",) * 2 if trial % 2 == 0 else rng.choice(names, 2)
        (phi, _, kf), (psi, _, kg) = functions[first], functions[second]
        F, G = g.piecewise.of(phi), g.piecewise.of(psi)
        sign, gap, scale = rng.choice([1.0, -1.0]), 10.0 ** rng.uniform(-7, -4), 10.0 ** rng.uniform(-1, 1)
        u = scale * rng.standard_normal(5)
        v = sign * rng.uniform(0.5, 2.0) * u + gap * scale * rng.standard_normal(5)
        a, b, c = u @ u / 5, v @ v / 5, u @ v / 5
        value, err, done = g.piecewise.pair_expectation(F, G, np.array(a), np.array(b), np.array(c))
        if done:
            compared += 1
            ref = references.piecewise_pair_by_mpmath(F, G, a, b, c, kf, kg)
            assert abs(float(value) - ref) <= float(err), (first, second, sign, gap, float(value) - ref, float(err))
    assert compared >= 8


@pytest.mark.parametrize("pair", [pytest.param(("hard_tanh", "hard_tanh"), marks=pytest.mark.slow),  # 6–7 s
                                  ("clip(x, −0.5, 2)", "step(x − 0.3)"),
                                  ("relu(x − 1)", "|x + 0.5| + 2·1{x > 1} − 0.3x"),
                                  pytest.param(("elu(α = 0.4)", "hard_tanh"), marks=pytest.mark.slow)])
def test_piecewise_linear_pairs_with_means_have_closed_forms_within_their_bounds(pair):
    """``E[φ(u + μ) ψ(v + ν)]`` (the conditional pairs of separable functions): means shift the thresholds
    and, with elu's exponential piece, the tilt; against nested adaptive quadrature of the shifted
    functions, several means at once (vectorised), to nearly colinear."""
    (phi, f, kf), (psi, h, kh) = _PIECEWISE[pair[0]], _PIECEWISE[pair[1]]
    F, G = g.piecewise.of(phi), g.piecewise.of(psi)
    means = np.array([[0.7, -1.3], [-2.5, 0.4], [3.0, 2.0]])
    for a, b, rho in ((1.0, 2.0, 0.3), (0.3, 4.0, -0.8), (2.0, 0.5, 1 - 5e-7)):
        c = rho * np.sqrt(a * b)
        value, err, done = g.piecewise.pair_expectation(F, G, a, b, c, means=(means[:, 0], means[:, 1]))
        assert np.all(done) and value.shape == (3,)
        for (mu, nu), v, e in zip(means, value, err, strict=True):
            ref = references.piecewise_pair(lambda x, mu=mu: f(x + mu), lambda y, nu=nu: h(y + nu), a, b, c,
                                            [k - mu for k in kf], [k - nu for k in kh])
            assert abs(v - ref) <= e + 2e-14, (a, b, rho, mu, nu, v, ref, e)
            # as above, for functions whose magnitudes grow with the means
            assert e <= (1e-11 + 1e-14 / np.sqrt(1 - rho * rho)) * (1 + abs(mu)) * (1 + abs(nu))


@pytest.mark.parametrize("residual", [0.0, 1e-9, 3e-5, 3e-3, 0.3])
def test_smooth_inner_pairs_with_means_match_the_closed_form_of_sines(residual):
    """``E[sin(X + μ) sin(Y + ν)] = ½(cos(μ − ν) e^{−Var(X − Y)/2} − cos(μ + ν) e^{−Var(X + Y)/2})``: the smooth rule
    of the conditional pairs (Gauss–Hermite ladders; fewer nodes on the residual axis where the law has rank one
    to within ``residual``) against the closed form, from colinear to well separated, large means included."""
    a, slope = 1.7, -0.8
    c = slope * a
    b = c * c / a * (1.0 + residual**2)
    pair = g.separable.InnerPair(netsor.activations.sin, netsor.activations.sin, a, b, c)
    mu, nu = np.array([0.0, 0.9, -2.5, 4.0]), np.array([0.3, -1.1, 2.0, -3.5])
    value, err, done = pair.expect(mu, nu, target=1e-13)
    exact = 0.5 * (np.cos(mu - nu) * np.exp(-(a + b - 2 * c) / 2) - np.cos(mu + nu) * np.exp(-(a + b + 2 * c) / 2))
    assert np.all(done)
    np.testing.assert_allclose(value, exact, rtol=0, atol=1e-13)
    assert np.all(np.abs(value - exact) <= err + 1e-15)


def test_functions_that_are_not_piecewise_linear_get_no_closed_form():
    """A curved piece between declared kinks (x² above 0), a smooth function and a kink nobody declared are not
    taken as piecewise linear."""
    curved = netsor.activation(lambda x: np.where(x > 0, x * x, 0.0), kinks=(0.0,), smooth=False)
    undeclared = netsor.activation(lambda x: np.maximum(x, 0.0) + np.maximum(x - 2.0, 0.0), kinks=(0.0,),
                                   smooth=False)
    assert g.piecewise.of(curved) is None and g.piecewise.of(netsor.activations.tanh) is None
    assert g.piecewise.of(undeclared) is None


def test_a_hard_tanh_mlp_equals_its_recursion_by_nested_quadrature():
    """Depth 2, σ_w 1.5, σ_b 0.1 on 3 inputs: each layer's kernel pair by pair from nested quadrature
    (:func:`references.piecewise_pair`; the engine takes the closed forms of :mod:`netsor.gaussian.piecewise`)."""
    X = np.random.default_rng(4).standard_normal((3, 5))
    K, E = netsor.limit(netsor.zoo.mlp(2, "hard_tanh", 1.5, 0.1), X, rtol=1e-10).nngp(with_error=True)
    ht = lambda x: np.minimum(np.maximum(x, -1.0), 1.0)  # noqa: E731
    G = 2.25 * X @ X.T / 5 + 0.01
    for _ in range(2):
        H = np.array([[references.quad_expect(lambda x: np.clip(x, -1, 1) ** 2, G[i, i], (-1.0, 1.0)) if i == j
                       else references.piecewise_pair(ht, ht, G[i, i], G[j, j], G[i, j], (-1, 1), (-1, 1))
                       for j in range(3)] for i in range(3)])
        G = 2.25 * H + 0.01
    ref = G  # the readout: Dense(1) with the same σ_w, σ_b
    assert np.all(np.abs(K - ref) <= E + 2e-14)


@pytest.mark.slow  # ~10 s
def test_the_nested_pair_rule_holds_a_bounded_working_set():
    """512 nearly colinear elu pairs at once (the nested 2-D rule's chunk): the inner rule is taken in slices
    of outer nodes, so the working set stays near 100 MiB (it held every inner value of the chunk: 12 GiB
    here, and an elu MLP on 1000 inputs peaked at 4.7 GB under a 2 GiB memory budget)."""
    import tracemalloc

    elu = netsor.activation("elu", alpha=1.0)
    a = np.linspace(0.5, 3.0, 512)
    b = a[::-1].copy()
    c = 0.999 * np.sqrt(a * b)
    tracemalloc.start()
    try:
        value, err = g.pairs._nested_pair(elu, elu, a, b, c)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 256 * 2**20
    assert np.all(np.isfinite(value)) and np.all(err < 1e-12)


@pytest.mark.parametrize("name", ["tanh", "sigmoid", "erf", "gelu", "silu", "softplus"])
def test_the_moments_of_error_propagation_are_accurate_at_every_scale(name):
    """``moments_1d`` feeds every per-point error bound (E φ', E φ'², E φ'²u², E φφ'u). A 64-node Gauss–Hermite
    rule served up to sd 4, where tanh' has poles π/(2·sd) from the real line: E tanh'² came out 5 % low and
    E tanh'²u² 18 % high at a = 8.3, 24 % off at sd 4; it now serves up to sd 1.5 (9e-4 at worst). Reference:
    the trapezoid rule on a fine grid."""
    from netsor.activations.registry import activation
    from netsor.gaussian.pairs import MOMENT_RTOL, moments_1d

    act = activation(name)
    z = 0.002 * np.arange(-6000, 6001)
    w = np.exp(-z * z / 2)
    w /= w.sum()
    for s in (0.25, 0.5, 1.0, 1.5, 2.0, 2.9, 4.0, 6.0):  # one at a time: the rule is chosen for the largest
        got = moments_1d(act, np.array([s * s]))
        x = s * z
        d = act.deriv(x)
        want = {"grad1": np.sum(w * d), "grad2": np.sum(w * d * d), "euler": np.sum(w * d * d * x * x),
                "cross": np.sum(w * act.fn(x) * d * x), "m2": np.sum(w * act.fn(x) ** 2), "grad1u": np.sum(w * d * x)}
        for key, value in want.items():
            assert abs(got[key][0] - value) <= MOMENT_RTOL * abs(value) + 1e-15, (name, s, key, got[key][0], value)


@pytest.mark.parametrize("phi, psi", [("tanh", "tanh"), ("gelu", "gelu"), ("softplus", "silu"), ("gelu", "tanh"),
                                      ("sigmoid", "elu")])
def test_the_hermite_bound_of_a_pair_slope_covers_the_change_of_the_kernel(phi, psi):
    """``|K(c ± δ) − K(c)| ≤ hermite_modulus`` (its Mehler–Cauchy–Schwarz bound of ``E φ'ψ'`` over the interval)
    for continuous pairs, odd and even slopes, at variances 0.3–9 and correlations −0.9–0.9; K by the trapezoid
    rule in whitened coordinates (independent of the engine). At small correlations the bound is below the
    per-point slope ``√(E φ'² E ψ'²)`` — what makes deep chaotic networks computable."""
    from netsor.activations.registry import activation
    from netsor.gaussian.pairs import moments_1d
    from netsor.interpret.propagation import hermite_modulus

    f, g = activation(phi), activation(psi)
    z = 0.01 * np.arange(-1200, 1201)
    w = np.exp(-z * z / 2)
    w /= w.sum()

    def kernel(a, b, c):
        rho = c / np.sqrt(a * b)
        v = np.sqrt(b) * (rho * z[:, None] + np.sqrt(1 - rho * rho) * z[None, :])
        return float(np.sum(w[:, None] * w[None, :] * f.fn(np.sqrt(a) * z)[:, None] * g.fn(v)))

    rng = np.random.default_rng(7)
    useful = []
    for _ in range(12):
        a, b = rng.uniform(0.3, 9.0, 2)
        c = rng.uniform(-0.9, 0.9) * np.sqrt(a * b)
        delta = 0.05 * np.sqrt(a * b)
        left, right = moments_1d(f, np.array([[a]])), moments_1d(g, np.array([[b]]))
        bound = float(hermite_modulus(np.array([[a]]), np.array([[b]]), np.array([[c]]), np.array([[delta]]), left,
                                      right)[0, 0])
        k0 = kernel(a, b, c)
        change = max(abs(kernel(a, b, c + s * delta) - k0) for s in (-1, 1))
        assert change <= bound * (1 + 1e-9) + 1e-12, (a, b, c, change, bound)
        if abs(c) < 0.3 * np.sqrt(a * b):
            useful.append(bound / (delta * float(np.sqrt(left["grad2"] * right["grad2"])[0, 0])))
    assert useful and max(useful) < 1.0


@pytest.mark.parametrize("name", ["gelu", "silu", "softplus"])
def test_relu_like_pairs_at_huge_variances_are_cheap_and_tend_to_the_arc_cosine_kernel(name):
    """δ = φ − relu is bounded (m ≤ log 2) and integrable (∫|δ| ≤ π²/6) for these φ, so ``E δ(u)² ≤ m ∫|δ| /
    √(2πa)`` and, by Cauchy–Schwarz on the three cross terms, ``|E φφ − E relu relu| ≤ 3 a^{−3/4} √(ab)``
    (a ≤ b): at a ~ 10¹¹ the arc-cosine kernel is a reference to ~2e-8. The nested rule put a uniform grid
    at the argument's scale under both axes (~4·10⁸ evaluations a pair; gelu at depth 20, σ_w = 3 took
    66 s) though these φ vary only near 0 (``Activation.local``), where the panels are graded."""
    from netsor.activations.registry import activation

    act = activation(name)
    count = [0]

    def counted(x, fn=act.fn):
        count[0] += np.size(x)
        return fn(x)

    tracked = dataclasses.replace(act, fn=counted)
    rng = np.random.default_rng(1)
    a = 10 ** rng.uniform(11, 12, 6)
    b = a * rng.uniform(0.5, 2, 6)
    c = np.array([0.999999, 0.9999, 0.99, 0.9, 0.5, -0.3]) * np.sqrt(a * b)
    value, err = g.pair_expectation(tracked, tracked, a, b, c, rtol=1e-10)
    arc_cosine, _ = g.pair_expectation(activation("relu"), activation("relu"), a, b, c)
    scale = np.sqrt(a * b)
    assert np.all(np.abs(value - arc_cosine) <= err + 3.0 * np.minimum(a, b) ** -0.75 * scale)
    assert np.all(err <= 1e-10 * scale)
    assert count[0] < 2e7  # 1.0e7 for the six pairs


@pytest.mark.parametrize("name", ["tanh", "sigmoid", "erf", "gelu", "silu", "softplus"])
def test_closed_form_second_derivatives_are_the_derivative_of_the_slope(name):
    """``Activation.second`` (φ'' in closed form: the slope of φ' as an activation, used to bound how pairs of φ'
    change in an NTK) against central differences of ``deriv`` (step 1e-5: error ~1e-10)."""
    from netsor.activations.registry import activation

    act = activation(name)
    x, h = np.linspace(-8.0, 8.0, 2001), 1e-5
    finite_difference = (act.deriv(x + h) - act.deriv(x - h)) / (2 * h)
    assert np.max(np.abs(act.second(x) - finite_difference)) < 1e-9
    assert netsor.ir.differentiate.derived_activation(act).exact_slope


# (activation, a, b, 1 − ρ): nearly colinear pairs beyond the Mehler series' reach (order 767) at large variances,
# their conditional Gaussian narrow enough for the nested rule's Gauss–Hermite pass
@pytest.mark.parametrize("name, a, b, gap", [("tanh", 50.0, 40.0, 1e-3), ("tanh", 200.0, 160.0, 1e-9),
                                             ("sigmoid", 200.0, 160.0, 1e-3), ("gelu", 1000.0, 800.0, 1e-5),
                                             ("silu", 200.0, 160.0, 1e-5), ("softplus", 1000.0, 800.0, 1e-9)])
def test_nearly_colinear_pairs_of_analytic_functions_by_gauss_hermite_inner_rules(name, a, b, gap, monkeypatch):
    """E[φ(u) φ(v)] of analytic, local φ at correlation 1 − gap against nested quadrature (adaptive
    outside, 80 Gauss–Legendre nodes on panels inside: ``references.piecewise_pair``): the nested rule's
    inner Gaussian (sd √(b(1 − ρ²)) ≤ 1) is integrated by Gauss–Hermite rules of 48 and 32 nodes (softplus
    at depth 17 of an ordered network: 16 ms a pair on panels, 1.7 ms now), the bound covering the true
    error and meeting rtol 1e-8."""
    from netsor.gaussian import pairs

    taken = []
    chunk = pairs._nested_chunk
    monkeypatch.setattr(pairs, "_nested_chunk", lambda *args, **kw: taken.append(kw.get("inner_rule")) or chunk(
        *args, **kw))
    phi = getattr(netsor, name)
    c = (1.0 - gap) * np.sqrt(a * b)
    value, err = g.pair_expectation(phi, phi, np.array([a]), np.array([b]), np.array([c]), rtol=1e-8)
    want = references.piecewise_pair(phi.fn, phi.fn, a, b, c)  # the inner rule by Gauss–Legendre on panels
    scale = np.sqrt(g.pair_expectation(phi, phi, np.array([a]), np.array([a]), np.array([a]))[0][0]
                    * g.pair_expectation(phi, phi, np.array([b]), np.array([b]), np.array([b]))[0][0])
    assert taken == ["hermite"]  # the pair went to the nested rule, and its first pass met the target
    assert abs(value[0] - want) <= err[0] + 1e-14 * scale
    assert err[0] <= 1e-8 * scale


# (activation, a, b, ρ): relu-like φ at large variances (and their derivatives, the NTK's) at the correlations of deep
# ordered networks, whose series need orders beyond 255
@pytest.mark.parametrize("name, a, b, rho", [
    *(pytest.param(*case, marks=pytest.mark.slow) for case in [  # 7–25 s each: the default suite's longest
        ("softplus", 300.0, 240.0, 0.99), ("softplus'", 100.0, 80.0, 0.999),
        ("gelu", 30.0, 24.0, 0.999), ("gelu'", 100.0, 80.0, 0.99), ("silu'", 300.0, 240.0, 0.95)])])
def test_series_of_order_beyond_255_take_the_pairs_of_relu_like_functions_at_high_correlation(name, a, b, rho,
                                                                                              monkeypatch):
    """E[φ(u) φ(v)] against nested quadrature (``references.piecewise_pair``) where the Mehler series of order
    255 does not reach ρ: the table of order 767 (built for those pairs only) does, bound covering the true
    error and meeting rtol 1e-8 — before, each such pair took the nested 2-D rule (~10⁵ series steps; gelu's NTK
    at depth 30, σ_w = 1.5 on 40 inputs: 25 s, now ~1 s)."""
    from netsor.gaussian import pairs
    from netsor.ir.differentiate import derived_activation

    built, nested = [], []
    tables, nested_pair = pairs._tables, pairs._nested_pair
    monkeypatch.setattr(pairs, "_tables", lambda *args: built.append(args[4]) or tables(*args))
    monkeypatch.setattr(pairs, "_nested_pair", lambda *args: nested.append(args) or nested_pair(*args))
    phi = derived_activation(getattr(netsor, name[:-1])) if name.endswith("'") else getattr(netsor, name)
    c = rho * np.sqrt(a * b)
    value, err = g.pair_expectation(phi, phi, np.array([a]), np.array([b]), np.array([c]), rtol=1e-8)
    # 160 inner nodes: with 80, silu' at sd 17 was 1.7e-6 off (scipy's nested adaptive rule agrees with 160 to 2e-13)
    want = references.piecewise_pair(phi.fn, phi.fn, a, b, c, nodes=160)
    scale = np.sqrt(references.piecewise_pair(phi.fn, phi.fn, a, a, a * (1 - 1e-15), nodes=160)
                    * references.piecewise_pair(phi.fn, phi.fn, b, b, b * (1 - 1e-15), nodes=160))
    assert max(built) == pairs._HUGE_TABLE and not nested
    assert abs(value[0] - want) <= err[0] + 1e-14 * scale
    assert err[0] <= 1e-8 * scale


def test_what_is_derived_per_activation_is_held_in_bounded_memos(monkeypatch):
    """Located kinks, pieces, segments, unit moments and derivatives-as-activations were kept in dicts that grew
    with every activation a session made (a sweep over lambdas kept each one alive). They are bounded memos
    (least recently used evicted): with room for 8, 20 custom activations leave 8 located, and the means are
    still right (a closed form: E relu(u − t) = σ φ(t/σ) − t Φ(−t/σ))."""
    from netsor.memo import BoundedMemo

    memo = BoundedMemo(8)
    monkeypatch.setattr(g.pairs, "_LOCATED", memo)
    sd = 1.3
    for i, t in enumerate(np.linspace(-1.0, 1.0, 20)):
        act = activation(lambda u, t=t: np.maximum(u - t, 0.0), name=f"shifted relu {i}")
        value, err = g.pairs.mean(act, np.array([sd * sd]), 1e-10)
        want = sd * stats.norm.pdf(t / sd) - t * special.ndtr(-t / sd)
        assert abs(value[0] - want) <= err[0] + 4 * np.finfo(float).eps * abs(want)
    assert len(memo) == 8
    calls = []
    assert memo.get("new", lambda: calls.append(1) or 1.0) == 1.0 and memo.get("new", lambda: 2.0) == 1.0
    assert len(calls) == 1 and len(memo) == 8
