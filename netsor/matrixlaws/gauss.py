"""Golub–Welsch compression of a discrete measure to its Gauss rule.

Gaussian expectations ``E f(h)`` themselves come from the library's engine
(:func:`netsor.gaussian.expect_1d`, :func:`netsor.gaussian.gaussian_rule`, panels split at
``Activation.kinks``); this module only shrinks a many-node rule to a few nodes with the
same low-order moments, which keeps the free-probability solver's cost low.
"""

from __future__ import annotations

import numpy as np

Array = np.ndarray


def gauss_rule(x: Array, w: Array, n: int) -> tuple[Array, Array]:
    """The ``n``-point Gauss rule of the discrete measure ``Σ_i w_i δ_{x_i}``.

    Stieltjes procedure (three-term recurrence of the orthonormal polynomials, inner products
    on the given nodes) and Golub–Welsch (eigen-decomposition of the Jacobi matrix). The rule
    integrates polynomials of degree ``≤ 2n − 1`` exactly against the measure; it is returned
    unchanged when the measure has at most ``n`` distinct nodes (equal nodes are merged).
    Returns ``(nodes, weights)``, shape ``(min(n, distinct nodes),)``.
    """
    x, inverse = np.unique(np.asarray(x, dtype=float), return_inverse=True)
    w = np.bincount(inverse.ravel(), weights=np.asarray(w, dtype=float).ravel(), minlength=x.size)
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
