"""Degenerate MatMul lines: uses of a matrix that the limit makes linear combinations of earlier ones.

A MatMul line ``g = W h`` is, given the earlier uses ``g_j = W h_j`` of the same ``W``,
Gaussian in the limit with conditional variance ``σ² (E[Z^h Z^h] − pᵀ P⁺ p)`` per input, where
``P = (E[Z^{h_i} Z^{h_j}])`` and ``p = (E[Z^{h_j} Z^h])`` are the same-input blocks of the
limit's Gram matrix (DESIGN §3). When that variance vanishes, ``Z^h = Σ_j c_j Z^{h_j}`` with
``c = P⁺ p``, hence ``Z^g = Σ_j c_j Z^{g_j}`` almost surely: the line is a LinComb of the earlier
uses (e.g. ``W (2h) = 2 · W h``, or ``W h₃`` with ``h₃ = h₁ + 0.5 h₂``). The test is the one
the coupled run applies (:func:`~netsor.interpret.rules.matmul.limit_conditional`, relative
tolerance :data:`~netsor.interpret.rules.matmul.DEGENERACY_TOLERANCE`), here per input.

:func:`degeneracies` finds such lines; :func:`rewrite_degenerate` replaces those whose
coefficients are the same at every input by LinComb lines (a program transform,
:func:`netsor.ir.transforms.substitute`): the rewritten program has the same law in the limit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from netsor.errors import ProgramError
from netsor.interpret.coupled import LimitGram
from netsor.interpret.infinite import Limit
from netsor.interpret.rules.matmul import DEGENERACY_TOLERANCE, limit_conditional, negligible
from netsor.ir import LinCombLine, Line, MatMulLine, Matrix, Program, Vector
from netsor.ir.transforms import Renaming, Rewrite, substitute
from netsor.validate import check_real

Array = np.ndarray


@dataclass(frozen=True, eq=False)
class Degeneracy:
    """A MatMul line ``line.out = W @ line.arg`` whose limiting conditional variance given the
    earlier uses of ``W`` vanishes at every input.

    Attributes
    ----------
    line : MatMulLine
    uses : tuple of Vector
        The earlier uses ``W h_j`` it is a combination of (the ones not degenerate themselves).
    coefficients : array, shape (B, k)
        ``Z^{out}(x_b) = Σ_j coefficients[b, j] Z^{uses[j]}(x_b)`` in the limit.
    residual : array, shape (B,)
        The conditional variance relative to the unconditional one, per input.
    constant : tuple of float, or None
        Coefficients shared by every input (:func:`pooled_coefficients`, accepted when they
        leave a negligible residual at every input), or None when they vary with the input:
        then the line is not a LinComb with constant coefficients and is not rewritten.
    """

    line: MatMulLine
    uses: tuple[Vector, ...]
    coefficients: Array
    residual: Array
    constant: tuple[float, ...] | None

    @property
    def name(self) -> str:
        """The name of the degenerate vector."""
        return self.line.out.name

    @property
    def rewritable(self) -> bool:
        """Whether the coefficients are constant, so the line can be a LinComb line."""
        return self.constant is not None

    def describe(self) -> str:
        """One row: the line, its combination and whether it is rewritable."""
        head = f"{self.name} = {self.line.matrix.name} @ {self.line.arg.name}"
        if self.constant is not None:
            terms = " + ".join(f"{c:.12g}*{u.name}" for c, u in zip(self.constant, self.uses, strict=True))
            return f"{head} = {terms}"
        spread = np.ptp(self.coefficients, axis=0)
        names = ", ".join(u.name for u in self.uses)
        return (f"{head}: in the span of {names} with coefficients varying over the inputs "
                f"(spread up to {float(spread.max()):.3g}); not a LinComb with constant coefficients")


def degeneracies(program: Program, X: Any = None, *, tolerance: float = DEGENERACY_TOLERANCE) -> list[Degeneracy]:
    """The MatMul lines of ``program`` that are, in the limit on inputs ``X``, linear
    combinations of earlier uses of their matrix.

    A use ``g = W h`` is degenerate when, at every input ``x_b``, its limiting conditional
    variance given the earlier (non-degenerate) uses of ``W`` is at most ``tolerance`` times its
    unconditional variance ``σ² E[Z^h(x_b)²]`` (a zero-variance ``h`` counts as degenerate).
    Only same-input blocks of the limit are used, so a vector that is a combination of
    *other inputs'* vectors (which the coupled run's joint test also catches, e.g. data of rank
    below the batch) is not reported. Matrices used with a transpose (Netsor⊤) are not analysed.

    Parameters
    ----------
    program : Program
    X : array, shape (B, d) or (B, T, d), optional
        As for :func:`netsor.limit` (omitted for a program that reads no data).
    tolerance : float
        Relative variance below which a line is degenerate, in (0, 1]; the default
        ``DEGENERACY_TOLERANCE = 1e-10`` is the coupled run's. The residual is a difference of
        limit covariances, so their errors enter it linearly: closed forms and the exact per-input
        paths are accurate to rounding (residuals ~1e-16), and an exact identity such as
        ``h = 2h₁`` is computed consistently even by numerical expectations (the engine expands
        both sides into the same monomials); a degeneracy hidden behind a numerical
        expectation (error up to ``rtol = 1e-8``) needs a looser tolerance.

    Returns
    -------
    list of Degeneracy, in program order.
    """
    if not isinstance(program, Program):
        raise ProgramError(f"degeneracies needs a netsor.Program, got {type(program).__name__}")
    tolerance = check_real(tolerance, "tolerance (relative conditional variance)", minimum=0.0, maximum=1.0,
                           strict=True)
    limit = Limit(program, X)
    grams = LimitGram(limit)
    B = limit.X.shape[0]
    transposed = {ln.matrix for ln in program.lines if isinstance(ln, MatMulLine) and ln.transposed}
    basis: dict[Matrix, list[MatMulLine]] = {}
    found: list[Degeneracy] = []
    for line in program.lines:
        if not isinstance(line, MatMulLine) or line.matrix in transposed:
            continue
        earlier = basis.setdefault(line.matrix, [])
        found_here = _analyse(line, earlier, grams, B, tolerance) if earlier else None
        if found_here is None:
            earlier.append(line)
        else:
            found.append(found_here)
    return found


def _analyse(line: MatMulLine, earlier: list[MatMulLine], grams: LimitGram, B: int,
             tolerance: float) -> Degeneracy | None:
    """The degeneracy of ``line`` given the ``earlier`` uses of its matrix, or None."""
    k = len(earlier)
    gram = grams.gram([u.arg for u in earlier] + [line.arg])  # blocks (uses) of (B, B)
    blocks = gram.reshape(k + 1, B, k + 1, B).diagonal(axis1=1, axis2=3).transpose(2, 0, 1)  # (B, k+1, k+1)
    sigma = line.matrix.sigma
    coefficients, residual = np.empty((B, k)), np.empty(B)
    for b, block in enumerate(blocks):
        coef, resid, degenerate = limit_conditional(sigma, block, 1, tolerance)
        if not degenerate:
            return None
        assert coef is not None
        coefficients[b] = coef[:, 0]
        residual[b] = float(resid[0, 0]) / max(sigma**2 * block[k, k], np.finfo(float).tiny)
    shared = pooled_coefficients(blocks)
    v = np.append(-shared, 1.0)  # h − Σ_j c̄_j h_j: degenerate at every input?
    constant = all(negligible(sigma**2 * float(v @ block @ v), sigma**2 * float(block[k, k]), tolerance)
                   for block in blocks)
    return Degeneracy(line, tuple(u.out for u in earlier), coefficients, residual,
                      tuple(float(c) for c in shared) if constant else None)


def pooled_coefficients(blocks: Array) -> Array:
    """The one coefficient vector ``c̄`` minimising the relative residual variance summed over the
    inputs, ``Σ_b E[(Z^h − c̄ᵀ Z^H)²](x_b) / E[(Z^h)²](x_b)``, from the same-input Gram blocks
    (B, k+1, k+1) of ``[h₁ … h_k, h]``: ``(Σ_b P_b / q_b) c̄ = Σ_b p_b / q_b``.

    Solved by elimination, so an exact multiple (``h = 2 h₁``) gives its coefficient exactly.
    """
    q = np.maximum(blocks[:, -1, -1], np.finfo(float).tiny)
    A = np.sum(blocks[:, :-1, :-1] / q[:, None, None], axis=0)
    r = np.sum(blocks[:, :-1, -1] / q[:, None], axis=0)
    try:
        return np.linalg.solve(A, r)
    except np.linalg.LinAlgError:  # the earlier uses are dependent at every input
        return np.linalg.lstsq(A, r, rcond=None)[0]


#: Largest tolerance of :func:`rewrite_degenerate` (a rewrite changes the kernel by up to that share).
MAX_REWRITE_TOLERANCE = 1e-6


def rewrite_degenerate(program: Program, X: Any = None, *, tolerance: float = DEGENERACY_TOLERANCE
                       ) -> tuple[Program, Renaming, list[Degeneracy]]:
    """``program`` with every degenerate MatMul line of constant coefficients replaced by the
    LinComb line ``Σ_j c_j · (W h_j)`` of the earlier uses (same name).

    The new program has the same limit on the inputs ``X`` (its NNGP kernel equals the original's
    there, to ``tolerance`` relative: the rewritten line loses its conditional variance, at most that
    share) and, where the identity ``h = Σ_j c_j h_j`` holds coordinatewise (e.g. ``W (2h)``), the same
    finite-width law. Degeneracies are found on ``X``: one that holds only there (all-zero inputs) makes
    a program for those inputs only. ``tolerance`` is at most ``MAX_REWRITE_TOLERANCE`` (1e-6): a looser
    one would rewrite lines that are not degenerate and change the kernel (use :func:`degeneracies` to
    look for nearly degenerate lines).

    Returns
    -------
    (new program, renaming from the old program's variables, the :func:`degeneracies` found —
    those with ``rewritable`` were rewritten, the others kept as MatMul lines)
    """
    tolerance = check_real(tolerance, "rewrite_degenerate's tolerance (a looser one rewrites lines that are not "
                           "degenerate and changes the kernel; netsor.degeneracies finds nearly degenerate lines)",
                           minimum=0.0, maximum=MAX_REWRITE_TOLERANCE, strict=True)
    found = degeneracies(program, X, tolerance=tolerance)
    rewrites: dict[Vector, Rewrite] = {d.line.out: _as_lincomb(d) for d in found if d.constant is not None}
    new, renaming = substitute(program, rewrites)
    return new, renaming, found


def _as_lincomb(degeneracy: Degeneracy) -> Rewrite:
    """The rewrite building ``degeneracy``'s LinComb line in the new program."""
    assert degeneracy.constant is not None
    coeffs = degeneracy.constant

    def build(line: Line, new: Program, renaming: Renaming) -> Vector:
        out = new.new_vector(renaming.dims[line.out.dim], "G", line.out.name)
        return new.add_line(LinCombLine(out, coeffs, tuple(renaming[u] for u in degeneracy.uses)))

    return build
