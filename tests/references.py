"""Independent references for the tests: kernels of joint (several-argument) nonlinearities, 1-D expectations.

Written from textbook identities, not from netsor's code: the arc-cosine, arcsine and |·|
kernels, Stein's lemma, the moments of a truncated bivariate normal (derived with Gaussian
integration by parts, checked against Monte Carlo in the tests), and plain tensor
Gauss–Legendre rules on the smooth pieces of an integrand. Every function returns the kernel
``E[h(x_i) h(x_j)]`` for all pairs of inputs, given the covariances of the G-vectors involved.
"""

from __future__ import annotations

import math

import mpmath
import numpy as np
from scipy import integrate, special, stats

SQRT2PI = np.sqrt(2 * np.pi)


def _angle(a, b, c):
    """θ = arccos(c/√(ab)) computed as atan2(√(ab − c²), c): exact at colinear pairs (ab = c²)."""
    return np.arctan2(np.sqrt(np.maximum(a * b - c * c, 0.0)), c)


def relu_kernel(a, b, c):
    """E[relu u relu v], (u, v) ~ N(0, [[a, c], [c, b]]) (Cho & Saul, order 1)."""
    th = _angle(a, b, c)
    return (np.sqrt(np.maximum(a * b - c * c, 0.0)) + (np.pi - th) * c) / (2 * np.pi)


def step_kernel(a, b, c):
    """E[step u step v] = (π − θ)/(2π)."""
    return (np.pi - _angle(a, b, c)) / (2 * np.pi)


def abs_kernel(a, b, c):
    """E[|u||v|] = (2/π)(√(ab − c²) + c·arcsin(c/√(ab)))."""
    return 2 / np.pi * (np.sqrt(np.maximum(a * b - c * c, 0.0)) + c * (np.pi / 2 - _angle(a, b, c)))


def pairwise(K):
    """(a_i, a_j, c_ij) of a covariance matrix, broadcast over pairs."""
    d = np.diag(K)
    return d[:, None], d[None, :], K


def owens_bvn(h, k, r):
    """P(X ≤ h, Y ≤ k) for standard bivariate normal with correlation r (Owen's T formula)."""
    h, k, r = np.broadcast_arrays(np.asarray(h, float), np.asarray(k, float), np.asarray(r, float))
    s = np.sqrt(1 - r * r)
    with np.errstate(divide="ignore", invalid="ignore"):
        ah = np.where(h != 0, (k - r * h) / (h * s), np.inf)
        ak = np.where(k != 0, (h - r * k) / (k * s), np.inf)
    th = np.where(h != 0, special.owens_t(h, ah), np.where(k >= 0, 0.25, -0.25))
    tk = np.where(k != 0, special.owens_t(k, ak), np.where(h >= 0, 0.25, -0.25))
    beta = np.where((h * k < 0) | ((h * k == 0) & (h + k < 0)), 0.5, 0.0)
    # h = k = 0: both of Owen's arguments are 0/0 (the formula gave 0); Sheppard's orthant instead
    return np.where((h == 0) & (k == 0), 0.25 + np.arcsin(r) / (2 * np.pi),
                    0.5 * special.ndtr(h) + 0.5 * special.ndtr(k) - th - tk - beta)


def _relu_mean(m, s):
    """E[X⁺] for X ~ N(m, s²)."""
    return m * special.ndtr(m / s) + s * np.exp(-0.5 * (m / s) ** 2) / SQRT2PI


def relu_relu_noncentral(m1, m2, s1, s2, r):
    """E[X⁺ Y⁺] for (X, Y) Gaussian with means m1, m2, sds s1, s2 and correlation r.

    Gaussian integration by parts twice: E[X G] = m1 E[G] + s1² E[∂ₓG] + r s1 s2 E[∂ᵧG] with
    G = Y 1{X>0, Y>0}, and the same for E[Y 1{X>0, Y>0}].
    """
    q = np.sqrt(1 - r * r)
    P = owens_bvn(m1 / s1, m2 / s2, r)  # P(X > 0, Y > 0) = P(−X < 0, −Y < 0)
    px0 = np.exp(-0.5 * (m1 / s1) ** 2) / (SQRT2PI * s1)
    py0 = np.exp(-0.5 * (m2 / s2) ** 2) / (SQRT2PI * s2)
    m_y = m2 - r * s2 * m1 / s1  # Y | X = 0
    m_x = m1 - r * s1 * m2 / s2  # X | Y = 0
    tau_y, tau_x = s2 * q, s1 * q
    ey_pos = _relu_mean(m_y, tau_y)
    e_y_box = m2 * P + s2**2 * py0 * special.ndtr(m_x / tau_x) + r * s1 * s2 * px0 * special.ndtr(m_y / tau_y)
    return m1 * e_y_box + s1**2 * px0 * ey_pos + r * s1 * s2 * P


def relu_times_relu_correlated(Kaa, Kbb, Kab, nodes=200):
    """E[relu(a)relu(b) relu(a')relu(b')] for jointly Gaussian (a, b) at each input, given the
    covariance matrices over inputs ``Kaa = E[a a']``, ``Kbb``, ``Kab = E[a b']``.

    Condition on (a, a'); (b, b') | (a, a') is Gaussian and E[relu b relu b' | a, a'] is
    :func:`relu_relu_noncentral`; the outer integral over the quadrant a, a' > 0 of the smooth
    result uses a tensor Gauss–Legendre rule on [0, 10σ]².
    """
    n = Kaa.shape[0]
    out = np.empty((n, n))
    t, w = np.polynomial.legendre.leggauss(nodes)
    for i in range(n):
        for j in range(n):
            S = np.array([[Kaa[i, i], Kaa[i, j], Kab[i, i], Kab[i, j]],
                          [Kaa[j, i], Kaa[j, j], Kab[j, i], Kab[j, j]],
                          [Kab[i, i], Kab[j, i], Kbb[i, i], Kbb[i, j]],
                          [Kab[i, j], Kab[j, j], Kbb[j, i], Kbb[j, j]]])
            A, B, Cm = S[:2, :2], S[2:, 2:], S[2:, :2]
            if i == j:  # a = a', b = b': E[relu(a)² relu(b)²] by the 1-D conditional rule
                out[i, j] = _same_point_relu2(A[0, 0], B[0, 0], Cm[0, 0], t, w)
                continue
            M = Cm @ np.linalg.inv(A)
            Sc = B - M @ Cm.T
            s1, s2 = np.sqrt(Sc[0, 0]), np.sqrt(Sc[1, 1])
            r = Sc[0, 1] / (s1 * s2)
            L1, L2 = 10 * np.sqrt(A[0, 0]), 10 * np.sqrt(A[1, 1])
            x = 0.5 * L1 * (t + 1)
            y = 0.5 * L2 * (t + 1)
            X, Y = np.meshgrid(x, y, indexing="ij")
            W = np.outer(0.5 * L1 * w, 0.5 * L2 * w)
            Ainv = np.linalg.inv(A)
            dens = np.exp(-0.5 * (Ainv[0, 0] * X * X + 2 * Ainv[0, 1] * X * Y + Ainv[1, 1] * Y * Y)) / (
                2 * np.pi * np.sqrt(np.linalg.det(A)))
            m1 = M[0, 0] * X + M[0, 1] * Y
            m2 = M[1, 0] * X + M[1, 1] * Y
            out[i, j] = np.sum(W * dens * X * Y * relu_relu_noncentral(m1, m2, s1, s2, r))
    return out


def _same_point_relu2(a, b, c, t, w):
    """E[relu(a)² relu(b)²] for (a, b) ~ N(0, [[a, c], [c, b]]): condition on a; b | a ~ N(βa, τ²)
    and E[relu(b)² | a] = (m² + τ²)Φ(m/τ) + m τ φ(m/τ); outer integral over a > 0 by Gauss–Legendre."""
    beta = c / a
    tau = np.sqrt(max(b - c * c / a, 0.0))
    L = 10 * np.sqrt(a)
    x = 0.5 * L * (t + 1)
    m = beta * x
    inner = (m * m + tau * tau) * special.ndtr(m / tau) + m * tau * np.exp(-0.5 * (m / tau) ** 2) / SQRT2PI
    dens = np.exp(-0.5 * x * x / a) / np.sqrt(2 * np.pi * a)
    return float(np.sum(0.5 * L * w * dens * x * x * inner))


def relu_times_linear_correlated(Kaa, Kbb, Kab):
    """E[relu(a) b · relu(a') b'] for jointly Gaussian (a, b): Stein's lemma twice,
    E[b b' F] = E[b b'] E[F] + Σ_{u,v ∈ {a, a'}} Cov(b, u) Cov(b', v) E[∂u ∂v F], F = relu(a) relu(a')."""
    A, Bd, Cd = pairwise(Kaa)
    K1 = relu_kernel(A, Bd, Cd)
    K0 = step_kernel(A, Bd, Cd)
    s = np.sqrt(np.maximum(A * Bd - Cd * Cd, 0.0))
    # E[δ(a) relu(a')] = p_a(0) E[relu(a') | a = 0] = (1/√(2πa)) · √(Var(a'|a=0)/(2π))
    d_aa = s / (2 * np.pi * A)  # E[∂²_a F] = E[δ(a) relu(a')]
    d_bb = s / (2 * np.pi * Bd)  # E[∂²_a' F]
    cb_a = np.diag(Kab)[:, None] * np.ones_like(Kaa)  # Cov(b_i, a_i)
    cb_ap = Kab.T  # Cov(b_i, a'_j) = E[a_j b_i] = Kab[j, i]
    cbp_a = Kab  # Cov(b'_j, a_i) = Kab[i, j]
    cbp_ap = np.diag(Kab)[None, :] * np.ones_like(Kaa)
    return (Kbb * K1 + cb_a * cbp_a * d_aa + cb_ap * cbp_ap * d_bb
            + (cb_a * cbp_ap + cb_ap * cbp_a) * K0)


def tanh_of_relu_plus(Kaa, Kbb, nodes_outer=48, nodes_inner=80):
    """E[tanh(relu(a) + b) tanh(relu(a') + b')] for independent Gaussian families a and b:
    outer integral over (a, a') split into the four quadrants where relu is linear, inner
    integral over (b, b') (independent of (a, a')); both by tensor Gauss–Legendre rules."""
    n = Kaa.shape[0]
    out = np.empty((n, n))
    to, wo = np.polynomial.legendre.leggauss(nodes_outer)
    ti, wi = np.polynomial.legendre.leggauss(nodes_inner)
    for i in range(n):
        for j in range(n):
            A = np.array([[Kaa[i, i], Kaa[i, j]], [Kaa[j, i], Kaa[j, j]]])
            B = np.array([[Kbb[i, i], Kbb[i, j]], [Kbb[j, i], Kbb[j, j]]])
            # inner: (b, b') = L z, z standard on [-9, 9]²
            Lb = np.linalg.cholesky(B + 1e-300 * np.eye(2)) if i != j else None
            z = 9 * ti
            wz = 9 * wi * np.exp(-0.5 * z * z) / SQRT2PI
            if i == j:  # a 2-D integral: cheap, so with 400 × 400 nodes (48 × 80 left 7e-10 at variance ~3)
                t4, w4 = np.polynomial.legendre.leggauss(400)
                bb = np.sqrt(B[0, 0]) * 9 * t4
                wb = 9 * w4 * np.exp(-0.5 * (9 * t4) ** 2) / SQRT2PI
                total = 0.0
                for lo, hi in ((-10 * np.sqrt(A[0, 0]), 0.0), (0.0, 10 * np.sqrt(A[0, 0]))):
                    x = 0.5 * (hi - lo) * t4 + 0.5 * (hi + lo)
                    wx = 0.5 * (hi - lo) * w4 * np.exp(-0.5 * x * x / A[0, 0]) / np.sqrt(2 * np.pi * A[0, 0])
                    f = np.tanh(np.maximum(x, 0)[:, None] + bb[None, :]) ** 2
                    total += np.sum(wx[:, None] * wb[None, :] * f)
                out[i, j] = total
                continue
            Z1, Z2 = np.meshgrid(z, z, indexing="ij")
            Wz = np.outer(wz, wz)
            b1 = Lb[0, 0] * Z1
            b2 = Lb[1, 0] * Z1 + Lb[1, 1] * Z2
            Ainv = np.linalg.inv(A)
            det = np.linalg.det(A)
            total = 0.0
            for (l1, h1) in ((-10 * np.sqrt(A[0, 0]), 0.0), (0.0, 10 * np.sqrt(A[0, 0]))):
                for (l2, h2) in ((-10 * np.sqrt(A[1, 1]), 0.0), (0.0, 10 * np.sqrt(A[1, 1]))):
                    x = 0.5 * (h1 - l1) * to + 0.5 * (h1 + l1)
                    y = 0.5 * (h2 - l2) * to + 0.5 * (h2 + l2)
                    X, Y = np.meshgrid(x, y, indexing="ij")
                    W = np.outer(0.5 * (h1 - l1) * wo, 0.5 * (h2 - l2) * wo)
                    dens = np.exp(-0.5 * (Ainv[0, 0] * X * X + 2 * Ainv[0, 1] * X * Y + Ainv[1, 1] * Y * Y)) / (
                        2 * np.pi * np.sqrt(det))
                    # the inner integral depends on (relu x, relu y) only: on a negative side of the
                    # quadrant it is one value along that axis (the same sums, evaluated once)
                    rx, ix = np.unique(np.maximum(x, 0), return_inverse=True)
                    ry, iy = np.unique(np.maximum(y, 0), return_inverse=True)
                    f = (np.tanh(rx[:, None, None, None] + b1) * np.tanh(ry[None, :, None, None] + b2))
                    inner = np.sum(f * Wz, axis=(2, 3))[np.ix_(ix, iy)]
                    total += np.sum(W * dens * inner)
            out[i, j] = total
    return out


def quad_expect(f, q, breaks=()):
    """``E f(h)``, ``h ~ N(0, q)``, by adaptive quadrature (scipy) in ``z = h/√q`` split at ``breaks``."""
    sd = np.sqrt(q)
    cuts = [-np.inf, *sorted(b / sd for b in breaks), np.inf]
    density = lambda z: f(sd * z) * np.exp(-0.5 * z * z) / np.sqrt(2 * np.pi)  # noqa: E731
    return sum(integrate.quad(density, a, b, epsabs=0.0, epsrel=1e-13, limit=400)[0]
               for a, b in zip(cuts[:-1], cuts[1:], strict=True))


def relu_of_linear_times_tanh(var_u, var_b, c):
    """``(E h², E h·b)`` for ``h = relu(g·tanh b)``, ``g = u + c·b``, ``u ~ N(0, var_u)`` independent of
    ``b ~ N(0, var_b)``. Given b, ``h = |tanh b|·relu(sgn(b)·g)`` with ``sgn(b)·g ~ N(c|b|, var_u)``, whose
    first two moments of the positive part are closed forms; then adaptive quadrature over b, split at 0."""
    s = np.sqrt(var_u)

    def parts(x):
        m = c * np.abs(x)
        z = m / s
        cdf, pdf = special.ndtr(z), np.exp(-0.5 * z * z) / np.sqrt(2 * np.pi)
        return m, cdf, pdf

    def second(x):
        m, cdf, pdf = parts(x)
        return np.tanh(x) ** 2 * ((m * m + var_u) * cdf + m * s * pdf)

    def with_b(x):
        m, cdf, pdf = parts(x)
        return x * np.abs(np.tanh(x)) * (m * cdf + s * pdf)

    return quad_expect(second, var_b, (0.0,)), quad_expect(with_b, var_b, (0.0,))


def erf_erf_noncentral(m1, m2, s1, s2, r):
    """E[erf X · erf Y] for (X, Y) Gaussian with means m1, m2, sds s1, s2 and correlation r.

    ``erf x = 2 P(x + ε > 0) − 1`` with ``ε ~ N(0, 1/2)`` independent, so the expectation is
    ``4 P(X + ε₁ > 0, Y + ε₂ > 0) − 2 Φ(m1/t1) − 2 Φ(m2/t2) + 1`` with ``tᵢ² = sᵢ² + 1/2``."""
    t1, t2 = np.sqrt(s1 * s1 + 0.5), np.sqrt(s2 * s2 + 0.5)
    P = owens_bvn(m1 / t1, m2 / t2, r * s1 * s2 / (t1 * t2))
    return 4 * P - 2 * special.ndtr(m1 / t1) - 2 * special.ndtr(m2 / t2) + 1


def quadrant_expectation(S, inner, weight=lambda x, y: x * y):
    """E[w(a, a') 1{a > 0, a' > 0} F(b, b')] for (a, a', b, b') ~ N(0, S), S (4, 4), to ~1e-12
    relative, with ``inner(m1, m2, s1, s2, r) = E[F(X, Y)]`` of a Gaussian pair and ``w = weight``
    (default ``x y``: relu(a) relu(a')).

    Condition on (a, a') = L η (Cholesky): (b, b') | (a, a') is Gaussian and E[F(b, b') | a, a']
    is ``inner``. The quadrant a, a' > 0 is a wedge in polar coordinates of η;
    the outer integral over its angle and radius is adaptive (scipy quad, nested)."""
    A, B, Cm = S[:2, :2], S[2:, 2:], S[2:, :2]
    L = np.linalg.cholesky(A)
    M = Cm @ np.linalg.inv(A)
    Sc = B - M @ Cm.T
    s1, s2 = np.sqrt(Sc[0, 0]), np.sqrt(Sc[1, 1])
    r = np.clip(Sc[0, 1] / (s1 * s2), -1.0, 1.0)
    psi = np.arctan2(L[1, 0], L[1, 1])  # a' > 0  <=>  sin(phi + psi) > 0
    lo, hi = max(-np.pi / 2, -psi), min(np.pi / 2, np.pi - psi)

    def radial(phi):
        e1, e2 = np.cos(phi), np.sin(phi)
        a1, a2 = L[0, 0] * e1, L[1, 0] * e1 + L[1, 1] * e2  # (a, a') per unit radius

        def f(rad):
            x, y = rad * a1, rad * a2
            m1, m2 = M[0, 0] * x + M[0, 1] * y, M[1, 0] * x + M[1, 1] * y
            return rad * np.exp(-0.5 * rad * rad) / (2 * np.pi) * weight(x, y) * inner(m1, m2, s1, s2, r)

        return integrate.quad(f, 0.0, 14.0, epsabs=0.0, epsrel=1e-13, limit=200)[0]

    return integrate.quad(radial, lo, hi, epsabs=0.0, epsrel=1e-12, limit=200)[0]


def relu4_adaptive(S, inner=relu_relu_noncentral):
    """E[relu(a) relu(a') F(b, b')] for (a, a', b, b') ~ N(0, S) (:func:`quadrant_expectation`),
    ``F = relu ⊗ relu`` by default or any ``inner`` (e.g. :func:`erf_erf_noncentral`)."""
    return quadrant_expectation(S, inner)


def relu_times_erf_correlated(Kaa, Kbb, Kab):
    """Kernel of relu(a)·erf(b) for jointly Gaussian G-vectors a, b (``Kab[i, j] = Cov(a_i, b_j)``):
    off the diagonal by :func:`relu4_adaptive` with :func:`erf_erf_noncentral`; on it
    ``E[a² 1{a>0} E[erf(b)² | a]]`` by adaptive 1-D quadrature (b | a Gaussian: two independent
    noises, so the inner pair is not degenerate)."""
    n = Kaa.shape[0]
    K = np.empty((n, n))
    for i in range(n):
        A, B, C = Kaa[i, i], Kbb[i, i], Kab[i, i]
        beta, sd = C / A, np.sqrt(max(B - C * C / A, 0.0))

        def f(x, beta=beta, sd=sd, A=A):
            return x * x * np.exp(-0.5 * x * x / A) / np.sqrt(2 * np.pi * A) * erf_erf_noncentral(
                beta * x, beta * x, sd, sd, 1.0)

        K[i, i] = integrate.quad(f, 0.0, 40 * np.sqrt(A), epsabs=0.0, epsrel=1e-13, limit=200)[0]
        for j in range(i + 1, n):
            S = np.array([[Kaa[i, i], Kaa[i, j], Kab[i, i], Kab[i, j]],
                          [Kaa[j, i], Kaa[j, j], Kab[j, i], Kab[j, j]],
                          [Kab[i, i], Kab[j, i], Kbb[i, i], Kbb[i, j]],
                          [Kab[i, j], Kab[j, j], Kbb[j, i], Kbb[j, j]]])
            K[i, j] = K[j, i] = relu4_adaptive(S, erf_erf_noncentral)
    return K


def erf_kernel(a, b, c):
    """E[erf(u) erf(v)] for a centred Gaussian pair (variances a, b, covariance c)."""
    return 2 / np.pi * np.arcsin(2 * c / np.sqrt((1 + 2 * a) * (1 + 2 * b)))


def sin_of_square_kernel(K):
    """E[sin(u²) sin(v²)] for all pairs of a centred Gaussian with covariance ``K`` (B, B).

    ``sin(u²) sin(v²) = ½[cos(u² − v²) − cos(u² + v²)]`` and ``E exp(i(s u² + t v²)) =
    det(I − 2i Σ diag(s, t))^(−1/2)`` for the 2 × 2 covariance Σ of (u, v) (the characteristic
    function of a Gaussian quadratic form; the principal branch is the right one: the determinant's
    argument stays in (−π, π) for these s, t)."""
    K = np.asarray(K, dtype=float)
    a, b, c = np.diag(K)[:, None], np.diag(K)[None, :], K

    def char(s, t):  # det(I − 2i Σ diag(s, t)) for every pair
        det = (1 - 2j * s * a) * (1 - 2j * t * b) + 4 * s * t * c * c
        return det ** -0.5

    return 0.5 * (char(1.0, -1.0) - char(1.0, 1.0)).real


def one_factor_orthant(lam):
    """P(x > 0) for x ~ N(0, R) with R_ij = λ_i λ_j (i ≠ j), |λ_i| < 1: x_i = λ_i z + √(1 − λ_i²) e_i, so
    P = E_z Π Φ(λ_i z / √(1 − λ_i²)) (1-D adaptive quadrature)."""
    lam = np.asarray(lam, float)
    k = lam / np.sqrt(1 - lam * lam)
    f = lambda z: np.exp(-0.5 * z * z) / SQRT2PI * np.prod(special.ndtr(k * z))  # noqa: E731
    return integrate.quad(f, -np.inf, np.inf, epsabs=0.0, epsrel=1e-13, limit=400)[0]


def two_factor_orthant(L):
    """P(x > 0) for x ~ N(0, R) with R_ij = ⟨L_i, L_j⟩ (i ≠ j), rows of L (4, 2) of norm < 1:
    x_i = L_i·z + √(1 − |L_i|²) e_i, so P = E_z Π Φ(L_i·z / √(1 − |L_i|²)) (2-D adaptive quadrature)."""
    L = np.asarray(L, float)
    d = np.sqrt(1 - np.sum(L * L, axis=1))

    def f(y, x):
        return np.exp(-0.5 * (x * x + y * y)) / (2 * np.pi) * np.prod(special.ndtr((L[:, 0] * x + L[:, 1] * y) / d))

    return integrate.dblquad(f, -9.0, 9.0, -9.0, 9.0, epsabs=1e-15, epsrel=1e-13)[0]


def gate_product(C, signs):
    """``E[Π_k σ(s_k z_k)]`` for ``z ~ N(0, C)`` (k ≤ 4 factors, signs ±1) and the gate
    ``σ(u) = (1 + erf u)/2``, ``σ(−u) = 1 − σ(u)``.

    ``σ(u) = P(u + ε > 0)`` with ``ε ~ N(0, 1/2)``, one independent ε per factor (a variable that
    appears twice gets two), so the product's mean is the orthant probability of
    ``y = D (z + ε)``, ``Cov y = D (C + I/2) D``: closed forms up to 3 dimensions (Sheppard;
    Steck's 1/8 + Σ arcsin ρ / (4π)), :func:`quadrant_expectation` with a bivariate normal
    probability inside for 4."""
    D = np.asarray(signs, float)
    S = D[:, None] * (np.asarray(C, float) + 0.5 * np.eye(len(D))) * D[None, :]
    sd = np.sqrt(np.diag(S))
    R = S / np.outer(sd, sd)
    if len(D) == 1:
        return 0.5
    if len(D) == 2:
        return 0.25 + np.arcsin(R[0, 1]) / (2 * np.pi)
    if len(D) == 3:
        return 0.125 + (np.arcsin(R[0, 1]) + np.arcsin(R[0, 2]) + np.arcsin(R[1, 2])) / (4 * np.pi)
    return quadrant_expectation(S, lambda m1, m2, s1, s2, r: owens_bvn(m1 / s1, m2 / s2, r),
                                weight=lambda x, y: 1.0)


def gru2_kernel(X, sigma_u=1.0, sigma_w=1.0, sigma_b=0.0, sigma_v=1.0):
    """NNGP of ``netsor.zoo.gru(2, ...)`` on ``X`` (B, 2, d), indexed ``b·2 + t``, derived by hand.

    Three independent Gaussian families in the limit (the matrices differ): the update gates'
    pre-activations ``z_t``, the reset gates' ``ρ_t`` and the candidates' ``c_t``; with
    ``e_t = erf(c_t)`` and ``σ_t = σ(z_t)``: ``h₁ = σ₁ e₁`` and ``h₂ = (1 − σ₂) σ₁ e₁ + σ₂ e₂``, so
    every second moment of states is a sum of products of a gate expectation (:func:`gate_product`)
    and an erf kernel (:func:`erf_kernel`). Covariances: ``G = σ_u² x·x'/d + σ_b²`` between tokens;
    ``Cov(z₂, z₂') = Cov(ρ₂, ρ₂') = G + σ_w² E[h₁ h₁']``, ``Cov(c₂, c₂') = G + σ_w² E[h₁ h₁'] E[r₂ r₂']``
    (the reset gate r₂ = σ(ρ₂) is independent of h₁), cross-step covariances ``G`` alone."""
    B = X.shape[0]
    tokens = X[:, :2].reshape(2 * B, -1)
    G = sigma_u**2 * tokens @ tokens.T / tokens.shape[1] + sigma_b**2
    first, second = np.arange(B) * 2, np.arange(B) * 2 + 1
    G11, G22, G12 = G[np.ix_(first, first)], G[np.ix_(second, second)], G[np.ix_(first, second)]

    def erf_k(Caa, Cbb, Cab):  # E[erf(u_a) erf(v_b)] of all pairs (u of the rows, v of the columns)
        return erf_kernel(np.diag(Caa)[:, None], np.diag(Cbb)[None, :], Cab)

    E11 = erf_k(G11, G11, G11)
    H11 = np.array([[gate_product(G11[np.ix_([a, b], [a, b])], [1, 1]) for b in range(B)]
                    for a in range(B)]) * E11
    Cz2 = G22 + sigma_w**2 * H11
    Er = 0.25 + np.arcsin(2 * Cz2 / np.sqrt(np.outer(1 + 2 * np.diag(Cz2), 1 + 2 * np.diag(Cz2)))) / (2 * np.pi)
    Cc2 = G22 + sigma_w**2 * H11 * Er
    E12, E22 = erf_k(G11, Cc2, G12), erf_k(Cc2, Cc2, Cc2)
    # the z-family: order (z₁ of every sequence, z₂ of every sequence)
    Cz = np.block([[G11, G12], [G12.T, Cz2]])

    def gates(*factors):  # factors: (sequence, step, sign)
        idx = [a + B * (t - 1) for a, t, _ in factors]
        return gate_product(Cz[np.ix_(idx, idx)], [s for *_, s in factors])

    H12, H22 = np.empty((B, B)), np.empty((B, B))
    for a in range(B):
        for b in range(B):
            H12[a, b] = gates((a, 1, 1), (b, 1, 1), (b, 2, -1)) * E11[a, b] + gates((a, 1, 1), (b, 2, 1)) * E12[a, b]
        for b in range(a, B):  # H22 is symmetric
            H22[a, b] = H22[b, a] = (gates((a, 1, 1), (a, 2, -1), (b, 1, 1), (b, 2, -1)) * E11[a, b]
                         + gates((a, 1, 1), (a, 2, -1), (b, 2, 1)) * E12[a, b]
                         + gates((a, 2, 1), (b, 1, 1), (b, 2, -1)) * E12[b, a]
                         + gates((a, 2, 1), (b, 2, 1)) * E22[a, b])
    K = np.empty((B, 2, B, 2))
    K[:, 0, :, 0], K[:, 0, :, 1], K[:, 1, :, 0], K[:, 1, :, 1] = H11, H12, H12.T, H22
    return sigma_v**2 * K.reshape(2 * B, 2 * B)


def _psd_factor_rows(S_past, S_cross, S_new):
    """Rows of a block lower-triangular factor for one more block of a Gaussian vector: with
    ``z_past`` already drawn, ``z_new = C z_past + F e`` (``e`` fresh normals) has covariance
    ``S_new`` and cross-covariance ``S_cross`` (new × past), for any PSD (also singular) matrix —
    the past's pseudo-inverse, the conditional covariance's eigen square root. Returns (C, F)."""
    if S_past.shape[0]:
        w, V = np.linalg.eigh(S_past)
        keep = w > 1e-12 * max(w[-1], 1e-300)
        C = S_cross @ (V[:, keep] / w[keep]) @ V[:, keep].T
        S_cond = S_new - C @ S_cross.T
    else:
        C, S_cond = np.zeros((S_new.shape[0], 0)), S_new
    w, V = np.linalg.eigh(0.5 * (S_cond + S_cond.T))
    return C, V * np.sqrt(np.clip(w, 0.0, None))


def gru_kernel_semianalytic(X, *, sigma_u=1.0, sigma_w=1.0, sigma_b=0.0, sigma_v=1.0, log2_points=14,
                            replicates=16, seed=0):
    """NNGP of ``netsor.zoo.gru(T, ...)`` on ``X`` (B, T, d), indexed ``b·T + t``, for any number of
    steps: the mean over ``replicates`` scrambled Sobol' runs and its standard error.

    As in :func:`gru2_kernel`, the limit has three independent Gaussian families (update-gate
    pre-activations ``z``, reset-gate ``ρ``, candidates ``c``). Unrolled,
    ``h_t = Σ_{k≤t} w_k(t) erf(c_k)`` with ``w_k(t) = σ(z_k) Π_{k<j≤t} (1 − σ(z_j))``, so
    ``E[h_t h'_s] = Σ_{k,l} E[w_k(t) w'_l(s)] E[erf(c_k) erf(c'_l)]`` — the candidates integrate out
    exactly (the arcsine kernel), and so do the reset gates: ``Cov(c_t, c'_s) = G + σ_w² E[σ(ρ_t)σ(ρ'_s)]
    E[h_{t−1} h'_{s−1}]`` (``ρ`` is independent of the states; ``E[σσ']`` is Sheppard's orthant).
    Only the gate weights ``E[w w']`` — orthant probabilities of up to 2T gates — are integrated by
    randomised QMC over the z-family (all sequences and steps jointly, drawn step by step from its
    conditional law, since the covariance of step t depends on the states' kernel at t − 1). A
    construction independent of :mod:`netsor.interpret.simulation`, which draws all three families
    and the readouts' inputs as they come in the program."""
    B, T, d = X.shape
    tokens = X.transpose(1, 0, 2).reshape(T * B, d)  # step-major here: index t·B + a
    G = sigma_u**2 * tokens @ tokens.T / d + sigma_b**2
    blocks = [slice(t * B, (t + 1) * B) for t in range(T)]

    def arcsine(C, dia, dib):  # E[erf(u) erf(v)] (zero means) and E[σ(u) σ(v)] for all pairs
        return 2 / np.pi * np.arcsin(2 * C / np.sqrt(np.outer(1 + 2 * dia, 1 + 2 * dib)))

    def one_run(rng):
        normals = special.ndtri(stats.qmc.Sobol(T * B, scramble=True, seed=rng).random_base2(log2_points))
        K = np.zeros((T * B, T * B))
        Cz = np.zeros((T * B, T * B))
        Cc = np.zeros((T * B, T * B))
        z = np.zeros((normals.shape[0], 0))
        weights = []  # per step t: (points, B, T) — w_k(t) of every sequence
        w = np.zeros((normals.shape[0], B, T))
        for t in range(T):
            for s in range(t + 1):
                prev = K[blocks[t - 1], blocks[s - 1]] if t and s else 0.0
                Cz[blocks[t], blocks[s]] = G[blocks[t], blocks[s]] + sigma_w**2 * prev
                Cz[blocks[s], blocks[t]] = Cz[blocks[t], blocks[s]].T
            past = slice(0, t * B)
            Cpast, F = _psd_factor_rows(Cz[past, past], Cz[blocks[t], past], Cz[blocks[t], blocks[t]])
            z_t = z @ Cpast.T + normals[:, blocks[t]] @ F.T
            z = np.concatenate([z, z_t], axis=1)
            gate = 0.5 * (1 + special.erf(z_t))
            w = w * (1 - gate)[:, :, None]
            w[:, :, t] = gate
            weights.append(w.copy())
            dz = np.diag(Cz)
            for s in range(t + 1):
                prev = K[blocks[t - 1], blocks[s - 1]] if t and s else 0.0
                reset = 0.25 + 0.25 * arcsine(Cz[blocks[t], blocks[s]], dz[blocks[t]], dz[blocks[s]])
                Cc[blocks[t], blocks[s]] = G[blocks[t], blocks[s]] + sigma_w**2 * reset * prev
                Cc[blocks[s], blocks[t]] = Cc[blocks[t], blocks[s]].T
            upto = slice(0, (t + 1) * B)
            dc = np.diag(Cc)[upto]
            erf_pairs = arcsine(Cc[upto, upto], dc, dc).reshape(t + 1, B, t + 1, B)  # [k, a, l, b]
            for s in range(t + 1):
                ww = np.einsum("nak,nbl->akbl", weights[t][:, :, :t + 1], weights[s][:, :, :t + 1],
                               optimize=True) / normals.shape[0]
                K[blocks[t], blocks[s]] = np.einsum("akbl,kalb->ab", ww, erf_pairs)
                K[blocks[s], blocks[t]] = K[blocks[t], blocks[s]].T
        back = np.arange(T * B).reshape(T, B).T.reshape(-1)  # to the zoo's b·T + t
        return sigma_v**2 * K[np.ix_(back, back)]

    runs = np.array([one_run(np.random.default_rng(s)) for s in np.random.SeedSequence(seed).spawn(replicates)])
    return runs.mean(axis=0), runs.std(axis=0, ddof=1) / np.sqrt(replicates)


def _relu_moments_noncentral(m1, m2, s1, s2, r):
    """(E X⁺, E Y⁺, E[X⁺ Y], E[X Y⁺], E[X Y]) for (X, Y) Gaussian (means m, sds s, correlation r):
    Stein's lemma, ``E[X⁺ (Y − m2)] = Cov(X, Y) P(X > 0)``."""
    ex, ey = _relu_mean(m1, s1), _relu_mean(m2, s2)
    cov = r * s1 * s2
    return ex, ey, m2 * ex + cov * special.ndtr(m1 / s1), m1 * ey + cov * special.ndtr(m2 / s2), m1 * m2 + cov


def act_of_a_kink_kernel(Kx, sigma_g, sigma_h, act, offset):
    """Kernel of ``act(g − offset(g − h))`` for independent G-vectors g, h (``Cov(g_i, g_j) = σ_g² Kx_ij``,
    ``Cov(h_i, h_j) = σ_h² Kx_ij``), ``act`` "relu" or "abs", ``offset`` "relu" (c = (d)⁺) or "half-abs"
    (c = |d|/2) of ``d = g − h``.

    Given ``d`` at both inputs, ``g`` is Gaussian and the offset a constant, so
    ``E[act(X − c₁) act(Y − c₂) | d]`` is a closed form (:func:`relu_relu_noncentral`, and
    ``|t| = 2t⁺ − t``); the outer integral over ``(d, d') = L η`` is adaptive in polar coordinates of
    ``η``, split at the angles where ``d = 0`` or ``d' = 0`` (the offset's kinks). The diagonal is one
    dimension: ``E[act(X − c)² | d]`` in closed form, the integral over ``d`` split at 0."""
    cfun = {"relu": lambda d: np.maximum(d, 0.0), "half-abs": lambda d: 0.5 * np.abs(d)}[offset]
    var_d = sigma_g**2 + sigma_h**2

    def inner(m1, m2, s1, s2, r):
        rr = relu_relu_noncentral(m1, m2, s1, s2, r)
        if act == "relu":
            return rr
        ex, ey, xy_plus, x_plus_y, xy = _relu_moments_noncentral(m1, m2, s1, s2, r)
        return 4 * rr - 2 * xy_plus - 2 * x_plus_y + xy  # |t| = 2t⁺ − t on both sides

    def square(m, s):
        if act == "relu":
            return (m * m + s * s) * special.ndtr(m / s) + m * s * np.exp(-0.5 * (m / s) ** 2) / SQRT2PI
        return m * m + s * s

    def diagonal(kxx):
        vd, cgd = var_d * kxx, sigma_g**2 * kxx  # Var d, Cov(g, d)
        s = np.sqrt(sigma_g**2 * kxx - cgd * cgd / vd)

        def f(t):
            return np.exp(-0.5 * t * t / vd) / np.sqrt(2 * np.pi * vd) * square(cgd / vd * t - cfun(t), s)

        return sum(integrate.quad(f, lo, hi, epsabs=0.0, epsrel=1e-13, limit=200)[0]
                   for lo, hi in ((-14 * np.sqrt(vd), 0.0), (0.0, 14 * np.sqrt(vd))))

    def cross(kx):  # kx: the inputs' 2 × 2 Gram block
        A, Cm, B = var_d * kx, sigma_g**2 * kx, sigma_g**2 * kx  # (d, d'), Cov(g, d), (g, g')
        L = np.linalg.cholesky(A)
        M = Cm @ np.linalg.inv(A)
        Sc = B - M @ Cm.T
        s1, s2 = np.sqrt(Sc[0, 0]), np.sqrt(Sc[1, 1])
        r = np.clip(Sc[0, 1] / (s1 * s2), -1.0, 1.0)

        def radial(phi):
            d1, d2 = L[0, 0] * np.cos(phi), L[1, 0] * np.cos(phi) + L[1, 1] * np.sin(phi)

            def f(rad):
                x, y = rad * d1, rad * d2
                m1, m2 = M[0, 0] * x + M[0, 1] * y - cfun(x), M[1, 0] * x + M[1, 1] * y - cfun(y)
                return rad * np.exp(-0.5 * rad * rad) / (2 * np.pi) * inner(m1, m2, s1, s2, r)

            return integrate.quad(f, 0.0, 14.0, epsabs=0.0, epsrel=1e-13, limit=200)[0]

        psi = np.arctan2(L[1, 0], L[1, 1])  # d' = 0 where sin(φ + ψ) = 0
        kinks = sorted({-np.pi / 2, np.pi / 2, *(np.mod(np.array([-psi, np.pi - psi]) + np.pi, 2 * np.pi) - np.pi)})
        edges = [-np.pi, *kinks, np.pi]
        return sum(integrate.quad(radial, lo, hi, epsabs=0.0, epsrel=1e-12, limit=200)[0]
                   for lo, hi in zip(edges[:-1], edges[1:], strict=True) if hi > lo)

    N = Kx.shape[0]
    K = np.diag([diagonal(Kx[i, i]) for i in range(N)])
    for i in range(N):
        for j in range(i + 1, N):
            K[i, j] = K[j, i] = cross(Kx[np.ix_([i, j], [i, j])])
    return K


def _normal_panels(sd, breaks, nodes=80, box=12.0):
    """Nodes and weights (Gauss–Legendre on panels of z = h/sd over [−box, box] split at ``breaks``,
    times the standard normal density) of ``E f(h)``, ``h ~ N(0, sd²)``, for ``f`` smooth between breaks."""
    cuts = np.unique(np.clip([-box, *(np.asarray(breaks, float) / sd), box], -box, box))
    x, w = np.polynomial.legendre.leggauss(nodes)
    lo, hi = cuts[:-1, None], cuts[1:, None]
    z = (0.5 * (hi + lo) + 0.5 * (hi - lo) * x).ravel()
    return sd * z, (0.5 * (hi - lo) * w).ravel() * np.exp(-0.5 * z * z) / SQRT2PI


def abs_minus_clip_kernel(Ka, Ks):
    """Kernel (2, 2) of ``|a − clip(s, −1, 1)|`` at two inputs, ``a ⟂ s`` with 2×2 covariances ``Ka``, ``Ks``.

    Given ``t = clip(s)`` at both inputs, ``|X − t| = (X − t)⁺ + (t − X)⁺``, so ``E|a_x − t₁||a_y − t₂|`` is a
    sum of four noncentral relu·relu moments (Owen's T); the expectation over ``(s_x, s_y)`` is nested
    Gauss–Legendre quadrature on panels split at the clip's kinks (``s_y`` given ``s_x``).
    Diagonal: ``E(a − t)² = K_a + E clip(s)²``."""
    out = np.empty((2, 2))
    for i in range(2):
        h, w = _normal_panels(np.sqrt(Ks[i, i]), (-1.0, 1.0))
        out[i, i] = Ka[i, i] + np.sum(w * np.clip(h, -1.0, 1.0) ** 2)
    s1, s2 = np.sqrt(Ka[0, 0]), np.sqrt(Ka[1, 1])
    r = Ka[0, 1] / (s1 * s2)
    slope = Ks[0, 1] / Ks[0, 0]  # s_y | s_x: mean slope·s_x, variance Ks_yy − slope·Ks_xy
    sd = np.sqrt(Ks[1, 1] - slope * Ks[0, 1])
    total = 0.0
    for sx, wx in zip(*_normal_panels(np.sqrt(Ks[0, 0]), (-1.0, 1.0)), strict=True):
        m = slope * sx
        h, w = _normal_panels(sd, (-1.0 - m, 1.0 - m))
        t1, t2 = np.clip(sx, -1.0, 1.0), np.clip(m + h, -1.0, 1.0)
        given = (relu_relu_noncentral(-t1, -t2, s1, s2, r) + relu_relu_noncentral(-t1, t2, s1, s2, -r)
                 + relu_relu_noncentral(t1, -t2, s1, s2, -r) + relu_relu_noncentral(t1, t2, s1, s2, r))
        total += wx * np.sum(w * given)
    out[0, 1] = out[1, 0] = total
    return out


def abs_minus_clip_shared_kernel(Ks, sd_a):
    """Kernel (N, N) of ``|a − clip(s, −1, 1)|`` for ``a`` one Gaussian shared by all inputs (a bias vector,
    standard deviation ``sd_a``), independent of ``s`` (covariance ``Ks`` over the inputs).

    Given ``t = clip(s)`` at two inputs, ``h(t₁, t₂) = E_a |a − t₁||a − t₂|`` is a closed form: with
    ``t₁ ≤ t₂``, ``|a − t₁||a − t₂| = (a − t₁)(a − t₂)(1 − 2·1{t₁ < a < t₂})`` and Gaussian partial moments,
    ``h = σ² + t₁t₂ − 2[(σ² + t₁t₂) P + σ²(t₁ φ(t₂) − t₂ φ(t₁))]``, ``P = Φ(t₂/σ) − Φ(t₁/σ)`` and φ the
    density of a. The expectation over ``(s_x, s_y)`` is nested Gauss–Legendre quadrature split at the
    clip's kinks and at ``s_y = s_x`` (where ``h`` has a jump in its third derivative)."""
    var = sd_a * sd_a

    def h(t1, t2):
        lo, hi = np.minimum(t1, t2), np.maximum(t1, t2)
        P = special.ndtr(hi / sd_a) - special.ndtr(lo / sd_a)
        dens_lo = np.exp(-0.5 * (lo / sd_a) ** 2) / (SQRT2PI * sd_a)
        dens_hi = np.exp(-0.5 * (hi / sd_a) ** 2) / (SQRT2PI * sd_a)
        partial = (var + lo * hi) * P + var * (lo * dens_hi - hi * dens_lo)
        return var + t1 * t2 - 2.0 * partial

    N = Ks.shape[0]
    K = np.empty((N, N))
    for i in range(N):
        s, w = _normal_panels(np.sqrt(Ks[i, i]), (-1.0, 1.0))
        K[i, i] = var + np.sum(w * np.clip(s, -1.0, 1.0) ** 2)
        for j in range(i + 1, N):
            slope = Ks[i, j] / Ks[i, i]  # s_y | s_x: mean slope·s_x, variance Ks_jj − slope·Ks_ij
            sd = np.sqrt(Ks[j, j] - slope * Ks[i, j])
            total = 0.0
            for sx, wx in zip(*_normal_panels(np.sqrt(Ks[i, i]), (-1.0, 1.0)), strict=True):
                m = slope * sx
                breaks = [-1.0 - m, 1.0 - m] + ([sx - m] if abs(sx) < 1.0 else [])
                hy, wy = _normal_panels(sd, breaks)
                total += wx * np.sum(wy * h(np.clip(sx, -1.0, 1.0), np.clip(m + hy, -1.0, 1.0)))
            K[i, j] = K[j, i] = total
    return K


def _hinge_sums(b, kind):
    """``f_b(v) = c + Σ a (v − k)₊ + Σ a' (k − v)₊`` for a bias value ``b``: ``(c, [(a, k)], [(a', k)])``."""
    if kind == "relu(relu(g-b)-b)":
        return (0.0, [(1.0, 2 * b)], []) if b >= 0 else (-b, [(1.0, b)], [])
    if kind == "relu(0.5|g-b|-b)":
        return (0.0, [(0.5, 3 * b)], [(0.5, -b)]) if b >= 0 else (-b, [(0.5, b)], [(0.5, b)])
    raise ValueError(kind)


def nested_kink_of_a_bias_kernel(A, B, C, sigma_b, kind, nodes=48, panels=8):
    """``E[f(u, b) f(v, b)]`` for ``(u, v)`` centred Gaussian (``Var u = A, Var v = B, Cov = C``) and
    one bias ``b ~ N(0, σ_b²)`` shared by both sides, independent of them, where ``f(·, b)`` is the
    piecewise linear ``relu(relu(g − b) − b)`` or ``relu(0.5|g − b| − b)`` (``kind``). Given ``b`` and
    ``u``, ``E[f(v, b) | u]`` is a closed form (``E(v − k)₊`` of a normal); the rest is Gauss–Legendre
    quadrature on panels over ``u`` split at the kinks (smooth in between) and over ``b`` split at 0
    (where the pieces change; smooth on either side), ``panels`` per interval of ``nodes`` each."""
    t, w = np.polynomial.legendre.leggauss(nodes)
    su, s = np.sqrt(A), np.sqrt(B - C * C / A)

    def panel_rule(lo, hi):
        edges = np.linspace(lo, hi, panels + 1)
        half, mid = np.diff(edges)[:, None] / 2, (edges[:-1] + edges[1:])[:, None] / 2
        return (mid + half * t).ravel(), (half * w).ravel()

    def hinge(x, k):
        return np.maximum(x - k, 0.0)

    def normal_hinge(m, k):  # E(v − k)₊ for v ~ N(m, s²)
        z = (m - k) / s
        return s * np.exp(-0.5 * z * z) / np.sqrt(2 * np.pi) + (m - k) * special.ndtr(z)

    def inner(b):
        c, up, down = _hinge_sums(b, kind)
        kinks = sorted({k for _, k in up + down if abs(k) < 12 * su})
        edges = [-12 * su, *kinks, 12 * su]
        total = 0.0
        for lo, hi in zip(edges[:-1], edges[1:], strict=True):
            u, wu = panel_rule(lo, hi)
            fu = c + sum(a * hinge(u, k) for a, k in up) + sum(a * hinge(-u, -k) for a, k in down)
            m = C / A * u
            cond = c + sum(a * normal_hinge(m, k) for a, k in up) + sum(a * normal_hinge(-m, -k) for a, k in down)
            total += np.sum(wu * fu * cond * np.exp(-0.5 * (u / su) ** 2)) / (su * np.sqrt(2 * np.pi))
        return total

    total = 0.0
    for lo, hi in ((-12 * sigma_b, 0.0), (0.0, 12 * sigma_b)):
        bs, wb = panel_rule(lo, hi)
        total += sum(wi * inner(bi) * np.exp(-0.5 * (bi / sigma_b) ** 2) for bi, wi in zip(bs, wb, strict=True))
    return total / (sigma_b * np.sqrt(2 * np.pi))


def _expect_pair(A, B, a, b, c, breaks=(0.0,), nodes=320):
    """``E[A(L) B(L')]`` for centred Gaussian ``(L, L')`` (variances a, b, covariance c): adaptive quadrature
    over ``L``, split at ``breaks`` (A may have integrable singularities there), of A times the conditional
    expectation of a smooth B by Gauss–Hermite (320 nodes: tanh's poles at ±iπ/2 slow its convergence — 200
    nodes were 1e-11 off)."""
    z, w = np.polynomial.hermite_e.hermegauss(nodes)
    w = w / np.sqrt(2 * np.pi)
    sd = np.sqrt(max(b - c * c / a, 0.0))
    s = np.sqrt(a)

    def integrand(x):
        return A(x) * np.dot(w, B(c / a * x + sd * z)) * np.exp(-0.5 * x * x / a) / (np.sqrt(2 * np.pi) * s)

    return integrate.quad(integrand, -14 * s, 14 * s, points=[p for p in breaks if abs(p) < 14 * s] or None,
                          limit=500, epsabs=1e-15, epsrel=1e-12)[0]


def factor_times_function_by_stein(S, left, right, breaks=(0.0,)):
    """``E[g f(L) · g' h(L')]`` (or with one factor absent) by Stein's lemma on the factors: expectations of
    derivatives ``f⁽ᵏ⁾(L) h⁽ˡ⁾(L')`` (k + l ≤ 2) in two dimensions — a route through derivatives, independent
    of conditioning on the forms. ``S``: the covariance of ``(g, L, g', L')``; ``left = (f, f', f'')`` and
    ``right`` likewise, each with a leading flag whether its factor is present: ``(True, f, f1, f2)``."""
    (lf, f0, f1, f2), (rf, h0, h1, h2) = left, right
    a, b, c = S[1, 1], S[3, 3], S[1, 3]

    def E(A, B):
        return _expect_pair(A, B, a, b, c, breaks)

    if lf and rf:
        return (S[0, 2] * E(f0, h0) + S[0, 1] * (S[2, 1] * E(f2, h0) + S[2, 3] * E(f1, h1))
                + S[0, 3] * (S[2, 1] * E(f1, h1) + S[2, 3] * E(f0, h2)))
    if lf:
        return S[0, 1] * E(f1, h0) + S[0, 3] * E(f0, h1)
    return S[2, 1] * E(f1, h0) + S[2, 3] * E(f0, h1)


def factor_times_tanh_of_a_form(Kg, Kw, Kgw):
    """``E[g tanh(w) · g' tanh(w')]`` at every pair of points: ``Kg``, ``Kw`` the kernels of the factor and of
    the form, ``Kgw[i, j] = Cov(g(x_i), w(x_j))`` (:func:`factor_times_function_by_stein`)."""
    tanh = (np.tanh, lambda x: 1 / np.cosh(x) ** 2, lambda x: -2 * np.tanh(x) / np.cosh(x) ** 2)
    n = Kg.shape[0]
    out = np.empty((n, n))
    for i in range(n):
        for j in range(i, n):
            S = np.array([[Kg[i, i], Kgw[i, i], Kg[i, j], Kgw[i, j]],
                          [Kgw[i, i], Kw[i, i], Kgw[j, i], Kw[i, j]],
                          [Kg[j, i], Kgw[j, i], Kg[j, j], Kgw[j, j]],
                          [Kgw[i, j], Kw[j, i], Kgw[j, j], Kw[j, j]]])
            out[i, j] = out[j, i] = factor_times_function_by_stein(S, (True, *tanh), (True, *tanh), breaks=())
    return out


def pair_by_nested_quadrature(f, g, a, b, c, kinks_f=(), kinks_g=()):
    """``E[f(u) g(v)]`` for centred Gaussian ``(u, v)`` (variances a, b, covariance c, not colinear) by nested
    adaptive quadrature (scipy): the outer over ``X = u/√a`` and the inner over ``Z`` in
    ``v = √b (ρX + √(1 − ρ²) Z)``, each split at the kinks of its function."""
    sa, sb = np.sqrt(a), np.sqrt(b)
    rho = c / (sa * sb)
    s = np.sqrt(1 - rho * rho)
    pdf = stats.norm.pdf

    def inner(x):
        breaks = [(k / sb - rho * x) / s for k in kinks_g]
        return integrate.quad(lambda z: g(sb * (rho * x + s * z)) * pdf(z), -12, 12,
                              points=[p for p in breaks if abs(p) < 12] or None, limit=400, epsabs=1e-15,
                              epsrel=1e-13)[0]

    # where the inner kink crosses the outer axis the inner integral turns over a width ~s/|ρ|: graded breaks
    crossings = [k / (sb * rho) for k in kinks_g if rho != 0]
    breaks = [k / sa for k in kinks_f] + [x + t * s / abs(rho) for x in crossings
                                          for t in (-30.0, -3.0, -0.3, 0.0, 0.3, 3.0, 30.0)]
    return integrate.quad(lambda x: f(sa * x) * inner(x) * pdf(x), -12, 12,
                          points=[p for p in breaks if abs(p) < 12] or None, limit=400, epsabs=1e-15,
                          epsrel=1e-13)[0]


def steps_noncentral(m1, m2, s1, s2, r, offset=0.0):
    """E[step(X + offset) step(Y + offset)] = P(X > −offset, Y > −offset) for (X, Y) Gaussian with means
    m1, m2, sds s1, s2 and correlation r (−X, −Y have the same correlation)."""
    return owens_bvn((m1 + offset) / s1, (m2 + offset) / s2, r)


def hard_tanhs_noncentral(m1, m2, s1, s2, r):
    """E[clip(X, −1, 1) clip(Y, −1, 1)]: ``clip(x) = D(x) − 1`` with ``D(x) = relu(x + 1) − relu(x − 1)``,
    so it is four noncentral relu products (:func:`relu_relu_noncentral`) and two relu means."""
    d_pair = sum(u * v * relu_relu_noncentral(m1 + u, m2 + v, s1, s2, r) for u in (1, -1) for v in (1, -1))
    d1 = _relu_mean(m1 + 1, s1) - _relu_mean(m1 - 1, s1)
    d2 = _relu_mean(m2 + 1, s2) - _relu_mean(m2 - 1, s2)
    return d_pair - d1 - d2 + 1


def kinked_factor_pair(S, f, kinks, inner, nodes=80, shift=None):
    """``E[f(a) f(a') F(b + s(a), b' + s(a'))]`` for ``(a, a', b, b') ~ N(0, S)`` (S (4, 4), a and a' not
    colinear), with ``inner(m1, m2, s1, s2, r) = E F(X, Y)`` of a Gaussian pair in closed form (vectorised),
    ``f`` and the shift ``s`` (default 0) piecewise smooth between ``kinks``: (b, b') given (a, a') is
    Gaussian. In ``a = √A₀₀ X``,
    ``a' = √A₁₁ (ρX + √(1 − ρ²) Z)`` the integral over Z is Gauss–Legendre on the smooth panels between
    the kinks of f(a') (:func:`_normal_panels`), the one over X adaptive (scipy), split at the kinks of
    f(a) and graded where the inner kinks cross the outer axis (as in :func:`pair_by_nested_quadrature`)."""
    A, Cm = S[:2, :2], S[2:, :2]
    M = Cm @ np.linalg.inv(A)
    Sc = S[2:, 2:] - M @ Cm.T
    s1, s2 = np.sqrt(Sc[0, 0]), np.sqrt(Sc[1, 1])
    r = np.clip(Sc[0, 1] / (s1 * s2), -1.0, 1.0)
    sa, sb = np.sqrt(A[0, 0]), np.sqrt(A[1, 1])
    rho = A[0, 1] / (sa * sb)
    s = np.sqrt(1 - rho * rho)

    def given_x(x):
        u = sa * x
        z, w = _normal_panels(1.0, [(k / sb - rho * x) / s for k in kinks], nodes)
        v = sb * (rho * x + s * z)
        shift_u, shift_v = (0.0, 0.0) if shift is None else (shift(u), shift(v))
        return f(u) * np.dot(w, f(v) * inner(M[0, 0] * u + M[0, 1] * v + shift_u, M[1, 0] * u + M[1, 1] * v + shift_v,
                                             s1, s2, r))

    return _outer_quad(given_x, sa, sb, rho, kinks, kinks)


def _normal_legendre(nodes, box):
    """Gauss–Legendre nodes on ``[−box, box]`` and their weights times the standard normal density."""
    t, w = np.polynomial.legendre.leggauss(nodes)
    return box * t, box * w * np.exp(-0.5 * (box * t) ** 2) / SQRT2PI


def tanh_tanh_noncentral(m1, m2, s1, s2, r, nodes=100):
    """E[tanh X · tanh Y] for (X, Y) Gaussian with means m1, m2 (arrays), sds s1, s2 and correlation r:
    ``X = m1 + s1 Z₁``, ``Y = m2 + s2 (r Z₁ + √(1 − r²) Z₂)``, a Gauss–Legendre product rule on [−9, 9]² of
    the standard normal density (tanh is analytic in a strip: the rule converges geometrically)."""
    z, wz = _normal_legendre(nodes, 9.0)
    m1, m2 = np.broadcast_arrays(np.asarray(m1, dtype=float), np.asarray(m2, dtype=float))
    tx = np.tanh(m1[..., None] + s1 * z)  # (..., n): over Z₁
    y = m2[..., None, None] + s2 * (r * z[:, None] + np.sqrt(max(1.0 - r * r, 0.0)) * z[None, :])
    ty = np.tanh(y) @ wz  # (..., n): the Z₂ integral at each Z₁
    return (tx * ty) @ wz


def conditioned_point(F, var_p, var_q, cross, cuts=lambda p: (), kinks_p=()):
    """``E F(p, q)`` for centred Gaussian ``(p, q)`` (variances, covariance), by adaptive quadrature over ``p``
    (split at ``kinks_p``) of adaptive quadrature over ``q | p ~ N(g p, v)``, split at the values ``cuts(p)``
    of q where ``F(p, ·)`` is kinked (curved kinks such as ``b = −tanh(a)``)."""
    g = cross / var_p
    sp, sv = np.sqrt(var_p), np.sqrt(var_q - g * cross)

    def given(z):
        p = sp * z
        points = [y for y in ((c - g * p) / sv for c in cuts(p)) if abs(y) < 12]
        return integrate.quad(lambda y: F(p, g * p + sv * y) * stats.norm.pdf(y), -12, 12, points=points or None,
                              limit=200, epsabs=1e-16, epsrel=1e-13)[0]

    points = [k / sp for k in kinks_p if abs(k / sp) < 12]
    return integrate.quad(lambda z: given(z) * stats.norm.pdf(z), -12, 12, points=points or None, limit=200,
                          epsabs=1e-16, epsrel=1e-12)[0]


def piecewise_pair(f, g, a, b, c, kinks_f=(), kinks_g=(), nodes=80):
    """``E[f(u) g(v)]`` for centred Gaussian ``(u, v)`` (variances a, b, covariance c, not colinear) and f, g
    piecewise smooth and entire between their kinks (polynomials, clips): as
    :func:`pair_by_nested_quadrature`, with Gauss–Legendre on the inner panels (:func:`_normal_panels`)."""
    sa, sb = np.sqrt(a), np.sqrt(b)
    rho = c / (sa * sb)
    s = np.sqrt(1 - rho * rho)

    def given_x(x):
        z, w = _normal_panels(1.0, [(k / sb - rho * x) / s for k in kinks_g], nodes)
        return f(sa * x) * np.dot(w, g(sb * (rho * x + s * z)))

    return _outer_quad(given_x, sa, sb, rho, kinks_f, kinks_g)


def _outer_quad(given_x, sa, sb, rho, kinks_outer, kinks_inner):
    """``E given_x(X)``, ``X ~ N(0, 1)``, by adaptive quadrature split at the outer kinks ``X = k/sa`` and graded
    where an inner kink ``sb (ρX + √(1 − ρ²) Z) = k`` crosses ``Z = 0`` (the inner integral turns there over a
    width ~√(1 − ρ²)/|ρ|)."""
    s = np.sqrt(1 - rho * rho)
    crossings = [k / (sb * rho) for k in kinks_inner if rho != 0]
    breaks = [k / sa for k in kinks_outer] + [x + t * s / abs(rho) for x in crossings
                                              for t in (-30.0, -3.0, -0.3, 0.0, 0.3, 3.0, 30.0)]
    return integrate.quad(lambda x: given_x(x) * stats.norm.pdf(x), -12, 12,
                          points=[p for p in breaks if abs(p) < 12] or None, limit=400, epsabs=1e-15,
                          epsrel=1e-12)[0]


def clipped_mean(m, sd):
    """``E clip(m + sd·Z, −1, 1)`` (hard_tanh) in closed form."""
    lo, hi = (-1.0 - m) / sd, (1.0 - m) / sd
    inside = special.ndtr(hi) - special.ndtr(lo)
    density = np.exp(-lo * lo / 2) - np.exp(-hi * hi / 2)
    return m * inside + sd * density / np.sqrt(2 * np.pi) + special.ndtr(-hi) - special.ndtr(lo)


def elu(x):
    """elu (α = 1)."""
    return np.where(x > 0, x, np.expm1(np.minimum(x, 0.0)))


def elu_slope(x):
    """elu' (α = 1): 1 for x > 0, eˣ below."""
    return np.where(x > 0, 1.0, np.exp(np.minimum(x, 0.0)))


def elu_mean(m, sd):
    """``E elu(m + sd·Z)`` (α = 1) in closed form, the exponential part in logs (no overflow)."""
    t = m / sd
    positive = m * special.ndtr(t) + sd * np.exp(-t * t / 2) / np.sqrt(2 * np.pi)
    return positive + np.exp(m + sd * sd / 2 + special.log_ndtr(-t - sd)) - special.ndtr(-t)


def elu_slope_mean(m, sd):
    """``E elu'(m + sd·Z)`` (α = 1) in closed form: ``Φ(m/sd) + e^{m + sd²/2} Φ(−m/sd − sd)``, in logs."""
    t = m / sd
    return special.ndtr(t) + np.exp(m + sd * sd / 2 + special.log_ndtr(-t - sd))


def pair_by_panels(act, smoothed, kinks, a, b, rho, panels):
    """``E[φ(u) φ(v)]`` for a kinked φ (kinks at ``kinks``), variances a, b and correlation ρ, independent of the
    engine: the inner Gaussian integral in closed form (``smoothed(m, sd) = E φ(m + sd·Z)``), the outer one by
    20-node Gauss–Legendre on ``panels`` equal panels of [−12, 12] split at the kinks (the integrand is analytic
    on each)."""
    nodes, weights = np.polynomial.legendre.leggauss(20)
    edges = np.unique(np.concatenate([np.linspace(-12.0, 12.0, panels + 1), np.asarray(kinks) / np.sqrt(a)]))
    edges = edges[(edges >= -12.0) & (edges <= 12.0)]
    half, mid = np.diff(edges)[:, None] / 2, (edges[1:] + edges[:-1])[:, None] / 2
    z = (mid + half * nodes).ravel()
    w = (half * weights).ravel() * np.exp(-z * z / 2) / np.sqrt(2 * np.pi)
    if 1.0 - abs(rho) < 1e-15:
        right = act(np.sign(rho) * np.sqrt(b) * z)
    else:
        right = smoothed(np.sqrt(b) * rho * z, np.sqrt(b * (1.0 - rho * rho)))
    return np.sum(w * act(np.sqrt(a) * z) * right)


def mlp_kernels(X, depth, sigma_w, sigma_b, expectations):
    """The zoo's MLP NNGP and NTK by Jacot et al.'s recursion — ``Σ¹ = σ_w² xx'/d + σ_b²``, ``Θ¹ = Σ¹``;
    ``Σˡ⁺¹ = σ_w² E[φφ] + σ_b²``, ``Θˡ⁺¹ = Σˡ⁺¹ + σ_w² E[φ'φ'] Θˡ`` — with ``expectations(a, b, rho) = (E[φ(u)φ(v)],
    E[φ'(u)φ'(v)])`` for one pair (variances a, b, correlation ρ), on the upper triangle."""
    S = sigma_w**2 * X @ X.T / X.shape[1] + sigma_b**2
    T = S.copy()
    for _ in range(depth):
        S_next, slope = np.empty_like(S), np.empty_like(S)
        for i, j in zip(*np.triu_indices(len(X)), strict=True):
            a, b = S[i, i], S[j, j]
            rho = 1.0 if i == j else np.clip(S[i, j] / np.sqrt(a * b), -1.0, 1.0)
            both = expectations(a, b, rho)
            S_next[i, j] = S_next[j, i] = sigma_w**2 * both[0] + sigma_b**2
            slope[i, j] = slope[j, i] = sigma_w**2 * both[1]
        S, T = S_next, S_next + slope * T
    return S, T


def piecewise_mlp_kernels(fn, deriv, kinks, X, *, depth, sigma_w, sigma_b, nodes=40):
    """The MLP recursion of :func:`mlp_kernels` for φ and φ' smooth between ``kinks`` (φ' may jump there): every
    pair by :func:`nested_gauss_pair` with ``nodes`` a panel, one point by 1-D adaptive quadrature."""
    def one_point(f, a):
        return integrate.quad(lambda x: f(np.sqrt(a) * x) ** 2 * stats.norm.pdf(x), -12, 12,
                              points=[k / np.sqrt(a) for k in kinks if abs(k) < 12 * np.sqrt(a)] or None,
                              limit=400, epsabs=1e-15, epsrel=1e-13)[0]

    def expectations(a, b, rho):
        if rho == 1.0 and a == b:
            return one_point(fn, a), one_point(deriv, a)
        c = rho * np.sqrt(a * b)
        return tuple(nested_gauss_pair(f, f, a, b, c, kinks, kinks, nodes=nodes) for f in (fn, deriv))

    return mlp_kernels(X, depth, sigma_w, sigma_b, expectations)


def nested_gauss_pair(f, g, a, b, c, kinks_f=(), kinks_g=(), nodes=40, box=12.0):
    """``E[f(u) g(v)]`` for centred Gaussian ``(u, v)`` (variances a, b, covariance c, not colinear), f and g smooth
    between their kinks: ``E[f(√a x) E[g(v) | x]]`` with ``v = √b (ρx + √(1 − ρ²) z)``, both levels by Gauss–Legendre
    with ``nodes`` a panel on ``[−box, box]``, vectorised over x. Inner panels of unit width in z, split where g's
    kinks fall; outer panels of unit width in x, split at f's kinks and graded around where g's kinks cross z = 0
    (the inner expectation turns there over a width ``√(1 − ρ²)/|ρ|``). Run at two ``nodes`` to see its error."""
    sa, sb = np.sqrt(a), np.sqrt(b)
    rho = c / (sa * sb)
    s = np.sqrt((1 - rho) * (1 + rho))
    t, w = np.polynomial.legendre.leggauss(nodes)
    grid = np.arange(-box, box + 0.5)
    crossings = [k / (sb * rho) + d * s / abs(rho) for k in kinks_g if rho != 0
                 for d in (-30.0, -3.0, -0.3, 0.0, 0.3, 3.0, 30.0)]
    cuts = np.unique(np.clip([*grid, *(k / sa for k in kinks_f), *crossings], -box, box))
    lo, hi = cuts[:-1, None], cuts[1:, None]
    x = (0.5 * (lo + hi) + 0.5 * (hi - lo) * t).ravel()
    wx = (0.5 * (hi - lo) * w).ravel() * np.exp(-0.5 * x * x) / SQRT2PI
    inner = np.sort(np.clip(np.concatenate([np.broadcast_to(grid, (x.size, grid.size)),
                                            np.stack([(k / sb - rho * x) / s for k in kinks_g], axis=1)
                                            if len(kinks_g) else np.empty((x.size, 0))], axis=1), -box, box), axis=1)
    zlo, zhi = inner[:, :-1, None], inner[:, 1:, None]
    z = 0.5 * (zlo + zhi) + 0.5 * (zhi - zlo) * t  # (x, panel, node)
    wz = 0.5 * (zhi - zlo) * w * np.exp(-0.5 * z * z) / SQRT2PI
    given_x = np.sum(wz * g(sb * (rho * x[:, None, None] + s * z)), axis=(1, 2))
    return float(np.sum(wx * f(sa * x) * given_x))


def piecewise_linear_pieces(f, reach=40.0, h=1e-3):
    """The kinks and slopes of a continuous piecewise-linear ``f`` (a vectorised callable) on ``[−reach, reach]``:
    ``(kinks, slopes)``, ``slopes[i]`` on the piece left of ``kinks[i]`` (the last right of the last kink). Kinks are
    found where the slope on a grid of step ``h`` changes (two kinks within ``3h`` are missed), then located by
    intersecting the lines of their neighbouring pieces, each measured over a third of the piece (rounding ~ulps,
    not ulps/h); every piece is checked to be linear at its midpoint."""
    x = -reach + h * np.arange(int(round(2 * reach / h)) + 1)
    y = f(x)
    s = np.diff(y) / h
    same = np.abs(np.diff(s)) <= 1e-7 * (1 + np.abs(s[:-1]))  # same[j]: the slope of interval j is that of j + 1
    rough = []
    for j in range(1, len(s) - 1):
        if not same[j - 1] and not same[j]:  # a kink inside interval j
            rough.append(0.5 * (x[j] + x[j + 1]))
        elif not same[j] and same[j - 1] and (j + 1 >= len(same) or same[j + 1]):  # a kink on grid point j + 1
            rough.append(x[j + 1])
    rough = np.array(rough)
    gaps = np.diff(np.concatenate([[-reach - 3.0], rough, [reach + 3.0]])) / 3
    kinks = []
    for i, t in enumerate(rough):
        xl, xr = t - gaps[i], t + gaps[i + 1]
        sl = (f(xl + gaps[i] / 2) - f(xl - gaps[i] / 2)) / gaps[i]
        sr = (f(xr + gaps[i + 1] / 2) - f(xr - gaps[i + 1] / 2)) / gaps[i + 1]
        kinks.append((f(xr) - f(xl) + sl * xl - sr * xr) / (sl - sr))
    kinks = np.array(kinks)
    ends = np.concatenate([[-reach - 3.0], kinks, [reach + 3.0]])
    lo, hi = ends[:-1] + 1e-3 * np.diff(ends), ends[1:] - 1e-3 * np.diff(ends)
    slopes = (f(hi) - f(lo)) / (hi - lo)
    mid = 0.5 * (lo + hi)
    assert np.allclose(f(mid), f(lo) + slopes * (mid - lo), rtol=1e-12, atol=1e-12), "not piecewise linear"
    return kinks, slopes


def relu_mlp_kernels_by_mpmath(X, depth, sigma_w, sigma_b, digits=40, alpha=0.0, layernorm=False):
    """The zoo's ReLU MLP NNGP and NTK by Jacot's recursion with the arc-cosine kernels, every pair in
    ``digits``-digit arithmetic (the correlations of an ordered network come within 1e-15 of 1, where
    float64 angles are rounding). ``alpha``: leaky_relu ``αx + (1 − α) relu(x)``, whose kernels are
    ``(α² + α(1 − α)) c + (1 − α)² K₁`` and ``α² + α(1 − α) + (1 − α)² K₀`` (``E[u relu v] = c/2``).
    ``layernorm``: the zoo's ``layernorm_mlp``, every pre-activation divided by its standard deviation before φ
    (in the limit: the NNGP becomes the correlation, the NTK is divided by ``√(K(x, x) K(x', x'))``, as Neural
    Tangents' ``LayerNorm``)."""
    n, d = X.shape
    K, T = np.empty((n, n)), np.empty((n, n))
    with mpmath.workdps(digits):
        x = [[mpmath.mpf(float(v)) for v in row] for row in X]
        sw2, sb2 = mpmath.mpf(sigma_w) ** 2, mpmath.mpf(sigma_b) ** 2
        beta = mpmath.mpf(alpha)
        gamma = 1 - beta
        linear, squares = beta * beta + beta * gamma, beta * beta + beta * gamma + gamma * gamma / 2
        gram = [[mpmath.fsum(u * v for u, v in zip(x[i], x[j], strict=True)) for j in range(n)] for i in range(n)]
        for i, j in zip(*np.triu_indices(n), strict=True):
            a, b, c = (sw2 * g / d + sb2 for g in (gram[i][i], gram[j][j], gram[i][j]))
            ta, tb, tc = a, b, c
            for _ in range(depth):
                if layernorm:
                    root = mpmath.sqrt(a * b)
                    ta, tb, tc = ta / a, tb / b, tc / root
                    a, b, c = mpmath.mpf(1), mpmath.mpf(1), c / root
                theta = mpmath.acos(max(min(c / mpmath.sqrt(a * b), 1), -1))
                k1 = mpmath.sqrt(a * b) * (mpmath.sin(theta) + (mpmath.pi - theta) * mpmath.cos(theta))
                k1 = linear * c + gamma * gamma * k1 / (2 * mpmath.pi)
                k0 = linear + gamma * gamma * (mpmath.pi - theta) / (2 * mpmath.pi)
                # at one point (θ = 0) both kernels are E φ² / a = E φ'² = β² + βγ + γ²/2
                ta, tb, tc = (sw2 * squares * (a + ta) + sb2, sw2 * squares * (b + tb) + sb2,
                              sw2 * k1 + sb2 + sw2 * k0 * tc)
                a, b, c = sw2 * squares * a + sb2, sw2 * squares * b + sb2, sw2 * k1 + sb2
            K[i, j] = K[j, i] = float(c)
            T[i, j] = T[j, i] = float(tc)
    return K, T


def trapezoid_expectations(act, deriv, step):
    """``expectations`` of :func:`mlp_kernels` for an analytic φ (``deriv`` φ', or None: 0) by the trapezoid rule
    of step ``step`` on a uniform grid over ``[−12, 12]²`` in whitened coordinates — exponentially accurate for
    functions analytic in a strip (tanh: poles at ±iπ/2), and independent of the engine's quadratures."""
    z = step * np.arange(-round(12.0 / step), round(12.0 / step) + 1)  # equally spaced to rounding
    w = np.exp(-z * z / 2)
    w /= w.sum()  # the rule's weights sum to 1 to e^{−2π²/step²}: exactly, so constants cost no rounding
    z1, z2, weights = z[:, None], z[None, :], w[:, None] * w[None, :]

    def expectations(a, b, rho):
        u, v = np.sqrt(a) * z1, np.sqrt(b) * (rho * z1 + np.sqrt(1.0 - rho * rho) * z2)
        return np.sum(weights * act(u) * act(v)), 0.0 if deriv is None else np.sum(weights * deriv(u) * deriv(v))

    return expectations


def piecewise_pair_by_mpmath(F, G, a, b, c, kinks_f=(), kinks_g=(), digits=30):
    """``E[F(u) G(v)]`` for pieces ``F, G`` of :mod:`netsor.gaussian.piecewise` without exponentials
    (``coef · x^p · 1{x ≷ k}``, p ≤ 1) at the float covariances ``a, b, c`` taken exactly, in ``digits`` digits
    (:func:`piecewise_pair_at_angle_by_mpmath` at the angle of one exact ρ, unlike any float64 rule near colinear)."""
    with mpmath.workdps(digits):
        A, B, C = mpmath.mpf(float(a)), mpmath.mpf(float(b)), mpmath.mpf(float(c))
        theta = mpmath.acos(C / mpmath.sqrt(A * B))
        return float(piecewise_pair_at_angle_by_mpmath(F, G, A, B, theta, kinks_f, kinks_g))


def piecewise_pair_at_angle_by_mpmath(F, G, A, B, theta, kinks_f=(), kinks_g=()):
    """``E[F(u) G(v)]`` (pieces as in :func:`piecewise_pair_by_mpmath`) for mpmath variances ``A, B`` and angle
    ``theta`` (``ρ = cos θ``), at mpmath's current precision: ``E[F(u) E[G(v) | u]]`` with the conditional expectation
    in closed form (normal CDF and density; an indicator at θ = 0) and the outer integral by mpmath's quadrature,
    split at F's kinks and around where G's kinks cross the conditional mean."""

    def conditional(m, sd):
        total = mpmath.mpf(0)
        for coef, p, rate, k, above in G:
            assert rate == 0.0
            if math.isinf(k):
                if (k < 0) == above:
                    total += coef * (m if p == 1 else 1)
                continue
            if sd == 0:
                total += coef * (m if p == 1 else 1) * ((m > k) == above)
                continue
            z = (mpmath.mpf(k) - m) / sd
            up, density = mpmath.ncdf(-z), mpmath.npdf(z)
            if above:
                total += coef * (up if p == 0 else m * up + sd * density)
            else:
                total += coef * ((1 - up) if p == 0 else m * (1 - up) - sd * density)
        return total

    def f(x):
        total = mpmath.mpf(0)
        for coef, p, rate, k, above in F:
            assert rate == 0.0
            if (math.isinf(k) and (k < 0) == above) or (not math.isinf(k) and (x > k) == above):
                total += coef * (x if p == 1 else 1)
        return total

    sa, sb = mpmath.sqrt(A), mpmath.sqrt(B)
    rho, s = mpmath.cos(theta), mpmath.sin(theta)
    width = float(s / abs(rho))
    points = [k / float(sa) for k in kinks_f]
    points += [float(k / (sb * rho)) + t * width for k in kinks_g for t in (-20, -3, -0.5, 0, 0.5, 3, 20)]
    points = [-12.0, *sorted(p for p in set(points) if -12 < p < 12), 12.0]
    return mpmath.quad(lambda x: f(sa * x) * conditional(sb * rho * x, sb * s) * mpmath.npdf(x), points)


def piecewise_mlp_kernels_by_mpmath(X, depth, sigma_w, sigma_b, pieces, slopes, kinks, digits=30):
    """The zoo's MLP NNGP and NTK (the recursion of :func:`mlp_kernels`) for a piecewise-linear φ given by its
    pieces and φ' by ``slopes`` (pieces of :mod:`netsor.gaussian.piecewise`, kinks ``kinks``), every covariance and
    angle in ``digits``-digit arithmetic: inputs a perturbation apart have correlations within 1e-16 of 1, where
    float64 angles are rounding. Each expectation by :func:`piecewise_pair_at_angle_by_mpmath`."""
    n, d = X.shape
    K, T = np.empty((n, n)), np.empty((n, n))
    with mpmath.workdps(digits):
        x = [[mpmath.mpf(float(v)) for v in row] for row in X]
        sw2, sb2 = mpmath.mpf(sigma_w) ** 2, mpmath.mpf(sigma_b) ** 2
        gram = [[mpmath.fsum(u * v for u, v in zip(x[i], x[j], strict=True)) / d for j in range(n)] for i in range(n)]
        S = [[sw2 * gram[i][j] + sb2 for j in range(n)] for i in range(n)]
        Th = [row[:] for row in S]
        zero = mpmath.mpf(0)
        for _ in range(depth):
            S_next = [[zero] * n for _ in range(n)]
            T_next = [[zero] * n for _ in range(n)]
            for i, j in zip(*np.triu_indices(n), strict=True):
                a, b = S[i][i], S[j][j]
                theta = zero if i == j else mpmath.acos(S[i][j] / mpmath.sqrt(a * b))
                both = piecewise_pair_at_angle_by_mpmath(pieces, pieces, a, b, theta, kinks, kinks)
                slope = piecewise_pair_at_angle_by_mpmath(slopes, slopes, a, b, theta, kinks, kinks)
                S_next[i][j] = S_next[j][i] = sw2 * both + sb2
                T_next[i][j] = T_next[j][i] = sw2 * both + sb2 + sw2 * slope * Th[i][j]
            S, Th = S_next, T_next
        for i in range(n):
            for j in range(n):
                K[i, j], T[i, j] = float(S[i][j]), float(Th[i][j])
    return K, T


def smooth_pair_by_product_rule(F, S, nodes=64, box=9.0):
    """``E[F(u₁, u₂) F(v₁, v₂)]`` for a centred Gaussian ``(u₁, u₂, v₁, v₂)`` of covariance ``S`` (4×4, full
    rank; or ``v = u``, a point with itself) and ``F`` analytic: a Gauss–Legendre product rule on
    ``[−box, box]`` per whitened coordinate, ``nodes`` per axis (twice as many for a point with itself, two
    axes). The normal density is entire and F analytic in a strip, so the rule converges geometrically
    (softplus(u)·tanh(v) at unit variances: 1e-14 relative from 64 nodes)."""
    S = np.asarray(S, dtype=float)
    if np.array_equal(S[:2, :2], S[2:, 2:]) and np.array_equal(S[:2, 2:], S[:2, :2]):
        z, wz = _normal_legendre(2 * nodes, box)
        L = np.linalg.cholesky(S[:2, :2])
        z1, z2 = np.meshgrid(z, z, indexing="ij")
        f = F(L[0, 0] * z1, L[1, 0] * z1 + L[1, 1] * z2)
        return float(wz @ (f * f) @ wz)
    z, wz = _normal_legendre(nodes, box)
    L = np.linalg.cholesky(S)
    z2, z3, z4 = np.meshgrid(z, z, z, indexing="ij", sparse=True)
    total = 0.0
    for z1, w1 in zip(z, wz, strict=True):  # one slice of the outer axis at a time (memory: nodes³ values)
        u = F(L[0, 0] * z1, L[1, 0] * z1 + L[1, 1] * z[:, None, None])  # (nodes, 1, 1): over z2
        v = F(L[2, 0] * z1 + L[2, 1] * z2 + L[2, 2] * z3,
              L[3, 0] * z1 + L[3, 1] * z2 + L[3, 2] * z3 + L[3, 3] * z4)
        total += float(w1) * float(np.einsum("jkl,j,k,l->", u * v, wz, wz, wz))
    return total


def _half_power_mean(m, s):
    """E[(X⁺)^½] for X ~ N(m, s²): ``s^½ Γ(3/2) e^{−μ²/4} D_{−3/2}(−μ)/√(2π)`` with μ = m/s (parabolic cylinder
    function D, scipy's ``pbdv``)."""
    mu = m / s
    return np.sqrt(s) * special.gamma(1.5) * np.exp(-mu * mu / 4) * special.pbdv(-1.5, -mu)[0] / SQRT2PI


def sqrt_relu_kernel(a, b, c):
    """``E[√(u⁺) √(v⁺)]`` for ``(u, v)`` centred normal with variances a, b and covariance c: an adaptive
    one-dimensional integral over ``u = √a t`` (t ≤ 9: the rest is below 1e-18) of ``√u`` times the closed form
    of the conditional mean of ``√(v⁺)``; on the diagonal ``E u⁺ = √a/√(2π)``."""
    if c * c >= a * b * (1 - 1e-15):
        return math.sqrt(a) / SQRT2PI
    rho = c / math.sqrt(a * b)
    sd = math.sqrt(b * (1 - rho * rho))

    def f(t):
        density = math.exp(-t * t / 2) / SQRT2PI
        return math.sqrt(math.sqrt(a) * t) * _half_power_mean(math.sqrt(b) * rho * t, sd) * density

    return integrate.quad(f, 0.0, 9.0, epsabs=1e-16, epsrel=1e-13, limit=200)[0]
