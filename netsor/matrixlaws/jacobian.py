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

Every Gaussian expectation comes from the library's engine
(:func:`netsor.gaussian.expect_1d` / :func:`netsor.gaussian.gaussian_rule`, panels split at
``Activation.kinks``); hyper-parameters are checked by :mod:`netsor.validate`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy import optimize, special

from netsor.activations import Activation
from netsor.activations import activation as resolve_activation
from netsor.errors import HyperParameterError, InputError, NumericalError, UnsupportedError
from netsor.gaussian import expect_1d, gaussian_rule
from netsor.matrixlaws.free import Factor, FreeProductLaw
from netsor.matrixlaws.gauss import gauss_rule
from netsor.matrixlaws.laws import DiscreteLaw, MarchenkoPastur, QuadratureLaw, SpectralLaw
from netsor.validate import check_choice, check_count, check_real, check_sigma, real_array

Array = np.ndarray
WEIGHT_KINDS = ("gaussian", "orthogonal")
#: Accepted weight standard deviations (``σ_w²`` is a normal float64); ``σ_b`` is at most the upper bound.
SIGMA_W_RANGE = (1e-150, 1e150)
GAUSS_NODES = 48
#: Largest variance the fixed-point search looks at; beyond it the recursion diverges.
Q_MAX = 1e12
#: Relative precision of the fixed point q*.
Q_RTOL = 1e-13
#: Intervals of ``h`` carrying less Gaussian mass than this are dropped from the law of φ'².
_NEGLIGIBLE_MASS = 1e-16
#: Consecutive quadrature nodes with equal φ'² (to 1e−13 relative) that make an atom...
_RUN = 4
#: ... when they carry at least this mass (saturating activations such as gelu reach φ' = 1
#: to rounding in their far tails: that is not an atom).
_RUN_MASS = 1e-6


def features(act: Activation) -> tuple[float, ...]:
    """Where the shared Gaussian quadrature splits its panels: the activation's kinks, or 0."""
    return tuple(act.kinks) or (0.0,)


def check_network(activation: object, depth: object, sigma_w: object, sigma_b: object, weights: object,
                  q0: object) -> tuple[Activation, int, float, float, str, float | None]:
    """The hyper-parameters of a network whose Jacobian is studied, validated: the activation,
    the number of layers (``≥ 1``), ``σ_w > 0`` (with ``σ_w = 0`` the Jacobian is 0), ``σ_b ≥ 0``,
    the weight law (one of :data:`WEIGHT_KINDS`) and the input's per-coordinate second moment
    (``≥ 0``, or None: layers at ``q*``)."""
    act = resolve_activation(activation)
    depth = check_count(depth, "depth", minimum=1)
    sigma_w = check_sigma(sigma_w, "sigma_w")
    if sigma_w == 0.0:
        raise HyperParameterError("sigma_w must be > 0: with sigma_w = 0 the Jacobian is 0")
    if not SIGMA_W_RANGE[0] <= sigma_w <= SIGMA_W_RANGE[1]:
        raise HyperParameterError(
            f"sigma_w must lie in [{SIGMA_W_RANGE[0]:g}, {SIGMA_W_RANGE[1]:g}] (its square, the weight "
            f"variance, must be a normal float64), got {sigma_w!r}")
    sigma_b = check_sigma(sigma_b, "sigma_b")
    if sigma_b > SIGMA_W_RANGE[1]:
        raise HyperParameterError(f"sigma_b must be at most {SIGMA_W_RANGE[1]:g} (its square is a variance), "
                                  f"got {sigma_b!r}")
    weights = check_choice(weights, "weights", WEIGHT_KINDS)
    q0 = None if q0 is None else check_real(q0, "q0 (input second moment)", minimum=0.0)
    return act, depth, sigma_w, sigma_b, weights, q0


def width_profile(width_ratios: Sequence[float] | None, depth: int) -> Array:
    """Relative widths ``n_0..n_L`` normalised to ``n_L = 1`` (all ones by default)."""
    if width_ratios is None:
        return np.ones(depth + 1)
    n = real_array(width_ratios, "width_ratios", ndim=1)
    if n.shape != (depth + 1,) or np.any(n <= 0):
        raise HyperParameterError(
            f"width_ratios must be {depth + 1} positive numbers (relative widths n_0..n_L), "
            f"got {width_ratios!r}")
    return n / n[-1]


def is_homogeneous(act: Activation) -> bool:
    """True when ``φ'(cx) = φ'(x)`` for ``c > 0`` (identity, ReLU, leaky ReLU, abs, step):
    then the law of ``φ'(h)²`` does not depend on the variance of ``h``."""
    x = np.linspace(-5.0, 5.0, 102)
    return bool(np.allclose(act.deriv(x), act.deriv(3.7 * x), rtol=0, atol=1e-14))


def _map_arguments(activation: str | Activation, q: float | Array, sigma_w: float,
                   sigma_b: float) -> tuple[Activation, Array, float, float]:
    """The arguments of the variance map, validated: an activation (name or object), variances
    ``q ≥ 0`` (finite, any shape) and the standard deviations ``σ_w, σ_b ≥ 0``."""
    act = resolve_activation(activation)
    qq = real_array(q, "q (pre-activation variance)")
    if np.any(qq < 0):
        raise InputError(f"q (pre-activation variance) must be >= 0, got {float(qq[qq < 0].flat[0])!r}")
    return act, qq, check_sigma(sigma_w, "sigma_w"), check_sigma(sigma_b, "sigma_b")


def variance_map(activation: str | Activation, q: float | Array, sigma_w: float,
                 sigma_b: float) -> float | Array:
    """``σ_w² E φ(√q Z)² + σ_b²`` (elementwise over an array of ``q ≥ 0``, any shape, possibly
    empty); ``activation`` a name or an :class:`~netsor.activations.Activation`."""
    act, qq, sigma_w, sigma_b = _map_arguments(activation, q, sigma_w, sigma_b)
    if qq.size == 0:
        return qq.copy()
    value = sigma_w**2 * expect_1d(lambda h: act.fn(h) ** 2, qq, features(act)) + sigma_b**2
    return float(value) if np.ndim(value) == 0 else value


def variance_gap(act: Activation, q: float | Array, sigma_w: float, sigma_b: float) -> Array:
    """``V(q) − q = E[σ_w² φ(h)² − h²] + σ_b²``, ``h ~ N(0, q)``: one expectation, so that for
    activations close to the identity near 0 (hard-tanh, tanh at small ``q``) the small
    difference keeps its sign instead of being rounded from two nearly equal numbers."""
    return expect_1d(lambda h: sigma_w**2 * act.fn(h) ** 2 - h * h, q, features(act)) + sigma_b**2


def _root(gap, lo: float, hi: float) -> float:
    """The root of ``gap`` in ``[lo, hi]`` (a sign change is known); scipy's errors become
    :class:`~netsor.errors.NumericalError`."""
    try:
        return float(optimize.brentq(lambda v: float(gap(v)), lo, hi, xtol=1e-300, rtol=Q_RTOL,
                                     maxiter=500))
    except (ValueError, RuntimeError) as exc:
        raise NumericalError(f"the fixed point of the variance map was not found in "
                             f"[{lo:.6g}, {hi:.6g}]: {exc}") from None


def fixed_point(activation: str | Activation, sigma_w: float, sigma_b: float, start: float = 1.0) -> float:
    """The fixed point ``q*`` of the variance map ``V`` that the recursion reaches from ``start``.

    ``V`` increases with ``q`` for the usual activations, so the recursion moves monotonically
    towards the nearest root of ``V(q) − q`` in the direction of ``V(start) − start``: the
    largest root below ``start``, or the smallest above it. Both are bracketed on a geometric
    scan of :func:`variance_gap` (one vectorised quadrature) and polished by Brent's method.
    When ``V(q) < q`` all the way down and ``V(0) = 0`` (``σ_b = 0``, ``φ(0) = 0``) the answer is
    ``q* = 0``, however slowly the recursion gets there (tanh at ``σ_w = 1``: ``q_l ~ 1/(2l)``;
    hard-tanh at ``σ_w = 1``, whose map is the identity up to ``O(e^{−1/(2q)})``).

    Positively homogeneous activations have the affine map ``q ↦ c q + σ_b²``: ``q* = σ_b²/(1 − c)``
    if ``c < 1``; if ``c = 1`` and ``σ_b = 0`` every ``q`` is fixed and the recursion stays at
    ``q* = start``. A recursion that diverges (``c > 1``, or ``c = 1`` with ``σ_b > 0``, or any
    activation growing past ``Q_MAX``) raises :class:`~netsor.errors.HyperParameterError`.
    ``activation`` is a name or an :class:`~netsor.activations.Activation`.
    """
    act, _, sigma_w, sigma_b = _map_arguments(activation, 1.0, sigma_w, sigma_b)
    start = check_real(start, "start", minimum=0.0, strict=True)
    diverges = HyperParameterError(
        f"the variance recursion of {act.name} diverges at sigma_w={sigma_w}, sigma_b={sigma_b}: no fixed "
        f"point q* below {Q_MAX:g}; pass q0 (and a finite depth)")
    if is_homogeneous(act):
        c = variance_map(act, 1.0, sigma_w, 0.0)
        if abs(c - 1.0) < 1e-12 and sigma_b == 0:
            return start
        if c >= 1.0 - 1e-12:
            raise diverges
        return sigma_b**2 / (1.0 - c)
    gap = lambda v: variance_gap(act, v, sigma_w, sigma_b)  # noqa: E731
    with np.errstate(over="ignore", invalid="ignore"):
        g_start = float(gap(start))
        if not np.isfinite(g_start):
            raise HyperParameterError(
                f"E {act.name}(h)² is not finite for h ~ N(0, {start:g}): the variance recursion "
                f"has no fixed point; pass q0 (and a finite depth)")
        if g_start == 0.0:
            return start
        if g_start < 0.0:
            qs = start * np.logspace(0.0, -40.0, 161)
            g = gap(qs)
            above = np.flatnonzero(g > 0)  # exact zeros are the rule's truncation, not roots
            if above.size:
                k = int(above[0])
                j = int(np.flatnonzero(g[:k] < 0)[-1])
                return _root(gap, qs[k], qs[j])
            v0 = sigma_b**2 + sigma_w**2 * act.at_zero**2
            return 0.0 if v0 == 0.0 else _root(gap, 0.0, float(qs[-1]))
        qs = start * np.logspace(0.0, np.log10(Q_MAX / start), 97) if start < Q_MAX else np.array([start])
        g = gap(qs)
        below = np.flatnonzero(~(g > 0) & np.isfinite(g))
    if below.size == 0:
        raise diverges
    k = int(below[0])
    return float(qs[k]) if g[k] == 0 else _root(gap, qs[k - 1], qs[k])


def derivative_law(activation: str | Activation, q: float) -> SpectralLaw:
    """The law of ``φ'(h)²``, ``h ~ N(0, q)``.

    Nodes and weights of the shared Gaussian rule (:func:`netsor.gaussian.gaussian_rule`,
    panels split at ``act.kinks``). Between consecutive kinks, an interval where ``φ'²`` is
    constant becomes an exact atom with the interval's Gaussian mass (``Φ`` differences); so do
    runs of ``≥ 4`` consecutive nodes with equal ``φ'²`` (to 1e−13 relative) carrying a mass
    ``≥ 1e−6`` (custom activations whose kinks are not declared: ``φ'`` is used as given).
    The rest is compressed to the ``GAUSS_NODES``-point Gauss rule of the law of ``φ'(h)²``
    itself (:func:`~netsor.matrixlaws.gauss.gauss_rule`): the solver's cost is linear in the
    number of nodes. 24 nodes already reproduce the depth-20 tanh (Gaussian weights) density
    of the full rule to ~1e−12, but lose 4 % of the mass near 0 for erf at σ_w = 1.5 (the
    small values of ``φ'²`` matter there); 48 agree with 64. Returns a :class:`DiscreteLaw`
    when everything is atoms (identity, ReLU, hard-tanh, leaky ReLU), else a
    :class:`QuadratureLaw`. ``activation`` is a name or an :class:`~netsor.activations.Activation`.
    """
    act = resolve_activation(activation)
    q = check_real(q, "q (pre-activation variance)", minimum=0.0)
    if q == 0.0:
        return DiscreteLaw([float(act.deriv(np.zeros(1))[0]) ** 2], [1.0])
    sd = np.sqrt(q)
    h, w = (a[0] for a in gaussian_rule(np.zeros(1), np.array([sd]), features(act)))
    keep = w > 0
    order = np.argsort(h[keep], kind="stable")
    h, w = h[keep][order], w[keep][order]
    values = np.asarray(act.deriv(h), dtype=float) ** 2
    if not np.all(np.isfinite(values)):
        raise HyperParameterError(f"φ' of {act.name} is not finite at some h ~ N(0, {q:g})")
    atom_vals: list[float] = []
    atom_mass: list[float] = []
    cont_x: list[Array] = []
    cont_w: list[Array] = []
    cuts = np.array([-np.inf, *sorted(act.kinks), np.inf])
    for a, b in zip(cuts[:-1], cuts[1:], strict=True):
        mass = float(special.ndtr(b / sd) - special.ndtr(a / sd))
        if mass < _NEGLIGIBLE_MASS:
            continue
        inside = (h > a) & (h < b)
        if not inside.any():  # an interval the rule does not reach (|z| > 10): φ'² at its middle
            mid = 0.5 * (a + b) if np.isfinite(a + b) else (a + sd if np.isfinite(a) else b - sd)
            atom_vals.append(float(act.deriv(np.array([mid]))[0]) ** 2)
            atom_mass.append(mass)
            continue
        v, wv = values[inside], w[inside] * (mass / w[inside].sum())
        same = np.abs(np.diff(v)) <= 1e-13 * np.maximum(np.abs(v[1:]), np.abs(v[:-1]))
        run_id = np.concatenate([[0], np.cumsum(~same)])
        run_len = np.bincount(run_id)[run_id]
        run_mass = np.bincount(run_id, weights=wv)[run_id]
        in_run = (run_len >= min(_RUN, v.size)) & ((run_len == v.size) | (run_mass >= _RUN_MASS))
        if in_run.any():
            ids, inv = np.unique(run_id[in_run], return_inverse=True)
            atom_vals.extend(float(v[in_run][inv == i][0]) for i in range(ids.size))
            atom_mass.extend(float(m) for m in np.bincount(inv, weights=wv[in_run]))
        cont_x.append(v[~in_run])
        cont_w.append(wv[~in_run])
    vals, inverse = np.unique(np.round(np.array(atom_vals), 13), return_inverse=True)
    masses = np.bincount(inverse, weights=np.array(atom_mass), minlength=vals.size)
    cx = np.concatenate(cont_x) if cont_x else np.zeros(0)
    cw = np.concatenate(cont_w) if cont_w else np.zeros(0)
    total = masses.sum() + cw.sum()
    if cx.size == 0:
        return DiscreteLaw(vals, masses / total)
    nodes, weights = gauss_rule(cx, cw / total, GAUSS_NODES)
    return QuadratureLaw(nodes, weights, (vals, masses / total), name=f"{act.name}'(h)^2, q={q:.6g}")


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
        Fixed point of the variance map reached from ``q = 1`` (1 when every q is fixed,
        ``inf`` when the recursion diverges but the law does not depend on q).
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


def layer_variances(act: Activation, depth: int, sigma_w: float, sigma_b: float,
                    q0: float | None) -> tuple[Array, float, float]:
    """``(q_1..q_L, q*, m_0)``: per-layer pre-activation variances, the fixed point reached
    from ``q = 1`` and the input second moment (see the module docstring)."""
    if q0 is None:
        q_star = _fixed_point_or_inf(act, sigma_w, sigma_b)
        q_ref = q_star if np.isfinite(q_star) else 1.0
        return np.full(depth, q_ref), q_star, max(q_ref - sigma_b**2, 0.0) / sigma_w**2
    q = np.empty(depth)
    q[0] = sigma_w**2 * q0 + sigma_b**2
    if not q[0] <= 1e200:
        raise HyperParameterError(f"q_1 = sigma_w² q0 + sigma_b² = {q[0]:.3g} is too large (above 1e200); use a "
                                  "smaller q0, sigma_w or sigma_b")
    with np.errstate(over="ignore", invalid="ignore"):
        for layer in range(1, depth):
            q[layer] = variance_map(act, q[layer - 1], sigma_w, sigma_b)
            if not np.isfinite(q[layer]) or q[layer] > 1e200:
                raise HyperParameterError(
                    f"the variance recursion of {act.name} overflows at layer {layer + 1} "
                    f"(q = {q[layer - 1]:.3g} at layer {layer}); use a smaller q0, sigma_w or depth")
    try:
        q_star = fixed_point(act, sigma_w, sigma_b)
    except HyperParameterError:
        q_star = float("inf")
    return q, q_star, q0


def _fixed_point_or_inf(act: Activation, sigma_w: float, sigma_b: float) -> float:
    """:func:`fixed_point` from ``q = 1``; ``inf`` when the recursion diverges but the law of ``φ'(h)²``
    does not depend on ``q`` (positively homogeneous activations), else its error."""
    try:
        return fixed_point(act, sigma_w, sigma_b)
    except HyperParameterError:
        if is_homogeneous(act):
            return float("inf")
        raise


def jacobian_spectrum(activation: str | Activation, depth: int, sigma_w: float,
                      sigma_b: float = 0.0, *, weights: str = "gaussian", q0: float | None = None,
                      width_ratios: Sequence[float] | None = None,
                      grid_size: int = 1000) -> JacobianLaw:
    """Limiting law of the eigenvalues of ``JJᵀ`` for a deep MLP (module docstring).

    Parameters
    ----------
    activation : str or Activation
        Any activation of :mod:`netsor.activations` (needs ``φ'``), or a custom one.
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
        Initial points of the adaptive density grid (cdf, plots), at least 16.

    Returns
    -------
    JacobianLaw
        Exact moments, density by Stieltjes inversion, atoms, ``q``, ``q_star``,
        ``chi``, ``chi_layers``.
    """
    act, depth, sigma_w, sigma_b, weights, q0 = check_network(activation, depth, sigma_w, sigma_b, weights, q0)
    grid_size = check_count(grid_size, "grid_size", minimum=16)
    n = width_profile(width_ratios, depth)
    if weights == "orthogonal" and not np.allclose(n, 1.0):
        raise UnsupportedError("orthogonal weights need equal widths; drop width_ratios")
    q, q_star, m0 = layer_variances(act, depth, sigma_w, sigma_b, q0)
    homogeneous = is_homogeneous(act)
    if homogeneous or q0 is None:  # identical layers
        d_laws = [derivative_law(act, 1.0 if homogeneous else float(q[0]))] * depth
    else:
        d_laws = [derivative_law(act, float(ql)) for ql in q]
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
