"""Closed-form identities of the matrix-laws subpackage."""

import warnings
from math import comb

import numpy as np
import pytest

from netsor.errors import HyperParameterError, InputError, NetsorError
from netsor.matrixlaws import (
    DiscreteLaw,
    FussCatalan,
    MarchenkoPastur,
    Semicircle,
    esd,
    free_additive_convolution,
    free_cumulants,
    free_multiplicative_convolution,
    jacobian_spectrum,
    moments_from_free_cumulants,
    s_transform,
)


def test_semicircle_catalan_and_cumulants():
    m = Semicircle(1.0).moments(10)
    assert np.allclose(m[1::2], [comb(2 * j, j) / (j + 1) for j in range(1, 6)], atol=0)
    k = free_cumulants(m)
    assert np.allclose(k, [0, 1, 0, 0, 0, 0, 0, 0, 0, 0], atol=1e-12)
    assert np.allclose(moments_from_free_cumulants(k), m, atol=1e-9)


@pytest.mark.parametrize("lam", [0.3, 1.0, 2.5])
def test_marchenko_pastur_narayana_and_mass(lam):
    law = MarchenkoPastur(lam, 1.0)
    nar = [sum(comb(j, r) * comb(j, r - 1) / j * lam ** (r - 1) for r in range(1, j + 1))
           for j in range(1, 7)]
    assert np.allclose(law.moments(6), nar, rtol=1e-12)
    assert np.isclose(law.cdf(law.support[1] + 1), 1.0)
    assert np.isclose(free_cumulants(law.moments(5))[0], 1.0)  # free Poisson: κ_n = λ^{n−1}
    assert np.allclose(free_cumulants(law.moments(5)), lam ** np.arange(5), rtol=1e-10)


def test_semicircle_plus_semicircle_is_semicircle():
    s = free_additive_convolution(Semicircle(1.0), Semicircle(2.0))
    target = Semicircle(3.0)
    assert np.allclose(s.moments(8), target.moments(8), atol=1e-10)
    x = np.linspace(-3.3, 3.3, 41)
    assert np.max(np.abs(s.density(x) - target.density(x))) < 1e-6
    grid = np.linspace(-4, 4, 101)
    assert np.max(np.abs(s.cdf(grid) - target.cdf(grid))) < 1e-3


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
    assert np.allclose(s_transform(MarchenkoPastur(0.5, 2.0), w), 1 / (2.0 * (1 + 0.5 * w)),
                       rtol=1e-8)


def test_atoms_by_belinschi_rule():
    b = DiscreteLaw([0.0, 1.0], [0.3, 0.7])
    law = free_multiplicative_convolution(b, b)
    loc, mass = law.atoms
    assert np.allclose(loc, [0.0, 1.0]) and np.allclose(mass, [0.3, 0.4])
    assert np.isclose(law.cdf(2.0), 1.0, atol=2e-3)


@pytest.mark.parametrize("depth", [1, 4, 20])
def test_linear_jacobian_is_fuss_catalan_and_first_moment_is_chi_power(depth):
    law = jacobian_spectrum("identity", depth, 1.3)
    fc = FussCatalan(depth, 1.3**2)
    assert np.allclose(law.moments(6), fc.moments(6), rtol=1e-10)
    xx = np.linspace(0, fc.support[1], 20001)
    w1 = np.trapezoid(np.abs(law.cdf(xx) - fc.cdf(xx)), xx)
    assert w1 < 0.005 * law.mean


@pytest.mark.parametrize("act,sw,sb", [("tanh", 1.2, 0.1), ("relu", 1.3, 0.2),
                                        ("hard_tanh", 1.1, 0.05), ("erf", 1.5, 0.0)])
def test_first_moment_is_chi_to_the_depth(act, sw, sb):
    law = jacobian_spectrum(act, 6, sw, sb)
    assert np.isclose(law.moments(1)[0], law.chi**6, rtol=1e-12)
    assert np.isclose(law.moments(1)[0], np.prod(law.chi_layers), rtol=1e-12)


def test_relu_critical_law_independent_of_q_and_atom_at_zero():
    law = jacobian_spectrum("relu", 5, np.sqrt(2.0))
    assert np.isnan(law.q_star)
    assert np.isclose(law.chi, 1.0, rtol=1e-12)
    loc, mass = law.atoms
    assert np.allclose(loc, [0.0]) and np.allclose(mass, [0.5])
    other = jacobian_spectrum("relu", 5, np.sqrt(2.0), q0=7.0)
    assert np.allclose(other.moments(5), law.moments(5), rtol=1e-12)


def test_q0_uses_each_layers_variance():
    law = jacobian_spectrum("tanh", 3, 1.5, 0.1, q0=2.0)
    q = law.q
    assert np.isclose(q[0], 1.5**2 * 2.0 + 0.01)
    assert not np.allclose(q, q[0])
    assert np.isclose(law.moments(1)[0], np.prod(law.chi_layers), rtol=1e-12)


def test_fixed_point_accuracy_relu_with_bias():
    law = jacobian_spectrum("relu", 2, 1.2, 0.5)
    assert np.isclose(law.q_star, 0.25 / (1 - 1.44 / 2), rtol=1e-12)


@pytest.mark.parametrize("call", [
    lambda: jacobian_spectrum("nope", 3, 1.0),
    lambda: jacobian_spectrum("tanh", 0, 1.0),
    lambda: jacobian_spectrum("tanh", 3, -1.0),
    lambda: jacobian_spectrum("tanh", 3, 1.0, weights="uniform"),
    lambda: jacobian_spectrum("step", 3, 1.0),
    lambda: Semicircle(-1.0),
    lambda: MarchenkoPastur(0.0),
    lambda: esd([1.0, np.nan]),
    lambda: DiscreteLaw([1.0, 2.0], [0.5, 0.2]),
    lambda: free_multiplicative_convolution(Semicircle(1.0), MarchenkoPastur()),
])
def test_errors_are_netsor_errors(call):
    with pytest.raises(NetsorError):
        call()


def test_error_kinds():
    with pytest.raises(HyperParameterError):
        jacobian_spectrum("tanh", 2, 1.0, weights="uniform")
    with pytest.raises(InputError):
        Semicircle().density([np.inf])


@pytest.mark.parametrize("act,weights,depth", [("tanh", "orthogonal", 8), ("erf", "orthogonal", 8),
                                               ("tanh", "orthogonal", 16), ("tanh", "gaussian", 8)])
def test_smooth_activations_exact_density_without_warnings(act, weights, depth):
    """Regression: the continuation used to jump to other roots of the log system (orthogonal
    tanh/erf raised NumericalError) and emitted RuntimeWarnings during Newton steps."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        law = jacobian_spectrum(act, depth, 1.05, 0.05, weights=weights)
        x, cum = law._cdf_table()
        summary = law.summary()
    assert summary["smoothed_points"] == 0 and abs(law.mass_defect) < 1e-3
    assert np.all(np.isfinite(law.grid[1]))
    # moments of the density grid (midpoint rule on the cdf table) against the exact ones
    mid, w = 0.5 * (x[1:] + x[:-1]), np.diff(cum)
    grid_moments = np.array([np.dot(w, mid**k) for k in (1, 2, 3)])
    assert np.allclose(grid_moments, law.moments(3), rtol=1e-3)


def test_two_free_half_projections_give_the_arcsine_law():
    """ReLU, orthogonal weights, depth 2: D₁²·D₂² with free projections of trace ½ is
    ½ δ₀ + ½ arcsine on [0, σ_w⁴] (P₁P₂P₁ for two free projections of trace ½)."""
    law = jacobian_spectrum("relu", 2, np.sqrt(2.0), weights="orthogonal")
    assert np.allclose(law.moments(6), [0.5 * comb(2 * k, k) for k in range(1, 7)], rtol=1e-12)
    x = 4.0 * np.array([1e-25, 1e-6, 0.01, 0.3, 0.7, 0.99, 0.999999])
    t = x / 4.0
    assert np.allclose(law.density(x), 0.5 / (4.0 * np.pi * np.sqrt(t * (1.0 - t))), rtol=1e-8, atol=0)


def _gauss_legendre(a, b, panels, order=16):
    t, w = np.polynomial.legendre.leggauss(order)
    edges = np.linspace(a, b, panels + 1)
    mid, half = 0.5 * (edges[1:] + edges[:-1]), 0.5 * np.diff(edges)
    return (mid[:, None] + half[:, None] * t).ravel(), (half[:, None] * w).ravel()


def _continuous_mass_and_moments(law, depth):
    """``∫ρ, ∫xρ, …, ∫x⁴ρ`` by Gauss–Legendre in ``log x`` on ``[1e−29 x₊, x₊/2]`` and in
    ``r`` with ``x = x₊(1 − r²/2)`` on ``[x₊/2, x₊]`` (``x₊`` the continuous part's upper edge),
    plus the mass below ``1e−29 x₊`` from the Puiseux series of a Bernoulli product,
    ``ρ(x) x^{1−1/L} = c₀ + c₁ y + c₂ y²``, ``y = x^{1/L}``, fitted at three points."""
    hi = law._continuous_support[1]
    x0 = 1e-29 * hi
    t, wt = _gauss_legendre(np.log(x0), np.log(hi / 2), 40)
    r, wr = _gauss_legendre(0.0, 1.0, 8)
    x = np.concatenate([np.exp(t), hi - 0.5 * hi * r**2])
    w = np.concatenate([wt * np.exp(t), wr * hi * r])
    rho = law.density(x)
    xs = x0 * np.array([1.0, 8.0, 64.0])
    c = np.linalg.solve(np.vander(xs ** (1.0 / depth), 3, increasing=True),
                        law.density(xs) * xs ** (1.0 - 1.0 / depth))
    y0 = x0 ** (1.0 / depth)
    tail = depth * (c[0] * y0 + c[1] * y0**2 / 2 + c[2] * y0**3 / 3)
    return np.array([tail + np.dot(w, rho)] + [np.dot(w, rho * x**j) for j in range(1, 5)])


@pytest.mark.parametrize("act,sw,sb", [("relu", np.sqrt(2.0), 0.0), ("relu", np.sqrt(2.0), 0.1),
                                        ("hard_tanh", 1.05, 0.05)])
@pytest.mark.parametrize("depth", [4, 8, 16])
def test_bernoulli_products_mass_and_moments(act, sw, sb, depth):
    """Orthogonal weights with ReLU or hard-tanh: every factor is an atom law and nothing smooths
    the product. Regression: the solver used to carry zG, whose difference from the atom mass
    at 0 holds the density near 0 (1.2 % of the mass was lost for ReLU at depth 4). Density
    integral plus atoms = 1 and moments = the exact S-series moments, both to 1e−6."""
    law = jacobian_spectrum(act, depth, sw, sb, weights="orthogonal")
    loc, mass = law.atoms
    cont = _continuous_mass_and_moments(law, depth)
    assert abs(cont[0] + mass.sum() - 1.0) < 1e-6
    moments = cont[1:] + np.array([np.sum(mass * loc**j) for j in range(1, 5)])
    assert np.allclose(moments, law.moments(4), rtol=1e-6, atol=0)
    assert law.smoothed_points == 0 and abs(law.mass_defect) < 1e-3


@pytest.mark.parametrize("act,sw,sb", [("relu", np.sqrt(2.0), 0.0), ("hard_tanh", 1.05, 0.05)])
@pytest.mark.parametrize("depth", [3, 7, 16])
def test_bernoulli_product_moments_by_lagrange_inversion(act, sw, sb, depth):
    """``⊠^L Bernoulli(p)``: ``χ(z) = z(1 + z)^{L−1}/(p + z)^L``, so by Lagrange inversion
    ``m_k = (1/k)[z^{k−1}] (p + z)^{Lk} (1 + z)^{−(L−1)k}`` (independent of the S-series code);
    orthogonal weights scale the law by ``σ_w^{2L}``."""
    law = jacobian_spectrum(act, depth, sw, sb, weights="orthogonal")
    p = 1.0 - law.atoms[1][0]  # Bernoulli parameter of φ'² (the product keeps the atom at 0)
    n = depth - 1
    exact = [sum(comb(depth * k, j) * p ** (depth * k - j) * (-1) ** (k - 1 - j)
                 * comb(n * k + k - 2 - j, k - 1 - j) for j in range(k)) / k * sw ** (2 * depth * k)
             for k in range(1, 7)]
    assert np.allclose(law.moments(6), exact, rtol=1e-10, atol=0)
