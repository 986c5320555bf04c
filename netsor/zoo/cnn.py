"""One-dimensional convolutional network: one vector per position, one matrix per filter tap."""

from __future__ import annotations

from functools import reduce
from operator import add

from netsor.activations import Activation
from netsor.activations import activation as get_activation
from netsor.errors import HyperParameterError
from netsor.ir.program import Program
from netsor.ir.variables import Vector
from netsor.validate import check_choice, check_count, check_sigma
from netsor.zoo.naming import number

PADDINGS = ("circular", "same")
POOLS = ("flatten", "gap")


def conv_taps(position: int, length: int, filter_size: int, padding: str) -> list[tuple[int, int]]:
    """``(tap, source position)`` pairs feeding output ``position`` of a stride-1 convolution.

    Tap ``t`` reads position ``position + t − (filter_size − 1) // 2`` (``lax.conv``'s
    cross-correlation with ``SAME`` padding, as Neural Tangents): wrapped modulo ``length``
    for ``"circular"``, left out where it falls outside the sequence for ``"same"`` (zero
    padding contributes nothing).
    """
    low = (filter_size - 1) // 2
    taps = []
    for t in range(filter_size):
        source = position + t - low
        if padding == "circular":
            taps.append((t, source % length))
        elif 0 <= source < length:
            taps.append((t, source))
    return taps


def cnn(depth: int, activation: str | Activation = "relu", sigma_w: float = 1.0, sigma_b: float = 0.0,
        filter_size: int = 3, padding: str = "circular", pool: str = "flatten", *, length: int | None = None
        ) -> Program:
    """``depth`` convolutional layers (stride 1, ``filter_size`` taps, ``n`` channels) on sequences
    of ``length`` positions, then a pooling and a Dense readout with one output per input.

    Inputs ``X`` have shape ``(B, length, C)`` (position ``i`` is the data step ``i``; the data
    dim is the ``C`` input channels). ``length`` (keyword, required) is fixed when the program is
    built, because the program has vectors per position; inputs with another number of positions
    are refused (as for any program with steps). Every position ``i``
    has its own vectors; layer ``l`` has one matrix ``W_t`` per tap, shared by all positions, and one
    bias shared by all positions::

        g¹_i = Σ_t U_t x_{i+t−c} + b¹,    gˡ⁺¹_i = Σ_t Wˡ_t φ(gˡ_{i+t−c}) + bˡ⁺¹,   c = (filter_size − 1) // 2,

    the sum over the taps whose position exists (``padding="same"``: zero padding) or taken
    modulo ``length`` (``"circular"``). Weights are ``N(0, sigma_w²/(filter_size·fan_in))`` even
    at the borders of ``"same"`` padding, biases ``N(0, sigma_b²)``. Readout (``pool``):

    * ``"flatten"``: ``y = Σ_i v_iᵀ φ(g_i) / √(length·n) + b_v`` (:meth:`Program.readout_concat`);
    * ``"gap"``: ``y = vᵀ (Σ_i φ(g_i) / length) / √n + b_v`` (global average pooling);

    with ``v ~ N(0, sigma_w²)``, ``b_v ~ N(0, sigma_b²)``. This is Neural Tangents'
    ``stax.serial(*[Conv(n, (filter_size,), padding=P, W_std=sigma_w, b_std=sigma_b), φ] * depth,
    Flatten() | GlobalAvgPool(), Dense(1, W_std=sigma_w, b_std=sigma_b))`` with P ``"CIRCULAR"``
    or ``"SAME"`` and ``parameterization="ntk"`` (NNGP and NTK).
    """
    depth = check_count(depth, "depth")
    if length is None:
        raise HyperParameterError("cnn needs length=L, the number of positions of its inputs X (shape (B, L, C)): "
                                  "the program has one vector per position, and circular padding wraps at L")
    length = check_count(length, "length (positions of the input sequences)")
    filter_size = check_count(filter_size, "filter_size")
    padding = check_choice(padding, "padding", PADDINGS)
    pool = check_choice(pool, "pool", POOLS)
    sigma_w = check_sigma(sigma_w, "sigma_w")
    sigma_b = check_sigma(sigma_b, "sigma_b")
    act = get_activation(activation)
    p = Program(f"cnn(depth={depth}, length={length}, {act.name}, sigma_w={number(sigma_w)}, "
                f"sigma_b={number(sigma_b)}, filter_size={filter_size}, padding={padding}, pool={pool})")
    n = p.dim("n")
    tap_sigma = sigma_w / filter_size**0.5
    inputs: list[Vector] = [p.data(step=i) for i in range(length)]
    for layer in range(depth):
        in_dim = p.data_dim if layer == 0 else n
        prefix = "U" if layer == 0 else f"W{layer}_"
        taps = [p.matrix(n, in_dim, tap_sigma, name=f"{prefix}{t}") for t in range(filter_size)]
        bias = p.bias(n, sigma_b) if sigma_b > 0 else None
        pre = []
        for i in range(length):
            g = reduce(add, (taps[t] @ inputs[j] for t, j in conv_taps(i, length, filter_size, padding)))
            pre.append(g if bias is None else g + bias)
        inputs = [act(g) for g in pre]
    if pool == "flatten":
        p.readout_concat(*inputs, sigma=sigma_w, bias=sigma_b)
    else:
        p.readout(reduce(add, inputs) * (1.0 / length), sigma=sigma_w, bias=sigma_b)
    return p
