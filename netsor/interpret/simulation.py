"""The infinite-width limit by joint randomised quasi-Monte-Carlo simulation of its Gaussians.

In the limit the coordinates of a program's vectors are iid copies of its random variables
``Z`` (DESIGN §2). This interpreter draws ``M`` copies directly, with the generic forward
executor (:mod:`netsor.interpret.forward`) in mode ``"simulated"``: every line acts on the
copies as the finite rule acts on coordinates, except MatMul, whose outputs ``Z^{W h}`` over the
batch are drawn from their limit law given the earlier uses of ``W`` — Gaussian, with
``Cov(Z^{W hᵢ}(x), Z^{W hⱼ}(x')) = σ² E[Z^{hᵢ}(x) Z^{hⱼ}(x')]`` — where each expectation is the
average over the same copies (the coupled run's limit world, its Gram matrix estimated instead
of known). With transposes (Netsor⊤), ``Z^{W h} = Ẑ + Ż``: ``Ẑ`` drawn as above per orientation
(uses of ``W`` and of ``Wᵀ`` have independent Gaussian parts) and ``Ż`` linear in the arguments
of the other orientation's earlier uses, with coefficients ``E[∂Z^h/∂Ẑ]`` that Stein's lemma
turns into averages over the copies (``E[ξ Z^h]`` for the normals ``ξ`` behind ``Ẑ``). Kernels,
covariances and scalars are averages over the copies.

The standard normals of one run are the rows of one scrambled Sobol' point set of ``M = 2^m``
points (one dimension per Gaussian draw, in program order; a draw beyond the counted dimensions
gets an independent set). ``R`` independently scrambled runs are ``R`` independent estimates of
every quantity; the result is their mean and its error bound ``ERROR_SES`` standard errors — per
entry, and the
propagation of earlier errors through the program is inside the spread, because each run
estimates its own covariances. (Re-using a run's estimates downstream biases it by
``O(variance)``: far below the standard error.) Rounds with more points run until every entry
meets ``rtol`` relative to ``√(K_ii K_jj)`` or ``MAX_LOG2_POINTS`` is reached; each round takes the
points the last one's error asks for at Monte-Carlo's rate (at least twice as many).

Why: where the limit's expectations are high-dimensional — a recurrent state is a function of
the pre-activations of every earlier step (the GRU) — per-entry quadrature and per-entry QMC
cost grows exponentially with the number of monomials, while one simulation of all Gaussians
costs ``O(R M × lines × B)`` and serves every entry at once. Its accuracy is that of QMC
(~1e-4 to 1e-6 relative for smooth programs), not the 1e-8 of the expectation engine.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
from scipy import special, stats

from netsor.errors import NumericalError, ProgramError, UnsupportedError
from netsor.gaussian.orthant import MC_REPLICATES
from netsor.interpret.finite import conditional_kernels
from netsor.interpret.forward import FiniteState, ForwardPlan, World, run_forward
from netsor.interpret.radial import numerical_rank
from netsor.ir import Program, Vector
from netsor.ir.expr import Expr, shared_nodes
from netsor.linalg import ensure_psd
from netsor.validate import (
    check_choice,
    check_count,
    check_memory_budget,
    check_real,
    limit_inputs,
    seed_sequence,
)

Array = np.ndarray

#: Independently scrambled replicates: the engine's one policy for randomised QMC.
REPLICATES = MC_REPLICATES
#: Points per replicate: 2^m for m in this range.
MIN_LOG2_POINTS = 12
MAX_LOG2_POINTS = 18
#: The error bound in standard errors of the mean of the replicates. The two-sided 1e-4 quantile of
#: Student's t with 15 degrees of freedom is 5.24, but the replicate means of integrands with
#: Gaussian tails are heavier-tailed than that (a scrambled point in an extreme stratum carries
#: the tail): measured on a linear program over 2000 scramblings (8000 entries), 8.8e-4 of the
#: errors exceeded 5.24 standard errors (t: 1e-4), 3.3e-3 exceeded 4 (t: 1.2e-3), none exceeded 7.
ERROR_SES = 8.0
#: Copies used to count the Gaussian draws (dimensions of the Sobol' set) of a program.
_COUNT_POINTS = 64


class SobolNoise:
    """The random stream of one replicate (the :class:`~netsor.interpret.forward.Chunk`
    interface for one network): standard normals, row after row of one scrambled Sobol' set of
    shape (rows, M). Rows beyond ``dims`` come from further independent sets (padding)."""

    size = 1

    def __init__(self, dims: int, log2_points: int, rng: np.random.Generator) -> None:
        self.log2_points, self.points, self.rng = log2_points, 2**log2_points, rng
        self.rows = self._set(max(dims, 1))
        self.used = 0

    def _set(self, dims: int) -> Array:
        u = stats.qmc.Sobol(d=dims, scramble=True, seed=self.rng).random_base2(self.log2_points).T
        return special.ndtri(np.clip(u, 2.0**-60, 1.0 - 2.0**-53))

    def normal(self, shape: tuple[int, ...]) -> Array:
        """``(1, *shape)`` standard normals; ``shape[-1]`` must be the number of copies."""
        *lead, n = shape
        if n != self.points:
            raise UnsupportedError("the simulated limit draws one normal per copy of a vector; a draw of shape "
                                   f"{shape} (a dense matrix or a readout) is not part of it")
        k = math.prod(lead)
        while self.used + k > self.rows.shape[0]:
            self.rows = np.concatenate([self.rows, self._set(max(k, 16))])
        out = self.rows[self.used:self.used + k]
        self.used += k
        return out.reshape(1, *lead, n)


class _CountingNoise:
    """Pseudo-random normals for a counting run (few copies): how many rows a program draws."""

    size = 1

    def __init__(self, points: int) -> None:
        self.points, self.used = points, 0
        self.rng = np.random.default_rng(0)

    def normal(self, shape: tuple[int, ...]) -> Array:
        self.used += math.prod(shape[:-1])
        return self.rng.standard_normal((1, *shape))


def diagonal_scale(K: Array) -> Array:
    """``√(K_ii K_jj)`` of a square kernel (every entry, those within X and within X2 included)."""
    d = np.sqrt(np.abs(np.diag(K)))
    return np.outer(d, d)


class SimulatedLimit:
    """The infinite-width limit of ``program`` on ``X`` (and ``X2``), by joint randomised QMC.

    Same interface as :class:`~netsor.interpret.infinite.Limit` for what it supports
    (:meth:`nngp`, :meth:`cov`, :meth:`var`, :meth:`scalar`, ``error``, ``stderr``). Transposed
    MatMul lines (Netsor⊤) add their ``Ż`` correction, its derivatives estimated by Stein's lemma
    from the same copies. Cost per replicate: ``O(M · B)`` per line, ``O(M · B · uses)`` per MatMul
    for its Gram matrix and an eigendecomposition of a ``B × B`` conditional covariance (B the
    inputs of X and X2 together): meant for a handful to a few hundred inputs.

    Parameters
    ----------
    program : Program
    X, X2 : arrays, shape (B, d) or (B, T, d), optional
        As for :class:`~netsor.interpret.infinite.Limit` (both input sets are simulated together).
    rtol : float
        Every entry's error bound must be at most ``rtol · √(K_ii K_jj)``; the points grow by rounds
        up to ``2**MAX_LOG2_POINTS`` per replicate, then :class:`NumericalError`.
    memory_budget : int
        Bytes one replicate may hold (its copies of the live vectors and of each matrix's
        history, and its normals); caps the points per replicate.
    seed : int, SeedSequence or Generator
        Scrambling of the Sobol' sets (results are deterministic given the seed).
    replicates : int
        Independent scramblings R (at least ``REPLICATES`` = 16, for which ``ERROR_SES`` is calibrated).

    Attributes
    ----------
    error : float or None
        Largest error bound (kernel units) of the last result; None before the first result.
    stderr : float
        Largest standard error of the last result.
    points : int
        Copies per replicate used by the last result.
    """

    def __init__(self, program: Program, X: Any = None, X2: Any = None, *, rtol: float = 1e-4,
                 memory_budget: int = 2**30, seed: Any = 0, replicates: int = REPLICATES) -> None:
        if not isinstance(program, Program):
            raise ProgramError(f"expected a netsor.Program, got {type(program).__name__}")
        self.program = program
        self.X, self.X2 = limit_inputs(program, X, X2)
        self.symmetric = X2 is None
        self.rtol = check_real(rtol, "rtol", minimum=1e-15, maximum=1.0)
        self.memory_budget = check_memory_budget(memory_budget)
        self.replicates = check_count(replicates, "replicates", minimum=REPLICATES)
        self.seed = seed_sequence(seed)
        self.error: float | None = None  # no result yet
        self.stderr = 0.0
        self.points = 0

    # ---- one pass over the program per replicate
    @property
    def _inputs(self) -> Array:
        return self.X if self.symmetric else np.concatenate([self.X, self.X2])

    def _run(self, plan: ForwardPlan, noise: Any, points: int,
             collect: Callable[[dict[Vector, Array], dict[Any, int]], Array]) -> tuple[Array, int]:
        """One forward pass of ``plan`` over ``points`` copies; ``collect(values, sizes)`` of the
        kept vectors. Returns its result and the peak number of floats held per copy."""
        # every dim's variables get the same number of copies, whatever its ratio
        sizes = {self.program.data_dim: self._inputs.shape[-1], self.program.scalar_dim: 1,
                 **{dim: points for dim in self.program.dims}}
        state = FiniteState(plan, sizes, self._inputs, noise, "simulated", World())
        peak = [0]

        def held(_line: Any, st: FiniteState) -> None:
            histories = [a for sides in st.world.memory.values() for uses in sides.values() if uses is not None
                         for a in (uses.args, uses.zhat, uses.normals) if a is not None]
            peak[0] = max(peak[0], sum(a.size for a in [*st.values.values(), *histories] if a.shape[-1] == points))

        with np.errstate(over="ignore", invalid="ignore"):
            run_forward(plan, state, "simulated", on_line=held)
        return collect(state.values, sizes), peak[0] // points

    def _estimate(self, keep: Iterable[Vector], collect: Callable[[dict[Vector, Array], dict[Any, int]], Array],
                  scale: Callable[[Array], Array], what: str) -> tuple[Array, Array]:
        """Mean and error bound of ``collect`` over the replicates, in rounds of more points until
        ``error ≤ rtol · scale(mean)`` everywhere."""
        plan = ForwardPlan(self.program, keep)
        counter = _CountingNoise(_COUNT_POINTS)
        _, per_copy = self._run(plan, counter, _COUNT_POINTS, collect)
        dims = counter.used
        # one replicate holds its normals (dims rows) and its live vectors, per copy
        affordable = self.memory_budget // (8 * (dims + per_copy + 1))
        top = min(MAX_LOG2_POINTS, int(math.log2(max(affordable, 1))))
        if top < MIN_LOG2_POINTS:
            raise NumericalError(f"{what}: the simulated limit needs {8 * (dims + per_copy)} bytes per copy and "
                                 f"at least 2^{MIN_LOG2_POINTS} copies; raise memory_budget")
        log2 = MIN_LOG2_POINTS
        while True:
            streams = self.seed.spawn(self.replicates)
            runs = []
            for stream in streams:
                noise = SobolNoise(dims, log2, np.random.default_rng(stream))
                value, _ = self._run(plan, noise, 2**log2, collect)
                runs.append(value)
            stack = np.stack(runs)
            if not np.all(np.isfinite(stack)):
                raise NumericalError(f"{what}: the simulated limit produced non-finite values (an overflow of an "
                                     "unbounded activation, or variances that blow up); reduce sigma_w or depth")
            mean = stack.mean(axis=0)
            se = stack.std(axis=0, ddof=1) / math.sqrt(self.replicates)
            err = ERROR_SES * se
            target = self.rtol * scale(mean)
            self.points, self.stderr, self.error = 2**log2, float(np.max(se, initial=0.0)), float(
                np.max(err, initial=0.0))
            ratio = float(np.max(err / np.maximum(target, 1e-300), initial=0.0))
            if np.all(err <= target) or log2 >= top:
                break
            # the next round: the points Monte-Carlo's rate (error ∝ M^{-1/2}) asks for — QMC's
            # faster rate only makes it reach the tolerance with room to spare
            log2 = min(top, max(log2 + 1, log2 + math.ceil(2 * math.log2(ratio))))
        if np.all(err <= target):
            return mean, err
        worst = ratio * self.rtol  # the largest error relative to √(K_ii K_jj)
        raise NumericalError(f"{what}: the simulated limit reached a relative error of {worst:.2g} with "
                             f"{self.replicates} × 2^{log2} copies, above rtol = {self.rtol:g}; pass rtol >= "
                             f"{2 * worst:.1g} or a larger memory_budget")

    def second_moment_combination(self, pairs: Iterable[tuple[Vector, Vector]],
                                  assemble: Callable[[dict[tuple[Vector, Vector], Array]], Array],
                                  scale: Callable[[Array], Array], what: str) -> tuple[Array, Array]:
        """Mean and error bound of ``assemble(moments)`` over the replicates, ``moments[(u, v)]`` the
        replicate's ``E[Z^u Z^v]`` over the concatenated inputs (``⟨x, x'⟩/d`` for data): a
        nonlinear combination of second moments (the NTK's sum of products) estimated replicate
        by replicate, so that its spread carries the errors of the products."""
        pairs = list(pairs)

        def collect(values: dict[Vector, Array], sizes: dict[Any, int]) -> Array:
            moments = {(u, v): values[u][0] @ values[v][0].T / values[u].shape[-1] for u, v in pairs}
            return assemble(moments)

        return self._estimate({v for pair in pairs for v in pair}, collect, scale, what)

    def split(self, K: Array) -> Array:
        """The (X, X2) block of a matrix over the concatenated inputs (with R outputs per input)."""
        if self.symmetric:
            return K
        per = K.shape[0] // (self.X.shape[0] + self.X2.shape[0])
        b1 = self.X.shape[0] * per
        return K[..., :b1, b1:]

    # ---- results
    def nngp(self, *, psd: str = "auto", with_error: bool = False) -> Any:
        """Covariance of the outputs, shape (B1·R, B2·R), indexed ``b·R + r`` (as
        :meth:`Limit.nngp <netsor.interpret.infinite.Limit.nngp>`; ``psd`` "auto" clips)."""
        check_choice(psd, "psd", ("auto", "clip", "check", "skip"))
        if not self.program.outputs:
            raise ProgramError("the program has no outputs; add p.readout(h, sigma=...) first")
        B = self._inputs.shape[0]

        def collect(values: dict[Vector, Array], sizes: dict[Any, int]) -> Array:
            return conditional_kernels(self.program, values, sizes, B)[0]

        K, E = self._estimate((), collect, diagonal_scale, "nngp")
        K, E = self.kernel_result(K, E, psd, "nngp")
        return (K, E) if with_error else K

    def kernel_result(self, K: Array, E: Array, psd: str, what: str) -> tuple[Array, Array]:
        """A kernel over the concatenated inputs and its bounds → the (X, X2) block, symmetrised, with
        the ``psd`` policy of :meth:`Limit.nngp <netsor.interpret.infinite.Limit.nngp>` ("auto"
        clips) for one input set; the clipping is added to the bounds."""
        check_choice(psd, "psd", ("auto", "clip", "check", "skip"))
        K, E = self.split(0.5 * (K + K.T)), self.split(0.5 * (E + E.T))
        if self.symmetric and psd != "skip":
            tol = max(1e-9, float(np.linalg.norm(E)) / max(float(np.max(np.diag(K))), 1e-300))
            clipped = ensure_psd(K, clip=psd != "check", tol=tol, what=what)
            E = E + np.abs(clipped - K)
            K = clipped
        self.error = float(np.max(E, initial=0.0))
        return K, E

    def cov(self, u: Vector, v: Vector | None = None, *, with_error: bool = False) -> Any:
        """``E[Z^u(x_i) Z^v(x2_j)]``, shape (B1, B2)."""
        v = u if v is None else v
        for w in (u, v):
            self.program.check_own(w)
            if w.kind in ("scalar", "data"):
                raise ProgramError(f"{w.name} is a {w.kind}, not a random vector: cov takes G- and H-vectors "
                                   "(scalar() gives a scalar's limit)")

        def collect(values: dict[Vector, Array], sizes: dict[Any, int]) -> Array:
            a, b = values[u][0], values[v][0]  # (B, M): the cross moments and each side's own
            return np.stack([a @ b.T, a @ a.T, b @ b.T]) / a.shape[-1]

        def scale(stack: Array) -> Array:
            return np.sqrt(np.abs(np.diag(stack[1]))[:, None] * np.abs(np.diag(stack[2]))[None, :])[None]

        value, err = self._estimate((u, v), collect, lambda s: np.broadcast_to(scale(s), s.shape), "cov")
        C, E = self.split(value[0]), self.split(err[0])
        return (C, E) if with_error else C

    def batch_ranks(self, batches: list[tuple[Expr, ...]]) -> Array:
        """Rank of the centred covariance ``P Σ P`` (``P = I − 11ᵀ/B``) of each batch of expressions at
        each input, shape (batches, B1 [+ B2]), from one round of copies (the smallest over the
        replicates): a structural deficit — B examples of d < B − 1 input dimensions, linear layers —
        holds exactly in every copy."""
        keep = {v for batch in batches for e in batch for v in e.args}
        replicates = []  # every replicate's ranks: _estimate keeps only their mean

        def collect(values: dict[Vector, Array], sizes: dict[Any, int]) -> Array:
            ranks = []
            for batch in batches:
                shape = np.broadcast_shapes(*(values[v].shape for e in batch for v in e.args))
                with shared_nodes():  # a batch's expressions share their operands
                    G = np.stack([np.broadcast_to(e.evaluate(values), shape)[0] for e in batch], axis=-1)  # (N, M, B)
                G = G - G.mean(axis=-1, keepdims=True)
                ranks.append(numerical_rank(np.linalg.eigvalsh(np.einsum("nmb,nmc->nbc", G, G) / G.shape[1])))
            replicates.append(np.array(ranks, dtype=float))
            return replicates[-1]

        self._estimate(keep, collect, lambda ranks: np.full(ranks.shape, np.inf), "batch ranks")  # one round
        return np.min(replicates, axis=0).astype(int)

    def var(self, u: Vector, *, with_error: bool = False) -> Any:
        """``E[(Z^u(x_i))²]`` for each input of ``X``, shape (B,)."""
        C, E = SimulatedLimit(self.program, self.X, rtol=self.rtol, memory_budget=self.memory_budget,
                              seed=self.seed, replicates=self.replicates).cov(u, with_error=True)
        return (np.diag(C).copy(), np.diag(E).copy()) if with_error else np.diag(C).copy()

    def scalar(self, s: Vector, *, with_error: bool = False) -> Any:
        """The limit of a scalar at each input of ``X``, shape (B,)."""
        self.program.check_own(s)
        if s.kind != "scalar":
            raise ProgramError(f"{s.name} is a vector, not a scalar; use cov/var for vectors")
        B1 = self.X.shape[0]

        def collect(values: dict[Vector, Array], sizes: dict[Any, int]) -> Array:
            return values[s][0, :B1, 0]

        value, err = self._estimate((s,), collect, np.abs, "scalar")
        return (value, err) if with_error else value
