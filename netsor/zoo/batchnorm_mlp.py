"""Multi-layer perceptron with BatchNorm across a batch before every nonlinearity."""

from __future__ import annotations

from netsor.activations import Activation
from netsor.activations import activation as get_activation
from netsor.errors import HyperParameterError
from netsor.ir.program import Program
from netsor.layers import batchnorm
from netsor.validate import check_count, check_sigma
from netsor.zoo.naming import number


def batchnorm_mlp(depth: int, activation: str | Activation = "relu", sigma_w: float = 1.0, sigma_b: float = 0.0,
                  sigma_u: float = 1.0, batch: int = 4) -> Program:
    """An MLP whose pre-activations are batch-normalised: one program input is a whole batch,
    ``X`` of shape ``(N, batch, d)`` (read with ``p.data(step=b)``), outputs indexed ``b``.

    ``g¹_b = U x_b + b¹`` (``U`` entries ``N(0, sigma_u²/d)``, bias ``N(0, sigma_b²)`` shared by the
    batch); for ``l = 1..depth``: ``hˡ_b = φ(BN_b(gˡ))`` with ``BN_b(g) = (g_b − ḡ)/s`` across the
    batch (population variance, no epsilon), and ``gˡ⁺¹_b = Wˡ hˡ_b + bˡ⁺¹`` (``W`` entries
    ``N(0, sigma_w²/n)``). Readout ``y_b = v·h^depth_b/√n``, ``v ~ N(0, 1)``, no bias.

    The NNGP kernel is exact (to ``rtol``) for positively homogeneous φ (relu, step, identity,
    abs, leaky_relu), within a batch (one-dimensional integrals) and between batches (N > 1:
    two-dimensional ones); the NTK and other activations by the QMC simulation (``method="qmc"``).
    """
    depth = check_count(depth, "depth")
    batch = check_count(batch, "batch")
    if batch < 2:
        raise HyperParameterError(f"batch must be at least 2 (BatchNorm normalises across it), got {batch}")
    sigma_w, sigma_b, sigma_u = (check_sigma(s, name) for s, name in
                                 ((sigma_w, "sigma_w"), (sigma_b, "sigma_b"), (sigma_u, "sigma_u")))
    act = get_activation(activation)
    p = Program(f"batchnorm_mlp(depth={depth}, {act.name}, sigma_w={number(sigma_w)}, sigma_b={number(sigma_b)}, "
                f"sigma_u={number(sigma_u)}, batch={batch})")
    n = p.dim("n")
    xs = [p.data(step=b) for b in range(batch)]
    U = p.matrix(n, xs[0].dim, sigma=sigma_u)
    gs = [U @ x for x in xs]
    for layer in range(depth):
        if sigma_b > 0:
            bias = p.bias(n, sigma_b)
            gs = [g + bias for g in gs]
        hs = [act(u) for u in batchnorm(gs)]
        if layer < depth - 1:
            W = p.matrix(n, n, sigma=sigma_w)
            gs = [W @ h for h in hs]
    p.readout(*hs, sigma=1.0, bias=0.0)
    return p
