"""Spectral laws as objects: semicircle, Marchenko–Pastur, Fuss–Catalan, and
measures given by atoms plus a density or by quadrature nodes.

Every law is a probability measure on R with compact support and offers

* ``density(x)`` — density of the absolutely continuous part (atoms excluded);
* ``atoms`` — ``(locations, masses)``, two 1-D arrays (possibly empty);
* ``cdf(x)`` — the distribution function ``μ((−∞, x])`` (atoms included);
* ``moments(k)`` — the array ``(m_1, …, m_k)``, ``m_j = ∫ t^j dμ(t)``;
* ``stieltjes(z)`` — the Cauchy transform ``G(z) = ∫ dμ(t) / (z − t)``, ``Im z > 0``;
* ``support`` — ``(lo, hi)``, the smallest interval carrying the law;
* ``sample_matrix(n, seed)`` — an ``n × n`` symmetric random matrix whose
  empirical spectral distribution tends to the law (where a natural one exists).

Arrays ``x`` and ``z`` of any shape are accepted and the result has the same shape. The closed-form
Cauchy transforms (semicircle, Marchenko–Pastur) are analytic off the support and accept any ``z``
there (upper or lower half-plane, real axis outside the support; on the support, the limit from the
side of the sign of ``Im z``, ``+0`` for real input); they are evaluated without cancellation, so
that ``G(z) ~ 1/z`` keeps its relative accuracy for large ``|z|``.

Moments are exact integers (Catalan, Narayana, Fuss–Catalan) times powers of the parameters,
carried with a separate binary exponent so that nothing overflows before the result does; a
moment beyond the float64 range raises :class:`~netsor.errors.NumericalError`.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from math import comb

import numpy as np
from scipy import interpolate

from netsor.errors import HyperParameterError, InputError, NumericalError, UnsupportedError
from netsor.validate import (
    MAX_ARRAY_ENTRIES,
    Seed,
    check_count,
    check_real,
    complex_array,
    generator,
    physical_memory,
    real_array,
)

Array = np.ndarray
_EMPTY = (np.zeros(0), np.zeros(0))
#: Largest Fuss–Catalan order: the law's median is about 4e−294 at order 1000 (its cdf grows like
#: ``x^{1/(s+1)}`` near 0), and beyond it most of the mass is below the float64 range.
MAX_FUSS_CATALAN_ORDER = 1000
#: Logarithm of the largest float64.
_LOG_MAX = np.log(np.finfo(float).max)


#: Fraction of the machine's physical memory that one sampled matrix (with its temporaries) may use.
MEMORY_FRACTION = 0.5


def check_positive(value: object, what: str) -> float:
    """A finite real ``> 0`` (variances, ratios)."""
    return check_real(value, what, minimum=0.0, strict=True)


def check_memory(entries: int, what: str, change: str) -> None:
    """Refuse to allocate ``entries`` float64 values (all the arrays of one step together) when
    they exceed :data:`MEMORY_FRACTION` of this machine's physical memory (or 2**40 bytes when the
    OS does not say); ``change`` tells the user what to reduce."""
    total = physical_memory()
    budget = MEMORY_FRACTION * total if total is not None else 8.0 * MAX_ARRAY_ENTRIES
    if entries * 8.0 > budget:
        raise HyperParameterError(
            f"{what} would need {entries * 8.0 / 2**30:.3g} GiB, more than the {budget / 2**30:.3g} GiB "
            f"allowed ({MEMORY_FRACTION:g} of this machine's memory); {change}")


def _split(value: int | float) -> tuple[float, int]:
    """``(m, e)`` with ``value = m · 2**e`` (``m`` a float; an integer of any size is rounded to
    53 bits, a float split exactly)."""
    if isinstance(value, int):
        shift = max(value.bit_length() - 60, 0)
        return float(value >> shift), shift
    return math.frexp(value)


def _power(base: float, n: int) -> tuple[float, int]:
    """``base**n`` as ``(m, e)``, ``base**n = m · 2**e``, by binary powering with renormalised
    mantissas: no overflow or underflow for any ``n`` (relative error ~ ``log2(n)`` ulps)."""
    mant, expo = math.frexp(base)
    out, out_e = 1.0, 0
    while n:
        if n & 1:
            out, e = math.frexp(out * mant)
            out_e += expo + e
        mant, e = math.frexp(mant * mant)
        expo = 2 * expo + e
        n >>= 1
    return out, out_e


def _product(*factors: tuple[float, int]) -> tuple[float, int]:
    """The product of numbers given as ``(m, e)``."""
    mant, expo = 1.0, 0
    for m, e in factors:
        mant, shift = math.frexp(mant * m)
        expo += e + shift
    return mant, expo


def _to_float(value: tuple[float, int]) -> float:
    """``m · 2**e`` as a float: ``±inf`` beyond the float64 range (0 below it)."""
    m, e = value
    try:
        return math.ldexp(m, e)
    except OverflowError:
        return math.copysign(math.inf, m)


def _sum(terms: list[tuple[float, int]]) -> float:
    """The sum of numbers of one sign given as ``(m, e)``, as a float (``±inf`` beyond float64)."""
    top = max(e for m, e in terms if m != 0.0) if any(m != 0.0 for m, _ in terms) else 0
    return _to_float((math.fsum(math.ldexp(m, e - top) for m, e in terms), top))


def finite_moments(law: SpectralLaw, values: list[float]) -> Array:
    """``values`` (the moments m_1, m_2, ...) as an array, or a :class:`NumericalError` naming the
    first moment beyond the float64 range."""
    m = np.asarray(values, dtype=float)
    bad = np.flatnonzero(~np.isfinite(m))
    if bad.size:
        j = int(bad[0]) + 1
        fix = f"ask for at most {j - 1} moments or rescale" if j > 1 else "rescale"
        raise NumericalError(f"{law!r}: the moment m_{j} is beyond the float64 range (> 1.8e308); "
                             f"{fix} the law (e.g. a smaller variance)")
    return m


class SpectralLaw(ABC):
    """A compactly supported probability measure on R (see the module docstring)."""

    @property
    @abstractmethod
    def support(self) -> tuple[float, float]:
        """``(lo, hi)``: the smallest closed interval carrying the law."""

    @property
    def atoms(self) -> tuple[Array, Array]:
        """``(locations, masses)`` of the atoms; both 1-D, possibly empty."""
        return _EMPTY

    @abstractmethod
    def density(self, x: Array) -> Array:
        """Density of the absolutely continuous part at ``x`` (same shape as ``x``)."""

    @abstractmethod
    def moments(self, k: int) -> Array:
        """The moments ``(m_1, …, m_k)``, shape ``(k,)``."""

    @abstractmethod
    def stieltjes(self, z: Array) -> Array:
        """Cauchy transform ``G(z) = ∫ dμ(t)/(z − t)`` for ``Im z > 0`` (same shape as ``z``)."""

    def cdf(self, x: Array) -> Array:
        """``μ((−∞, x])`` at ``x`` (same shape as ``x``)."""
        xx = real_array(x, "x")
        grid, cum = self.cdf_table()
        cont = np.interp(xx, grid, cum, left=0.0, right=cum[-1])
        loc, mass = self.atoms
        return cont + np.sum(mass * (loc <= xx[..., None]), axis=-1)

    def cdf_table(self) -> tuple[Array, Array]:
        """``(x, C)``: increasing points and the cumulative mass of the continuous part at
        them (atoms excluded); :meth:`cdf` interpolates it linearly."""
        raise UnsupportedError(f"{type(self).__name__} has no distribution function")

    def quadrature(self) -> tuple[Array, Array]:
        """``(nodes, weights)`` representing the law in integrals ``∫ f dμ ≈ Σ w_i f(x_i)``
        (atoms included): by default the midpoints and masses of the cdf table's cells."""
        x, cum = self.cdf_table()
        loc, mass = self.atoms
        return np.concatenate([0.5 * (x[1:] + x[:-1]), loc]), np.concatenate([np.diff(cum), mass])

    def quantile(self, u: Array) -> Array:
        """The quantile function ``inf{x : F(x) ≥ u}`` at ``u ∈ [0, 1]`` (same shape as ``u``),
        from the cdf table and the atoms (linear between table points)."""
        uu = real_array(u, "u")
        if np.any((uu < 0) | (uu > 1)):
            raise InputError("quantile levels u must lie in [0, 1]")
        x, cum = self.cdf_table()
        loc, mass = self.atoms
        pts = np.unique(np.concatenate([x, loc]))
        cont = np.interp(pts, x, cum, left=0.0, right=cum[-1])
        before = cont + np.sum(mass * (loc < pts[:, None]), axis=1)
        after = cont + np.sum(mass * (loc <= pts[:, None]), axis=1)
        xs = np.repeat(pts, 2)
        fs = np.maximum.accumulate(np.column_stack([before, after]).ravel())
        idx = np.clip(np.searchsorted(fs, uu, side="left"), 1, fs.size - 1)  # first F ≥ u
        f0, f1 = fs[idx - 1], fs[idx]
        frac = np.clip((uu - f0) / np.where(f1 > f0, f1 - f0, 1.0), 0.0, 1.0)
        return np.where(uu <= fs[0], xs[0], xs[idx - 1] + frac * (xs[idx] - xs[idx - 1]))

    @property
    def mean(self) -> float:
        """First moment ``m_1``."""
        return float(self.moments(1)[0])

    def sample_matrix(self, n: int, seed: Seed = 0) -> Array:
        """An ``n × n`` symmetric random matrix whose spectrum tends to this law (``seed``
        under the seed policy of :mod:`netsor.validate`)."""
        raise UnsupportedError(f"{type(self).__name__} has no natural random-matrix model")

    @staticmethod
    def _moment_check(k: int) -> int:
        return check_count(k, "number of moments k", minimum=1)


def _sqrt_branch(z: Array, a: float, b: float) -> Array:
    """``sqrt((z − a)(z − b))`` with the branch ``~ z`` at infinity, cut on [a, b]."""
    return np.sqrt(z - a) * np.sqrt(z - b)


def _cauchy_root(p: Array, q: Array, denom: Array) -> Array:
    """``(p − q)/denom`` for a Cauchy transform that solves a quadratic, where
    ``(p − q)(p + q) = 2·denom``: formed as ``2/(p + q)`` where ``|p + q| ≥ |p − q|`` (there
    ``p − q`` would cancel: large ``|z|``), else directly. The larger of ``|p ± q|`` is at least
    ``sqrt(|p|² + |q|²)``, so neither form loses digits."""
    plus, minus = p + q, p - q
    big = np.abs(plus) >= np.abs(minus)
    return np.where(big, 2.0 / np.where(big, plus, 1.0), minus / np.where(big, 1.0, denom))


class Semicircle(SpectralLaw):
    """Wigner's semicircle law of variance ``variance`` centred at ``center``.

    Density ``sqrt(4v − (x−c)²) / (2π v)`` on ``[c − 2√v, c + 2√v]``; even central
    moments ``v^j · Catalan(j)``. Random-matrix model: ``c I + √v (G + Gᵀ)/√(2n)``
    with ``G`` an ``n × n`` standard Gaussian matrix (GOE).
    """

    def __init__(self, variance: float = 1.0, center: float = 0.0) -> None:
        self.variance = check_positive(variance, "semicircle variance")
        self.center = check_real(center, "semicircle center")
        self._radius = 2.0 * np.sqrt(self.variance)
        if not np.all(np.isfinite(self.support)):
            raise HyperParameterError(
                f"the semicircle's support center ± 2 sqrt(variance) = {self.center:g} ± {self._radius:g} "
                "overflows float64; use a smaller variance or center")

    def __repr__(self) -> str:
        return f"Semicircle(variance={self.variance:g}, center={self.center:g})"

    @property
    def support(self) -> tuple[float, float]:
        return (self.center - self._radius, self.center + self._radius)

    def density(self, x: Array) -> Array:
        u = real_array(x, "x") - self.center
        return np.sqrt(np.maximum(self._radius**2 - u * u, 0.0)) / (2.0 * np.pi * self.variance)

    def cdf(self, x: Array) -> Array:
        u = np.clip((real_array(x, "x") - self.center) / self._radius, -1.0, 1.0)
        return 0.5 + (u * np.sqrt(1.0 - u * u) + np.arcsin(u)) / np.pi

    def cdf_table(self) -> tuple[Array, Array]:
        t = np.linspace(0.0, np.pi, 4097)
        x = self.center - self._radius * np.cos(t)
        return x, self.cdf(x)

    def moments(self, k: int) -> Array:
        """Raw moments ``Σ_i C(n, 2i) Catalan(i) v^i c^{n−2i}`` (all terms of one sign)."""
        k = self._moment_check(k)
        central = [_product(_split(comb(2 * j, j) // (j + 1)), _power(self.variance, j))
                   for j in range(k // 2 + 1)]
        raw = [_sum([_product(_split(comb(n, 2 * j)), central[j], _power(self.center, n - 2 * j))
                     for j in range(n // 2 + 1)]) for n in range(1, k + 1)]
        return finite_moments(self, raw)

    def stieltjes(self, z: Array) -> Array:
        """``G(z) = (w − s)/(2v) = 2/(w + s)``, ``w = z − c``, ``s = sqrt(w² − 4v)`` (branch ``~ w``)."""
        w = complex_array(z, "z") - self.center
        return _cauchy_root(w, _sqrt_branch(w, -self._radius, self._radius), 2.0 * self.variance)

    def sample_matrix(self, n: int, seed: Seed = 0) -> Array:
        n = check_count(n, "matrix size n", minimum=1)
        check_memory(3 * n * n, f"Semicircle.sample_matrix({n}) (n × n matrices)", "use a smaller n")
        g = generator(seed).standard_normal((n, n))
        return self.center * np.eye(n) + np.sqrt(self.variance / (2.0 * n)) * (g + g.T)


class MarchenkoPastur(SpectralLaw):
    """Marchenko–Pastur law of aspect ratio ``λ = ratio`` and variance ``v``.

    Law of the eigenvalues of the ``n × n`` matrix ``Y = v XᵀX / m`` with ``X`` an
    ``m × n`` standard Gaussian matrix and ``λ = n / m``. Atom ``1 − 1/λ`` at 0 when
    ``λ > 1``; density ``sqrt((b − x)(x − a)) / (2π v λ x)`` on ``[a, b]``,
    ``a, b = v (1 ∓ √λ)²``; moments ``v^k Σ_r Narayana(k, r) λ^{r−1}``;
    S-transform ``1 / (v (1 + λ z))``.
    """

    def __init__(self, ratio: float = 1.0, variance: float = 1.0) -> None:
        self.ratio = check_positive(ratio, "Marchenko–Pastur ratio")
        self.variance = check_positive(variance, "Marchenko–Pastur variance")
        r = np.sqrt(self.ratio)
        if not np.log(2.0 * np.pi * self.variance) + np.log(self.ratio) + 2.0 * np.log1p(r) < _LOG_MAX:
            raise HyperParameterError(
                f"Marchenko–Pastur law with ratio {self.ratio:g} and variance {self.variance:g}: its "
                "support [v(1 − √λ)², v(1 + √λ)²] is too large for float64 (the density's denominator "
                "2π v λ x overflows at its upper edge); use a smaller variance or ratio")
        self._edges = (self.variance * (1.0 - r) ** 2, self.variance * (1.0 + r) ** 2)

    def __repr__(self) -> str:
        return f"MarchenkoPastur(ratio={self.ratio:g}, variance={self.variance:g})"

    @property
    def support(self) -> tuple[float, float]:
        lo = 0.0 if self.ratio > 1.0 else self._edges[0]
        return (lo, self._edges[1])

    @property
    def atoms(self) -> tuple[Array, Array]:
        if self.ratio > 1.0:
            return np.zeros(1), np.array([1.0 - 1.0 / self.ratio])
        return _EMPTY

    def density(self, x: Array) -> Array:
        xx = real_array(x, "x")
        a, b = self._edges
        inside = (xx > a) & (xx < b)
        safe = np.where(inside, xx, 0.5 * (a + b))
        value = np.sqrt(b - safe) * np.sqrt(safe - a) / (2.0 * np.pi * self.variance * self.ratio * safe)
        return np.where(inside, value, 0.0)

    def cdf_table(self) -> tuple[Array, Array]:
        a, b = self._edges
        t = np.linspace(0.0, np.pi, 4097)
        x = a + (b - a) * (1.0 - np.cos(t)) / 2.0  # dx = (b − a) sin t / 2 dt: smooth integrand
        integrand = self.density(x) * (b - a) * np.sin(t) / 2.0
        steps = 0.5 * (integrand[1:] + integrand[:-1]) * np.diff(t)
        cum = np.concatenate([[0.0], np.cumsum(steps)])
        return x, cum * (min(1.0, 1.0 / self.ratio) / cum[-1])

    def moments(self, k: int) -> Array:
        """``m_n = v^n N_n(λ)``, ``N_n`` the Narayana polynomials, by their three-term recurrence
        ``(n + 1) N_n = (2n − 1)(1 + λ) N_{n−1} − (n − 2)(1 − λ)² N_{n−2}`` (``N_0 = N_1 = 1``)
        applied to ``N_n / b^n``, ``b = (1 + √λ)²`` (bounded by 1: the recurrence's dominant
        solution, so it is stable and never overflows); ``(v b)^n`` is applied last."""
        k = self._moment_check(k)
        lam = self.ratio
        b = (1.0 + np.sqrt(lam)) ** 2
        scaled = [1.0, 1.0 / b]
        for n in range(2, k + 1):
            scaled.append(((2 * n - 1) * (1.0 + lam) / b * scaled[-1]
                           - (n - 2) * (1.0 - lam) ** 2 / (b * b) * scaled[-2]) / (n + 1))
        return finite_moments(self, [_to_float(_product(_split(float(scaled[n])), _power(self.variance * b, n)))
                                     for n in range(1, k + 1)])

    def stieltjes(self, z: Array) -> Array:
        """``G(z) = (p − s)/(2λvz) = 2/(p + s)``, ``p = z − v(1 − λ)``, ``s = sqrt((z − a)(z − b))``
        (branch ``~ z``; ``(p − s)(p + s) = 4λvz``)."""
        zz = complex_array(z, "z")
        a, b = self._edges
        v, lam = self.variance, self.ratio
        if lam >= 1.0 and np.any(zz == 0):
            raise InputError(f"z = 0 is a pole of the Cauchy transform of {self!r} (its atom or "
                             "x^(−1/2) edge at 0); pass z ≠ 0")
        return _cauchy_root(zz - v * (1.0 - lam), _sqrt_branch(zz, a, b), 2.0 * lam * v * zz)

    def sample_matrix(self, n: int, seed: Seed = 0) -> Array:
        n = check_count(n, "matrix size n", minimum=1)
        m = max(1, int(round(n / self.ratio)))
        check_memory(m * n + 2 * n * n, f"a {m} × {n} Gaussian matrix for MarchenkoPastur(ratio="
                     f"{self.ratio:g}).sample_matrix({n})", "use a smaller n or a larger ratio (m = n / ratio rows)")
        x = generator(seed).standard_normal((m, n))
        return self.variance * (x.T @ x) / m


class FussCatalan(SpectralLaw):
    """Fuss–Catalan law of order ``s``: squared singular values of ``W_s ⋯ W_1``.

    ``W_i`` are independent ``n × n`` Gaussian matrices with entries
    ``N(0, variance/n)``. Moments ``variance^{s k} · C((s+1)k, k) / (s k + 1)``; support
    ``[0, variance^s (s+1)^{s+1} / s^s]``; S-transform ``1 / (variance (1 + z))^s``.
    The density uses the parametrisation of Haagerup–Möller / Neuschel:
    ``x(φ) = sin((s+1)φ)^{s+1} / (sin φ sin(sφ)^s)``,
    ``ρ(x(φ)) = sin²φ sin(sφ)^{s−1} / (π sin((s+1)φ)^s)``, ``0 < φ < π/(s+1)``.
    ``order = 1`` is ``MarchenkoPastur(1, variance)``. The parametrisation is evaluated in
    logarithms (the powers under- and overflow for large ``s``); orders up to
    :data:`MAX_FUSS_CATALAN_ORDER`, with ``variance^s`` and the support within float64.
    """

    def __init__(self, order: int, variance: float = 1.0) -> None:
        self.order = check_count(order, "Fuss–Catalan order", minimum=1)
        self.variance = check_positive(variance, "Fuss–Catalan variance")
        s = self.order
        if s > MAX_FUSS_CATALAN_ORDER:
            raise HyperParameterError(
                f"Fuss–Catalan order must be <= {MAX_FUSS_CATALAN_ORDER}, got {s}: beyond it more than "
                "half of the law's mass lies below 1e-300, outside the float64 range")
        self._edge = (s + 1) ** (s + 1) / s**s  # exact integers, one correctly rounded division
        log_scale = s * np.log(self.variance)
        if not -700.0 < log_scale < 700.0 - np.log(self._edge):
            raise HyperParameterError(
                f"FussCatalan(order={s}, variance={self.variance:g}): the scale variance^s = "
                f"1e{log_scale / np.log(10):.0f} or the support's upper edge variance^s (s+1)^(s+1)/s^s "
                "is beyond the float64 range; use a variance closer to 1 or a smaller order")
        self._scale = self.variance**s
        self._table, self._quad = self._parametric_table()

    def __repr__(self) -> str:
        return f"FussCatalan(order={self.order}, variance={self.variance:g})"

    @property
    def support(self) -> tuple[float, float]:
        return (0.0, self._scale * self._edge)

    def _log_x_rho(self, phi: Array) -> tuple[Array, Array]:
        """``(log x(φ), log ρ(x(φ)))`` of the parametrisation (class docstring) with
        ``variance = 1``, in logarithms: the powers ``sin(·)^s`` under- and overflow for large ``s``."""
        s = self.order
        with np.errstate(divide="ignore"):  # log 0 at φ = π/(s+1): x = 0
            lsp, lssp, ls1p = np.log(np.sin(phi)), np.log(np.sin(s * phi)), np.log(np.sin((s + 1) * phi))
        return (s + 1) * ls1p - lsp - s * lssp, 2 * lsp + (s - 1) * lssp - np.log(np.pi) - s * ls1p

    def _dlogx(self, phi: Array) -> Array:
        """``d log x(φ) / dφ``."""
        s = self.order
        return (s + 1) ** 2 / np.tan((s + 1) * phi) - 1.0 / np.tan(phi) - s * s / np.tan(s * phi)

    def _parametric_table(self) -> tuple[tuple[Array, Array, Array], tuple[Array, Array]]:
        """(φ, x(φ) ascending in x, F(x(φ))) on a fine grid, F by Gauss–Legendre in φ; and
        the quadrature (nodes in x, weights) of the law itself."""
        s = self.order
        end = np.pi / (s + 1)
        edges = end * (1.0 - np.cos(np.linspace(0.0, np.pi, 2049))) / 2.0
        nodes, weights = np.polynomial.legendre.leggauss(8)
        mid, half = (edges[1:] + edges[:-1]) / 2.0, (edges[1:] - edges[:-1]) / 2.0
        phi = mid[:, None] + half[:, None] * nodes
        # |dx/dφ| ρ(x) is bounded on (0, π/(s+1)); derivative of log x analytically:
        log_x, log_rho = self._log_x_rho(phi)
        x = np.exp(log_x)
        qw = half[:, None] * weights * np.exp(log_rho + log_x) * np.abs(self._dlogx(phi))
        mass = qw.sum(axis=1)
        # F(x) increases as φ decreases: cumulative mass from φ = π/(s+1) (x = 0) downwards
        cum_from_end = np.concatenate([np.cumsum(mass[::-1])[::-1], [0.0]])
        cum_from_end /= cum_from_end[0]
        x_inner = np.exp(self._log_x_rho(edges[1:-1])[0])
        x_edges = np.concatenate([[self._edge], x_inner, [0.0]])
        table = (edges[::-1], self._scale * x_edges[::-1], cum_from_end[::-1])
        return table, (self._scale * x.ravel(), qw.ravel() / qw.sum())

    def _phi_of_x(self, x: Array) -> Array:
        phi_t, x_t, _ = self._table
        lo = np.interp(x, x_t, phi_t)  # decent start; refine by Newton on log x(φ)
        s = self.order
        phi = np.clip(lo, 1e-300, np.pi / (s + 1))
        target = np.log(np.maximum(x, 1e-300)) - np.log(self._scale)
        for _ in range(6):
            log_x = np.maximum(self._log_x_rho(phi)[0], np.log(1e-300))
            step = (log_x - target) / self._dlogx(phi)
            phi = np.clip(phi - step, 1e-15, np.pi / (s + 1) - 1e-15)
        return phi

    def density(self, x: Array) -> Array:
        xx = real_array(x, "x")
        inside = (xx > 0) & (xx < self.support[1])
        phi = self._phi_of_x(np.where(inside, xx, self.support[1] / 2))
        return np.where(inside, np.exp(self._log_x_rho(phi)[1]) / self._scale, 0.0)

    def cdf(self, x: Array) -> Array:
        xx = real_array(x, "x")
        inside = (xx > 0) & (xx < self.support[1])
        phi_t, _, cum = self._table
        phi = self._phi_of_x(np.where(inside, xx, self.support[1] / 2))
        value = interpolate.PchipInterpolator(phi_t[::-1], cum[::-1])(phi)
        return np.where(inside, value, np.where(xx <= 0, 0.0, 1.0))

    def quantile(self, u: Array) -> Array:
        """The quantile function at ``u ∈ [0, 1]``, by monotone (PCHIP) interpolation of ``φ`` against
        the cdf table and the parametrisation ``x(φ)``: linear interpolation in ``x`` would be poor
        near 0, where ``F(x)`` grows like ``x^{1/(s+1)}``."""
        uu = real_array(u, "u")
        if np.any((uu < 0) | (uu > 1)):
            raise InputError("quantile levels u must lie in [0, 1]")
        phi_t, _, cum = self._table
        keep = np.concatenate([[True], np.diff(cum) > 0])  # strictly increasing abscissae
        phi = interpolate.PchipInterpolator(cum[keep], phi_t[keep])(uu)
        inside = (uu > 0) & (uu < 1)
        x = self._scale * np.exp(self._log_x_rho(np.where(inside, phi, np.pi / (2 * self.order + 2)))[0])
        return np.where(inside, x, np.where(uu <= 0, 0.0, self.support[1]))

    def moments(self, k: int) -> Array:
        """``variance^{s j} C((s+1)j, j)/(s j + 1)``, the Fuss–Catalan numbers as exact integers."""
        k = self._moment_check(k)
        s = self.order
        return finite_moments(self, [_to_float(_product(_split(comb((s + 1) * j, j) // (s * j + 1)),
                                                        _power(self._scale, j))) for j in range(1, k + 1)])

    def stieltjes(self, z: Array) -> Array:
        # Gauss–Legendre quadrature of the parametric density in φ (bounded integrand)
        qx, qw = self._quad
        return np.sum(qw / (complex_array(z, "z")[..., None] - qx), axis=-1)

    def cdf_table(self) -> tuple[Array, Array]:
        _, x, cum = self._table
        return x, cum

    def quadrature(self) -> tuple[Array, Array]:
        return self._quad

    def sample_matrix(self, n: int, seed: Seed = 0) -> Array:
        n = check_count(n, "matrix size n", minimum=1)
        check_memory(4 * n * n, f"FussCatalan.sample_matrix({n}) (n × n matrices)", "use a smaller n")
        rng = generator(seed)
        prod = np.eye(n)
        for _ in range(self.order):
            prod = rng.standard_normal((n, n)) @ prod * np.sqrt(self.variance / n)
        return prod @ prod.T


class NodeLaw(SpectralLaw):
    """A law whose integrals are sums over weighted nodes (atoms and/or quadrature nodes)."""

    _nodes: Array
    _weights: Array

    @property
    def support(self) -> tuple[float, float]:
        return (float(self._nodes.min()), float(self._nodes.max()))

    def moments(self, k: int) -> Array:
        k = self._moment_check(k)
        return np.array([np.dot(self._weights, self._nodes**j) for j in range(1, k + 1)])

    def stieltjes(self, z: Array) -> Array:
        zz = complex_array(z, "z")
        return np.sum(self._weights / (zz[..., None] - self._nodes), axis=-1)

    def quadrature(self) -> tuple[Array, Array]:
        """``(nodes, weights)``: the discrete representation used for integrals."""
        return self._nodes, self._weights


def _validated_nodes(nodes: object, weights: object, what: str) -> tuple[Array, Array]:
    x = real_array(nodes, f"{what} locations").ravel()
    w = real_array(weights, f"{what} masses").ravel()
    if x.shape != w.shape:
        raise InputError(
            f"{what}: {x.size} locations but {w.size} masses; pass one mass per location")
    if np.any(w < 0):
        raise InputError(f"{what}: masses must be ≥ 0")
    return x, w


class DiscreteLaw(NodeLaw):
    """A finitely supported law ``Σ_i w_i δ_{x_i}`` (all of it atoms).

    Parameters
    ----------
    locations, masses : array_like, shape (m,)
        Atom locations and masses (masses ≥ 0, summing to 1 within 1e-9).
    """

    def __init__(self, locations: Array, masses: Array) -> None:
        x, w = _validated_nodes(locations, masses, "discrete law")
        if x.size == 0 or abs(w.sum() - 1.0) > 1e-9:
            raise InputError(f"discrete law: masses must sum to 1, got {w.sum():.12g}")
        order = np.argsort(x)
        x, w = x[order], w[order] / w.sum()
        uniq, inverse = np.unique(x, return_inverse=True)
        self._nodes, self._weights = uniq, np.bincount(inverse, weights=w)

    def __repr__(self) -> str:
        lo, hi = self.support
        return f"DiscreteLaw({self._nodes.size} atoms on [{lo:g}, {hi:g}])"

    @property
    def atoms(self) -> tuple[Array, Array]:
        return self._nodes, self._weights

    def density(self, x: Array) -> Array:
        return np.zeros_like(real_array(x, "x"))

    def cdf_table(self) -> tuple[Array, Array]:
        lo, hi = self.support
        return np.array([lo, hi]), np.zeros(2)


class QuadratureLaw(NodeLaw):
    """A law whose continuous part is known through quadrature nodes, plus exact atoms.

    ``∫ f dμ ≈ Σ_i w_i f(x_i) + Σ_j p_j f(a_j)``: the nodes ``x_i`` discretise a
    continuous part (they are *not* atoms: free convolutions do not create atoms
    from them), the ``a_j`` are true atoms. Used for the law of ``φ'(h)²``.
    The density is not available (only integrals are); the cdf is the step
    function of the nodes, accurate to the node spacing.
    """

    def __init__(self, nodes: Array, weights: Array, atoms: tuple[Array, Array] | None = None,
                 name: str = "quadrature law") -> None:
        x, w = _validated_nodes(nodes, weights, name)
        a, p = _validated_nodes(*(atoms if atoms is not None else _EMPTY), f"{name} atoms")
        total = w.sum() + p.sum()
        if abs(total - 1.0) > 1e-8:
            raise InputError(
                f"{name}: node weights plus atom masses must sum to 1, got {total:.12g}")
        self.name = name
        self._atoms = (a, p / total)
        self._continuous = (x, w / total)
        self._nodes = np.concatenate([x, a])
        self._weights = np.concatenate([w, p]) / total

    def __repr__(self) -> str:
        n_nodes, n_atoms = self._continuous[0].size, self._atoms[0].size
        return f"QuadratureLaw({self.name!r}, {n_nodes} nodes, {n_atoms} atoms)"

    @property
    def atoms(self) -> tuple[Array, Array]:
        return self._atoms

    @property
    def continuous_nodes(self) -> tuple[Array, Array]:
        """``(nodes, weights)`` of the continuous part only."""
        return self._continuous

    def density(self, x: Array) -> Array:
        raise UnsupportedError(
            f"{self.name} is known through quadrature nodes only: use cdf, moments or stieltjes")

    def cdf_table(self) -> tuple[Array, Array]:
        x, w = self._continuous
        order = np.argsort(x)
        return x[order], np.cumsum(w[order])


class DensityLaw(SpectralLaw):
    """A law given by a density on ``[lo, hi]`` plus optional atoms.

    Parameters
    ----------
    density : callable
        Vectorised ``x ↦ ρ(x) ≥ 0`` for the absolutely continuous part: called with an array, it
        returns an array of the same shape (a scalar, for a constant density, is broadcast).
    support : (float, float)
        ``(lo, hi)`` outside which ``ρ = 0``.
    atoms : (array_like, array_like), optional
        Atom locations and masses. Continuous mass plus atom masses must be 1
        (checked to 1e-6 by composite Gauss–Legendre quadrature, 256 panels × 16).
    """

    def __init__(self, density, support: tuple[float, float],
                 atoms: tuple[Array, Array] | None = None) -> None:
        if not callable(density):
            raise HyperParameterError("DensityLaw: density must be a vectorised callable")
        lo, hi = (float(v) for v in real_array(support, "support", ndim=1))
        if not hi > lo:
            raise HyperParameterError(f"DensityLaw: support must satisfy lo < hi, got {(lo, hi)}")
        self._fn, self._interval = density, (lo, hi)
        self._atoms = _validated_nodes(*(atoms if atoms is not None else _EMPTY), "atoms")
        t = np.linspace(0.0, np.pi, 257)
        edges = lo + (hi - lo) * (1.0 - np.cos(t)) / 2.0  # panels clustered at the edges
        g, gw = np.polynomial.legendre.leggauss(16)
        mid, half = (edges[1:] + edges[:-1]) / 2.0, (edges[1:] - edges[:-1]) / 2.0
        self._qx = (mid[:, None] + half[:, None] * g).ravel()
        rho = self._values(self._qx)
        if np.any(rho < 0):
            raise InputError("DensityLaw: the density takes negative values")
        self._qw = (half[:, None] * gw).ravel() * rho
        total = self._qw.sum() + self._atoms[1].sum()
        if abs(total - 1.0) > 1e-6:
            raise InputError(f"DensityLaw: total mass is {total:.9g}, not 1; normalise the density")
        panel_mass = np.sum((half[:, None] * gw) * rho.reshape(half.size, -1), axis=1)
        self._edges_cum = (edges, np.concatenate([[0.0], np.cumsum(panel_mass)]))

    def __repr__(self) -> str:
        return f"DensityLaw(support={self._interval}, {self._atoms[0].size} atoms)"

    @property
    def support(self) -> tuple[float, float]:
        lo, hi = self._interval
        a = self._atoms[0]
        return (min(lo, *a) if a.size else lo, max(hi, *a) if a.size else hi)

    @property
    def atoms(self) -> tuple[Array, Array]:
        return self._atoms

    def density(self, x: Array) -> Array:
        xx = real_array(x, "x")
        lo, hi = self._interval
        inside = (xx >= lo) & (xx <= hi)
        return np.where(inside, self._values(np.where(inside, xx, lo)), 0.0)

    def _values(self, x: Array) -> Array:
        """The user's density at the points ``x`` (a constant, a 0-d result, is broadcast)."""
        rho = real_array(self._fn(x), "density values")
        if rho.ndim == 0:
            return np.full(x.shape, float(rho))
        if rho.shape != x.shape:
            raise InputError(f"DensityLaw: the density returned shape {rho.shape} for x of shape {x.shape}; "
                             "it must be vectorised (one value per point, e.g. lambda x: np.ones_like(x))")
        return rho

    def cdf_table(self) -> tuple[Array, Array]:
        return self._edges_cum

    def quadrature(self) -> tuple[Array, Array]:
        loc, mass = self._atoms
        return np.concatenate([self._qx, loc]), np.concatenate([self._qw, mass])

    def moments(self, k: int) -> Array:
        k = self._moment_check(k)
        a, p = self._atoms
        return np.array([np.dot(self._qw, self._qx**j) + np.dot(p, a**j) for j in range(1, k + 1)])

    def stieltjes(self, z: Array) -> Array:
        zz = complex_array(z, "z")[..., None]
        a, p = self._atoms
        return np.sum(self._qw / (zz - self._qx), axis=-1) + np.sum(p / (zz - a), axis=-1)
