"""netsor — tensor programs at finite width, at infinite width, and coupled."""

from netsor.errors import (
    DimensionError,
    HyperParameterError,
    InputError,
    NetsorError,
    NumericalError,
    ProgramError,
    UnsupportedError,
)
from netsor.nonlin import (
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

__version__ = "0.1.0"
