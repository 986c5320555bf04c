"""Truncated power series: moments ↔ S-transform ↔ free cumulants.

Conventions. For a probability measure μ with moments ``m_k = ∫ t^k dμ``:

* moment series ``ψ_μ(z) = Σ_{k≥1} m_k z^k``;
* ``χ_μ`` its compositional inverse and the S-transform ``S_μ(z) = χ_μ(z) (1 + z) / z``
  (defined when ``m_1 ≠ 0``); S-transforms of free variables multiply;
* free cumulants ``κ_n`` with ``M(z) = C(z M(z))``, ``M = 1 + ψ``, ``C = 1 + Σ κ_n z^n``;
  the R-transform is ``R(w) = Σ_{n≥1} κ_n w^{n−1}`` and free cumulants add.

Arrays of coefficients are float64 and start at order 0 unless said otherwise.
Everything is exact up to floating-point rounding (no truncation beyond the
requested order).
"""

from __future__ import annotations

import numpy as np

from netsor.errors import HyperParameterError, InputError, NumericalError
from netsor.validate import real_array

Array = np.ndarray


def _mul(a: Array, b: Array, order: int) -> Array:
    """Product of two series, truncated after ``z^order``."""
    return np.convolve(a, b)[: order + 1]


def _compose(f: Array, g: Array, order: int) -> Array:
    """``f(g(z))`` for ``g(0) = 0``, truncated after ``z^order``."""
    out = np.zeros(order + 1)
    out[0] = f[0]
    power = np.zeros(order + 1)
    power[0] = 1.0
    for k in range(1, min(len(f), order + 1)):
        power = _mul(power, g, order)
        out[: len(power)] += f[k] * power
    return out


def reverse(f: Array, order: int) -> Array:
    """Compositional inverse of ``f(z) = Σ_{k≥1} f_k z^k`` (``f_0 = 0``, ``f_1 ≠ 0``).

    Returns the coefficients ``g_0..g_order`` of ``g`` with ``f(g(z)) = z``.
    """
    f = np.asarray(f, dtype=float)
    if f[1] == 0.0:
        raise NumericalError("series reversion needs a non-zero linear coefficient")
    g = np.zeros(order + 1)
    g[1] = 1.0 / f[1]
    for n in range(2, order + 1):
        g[n] = -_compose(f, g, n)[n] / f[1]
    return g


def _check_coefficients(values: Array, what: str) -> Array:
    """``values`` as a non-empty 1-D float64 array of finite numbers, else :class:`InputError`."""
    c = real_array(values, what, ndim=1)
    if c.size == 0:
        raise InputError(f"{what} is empty; pass at least one coefficient")
    return c


def _check_moments(moments: Array) -> Array:
    return _check_coefficients(moments, "moments (m_1..m_K)")


def s_from_moments(moments: Array) -> Array:
    """S-transform coefficients ``s_0..s_{K−1}`` from the moments ``m_1..m_K``.

    Raises :class:`~netsor.errors.HyperParameterError` if ``m_1 = 0`` (no S-transform).
    """
    m = _check_moments(moments)
    if m[0] == 0.0:
        raise HyperParameterError("the S-transform needs a non-zero mean (m_1 ≠ 0)")
    order = m.size
    chi = reverse(np.concatenate([[0.0], m]), order)
    return _mul(chi[1:], np.array([1.0, 1.0]), order - 1)


def moments_from_s(s: Array) -> Array:
    """Moments ``m_1..m_K`` from S-transform coefficients ``s_0..s_{K−1}`` (inverse of
    :func:`s_from_moments`)."""
    s = _check_coefficients(s, "S-transform coefficients (s_0..s_{K-1})")
    if s[0] == 0.0:
        raise InputError("the S-transform's constant term s_0 = 1/m_1 must be non-zero")
    order = s.size
    one_over = (-1.0) ** np.arange(order)  # 1/(1+z)
    chi = np.concatenate([[0.0], _mul(s, one_over, order - 1)])
    return reverse(chi, order)[1:]


def scale_argument(coeffs: Array, kappa: float) -> Array:
    """Coefficients of ``f(κ z)`` given those of ``f(z)``."""
    c = _check_coefficients(coeffs, "series coefficients")
    return c * kappa ** np.arange(c.size)


def free_cumulants(moments: Array) -> Array:
    """Free cumulants ``κ_1..κ_K`` from moments ``m_1..m_K``."""
    m = _check_moments(moments)
    order = m.size
    zm = np.concatenate([[0.0, 1.0], m])  # z M(z), orders 0..K+1
    g = reverse(zm, order + 1)  # inverse of z M(z); C(w) = w / g(w)
    g_over_w = g[1:]  # g(w)/w, orders 0..K, leading coefficient 1
    recip = np.zeros(order + 1)
    recip[0] = 1.0
    # 1 / (g(w)/w) by the recursion of series division
    for n in range(1, order + 1):
        recip[n] = -np.dot(g_over_w[1 : n + 1], recip[n - 1 :: -1][:n])
    return recip[1:]


def moments_from_free_cumulants(kappa: Array) -> Array:
    """Moments ``m_1..m_K`` from free cumulants ``κ_1..κ_K`` (inverse of
    :func:`free_cumulants`)."""
    k = _check_coefficients(kappa, "free cumulants (kappa_1..kappa_K)")
    order = k.size
    c = np.concatenate([[1.0], k])
    recip = np.zeros(order + 1)  # 1/C(w)
    recip[0] = 1.0
    for n in range(1, order + 1):
        recip[n] = -np.dot(c[1 : n + 1], recip[n - 1 :: -1][:n])
    h = np.concatenate([[0.0], recip])  # w / C(w), orders 0..K+1
    return reverse(h, order + 1)[2:]  # z M(z) = Σ m_k z^{k+1}
