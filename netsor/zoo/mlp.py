"""Multi-layer perceptron (fully connected network)."""

from __future__ import annotations

from netsor.activations import Activation
from netsor.activations import activation as get_activation
from netsor.ir.program import Program
from netsor.validate import check_count


def mlp(depth: int, activation: str | Activation = "relu", sigma_w: float = 1.0,
        sigma_b: float = 0.0) -> Program:
    """``depth`` hidden nonlinear layers: ``g¹ = U x + b¹``, ``gˡ⁺¹ = Wˡ φ(gˡ) + bˡ⁺¹``,
    readout ``y = vᵀ φ(g^depth) / √n + b_v``.

    Same conventions as Neural Tangents' ``stax.serial(Dense, φ, …, Dense(1))``
    with ``parameterization='ntk'`` and ``(W_std, b_std) = (sigma_w, sigma_b)``
    everywhere: weights ``N(0, sigma_w²/fan_in)``, biases ``N(0, sigma_b²)``.
    """
    depth = check_count(depth, "depth")
    act = get_activation(activation)
    p = Program(f"mlp(depth={depth}, {act.name}, sigma_w={sigma_w:g}, sigma_b={sigma_b:g})")
    n = p.dim("n")
    g = p.input(n, sigma=sigma_w, bias=sigma_b)
    for _ in range(depth - 1):
        g = p.matrix(n, n, sigma=sigma_w) @ act(g)
        if sigma_b > 0:
            g = g + p.bias(n, sigma_b)
    p.readout(act(g), sigma=sigma_w, bias=sigma_b)
    return p
