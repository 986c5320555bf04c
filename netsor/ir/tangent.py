"""The tangent program (DESIGN §4): forward-mode differentiation as a program transform.

:func:`tangent_program` returns a copy of a program extended by the directional derivative of
every vector along a random direction of the parameters, ``ẋ = Σ_θ ∂x/∂θ̂ · θ̂̇`` with
``θ̂̇ ~ N(0, I)`` over the standard-normal parameters of the NTK parameterisation
(``W = σ/√n_in · Ŵ``, ``b = σ_b · b̂``). For any two outputs,
``E_θ̂̇[ẏ(x) ẏ(x')] = Σ_θ ∂y(x)/∂θ̂ · ∂y(x')/∂θ̂``: the NTK is the NNGP kernel of the tangent
outputs, a second moment of an ordinary program. The rules, walking the lines forwards, are

* bias (or Gaussian input) ``b``: ``ḃ`` a fresh G-vector of the same law;
* MatMul ``g = W h``: ``ġ = Ẇ h + W ḣ`` with ``Ẇ`` one fresh matrix of W's law per matrix (shared
  by all its uses, as the direction is: weight sharing over time is kept), ``Wᵀ`` alike; an input
  matrix gives ``ġ = U̇ x`` (the data has no tangent);
* LinComb ``g = Σ aᵢ gⁱ``: ``ġ = Σ aᵢ ġⁱ``; NonLin ``h = φ(g¹, …, gᵏ)``: ``ḣ = Σᵢ ∂ᵢφ(g) ġⁱ``
  (:mod:`netsor.ir.differentiate`);
* scalars (NetsorK moments) are held: their tangents are linear in the direction, which is
  symmetric and independent of the forward pass, so their limits vanish (as the gradients of
  scalars do in :mod:`netsor.ir.backward`);
* readout ``y = Σ_k v_kᵀ h_k/√(Kn) + b_v``: ``ẏ = Σ_k (v̇_kᵀ h_k + v_kᵀ ḣ_k)/√(Kn) + ḃ_v``, whose
  kernel is ``σ_v²/K Σ_k (E[Z^{h_k} Z^{h_k'}] + E[Z^{ḣ_k} Z^{ḣ_k'}]) + σ_vb²``: the kernel of a
  readout of the ``2K`` vectors ``h_k, ḣ_k`` with ``σ_v √2`` (:meth:`Program.readout_concat`'s
  convention), which the new program carries as its readouts.

No gradient independence is assumed: the forward pass is differentiated as it is (transposes
included), so the limit of the tangent program is the NTK wherever the engine has rules for it.
Every forward vector is even and every tangent odd under ``θ̂̇ → −θ̂̇``, so
``E[Z^x Z^{ẏ}] = 0``: in the limit tangents are independent of the forward G-vectors, and
``E[ḣ ḣ'] = Σ E[∂ᵢφ ∂ⱼφ'] E[ġⁱ ġ'ʲ]`` factorises — the NTK recursion, run by the engine.
"""

from __future__ import annotations

from dataclasses import dataclass

from netsor.errors import ProgramError
from netsor.ir.differentiate import differentiate
from netsor.ir.expr import Var, linear, product
from netsor.ir.lines import BiasLine, DataLine, LinCombLine, MatMulLine, MomentLine, NonLinLine
from netsor.ir.program import Program, Readout
from netsor.ir.transforms import Renaming, clone, materialise
from netsor.ir.variables import Dim, Matrix, Vector


@dataclass(frozen=True)
class TangentOutput:
    """One output of the original program: its readout, the vectors it reads (its parts, renamed)
    and their tangents, in the tangent program."""

    readout: Readout
    parts: tuple[Vector, ...]
    tangents: tuple[Vector, ...]


@dataclass(frozen=True)
class TangentProgram:
    """A program extended by its tangents (see :func:`tangent_program`).

    The NNGP kernel of each of ``program``'s readouts is the NTK of the original readout, with the
    same outputs. ``outputs`` lists the original outputs with their tangents; ``tangents`` maps each
    vector of the original to its tangent (data, scalars and vectors with no parameter upstream have
    none)."""

    program: Program
    renaming: Renaming
    tangents: dict[Vector, Vector]
    outputs: tuple[TangentOutput, ...]


def tangent_program(program: Program) -> TangentProgram:
    """The program extended by the tangent of every vector; its readouts are the NTK's."""
    new, ren = clone(program, name=f"{program.name} + tangents", readouts=False)
    fresh: dict[Matrix, Matrix] = {}
    tangent: dict[Vector, Vector] = {}
    for line in program.lines:
        out = line.out
        dim = ren.dims[out.dim]
        name = f"{out.name}'"
        if isinstance(line, (DataLine, MomentLine)):
            continue
        if isinstance(line, BiasLine):
            tangent[out] = new.add_line(BiasLine(new.new_vector(dim, "G", name), line.sigma))
        elif isinstance(line, MatMulLine):
            W = line.matrix
            if W not in fresh:
                fresh[W] = new.matrix(ren.dims[W.out_dim], ren.dims[W.in_dim], W.sigma, f"{W.name}'")
            parts = [new.add_line(MatMulLine(new.new_vector(dim, "G", f"{name}W"), fresh[W], ren[line.arg],
                                             line.transposed))]
            if line.arg in tangent:
                parts.append(new.add_line(MatMulLine(new.new_vector(dim, "G", f"{name}h"), ren.matrices[W],
                                                     tangent[line.arg], line.transposed)))
            tangent[out] = parts[0] if len(parts) == 1 else new.add_line(
                LinCombLine(new.new_vector(dim, "G", name), (1.0, 1.0), tuple(parts)))
        elif isinstance(line, LinCombLine):
            terms = [(ren[c] if isinstance(c, Vector) else c, tangent[a])
                     for c, a in zip(line.coeffs, line.args, strict=True) if a in tangent]
            if terms:
                tangent[out] = new.add_line(LinCombLine(new.new_vector(dim, "G", name),
                                                        tuple(c for c, _ in terms), tuple(a for _, a in terms)))
        elif isinstance(line, NonLinLine):
            expr = line.expr.map_vectors(ren.__getitem__)
            terms = [(1.0, product([differentiate(expr, ren[a]), Var(tangent[a])]))
                     for a in line.args if a.kind != "scalar" and a in tangent]
            if terms:
                tangent[out] = materialise(new, dim, linear(0.0, terms), name)
        else:  # pragma: no cover - every line kind is handled above
            raise ProgramError(f"no tangent rule for {type(line).__name__}")
    zeros: dict[Dim, Vector] = {}

    def tangent_of(v: Vector) -> Vector:
        """``v``'s tangent; the zero vector (an empty LinComb) for a vector that is constant in the
        parameters (``abs(g − g)``)."""
        if v in tangent:
            return tangent[v]
        dim = ren.dims[v.dim]
        if dim not in zeros:
            zeros[dim] = new.add_line(LinCombLine(new.new_vector(dim, "G", f"0_{dim.name}"), (), ()))
        return zeros[dim]

    outputs = []
    for r in program.readouts:
        parts = []
        for out in r.parts:
            outputs.append(TangentOutput(r, tuple(ren[v] for v in out), tuple(tangent_of(v) for v in out)))
            parts.append(outputs[-1].parts + outputs[-1].tangents)
        new.add_readout(parts, sigma=r.sigma * 2**0.5, bias=r.bias)
    new.mark_odd(*fresh.values(), *(t for v, t in tangent.items() if isinstance(program.line_of(v), BiasLine)))
    return TangentProgram(new, ren, tangent, tuple(outputs))
