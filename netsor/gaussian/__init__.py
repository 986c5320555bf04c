"""Expectations of functions of Gaussian vectors, with error bounds (the infinite interpreter's inner loop)."""

from netsor.gaussian.engine import (
    CoefficientMemo,
    expect_1d,
    expectation,
    gaussian_rule,
    is_elementary,
    mean,
    pair_expectation,
    stein_identity,
)

__all__ = ["CoefficientMemo", "expect_1d", "expectation", "gaussian_rule", "is_elementary", "mean",
           "pair_expectation", "stein_identity"]
