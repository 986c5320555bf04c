"""Coordinatewise functions of G-vectors: the φ of a NonLin line, as an expression tree.

Nodes: :class:`Var` (a G-vector), :class:`Const`, :class:`Apply` (a one-argument activation
of a sub-expression), :class:`Sum` (``c₀ + Σ cₖ eₖ``), :class:`Prod` (``Π eₖ``),
:class:`BatchNormalized` (one output of BatchNorm across a batch of sub-expressions) and
:class:`Opaque` (a user function the tracer could not see through). Keeping the structure
lets the infinite-width interpreter

* expand ``E[h h']`` bilinearly over the *monomials* of :func:`expand` (products of atoms);
* factorise expectations over structurally independent factors (``relu(g₁)·relu(g₂)`` of
  independent ``g₁, g₂`` is a product of two arc-cosine kernels);
* use the one-argument rules (closed forms, Mehler series) for any function of one G-vector
  (``relu(relu(g))``, ``tanh(g)·g``);
* split quadrature panels exactly at kinks: an activation with kinks applied to an *affine*
  expression is non-smooth on known hyperplanes (:meth:`Expr.kink_planes`);
* bound how errors propagate, from derivatives (:meth:`Expr.derivative`) when the function is
  absolutely continuous (:attr:`Expr.continuous`).

Nodes are immutable; :attr:`Expr.key` identifies an expression by content (vector indices,
activation keys), so equal sub-expressions of different lines are computed once.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

import numpy as np

from netsor.activations import Activation, identity, step
from netsor.activations.registry import FunctionIdentity, call_user_function, partial_difference, relative_step
from netsor.activations.segments import linear_segments
from netsor.errors import NumericalError, UnsupportedError

if TYPE_CHECKING:
    from netsor.ir.variables import Vector

Array = np.ndarray
Key = tuple[Any, ...]
#: An affine function ``Σ coef[v] · v + offset`` of G-vectors.
AffineForm = tuple[tuple[tuple["Vector", float], ...], float]
#: ``(lo, hi, lo reached, hi reached)``: bounds of an expression's values (:meth:`Expr.image`).
Image = tuple[float, float, bool, bool]
_ANY_REAL: Image = (-np.inf, np.inf, False, False)


def _excludes_zero(image: Image) -> bool:
    """The values bounded by ``image`` are never 0."""
    lo, hi, lo_hit, hi_hit = image
    return lo > 0.0 or (lo == 0.0 and not lo_hit) or hi < 0.0 or (hi == 0.0 and not hi_hit)
#: Products of sums are distributed into monomials while they stay this small.
EXPANSION_LIMIT = 64
#: Values of a jump's argument within this many ulps of its rounding scale are on the jump
#: (:meth:`Apply._argument`).
_JUMP_ULPS = 16
_EPS = float(np.finfo(float).eps)


class Expr:
    """Base class of expression nodes (frozen dataclasses)."""

    def children(self) -> tuple[Expr, ...]:
        return ()

    @cached_property
    def args(self) -> tuple[Vector, ...]:
        """The distinct G-vectors the expression depends on, in first-use order."""
        seen: dict[Vector, None] = {}
        for child in self.children():
            seen.update(dict.fromkeys(child.args))
        return tuple(seen)

    @cached_property
    def key(self) -> Key:
        return self._key()

    def _key(self) -> Key:
        raise NotImplementedError

    def evaluate(self, values: Mapping[Vector, Array]) -> Array:
        """The expression coordinatewise, given arrays (broadcastable) for every argument."""
        raise NotImplementedError

    def rounding_scale(self, values: Mapping[Vector, Array]) -> Array:
        """A magnitude to which the rounding of :meth:`evaluate` is relative: ``|value|`` for a
        leaf, ``|c₀| + Σ |cₖ| · scaleₖ`` for a sum (``g + relu(h − g) − h`` is ``±1 ulp`` of ``|g|``
        where it is 0 in exact arithmetic, not of its own value)."""
        return np.abs(self.evaluate(values))

    def derivative(self, values: Mapping[Vector, Array], wrt: Vector) -> Array:
        """``∂/∂wrt`` almost everywhere (finite differences inside opaque functions)."""
        raise NotImplementedError

    @property
    def continuous(self) -> bool:
        """Absolutely continuous in every argument (its a.e. derivative is its weak derivative)."""
        return all(c.continuous for c in self.children())

    @property
    def smooth(self) -> bool:
        """Analytic in its arguments."""
        return all(c.smooth for c in self.children())

    def affine(self) -> AffineForm | None:
        """``(((v, coef), ...), offset)`` when the expression is affine in its arguments."""
        return None

    def input_forms(self) -> tuple[AffineForm, ...]:
        """Affine forms of the arguments through which alone the expression depends on them
        (``|b − clip(g + h)|`` is a function of ``b`` and ``g + h``): the largest affine
        subexpressions, found top-down; every node depends on the vectors through its children."""
        form = self.affine()
        if form is not None:
            return (form,) if form[0] else ()
        return tuple(f for child in self.children() for f in child.input_forms())

    def kink_planes(self) -> tuple[AffineForm, ...]:
        """Hyperplanes ``Σ coef·v + offset = 0`` where the expression may be non-smooth."""
        return _distinct([p for child in self.children() for p in child.kink_planes()])

    def jump_planes(self) -> tuple[AffineForm, ...]:
        """Hyperplanes ``Σ coef·v + offset = 0`` on which the expression may jump: the kinks of its
        discontinuous activations (``step``) at known affine arguments (a jump elsewhere — of a
        non-affine argument, inside an opaque function — is not listed)."""
        return _distinct([p for child in self.children() for p in child.jump_planes()])

    def linear_pieces(self) -> tuple[AffineForm, ...] | None:
        """Affine forms that the expression equals on the cells between its kink planes (it is
        piecewise linear: ``g + relu(h) + 1`` is ``g + 1`` or ``g + h + 1``), or None when it is not."""
        form = self.affine()
        return None if form is None else (form,)

    def image(self) -> Image:
        """Bounds ``(lo, hi, lo reached, hi reached)`` of the expression's values (``lo ≤ value ≤ hi``,
        equality only where flagged; any real unless known: constants, activations with a known
        :attr:`~netsor.activations.Activation.image`, and sums of them)."""
        return _ANY_REAL

    def zero_planes(self) -> tuple[AffineForm, ...] | None:
        """Hyperplanes that contain the boundary of the expression's zero set, or None when it is
        not known to lie on hyperplanes. Then a kink at 0 of ``ψ(expr)`` lies on them:
        ``relu(g·tanh(b))`` is smooth off ``{g = 0} ∪ {b = 0}``; an expression that is never 0
        (``(1 + erf x)/2``) has none."""
        if _excludes_zero(self.image()):
            return ()
        form = self.affine()
        if form is None:
            return None
        return (form,) if form[0] else ()

    @property
    def hidden_kinks(self) -> bool:
        """True when the expression may be non-smooth off the hyperplanes of :meth:`kink_planes`
        (an activation with kinks of a non-affine argument, an opaque function)."""
        return any(c.hidden_kinks for c in self.children())

    @cached_property
    def selects(self) -> bool:
        """A combination of steps with integer coefficients (``step(a)``, ``1 − step(a)``, ``step(a)·step(b)``):
        its values are exact integers, so where it is 0 it is exactly 0, and a product with it is 0 there
        whatever its other factors are (:meth:`Prod.evaluate`) — as ``np.where`` ignores the branch it does not
        select: ``where(g > 0, sqrt(g), 0)`` is ``step(g)·sqrt(g)``, 0 and not NaN for ``g < 0``."""
        return False

    @cached_property
    def total(self) -> bool:
        """Finite wherever its arguments are: no function with a singular point (log, sqrt, 1/x, their
        derivatives: discontinuous and unbounded at a declared kink) is applied inside (a user's φ without
        declared kinks is taken to be total)."""
        return all(c.total for c in self.children())

    def map_vectors(self, f: Callable[[Vector], Vector]) -> Expr:
        """The same expression over other G-vectors (program transforms)."""
        raise NotImplementedError

    def describe(self) -> str:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.describe()}>"


_SHARED = threading.local()


@contextmanager
def shared_nodes(known: Mapping[Key, Array] | None = None) -> Iterator[None]:
    """Within the block (on this thread), every distinct activation, function or BatchNorm node (by
    content) is evaluated once — for one set of values: every evaluation and derivative inside must
    read the same ``values``. Traced code often repeats a subexpression (the GRU's update gate
    appears in both terms of its state update), a gradient differentiates the same nodes once per
    argument, and those nodes are the costly ones. ``known``: values of whole subexpressions (by
    key) for those same ``values`` — a NonLin's expression inlines those of the H-vectors it reads,
    whose values the forward executor holds."""
    previous = getattr(_SHARED, "memo", None), getattr(_SHARED, "known", None)
    _SHARED.memo = dict(known) if known else {}
    # sums and products look a value up only when some were given: their keys are deep tuples, hashed anew each time
    _SHARED.known = dict(known) if known else None
    try:
        yield
    finally:
        _SHARED.memo, _SHARED.known = previous


def opaque_nodes(expr: Expr) -> list[Opaque]:
    """The opaque user functions inside ``expr``, each once (by key), outermost first."""
    found: dict[Key, Opaque] = {}
    stack, seen = [expr], set()
    while stack:
        e = stack.pop()
        if id(e) in seen:  # expressions share subtrees (a recurrence inlines every earlier step)
            continue
        seen.add(id(e))
        if isinstance(e, Opaque):
            found.setdefault(e.key, e)
        stack.extend(reversed(e.children()))
    return list(found.values())


def evaluate_shared(expr: Expr, values: Mapping[Vector, Array], known: Mapping[Key, Array] | None = None) -> Array:
    """``expr.evaluate(values)`` with every distinct costly node evaluated once (:func:`shared_nodes`), and the
    subexpressions in ``known`` (by key) taken from it."""
    with shared_nodes(known):
        return expr.evaluate(values)


def _known(key: Key) -> Array | None:
    """The value of the subexpression ``key`` given to :func:`shared_nodes`, if any (sums and products are not
    memoised — they are cheap — but a recurrence's state is a sum that inlines every earlier step)."""
    known = getattr(_SHARED, "known", None)
    return None if known is None else known.get(key)


def _once(key: Key, compute: Callable[[], Any]) -> Any:
    """``compute()``, memoised by the content ``key`` inside :func:`shared_nodes`."""
    memo = getattr(_SHARED, "memo", None)
    if memo is None:
        return compute()
    if key not in memo:
        memo[key] = compute()
    return memo[key]


def _bounded(image: Image) -> bool:
    return bool(np.isfinite(image[0]) and np.isfinite(image[1]))


def _times(a: Image, b: Image) -> Image:
    """Bounds of ``x·y`` for ``x`` in ``a`` and ``y`` in ``b`` (dependent or not): the extremes of a
    bilinear function lie at the corners; a corner is reached where both its ends may be, and 0 also
    where either factor may be 0. An end 0 times an infinite one is 0 (values are finite: the other
    corner of the infinite end bounds what lies beyond, ``relu(u)·exp(v) ≥ 0``)."""
    corners = [(0.0 if x == 0.0 or y == 0.0 else x * y, x_hit and y_hit) for x, x_hit in ((a[0], a[2]), (a[1], a[3]))
               for y, y_hit in ((b[0], b[2]), (b[1], b[3]))]
    zero = not (_excludes_zero(a) and _excludes_zero(b))

    def reached(v: float) -> bool:
        return bool(np.isfinite(v)) and ((v == 0.0 and zero) or any(hit for c, hit in corners if c == v))

    lo, hi = min(v for v, _ in corners), max(v for v, _ in corners)
    return lo, hi, reached(lo), reached(hi)


def _square(image: Image) -> Image:
    """Bounds of ``x²`` for ``x`` in ``image`` (0 may be reached where the image straddles it)."""
    lo, hi, lo_hit, hi_hit = image
    if lo >= 0.0:
        return lo * lo, hi * hi, lo_hit, hi_hit
    if hi <= 0.0:
        return hi * hi, lo * lo, hi_hit, lo_hit
    top, top_hit = max((lo * lo, lo_hit), (hi * hi, hi_hit))
    return 0.0, top, True, top_hit


def _same_plane(p: AffineForm, q: AffineForm) -> bool:
    """The two affine forms vanish on the same hyperplane: ``q = λ p`` for some ``λ ≠ 0`` (exactly, in floats)."""
    (p_terms, p_offset), (q_terms, q_offset) = p, q
    pc, qc = dict(p_terms), dict(q_terms)
    if not pc or set(pc) != set(qc):
        return False
    v = next(iter(pc))
    ratio = qc[v] / pc[v]
    return ratio != 0.0 and all(qc[u] == ratio * pc[u] for u in pc) and q_offset == ratio * p_offset


def _plane_key(plane: AffineForm) -> Key:
    terms, offset = plane
    return (tuple((v.index, c) for v, c in terms), offset)


#: Most linear pieces followed through a piecewise-linear expression (beyond: its kinks are hidden).
_MAX_PIECES = 16


def _distinct(forms: list[AffineForm]) -> tuple[AffineForm, ...]:
    return tuple({_plane_key(f): f for f in forms}.values())


def _combined(left: AffineForm, right: AffineForm, coef: float) -> AffineForm:
    """``left + coef · right``."""
    acc = dict(left[0])
    for v, c in right[0]:
        acc[v] = acc.get(v, 0.0) + coef * c
    return tuple((v, c) for v, c in acc.items() if c != 0.0), left[1] + coef * right[1]


def _linear_segments(act: Activation) -> tuple[tuple[float, float], ...] | None:
    """:func:`~netsor.activations.segments.linear_segments` of a registered φ (a user's φ: values at a few
    points say nothing of the rest), else None."""
    return linear_segments(act) if act.registered else None


@dataclass(frozen=True, eq=False, repr=False)
class Var(Expr):
    """A G-vector."""

    vector: Vector

    @cached_property
    def args(self) -> tuple[Vector, ...]:
        return (self.vector,)

    def _key(self) -> Key:
        return ("var", self.vector.index)

    def evaluate(self, values: Mapping[Vector, Array]) -> Array:
        return np.asarray(values[self.vector], dtype=float)

    def derivative(self, values: Mapping[Vector, Array], wrt: Vector) -> Array:
        return np.full(np.shape(values[self.vector]), 1.0 if wrt is self.vector else 0.0)

    def affine(self) -> AffineForm:
        return ((self.vector, 1.0),), 0.0

    def map_vectors(self, f: Callable[[Vector], Vector]) -> Expr:
        return Var(f(self.vector))

    def describe(self) -> str:
        return self.vector.name


@dataclass(frozen=True, eq=False, repr=False)
class Const(Expr):
    value: float

    def _key(self) -> Key:
        return ("const", self.value)

    def evaluate(self, values: Mapping[Vector, Array]) -> Array:
        return np.asarray(self.value, dtype=float)

    def derivative(self, values: Mapping[Vector, Array], wrt: Vector) -> Array:
        return np.zeros(())

    def affine(self) -> AffineForm:
        return (), self.value

    def image(self) -> Image:
        return self.value, self.value, True, True

    @cached_property
    def selects(self) -> bool:
        return float(self.value).is_integer()

    def map_vectors(self, f: Callable[[Vector], Vector]) -> Expr:
        return self

    def describe(self) -> str:
        return f"{self.value:g}"


@dataclass(frozen=True, eq=False, repr=False)
class Apply(Expr):
    """``act(child)``."""

    act: Activation
    child: Expr

    def children(self) -> tuple[Expr, ...]:
        return (self.child,)

    def _key(self) -> Key:
        return ("apply", self.act.key, self.child.key)

    def evaluate(self, values: Mapping[Vector, Array]) -> Array:
        return _once(self.key, lambda: self._apply(self._argument(values, not self.act.continuous)))

    def _argument(self, values: Mapping[Vector, Array], jumps: bool) -> Array:
        """The child's values; where the function evaluated there jumps at φ's kinks (``jumps``: φ
        itself for step or sign, φ' for relu or abs), those within rounding of a kink are put on it.
        In exact arithmetic ``g + relu(h − g) − h`` is 0 wherever ``h > g`` (it is ``relu(g − h)``), but
        as evaluated it is ±1 ulp there, so ``step`` of it flickered between 0 and 1 on a whole region:
        a ``where(max(h, g) > h, …)`` of a random program had a kernel 44 % off, outside its bound. On
        the kink, φ (φ') takes its own value there (``step(0) = 0``); a child that merely crosses a
        kink meets that band on a set of measure zero."""
        inner = self.child.evaluate(values)
        if not (jumps and self._may_cancel):
            return inner
        band = _JUMP_ULPS * _EPS * self.child.rounding_scale(values)
        inner = np.array(inner, dtype=float)
        for k in self.act.kinks:
            inner[np.abs(inner - k) <= band + _JUMP_ULPS * _EPS * abs(k)] = k
        return inner

    @cached_property
    def _may_cancel(self) -> bool:
        """φ has kinks and its argument may cancel to rounding on a whole region: it is not an affine
        form of one vector (``g``, ``2g − 1``: one or two roundings, a crossing of the kink only)."""
        if not self.act.kinks:
            return False
        form = self.child.affine()
        return form is None or len(form[0]) > 1

    def rounding_scale(self, values: Mapping[Vector, Array]) -> Array:
        # once per node (inside shared_nodes): every kinked Apply above reads its children's scales, which
        # recursed anew at each level (a clip of a where of sin: 40 % of a traced NTK's time)
        return _once(("rounding scale", self.key), lambda: self._rounding_scale(values))

    def _rounding_scale(self, values: Mapping[Vector, Array]) -> Array:
        value = np.abs(self.evaluate(values))
        if not (self.act.registered and self.act.continuous):
            return value  # a jump's value is exact (0 or 1 off the band); a user's φ: its value alone
        with np.errstate(all="ignore"):
            slope = np.abs(np.asarray(self.act.deriv(self.child.evaluate(values)), dtype=float))
            scaled = value + slope * self.child.rounding_scale(values)
        return np.where(np.isfinite(scaled), scaled, value)

    def _apply(self, inner: Array) -> Array:
        if self.act.registered:
            return np.asarray(self.act.fn(inner), dtype=float)
        return call_user_function(self.act.fn, (inner,), self.act.name)

    def derivative(self, values: Mapping[Vector, Array], wrt: Vector) -> Array:
        inner = self._argument(values, True)  # φ' jumps at φ's kinks
        d = (np.asarray(self.act.deriv(inner), dtype=float) if self.act.registered
             else call_user_function(self.act.deriv, (inner,), self.act.name + "'"))
        # where the argument does not move, neither does φ of it, whatever φ' there: √relu(g) for g < 0 is
        # sqrt'(0)·step(g) = inf·0 (a finite network's NTK of it was refused as an overflow)
        inner_d = self.child.derivative(values, wrt)
        return np.where(inner_d == 0.0, 0.0, d * inner_d)

    @property
    def continuous(self) -> bool:
        return (self.act.continuous or self._kinks_unreached) and self.child.continuous

    @property
    def smooth(self) -> bool:
        return (self.act.smooth or self._kinks_unreached) and self.child.smooth

    @cached_property
    def _reached_kinks(self) -> tuple[float, ...]:
        """φ's kinks that the child's values may reach (:meth:`image`): one outside it is never met —
        ``log1p(exp g)`` (log1p's singularity at −1), ``sqrt(1 + g²)``, ``1/(1 + g²)`` are analytic, and
        their products with functions of another vector have exact rules (Hermite tables and the Mehler
        series) instead of being integrated as functions with hidden kinks (QMC: 8e-4 relative)."""
        lo, hi, lo_hit, hi_hit = self.child.image()
        return tuple(k for k in self.act.kinks
                     if (lo < k or (k == lo and lo_hit)) and (k < hi or (k == hi and hi_hit)))

    @property
    def _kinks_unreached(self) -> bool:
        """φ is non-smooth at its declared kinks only and the child reaches none of them (a φ whose
        kinks are not declared — a custom one — is not known to be smooth anywhere)."""
        return bool(self.act.kinks) and not self._reached_kinks

    def kink_planes(self) -> tuple[AffineForm, ...]:
        return _distinct([*self.child.kink_planes(), *(self._own_kink_planes() or ())])

    def jump_planes(self) -> tuple[AffineForm, ...]:
        own = (self._own_kink_planes() or ()) if not self.act.continuous else ()
        return _distinct([*self.child.jump_planes(), *own])

    def _own_kink_planes(self) -> tuple[AffineForm, ...] | None:
        """Where φ's kinks put the expression's own non-smooth points: ``child = k`` for an
        affine child, and for each linear piece of a piecewise-linear one (``clip(g + relu(h))``:
        ``g ± 1 = 0`` and ``g + h ± 1 = 0``, hidden kinks before); the boundary of the child's zero
        set for kinks at 0 only (the level set ``child = 0`` of a product of affine factors and
        functions of them is a union of hyperplanes; other level sets are curved); None when not on
        known hyperplanes."""
        kinks = self._reached_kinks
        if not kinks:
            return ()
        pieces = self.child.linear_pieces()
        if pieces is not None:
            return tuple((terms, offset - k) for terms, offset in pieces for k in kinks if terms)
        if all(k == 0.0 for k in kinks):
            return self.child.zero_planes()
        return None

    def linear_pieces(self) -> tuple[AffineForm, ...] | None:
        segments = _linear_segments(self.act)
        pieces = None if segments is None else self.child.linear_pieces()
        if pieces is None or len(pieces) * len(segments) > _MAX_PIECES:
            return None
        return _distinct([(tuple((v, a * c) for v, c in terms if a * c != 0.0), a * offset + b)
                          for terms, offset in pieces for a, b in segments])

    def image(self) -> Image:
        return self.act.image or _ANY_REAL

    def zero_planes(self) -> tuple[AffineForm, ...] | None:
        zeros = self.act.zeros
        if zeros is None:
            return None
        if all(z == 0.0 for z in zeros):  # φ(c) vanishes where c does (or nowhere)
            return self.child.zero_planes() if zeros else ()
        form = self.child.affine()
        if form is None:
            return None
        return tuple((form[0], form[1] - z) for z in zeros) if form[0] else ()

    @cached_property
    def selects(self) -> bool:
        return self.act.key == step.key

    @cached_property
    def total(self) -> bool:
        # a discontinuous, unbounded φ at a kink its argument reaches: log, sqrt, 1/x, and their derivatives
        singular = not self.act.continuous and not _bounded(self.image()) and bool(self._reached_kinks)
        return not singular and self.child.total

    @property
    def hidden_kinks(self) -> bool:
        if self.child.hidden_kinks:
            return True
        if not self.act.registered and not self.act.smooth and not self.act.kinks:
            return True  # a custom φ whose kinks nobody told us
        return self._own_kink_planes() is None

    def map_vectors(self, f: Callable[[Vector], Vector]) -> Expr:
        return Apply(self.act, self.child.map_vectors(f))

    def describe(self) -> str:
        return f"{self.act.name}({self.child.describe()})"


@dataclass(frozen=True, eq=False, repr=False)
class Sum(Expr):
    """``const + Σ coef · term``."""

    const: float
    terms: tuple[tuple[float, Expr], ...]

    def children(self) -> tuple[Expr, ...]:
        return tuple(t for _, t in self.terms)

    def _key(self) -> Key:
        return ("sum", self.const, tuple((c, t.key) for c, t in self.terms))

    def evaluate(self, values: Mapping[Vector, Array]) -> Array:
        known = _known(self.key)
        if known is not None:
            return known
        out: Any = self.const
        for coef, term in self.terms:
            out = out + coef * term.evaluate(values)
        return np.asarray(out, dtype=float)

    def rounding_scale(self, values: Mapping[Vector, Array]) -> Array:
        out: Any = abs(self.const)
        for coef, term in self.terms:
            out = out + abs(coef) * term.rounding_scale(values)
        return np.asarray(out, dtype=float)

    def derivative(self, values: Mapping[Vector, Array], wrt: Vector) -> Array:
        out: Any = 0.0
        for coef, term in self.terms:
            if wrt in term.args:
                out = out + coef * term.derivative(values, wrt)
        return np.asarray(out, dtype=float)

    def affine(self) -> AffineForm | None:
        acc: dict[Vector, float] = {}
        offset = self.const
        for coef, term in self.terms:
            form = term.affine()
            if form is None:
                return None
            for v, c in form[0]:
                acc[v] = acc.get(v, 0.0) + coef * c
            offset += coef * form[1]
        return tuple((v, c) for v, c in acc.items() if c != 0.0), offset

    def image(self) -> Image:
        lo, hi, lo_hit, hi_hit = self.const, self.const, True, True
        for coef, term in self.terms:
            t_lo, t_hi, t_lo_hit, t_hi_hit = term.image()
            if coef < 0.0:
                t_lo, t_hi, t_lo_hit, t_hi_hit = t_hi, t_lo, t_hi_hit, t_lo_hit
            # a bound of the sum is reached only if every term's is (possibly not together: "may")
            lo, lo_hit = lo + coef * t_lo, lo_hit and t_lo_hit
            hi, hi_hit = hi + coef * t_hi, hi_hit and t_hi_hit
        if not lo == lo or not hi == hi:  # inf − inf: nothing known
            return _ANY_REAL
        return lo, hi, lo_hit, hi_hit

    def linear_pieces(self) -> tuple[AffineForm, ...] | None:
        pieces: tuple[AffineForm, ...] = ((), self.const),
        for coef, term in self.terms:
            own = term.linear_pieces()
            if own is None or len(pieces) * len(own) > _MAX_PIECES:
                return None
            pieces = _distinct([_combined(left, right, coef) for left in pieces for right in own])
        return pieces

    @cached_property
    def selects(self) -> bool:
        return float(self.const).is_integer() and all(float(c).is_integer() and t.selects for c, t in self.terms)

    def map_vectors(self, f: Callable[[Vector], Vector]) -> Expr:
        return Sum(self.const, tuple((c, t.map_vectors(f)) for c, t in self.terms))

    def describe(self) -> str:
        parts = [t.describe() if c == 1.0 else f"{c:g}*{_wrap(t)}" for c, t in self.terms]
        if self.const != 0.0 or not parts:
            parts.append(f"{self.const:g}")
        return " + ".join(parts)


@dataclass(frozen=True, eq=False, repr=False)
class Prod(Expr):
    """``Π factors``."""

    factors: tuple[Expr, ...]

    def children(self) -> tuple[Expr, ...]:
        return self.factors

    def _key(self) -> Key:
        return ("prod", tuple(sorted((f.key for f in self.factors), key=repr)))

    def evaluate(self, values: Mapping[Vector, Array]) -> Array:
        known = _known(self.key)
        if known is not None:
            return known
        out: Any = 1.0
        for f in self.factors:
            out = out * f.evaluate(values)
        return self._selected(np.asarray(out, dtype=float), values)

    @cached_property
    def _selectors(self) -> tuple[Expr, ...]:
        """The factors that select (:attr:`Expr.selects`), beside one that may not be finite (:attr:`Expr.total`);
        none otherwise (no check on the common path)."""
        if all(f.total for f in self.factors):
            return ()
        return tuple(f for f in self.factors if f.selects)

    def _selected(self, out: Array, values: Mapping[Vector, Array]) -> Array:
        """``out`` with 0 where a selecting factor is 0: a branch of ``np.where`` is not finite where it is not
        selected (``sqrt`` or ``log`` of a negative value, ``1/0``). Looked for only where some value is not
        finite (one summing pass)."""
        with np.errstate(all="ignore"):
            if not self._selectors or np.isfinite(np.sum(out)):
                return out
            chosen = np.ones(out.shape, dtype=bool)
            for f in self._selectors:
                chosen &= np.broadcast_to(f.evaluate(values) != 0.0, out.shape)
        return np.where(chosen, out, 0.0)

    def rounding_scale(self, values: Mapping[Vector, Array]) -> Array:
        out: Any = 1.0
        for f in self.factors:
            out = out * f.rounding_scale(values)
        return self._selected(np.asarray(out, dtype=float), values)

    def derivative(self, values: Mapping[Vector, Array], wrt: Vector) -> Array:
        vals = [f.evaluate(values) for f in self.factors]
        out: Any = 0.0
        for i, f in enumerate(self.factors):
            if wrt in f.args:
                part: Any = f.derivative(values, wrt)
                for j, v in enumerate(vals):
                    if j != i:
                        part = part * v
                out = out + part
        return self._selected(np.asarray(out, dtype=float), values)

    @property
    def continuous(self) -> bool:
        """Also where a bounded factor jumps only on hyperplanes on which another, continuous factor
        vanishes: ``gelu(g)·step(g)``, ``g·step(g)`` (= relu g) are continuous (their weak derivative has no δ:
        ``f δ(ℓ) = 0`` where ``f = 0`` on ``ℓ = 0``), and their kernels Lipschitz, not ½-Hölder, in the correlation."""
        jumping = [f for f in self.factors if not f.continuous]
        if not jumping:
            return True
        if any(f.hidden_kinks or not _bounded(f.image()) for f in jumping):
            return False
        zeros = [p for f in self.factors if f.continuous for p in (f.zero_planes() or ())]
        return all(any(_same_plane(jump, zero) for zero in zeros) for f in jumping for jump in f.jump_planes())

    def image(self) -> Image:
        """The product of the factors' images; a factor met twice is a square (never negative):
        ``1 + g·g`` is never 0, so ``sqrt(1 + g·g)`` and ``1/(1 + g·g)`` meet no kink."""
        count: dict[Key, list[Any]] = {}
        for f in self.factors:
            count.setdefault(f.key, [f, 0])[1] += 1
        out: Image = (1.0, 1.0, True, True)
        for f, n in count.values():
            for part in [_square(f.image())] * (n // 2) + [f.image()] * (n % 2):
                out = _times(out, part)
        return out

    def zero_planes(self) -> tuple[AffineForm, ...] | None:
        planes: dict[Key, AffineForm] = {}
        for factor in self.factors:
            own = factor.zero_planes()
            if own is None:
                return None
            planes.update((_plane_key(p), p) for p in own)
        return tuple(planes.values())

    def map_vectors(self, f: Callable[[Vector], Vector]) -> Expr:
        return Prod(tuple(g.map_vectors(f) for g in self.factors))

    def describe(self) -> str:
        return "*".join(_wrap(f) for f in self.factors)


@dataclass(frozen=True, eq=False, repr=False)
class Opaque(Expr):
    """``fn(*children)``: a vectorised user function the tracer could not see through. ``difference_of``:
    ``(f, i)`` when ``fn`` is ``∂ᵢ f`` by central differences (step ``1e-6·max(1, |operand|)``,
    :mod:`netsor.ir.differentiate`)."""

    fn: Callable[..., Array]
    operands: tuple[Expr, ...]
    name: str
    difference_of: tuple[Expr, int] | None = None
    #: why the tracer could not see through ``fn`` (for messages; not part of the key)
    untraced: str = ""

    def children(self) -> tuple[Expr, ...]:
        return self.operands

    def _key(self) -> Key:
        return ("fn", self.name, FunctionIdentity(self.fn), tuple(c.key for c in self.operands))

    def evaluate(self, values: Mapping[Vector, Array]) -> Array:
        return _once(self.key, lambda: call_user_function(self.fn, tuple(c.evaluate(values) for c in self.operands),
                                                      self.name))

    def derivative(self, values: Mapping[Vector, Array], wrt: Vector) -> Array:
        inner = [c.evaluate(values) for c in self.operands]
        out: Any = 0.0
        for i, c in enumerate(self.operands):
            if wrt not in c.args:
                continue
            out = out + self.partial(tuple(inner), i) * c.derivative(values, wrt)
        return np.asarray(out, dtype=float)

    def partial(self, operands: tuple[Array, ...], i: int) -> Array:
        """``∂ᵢ fn`` at the operands' values by central differences of relative step (almost everywhere:
        :func:`~netsor.activations.registry.partial_difference`)."""
        return partial_difference(lambda *a: call_user_function(self.fn, a, self.name), operands, i,
                                  relative_step(operands[i]))

    @property
    def continuous(self) -> bool:
        return False

    @property
    def smooth(self) -> bool:
        return False

    @property
    def hidden_kinks(self) -> bool:
        return True

    def map_vectors(self, f: Callable[[Vector], Vector]) -> Expr:
        of = None if self.difference_of is None else (self.difference_of[0].map_vectors(f), self.difference_of[1])
        return Opaque(self.fn, tuple(c.map_vectors(f) for c in self.operands), self.name, of, self.untraced)

    def describe(self) -> str:
        return f"{self.name}({', '.join(c.describe() for c in self.operands)})"


@dataclass(frozen=True, eq=False, repr=False)
class BatchNormalized(Expr):
    """``(e_b − ē) / s``: the ``index``-th of the B ``operands`` normalised across them, with
    ``ē = (1/B) Σ_j e_j`` and the population ``s² = (1/B) Σ_j (e_j − ē)²`` (no epsilon).

    Smooth off the set ``s = 0`` (all operands equal), which has measure zero for a batch of
    jointly Gaussian G-vectors whose centred covariance is non-zero; no kink planes.
    ``∂u_b/∂e_j = (δ_bj − 1/B − u_b u_j / B) / s``.
    """

    index: int
    operands: tuple[Expr, ...]

    def children(self) -> tuple[Expr, ...]:
        return self.operands

    def _key(self) -> Key:
        return ("batchnorm", self.index, tuple(c.key for c in self.operands))

    def evaluate(self, values: Mapping[Vector, Array]) -> Array:
        return _batch_normalised(self.operands, values)[0][self.index]

    def derivative(self, values: Mapping[Vector, Array], wrt: Vector) -> Array:
        u, s = _batch_normalised(self.operands, values)
        out: Any = 0.0
        for j, c in enumerate(self.operands):
            if wrt in c.args:
                out = out + _batch_partial(u, s, self.index, j) * c.derivative(values, wrt)
        return np.asarray(out, dtype=float)

    def map_vectors(self, f: Callable[[Vector], Vector]) -> Expr:
        return BatchNormalized(self.index, tuple(c.map_vectors(f) for c in self.operands))

    def describe(self) -> str:
        return f"batchnorm[{self.index}]({', '.join(c.describe() for c in self.operands)})"


@dataclass(frozen=True, eq=False, repr=False)
class BatchNormPartial(Expr):
    """``∂u_b/∂e_j = (δ_bj − 1/B − u_b u_j / B) / s`` of :class:`BatchNormalized` (``b = index``,
    ``j = wrt``): what backward programs (the NTK) of BatchNorm networks multiply gradients by.
    Smooth off ``s = 0``, like the node it differentiates."""

    index: int
    wrt: int
    operands: tuple[Expr, ...]

    def children(self) -> tuple[Expr, ...]:
        return self.operands

    def _key(self) -> Key:
        return ("batchnorm_partial", self.index, self.wrt, tuple(c.key for c in self.operands))

    def evaluate(self, values: Mapping[Vector, Array]) -> Array:
        u, s = _batch_normalised(self.operands, values)
        return _batch_partial(u, s, self.index, self.wrt)

    def derivative(self, values: Mapping[Vector, Array], wrt: Vector) -> Array:
        raise UnsupportedError("second derivatives of BatchNorm (a Netsor⊤ correction through a backward "
                               "program of a BatchNorm network) are not implemented")

    def map_vectors(self, f: Callable[[Vector], Vector]) -> Expr:
        return BatchNormPartial(self.index, self.wrt, tuple(c.map_vectors(f) for c in self.operands))

    def describe(self) -> str:
        return f"∂batchnorm[{self.index}]/∂[{self.wrt}]({', '.join(c.describe() for c in self.operands)})"


#: A batch's spread at or below this multiple of eps times its largest entry is rounding, not data.
NO_SPREAD = 64 * np.finfo(float).eps


def _batch_normalised(operands: tuple[Expr, ...], values: Mapping[Vector, Array]) -> tuple[Array, Array]:
    """All B normalised operands ``u`` (B, ...) and the population standard deviation ``s`` (...)
    (once per batch inside :func:`shared_nodes`: every output and partial of a batch needs them)."""

    def compute() -> tuple[Array, Array]:
        # in place, one operand at a time: ~4B passes over an operand's size instead of ~8B (a stacked
        # copy, |x| and its maximum) — the nested rule evaluates this on millions of nodes per call
        xs = np.broadcast_arrays(*(np.asarray(c.evaluate(values), dtype=float) for c in operands))
        B = len(xs)
        mean = np.add(xs[0], xs[1])
        for x in xs[2:]:
            mean += x
        mean /= B
        centred = np.empty((B, *mean.shape))
        for b, x in enumerate(xs):
            np.subtract(x, mean, out=centred[b, ...])
        var = np.asarray(np.einsum("b...,b...->...", centred, centred))
        var /= B
        # a spread at rounding level (identical examples) would normalise rounding errors into O(1) values:
        # s ≤ NO_SPREAD·max_b |x_b|, screened by max_b x_b² ≤ Σ_b x_b² = B (s² + x̄²) (twice, for rounding)
        screen = var <= (2.0 * NO_SPREAD**2 * B) * (var + mean * mean)
        s = np.sqrt(var, out=var)
        if screen.any() and np.any(s[screen] <= NO_SPREAD * np.max(np.abs([x[screen] for x in xs]), axis=0)):
            raise NumericalError(
                f"BatchNorm of a batch of {B} with no spread: at some coordinate every example has the "
                "same pre-activation up to rounding (e.g. identical inputs in one batch), so normalising it is "
                "undefined; remove repeated examples from the batch")
        centred /= s
        return centred, s

    return _once(("batch", tuple(c.key for c in operands)), compute)


def _batch_partial(u: Array, s: Array, b: int, j: int) -> Array:
    return ((j == b) - 1.0 / u.shape[0] - u[b] * u[j] / u.shape[0]) / s


def _wrap(e: Expr) -> str:
    return f"({e.describe()})" if isinstance(e, Sum) else e.describe()


# ------------------------------------------------------------------ smart constructors
def constant(value: float) -> Const:
    return Const(float(value))


def linear(const: float, terms: list[tuple[float, Expr]]) -> Expr:
    """``const + Σ coef·e``: nested sums flattened, constants folded, equal terms merged."""
    acc: dict[Key, list[Any]] = {}
    for coef, e in terms:
        if isinstance(e, Const):
            const += coef * e.value
        elif isinstance(e, Sum):
            const += coef * e.const
            for c2, t2 in e.terms:
                _accumulate(acc, coef * c2, t2)
        else:
            _accumulate(acc, coef, e)
    kept = tuple((c, e) for c, e in acc.values() if c != 0.0)
    if not kept:
        return Const(float(const))
    if const == 0.0 and len(kept) == 1 and kept[0][0] == 1.0:
        return kept[0][1]
    return Sum(float(const), kept)


def _accumulate(acc: dict[Key, list[Any]], coef: float, e: Expr) -> None:
    if e.key in acc:
        acc[e.key][0] += coef
    else:
        acc[e.key] = [coef, e]


def product(factors: list[Expr]) -> Expr:
    """``Π factors``: nested products flattened, constants pulled out in front."""
    scale, flat = 1.0, []
    for f in factors:
        if isinstance(f, Const):
            scale *= f.value
        elif isinstance(f, Prod):
            flat.extend(f.factors)
        elif isinstance(f, Sum) and not f.terms:
            scale *= f.const
        else:
            flat.append(f)
    if scale == 0.0 or not flat:
        return Const(scale if flat == [] else 0.0)
    body = flat[0] if len(flat) == 1 else Prod(tuple(flat))
    return body if scale == 1.0 else linear(0.0, [(scale, body)])


def apply(act: Activation, e: Expr) -> Expr:
    """``act(e)`` (the identity is dropped, constants are folded, the step of a function with the sign
    of its argument is the step of the argument)."""
    if act is identity:
        return e
    if isinstance(e, Const):
        return Const(float(np.asarray(act.fn(np.asarray(e.value)), dtype=float)))
    if act.key == step.key:
        e = _sign_form(e)
    if act.homogeneous in (0.0, 1.0) and isinstance(e, Prod):
        pulled = _out_of_homogeneous(act, e)
        if pulled is not None:
            return pulled
    return Apply(act, e)


def _out_of_homogeneous(act: Activation, e: Prod) -> Expr | None:
    """``φ(s·x) = s·φ(x)`` for ``s ≥ 0`` when φ is positively homogeneous of degree 1 (relu, abs,
    leaky_relu; φ(0) = 0), and ``= φ(x)`` for ``s > 0`` when of degree 0 (step): the factors whose
    :meth:`~Expr.image` says so leave the argument, or None when none does. ``relu(((1 + erf a)/2)·b)``
    is then ``((1 + erf a)/2)·relu(b)``, a product of a gate and a relu of linear forms, whose expectations
    are exact cone moments; as written its kink was inside a product the rules could not see through."""
    degree = act.homogeneous

    def leaves(f: Expr) -> bool:
        lo, _, lo_reached, _ = f.image()
        return lo > 0.0 or (lo == 0.0 and (degree == 1.0 or not lo_reached))

    out = [f for f in e.factors if leaves(f)]
    if not out:
        return None
    inner = apply(act, product([f for f in e.factors if not leaves(f)]))
    return inner if degree == 0.0 else product([*out, inner])


def _sign_form(e: Expr) -> Expr:
    """An expression with the sign of ``e`` (strictly positive on the same set): ``c·φ(x)`` with
    ``φ > 0`` exactly above ``x₀`` (``Activation.positive_above``) is positive exactly where
    ``c·(x − x₀)`` is (for ``c < 0`` when ``φ < 0`` exactly below ``x₀``). ``step(tanh(g))`` then
    jumps on the plane ``g = 0`` instead of inside a composite the rules see as a hidden kink
    (``step(g − step(tanh g))`` was refused at every rtol by a random-program campaign)."""
    coef, inner = 1.0, e
    if isinstance(e, Sum) and e.const == 0.0 and len(e.terms) == 1:
        coef, inner = e.terms[0]
    if not isinstance(inner, Apply) or inner.act.positive_above is None or coef == 0.0:
        return e
    if coef < 0.0 and not inner.act.negative_below:
        return e
    sign = 1.0 if coef > 0.0 else -1.0
    return _sign_form(linear(-sign * inner.act.positive_above, [(sign, inner.child)]))


# ------------------------------------------------------------------ normal form
@dataclass(frozen=True, eq=False)
class Monomial:
    """A product of atoms (expressions that are not sums, products or constants)."""

    atoms: tuple[Expr, ...]

    @cached_property
    def key(self) -> Key:
        return ("mono", tuple(sorted((a.key for a in self.atoms), key=repr)))

    @cached_property
    def args(self) -> tuple[Vector, ...]:
        return tuple(dict.fromkeys(v for a in self.atoms for v in a.args))

    @cached_property
    def expr(self) -> Expr:
        return self.atoms[0] if len(self.atoms) == 1 else Prod(self.atoms)

    def evaluate(self, values: Mapping[Vector, Array]) -> Array:
        return self.expr.evaluate(values)


@dataclass(frozen=True)
class Polynomial:
    """``const + Σ coef · monomial``: the normal form the infinite interpreter expands."""

    const: float
    terms: tuple[tuple[float, Monomial], ...]


def expand(e: Expr, limit: int = EXPANSION_LIMIT) -> Polynomial:
    """The normal form of ``e``: sums and products distributed into monomials (while the number
    of monomials stays within ``limit``; beyond, a product of sums is kept as one atom)."""
    const, terms = _expand(e, limit)
    if len(terms) > 1 and _kinked_of_one_form(e):
        # a kinked function of one G-vector whose expansion has several terms (clip(2g)² = (relu(2g + 1) −
        # relu(2g − 1) − 1)²) is one function of one form: one-argument rules integrate it whole, where
        # the terms' kernels, each large against their cancelling sum, added their bounds (0.2 of the
        # kernel at rtol 1e-3: refused; strict campaign seed 251). Kinks of a non-affine argument are
        # points too in one dimension, located numerically (clip(2g³): its terms relu(2g³ ± 1) grow as
        # g³ and their bounds reached 0.78 of the bounded clip's kernel; strict campaign seed 353).
        # Smooth ones keep their monomials, whose exact cancellations the tie check reads
        # (erf(g) − (erf(g) + 1e-9 g))
        whole = Monomial((e,))
        return Polynomial(0.0, ((1.0, whole),))
    return Polynomial(const, tuple((c, m) for c, m in terms.values() if c != 0.0))


def _kinked_of_one_form(e: Expr) -> bool:
    """``e`` reads one G-vector, or several through one linear form (up to offsets: ``clip(g − h) =
    relu(g − h + 1) − relu(g − h − 1) − 1``), and is not smooth (kept whole by :func:`expand`, also as a
    factor)."""
    if not (e.kink_planes() or e.hidden_kinks):
        return False
    return len(e.args) == 1 or len({terms for terms, _ in e.input_forms()}) == 1


def _expand(e: Expr, limit: int) -> tuple[float, dict[Key, list[Any]]]:
    if isinstance(e, Const):
        return e.value, {}
    if isinstance(e, Sum):
        const, acc = e.const, {}
        for coef, t in e.terms:
            c2, a2 = _expand(t, limit)
            const += coef * c2
            for k, (c3, m) in a2.items():
                _merge(acc, k, coef * c3, m)
        return const, acc
    if isinstance(e, Prod):
        one = Monomial(())
        acc: dict[Key, list[Any]] = {one.key: [1.0, one]}
        partial = not all(f.total for f in e.factors)
        for f in e.factors:
            cf, af = _expand(f, limit)
            # stays one atom: a selection (np.where's ``1 − step(a)`` for its second branch) beside a factor that is
            # not finite everywhere — distributed, ``(1 − step(a))·log(b)`` would be ``log(b) − step(a)·log(b)``,
            # NaN − NaN where ``log(b)`` is not selected; and a kinked function of one G-vector, as the whole
            # expression would (g·clip(w): three cancelling, growing terms g·relu(w ± 1) and g, nine pairs — 160 s
            # on 1000 inputs — instead of one factor times a bounded function of one form)
            if isinstance(f, Sum) and ((partial and f.selects) or (len(af) > 1 and _kinked_of_one_form(f))):
                cf, af = 0.0, {Monomial((f,)).key: [1.0, Monomial((f,))]}
            factor = dict(af)
            if cf != 0.0:
                factor[one.key] = [cf, one]
            if len(acc) * len(factor) > limit:
                m = Monomial((e,))
                return 0.0, {m.key: [1.0, m]}
            new: dict[Key, list[Any]] = {}
            for c1, m1 in acc.values():
                for c2, m2 in factor.values():
                    m = Monomial(m1.atoms + m2.atoms)
                    _merge(new, m.key, c1 * c2, m)
            acc = new
        empty = acc.pop(one.key, None)
        return (empty[0] if empty else 0.0), acc
    m = Monomial((e,))
    return 0.0, {m.key: [1.0, m]}


def _merge(acc: dict[Key, list[Any]], key: Key, coef: float, m: Monomial) -> None:
    if key in acc:
        acc[key][0] += coef
    else:
        acc[key] = [coef, m]
