"""Finite-width interpreter: real random networks, many at once.

Two samplers execute the same lines and differ only in MatMul:

* ``"dense"`` (the reference) draws every matrix ``W`` with iid ``N(0, σ²/n_in)``
  entries and multiplies (batched BLAS over networks);
* ``"matrix-free"`` draws each MatMul line ``g = W h`` from its exact
  conditional law given the lines already drawn (DESIGN §3): if ``W`` was used
  before on ``H = [h₁ … h_k]`` giving ``G = [g₁ … g_k]``, then
  ``W h | past ~ N(G c, (σ²/n_in) ‖Π⊥h‖² I)`` with ``c = H⁺ h`` — jointly over the
  batch of inputs. It never forms ``W``: cost O(n k²) instead of O(n² k). It is
  exact in law at every width for programs without transposed MatMuls.

Randomness: networks are grouped in fixed blocks that each own one stream
spawned from ``SeedSequence(seed)``; a block's draws happen in program order.
The block size depends on the sampler and the problem size only, never on the
memory budget, so results do not depend on how networks are chunked.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from netsor.errors import HyperParameterError, NumericalError, ProgramError, UnsupportedError
from netsor.ir import (
    BiasLine,
    DataLine,
    Dim,
    LinCombLine,
    MatMulLine,
    NonLinLine,
    Program,
    Vector,
)
from netsor.validate import check_count, check_inputs

Array = np.ndarray

#: Default bound on the memory of one chunk of networks (bytes).
DEFAULT_MEMORY_BUDGET = 2**30
#: Matrix-free blocks hold at most this many floats per vector (fixes the block size).
_BLOCK_FLOATS = 2**20
_METHODS = ("auto", "dense", "matrix-free")


@dataclass
class FiniteRun:
    """Results of :func:`run_finite`.

    Attributes
    ----------
    outputs : array, shape (S, B·R)
        Outputs indexed ``b·R + r``.
    kernels : array, shape (S, B·R, B·R) or None
        Per network, the covariance of the outputs given everything but the
        readout: ``σ_v² ⟨h_r(x_i), h_s(x_j)⟩ / n + bias²`` within a readout
        (the outputs are exactly ``N(0, K̂)`` given the hidden layers).
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
    """Sizes of every dim: one int for all hidden dims, or a mapping by Dim or name."""
    sizes: dict[Dim, int] = {program.data_dim: d}
    for dim in program.dims:
        if isinstance(width, Mapping):
            value = width.get(dim, width.get(dim.name))
            if value is None:
                raise HyperParameterError(f"no width given for dim {dim.name!r}: width={dict(width)}")
        else:
            value = width
        sizes[dim] = check_count(value, f"width of dim {dim.name!r}")
    return sizes


class _Plan:
    """What the interpreter needs to know about a program before running it."""

    def __init__(self, program: Program, keep: Iterable[Vector]) -> None:
        lines = program.lines
        outputs = {v for _, v in program.outputs}
        keep = set(keep) | outputs
        needed: set[Vector] = set(keep)
        for line in reversed(lines):
            if line.out in needed:
                needed.update(_inputs_of(line))
        self.lines = [ln for ln in lines if ln.out in needed]
        self.last_use: dict[Vector, int] = {}
        self.matrix_last_use: dict[Any, int] = {}
        for i, line in enumerate(self.lines):
            for v in _inputs_of(line):
                self.last_use[v] = i
            if isinstance(line, MatMulLine):
                self.matrix_last_use[line.matrix] = i
        for v in keep:
            self.last_use[v] = len(self.lines)
        self.keep = keep


def _inputs_of(line: Any) -> tuple[Vector, ...]:
    if isinstance(line, MatMulLine):
        return (line.arg,)
    if isinstance(line, LinCombLine | NonLinLine):
        return tuple(line.args)
    return ()


class _Chunk:
    """A group of networks executed together: S_c networks made of whole blocks."""

    def __init__(self, rngs: list[np.random.Generator], block_sizes: list[int]) -> None:
        self.rngs, self.block_sizes = rngs, block_sizes
        self.size = sum(block_sizes)

    def normal(self, shape: tuple[int, ...]) -> Array:
        """Standard normals of shape (S_c, *shape), each block from its own stream."""
        return np.concatenate([rng.standard_normal((b, *shape)) for rng, b in
                               zip(self.rngs, self.block_sizes, strict=True)])


class _Executor:
    """Runs a plan on one chunk of networks; MatMul is delegated to the sampler method."""

    def __init__(self, plan: _Plan, sizes: dict[Dim, int], X: Array, chunk: _Chunk, method: str) -> None:
        self.plan, self.sizes, self.X, self.chunk, self.method = plan, sizes, X, chunk, method
        self.B = X.shape[0]
        self.values: dict[Vector, Array] = {}
        self.dense_W: dict[Any, Array] = {}
        # matrix-free memory per matrix: previous arguments (S, k, n_in) and results (S, k, n_out)
        self.history: dict[Any, tuple[Array, Array]] = {}

    def run(self) -> dict[Vector, Array]:
        for i, line in enumerate(self.plan.lines):
            self.values[line.out] = self.execute(line)
            for v in _inputs_of(line):
                if self.plan.last_use[v] <= i:
                    self.values.pop(v, None)
            if isinstance(line, MatMulLine) and self.plan.matrix_last_use[line.matrix] <= i:
                self.dense_W.pop(line.matrix, None)
                self.history.pop(line.matrix, None)
        return self.values

    def execute(self, line: Any) -> Array:
        if isinstance(line, BiasLine):
            return draw_bias(line, self.chunk, self.sizes, self.B)
        if isinstance(line, MatMulLine):
            return self._dense_matmul(line) if self.method == "dense" else self._conditional_matmul(line)
        return evaluate_deterministic(line, self.values, self.X, self.chunk.size)

    def _dense_matmul(self, line: MatMulLine) -> Array:
        W = line.matrix
        n_in, n_out = self.sizes[W.in_dim], self.sizes[W.out_dim]
        if W not in self.dense_W:
            # Stored as (S, n_in, n_out) so that W h is h @ M.
            self.dense_W[W] = self.chunk.normal((n_in, n_out)) * (W.sigma / np.sqrt(n_in))
        M = self.dense_W[W]
        h = self.values[line.arg]
        return np.matmul(h, M.transpose(0, 2, 1) if line.transposed else M)

    def _conditional_matmul(self, line: MatMulLine) -> Array:
        if line.transposed:
            raise UnsupportedError("the matrix-free sampler does not handle transposed MatMuls; "
                                   "use method='dense'")
        W = line.matrix
        n_in, n_out = self.sizes[W.in_dim], self.sizes[W.out_dim]
        h = np.ascontiguousarray(np.broadcast_to(self.values[line.arg], (self.chunk.size, self.B, n_in)))
        xi = self.chunk.normal((self.B, n_out))
        g = conditional_matmul(W.sigma, n_in, h, self.history.get(W), xi)
        if self.plan.matrix_last_use[W] > self.plan.lines.index(line):
            self.history[W] = extend_history(self.history.get(W), h, g)
        return g


def data_view(X: Array, step: int | None) -> Array:
    """The (B, d) slice of the data read by a DataLine with this ``step``."""
    return X if step is None else X[:, step, :]


def evaluate_deterministic(line: Any, values: Mapping[Vector, Array], X: Array, S: int) -> Array:
    """Data, LinComb and NonLin lines: the same in every execution (arrays (S, B, n))."""
    if isinstance(line, DataLine):
        x = data_view(X, line.step)
        return np.broadcast_to(x, (S, *x.shape))
    if isinstance(line, LinCombLine):
        out: Any = 0.0
        for c, a in zip(line.coeffs, line.args, strict=True):
            out = out + c * values[a]
        return np.asarray(out)
    assert isinstance(line, NonLinLine)
    return line.expr.evaluate({a: values[a] for a in line.args})


def draw_bias(line: BiasLine, chunk: _Chunk, sizes: Mapping[Dim, int], B: int) -> Array:
    b = chunk.normal((sizes[line.out.dim],)) * line.sigma
    return np.broadcast_to(b[:, None, :], (chunk.size, B, b.shape[-1]))


def conditional_matmul(sigma: float, n_in: int, h: Array, past: tuple[Array, Array] | None, xi: Array) -> Array:
    """Draw ``g = W h`` given earlier uses ``past = (H, G)`` of the same ``W`` (``G = W H``).

    ``W h | past ~ N(Cᵀ G, (σ²/n_in) (Π⊥h)(Π⊥h)ᵀ ⊗ I)`` with ``C = (H Hᵀ)⁺ H hᵀ``: exact
    because the rows of ``W`` are iid Gaussian. Shapes: ``h`` (S, B, n_in), ``H`` (S, k, n_in),
    ``G`` (S, k, n_out), ``xi`` (S, B, n_out) standard normal; returns (S, B, n_out).
    """
    if past is None:
        residual, mean = h, None
    else:
        H, G = past
        coef = projection_coefficients(H, h)  # (S, k, B)
        residual = h - np.matmul(coef.transpose(0, 2, 1), H)
        mean = np.matmul(coef.transpose(0, 2, 1), G)
    cov = np.matmul(residual, residual.transpose(0, 2, 1)) * (sigma**2 / n_in)
    g = np.matmul(psd_sqrt(cov), xi)
    if mean is not None:
        g += mean
    return g


def extend_history(past: tuple[Array, Array] | None, h: Array, g: Array) -> tuple[Array, Array]:
    """Append a use ``g = W h`` to the conditioning set of ``W`` (stacked along axis 1)."""
    if past is None:
        return h, g
    return np.concatenate([past[0], h], axis=1), np.concatenate([past[1], g], axis=1)


def projection_coefficients(H: Array, h: Array) -> Array:
    """``c = (H Hᵀ)⁺ H hᵀ`` per network: (S, k, n), (S, B, n) → (S, k, B)."""
    gram = np.matmul(H, H.transpose(0, 2, 1))
    vals, vecs = np.linalg.eigh(gram)
    cutoff = vals[:, -1:] * (gram.shape[-1] * np.finfo(float).eps * 10)
    inv = np.where(vals > cutoff, 1.0 / np.where(vals > cutoff, vals, 1.0), 0.0)
    rhs = np.matmul(H, h.transpose(0, 2, 1))
    return np.matmul(vecs * inv[:, None, :], np.matmul(vecs.transpose(0, 2, 1), rhs))


def psd_sqrt(cov: Array) -> Array:
    """The symmetric square root of a stack of PSD matrices (..., B, B) (singular allowed).

    The symmetric root is continuous in ``cov``, so two executions that share the noise
    and have close covariances get close draws (what the coupling needs).
    """
    vals, vecs = np.linalg.eigh(cov)
    return np.matmul(vecs * np.sqrt(np.maximum(vals, 0.0))[..., None, :], np.swapaxes(vecs, -1, -2))


def _choose_method(program: Program, method: str) -> str:
    if method not in _METHODS:
        raise HyperParameterError(f"method must be one of {_METHODS}, got {method!r}")
    has_transpose = any(isinstance(ln, MatMulLine) and ln.transposed for ln in program.lines)
    if method == "auto":
        return "dense" if has_transpose else "matrix-free"
    if method == "matrix-free" and has_transpose:
        raise UnsupportedError("the program has transposed MatMuls: use method='dense'")
    return method


def _block_size(method: str, B: int, sizes: dict[Dim, int]) -> int:
    if method == "dense":
        return 1
    n = max(sizes.values())
    return int(max(1, min(64, _BLOCK_FLOATS // max(1, B * n))))


def _chunk_networks(method: str, program: Program, B: int, sizes: dict[Dim, int],
                    budget: int) -> int:
    """How many networks one chunk may hold within ``budget`` bytes (at least one)."""
    n_max = max(sizes.values())
    live_vectors = 4 + len(program.lines) // 2
    per_net = 8 * B * n_max * live_vectors
    if method == "dense":
        per_net += 8 * sum(sizes[m.in_dim] * sizes[m.out_dim] for m in program.matrices)
    return max(1, int(budget // max(per_net, 1)))


def run_finite(
    program: Program,
    X: Any,
    width: int | Mapping[Any, int] = 256,
    samples: int = 1000,
    seed: int | np.random.SeedSequence = 0,
    method: str = "auto",
    vectors: Iterable[Vector] = (),
    return_kernels: bool = False,
    memory_budget: int = DEFAULT_MEMORY_BUDGET,
) -> FiniteRun:
    """Execute ``samples`` independent finite-width networks of ``program`` on inputs ``X``.

    Parameters
    ----------
    program : Program
    X : array, shape (B, d) or (B, T, d)
    width : int or mapping
        Size of every hidden dim (or ``{dim or name: size}``).
    samples : int
        Number of independent networks S.
    seed : int or SeedSequence
    method : {"auto", "dense", "matrix-free"}
        ``"auto"`` is matrix-free unless the program has transposed MatMuls.
    vectors : iterable of Vector
        Vectors to return, each as an array of shape (S, B, n) (memory: S·B·n floats each).
    return_kernels : bool
        Also return the per-network conditional output covariances K̂ (S, B·R, B·R).
    memory_budget : int
        Bytes one chunk of networks may use; results do not depend on it.
    """
    Xa = check_inputs(program, X)
    if not program.outputs and not vectors:
        raise ProgramError("the program has no outputs; add p.readout(h, sigma=...) first")
    samples = check_count(samples, "samples")
    vectors = list(vectors)
    for v in vectors:
        program._check_own(v)
    method = _choose_method(program, method)
    sizes = resolve_widths(program, width, Xa.shape[-1])
    plan = _Plan(program, vectors)
    B, R = Xa.shape[0], program.num_outputs
    block = _block_size(method, B, sizes)
    n_blocks = -(-samples // block)
    seq = seed if isinstance(seed, np.random.SeedSequence) else np.random.SeedSequence(check_count(seed, "seed", 0))
    children = seq.spawn(n_blocks)
    per_chunk = max(1, _chunk_networks(method, program, B, sizes, memory_budget) // block)

    outputs = np.empty((samples, B, R))
    kernels = np.empty((samples, B * R, B * R)) if return_kernels else None
    kept = {v: np.empty((samples, B, sizes[v.dim])) for v in vectors}
    for first in range(0, n_blocks, per_chunk):
        ids = range(first, min(first + per_chunk, n_blocks))
        bsizes = [min(block, samples - i * block) for i in ids]
        chunk = _Chunk([np.random.default_rng(children[i]) for i in ids], bsizes)
        values = _Executor(plan, sizes, Xa, chunk, method).run()
        lo, hi = first * block, first * block + chunk.size
        outputs[lo:hi] = readout_outputs(program, values, sizes, chunk)
        if return_kernels:
            kernels[lo:hi] = conditional_kernels(program, values, sizes, B)
        for v in vectors:
            kept[v][lo:hi] = values[v]
    if not np.all(np.isfinite(outputs)):
        raise NumericalError("finite network produced non-finite outputs (overflow); "
                             "reduce sigma_w, depth or the input scale")
    return FiniteRun(outputs.reshape(samples, B * R), kernels, kept,
                     {d.name: s for d, s in sizes.items()})


def readout_outputs(program: Program, values: Mapping[Vector, Array], sizes: Mapping[Dim, int],
                    chunk: _Chunk) -> Array:
    """Outputs ``y_r = vᵀ h_r / √n + b_v`` of one chunk, shape (S_c, B, R); draws v, b_v per readout."""
    parts = []
    for r in program.readouts:
        n = sizes[r.vectors[0].dim]
        v, b = chunk.normal((n,)), chunk.normal(())
        parts += [np.einsum("sbn,sn->sb", values[h], v) * (r.sigma / np.sqrt(n)) + (r.bias * b)[:, None]
                  for h in r.vectors]
    return np.stack(parts, axis=-1)


def conditional_kernels(program: Program, values: Mapping[Vector, Array], sizes: Mapping[Dim, int],
                        B: int) -> Array:
    """Per network, the covariance (S, B·R, B·R) of the outputs given the hidden vectors."""
    outs = program.outputs
    R = len(outs)
    S = next(iter(values.values())).shape[0]
    K = np.zeros((S, B, R, B, R))
    for r, (ro, h) in enumerate(outs):
        for s, (ro2, h2) in enumerate(outs):
            if ro is ro2 and s >= r:
                n = sizes[h.dim]
                block = ro.sigma**2 * np.matmul(values[h], values[h2].transpose(0, 2, 1)) / n + ro.bias**2
                K[:, :, r, :, s] = block
                K[:, :, s, :, r] = block.transpose(0, 2, 1)
    return K.reshape(S, B * R, B * R)


def sample(
    program: Program,
    X: Any,
    width: int | Mapping[Any, int] = 256,
    samples: int = 1000,
    seed: int = 0,
    method: str = "auto",
    memory_budget: int = DEFAULT_MEMORY_BUDGET,
) -> Array:
    """Outputs of ``samples`` independent finite-width networks, shape (samples, B·R).

    Weights are ``N(0, σ²/n_in)``; readouts ``y = vᵀh/√n + b_v``. See
    :func:`run_finite` for the parameters and for hidden vectors and kernels.
    """
    return run_finite(program, X, width=width, samples=samples, seed=seed, method=method,
                      memory_budget=memory_budget).outputs
