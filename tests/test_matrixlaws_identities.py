"""Closed-form identities of the matrix-laws subpackage, validation and the public API.

References are independent of the code under test: closed forms (Catalan, Narayana, Fuss–Catalan,
free projections), :func:`scipy.integrate.quad` for Gaussian expectations.
"""

import ast
import inspect
import warnings
from fractions import Fraction
from math import comb
from pathlib import Path

import mpmath
import numpy as np
import pytest
from references import quad_expect
from scipy import integrate, optimize

from netsor.activations import activation
from netsor.errors import HyperParameterError, InputError, NetsorError, NumericalError
from netsor.matrixlaws import (
    DensityLaw,
    DiscreteLaw,
    Factor,
    FussCatalan,
    MarchenkoPastur,
    Semicircle,
    classical_prediction,
    empirical_jacobian_spectrum,
    esd,
    fip_check,
    free_additive_convolution,
    free_cumulants,
    free_multiplicative_convolution,
    jacobian_spectrum,
    moments_from_free_cumulants,
    moments_from_s,
    r_transform,
    s_transform,
)
from netsor.matrixlaws.numlaw import REFINE_TARGET

# ------------------------------------------------------------------------ free probability

def test_semicircle_catalan_and_cumulants():
    m = Semicircle(1.0).moments(10)
    assert np.array_equal(m[1::2], [comb(2 * j, j) / (j + 1) for j in range(1, 6)])
    assert np.allclose(m[::2], 0.0, atol=0)
    k = free_cumulants(m)
    assert np.allclose(k, [0, 1, 0, 0, 0, 0, 0, 0, 0, 0], atol=1e-12)
    assert np.allclose(moments_from_free_cumulants(k), m, atol=1e-9)


@pytest.mark.parametrize("lam", [0.3, 1.0, 2.5])
def test_marchenko_pastur_narayana_and_mass(lam):
    """Moments are Narayana polynomials, free cumulants ``λ^{n−1}`` (free Poisson), the density plus
    the atom ``1 − 1/λ`` integrate to 1 (trapezoid on 4097 cosine points: error ~1e−7)."""
    law = MarchenkoPastur(lam, 1.0)
    nar = [sum(comb(j, r) * comb(j, r - 1) / j * lam ** (r - 1) for r in range(1, j + 1))
           for j in range(1, 7)]
    assert np.allclose(law.moments(6), nar, rtol=1e-12)
    assert np.allclose(free_cumulants(law.moments(5)), lam ** np.arange(5), rtol=1e-10)
    a, b = law.support[0] if lam <= 1 else (1 - np.sqrt(lam)) ** 2, law.support[1]
    mass = integrate.quad(law.density, a, b, epsabs=1e-13, limit=200)[0]
    assert abs(mass + law.atoms[1].sum() - 1.0) < 1e-9


def test_semicircle_plus_semicircle_is_semicircle():
    """Free cumulants add: SC(1) ⊞ SC(2) = SC(3). Density from the subordination solver to its Newton
    tolerance (1e−8 relative, 1e−6 allowed), cdf from its grid (trapezoid, ~1e−4)."""
    s = free_additive_convolution(Semicircle(1.0), Semicircle(2.0))
    target = Semicircle(3.0)
    assert np.allclose(s.moments(8), target.moments(8), atol=1e-10)
    x = np.linspace(-3.3, 3.3, 41)
    assert np.max(np.abs(s.density(x) - target.density(x))) < 1e-6
    grid = np.linspace(-4, 4, 101)
    assert np.max(np.abs(s.cdf(grid) - target.cdf(grid))) < 2 * REFINE_TARGET


@pytest.mark.parametrize("depth", [1, 2, 3, 5])
def test_product_of_marchenko_pastur_is_fuss_catalan(depth):
    law = free_multiplicative_convolution(*[MarchenkoPastur(1.0)] * depth)
    fc = FussCatalan(depth)
    exact = [comb((depth + 1) * k, k) / (depth * k + 1) for k in range(1, 7)]
    assert np.allclose(law.moments(6), exact, rtol=0, atol=1e-10 * max(exact))
    assert np.allclose(fc.moments(6), exact, rtol=1e-14)
    x = np.array([0.01, 0.3, 1.0, 2.0]) * fc.support[1] / 2.5
    assert np.allclose(law.density(x), fc.density(x), rtol=1e-6)
    assert np.isclose(law.support[1], fc.support[1], rtol=1e-8)


def test_s_transform_of_marchenko_pastur():
    w = np.array([-0.2 - 0.1j, 0.1 + 0.05j])
    assert np.allclose(s_transform(MarchenkoPastur(0.5, 2.0), w), 1 / (2.0 * (1 + 0.5 * w)), rtol=1e-8)


@pytest.mark.parametrize("alpha,beta", [(0.7, 0.7), (0.7, 0.6)])
def test_free_projections_closed_form(alpha, beta):
    """P, Q free projections of traces α, β: PQP has atoms ``1 − min(α, β)`` at 0 and
    ``α + β − 1`` at 1 (Belinschi) and the density ``√((λ₊ − x)(x − λ₋)) / (2π x (1 − x))`` on
    ``[λ₋, λ₊]``, ``λ± = α + β − 2αβ ± √(4αβ(1 − α)(1 − β))`` (λ₋ = 0 when α = β; a gap above the
    atom at 0 otherwise). Density to the Newton tolerance; edges to the support probe's
    multisection (16⁻⁵ of a probe cell, below 1e−6 relative)."""
    law = free_multiplicative_convolution(DiscreteLaw([0.0, 1.0], [1 - alpha, alpha]),
                                          DiscreteLaw([0.0, 1.0], [1 - beta, beta]))
    loc, mass = law.atoms
    assert np.allclose(loc, [0.0, 1.0]) and np.allclose(mass, [1 - min(alpha, beta), alpha + beta - 1], rtol=1e-14)
    mid, rad = alpha + beta - 2 * alpha * beta, np.sqrt(4 * alpha * beta * (1 - alpha) * (1 - beta))
    lo, hi = mid - rad, mid + rad
    x = lo + (hi - lo) * np.array([1e-3, 0.01, 0.2, 0.5, 0.8, 0.99, 1 - 1e-3])
    exact = np.sqrt((hi - x) * (x - lo)) / (2 * np.pi * x * (1 - x))
    assert np.allclose(law.density(x), exact, rtol=1e-7, atol=0)
    assert np.allclose(law.continuous_support, (lo, hi), rtol=1e-6, atol=1e-12)
    assert abs(law.mass_defect) <= REFINE_TARGET * law.continuous_mass
    gap = np.linspace(0.0, lo, 50)[1:-1]  # below λ₋ > 0: only the Cauchy smoothing at ε = 1e−10 x
    assert alpha == beta or np.all(law.density(gap) <= 1e-10 * gap / np.pi * law.continuous_mass / (lo - gap) ** 2)


def test_quantile_inverts_the_cdf():
    """``quantile(F(x)) = x`` inside the support (up to the table's linear interpolation, ~1e−6 of
    the width on 4097 cosine points); atoms are flat steps of the cdf, jumps of the quantile."""
    mp = MarchenkoPastur(0.5, 1.5)
    lo, hi = mp.support
    x = np.linspace(lo, hi, 101)[1:-1]
    assert np.allclose(mp.quantile(mp.cdf(x)), x, rtol=0, atol=1e-6 * (hi - lo))
    law = DiscreteLaw([0.0, 2.0, 5.0], [0.2, 0.5, 0.3])
    assert np.array_equal(law.quantile([0.1, 0.2, 0.5, 0.7, 0.71, 1.0]), [0.0, 0.0, 2.0, 2.0, 5.0, 5.0])


# ------------------------------------------------------------------------- Jacobian laws

@pytest.mark.parametrize("depth", [1, 4, 20])
def test_linear_jacobian_is_fuss_catalan(depth):
    """Linear network, Gaussian weights: Fuss–Catalan of order L. W1 between the cdfs: the grid's
    cumulative mass is within ``REFINE_TARGET`` of the exact one, so ∫|ΔF| ≤ REFINE_TARGET · width
    plus the linear interpolation between grid points (measured W1: 2e−4 at depth 20, width 57)."""
    law = jacobian_spectrum("identity", depth, 1.3)
    fc = FussCatalan(depth, 1.3**2)
    assert np.allclose(law.moments(6), fc.moments(6), rtol=1e-10)
    xx = np.linspace(0, fc.support[1], 20001)
    w1 = np.trapezoid(np.abs(law.cdf(xx) - fc.cdf(xx)), xx)
    assert w1 < REFINE_TARGET * fc.support[1]


def _independent_fixed_point(act, sw, sb, bracket):
    gap = lambda v: sw**2 * quad_expect(lambda h: act.fn(h) ** 2, v, act.kinks) + sb**2 - v  # noqa: E731
    return optimize.brentq(gap, *bracket, xtol=1e-16, rtol=1e-13)


@pytest.mark.parametrize("name,sw,sb,bracket", [("tanh", 1.2, 0.1, (0.05, 2.0)), ("relu", 1.3, 0.2, (0.05, 2.0)),
                                                 ("hard_tanh", 1.1, 0.05, (0.05, 2.0)), ("erf", 1.5, 0.0, (0.05, 5.0))])
def test_first_two_moments_from_independent_chi(name, sw, sb, bracket):
    """m₁ = χ^L and m₂ = m₁² (1 + L (v_D + v_W)), with ``v = m₂/m₁² − 1`` of φ'(h)² at q* and of
    MP(1) (``v_W = 1``): normalised variances add under ⊠. q* by an independent root, the moments
    of φ'² by quad (relative accuracy ~1e−12, the root's error enters χ at ~1e−12 too)."""
    act, depth = activation(name), 6
    if name == "relu":
        q_star = sb**2 / (1 - sw**2 / 2)
    else:
        q_star = _independent_fixed_point(act, sw, sb, bracket)
    d1 = quad_expect(lambda h: act.deriv(h) ** 2, q_star, act.kinks)
    d2 = quad_expect(lambda h: act.deriv(h) ** 4, q_star, act.kinks)
    law = jacobian_spectrum(name, depth, sw, sb)
    assert np.isclose(law.q_star, q_star, rtol=1e-10)
    chi = sw**2 * d1
    m = law.moments(2)
    assert np.isclose(m[0], chi**depth, rtol=1e-9)
    assert np.isclose(m[1], chi ** (2 * depth) * (1 + depth * (d2 / d1**2 - 1 + 1)), rtol=1e-9)


def test_relu_critical_law_independent_of_q_and_atom_at_zero():
    """ReLU at σ_w = √2, σ_b = 0: V(q) = q, every q is fixed (the recursion from q = 1 stays at 1),
    χ = 1, the law does not depend on q0, and the product of the Bernoulli(½) D² laws keeps the atom
    ½ at 0."""
    law = jacobian_spectrum("relu", 5, np.sqrt(2.0))
    assert law.q_star == 1.0
    assert np.isclose(law.chi, 1.0, rtol=1e-12)
    loc, mass = law.atoms
    assert np.allclose(loc, [0.0]) and np.allclose(mass, [0.5])
    other = jacobian_spectrum("relu", 5, np.sqrt(2.0), q0=7.0)
    assert np.allclose(other.moments(5), law.moments(5), rtol=1e-12)


def test_q0_uses_each_layers_variance():
    """q_1 = σ_w² q0 + σ_b², q_{l+1} = σ_w² E tanh(h_l)² + σ_b² (quad), χ_l = σ_w² E tanh'(h_l)²."""
    act, depth, sw, sb, q0 = activation("tanh"), 3, 1.5, 0.1, 2.0
    q = [sw**2 * q0 + sb**2]
    for _ in range(depth - 1):
        q.append(sw**2 * quad_expect(lambda h: np.tanh(h) ** 2, q[-1]) + sb**2)
    chi = [sw**2 * quad_expect(lambda h: act.deriv(h) ** 2, v) for v in q]
    law = jacobian_spectrum("tanh", depth, sw, sb, q0=q0)
    assert np.allclose(law.q, q, rtol=1e-12)
    assert np.allclose(law.chi_layers, chi, rtol=1e-12)
    assert np.isclose(law.moments(1)[0], np.prod(chi), rtol=1e-11)


def test_fixed_point_accuracy_relu_with_bias():
    law = jacobian_spectrum("relu", 2, 1.2, 0.5)
    assert np.isclose(law.q_star, 0.25 / (1 - 1.44 / 2), rtol=1e-12)


def test_two_free_half_projections_give_the_arcsine_law():
    """ReLU, orthogonal weights, depth 2: D₁²·D₂² with free projections of trace ½ is
    ½ δ₀ + ½ arcsine on [0, σ_w⁴] (P₁P₂P₁ for two free projections of trace ½)."""
    law = jacobian_spectrum("relu", 2, np.sqrt(2.0), weights="orthogonal")
    assert np.allclose(law.moments(6), [0.5 * comb(2 * k, k) for k in range(1, 7)], rtol=1e-12)
    x = 4.0 * np.array([1e-25, 1e-6, 0.01, 0.3, 0.7, 0.99, 0.999999])
    t = x / 4.0
    assert np.allclose(law.density(x), 0.5 / (4.0 * np.pi * np.sqrt(t * (1.0 - t))), rtol=1e-8, atol=0)


@pytest.mark.parametrize("act,weights,depth", [("tanh", "orthogonal", 8), ("erf", "orthogonal", 8),
                                               ("tanh", "gaussian", 8)])
def test_smooth_activations_without_warnings(act, weights, depth):
    """Regression: the continuation used to jump to other roots of the log system (orthogonal
    tanh/erf raised NumericalError) and emitted RuntimeWarnings during Newton steps. Moments of the
    cdf table (midpoint masses) match the exact ones to the refinement target (relative, the cell
    widths add ~1e−4 for the higher moments)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        law = jacobian_spectrum(act, depth, 1.05, 0.05, weights=weights)
        summary = law.summary()
        nodes, weights_ = law.quadrature()
    assert summary["smoothed_points"] == 0 and abs(law.mass_defect) <= REFINE_TARGET
    assert np.all(np.isfinite(law.grid[1]))
    grid_moments = np.array([np.dot(weights_, nodes**k) for k in (1, 2, 3)])
    assert np.allclose(grid_moments, law.moments(3), rtol=5 * REFINE_TARGET)


# ---------------------------------------------------------------------------- validation

@pytest.mark.parametrize("call", [
    lambda: jacobian_spectrum("nope", 3, 1.0),
    lambda: jacobian_spectrum("tanh", 0, 1.0),
    lambda: jacobian_spectrum("tanh", 2.5, 1.0),
    lambda: jacobian_spectrum("tanh", True, 1.0),
    lambda: jacobian_spectrum("tanh", 3, -1.0),
    lambda: jacobian_spectrum("tanh", 3, 0.0),
    lambda: jacobian_spectrum("tanh", 3, np.nan),
    lambda: jacobian_spectrum("tanh", 3, "1"),
    lambda: jacobian_spectrum("tanh", 3, 1.0, -0.1),
    lambda: jacobian_spectrum("tanh", 3, 1.0, weights="uniform"),
    lambda: jacobian_spectrum("tanh", 3, 1.0, q0=-1.0),
    lambda: jacobian_spectrum("tanh", 3, 1.0, grid_size=3),
    lambda: jacobian_spectrum("tanh", 3, 1.0, width_ratios=[1, 2]),
    lambda: jacobian_spectrum("tanh", 3, 1.0, width_ratios=[1, 1, 0, 1]),
    lambda: jacobian_spectrum("tanh", 2, 1.0, weights="orthogonal", width_ratios=[1, 2, 1]),
    lambda: jacobian_spectrum("step", 3, 1.0),
    lambda: empirical_jacobian_spectrum("tanh", 2, 1.0, width=0),
    lambda: empirical_jacobian_spectrum("tanh", 2, 1.0, samples=1.5),
    lambda: empirical_jacobian_spectrum("tanh", 2, 1.0, seed=-1),
    lambda: empirical_jacobian_spectrum("tanh", 2, 1.0, seed="x"),
    lambda: fip_check("relu", 2, 1.0, widths=(8,)),
    lambda: fip_check("relu", 2, 1.0, widths=(8, 1)),
    lambda: fip_check("relu", 2, 1.0, replicates=0),
    lambda: classical_prediction(Semicircle(1.0)),
    lambda: Semicircle(-1.0),
    lambda: Semicircle(1.0).sample_matrix(0),
    lambda: MarchenkoPastur(0.0),
    lambda: FussCatalan(0),
    lambda: Semicircle().moments(0),
    lambda: Semicircle().stieltjes([np.nan]),
    lambda: Semicircle().quantile([1.5]),
    lambda: esd([1.0, np.nan]),
    lambda: DiscreteLaw([1.0, 2.0], [0.5, 0.2]),
    lambda: free_multiplicative_convolution(Semicircle(1.0), MarchenkoPastur()),
    lambda: free_multiplicative_convolution(MarchenkoPastur(), grid_size=0),
])
def test_errors_are_netsor_errors(call):
    with pytest.raises(NetsorError):
        call()


def test_error_kinds():
    with pytest.raises(HyperParameterError, match="weights must be one of"):
        jacobian_spectrum("tanh", 2, 1.0, weights="uniform")
    with pytest.raises(InputError):
        Semicircle().density([np.inf])


# ------------------------------------------------------------------------------- the API

def test_keyword_only_options_and_names():
    """Options follow the data arguments as keywords, named as in the zoo (``activation``)."""
    for fn in (jacobian_spectrum, empirical_jacobian_spectrum, fip_check):
        params = inspect.signature(fn).parameters
        assert list(params)[:4] == ["activation", "depth", "sigma_w", "sigma_b"]
        assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in list(params.values())[4:])
    params = inspect.signature(classical_prediction).parameters
    assert [p.kind for p in params.values()][1:] == [inspect.Parameter.KEYWORD_ONLY] * 2
    with pytest.raises(TypeError):
        jacobian_spectrum("tanh", 3, 1.0, 0.0, "gaussian")
    law = jacobian_spectrum(activation="relu", depth=2, sigma_w=1.2, sigma_b=0.0, weights="orthogonal")
    assert np.isclose(law.moments(1)[0], 0.72**2, rtol=1e-14)


def test_no_private_names_across_modules():
    """matrixlaws imports no leading-underscore name from another module, and has no kink table."""
    root = Path(__file__).resolve().parents[1] / "netsor" / "matrixlaws"
    for path in root.glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                assert not any(alias.name.startswith("_") for alias in node.names), (path.name, node.module)
            if isinstance(node, ast.Name):
                assert node.id != "_KINKS", path.name


# --------------------------------------------------- extreme arguments: transforms, moments, inputs

def _mp_density_mp(lam, v):
    """Marchenko–Pastur density in mpmath (30 digits), for the defining integral of G."""
    a, b = v * (1 - mpmath.sqrt(lam)) ** 2, v * (1 + mpmath.sqrt(lam)) ** 2
    return a, b, lambda t: mpmath.sqrt((b - t) * (t - a)) / (2 * mpmath.pi * v * lam * t)


def _cauchy_by_quadrature(density, a, b, z, atom=0):
    """``G(z) = ∫ ρ(t) dt/(z − t) + atom/z`` by mpmath's tanh-sinh quadrature at 30 digits, split at
    ``Re z`` (where the integrand peaks when z is near the support)."""
    with mpmath.workdps(30):
        zz = mpmath.mpc(z)
        points = [a, zz.real, b] if a < zz.real < b else [a, b]
        return complex(mpmath.quad(lambda t: density(t) / (zz - t), points) + atom / zz)


def _inverse(z):
    """``1/z`` without overflow of ``|z|²`` (Python's complex division squares |z|)."""
    scale = abs(z)
    return (1 / (z / scale)) / scale


MODERATE_Z = [3.0, -2.5, 0.5 + 0.1j, 0.5 - 0.1j, 0.5 + 1e-3j, 2.0j, -1.0 - 3.0j, 12.0 + 0.5j]
LARGE_Z = [1e8, -1e8, 1e10, 1e100, -1e100, 1e10j, -1e10j, 1e8 * (1 + 1j), 1e200 - 1e199j]


@pytest.mark.parametrize("v,c", [(1.0, 0.0), (2.5, -0.7)])
def test_semicircle_cauchy_transform_has_full_relative_accuracy(v, c):
    """Large |z|: ``G = 1/w + v/w³ + 2v²/w⁵ + …`` (``w = z − c``; the next term is below 1e−30 of
    the first). Moderate z off the support, both half-planes and the real axis: the defining
    integral with the semicircle density at 30 digits."""
    law = Semicircle(v, c)
    for z in LARGE_Z:
        u = _inverse(z - c)
        ref = u + v * u**3
        assert abs(law.stieltjes(np.array([z]))[0] - ref) <= 1e-12 * abs(ref), z
    r = 2 * mpmath.sqrt(v)
    dens = lambda t: mpmath.sqrt(r * r - (t - c) ** 2) / (2 * mpmath.pi * v)  # noqa: E731
    for z in MODERATE_Z + [c + float(r) + 0.01, c - float(r) - 1.0]:
        if z.imag == 0 and abs(z - c) <= float(r):
            continue
        ref = _cauchy_by_quadrature(dens, c - r, c + r, z)
        assert abs(law.stieltjes(np.array([z]))[0] - ref) <= 1e-12 * abs(ref), z


@pytest.mark.parametrize("lam,v", [(0.5, 1.0), (2.0, 0.7)])
def test_marchenko_pastur_cauchy_transform_has_full_relative_accuracy(lam, v):
    """Large |z|: ``G = 1/z + m₁/z² + m₂/z³`` with ``m₁ = v``, ``m₂ = v²(1 + λ)``. Moderate z: the
    defining integral of the density at 30 digits, plus the atom ``1 − 1/λ`` at 0 when λ > 1."""
    law = MarchenkoPastur(lam, v)
    for z in LARGE_Z:
        u = _inverse(z)
        ref = u + v * u**2 + v * v * (1 + lam) * u**3
        assert abs(law.stieltjes(np.array([z]))[0] - ref) <= 1e-12 * abs(ref), z
    a, b, dens = _mp_density_mp(lam, v)
    atom = max(0.0, 1 - 1 / lam)
    for z in MODERATE_Z + [-0.3, 1e-3j, float(b) + 0.01]:
        if z.imag == 0 and float(a) <= z <= float(b):
            continue
        ref = _cauchy_by_quadrature(dens, a, b, z, atom)
        assert abs(law.stieltjes(np.array([z]))[0] - ref) <= 1e-12 * abs(ref), z


def test_marchenko_pastur_cauchy_transform_refuses_its_pole():
    """λ ≥ 1: z = 0 is the atom's pole (or the x^(−1/2) edge); λ < 1: G(0) = −E[1/t] = −1/(v(1 − λ))."""
    with pytest.raises(InputError, match="pole"):
        MarchenkoPastur(2.0).stieltjes(np.zeros(1))
    assert np.isclose(MarchenkoPastur(0.5, 2.0).stieltjes(np.zeros(1))[0], -1 / (2.0 * 0.5), rtol=1e-14)


W_SMALL_TO_LARGE = np.array([0.0, 1e-12, 1e-8, 1e-6, 1e-2, 0.1, 0.3, -0.2, 0.1 - 0.2j, 5.0, 100.0])


def test_r_and_s_transforms_in_closed_form():
    """Semicircle ``R(w) = c + v w``; Marchenko–Pastur ``R(w) = v/(1 − vλw)`` (free cumulants
    ``v^n λ^{n−1}``) and ``S(w) = 1/(v(1 + λw))``; Fuss–Catalan ``S(w) = (v(1 + w))^{−s}``; for
    small and large w alike, and R(0) = m₁."""
    w = W_SMALL_TO_LARGE
    assert np.allclose(r_transform(Semicircle(), w), w, rtol=1e-15, atol=0)
    assert np.allclose(r_transform(Semicircle(2.0, 0.5), w), 0.5 + 2.0 * w, rtol=1e-15, atol=0)
    lam, v = 0.5, 1.5
    mp = MarchenkoPastur(lam, v)
    assert np.allclose(r_transform(mp, w), v / (1 - v * lam * w), rtol=1e-14, atol=0)
    assert np.allclose(s_transform(mp, w), 1 / (v * (1 + lam * w)), rtol=1e-14, atol=0)
    assert np.allclose(s_transform(FussCatalan(3, 0.8), w), (0.8 * (1 + w)) ** -3.0, rtol=1e-13, atol=0)
    with pytest.raises(InputError, match="pole"):
        r_transform(mp, np.array([1 / (v * lam)]))
    with pytest.raises(InputError, match="pole"):
        s_transform(mp, np.array([-1 / lam]))


def test_r_transform_by_series_and_inversion():
    """``μ = (δ₋₁ + δ₁)/2``: ``G(z) = z/(z² − 1)``, so ``R(w) = (√(1 + 4w²) − 1)/(2w) =
    2w/(√(1 + 4w²) + 1)`` (the root with ``z ~ 1/w``), R(0) = 0: small w use the cumulant series,
    larger w the Newton inversion of G."""
    law = DiscreteLaw([-1.0, 1.0], [0.5, 0.5])
    w = np.array([0.0, 1e-12, 1e-8, 1e-6, 1e-3, 0.05, 0.2, 0.35, -0.3, 0.1 + 0.05j])
    assert np.allclose(r_transform(law, w), 2 * w / (np.sqrt(1 + 4 * w * w) + 1), rtol=1e-12, atol=0)


def test_s_transform_by_series_and_inversion():
    """``μ = (δ₁ + δ₂)/2``: ``ψ(u) = (u/(1 − u) + 2u/(1 − 2u))/2 = w`` is the quadratic
    ``4(1 + w)u² − (6w + 3)u + 2w = 0``, whose root ``u ~ 2w/3`` gives
    ``S(w) = 4(1 + w)/(6w + 3 + √(4w² + 4w + 9))``, S(0) = 2/3 = 1/m₁."""
    law = DiscreteLaw([1.0, 2.0], [0.5, 0.5])
    w = np.array([0.0, 1e-12, 1e-8, 1e-3, 0.1, 0.5, 1.0, 0.2j])
    exact = 4 * (1 + w) / (6 * w + 3 + np.sqrt(4 * w * w + 4 * w + 9))
    assert np.allclose(s_transform(law, w), exact, rtol=1e-12, atol=0)


def test_r_transform_without_inverse_is_an_error():
    """Uniform law on [0, 1]: ``G(z) = log(z/(z − 1))`` has ``|Im G| < π``, so ``G(z) = 100i`` has no
    solution and ``R(100i)`` does not exist; R(0.1) = e^{0.1}/(e^{0.1} − 1) − 10."""
    law = DensityLaw(lambda x: np.ones_like(x), (0.0, 1.0))
    assert np.isclose(r_transform(law, np.array([0.1]))[0], np.exp(0.1) / np.expm1(0.1) - 10, rtol=1e-12)
    with pytest.raises(NumericalError, match="no solution"):
        r_transform(law, np.array([100j]))


def _first_beyond_float(values):
    """Index (from 1) of the first exact integer or fraction in ``values`` above the largest float."""
    top = Fraction(np.finfo(float).max)
    return next(j for j, x in enumerate(values, start=1) if x > top)


def test_moments_are_exact_or_refused_beyond_float64():
    """Catalan numbers, Narayana sums and binomial expansions computed exactly (Python integers and
    fractions); the first moment beyond the float64 range is named in the error."""
    catalan = [comb(2 * j, j) // (j + 1) for j in range(1, 600)]
    m = MarchenkoPastur(1.0).moments(500)
    assert np.allclose(m, [float(c) for c in catalan[:500]], rtol=1e-12, atol=0)
    first = _first_beyond_float(catalan)
    with pytest.raises(NumericalError, match=f"m_{first} is beyond"):
        MarchenkoPastur().moments(1000)
    sc = Semicircle(4.0).moments(400)  # m_{2j} = 4^j Catalan(j): beyond float64 from 2j = 2·first' on
    assert np.allclose(sc[1::2], [float(4**j * catalan[j - 1]) for j in range(1, 201)], rtol=1e-14, atol=0)
    with pytest.raises(NumericalError, match="m_2 is beyond"):
        MarchenkoPastur(variance=1e300).moments(3)
    with pytest.raises(NumericalError, match="m_2 is beyond"):
        Semicircle(center=1e300).moments(4)
    lam = Fraction(1e-3)  # the float's exact value
    n = 600  # m_600 of MP(1e−3) is ~1e16 although the Narayana numbers exceed 1e300
    exact = sum(comb(n, r) * comb(n, r - 1) // n * lam ** (r - 1) for r in range(1, n + 1))
    assert np.isclose(MarchenkoPastur(1e-3).moments(n)[-1], float(exact), rtol=1e-11, atol=0)
    v, c = Fraction(1e-6), Fraction(1)
    n = 1200  # Semicircle(1e−6, center 1): m_n = Σ_j C(n, 2j) Catalan(j) v^j c^{n−2j} ≈ e^{n v}…
    exact = sum(comb(n, 2 * j) * (comb(2 * j, j) // (j + 1)) * v**j * c ** (n - 2 * j) for j in range(n // 2 + 1))
    assert np.isclose(Semicircle(1e-6, 1.0).moments(n)[-1], float(exact), rtol=1e-12, atol=0)


def test_constant_density_is_broadcast_and_shapes_are_checked():
    """ρ = 1 on [0, 1]: moments 1/2, 1/3; a density returning the wrong shape is refused."""
    law = DensityLaw(lambda x: 1.0, (0, 1))
    assert np.allclose(law.moments(2), [1 / 2, 1 / 3], rtol=1e-13)
    assert np.array_equal(law.density(np.array([0.5, 2.0])), [1.0, 0.0])
    with pytest.raises(InputError, match="vectorised"):
        DensityLaw(lambda x: np.ones(3), (0, 1))


@pytest.mark.parametrize("call,kind,needle", [
    (lambda: Factor(MarchenkoPastur(), power=0), HyperParameterError, "Factor power"),
    (lambda: free_cumulants("ab"), InputError, "real numbers"),
    (lambda: free_cumulants(np.array([])), InputError, "empty"),
    (lambda: moments_from_s(np.array([])), InputError, "empty"),
    (lambda: moments_from_s(np.array([0.0, 1.0])), InputError, "non-zero"),
    (lambda: moments_from_free_cumulants(np.array([np.nan])), InputError, "NaN"),
    (lambda: jacobian_spectrum("tanh", 2, 1e-300), HyperParameterError, "sigma_w must"),
    (lambda: jacobian_spectrum("tanh", 2, 1e300), HyperParameterError, "sigma_w must"),
    (lambda: jacobian_spectrum("tanh", 2, 1.0, 1e300), HyperParameterError, "sigma_b must"),
    (lambda: jacobian_spectrum("tanh", 2, 1e-20), HyperParameterError, "upper edge"),
    (lambda: jacobian_spectrum("tanh", 2, 1.0, q0=1e300), HyperParameterError, "smaller q0"),
    (lambda: MarchenkoPastur(1e300, 1e10), HyperParameterError, "too large for float64"),
])
def test_extreme_inputs_are_named_errors(call, kind, needle):
    with pytest.raises(kind, match=needle):
        call()
