"""The backward program (DESIGN §4): a program transform.

:func:`gradient_program` returns a copy of a program extended by the back-propagated gradients of
every output, scaled by ``√n`` (``δx = √n ∂y/∂x``, so that they have O(1) coordinates).

* **Gradient independence** (programs without transposed MatMuls): every ``Wᵀ`` of the backward
  pass is an independent copy ``W̃`` of ``W`` (same law). Valid when the forward pass uses no
  transposes and the readout is independent of everything else (Yang, Tensor Programs II/IV).
* **Exact transposes** (programs whose forward pass uses ``Wᵀ``): there the assumption fails —
  the backward ``Wᵀ`` is correlated with the forward ``Wᵀ`` — so the backward pass uses the real
  ``W`` (a Netsor⊤ program), and its limit is the exact NTK as far as the Netsor⊤ engine takes it
  (every correction linear in G-vectors, with data or without; the simulation takes any). Gradients
  are scaled by the square root of their own dim's size, so a backward ``Wᵀ δg`` carries the
  factor ``√(n_h / n_g)`` (1 unless dims have different ratios).

The rules, walking the lines backwards, are

* readout ``y = Σ_k v_kᵀ h_k / √(Kn)`` (K = 1 but for :meth:`~netsor.Program.readout_concat`):
  ``δh_k += v_k/√K`` (fresh G-vectors of variance σ_v²/K, one per readout call and part,
  shared by its outputs, independent of the forward pass and of each other);
* NonLin ``h = φ(g¹, …, gᵏ)``: ``δgⁱ += ∂ᵢφ(g) · δh`` (a symbolic derivative:
  :mod:`netsor.ir.differentiate`);
* LinComb ``g = Σ aᵢ gⁱ``: ``δgⁱ += aᵢ δg``;
* MatMul ``g = W h``: ``δh += W̃ δg`` (``Wᵀ δg`` with exact transposes), and ``g = Wᵀ h``:
  ``δh += W δg``; nothing flows into the data through an input matrix;
* scalars (NetsorK: moments, LayerNorm's ``μ, σ``, attention weights) are held at their values:
  a LinComb ``g = Σ θᵢ gⁱ`` passes ``δgⁱ += θᵢ δg``, and no gradient flows into a scalar. In
  the limit that gradient vanishes, with gradient independence and with exact transposes alike:
  scaled like the vectors' (``∂y/∂θ / √n``), it is ``(1/n) Σ_α δ_α ∂_θ u_α`` for the backward vector
  ``δ`` of a vector ``u`` that reads ``θ``, and every backward vector is linear in the readout
  vector ``v`` — independent of the forward pass and symmetric, so the law of the whole program is
  invariant under ``v → −v``, which flips every ``δ`` and fixes every forward vector — hence its
  limit ``E[Z^δ ∂_θ Z^u]`` is 0. (At finite width it is a centred O(1/√n) fluctuation, so the
  gradients it sends back change the NTK by O(1/n): the gradient program is for the limit, not
  for finite-width gradients; ``tests/test_empirical_ntk.py`` checks a transposed program with a
  scalar against finite networks.)

The gradient of an H-vector is a sum of G-vectors, and that of a G-vector a NonLin expression
of forward and backward G-vectors; they become lines of the new program only where the NTK
needs them: at the output of every MatMul (its weights' gradient is ``δg ⊗ h``) and at every
bias. The infinite-width engine then computes every ``E[Z^{δg} Z^{δg'}]`` as an ordinary
second moment of the new program, with its error bounds.
"""

from __future__ import annotations

from dataclasses import dataclass

from netsor.errors import ProgramError
from netsor.ir.differentiate import differentiate
from netsor.ir.expr import Const, Expr, Var, linear, product
from netsor.ir.lines import BiasLine, LinCombLine, MatMulLine, NonLinLine
from netsor.ir.program import Program, Readout
from netsor.ir.transforms import Renaming, clone, materialise
from netsor.ir.variables import Matrix, Vector


@dataclass(frozen=True)
class MatrixUse:
    """One use ``g = W h`` (``Wᵀ h`` when ``transposed``) of a matrix in the forward pass, with the
    gradient ``δg`` of the output it is taken for (a vector of the gradient program; ``h`` is
    renamed there too). The weights' gradient is ``factors[0] ⊗ factors[1]`` (out × in of ``W``)."""

    matrix: Matrix
    arg: Vector
    grad: Vector
    transposed: bool = False

    @property
    def factors(self) -> tuple[Vector, Vector]:
        """``(δg, h)``, or ``(h, δg)`` for a transposed use: the out- and in-dim factors of ∂y/∂W."""
        return (self.arg, self.grad) if self.transposed else (self.grad, self.arg)


@dataclass(frozen=True)
class BiasUse:
    """A bias vector ``b`` (a BiasLine of std ``sigma``; renamed) and its gradient ``δb``."""

    vector: Vector
    sigma: float
    grad: Vector


@dataclass(frozen=True)
class OutputGradient:
    """The parameters' gradients of one output: its readout, the vectors it reads out (its parts,
    renamed), every matrix use and every bias that it depends on."""

    readout: Readout
    parts: tuple[Vector, ...]
    uses: tuple[MatrixUse, ...]
    biases: tuple[BiasUse, ...]


@dataclass(frozen=True)
class GradientProgram:
    """A forward program extended by its backward pass (see :func:`gradient_program`)."""

    program: Program
    renaming: Renaming
    outputs: tuple[OutputGradient, ...]


BACKWARDS = ("auto", "exact", "independent")


def gradient_program(program: Program, backward: str = "auto") -> GradientProgram:
    """The program extended by the √n-scaled gradients of each output.

    ``backward``: ``"auto"`` uses exact transposes when the forward pass has transposed MatMuls
    and gradient independence otherwise (where both give the same limit); ``"exact"`` and
    ``"independent"`` force one (gradient independence on a program with transposes is not its
    NTK: offered to show the difference).
    """
    if backward not in BACKWARDS:
        raise ProgramError(f"backward must be one of {BACKWARDS}, got {backward!r}")
    has_transposes = any(isinstance(ln, MatMulLine) and ln.transposed for ln in program.lines)
    exact = has_transposes if backward == "auto" else backward == "exact"
    new, ren = clone(program, name=f"{program.name} + backward "
                     + ("(exact transposes)" if exact else "(gradient independence)"))
    tilde: dict[tuple[Matrix, bool], Matrix] = {}
    readout_vectors: dict[int, tuple[Vector, ...]] = {}
    outputs = []
    for readout, parts in program.outputs:
        vs = readout_vectors.get(readout.index)
        if vs is None:
            K = readout.num_parts
            vs = readout_vectors[readout.index] = tuple(
                new.add_line(BiasLine(new.new_vector(ren.dims[readout.dim], "G", f"v{readout.index}"
                                                     + (f"_{k}" if K > 1 else "")), readout.sigma / K**0.5))
                for k in range(K))
        uses, biases = _backward(program, new, ren, None if exact else tilde, tuple(zip(parts, vs, strict=True)))
        outputs.append(OutputGradient(readout, tuple(ren[h] for h in parts), uses, biases))
    return GradientProgram(new, ren, tuple(outputs))


def _backward(program: Program, new: Program, ren: Renaming, tilde: dict[tuple[Matrix, bool], Matrix] | None,
              seeds: tuple[tuple[Vector, Vector], ...]) -> tuple[tuple[MatrixUse, ...], tuple[BiasUse, ...]]:
    """Walk the lines backwards from ``δh = Σ v`` over the ``(h, v)`` in ``seeds``; returns the
    matrix uses and biases. ``tilde``: the independent copies of gradient independence (filled
    as needed), or None for exact transposes."""
    grads: dict[Vector, list[tuple[float, Expr]]] = {}
    for h, v in seeds:
        grads.setdefault(h, []).append((1.0, Var(v)))
    uses: list[MatrixUse] = []
    biases: list[BiasUse] = []
    for line in reversed(program.lines):
        parts = grads.pop(line.out, None)
        if not parts:
            continue
        grad = linear(0.0, parts)
        if isinstance(grad, Const) and grad.value == 0.0:
            continue
        if isinstance(line, MatMulLine):
            dg = materialise(new, ren.dims[line.out.dim], grad, f"d{line.out.name}")
            uses.append(MatrixUse(line.matrix, ren[line.arg], dg, line.transposed))
            if not line.matrix.is_input:
                W = line.matrix
                scale = 1.0
                if tilde is None:  # exact: δh = Wᵀ δg for g = W h, W δg for g = Wᵀ h, times √(n_h/n_g)
                    back_matrix, back_transposed = ren.matrices[W], not line.transposed
                    scale = (line.arg.dim.ratio / line.out.dim.ratio) ** 0.5
                elif not line.transposed:
                    if (W, False) not in tilde:  # the independent copy of Wᵀ: in_dim × out_dim, same σ
                        tilde[W, False] = new.matrix(ren.dims[W.in_dim], ren.dims[W.out_dim], W.sigma, f"{W.name}~")
                    back_matrix, back_transposed = tilde[W, False], False
                else:  # g = Wᵀ h: an independent copy of W itself (its shape and law), as the exact pass scales W
                    if (W, True) not in tilde:
                        tilde[W, True] = new.matrix(ren.dims[W.out_dim], ren.dims[W.in_dim], W.sigma, f"{W.name}~ᵀ")
                    back_matrix, back_transposed = tilde[W, True], False
                    scale = (line.arg.dim.ratio / line.out.dim.ratio) ** 0.5
                back_dim = ren.dims[line.arg.dim]
                back = new.add_line(MatMulLine(new.new_vector(back_dim, "G", f"d{line.arg.name}'"), back_matrix, dg,
                                               back_transposed))
                grads.setdefault(line.arg, []).append((scale, Var(back)))
        elif isinstance(line, LinCombLine):
            for coef, arg in zip(line.coeffs, line.args, strict=True):
                if isinstance(coef, Vector):
                    grads.setdefault(arg, []).append((1.0, product([Var(ren[coef]), grad])))
                else:
                    grads.setdefault(arg, []).append((coef, grad))
        elif isinstance(line, NonLinLine):
            expr = line.expr.map_vectors(ren.__getitem__)
            for arg in line.args:
                if arg.kind == "scalar":
                    continue
                partial = differentiate(expr, ren[arg])
                grads.setdefault(arg, []).append((1.0, product([partial, grad])))
        elif isinstance(line, BiasLine):
            dg = materialise(new, ren.dims[line.out.dim], grad, f"d{line.out.name}")
            biases.append(BiasUse(ren[line.out], line.sigma, dg))
    return tuple(uses), tuple(biases)
