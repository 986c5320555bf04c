"""From expressions of the IR to the function objects of the Gaussian engine.

The engine (:mod:`netsor.gaussian`) knows nothing of programs: it integrates one-argument
:class:`~netsor.activations.Activation` objects (closed forms, Mehler series) and
:class:`~netsor.gaussian.joint.JointFunction` objects of several arguments. This module builds
them from expression trees over G-vectors, with their kinks, derivatives and content keys.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Hashable
from fractions import Fraction
from functools import partial
from itertools import product

import numpy as np

from netsor.activations import Activation, abs_, distance_kernels, erf, exp, gelu, identity, relu, step
from netsor.activations.distance_kernels import DistanceRule
from netsor.activations.registry import central_difference_error, from_ufunc, relative_step
from netsor.gaussian import piecewise
from netsor.gaussian.joint import JointFunction
from netsor.gaussian.orthant import ConeFunction
from netsor.gaussian.separable import Conditional
from netsor.ir import Vector
from netsor.ir.expr import Apply, Const, Expr, Opaque, Prod, Sum, Var, evaluate_shared, shared_nodes

Array = np.ndarray


def activation_of(expr: Expr, arg: Vector) -> Activation:
    """``expr`` as a function of its single G-vector ``arg`` (a registry activation when it is
    one applied to ``arg``, so that closed forms apply; else a composite activation)."""
    if isinstance(expr, Var):
        return identity
    if isinstance(expr, Apply) and isinstance(expr.child, Var):
        return expr.act
    kinks = []
    for terms, offset in expr.kink_planes():
        coef = dict(terms).get(arg, 0.0)
        if coef != 0.0:
            kinks.append(-offset / coef)

    def fn(x: Array) -> Array:
        return np.broadcast_to(evaluate_shared(expr, {arg: x}), np.shape(x))

    def deriv(x: Array) -> Array:
        with shared_nodes():
            return np.broadcast_to(expr.derivative({arg: x}, arg), np.shape(x))

    pieces = _pieces(expr, arg)
    if pieces is not None:  # exact, also where the tracer's planes are not (a relu of a clip: hidden kinks)
        kinks = [t for _, _, _, t, _ in pieces if np.isfinite(t)]
    integral, value_error = None, None
    if isinstance(expr, Opaque) and expr.difference_of is not None and len(expr.operands) == 1 \
            and isinstance(expr.operands[0], Var) and expr.operands[0].vector == arg:
        # f' of a user's one-argument f by central differences: read beside f's kinks and jumps, its rounding
        # counted (netsor.gaussian.pairs.with_located_kinks), as for a custom activation given without deriv
        integral = activation_of(expr.difference_of[0], arg)
        value_error = partial(_relative_difference_error, integral.fn)
    return Activation(name=expr.describe(), fn=fn, deriv=deriv, smooth=expr.smooth,
                      kinks=tuple(sorted(set(kinks))), kinks_known=pieces is not None or not expr.hidden_kinks,
                      # the pieces see a jump that cancels where the expression's factors do not (a traced elu,
                      # step(x)·(x − expm1 x): expm1's zero is not a plane the tracer knows)
                      continuous=expr.continuous or (pieces is not None and _continuous(pieces)),
                      registered=False, cache_key=("expr", expr.key),
                      exact_slope=False,  # an opaque part's derivative is a finite difference
                      distance_kernel=_distance_kernel(expr, arg), pieces=pieces,
                      difference_of=integral, value_error=value_error)


def _relative_difference_error(fn: Callable[[Array], Array], x: Array) -> Array:
    """:func:`~netsor.activations.registry.central_difference_error` of ``fn`` at the step of an opaque
    function's partial derivative, ``1e-6·max(1, |x|)``."""
    x = np.asarray(x, dtype=float)
    return central_difference_error(fn, x, (), relative_step(x))


def _distance_kernel(expr: Expr, arg: Vector) -> DistanceRule | None:
    """The distance rule of ``expr`` when it is ``c + f(arg)`` with ``f`` positively homogeneous and piecewise
    linear with its kink at 0, or of degree 0 with known levels (:func:`_homogeneous`): ``relu(g) + 0.01 g``,
    ``np.where(g > 0, g, 0.2 g)``, ``g·(g > 0)``, ``2·step(g) − step(−g) + 1`` — one rule of
    :mod:`netsor.activations.distance_kernels`, else None."""
    const = expr.const if isinstance(expr, Sum) else 0.0
    body = Sum(0.0, expr.terms) if isinstance(expr, Sum) else expr
    found = _homogeneous(body, arg)
    if found is None:
        return _sum_rule(expr, arg)
    degree, above, below = found
    if degree == 1:
        return distance_kernels.PiecewiseLinearDistance(float(above), float(below))
    return distance_kernels.JumpDistance(float(above - below), (float(above + Fraction(const)),
                                                                float(below + Fraction(const))))


def _sum_rule(expr: Expr, arg: Vector) -> DistanceRule | None:
    """The rule of ``c + Σ α act(k · arg)`` by :func:`netsor.activations.distance_kernels.combination`, for the
    sums :func:`_homogeneous` does not read (a jump rule without levels, which still has its distances)."""
    parts = []
    for alpha, term in expr.terms if isinstance(expr, Sum) else ((1.0, expr),):
        act, inner = (term.act, term.child) if isinstance(term, Apply) else (identity, term)
        k = _multiple_of(inner, arg)
        if act.distance_kernel is None or not k:  # not a multiple of arg, or a constant 0
            return None
        parts.append((alpha, k, act.distance_kernel))
    return distance_kernels.combination(parts, expr.const if isinstance(expr, Sum) else 0.0)


def _homogeneous(expr: Expr, arg: Vector) -> tuple[int, Fraction, Fraction] | None:
    """``(d, A, B)`` with ``expr = A·x^d`` for ``x = arg > 0`` and ``B·x^d`` for ``x < 0``, ``d ∈ {0, 1}`` (values at
    ``x = 0`` aside: a Gaussian argument is never 0), in exact rational arithmetic (``relu(x) − relu(x)`` is 0, not
    a rounding residue); None when ``expr`` is not of this kind. Leaves: constants, ``k·x``, and activations of
    ``k·x`` whose distance rule is piecewise linear or a jump with known levels; sums of leaves of one degree (a
    constant counts as degree 0), products of total degree at most 1."""
    if isinstance(expr, Const):
        return 0, Fraction(expr.value), Fraction(expr.value)
    k = _multiple_of(expr, arg)
    if k is not None:
        return 1, Fraction(k), Fraction(k)
    if isinstance(expr, Apply):
        k = _multiple_of(expr.child, arg)
        rule = expr.act.distance_kernel
        if k is None or k == 0.0 or not isinstance(rule, (distance_kernels.PiecewiseLinearDistance,
                                                          distance_kernels.JumpDistance)):
            return None
        return rule.sides(k)
    if isinstance(expr, Sum):
        parts = [(Fraction(alpha), _homogeneous(term, arg)) for alpha, term in expr.terms]
        if any(part is None for _, part in parts):
            return None
        degrees = {part[0] for _, part in parts} | ({0} if expr.const != 0.0 else set())
        if len(degrees) != 1:
            return None
        return (degrees.pop(), Fraction(expr.const) + sum(alpha * part[1] for alpha, part in parts),
                Fraction(expr.const) + sum(alpha * part[2] for alpha, part in parts))
    if isinstance(expr, Prod):
        degree, above, below = 0, Fraction(1), Fraction(1)
        for factor in expr.factors:
            part = _homogeneous(factor, arg)
            if part is None:
                return None
            degree, above, below = degree + part[0], above * part[1], below * part[2]
        return (degree, above, below) if degree <= 1 else None
    return None


#: Most terms :func:`_pieces` expands a product into (each pair of pieces is a pair of closed forms).
MAX_PIECES = 32

#: ``(coef, power, rate, lo, hi)``: ``coef · x^power · e^(rate·x) · 1{lo < x < hi}`` (±inf for no bound).
_Term = tuple[float, int, float, float, float]


def _pieces(expr: Expr, arg: Vector) -> tuple[piecewise.Piece, ...] | None:
    """``expr`` as a sum of :data:`~netsor.gaussian.piecewise.Piece` terms ``c·x^p·e^(rx)·1{x ≷ k}`` (p ≤ 1) when it
    is built by sums and products from constants, ``x = arg`` and activations of affine ``kx + m`` whose pieces are
    known (relu, step, abs, elu, hard_tanh, …; exp and expm1): a traced elu ``np.where(x > 0, x, np.expm1(x))``,
    selu, ``relu(x + 1)·e^(−x)`` — whose pairs then take the closed forms of :mod:`netsor.gaussian.piecewise`
    instead of the Mehler series (a traced elu's NNGP on 200 inputs: 8.4 s, the registered elu's 0.33 s). None
    otherwise (tanh, a power above 1, more than :data:`MAX_PIECES` terms)."""
    terms = _piece_terms(expr, arg)
    if not terms:
        return None
    groups: dict[tuple[int, float], list[_Term]] = {}
    for term in terms:
        groups.setdefault((term[1], term[2]), []).append(term)
    pieces: list[piecewise.Piece] = []
    for (p, r), group in groups.items():
        # the coefficient on each cell between the thresholds, written with indicators on the side where e^(rx)
        # stays bounded (x < b for r > 0): e^x − e^x·1{x > 0} is e^x·1{x < 0}, whose tilt stays small at any variance
        cuts = sorted({t for _, _, _, lo, hi in group for t in (lo, hi) if np.isfinite(t)})
        mids = [cuts[0] - 1.0] + [0.5 * (x + y) for x, y in zip(cuts[:-1], cuts[1:], strict=True)] + [cuts[-1] + 1.0] \
            if cuts else [0.0]
        coef = [sum(c for c, _, _, lo, hi in group if lo < x < hi) for x in mids]
        below = r > 0.0
        base = coef[-1] if below else coef[0]
        if base != 0.0:
            pieces.append((base, p, r, -np.inf, True))
        for j, t in enumerate(cuts):
            step_size = coef[j] - coef[j + 1] if below else coef[j + 1] - coef[j]
            if step_size != 0.0:
                pieces.append((step_size, p, r, t, not below))
    return tuple(pieces) or None


def _continuous(pieces: tuple[piecewise.Piece, ...]) -> bool:
    """No jump at any threshold of the pieces: the terms cut there sum to 0 at it (to the rounding of their
    sizes — a jump that small moves no kernel entry beyond rounding)."""
    for t in {t for _, _, _, t, _ in pieces if np.isfinite(t)}:
        parts = [(c if above else -c) * t**p * np.exp(r * t) for c, p, r, cut, above in pieces if cut == t]
        if not np.all(np.isfinite(parts)) or abs(sum(parts)) > 64 * np.finfo(float).eps * sum(abs(x) for x in parts):
            return False
    return True


def _piece_terms(expr: Expr, arg: Vector) -> list[_Term] | None:
    """The terms of :func:`_pieces` on intervals (None where ``expr`` is not of that kind)."""
    whole = (-np.inf, np.inf)
    form = expr.affine()
    if form is not None:
        k, m = _affine_of(form, arg)
        return None if k is None else [(m, 0, 0.0, *whole), (k, 1, 0.0, *whole)]
    if isinstance(expr, Apply):
        form = expr.child.affine()
        if form is None:
            return _composed_on_cells(expr.act, _piece_terms(expr.child, arg))
        k, m = _affine_of(form, arg)
        return None if k is None or k == 0.0 else _composed(expr.act, k, m)
    if isinstance(expr, Sum):
        out = [(expr.const, 0, 0.0, *whole)]
        for alpha, term in expr.terms:
            part = _piece_terms(term, arg)
            if part is None:
                return None
            out += [(alpha * c, p, r, lo, hi) for c, p, r, lo, hi in part]
        return out
    if isinstance(expr, Prod):
        out = [(1.0, 0, 0.0, *whole)]
        for factor in expr.factors:
            part = _piece_terms(factor, arg)
            if part is None:
                return None
            out = [(c1 * c2, p1 + p2, r1 + r2, max(lo1, lo2), min(hi1, hi2))
                   for c1, p1, r1, lo1, hi1 in out for c2, p2, r2, lo2, hi2 in part
                   if c1 * c2 != 0.0 and max(lo1, lo2) < min(hi1, hi2)]
            if any(p > 1 for _, p, _, _, _ in out) or len(out) > MAX_PIECES:
                return None
        return out
    return None


def _composed(act: Activation, k: float, m: float) -> list[_Term] | None:
    """The terms of ``φ(kx + m)`` (``k ≠ 0``) from φ's pieces: ``(kx + m)^p e^(r(kx + m)) 1{kx + m ≷ t}``."""
    if act is exp or act is from_ufunc(np.expm1):
        scale = float(np.exp(m))
        if not np.isfinite(scale):
            return None
        tail = [(-1.0, 0, 0.0, -np.inf, np.inf)] if act is not exp else []
        return [(scale, 0, k, -np.inf, np.inf), *tail]
    pieces = piecewise.of(act)
    if pieces is None:
        return None
    out = []
    for c, p, r, t, above in pieces:
        weight = c * float(np.exp(r * m))
        if not np.isfinite(weight):
            return None
        if not np.isfinite(t):  # no indicator (x > −∞, x < +∞), or an empty one
            if above != (t < 0):
                continue
            lo, hi = -np.inf, np.inf
        else:  # kx + m > t  ⇔  x > (t − m)/k for k > 0 (the side flips for k < 0)
            cut = (t - m) / k
            lo, hi = (cut, np.inf) if above == (k > 0) else (-np.inf, cut)
        out += [(weight * k, 1, r * k, lo, hi), (weight * m, 0, r * k, lo, hi)] if p == 1 else [
            (weight, 0, r * k, lo, hi)]
    return out


def _composed_on_cells(act: Activation, inner: list[_Term] | None) -> list[_Term] | None:
    """The terms of ``φ(f(x))`` for a piecewise-linear ``f`` (terms of power ≤ 1, no exponential): on each cell
    between ``f``'s thresholds ``f`` is ``ax + b``, and φ of it is :func:`_composed` cut to the cell (a constant
    ``φ(b)`` where ``a = 0``). Nested clips — ``np.clip(np.clip(x, −0.87, 0.5), −1.01, 0.5)`` — are then exact
    pieces: traced, the outer clip's ``relu(y − 0.5)`` has an argument that is 0 on a whole half-line, where its
    derivative's step flickered with the rounding and the NTK was refused with a bound of 1e38. Slopes and
    intercepts within rounding of their terms (16 ulps) are taken as 0 and as φ's thresholds: in exact arithmetic
    they are (``(x + 0.87) − (x − 0.5) − 1.37``), and φ jumps or kinks there. None where ``f`` is not of that
    kind or φ has no known pieces."""
    if inner is None or any(p > 1 or r != 0.0 for _, p, r, _, _ in inner):
        return None
    pieces = piecewise.of(act)
    if pieces is None or any(r != 0.0 for _, _, r, _, _ in pieces):
        return None
    thresholds = sorted({t for _, _, _, t, _ in pieces if np.isfinite(t)})
    cuts = sorted({t for _, _, _, lo, hi in inner for t in (lo, hi) if np.isfinite(t)})
    edges = [-np.inf, *cuts, np.inf]
    out: list[_Term] = []
    for lo, hi in zip(edges[:-1], edges[1:], strict=True):
        mid = 0.5 * (lo + hi) if np.isfinite(lo) and np.isfinite(hi) else (hi - 1.0 if np.isfinite(hi) else lo + 1.0)
        if not np.isfinite(mid):  # the whole line: no cuts
            mid = 0.0
        active = [(c, p) for c, p, _, t_lo, t_hi in inner if t_lo < mid < t_hi]
        slope = sum(c for c, p in active if p == 1)
        intercept = sum(c for c, p in active if p == 0)
        rounding = 16 * np.finfo(float).eps
        if abs(slope) <= rounding * sum(abs(c) for c, p in active if p == 1):
            slope = 0.0
        near = [t for t in thresholds if abs(intercept - t) <= rounding * (sum(abs(c) for c, p in active if p == 0)
                                                                            + abs(t))]
        if slope == 0.0:
            value = float(np.asarray(act.fn(np.array(near[0] if near else intercept))))
            if value != 0.0:
                out.append((value, 0, 0.0, lo, hi))
            continue
        composed = _composed(act, slope, intercept)
        if composed is None:
            return None
        for c, p, r, t_lo, t_hi in composed:
            cell_lo, cell_hi = max(lo, t_lo), min(hi, t_hi)
            if cell_lo < cell_hi and c != 0.0:
                out.append((c, p, r, cell_lo, cell_hi))
        if len(out) > MAX_PIECES:
            return None
    return out


def _affine_of(form: tuple, arg: Vector) -> tuple[float | None, float]:
    """``(k, m)`` of an affine form ``k·arg + m`` (k None when the form reads another vector)."""
    terms, offset = form
    k = 0.0
    for v, coef in terms:
        if v != arg:
            return None, 0.0
        k += coef
    return k, float(offset)


def _multiple_of(expr: Expr, arg: Vector) -> float | None:
    """``k`` when ``expr`` is ``k · arg`` (an affine form of ``arg`` without offset), else None."""
    form = expr.affine()
    if form is None:
        return None
    k, m = _affine_of(form, arg)
    return k if m == 0.0 else None


def joint_function(expr: Expr, args: tuple[Vector, ...]) -> JointFunction:
    """``expr`` as a function of the G-vectors ``args`` (in this order)."""
    k = len(args)
    position = {v: i for i, v in enumerate(args)}

    def values(u: Array) -> dict[Vector, Array]:
        return {v: u[..., i] for v, i in position.items()}

    def fn(u: Array) -> Array:
        return np.broadcast_to(evaluate_shared(expr, values(u)), u.shape[:-1])

    def grad(u: Array) -> Array:
        vals = values(u)
        with shared_nodes():  # each argument's derivative reads the same nodes (a BatchNorm's u and s)
            return np.stack([np.broadcast_to(expr.derivative(vals, v), u.shape[:-1]) for v in args], axis=-1)

    planes = []
    for terms, offset in expr.kink_planes():
        normal = np.zeros(k)
        for v, c in terms:
            normal[position[v]] += c
        if np.any(normal != 0.0):
            planes.append((normal, float(offset)))
    cone = cone_function(expr, args)
    cone = None if cone is None else cone.without_redundant_steps()
    return JointFunction(k, fn, grad if expr.continuous else None, tuple(planes), expr.hidden_kinks,
                         expr.continuous, ("joint", expr.key, tuple(v.index for v in args)), expr.describe(),
                         None if cone is None or cone.parallel_steps else cone, _form_span(expr, position),
                         _conditionals(expr, args))


def _conditionals(expr: Expr, args: tuple[Vector, ...]) -> tuple[Conditional, ...]:
    """The ways ``expr`` of two G-vectors is a function of one given the other, ``f(p)·h(κq + s(p))``: the
    factors without ``q`` make ``f``; those with ``q`` are functions of ``q`` alone (``s = 0``:
    ``hard_tanh(a)·step(b + 0.3)``, either argument outside), or activations of one sum whose terms with ``q``
    are affine in ``q`` alone (``tanh(relu(a) + c)``: ``a`` outside, the shift ``relu(a)``; its square, the
    diagonal's ``F·F``, has ``h = tanh²``)."""
    factors = expr.factors if isinstance(expr, Prod) else (expr,)
    if len(args) != 2:
        return _form_conditionals(factors, args)
    out = []
    for i in (0, 1):
        p, q = args[i], args[1 - i]
        with_q = [f for f in factors if q in f.args]
        rest = [f for f in factors if q not in f.args]
        outer = None if not rest else activation_of(_product(rest), p)
        # activations of one affine shift of q first (erf(b + 0.2): the registry's erf, whose pairs have closed forms)
        forms = [_shifted(f, q) for f in with_q]
        if all(form is not None for form in forms) and len({(k, s.key) for _, k, s in forms}) == 1:
            _, scale, shift = forms[0]
            inner = activation_of(_product([Apply(act, Var(q)) for act, _, _ in forms]), q)  # of x = κq + s(p)
            out.append(Conditional(i, inner, outer, activation_of(shift, p), scale, _affine_in(shift, p)))
        elif all(p not in f.args for f in with_q):
            out.append(Conditional(i, activation_of(_product(with_q), q), outer))
    return tuple(out) + _form_conditionals(factors, args)


def conditions_on(expr: Expr, candidates: Collection[Vector]) -> bool:
    """``expr`` is separable given one argument or form (:func:`joint_function`'s conditionals) with its inner
    argument one of ``candidates``."""
    args = tuple(v for v in expr.args if v.kind != "scalar")
    return any(args[1 - c.arg if c.other is None else c.other] in candidates for c in _conditionals(expr, args))


def _form_conditionals(factors: tuple[Expr, ...], args: tuple[Vector, ...]) -> tuple[Conditional, ...]:
    """``f(p)·h(κq + αp + c)`` where the factors depend on the arguments through two directions, ``p`` the linear
    form of one (the outer factors, any functions of it), ``q`` an argument with the other direction in the
    plane of ``p`` and ``q``, and that direction's factors activations of one affine expression, ``κq + αp + c``
    in these coordinates: ``relu(a + b − ½)·relu(0.6a + 1.4b)`` (``p = a + b``, ``q = b``), or three arguments
    ``relu(a + b − ½)·relu(0.6a + 0.6b + 0.8c)`` (``q = c``). (Two arguments and ``p`` one of them is
    :func:`_conditionals`' case.) A bias ``b`` in both forms, ``g = Ux + b`` in ``relu(g − ½)·relu(0.6g + 0.8b)``,
    is then the inner argument itself: one variable at both points, whose pairs are closed forms
    (:func:`~netsor.gaussian.separable.conditionings`), where they were four-dimensional nested quadrature."""
    groups: list[tuple[Array, list[Expr]]] = []
    for factor in factors:
        direction = _direction(factor, args)
        if direction is None:
            return ()
        for d, members in groups:
            if _parallel(d, direction):
                members.append(factor)
                break
        else:
            groups.append((direction, [factor]))
    if len(groups) != 2:
        return ()
    k = len(args)
    out = []
    for (d, outer), (_, inner) in (groups, groups[::-1]):
        affine = _one_affine(inner, args)
        if affine is None or (k == 2 and not np.all(d != 0.0)):
            continue
        acts, c, const = affine
        outer_act = _along(_product(outer), args, d)
        for j in range(k):  # q = u_j, with c = α d + κ e_j
            m = next((m for m in range(k) if m != j and d[m] != 0.0), None)
            if m is None:
                continue
            slope = c[m] / d[m]
            rest = c - slope * d
            scale, rest[j] = rest[j], 0.0
            if not (abs(scale) > 1e-12 * float(np.max(np.abs(c))) and np.all(np.abs(rest) <= 1e-13 * np.abs(c).max())):
                continue
            p = args[m]  # a placeholder for p in the shift's expression
            shift = Sum(const, ((slope, Var(p)),))
            inner_act = activation_of(_product([Apply(act, Var(args[j])) for act in acts]), args[j])
            out.append(Conditional(m, inner_act, outer_act, activation_of(shift, p), scale, (slope, const),
                                   form=tuple(float(x) for x in d), other=j))
    return tuple(out)


def _direction(expr: Expr, args: tuple[Vector, ...]) -> Array | None:
    """The coefficients (k,) of the one linear form through which alone ``expr`` depends on ``args`` (its input
    forms all parallel), else None."""
    forms = [_coefficients(form, args) for form in expr.input_forms()]
    if not forms or not all(np.any(f != 0.0) and _parallel(forms[0], f) for f in forms):
        return None  # (a form of other vectors than ``args``, e.g. a scalar, has no direction among them)
    return forms[0]


def _coefficients(form: tuple, args: tuple[Vector, ...]) -> Array:
    terms = dict(form[0])
    return np.array([terms.get(v, 0.0) for v in args], dtype=float)


def _parallel(a: Array, b: Array) -> bool:
    """Two vectors on one line (to rounding)."""
    return bool(np.all(np.abs(np.outer(a, b) - np.outer(b, a)) <= 1e-13 * float(np.linalg.norm(a) * np.linalg.norm(b))))


def _one_affine(factors: list[Expr], args: tuple[Vector, ...]) -> tuple[list[Activation], Array, float] | None:
    """``([h₁, h₂, ...], c, c₀)`` when every factor is an activation of the same affine expression ``c·u + c₀``
    (or that expression itself), else None."""
    acts, key, form = [], None, None
    for factor in factors:
        act, child = (factor.act, factor.child) if isinstance(factor, Apply) else (identity, factor)
        affine = child.affine()
        if affine is None or (key is not None and child.key != key):
            return None
        acts, key, form = acts + [act], child.key, affine
    assert form is not None
    return acts, _coefficients(form, args), float(form[1])


def _along(expr: Expr, args: tuple[Vector, ...], direction: Array) -> Activation:
    """``expr`` — a function of ``args`` through ``p = direction·u`` alone — as a function of ``p``: evaluated on
    the line ``u = p·direction/|direction|²``, its kinks where that line crosses its kink planes."""
    w = direction / float(direction @ direction)
    kinks = []
    for form, offset in expr.kink_planes():
        slope = float(_coefficients((form, offset), args) @ w)
        if slope != 0.0:
            kinks.append(-offset / slope)

    def on_line(x: Array) -> dict[Vector, Array]:
        return {v: x * w[k] for k, v in enumerate(args)}

    def fn(x: Array) -> Array:
        return np.broadcast_to(evaluate_shared(expr, on_line(x)), np.shape(x))

    def deriv(x: Array) -> Array:
        values = on_line(x)
        with shared_nodes():
            return np.broadcast_to(sum(w[k] * expr.derivative(values, v) for k, v in enumerate(args)), np.shape(x))

    return Activation(name=f"{expr.describe()} along {tuple(direction)}", fn=fn, deriv=deriv, smooth=expr.smooth,
                      kinks=tuple(sorted(set(kinks))), kinks_known=not expr.hidden_kinks,
                      continuous=expr.continuous, registered=False, exact_slope=False,
                      cache_key=("along", expr.key, tuple(v.index for v in args), w.tobytes()))


def _affine_in(expr: Expr, p: Vector) -> tuple[float, float] | None:
    """``(slope, intercept)`` when ``expr`` is affine in ``p`` alone, else None."""
    form = expr.affine()
    if form is None or any(v is not p for v, _ in form[0]):
        return None
    return sum(c for _, c in form[0]), float(form[1])


def _product(factors: list[Expr]) -> Expr:
    return factors[0] if len(factors) == 1 else Prod(tuple(factors))


def _shifted(expr: Expr, q: Vector) -> tuple[Activation, float, Expr] | None:
    """``(h, κ, s)`` when ``expr = h(κq + s)`` with ``s`` free of ``q`` (an activation of a sum whose terms
    with ``q`` are affine in ``q`` alone), else None."""
    if not (isinstance(expr, Apply) and isinstance(expr.child, Sum)):
        return None
    scale, const, others = 0.0, expr.child.const, []
    for coef, term in expr.child.terms:
        if q not in term.args:
            others.append((coef, term))
            continue
        form = term.affine()
        if form is None or len(form[0]) != 1:
            return None
        scale += coef * form[0][0][1]
        const += coef * form[1]
    if scale == 0.0:
        return None
    return expr.act, scale, Sum(const, tuple(others))


#: Singular values below this share of the largest leave the span of a function's input forms.
_FORM_RANK_TOL = 1e-13


def _form_span(expr: Expr, position: dict[Vector, int]) -> Array | None:
    """Orthonormal columns (k, d) spanning the linear forms through which alone ``expr`` depends on
    its k arguments (:meth:`~netsor.ir.expr.Expr.input_forms`), or None when they span all k."""
    k = len(position)
    columns = []
    for terms, _ in expr.input_forms():
        column = np.zeros(k)
        for v, c in terms:
            column[position[v]] += c
        columns.append(column)
    if len(columns) < 1:
        return None
    U, sv, _ = np.linalg.svd(np.stack(columns, axis=1), full_matrices=False)
    d = int(np.sum(sv > _FORM_RANK_TOL * sv[0]))
    return U[:, :d] if 0 < d < k else None


def cone_function(expr: Expr, args: tuple[Vector, ...]) -> ConeFunction | None:
    """``expr`` as a :class:`~netsor.gaussian.orthant.ConeFunction` of ``args`` (sums and products of
    constants, G-vectors, and relu / step / abs / identity / erf / gelu of linear forms without
    offset), or None."""
    k = len(args)
    if isinstance(expr, Const):
        return ConeFunction(np.zeros((0, k)), ((expr.value, (), ()),) if expr.value != 0.0 else ())
    form = expr.affine()
    if form is not None and form[1] == 0.0:
        return ConeFunction(_normal(form[0], args)[None], ((1.0, (0,), ()),))
    if isinstance(expr, Sum):
        out = cone_function(Const(expr.const), args)
        for coef, term in expr.terms:
            part = cone_function(term, args) if out is not None else None
            if part is None:
                return None
            out = out.plus(part.with_terms(tuple((coef * c, p, s) for c, p, s in part.terms)))
        return out
    if isinstance(expr, Prod):
        out = cone_function(Const(1.0), args)
        for factor in expr.factors:
            part = cone_function(factor, args) if out is not None else None
            if part is None:
                return None
            out = out.times(part)
        return out
    if isinstance(expr, Apply):
        inner = expr.child.affine()
        if inner is None and expr.act.key in _PIECES:
            return _of_piecewise_linear(expr.act.key, cone_function(expr.child, args))
        if inner is None or inner[1] != 0.0 or not inner[0]:
            return None
        n = _normal(inner[0], args)[None]
        if expr.act.key in _PIECES:
            return ConeFunction(n, _PIECES[expr.act.key])
        # normal-CDF gates are steps smoothed by a private Gaussian noise ε:
        # erf(x) = 2 P(x + ε > 0) − 1 with Var ε = 1/2; gelu(x) = x Φ(x) = x P(x + ε > 0), Var ε = 1
        if expr.act.key == erf.key:
            return ConeFunction(n, ((2.0, (), (0,)), (-1.0, (), ())), noise=np.array([0.5]), labels=np.array([1]))
        if expr.act.key == gelu.key:
            return ConeFunction(np.vstack([n, n]), ((1.0, (0,), (1,)),), noise=np.array([0.0, 1.0]),
                                labels=np.array([0, 1]))
    return None


#: identity, relu, step and |·| of one form as cone terms (coef, poly, steps) over form 0.
_PIECES = {identity.key: ((1.0, (0,), ()),), relu.key: ((1.0, (0,), (0,)),), step.key: ((1.0, (), (0,)),),
           abs_.key: ((2.0, (0,), (0,)), (-1.0, (0,), ()))}
#: Most distinct kinks inside a piecewise-linear argument (its 2^m sign patterns are expanded).
_MAX_INNER_KINKS = 3


def _of_piecewise_linear(act: Hashable, child: ConeFunction | None) -> ConeFunction | None:
    """``act(child)`` (``act`` the key of step, relu or |·|) for ``child`` piecewise linear and positively
    homogeneous — a sum of linear forms times plain steps (``g₁ − relu(g₂)``, ``max(a, b)``) — as a cone
    function: on each sign pattern σ of the ``m ≤ _MAX_INNER_KINKS`` step forms inside, ``child`` is one
    linear form ``L_σ``, so ``act(child) = Σ_σ Π_{s>0} 1{s > 0} Π_{s<0} (1 − 1{s > 0}) · act(L_σ)``. The
    jump of ``step(g₁ − relu(g₂))`` on the half-lines g₁ = g₂ > 0 and g₁ = 0 > g₂, and the kinks of
    ``|g − |g − h|/2|`` at other levels, become cones, exact, where the quadrature and QMC rules saw hidden
    kinks (1e-3 out of reach) or took the kink planes of the pieces (bound 2.5e-6 there, 5e-14 as cones).
    The pieces are linearly dependent (``L₋ = L₊ + q``): the cone moments amplify rounding per form."""
    if child is None or any(len(poly) != 1 for _, poly, _ in child.terms) or np.any(child.noise > 0):
        return None
    inner = sorted({q for _, _, steps in child.terms for q in steps})
    if len(inner) > _MAX_INNER_KINKS:
        return None
    k = child.dim
    one = ConeFunction(np.zeros((0, k)), ((1.0, (), ()),))
    out = ConeFunction(np.zeros((0, k)), ())
    for signs in product((True, False), repeat=len(inner)):
        positive = {q for q, up in zip(inner, signs, strict=True) if up}
        normal = sum((c * child.normals[poly[0]] for c, poly, steps in child.terms if set(steps) <= positive),
                     np.zeros(k))
        if not np.any(normal):
            continue  # act(0) = 0 for step (step(0) = 0), relu and |·|
        piece = ConeFunction(normal[None], _PIECES[act])
        for q, up in zip(inner, signs, strict=True):
            gate = ConeFunction(child.normals[q][None], ((1.0, (), (0,)),))
            piece = piece.times(gate if up else one.plus(gate.with_terms(((-1.0, (), (0,)),))))
        out = out.plus(piece)
    return out


def _normal(terms: tuple[tuple[Vector, float], ...], args: tuple[Vector, ...]) -> Array:
    """The coefficients of a linear form over ``args`` (shape (len(args),))."""
    out = np.zeros(len(args))
    for v, c in terms:
        out[args.index(v)] += c
    return out


def shifted(act: Activation, offset: float) -> Activation:
    """``x ↦ act(x + offset)`` (kinks shifted by −offset)."""
    return Activation(name=f"{act.name}(·{offset:+g})", fn=lambda x: act.fn(x + offset),
                      deriv=lambda x: act.deriv(x + offset), smooth=act.smooth,
                      kinks=tuple(k - offset for k in act.kinks), kinks_known=act.kinks_known,
                      continuous=act.continuous, registered=False, cache_key=("shift", act.key, offset),
                      exact_slope=act.exact_slope,
                      value_error=None if act.value_error is None else lambda x: act.value_error(x + offset))
