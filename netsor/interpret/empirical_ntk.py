"""The finite-width NTK: exact reverse-mode differentiation through the finite interpreter.

For each network (dense sampler: every matrix is drawn and kept) the forward pass runs on all
inputs, then one backward pass per line, vectorised over the networks, the outputs and the
inputs, gives the true gradients ``G_x = ∂y_r/∂x`` of every output with respect to every vector
(no autodiff framework). Parameters are standard normal, as in :func:`netsor.ntk`:
``W = σ/√n_in · Ŵ``, biases ``σ_b · b̂``, readouts ``y = σ_v v̂ᵀh/√n + σ_bv b̂_v``, so that

    Θ(x, x') = Σ_W σ²/n_in Σ_{uses u, u'} ⟨a_u(x), a_u'(x')⟩ ⟨b_u(x), b_u'(x')⟩
             + Σ_b σ_b² ⟨G_b(x), G_b(x')⟩ + σ_v² ⟨h(x), h'(x')⟩/n + σ_bv²,

with ``(a, b) = (G_g, h)`` for a use ``g = W h`` and ``(h, G_g)`` for ``g = Wᵀ h`` (the gradient of
``y`` with respect to ``Ŵ`` is ``σ/√n_in Σ_u a_u ⊗ b_u``). Unlike the limit's backward program
(:mod:`netsor.ir.backward`), nothing is assumed: transposes use the same ``W``, and gradients
flow through scalars (moments, LayerNorm, attention) exactly.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from netsor.errors import NumericalError, ProgramError
from netsor.interpret.finite import chunks, network_bytes, resolve_widths
from netsor.interpret.forward import FiniteState, ForwardPlan, World, run_forward
from netsor.ir import BiasLine, Dim, LinCombLine, Line, MatMulLine, Matrix, MomentLine, NonLinLine, Program, Vector
from netsor.ir.expr import shared_nodes
from netsor.validate import (
    check_count,
    check_inputs,
    check_memory_budget,
    check_same_layout,
    check_size,
    inputs_or_point,
)

Array = np.ndarray

#: Default working memory of one chunk of networks (bytes).
DEFAULT_MEMORY_BUDGET = 2**30


def empirical_ntk(program: Program, X: Any = None, X2: Any = None, *, width: int | Mapping[Any, int] = 256,
                  samples: int = 1, seed: Any = 0, memory_budget: int = DEFAULT_MEMORY_BUDGET) -> Array:
    """The NTK of ``samples`` finite-width networks of ``program``, shape (samples, B1·R, B2·R).

    Parameters
    ----------
    program : Program
        Any program with outputs (transposes and NetsorK scalars included).
    X : array, shape (B1, d) or (B1, T, d); None for a program that reads no data (one point)
    X2 : array, shape (B2, ...), optional
        The second argument of the kernel (default ``X``); the same networks are used for both.
    width : int or mapping
        Size of every hidden dim (or ``{dim or name: size}``).
    samples : int
        Number of independent networks (dense sampler: each draws its matrices).
    seed : int, SeedSequence or Generator
    memory_budget : int
        Bytes one chunk of networks may use (a network holds its matrices, ``B·n`` values per
        vector and ``R·B·n`` gradients per live vector); results do not depend on it.

    Returns
    -------
    array (samples, B1·R, B2·R), indexed ``b·R + r`` as :func:`netsor.ntk`.
    """
    if not isinstance(program, Program):
        raise ProgramError(f"expected a netsor.Program, got {type(program).__name__}")
    if not program.outputs:
        raise ProgramError("the program has no outputs, so it has no kernel; add p.readout(h, sigma=...) first")
    Xa = inputs_or_point(program, X, "X")
    Xb = Xa if X2 is None else check_inputs(program, X2, "X2")
    check_same_layout(Xa, Xb)
    X_all = Xa if X2 is None else np.concatenate([Xa, Xb])
    samples = check_count(samples, "samples")
    budget = check_memory_budget(memory_budget)
    sizes = resolve_widths(program, width, X_all.shape[-1])
    B, R = X_all.shape[0], program.num_outputs
    B1 = Xa.shape[0]
    check_size(samples * B1 * R * Xb.shape[0] * R, "the empirical NTKs")
    plan = ForwardPlan(program, [ln.out for ln in program.lines])
    per_net = network_bytes("dense", plan, B, sizes) * 2 + 8 * R * B * max(sizes.values()) * (len(plan.lines) + 4)
    if per_net > budget:
        raise ProgramError(f"one network needs about {per_net / 2**30:.3g} GiB to differentiate, more than "
                           f"memory_budget = {budget / 2**30:.3g} GiB; reduce the width or the inputs")
    out = np.empty((samples, B1 * R, Xb.shape[0] * R))
    for lo, chunk in chunks(seed, samples, 1, max(1, budget // per_net)):
        state = FiniteState(plan, sizes, X_all, chunk, "dense", World())
        matrices = _MatrixRecorder()
        run_forward(plan, state, "finite", matrices.record)
        readouts = []
        for r in program.readouts:  # the finite sampler's draws: v (K, n), then b_v
            readouts.append(chunk.normal((r.num_parts, sizes[r.dim])))
            chunk.normal(())
        theta = _network_ntk(program, state.values, matrices.drawn, readouts, sizes)  # (S, B, R, B, R)
        if not np.all(np.isfinite(theta)):
            raise NumericalError("a finite network's NTK is not finite (overflow); reduce sigma_w, depth or inputs")
        block = theta[:, :B1, :, B - Xb.shape[0]:, :] if X2 is not None else theta
        out[lo:lo + chunk.size] = block.reshape(chunk.size, B1 * R, Xb.shape[0] * R)
    return out


class _MatrixRecorder:
    """Keeps every matrix the dense sampler draws (the executor frees them after their last use)."""

    def __init__(self) -> None:
        self.drawn: dict[Matrix, Array] = {}

    def record(self, line: Line, state: Any) -> None:
        if isinstance(line, MatMulLine):
            self.drawn[line.matrix] = state.world.memory[line.matrix]


def _network_ntk(program: Program, values: Mapping[Vector, Array], matrices: Mapping[Matrix, Array],
                 readouts: list[Array], sizes: Mapping[Dim, int]) -> Array:
    """Θ of one chunk of networks, shape (S, B, R, B, R), from the forward values (S, B, n)."""
    outputs = program.outputs
    S, B = next(iter(values.values())).shape[:2]
    R = len(outputs)
    grads: dict[Vector, Array] = {}
    for r, (ro, parts) in enumerate(outputs):
        scale = ro.sigma / np.sqrt(len(parts) * sizes[ro.dim])
        for k, h in enumerate(parts):
            seed = np.zeros((S, R, B, sizes[ro.dim]))
            seed[:, r] = scale * readouts[ro.index][:, None, k, :]
            _add(grads, h, seed)
    theta = np.zeros((S, R, B, R, B))
    # the readouts' own parameters: v̂_k (σ_v h_k/√(K n)) and the readout bias, within one readout call
    for r, (ro, parts) in enumerate(outputs):
        for s, (ro2, parts2) in enumerate(outputs):
            if ro is ro2:
                coef = ro.sigma**2 / (len(parts) * sizes[ro.dim])
                for h, h2 in zip(parts, parts2, strict=True):
                    theta[:, r, :, s, :] += coef * np.matmul(values[h], values[h2].transpose(0, 2, 1))
                theta[:, r, :, s, :] += ro.bias**2
    first_use = {}
    for i, line in enumerate(program.lines):
        if isinstance(line, MatMulLine):
            first_use.setdefault(line.matrix, i)
    uses: dict[Matrix, list[tuple[Array, Array]]] = {}
    for i in range(len(program.lines) - 1, -1, -1):
        line = program.lines[i]
        g = grads.pop(line.out, None)
        if g is not None:
            _backward_line(line, g, values, matrices, grads, uses)
            if isinstance(line, BiasLine):
                theta += line.sigma**2 * _gram(g, g)
        if isinstance(line, MatMulLine) and first_use[line.matrix] == i and line.matrix in uses:
            W = line.matrix
            pairs = uses.pop(W)
            term = sum(_gram(a, a2) * _gram(b, b2) for a, b in pairs for a2, b2 in pairs)
            theta += (W.sigma**2 / sizes[W.in_dim]) * term
    return theta.transpose(0, 2, 1, 4, 3)


def _gram(u: Array, v: Array) -> Array:
    """``⟨u_{r,b}, v_{s,c}⟩`` over the coordinates: (S, R|1, B, n) × (S, R|1, B, n) → (S, R|1, B, R|1, B)."""
    return np.einsum("srbn,stcn->srbtc", u, v)


def _add(grads: dict[Vector, Array], x: Vector, g: Array) -> None:
    grads[x] = grads[x] + g if x in grads else g


def _backward_line(line: Line, g: Array, values: Mapping[Vector, Array], matrices: Mapping[Matrix, Array],
                   grads: dict[Vector, Array], uses: dict[Matrix, list[tuple[Array, Array]]]) -> None:
    """Propagate ``g = ∂y/∂(line.out)`` (S, R, B, n) to the line's inputs; record matrix uses."""
    if isinstance(line, MatMulLine):
        M = matrices[line.matrix]  # (S, n_in, n_out): W h = h @ M
        h = values[line.arg][:, None]
        if line.transposed:
            uses.setdefault(line.matrix, []).append((h, g))
            if line.arg.kind != "data":
                _add(grads, line.arg, np.einsum("srbi,sio->srbo", g, M))
        else:
            uses.setdefault(line.matrix, []).append((g, h))
            if line.arg.kind != "data":
                _add(grads, line.arg, np.einsum("srbo,sio->srbi", g, M))
    elif isinstance(line, LinCombLine):
        for c, a in zip(line.coeffs, line.args, strict=True):
            if isinstance(c, Vector):
                _add(grads, a, values[c][:, None] * g)
                _add(grads, c, np.sum(g * values[a][:, None], axis=-1, keepdims=True))
            else:
                _add(grads, a, c * g)
        if line.offset is not None:
            _add(grads, line.offset, np.sum(g, axis=-1, keepdims=True))
    elif isinstance(line, NonLinLine | MomentLine):
        point = {a: values[a] for a in line.expr.args}
        n = g.shape[-1] if isinstance(line, NonLinLine) else max(values[a].shape[-1] for a in line.expr.args)
        with shared_nodes():  # every argument's derivative at the same point reads the same nodes
            for a in line.expr.args:
                with np.errstate(all="ignore"):
                    d = np.broadcast_to(line.expr.derivative(point, a), (*values[a].shape[:2], n))[:, None]
                if isinstance(line, MomentLine):  # θ = mean_α ψ: ∂θ/∂x_α = ∂ψ/∂x_α / n
                    contribution = g * d / n
                else:
                    contribution = g * d
                if a.kind == "scalar" and n > 1:
                    contribution = np.sum(contribution, axis=-1, keepdims=True)
                _add(grads, a, contribution)
