"""Densities of Jacobian laws: the adaptive grid conserves mass, and the density integrates to the
exact moments; the variance fixed point near q = 0 (hard-tanh at σ_w = 1).

Independent references: the moments ``law.moments(k)`` come from the power series of the
S-transforms (no density involved); the density is integrated here by Gauss–Legendre quadrature
in ``log(x − lo)`` on the lower half of the support and in ``r`` with ``x = hi − (hi − mid) r²`` on
the upper half (square-root edges are smooth in ``r``), independently of the law's own grid.
Gaussian expectations are computed with :func:`scipy.integrate.quad`, not netsor's engine.
"""

from fractions import Fraction
from math import comb

import numpy as np
import pytest
from references import quad_expect
from scipy import optimize, special

from netsor.activations import Activation, activation, custom
from netsor.errors import NetsorError
from netsor.matrixlaws import FussCatalan, derivative_law, fixed_point, jacobian_spectrum, numlaw, variance_map
from netsor.matrixlaws.numlaw import REFINE_TARGET

# ----------------------------------------------------------------------------- references


def critical_point(name, q_star):
    """``(σ_w, σ_b)`` on the critical line (χ = 1) with fixed point ``q*``:
    ``σ_w² = 1/E φ'(h)²`` and ``σ_b² = q* − σ_w² E φ(h)²``."""
    act = activation(name)
    sw2 = 1.0 / quad_expect(lambda h: act.deriv(h) ** 2, q_star)
    sb2 = q_star - sw2 * quad_expect(lambda h: act.fn(h) ** 2, q_star)
    return np.sqrt(sw2), np.sqrt(sb2)


def _gauss_legendre(a, b, panels, order=16):
    t, w = np.polynomial.legendre.leggauss(order)
    edges = np.linspace(a, b, panels + 1)
    mid, half = 0.5 * (edges[1:] + edges[:-1]), 0.5 * np.diff(edges)
    return (mid[:, None] + half[:, None] * t).ravel(), (half[:, None] * w).ravel()


def density_mass_and_moments(law, kmax=4):
    """``(mass, m_1..m_kmax)`` of ``law``: the density integrated by Gauss–Legendre (module
    docstring) from ``lo + δ``, ``δ = max(1e−290 (hi − lo), 1e−12 lo)``, plus the atoms. The mass
    below ``lo + δ`` is left out: a density diverging at 0 like ``x^{−a}`` puts ``δ^{1−a}/(1 − a)``
    there, below 1e−15 for every law here (``1 − a ≥ 1/17``)."""
    lo, hi = law.continuous_support
    width = hi - lo
    delta = max(1e-290 * width, 1e-12 * abs(lo))
    knee = max(1e-30 * width, 2 * delta)
    t0, w0 = _gauss_legendre(np.log(delta), np.log(knee), 30)  # panels of ~20 e-folds, x^{1−a} smooth
    t1, w1 = _gauss_legendre(np.log(knee), np.log(0.5 * width), 80)  # ~0.9 e-folds: features
    t, wt = np.concatenate([t0, t1]), np.concatenate([w0, w1])
    r, wr = _gauss_legendre(0.0, 1.0, 16)
    x = np.concatenate([lo + np.exp(t), hi - 0.5 * width * r**2])
    w = np.concatenate([wt * np.exp(t), wr * width * r])
    rho = law.density(x)
    loc, mass = law.atoms
    return np.array([w @ rho + mass.sum()] + [w @ (rho * x**k) + mass @ loc**k for k in range(1, kmax + 1)])


# ------------------------------------------------------------------ 1. densities that do not fail

BRIEF_CASE = ("tanh", 8, 1.2992209668018506, 0.19504153688706546, "orthogonal")
CRITICAL = [("erf", 1.0, 8, "gaussian"), ("erf", 0.25, 16, "orthogonal")]


def _check_density(law):
    """The cdf exists, conserves mass (the refinement's target) and the density integrates to the
    exact moments.

    Tolerances: the density is ``−Im G/π`` at ``ε = 1e−10 x`` with Newton residuals below 1e−8,
    and the Gauss–Legendre rule above is exact to ~1e−12 on these smooth integrands, so its mass
    and moments agree with the S-series to ~1e−8 (measured: ≤ 2e−9); 1e−7 leaves a margin of ten
    for the Newton tolerance. The cdf table is a trapezoid rule refined until its estimated
    error is ``REFINE_TARGET`` of the continuous mass; its defect must be within that target.
    """
    hi = law.support[1]
    xs = np.linspace(0.0, hi, 257)
    cdf = law.cdf(xs)
    assert np.all(np.diff(cdf) >= 0) and cdf[0] >= 0 and abs(law.cdf(hi) - 1.0) < 1e-12
    assert abs(law.mass_defect) <= REFINE_TARGET * law.continuous_mass
    assert law.quadrature_error <= REFINE_TARGET * law.continuous_mass
    assert law.smoothed_points == 0
    found = density_mass_and_moments(law)
    assert abs(found[0] - 1.0) < 1e-7
    assert np.allclose(found[1:], law.moments(4), rtol=1e-7, atol=0)


def test_brief_case_tanh_orthogonal_critical_q_half():
    """Regression: ``.cdf`` raised "Stieltjes inversion lost mass: 0.977" (the density rises from a
    lower edge near 6e−10 to 1e5 at 1e−9; the fixed cosine grid's first cell was 1.9e−5 wide)."""
    act, depth, sw, sb, kind = BRIEF_CASE
    assert np.allclose(critical_point(act, 0.5), (sw, sb), rtol=1e-12)  # χ = 1, q* = 0.5
    law = jacobian_spectrum(act, depth, sw, sb, weights=kind)
    assert np.isclose(law.q_star, 0.5, rtol=1e-12) and np.isclose(law.moments(1)[0], 1.0, rtol=1e-12)
    _check_density(law)


@pytest.mark.parametrize("name,q_star,depth,kind", CRITICAL)
def test_critical_line_densities(name, q_star, depth, kind):
    """Critical (χ = 1) tanh/erf networks, Gaussian and orthogonal weights: m₁ = χ^L = 1 exactly and
    the density passes :func:`_check_density` (erf at q* = 1 puts 1.6 % of the mass below 1e−29:
    the grid extends its geometric part down there)."""
    sw, sb = critical_point(name, q_star)
    law = jacobian_spectrum(name, depth, sw, sb, weights=kind)
    assert np.isclose(law.moments(1)[0], 1.0, rtol=1e-10)
    _check_density(law)


@pytest.mark.slow
@pytest.mark.parametrize("name,q_star,depth,kind,scale", [
    ("tanh", 0.5, 4, "gaussian", 1.0), ("tanh", 2.0, 16, "orthogonal", 1.0), ("tanh", 1.0, 16, "gaussian", 1.0),
    ("erf", 0.5, 4, "orthogonal", 1.0), ("tanh", 0.5, 8, "orthogonal", 1.02), ("erf", 1.0, 16, "orthogonal", 0.98),
    ("tanh", 0.25, 8, "gaussian", 1.02)])
def test_critical_and_near_critical_densities_more(name, q_star, depth, kind, scale):
    """More critical and near-critical (σ_w scaled by ±2 %) cases, depths 4–16."""
    sw, sb = critical_point(name, q_star)
    _check_density(jacobian_spectrum(name, depth, scale * sw, sb, weights=kind))


@pytest.mark.parametrize("act,sw,sb,depth", [("relu", np.sqrt(2.0), 0.0, 4), ("relu", np.sqrt(2.0), 0.1, 16),
                                              ("hard_tanh", 1.05, 0.05, 8),
                                              pytest.param("relu", np.sqrt(2.0), 0.0, 16, marks=pytest.mark.slow),
                                              pytest.param("hard_tanh", 1.05, 0.05, 16, marks=pytest.mark.slow)])
def test_bernoulli_products_mass_and_moments(act, sw, sb, depth):
    """Orthogonal weights with ReLU or hard-tanh: every factor is a two-point law and nothing smooths
    the product (density ~ x^{1/L − 1} at 0, an atom at 0). Same checks as the critical cases."""
    _check_density(jacobian_spectrum(act, depth, sw, sb, weights="orthogonal"))


def test_unrepresentable_law_says_why(monkeypatch):
    """Without refinement rounds the brief's case is the old fixed grid, which loses 2.3 % of the
    mass: the error names the law, the mass found, the tolerance and where the grid failed."""
    monkeypatch.setattr(numlaw, "MAX_ROUNDS", 0)
    law = jacobian_spectrum(*BRIEF_CASE[:4], weights="orthogonal")
    with pytest.raises(NetsorError, match=r"JacobianLaw\(tanh.*cannot be represented.*integrates to 0\.97"):
        law.cdf(1.0)


def test_depth_one_orthogonal_smooth_activation_says_why():
    """Depth 1, orthogonal weights, tanh: the law is σ_w² φ'(h)², which the library holds only as a
    Gauss rule of 48 nodes; nothing smooths it, so the density is refused up front with the reason
    (the moments stay exact: E φ'(h)² by quad)."""
    law = jacobian_spectrum("tanh", 1, 1.3, 0.0, weights="orthogonal")
    with pytest.raises(NetsorError, match=r"JacobianLaw\(tanh, depth=1.*48 nodes.*no free convolution"):
        law.cdf(0.5)
    assert np.isclose(law.moments(1)[0], 1.69 * quad_expect(lambda h: (1 - np.tanh(h) ** 2) ** 2, law.q_star),
                      rtol=1e-10)


# ------------------------------------------------------------- 2. the fixed point near q = 0

def _clip_second_moment(q):
    """``E clip(h, −1, 1)²``, ``h ~ N(0, q)``, in closed form (t = 1/√q)."""
    t = 1.0 / np.sqrt(q)
    inside = q * (special.erf(t / np.sqrt(2)) - 2 * t * np.exp(-0.5 * t * t) / np.sqrt(2 * np.pi))
    return inside + special.erfc(t / np.sqrt(2))


def test_hard_tanh_identity_near_zero_fixed_point_is_zero():
    """σ_w = 1, σ_b = 0: V(q) = E clip(h)² < q for every q > 0 (creeping towards 0 only
    logarithmically), so q* = 0, where φ'(h)² = 1 a.s.: χ = 1 and, with orthogonal weights, the law is
    the point mass at σ_w^{2L}; with Gaussian weights it is Fuss–Catalan of order L.
    Regression: raised scipy's bare "f(a) and f(b) must have different signs"."""
    q = np.geomspace(0.05, 1.0, 7)  # below, q − V(q) ~ e^{−1/(2q)} is lost to rounding
    assert np.all(_clip_second_moment(q) < q)
    law = jacobian_spectrum("hard_tanh", 8, 1.0, 0.0, weights="orthogonal")
    assert law.q_star == 0.0 and law.chi == 1.0
    loc, mass = law.atoms
    assert np.array_equal(loc, [1.0]) and np.array_equal(mass, [1.0])
    assert np.allclose(law.moments(4), 1.0, rtol=1e-14)
    assert law.cdf(0.999) == 0.0 and law.cdf(1.0) == 1.0
    gauss = jacobian_spectrum("hard_tanh", 5, 1.0, 0.0)
    assert np.allclose(gauss.moments(6), FussCatalan(5).moments(6), rtol=1e-12)
    scaled = jacobian_spectrum("hard_tanh", 3, 0.9, 0.0, weights="orthogonal")  # contracting: q* = 0 too
    assert scaled.q_star == 0.0 and np.allclose(scaled.atoms[0], [0.9**6])


def test_hard_tanh_from_q0_one():
    """q0 = 1: q_l by the closed-form recursion of ``E clip(h)²``, χ_l = σ_w² P(|h_l| < 1) and the
    law is the free product of Bernoulli(p_l): m₁ = Π p_l, and m₂/m₁² − 1 = Σ (1/p_l − 1) (normalised
    variances add under ⊠), atom at 0 of mass max_l (1 − p_l) (Belinschi)."""
    depth = 8
    q = np.empty(depth)
    q[0] = 1.0
    for layer in range(1, depth):
        q[layer] = _clip_second_moment(q[layer - 1])
    p = special.erf(1.0 / np.sqrt(2.0 * q))
    law = jacobian_spectrum("hard_tanh", depth, 1.0, 0.0, weights="orthogonal", q0=1.0)
    assert np.allclose(law.q, q, rtol=1e-12)
    assert np.allclose(law.chi_layers, p, rtol=1e-12)
    m = law.moments(2)
    assert np.isclose(m[0], np.prod(p), rtol=1e-12)
    assert np.isclose(m[1] / m[0] ** 2 - 1.0, np.sum(1.0 / p - 1.0), rtol=1e-12)
    loc, mass = law.atoms
    assert loc[0] == 0.0 and np.isclose(mass[0], np.max(1.0 - p), rtol=1e-12)
    _check_density(law)


def test_fixed_point_against_independent_root():
    """q* from an independent Brent root of ``E[σ_w² φ(h)²] + σ_b² − q`` (quad), for tanh, erf and
    hard-tanh near and away from criticality; brackets chosen by hand."""
    for name, sw, sb, bracket in [("tanh", 1.2, 0.1, (0.05, 2.0)), ("erf", 0.9, 0.05, (1e-3, 1.0)),
                                  ("hard_tanh", 1.1, 0.05, (0.05, 2.0)), ("tanh", 1.0001, 0.0, (1e-6, 1e-2))]:
        act = activation(name)
        gap = lambda v, act=act, sw=sw, sb=sb: sw**2 * quad_expect(lambda h: act.fn(h) ** 2, v, act.kinks) + sb**2 - v  # noqa: E731
        ref = optimize.brentq(gap, *bracket, xtol=1e-16, rtol=1e-13)
        assert np.isclose(fixed_point(act, sw, sb), ref, rtol=1e-9), name


def test_diverging_recursion_is_a_netsor_error():
    with pytest.raises(NetsorError, match="diverges"):
        jacobian_spectrum("exp", 3, 1.0)


# ------------------------------------------------ 3. the shared engine: kinks, custom activations

def test_kinks_come_from_the_activation():
    """A ReLU shifted to 0.5 declares its kink there: φ'² is Bernoulli with P(h > 0.5) exactly
    (the old kink table keyed by name did not know it)."""
    shifted = Activation("shifted_relu", fn=lambda x: np.maximum(x - 0.5, 0.0),
                         deriv=lambda x: (x > 0.5).astype(float), smooth=False, kinks=(0.5,))
    for q in (0.1, 1.0, 7.0):
        loc, mass = derivative_law(shifted, q).atoms
        assert np.array_equal(loc, [0.0, 1.0])
        assert np.allclose(mass, [special.ndtr(0.5 / np.sqrt(q)), special.ndtr(-0.5 / np.sqrt(q))],
                           rtol=1e-14, atol=0)


@pytest.mark.parametrize("fn,sw,sb", [(lambda x: np.maximum(x, 0.0), 1.4, 0.1), (np.tanh, 1.1, 0.1)])
def test_custom_activations_without_kinks_use_phi_prime_as_given(fn, sw, sb):
    """``custom(fn)`` declares no kinks and differentiates by central differences (error ~1e−10):
    its law still has m₁ = χ^L and m₂ = m₁² (1 + L (v_D + 1)) (normalised variances add under ⊠;
    v = 1 for MP(1)), with q*, E φ'² and E φ'⁴ from quad at an independent fixed point; and a
    density whose mass is conserved."""
    act, depth = custom(fn), 5
    gap = lambda v: sw**2 * quad_expect(lambda h: fn(h) ** 2, v, (0.0,)) + sb**2 - v  # noqa: E731
    q_star = optimize.brentq(gap, 1e-3, 5.0, xtol=1e-16, rtol=1e-13)
    deriv = (lambda h: (h > 0).astype(float)) if fn(-1.0) == 0 else (lambda h: 1 - np.tanh(h) ** 2)
    d1 = quad_expect(lambda h: deriv(h) ** 2, q_star, (0.0,))
    d2 = quad_expect(lambda h: deriv(h) ** 4, q_star, (0.0,))
    law = jacobian_spectrum(act, depth, sw, sb)
    m = law.moments(2)
    chi = sw**2 * d1
    assert np.isclose(m[0], chi**depth, rtol=1e-8)
    assert np.isclose(m[1], chi ** (2 * depth) * (1 + depth * (d2 / d1**2)), rtol=1e-8)
    assert abs(law.mass_defect) <= REFINE_TARGET * law.continuous_mass


def test_variance_map_uses_the_shared_quadrature_closed_forms():
    """E relu(h)² = q/2 and E erf(h)² = (2/π) arcsin(2q/(1 + 2q)); the engine is good to ~1e−14."""
    from netsor.matrixlaws.jacobian import variance_map

    q = np.array([1e-3, 0.3, 1.0, 9.0])
    assert np.allclose(variance_map(activation("relu"), q, 1.3, 0.2), 1.69 * q / 2 + 0.04, rtol=1e-13)
    erf2 = 2 / np.pi * np.arcsin(2 * q / (1 + 2 * q))
    assert np.allclose(variance_map(activation("erf"), q, 0.9, 0.0), 0.81 * erf2, rtol=1e-13)


def test_bernoulli_product_moments_by_lagrange_inversion():
    """``⊠^L Bernoulli(p)``: ``χ(z) = z(1 + z)^{L−1}/(p + z)^L``, so by Lagrange inversion
    ``m_k = (1/k)[z^{k−1}] (p + z)^{Lk} (1 + z)^{−(L−1)k}`` (independent of the S-series code),
    evaluated in exact rational arithmetic (the alternating sum loses 1e−10 in floats at k = 6,
    L = 16); orthogonal weights scale the law by ``σ_w^{2L}``. ``p``: ½ for ReLU; ``P(|h| < 1)`` at
    the independently computed fixed point for hard-tanh. The S-series code is good to ~1e−14."""
    q_ht = optimize.brentq(lambda v: 1.05**2 * _clip_second_moment(v) + 0.05**2 - v, 0.05, 2.0, xtol=1e-16,
                           rtol=1e-14)
    for act, sw, sb, p in [("relu", np.sqrt(2.0), 0.0, 0.5),
                           ("hard_tanh", 1.05, 0.05, special.erf(1 / np.sqrt(2 * q_ht)))]:
        for depth in (3, 7, 16):
            law = jacobian_spectrum(act, depth, sw, sb, weights="orthogonal")
            n, pp, s2 = depth - 1, Fraction(float(p)), Fraction(float(sw)) ** 2
            exact = [float(sum(comb(depth * k, j) * pp ** (depth * k - j) * (-1) ** (k - 1 - j)
                               * comb(n * k + k - 2 - j, k - 1 - j) for j in range(k)) / k * s2 ** (depth * k))
                     for k in range(1, 7)]
            assert np.allclose(law.moments(6), exact, rtol=1e-12, atol=0)


# ------------------------------------------------------ large Fuss–Catalan orders; the variance map

@pytest.mark.parametrize("order", [45, 50, 200])
def test_large_fuss_catalan_orders(order):
    """Moments against the Fuss–Catalan numbers ``C((s+1)k, k)/(sk + 1)`` in Python integers; the
    law's own quadrature reproduces them; support edge ``(s+1)^{s+1}/s^s`` (one exact division);
    quantile and cdf finite and consistent; the first moment beyond float64 is named."""
    law = FussCatalan(order)
    exact = [comb((order + 1) * k, k) // (order * k + 1) for k in range(1, 5)]
    assert np.allclose(law.moments(4), exact, rtol=1e-14, atol=0)
    x, w = law.quadrature()
    assert np.all(np.isfinite(x)) and np.isclose(w.sum(), 1.0, rtol=1e-14)
    assert np.allclose([np.dot(w, x**k) for k in range(1, 5)], exact, rtol=1e-10, atol=0)
    assert law.support[1] == float(Fraction((order + 1) ** (order + 1), order**order))  # correctly rounded
    median = law.quantile(np.array([0.5]))[0]
    assert 0 < median < law.support[1] and abs(law.cdf(np.array([median]))[0] - 0.5) < 1e-6
    f1 = law.cdf(np.array([1.0]))[0]
    assert 0.5 < f1 < 1.0
    top = float(np.finfo(float).max)  # a Python float: compared with integers exactly
    first = next(k for k in range(1, 10**4) if comb((order + 1) * k, k) // (order * k + 1) > top)
    with pytest.raises(NetsorError, match=f"m_{first} is beyond"):
        law.moments(first + 5)


def test_fuss_catalan_beyond_float64_is_refused():
    with pytest.raises(NetsorError, match="order must be <= 1000"):
        FussCatalan(1001)
    with pytest.raises(NetsorError, match="beyond the float64 range"):
        FussCatalan(50, 1e10)


def test_variance_map_and_fixed_point_take_names_and_check_q():
    """Names resolve as in jacobian_spectrum; ``V(q) = σ_w² E tanh(√q Z)² + σ_b²`` (quad); an empty
    array maps to an empty array; negative or NaN variances are refused."""
    act = activation("tanh")
    q = np.array([[0.5, 2.0]])
    ref = [[1.5**2 * quad_expect(lambda h: np.tanh(h) ** 2, v) + 0.01 for v in q[0]]]
    assert np.allclose(variance_map("tanh", q, 1.5, 0.1), ref, rtol=1e-12)
    assert variance_map(act, np.array([]), 1.0, 0.0).shape == (0,)
    with pytest.raises(NetsorError, match=">= 0"):
        variance_map(act, -1.0, 1.0, 0.0)
    with pytest.raises(NetsorError, match="NaN"):
        variance_map(act, np.nan, 1.0, 0.0)
    assert fixed_point("tanh", 1.2, 0.1) == fixed_point(act, 1.2, 0.1)


def test_fixed_point_divergence_is_always_an_error():
    """ReLU: ``V(q) = σ_w² q/2 + σ_b²``. σ_w = 2 (q doubles) and σ_w = √2 with σ_b > 0 (q grows by
    σ_b² per layer) diverge, as exp does; σ_w = √2, σ_b = 0: V(q) = q, the recursion stays at its
    start; σ_w = 1.2, σ_b = 0.5: q* = 0.25/(1 − 0.72)."""
    relu = activation("relu")
    for sw, sb in [(2.0, 0.0), (np.sqrt(2.0), 0.1)]:
        with pytest.raises(NetsorError, match="diverges"):
            fixed_point(relu, sw, sb)
    with pytest.raises(NetsorError, match="diverges"):
        fixed_point("exp", 2.0, 0.0)
    assert fixed_point(relu, np.sqrt(2.0), 0.0, start=3.0) == 3.0
    assert np.isclose(fixed_point(relu, 1.2, 0.5), 0.25 / (1 - 0.72), rtol=1e-12)
    assert jacobian_spectrum("relu", 2, 2.0).q_star == np.inf  # the law of φ'² does not depend on q
