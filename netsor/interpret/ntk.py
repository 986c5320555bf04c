"""The neural tangent kernel of any program, with error bounds (DESIGN §4).

NTK parameterisation: every matrix, input matrix, bias, readout vector and readout bias is
trained, and gradients are taken with respect to standard-normal parameters
(``W = σ/√n_in · Ŵ``, ``b = σ_b · b̂``, ``y = σ_v v̂ᵀh/√n + σ_vb b̂_v``; a concatenated readout
``y = σ_v Σ_k v̂_kᵀh_k/√(Kn) + σ_vb b̂_v`` trains every ``v̂_k``) — Neural Tangents'
``Dense(W_std=σ, b_std=σ_b, parameterization="ntk")``.

By default the NTK is the NNGP kernel of the *tangent program* (:mod:`netsor.ir.tangent`): the
forward-mode derivative ``ẏ`` of every output along a random standard-normal direction of the
parameters has ``E[ẏ(x) ẏ(x')] = Θ(x, x')``, and in the limit

``Θ(y_r(x), y_s(x')) = σ_v²/K Σ_k (E[Z^{h_{r,k}} Z^{h_{s,k}}] + E[Z^{ḣ_{r,k}} Z^{ḣ_{s,k}}]) + σ_vb²``,

second moments of an ordinary program that the infinite-width engine computes with their error
bounds (forward vectors are even and tangents odd under the direction's sign flip, so the engine
factorises ``E[φ'(g)ġ φ'(g')ġ']``: :mod:`netsor.interpret.parity`). It assumes nothing — no
gradient independence; transposes are differentiated as they are — and costs one pass over the
program: the NTK of an RNN of T steps needs O(T²) second moments.

``backward="exact"`` or ``"independent"`` use the backward program instead
(:func:`netsor.ir.backward.gradient_program`; BatchNorm networks use it always, where
:mod:`netsor.interpret.radial` integrates the batch radius out of its powers of 1/s):

``Θ = Σ_W σ_W² Σ_{uses g=Wh, g'=Wh'} E[Z^{δg} Z^{δg'}] E[Z^h Z^{h'}]
+ Σ_b σ_b² E[Z^{δb} Z^{δb'}] + σ_v²/K Σ_k E[Z^{h_{r,k}} Z^{h_{s,k}}] + σ_vb²``

(``E[Z^h Z^{h'}] = ⟨x, x'⟩/d`` for an input matrix), where ``δ`` are the √n-scaled gradients:
under gradient independence (an independent copy of each ``Wᵀ``: exact for programs whose forward
pass uses no transposed MatMul), or with the real transposes — a use ``g = Wᵀh`` then contributes
``h ⊗ δg``, so its factors enter the sum swapped (``E[Z^h Z^{h'}] E[Z^{δg} Z^{δg'}]``, and across
orientations ``E[Z^{δg} Z^{h'}] E[Z^h Z^{δg'}]``), each transposed use with a factor
``√(n_out/n_in)`` of its matrix (1 for square ones). The bounds of the products are combined
exactly (``|AB − ÂB̂| ≤ |Â| e_B + |B̂| e_A + e_A e_B``).

Outputs of different readout calls have independent readout vectors, so their gradients are
independent: those NTK blocks are 0, like the NNGP's.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from netsor.allocator import reused_memory
from netsor.errors import HyperParameterError, ProgramError, UnsupportedError
from netsor.interpret.bounds import Bound
from netsor.interpret.infinite import (
    DEFAULT_MEMORY_BUDGET,
    DEFAULT_RTOL,
    PSD_POLICIES,
    Limit,
    analysis_of,
    default_rtol,
    limit,
    limit_method,
    worst_entry,
)
from netsor.interpret.radial import normalises_batches, partial_batch_operands, radial_program, smallest_batch
from netsor.ir.backward import BACKWARDS, GradientProgram, MatrixUse, OutputGradient, gradient_program
from netsor.ir.program import Program
from netsor.ir.tangent import TangentOutput, TangentProgram, tangent_program
from netsor.ir.variables import Vector
from netsor.linalg import largest_ratio, mirror_tile
from netsor.validate import check_choice, check_real

if TYPE_CHECKING:  # imported where used (as in _simulated)
    from netsor.interpret.simulation import SimulatedLimit

Array = np.ndarray
KERNELS = ("nngp", "ntk")
#: A second moment's bound is used in rank-one form when its largest ratio is below this share of rtol.
LOOSE_SHARE = 1e-3
#: Relative rounding of a constant term (readout bias²).
_EPS = 4 * np.finfo(float).eps

Pair = tuple[Vector, Vector]
#: ``(coefficient, pair A, pair B or None)``: a term ``coef · E[A] ⊙ E[B]`` of a kernel block.
Term = tuple[float, Pair, Pair | None]


@dataclass(frozen=True)
class Kernels:
    """Infinite-width kernels of a program's outputs, shape (B1·R, B2·R), indexed ``b·R + r``.

    Attributes
    ----------
    nngp, ntk : array or None
        The kernels asked for (``None`` for those not in ``get``).
    nngp_error, ntk_error : array or None
        Entrywise bounds on their numerical error (kernel units).
    error : float
        The largest of all bounds.
    method : {"expectations", "qmc"}
        The interpreter that computed them (:func:`netsor.limit`).
    """

    nngp: Array | None
    ntk: Array | None
    nngp_error: Array | None
    ntk_error: Array | None
    error: float
    method: str = "expectations"


def _gradients(program: Program, backward: str) -> TangentProgram | GradientProgram:
    """The program whose second moments make the kernels, held by ``program``: the tangent program
    (``"auto"``) or a backward program (``"exact"``, ``"independent"``; and ``"auto"`` on BatchNorm
    networks, whose batch radius :mod:`netsor.interpret.radial` integrates out of the powers of 1/s
    of a backward pass)."""
    if backward == "auto" and not normalises_batches(program):
        return program.derived("tangent_program", tangent_program)
    return program.derived(f"gradient_program[{backward}]", lambda p: gradient_program(p, backward))


def kernel_method(program: Program, rtol: float, method: str = "auto", *, ntk: bool = False,
                  backward: str = "auto") -> str:
    """The method :func:`kernel` uses (:func:`~netsor.interpret.infinite.limit_method` of the
    program, or of its gradient program when the NTK is asked for: BatchNorm's backward pass has
    B-dimensional expectations even where its forward pass has exact rules)."""
    return limit_method(_gradients(program, backward).program if ntk else program, rtol, method)


def kernel_rtol(program: Program, method: str = "auto", *, ntk: bool = False, backward: str = "auto") -> float:
    """A tolerance :func:`kernel` is built to meet on ``program``
    (:func:`~netsor.interpret.infinite.default_rtol` of it, or of its gradient program for the NTK)."""
    return default_rtol(_gradients(program, backward).program if ntk else program, method)


def _check_batchnorm_backward(program: Program) -> None:
    """Refuse the NTK of a program whose backward pass divides by the standard deviation ``s`` of a
    batch of B ≤ 3: ``s`` is ``r ~ χ_{B−1}`` times a bounded function of the batch's direction
    (:mod:`netsor.interpret.radial`), so the NTK holds ``E[1/r²] = ∞`` (finite-width NTKs grow
    without bound with the width)."""
    B = smallest_batch(program)
    if B is not None and B <= 3:
        raise UnsupportedError(
            f"the NTK of this BatchNorm network is infinite in the limit: its backward pass divides by the "
            f"batch standard deviation s, and E[1/s²] = ∞ for a batch of B = {B} (a centred covariance of rank "
            f"{B - 1} ≤ 2); finite-width NTKs grow with the width. Use batches of at least 4 examples")


def _radius_integrated(program: Program, pairs: list[Pair]) -> tuple[Program, Any, bool]:
    """The program the simulation runs for the second moments of ``pairs``, the map of their vectors
    into it, and whether BatchNorm radii were integrated exactly (where that is exact:
    :func:`~netsor.interpret.radial.radial_program`); else ``program`` itself, whose sampled radii
    :func:`_check_sampled_radii` must accept."""
    radial = radial_program(program, pairs)
    if radial is not None:
        return radial[0], radial[1].__getitem__, True
    return program, lambda v: v, False


def _check_sampled_radii(lim: SimulatedLimit) -> None:
    """Refuse sampled BatchNorm radii where 1/s has no finite second moment: ``s = r · (a bounded
    function of the batch's direction)``, ``r ~ χ_k`` with ``k`` the rank of the batch's centred
    covariance (≤ B − 1, and ≤ d in a first layer of d-dimensional inputs), and ``E[1/r⁴] = ∞`` for
    ``k ≤ 4``: no sampled estimate has a finite variance, so no error bound could be honest
    (``E[1/r²] = ∞``, an infinite NTK, for ``k ≤ 2``)."""
    batches = partial_batch_operands(lim.program)
    if not batches:
        return
    ranks = lim.batch_ranks(batches)
    k = int(ranks.min())
    if k > 4:
        return
    B = len(batches[int(np.argmin(ranks.min(axis=1)))])
    if k <= 2:
        raise UnsupportedError(
            f"the NTK of this BatchNorm network is infinite in the limit: a batch of B = {B} has a centred "
            f"covariance of rank {k} ≤ 2 (B examples of d-dimensional inputs give rank ≤ min(B − 1, d) in the first "
            "layer), so E[1/s²] = ∞ for its standard deviation s; use more examples or input dimensions")
    raise UnsupportedError(
        f"the NTK of this BatchNorm network is finite, but its backward pass divides by the batch standard "
        f"deviation s of a batch of B = {B} whose centred covariance has rank {k} ≤ 4 (≤ min(B − 1, d) in the "
        "first layer), so E[1/s⁴] = ∞, and the batch radius cannot be integrated out exactly here (a batch vector "
        "is used outside its BatchNorm, or a moment has another power of 1/s): no sampled estimate has a finite "
        "variance, so no error bound could be honest. Use batches of at least 6 examples with inputs of at "
        "least 5 dimensions")


def _terms(r: TangentOutput | OutputGradient, s: TangentOutput | OutputGradient, ntk: bool) -> list[Term]:
    """The terms of the kernel block of outputs ``r`` and ``s`` (of the same readout): the NNGP's
    ``σ_v²/K Σ_k E[h_rk h_sk]``, and for the NTK those of the tangents ``σ_v²/K Σ_k E[ḣ_rk ḣ_sk]``
    (:mod:`netsor.ir.tangent`) or of the parameters' gradients (:mod:`netsor.ir.backward`)."""
    coef = r.readout.sigma**2 / r.readout.num_parts
    terms: list[Term] = [(coef, pair, None) for pair in zip(r.parts, s.parts, strict=True)]
    if not ntk:
        return terms
    if isinstance(r, TangentOutput):
        assert isinstance(s, TangentOutput)
        return terms + [(coef, pair, None) for pair in zip(r.tangents, s.tangents, strict=True)]
    assert isinstance(s, OutputGradient)
    for a in r.uses:
        for b in s.uses:
            if a.matrix is b.matrix:
                (a_out, a_in), (b_out, b_in) = a.factors, b.factors
                terms.append((a.matrix.sigma**2 * _transposed_factor(a, b), (a_out, b_out), (a_in, b_in)))
    for a in r.biases:
        for b in s.biases:
            if a.vector is b.vector:
                terms.append((a.sigma**2, (a.grad, b.grad), None))
    return terms


def _transposed_factor(a: MatrixUse, b: MatrixUse) -> float:
    """``ρ^{(t_a + t_b)/2}``, ``ρ = ratio(out)/ratio(in)`` of the matrix, ``t = 1`` for a use of ``Wᵀ``:
    a use ``g = Wᵀh`` contributes ``(σ/n_in) h ⊗ δg`` to ``∂y/∂Ŵ`` (``δg`` scaled by √n_in, ``h`` in
    the out-dim), so each transposed factor of ``⟨∂y/∂Ŵ, ∂y'/∂Ŵ⟩`` carries ``√(n_out/n_in)``."""
    W = a.matrix
    return (W.out_dim.ratio / W.in_dim.ratio) ** ((a.transposed + b.transposed) / 2)


@dataclass
class Moment:
    """A second moment on a block of the pair grid: its value, the square roots ``left, right``
    of the per-point second moments of its two vectors (its Cauchy–Schwarz envelope
    ``|A| ≤ left · right``: a column (b1, 1) and a row (1, b2) on a tile, two arrays of the
    entries' shape on pairs of identical inputs) and its error bound: ``eta · left · right`` when
    that form is used (``dense`` None), else the array ``dense``."""

    value: Array
    left: Array
    right: Array
    eta: float
    dense: Array | None

    @classmethod
    def of(cls, value: Array, bound: Bound, var_left: Array, var_right: Array, *, loose: float) -> Moment:
        """The rank-one bound when its ratio is at most ``loose`` (far below the tolerance, so its
        looseness cannot matter) or the bound has no dense part; else the dense bound, which is
        tighter where sensitivities differ from pair to pair (a step kernel near colinear inputs)."""
        left, right = np.sqrt(np.abs(var_left)), np.sqrt(np.abs(var_right))
        if value.ndim == 2:
            left, right = left[:, None], right[None, :]
        # a vector whose limit is 0 (a gradient that vanishes) has a zero envelope but a bound from
        # rounding: the larger of the two envelopes keeps both |A| ≤ l r and |Â − A| ≤ η l r finite
        left, right = np.maximum(left, bound.left), np.maximum(right, bound.right)
        eta = bound.relative(left, right)
        if bound.dense is not None:
            eta += largest_ratio(bound.dense, left * right)
        if not eta < np.inf and bound.dense is not None and np.all(np.isfinite(bound.array())):
            # a finite absolute bound on an envelope of 0 (a second moment that underflowed, e^(−130)): kept dense,
            # or Cauchy–Schwarz's |Â| + l·r (below) where that is smaller
            return cls(value, left, right, 0.0, np.minimum(bound.array(), np.abs(value) + left * right))
        if not eta < np.inf:
            # no finite (or a NaN) bound from the rule — a kink of the backward pass at a form of zero
            # variance, e.g. |g − s·g| with a scalar s = 1: Cauchy–Schwarz still bounds the moment,
            # |Â − A| ≤ |Â| + l·r (inf where the value is not 0 on a zero envelope)
            return cls(value, left, right, largest_ratio(np.abs(value), left * right) + 1.0, None)
        if bound.dense is not None and eta > loose:
            return cls(value, left, right, 0.0, bound.array())
        return cls(value, left, right, eta, None)

    def error(self) -> Array:
        return self.dense if self.dense is not None else self.eta * (self.left * self.right)


class _Block:
    """Accumulates a kernel block ``bias² + Σ coef · A (⊙ B)`` in place into ``target`` (a view of
    the kernel), its error bound and its scale ``bias² + Σ coef · l_A l_B · r_A r_B`` (≤ √(K_ii K_jj)).
    Bounds of moments without dense parts stay rank one — ``|ÂB̂ − AB| ≤ (η_A(1 + η_B) + η_B(1 + η_A)
    + η_A η_B) l_A l_B · r_A r_B`` by ``|Â| ≤ (1 + η_A) l_A · r_A`` — so the bound and the scale are
    two matrix products at the end, not a pass over the block per term."""

    def __init__(self, bias: float, target: Array) -> None:
        self.bias = bias
        self.K = target
        self.written = False  # target is not written until the first term (no pass filling it with bias²)
        self.scratch: Array | None = None
        self.dense: Any = 0.0
        self.error_cols: list[tuple[float, Array, Array]] = []
        self.scale_cols: list[tuple[float, Array, Array]] = []

    def _accumulate(self, term: Array, coef: float, factor: Array | None) -> None:
        """``K += coef · term (⊙ factor)``; the first term is written straight into ``K``."""
        K = self.K
        if not self.written:
            if factor is not None:
                np.multiply(term, factor, out=K)
            else:
                np.copyto(K, term)
            if coef != 1.0:
                K *= coef
            if self.bias:
                K += self.bias**2
            self.written = True
            return
        if factor is None and coef == 1.0:
            K += term
            return
        if self.scratch is None:
            self.scratch = np.empty(K.shape)
        if factor is None:
            np.multiply(term, coef, out=self.scratch)
        else:
            np.multiply(term, factor, out=self.scratch)
            if coef != 1.0:
                self.scratch *= coef
        K += self.scratch

    def finish(self) -> None:
        """Write ``K`` where no term came (the bias² alone)."""
        if not self.written:
            self.K[...] = self.bias**2
            self.written = True

    def add(self, coef: float, a: Moment, b: Moment | None) -> None:
        if b is None:
            self._accumulate(a.value, coef, None)
            self.scale_cols.append((coef, a.left, a.right))
            if a.dense is None:
                self.error_cols.append((coef * a.eta, a.left, a.right))
            else:
                self.dense = self.dense + coef * a.dense
            return
        self._accumulate(a.value, coef, b.value)
        left, right = a.left * b.left, a.right * b.right
        self.scale_cols.append((coef, left, right))
        if a.dense is None and b.dense is None:
            ea, eb = float(a.eta), float(b.eta)  # Python floats: an infinite bound stays inf, no inf·0 warning
            eta = ea * (1 + eb) + eb * (1 + ea) + ea * eb
            self.error_cols.append((coef * eta if eta == eta else np.inf, left, right))
        else:
            ea, eb = a.error(), b.error()
            self.dense = self.dense + coef * (np.abs(a.value) * eb + np.abs(b.value) * ea + ea * eb)

    def error(self, out: Array | None = None) -> Array:
        """The block's error bound, of the block's shape (the block is in ``target``), written into
        ``out`` when given (a view of the kernel's bounds: no temporary and no copy)."""
        out = _rank_sum(self.error_cols, self.K.shape, out)
        if not isinstance(self.dense, float) or self.dense:
            out += self.dense
        if self.bias:
            out += _EPS * self.bias**2
        return out

    def scale(self) -> Array:
        """The block's scale ``bias² + Σ coef · l_A l_B · r_A r_B``, of the block's shape."""
        return _rank_sum(self.scale_cols, self.K.shape) + self.bias**2

    def ratio_bound(self) -> float:
        """An upper bound of ``max error / scale`` over the block without a pass over it, or inf.

        Where no term has a dense bound, term k's error is ``η_k`` times its own scale term (the same
        rank-one factors), so every entry's ratio is a mediant of the ``η_k`` (and of ``eps`` for
        the bias): at most their largest."""
        if not isinstance(self.dense, float):  # a dense bound was added (it starts as the float 0)
            return np.inf
        ratios = [_EPS]
        for (weight, _, _), (coef, _, _) in zip(self.error_cols, self.scale_cols, strict=True):
            if not coef > 0.0:  # a mediant needs positive weights
                return np.inf
            ratios.append(weight / coef)
        return max(ratios)


class _CheckedEntries:
    """The entries of a kernel block whose bounds are checked against ``rtol`` when the block is
    computed: on a diagonal block of one input set its upper triangle (the rest is filled by
    symmetry), and never the entries that take per-point values later (identical or exactly
    proportional inputs, ``per_point = (i, j)``: checked at those values)."""

    def __init__(self, rows: Any, cols: Any, shape: tuple[int, ...], diagonal: bool,
                 per_point: tuple[Array, Array] | None, outputs: int) -> None:
        self.rows, self.cols, self.shape, self.outputs = rows, cols, shape, outputs
        self.diagonal, self.per_point = diagonal, per_point

    @functools.cached_property
    def upper(self) -> tuple[Array, Array] | None:
        return _upper_triangle(self.shape[0]) if self.diagonal else None

    @functools.cached_property
    def skip(self) -> Array | None:
        """Entries not checked here (per-point values come later), in the order of the checked ones;
        built only when a block's bound is checked entry by entry."""
        if self.per_point is None:
            return None
        pi, pj = self.per_point
        rows, cols = self.rows, self.cols
        inside = (pi >= rows.start) & (pi < rows.stop) & (pj >= cols.start) & (pj < cols.stop)
        if not inside.any():
            return None
        skip = np.zeros(self.shape, dtype=bool)
        skip[pi[inside] - rows.start, pj[inside] - cols.start] = True
        return skip if self.upper is None else skip[self.upper]

    def largest_ratio(self, err: Array, scale: Array, r: int, s: int, rtol: float) -> tuple[float, tuple[int, int]]:
        """``max err / scale`` over the checked entries, and where it is in the kernel's ``b·R + r``
        indexing when it exceeds ``rtol`` (the error path only)."""
        if self.upper is not None:
            err, scale = err[self.upper], scale[self.upper]
        if self.skip is not None:
            err = np.where(self.skip, 0.0, err)
        ratio = largest_ratio(err, np.maximum(scale, 1e-300))
        if ratio <= rtol:
            return ratio, (0, 0)
        k = worst_entry(err, scale)
        if self.upper is not None:
            k = (self.upper[0][k[0]], self.upper[1][k[0]])
        if isinstance(self.rows, slice):
            i, j = self.rows.start + k[0], self.cols.start + k[1]
        else:
            i, j = self.rows[k[0]], self.cols[k[0]]
        return ratio, (int(i) * self.outputs + r, int(j) * self.outputs + s)


@functools.lru_cache(maxsize=4)
def _upper_triangle(n: int) -> tuple[Array, Array]:
    """``np.triu_indices(n)``, read-only (the same for every diagonal block of a sweep)."""
    upper = np.triu_indices(n)
    for index in upper:
        index.flags.writeable = False
    return upper


def _rank_sum(cols: list[tuple[float, Array, Array]], shape: tuple[int, ...], out: Array | None = None) -> Array:
    """``Σ w · u · v``: one matrix product on a tile (u columns, v rows), elementwise on pairs;
    into ``out`` when given."""
    out = np.empty(shape) if out is None else out
    if not cols:
        out[...] = 0.0
        return out
    U = np.stack([w * np.ravel(u) for w, u, _ in cols], axis=1)
    V = np.stack([np.ravel(v) for _, _, v in cols], axis=1)
    if len(shape) == 2:
        np.matmul(U, V.T, out=out)
    else:
        np.einsum("mk,mk->m", U, V, out=out)
    return out


@reused_memory()
def kernel(program: Program, X: Any = None, X2: Any = None, *, get: str | Sequence[str] = KERNELS,
           rtol: float = DEFAULT_RTOL, memory_budget: int = DEFAULT_MEMORY_BUDGET, threads: int | None = None,
           psd: str = "auto", backward: str = "auto", method: str = "auto", seed: Any = 0) -> Kernels:
    """NNGP and/or NTK of ``program`` in the infinite-width limit, from one sweep of the pair grid.

    Parameters
    ----------
    program : Program
    X : array, shape (B1, d) or (B1, T, d); None for a program that reads no data
    X2 : array, shape (B2, ...), optional
        Cross kernels between ``X`` and ``X2``.
    get : str or sequence of {"nngp", "ntk"}
    rtol : float
        Every entry's error bound is at most ``rtol`` relative to its Cauchy–Schwarz scale
        (``≤ √(K_ii K_jj)``), or :class:`~netsor.NumericalError` says what was reached.
    memory_budget, threads, psd
        As for :func:`netsor.nngp`.
    backward : {"auto", "exact", "independent"}
        How the NTK is derived. ``"auto"``: the tangent program (forward-mode, exact for every
        program the engine takes, transposes included; :mod:`netsor.ir.tangent`), except for
        BatchNorm networks, which take the backward program. ``"exact"``: the backward program
        with the real transposes (Netsor⊤). ``"independent"``: the backward program under
        gradient independence (an independent copy of each ``Wᵀ``) — the same NTK where the
        forward pass has no transposed MatMul, and wrong where it has (for
        ``y = vᵀ Wᵀ tanh(W g)/√n``, σ_W = 1.3, it gives Θ = 4.54 instead of 5.29 — finite
        networks: 5.30 ± 0.02 at width 1024, ``tests/test_empirical_ntk.py``); offered to show
        the difference. The expectation engine takes transposes where every Netsor⊤ correction
        is linear in G-vectors (with data, its coefficients ``E[∂φ]`` are per-input scalars of the
        limit); the simulation (``method="qmc"``) takes any.
    method : {"auto", "expectations", "qmc"}
        As for :func:`netsor.limit`: ``"qmc"`` estimates every second moment of the forward and
        backward programs by the joint randomised QMC simulation (Netsor⊤ included) and
        combines them replicate by replicate (:mod:`netsor.interpret.simulation`); ``seed``
        scrambles it.

    Returns
    -------
    Kernels
        ``.nngp`` and ``.ntk`` of shape (B1·R, B2·R), indexed ``b·R + r`` (R outputs), with
        entrywise error bounds.

    Examples
    --------
    >>> import numpy as np, netsor
    >>> k = netsor.kernel(netsor.zoo.mlp(2, "relu"), np.eye(3))
    >>> k.ntk.shape, bool(np.all(k.ntk >= k.nngp))
    ((3, 3), True)
    """
    try:
        wanted = (get,) if isinstance(get, str) else tuple(get)
    except TypeError:
        raise HyperParameterError(f"get must be 'nngp', 'ntk' or a sequence of them, got {get!r}") from None
    if not wanted:
        raise HyperParameterError("get must name at least one kernel: 'nngp', 'ntk' or both")
    for g in wanted:
        check_choice(g, "get", KERNELS)
    check_choice(psd, "psd", PSD_POLICIES)
    check_choice(backward, "backward", BACKWARDS)
    if not isinstance(program, Program):
        raise ProgramError(f"expected a netsor.Program, got {type(program).__name__}")
    if not program.outputs:
        raise ProgramError("the program has no outputs, so it has no kernel; add p.readout(h, sigma=...) first")
    rtol = check_real(rtol, "rtol", minimum=1e-15, maximum=1.0)
    grads = _gradients(program, backward) if "ntk" in wanted else None
    if grads is not None:
        _check_batchnorm_backward(grads.program)
    chosen = kernel_method(program, rtol, method, ntk=grads is not None, backward=backward)
    if grads is None:
        lim = limit(program, X, X2, rtol=rtol, memory_budget=memory_budget, threads=threads, method=chosen,
                    seed=seed)
        K, E = lim.nngp(psd=psd, with_error=True)
        return Kernels(K, None, E, None, lim.error, chosen)
    if chosen == "qmc":
        return _simulated(grads, X, X2, wanted, rtol=rtol, memory_budget=memory_budget, psd=psd, seed=seed)
    try:
        lim = Limit(grads.program, X, X2, rtol=rtol, memory_budget=memory_budget, threads=threads)
    except UnsupportedError as refusal:
        if backward == "auto" or analysis_of(_gradients(program, "auto").program).refusal is not None:
            raise
        raise UnsupportedError(f"{refusal}; or keep backward='auto' (the default), whose program gives this "
                               "network's exact NTK by the expectation engine") from None

    def exact() -> Kernels:
        """The kernels by the expectation engine (run again by ``lim.retried`` at tighter shares)."""
        outs = grads.outputs
        R = len(outs)
        blocks, terms, pairs = _structure(grads, wanted)
        loose = LOOSE_SHARE * lim.rtol
        n1, n2 = lim.X.shape[0], lim.X2.shape[0]
        # every entry is written (blocks, per-point entries, the mirror below) but those of outputs of
        # different readouts, which are 0: no zeroing pass over fresh memory otherwise
        fresh = np.empty if len(blocks) == R * R else np.zeros
        out = {name: (fresh((n1, R, n2, R)), fresh((n1, R, n2, R))) for name in wanted}
        # each kernel's largest ratio of a bound to its scale, checked block by block while the block is
        # in cache: (ratio, entry) per block (appended from worker threads), the scales never stored
        worst: dict[str, list[tuple[float, tuple[int, int]]]] = {name: [] for name in wanted}
        per_point = lim.per_point_pairs(pairs)

        def consume(rows: Any, cols: Any, tile: list[tuple[Array, Bound, Array, Array]]) -> None:
            """Combine one block's second moments into every kernel's block (the moments are never
            stored whole: memory for the kernels only). A block is a view of the kernel, filled in
            place; for one input set only blocks on and above the diagonal come (on a diagonal block only
            its upper triangle holds), and each fills its mirror image by the kernel's symmetry. Pairs
            of identical inputs (index arrays) come last."""
            moments = {pair: Moment.of(*m, loose=loose) for pair, m in zip(pairs, tile, strict=True)}
            tiled = isinstance(rows, slice)
            diagonal = tiled and lim.symmetric and rows == cols
            checked = _CheckedEntries(rows, cols, tile[0][0].shape, diagonal, per_point if tiled else None, R)
            for name in wanted:
                K, E = out[name]
                for r, s in blocks:
                    block = _Block(outs[r].readout.bias, K[rows, r, cols, s] if tiled else np.empty(checked.shape))
                    for coef, pa, pb in terms[(r, s, name == "ntk")]:
                        block.add(coef, moments[pa], None if pb is None else moments[pb])
                    block.finish()
                    err = block.error(E[rows, r, cols, s] if tiled else None)
                    ratio = block.ratio_bound()
                    worst[name].append((ratio, (0, 0)) if ratio <= lim.rtol
                                       else checked.largest_ratio(err, block.scale(), r, s, lim.rtol))
                    if not tiled:
                        E[rows, r, cols, s] = err
                        K[rows, r, cols, s] = block.K
                        if lim.symmetric:  # the mirrored entries (the diagonal's are the same)
                            K[cols, s, rows, r], E[cols, s, rows, r] = block.K, err
                if tiled and lim.symmetric:  # the block's mirror image, by this worker thread (the
                    # main thread's mirror of whole kernels after the sweep was 4 ms of a 65 ms NTK)
                    flat_rows, flat_cols = (slice(x.start * R, x.stop * R) for x in (rows, cols))
                    for A in (K, E):
                        mirror_tile(A.reshape(n1 * R, n2 * R), flat_rows, flat_cols)

        lim.sweep_second_moments(pairs, consume, lower_blocks=False)
        result: dict[str, tuple[Array, Array]] = {}
        largest = 0.0
        for name in wanted:
            K, E = (A.reshape(n1 * R, n2 * R) for A in out[name])
            ratio, at = max(worst[name], default=(0.0, (0, 0)))
            K, E = lim.checked_worst(K, E, ratio, at, name)
            relative = lim.relative_error
            result[name] = lim.psd_policy(K, E, relative, psd, name)
            largest = max(largest, lim.error)  # the largest bound (set by both: no further pass over E)
        nngp_pair, ntk_pair = result.get("nngp", (None, None)), result.get("ntk", (None, None))
        return Kernels(nngp_pair[0], ntk_pair[0], nngp_pair[1], ntk_pair[1], largest)

    return lim.retried(exact)


def _structure(grads: TangentProgram | GradientProgram, wanted: tuple[str, ...]
               ) -> tuple[list[tuple[int, int]], dict[tuple[int, int, bool], list[Term]], list[Pair]]:
    """The output pairs of one readout, each kernel block's terms, and every second moment they use."""
    outs = grads.outputs
    R = len(outs)
    blocks = [(r, s) for r in range(R) for s in range(R) if outs[r].readout is outs[s].readout]
    terms = {(r, s, name == "ntk"): _terms(outs[r], outs[s], name == "ntk") for r, s in blocks for name in wanted}
    pairs = list(dict.fromkeys(p for ts in terms.values() for _, pa, pb in ts for p in (pa, pb) if p is not None))
    return blocks, terms, pairs


def _simulated(grads: TangentProgram | GradientProgram, X: Any, X2: Any, wanted: tuple[str, ...], *, rtol: float,
               memory_budget: int, psd: str, seed: Any) -> Kernels:
    """The kernels by the joint QMC simulation: per replicate, every block ``bias² + Σ coef · A (⊙ B)``
    from that replicate's second moments; bounds from the spread of the replicates."""
    from netsor.interpret.simulation import SimulatedLimit, diagonal_scale

    outs = grads.outputs
    R = len(outs)
    blocks, terms, pairs = _structure(grads, wanted)
    program, image, integrated = _radius_integrated(grads.program, pairs)
    lim = SimulatedLimit(program, X, X2, rtol=rtol, memory_budget=memory_budget, seed=seed)
    if not integrated:
        _check_sampled_radii(lim)
    N = lim.X.shape[0] + (0 if lim.symmetric else lim.X2.shape[0])
    simulated = {pair: (image(pair[0]), image(pair[1])) for pair in pairs}

    def assemble(found: dict[Pair, Array]) -> Array:
        moments = {pair: found[simulated[pair]] for pair in pairs}
        kernels = []
        for name in wanted:
            K = np.zeros((N, R, N, R))
            for r, s in blocks:
                K[:, r, :, s] = outs[r].readout.bias**2 + sum(
                    coef * (moments[pa] if pb is None else moments[pa] * moments[pb])
                    for coef, pa, pb in terms[(r, s, name == "ntk")])
            kernels.append(K.reshape(N * R, N * R))
        return np.stack(kernels)

    def scale(stack: Array) -> Array:
        return np.stack([diagonal_scale(K) for K in stack])

    value, err = lim.second_moment_combination(simulated.values(), assemble, scale, "+".join(wanted))
    result = {name: lim.kernel_result(value[i], err[i], psd, name) for i, name in enumerate(wanted)}
    nngp_pair, ntk_pair = result.get("nngp", (None, None)), result.get("ntk", (None, None))
    return Kernels(nngp_pair[0], ntk_pair[0], nngp_pair[1], ntk_pair[1],
                   max(float(np.max(E, initial=0.0)) for _, E in result.values()), "qmc")


def ntk(program: Program, X: Any = None, X2: Any = None, *, rtol: float = DEFAULT_RTOL,
        memory_budget: int = DEFAULT_MEMORY_BUDGET, threads: int | None = None, psd: str = "auto",
        backward: str = "auto", method: str = "auto", seed: Any = 0) -> Array:
    """Neural tangent kernel of ``program``'s outputs in the infinite-width limit.

    NTK parameterisation, by the tangent program (see :mod:`netsor.interpret.ntk`); same
    arguments and layout as :func:`netsor.nngp`; error bounds on :func:`kernel`.

    Returns
    -------
    Theta : array, shape (B1·R, B2·R)
    """
    return kernel(program, X, X2, get="ntk", rtol=rtol, memory_budget=memory_budget, threads=threads,
                  psd=psd, backward=backward, method=method, seed=seed).ntk
