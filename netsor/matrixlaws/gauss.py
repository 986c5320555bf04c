"""Gaussian expectations ``E f(h)``, ``h ~ N(0, q)``, for (possibly kinked) activations.

Composite Gauss–Legendre quadrature on ``[−10√q, 10√q]``: panels of length at
most ``min(1, √q)`` (so that poles of ``tanh`` at ``±iπ/2`` or the Gaussian factor
do not slow convergence), split exactly at the kinks of piecewise activations
(``relu``, ``hard_tanh``, ...), 16 nodes per panel: ``E φ(h)²`` is accurate to
about 1e−14 for every registry activation, kinked or not.
"""

from __future__ import annotations

import numpy as np

from netsor.activations import Activation

Array = np.ndarray
_KINKS = {"relu": (0.0,), "leaky_relu": (0.0,), "elu": (0.0,), "abs": (0.0,), "step": (0.0,),
          "hard_tanh": (-1.0, 1.0)}
_CUT = 10.0


def kinks(act: Activation) -> tuple[float, ...]:
    """Points where ``φ'`` jumps (empty for smooth activations and unknown custom ones)."""
    return _KINKS.get(act.name, ())


def gaussian_panels(q: float, breaks: tuple[float, ...], order: int = 16,
                    cut: float = _CUT) -> tuple[Array, Array, Array]:
    """Nodes ``h``, weights (the N(0, q) measure) and panel index for composite Gauss–Legendre.

    Returns arrays of shape ``(n_panels · order,)``; the panels never straddle ``breaks``.
    """
    sd = np.sqrt(q)
    lo, hi = -cut * sd, cut * sd
    inner = [b for b in sorted(breaks) if lo < b < hi]
    edges = [lo, *inner, hi]
    panel_len = min(1.0, sd)
    pieces = []
    for a, b in zip(edges[:-1], edges[1:], strict=True):
        pieces.append(np.linspace(a, b, int(np.ceil((b - a) / panel_len)) + 1))
    bounds = np.concatenate([p[:-1] for p in pieces] + [[hi]])
    x, w = np.polynomial.legendre.leggauss(order)
    mid, half = (bounds[1:] + bounds[:-1]) / 2.0, (bounds[1:] - bounds[:-1]) / 2.0
    h = (mid[:, None] + half[:, None] * x).ravel()
    weight = (half[:, None] * w).ravel() * np.exp(-0.5 * h * h / q) / np.sqrt(2.0 * np.pi * q)
    panel = np.repeat(np.arange(mid.size), order)
    return h, weight, panel


def gaussian_expectation(f, q: float, breaks: tuple[float, ...] = ()) -> float:
    """``E f(h)`` for ``h ~ N(0, q)`` (``f`` vectorised); ``f(0)`` when ``q = 0``."""
    if q == 0.0:
        return float(np.asarray(f(np.zeros(1)))[0])
    h, w, _ = gaussian_panels(q, breaks)
    return float(np.dot(w, f(h)))


def gauss_rule(x: Array, w: Array, n: int) -> tuple[Array, Array]:
    """The ``n``-point Gauss rule of the discrete measure ``Σ_i w_i δ_{x_i}``.

    Stieltjes procedure (three-term recurrence of the orthonormal polynomials, inner products
    on the given nodes) and Golub–Welsch (eigen-decomposition of the Jacobi matrix). The rule
    integrates polynomials of degree ``≤ 2n − 1`` exactly against the measure; it is returned
    unchanged when it has at most ``n`` nodes. Returns ``(nodes, weights)``, shape ``(n,)``.
    """
    if x.size <= n:
        return x, w
    alpha, beta = np.zeros(n), np.zeros(n - 1)
    p_prev, p = np.zeros_like(x), np.full_like(x, 1.0 / np.sqrt(w.sum()))
    for k in range(n):
        alpha[k] = np.dot(w, x * p * p)
        if k == n - 1:
            break
        q = (x - alpha[k]) * p - (beta[k - 1] * p_prev if k else 0.0)
        beta[k] = np.sqrt(np.dot(w, q * q))
        p_prev, p = p, q / beta[k]
    nodes, vectors = np.linalg.eigh(np.diag(alpha) + np.diag(beta, 1) + np.diag(beta, -1))
    return nodes, vectors[0] ** 2 * w.sum()
