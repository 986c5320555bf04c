"""The neural tangent kernel of any program without transposes, with error bounds (DESIGN §4).

NTK parameterisation: every matrix, input matrix, bias, readout vector and readout bias is
trained, and gradients are taken with respect to standard-normal parameters
(``W = σ/√n_in · Ŵ``, ``b = σ_b · b̂``, ``y = σ_v v̂ᵀh/√n + σ_vb b̂_v``; a concatenated readout
``y = σ_v Σ_k v̂_kᵀh_k/√(Kn) + σ_vb b̂_v`` trains every ``v̂_k``) — Neural Tangents'
``Dense(W_std=σ, b_std=σ_b, parameterization="ntk")``. In the limit

``Θ(y_r(x), y_s(x')) = Σ_W σ_W² Σ_{uses g=Wh, g'=Wh'} E[Z^{δg} Z^{δg'}] E[Z^h Z^{h'}]
+ Σ_b σ_b² E[Z^{δb} Z^{δb'}] + σ_v²/K Σ_k E[Z^{h_{r,k}} Z^{h_{s,k}}] + σ_vb²``

(``E[Z^h Z^{h'}] = ⟨x, x'⟩/d`` for an input matrix; the last two terms are the NNGP kernel),
where ``δ`` are the √n-scaled gradients of the backward program built under gradient
independence (:func:`netsor.ir.backward.gradient_program`): valid for programs whose forward
pass uses no transposed MatMul, with a readout independent of everything else. Every
second moment comes from the infinite-width engine with its error bound; the bounds of the
products are combined exactly (``|AB − ÂB̂| ≤ |Â| e_B + |B̂| e_A + e_A e_B``).

Outputs of different readout calls have independent readout vectors, so their gradients are
independent: those NTK blocks are 0, like the NNGP's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from netsor.errors import ProgramError
from netsor.interpret.infinite import DEFAULT_MEMORY_BUDGET, DEFAULT_RTOL, PSD_POLICIES, Limit
from netsor.ir.backward import GradientProgram, OutputGradient, gradient_program
from netsor.ir.program import Program
from netsor.ir.variables import Vector
from netsor.validate import check_choice

Array = np.ndarray
KERNELS = ("nngp", "ntk")
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
    """

    nngp: Array | None
    ntk: Array | None
    nngp_error: Array | None
    ntk_error: Array | None
    error: float


def _gradients(program: Program) -> GradientProgram:
    return program.derived("gradient_program", gradient_program)


def _terms(r: OutputGradient, s: OutputGradient, ntk: bool) -> list[Term]:
    """The terms of the kernel block of outputs ``r`` and ``s`` (of the same readout)."""
    coef = r.readout.sigma**2 / r.readout.num_parts
    terms: list[Term] = [(coef, pair, None) for pair in zip(r.parts, s.parts, strict=True)]
    if not ntk:
        return terms
    for a in r.uses:
        for b in s.uses:
            if a.matrix is b.matrix:
                terms.append((a.matrix.sigma**2, (a.grad, b.grad), (a.arg, b.arg)))
    for a in r.biases:
        for b in s.biases:
            if a.vector is b.vector:
                terms.append((a.sigma**2, (a.grad, b.grad), None))
    return terms


def _block(terms: list[Term], bias: float, moments: dict[Pair, tuple[Array, Array, Array, Array]]
           ) -> tuple[Array, Array, Array]:
    """A kernel block, its error bound and its Cauchy–Schwarz scale (≤ √(K_ii K_jj))."""
    K: Any = bias**2
    E: Any = _EPS * bias**2
    S: Any = bias**2
    for coef, pa, pb in terms:
        A, eA, la, ra = moments[pa]
        if pb is None:
            K, E = K + coef * A, E + coef * eA
            S = S + coef * np.sqrt(np.outer(np.abs(la), np.abs(ra)))
        else:
            B, eB, lb, rb = moments[pb]
            K = K + coef * A * B
            E = E + coef * (np.abs(A) * eB + np.abs(B) * eA + eA * eB)
            S = S + coef * np.sqrt(np.outer(np.abs(la * lb), np.abs(ra * rb)))
    return K, E, S


def kernel(program: Program, X: Any, X2: Any = None, *, get: str | Sequence[str] = KERNELS,
           rtol: float = DEFAULT_RTOL, memory_budget: int = DEFAULT_MEMORY_BUDGET, threads: int | None = None,
           psd: str = "auto") -> Kernels:
    """NNGP and/or NTK of ``program`` in the infinite-width limit, from one sweep of the pair grid.

    Parameters
    ----------
    program : Program
        Without transposed MatMuls (the NTK uses gradient independence; see the module notes).
    X : array, shape (B1, d) or (B1, T, d)
    X2 : array, shape (B2, ...), optional
        Cross kernels between ``X`` and ``X2``.
    get : str or sequence of {"nngp", "ntk"}
    rtol : float
        Every entry's error bound is at most ``rtol`` relative to its Cauchy–Schwarz scale
        (``≤ √(K_ii K_jj)``), or :class:`~netsor.NumericalError` says what was reached.
    memory_budget, threads, psd
        As for :func:`netsor.nngp`.

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
    wanted = (get,) if isinstance(get, str) else tuple(get)
    for g in wanted:
        check_choice(g, "get", KERNELS)
    check_choice(psd, "psd", PSD_POLICIES)
    if not isinstance(program, Program):
        raise ProgramError(f"expected a netsor.Program, got {type(program).__name__}")
    if not program.outputs:
        raise ProgramError("the program has no outputs, so it has no kernel; add p.readout(h, sigma=...) first")
    if "ntk" not in wanted:
        lim = Limit(program, X, X2, rtol=rtol, memory_budget=memory_budget, threads=threads)
        K, E = lim.nngp(psd=psd, with_error=True)
        return Kernels(K, None, E, None, lim.error)
    grads = _gradients(program)
    lim = Limit(grads.program, X, X2, rtol=rtol, memory_budget=memory_budget, threads=threads)
    outs = grads.outputs
    R = len(outs)
    blocks = [(r, s) for r in range(R) for s in range(R) if outs[r].readout is outs[s].readout]
    terms = {(r, s, name == "ntk"): _terms(outs[r], outs[s], name == "ntk") for r, s in blocks for name in wanted}
    pairs = list(dict.fromkeys(p for ts in terms.values() for _, pa, pb in ts for p in (pa, pb) if p is not None))
    moments = dict(zip(pairs, lim.second_moments(pairs), strict=True))
    n1, n2 = lim.X.shape[0], lim.X2.shape[0]
    result: dict[str, tuple[Array, Array]] = {}
    for name in wanted:
        K, E, S = (np.zeros((n1, R, n2, R)) for _ in range(3))
        for r, s in blocks:
            K[:, r, :, s], E[:, r, :, s], S[:, r, :, s] = _block(terms[(r, s, name == "ntk")],
                                                                  outs[r].readout.bias, moments)
        K, E, S = (A.reshape(n1 * R, n2 * R) for A in (K, E, S))
        K, E = lim.checked(K, E, S, name, True)
        if lim.symmetric:
            K = 0.5 * (K + K.T)
        relative = float(np.max(E / np.maximum(S, 1e-300)))
        result[name] = lim.psd_policy(K, E, relative, psd, name)
    largest = max(float(np.max(E, initial=0.0)) for _, E in result.values())
    nngp_pair, ntk_pair = result.get("nngp", (None, None)), result.get("ntk", (None, None))
    return Kernels(nngp_pair[0], ntk_pair[0], nngp_pair[1], ntk_pair[1], largest)


def ntk(program: Program, X: Any, X2: Any = None, *, rtol: float = DEFAULT_RTOL,
        memory_budget: int = DEFAULT_MEMORY_BUDGET, threads: int | None = None, psd: str = "auto") -> Array:
    """Neural tangent kernel of ``program``'s outputs in the infinite-width limit.

    NTK parameterisation, gradient independence (see :mod:`netsor.interpret.ntk`); same
    arguments and layout as :func:`netsor.nngp`; error bounds on :func:`kernel`.

    Returns
    -------
    Theta : array, shape (B1·R, B2·R)
    """
    return kernel(program, X, X2, get="ntk", rtol=rtol, memory_budget=memory_budget, threads=threads,
                  psd=psd).ntk
