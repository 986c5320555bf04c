"""Distances ``E[(φ(u) − φ(v))²]`` of Gaussian pairs (:mod:`netsor.activations.distance`) and of inputs
(:func:`netsor.interpret.infinite.data_distance`) against 50-digit references: values accurate relative
to themselves at angles down to 1e-9, and bounds that hold the true value when the arguments err."""

from fractions import Fraction

import mpmath
import numpy as np
import pytest

from netsor.activations import activation
from netsor.activations.distance import angle
from netsor.activations.registry import from_ufunc
from netsor.interpret.infinite import data_distance

#: (activation, slope above 0, slope below 0) of the piecewise-linear ones; step and sign are jumps
PIECEWISE = [("relu", 1.0, 0.0), ("leaky_relu", 1.0, 0.2), ("abs", 1.0, -1.0), ("identity", 1.0, 1.0)]
JUMPS = [("step", 0.0, 1.0), ("sign", -1.0, 1.0)]  # (value below, value above)


def _act(name):
    if name == "leaky_relu":
        return activation("leaky_relu", alpha=0.2)
    if name == "sign":
        return from_ufunc(np.sign)
    return activation(name)


def _reference(a, b, theta, name):
    """``E[(φ(u) − φ(v))²]`` at ``Var u = a``, ``Var v = b`` and angle θ, as ``E φ(u)² + E φ(v)² − 2 E φ(u)φ(v)``
    with the arc-cosine kernel (Cho & Saul) in 50 digits — not the distance form under test."""
    with mpmath.workdps(50):
        a, b, t = mpmath.mpf(a), mpmath.mpf(b), mpmath.mpf(theta)
        root = mpmath.sqrt(a * b)
        if name in dict((n, 0) for n, *_ in JUMPS):
            low, high = dict((n, (lo, hi)) for n, lo, hi in JUMPS)[name]
            same = (mpmath.pi - t) / (2 * mpmath.pi)  # P(u > 0, v > 0) = P(u < 0, v < 0)
            differ = t / (2 * mpmath.pi)
            cross = (low * low + high * high) * same + 2 * low * high * differ
            return float((low * low + high * high) - 2 * cross)
        above, below = dict((n, (p, q)) for n, p, q in PIECEWISE)[name]
        beta, gamma = mpmath.mpf(below), mpmath.mpf(above) - mpmath.mpf(below)
        c = root * mpmath.cos(t)
        k1 = root * (mpmath.sin(t) + (mpmath.pi - t) * mpmath.cos(t)) / (2 * mpmath.pi)
        cross = (beta * beta + beta * gamma) * c + gamma * gamma * k1
        square = beta * beta + beta * gamma + gamma * gamma / 2
        return float(square * (a + b) - 2 * cross)


def _pair(a, b, theta):
    """``D = a + b − 2√(ab) cos θ`` rounded once from 50 digits."""
    with mpmath.workdps(50):
        return float(mpmath.mpf(a) + b - 2 * mpmath.sqrt(mpmath.mpf(a) * b) * mpmath.cos(theta))


ANGLES = [1e-9, 1e-7, 1e-4, 0.05, 0.3, 1.0, 2.0, 3.0, np.pi - 1e-6]


@pytest.mark.parametrize("name", [n for n, *_ in PIECEWISE + JUMPS])
def test_distances_are_accurate_relative_to_themselves_at_tiny_angles(name):
    """Exact float arguments (no error bounds): the value within its rounding bound of the 50-digit reference,
    and that bound a few ulps of the value — at θ = 1e-9 too, where ``a + b − 2c`` keeps no digit. (Variances
    that differ by more than ~θ leave θ below the rounding of D: ``D − (√a − √b)²`` cancels.)"""
    act = _act(name)
    rng = np.random.default_rng(3)
    for theta in ANGLES:
        a = rng.uniform(0.3, 3.0)
        b = a * (1.0 + min(theta, 1.0) * rng.uniform(-0.5, 0.5))
        D = _pair(a, b, theta)
        ang = angle(np.array([a]), 0.0, np.array([b]), 0.0, np.array([D]), 0.0)
        with mpmath.workdps(50):  # the angle of the rounded arguments
            s = (mpmath.sqrt(a) - mpmath.sqrt(b)) ** 2
            half = max(D - s, 0) / (4 * mpmath.sqrt(mpmath.mpf(a) * b))
            true_theta = float(2 * mpmath.asin(mpmath.sqrt(min(half, 1))))
        assert ang.lo[0] <= true_theta <= ang.hi[0]
        # rounding: a few ulps of θ, and of 2/(π − θ) near anti-parallel (arcsin's slope at 1)
        assert ang.width()[0] <= 32 * np.finfo(float).eps * (true_theta + 2.0 / (np.pi - true_theta))
        value, err = act.distance_kernel(np.array([a]), 0.0, np.array([b]), 0.0, np.array([D]), 0.0, ang)
        ref = _reference(a, b, true_theta, name)
        assert abs(value[0] - ref) <= err[0]
        if theta <= 1.0:  # (near anti-parallel the angle itself is ill-conditioned)
            assert err[0] <= 1e-13 * ref


@pytest.mark.parametrize("name", [n for n, *_ in PIECEWISE + JUMPS])
def test_distance_bounds_hold_the_true_value_when_the_arguments_err(name):
    """Arguments off the truth by up to their bounds (relative 1e-10 of the variances and of the distance): the
    true angle lies in the interval and the true distance within the bound, for every sign of the errors."""
    act = _act(name)
    rng = np.random.default_rng(4)
    for theta in ANGLES:
        a, b = rng.uniform(0.3, 3.0, 2)
        D = _pair(a, b, theta)
        da, db, dD = 1e-10 * a, 1e-10 * b, 1e-10 * D
        for sa, sb, sd in rng.choice([-1.0, 1.0], size=(6, 3)):
            got = [np.array([x + s * dx]) for x, s, dx in ((a, sa, da), (b, sb, db), (D, sd, dD))]
            ang = angle(got[0], da, got[1], db, got[2], dD)
            assert ang.lo[0] <= theta <= ang.hi[0]
            value, err = act.distance_kernel(got[0], da, got[1], db, got[2], dD, ang)
            assert abs(value[0] - _reference(a, b, theta, name)) <= err[0]


def test_an_angle_whose_variance_may_vanish_is_anything():
    ang = angle(np.array([1e-20]), 1e-19, np.array([1.0]), 0.0, np.array([1.0]), 0.0)
    assert ang.lo[0] == 0.0 and ang.hi[0] == np.pi


def test_input_distances_keep_their_digits_for_inputs_a_perturbation_apart():
    """``‖x − x'‖²/d`` of inputs 1e-9 apart from the differences (the Gram form keeps ~1e-7 of it), exact to
    its bound against rational arithmetic, and the Gram form's bound holding elsewhere."""
    rng = np.random.default_rng(5)
    A = rng.standard_normal((4, 7))
    B = np.vstack([A[0] + 1e-9 * rng.standard_normal(7), rng.standard_normal((2, 7))])
    D, dD = data_distance(A, B)
    for i in range(4):
        for j in range(3):
            exact = sum((Fraction(x) - Fraction(y)) ** 2 for x, y in zip(A[i], B[j], strict=True)) / 7
            assert abs(Fraction(D[i, j]) - exact) <= Fraction(dD[i, j])
    assert dD[0, 0] <= 1e-14 * D[0, 0]
