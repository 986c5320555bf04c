"""Multi-layer perceptron with LayerNorm before every nonlinearity (NetsorK)."""

from __future__ import annotations

from netsor.activations import Activation
from netsor.activations import activation as get_activation
from netsor.ir.program import Program
from netsor.layers import layernorm
from netsor.validate import check_count


def layernorm_mlp(depth: int, activation: str | Activation = "relu", sigma_w: float = 1.0,
                  sigma_b: float = 0.0) -> Program:
    """As :func:`netsor.zoo.mlp`, with LayerNorm applied to every pre-activation before φ:
    ``g¹ = U x + b¹``, ``gˡ⁺¹ = Wˡ φ(LN(gˡ)) + bˡ⁺¹``, readout ``y = vᵀ φ(LN(g^depth)) / √n + b_v``.

    Neural Tangents' ``stax.serial(Dense, LayerNorm, φ, …, Dense(1))`` with
    ``(W_std, b_std) = (sigma_w, sigma_b)`` everywhere (LayerNorm: population standard deviation
    over the width, no epsilon).
    """
    depth = check_count(depth, "depth")
    act = get_activation(activation)
    p = Program(f"layernorm_mlp(depth={depth}, {act.name}, sigma_w={sigma_w:g}, sigma_b={sigma_b:g})")
    n = p.dim("n")
    g = p.input(n, sigma=sigma_w, bias=sigma_b)
    for _ in range(depth - 1):
        g = p.matrix(n, n, sigma=sigma_w) @ act(layernorm(g))
        if sigma_b > 0:
            g = g + p.bias(n, sigma_b)
    p.readout(act(layernorm(g)), sigma=sigma_w, bias=sigma_b)
    return p
