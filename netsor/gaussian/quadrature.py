"""One-dimensional Gaussian quadrature with error estimates: ``E f(loc + scale·Z)``, ``Z ~ N(0, 1)``.

Composite Gauss–Legendre on ``[−Z_MAX, Z_MAX]`` in the standard coordinate ``z``: panels are
split exactly at the points where ``f`` has kinks or jumps (``features``) and graded towards
them, so piecewise-smooth functions converge spectrally. Every panel is integrated with 20
and with 10 nodes: ``|Q₂₀ − Q₁₀|`` summed over panels is the error estimate of ``Q₂₀`` (a
large over-estimate when ``f`` is smooth on each panel, the right size when a panel hides a
kink). When it exceeds the tolerance, :func:`expect_1d_err` bisects the worst panels until it
does not — this locates kinks nobody declared (user functions) and reports integrals that do
not converge (``E f`` infinite, e.g. ``f = 1/x``) instead of returning a wrong number.

The tails ``|z| > Z_MAX`` carry ``2Φ(−10) ≈ 1.5e−23`` of the mass; their contribution is
estimated from ``f`` at the ends and added to the error.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache

import numpy as np

from netsor.errors import NumericalError

Array = np.ndarray

#: Standard-normal coordinates beyond this are left out (tail mass 1.5e-23; estimated in the error).
Z_MAX = 10.0
PANEL_EDGES = np.linspace(-Z_MAX, Z_MAX, 11)
#: Panel edges around each feature, graded towards it: φ(√a z) varies on the scale 1/√a in z,
#: down to 0.1 for the largest variances (1e2) and steeper at kinks.
GRADING = np.array([0.0, -1.0, -4.0**-1, -4.0**-2, -4.0**-3, 4.0**-3, 4.0**-2, 4.0**-1, 1.0])
GL_NODES, GL_WEIGHTS = np.polynomial.legendre.leggauss(20)
GL10_NODES, GL10_WEIGHTS = np.polynomial.legendre.leggauss(10)
INV_SQRT_2PI = 1.0 / np.sqrt(2.0 * np.pi)
_TAIL_DENSITY = INV_SQRT_2PI * np.exp(-0.5 * Z_MAX**2)
#: Bisections of a panel at most (a jump is then located to 20·2⁻⁶⁰), and panels of one integral
#: at most (a divergent integral stops there, with a large error estimate).
MAX_BISECTIONS = 60
MAX_PANELS = 4096


@lru_cache(maxsize=8)
def hermite_rule(n: int) -> tuple[Array, Array]:
    """Probabilists' Gauss–Hermite nodes and weights of ``E f(Z)``, ``Z ~ N(0, 1)`` (weights summing to 1), n
    nodes; read-only (cached)."""
    z, w = np.polynomial.hermite_e.hermegauss(n)
    w = w / np.sqrt(2.0 * np.pi)
    z.flags.writeable = w.flags.writeable = False
    return z, w


def panel_edges(loc: Array, scale: Array, features: tuple[float, ...] = (0.0,),
                extra_z: Array | None = None) -> Array:
    """Sorted panel edges in ``z`` (shape (P, E)) for ``E f(loc[p] + scale[p]·Z)``.

    Panels are split where ``loc + scale·z`` equals a feature (graded towards it) and at the
    columns of ``extra_z`` (shape (P, k), further edges in ``z``; NaN/inf are ignored).
    """
    loc = np.asarray(loc, dtype=float).reshape(-1)
    scale = np.asarray(scale, dtype=float).reshape(-1)
    safe = np.where(scale > 0, scale, 1.0)
    cuts = [np.broadcast_to(PANEL_EDGES, (loc.size, PANEL_EDGES.size))]
    # beyond scale 64 the grading continues geometrically down to 1/scale (f varies on the scale 1/scale
    # in z: tanh'(σz) at σ = 1e6 is a spike of width 1e-6 that the fixed grading steps over)
    top = min(float(np.nan_to_num(np.max(safe, initial=1.0), nan=1.0)), 1e40)  # (inf: overflow, reported later)
    deeper = 4.0 ** -np.arange(4, int(np.ceil(np.log(top) / np.log(4.0))) + 2) if top > 64.0 else np.empty(0)
    grading = np.concatenate([GRADING, deeper, -deeper])
    for x in features:
        cuts.append(np.where(scale > 0, (x - loc) / safe, Z_MAX)[:, None] + grading)
    if extra_z is not None:
        cuts.append(np.nan_to_num(extra_z, nan=Z_MAX, posinf=Z_MAX, neginf=-Z_MAX))
    return np.sort(np.clip(np.concatenate(cuts, axis=1), -Z_MAX, Z_MAX), axis=1)


def rule_on_panels(edges: Array, nodes: Array = GL_NODES, weights: Array = GL_WEIGHTS) -> tuple[Array, Array]:
    """Standard-coordinate nodes and Gaussian weights on panels ``edges`` (P, E): shape (P, (E−1)·n)."""
    half = 0.5 * (edges[:, 1:] - edges[:, :-1])
    mid = 0.5 * (edges[:, 1:] + edges[:, :-1])
    z = (mid[..., None] + half[..., None] * nodes).reshape(edges.shape[0], -1)
    w = (half[..., None] * weights).reshape(edges.shape[0], -1) * INV_SQRT_2PI * np.exp(-0.5 * z * z)
    return z, w


def gaussian_rule(loc: Array, scale: Array, features: tuple[float, ...] = (0.0,),
                  extra_z: Array | None = None) -> tuple[Array, Array]:
    """Nodes and weights for ``E f(loc + scale·Z)``, ``Z ~ N(0, 1)``.

    Parameters
    ----------
    loc, scale : array, shape (P,)
        Location and (non-negative) scale of each of P Gaussians.
    features : tuple of float
        Points ``x`` where f has a kink or varies fastest; panels are split where
        ``loc + scale·z = x`` and graded towards it.
    extra_z : array, shape (P, k), optional
        Further panel edges in standardised coordinates.

    Returns
    -------
    x, w : arrays, shape (P, Q)
        ``Σ_q w[p, q] f(x[p, q]) ≈ E f(loc[p] + scale[p] Z)``.
    """
    loc = np.asarray(loc, dtype=float).reshape(-1)
    scale = np.asarray(scale, dtype=float).reshape(-1)
    z, w = rule_on_panels(panel_edges(loc, scale, features, extra_z))
    return loc[:, None] + scale[:, None] * z, w


def expect_1d(f: Callable[[Array], Array], variance: Array, features: tuple[float, ...] = (0.0,)) -> Array:
    """``E f(u)`` for ``u ~ N(0, variance)``, elementwise over ``variance`` (any shape).

    The fixed panelled rule (no error estimate): ~1e-14 for piecewise-smooth ``f`` whose kinks
    are all in ``features``. See :func:`expect_1d_err` for an estimate and adaptivity.
    """
    var = np.asarray(variance, dtype=float)
    x, w = gaussian_rule(np.zeros(var.size), np.sqrt(np.maximum(var.reshape(-1), 0.0)), features)
    return np.sum(w * f(x), axis=1).reshape(var.shape)


def expect_1d_err(f: Callable[[Array], Array], variance: Array, features: tuple[float, ...] = (0.0,),
                  atol: Array | float = 0.0, what: str = "E f(u)") -> tuple[Array, Array]:
    """``(E f(u), error estimate)`` for ``u ~ N(0, variance)`` elementwise over ``variance``.

    Panels whose 20- and 10-node results differ are bisected until the summed difference is
    at most ``atol`` (absolute, broadcastable to ``variance``; 0: no refinement, the estimate
    only) or ``MAX_BISECTIONS`` is reached, or an integral holds ``MAX_PANELS`` panels (then the
    estimate says what was reached). Raises :class:`NumericalError` when ``f`` returns NaN or
    ±inf at a node.
    """
    var = np.asarray(variance, dtype=float)
    flat = np.maximum(var.reshape(-1), 0.0)
    tol = np.broadcast_to(np.asarray(atol, dtype=float), var.shape).reshape(-1)
    P = flat.size
    sd = np.sqrt(flat)
    edges = panel_edges(np.zeros(P), sd, features)
    lo, hi = edges[:, :-1].reshape(-1), edges[:, 1:].reshape(-1)
    owner = np.repeat(np.arange(P), edges.shape[1] - 1)
    keep = hi > lo
    lo, hi, owner = lo[keep], hi[keep], owner[keep]
    value, err, size = np.zeros(P), np.zeros(P), np.zeros(P)
    for level in range(MAX_BISECTIONS + 1):
        q20, q10 = _panel_integrals(f, sd[owner], lo, hi, what)
        diff = np.abs(q20 - q10)
        total = np.bincount(owner, weights=diff, minlength=P)
        over = total > tol
        # A panel is final when its owner already meets the tolerance, or when it holds less
        # than its share of the owner's tolerance; the others are bisected.
        share = tol[owner] * (hi - lo) / (2.0 * Z_MAX)
        crowded = np.bincount(owner, minlength=P) >= MAX_PANELS
        final = (~over[owner] | (diff <= share) | (level == MAX_BISECTIONS) | (tol[owner] <= 0)
                 | crowded[owner])
        value += np.bincount(owner[final], weights=q20[final], minlength=P)
        size += np.bincount(owner[final], weights=np.abs(q20[final]), minlength=P)
        # a panel still unresolved at the limits may hide a singularity: its whole content is uncertain
        stuck = final & over[owner] & (diff > share)
        err += np.bincount(owner[final], weights=diff[final] + np.where(stuck[final], np.abs(q20[final]), 0.0),
                           minlength=P)
        if final.all():
            break
        mid = 0.5 * (lo + hi)
        rest = ~final
        lo = np.concatenate([lo[rest], mid[rest]])
        hi = np.concatenate([mid[rest], hi[rest]])
        owner = np.concatenate([owner[rest], owner[rest]])
    # the rounding of the panels' 20-node sums and of their sum (a jump's mean was 1 ulp off a bound
    # of 0.4 ulp without it)
    err += _tail_estimate(f, sd) + 32 * np.finfo(float).eps * size
    return value.reshape(var.shape), err.reshape(var.shape)


def _panel_integrals(f: Callable[[Array], Array], scale: Array, lo: Array, hi: Array,
                     what: str) -> tuple[Array, Array]:
    """20- and 10-node Gauss–Legendre integrals of ``f(scale·z) φ(z)`` over panels [lo, hi]."""
    half, mid = 0.5 * (hi - lo), 0.5 * (hi + lo)
    out = []
    for nodes, weights in ((GL_NODES, GL_WEIGHTS), (GL10_NODES, GL10_WEIGHTS)):
        z = mid[:, None] + half[:, None] * nodes
        with np.errstate(all="ignore"):
            fz = np.asarray(f(scale[:, None] * z), dtype=float)
        check_finite(fz, what)
        out.append(np.sum(fz * (half[:, None] * weights) * (INV_SQRT_2PI * np.exp(-0.5 * z * z)), axis=1))
    return out[0], out[1]


def _tail_estimate(f: Callable[[Array], Array], scale: Array) -> Array:
    """Size of ``∫_{|z|>Z_MAX} f(scale·z) φ(z) dz`` from ``f`` at the ends (Mills ratio, slope ≤ Z_MAX/2)."""
    with np.errstate(all="ignore"):
        ends = np.abs(np.asarray(f(np.stack([-Z_MAX * scale, Z_MAX * scale], axis=1)), dtype=float))
    ends = np.where(np.isfinite(ends), ends, 0.0)
    return ends.sum(axis=1) * _TAIL_DENSITY * (2.0 / Z_MAX)


def hermite_functions(z: Array, order: int) -> Array:
    """Normalised probabilists' Hermite polynomials ``He_k(z)/√k!`` for k ≤ order, shape
    ``(order+1, *z.shape)`` (three-term recurrence)."""
    h = np.empty((order + 1, *np.shape(z)))
    h[0] = 1.0
    if order:
        h[1] = z
    for k in range(1, order):
        h[k + 1] = (z * h[k] - np.sqrt(k) * h[k - 1]) / np.sqrt(k + 1.0)
    return h


def at_nodes(fn: Callable[[Array], Array], x: Array, w: Array) -> Array:
    """``fn`` at quadrature nodes ``x``, 0 where their weight ``w`` (broadcast) is 0: a panel of zero width at a
    kink puts its nodes on the kink, where ``log|x|`` is −inf (its expectation is finite; the product with the
    zero weight was NaN and refused)."""
    with np.errstate(all="ignore"):
        values = np.asarray(fn(x), dtype=float)
    return np.where(np.broadcast_to(w, values.shape) != 0.0, values, 0.0)


def check_finite(values: Array, what: str) -> None:
    """Raise :class:`NumericalError` if a function returned NaN or ±inf at quadrature nodes."""
    if not np.all(np.isfinite(values)):
        raise NumericalError(
            f"{what}: the function returned NaN or Inf at Gaussian quadrature nodes (e.g. log or 1/x "
            "of a Gaussian, or an overflow); its expectation is not defined for Gaussian arguments — "
            "change the nonlinearity, or the scale of its input")
