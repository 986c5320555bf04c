"""The radius of a BatchNorm batch integrated exactly in the simulated NTK (Rao–Blackwellisation).

In the limit a batch ``g = (g_1, …, g_B)`` of one BatchNorm is Gaussian, and its centred part is
``P g = C^{1/2} r ω`` with ``C = P Σ P`` of rank ``k = B − 1``, ``ω`` uniform on the unit sphere
and ``r ~ χ_k`` independent of ``ω`` and of everything else in the program. The normalised batch
``u = P g / s`` (``s² = |P g|²/B``) depends on ``ω`` only, so the forward pass never sees ``r``;
a gradient through BatchNorm carries ``∂u_b/∂g_j ∝ 1/s`` — one factor ``1/r`` per BatchNorm it
crosses. A second moment of two backward vectors that both cross BatchNorm ``m`` therefore holds
``r_m^{−2}`` times a function of the directions, and ``E[r^{−2}] = 1/(k − 2)``.

Sampling ``r`` makes the simulation's estimator heavy-tailed (``E[r^{−4}] = ∞`` for ``B ≤ 5``:
no finite variance, no honest error bar; slow for larger B). This transform multiplies every
``∂u/∂g`` of batch ``m`` by ``r_m/√(k − 2)`` (``r_m² = (P g)ᵀ C⁺ (P g)`` from the batch's
centred second moments, NetsorK Moment lines): each moment with ``r_m^{−2}`` becomes
``E[f(ω)]/(k − 2) = E[r_m^{−2}] E[f(ω)]`` — the same limit, with a bounded integrand.

It is exact when every moment the caller asks for has degree 0 or −2 in each radius and the
batch vectors are used only inside their BatchNorm (the radial degrees below); else
:func:`radial_program` returns None and the caller keeps the plain simulation.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Iterator
from typing import Any

import numpy as np

from netsor.errors import UnsupportedError
from netsor.ir.expr import (
    Apply,
    BatchNormalized,
    BatchNormPartial,
    Const,
    Expr,
    Opaque,
    Prod,
    Sum,
    Var,
    linear,
    product,
)
from netsor.ir.lines import BiasLine, DataLine, LinCombLine, MatMulLine, MomentLine, NonLinLine
from netsor.ir.program import Program
from netsor.ir.transforms import Renaming, substitute
from netsor.ir.variables import Vector

Array = np.ndarray
#: Radial degree of a vector: ``{batch key: degree}`` (absent: 0); None when not radial.
Degrees = dict[Hashable, int]


def radial_program(program: Program, pairs: Iterable[tuple[Vector, Vector]]
                   ) -> tuple[Program, Renaming] | None:
    """``program`` with every BatchNorm partial scaled by its batch's ``r/√(k − 2)``, or None when
    that is not exact for the second moments of ``pairs`` (or there is no BatchNorm partial)."""
    batches = _partial_batches(program)
    if not batches:
        return None
    degrees = _radial_degrees(program, batches)
    if degrees is None:
        return None
    if not all(_exact_moment(degrees[u], degrees[v]) for u, v in pairs):
        return None
    radius: dict[Hashable, Vector] = {}

    def rewrite(line: NonLinLine, new: Program, renaming: Renaming) -> Vector:
        def scaled(node: BatchNormPartial) -> Expr:
            key = tuple(c.key for c in node.operands)
            if key not in radius:
                radius[key] = _radius_line(new, tuple(c.map_vectors(renaming.__getitem__) for c in node.operands))
            return product([node.map_vectors(renaming.__getitem__), Var(radius[key])])

        expr = _replace_partials(line.expr, scaled, renaming)  # may add the batch's radius lines first
        out = new.new_vector(renaming.dims[line.out.dim], line.out.kind, line.out.name)
        return new.add_line(NonLinLine(out, expr))

    rewrites = {ln.out: rewrite for ln in program.lines
                if isinstance(ln, NonLinLine) and any(isinstance(n, BatchNormPartial) for n in _nodes(ln.expr))}
    return substitute(program, rewrites, name=f"{program.name} [BatchNorm radius integrated]")


def smallest_batch(program: Program) -> int | None:
    """The smallest batch of a BatchNorm partial (a gradient through BatchNorm) in ``program``."""
    sizes = [len(k) for k in _partial_batches(program)]
    return min(sizes) if sizes else None


def normalises_batches(program: Program) -> bool:
    """Whether some line of ``program`` holds a BatchNorm output (:class:`BatchNormalized`)."""
    return any(isinstance(n, BatchNormalized) for n in _expression_nodes(program))


def partial_batch_operands(program: Program) -> list[tuple[Expr, ...]]:
    """The operands of each distinct batch that a BatchNorm partial of ``program`` differentiates."""
    found: dict[Hashable, tuple[Expr, ...]] = {}
    for n in _expression_nodes(program):
        if isinstance(n, BatchNormPartial):
            found.setdefault(tuple(c.key for c in n.operands), n.operands)
    return list(found.values())


def _expression_nodes(program: Program) -> Iterator[Expr]:
    """Every node of the expressions of the program's NonLin and Moment lines."""
    for ln in program.lines:
        if isinstance(ln, (NonLinLine, MomentLine)):
            yield from _nodes(ln.expr)


def nonzero_eigenvalues(eigenvalues: Array) -> Array:
    """Which of the ascending eigenvalues (..., B) of PSD matrices count: those above
    ``RANK_TOLERANCE`` times the largest."""
    return eigenvalues > RANK_TOLERANCE * eigenvalues[..., -1:]


def numerical_rank(eigenvalues: Array) -> Array:
    """Ranks of PSD matrices from their ascending eigenvalues (..., B)."""
    return nonzero_eigenvalues(eigenvalues).sum(axis=-1)


def _nodes(e: Expr) -> list[Expr]:
    out = [e]
    for child in e.children():
        out.extend(_nodes(child))
    return out


def _partial_batches(program: Program) -> set[Hashable]:
    return {tuple(c.key for c in operands) for operands in partial_batch_operands(program)}


def _radius_line(new: Program, operands: tuple[Expr, ...]) -> Vector:
    """``r/√(k − 2)`` of a batch: Moment lines for its centred second moments, then one line of them."""
    B = len(operands)
    centred = [linear(0.0, [(1.0, e)] + [(-1.0 / B, o) for o in operands]) for e in operands]
    moments = []
    for i in range(B):
        for j in range(i, B):
            m = new.new_vector(new.scalar_dim, "scalar", f"C{i}{j}")
            moments.append(new.add_line(MomentLine(m, product([centred[i], centred[j]]))))
    out = new.new_vector(operands[0].args[0].dim, "H", "radius")
    fn = _radius_function(B)
    return new.add_line(NonLinLine(out, Opaque(fn, (*operands, *(Var(m) for m in moments)), "batch_radius")))


#: Eigenvalues of a batch's centred covariance below this fraction of the largest are zero (its
#: rank k: at most B − 1, and at most d for a batch of first-layer pre-activations of d-dim inputs).
RANK_TOLERANCE = 1e-10


def _radius_function(B: int):  # noqa: ANN202 - a vectorised numpy function of B + B(B+1)/2 arrays
    upper = np.triu_indices(B)

    def radius(*values: Array) -> Array:
        xs, thetas = np.broadcast_arrays(*values[:B]), values[B:]
        g = np.stack(xs, axis=-1)  # (..., M, B)
        g = g - g.mean(axis=-1, keepdims=True)
        C = np.zeros((*np.shape(thetas[0])[:-1], B, B))
        for (i, j), t in zip(zip(*upper, strict=True), thetas, strict=True):
            C[..., i, j] = C[..., j, i] = np.asarray(t)[..., 0]
        w, V = np.linalg.eigh(C)  # C⁺ on its range
        kept = nonzero_eigenvalues(w)
        k = kept.sum(axis=-1)
        if np.any(k <= 2):
            raise UnsupportedError(
                f"the NTK of this BatchNorm network is infinite in the limit: a batch's centred covariance has "
                f"rank {int(k.min())} ≤ 2 (B examples of d-dimensional inputs give rank ≤ min(B − 1, d) in the "
                "first layer), so E[1/s²] = ∞ for its standard deviation s; use more examples or input dimensions")
        inv = np.where(kept, 1.0 / np.where(kept, w, 1.0), 0.0)
        z = np.einsum("...mb,...bc->...mc", g, V)
        r2 = np.einsum("...mc,...c->...m", z * z, inv)
        return np.sqrt(r2 / (k[..., None] - 2))  # E[r⁻²] = 1/(k − 2) for r ~ χ_k

    return radius


def _replace_partials(e: Expr, scaled, renaming: Renaming) -> Expr:  # noqa: ANN001
    """``e`` over the new program's vectors, each BatchNorm partial replaced by ``scaled(node)``."""
    if isinstance(e, BatchNormPartial):
        return scaled(e)
    if isinstance(e, Sum):
        return linear(e.const, [(c, _replace_partials(t, scaled, renaming)) for c, t in e.terms])
    if isinstance(e, Prod):
        return product([_replace_partials(f, scaled, renaming) for f in e.factors])
    if isinstance(e, Apply):
        return Apply(e.act, _replace_partials(e.child, scaled, renaming))
    if isinstance(e, Opaque):
        of = None if e.difference_of is None else (_replace_partials(e.difference_of[0], scaled, renaming),
                                                   e.difference_of[1])
        return Opaque(e.fn, tuple(_replace_partials(c, scaled, renaming) for c in e.operands), e.name, of, e.untraced)
    return e.map_vectors(renaming.__getitem__)  # Var, Const, BatchNormalized


def _radial_degrees(program: Program, batches: set[Hashable]) -> dict[Vector, Degrees] | None:
    """Each vector's degree in each batch radius, copy by copy of the limit, or None when a batch
    vector is used outside its BatchNorm or a radius enters non-linearly (then the radius cannot be
    integrated out). A MatMul output is a fresh Gaussian per copy, independent of the copy's radii:
    degree 0, provided the moments of its matrix's arguments that give its covariance have degree
    0 or −2 in each radius (transposes, whose Netsor⊤ corrections are linear in other vectors copy by
    copy, are not taken)."""
    members = {op_key for key in batches for op_key in key}
    deg: dict[Vector, Degrees] = {}
    args_of: dict[Any, list[Vector]] = {}
    for line in program.lines:
        if isinstance(line, (DataLine, BiasLine)):
            found: Degrees | None = {}
        elif isinstance(line, MatMulLine):
            if line.transposed:
                return None
            args_of.setdefault(line.matrix, []).append(line.arg)
            found = {}
        elif isinstance(line, LinCombLine):
            terms = [_sum(deg[c] if isinstance(c, Vector) else {}, deg[a])
                     for c, a in zip(line.coeffs, line.args, strict=True)]
            found = _equal(terms + ([deg[line.offset]] if line.offset is not None else []))
        else:
            found = _expression_degrees(line.expr, deg, members)
            if isinstance(line, MomentLine) and found:  # a radius averaged inside a scalar
                return None
        if found is None:
            return None
        deg[line.out] = found
    if not all(_exact_moment(deg[a], deg[b]) for args in args_of.values() for a in args for b in args):
        return None
    return deg


def _exact_moment(a: Degrees, b: Degrees) -> bool:
    """Whether the radius-integrated simulation keeps the second moment of vectors of degrees a, b:
    each radius enters it as r⁰ or r⁻² (then ``E[r⁻²] = 1/(k − 2)`` is what the transform puts in)."""
    return all(d in (0, -2) for d in _sum(a, b).values())


def _sum(a: Degrees, b: Degrees) -> Degrees:
    total = dict(a)
    for key, k in b.items():
        total[key] = total.get(key, 0) + k
    return {key: k for key, k in total.items() if k != 0}


def _equal(degrees: list[Degrees | None]) -> Degrees | None:
    first = degrees[0] if degrees else {}
    return first if all(d == first for d in degrees) else None


def _expression_degrees(e: Expr, deg: dict[Vector, Degrees], members: set[Hashable]) -> Degrees | None:
    if isinstance(e, BatchNormalized | BatchNormPartial):
        inner = [_expression_degrees(c, deg, set()) for c in e.operands]  # the batch inside its BatchNorm
        if any(d != {} for d in inner):
            return None
        return {tuple(c.key for c in e.operands): -1} if isinstance(e, BatchNormPartial) else {}
    if e.key in members:  # a batch vector outside its BatchNorm: r enters with the mean part
        return None
    if isinstance(e, Var):
        return deg[e.vector]
    if isinstance(e, Const):
        return {}
    children = [_expression_degrees(c, deg, members) for c in e.children()]
    if any(d is None for d in children):
        return None
    if isinstance(e, Sum):
        return _equal(([{}] if e.const != 0.0 else []) + [d for (c, _), d in zip(e.terms, children, strict=True)
                                                           if c != 0.0])
    if isinstance(e, Prod):
        total: Degrees = {}
        for d in children:
            total = _sum(total, d)  # type: ignore[arg-type]
        return total
    return {} if all(d == {} for d in children) else None  # φ of a radius-free argument only
