"""``E[φ(u) ψ(v)]`` for a centred Gaussian pair, with an error bound, vectorised over pairs.

Methods, in order of preference:

1. closed forms of the activation registry (arc-cosine, arcsine, exp, ...): error = rounding;
2. Stein's identity for a pair (φ, identity): ``E[φ(u) v] = (c/a) E[u φ(u)]``;
3. the Mehler (Hermite) series ``Σ_k α_k(a) β_k(b) ρ^k``, coefficients per distinct variance
   by the panelled rule of :mod:`netsor.gaussian.quadrature`, truncated per pair where the
   Parseval bound ``|ρ|^{K+1} √(T_φ(a, K) T_ψ(b, K))`` (``T`` = energy beyond order K) meets the
   tolerance: that bound plus the coefficients' quadrature error is the reported error;
4. colinear pairs (|ρ| = 1) by a one-dimensional rule, and pairs where the series converges too
   slowly by nested two-dimensional quadrature; both report ``|Q₂₀ − Q₁₀|``-type estimates.

Everything is vectorised over the leading "pair" axes: callers pass arrays of variances and
covariances of any broadcastable shape (e.g. ``a : (B1, 1)``, ``b : (1, B2)``, ``c : (B1, B2)``,
the layout of a tile), and the Hermite coefficients are computed once per distinct variance
(and kept in a :class:`CoefficientMemo` across calls).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

import numpy as np
from scipy import fft
from scipy.linalg.blas import dger as _dger

from netsor.activations import Activation
from netsor.activations.registry import central_difference, relative_step
from netsor.errors import HyperParameterError, NumericalError, UnsupportedError
from netsor.gaussian import piecewise
from netsor.gaussian.quadrature import (
    GL10_NODES,
    GL10_WEIGHTS,
    GL_NODES,
    GL_WEIGHTS,
    INV_SQRT_2PI,
    MAX_BISECTIONS,
    Z_MAX,
    at_nodes,
    check_finite,
    expect_1d_err,
    gaussian_rule,
    hermite_functions,
    hermite_rule,
    panel_edges,
    rule_on_panels,
)
from netsor.linalg import largest_ratio
from netsor.memo import BoundedMemo

Array = np.ndarray

#: Uniform quadrature panels over [−Z_MAX, Z_MAX] at most (:func:`_uniform_grid`).
MAX_UNIFORM_PANELS = 1024
#: Variances at or below this are treated as exactly zero (a constant coordinate). Only zero (or a
#: negative rounding of it): any positive variance is a valid scale — an absolute threshold (it was
#: 1e-13) zeroed the kernels of deep networks on inputs of size 1e-6 and dropped NTK terms of size 1e-24.
ZERO_VARIANCE = 0.0
#: Default relative tolerance of one pair expectation (relative to √(E φ(u)² E ψ(v)²)).
PAIR_RTOL = 1e-10
#: Rounding error of a closed form, in units of eps·(|value| + scale).
_ROUNDING = 16.0 * np.finfo(float).eps
#: Floor of T / E φ², covering rounding in E φ² − Σ α_k².
_TAIL_FLOOR = 1e-14
#: Truncation orders tried, in increasing cost; a table of order 31 serves the first ones,
#: one of order 255 (built only when needed) the next, and one of order 767 the last — for the pairs left,
#: at their variances only: relu-like φ at large variances (gelu, softplus, their derivatives in NTKs) have
#: coefficients falling like a power of k, and at the correlations of deep ordered networks (ρ ~ 0.95) their
#: series need orders beyond 255 where the nested 2-D rule costs ~10⁵ times a series step (gelu's NNGP + NTK at
#: depth 30, σ_w = 1.5, on 40 inputs: 25 s → ~1 s).
_ORDERS = (5, 7, 11, 15, 19, 23, 31, 39, 47, 63, 95, 127, 191, 255, 383, 511, 767)
_SMALL_TABLE, _LARGE_TABLE, _HUGE_TABLE = 31, 255, 767
#: The series' orders meet this share of the tolerance asked. Its tail falls geometrically in the
#: order, so half the tolerance costs about one order more; and a kernel of smooth activations at
#: the default rtol has a bound of about its last layer's truncation: at the full tolerance
#: (rtol · TERM_SHARE = 1e-9 relative) the depth-10 tanh MLP's was 1.01e-9, just above the 1e-9 at
#: which ``psd="auto"`` verifies a kernel by a Cholesky factorisation (12 ms of its 110 ms).
SERIES_AIM = 0.5
#: Pairs per block of the series evaluation (the block's work arrays stay in cache).
_BLOCK = 1 << 16
#: Variances from which the Hermite coefficients are computed on two threads.
_PARALLEL_MIN = 256
#: Batches of variances from which Hermite coefficients may be interpolated in the standard
#: deviation, and the interpolation's first Chebyshev–Lobatto nodes (odd: every other one is
#: nested; then 65, 129, ... while fewer than half the batch).
_INTERPOLATE_MIN, _INTERPOLATE_NODES = 96, 33
#: Interpolated coefficients are accepted where their estimated error is at most this share of
#: the series' tolerance (relative to √E φ²).
_INTERPOLATE_SHARE = 1e-3
#: Coefficients gathered per block at most (bounds the memory for long flat inputs).
_GATHER = 1 << 20
#: Coefficients up to this order are compared between the 20- and the 10-node rules (:func:`_weighted_values`).
_CUSP_ORDERS = 4
#: Hermite coefficients whose quadrature error estimate exceeds this share of √E φ² are computed
#: again on bisected panels (:func:`_refined_coefficients`), at most ``MAX_REFINEMENTS`` times (each
#: halves the panels' width) and within ``_REFINE_BUDGET`` node-coefficient products per table.
COEFFICIENT_TOL = 1e-13
MAX_REFINEMENTS = 4
_REFINE_BUDGET = 1 << 28
#: Farthest standard coordinate of the rules when ``φ(√var z)² φ(z)`` still has mass at ``|z| = Z_MAX``
#: (exponential growth: cosh(g) at variance 9 puts E φ² near z = 6 ± 1, at 16 near 8 ± 1): panels of width
#: ½ out to ±Z_FAR. Density at the ends above ``_LEAK`` of ``E φ²`` counts as mass.
Z_FAR, _LEAK = 40.0, 1e-18
_FAR_EDGES = np.concatenate([np.linspace(-Z_FAR, -Z_MAX, 61), np.linspace(Z_MAX, Z_FAR, 61)])
#: Share of a pair's tolerance that the nested 2-D rule's estimate must meet before its grids are refined.
_NESTED_SHARE = 0.1
#: Outer panel edges around a crossing of ψ's kink in the nested rule, in units of the inner turn's width.
_TURN_STEPS = 2.0 ** np.arange(-2, 7)
#: Pairs times refinement cost (4 per level) beyond which the nested rule is not refined (each
#: refined pair costs ~2·10⁵·4^level nodes).
_NESTED_REFINE_BUDGET = 4096
#: |ρ| ≥ 1 − this is treated as colinear (a 1-D integral) where φ and ψ are continuous (their kernels change by
#: ~1e-14 of their scale there); discontinuous ones are ½-Hölder in ρ — sign's kernel moves by 2.8e-8 at
#: 1 − ρ = 1e-15 — and only exactly colinear pairs are (:func:`_colinear_reach`).
_COLINEAR = 1e-14
#: Pairs processed at once by the nested 2-D rule.
_PAIR_CHUNK = 512
#: Inner-rule values (outer nodes × inner nodes) held at once by the nested 2-D rule: 16 MB an array.
_NESTED_VALUES = 2**21
#: Inner-rule values a pair beyond which the nested 2-D rule gives up (error bound inf: the engine refuses the entry
#: saying what to change) instead of running for hours: ~300× a typical pair's ~5·10⁴. A φ with hundreds of kinks in
#: range (|sin(x²) − 0.13|: 655) at a nearly colinear pair grades outer panels around every crossing and runs an
#: inner rule over every kink at each outer node: ~10¹¹ values a pair (found by random activations, fresh seeds).
_NESTED_PAIR_VALUES = 2**24
#: The nested rule's first pass for an analytic, local ψ (:func:`_hermite_inner`) integrates the inner, conditional
#: Gaussian by Gauss–Hermite rules of these orders (the 15- and the 10-node outer rules' partners: their
#: difference is the estimate) — ~80 inner values an outer node instead of ~750 on panels.
_HERMITE_INNER_ORDERS = (48, 32)
#: Largest conditional standard deviation σ of ψ's argument (in units of x) given to those rules: with ψ's poles
#: a distance d off the real axis (tanh π/2, sigmoid and softplus π, arctan 1; gelu and erf have none) they
#: converge like e^(−(d/σ)·√(2n)), the 32-node rule's error — the estimate — bounding the 48-node rule's; pairs
#: whose estimate misses the target (arctan near σ = 1) take the panels.
_HERMITE_INNER_SCALE = 1.0
#: Relative cost of one pair: one sparse Horner step, a colinear pair and a nested-quadrature
#: pair, in units of one dense Horner step (used to choose the order of the dense pass).
_COST_SPARSE, _COST_COLINEAR, _COST_NESTED = 5.0, 500.0, 1e5


def features(act: Activation) -> tuple[float, ...]:
    """Where panels are split for ``act``: its kinks, or 0 (where smooth activations vary most)."""
    return act.kinks or (0.0,)


# ------------------------------------------------------------------ kinks nobody declared
_LOCATED: BoundedMemo[Activation] = BoundedMemo()
_GRID_OFFSET = (3.0 - np.sqrt(5.0)) / 2.0  # 0.382: far from every simple fraction
#: Located kinks are panels narrower than this fraction of the range (2⁻⁴⁹ ≈ 1.8e-15).
LOCATE_TO = 2.0 ** -49
#: The locator's first panels over its range ``±bucket`` (``bucket ≤ 2·Z_MAX·sd``). A feature of φ that falls
#: between two adjacent nodes — a bump whose two jumps are closer than the node spacing, ``≈ 0.05`` of a panel,
#: ``bucket/10⁴ ≤ sd/500`` in a panel's middle — is invisible to any test of the values: with 64 panels the
#: spacing was ``sd/30``, and a bump of width 0.04 at sd ≈ 3 was missed (``E φ²`` off by 3 % of itself within
#: a bound of 1e-14; found by traced-against-opaque random activations). 1024 panels: 34 k evaluations of φ
#: per range, once.
LOCATOR_PANELS = 1024
#: Chebyshev–Lobatto nodes of the locator's smoothness test (both ends of the panel included).
_LOCATOR_NODES = np.cos(np.pi * np.arange(33) / 32)[::-1]
#: The test's tail: Chebyshev coefficients of degree ≥ this, which a smooth panel keeps below 1e-13.
_LOCATOR_TAIL = 24
#: Panels narrower than this fraction of the range fail the locator's test only at a kink or a jump.
_NARROW = 1e-6
#: Panels the locator tests at one level at most: a φ that fails its test on more is not smooth at
#: rounding level anywhere on the range (``sin(x²)`` at |x| ~ 60: the rounding of x² alone is
#: 1e-12), and bisecting every panel doubled them at each level until memory ran out.
MAX_LOCATOR_PANELS = 1 << 14


def with_located_kinks(act: Activation, max_sd: float) -> Activation:
    """``act`` with the points where it is not smooth found numerically on ``|x| ≤ Z_MAX·max_sd``.

    For activations whose kinks are unknown (custom callables, compositions through opaque
    functions): φ is interpolated on each panel at 33 Chebyshev–Lobatto nodes, the panel's ends
    included, and panels whose Chebyshev coefficients of degree ≥ 24 exceed 1e-13 of φ's scale (or
    of the panel's largest value), or where φ is finite at some nodes only, are bisected. A jump keeps
    its panel failing down to ``LOCATE_TO`` of the range and is placed to rounding; a kink stops
    showing in a narrow panel and is placed there. Every jump shows between two adjacent nodes,
    wherever it lies in the panel. (The earlier test compared 20- and 10-node Gauss rules:
    both count half their nodes for a jump near a panel's midpoint and all of them for one near
    an edge, so they agreed there — 80 % of random jump positions were lost at some level and the
    means were off by up to 5e12 times their bound.) Returns ``act`` itself when its kinks are known.
    """
    if max_sd <= 0 or is_located(act):
        return act
    reach = Z_MAX * float(max_sd)
    bucket = float(2.0 ** np.ceil(np.log2(reach)))  # cache per power-of-two range
    if act.difference_of is not None and not act.smooth:
        # φ' of an opaque φ by central differences, whose stencils straddle φ's kinks (a ramp over 2h) and jumps
        # (a side chosen within a step of the jump): read beside the points where φ is not smooth
        beside, windows = _beside_kinks_of_integral(act, max_sd)
        return _LOCATED.get((act.key, bucket), lambda: _located(beside, reach, bucket, windows))
    return _LOCATED.get((act.key, bucket), lambda: _located(act, reach, bucket))


def is_located(act: Activation) -> bool:
    """:func:`with_located_kinks` returns ``act`` itself at every range: its kinks are known, and it is
    not the central difference of an opaque function (read beside the kinks of that function)."""
    return act.kinks_known and (act.difference_of is None or act.smooth)


def _beside_kinks_of_integral(act: Activation, max_sd: float) -> tuple[Activation, tuple[tuple[float, float], ...]]:
    """:func:`_read_beside` the located kinks and jumps of the φ whose central difference ``act`` is (within
    twice the step, ``FD_STEP·max(1, |x|)`` at most), and the windows read beside (φ' may jump there)."""
    assert act.difference_of is not None
    kinks = with_located_kinks(act.difference_of, max_sd).kinks
    radii = [2.0 * float(relative_step(k)) for k in kinks]
    windows = tuple((k - r, k + r) for k, r in zip(kinks, radii, strict=True))
    return replace(_read_beside(act, list(kinks), radii) if kinks else act, kinks_known=False), windows


def _located(act: Activation, reach: float, bucket: float,
             windows: tuple[tuple[float, float], ...] = ()) -> Activation:
    """:func:`with_located_kinks` on ``|x| ≤ bucket`` (``reach``: the range asked for, for messages; ``windows``:
    where a central difference is read beside a kink or jump of its φ, and may jump itself)."""
    # panels over the range, offset by an irrational fraction of a panel (kinks at round numbers
    # then fall inside panels, not on shared edges)
    edges = -bucket + (np.arange(LOCATOR_PANELS + 2) - _GRID_OFFSET) * (2.0 * bucket / LOCATOR_PANELS)
    lo, hi = edges[:-1], edges[1:]
    with np.errstate(all="ignore"):
        scale = np.asarray(act.fn(np.linspace(-bucket, bucket, 257)), dtype=float)
    scale = max(float(np.max(np.abs(scale[np.isfinite(scale)]), initial=0.0)), 1e-300)
    found: list[float] = []
    jumps: list[float] = []
    # midpoints (and widths) of the last level's narrow bad panels, whose halves are tested now
    parents = widths = np.empty(0)
    for _ in range(MAX_BISECTIONS):
        bad = ~_smooth_on_panels(act.fn, lo, hi, scale, act.value_error)
        # a jump keeps its panel bad down to rounding; it must be placed there: misplaced by δ it moves
        # E φ by |jump|·δ·density, which no bound accounts for (located to 1e-9 of the range,
        # step(relu(g) − 1/2)·g was 4e-11 off)
        tiny = (hi - lo) < LOCATE_TO * bucket
        jumps.extend(_jump_position(act.fn, a, b) for a, b in zip(lo[bad & tiny], hi[bad & tiny], strict=True))
        # a kink's coefficients shrink with the panel: both halves of a narrow bad panel pass once the
        # kink is placed to within that panel (the smoothness it lacks no longer shows at 1e-13)
        if parents.size:
            halves = bad.reshape(2, -1)
            lost = ~(halves[0] | halves[1]) & np.isfinite(parents)
            found.extend(_refined_kink(act.fn, k, w) for k, w in zip(parents[lost], widths[lost], strict=True))
        bad &= ~tiny
        if not bad.any():
            break
        if 2 * int(bad.sum()) > MAX_LOCATOR_PANELS:
            origin = _origin(act)
            if origin == "finite difference":
                advice = ("it holds the derivative of an opaque function (for the NTK), a finite difference whose "
                          "rounding noise shows on every panel: give the derivative (netsor.activation(fn, "
                          "deriv=...)), or write the function with numpy arithmetic and elementwise functions "
                          "(np.tanh, np.maximum, np.where, ...) so that the tracer sees it")
            elif origin == "expr":
                advice = ("it is a traced expression, whose value likely flickers — e.g. a step of an argument that "
                          "is 0 on a whole interval in exact arithmetic but, as evaluated, further from 0 than the "
                          "rounding of its terms (values within 16 ulps of them are taken as on the jump): write that "
                          "argument so that it is exactly 0 there")
            else:
                advice = ("declare it smooth or give its kinks (netsor.activation(fn, smooth=True) or kinks=(...)), "
                          "or write it with netsor's own functions so that the tracer sees it")
            # a pole (tan) or an unbounded cusp (|x − c|^−0.6) of an opaque φ is bad on every panel beside it
            mids = 0.5 * (lo + hi)[bad]
            with np.errstate(all="ignore"):
                sizes = np.abs(np.asarray(act.fn(mids), dtype=float))
            huge = ~(sizes <= 100.0 * scale)
            if huge.any():
                nearest = np.argmin(np.where(huge, np.abs(mids), np.inf))  # the one nearest the Gaussian's centre
                at, size = float(mids[nearest]), float(sizes[nearest])
                raise NumericalError(
                    f"cannot locate the kinks of {act.name} on |x| ≤ {reach:.3g}: it grows without bound near x = "
                    f"{at:.4g} (|φ| {size:.2g} there, {scale:.2g} at most on a grid of the range) — a pole, or a "
                    "singularity whose expectation may be infinite; write it with numpy arithmetic so that the tracer "
                    "sees it (it measures such points: 1/√|x − c| is refused as not square-integrable, log|x − c| is "
                    "taken), or remove the singularity from the reach of its Gaussian argument")
            raise NumericalError(
                f"cannot locate the kinks of {act.name} on |x| ≤ {reach:.3g}: it is not smooth to rounding on "
                f"{int(bad.sum())} panels of width {float(np.min(hi - lo)):.2g} (a fast oscillation, or noise); "
                + advice)
        mid = 0.5 * (lo + hi)
        parents = np.where((hi - lo)[bad] < _NARROW * bucket, mid[bad], np.nan)
        widths = (hi - lo)[bad]
        lo, hi = np.concatenate([lo[bad], mid[bad]]), np.concatenate([mid[bad], hi[bad]])
    gap = 64 * LOCATE_TO * bucket
    jumps = _merge_points(jumps, gap)
    found.extend(jumps)
    # φ' jumps where φ kinks: those jumps of a difference read beside φ's kinks are its own
    strays = [j for j in jumps if not any(a - gap <= j <= b + gap for a, b in windows)]
    if strays and _origin(act) == "finite difference":
        # a difference of a φ with a kink or jump that the difference's own φ does not show (∂ᵢ of an opaque function
        # of an expression): it switches sides somewhere in a stencil's width of the point, which no bound covers
        at = ", ".join(f"{k:.6g}" for k in strays[:4])
        raise UnsupportedError(
            f"{act.name} is the derivative of an opaque function by central differences, and it jumps (near x = "
            f"{at}) where the function kinks or jumps: give the derivative (netsor.activation(fn, deriv=..., "
            "continuous=False)), or write the function with numpy arithmetic and elementwise functions (np.where, "
            "np.maximum, comparisons) so that the tracer sees it")
    # with the kinks already known (exact, where a found one is only located to the gap)
    kinks = sorted(list(act.kinks) + [k for k in _merge_points(found, gap)
                                      if all(abs(k - known) > gap for known in act.kinks)])
    # a traced expression the tracer could only call possibly discontinuous (a relu of an argument with a step,
    # clip(where(x > −0.83, x, sin x), −0.5, 0.7): the jump is clipped away), or a user's φ' whose continuity
    # nobody declared, is continuous where no jump shows on the range: its pairs then take the Mehler series, not
    # nested quadrature (29 s → 0.04 s on 3 inputs), and nearly colinear pairs are Lipschitz, not ½-Hölder (the
    # NTK of an opaque identity with φ' = 1 given, at inputs 1e-6 apart, was refused with a bound of 4.7 of the
    # kernel); its values are exact (a finite difference's are not: it keeps its flag)
    # and a function said to be continuous (custom(fn, deriv=...) says so by default) with a jump found is not: its
    # pairs then take the bounds of jumps (an opaque where(x > 0.43, softplus x, clip x) with φ' given was met at
    # nearly parallel inputs within a bound that assumed continuity; traced, it is refused)
    continuous = not jumps and (act.continuous or _origin(act) in ("expr", "derivative"))
    return replace(act, kinks=tuple(kinks), kinks_known=True, continuous=continuous)


def _refined_kink(fn: Callable[[Array], Array], k: float, w: float) -> float:
    """A kink placed at ``k``, the middle of a panel of width ``w`` where it stopped showing, moved to where the
    parabolas through φ at 2, 3 and 4 widths on either side meet (the root of their difference nearest ``k``, if
    one lies within ``w``; else ``k``). Misplaced by δ, a kink costs quadrature ~slope jump·δ² (an opaque
    ``max(x, −0.01)·x`` placed 6e-7 off: ``E φ²`` 7e-13 off within a bound of 2e-14 — the rules of the two panels
    err alike), and φ' — which jumps there — jump·δ (``max(x, 0.2)`` placed 2e-9 off: an NTK 1e-9 off); the
    parabolas meet to ~w³·|φ‴|/slope jump, and to rounding where φ is piecewise quadratic."""
    t = w * np.array([-4.0, -3.0, -2.0, 2.0, 3.0, 4.0])
    with np.errstate(all="ignore"):
        f = np.asarray(fn(k + t), dtype=float)
    if not np.all(np.isfinite(f)):
        return k
    below, above = np.polyfit(t[:3] / w, f[:3], 2), np.polyfit(t[3:] / w, f[3:], 2)
    roots = np.roots(below - above) if np.any(below != above) else np.empty(0)
    roots = roots[np.isreal(roots)].real * w
    near = roots[np.abs(roots) <= w]
    return float(k + near[np.argmin(np.abs(near))]) if near.size else k


def _read_beside(act: Activation, centres: list[float], radii: list[float]) -> Activation:
    """The central difference ``act`` of a φ as φ' almost everywhere near the points ``centres`` where φ jumps or
    kinks: within ``radii`` of one (wider than the difference's step, so that its stencil straddles the point
    there) the value is the difference read twice the radius further out on the same side, where the stencil
    stays on that side. Its error there adds to the difference's own the change of slope over that distance,
    twice the change measured over one more such distance outwards (the radii are ~1e-6, where φ' is all but
    constant). The read values jump at the centres (where φ' does) and, by a change of slope over ~4e-6, at the
    ends of the windows: all are kinks of the result."""
    order = np.argsort(centres)
    mid, radius = np.asarray(centres, dtype=float)[order], np.asarray(radii, dtype=float)[order]
    fd, fd_error = act.fn, act.value_error

    def beside(x: Array) -> tuple[Array, Array, Array]:
        """``(point read, outward step, inside a window)`` for each of ``x``."""
        x = np.asarray(x, dtype=float)
        i = np.clip(np.searchsorted(mid, x), 1, mid.size) - 1  # the nearer of the centres around x
        i = np.where((i + 1 < mid.size) & (np.abs(x - mid[np.minimum(i + 1, mid.size - 1)]) < np.abs(x - mid[i])),
                     i + 1, i)
        c, r = mid[i], radius[i]
        inside = np.abs(x - c) <= r
        step = np.where(x <= c, -2.0 * r, 2.0 * r)
        return np.where(inside, x + step, x), step, inside

    def values(x: Array) -> Array:
        return fd(beside(x)[0])

    def error(x: Array) -> Array:
        read, step, inside = beside(x)
        own = np.zeros(read.shape) if fd_error is None else np.asarray(fd_error(read), dtype=float)
        if not np.any(inside):
            return own
        further = own if fd_error is None else np.asarray(fd_error(read + step), dtype=float)
        with np.errstate(all="ignore"):
            drift = 2.0 * np.abs(fd(read) - fd(read + step))
        return np.where(inside, own + further + drift, own)

    def slope(x: Array) -> Array:
        return central_difference(values, x, relative_step(x))

    kinks = {float(k) for k in act.kinks} | set(mid.tolist()) | set((mid - radius).tolist()) \
        | set((mid + radius).tolist())
    return replace(act, fn=values, value_error=error, deriv=slope, exact_slope=False, kinks=tuple(sorted(kinks)))


def _origin(act: Activation) -> str | None:
    """Where a composite activation comes from: ``"expr"`` (a traced expression, exact derivative), ``"finite
    difference"`` (φ' of a custom φ, or a traced ``∂ᵢfn`` of an opaque nonlin: netsor.ir.differentiate),
    ``"derivative"`` (φ' given by a user or in closed form), None (a user's or the registry's function)."""
    origin = act.cache_key[0] if isinstance(act.cache_key, tuple) and act.cache_key else None
    if origin == "expr" and "∂" in act.name:
        return "finite difference"
    return origin if origin in ("expr", "finite difference", "derivative") else None


def _smooth_on_panels(fn: Callable[[Array], Array], lo: Array, hi: Array, scale: float,
                      noise: Callable[[Array], Array] | None = None) -> Array:
    """Per panel: φ is finite at the 33 Chebyshev–Lobatto nodes and its interpolant's coefficients of
    degree ≥ ``_LOCATOR_TAIL`` are at most 1e-13 of ``scale`` or of its own largest value, whichever is
    larger (an analytic φ's decay geometrically, a jump's like 1/k, a kink's like 1/k²), plus four times the
    largest of ``noise`` (a bound of ``|fn − φ|``, :attr:`Activation.value_error`) at the nodes — a
    coefficient of values off by at most δ is off by at most 2δ — or φ is finite at none of them."""
    x = 0.5 * (lo + hi)[:, None] + 0.5 * (hi - lo)[:, None] * _LOCATOR_NODES
    with np.errstate(all="ignore"):
        values = np.asarray(fn(x), dtype=float)
    finite = np.isfinite(values)
    values = np.where(finite, values, 0.0)
    coefs = fft.dct(values, type=1, axis=1) / (_LOCATOR_NODES.size - 1)
    # relative to the panel's own size where φ is larger than its scale (near a pole of 1/x): there the
    # rounding of φ alone gave every panel coefficients above 1e-13 of the scale, and their number doubled
    # with every bisection
    size = np.maximum(scale, np.max(np.abs(values), axis=1))
    tolerance = 1e-13 * size
    if noise is not None:
        # a central difference's rounding (~1e-10 of φ') showed on every panel: the NTK of an opaque tanh
        # was refused ("cannot locate the kinks of φ'")
        with np.errstate(all="ignore"):
            delta = np.asarray(noise(x), dtype=float)
        tolerance = tolerance + 4.0 * np.max(np.where(np.isfinite(delta), delta, 0.0), axis=1)
    smooth = np.all(finite, axis=1) & (np.max(np.abs(coefs[:, _LOCATOR_TAIL:]), axis=1) <= tolerance)
    # a panel where φ is nowhere finite (log of negatives) holds nothing to locate: only the boundary of
    # its domain, in a panel where it is finite at some nodes and not at others, is bisected
    return smooth | ~np.any(finite, axis=1)


def _jump_position(fn: Callable[[Array], Array], lo: float, hi: float) -> float:
    """Where ``fn`` changes most in ``[lo, hi]``, by bisecting towards the half whose end values
    differ more, down to adjacent floating-point numbers (a jump's position; a kink's to rounding)."""
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if not lo < mid < hi:
            break
        with np.errstate(all="ignore"):
            f_lo, f_mid, f_hi = np.asarray(fn(np.array([lo, mid, hi])), dtype=float)
        if abs(f_mid - f_lo) >= abs(f_hi - f_mid):
            hi = mid
        else:
            lo = mid
    return hi


def _merge_points(points: list[float], gap: float) -> list[float]:
    out: list[float] = []
    for p in sorted(points):
        if not out or p - out[-1] > gap:
            out.append(p)
    return out


# ------------------------------------------------------------------ one-dimensional pieces
def mean(act: Activation, variance: Array, rtol: float = PAIR_RTOL) -> tuple[Array, Array]:
    """``(E φ(u), error bound)``, ``u ~ N(0, variance)`` (closed form when known; ``φ(0)`` exactly
    at variance 0, where a closed form of a jump such as step's ½ does not hold)."""
    var = np.maximum(np.asarray(variance, dtype=float), 0.0)
    zero = var <= ZERO_VARIANCE
    if zero.any() and not act.odd:
        value, err = np.full(var.shape, act.at_zero), np.zeros(var.shape)
        if not zero.all():
            value[~zero], err[~zero] = mean(act, var[~zero], rtol)
        return value, err
    if act.odd:
        return np.zeros(var.shape), np.zeros(var.shape)
    if act.mean is not None:
        value = np.asarray(act.mean(var), dtype=float) * np.ones(var.shape)
        return value, _ROUNDING * np.abs(value)
    act = with_located_kinks(act, float(np.sqrt(np.max(var, initial=0.0))))
    scale = np.sqrt(second_moment(act, var)[0])
    value, err = expect_1d_err(act.fn, var, features(act), atol=rtol * scale, what=f"E {act.name}(u)")
    # a floor at the rounding of φ's scale: a jump located numerically sits within an ulp of its place, which
    # moves E φ by |jump|·ulp·density — 5e-17 on a bump of mass 7e-4 whose quadrature bound was 5e-18
    return value, err + _ROUNDING * scale + value_error_rms(act, var)


def second_moment(act: Activation, variance: Array) -> tuple[Array, Array]:
    """``(E φ(u)², error estimate)``, ``u ~ N(0, variance)``."""
    var = np.maximum(np.asarray(variance, dtype=float), 0.0)
    if act.kernel is not None:
        value = np.asarray(act.kernel(var, var, var), dtype=float) * np.ones(var.shape)
        return value, _ROUNDING * np.abs(value)
    act = with_located_kinks(act, float(np.sqrt(np.max(var, initial=0.0))))
    value, err = expect_1d_err(lambda x: act.fn(x) ** 2, var, features(act), what=f"E {act.name}(u)²")
    if act.value_error is None:
        return value, err
    rms = value_error_rms(act, var)  # |E φ̃² − E φ²| ≤ 2‖δ‖ ‖φ̃‖ + ‖δ‖²
    return value, err + 2.0 * rms * np.sqrt(np.maximum(value, 0.0)) + rms**2


#: Probabilists' Gauss–Hermite rule for :func:`value_error_rms` (an error bound's size, not a result).
_ERROR_Z, _ERROR_W = hermite_rule(96)


def value_error_rms(act: Activation, variance: Array) -> Array:
    """``√(E δ(u)²)``, ``u ~ N(0, variance)``, for ``δ = act.value_error`` (0 where ``fn`` is φ itself), by a
    Gauss–Hermite rule. Within 2h of a kink a central difference straddles it and is off by the slopes' size, but
    the rules split their panels at φ's kinks (declared or located) and their nodes keep ~1e-3 of a panel away from
    its ends: what they integrate is the difference off the kinks, whose error this measures."""
    var = np.maximum(np.asarray(variance, dtype=float), 0.0)
    if act.value_error is None:
        return np.zeros(var.shape)
    with np.errstate(all="ignore"):
        delta = np.asarray(act.value_error(np.sqrt(var)[..., None] * _ERROR_Z), dtype=float)
        rms = np.sqrt(np.sum(_ERROR_W * delta**2, axis=-1))
    return np.where(np.isfinite(rms), rms, np.inf)


def stein_identity(phi: Activation, a: Array, c: Array, rtol: float = PAIR_RTOL) -> tuple[Array, Array]:
    """``E[φ(u) v] = (c / a) E[u φ(u)]`` (v regressed on u), for ``a > 0``."""
    a = np.asarray(a, dtype=float)
    phi = with_located_kinks(phi, float(np.sqrt(np.max(a, initial=0.0))))
    scale = np.sqrt(second_moment(phi, a)[0] * a)
    m, err = expect_1d_err(lambda x: x * phi.fn(x), a, features(phi), atol=rtol * scale,
                           what=f"E[u {phi.name}(u)]")
    ratio = np.asarray(c, dtype=float) / a
    value = ratio * m
    # |E[u δ(u)]| ≤ √a ‖δ‖ for a φ that is only approximated (a central difference)
    err = err + np.sqrt(a) * value_error_rms(phi, a)
    return value, np.abs(ratio) * err + _ROUNDING * np.abs(value)


def is_elementary(phi: Activation, psi: Activation) -> bool:
    """True when ``E[φ(u) ψ(v)]`` has a closed form (or Stein's identity): a few array passes.

    Otherwise each call runs the Mehler series, whose fixed setup cost favours fewer, larger calls.
    """
    return (same_kernel(phi, psi) or phi.name == "identity" or psi.name == "identity"
            or (piecewise.of(phi) is not None and piecewise.of(psi) is not None))


def same_kernel(phi: Activation, psi: Activation) -> bool:
    """``E[φ(u) ψ(v)]`` is φ's own kernel (and its modulus φ's): the same registered activation."""
    return phi.kernel is not None and (phi is psi or (phi.registered and psi.registered
                                                      and phi.key == psi.key))


def pair_expectation(phi: Activation, psi: Activation, a: Array, b: Array, c: Array, *,
                     memo: CoefficientMemo | None = None, rtol: float = PAIR_RTOL,
                     errors: bool | str = True, envelope: tuple[Array, Array] | None = None
                     ) -> tuple[Array, Any]:
    """``(E[φ(u) ψ(v)], error bound)`` for centred Gaussian ``(u, v)``, ``Var u = a, Var v = b, Cov = c``.

    Parameters
    ----------
    phi, psi : Activation
    a, b, c : array_like
        Broadcastable variances and covariance. Row/column layouts such as ``a : (B1, 1)``,
        ``b : (1, B2)``, ``c : (B1, B2)`` are exploited: Hermite coefficients are computed once
        per distinct variance.
    memo : CoefficientMemo, optional
        Reuses Hermite coefficients across calls that meet the same variances.
    rtol : float
        Target of the truncation error relative to ``√(E φ(u)² E ψ(v)²)``.
    errors : bool or "relative"
        False: skip the error array of a closed form (``None``; the caller knows it is rounding,
        ``≤ 32 eps √(E φ² E ψ²)``) — a few passes over the pairs saved. ``"relative"``: as False
        for closed forms, else the error as one number, ``max_ij error_ij / (l_i r_j)`` on
        ``envelope = (l, r)`` (a column and a row, positive): the Mehler series then bounds its
        truncation from per-point factors and the largest correlation it met, without an error
        array (O(B) per tile instead of O(B²)).

    Returns
    -------
    value : array, shape ``broadcast(a, b, c).shape``
        The expectation.
    error : array of that shape, float or None
        A bound on its numerical error (for the inputs as given; errors of ``a, b, c``
        themselves are propagated by the caller), in the form ``errors`` asks for.
    """
    a, b, c = (np.asarray(t, dtype=float) for t in (a, b, c))
    if not (is_located(phi) and is_located(psi)):
        sd_max = float(np.sqrt(max(np.max(a, initial=0.0), np.max(b, initial=0.0))))
        phi, psi = with_located_kinks(phi, sd_max), with_located_kinks(psi, sd_max)
    if errors not in (True, False, "relative"):
        raise HyperParameterError(f"errors must be True, False or 'relative', got {errors!r}")
    if errors == "relative" and envelope is None:
        raise HyperParameterError("errors='relative' needs envelope=(l, r): a column and a row of positive "
                                  "per-point factors (e.g. the square roots of E φ(u)² and E ψ(v)²)")
    value, err = _pair_of_values(phi, psi, a, b, c, memo, rtol, errors, envelope)
    if phi.value_error is None and psi.value_error is None:
        return value, err
    # φ or ψ only approximates its function (a central difference for φ'): |E φ̃ψ̃ − E φψ| ≤ ‖δ_φ‖ ‖ψ̃‖ + ‖δ_ψ‖ ‖φ̃‖
    # + ‖δ_φ‖ ‖δ_ψ‖ in L²(Gauss)
    d_phi, d_psi = value_error_rms(phi, a), value_error_rms(psi, b)
    m_phi, m_psi = np.sqrt(second_moment(phi, a)[0]), np.sqrt(second_moment(psi, b)[0])
    extra = d_phi * m_psi + d_psi * m_phi + d_phi * d_psi
    if errors == "relative":
        return value, (0.0 if err is None else err) + largest_ratio(extra * np.ones(value.shape),
                                                                   envelope[0] * envelope[1])
    return value, (_ROUNDING * np.abs(value) if err is None else err) + extra


def _pair_of_values(phi: Activation, psi: Activation, a: Array, b: Array, c: Array, memo: CoefficientMemo | None,
                    rtol: float, errors: bool | str, envelope: tuple[Array, Array] | None) -> tuple[Array, Any]:
    """:func:`pair_expectation` of the functions as evaluated (kinks located, options checked)."""
    shape = np.broadcast_shapes(a.shape, b.shape, c.shape)
    zero_a, zero_b = a <= ZERO_VARIANCE, b <= ZERO_VARIANCE
    relative = errors == "relative"
    if not (zero_a.any() or zero_b.any()):
        if errors is not True and same_kernel(phi, psi):
            return _full(phi.kernel(a, b, c), shape), None
        if relative and not is_elementary(phi, psi):
            value, rel = _series_pair(phi, psi, a, b, c, memo, rtol, envelope)
            return _full(value, shape), rel
        value, err = _regular_pair(phi, psi, a, b, c, memo, rtol, envelope)
        value, err = _full(value, shape), _full(err, shape)
        return value, (largest_ratio(err, envelope[0] * envelope[1]) if relative else err)
    if relative:
        value, err = _pair_of_values(phi, psi, a, b, c, memo, rtol, True, None)
        return value, largest_ratio(err, envelope[0] * envelope[1])
    a, b, c, zero_a, zero_b = np.broadcast_arrays(a, b, c, zero_a, zero_b)
    value, err = np.empty(shape), np.empty(shape)
    regular = ~(zero_a | zero_b)
    if regular.any():
        value[regular], err[regular] = _regular_pair(phi, psi, a[regular], b[regular], c[regular], memo, rtol)
    # A zero-variance coordinate is the constant 0: E[φ(0) ψ(v)] = φ(0) E ψ(v).
    phi0, psi0 = phi.at_zero, psi.at_zero
    for only, const, act, var in ((zero_a & ~zero_b, phi0, psi, b), (zero_b & ~zero_a, psi0, phi, a)):
        if only.any():
            m, e = mean(act, var[only], rtol)
            value[only], err[only] = const * m, abs(const) * e
    both = zero_a & zero_b
    value[both], err[both] = phi0 * psi0, _ROUNDING * abs(phi0 * psi0)
    return value, err


def _full(x: Array, shape: tuple[int, ...]) -> Array:
    x = np.asarray(x, dtype=float)
    return x if x.shape == shape else np.broadcast_to(x, shape).copy()


def _colinear_reach(phi: Activation, psi: Activation) -> float:
    """The smallest ``|ρ|`` taken as colinear for the pair ``(φ, ψ)`` (see :data:`_COLINEAR`)."""
    return 1.0 - _COLINEAR if phi.continuous and psi.continuous else 1.0


def _regular_pair(phi: Activation, psi: Activation, a: Array, b: Array, c: Array,
                  memo: CoefficientMemo | None, rtol: float, envelope: tuple[Array, Array] | None = None
                  ) -> tuple[Array, Array]:
    """``(E[φ(u) ψ(v)], error)`` for positive variances; ``envelope``: ``√E φ(u)²`` and ``√E ψ(v)²`` where the
    caller has them (else computed where needed)."""
    if same_kernel(phi, psi):
        value = np.asarray(phi.kernel(a, b, c), dtype=float)
        scale = np.sqrt(np.abs(phi.kernel(a, a, a) * phi.kernel(b, b, b)))
        return value, _ROUNDING * (np.abs(value) + scale)
    if phi.name == "identity" and psi.name == "identity":
        return c.copy(), _ROUNDING * np.abs(c)
    if psi.name == "identity":
        return stein_identity(phi, a, c, rtol)
    if phi.name == "identity":
        return stein_identity(psi, b, c, rtol)
    F, G = piecewise.of(phi), piecewise.of(psi)
    if F is not None and G is not None:  # kinks anywhere, jumps too: closed forms by Owen's T
        value, err, done = piecewise.pair_expectation(F, G, a, b, c)
        rest = ~done  # nearly colinear pairs
        if any(piece[2] != 0.0 for piece in F + G):  # (coef, power, rate, threshold, above)
            # an exponential piece tilts the law: at large variances its weight (up to e^MAX_TILT) multiplies the
            # special functions' error on far-tail orthants (elu at variance 34: 4e-7 of the kernel's scale)
            left, right = envelope or (np.sqrt(moments_1d(phi, a)["m2"]), np.sqrt(moments_1d(psi, b)["m2"]))
            scale = left * right
            rest = rest | (err > rtol * scale)
        if rest.any():
            a, b, c, rest = np.broadcast_arrays(a, b, c, rest)
            series, series_err = _series_pair(phi, psi, a[rest], b[rest], c[rest], memo, rtol)
            better = ~done[rest] | (series_err < err[rest])
            value[rest] = np.where(better, series, value[rest])
            err[rest] = np.where(better, series_err, err[rest])
        return value, err
    return _series_pair(phi, psi, a, b, c, memo, rtol)


# ------------------------------------------------------------------ Hermite coefficients
def hermite_coefficients(act: Activation, var: Array, order: int, *, interpolation_tol: float | None = None
                         ) -> tuple[Array, Array, Array]:
    """Hermite coefficients, second moment and quadrature error of ``φ(√var Z)``.

    Parameters
    ----------
    act : Activation
        With its kinks known (:func:`with_located_kinks`).
    var : array, shape (n,)
        Positive variances.
    order : int
        Highest order K.

    Returns
    -------
    alpha : array, shape (K+1, n)
        ``E[φ(√var Z) He_k(Z)] / √k!``.
    m2 : array, shape (n,)
        ``E φ(√var Z)²`` by the same rule (so that Parseval holds for the computed numbers).
    qerr : array, shape (n,)
        Estimated error of each coefficient and of ``m2 / (2√m2)`` (absolute): the quadrature's,
        ``|m2₂₀ − m2₁₀| / (2√m2)`` from a 10-node rule on the same panels, plus rounding; with
        interpolation, plus the interpolation's.
    interpolation_tol : float, optional
        Allow interpolation in the variance (:func:`_interpolated_coefficients`) for batches of
        at least ``_INTERPOLATE_MIN`` variances, accepted where its estimated error is at most
        ``interpolation_tol · √m2`` (else every variance is computed directly).

    Large batches run on two threads: the work is numpy calls that release the GIL, and for a
    kernel it runs once per layer on all points before the tiles start.
    """
    if interpolation_tol is not None and var.size >= _INTERPOLATE_MIN:
        interpolated = _interpolated_coefficients(act, var, order, interpolation_tol)
        if interpolated is not None:
            return interpolated
    if var.size < _PARALLEL_MIN or (os.cpu_count() or 1) < 2:
        return _hermite_coefficients_serial(act, var, order)
    half = var.size // 2
    with ThreadPoolExecutor(2) as pool:
        parts = list(pool.map(lambda v: _hermite_coefficients_serial(act, v, order), (var[:half], var[half:])))
    return (np.concatenate([parts[0][0], parts[1][0]], axis=1), np.concatenate([parts[0][1], parts[1][1]]),
            np.concatenate([parts[0][2], parts[1][2]]))


def _interpolated_coefficients(act: Activation, var: Array, order: int, tol: float
                               ) -> tuple[Array, Array, Array] | None:
    """Coefficients, ``m2`` and errors at many variances from their values at Chebyshev–Lobatto
    points of ``log √var`` over the batch's range (``_INTERPOLATE_NODES``, then twice as many
    where that is not enough: the points are nested): as functions of the standard deviation they
    are analytic on ``(0, ∞)`` (an integral of the fixed φ against a Gaussian), so the interpolant
    converges geometrically. Its error is estimated by the interpolant on every other node (the
    coarser one's error, a generous estimate of the finer one's) and added to ``qerr`` with the
    nodes' largest quadrature error. None when the estimate still exceeds ``tol · √m2`` somewhere
    (a range too wide or a φ too rough for the nodes); the caller then computes every variance."""
    t = 0.5 * np.log(var)
    lo, hi = float(np.min(t)), float(np.max(t))
    if not hi > lo:
        return None
    query = (2.0 * t - (hi + lo)) / (hi - lo)
    values, qerr = np.empty((order + 2, 0)), np.empty(0)
    m = _INTERPOLATE_NODES - 1
    while 2 * m < var.size:  # interpolation must cost less than computing each variance
        x = np.cos(np.pi * np.arange(m + 1) / m)  # Lobatto points on [−1, 1]; x[::2] are those of m/2
        new = x if not values.size else x[1::2]
        alpha, m2, q = _hermite_coefficients_serial(act, np.exp(2.0 * (0.5 * (hi + lo) + 0.5 * (hi - lo) * new)),
                                                    order)
        fresh = np.concatenate([alpha, m2[None]], axis=0)
        if values.size:  # interleave the new (odd) nodes with the previous ones
            merged = np.empty((order + 2, m + 1))
            merged[:, ::2], merged[:, 1::2] = values, fresh
            fresh = merged
        values, qerr = fresh, np.concatenate([qerr, q])
        fine = _lobatto_basis(query, x) @ values.T  # (n, K + 2)
        coarse = _lobatto_basis(query, x[::2]) @ values[:, ::2].T
        err = np.abs(fine - coarse)
        root = np.sqrt(np.maximum(fine[:, -1], 0.0))
        # one number per variance bounding every coefficient's error and that of m2 / (2√m2)
        total = np.max(err[:, :-1], axis=1) + err[:, -1] / np.maximum(2.0 * root, 1e-300) + float(np.max(qerr))
        if np.all(total <= tol * root):
            return fine[:, :-1].T.copy(), fine[:, -1].copy(), total
        m *= 2
    return None


def _lobatto_basis(query: Array, x: Array) -> Array:
    """Barycentric Lagrange basis of the Chebyshev–Lobatto points ``x`` (cos(πj/m)) at ``query``:
    rows sum to 1, a query on a node selects it."""
    w = (-1.0) ** np.arange(x.size)
    w[0] *= 0.5
    w[-1] *= 0.5
    diff = query[:, None] - x[None, :]
    exact = diff == 0.0
    with np.errstate(divide="ignore", invalid="ignore"):
        B = w / diff
    hit = exact.any(axis=1)
    B[hit] = exact[hit].astype(float)
    return B / np.sum(B, axis=1, keepdims=True)


def _hermite_coefficients_serial(act: Activation, var: Array, order: int) -> tuple[Array, Array, Array]:
    # Panels narrow enough for the oscillation of He_K (frequency ≈ √(2K+1)) under 20 GL nodes,
    # and for oscillating φ (sin, cos: frequency √var in z) under the 10 nodes of the estimate.
    sd = np.sqrt(var)
    top = max(float(np.max(sd, initial=0.0)), 1.0)
    edges = _uniform_grid(top, min(2.0, 12.0 / np.sqrt(2.0 * order + 1.0)))
    if all(k == 0.0 for k in act.kinks):  # one rule in z serves every variance (graded for the largest)
        e = panel_edges(np.zeros(1), np.full(1, top), (0.0,), extra_z=edges[None])
        alpha, m2, qerr = _weighted_values(act, sd, e, order)

        def shared(rows: Array) -> Array:
            return np.broadcast_to(e, (rows.size, e.shape[1]))

        return _refined_coefficients(act, sd, order, _reaching_far(act, sd, order, shared, alpha, m2, qerr),
                                     alpha, m2, qerr)
    features = tuple(dict.fromkeys((*act.kinks, 0.0)))

    def edges_of(rows: Array) -> Array:
        return panel_edges(np.zeros(rows.size), sd[rows], features,
                           extra_z=np.broadcast_to(edges, (rows.size, edges.size)))

    alpha, m2, qerr = np.empty((order + 1, var.size)), np.empty(var.size), np.empty(var.size)
    _coefficients_on_panels(act, sd, order, np.arange(var.size), edges_of, alpha, m2, qerr)
    return _refined_coefficients(act, sd, order, _reaching_far(act, sd, order, edges_of, alpha, m2, qerr),
                                 alpha, m2, qerr)


def _coefficients_on_panels(act: Activation, sd: Array, order: int, rows: Array, edges_of: Callable[[Array], Array],
                            alpha: Array, m2: Array, qerr: Array) -> None:
    """Coefficients, ``E φ²`` and quadrature errors of the variances ``sd[rows]²`` on the panels
    ``edges_of(rows)`` (one row of edges each), into ``alpha[:, rows]``, ``m2[rows]``, ``qerr[rows]``;
    in blocks of at most ``_GATHER`` Hermite function values."""
    if not rows.size:
        return
    nodes = edges_of(rows[:1]).shape[1] * GL_NODES.size
    step = max(1, _GATHER // ((order + 1) * nodes))
    for i in range(0, rows.size, step):
        r = rows[i:i + step]
        alpha[:, r], m2[r], qerr[r] = _weighted_values(act, sd[r], edges_of(r), order)


def _end_density(act: Activation, sd: Array, end: float) -> Array:
    """The larger of ``φ(±sd·end)² φ_N(end)`` per standard deviation (inf where φ overflows there)."""
    with np.errstate(all="ignore"):
        f = np.asarray(act.fn(sd[:, None] * np.array([-end, end])), dtype=float)
        density = np.max(f * f, axis=1) * (INV_SQRT_2PI * np.exp(-0.5 * end * end))
    return np.where(np.isnan(density), np.inf, density)


def _with_far_panels(edges: Array) -> Array:
    """Panel edges (P, E) with the panels out to ``±Z_FAR`` added to every row."""
    far = np.broadcast_to(_FAR_EDGES, (edges.shape[0], _FAR_EDGES.size))
    return np.sort(np.concatenate([edges, far], axis=1), axis=1)


def _reaching_far(act: Activation, sd: Array, order: int, edges_of: Callable[[Array], Array],
                  alpha: Array, m2: Array, qerr: Array) -> Callable[[Array], Array]:
    """In place: the variances at which ``E φ²`` still has mass at the rules' box ends ``|z| = Z_MAX``
    (a φ growing exponentially: cosh(g) at variance 16 was 2.3e-2 off with a bound of 3e-14) computed
    again with panels out to ``±Z_FAR``; where it has mass even there, an infinite error (refused, not
    wrong). Returns the panels to refine from: ``edges_of`` with the far panels for blocks holding such
    variances."""
    rows = np.flatnonzero(~(_end_density(act, sd, Z_MAX) <= _LEAK * np.maximum(m2, 0.0)))
    if not rows.size:
        return edges_of
    reaching = np.zeros(sd.size, dtype=bool)
    reaching[rows] = True

    def far(r: Array) -> Array:
        return _with_far_panels(edges_of(r)) if reaching[r].any() else edges_of(r)

    with np.errstate(all="ignore"):
        _coefficients_on_panels(act, sd, order, rows, far, alpha, m2, qerr)
    beyond = ~(_end_density(act, sd[rows], Z_FAR) <= _LEAK * np.maximum(m2[rows], 0.0))
    qerr[rows[beyond | ~np.isfinite(m2[rows])]] = np.inf
    return far


def _refined_coefficients(act: Activation, sd: Array, order: int, edges_of: Callable[[Array], Array],
                          alpha: Array, m2: Array, qerr: Array) -> tuple[Array, Array, Array]:
    """Bisect the panels of the variances whose coefficients' error estimate exceeds
    ``COEFFICIENT_TOL · √E φ²`` — a φ oscillating faster than its argument's scale (``sin(g²)`` at
    variance 5: the uniform grid resolves ``sin(√var z)``, not ``sin(var z²)``) — and compute them
    again, up to ``MAX_REFINEMENTS`` times within ``_REFINE_BUDGET`` node-coefficient products;
    what is left keeps its (honest, larger) estimate."""
    for level in range(1, MAX_REFINEMENTS + 1):
        rows = np.flatnonzero(~(qerr <= COEFFICIENT_TOL * np.sqrt(np.maximum(m2, 0.0))))
        if not rows.size:
            break
        finer = _graded_at_kinks(_bisected_n(edges_of, level), act.kinks, sd, level)
        if rows.size * finer(rows[:1]).shape[1] * GL_NODES.size * (order + 1) > _REFINE_BUDGET:
            break
        a, m, q = alpha.copy(), m2.copy(), qerr.copy()
        _coefficients_on_panels(act, sd, order, rows, finer, a, m, q)
        better = rows[q[rows] < qerr[rows]]  # the finer rule's estimate (of the coarser 10-node rule) is smaller
        alpha[:, better], m2[better], qerr[better] = a[:, better], m[better], q[better]
    return alpha, m2, qerr


def _graded_at_kinks(edges_of: Callable[[Array], Array], kinks: tuple[float, ...], sd: Array,
                     level: int) -> Callable[[Array], Array]:
    """``edges_of`` with the panels graded further towards φ's kinks, to ``4^−(3 + 3·level)`` of the scale on each
    side: a singular derivative there (``√|x|``, ``x log|x|``) converges only algebraically as panels halve, and
    geometrically on graded ones (``√relu``: 4e-8 relative → below 1e-8)."""
    if not kinks:
        return edges_of
    steps = 4.0 ** -np.arange(4, 4 + 3 * level)
    offsets = np.concatenate([steps, -steps])
    at = np.asarray(kinks, dtype=float)

    def finer(rows: Array) -> Array:
        e = edges_of(rows)
        with np.errstate(divide="ignore", invalid="ignore"):
            z = at[None, :] / sd[rows][:, None]
        extra = np.nan_to_num((z[:, :, None] + offsets).reshape(rows.size, -1), nan=Z_MAX, posinf=Z_MAX,
                              neginf=-Z_MAX)
        return np.sort(np.clip(np.concatenate([e, extra], axis=1), -Z_MAX, Z_MAX), axis=1)
    return finer


def _bisected_n(edges_of: Callable[[Array], Array], times: int) -> Callable[[Array], Array]:
    """``edges_of`` with every panel cut into ``2**times`` equal panels."""
    def finer(rows: Array) -> Array:
        e = edges_of(rows)
        t = np.linspace(0.0, 1.0, 2**times + 1)[:-1]
        inner = (e[:, :-1, None] + (e[:, 1:] - e[:, :-1])[:, :, None] * t).reshape(e.shape[0], -1)
        return np.concatenate([inner, e[:, -1:]], axis=1)
    return finer


def _weighted_values(act: Activation, sd: Array, edges: Array, order: int) -> tuple[Array, Array, Array]:
    """On the panels ``edges`` in z (one row shared by every standard deviation, or one row each): the
    coefficients ``α`` (order + 1, P), ``E φ²`` (P,) by the 20-node rule, and the quadrature error of each
    coefficient and of ``E φ² / (2√E φ²)``: their largest difference with the 10-node rule's. (From
    ``E φ²`` alone a cusp such as √|x| went unseen: ``E φ² = E|x|`` is exact on both rules, the
    coefficients were 3e-8 off.)"""
    out = []
    for nodes, weights in ((GL_NODES, GL_WEIGHTS), (GL10_NODES, GL10_WEIGHTS)):
        z, w = rule_on_panels(edges, nodes, weights)
        f = at_nodes(act.fn, sd[:, None] * z, w)
        check_finite(f, f"E {act.name}(u)²")
        fw = f * w
        H = hermite_functions(z[0] if z.shape[0] == 1 else z, order)
        alpha = H @ fw.T if z.shape[0] == 1 else np.einsum("kpq,pq->kp", H, fw)
        out.append((alpha, np.sum(fw * f, axis=1)))
    (alpha, m2), (alpha10, m2_10) = out
    # the low orders only: 10 nodes a panel do not resolve He_k of high order, whose coefficients the
    # 20-node rule gets right (gelu's tables were refined for nothing: 5× slower); a cusp shows in them all
    low = slice(0, _CUSP_ORDERS + 1)
    qerr = np.maximum(_coefficient_error(m2, m2_10), np.max(np.abs(alpha[low] - alpha10[low]), axis=0))
    return alpha, m2, qerr


def _coefficient_error(m2: Array, m2_coarse: Array) -> Array:
    root = np.sqrt(np.maximum(m2, 0.0))
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.where(root > 0, np.abs(m2 - m2_coarse) / (2.0 * root), 0.0)
    return q + 1e-15 * root


class CoefficientMemo:
    """Hermite coefficients already computed, per (activation, order) and variance value.

    A kernel is computed tile by tile and every tile meets the same per-point variances
    again; one memo per kernel computation (see :class:`netsor.interpret.infinite.Limit`)
    computes them once per point instead of once per tile. Safe to share between threads.
    """

    def __init__(self) -> None:
        self._tables: dict[tuple[Any, int], _MemoTable] = {}
        self._lock = threading.Lock()

    def table(self, act: Activation, order: int) -> _MemoTable:
        with self._lock:
            return self._tables.setdefault((act.key, order), _MemoTable(order))


class _MemoTable:
    """Columns ``α(var)`` (order+1,), ``E φ²(var)`` and the quadrature error stored contiguously,
    found by variance value (a sorted key array: one vectorised ``searchsorted`` per lookup)."""

    def __init__(self, order: int) -> None:
        # (sorted variances, their columns), replaced as one object so that a reader on another
        # thread never pairs new keys with old columns
        self.index: tuple[Array, Array] = (np.empty(0), np.empty(0, dtype=np.intp))
        self.alpha = np.empty((order + 1, 0))
        self.m2 = np.empty(0)
        self.qerr = np.empty(0)
        self.tail = np.empty((order + 1, 0))
        self.lock = threading.Lock()

    def _find(self, var: Array) -> tuple[Array, Array]:
        keys, cols = self.index
        if not keys.size:
            return np.zeros(var.shape, dtype=bool), np.full(var.shape, -1)
        pos = np.minimum(np.searchsorted(keys, var), keys.size - 1)
        found = keys[pos] == var
        return found, np.where(found, cols[pos], -1)

    def lookup(self, act: Activation, var: Array, order: int, interpolation_tol: float | None = None
               ) -> tuple[Array, Array, Array, Array]:
        """``α, E φ², quadrature error, tail bounds`` (:func:`_tails`) at the variances ``var``."""
        found, cols = self._find(var)
        if not found.all():
            new = np.unique(var[~found])
            alpha, m2, qerr = hermite_coefficients(act, new, order, interpolation_tol=interpolation_tol)
            tail = _tails(alpha, m2, qerr, order)
            with self.lock:
                start = self.m2.size
                self.alpha = np.concatenate([self.alpha, alpha], axis=1)
                self.m2 = np.concatenate([self.m2, m2])
                self.qerr = np.concatenate([self.qerr, qerr])
                self.tail = np.concatenate([self.tail, tail], axis=1)
                keys = np.concatenate([self.index[0], new])
                cols = np.concatenate([self.index[1], start + np.arange(new.size)])
                order_ = np.argsort(keys, kind="stable")
                self.index = (keys[order_], cols[order_])
            found, cols = self._find(var)
        alpha, m2, qerr, tail = self.alpha, self.m2, self.qerr, self.tail  # never shrink: they hold every column found
        return alpha[:, cols], m2[cols], qerr[cols], tail[:, cols]


def _tails(alpha: Array, m2: Array, qerr: Array, order: int) -> Array:
    """Bounds of ``T_k = E φ² − Σ_{j ≤ k} α_j²`` (order+1, n) from coefficients each off by at most ``qerr``:
    ``m2`` is off by at most ``2 qerr √m2``, so ``T_k`` by at most ``2 √(K+1) qerr √m2 + (K+1) qerr²``
    (Cauchy–Schwarz on ``Σ 2|α_j| e_j``), plus a floor of the summation's rounding."""
    tail = m2 - np.cumsum(alpha * alpha, axis=0)
    slack = 2.0 * np.sqrt(order + 1.0) * qerr * np.sqrt(m2) + (order + 1.0) * qerr**2
    return np.maximum(tail, 0.0) + _TAIL_FLOOR * m2 + slack


class HermiteTable:
    """Hermite coefficients of one activation at n distinct variances, with tail bounds."""

    def __init__(self, act: Activation, var: Array, order: int, rtol: float,
                 memo: CoefficientMemo | None = None) -> None:
        self.order, self.rtol = order, rtol
        tol = _INTERPOLATE_SHARE * rtol
        if memo is None:
            self.alpha, self.m2, self.qerr = hermite_coefficients(act, var, order, interpolation_tol=tol)
            self.tail = _tails(self.alpha, self.m2, self.qerr, order)
        else:  # the tails with the coefficients, once per variance
            self.alpha, self.m2, self.qerr, self.tail = memo.table(act, order).lookup(act, var, order, tol)
        #: orders whose coefficient is not zero for every variance (parity of odd/even φ)
        self.active = np.any(np.abs(self.alpha) > 1e-15 * np.sqrt(self.m2), axis=1)
        self._reach: dict[int | tuple[int, ...], Array] = {}

    def reach(self, order: int | tuple[int, ...]) -> Array:
        """``g`` of shape (n,) such that order ``order`` meets ``rtol`` when ``|ρ| ≤ g_φ g_ψ`` (stacked,
        (orders, n), for a tuple of orders)."""
        if order not in self._reach:
            k = np.array(order, dtype=np.intp)
            power = 0.5 / (k + 1) if k.ndim == 0 else (0.5 / (k + 1))[:, None]
            with np.errstate(divide="ignore", invalid="ignore"):
                g = (self.rtol * self.m2 / self.tail[k]) ** power
            self._reach[order] = np.where(self.tail[k] > 0, g, np.inf)
        return self._reach[order]


def _lift(x: Array, ndim: int) -> Array:
    return x.reshape((1,) * (ndim - x.ndim) + x.shape)


def _rows(x: Array, sl: slice) -> Array:
    return x[sl] if x.shape[0] > 1 else x


def _horner(alpha: Array, beta: Array, x: Array, active: Array, top: int, out: Array) -> None:
    """``out = Σ α_k β_k x^{(k − top mod 2)/2}`` over active ``k ≡ top (mod 2)``, ``k ≤ top``.

    When the coefficients are a column (rows, 1) times a row (1, cols) — the layout of a tile —
    each step adds the outer product with one BLAS rank-1 update (``dger``) instead of forming it.
    """
    outer = (alpha.ndim == 3 and alpha.shape[2] == 1 and beta.shape[1] == 1
             and out.ndim == 2 and out.flags.c_contiguous)
    np.multiply(alpha[top], beta[top], out=out)
    tmp = None if outer else np.empty(out.shape)
    for k in range(top - 2, -1, -2):
        np.multiply(out, x, out=out)
        if active[k]:
            if outer:
                # out.T is Fortran-ordered, so dger updates out in place: out += α_k β_kᵀ.
                _dger(1.0, beta[k, 0], alpha[k, :, 0], a=out.T, overwrite_a=True)
            else:
                np.multiply(alpha[k], beta[k], out=tmp)
                np.add(out, tmp, out=out)


def _mehler(ta: HermiteTable, tb: HermiteTable, ia: Array, ib: Array, sa: Array, sb: Array,
            c: Array, order: int, out: Array, largest: bool = False) -> tuple[Array, float]:
    """Series of order ``order`` for every pair, blockwise; returns the pairs it does not meet.

    ``ia, ib`` (int arrays broadcastable to ``out.shape``) are the table columns of each pair's
    variances; ``sa, sb, c`` its standard deviations and covariance (``ρ = c / (sa sb)``).
    Returns the flat indices (into ``out``) of the pairs whose tail bound exceeds the tolerance,
    and (``largest``: else 0) the largest ``ρ²`` of the others.
    """
    active = ta.active[:order + 1] & tb.active[:order + 1]
    # Highest active order of each parity: Σ_even α_k β_k ρ^k + ρ Σ_odd, each by Horner in ρ².
    tops = [max(k for k in range(p, order + 1, 2) if active[k])
            for p in (0, 1) if active[p:order + 1:2].any()]
    limit_a, limit_b = ta.reach(order)[ia] ** 2, tb.reach(order)[ib] ** 2
    inner = int(np.prod(out.shape[1:]))
    rows = max(1, min(_BLOCK, _GATHER // (order + 1)) // max(inner, 1))
    rejected = []
    widest = 0.0  # the largest ρ² of the pairs met
    inv_a, inv_b = 1.0 / sa, 1.0 / sb  # per point: two products a pair instead of a product and a division
    for i in range(0, out.shape[0], rows):
        sl = slice(i, i + rows)
        blk = out[sl]
        rho = np.multiply(_rows(c, sl), _rows(inv_a, sl))
        rho *= _rows(inv_b, sl)
        x = rho * rho
        alpha, beta = ta.alpha[:order + 1, _rows(ia, sl)], tb.alpha[:order + 1, _rows(ib, sl)]
        if not tops:
            blk[...] = 0.0
        part = np.empty(blk.shape) if len(tops) > 1 else None
        for n, top in enumerate(tops):
            dst = part if n else blk
            _horner(alpha, beta, x, active, top, dst)
            if top % 2:
                np.multiply(dst, rho, out=dst)
            if n:
                np.add(blk, part, out=blk)
        bad = np.flatnonzero(x > _rows(limit_a, sl) * _rows(limit_b, sl))
        rejected.append(bad + i * inner)
        if largest and x.size:
            x = np.broadcast_to(x, blk.shape).copy() if x.shape != blk.shape else x  # x is ours: zero the rejected
            x.reshape(-1)[bad] = 0.0
            widest = max(widest, float(np.max(x)))
    return np.concatenate(rejected), widest


def _series_error(ta: HermiteTable, tb: HermiteTable, ia: Array, ib: Array, rho: Array, order: int) -> Array:
    """Error bound of a series pair truncated after ``order``: the Parseval bound of the rest,
    ``|ρ|^{K+1} √(T_φ T_ψ)``, plus the coefficients' quadrature error summed over the orders used."""
    root_a, root_b = np.sqrt(ta.m2[ia]), np.sqrt(tb.m2[ib])
    tail = _abs_power(rho, order + 1)
    tail *= np.sqrt(ta.tail[order][ia] * tb.tail[order][ib])
    tail += np.sqrt(order + 1.0) * (ta.qerr[ia] * root_b + tb.qerr[ib] * root_a)
    return tail


def _series_relative(ta: HermiteTable, tb: HermiteTable, ia: Array, ib: Array, order: int, largest: float,
                     left: Array, right: Array) -> float:
    """``max_ij`` of :func:`_series_error` over ``left_i right_j`` for the pairs of a dense pass
    (``ρ² ≤ largest`` and within reach), from per-point maxima:
    ``|ρ|^{K+1} √(T_φ,i T_ψ,j) ≤ largest^{(K+1)/2} √T_φ,i √T_ψ,j``, and ``≤ rtol √(E φ² E ψ²)``
    by the reach (:meth:`HermiteTable.reach`); the quadrature part is a sum of per-point products."""
    top = largest_ratio
    tail = (largest ** ((order + 1) / 2) * top(np.sqrt(ta.tail[order][ia]), left)
            * top(np.sqrt(tb.tail[order][ib]), right))
    # and every pair of the dense pass is within reach: its tail is at most rtol √(E φ² E ψ²)
    tail = min(tail, ta.rtol * top(np.sqrt(ta.m2[ia]), left) * top(np.sqrt(tb.m2[ib]), right))
    quad = np.sqrt(order + 1.0) * (top(ta.qerr[ia], left) * top(np.sqrt(tb.m2[ib]), right)
                                   + top(tb.qerr[ib], right) * top(np.sqrt(ta.m2[ia]), left))
    return tail + quad


def _abs_power(x: Array, k: int) -> Array:
    """``|x|**k`` for an integer ``k ≥ 1`` by repeated squaring (a few multiplications instead
    of a ``pow`` call per entry: ~5x faster on large arrays)."""
    base = np.abs(x)
    out = None
    while True:
        if k & 1:
            out = base.copy() if out is None else np.multiply(out, base, out=out)
        k >>= 1
        if not k:
            return out
        base *= base


def _colinear_pair(phi: Activation, psi: Activation, a: Array, b: Array, sign: Array) -> tuple[Array, Array]:
    """``E[φ(√a Z) ψ(±√b Z)]`` (ρ = ±1) and an error estimate, shape (P,) for inputs of shape (P,)."""
    out, err = np.empty(a.size), np.empty(a.size)
    for i in range(0, a.size, _PAIR_CHUNK * 16):
        sl = slice(i, i + _PAIR_CHUNK * 16)
        sa, sb, sg = np.sqrt(a[sl]), np.sqrt(b[sl]), sign[sl]
        # Uniform panels of width ≲ 4/√max(a, b) also resolve oscillating φ (sin, cos).
        grid = _uniform_grid(max(_resolved(phi, sa), _resolved(psi, sb)))
        kinks = [k / sa for k in phi.kinks] + [sg * k / sb for k in psi.kinks]
        extra = [np.stack(kinks, axis=1) if kinks else np.empty((sa.size, 0)),
                 np.broadcast_to(grid, (sa.size, grid.size))]
        extra += [_local_grading([sg * k / sb for k in features(psi)], 1.0 / sb, 0)] if _graded_locally(psi, sb) else []
        extra += [_local_grading([k / sa for k in features(phi)], 1.0 / sa, 0)] if _graded_locally(phi, sa) else []
        edges = panel_edges(np.zeros(sa.size), np.maximum(sa, sb), (0.0,), extra_z=np.concatenate(extra, axis=1))
        vals = []
        for nodes, weights in ((GL_NODES, GL_WEIGHTS), (GL10_NODES, GL10_WEIGHTS)):
            z, w = rule_on_panels(edges, nodes, weights)
            f = at_nodes(phi.fn, sa[:, None] * z, w) * at_nodes(psi.fn, (sg * sb)[:, None] * z, w)
            check_finite(f, f"E[{phi.name}(u) {psi.name}(v)]")
            vals.append(np.sum(w * f, axis=1))
        out[sl], err[sl] = vals[0], np.abs(vals[0] - vals[1])
    return out, err


def _nested_pair(phi: Activation, psi: Activation, a: Array, b: Array, c: Array,
                 target: Array | None = None) -> tuple[Array, Array]:
    """Nested panelled quadrature (~5·10⁴ nodes a pair) and an error estimate (the same rule with
    10-node panels), shape (P,) for inputs of shape (P,). Pairs whose estimate exceeds ``target``
    (P,) are integrated again on uniform grids twice as fine, up to ``MAX_REFINEMENTS`` times (φ or
    ψ oscillating faster than its argument's scale: ``sin(u²)``)."""
    if not a.size:
        return np.empty(0), np.empty(0)
    value, err = np.zeros(a.size), np.full(a.size, np.inf)
    todo = np.arange(a.size)
    if target is not None and _hermite_inner(psi):
        # nearly colinear pairs of analytic ψ (deep networks in the ordered phase: 1 − ρ ~ 1e-11 … 1e-2): the
        # inner Gaussian is narrow, and Gauss–Hermite rules resolve it with a tenth of the panels' nodes
        # (softplus at depth 17: 16 ms a pair on panels); pairs they do not meet take the panels below
        narrow = np.flatnonzero(np.sqrt(np.maximum(b - c * c / a, 0.0)) <= _HERMITE_INNER_SCALE)
        for i in range(0, narrow.size, _PAIR_CHUNK):
            at = narrow[i:i + _PAIR_CHUNK]
            value[at], err[at] = _nested_chunk(phi, psi, a[at], b[at], c[at], inner_rule="hermite")
        todo = todo[~(err <= target)]
    for fineness in range(MAX_REFINEMENTS + 1):
        cost = 4**fineness  # both grids twice as fine: four times the nodes of a pair
        if fineness and (target is None or todo.size * cost > _NESTED_REFINE_BUDGET):
            break
        chunk = max(1, _PAIR_CHUNK // cost)
        for i in range(0, todo.size, chunk):
            at = todo[i:i + chunk]
            v, e = _nested_chunk(phi, psi, a[at], b[at], c[at], fineness)
            better = ~(e >= err[at])  # the first estimate, then a smaller one (NaN: kept, checked later)
            value[at[better]], err[at[better]] = v[better], e[better]
        if target is not None:
            todo = todo[~(err[todo] <= target[todo])]
        if not todo.size:
            break
    return value, err


def _hermite_inner(psi: Activation) -> bool:
    """ψ is analytic and local (registered: its poles, if any, lie off the real axis at the scale of x), so
    the nested rule may integrate its conditional Gaussian by Gauss–Hermite rules."""
    return psi.smooth and psi.local and not psi.kinks and psi.kinks_known


def _nested_chunk(phi: Activation, psi: Activation, a: Array, b: Array, c: Array, fineness: int = 0,
                  inner_rule: str = "panels") -> tuple[Array, Array]:
    """Nested quadrature of ``E[φ(u) ψ(v)]`` (P,) and its error estimate: the 15-node outer rule with one
    inner rule against the 10-node outer rule with another — inner rules on panels (``inner_rule="panels"``,
    2^fineness times finer grids) or the Gauss–Hermite rules of ``_HERMITE_INNER_ORDERS`` (``"hermite"``)."""
    # u = √a z1, v = √b (ρ z1 + s z2): integrate z2 (inner, ψ's kinks) then z1 (outer, φ's kinks
    # and the places where ψ's kinks cross the z1 axis as s → 0).
    sa, sb = np.sqrt(a), np.sqrt(b)
    rho = np.clip(c / (sa * sb), -1.0, 1.0)
    s = np.sqrt(np.maximum(1.0 - rho * rho, 0.0))
    slope = sb * rho
    safe = np.where(np.abs(slope) > 0, slope, 1.0)
    crossings = [np.where(np.abs(slope) > 0, k / safe, Z_MAX) for k in features(psi)]
    # as a function of z1 the inner integral turns over a width sb·s/|slope| around each crossing (a step
    # ψ gives Φ((slope·z1 − k)/(sb·s))): panels graded to that width there, or a nearly colinear pair's
    # outer rule stepped over the turn with both of its rules alike (estimate 6e-7, error 1.4e-5)
    turn = sb * s / np.abs(safe)
    extra = np.concatenate([np.stack(crossings + [k / sa for k in phi.kinks], axis=1),
                            _graded_around(crossings, turn, _TURN_STEPS)], axis=1)
    # a local φ (tanh, gelu) varies within a few units of x around its features: panels graded in those units
    if _graded_locally(phi, sa):
        extra = np.concatenate([extra, _local_grading([k / sa for k in features(phi)], 1.0 / sa, fineness)], axis=1)
    if _graded_locally(psi, slope):
        extra = np.concatenate([extra, _local_grading(crossings, 1.0 / np.abs(safe), fineness)], axis=1)
    # uniform panels narrow enough for oscillating φ, ψ (sin, cos at large variance) under 10 nodes,
    # 2^fineness times narrower where that was not enough
    finer, widest = 2.0**fineness, 2.0 / 2.0**fineness
    outer_grid = _uniform_grid(finer * max(_resolved(phi, sa), _resolved(psi, slope)), widest)
    outer_edges = panel_edges(np.zeros(a.size), np.maximum(sa, np.abs(slope)), (0.0,),
                              extra_z=np.concatenate([extra, np.broadcast_to(outer_grid, (a.size, outer_grid.size))],
                                                     axis=1))
    inner_grid = _uniform_grid(finer * _resolved(psi, sb * s), widest)
    vals = []
    for order, (nodes, weights) in zip(_HERMITE_INNER_ORDERS, ((GL_NODES, GL_WEIGHTS), (GL10_NODES, GL10_WEIGHTS)),
                                       strict=True):
        z1, w1 = rule_on_panels(outer_edges, nodes, weights)
        P, Q1 = z1.shape
        loc = (slope[:, None] * z1).reshape(-1)
        scale = np.repeat(sb * s, Q1)
        if inner_rule == "hermite":
            vals.append(np.sum(w1 * phi.fn(sa[:, None] * z1) * _hermite_expectation(psi, loc, scale, order)
                               .reshape(P, Q1), axis=1))
            continue
        # the inner rule in slices of outer nodes of at most _NESTED_VALUES values: at once, a chunk of
        # pairs held 10⁵–10⁶ inner values a pair (elu on 1000 inputs peaked at 4.7 GB; a clip of one form on
        # 100 inputs at 7.8 GB) whatever the memory budget
        widest_row = panel_edges(loc[:1], scale.max(initial=0.0, keepdims=True)[:1], features(psi),
                                 extra_z=inner_grid[None, :])
        if Q1 * (widest_row.shape[1] - 1) * nodes.size > _NESTED_PAIR_VALUES:
            return np.zeros(P), np.full(P, np.inf)  # beyond any reasonable time: no bound (the entry is refused)
        step = max(1, _NESTED_VALUES // ((widest_row.shape[1] - 1) * nodes.size))
        inner = np.empty(loc.size)
        for lo in range(0, loc.size, step):
            rows = slice(lo, lo + step)
            inner_extra = np.broadcast_to(inner_grid, (loc[rows].size, inner_grid.size))
            if _graded_locally(psi, sb * s):
                unit = 1.0 / np.where(scale[rows] > 0, scale[rows], 1.0)
                at = [(k - loc[rows]) * unit for k in features(psi)]
                inner_extra = np.concatenate([inner_extra, _local_grading(at, unit, fineness)], axis=1)
            inner_edges = panel_edges(loc[rows], scale[rows], features(psi), extra_z=inner_extra)
            z2, w2 = rule_on_panels(inner_edges, nodes, weights)
            inner[rows] = np.sum(w2 * at_nodes(psi.fn, loc[rows, None] + scale[rows, None] * z2, w2), axis=1)
        f = at_nodes(phi.fn, sa[:, None] * z1, w1) * inner.reshape(P, Q1)
        check_finite(f, f"E[{phi.name}(u) {psi.name}(v)]")
        vals.append(np.sum(w1 * f, axis=1))
    return vals[0], np.abs(vals[0] - vals[1])


def _hermite_expectation(psi: Activation, loc: Array, scale: Array, order: int) -> Array:
    """``E ψ(loc + scale·Z)`` (n,) by the ``order``-node Gauss–Hermite rule, in slices of ``_NESTED_VALUES`` values."""
    z, w = hermite_rule(order)
    out = np.empty(loc.size)
    step = max(1, _NESTED_VALUES // order)
    for lo in range(0, loc.size, step):
        rows = slice(lo, lo + step)
        values = psi.fn(loc[rows, None] + scale[rows, None] * z)
        check_finite(values, f"E {psi.name}(v)")
        out[rows] = values @ w
    return out


#: Panel edges around a local activation's features in units of its argument (``Activation.local``):
#: ±2^-3 … ±2^6, 2^fineness steps an octave.
_LOCAL_OCTAVES = (-3.0, 7.0)
#: Scales (standard deviations of the argument) above which a local activation is graded around its features
#: instead of resolved by a uniform grid (below, the grid is a few dozen panels and cheaper: sigmoid pairs at
#: sd 4.5 took 2.4× longer graded).
LOCAL_SPREAD = 16.0


def _graded_locally(act: Activation, scales: Array) -> bool:
    """``act`` varies only near its features (``Activation.local``) and ``scales`` reach beyond
    :data:`LOCAL_SPREAD`: :func:`_local_grading` instead of :func:`_uniform_grid`."""
    return act.local and float(np.max(np.abs(scales), initial=0.0)) > LOCAL_SPREAD


def _local_grading(centres: list[Array], unit: Array, fineness: int) -> Array:
    """Edges (P, k) at ``centre ± unit·2^j`` (:data:`_LOCAL_OCTAVES`, 2^fineness steps an octave) — a local φ
    (tanh, gelu, softplus') varies within a few units of x of its features, which are ``unit`` (P,) apart in
    z: without a uniform grid at its scale (:func:`_resolved`), these panels resolve it in one pass (gelu'
    pairs at sd 10–1000 had refined four times, at 4× the nodes each, to 1e-13; now 1e-15 at once)."""
    return _graded_around(centres, unit, 2.0 ** np.arange(*_LOCAL_OCTAVES, 1.0 / 2.0**fineness))


def _graded_around(centres: list[Array], unit: Array, steps: Array) -> Array:
    """Panel edges (P, k) at ``centre ± unit·step`` for each centre (P,), ``unit`` (P,), ``steps`` (S,)."""
    return np.concatenate([x[:, None] + sign * unit[:, None] * steps for x in centres for sign in (-1.0, 1.0)],
                          axis=1)


def _resolved(act: Activation, scales: Array) -> float:
    """The spread of ``act(scale · z)`` that :func:`_uniform_grid` must resolve: the largest scale; 0 for a
    positively homogeneous ``act`` (relu, step, abs, leaky_relu) — it has no length scale of its own:
    between its kinks (where :func:`panel_edges` splits and grades) it is a power of x at every variance, so
    the Gaussian's panels suffice (relu pairs at variance 100 took 10⁶ nodes each); and 0 for one graded
    around its features instead (:func:`_graded_locally`) — the uniform grid cost ~4·10⁸ evaluations a pair
    at variance 10¹² (gelu at depth 20, σ_w = 3)."""
    if act.homogeneous is not None or _graded_locally(act, scales):
        return 0.0
    return float(np.max(np.abs(scales), initial=0.0))


def _uniform_grid(spread: float, widest: float = 2.0) -> Array:
    """Panel edges in z for ``φ(spread · z)``: uniform of width ≲ 4/spread (at most ``widest``) over
    [−Z_MAX, Z_MAX] — fine enough for oscillating φ (sin, cos) — with at most
    ``MAX_UNIFORM_PANELS`` panels. Beyond, a steep φ (tanh at a huge variance) is resolved by
    :func:`panel_edges`' grading towards z = 0 at the scale ``spread`` (pass it as the scale of the
    feature 0); a fast oscillation is not, and shows in the error estimates."""
    width = max(min(widest, 4.0 / max(spread, 1e-12)), 2.0 * Z_MAX / MAX_UNIFORM_PANELS)
    return np.linspace(-Z_MAX, Z_MAX, int(np.ceil(2.0 * Z_MAX / width)) + 1)


def _same_activation(phi: Activation, psi: Activation) -> bool:
    return phi is psi or phi.key == psi.key


def _tables(phi: Activation, psi: Activation, va: Array, vb: Array, order: int, rtol: float,
            memo: CoefficientMemo | None) -> tuple[HermiteTable, HermiteTable]:
    """Hermite tables whose orders meet ``SERIES_AIM · rtol`` (see there)."""
    ta = HermiteTable(phi, va, order, SERIES_AIM * rtol, memo)
    same = _same_activation(phi, psi) and va is vb
    return ta, ta if same else HermiteTable(psi, vb, order, SERIES_AIM * rtol, memo)


def _series_pair(phi: Activation, psi: Activation, a: Array, b: Array, c: Array,
                 memo: CoefficientMemo | None, rtol: float, envelope: tuple[Array, Array] | None = None
                 ) -> tuple[Array, Any]:
    """Mehler series with fallbacks, for broadcastable ``a, b, c`` (all variances > 0); the error
    as an array, or with ``envelope`` as its largest ratio to it (:func:`pair_expectation`)."""
    shape = np.broadcast_shapes(a.shape, b.shape, c.shape)
    full = shape or (1,)
    a, b, c = (_lift(t, len(full)) for t in (a, b, c))
    if _same_activation(phi, psi):
        va, inv = np.unique(np.concatenate([a.ravel(), b.ravel()]), return_inverse=True)
        vb, ia, ib = va, inv[:a.size].reshape(a.shape), inv[a.size:].reshape(b.shape)
    else:
        va, ia = np.unique(a, return_inverse=True)
        vb, ib = np.unique(b, return_inverse=True)
        ia, ib = ia.reshape(a.shape), ib.reshape(b.shape)
    sa, sb = np.sqrt(a), np.sqrt(b)
    tables = {_SMALL_TABLE: _tables(phi, psi, va, vb, _SMALL_TABLE, rtol, memo)}

    # Order of the dense pass: minimise the estimated cost over a strided sample of pairs.
    size = int(np.prod(full))
    sub = np.unravel_index(np.linspace(0, size - 1, min(size, 4096)).astype(np.intp), full)
    ia_s, ib_s = np.broadcast_to(ia, full)[sub], np.broadcast_to(ib, full)[sub]
    rho_s = np.abs(np.broadcast_to(c, full)[sub]) / (
        np.broadcast_to(sa, full)[sub] * np.broadcast_to(sb, full)[sub])
    colinear_s = rho_s >= _colinear_reach(phi, psi)
    beyond = rho_s > _orders_reach(tables[_SMALL_TABLE], _SMALL_TABLE, ia_s, ib_s)
    if np.mean(beyond & ~colinear_s) > 0.5:
        tables[_LARGE_TABLE] = _tables(phi, psi, va, vb, _LARGE_TABLE, rtol, memo)
    top = max(tables)
    orders = [k for k in _ORDERS if k <= top]
    # the lowest order meeting rtol at each sampled pair (len(orders): none), all orders of a table at once
    ok = np.concatenate([_orders_reach(tables[size], tuple(k for k in orders if _table_for(k, tables) == size),
                                       ia_s, ib_s) for size in sorted(tables)]) >= rho_s
    need = np.where(ok.any(axis=0), np.argmax(ok, axis=0), len(orders))
    steps = np.array([k / 2.0 + 4.0 for k in orders])
    fallback = np.where(colinear_s, _COST_COLINEAR, _COST_NESTED)
    sparse = np.where(need < len(orders), _COST_SPARSE * steps[np.minimum(need, len(orders) - 1)], fallback)
    # cost of order j: its steps, plus the mean cost of the sampled pairs it leaves (need > j)
    left = np.sum(sparse) - np.cumsum(np.bincount(need, weights=sparse, minlength=len(orders) + 1))[:len(orders)]
    order = orders[int(np.argmin(steps + left / rho_s.size))]
    tabs = tables[_table_for(order, tables)]
    out = np.empty(full)
    rest, largest = _mehler(*tabs, ia, ib, sa, sb, c, order, out, largest=envelope is not None)
    if envelope is None:  # per-point factors gathered per point (ia, ib are a column and a row on a tile)
        err = _full(_series_error(*tabs, ia, ib, c / (sa * sb), order), full)
    else:
        relative = _series_relative(*tabs, ia, ib, order, largest, *envelope)
    if len(full) == 1 and tabs[0] is tabs[1]:
        # a point with itself (per-point runs: ρ = 1, one variance) is E φ², not the truncated Σ α_k²
        # (whose error is the whole tail); tiles leave such pairs to the engine's per-point values
        itself = np.flatnonzero((np.broadcast_to(ia, full) == np.broadcast_to(ib, full))
                                & (np.broadcast_to(c, full) == np.broadcast_to(a, full)))
        table, at = tabs[0], np.broadcast_to(ia, full)[itself]
        out[itself] = table.m2[at]
        rest = np.setdiff1d(rest, itself, assume_unique=True)
        if envelope is None:
            err[itself] = 2.0 * table.qerr[at] * np.sqrt(table.m2[at])
    if rest.size:
        sub = np.unravel_index(rest, full)
        sa_r, sb_r = np.broadcast_to(sa, full)[sub], np.broadcast_to(sb, full)[sub]
        value_r, err_r = _sparse_pairs(
            phi, psi, va, vb, tables, np.broadcast_to(ia, full)[sub], np.broadcast_to(ib, full)[sub],
            np.broadcast_to(c, full)[sub] / (sa_r * sb_r), order, rtol, memo)
        out.reshape(-1)[rest] = value_r
        if envelope is None:
            err.reshape(-1)[rest] = err_r
        else:
            scale = np.broadcast_to(envelope[0], full)[sub] * np.broadcast_to(envelope[1], full)[sub]
            relative = max(relative, largest_ratio(err_r, scale))
    return out.reshape(shape), (err.reshape(shape) if envelope is None else relative)


def _table_for(order: int, tables: dict[int, tuple[HermiteTable, HermiteTable]]) -> int:
    return min(k for k in tables if k >= order)


def _orders_reach(tabs: tuple[HermiteTable, HermiteTable], order: int | tuple[int, ...], ia: Array, ib: Array
                  ) -> Array:
    """The largest ``|ρ|`` that ``order`` meets at the pairs ``(ia, ib)``: shape of ``ia``, or (orders, ...)
    for a tuple of orders."""
    return tabs[0].reach(order)[..., ia] * tabs[1].reach(order)[..., ib]


def _sparse_pairs(phi: Activation, psi: Activation, va: Array, vb: Array,
                  tables: dict[int, tuple[HermiteTable, HermiteTable]], ia: Array, ib: Array,
                  rho: Array, done: int, rtol: float, memo: CoefficientMemo | None) -> tuple[Array, Array]:
    """Pairs (flat, shape (m,)) left by a dense pass of order ``done``: higher orders, then quadrature."""
    rho = np.clip(rho, -1.0, 1.0)
    out, err = np.empty(rho.size), np.empty(rho.size)
    colinear = np.abs(rho) >= _colinear_reach(phi, psi)
    small = tables[_SMALL_TABLE]
    if small[0] is small[1]:  # E φ(u)² on the diagonal is in the table already
        diagonal = colinear & (rho > 0) & (ia == ib)
        out[diagonal] = small[0].m2[ia[diagonal]]
        err[diagonal] = 2.0 * small[0].qerr[ia[diagonal]] * np.sqrt(small[0].m2[ia[diagonal]])
        line = colinear & ~diagonal
    else:
        line = colinear
    if line.any():
        out[line], err[line] = _colinear_pair(phi, psi, va[ia[line]], vb[ib[line]], np.sign(rho[line]))
    todo = np.flatnonzero(~colinear)
    ones = np.ones(1)
    for size in sorted(set(tables) | {_LARGE_TABLE, _HUGE_TABLE}):
        if not todo.size:
            return out, err
        if size in tables:
            tabs, ja, jb = tables[size], ia[todo], ib[todo]
        else:  # the large table, for the variances still needed only
            ua, ja = np.unique(ia[todo], return_inverse=True)
            ub, jb = np.unique(ib[todo], return_inverse=True)
            tabs = _tables(phi, psi, va[ua], vb[ub], size, rtol, memo)
        for order in (k for k in _ORDERS if done < k <= size):
            ok = np.abs(rho[todo]) <= _orders_reach(tabs, order, ja, jb)
            if ok.any():
                val = np.empty(int(ok.sum()))
                _mehler(*tabs, ja[ok], jb[ok], ones, ones, rho[todo[ok]], order, val)
                out[todo[ok]] = val
                err[todo[ok]] = _series_error(*tabs, ja[ok], jb[ok], rho[todo[ok]], order)
                todo, ja, jb = todo[~ok], ja[~ok], jb[~ok]
        done = size
    if todo.size:
        ta, tb = tables[_SMALL_TABLE]
        target = _NESTED_SHARE * rtol * np.sqrt(ta.m2[ia[todo]] * tb.m2[ib[todo]])
        out[todo], err[todo] = _nested_pair(phi, psi, va[ia[todo]], vb[ib[todo]],
                                            rho[todo] * np.sqrt(va[ia[todo]] * vb[ib[todo]]), target)
    return out, err




def product_activation(phi: Activation, psi: Activation) -> Activation:
    """``φ·ψ`` as a one-argument function (kinks and continuity of both)."""
    return Activation(
        name=f"{phi.name}*{psi.name}", fn=lambda x: phi.fn(x) * psi.fn(x),
        deriv=lambda x: phi.deriv(x) * psi.fn(x) + phi.fn(x) * psi.deriv(x),
        smooth=phi.smooth and psi.smooth, kinks=tuple(sorted(set(phi.kinks) | set(psi.kinks))),
        kinks_known=phi.kinks_known and psi.kinks_known, continuous=phi.continuous and psi.continuous,
        registered=False, cache_key=("product", phi.key, psi.key), exact_slope=phi.exact_slope and psi.exact_slope,
        homogeneous=(phi.homogeneous + psi.homogeneous
                     if phi.homogeneous is not None and psi.homogeneous is not None else None),
        value_error=_product_error(phi, psi))


def _product_error(phi: Activation, psi: Activation) -> Callable[[Array], Array] | None:
    """``|φ̃ψ̃ − φψ| ≤ δ_φ |ψ̃| + δ_ψ |φ̃| + δ_φ δ_ψ`` (None when both are exact)."""
    if phi.value_error is None and psi.value_error is None:
        return None

    def error(x: Array) -> Array:
        d_phi = 0.0 if phi.value_error is None else phi.value_error(x)
        d_psi = 0.0 if psi.value_error is None else psi.value_error(x)
        return d_phi * np.abs(psi.fn(x)) + d_psi * np.abs(phi.fn(x)) + d_phi * d_psi

    return error


_UNIT_MOMENTS: BoundedMemo[dict[str, float]] = BoundedMemo()
#: Per φ (and scale, for a central difference): where it is not square-integrable, ``(kink, exponent)``.
_SQUARE_INTEGRABLE: BoundedMemo[tuple[float, float] | None] = BoundedMemo()
#: Distances from a kink (relative to max(1, |kink|)) at which φ's growth towards it is measured.
_GROWTH_STEPS = 10.0 ** -np.arange(4.0, 14.0, 2.0)


def check_square_integrable(act: Activation, max_sd: float) -> None:
    """Raise :class:`NumericalError` where ``E φ(u)²`` is infinite: φ unbounded towards a kink as ``|x − t|^p`` with
    ``p ≤ −½`` (the derivative of ``√relu`` or of ``sign·√|x|``, ``1/(2√x)``: the NTK of a network of such a φ is
    infinite on its diagonal, which quadrature rules would report as a finite number). The exponent is the slope of
    ``log|φ|`` against ``log|x − t|`` over the last decades of ``|x − t|`` from 1e-4 to 1e-12 on each side;
    ``log|x|`` (slope → 0) and ``1/|x|^0.4`` pass. A central difference (φ' of an opaque φ, bounded by its step)
    is measured by φ's own difference quotients at φ's kinks (``|x|^0.4``: slope −0.6)."""
    base = act.difference_of if isinstance(act.difference_of, Activation) else None
    if base is None and (act.continuous or not act.kinks):
        return

    def growth(t: float, side: float) -> tuple[Array, Array]:
        h = _GROWTH_STEPS * max(1.0, abs(t))
        with np.errstate(all="ignore"):
            if base is None:
                return h, np.abs(np.asarray(act.fn(t + side * h), dtype=float))
            return h, np.abs(np.asarray(base.fn(t + 2.0 * side * h) - base.fn(t + side * h), dtype=float)) / h

    def measure() -> tuple[float, float] | None:
        kinks = act.kinks if base is None else with_located_kinks(base, max_sd).kinks
        for t in kinks:
            for side in (1.0, -1.0):
                h, f = growth(t, side)
                if not np.all(np.isfinite(f)) or np.any(f == 0.0):
                    continue
                slopes = np.diff(np.log(f)) / np.diff(np.log(h))
                if np.all(slopes[-2:] <= -0.5 + 1e-3):
                    return float(t) + 0.0, float(slopes[-1])
        return None

    found = _SQUARE_INTEGRABLE.get((act.key, max_sd if base is not None else None), measure)
    if found is not None:
        t, p = found
        near = f"|x − {t:.3g}|" if t else "|x|"
        raise NumericalError(
            f"E {act.name}(u)² is infinite: {act.name} grows like {near}^{p:.3g} towards x = {t:.3g}, not "
            "square-integrable under a Gaussian, so a kernel of it does not exist (where it is a derivative, "
            "φ' of the network's φ, the NTK is infinite on its diagonal); change the nonlinearity (smooth its "
            "singularity)")


#: Gauss–Hermite rule (probabilists') for the moments of smooth φ up to this standard deviation: 64 nodes
#: give them to 9e-4 relative up to sd 1.5 (the worst: E tanh'²u²; 6.6e-7 at sd 1), but 1.7 % at sd 2 and
#: 24 % at sd 4 (tanh's poles at ±iπ/2 come within π/(2·sd) of the real line); above it the graded rule of
#: the kinked case (~6× the time per point; no change on the NNGP benchmarks, whose variances stay below).
_MOMENT_GH_SD = 1.5
#: Relative accuracy of :func:`moments_1d` at any variance (tested against a fine trapezoid rule at sd
#: 0.25–6); bounds that subtract moments from one another add it back (:func:`~netsor.interpret.
#: propagation.hermite_modulus`).
MOMENT_RTOL = 2e-3
_MOMENT_GH_Z, _MOMENT_GH_W = hermite_rule(64)


def _reaching_far_rule(act: Activation, var: Array, x: Array, w: Array) -> tuple[Array, Array]:
    """The rule ``(x, w)`` (nodes in x, per variance or shared) with the variances whose ``E φ²`` still
    has mass at the box ends given panels out to ``±Z_FAR`` instead (exponential growth; padded with
    zero weights to one width)."""
    far = np.flatnonzero(~(_end_density(act, np.sqrt(var), Z_MAX) <= _LEAK))
    if not far.size:
        return x, w
    sd = np.sqrt(var[far])
    z, wz = rule_on_panels(_with_far_panels(panel_edges(np.zeros(far.size), sd, features(act))))
    width = max(np.shape(x)[-1], z.shape[1])
    nodes, weights = np.zeros((var.size, width)), np.zeros((var.size, width))
    nodes[:, :np.shape(x)[-1]] = x
    weights[:, :np.shape(w)[-1]] = w
    nodes[far], weights[far] = 0.0, 0.0
    nodes[far, :z.shape[1]], weights[far, :z.shape[1]] = sd[:, None] * z, wz
    return nodes, weights


def _unit_moments(act: Activation) -> dict[str, float]:
    def compute() -> dict[str, float]:
        plain = replace(act, homogeneous=None)
        return {k: float(v[0]) for k, v in moments_1d(plain, np.ones(1)).items()}

    return _UNIT_MOMENTS.get(act.key, compute)


def moments_1d(act: Activation, variance: Array) -> dict[str, Array]:
    """Per-variance moments used to propagate errors: ``m2 = E φ²``, ``m4 = E φ⁴``, ``grad1 = E φ'``,
    ``grad1u = E φ' u``, ``grad2 = E φ'²``, ``euler = E φ'² u²`` and ``cross = E φ φ' u``
    (``u ~ N(0, variance)``; all but the first two inf when φ is not absolutely continuous)."""
    var = np.maximum(np.asarray(variance, dtype=float).reshape(-1), 0.0)
    if act.homogeneous is not None:  # φ(√a z) = a^{p/2} φ(z): the moments at variance 1, scaled
        unit = _unit_moments(act)
        p = act.homogeneous
        # at variance 0 the coordinate is the constant φ(0) (0⁰ = 1 would give step² the moment ½)
        square0 = act.at_zero**2
        scale = var**p
        positive = var > 0
        safe = np.where(positive, var, 1.0)
        out = {"m2": np.where(positive, unit["m2"] * scale, square0),
               "m4": np.where(positive, unit["m4"] * scale**2, square0**2),
               "grad1": unit["grad1"] * safe ** ((p - 1) / 2),
               "cross": unit["cross"] * scale, "grad1u": unit["grad1u"] * var ** (p / 2),
               "grad2": unit["grad2"] * safe ** (p - 1), "euler": unit["euler"] * scale}
        shape = np.shape(variance)  # every moment is an array of var's shape already
        return {k: v.reshape(shape) for k, v in out.items()}
    sd_max = float(np.sqrt(np.max(var, initial=0.0)))
    act = with_located_kinks(act, sd_max)
    check_square_integrable(act, sd_max)
    if act.smooth and sd_max <= _MOMENT_GH_SD:
        # smooth and not steep or oscillating on the scale of the nodes: a 64-node Gauss–Hermite
        # rule gives these moments (factors of error bounds, not results) to many digits
        x, w = np.sqrt(var)[:, None] * _MOMENT_GH_Z, _MOMENT_GH_W[None, :]
    elif all(k == 0.0 for k in act.kinks):  # one rule in z serves every variance (graded for the largest)
        top = max(sd_max, 1.0)
        x1, w = gaussian_rule(np.zeros(1), np.full(1, top), (0.0,))
        x = np.sqrt(var)[:, None] * (x1 / top)
    else:
        x, w = gaussian_rule(np.zeros(var.size), np.sqrt(var), features(act))
    x, w = _reaching_far_rule(act, var, x, w)
    f = at_nodes(act.fn, x, w)
    check_finite(f, f"E {act.name}(u)²")
    f2 = f * f
    out = {"m2": np.sum(w * f2, axis=1), "m4": np.sum(w * f2 * f2, axis=1)}
    if act.continuous:
        d1 = at_nodes(act.deriv, x, w)
        d2 = d1 * d1
        check_finite(d2, f"E {act.name}'(u)²")
        out["grad1"] = np.sum(w * d1, axis=1)
        out["grad2"] = np.sum(w * d2, axis=1)
        out["cross"] = np.sum(w * f * d1 * x, axis=1)
        out["grad1u"] = np.sum(w * d1 * x, axis=1)
        out["euler"] = np.sum(w * d2 * x * x, axis=1)
    else:
        out["grad1"] = out["grad1u"] = out["grad2"] = out["euler"] = out["cross"] = np.full(var.size, np.inf)
    return {k: v.reshape(np.shape(variance)) for k, v in out.items()}
