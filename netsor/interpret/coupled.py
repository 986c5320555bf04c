"""Coupled (dual) execution: a finite-width and an infinite-width run driven by the same noise.

Walking the program line by line (DESIGN §3), every MatMul line ``g = W h`` is,
given the past, Gaussian in both executions:

* finite width: ``N(C_finᵀ G_fin, (σ²/n_in) (Π⊥h)(Π⊥h)ᵀ)`` from the empirical Gram
  matrix of the earlier arguments of ``W`` (exactly the matrix-free sampler);
* infinite width: the same formula with the Gram matrix replaced by its limit
  ``E[Z^{hᵢ} Z^{hⱼ}]`` (from :mod:`netsor.infinite`); the ``n`` coordinates of
  the limit execution are iid copies of the ``Z``'s.

Both draw with the same standard normal ``ξ`` and the symmetric square root of
their covariances, and share biases. With transposes (Netsor⊤) the finite draw
conditions on the earlier uses of ``W`` and ``Wᵀ`` and the limit adds the exact
correction ``Ż`` of the expectation engine (programs it takes). The outputs are, given the hidden layers,
``N(0, K̂)`` at finite width and ``N(0, K)`` in the limit: the finite outputs
(``vᵀh/√n + b``, exactly those of the matrix-free sampler) are whitened by
``K̂^{-1/2}`` and coloured by ``K^{1/2}``, so the limit outputs are exact GP
samples driven by the same noise. The coupling cost of a
vector, ``(1/n) Σ_α |x_α^fin − x_α^lim|^p``, is a computable upper bound on
``W_p^p`` between the finite-width law and its limit; its ``1/p``-th power
decays like ``n^{-1/2}``. A MatMul line whose limiting conditional variance
vanishes is almost surely a LinComb of earlier G-vectors: it is detected,
executed as that LinComb in the limit, and reported in ``degenerate``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from netsor.errors import NumericalError, UnsupportedError
from netsor.interpret.finite import (
    block_size,
    chunks,
    conditional_kernels,
    networks_per_chunk,
    readout_outputs,
    resolve_widths,
)
from netsor.interpret.forward import CoupledState, FiniteState, ForwardPlan, World, run_forward
from netsor.interpret.infinite import DEFAULT_RTOL, Limit
from netsor.ir import Program, Vector
from netsor.linalg import psd_sqrt
from netsor.validate import check_count, check_memory_budget, check_real, inputs_or_point

Array = np.ndarray


@dataclass
class CoupledRun:
    """Results of :func:`coupled`.

    Attributes
    ----------
    outputs_finite, outputs_limit : arrays, shape (S, B·R)
        Outputs of the two executions (same readout vectors).
    line_costs : dict
        For each executed vector (by name): array (S, B) of ``(1/n) Σ_α |x^fin_α − x^lim_α|^p``.
    output_costs : array, shape (S, B·R)
        ``|y^fin − y^lim|^p`` of the realised coupling of the outputs.
    output_costs_expected : array, shape (S, B·R)
        ``E[|y^fin − y^lim|² | hidden layers] = diag((√K̂ − √K)²)``: the p = 2 cost with the readout
        noise integrated out exactly (lower variance; used by :meth:`distance`).
    degenerate : list of str
        MatMul lines whose limiting conditional variance is zero (executed as LinCombs).
    p : float
    widths : dict
    """

    outputs_finite: Array
    outputs_limit: Array
    line_costs: dict[str, Array]
    output_costs: Array
    output_costs_expected: Array
    degenerate: list[str]
    p: float
    widths: dict[str, int] = field(default_factory=dict)

    def distance(self, name: str | None = None) -> float:
        """``(mean cost)^{1/p}``: the coupling distance of a vector.

        Default: the outputs, ``(E|y^fin − y^lim|²)^{1/2}`` with the readout noise integrated out
        (an upper bound on W2 between the finite-width output law and the GP); for p ≠ 2 the
        realised ``(E|y^fin − y^lim|^p)^{1/p}``.
        """
        if name is None:
            if self.p == 2.0:
                return float(np.sqrt(np.mean(self.output_costs_expected)))
            return float(np.mean(self.output_costs) ** (1.0 / self.p))
        return float(np.mean(self.line_costs[name]) ** (1.0 / self.p))

    def summary(self) -> list[tuple[str, float]]:
        """(vector name, coupling distance) for every executed vector, then ``"outputs"``."""
        return [(k, self.distance(k)) for k in self.line_costs] + [("outputs", self.distance())]


class LimitGram:
    """Limit Gram blocks ``E[Z^{hᵢ}(x_b) Z^{hⱼ}(x_b')]`` of the arguments of each matrix."""

    def __init__(self, limit: Limit) -> None:
        self.limit = limit
        self._cache: dict[tuple[Vector, Vector], Array] = {}

    def block(self, u: Vector, v: Vector) -> Array:
        if (u, v) not in self._cache:
            self._cache[(u, v)] = self.limit.cov(u, v)
            self._cache[(v, u)] = self._cache[(u, v)].T
        return self._cache[(u, v)]

    def gram(self, args: list[Vector]) -> Array:
        return np.block([[self.block(u, v) for v in args] for u in args])


#: Largest exponent of the coupling cost (``|Δ|^p`` of differences of order 1 to 10 stays a float).
MAX_COST_EXPONENT = 64.0


def coupled(
    program: Program,
    X: Any,
    *,
    width: int | Mapping[Any, int] = 256,
    samples: int = 100,
    seed: Any = 0,
    p: float = 2.0,
    memory_budget: int = 2**30,
    rtol: float = DEFAULT_RTOL,
) -> CoupledRun:
    """Run the finite-width and the infinite-width execution of ``program`` with shared noise.

    Parameters
    ----------
    program : Program
        Transposed MatMuls (Netsor⊤) take the expectation engine's exact corrections ``Ż``: the
        programs :func:`netsor.limit` takes with ``method="expectations"``.
    X : array, shape (B, d) or (B, T, d), or None
        None for a program that reads no data (only :meth:`Program.gaussian` vectors): one point.
    width : int or mapping
        Hidden widths of the finite execution (the limit uses the same number of coordinates).
    samples : int
        Number of independent coupled pairs of networks S.
    seed : int, SeedSequence or Generator
        The finite side equals ``run_finite(..., method="matrix-free", seed=seed)`` draw for draw.
    p : float
        Exponent of the coupling cost (``1 <= p <= 64``: larger powers of O(1) differences overflow).
    memory_budget : int
        Bytes a chunk of coupled networks may use (both worlds together).
    rtol : float
        Relative tolerance of the limit world's Gram matrices and kernel (as for :func:`netsor.limit`;
        a program whose bounds cannot meet it raises :class:`~netsor.NumericalError` saying what was reached).
    """
    Xa = inputs_or_point(program, X)
    samples = check_count(samples, "samples")
    p = check_real(p, "p", minimum=1.0, maximum=MAX_COST_EXPONENT)
    budget = check_memory_budget(memory_budget)
    sizes = resolve_widths(program, width, Xa.shape[-1])
    plan = ForwardPlan(program)
    B, R = Xa.shape[0], program.num_outputs
    try:
        limit = Limit(program, Xa, rtol=check_real(rtol, "rtol", minimum=1e-15, maximum=1.0))
    except UnsupportedError as err:  # the limit world needs the engine's exact Gram matrices and Ż
        raise UnsupportedError(f"the coupled run drives the expectation engine's limit, which does not take this "
                               f"program ({err}); its limit alone is available by simulation: netsor.limit(p, X, "
                               "method='qmc')") from err
    grams = LimitGram(limit)
    block = block_size("matrix-free", B, sizes)
    per_chunk = max(1, networks_per_chunk("matrix-free", plan, B, sizes, budget // 2) // block)

    K = limit.nngp()
    root_lim = psd_sqrt(K)
    out_fin, out_lim, expected = (np.empty((samples, B * R)) for _ in range(3))
    costs = {ln.out.name: np.empty((samples, B)) for ln in plan.lines if ln.out.kind != "data"}
    degenerate: set[str] = set()
    for lo, chunk in chunks(seed, samples, block, per_chunk):
        hi = lo + chunk.size
        state = CoupledState(FiniteState(plan, sizes, Xa, chunk, "matrix-free", World()),
                             FiniteState(plan, sizes, Xa, chunk, "matrix-free", World()), grams, degenerate)

        def cost(line: Any, st: CoupledState, lo: int = lo, hi: int = hi) -> None:
            if line.out.name in costs:
                diff = st.fin.values[line.out] - st.lim.values[line.out]
                costs[line.out.name][lo:hi] = np.mean(np.abs(diff) ** p, axis=-1)

        run_forward(plan, state, "coupled", on_line=cost)
        fin = state.fin.values
        y_fin = readout_outputs(program, fin, sizes, chunk).reshape(chunk.size, B * R)
        K_hat = conditional_kernels(program, fin, sizes, B)
        root_hat = psd_sqrt(K_hat)
        # The outputs are N(0, K̂) given the hidden layers: whiten them (fresh noise on the null space
        # of K̂, if any) and colour with √K, so that y_lim ~ N(0, K) exactly and shares the noise.
        pinv_root = np.linalg.pinv(root_hat, rcond=1e-10, hermitian=True)
        null = np.eye(B * R) - np.matmul(pinv_root, root_hat)
        xi = np.einsum("sij,sj->si", pinv_root, y_fin) + np.einsum("sij,sj->si", null, chunk.normal((B * R,)))
        out_fin[lo:hi], out_lim[lo:hi] = y_fin, xi @ root_lim
        expected[lo:hi] = np.einsum("sii->si", np.matmul(root_hat - root_lim, root_hat - root_lim))
    if not (np.all(np.isfinite(out_fin)) and np.all(np.isfinite(out_lim))):
        raise NumericalError("coupled execution produced non-finite outputs; reduce sigma_w or depth")
    return CoupledRun(out_fin, out_lim, costs, np.abs(out_fin - out_lim) ** p, expected,
                      sorted(degenerate), p, {d.name: s for d, s in sizes.items()})
