"""Residual network with one-layer residual branches."""

from __future__ import annotations

from netsor.activations import Activation
from netsor.activations import activation as get_activation
from netsor.ir.program import Program
from netsor.validate import check_count
from netsor.zoo.naming import number


def resnet(blocks: int, activation: str | Activation = "relu", sigma_w: float = 1.0,
           sigma_b: float = 0.0) -> Program:
    """``g = U x + b``; each block ``g ← g + W φ(g) + b`` (fresh ``W``, ``b``);
    readout ``y = vᵀ φ(g) / √n + b_v``.

    Weights ``N(0, sigma_w²/fan_in)``, biases ``N(0, sigma_b²)``, readout
    ``(sigma_w, sigma_b)`` as in :func:`netsor.zoo.mlp`.
    """
    blocks = check_count(blocks, "blocks", minimum=0)
    act = get_activation(activation)
    p = Program(f"resnet(blocks={blocks}, {act.name}, sigma_w={number(sigma_w)}, sigma_b={number(sigma_b)})")
    n = p.dim("n")
    g = p.input(n, sigma=sigma_w, bias=sigma_b)
    for _ in range(blocks):
        branch = p.matrix(n, n, sigma=sigma_w) @ act(g)
        g = g + branch
        if sigma_b > 0:
            g = g + p.bias(n, sigma_b)
    p.readout(act(g), sigma=sigma_w, bias=sigma_b)
    return p
