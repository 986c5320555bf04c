"""Jumps on ties that hold only in the limit.

A discontinuous function (``step``, ``where(u > v, …)``) of an affine form ``f = Σ c_k v_k`` whose
limit ``Z^f`` is 0 at some input has no Gaussian limit to take: the Master Theorem needs the
jumps to carry no mass. The engine evaluates it as ``step(0) = 0`` (it ties the forms exactly),
which is right when the form is 0 in every finite network too — ``a·g − g`` with ``a`` the softmax
weight of one token, ``W(2h) − 2·Wh`` — and wrong when it is 0 only in the limit: ``0.7·LN(b) − b``
for a bias ``b`` of standard deviation 0.7 is ``O(1/√n)`` at width ``n``, of either sign, and the
wide networks' kernel converges to a value that the Gaussian limit does not describe (there: half of
``E b²``, not 0). This module finds such forms and tells the two cases apart by running one finite
network of moderate width: an exact tie is 0 there to rounding, a limit-only one is not. A form
that is genuinely small in the limit (1e-7 of its parts) is that small at every width and is left to the
engine; one below what the engine resolves (1e-9: the engine ties it and says ``step(0) = 0`` where the limit
is ½) is refused too, since its finite value is then far above its computed limit.

Only forms through 0 can sit on a tie: G-vectors are centred in the limit, so a form of variance 0 is the
constant 0, and ``step(u − v − 1)`` of it is ``step(−1)`` with a margin that no ``O(1/√n)`` fluctuation
crosses. Jumps the tracer cannot see (opaque functions, jumps of non-affine arguments) are not checked.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from netsor.errors import NumericalError
from netsor.interpret.finite import run_finite
from netsor.ir import LinCombLine, MomentLine, NonLinLine, Program, Vector
from netsor.ir.expr import AffineForm
from netsor.ir.printing import describe_line

Array = np.ndarray

#: Relative limit second moment ``E(Z^f)² / (Σ|c_k| √E(Z^{v_k})²)²`` below which a form is a tie: where the
#: engine ties arguments (a difference of variance below 1e-12 of theirs); a form above it has a limit of its own
#: (finite networks may need widths of order 1/TIE_TOL to show it, but the limit is what is asked for).
TIE_TOL = 1e-12
#: Width of the finite network that tells exact ties from limit-only ones; a limit-only tie is
#: ``O(1/√width)`` there, an exact one rounding.
TIE_WIDTH = 64
#: A form whose finite-width root mean square is above this share of its parts' is not an exact tie
#: (rounding leaves ~1e-15 of exact ones).
FINITE_TOL = 1e-12
#: ... and it is a tie of the limit only where that share is also this many times its limit's: a form
#: genuinely of size 1e-7 of its parts is that size at every width, a fluctuation is ~1/√width.
FLUCTUATION = 1000.0


def jump_forms(program: Program) -> list[tuple[NonLinLine | MomentLine, AffineForm]]:
    """``(line, form)`` for every form of G-vectors with zero offset on which a NonLin or
    Moment line's function may jump (not the poles of scalar arithmetic, ``1/σ``)."""
    out = []
    for line in program.lines:
        if isinstance(line, NonLinLine | MomentLine):
            out += [(line, form) for form in line.expr.jump_planes()
                    if form[1] == 0.0 and form[0] and all(v.kind == "G" for v, _ in form[0])]
    return out


#: A term of a form written through LinComb lines: ``(vector, constant, scalars)``, coefficient
#: ``constant · Π scalars`` (the scalars' limits per input).
_Part = tuple[Vector, float, tuple[Vector, ...]]


def _parts(program: Program, terms: Sequence[tuple[Vector, float]]) -> list[_Part]:
    """The form's terms written through the LinComb lines that define them, down to vectors that are not
    linear combinations (the offsets of LinComb lines vanish in the limit). ``g − LN(g)`` as one vector of
    variance 0 is then a difference of parts of variance 1 — the cancellation that makes it a tie."""
    defined = {line.out: line for line in program.lines if isinstance(line, LinCombLine)}
    out: list[_Part] = []
    todo: list[_Part] = [(v, c, ()) for v, c in terms]
    while todo:
        v, c, scalars = todo.pop()
        line = defined.get(v)
        if line is None:
            out.append((v, c, scalars))
            continue
        for coef, arg in zip(line.coeffs, line.args, strict=True):
            if isinstance(coef, Vector):
                todo.append((arg, c, scalars + (coef,)))
            else:
                todo.append((arg, c * float(coef), scalars))
    return out


def check_jump_ties(program: Program, X: Any, second_moments: Callable[[list[tuple[Vector, Vector]]], list[Array]],
                    scalars: Callable[[list[Vector]], list[Array]], *, what: str = "X") -> None:
    """Raise :class:`~netsor.errors.NumericalError` where a jump of the program sits on a form that is
    0 in the limit at some input of ``X`` but not in a finite network (module docstring).

    ``second_moments(pairs)`` gives the limit ``E[Z^u Z^v]`` per input (B,) of each pair of G-vectors,
    ``scalars(s)`` the limit of each scalar per input (B,). A form is a tie at an input where its second
    moment is below :data:`TIE_TOL` of ``(Σ |coefficient| · √E(part)²)²`` over its parts (:func:`_parts`).
    """
    forms = [(line, terms, _parts(program, terms)) for line, (terms, _) in jump_forms(program)]
    if not forms:
        return
    pairs = list({(u, v): None for _, terms, parts in forms
                  for u, v in [(u, v) for u, _ in terms for v, _ in terms] + [(u, u) for u, _, _ in parts]})
    moments = dict(zip(pairs, (np.ravel(m) for m in second_moments(pairs)), strict=True))
    needed = list({s: None for _, _, parts in forms for _, _, ss in parts for s in ss})
    limits = dict(zip(needed, (np.ravel(x) for x in scalars(needed)), strict=True))
    tied = []
    for line, terms, parts in forms:
        square = sum(a * b * moments[(u, v)] for u, a in terms for v, b in terms)
        weights = [np.abs(c * np.prod([limits[s] for s in ss], axis=0)) for _, c, ss in parts]
        scale = sum(w * np.sqrt(np.maximum(moments[(u, u)], 0.0)) for w, (u, _, _) in zip(weights, parts, strict=True))
        at = np.flatnonzero((scale > 0) & (np.abs(square) <= TIE_TOL * scale**2))
        if at.size:
            size = np.sqrt(np.abs(square[at])) / scale[at]  # the form's share of its parts in the limit
            tied.append((line, terms, parts, [w[at] if np.ndim(w) else w for w in weights], at, size))
    if tied:
        _check_finite(program, X, tied, what)


def rms(x: Array) -> Array:
    """Root mean square over the last axis (the coordinates of a vector)."""
    return np.sqrt(np.mean(x * x, axis=-1))


def _check_finite(program: Program, X: Any, tied: Sequence[tuple[Any, ...]], what: str) -> None:
    """The tied forms in one finite network of width :data:`TIE_WIDTH`: raise at the first that is not 0
    there (relative to its parts' root mean squares, weighted by their limit coefficients) and is far above
    its own limit size (:data:`FLUCTUATION`)."""
    vectors = {u: None for _, terms, parts, _, _, _ in tied for u in [u for u, _ in terms] + [u for u, _, _ in parts]}
    run = run_finite(program, X if program.reads_data else None, width=TIE_WIDTH, samples=1, seed=0,
                     vectors=list(vectors))
    for line, terms, parts, weights, at, limit_share in tied:
        form = sum(c * run.vectors[u][0, at] for u, c in terms)  # (points, n)
        scale = sum(w * rms(run.vectors[u][0, at]) for w, (u, _, _) in zip(weights, parts, strict=True))
        size = rms(form)
        loose = np.flatnonzero((size > FINITE_TOL * scale) & (size > FLUCTUATION * limit_share * scale))
        if loose.size:
            i = loose[0]
            text = " ".join(f"{'−' if c < 0 else '+'} {abs(c):g}·{u.name}" for u, c in terms).lstrip("+ ")
            where = describe_line(line)
            where = where if len(where) <= 160 else where[:157] + "..."
            raise NumericalError(
                f"{where} jumps where {text} = 0, and that form is 0 in the limit at {what}[{at[i]}] (or below "
                f"what the engine resolves) but not in finite networks (root mean square {size[i] / scale[i]:.2g} "
                f"of its parts at width {TIE_WIDTH}): "
                "a tie that holds only in the limit, through a scalar such as a LayerNorm's standard deviation. "
                "The wide networks' outputs then depend on fluctuations that the Gaussian limit does not describe, "
                "and the limit's step(0) = 0 would be wrong; move the jump off the tie (e.g. compare with a shifted "
                "or independent vector) or simulate finite widths (netsor.run_finite)")
