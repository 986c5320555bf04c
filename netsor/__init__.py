"""netsor — tensor programs at finite width, at infinite width, and coupled.

A Netsor program (:class:`Program`) describes a neural architecture once; the interpreters run
it at finite width (:func:`sample`, :func:`run_finite`), at infinite width (:func:`nngp`,
:func:`ntk`, :func:`kernel`, :func:`limit`) and coupled (:func:`coupled`); degenerate MatMul lines:
:func:`degeneracies`, :func:`rewrite_degenerate`. Architectures: :mod:`netsor.zoo`; convergence
statistics: :mod:`netsor.stats`; neural matrix laws: :mod:`netsor.matrixlaws`.
"""

from netsor.activations import (
    Activation,
    abs_,
    activation,
    cos,
    elu,
    erf,
    exp,
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
from netsor.builder import inner, moment, nonlin
from netsor.errors import (
    DimensionError,
    HyperParameterError,
    InputError,
    NetsorError,
    NumericalError,
    ProgramError,
    UnsupportedError,
)
from netsor.interpret.coupled import CoupledRun, coupled
from netsor.interpret.degeneracy import Degeneracy, degeneracies, rewrite_degenerate
from netsor.interpret.empirical_ntk import empirical_ntk
from netsor.interpret.finite import FiniteRun, run_finite, sample
from netsor.interpret.infinite import Limit, limit, nngp
from netsor.interpret.ntk import Kernels, kernel, ntk
from netsor.interpret.simulation import SimulatedLimit
from netsor.ir import Dim, Matrix, Program, Vector
from netsor.layers import attention, batchnorm, layernorm, softmax

__version__ = "0.1.0"

from netsor import matrixlaws, predict, stats, zoo  # noqa: E402  (after the names they use)

__all__ = [
    "__version__", "attention", "batchnorm", "abs_", "activation", "cos", "coupled", "degeneracies", "elu",
    "empirical_ntk", "erf", "exp", "gelu", "hard_tanh", "identity", "inner", "kernel", "layernorm", "leaky_relu",
    "limit", "matrixlaws", "moment", "nngp", "predict", "nonlin", "ntk", "relu", "rewrite_degenerate", "run_finite",
    "sample", "sigmoid", "silu", "sin", "softmax", "softplus", "stats", "step", "swish", "tanh", "zoo", "Activation",
    "CoupledRun", "Degeneracy", "Dim", "DimensionError", "FiniteRun", "HyperParameterError", "InputError", "Kernels",
    "Limit", "Matrix", "NetsorError", "NumericalError", "Program", "ProgramError", "SimulatedLimit", "UnsupportedError",
    "Vector"
]
