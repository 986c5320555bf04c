"""Limiting spectra of input–output Jacobians of deep MLPs (free independence).

Convention (Pennington–Schoenholz–Ganguli): ``h_l = W_l x_{l−1} + b_l``,
``x_l = φ(h_l)``, ``J = ∂x_L/∂x_0 = D_L W_L ⋯ D_1 W_1`` with ``D_l = diag φ'(h_l)``.
Weights are ``N(0, σ_w²/n_{l−1})`` ("gaussian") or ``σ_w`` times a Haar orthogonal
matrix ("orthogonal"); biases ``N(0, σ_b²)``.

Variance recursion: ``q_1 = σ_w² m_0 + σ_b²`` with ``m_0`` the input's per-coordinate
second moment (argument ``q0``), ``q_l = σ_w² E φ(√q_{l−1} Z)² + σ_b²``; without
``q0`` every layer sits at the fixed point ``q*``. ``χ_l = σ_w² E φ'(√q_l Z)²``.

By the Free Independence Principle the ``D_l`` are asymptotically free from the
weights, and (``n_l`` the widths)
``S_{JJᵀ}(z) = Π_l S_{D_l²}(z n_L/n_l) · S_{W_l}(z n_L/n_{l−1})``,
``S_W(w) = 1/(σ_w²(1 + w))`` (Gaussian), ``1/σ_w²`` (orthogonal, square). For square
networks this is ``⊠_l (D_l² ⊠ W_lW_lᵀ)``. The law of ``D_l²`` is that of ``φ'(h)²``,
``h ~ N(0, q_l)``: exact atoms where ``φ'`` is piecewise constant (ReLU's and
hard-tanh's mass at 0) plus Gauss–Legendre nodes for the continuous part.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy import optimize

from netsor.activations import Activation, activation
from netsor.errors import HyperParameterError, UnsupportedError
from netsor.matrixlaws.free import Factor, FreeProductLaw
from netsor.matrixlaws.gauss import gauss_rule, gaussian_expectation, gaussian_panels, kinks
from netsor.matrixlaws.laws import (
    DiscreteLaw,
    MarchenkoPastur,
    QuadratureLaw,
    SpectralLaw,
    positive,
)

Array = np.ndarray
WEIGHT_KINDS = ("gaussian", "orthogonal")
GAUSS_NODES = 48


def _depth(depth: int) -> int:
    if not isinstance(depth, (int, np.integer)) or isinstance(depth, bool) or depth < 1:
        raise HyperParameterError(f"depth must be a positive integer, got {depth!r}")
    return int(depth)


def _weights_kind(weights: str) -> str:
    if weights not in WEIGHT_KINDS:
        raise HyperParameterError(
            f"unknown weights kind {weights!r}; choose one of {', '.join(WEIGHT_KINDS)}")
    return weights


def is_homogeneous(act: Activation) -> bool:
    """True when ``φ'(cx) = φ'(x)`` for ``c > 0`` (identity, ReLU, leaky ReLU, abs, step):
    then the law of ``φ'(h)²`` does not depend on the variance of ``h``."""
    x = np.linspace(-5.0, 5.0, 102)
    return bool(np.allclose(act.deriv(x), act.deriv(3.7 * x), rtol=0, atol=1e-14))


def variance_map(act: Activation, q: float, sigma_w: float, sigma_b: float) -> float:
    """``σ_w² E φ(√q Z)² + σ_b²``."""
    return sigma_w**2 * gaussian_expectation(lambda h: act.fn(h) ** 2, q, kinks(act)) + sigma_b**2


def fixed_point(act: Activation, sigma_w: float, sigma_b: float) -> float:
    """The stable fixed point ``q*`` of the variance map reached from ``q = 1``.

    For positively homogeneous activations with ``σ_b = 0`` the map is linear,
    ``q ↦ c q``: ``q* = 0`` if ``c < 1``, ``nan`` (every ``q`` is fixed) if ``c = 1``,
    ``inf`` if ``c > 1``; with ``σ_b > 0``, ``σ_b²/(1 − c)`` or ``inf``. Otherwise a
    diverging recursion raises :class:`~netsor.errors.HyperParameterError`.
    """
    if is_homogeneous(act):
        c = variance_map(act, 1.0, sigma_w, 0.0)
        if abs(c - 1.0) < 1e-12:
            return float("nan") if sigma_b == 0 else float("inf")
        if c > 1.0:
            return float("inf")
        return sigma_b**2 / (1.0 - c)
    q = 1.0
    for _ in range(5000):
        new = variance_map(act, q, sigma_w, sigma_b)
        if not np.isfinite(new) or new > 1e12:
            raise HyperParameterError(
                f"the variance recursion of {act.name} diverges at sigma_w={sigma_w}, "
                f"sigma_b={sigma_b}: no fixed point q*; pass q0 (and a finite depth)")
        if abs(new - q) <= 1e-15 * max(q, 1e-300):
            return new
        q = new
    if sigma_b == 0 and abs(float(act.fn(np.zeros(1))[0])) < 1e-15 and q < 1e-2:
        return 0.0  # critical slowing down towards q* = 0 (e.g. tanh at σ_w = 1)
    f = lambda v: variance_map(act, v, sigma_w, sigma_b) - v  # noqa: E731
    return float(optimize.brentq(f, q * 0.5, q * 2.0, xtol=1e-15, rtol=1e-14))


def derivative_law(act: Activation, q: float) -> SpectralLaw:
    """The law of ``φ'(h)²``, ``h ~ N(0, q)``.

    Panels where ``φ'²`` is constant become exact atoms; the rest (8 Gauss–Legendre nodes per
    panel in ``h``, ``|h| ≤ 8√q``) is compressed to the ``GAUSS_NODES``-point Gauss rule of the
    law of ``φ'(h)²`` itself (:func:`~netsor.matrixlaws.gauss.gauss_rule`): the solver's cost is
    linear in the number of nodes. 24 nodes already reproduce the depth-20 tanh (Gaussian
    weights) density of the ~130-node panel rule to ~1e−12, but lose 4 % of the mass near 0
    for erf at σ_w = 1.5 (the small values of ``φ'²`` matter there); 48 agree with 64.
    Returns a :class:`DiscreteLaw` when everything is atoms
    (identity, ReLU, hard-tanh, leaky ReLU), else a :class:`QuadratureLaw`.
    """
    if q == 0.0:
        return DiscreteLaw([float(act.deriv(np.zeros(1))[0]) ** 2], [1.0])
    h, w, panel = gaussian_panels(q, kinks(act), order=8, cut=8.0)
    values = act.deriv(h) ** 2
    vmax = np.maximum.reduceat(values, np.arange(0, h.size, 8))
    vmin = np.minimum.reduceat(values, np.arange(0, h.size, 8))
    constant = (vmax - vmin <= 1e-13 * np.maximum(1.0, vmax))[panel]
    keep = w > 1e-18
    atom_vals, inverse = np.unique(np.round(values[constant & keep], 13), return_inverse=True)
    atom_mass = np.bincount(inverse, weights=w[constant & keep], minlength=atom_vals.size)
    cont = ~constant & keep
    total = atom_mass.sum() + w[cont].sum()
    if not cont.any():
        return DiscreteLaw(atom_vals, atom_mass / total)
    nodes, weights = gauss_rule(values[cont], w[cont] / total, GAUSS_NODES)
    return QuadratureLaw(nodes, weights, (atom_vals, atom_mass / total),
                         name=f"{act.name}'(h)^2, q={q:.6g}")


class JacobianLaw(FreeProductLaw):
    """Limiting law of the squared singular values of ``J`` (eigenvalues of ``JJᵀ``).

    A :class:`FreeProductLaw` with the network's description attached:

    Attributes
    ----------
    activation : Activation
    depth : int
    sigma_w, sigma_b : float
    weights : str
        ``"gaussian"`` or ``"orthogonal"``.
    q : ndarray, shape (depth,)
        Pre-activation variances ``q_1..q_L`` used for the layers' ``D_l²``.
    q_star : float
        Fixed point of the variance map (``nan`` when every q is fixed, ``inf``
        when the recursion diverges but the law does not depend on q).
    chi_layers : ndarray, shape (depth,)
        ``χ_l = σ_w² E φ'(h_l)²``.
    chi : float
        ``χ`` at the fixed point (``χ_L`` when ``q0`` is given).
    input_second_moment : float
        Per-coordinate second moment of ``x_0`` that produces ``q_1``.
    width_ratios : ndarray, shape (depth + 1,)
        Relative widths ``n_0..n_L``.
    """

    activation: Activation
    depth: int
    sigma_w: float
    sigma_b: float
    weights: str
    q: Array
    q_star: float
    chi_layers: Array
    chi: float
    input_second_moment: float
    width_ratios: Array

    def __repr__(self) -> str:
        return (f"JacobianLaw({self.activation.name}, depth={self.depth}, "
                f"weights={self.weights}, sigma_w={self.sigma_w:g}, sigma_b={self.sigma_b:g})")

    def summary(self) -> dict[str, float]:
        """q*, χ, the first four moments, support, atom at 0 and ``smoothed_points`` (grid
        points where only the Poisson-smoothed continuation at ``ε = 1e−4 x₊`` converged; 0
        when the density is exact everywhere), as a flat dict."""
        m = self.moments(4)
        loc, mass = self.atoms
        self.cdf(np.zeros(1))  # builds the density grid: smoothed_points is final after it
        lo, hi = self.support
        return {"q_star": self.q_star, "chi": self.chi, "chi^L": float(np.prod(self.chi_layers)),
                **{f"m{k + 1}": float(m[k]) for k in range(4)},
                "support_lo": float(lo), "support_hi": float(hi),
                "atom_at_0": float(np.sum(mass[loc == 0.0])),
                "smoothed_points": float(self.smoothed_points)}


def _widths(width_ratios: Sequence[float] | None, depth: int) -> Array:
    if width_ratios is None:
        return np.ones(depth + 1)
    n = np.asarray(width_ratios, dtype=float)
    if n.shape != (depth + 1,) or not np.all(np.isfinite(n)) or np.any(n <= 0):
        raise HyperParameterError(
            f"width_ratios must be {depth + 1} positive numbers (relative widths n_0..n_L), "
            f"got {width_ratios!r}")
    return n / n[-1]


def layer_variances(act: Activation, depth: int, sigma_w: float, sigma_b: float,
                    q0: float | None) -> tuple[Array, float, float]:
    """``(q_1..q_L, q*, m_0)``: per-layer pre-activation variances, the fixed point and
    the input second moment (see the module docstring)."""
    q_star = fixed_point(act, sigma_w, sigma_b) if q0 is None else float("nan")
    if q0 is None:
        q_ref = q_star if np.isfinite(q_star) else 1.0
        return np.full(depth, q_ref), q_star, max(q_ref - sigma_b**2, 0.0) / sigma_w**2
    m0 = positive(q0, "q0 (input second moment)", allow_zero=True)
    q = np.empty(depth)
    q[0] = sigma_w**2 * m0 + sigma_b**2
    for layer in range(1, depth):
        q[layer] = variance_map(act, q[layer - 1], sigma_w, sigma_b)
        if not np.isfinite(q[layer]) or q[layer] > 1e200:
            raise HyperParameterError(f"the variance recursion overflows at layer {layer + 1}")
    try:
        q_star = fixed_point(act, sigma_w, sigma_b)
    except HyperParameterError:
        q_star = float("inf")
    return q, q_star, m0


def jacobian_spectrum(activation_: str | Activation, depth: int, sigma_w: float,
                      sigma_b: float = 0.0, weights: str = "gaussian", q0: float | None = None,
                      width_ratios: Sequence[float] | None = None,
                      grid_size: int = 1000) -> JacobianLaw:
    """Limiting law of the eigenvalues of ``JJᵀ`` for a deep MLP (module docstring).

    Parameters
    ----------
    activation_ : str or Activation
        Any activation of :mod:`netsor.nonlin` (needs ``φ'``).
    depth : int
        Number of layers ``L ≥ 1``.
    sigma_w, sigma_b : float
        Weight and bias standard deviations (``σ_w > 0``, ``σ_b ≥ 0``).
    weights : {"gaussian", "orthogonal"}
    q0 : float, optional
        Per-coordinate second moment of the input ``x_0``; without it every
        layer sits at the fixed point ``q*``.
    width_ratios : sequence of float, optional
        Relative widths ``n_0..n_L`` (length ``depth + 1``); Gaussian weights only.
    grid_size : int
        Points of the density grid (cdf, plots).

    Returns
    -------
    JacobianLaw
        Exact moments, density by Stieltjes inversion, atoms, ``q``, ``q_star``,
        ``chi``, ``chi_layers``.
    """
    act = activation(activation_)
    depth = _depth(depth)
    sigma_w = positive(sigma_w, "sigma_w")
    sigma_b = positive(sigma_b, "sigma_b", allow_zero=True)
    weights = _weights_kind(weights)
    n = _widths(width_ratios, depth)
    if weights == "orthogonal" and not np.allclose(n, 1.0):
        raise UnsupportedError("orthogonal weights need equal widths; drop width_ratios")
    q, q_star, m0 = layer_variances(act, depth, sigma_w, sigma_b, q0)
    homogeneous = is_homogeneous(act)
    d_laws = [derivative_law(act, 1.0 if homogeneous else float(ql)) for ql in q]
    if homogeneous or q0 is None:  # identical layers
        d_laws = [d_laws[0]] * depth
    means = np.array([law.mean for law in d_laws])
    if np.any(means <= 0):
        raise HyperParameterError(
            f"φ' of {act.name} vanishes almost surely at these variances: the Jacobian is 0")
    square = np.allclose(n, 1.0)
    w_law = (MarchenkoPastur(1.0, sigma_w**2) if weights == "gaussian"
             else DiscreteLaw([sigma_w**2], [1.0]))
    if square and (homogeneous or q0 is None):
        factors = [Factor(d_laws[0], depth), Factor(w_law, depth)]
    else:
        factors = [Factor(d, 1, 1.0 / n[layer + 1]) for layer, d in enumerate(d_laws)]
        factors += [Factor(w_law, 1, 1.0 / n[layer]) for layer in range(depth)]
    atoms = None
    if not square:
        p0 = np.array([float(np.sum(d.atoms[1][d.atoms[0] == 0.0])) for d in d_laws])
        rank = min(n[0], float(np.min(n[1:] * (1.0 - p0))))
        zero = max(0.0, 1.0 - rank)
        atoms = (np.zeros(1), np.array([zero])) if zero > 1e-14 else (np.zeros(0), np.zeros(0))
    law = JacobianLaw(factors, atoms=atoms, grid_size=grid_size)
    law.activation, law.depth, law.weights = act, depth, weights
    law.sigma_w, law.sigma_b = sigma_w, sigma_b
    law.q, law.q_star, law.input_second_moment, law.width_ratios = q, q_star, m0, n
    law.chi_layers = sigma_w**2 * means
    law.chi = float(law.chi_layers[-1])
    return law
