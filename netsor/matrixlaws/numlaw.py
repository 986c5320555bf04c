"""Laws known through their Cauchy transform on the real axis (Stieltjes inversion).

A :class:`SolvedLaw` subclass provides ``_cauchy_on_axis(x)``: ``G(x + iε)`` for a
tiny ``ε`` (relative ``1e−10``, see ``SolvedLaw._eps``), computed by continuation
from far above the axis. The density of the absolutely continuous part is
``−Im(G − Σ_a m_a / (z − a)) / π``: the known atoms are subtracted
analytically, so they are never smeared over the grid; within ``1e−5`` (relative to the
support's width) of an atom other than one at the lower bound the density is reported as 0:
there the atom's term dominates ``G`` and the solver's relative accuracy does not resolve
the continuous part (free products of two-point laws put an atom at the upper edge of
the whole support, next to a gap).

The support of the continuous part is located by a probe on a grid that is
geometric near the lower bound (where densities of Jacobian spectra diverge)
and uniform elsewhere, then refined by multisection; the cdf table is a
trapezoid rule on an edge-clustered grid of ``grid_size`` points, with a
tail below the first point (``1e−30`` of the width above the lower edge) when the
density diverges there: the tail gets the mass not found on the grid, and a
power-law extrapolation of the density checks it. The mismatch (or, without a
tail, the continuous mass found minus expected) is kept in ``mass_defect``;
above 1e−2 a :class:`~netsor.errors.NumericalError` is raised.
"""

from __future__ import annotations

from abc import abstractmethod
from functools import cached_property

import numpy as np

from netsor.errors import NumericalError
from netsor.matrixlaws.laws import SpectralLaw, finite_array

Array = np.ndarray
EPS_REL = 1e-10
_GEOMETRIC_FLOOR = 1e-30
_DENSITY_FLOOR = 1e-5
_MASS_TOLERANCE = 1e-2
_ATOM_GUARD = 1e-5


def hybrid_grid(lo: float, hi: float, size: int) -> tuple[Array, Array]:
    """A grid on ``(lo, hi]`` for densities that diverge at ``lo``: ``x(s)`` for ``s``
    uniform on ``[0, 1]``, geometric from ``lo + 1e−30 (hi − lo)`` to ``lo + 0.01 (hi − lo)``
    and sine-clustered towards ``hi`` after, with ``dx/ds`` continuous at the junction
    (about 29 % of the points are geometric). Returns ``(x, dx/ds)``, each of shape
    ``(size,)``; ``∫ρ dx`` is the trapezoid rule in ``s`` of ``ρ · dx/ds``."""
    width, knee = hi - lo, 0.01
    log_span = np.log(knee / _GEOMETRIC_FLOOR)
    split = knee * log_span / (knee * log_span + (1.0 - knee) * 0.5 * np.pi)
    s = np.linspace(0.0, 1.0, size)
    beta = log_span / split
    geo = s <= split
    u = np.clip((s - split) / (1.0 - split), 0.0, 1.0)
    frac = np.where(geo, _GEOMETRIC_FLOOR * np.exp(beta * s),
                    knee + (1.0 - knee) * np.sin(0.5 * np.pi * u))
    dfrac = np.where(geo, beta * frac,
                     (1.0 - knee) * 0.5 * np.pi * np.cos(0.5 * np.pi * u) / (1.0 - split))
    return lo + width * frac, width * dfrac


def edge_grid(lo: float, hi: float, size: int) -> tuple[Array, Array]:
    """Cosine (Chebyshev-like) grid on ``[lo, hi]`` clustered at both edges: ``(x, dx/ds)``
    for ``s`` uniform on ``[0, 1]``, each of shape ``(size,)``."""
    t = np.linspace(0.0, np.pi, size)
    return lo + (hi - lo) * (1.0 - np.cos(t)) / 2.0, (hi - lo) * np.pi * np.sin(t) / 2.0


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

    @property
    def continuous_mass(self) -> float:
        """Mass of the absolutely continuous part (1 minus the atoms)."""
        return max(0.0, 1.0 - float(np.sum(self.atoms[1])))

    def _eps(self, x: Array) -> Array:
        """Final distance to the axis: ``1e−10 · max(|x − lo|, 1e−30 · width)``, so that
        densities diverging at a lower edge are resolved down to the geometric floor."""
        lo, hi = self._support_bounds()
        width = max(hi - lo, abs(hi), 1e-300)
        return EPS_REL * np.maximum(np.abs(x - lo), _GEOMETRIC_FLOOR * width)

    def _density_1d(self, x: Array) -> Array:
        if self.continuous_mass <= 1e-14:
            return np.zeros_like(x)
        z = x + 1j * self._eps(x)
        g = self._cauchy_on_axis(x)
        loc, mass = self.atoms
        if loc.size:
            g = g - np.sum(mass / (z[:, None] - loc), axis=1)
        rho = -g.imag / np.pi
        if not np.all(np.isfinite(rho)):
            raise NumericalError("the Cauchy transform solver returned non-finite values")
        lo, hi = self._support_bounds()
        inner = loc[loc > lo]
        guard = np.any(np.abs(x[:, None] - inner) <= _ATOM_GUARD * (hi - lo), axis=1)
        return np.where(guard, 0.0, np.maximum(rho, 0.0))

    def density(self, x: Array) -> Array:
        """Density of the absolutely continuous part (same shape as ``x``)."""
        xx = finite_array(x, "x")
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
            raise NumericalError("no continuous spectrum found inside the predicted support")
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
    def _grid_full(self) -> tuple[Array, Array, Array]:
        if self.continuous_mass <= 1e-14:
            lo, hi = self.support
            return np.linspace(lo, hi, 2), np.zeros(2), np.zeros(2)
        lo, hi, touches = self._continuous_support
        make = hybrid_grid if touches else edge_grid
        x, jac = make(lo, hi, self.grid_size)
        return x, self._density_1d(x), jac

    @property
    def grid(self) -> tuple[Array, Array]:
        """``(x, density)`` on the law's plotting/integration grid, shape ``(grid_size,)``."""
        x, rho, _ = self._grid_full
        return x, rho

    @cached_property
    def _table(self) -> tuple[Array, Array, float]:
        x, rho, jac = self._grid_full
        f = rho * jac
        ds = 1.0 / (x.size - 1)
        cum = np.concatenate([[0.0], np.cumsum(0.5 * (f[1:] + f[:-1]) * ds)])
        if self.continuous_mass <= 1e-14:
            return x, cum, 0.0
        lo, _, touches = self._continuous_support
        if touches:
            # below the first point the remaining mass is the tail; the power law
            # ρ(t) ≈ ρ(x₀)((t − lo)/(x₀ − lo))^(−a) gives an independent estimate of it
            d0, d1 = x[0] - lo, x[1] - lo
            a = min(np.log(max(rho[0], 1e-300) / max(rho[1], 1e-300)) / np.log(d1 / d0), 1 - 1e-3)
            tail = self.continuous_mass - cum[-1]
            defect = rho[0] * d0 / (1.0 - a) - tail
            x, cum = np.concatenate([[lo], x]), np.concatenate([[0.0], cum + max(tail, 0.0)])
        else:
            defect = cum[-1] - self.continuous_mass
        if abs(defect) > _MASS_TOLERANCE:
            raise NumericalError(
                f"Stieltjes inversion lost mass: the continuous part integrates to "
                f"{self.continuous_mass + defect:.6f} instead of {self.continuous_mass:.6f}; "
                "try a larger grid_size")
        return x, cum * (self.continuous_mass / cum[-1]), float(defect)

    def _cdf_table(self) -> tuple[Array, Array]:
        x, cum, _ = self._table
        return x, cum

    def stieltjes(self, z: Array) -> Array:
        """``G(z)`` from the density grid (midpoint masses) plus the atoms; accurate when
        ``Im z`` is large compared with the grid spacing."""
        zz = np.asarray(z, dtype=complex)[..., None]
        x, cum = self._cdf_table()
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
