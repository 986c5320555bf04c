"""From expressions of the IR to the function objects of the Gaussian engine.

The engine (:mod:`netsor.gaussian`) knows nothing of programs: it integrates one-argument
:class:`~netsor.activations.Activation` objects (closed forms, Mehler series) and
:class:`~netsor.gaussian.joint.JointFunction` objects of several arguments. This module builds
them from expression trees over G-vectors, with their kinks, derivatives and content keys.
"""

from __future__ import annotations

import numpy as np

from netsor.activations import Activation, identity
from netsor.gaussian.joint import JointFunction
from netsor.ir import Vector
from netsor.ir.expr import Apply, Expr, Var

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
        return np.broadcast_to(expr.evaluate({arg: x}), np.shape(x))

    def deriv(x: Array) -> Array:
        return np.broadcast_to(expr.derivative({arg: x}, arg), np.shape(x))

    return Activation(name=expr.describe(), fn=fn, deriv=deriv, smooth=expr.smooth,
                      kinks=tuple(sorted(set(kinks))), kinks_known=not expr.hidden_kinks,
                      continuous=expr.continuous, registered=False, cache_key=("expr", expr.key))


def joint_function(expr: Expr, args: tuple[Vector, ...]) -> JointFunction:
    """``expr`` as a function of the G-vectors ``args`` (in this order)."""
    k = len(args)
    position = {v: i for i, v in enumerate(args)}

    def values(u: Array) -> dict[Vector, Array]:
        return {v: u[..., i] for v, i in position.items()}

    def fn(u: Array) -> Array:
        return np.broadcast_to(expr.evaluate(values(u)), u.shape[:-1])

    def grad(u: Array) -> Array:
        vals = values(u)
        return np.stack([np.broadcast_to(expr.derivative(vals, v), u.shape[:-1]) for v in args], axis=-1)

    planes = []
    for terms, offset in expr.kink_planes():
        normal = np.zeros(k)
        for v, c in terms:
            normal[position[v]] += c
        if np.any(normal != 0.0):
            planes.append((normal, float(offset)))
    return JointFunction(k, fn, grad if expr.continuous else None, tuple(planes), expr.hidden_kinks,
                         expr.continuous, ("joint", expr.key, tuple(v.index for v in args)), expr.describe())


def shifted(act: Activation, offset: float) -> Activation:
    """``x ↦ act(x + offset)`` (kinks shifted by −offset)."""
    return Activation(name=f"{act.name}(·{offset:+g})", fn=lambda x: act.fn(x + offset),
                      deriv=lambda x: act.deriv(x + offset), smooth=act.smooth,
                      kinks=tuple(k - offset for k in act.kinks), kinks_known=act.kinks_known,
                      continuous=act.continuous, registered=False, cache_key=("shift", act.key, offset))
