"""Finite-width interpreter: real random networks, many at once.

Two samplers execute the same lines and differ only in MatMul (see
:mod:`netsor.interpret.rules.matmul`): ``"dense"`` (the reference; materialised weights) and
``"matrix-free"`` (each MatMul drawn from its exact conditional law given the earlier uses of
its matrix, never forming it). Both are exact in law at every width, with or without
transposed MatMuls (the matrix-free sampler then conditions on the uses of ``W`` and of ``Wᵀ``).

Randomness: networks are grouped in fixed blocks that each own one stream spawned from the
seed's ``SeedSequence``; a block's draws happen in program order. The block size depends on
the sampler and the problem size only, never on the memory budget, so results do not depend
on how networks are chunked.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from netsor.errors import HyperParameterError, NumericalError, ProgramError
from netsor.interpret.forward import Chunk, FiniteState, ForwardPlan, World, run_forward
from netsor.ir import Dim, MatMulLine, Program, Vector
from netsor.validate import (
    check_choice,
    check_count,
    check_memory_budget,
    check_size,
    inputs_or_point,
    seed_sequence,
)

Array = np.ndarray

#: Default bound on the memory of one chunk of networks (bytes).
DEFAULT_MEMORY_BUDGET = 2**30
#: Matrix-free blocks hold at most this many floats per vector (fixes the block size).
_BLOCK_FLOATS = 2**20
METHODS = ("auto", "dense", "matrix-free")


@dataclass
class FiniteRun:
    """Results of :func:`run_finite`.

    Attributes
    ----------
    outputs : array, shape (S, B·R)
        Outputs indexed ``b·R + r``.
    kernels : array, shape (S, B·R, B·R) or None
        Per network, the covariance of the outputs given everything but the readout:
        ``σ_v²/K Σ_k ⟨h_{r,k}(x_i), h_{s,k}(x_j)⟩ / n + bias²`` within a readout of K parts per
        output (the outputs are exactly ``N(0, K̂)`` given the hidden layers).
    vectors : dict
        Requested vectors, each of shape (S, B, n).
    widths : dict
        Size of every dim used (hidden dims and ``"d"``).
    """

    outputs: Array
    kernels: Array | None
    vectors: dict[Vector, Array] = field(default_factory=dict)
    widths: dict[str, int] = field(default_factory=dict)


def resolve_widths(program: Program, width: int | Mapping[Any, int], d: int) -> dict[Dim, int]:
    """Sizes of every dim: ``round(dim.ratio · width)`` for one int ``width``, or a mapping by Dim
    or name (taken as given)."""
    sizes: dict[Dim, int] = {program.data_dim: d, program.scalar_dim: 1}
    if isinstance(width, Mapping):
        known = {*program.dims, *(dim.name for dim in program.dims)}
        unknown = [k for k in width if k not in known]
        if unknown:
            raise HyperParameterError(f"width given for unknown dims {unknown}; the program has "
                                      f"{[dim.name for dim in program.dims]}")
    for dim in program.dims:
        if isinstance(width, Mapping):
            value = width.get(dim, width.get(dim.name))
            if value is None:
                raise HyperParameterError(f"no width given for dim {dim.name!r}: width={dict(width)}")
        else:
            value = round(dim.ratio * check_count(width, "width"))
            if value < 1:
                needed = 0.5 / dim.ratio
                advice = (f"use a width of at least {int(needed) + 1} or a larger ratio" if needed < 1e9 else
                          f"it needs a width above {needed:.2g}, more than fits in memory: give it a larger ratio, "
                          f"or each dim its size (width={{{dim.name!r}: k, ...}})")
                raise HyperParameterError(f"dim {dim.name!r} has ratio {dim.ratio:g}, so width {width} gives it "
                                          f"{value} coordinates; {advice}")
        sizes[dim] = check_count(value, f"width of dim {dim.name!r}")
    return sizes


def choose_method(program: Program, method: str) -> str:
    """The sampler for ``method`` (``"auto"``: matrix-free unless the program has transposes,
    for which the dense sampler stays the reference)."""
    check_choice(method, "method", METHODS)
    if method == "auto":
        has_transpose = any(isinstance(ln, MatMulLine) and ln.transposed for ln in program.lines)
        return "dense" if has_transpose else "matrix-free"
    return method


def block_size(method: str, B: int, sizes: Mapping[Dim, int]) -> int:
    """Networks per random-stream block (fixed by the problem, so results ignore chunking)."""
    if method == "dense":
        return 1
    n = max(sizes.values())
    return int(max(1, min(64, _BLOCK_FLOATS // max(1, B * n))))


def network_bytes(method: str, plan: ForwardPlan, B: int, sizes: Mapping[Dim, int]) -> int:
    """Working memory of one network (bytes): live vectors, plus the matrices the dense sampler
    holds at once (a matrix lives from its first to its last use)."""
    n_max = max(sizes.values())
    live_vectors = 4 + len(plan.lines) // 2
    per_net = 8 * B * n_max * live_vectors
    if method == "dense":
        first: dict[Any, int] = {}
        for i, line in enumerate(plan.lines):
            if isinstance(line, MatMulLine):
                first.setdefault(line.matrix, i)
        live = [sum(8 * sizes[m.in_dim] * sizes[m.out_dim] for m, f in first.items()
                    if f <= i <= plan.matrix_last_use[m]) for i in range(len(plan.lines))]
        per_net += max(live, default=0)
    return per_net


def networks_per_chunk(method: str, plan: ForwardPlan, B: int, sizes: Mapping[Dim, int], budget: int) -> int:
    """How many networks one chunk may hold within ``budget`` bytes; raises if not even one fits."""
    per_net = network_bytes(method, plan, B, sizes)
    if per_net > budget:
        raise HyperParameterError(
            f"one network of this width needs about {per_net / 2**30:.3g} GiB of working memory "
            f"(method {method!r}), more than memory_budget = {budget / 2**30:.3g} GiB; reduce the width "
            "or the number of inputs, or raise memory_budget")
    return max(1, int(budget // per_net))


def chunks(seed: Any, samples: int, block: int, per_chunk_blocks: int) -> list[tuple[int, Chunk]]:
    """``(first network, chunk)`` for every chunk; block i's stream is child i of the seed."""
    n_blocks = -(-samples // block)
    children = seed_sequence(seed).spawn(n_blocks)
    out = []
    for first in range(0, n_blocks, per_chunk_blocks):
        ids = range(first, min(first + per_chunk_blocks, n_blocks))
        out.append((first * block, Chunk([np.random.default_rng(children[i]) for i in ids],
                                         [min(block, samples - i * block) for i in ids])))
    return out


def run_finite(
    program: Program,
    X: Any = None,
    *,
    width: int | Mapping[Any, int] = 256,
    samples: int = 1000,
    seed: Any = 0,
    method: str = "auto",
    vectors: Iterable[Vector] = (),
    return_kernels: bool = False,
    memory_budget: int = DEFAULT_MEMORY_BUDGET,
) -> FiniteRun:
    """Execute ``samples`` independent finite-width networks of ``program`` on inputs ``X``.

    Parameters
    ----------
    program : Program
    X : array, shape (B, d) or (B, T, d), optional
        Omitted for a program that reads no data: one symbolic point (``B = 1``).
    width : int or mapping
        Size of the hidden dims: dim ``D`` gets ``round(D.ratio · width)`` coordinates (or
        ``{dim or name: size}``, taken as given).
    samples : int
        Number of independent networks S.
    seed : int, SeedSequence or Generator
    method : {"auto", "dense", "matrix-free"}
        ``"auto"`` is matrix-free unless the program has transposed MatMuls.
    vectors : iterable of Vector
        Vectors to return, each as an array of shape (S, B, n) (memory: S·B·n floats each).
    return_kernels : bool
        Also return the per-network conditional output covariances K̂ (S, B·R, B·R).
    memory_budget : int
        Bytes one chunk of networks may use; results do not depend on it.
    """
    Xa = inputs_or_point(program, X)
    if isinstance(vectors, Vector) or not isinstance(vectors, Iterable):
        raise ProgramError(f"vectors must be a list of vectors of the program, got {vectors!r}; pass [v] for one")
    vectors = list(vectors)
    for v in vectors:
        if not isinstance(v, Vector):
            raise ProgramError(f"vectors must be a list of vectors of the program, got an item {v!r}")
        program.check_own(v)
    if not program.outputs and not vectors:
        raise ProgramError("the program has no outputs; add p.readout(h, sigma=...) first")
    samples = check_count(samples, "samples")
    budget = check_memory_budget(memory_budget)
    method = choose_method(program, method)
    sizes = resolve_widths(program, width, Xa.shape[-1])
    B, R = Xa.shape[0], program.num_outputs
    check_size(samples * B * R, "the outputs")
    for v in vectors:
        check_size(samples * B * sizes[v.dim], f"the values of {v.name}")
    if return_kernels:
        check_size(samples * (B * R) ** 2, "the conditional kernels")
    plan = ForwardPlan(program, vectors)
    block = block_size(method, B, sizes)
    per_chunk = max(1, networks_per_chunk(method, plan, B, sizes, budget) // block)

    outputs = np.empty((samples, B, R))
    kernels = np.empty((samples, B * R, B * R)) if return_kernels else None
    kept = {v: np.empty((samples, B, sizes[v.dim])) for v in vectors}
    for lo, chunk in chunks(seed, samples, block, per_chunk):
        state = FiniteState(plan, sizes, Xa, chunk, method, World())
        run_forward(plan, state, "finite")
        hi = lo + chunk.size
        outputs[lo:hi] = readout_outputs(program, state.values, sizes, chunk)
        if kernels is not None:
            kernels[lo:hi] = conditional_kernels(program, state.values, sizes, B)
        for v in vectors:
            kept[v][lo:hi] = state.values[v]
    if not np.all(np.isfinite(outputs)):
        raise NumericalError("finite network produced non-finite outputs (overflow); "
                             "reduce sigma_w, depth or the input scale")
    return FiniteRun(outputs.reshape(samples, B * R), kernels, kept, {d.name: s for d, s in sizes.items()})


def readout_outputs(program: Program, values: Mapping[Vector, Array], sizes: Mapping[Dim, int],
                    chunk: Chunk) -> Array:
    """Outputs ``y_r = Σ_k v_kᵀ h_{r,k} / √(K n) + b_v`` of one chunk, shape (S_c, B, R); draws
    ``v`` (K, n) then ``b_v`` per readout (K = 1 draws exactly ``v`` (n,) from the stream)."""
    outputs = []
    for r in program.readouts:
        n, K = sizes[r.dim], r.num_parts
        v, b = chunk.normal((K, n)), chunk.normal(())
        scale = r.sigma / np.sqrt(K * n)
        outputs += [sum(np.einsum("sbn,sn->sb", values[h], v[:, k]) for k, h in enumerate(out)) * scale
                    + (r.bias * b)[:, None] for out in r.parts]
    if not outputs:  # a program run for its vectors only
        return np.empty((chunk.size, next(iter(values.values())).shape[1], 0))
    return np.stack(outputs, axis=-1)


def conditional_kernels(program: Program, values: Mapping[Vector, Array], sizes: Mapping[Dim, int],
                        B: int) -> Array:
    """Per network, the covariance (S, B·R, B·R) of the outputs given the hidden vectors."""
    outs = program.outputs
    R = len(outs)
    S = next(iter(values.values())).shape[0]
    K = np.zeros((S, B, R, B, R))
    for r, (ro, hs) in enumerate(outs):
        for s, (ro2, hs2) in enumerate(outs):
            if ro is ro2 and s >= r:
                gram = sum(np.matmul(values[h], values[h2].transpose(0, 2, 1)) for h, h2 in zip(hs, hs2, strict=True))
                block = ro.sigma**2 / (len(hs) * sizes[ro.dim]) * gram + ro.bias**2
                K[:, :, r, :, s] = block
                K[:, :, s, :, r] = block.transpose(0, 2, 1)
    return K.reshape(S, B * R, B * R)


def sample(
    program: Program,
    X: Any = None,
    *,
    width: int | Mapping[Any, int] = 256,
    samples: int = 1000,
    seed: Any = 0,
    method: str = "auto",
    memory_budget: int = DEFAULT_MEMORY_BUDGET,
) -> Array:
    """Outputs of ``samples`` independent finite-width networks, shape (samples, B·R).

    Weights are ``N(0, σ²/n_in)``; readouts ``y = vᵀh/√n + b_v``. See :func:`run_finite` for
    the parameters and for hidden vectors and kernels.
    """
    return run_finite(program, X, width=width, samples=samples, seed=seed, method=method,
                      memory_budget=memory_budget).outputs
