"""MatMulLine: ``g := W h`` (``Wᵀ h`` when transposed, Netsor⊤).

Finite width, two samplers:

* ``"dense"`` draws ``W`` with iid ``N(0, σ²/n_in)`` entries (per network) and multiplies;
* ``"matrix-free"`` draws ``g`` from its exact conditional law given the earlier uses of ``W``
  (DESIGN §3): with ``H = [h₁ … h_k]`` and ``G = W H`` so far,
  ``W h | past ~ N(G c, (σ²/n_in) ‖Π⊥h‖² I)``, ``c = H⁺ h`` — jointly over the batch — without
  ever forming ``W``: O(n k²) instead of O(n² k). With transposes, ``W`` is also constrained
  from the left by the earlier ``F = Wᵀ U``; given both, ``W = W* + Π_U⊥ Z Π_H⊥`` (``Z`` iid
  ``N(0, σ²/n_in)``) with the least-norm solution ``W* = Π_U⊥ G H⁺ + U (UᵀU)⁺ Fᵀ``, so
  ``W h | past = Π_U⊥ (G c + noise) + U (UᵀU)⁺ Fᵀ h`` and ``Wᵀ u`` symmetrically
  (:func:`two_sided_matmul`).

Coupled: the finite world is the matrix-free draw; the limit world draws ``Ẑ`` from the same
formula with the Gram matrix of the earlier arguments (same orientation) replaced by its limit,
with the same noise ``ξ``, and adds the engine's exact ``Ż`` (below) for transposes.
Simulated (:mod:`netsor.interpret.simulation`): ``Ẑ`` as in the coupled limit world with the Gram
matrix averaged over the copies, ``Ż`` with its coefficients ``E[∂Z^x/∂Ẑ]`` from Stein's lemma
(:func:`stein_correction`).
A use whose limiting conditional variance vanishes is a LinComb of earlier uses (degenerate):
it is executed as one and reported.

Infinite width (Netsor⊤ Master Theorem, Tensor Programs III): ``Z^{Wx} = Ẑ^{Wx} + Ż^{Wx}``.
The Gaussian parts ``Ẑ`` of two uses of one ``W : n_out × n_in`` with the same orientation have
``Cov(Ẑ^{Wx}, Ẑ^{Wx'}) = σ² E[Z^x Z^{x'}]`` and ``Cov(Ẑ^{Wᵀy}, Ẑ^{Wᵀy'}) = σ² ρ E[Z^y Z^{y'}]``
with ``ρ = ratio(n_out) / ratio(n_in)``; ``Ẑ`` of uses of ``W`` and of ``Wᵀ`` are independent, and
uses of different matrices too. The correction is linear in the arguments of the earlier uses
with the other orientation:

* ``Ż^{Wx}  = σ²  Σ_{earlier Wᵀy} Z^y E[∂Z^x / ∂Ẑ^{Wᵀy}]``,
* ``Ż^{Wᵀy} = σ² ρ Σ_{earlier Wx}  Z^x E[∂Z^y / ∂Ẑ^{Wx}]``

(zero in a program without transposes). The derivatives come from the analysis
(:class:`~netsor.interpret.rules.base.LimitContext`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from netsor.errors import NumericalError
from netsor.interpret.forward import CoupledState, FiniteState
from netsor.interpret.rules.base import LimitContext, LineRule, SourceCovariance, SourceForm
from netsor.ir import Line, MatMulLine, Matrix, Vector
from netsor.linalg import psd_sqrt

Array = np.ndarray

#: A MatMul line is degenerate when its limiting conditional variance is below this fraction
#: of its unconditional variance.
DEGENERACY_TOLERANCE = 1e-10


class MatMulRule(LineRule):
    def finite(self, line: MatMulLine, state: FiniteState) -> Array:
        if state.method == "dense":
            return self._dense(line, state)
        W = line.matrix
        n_in, n_out = state.sizes[W.in_dim], state.sizes[W.out_dim]
        n_arg, n_res = (n_out, n_in) if line.transposed else (n_in, n_out)
        h = np.ascontiguousarray(np.broadcast_to(state.values[line.arg], (state.chunk.size, state.batch, n_arg)))
        xi = state.chunk.normal((state.batch, n_res))
        # per matrix: the histories (arguments, results) of its uses by W and by Wᵀ
        history = state.world.memory.setdefault(W, {False: None, True: None})
        same, other = history[line.transposed], history[not line.transposed]
        g = two_sided_matmul(W.sigma, n_in, h, same, other, xi)
        if state.last_use_of(W) > state.position:
            history[line.transposed] = extend_history(same, h, g)
        return g

    def _dense(self, line: MatMulLine, state: FiniteState) -> Array:
        W = line.matrix
        n_in, n_out = state.sizes[W.in_dim], state.sizes[W.out_dim]
        M = state.world.memory.get(W)
        if M is None:
            # Stored as (S, n_in, n_out) so that W h is h @ M.
            M = state.world.memory[W] = state.chunk.normal((n_in, n_out)) * (W.sigma / np.sqrt(n_in))
        h = state.values[line.arg]
        return np.matmul(h, M.transpose(0, 2, 1) if line.transposed else M)

    def coupled(self, line: MatMulLine, state: CoupledState) -> tuple[Array, Array]:
        """The finite draw is the matrix-free one (both orientations); the limit world draws
        ``Ẑ`` from the same formula with the limit Gram matrix of the same orientation's
        arguments and the same noise ``ξ``, and adds the Netsor⊤ correction ``Ż = Σ c · Z^y`` with
        the engine's exact coefficients (the arguments ``y`` of earlier uses of the other
        orientation, kept in the limit world's memory)."""
        fin, lim = state.fin, state.lim
        W = line.matrix
        n_in, n_out = fin.sizes[W.in_dim], fin.sizes[W.out_dim]
        n_arg, n_res = (n_out, n_in) if line.transposed else (n_in, n_out)
        S, B = fin.chunk.size, fin.batch
        h_fin = np.ascontiguousarray(np.broadcast_to(fin.values[line.arg], (S, B, n_arg)))
        xi = fin.chunk.normal((B, n_res))
        history = fin.world.memory.setdefault(W, {False: None, True: None})
        g_fin = two_sided_matmul(W.sigma, n_in, h_fin, history[line.transposed], history[not line.transposed], xi)
        # the limit world: per orientation, the arguments so far (vectors and values) and their Ẑ
        uses = lim.world.memory.setdefault(W, {False: ([], [], None), True: ([], [], None)})
        args, values, past = uses[line.transposed]
        args = [*args, line.arg]
        coef, resid, degenerate = limit_conditional(np.sqrt(variance_scale(W, line.transposed)),
                                                    state.limit.gram(args), B)
        if degenerate:
            state.degenerate.add(line.out.name)
            zhat = np.zeros((S, B, n_res))
        else:
            zhat = np.matmul(psd_sqrt(resid), xi)
        if coef is not None:
            zhat += np.matmul(coef.T, past)
        g_lim = zhat.copy()
        other_args, other_values, _ = uses[not line.transposed]
        for c, arg in state.limit.limit.analysis.corrections[line.out]:
            if isinstance(c, Vector):  # a per-input E[∂Z/∂Ẑ] (a program that reads data): not a line's value
                c = state.limit.limit.scalar(c)[None, :, None]
            g_lim += c * other_values[other_args.index(arg)]
        if fin.last_use_of(W) > fin.position:
            history[line.transposed] = extend_history(history[line.transposed], h_fin, g_fin)
            value = np.broadcast_to(lim.values[line.arg], (S, B, n_arg))
            uses[line.transposed] = (args, [*values, value], zhat if past is None else np.concatenate([past, zhat], 1))
        return g_fin, g_lim

    def simulated(self, line: MatMulLine, state: FiniteState) -> Array:
        """Copies of ``Z^{W h} = Ẑ + Ż`` over the batch given the earlier uses of ``W`` in the same
        copies. ``Ẑ``: Gaussian given the earlier ``Ẑ`` of the same orientation, with
        ``Cov = σ² E[Z^{hᵢ} Z^{hⱼ}]`` (``σ²ρ`` for ``Wᵀ``), the expectation an average over the copies
        (of the argument's coordinates for a data argument: ``x·x'/d``); as many normal rows as
        the conditional covariance has rank (none for a degenerate use). ``Ż``: the Netsor⊤
        correction from the earlier uses of the other orientation (:func:`stein_correction`)."""
        W = line.matrix
        scale = variance_scale(W, line.transposed)
        h = state.values[line.arg][0]  # one replicate: (B, copies)
        B, copies = h.shape
        history = state.world.memory.setdefault(W, {False: None, True: None})
        past, other = history[line.transposed], history[not line.transposed]
        own = (h @ h.T) / copies
        if past is None:
            gram = own
        else:
            cross = (past.args @ h.T) / copies
            gram = np.block([[past.gram, cross], [cross.T, own]])
        coef, resid, _ = limit_conditional(np.sqrt(scale), gram, B)
        root = _conditional_root(resid, np.diag(own) * scale)
        normals = state.chunk.normal((root.shape[1], state.sizes[W.out_dim]))[0]
        zhat = root @ normals
        if past is not None:
            zhat += coef.T @ past.zhat
        g = zhat if other is None else zhat + stein_correction(h, other, scale)
        if state.last_use_of(W) > state.position:
            uses = SimulatedUses(h, gram, zhat)
            if W in state.plan.two_way:  # the other orientation's corrections will need Ẑ = mix ξ
                mix = root if past is None else np.hstack([coef.T @ past.mix, root])
                uses = SimulatedUses(h, gram, zhat, mix, normals)
            history[line.transposed] = uses.after(past)
        return g[None]

    def limit(self, line: MatMulLine, context: LimitContext) -> SourceForm:
        scale = variance_scale(line.matrix, line.transposed)
        correction, errors = [], []
        for use in context.uses(line.matrix):
            if use.transposed != line.transposed:
                c, e = context.derivative(line.arg, use.out, scale)
                if isinstance(c, Vector) or c != 0.0 or e > 0.0:
                    correction.append((c, use.arg))
                    errors.append(e)
        return SourceForm(tuple(correction), tuple(errors))

    def source_covariance(self, line: MatMulLine, other: Line) -> SourceCovariance | None:
        if not isinstance(other, MatMulLine) or other.matrix is not line.matrix or other.transposed != line.transposed:
            return None
        return SourceCovariance(variance_scale(line.matrix, line.transposed), (line.arg, other.arg))


@dataclass(frozen=True)
class SimulatedUses:
    """The earlier uses of one matrix in one orientation, in the simulated limit (k uses over a
    batch of B inputs, M copies): their arguments ``args`` (kB, M), the limit Gram matrix of the
    arguments ``gram`` (kB, kB), the Gaussian parts of their results ``zhat = mix @ normals``
    (kB, M) and the standard normals drawn for them ``normals`` (K, M), used by no other line
    (``mix`` and ``normals`` only for a matrix also used the other way: Stein's lemma needs them)."""

    args: Array
    gram: Array
    zhat: Array
    mix: Array | None = None
    normals: Array | None = None

    def after(self, past: SimulatedUses | None) -> SimulatedUses:
        """These uses appended to ``past`` (``gram`` is already the Gram of all of them; ``mix`` the
        new rows over all normals, past and new)."""
        if past is None:
            return self
        mix = normals = None
        if self.mix is not None and past.mix is not None and self.normals is not None and past.normals is not None:
            mix = np.vstack([np.hstack([past.mix, np.zeros((past.mix.shape[0], self.normals.shape[0]))]), self.mix])
            normals = np.vstack([past.normals, self.normals])
        return SimulatedUses(np.vstack([past.args, self.args]), self.gram, np.vstack([past.zhat, self.zhat]), mix,
                             normals)


def _conditional_root(resid: Array, variance: Array) -> Array:
    """``L`` (B, r) with ``L Lᵀ = resid``, dropping the directions whose variance is below
    ``DEGENERACY_TOLERANCE`` relative to the inputs' own variances ``variance`` (B,) — each input
    on its own scale: a cut relative to the sum over inputs dropped the whole Ẑ of an input whose
    variance is 10 orders below another's. Columns by decreasing (relative) variance: the
    best-spread QMC dimensions first."""
    d = np.sqrt(np.maximum(variance, 0.0))
    inv = np.where(d > 0, 1.0 / np.where(d > 0, d, 1.0), 0.0)
    vals, vecs = np.linalg.eigh(resid * inv[:, None] * inv[None, :])
    vals, vecs = vals[::-1], vecs[:, ::-1]
    keep = vals > DEGENERACY_TOLERANCE
    return d[:, None] * vecs[:, keep] * np.sqrt(vals[keep])


def stein_correction(h: Array, other: SimulatedUses, scale: float) -> Array:
    """``Ż = scale · Σ_j Z^{y_j} E[∂Z^h / ∂Ẑ_j]`` over the earlier uses of the other orientation
    (arguments ``y``, Gaussian parts ``Ẑ = mix ξ``), for ``h`` (B, M) copies.

    Stein's lemma for the standard normals ``ξ`` (independent of every other normal drawn) gives
    ``E[ξ Z^h] = E[∂Z^h/∂ξ] = mixᵀ E[∂Z^h/∂Ẑ]``; the derivatives are the least-norm solution of
    that system, with ``E[ξ Z^h]`` the average over the copies. (Where ``Ẑ`` are linearly
    dependent, so are the ``y``, and the part of the derivatives the solution leaves out meets
    ``y`` in zero.) Returns (B, M)."""
    assert other.normals is not None and other.mix is not None
    moments = other.normals @ h.T / h.shape[-1]  # (K, B)
    derivatives = np.linalg.lstsq(other.mix.T, moments, rcond=None)[0]  # (kB, B)
    return scale * (derivatives.T @ other.args)


def variance_scale(W: Matrix, transposed: bool) -> float:
    """``σ²`` for a use of ``W`` and ``σ² · ratio(out_dim) / ratio(in_dim)`` for a use of ``Wᵀ``:
    the limit of ``Var((Wᵀy)_j) = (σ²/n_in) Σ_i y_i²`` per unit ``E[Z^y Z^y]``."""
    return W.sigma**2 * (W.out_dim.ratio / W.in_dim.ratio if transposed else 1.0)


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
    with np.errstate(over="ignore", invalid="ignore"):
        cov = np.matmul(residual, residual.transpose(0, 2, 1)) * (sigma**2 / n_in)
    if not np.all(np.isfinite(cov)):
        raise NumericalError("a finite network overflowed (a MatMul input is too large for float64); "
                             "reduce sigma_w, depth or the input scale")
    g = np.matmul(psd_sqrt(cov), xi)
    if mean is not None:
        g += mean
    return g


def two_sided_matmul(sigma: float, n_in: int, h: Array, same: tuple[Array, Array] | None,
                     other: tuple[Array, Array] | None, xi: Array) -> Array:
    """Draw ``g = W h`` (or ``Wᵀ h``) given the earlier uses ``same = (H, G)`` with the same
    orientation (``G = W H``) and ``other = (U, F)`` with the other one (``F = Wᵀ U``).

    ``W h | past = Π_U⊥ (G c + noise) + U (UᵀU)⁺ Fᵀ h``: the one-sided draw of
    :func:`conditional_matmul`, projected off ``span(U)``, plus the part of ``W h`` that the
    left constraints fix. For ``Wᵀ h`` swap the roles (``Wᵀ`` has iid entries too). Shapes as in
    :func:`conditional_matmul`: ``h`` (S, B, n_arg), ``U`` (S, l, n_res), ``F`` (S, l, n_arg),
    ``xi`` (S, B, n_res); ``n_in`` is ``W``'s, which sets the entries' variance ``σ²/n_in``.
    """
    g = conditional_matmul(sigma, n_in, h, same, xi)
    if other is None:
        return g
    U, F = other
    g -= np.matmul(projection_coefficients(U, g).transpose(0, 2, 1), U)
    g += np.matmul(gram_solve(U, np.matmul(F, h.transpose(0, 2, 1))).transpose(0, 2, 1), U)
    return g


def extend_history(past: tuple[Array, Array] | None, h: Array, g: Array) -> tuple[Array, Array]:
    """Append a use ``g = W h`` to the conditioning set of ``W`` (stacked along axis 1)."""
    if past is None:
        return h, g
    return np.concatenate([past[0], h], axis=1), np.concatenate([past[1], g], axis=1)


def projection_coefficients(H: Array, h: Array) -> Array:
    """``c = (H Hᵀ)⁺ H hᵀ`` per network: (S, k, n), (S, B, n) → (S, k, B)."""
    return gram_solve(H, np.matmul(H, h.transpose(0, 2, 1)))


def gram_solve(H: Array, rhs: Array) -> Array:
    """``(H Hᵀ)⁺ rhs`` per network: (S, k, n), (S, k, B) → (S, k, B) (eigenvalues below the
    rounding level of the Gram matrix are dropped)."""
    gram = np.matmul(H, H.transpose(0, 2, 1))
    vals, vecs = np.linalg.eigh(gram)
    cutoff = vals[:, -1:] * (gram.shape[-1] * np.finfo(float).eps * 10)
    inv = np.where(vals > cutoff, 1.0 / np.where(vals > cutoff, vals, 1.0), 0.0)
    return np.matmul(vecs * inv[:, None, :], np.matmul(vecs.transpose(0, 2, 1), rhs))


def limit_conditional(sigma: float, gram: Array, B: int, tolerance: float = DEGENERACY_TOLERANCE
                      ) -> tuple[Array | None, Array, bool]:
    """Coefficients, residual covariance and degeneracy of the newest use (last B rows of the
    limit Gram matrix ``gram`` of all uses of ``W`` so far).

    The use is degenerate when the trace of its conditional covariance is :func:`negligible`
    next to the trace of its unconditional covariance (relative ``tolerance``).
    """
    k = gram.shape[0] - B
    cc = gram[k:, k:]
    if k == 0:
        coef, resid = None, cc
    else:
        pp, pc = gram[:k, :k], gram[:k, k:]
        coef = np.linalg.pinv(pp, rcond=1e-12, hermitian=True) @ pc  # (k, B)
        resid = cc - pc.T @ coef
    resid = 0.5 * (resid + resid.T) * sigma**2
    degenerate = negligible(float(np.trace(resid)), float(np.trace(cc)) * sigma**2, tolerance)
    return coef, resid, degenerate


def negligible(residual: float, variance: float, tolerance: float = DEGENERACY_TOLERANCE) -> bool:
    """Whether a conditional variance ``residual`` vanishes next to the unconditional ``variance``:
    ``residual <= tolerance · variance`` (a zero variance counts as vanishing)."""
    return residual <= tolerance * max(variance, np.finfo(float).tiny)
