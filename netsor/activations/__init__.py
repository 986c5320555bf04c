"""Activation registry: φ, φ', kinks and closed-form Gaussian kernels (imports nothing of the IR)."""

from netsor.activations.registry import (
    Activation,
    abs_,
    activation,
    available,
    cos,
    custom,
    elu,
    erf,
    exp,
    gaussian,
    gelu,
    hard_tanh,
    identity,
    leaky_relu,
    relu,
    sigmoid,
    silu,
    sin,
    softplus,
    step,
    swish,
    tanh,
)

__all__ = [
    "Activation", "abs_", "activation", "available", "cos", "custom", "elu", "erf", "exp", "gaussian",
    "gelu", "hard_tanh", "identity", "leaky_relu", "relu", "sigmoid", "silu", "sin", "softplus", "step",
    "swish", "tanh",
]
