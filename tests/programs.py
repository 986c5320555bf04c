"""Programs shared by several test files."""

from types import SimpleNamespace

import netsor


def weight_sharing(scale: float = 1.0) -> SimpleNamespace:
    """The core example: a = W relu(g), b = W erf(g) with one W, c = relu(a) + b read out.

    ``scale`` multiplies σ_W (a deliberately wrong sampler for power checks). Returns the
    program and its vectors as attributes ``p, n, g, W, a, b, c``.
    """
    p = netsor.Program()
    n = p.dim("n")
    g = p.input(n, sigma=1.0, bias=0.1)
    W = p.matrix(n, n, sigma=scale * 2**0.5)
    a = W @ netsor.relu(g)
    b = W @ netsor.erf(g)
    c = netsor.relu(a) + b
    p.readout(c, sigma=1.0, bias=0.0)
    return SimpleNamespace(p=p, n=n, g=g, W=W, a=a, b=b, c=c)
