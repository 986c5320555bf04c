"""Elman recurrent network unrolled in time (weight sharing over steps)."""

from __future__ import annotations

from netsor.activations import Activation
from netsor.activations import activation as get_activation
from netsor.ir.program import Program
from netsor.validate import check_count
from netsor.zoo.naming import number


def rnn(steps: int, activation: str | Activation = "tanh", sigma_w: float = 1.0, sigma_u: float = 1.0,
        sigma_b: float = 0.0, sigma_v: float = 1.0) -> Program:
    """``s_t = φ(W s_{t−1} + U x_t + b)``, ``s_0 = 0``, outputs ``y_t = vᵀ s_t / √n``.

    One ``W`` (``N(0, sigma_w²/n)``), one ``U`` (``N(0, sigma_u²/d)``), one
    ``b`` (``N(0, sigma_b²)``) and one readout ``v`` (``N(0, sigma_v²)``) shared
    by all steps; no readout bias. Inputs ``X`` have shape ``(B, T, d)`` with
    ``T = steps``; outputs are indexed ``b·steps + t``.
    """
    steps = check_count(steps, "steps")
    act = get_activation(activation)
    p = Program(f"rnn(steps={steps}, {act.name}, sigma_w={number(sigma_w)}, sigma_u={number(sigma_u)}, "
                f"sigma_b={number(sigma_b)}, sigma_v={number(sigma_v)})")
    n = p.dim("n")
    U = p.matrix(n, p.data_dim, sigma=sigma_u, name="U")
    W = p.matrix(n, n, sigma=sigma_w, name="W")
    b = p.bias(n, sigma_b) if sigma_b > 0 else None
    states = []
    s = None
    for t in range(steps):
        g = U @ p.data(step=t)
        if s is not None:
            g = g + W @ s
        if b is not None:
            g = g + b
        s = act(g)
        states.append(s)
    p.readout(*states, sigma=sigma_v, bias=0.0)
    return p
