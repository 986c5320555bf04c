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
