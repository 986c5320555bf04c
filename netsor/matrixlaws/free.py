"""Free probability: transforms and free convolutions of compactly supported laws.

Conventions (``μ`` a probability measure, ``m_k`` its moments):

* Cauchy/Stieltjes transform ``G(z) = ∫ dμ(t) / (z − t)``, ``Im z > 0``; density
  ``ρ(x) = −lim_{ε↓0} Im G(x + iε) / π``.
* R-transform ``R(w) = G⁻¹(w) − 1/w``; free cumulants add under ``⊞``.
* Moment series ``ψ(u) = ∫ ut/(1 − ut) dμ(t) = G(1/u)/u − 1``, ``χ = ψ⁻¹`` and the
  S-transform ``S(w) = χ(w)(1 + w)/w``; S-transforms multiply under ``⊠``.

Free multiplicative convolution of laws on ``[0, ∞)`` is solved for
``ψ = ψ_{μ₁⊠…⊠μ_K}(1/z)`` from ``Π_k S_k(κ_k ψ) · ψ/(1 + ψ) = 1/z``. A factor
whose S-transform is explicit (Marchenko–Pastur, Fuss–Catalan, a point mass, a
two-point law with an atom at 0) enters in closed form; any other factor ``k``
brings one unknown ``u_k`` with ``ψ_k(u_k) = κ_k ψ`` (``ψ_k`` from its quadrature
nodes), so that ``S_k(κ_k ψ) = u_k (1 + κ_k ψ)/(κ_k ψ)``. The unknown is not ``1 + ψ = zG``
but ``δ = zG − a₀`` (``a₀`` the product's mass at 0, the limit of ``zG`` at ``z = 0``): near 0
the continuous density lives in ``δ``, which ``zG`` would round away (products of two-point
laws such as ReLU's ``D²`` with orthogonal weights, where ``δ ~ z^{1/L}``). The system (arrow-shaped
Jacobian, solved in O(K)) is taken in logarithmic form and followed by Newton
continuation down vertical lines ``z = x + iε`` from ``ε = 4·x₊`` to ``1e−10·x``,
vectorised over the grid, with step control in ``log ε``: a step is kept only when a few
Newton iterations from the previous point reach a converged state with the signs of the
true solution (``Im G ≤ 0``, ``Im ψ ≤ 0``, ``Im u_k ≤ 0``), else it is shortened; the upper
edge ``x₊`` is ``1 / max_{ψ>0} χ(ψ)``.
Atoms follow Belinschi's rule: ``μ⊠ν({0}) = max(μ({0}), ν({0}))`` and
``μ⊠ν({ab}) = μ({a}) + ν({b}) − 1`` when positive.

Free additive convolution uses the subordination function ``ω`` of the first
factor: ``ω = z + h_ν(z + h_μ(ω))``, ``h(w) = 1/G(w) − w``, followed by Newton
continuation in the same way; ``G_{μ⊞ν}(z) = G_μ(ω(z))``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from netsor.errors import HyperParameterError, InputError, NumericalError, UnsupportedError
from netsor.matrixlaws import series
from netsor.matrixlaws.laws import (
    DiscreteLaw,
    FussCatalan,
    MarchenkoPastur,
    Semicircle,
    SpectralLaw,
    finite_moments,
)
from netsor.matrixlaws.numlaw import SolvedLaw
from netsor.validate import check_count, check_real, complex_array, real_array

Array = np.ndarray
LogS = Callable[[Array, float, Array], tuple[Array, Array]]
#: Range of the upper support edge of a free product that the solver accepts (its starting point
#: sums moments over powers of z up to z^4, and the support is probed on a grid down to 1e−290 of it).
EDGE_RANGE = (1e-60, 1e60)
#: Moments used by the series of the R- and S-transforms near 0.
_SERIES_TERMS = 24
#: A series is used where its last terms are below this fraction of the sum of its terms' moduli.
_SERIES_TOLERANCE = 1e-16
_NEWTON_TOLERANCE = 1e-8
_NEWTON_ITERATIONS = 6
_SIGN_SLACK = 1e-9
_STEP_GROWTH = 2.0
_MAX_LOG_MOVE = 1.0
_MAX_CORRECTION = 0.2
_MIN_LOG_STEP = 1e-6


# --------------------------------------------------------------------------- transforms

def _wrap(phase: Array) -> Array:
    """Phases reduced to ``[−π, π)``."""
    return np.mod(phase + np.pi, 2 * np.pi) - np.pi


def cauchy_transform(law: SpectralLaw, z: Array) -> Array:
    """``G_μ(z) = ∫ dμ(t)/(z − t)`` (same shape as ``z``): ``law.stieltjes(z)``. Closed-form laws
    accept any ``z`` off the support (see :mod:`netsor.matrixlaws.laws`), others ``Im z > 0``."""
    return law.stieltjes(z)


def _explicit_r(law: SpectralLaw) -> Callable[[Array], Array] | None:
    """The R-transform in closed form, for all ``w`` (its analytic continuation), or None."""
    if isinstance(law, Semicircle):
        return lambda w: law.center + law.variance * w
    if isinstance(law, MarchenkoPastur):
        v, lam = law.variance, law.ratio
        return lambda w: v / (1.0 - v * lam * w)
    return None


def _series_terms(law: SpectralLaw) -> int:
    """How many moments the series of the transforms use: ``_SERIES_TERMS``, fewer when
    ``(max |t|)^k`` would leave the float64 range."""
    lo, hi = law.support
    decades = abs(np.log10(max(abs(lo), abs(hi), 1e-300)))
    return int(np.clip(250.0 / max(decades, 1.0), 2, _SERIES_TERMS))


def _sum_series(coeffs: Array, w: Array) -> tuple[Array, Array]:
    """``Σ_n c_n w^n`` and whether it has converged there: its last four terms are below
    ``_SERIES_TOLERANCE`` of the sum of the absolute values of all its terms."""
    terms = coeffs * w[..., None] ** np.arange(coeffs.size)
    size = np.sum(np.abs(terms), axis=-1)
    tail = np.sum(np.abs(terms[..., -4:]), axis=-1) if coeffs.size > 4 else np.full(w.shape, np.inf)
    return np.sum(terms, axis=-1), tail <= _SERIES_TOLERANCE * size


def _invert(fn: Callable[[Array], Array], target: Array, start: Array, what: str) -> Array:
    """Newton solve of ``fn(x) = target`` from ``start`` (central-difference derivative); the
    result is checked (finite, ``|fn(x) − target| ≤ 1e−10 |target|``)."""
    x = start.astype(complex)
    with np.errstate(all="ignore"):
        for _ in range(60):
            h = 1e-7 * np.maximum(np.abs(x), 1e-3)
            step = (fn(x) - target) / ((fn(x + h) - fn(x - h)) / (2 * h))
            x = x - step
            if not np.all(np.isfinite(x)) or np.all(np.abs(step) <= 1e-13 * np.maximum(np.abs(x), 1.0)):
                break
        ok = np.isfinite(x) & (np.abs(fn(np.where(np.isfinite(x), x, 1.0)) - target) <= 1e-10 * np.abs(target))
    if not np.all(ok):
        bad = target[~ok][0]
        raise NumericalError(f"{what}: no solution of the inversion found at argument {bad:.6g}: the "
                             "transform is defined near 0 only (where G is invertible at infinity); use an "
                             "argument of smaller modulus")
    return x


def r_transform(law: SpectralLaw, w: Array) -> Array:
    """R-transform ``R(w) = G⁻¹(w) − 1/w = Σ_n κ_n w^{n−1}`` (same shape as ``w``; ``R(0) = m₁``).

    Closed form where known (semicircle ``c + v w``, Marchenko–Pastur ``v/(1 − vλw)``: their
    analytic continuations, for any ``w`` but the latter's pole). Otherwise the free-cumulant
    series (24 terms) where it has converged to rounding — near 0, where ``G⁻¹(w) − 1/w`` would
    cancel — and elsewhere Newton inversion of ``G`` started from the series, which exists only
    for ``|w|`` small compared with ``1/max|t|`` (else :class:`~netsor.errors.NumericalError`).
    """
    def far_values(far: Array, approx: Array) -> Array:
        return _invert(law.stieltjes, far, 1.0 / far + approx, f"r_transform of {law!r}") - 1.0 / far

    return _transform(law, complex_array(w, "r_transform argument w"), "R-transform", _explicit_r(law),
                      lambda: series.free_cumulants(law.moments(_series_terms(law))), far_values)


def s_transform(law: SpectralLaw, w: Array) -> Array:
    """S-transform ``S(w) = χ(w)(1 + w)/w`` (same shape as ``w``; ``S(0) = 1/m₁``), for laws with
    non-zero mean.

    Closed form where known (Marchenko–Pastur ``1/(v(1 + λw))``, Fuss–Catalan
    ``(v(1 + w))^{−s}``, two-point laws with an atom at 0): for any ``w`` but their poles.
    Otherwise the series of ``S`` (24 terms) where it has converged to rounding — near 0, where
    ``ψ(u) = G(1/u)/u − 1`` would cancel — and elsewhere Newton inversion of ``ψ`` started
    from the series (:class:`~netsor.errors.NumericalError` where it has no solution).
    """
    log_s = _explicit_log_s(law)

    def far_values(far: Array, approx: Array) -> Array:
        u = _invert(lambda uu: law.stieltjes(1.0 / uu) / uu - 1.0, far, far * approx / (1.0 + far),
                    f"s_transform of {law!r}")
        return u * (1.0 + far) / far

    return _transform(law, complex_array(w, "s_transform argument w"), "S-transform",
                      None if log_s is None else (lambda ww: np.exp(log_s(ww, 1.0, ww)[0])),
                      lambda: series.s_from_moments(law.moments(_series_terms(law))), far_values)


def _transform(law: SpectralLaw, w: Array, name: str, closed: Callable[[Array], Array] | None,
               coefficients: Callable[[], Array], far_values: Callable[[Array, Array], Array]) -> Array:
    """An R- or S-transform at ``w``: its closed form where the law has one (a non-finite value is a
    pole), else its power series (``coefficients()``) where that has converged to rounding, and
    ``far_values(w, series value)`` (Newton inversion) elsewhere."""
    if closed is not None:
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            out = closed(w)
        if not np.all(np.isfinite(out)):
            raise InputError(f"w = {w[~np.isfinite(out)][0]:.6g} is a pole of the {name} of {law!r}; pass another w")
        return out
    out, ok = _sum_series(coefficients(), w)
    if not np.all(ok):
        out[~ok] = far_values(w[~ok], out[~ok])
    return out


# --------------------------------------------------------------------------- ⊠

def _explicit_log_s(law: SpectralLaw) -> LogS | None:
    """``(w, c, d) ↦ (log S(w), d log S/dw)`` when the S-transform is explicit, else None.

    ``1 + w = c + d`` with a real constant ``c`` and the array ``d``: near ``z = 0`` the
    quantities ``1 + w`` and (Bernoulli law) ``p + w = (c − (1 − p)) + d`` are tiny or
    nearly cancel, and must be formed from ``d``, never recomputed from ``w``.
    """
    if isinstance(law, MarchenkoPastur):
        lam, v = law.ratio, law.variance
        def mp(w: Array, c: float, d: Array) -> tuple[Array, Array]:
            one_lw = ((1.0 - lam) + lam * c) + lam * d
            return -np.log(v) - np.log(one_lw), -lam / one_lw
        return mp
    if isinstance(law, FussCatalan):
        s, v = law.order, law.variance
        return lambda w, c, d: (-s * np.log(v) - s * np.log(c + d), -s / (c + d))
    if isinstance(law, DiscreteLaw):
        loc, mass = law.atoms
        if loc.size == 2 and loc[0] == 0.0 and loc[1] > 0:
            a, p0 = loc[1], mass[0]  # S = (1 + w) / (a (p + w)), p = 1 − p0
            def bernoulli(w: Array, c: float, d: Array) -> tuple[Array, Array]:
                opw, p_w = c + d, (c - p0) + d
                return np.log(opw) - np.log(a) - np.log(p_w), 1.0 / opw - 1.0 / p_w
            return bernoulli
    return None


def _point_mass(law: SpectralLaw) -> float | None:
    loc, mass = law.atoms
    if loc.size == 1 and abs(mass[0] - 1.0) < 1e-14:
        return float(loc[0])
    return None


@dataclass(frozen=True)
class Factor:
    """One factor ``μ`` of a free product, entering as ``S_μ(κ z)^power`` (``power ≥ 1``: leave out
    a factor that should not enter).

    ``kappa ≠ 1`` arises for rectangular matrices (changes of normalisation);
    plain free multiplicative convolution uses ``kappa = 1``.
    """

    law: SpectralLaw
    power: int = 1
    kappa: float = 1.0

    def __post_init__(self) -> None:
        if not isinstance(self.law, SpectralLaw):
            raise HyperParameterError(f"a Factor needs a SpectralLaw, got {type(self.law).__name__}")
        object.__setattr__(self, "power", check_count(self.power, "Factor power", minimum=1))
        object.__setattr__(self, "kappa", check_real(self.kappa, "Factor kappa", minimum=0.0,
                                                     strict=True))


@dataclass(frozen=True)
class _Implicit:
    """A factor without explicit S-transform: its quadrature with the mass at 0 split off
    (``zero``), so that ``1 + ψ_k(u) − zero = Σ_{x_i > 0} w_i/(1 − u x_i)`` is summed without
    cancellation."""

    nodes: Array
    weights: Array
    zero: float
    power: int
    kappa: float
    m1: float
    m2: float


def product_atoms(laws: Sequence[SpectralLaw]) -> tuple[Array, Array]:
    """Atoms of ``μ₁ ⊠ ⋯ ⊠ μ_K`` for laws on ``[0, ∞)`` (Belinschi's rule)."""
    loc, mass = laws[0].atoms
    for law in laws[1:]:
        b_loc, b_mass = law.atoms
        zero = max(float(np.sum(mass[loc == 0])), float(np.sum(b_mass[b_loc == 0])))
        a_nz, am = loc[loc > 0], mass[loc > 0]
        b_nz, bm = b_loc[b_loc > 0], b_mass[b_loc > 0]
        pair = am[:, None] + bm[None, :] - 1.0
        keep = pair > 1e-14
        new_loc = (a_nz[:, None] * b_nz[None, :])[keep]
        new_mass = pair[keep]
        if zero > 0:
            new_loc, new_mass = np.concatenate([[0.0], new_loc]), np.concatenate([[zero], new_mass])
        loc, mass = new_loc, new_mass
    return loc, mass


class FreeProductLaw(SolvedLaw):
    """The law with S-transform ``Π_k S_{μ_k}(κ_k z)^{power_k}`` (laws on ``[0, ∞)``).

    Parameters
    ----------
    factors : sequence of Factor
        The factors; point masses are folded into a scale.
    atoms : (array, array), optional
        Atoms of the result; by default Belinschi's rule (valid when every
        ``kappa = 1``).
    grid_size : int
        Size of the density grid used for the cdf and plots.

    ``moments(k)`` are exact (power-series product of S-transforms); ``density``
    and ``cdf`` come from Newton continuation (module docstring).
    """

    def __init__(self, factors: Sequence[Factor], atoms: tuple[Array, Array] | None = None,
                 grid_size: int = 1000) -> None:
        if not factors:
            raise HyperParameterError("a free product needs at least one factor")
        self.factors = tuple(factors)
        self.grid_size = check_count(grid_size, "grid_size", minimum=16)
        self._log_const = 0.0
        self._explicit: list[tuple[LogS, int, float]] = []
        self._implicit: list[_Implicit] = []
        for f in self.factors:
            lo, _ = f.law.support
            if lo < 0:
                raise UnsupportedError(
                    f"free multiplicative convolution needs laws on [0, ∞); {f.law!r} has mass "
                    "below 0")
            if f.law.mean <= 0:
                raise HyperParameterError(f"{f.law!r} has mean 0: its S-transform is undefined")
            a = _point_mass(f.law)
            log_s = _explicit_log_s(f.law)
            if a is not None:
                self._log_const -= f.power * np.log(a)
            elif log_s is not None:
                self._explicit.append((log_s, f.power, f.kappa))
            else:
                nodes, weights = f.law.quadrature()
                at0 = nodes == 0.0
                self._implicit.append(_Implicit(nodes[~at0], weights[~at0], float(np.sum(weights[at0])),
                                                f.power, f.kappa, *f.law.moments(2)))
        if atoms is None:
            if any(f.kappa != 1.0 for f in self.factors):
                raise HyperParameterError("pass the atoms explicitly when some kappa ≠ 1")
            atoms = product_atoms([f.law for f in self.factors for _ in range(f.power)])
        self._atoms = (np.asarray(atoms[0], float), np.asarray(atoms[1], float))
        # zG → (mass at 0) as z → 0: the solver's unknown is δ = zG − zero_mass
        self._zero_mass = float(np.sum(self._atoms[1][self._atoms[0] == 0.0]))
        self.smoothed_points = 0  # points where only the ε = 1e−4 x₊ continuation converged
        powers = [f.power for f in self.factors]
        self._max_correction = min(_MAX_CORRECTION, 0.5 * np.pi / max(powers))
        self._upper = self._upper_edge()
        if not EDGE_RANGE[0] <= self._upper <= EDGE_RANGE[1]:
            raise HyperParameterError(
                f"{FreeProductLaw.__repr__(self)}: the upper edge of the support, {self._upper:.3g}, is "
                f"outside [{EDGE_RANGE[0]:g}, {EDGE_RANGE[1]:g}], where the solver's powers of z stay within "
                "float64; rescale the factors (for a Jacobian spectrum: sigma_w closer to its critical "
                "value, or a smaller depth)")
        self._lower = self._lower_edge()

    def __repr__(self) -> str:
        names = " ⊠ ".join(f"{f.law!r}^{f.power}" for f in self.factors)
        return f"FreeProductLaw({names})"

    @property
    def atoms(self) -> tuple[Array, Array]:
        return self._atoms

    def moments(self, k: int) -> Array:
        k = self._moment_check(k)
        s = np.zeros(k)
        s[0] = 1.0
        with np.errstate(all="ignore"):  # overflow: refused below
            for f in self.factors:
                sf = series.scale_argument(series.s_from_moments(f.law.moments(k)), f.kappa)
                for _ in range(f.power):
                    s = np.convolve(s, sf)[:k]
            return finite_moments(self, series.moments_from_s(s))

    # ---- the equations
    @staticmethod
    def _implicit_psi(imp: _Implicit, u: Array) -> tuple[Array, Array]:
        """``1 + ψ_k(u) − zero_k = Σ_{x_i > 0} w_i / (1 − u x_i)`` and ``ψ_k'(u)`` (``u`` any
        shape), summed directly: near ``z = 0``, ``1 + ψ_k`` tends to the mass at 0."""
        t = 1.0 / (1.0 - u[..., None] * imp.nodes)
        return np.sum(imp.weights * t, axis=-1), np.sum(imp.weights * imp.nodes * t * t, axis=-1)

    def _split(self, kappa: float, delta: Array) -> tuple[Array, float, Array]:
        """``(κψ, c, κδ)`` with ``1 + κψ = c + κδ``, ``c = 1 − κ + κ·(mass at 0)``."""
        a0 = self._zero_mass
        return kappa * ((a0 - 1.0) + delta), (1.0 - kappa) + kappa * a0, kappa * delta

    def _log_s_total(self, delta: Array, us: Sequence[Array]) -> tuple[Array, Array]:
        """``log S_J(ψ)`` and its partial derivative in ψ (u_k held fixed), ``δ = 1 + ψ − a₀``."""
        val = np.full(delta.shape, self._log_const, dtype=delta.dtype)
        der = np.zeros_like(delta)
        for log_s, power, kappa in self._explicit:
            s_val, s_der = log_s(*self._split(kappa, delta))
            val = val + power * s_val
            der = der + power * kappa * s_der
        for imp, u in zip(self._implicit, us, strict=True):
            w, c, d = self._split(imp.kappa, delta)
            opw = c + d
            val = val + imp.power * (np.log(u) + np.log(opw) - np.log(w))
            der = der + imp.power * imp.kappa * (1.0 / opw - 1.0 / w)
        return val, der

    def _newton(self, z: Array, delta: Array, us: list[Array]) -> tuple[Array, list[Array], Array]:
        """One Newton step of the log system in ``δ = zG − a₀`` (``a₀`` the mass at 0: near
        ``z = 0`` the density is carried by the small ``δ``, which ``zG`` itself would round)
        and the u_k; returns (δ, u_k, |residual|)."""
        a0 = self._zero_mass
        psi, v = (a0 - 1.0) + delta, a0 + delta
        log_s, der = self._log_s_total(delta, us)
        r0 = log_s + np.log(psi) - np.log(v) + np.log(z)
        r0 = r0.real + 1j * _wrap(r0.imag)
        c = der + 1.0 / psi - 1.0 / v
        num, den = -r0, c
        rs, avals = [], []
        resid = np.abs(r0)  # relative errors of v and of each 1 + ψ_k, ψ_k
        for imp, u in zip(self._implicit, us, strict=True):
            opw_k, a = self._implicit_psi(imp, u)
            w, c_k, d = self._split(imp.kappa, delta)
            target = (c_k - imp.zero) + d  # 1 + κψ − zero_k
            r = opw_k - target
            b = imp.power / u
            num = num + b * r / a
            den = den + b * imp.kappa / a
            rs.append(r)
            avals.append(a)
            resid = resid + np.abs(r) / np.minimum(np.abs(w), np.abs(c_k + d))
        dpsi = num / den
        dus = [(imp.kappa * dpsi - r) / a for imp, r, a in zip(self._implicit, rs, avals, strict=True)]
        # the update is taken in logarithmic unknowns (δ, u_k scale like powers of z near
        # 0 and ∞, and never cross 0), damped to |Δ log| ≤ _MAX_LOG_MOVE
        moves = [dpsi / delta] + [du / u for u, du in zip(us, dus, strict=True)]
        largest = np.max(np.abs(np.stack(moves)), axis=0)
        tau = np.minimum(1.0, _MAX_LOG_MOVE / np.maximum(largest, 1e-300))
        new_delta = delta * np.exp(tau * moves[0])
        new_us = [u * np.exp(tau * m) for u, m in zip(us, moves[1:], strict=True)]
        return new_delta, new_us, resid

    def _start(self, z: Array) -> tuple[Array, list[Array]]:
        """``δ = 1 + ψ − a₀`` and the u_k far from the axis, from the moment series."""
        m = self.moments(4)
        psi = sum(m[k] / z ** (k + 1) for k in range(4))
        us = []
        for imp in self._implicit:
            w = imp.kappa * psi
            us.append(w / imp.m1 - imp.m2 * w * w / imp.m1**3)
        return (1.0 - self._zero_mass) + psi, us

    def _branch_signature(self, state: Sequence[Array]) -> Array:
        """``log δ``, ``log u_k`` and ``log S`` of each explicit factor, stacked: the roots of the
        log system differ from the true one by ``2π/power`` in the phase of one of them."""
        delta, us = state[0], state[1:]
        sig = [np.log(delta), *(np.log(u) for u in us)]
        sig += [log_s(*self._split(kappa, delta))[0] for log_s, _, kappa in self._explicit]
        return np.stack(sig)

    def _admissible(self, z: Array, delta: Array, us: Sequence[Array], resid: Array) -> Array:
        """Converged states on the right branch: finite, residual below ``_NEWTON_TOLERANCE``,
        ``Im G ≤ 0``, ``Im(zG) = Im δ ≤ 0`` and ``Im u_k ≤ 0``. For ``Im z > 0`` the true
        ``ψ = zG − 1`` of a law on ``[0, ∞)`` has ``Im ψ ≤ 0``, and ``ψ_k`` maps the lower
        half-plane to itself, so any solution of ``ψ_k(u_k) = κ_k ψ`` has ``Im u_k ≤ 0``;
        Newton on the log system also converges to solutions with the wrong signs (other
        branches of the logarithms), or drifts to ``ψ → 0``."""
        g = (self._zero_mass + delta) / z
        ok = (np.isfinite(resid) & (resid < _NEWTON_TOLERANCE) & np.isfinite(g)
              & (delta.imag <= _SIGN_SLACK * np.abs(delta)) & (g.imag <= _SIGN_SLACK * np.abs(g)))
        for u in us:
            ok &= np.isfinite(u) & (u.imag <= _SIGN_SLACK * np.abs(u))
        return ok

    def _track(self, x: Array, floor: float = 0.0) -> tuple[Array, Array]:
        """Newton continuation down ``z = x + iε`` from ``ε = 4 x₊`` to ``max(self._eps(x),
        floor)`` with step control in ``s = log ε``.

        Each step predicts ``log δ`` and ``log u_k`` by their last slope in ``s`` (at the start,
        the far-field ``δ ≈ 1 − a₀ + m₁/z``, ``u_k ∝ 1/z``), runs ``_NEWTON_ITERATIONS`` Newton
        iterations, and is accepted when the result is admissible (:meth:`_admissible`) and
        within ``_MAX_CORRECTION`` (in log) of the prediction: the system has several
        admissible roots (e.g. ``L + 1`` for a product of ``L`` Marchenko–Pastur laws), and
        only a small correction keeps the continuation on the branch of the true ``G``.
        Accepted steps grow by ``_STEP_GROWTH``, rejected ones are retried four times
        shorter; points whose step falls below ``_MIN_LOG_STEP`` fail. Returns ``(G, ok)``.
        """
        top = 4.0 * max(self._upper, float(np.max(np.abs(x), initial=0.0)))
        end = np.log(np.minimum(np.maximum(self._eps(x), floor), top))
        s = np.full(x.shape, np.log(top))
        z = x + 1j * top
        delta, us = self._start(z)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            for _ in range(2 * _NEWTON_ITERATIONS):  # from the moment series, far from the axis
                delta, us, resid = self._newton(z, delta, us)
            ok = self._admissible(z, delta, us, resid)
            dlogz = 1j * top / z  # d log z / ds
            slopes = [-self.mean / (z * delta) * dlogz] + [-dlogz for _ in us]
            step = np.full(x.shape, -np.log(2.0))
            active = ok & (s > end)
            while np.any(active):
                idx = np.flatnonzero(active)
                s_try = np.maximum(s[idx] + step[idx], end[idx])
                z = x[idx] + 1j * np.exp(s_try)
                state = [delta, *us]
                pred = [a[idx] * np.exp(b[idx] * (s_try - s[idx])) for a, b in zip(state, slopes, strict=True)]
                trial = list(pred)
                for _ in range(_NEWTON_ITERATIONS):
                    trial[0], trial[1:], resid = self._newton(z, trial[0], trial[1:])
                diff = self._branch_signature(trial) - self._branch_signature(pred)
                correction = np.max(np.abs(diff.real + 1j * _wrap(diff.imag)), axis=0)
                good = self._admissible(z, trial[0], trial[1:], resid) & (correction <= self._max_correction)
                done = idx[good]
                for a, b, slope in zip(state, trial, slopes, strict=True):
                    slope[done] = np.log(b[good] / a[done]) / (s_try[good] - s[done])
                    a[done] = b[good]
                s[done] = s_try[good]
                step[done] *= _STEP_GROWTH
                step[idx[~good]] *= 0.25
                ok[idx[~good]] &= np.abs(step[idx[~good]]) >= _MIN_LOG_STEP
                active = ok & (s > end)
            # polish: steps are accepted at a residual of 1e−8, and next to an atom (where the
            # atom's term dominates G) that leaves visible noise in the continuous density
            z = x + 1j * np.exp(s)
            state = [delta, *us]
            for _ in range(2):
                new_delta, new_us, resid = self._newton(z, state[0], state[1:])
                better = ok & self._admissible(z, new_delta, new_us, resid)
                for a, b in zip(state, [new_delta, *new_us], strict=True):
                    a[better] = b[better]
            delta = state[0]
        return (self._zero_mass + delta) / z, ok

    def _cauchy_on_axis(self, x: Array) -> Array:
        g, ok = self._track(x)
        if not np.all(ok):  # last resort: stop at ε = 1e−4 x₊ (Poisson-smoothed density)
            g[~ok], ok[~ok] = self._track(x[~ok], floor=1e-4 * self._upper)
            self.smoothed_points += int(np.sum(ok))
        if not np.all(ok):
            raise NumericalError(
                f"{self!r}: the density cannot be computed at {np.sum(~ok)} of {x.size} points "
                f"(e.g. x = {x[~ok][0]:.6g}): the Newton continuation of the Cauchy transform lost "
                "the branch of the true solution there, even stopped at ε = 1e−4 x₊")
        return g

    # ---- the support
    def _log_chi_real(self, psi: Array) -> Array:
        """``log χ_J(ψ)`` for real ``ψ > 0`` or ``ψ < −1``: each ``u_k`` by bisection, on
        ``(0, 1/max node)`` (where ``ψ_k`` increases from 0 to ∞) or on
        ``(1/min node, ∞)`` (where it increases from −∞ to −1), in log scale."""
        us = []
        upper = bool(np.all(psi > 0))
        for imp in self._implicit:
            pole = 1.0 / (imp.nodes.max() if upper else imp.nodes.min())
            lo, hi = np.full_like(psi, -60.0), np.full_like(psi, 60.0 if not upper else 0.0)
            for _ in range(80):
                mid = 0.5 * (lo + hi)
                u = pole * (1.0 - np.exp(mid)) if upper else pole * (1.0 + np.exp(mid))
                with np.errstate(divide="ignore"):  # u may round onto the pole: 1 + ψ_k = ±inf
                    above = self._implicit_psi(imp, u)[0] + imp.zero > 1.0 + imp.kappa * psi
                larger = above if upper else ~above  # ψ_k(u) increases with u
                lo, hi = np.where(larger, mid, lo), np.where(larger, hi, mid)
            mid = 0.5 * (lo + hi)
            us.append(pole * (1.0 - np.exp(mid)) if upper else pole * (1.0 + np.exp(mid)))
        us_c = [u.astype(complex) for u in us]
        delta = (1.0 - self._zero_mass) + psi.astype(complex)
        log_s = self._log_s_total(delta, us_c)[0].real  # log |S|
        return log_s + np.log(np.abs(psi)) - np.log(np.abs(1 + psi))

    def _lower_edge(self) -> float:
        """Lower edge ``1 / min_{ψ<−1} χ(ψ)`` when the product has no mass near 0 (every factor
        a point mass or node law with positive nodes); 0 otherwise."""
        if self._explicit or any(imp.zero > 0 for imp in self._implicit):
            return 0.0
        psi = -1.0 - np.geomspace(1e-10, 1e10, 801)
        vals = self._log_chi_real(psi)
        inner = np.flatnonzero((vals[1:-1] <= vals[:-2]) & (vals[1:-1] <= vals[2:]))
        if inner.size == 0:
            return 0.0
        return float(np.exp(-vals[inner[0] + 1])) * (1.0 - 1e-3)

    def _upper_edge(self) -> float:
        psi = np.geomspace(1e-8, 1e8, 801)
        vals = self._log_chi_real(psi)
        inner = np.flatnonzero((vals[1:-1] >= vals[:-2]) & (vals[1:-1] >= vals[2:]))
        if inner.size == 0:
            return float(np.exp(-vals[-1]))
        i = inner[0] + 1
        a, b = psi[i - 1], psi[i + 1]
        for _ in range(4):
            fine = np.geomspace(a, b, 33)
            j = int(np.argmax(self._log_chi_real(fine)))
            a, b = fine[max(j - 1, 0)], fine[min(j + 1, 32)]
        return float(np.exp(-np.max(self._log_chi_real(np.geomspace(a, b, 33)))))

    def _support_bounds(self) -> tuple[float, float]:
        return self._lower, self._upper * (1.0 + 1e-9)

    def _unrepresentable(self) -> str | None:
        """A single factor known through quadrature nodes, to the power 1, times point masses,
        is that discrete rule rescaled: nothing smooths it into a density."""
        if self._explicit or len(self._implicit) != 1 or self._implicit[0].power != 1:
            return None
        law = next(f.law for f in self.factors if _point_mass(f.law) is None)
        return (f"{self!r} is {law!r} times a constant: that law is known only through "
                f"{self._implicit[0].nodes.size} nodes (Gauss quadrature nodes and atoms), and no free "
                "convolution spreads them, so it has no density or cdf here (its moments are exact); e.g. a depth-1 "
                "network with orthogonal weights: use Gaussian weights or depth >= 2")

    def _representation_note(self) -> str:
        if not self._implicit:
            return ""
        return ("; some factors are known only through the quadrature nodes of φ'(h)², and when "
                "the other factors barely spread them (layers at tiny pre-activation variance, "
                "whose φ'(h)² is nearly constant) the density keeps spikes at those nodes")

    def _exact_upper_edge(self) -> float | None:
        """``1 / max χ``, the upper edge of the whole support: that of the continuous part
        unless an atom sits there (then None: the edge is located by the probe)."""
        if np.any(self._atoms[0] >= self._upper * (1.0 - 1e-6)):
            return None
        return self._upper


def free_multiplicative_convolution(*laws: SpectralLaw, grid_size: int = 1000) -> FreeProductLaw:
    """``μ₁ ⊠ μ₂ ⊠ ⋯`` for laws on ``[0, ∞)`` with positive mean.

    Returns a :class:`FreeProductLaw` (exact moments, density by Stieltjes inversion,
    atoms by Belinschi's rule).
    """
    if len(laws) < 1:
        raise HyperParameterError("free_multiplicative_convolution needs at least one law")
    return FreeProductLaw([Factor(law) for law in laws], grid_size=grid_size)


# --------------------------------------------------------------------------- ⊞

def _complex_derivative(fn: Callable[[Array], Array], w: Array) -> Array:
    """Derivative of an analytic ``fn`` by a one-sided second-order difference towards
    ``+i`` (never leaves the upper half-plane)."""
    h = 1j * 1e-6 * np.maximum(np.abs(w), 1e-3)
    return (-3.0 * fn(w) + 4.0 * fn(w + h) - fn(w + 2.0 * h)) / (2.0 * h)


class FreeSumLaw(SolvedLaw):
    """``μ ⊞ ν`` by the subordination fixed point and Newton continuation.

    Moments are exact (free cumulants add); atoms: ``a + b`` with mass
    ``μ({a}) + ν({b}) − 1`` when positive.
    """

    def __init__(self, mu: SpectralLaw, nu: SpectralLaw, grid_size: int = 1000) -> None:
        for name, law in (("mu", mu), ("nu", nu)):
            if not isinstance(law, SpectralLaw):
                raise HyperParameterError(f"{name} must be a SpectralLaw, got {type(law).__name__}")
        self.mu, self.nu = mu, nu
        self.grid_size = check_count(grid_size, "grid_size", minimum=16)
        (a, am), (b, bm) = mu.atoms, nu.atoms
        pair = am[:, None] + bm[None, :] - 1.0
        keep = pair > 1e-14
        self._atoms = ((a[:, None] + b[None, :])[keep], pair[keep])

    def __repr__(self) -> str:
        return f"FreeSumLaw({self.mu!r} ⊞ {self.nu!r})"

    @property
    def atoms(self) -> tuple[Array, Array]:
        return self._atoms

    def moments(self, k: int) -> Array:
        k = self._moment_check(k)
        kappa = series.free_cumulants(self.mu.moments(k)) + series.free_cumulants(self.nu.moments(k))
        with np.errstate(all="ignore"):  # overflow: refused below
            return finite_moments(self, series.moments_from_free_cumulants(kappa))

    def _support_bounds(self) -> tuple[float, float]:
        (a, b), (c, d) = self.mu.support, self.nu.support
        return a + c, b + d

    def _fixed_point_residual(self, omega: Array, z: Array) -> Array:
        h_mu = 1.0 / self.mu.stieltjes(omega) - omega
        w2 = z + h_mu
        return omega - z - (1.0 / self.nu.stieltjes(w2) - w2)

    def _cauchy_on_axis(self, x: Array) -> Array:
        eps = self._eps(x)
        lo, hi = self._support_bounds()
        top = 4.0 * max(hi - lo, float(np.max(np.abs(x), initial=0.0)))
        levels = top * 0.5 ** np.arange(int(np.ceil(np.log2(top / eps.min()))) + 1)
        z = x + 1j * levels[0]
        omega = z - self.nu.mean  # ω(z) = z − κ₁(ν) + O(1/z)
        for level in levels:
            eps_j = np.maximum(level, eps)
            z = x + 1j * eps_j
            for _ in range(4):
                fn = lambda w, zz=z: self._fixed_point_residual(w, zz)  # noqa: E731
                step = fn(omega) / _complex_derivative(fn, omega)
                omega = omega - step
                omega = omega.real + 1j * np.maximum(omega.imag, 0.5 * eps_j)
        g = self.mu.stieltjes(omega)
        if not np.all(np.isfinite(g)) or np.any(g.imag > 1e-9 * np.abs(g)):
            raise NumericalError(f"{self!r}: the subordination fixed point did not converge, so the "
                                 "density cannot be computed")
        return g


def free_additive_convolution(mu: SpectralLaw, nu: SpectralLaw,
                              grid_size: int = 1000) -> FreeSumLaw:
    """``μ ⊞ ν``: the law of ``A + B`` for large free (e.g. randomly rotated) ``A``, ``B``.

    Returns a :class:`FreeSumLaw` (exact moments, density by Stieltjes inversion of
    ``G_μ(ω(z))``).
    """
    return FreeSumLaw(mu, nu, grid_size=grid_size)


def stieltjes_inversion(law: SpectralLaw, x: Array, eps: float) -> Array:
    """``−Im G(x + iε)/π``: the law's density smoothed by a Cauchy kernel of width ``ε``."""
    xx = real_array(x, "x")
    eps = check_real(eps, "eps", minimum=0.0, strict=True)
    return -law.stieltjes(xx + 1j * eps).imag / np.pi
