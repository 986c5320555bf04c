"""Expectations of functions of Gaussian vectors, with error bounds (the infinite interpreter's
inner loop): one-dimensional quadrature (:mod:`~netsor.gaussian.quadrature`), pairs of
one-argument functions (:mod:`~netsor.gaussian.pairs`, closed forms of piecewise-linear ones in
:mod:`~netsor.gaussian.piecewise`), functions of several arguments (:mod:`~netsor.gaussian.joint`; cone moments in
:mod:`~netsor.gaussian.orthant`, pairs of separable functions by conditioning in :mod:`~netsor.gaussian.separable`)."""

from netsor.gaussian.joint import JointFunction, point_expectation
from netsor.gaussian.joint import pair_expectation as joint_pair_expectation
from netsor.gaussian.pairs import (
    CoefficientMemo,
    is_elementary,
    mean,
    moments_1d,
    pair_expectation,
    second_moment,
    stein_identity,
)
from netsor.gaussian.quadrature import expect_1d, expect_1d_err, gaussian_rule

__all__ = ["CoefficientMemo", "JointFunction", "expect_1d", "expect_1d_err", "gaussian_rule", "is_elementary",
           "joint_pair_expectation", "mean", "moments_1d", "pair_expectation", "point_expectation",
           "second_moment", "stein_identity"]
