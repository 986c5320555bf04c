"""Empirical spectral distributions and their distances to a law.

The distances here compare a sample with a *law* through the law's cdf (atoms handled
exactly, the cdf table's points included): they are specific to spectral laws. The W1
distance between two samples is :func:`netsor.stats.distances.w1_1d`.
"""

from __future__ import annotations

import numpy as np

from netsor.errors import InputError, NetsorError
from netsor.matrixlaws.laws import SpectralLaw, check_memory
from netsor.validate import check_count, real_array

Array = np.ndarray
#: Float64 arrays of the size of the evaluation grid that :func:`w1_distance` holds at once (a bound).
_W1_ARRAYS = 16


class EmpiricalSpectrum:
    """The empirical distribution of a finite set of eigenvalues.

    Parameters
    ----------
    eigenvalues : array_like
        Any shape; flattened (e.g. ``(samples, n)`` from several matrices).
    """

    def __init__(self, eigenvalues: Array) -> None:
        ev = real_array(eigenvalues, "eigenvalues").ravel()
        if ev.size == 0:
            raise InputError("an empirical spectrum needs at least one eigenvalue")
        self.eigenvalues = np.sort(ev)

    def __repr__(self) -> str:
        return f"EmpiricalSpectrum({self.eigenvalues.size} eigenvalues)"

    @property
    def size(self) -> int:
        """Number of eigenvalues."""
        return self.eigenvalues.size

    def cdf(self, x: Array) -> Array:
        """Fraction of eigenvalues ``≤ x`` (same shape as ``x``)."""
        xx = real_array(x, "x")
        return np.searchsorted(self.eigenvalues, xx, side="right") / self.size

    def moments(self, k: int) -> Array:
        """``(m_1, …, m_k)``: averages of ``λ^j``."""
        k = check_count(k, "number of moments k", minimum=1)
        return np.array([np.mean(self.eigenvalues**j) for j in range(1, k + 1)])

    def ks(self, law: SpectralLaw) -> float:
        """Kolmogorov–Smirnov distance ``sup_x |F_n(x) − F(x)|``."""
        return ks_distance(self, law)

    def w1(self, law: SpectralLaw) -> float:
        """Wasserstein-1 distance ``∫ |F_n − F| dx``."""
        return w1_distance(self, law)


def esd(eigenvalues: Array) -> EmpiricalSpectrum:
    """The empirical spectral distribution of ``eigenvalues`` (any shape, flattened)."""
    return EmpiricalSpectrum(eigenvalues)


def _snap_to_atoms(ev: Array, law: SpectralLaw) -> Array:
    """Eigenvalues within ``1e−9 · max(1, |λ|_max)`` of an atom, moved onto it (rounding
    spreads exact atoms such as ReLU's zero eigenvalues over a tiny interval)."""
    loc = law.atoms[0]
    if loc.size == 0:
        return ev
    tol = 1e-9 * max(1.0, float(np.max(np.abs(ev))))
    dist = np.abs(ev[:, None] - loc)
    near = dist.min(axis=1) <= tol
    return np.where(near, loc[np.argmin(dist, axis=1)], ev)


def _left_cdf(law: SpectralLaw, x: Array) -> Array:
    """``μ((−∞, x))``: the cdf minus the atoms located exactly at ``x``."""
    loc, mass = law.atoms
    return law.cdf(x) - np.sum(mass * (loc == x[:, None]), axis=1)


def _spectrum_and_law(spectrum: EmpiricalSpectrum | Array, law: SpectralLaw) -> tuple[EmpiricalSpectrum, SpectralLaw]:
    """The arguments of the distances: an :class:`EmpiricalSpectrum` (or eigenvalues, any shape)
    then a :class:`~netsor.matrixlaws.laws.SpectralLaw`; anything else is a clear error."""
    if isinstance(spectrum, SpectralLaw):
        raise InputError("pass the empirical spectrum (or eigenvalues) first and the law second, e.g. "
                         "w1_distance(esd(eigenvalues), Semicircle())")
    if not isinstance(law, SpectralLaw):
        raise InputError(f"law must be a spectral law (Semicircle(), MarchenkoPastur(ratio), jacobian_spectrum(...), "
                         f"…), got {type(law).__name__}")
    return (spectrum if isinstance(spectrum, EmpiricalSpectrum) else EmpiricalSpectrum(spectrum)), law


def ks_distance(spectrum: EmpiricalSpectrum | Array, law: SpectralLaw) -> float:
    """``sup_x |F_n(x) − F(x)|`` (atoms of the law handled exactly: see ``_snap_to_atoms``);
    ``spectrum`` an :class:`EmpiricalSpectrum` or an array of eigenvalues."""
    spectrum, law = _spectrum_and_law(spectrum, law)
    ev = _snap_to_atoms(spectrum.eigenvalues, law)
    uniq, counts = np.unique(ev, return_counts=True)
    after = np.cumsum(counts) / ev.size
    before = after - counts / ev.size
    return float(max(np.max(np.abs(law.cdf(uniq) - after)),
                     np.max(np.abs(_left_cdf(law, uniq) - before))))


def w1_distance(spectrum: EmpiricalSpectrum | Array, law: SpectralLaw, resolution: int = 20000) -> float:
    """``∫ |F_n(x) − F(x)| dx`` on the union of the eigenvalues, the law's atoms and a
    uniform grid of ``resolution`` points over both supports (and the points of the law's cdf
    table, between which its cdf is linear); ``F`` is taken linear between consecutive points
    (exact for the empirical step function and for tabulated cdfs). ``spectrum``: an
    :class:`EmpiricalSpectrum` or an array of eigenvalues."""
    spectrum, law = _spectrum_and_law(spectrum, law)
    resolution = check_count(resolution, "resolution", minimum=2)
    ev = np.sort(_snap_to_atoms(spectrum.eigenvalues, law))
    spectrum = EmpiricalSpectrum(ev)
    lo, hi = law.support
    lo, hi = min(lo, ev[0]), max(hi, ev[-1])
    try:
        table = law.cdf_table()[0]
    except NetsorError:  # laws with a closed-form cdf and no table
        table = np.zeros(0)
    check_memory(_W1_ARRAYS * (ev.size + table.size + resolution), f"w1_distance with resolution={resolution}",
                 "use a smaller resolution (the default 20000 is plenty)")
    pts = np.unique(np.concatenate([ev, law.atoms[0], table, np.linspace(lo, hi, resolution)]))
    fn = spectrum.cdf(pts[:-1])  # constant on [t_j, t_{j+1})
    a = fn - law.cdf(pts[:-1])
    b = fn - _left_cdf(law, pts[1:])
    h = np.diff(pts)
    same = a * b >= 0
    denom = np.where(same, 1.0, np.abs(a) + np.abs(b))
    area = np.where(same, 0.5 * (np.abs(a) + np.abs(b)), 0.5 * (a * a + b * b) / denom)
    return float(np.sum(h * area))
