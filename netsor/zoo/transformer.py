"""Causal transformer of the Tensor Programs GP examples (NetsorK: attention and LayerNorm)."""

from __future__ import annotations

from netsor.activations import relu
from netsor.ir.program import Program
from netsor.layers import attention, layernorm
from netsor.validate import check_count, check_real, check_sigma
from netsor.zoo.naming import number


def transformer(layers: int, sigma_u: float = 1.0, sigma_w: float = 1.0, sigma_b: float = 0.0,
                temperature: float = 1.0, tokens: int = 4) -> Program:
    """A causal transformer over sequences of ``tokens`` tokens; inputs ``X`` of shape ``(B, T, d)``
    with ``T = tokens``, outputs indexed ``b·tokens + t``.

    With ``x⁰_t`` the input tokens, each layer l computes ``k_t = Uˡ x^{l−1}_t`` (``U¹`` maps the
    data dim, later ``Uˡ`` are ``n×n``; entries ``N(0, sigma_u²/fan_in)``); scores
    ``k_t·k_j / n / temperature`` for ``j ≤ t``; ``a_t = softmax(scores)``;
    ``z_t = k_t + Σ_j a_tj k_j``; ``h_t = LN(z_t)``;
    ``xˡ_t = LN(W₂ relu(W₁ h_t + b₁) + b₂ + h_t)`` (``W₁, W₂`` entries ``N(0, sigma_w²/n)``, biases
    ``N(0, sigma_b²)``, one bias vector shared by all tokens). Readout per token
    ``y_t = v·x^L_t/√n``, ``v ~ N(0, 1)``, no readout bias. Keys double as queries and values,
    so the scores do not vanish in the limit.
    """
    layers = check_count(layers, "layers")
    tokens = check_count(tokens, "tokens")
    sigma_u, sigma_w, sigma_b = (check_sigma(s, name) for s, name in
                                 ((sigma_u, "sigma_u"), (sigma_w, "sigma_w"), (sigma_b, "sigma_b")))
    temperature = check_real(temperature, "temperature", minimum=1e-12)
    p = Program(f"transformer(layers={layers}, tokens={tokens}, sigma_u={number(sigma_u)}, sigma_w={number(sigma_w)}, "
                f"sigma_b={number(sigma_b)}, temperature={number(temperature)})")
    n = p.dim("n")
    xs = [p.data(step=t) for t in range(tokens)]
    for _ in range(layers):
        U = p.matrix(n, xs[0].dim, sigma=sigma_u)
        ks = [U @ x for x in xs]
        mixed = attention(ks, ks, ks, temperature=temperature, mask="causal")
        hs = [layernorm(k + m) for k, m in zip(ks, mixed, strict=True)]
        W1, W2 = p.matrix(n, n, sigma=sigma_w), p.matrix(n, n, sigma=sigma_w)
        b1 = p.bias(n, sigma_b) if sigma_b > 0 else None
        b2 = p.bias(n, sigma_b) if sigma_b > 0 else None
        xs = []
        for h in hs:
            pre = W1 @ h if b1 is None else W1 @ h + b1
            out = W2 @ relu(pre) + h
            xs.append(layernorm(out if b2 is None else out + b2))
    p.readout(*xs, sigma=1.0, bias=0.0)
    return p
