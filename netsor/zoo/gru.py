"""Gated recurrent unit unrolled in time (weight sharing; gates are NonLins of several vectors)."""

from __future__ import annotations

from typing import Any

from scipy import special

from netsor.builder import nonlin
from netsor.ir.program import Program
from netsor.validate import check_count, check_sigma
from netsor.zoo.naming import number


def _gate(u: Any) -> Any:
    """``σ(u) = (1 + erf u)/2``."""
    return 0.5 * (1.0 + special.erf(u))


def gru(steps: int, sigma_u: float = 1.0, sigma_w: float = 1.0, sigma_b: float = 0.0, sigma_v: float = 1.0) -> Program:
    """A GRU with erf gates ``σ(u) = (1 + erf u)/2``, unrolled over ``steps``:

    ``z_t = σ(U_z x_t + W_z h_{t−1} + b_z)``, ``r_t = σ(U_r x_t + W_r h_{t−1} + b_r)``,
    ``ĥ_t = U_h x_t + W_h (h_{t−1} ⊙ r_t) + b_h``, ``h_t = (1 − z_t) ⊙ h_{t−1} + z_t ⊙ erf(ĥ_t)``,
    ``h_0 = 0``; ``U`` entries ``N(0, sigma_u²/d)``, ``W`` entries ``N(0, sigma_w²/n)``, biases
    ``N(0, sigma_b²)``, all shared over time and sequences; readouts ``y_t = v·h_t/√n``
    (``v ~ N(0, sigma_v²)``), no bias. Inputs ``X`` of shape ``(B, T, d)`` with ``T = steps``;
    outputs indexed ``b·steps + t``.

    Finite widths run at the usual speed. In the limit ``h_t`` is a product of gates of correlated
    pre-activations from every earlier step: the expectation engine takes 2 steps (~0.2 s at rtol
    1e-8: the erf gates are smoothed steps of the cone engine) and 3 steps at rtol 1e-4 (~40 s on 4
    sequences: orthants of 5–6 gates by the Genz rule, ``method="expectations"``); from 3 steps on,
    ``netsor.limit(..., method="auto")`` at rtol ≥ 1e-3 simulates the limit by joint randomised QMC
    (:mod:`netsor.interpret.simulation`; 10 steps on 4 sequences: ~1 % bounds in ~35 s on 2 cores —
    pass ``rtol=2e-2``).
    """
    steps = check_count(steps, "steps")
    sigma_u, sigma_w, sigma_b, sigma_v = (check_sigma(s, name) for s, name in (
        (sigma_u, "sigma_u"), (sigma_w, "sigma_w"), (sigma_b, "sigma_b"), (sigma_v, "sigma_v")))
    p = Program(f"gru(steps={steps}, sigma_u={number(sigma_u)}, sigma_w={number(sigma_w)}, sigma_b={number(sigma_b)}, "
                f"sigma_v={number(sigma_v)})")
    n = p.dim("n")
    U = {k: p.matrix(n, p.data_dim, sigma=sigma_u, name=f"U_{k}") for k in "zrh"}
    W = {k: p.matrix(n, n, sigma=sigma_w, name=f"W_{k}") for k in "zrh"}
    b = {k: p.bias(n, sigma_b) for k in "zrh"} if sigma_b > 0 else {}
    states = []
    h = None
    for t in range(steps):
        x = p.data(step=t)
        pre = {k: U[k] @ x for k in "zrh"}
        for k in b:
            pre[k] = pre[k] + b[k]
        if h is None:  # h_0 = 0: h_1 = z_1 ⊙ erf(ĥ_1)
            h = nonlin(lambda zp, hp: _gate(zp) * special.erf(hp), pre["z"], pre["h"], name="gru_state")
        else:
            z_pre = pre["z"] + W["z"] @ h
            r_pre = pre["r"] + W["r"] @ h
            cand = pre["h"] + W["h"] @ nonlin(lambda hv, rp: hv * _gate(rp), h, r_pre, name="reset")
            h = nonlin(lambda zp, hv, cp: (1.0 - _gate(zp)) * hv + _gate(zp) * special.erf(cp), z_pre, h, cand,
                       name="gru_state")
        states.append(h)
    p.readout(*states, sigma=sigma_v, bias=0.0)
    return p

