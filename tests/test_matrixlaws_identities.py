"""Closed-form identities of the matrix-laws subpackage, validation and the public API.

References are independent of the code under test: closed forms (Catalan, Narayana, Fuss–Catalan,
free projections), :func:`scipy.integrate.quad` for Gaussian expectations.
"""

import ast
import inspect
import warnings
from math import comb
from pathlib import Path

import numpy as np
import pytest
from references import quad_expect
from scipy import integrate, optimize

from netsor.activations import activation
from netsor.errors import HyperParameterError, InputError, NetsorError
from netsor.matrixlaws import (
    DiscreteLaw,
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
    """ReLU at σ_w = √2, σ_b = 0: every q is fixed (q* reported as nan), χ = 1, the law does not
    depend on q0, and the product of the Bernoulli(½) D² laws keeps the atom ½ at 0."""
    law = jacobian_spectrum("relu", 5, np.sqrt(2.0))
    assert np.isnan(law.q_star)
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
