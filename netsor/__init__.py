"""netsor — tensor programs at finite width, at infinite width, and coupled."""

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
from netsor.errors import (
    DimensionError,
    HyperParameterError,
    InputError,
    NetsorError,
    NumericalError,
    ProgramError,
    UnsupportedError,
)

__version__ = "0.1.0"

from netsor import matrixlaws, zoo
from netsor.builder import nonlin  # noqa: E402  (the function shadows the module name on purpose)
from netsor.interpret.coupled import CoupledRun, coupled  # noqa: E402
from netsor.interpret.finite import FiniteRun, run_finite, sample  # noqa: E402
from netsor.interpret.infinite import Limit, limit, nngp  # noqa: E402
from netsor.ir import Dim, Matrix, Program, Vector  # noqa: E402
