"""Laws known through their Cauchy transform on the real axis (Stieltjes inversion).

A :class:`SolvedLaw` subclass provides ``_cauchy_on_axis(x)``: ``G(x + iε)`` for a
tiny ``ε`` (relative ``1e−10``, see ``SolvedLaw._eps``), computed by continuation
from far above the axis. The density of the absolutely continuous part is
``−Im(G − Σ_a m_a / (z − a)) / π``: the known atoms are subtracted
analytically, so they are never smeared over the grid; a density below ``1e−15`` of the
atoms' own ``Σ m_a / (π|x − a|)`` is rounding left by that subtraction (measured: ≤ 1e−19 next to
the atom at 0 of a product of Bernoulli laws with a gap above 0) and is reported as 0;
within ``1e−5`` (relative to the support's width) of an atom other than one at the lower
bound the density is reported as 0 as well:
there the atom's term dominates ``G`` and the solver's relative accuracy does not resolve
the continuous part (free products of two-point laws put an atom at the upper edge of
the whole support, next to a gap).

The support of the continuous part is located by a probe on a grid that is
geometric near the lower bound (where densities of Jacobian spectra diverge)
and uniform elsewhere, then refined by multisection. The density is then computed on
``grid_size`` points clustered at the edges, and the grid adapts: the trapezoid error of
each interval is estimated from second divided differences (``h³|ρ''|/12``), and the
intervals holding the largest errors are bisected (an edge interval also gets points
geometrically closer to the edge, where densities rise or diverge like powers) until the
estimated error of the continuous mass is below ``REFINE_TARGET = 2e−4`` of it, within
``MAX_POINTS_FACTOR = 16`` times ``grid_size`` points and ``MAX_ROUNDS`` vectorised solver
calls. The cdf table is the trapezoid rule on that grid, with a tail below the first point
when the density diverges at the lower edge: the tail gets the mass not found on the grid,
and a power-law extrapolation of the density checks it; while that check is off by more than
the target, the geometric part of the grid (from ``1e−30`` of the width above the edge) is
extended 30 decades further down, to ``1e−290`` at most (critical erf networks put a percent
of their mass below ``1e−29``). The mismatch (or, without a tail, the continuous mass found
minus expected) is kept in ``mass_defect``; above ``MASS_TOLERANCE = 1e−3`` of the continuous
mass the law is refused with a :class:`~netsor.errors.NumericalError` that names the law,
what was found and where the grid failed. A law known in advance to have no computable
density (``_unrepresentable``) is refused with an :class:`~netsor.errors.UnsupportedError`
saying why.
"""

from __future__ import annotations

from abc import abstractmethod
from functools import cached_property

import numpy as np

from netsor.errors import NumericalError, UnsupportedError
from netsor.matrixlaws.laws import SpectralLaw
from netsor.validate import complex_array, real_array

Array = np.ndarray
EPS_REL = 1e-10
_GEOMETRIC_FLOOR = 1e-30
#: The geometric part of the grid may be extended down to this fraction of the width.
_DEEPEST_FLOOR = 1e-290
_DENSITY_FLOOR = 1e-5
_ATOM_GUARD = 1e-5
#: Densities below this fraction of the atoms' ``Σ m_a / (π |x − a|)`` are reported as 0: the
#: remainder of ``G − Σ m_a/(z − a)`` there is rounding (a probe would see a continuous part
#: near an atom at 0 that is not there). The mass so dropped is below ``1e−15`` per decade.
_ATOM_NOISE = 1e-15
#: Estimated trapezoid error of the continuous mass aimed at by the refinement (relative).
REFINE_TARGET = 2e-4
#: Mass defect (relative to the continuous mass) above which the law is refused.
MASS_TOLERANCE = 1e-3
#: The refined grid has at most this many times ``grid_size`` points.
MAX_POINTS_FACTOR = 16
#: Rounds of refinement at most (each one vectorised call of the Cauchy-transform solver).
MAX_ROUNDS = 40
#: An edge interval that needs refinement also gets points at these fractions of its width
#: from the edge (densities of Jacobian spectra rise or diverge like powers there).
_EDGE_FRACTIONS = 2.0 ** -np.arange(2, 25, 2)


def trapezoid_errors(s: Array, f: Array, pieces: Array | None = None) -> Array:
    """Estimated error of the trapezoid rule on each interval ``[s_i, s_{i+1}]``:
    ``h_i³ max(|f''(s_i)|, |f''(s_{i+1})|) / 12`` with ``f''`` the second divided difference at
    the interior nodes (an end node takes its neighbour's); shape ``(s.size − 1,)``.

    ``pieces`` (one integer per node) marks where ``f`` is smooth: a divided difference whose
    three nodes are not in one piece (``f''`` jumps between pieces, e.g. where a grid map
    changes formula) is replaced by the nearest one of the node's own piece.
    """
    h = np.diff(s)
    if s.size < 3:
        return np.zeros(h.size)
    slope = np.diff(f) / h
    dd2 = np.abs(2.0 * np.diff(slope) / (h[1:] + h[:-1]))
    node = np.concatenate([dd2[:1], dd2, dd2[-1:]])
    if pieces is not None:
        clean = np.concatenate([[False], (pieces[:-2] == pieces[1:-1]) & (pieces[1:-1] == pieces[2:]), [False]])
        node = np.where(clean, node, np.nan)
        idx = np.arange(s.size)
        for piece in np.unique(pieces):
            own = np.flatnonzero(pieces == piece)
            good = own[clean[own]]
            if good.size:
                nearest = good[np.clip(np.searchsorted(good, own), 0, good.size - 1)]
                before = good[np.clip(np.searchsorted(good, own) - 1, 0, good.size - 1)]
                pick = np.where(np.abs(before - idx[own]) < np.abs(nearest - idx[own]), before, nearest)
                node[own] = node[pick]
            else:
                node[own] = np.concatenate([dd2[:1], dd2, dd2[-1:]])[own]
    return h**3 * np.maximum(node[:-1], node[1:]) / 12.0


def refinement_points(s: Array, err: Array, excess: float, room: int,
                      lower_edge: bool = True) -> Array:
    """New points for the intervals with the largest estimated errors, enough of them to cover
    ``excess`` (at most ``room`` points): each chosen interval gets its midpoint; the first
    (when ``lower_edge``) and last intervals also get points geometrically closer to the
    support's edge (:data:`_EDGE_FRACTIONS`)."""
    order = np.argsort(err)[::-1]
    count = int(np.searchsorted(np.cumsum(err[order]), excess)) + 1
    chosen = order[: max(1, min(count, room, err.size))]
    pts = [0.5 * (s[chosen] + s[chosen + 1])]
    if lower_edge and np.any(chosen == 0):
        pts.append(s[0] + (s[1] - s[0]) * _EDGE_FRACTIONS)
    if np.any(chosen == err.size - 1):
        pts.append(s[-1] - (s[-1] - s[-2]) * _EDGE_FRACTIONS)
    new = np.unique(np.concatenate(pts))
    new = new[(new > s[0]) & (new < s[-1]) & ~np.isin(new, s)]
    return new[:room]


def hybrid_map(lo: float, hi: float, s: Array) -> tuple[Array, Array]:
    """The map ``s ∈ [0, 1] ↦ x ∈ (lo, hi]`` for densities that diverge at ``lo``: geometric
    from ``lo + 1e−30 (hi − lo)`` to ``lo + 0.01 (hi − lo)`` and sine-clustered towards ``hi``
    after, with ``dx/ds`` continuous at the junction (about 29 % of a uniform ``s`` grid is
    geometric). Returns ``(x, dx/ds)``; ``∫ρ dx`` is the integral in ``s`` of ``ρ · dx/ds``,
    which is smooth for power laws at ``lo``."""
    s = np.asarray(s, dtype=float)
    width, knee = hi - lo, 0.01
    log_span = np.log(knee / _GEOMETRIC_FLOOR)
    split = knee * log_span / (knee * log_span + (1.0 - knee) * 0.5 * np.pi)
    beta = log_span / split
    geo = s <= split
    u = np.clip((s - split) / (1.0 - split), 0.0, 1.0)
    frac = np.where(geo, _GEOMETRIC_FLOOR * np.exp(beta * np.minimum(s, split)),
                    knee + (1.0 - knee) * np.sin(0.5 * np.pi * u))
    dfrac = np.where(geo, beta * frac,
                     (1.0 - knee) * 0.5 * np.pi * np.cos(0.5 * np.pi * u) / (1.0 - split))
    return lo + width * frac, width * dfrac


def hybrid_pieces(s: Array) -> Array:
    """0 on the geometric part of :func:`hybrid_map`, 1 on the sine part."""
    knee = 0.01
    log_span = np.log(knee / _GEOMETRIC_FLOOR)
    split = knee * log_span / (knee * log_span + (1.0 - knee) * 0.5 * np.pi)
    return (np.asarray(s) > split).astype(int)


def hybrid_s(fraction: float) -> float:
    """The ``s`` at which the geometric part of :func:`hybrid_map` is ``fraction`` of the width
    above ``lo`` (negative below the initial floor ``1e−30``: the grid extends there)."""
    knee = 0.01
    log_span = np.log(knee / _GEOMETRIC_FLOOR)
    split = knee * log_span / (knee * log_span + (1.0 - knee) * 0.5 * np.pi)
    return float(np.log(fraction / _GEOMETRIC_FLOOR) * split / log_span)


def edge_map(lo: float, hi: float, s: Array) -> tuple[Array, Array]:
    """Cosine (Chebyshev-like) map ``s ∈ [0, 1] ↦ x ∈ [lo, hi]`` clustered at both edges:
    ``x = lo + (hi − lo) sin²(πs/2)`` (no cancellation near ``lo``); returns ``(x, dx/ds)``."""
    s = np.asarray(s, dtype=float)
    half = 0.5 * np.pi * s
    return lo + (hi - lo) * np.sin(half) ** 2, (hi - lo) * 0.5 * np.pi * np.sin(2.0 * half)


def hybrid_grid(lo: float, hi: float, size: int) -> tuple[Array, Array]:
    """:func:`hybrid_map` on ``size`` uniform points of ``[0, 1]``: ``(x, dx/ds)``."""
    return hybrid_map(lo, hi, np.linspace(0.0, 1.0, size))


def edge_grid(lo: float, hi: float, size: int) -> tuple[Array, Array]:
    """:func:`edge_map` on ``size`` uniform points of ``[0, 1]``: ``(x, dx/ds)``."""
    return edge_map(lo, hi, np.linspace(0.0, 1.0, size))


class SolvedLaw(SpectralLaw):
    """Base class of laws obtained by Stieltjes inversion of a computed Cauchy transform.

    Subclasses implement :meth:`_cauchy_on_axis`, :meth:`_support_bounds`,
    :meth:`moments` and the ``atoms`` property.
    """

    grid_size: int = 1000

    @abstractmethod
    def _cauchy_on_axis(self, x: Array) -> Array:
        """``G(x + iε)``, ``ε = self._eps(x)``, for a 1-D real array ``x``."""

    @abstractmethod
    def _support_bounds(self) -> tuple[float, float]:
        """An interval certainly containing the support of the continuous part."""

    def _exact_upper_edge(self) -> float | None:
        """The upper edge of the continuous part when known in closed form (else None)."""
        return None

    def _unrepresentable(self) -> str | None:
        """Why the law has no density this class can compute, when that is known in advance."""
        return None

    def _representation_note(self) -> str:
        """What the law's representation implies for its density (appended to grid errors)."""
        return ""

    @property
    def continuous_support(self) -> tuple[float, float]:
        """``(lo, hi)``: the support of the absolutely continuous part (atoms excluded)."""
        lo, hi, _ = self._continuous_support
        return lo, hi

    @property
    def continuous_mass(self) -> float:
        """Mass of the absolutely continuous part (1 minus the atoms)."""
        return max(0.0, 1.0 - float(np.sum(self.atoms[1])))

    def _eps(self, x: Array) -> Array:
        """Final distance to the axis: ``1e−10 · max(|x − lo|, 1e−290 · width)``, so that
        densities diverging at a lower edge are resolved down to the deepest geometric floor."""
        lo, hi = self._support_bounds()
        width = max(hi - lo, abs(hi), 1e-300)
        return EPS_REL * np.maximum(np.abs(x - lo), _DEEPEST_FLOOR * width)

    def _density_1d(self, x: Array) -> Array:
        if self.continuous_mass <= 1e-14:
            return np.zeros_like(x)
        reason = self._unrepresentable()
        if reason is not None:
            raise UnsupportedError(reason)
        z = x + 1j * self._eps(x)
        g = self._cauchy_on_axis(x)
        loc, mass = self.atoms
        if loc.size:
            g = g - np.sum(mass / (z[:, None] - loc), axis=1)
        rho = -g.imag / np.pi
        if not np.all(np.isfinite(rho)):
            bad = x[~np.isfinite(rho)][0]
            raise NumericalError(
                f"{self!r} cannot be represented by a density: its Cauchy transform came out "
                f"non-finite at x = {bad:.6g} (overflow in the solver)")
        lo, hi = self._support_bounds()
        inner = loc[loc > lo]
        guard = np.any(np.abs(x[:, None] - inner) <= _ATOM_GUARD * (hi - lo), axis=1)
        if loc.size:  # what is left of G after subtracting an atom's m/(z − a) is not resolved
            with np.errstate(divide="ignore"):
                guard |= rho <= _ATOM_NOISE * np.sum(mass / np.abs(x[:, None] - loc), axis=1) / np.pi
        return np.where(guard, 0.0, np.maximum(rho, 0.0))

    def density(self, x: Array) -> Array:
        """Density of the absolutely continuous part (same shape as ``x``)."""
        xx = real_array(x, "x")
        return self._density_1d(xx.ravel()).reshape(xx.shape)

    @cached_property
    def _continuous_support(self) -> tuple[float, float, bool]:
        """``(lo, hi, touches_lo)``: the continuous part's support; ``touches_lo`` when the
        density is still positive at the geometric floor above the lower bound."""
        lo_b, hi_b = self._support_bounds()
        probe = np.concatenate([[lo_b], hybrid_grid(lo_b, hi_b, 256)[0]])
        rho = self._density_1d(probe[1:])
        scale = self.continuous_mass / (hi_b - lo_b)  # the density of a uniform law
        positive = np.flatnonzero(rho > _DENSITY_FLOOR * scale)
        if positive.size == 0:
            raise NumericalError(
                f"{self!r} has continuous mass {self.continuous_mass:.6g} by its atoms, but its density "
                f"is below {_DENSITY_FLOOR:g} of a uniform law's everywhere on the predicted support "
                f"[{lo_b:.6g}, {hi_b:.6g}]: the continuous part is too thin or too narrow to be located")
        first, last = positive[0], positive[-1]
        touches = first == 0
        lo = lo_b if touches else self._refine_edge(probe[first], probe[first + 1], scale, True)
        exact_hi = self._exact_upper_edge()
        if exact_hi is not None:
            hi = exact_hi
        elif last + 2 < probe.size:
            hi = self._refine_edge(probe[last + 1], probe[last + 2], scale, False)
        else:
            hi = hi_b
        return lo, hi, touches

    def _refine_edge(self, a: float, b: float, scale: float, lower: bool) -> float:
        """Multisection of ``[a, b]`` for the edge between a zero-density end and a positive one
        (``a`` is the zero end when ``lower``, ``b`` otherwise); returns the outer end."""
        for _ in range(5):
            pts = np.linspace(a, b, 17)
            pos = self._density_1d(pts) > _DENSITY_FLOOR * scale
            idx = np.flatnonzero(pos)
            if idx.size == 0:
                break
            if lower:
                k = max(idx[0], 1)
                a, b = pts[k - 1], pts[k]
            else:
                k = min(idx[-1], 15)
                a, b = pts[k], pts[k + 1]
        return a if lower else b

    @cached_property
    def _refined(self) -> tuple[Array, Array, Array, Array, Array]:
        """The adaptive grid: ``(s, x, density, dx/ds, per-interval error estimates)``.

        Starts from ``grid_size`` uniform points in ``s`` (:func:`hybrid_map` when the density is
        still positive at the geometric floor above the lower bound, else :func:`edge_map`) and
        refines in ``s`` (module docstring) until the estimated trapezoid error of the continuous
        mass is below ``REFINE_TARGET`` times that mass, or the budget of
        ``MAX_POINTS_FACTOR · grid_size`` points is spent. When the density diverges at ``lo``
        and the power law below the first point does not account for the mass left there
        (:meth:`_tail_defect`), the geometric part is extended by 30 decades at a time, down to
        ``1e−290`` of the width (or ``1e−6 |lo|``).
        """
        if self.continuous_mass <= 1e-14:
            lo, hi = self.support
            return np.linspace(0.0, 1.0, 2), np.linspace(lo, hi, 2), np.zeros(2), np.ones(2), np.zeros(1)
        lo, hi, touches = self._continuous_support
        mapping = hybrid_map if touches else edge_map
        s = np.linspace(0.0, 1.0, self.grid_size)
        x, jac = mapping(lo, hi, s)
        rho = self._density_1d(x)
        target = REFINE_TARGET * self.continuous_mass
        budget = MAX_POINTS_FACTOR * self.grid_size
        pieces = hybrid_pieces if touches else (lambda v: None)
        err = trapezoid_errors(s, rho * jac, pieces(s))
        # x − lo must stay resolvable next to lo (a positive lower bound lies just below the edge)
        deepest = hybrid_s(max(_DEEPEST_FLOOR, 1e-6 * abs(lo) / (hi - lo)))
        for _ in range(MAX_ROUNDS):
            total = float(np.sum(err))
            extend = touches and s[0] > deepest and abs(self._tail_defect(s, x, rho, jac)) > target
            if (total <= target and not extend) or s.size >= budget:
                break
            new = np.zeros(0)
            if total > target:
                new = refinement_points(s, err, total - 0.5 * target, budget - s.size,
                                        lower_edge=not touches)
            if extend:  # 30 more decades below the floor, 40 points (the refinement adds more)
                span = hybrid_s(_GEOMETRIC_FLOOR) - hybrid_s(_GEOMETRIC_FLOOR**2)
                low = max(s[0] - span, deepest)
                new = np.concatenate([new, np.linspace(low, s[0], 41)[:-1]])
            if new.size == 0:
                break
            x_new, jac_new = mapping(lo, hi, new)
            order = np.argsort(np.concatenate([s, new]), kind="stable")
            s = np.concatenate([s, new])[order]
            x = np.concatenate([x, x_new])[order]
            jac = np.concatenate([jac, jac_new])[order]
            rho = np.concatenate([rho, self._density_1d(x_new)])[order]
            err = trapezoid_errors(s, rho * jac, pieces(s))
        return s, x, rho, jac, err

    @property
    def grid(self) -> tuple[Array, Array]:
        """``(x, density)`` on the law's adaptive grid (at least ``grid_size`` points: more
        where the density is steep, singular or next to an edge); the cdf integrates it."""
        _, x, rho, _, _ = self._refined
        return x, rho

    @property
    def quadrature_error(self) -> float:
        """Estimated trapezoid error of the continuous mass on :attr:`grid` (sum over the
        intervals of ``h³ |f''| / 12`` in the grid's variable ``s``, ``f = ρ dx/ds``, ``f''`` from
        second divided differences)."""
        return float(np.sum(self._refined[4]))

    @cached_property
    def _table(self) -> tuple[Array, Array, float]:
        s, x, rho, jac, err = self._refined
        f = rho * jac
        cum = np.concatenate([[0.0], np.cumsum(0.5 * (f[1:] + f[:-1]) * np.diff(s))])
        if self.continuous_mass <= 1e-14:
            return x, cum, 0.0
        lo, _, touches = self._continuous_support
        if touches:
            defect = self._tail_defect(s, x, rho, jac)
            tail = self.continuous_mass - cum[-1]
            x, cum = np.concatenate([[lo], x]), np.concatenate([[0.0], cum + max(tail, 0.0)])
        else:
            defect = cum[-1] - self.continuous_mass
        if not abs(defect) <= MASS_TOLERANCE * self.continuous_mass:
            worst = int(np.argmax(err))
            where = 0.5 * (x[worst] + x[worst + 1]) if not touches else 0.5 * (x[worst + 1] + x[worst + 2])
            raise NumericalError(
                f"{self!r} cannot be represented by its density on a grid: after refining to "
                f"{rho.size} points (limit {MAX_POINTS_FACTOR} × grid_size = "
                f"{MAX_POINTS_FACTOR * self.grid_size}) the continuous part integrates to "
                f"{self.continuous_mass + defect:.6f} instead of {self.continuous_mass:.6f} "
                f"(tolerance {MASS_TOLERANCE:g}); the largest remaining quadrature error is near "
                f"x = {where:.6g}, where the density is steeper than the grid resolves or the "
                f"Cauchy-transform solver lost accuracy{self._representation_note()}")
        return x, cum * (self.continuous_mass / cum[-1]), float(defect)

    def _tail_defect(self, s: Array, x: Array, rho: Array, jac: Array) -> float:
        """Power-law estimate of the continuous mass below ``x[0]`` minus the mass left for it
        (the continuous mass minus the trapezoid integral of the grid): below the first point
        ``ρ(t) ≈ ρ(x₀)((t − lo)/(x₀ − lo))^(−a)``, ``a`` from the first two points."""
        lo = self._continuous_support[0]
        f = rho * jac
        tail = self.continuous_mass - float(np.sum(0.5 * (f[1:] + f[:-1]) * np.diff(s)))
        d0, d1 = x[0] - lo, x[1] - lo
        if not (rho[0] > 0 and rho[1] > 0 and d1 > d0 > 0):
            return -tail  # no power law to extrapolate (the density vanishes at the first point)
        a = min(np.log(rho[0] / rho[1]) / np.log(d1 / d0), 1 - 1e-3)
        return float(rho[0] * d0 / (1.0 - a) - tail)

    def cdf_table(self) -> tuple[Array, Array]:
        x, cum, _ = self._table
        return x, cum

    def stieltjes(self, z: Array) -> Array:
        """``G(z)`` from the density grid (midpoint masses) plus the atoms; accurate when
        ``Im z`` is large compared with the grid spacing."""
        zz = complex_array(z, "z")[..., None]
        x, cum = self.cdf_table()
        loc, mass = self.atoms
        cont = np.sum(np.diff(cum) / (zz - 0.5 * (x[1:] + x[:-1])), axis=-1)
        return cont + np.sum(mass / (zz - loc), axis=-1)

    @property
    def mass_defect(self) -> float:
        """Quadrature mismatch of the continuous mass (module docstring)."""
        return self._table[2]

    @property
    def support(self) -> tuple[float, float]:
        loc = self.atoms[0]
        if self.continuous_mass <= 1e-14:
            return float(loc.min()), float(loc.max())
        lo, hi, _ = self._continuous_support
        if loc.size:
            lo, hi = min(lo, float(loc.min())), max(hi, float(loc.max()))
        return lo, hi
