"""Pair expectations of a G-vector times a function of one linear form, by conditioning on the forms.

A term ``F(U) = U_i · f(w)``, ``w = cᵀU`` (a G-vector argument times a function of one linear
form of the arguments, e.g. ``g₂ · √|g₁ + θ g₂|`` or ``g₂ · tanh(g₁ + g₂/2)``), paired with another
such term ``G(V) = V_j · h(w')`` or a plain ``h(w')``, is a four-dimensional expectation over
``(U_i, w, V_j, w')``. Given the two forms ``W = (w, w')`` the factors are Gaussian with
conditional means linear in ``W`` and a constant conditional covariance, so::

    E[U_i V_j f(w) h(w')] = Σ_kl m_k n_l E[W_k W_l f(w) h(w')] + r E[f(w) h(w')]

with ``m = Cov(U_i, W) Σ_W⁻¹``, ``n = Cov(V_j, W) Σ_W⁻¹`` and ``r = Cov(U_i, V_j) − m Σ_W nᵀ``: four
expectations of pairs of one-argument functions (``x² f``, ``x f``, ``f`` against ``h``, ``y h``,
``y² h``), which the one-dimensional rules take to rounding or to their own bounds — where the
four-dimensional rules stopped at 2e-3 for a cusp (growth campaign seed 311) and at 4e-4 for
``g₂ tanh(g₁ + g₂/2)`` on 100 inputs.

At one point the same reduction conditions on the one form ``w``: ``E[U_i V_j f(w) h(w)] = β_i β_j E[w² f h]
+ (Σ_ij − a β_i β_j) E[f h]`` with ``β = Σc/a`` (:func:`point_pair`), the means and the moments that scale
error bounds likewise (:func:`point_mean`, :func:`point_moments`).

The coefficients of a pair divide by ``det Σ_W = a b (1 − ρ²)``: their rounding, amplified by
``(ab + c²)/det``, enters the bound, and pairs whose forms are within ``MIN_SINE2`` of colinear are
left to the joint engine (``done`` false).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from netsor.activations import Activation, identity
from netsor.gaussian import pairs
from netsor.gaussian.pairs import CoefficientMemo, mean, moments_1d, product_activation

Array = np.ndarray
_EPS = np.finfo(float).eps
#: Pairs with ``1 − ρ²`` of the two forms below this are left to the joint engine: the coefficients'
#: amplification of the one-dimensional bounds, ``1/(1 − ρ²)``, would exceed 1e6.
MIN_SINE2 = 1e-6


@dataclass(frozen=True)
class FactorTimesForm:
    """``U_factor · act(formᵀU)`` of a term's arguments ``U`` (``factor`` None: ``act(formᵀU)`` alone)."""

    factor: int | None
    form: Array
    act: Activation


def _times_x(act: Activation, power: int) -> Activation:
    """``x^power · act(x)`` as a one-argument function."""
    for _ in range(power):
        act = product_activation(identity, act)
    return act


def _coefficient(num: Array, magnitude: Array, det: Array, rel_det: Array) -> tuple[Array, Array]:
    """``num/det`` and a bound on its rounding: ``num`` computed from products whose absolute values
    sum to ``magnitude`` (8 eps of it), ``det`` with relative error ``rel_det``."""
    value = num / det
    return value, (8 * _EPS * magnitude / det + np.abs(value) * rel_det) / (1.0 - rel_det)


def pair_expectation(left: FactorTimesForm, right: FactorTimesForm, cov_x: Array, cov_y: Array, C: Array, *,
                     rtol: float, memo: CoefficientMemo | None = None, d_x: Array | None = None,
                     d_y: Array | None = None) -> tuple[Array, Array, Array]:
    """``(E[F(U) G(V)], error bound, done)`` for M pairs, at least one side with a factor.

    Parameters
    ----------
    left, right : FactorTimesForm
        Over the ``k₁`` arguments ``U`` and the ``k₂`` arguments ``V``.
    cov_x, cov_y : arrays (M, k₁, k₁), (M, k₂, k₂)
        Per-pair covariances of ``U`` and of ``V``.
    C : array (M, k₁, k₂)
        Cross-covariances ``Cov(U, V)``.
    rtol : float
        Target of the one-dimensional rules, relative to their own envelopes.
    d_x, d_y : arrays like cov_x, cov_y, optional
        Error bounds of the covariances: a form whose variance is not above 8× its bound (a vector that
        vanishes in the limit, ``g − s·g`` with a scalar ``s = 1``) is left to the joint engine.

    Returns
    -------
    value, error : arrays (M,)
        Where ``done``; zeros elsewhere.
    done : bool array (M,)
        Pairs whose two forms have variances above their bounds and ``1 − ρ² ≥ MIN_SINE2``.
    """
    if left.factor is None and right.factor is None:
        raise ValueError("conditioning needs a G-vector factor on at least one side")
    cl, cr = left.form, right.form
    a = np.einsum("i,mij,j->m", cl, cov_x, cl)
    b = np.einsum("i,mij,j->m", cr, cov_y, cr)
    c = np.einsum("i,mij,j->m", cl, C, cr)
    M = C.shape[0]
    with np.errstate(divide="ignore", invalid="ignore"):
        sine2 = 1.0 - c * c / (a * b)
    done = (a > 8 * _form_error(cl, d_x)) & (b > 8 * _form_error(cr, d_y)) & (sine2 >= MIN_SINE2)
    value, error = np.zeros(M), np.zeros(M)
    if not done.any():
        return value, error, done
    a, b, c, cov_x, cov_y, C = a[done], b[done], c[done], cov_x[done], cov_y[done], C[done]
    det = a * b - c * c
    rel_det = 8 * _EPS * (a * b + c * c) / det

    def mean_coefficients(own_w: Array, other_w: Array, own_var: Array, other_var: Array
                          ) -> tuple[tuple[Array, Array], tuple[Array, Array]]:
        """``E[factor | w, w'] = k_own w_own + k_other w_other`` from the factor's covariances with its own
        side's form and the other's (both values and rounding bounds)."""
        own = _coefficient(own_w * other_var - other_w * c, np.abs(own_w) * other_var + np.abs(other_w * c), det,
                           rel_det)
        other = _coefficient(other_w * own_var - own_w * c, np.abs(other_w) * own_var + np.abs(own_w * c), det,
                             rel_det)
        return own, other

    # coefficients of E[W_k W_l f h] (k, l ∈ {0: w, 1: w'}) and of E[f h], each (value, rounding bound)
    terms: dict[tuple[int, int], tuple[Array, Array]] = {}
    if left.factor is not None:
        i = left.factor
        beta_own, beta_other = cov_x[:, i, :] @ cl, C[:, i, :] @ cr  # Cov(U_i, w), Cov(U_i, w')
        m_w, m_wp = mean_coefficients(beta_own, beta_other, a, b)
    if right.factor is not None:
        j = right.factor
        gamma_own, gamma_other = cov_y[:, j, :] @ cr, np.einsum("i,mi->m", cl, C[:, :, j])  # Cov(V_j, w'), (., w)
        n_wp, n_w = mean_coefficients(gamma_own, gamma_other, b, a)
    if left.factor is not None and right.factor is not None:
        for (k, l), (x, y) in {(2, 0): (m_w, n_w), (0, 2): (m_wp, n_wp)}.items():
            terms[(k, l)] = _product(x, y)
        cross_1, cross_2 = _product(m_w, n_wp), _product(m_wp, n_w)
        terms[(1, 1)] = (cross_1[0] + cross_2[0], cross_1[1] + cross_2[1] + _EPS * np.abs(cross_1[0] + cross_2[0]))
        # r = Cov(U_i, V_j) − Cov(U_i, W) Σ_W⁻¹ Cov(W, V_j)
        quad = (beta_own * gamma_other * b - (beta_own * gamma_own + beta_other * gamma_other) * c
                + beta_other * gamma_own * a)
        size = (np.abs(beta_own * gamma_other) * b + (np.abs(beta_own * gamma_own) + np.abs(beta_other * gamma_other))
                * np.abs(c) + np.abs(beta_other * gamma_own) * a)
        q, dq = _coefficient(quad, size, det, rel_det)
        D = C[:, i, j]
        terms[(0, 0)] = (D - q, dq + 2 * _EPS * (np.abs(D) + np.abs(q)))
    elif left.factor is not None:
        terms[(1, 0)], terms[(0, 1)] = m_w, m_wp
    else:
        terms[(1, 0)], terms[(0, 1)] = n_w, n_wp
    total, bound, size = np.zeros(a.size), np.zeros(a.size), np.zeros(a.size)
    # the coefficients grow as 1/(1 − ρ²) and their terms cancel: pairs are taken by decades of 1 − ρ², each
    # with the one-dimensional rules' target tightened by its decade
    decade = np.clip(np.floor(np.log10(sine2[done])), np.log10(MIN_SINE2), 0.0)
    for level in np.unique(decade):
        at = np.flatnonzero(decade == level)
        for (k, l), (coef, dcoef) in terms.items():
            p, e = pairs.pair_expectation(_times_x(left.act, k), _times_x(right.act, l), a[at], b[at], c[at],
                                          memo=memo, rtol=max(rtol * 10.0**level, 1e-15))
            total[at] += coef[at] * p
            bound[at] += np.abs(coef[at]) * e + dcoef[at] * (np.abs(p) + e)
            size[at] += np.abs(coef[at] * p)
    value[done], error[done] = total, bound + len(terms) * _EPS * size
    return value, error, done


def _product(x: tuple[Array, Array], y: tuple[Array, Array]) -> tuple[Array, Array]:
    """The product of two values with rounding bounds, with its own."""
    (u, du), (v, dv) = x, y
    w = u * v
    return w, np.abs(u) * dv + np.abs(v) * du + du * dv + _EPS * np.abs(w)


def _form_error(c: Array, d_cov: Array | None) -> Array | float:
    """``|c|ᵀ δΣ |c|``: the bound of a form's variance from those of the covariances (0 without them)."""
    return 0.0 if d_cov is None else np.einsum("i,mij,j->m", np.abs(c), d_cov, np.abs(c))


def _regression(F: FactorTimesForm, cov: Array, d_cov: Array | None = None) -> tuple[Array, Array, Array, Array]:
    """Per point (cov (P, k, k)): the form's variance ``a = cᵀΣc``, a bound ``δa`` on its rounding (and on
    its error, given the covariances' bounds ``d_cov``), and ``n = Σc`` (``E[U | w] = n w / a``) with a bound
    on each entry's rounding, (P, k)."""
    k = cov.shape[-1]
    c = F.form
    n = cov @ c
    a = n @ c
    magnitude = np.abs(cov) @ np.abs(c)
    return a, 2 * k * _EPS * (magnitude @ np.abs(c)) + _form_error(c, d_cov), n, 2 * k * _EPS * magnitude


def point_pair(left: FactorTimesForm, right: FactorTimesForm, cov: Array, *, rtol: float,
               d_cov: Array | None = None) -> tuple[Array, Array, Array]:
    """``(E[F(U) G(U)], error bound, done)`` at P points, both terms over the same arguments ``U`` (cov
    (P, k, k)), at least one with a factor. Terms of one form (``left.form == right.form``): conditioned
    on it, one-dimensional means; of two forms: :func:`pair_expectation` with the point as both sides
    (``done`` false where the forms are colinear or a form vanishes)."""
    if not np.array_equal(left.form, right.form):
        return pair_expectation(left, right, cov, cov, cov, rtol=rtol, d_x=d_cov, d_y=d_cov)
    a, da, n, dn = _regression(left, cov, d_cov)
    P = cov.shape[0]
    done = a > 8 * da
    value, error = np.zeros(P), np.zeros(P)
    if not done.any():
        return value, error, done
    a, da, n, dn, cov = a[done], da[done], n[done], dn[done], cov[done]
    rel_a = da / a
    terms: list[tuple[int, Array, Array]] = []  # (power of w, coefficient, its rounding bound)
    i, j = left.factor, right.factor
    if i is not None and j is not None:
        coef = n[:, i] * n[:, j] / a
        dcoef = (np.abs(n[:, i]) * dn[:, j] + np.abs(n[:, j]) * dn[:, i] + dn[:, i] * dn[:, j]) / a \
            + np.abs(coef) * (rel_a + 2 * _EPS) / (1.0 - rel_a)
        terms.append((2, coef / a, dcoef / a + np.abs(coef / a) * (rel_a + _EPS) / (1.0 - rel_a)))
        terms.append((0, cov[:, i, j] - coef, dcoef + 2 * _EPS * (np.abs(cov[:, i, j]) + np.abs(coef))))
    else:
        f = i if i is not None else j
        coef = n[:, f] / a
        terms.append((1, coef, (dn[:, f] + np.abs(n[:, f]) * rel_a / (1.0 - rel_a)) / a + _EPS * np.abs(coef)))
    total, bound, size = np.zeros(a.size), np.zeros(a.size), np.zeros(a.size)
    both = product_activation(left.act, right.act)
    for power, coef, dcoef in terms:
        m, e = mean(_times_x(both, power), a, rtol)
        total += coef * m
        bound += np.abs(coef) * e + dcoef * (np.abs(m) + e)
        size += np.abs(coef * m)
    value[done], error[done] = total, bound + len(terms) * _EPS * size
    return value, error, done


def point_moments(F: FactorTimesForm, cov: Array, d_cov: Array | None = None) -> dict[str, Array] | None:
    """Upper bounds of the per-point moments that scale error bounds (those of
    :func:`netsor.gaussian.joint.point_moments`: ``m2``, ``m4``, ``arg_grad2`` (P, k), ``gradnorm2``,
    ``joint_euler``) of ``F = U_i f(w)``, from one-dimensional moments of ``f`` and ``x f``: with
    ``U = β w + U⊥`` (``β = Σc/a``, ``U⊥`` independent of ``w``, covariance ``Σ⊥``), ``F = β_i h(w) + U⊥_i f(w)``
    (``h = x f``) and ``∇F = e_i f + c (β_i (h' − f) + U⊥_i f')``; (a + b + c)² ≤ 3(a² + b² + c²) and
    Cauchy–Schwarz for ``E[h² f²]``. None where some point's form has no variance."""
    i = F.factor
    a, da, n, _ = _regression(F, cov, d_cov)
    if i is None or not np.all(a > 8 * da):
        return None
    beta = n / a[:, None]
    perp = cov - a[:, None, None] * beta[:, :, None] * beta[:, None, :]
    v = np.maximum(perp[:, i, i], 0.0)
    trace = np.maximum(np.trace(perp, axis1=1, axis2=2), 0.0)
    f, h = moments_1d(F.act, a), moments_1d(_times_x(F.act, 1), a)
    b2, c2, beta2 = beta[:, i] ** 2, float(F.form @ F.form), np.sum(beta * beta, axis=1)
    m2 = b2 * h["m2"] + v * f["m2"]
    m4 = b2 * b2 * h["m4"] + 6 * b2 * v * np.sqrt(h["m4"] * f["m4"]) + 3 * v * v * f["m4"]
    along = _times(2 * b2, h["grad2"] + f["m2"]) + _times(v, f["grad2"])
    arg = 3 * _times(F.form[None, :] ** 2, along[:, None])
    arg[:, i] += 3 * f["m2"]
    gradnorm2 = 3 * (f["m2"] + c2 * along)
    # E|∇F|² w² and E|∇F|²|U⊥|² by the same three terms; |U|² ≤ 2(|β|² w² + |U⊥|²)
    on_w = 3 * (h["m2"] + c2 * (_times(2 * b2, h["euler"] + h["m2"]) + _times(v, f["euler"])))
    fourth = trace * v + 2 * np.sum(perp[:, :, i] ** 2, axis=1)  # E[|U⊥|² U⊥_i²]
    on_perp = 3 * (_times(trace, f["m2"] + c2 * _times(2 * b2, h["grad2"] + f["m2"])) + c2 * _times(fourth, f["grad2"]))
    return {"m2": m2, "m4": m4, "arg_grad2": arg, "gradnorm2": gradnorm2,
            "joint_euler": 2 * (_times(beta2, on_w) + on_perp)}


def _times(coef: Array, moment: Array) -> Array:
    """``coef · moment``, 0 where ``coef`` is 0 (an infinite moment — of a derivative that is not square
    integrable — with a zero coefficient is no term)."""
    with np.errstate(invalid="ignore"):
        return np.where(coef == 0.0, 0.0, coef * moment)


def point_mean(F: FactorTimesForm, cov: Array, *, rtol: float, d_cov: Array | None = None
               ) -> tuple[Array, Array] | None:
    """``(E F(U), error bound)`` at P points for ``F = U_i f(w)``: ``β_i E[w f(w)]`` (a one-dimensional mean),
    or None where some point's form has no variance."""
    a, da, n, dn = _regression(F, cov, d_cov)
    i = F.factor
    if i is None or not np.all(a > 8 * da):
        return None
    rel_a = da / a
    coef = n[:, i] / a
    dcoef = (dn[:, i] + np.abs(n[:, i]) * rel_a / (1.0 - rel_a)) / a + _EPS * np.abs(coef)
    m, e = mean(_times_x(F.act, 1), a, rtol)
    return coef * m, np.abs(coef) * e + dcoef * (np.abs(m) + e) + _EPS * np.abs(coef * m)
