"""Symbolic derivatives of NonLin expressions (for backward programs: the NTK).

``differentiate(e, v)`` is ``∂e/∂v`` as another :mod:`netsor.ir.expr` tree, so that the
infinite-width engine keeps its exact rules on it: ``relu' = step`` keeps the arc-cosine closed
forms, ``erf' = erf_deriv`` its own closed form, and factorisation over
independent arguments still applies to ``φ'(g)·δh``. Derivatives are almost-everywhere
derivatives: the jumps of step-like functions contribute nothing (as in every autodiff
framework, and as the NTK of such networks is defined).

Activations without a symbolic rule (tanh, gelu, user functions, ...) get their registered
``φ'`` wrapped as an activation of its own (same kinks; smooth when φ is), and opaque user
functions a central finite difference.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from netsor.activations import Activation, identity
from netsor.activations import registry as acts
from netsor.activations.registry import call_user_function, central_difference, relative_step
from netsor.errors import UnsupportedError
from netsor.ir.expr import (
    Apply,
    BatchNormalized,
    BatchNormPartial,
    Expr,
    Opaque,
    Prod,
    Sum,
    Var,
    apply,
    constant,
    linear,
    product,
)
from netsor.ir.variables import Vector
from netsor.memo import BoundedMemo

Array = np.ndarray


def differentiate(e: Expr, wrt: Vector) -> Expr:
    """``∂e/∂wrt`` (almost everywhere) as an expression over the same G-vectors."""
    if wrt not in e.args:
        return constant(0.0)
    if isinstance(e, Var):
        return constant(1.0)
    if isinstance(e, Apply):
        return product([derivative_of(e.act, e.child), differentiate(e.child, wrt)])
    if isinstance(e, Sum):
        return linear(0.0, [(c, differentiate(t, wrt)) for c, t in e.terms if wrt in t.args])
    if isinstance(e, Prod):
        return linear(0.0, [
            (1.0, product([differentiate(f, wrt), *e.factors[:i], *e.factors[i + 1:]]))
            for i, f in enumerate(e.factors) if wrt in f.args
        ])
    if isinstance(e, Opaque):
        return linear(0.0, [
            (1.0, product([_opaque_partial(e, i), differentiate(c, wrt)]))
            for i, c in enumerate(e.operands) if wrt in c.args
        ])
    if isinstance(e, BatchNormalized):
        return linear(0.0, [
            (1.0, product([BatchNormPartial(e.index, j, e.operands), differentiate(c, wrt)]))
            for j, c in enumerate(e.operands) if wrt in c.args
        ])
    if isinstance(e, BatchNormPartial):
        raise UnsupportedError(f"the second derivative {e.describe()} of BatchNorm is not implemented")
    raise TypeError(f"unknown expression node {type(e).__name__}")


def derivative_of(act: Activation, x: Expr) -> Expr:
    """``φ'(x)`` for the activation φ, as an expression."""
    if act is identity:
        return constant(1.0)
    rule = _RULES.get(act.name) if act.registered else None
    if rule is not None:
        return rule(act, x)
    return apply(derived_activation(act), x)


def _step(x: Expr, shift: float = 0.0) -> Expr:
    return apply(acts.step, linear(shift, [(1.0, x)]))


# Registered activations whose derivative is an expression of registered activations (so the
# closed forms stay in use). Keyed by registry name; parametric ones read ``act.params``.
_RULES: dict[str, Any] = {
    "relu": lambda act, x: _step(x),
    "step": lambda act, x: constant(0.0),
    # sign, not 2·step − 1: one function with its own kernel, whose error does not add up over the terms
    # (|4K₀ − 1| ≤ 1 against 1 + 1 + 1 + 4K₀ = 5: a depth-20 abs MLP's NTK bound grew 5× a layer, to 3.3)
    "abs": lambda act, x: apply(acts.from_ufunc(np.sign), x),
    "leaky_relu": lambda act, x: linear(act.params["alpha"], [(1.0 - act.params["alpha"], _step(x))]),
    "hard_tanh": lambda act, x: linear(0.0, [(1.0, _step(x, 1.0)), (-1.0, _step(x, -1.0))]),
    "erf": lambda act, x: apply(acts.erf_deriv, x),
    "sin": lambda act, x: apply(acts.cos, x),
    "cos": lambda act, x: linear(0.0, [(-1.0, apply(acts.sin, x))]),
    "exp": lambda act, x: apply(acts.exp, x),
    "gaussian": lambda act, x: linear(0.0, [(-1.0, product([x, apply(acts.gaussian, x)]))]),
}

_DERIVED: BoundedMemo[Activation] = BoundedMemo()


def derived_activation(act: Activation) -> Activation:
    """φ' as an activation of its own (cached per φ, and its cache key is its content: stable)."""
    # a finite difference where φ' was not given (an opaque custom φ): its values carry rounding noise
    key = ("derivative" if act.exact_slope else "finite difference", act.key)
    return _DERIVED.get(key, lambda: _derived(act, key))


def _derived(act: Activation, key: tuple[Any, ...]) -> Activation:
    name = act.name + "'"

    def fn(x: Array) -> Array:
        return call_user_function(act.deriv, (x,), name) if not act.registered else act.deriv(x)

    def second(x: Array) -> Array:
        return central_difference(fn, x, relative_step(x))

    return Activation(
        name, fn=fn, deriv=second if act.second is None else act.second, exact_slope=act.second is not None,
        smooth=act.smooth, odd=False, kinks=act.kinks,
        kinks_known=act.kinks_known, continuous=act.smooth, registered=False, cache_key=key,
        local=act.local,  # a saturating, linear or vanishing tail has a constant or vanishing slope
        pieces=None if act.pieces is None or not act.continuous else _derivative_pieces(act.pieces),
        value_error=act.deriv_error,  # a central difference's error (a custom φ without deriv), counted
        difference_of=None if act.exact_slope else act,
    )


def _derivative_pieces(pieces: tuple[tuple[float, int, float, float, bool], ...]
                       ) -> tuple[tuple[float, int, float, float, bool], ...]:
    """The pieces (:attr:`Activation.pieces`) of φ' for a continuous φ (the δs of its pieces' indicators
    cancel): ``(c x^p e^(rx))' = c (p x^(p−1) + r x^p) e^(rx)`` on each piece's side (elu's NTK in closed form)."""
    out = []
    for coef, power, rate, threshold, above in pieces:
        if power == 1:
            out.append((coef, 0, rate, threshold, above))
        if rate != 0.0:
            out.append((coef * rate, power, rate, threshold, above))
    return tuple(out)


def _opaque_partial(e: Opaque, i: int) -> Expr:
    """``∂fn/∂(operand i)`` of an opaque function by central differences, as an opaque function."""

    def partial(*values: Array) -> Array:
        return e.partial(values, i)

    return Opaque(partial, e.operands, f"∂{i}{e.name}", difference_of=(e, i), untraced=e.untraced)
