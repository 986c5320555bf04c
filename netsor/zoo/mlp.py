"""Multi-layer perceptron (fully connected network), optionally with LayerNorm (NetsorK)."""

from __future__ import annotations

from netsor.activations import Activation
from netsor.activations import activation as get_activation
from netsor.ir.program import Program
from netsor.ir.variables import Vector
from netsor.layers import layernorm
from netsor.validate import check_count
from netsor.zoo.naming import number


def mlp(depth: int, activation: str | Activation = "relu", sigma_w: float = 1.0,
        sigma_b: float = 0.0, *, normalise: bool = False) -> Program:
    """``depth`` hidden nonlinear layers: ``g¹ = U x + b¹``, ``gˡ⁺¹ = Wˡ φ(gˡ) + bˡ⁺¹``,
    readout ``y = vᵀ φ(g^depth) / √n + b_v``; with ``normalise``, LayerNorm is applied to every
    pre-activation before φ (:func:`layernorm_mlp`).

    Same conventions as Neural Tangents' ``stax.serial(Dense, φ, …, Dense(1))``
    with ``parameterization='ntk'`` and ``(W_std, b_std) = (sigma_w, sigma_b)``
    everywhere: weights ``N(0, sigma_w²/fan_in)``, biases ``N(0, sigma_b²)``.
    """
    depth = check_count(depth, "depth")
    act = get_activation(activation)
    kind = "layernorm_mlp" if normalise else "mlp"
    p = Program(f"{kind}(depth={depth}, {act.name}, sigma_w={number(sigma_w)}, sigma_b={number(sigma_b)})")
    n = p.dim("n")

    def phi(g: Vector) -> Vector:
        return act(layernorm(g) if normalise else g)

    g = p.input(n, sigma=sigma_w, bias=sigma_b)
    for _ in range(depth - 1):
        g = p.matrix(n, n, sigma=sigma_w) @ phi(g)
        if sigma_b > 0:
            g = g + p.bias(n, sigma_b)
    p.readout(phi(g), sigma=sigma_w, bias=sigma_b)
    return p


def layernorm_mlp(depth: int, activation: str | Activation = "relu", sigma_w: float = 1.0,
                  sigma_b: float = 0.0) -> Program:
    """As :func:`mlp`, with LayerNorm applied to every pre-activation before φ:
    ``g¹ = U x + b¹``, ``gˡ⁺¹ = Wˡ φ(LN(gˡ)) + bˡ⁺¹``, readout ``y = vᵀ φ(LN(g^depth)) / √n + b_v``.

    Neural Tangents' ``stax.serial(Dense, LayerNorm, φ, …, Dense(1))`` with
    ``(W_std, b_std) = (sigma_w, sigma_b)`` everywhere (LayerNorm: population standard deviation
    over the width, no epsilon).
    """
    return mlp(depth, activation, sigma_w, sigma_b, normalise=True)
