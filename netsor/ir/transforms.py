"""Program → program transforms: clone, substitute, extend, prune.

A transform rebuilds a program line by line into a new :class:`~netsor.ir.program.Program`
and returns it with a :class:`Renaming` from the old program's dims, matrices and vectors to
the new ones. The new program is an ordinary program: more lines can be appended to it (this
is how a program is *extended*, e.g. by the backward lines of an NTK computation), and the
original is never changed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from netsor.errors import ProgramError
from netsor.ir.expr import Apply, Expr, Prod, Sum, Var, apply, linear, product
from netsor.ir.lines import LinCombLine, Line, MatMulLine, NonLinLine
from netsor.ir.program import Program
from netsor.ir.variables import Dim, Matrix, Vector

#: ``rewrite(line, new_program, renaming)`` returns the new vector standing for ``line.out``.
Rewrite = Callable[[Line, Program, "Renaming"], Vector]


@dataclass
class Renaming:
    """Where the dims, matrices and vectors of a program went in a transformed copy."""

    dims: dict[Dim, Dim] = field(default_factory=dict)
    matrices: dict[Matrix, Matrix] = field(default_factory=dict)
    vectors: dict[Vector, Vector] = field(default_factory=dict)

    def __getitem__(self, v: Vector) -> Vector:
        try:
            return self.vectors[v]
        except KeyError:
            raise ProgramError(f"vector {v.name} has no image in the transformed program "
                               "(it was pruned, or belongs to another program)") from None


def _copy_line(line: Line, new: Program, renaming: Renaming) -> Vector:
    out = line.out
    vec = new.new_vector(renaming.dims[out.dim], out.kind, out.name)
    if isinstance(line, MatMulLine):
        copied: Line = line.map_vectors(vec, renaming.__getitem__, renaming.matrices[line.matrix])
    else:
        copied = line.map_vectors(vec, renaming.__getitem__)
    return new.add_line(copied)


def transform(program: Program, rewrite: Mapping[Vector, Rewrite] | None = None, *,
              keep: Iterable[Vector] | None = None, name: str | None = None, readouts: bool = True
              ) -> tuple[Program, Renaming]:
    """A copy of ``program`` in which the lines of the vectors in ``rewrite`` are replaced.

    Parameters
    ----------
    program : Program
    rewrite : mapping, optional
        ``{vector: rewrite}``: the line defining ``vector`` is replaced by whatever
        ``rewrite(line, new_program, renaming)`` builds in the new program (it may add several
        lines, and use ``renaming[v]`` for earlier vectors); the vector it returns stands for
        ``vector`` from then on. Every other line is copied.
    keep : iterable of Vector, optional
        Copy only the lines these vectors (and the readouts) depend on; ``None`` keeps all.
    name : str, optional
        Name of the new program (default: the old name).
    readouts : bool
        Copy the readouts (False: the new program has none yet).
    """
    rewrite = dict(rewrite or {})
    for v in rewrite:
        program.check_own(v)
    new = Program(name or program.name)
    renaming = Renaming()
    renaming.dims[program.data_dim] = new.data_dim
    renaming.dims[program.scalar_dim] = new.scalar_dim
    for d in program.dims:
        renaming.dims[d] = new.dim(d.name, ratio=d.ratio)
    for m in program.matrices:
        renaming.matrices[m] = new.matrix(renaming.dims[m.out_dim], renaming.dims[m.in_dim], m.sigma, m.name)
    needed = None if keep is None else needed_lines(program, keep)
    for line in program.lines:
        if needed is not None and line.out not in needed:
            continue
        step = rewrite.get(line.out)
        out = step(line, new, renaming) if step is not None else _copy_line(line, new, renaming)
        new.check_own(out)
        if out.dim is not renaming.dims[line.out.dim]:
            raise ProgramError(f"the rewrite of {line.out.name} returned a vector of another dimension")
        renaming.vectors[line.out] = out
    new.mark_odd(*(renaming.matrices[s] if isinstance(s, Matrix) else renaming.vectors[s]
                   for s in program.odd_sources if isinstance(s, Matrix) or s in renaming.vectors))
    for r in program.readouts if readouts else ():
        new.add_readout([[renaming[v] for v in out] for out in r.parts], sigma=r.sigma, bias=r.bias)
    return new, renaming


def clone(program: Program, name: str | None = None, *, readouts: bool = True) -> tuple[Program, Renaming]:
    """An identical, independent copy of ``program`` (append to it to extend it); without its
    readouts when ``readouts`` is False."""
    return transform(program, name=name, readouts=readouts)


def substitute(program: Program, rewrite: Mapping[Vector, Rewrite], name: str | None = None
               ) -> tuple[Program, Renaming]:
    """``program`` with the lines of some vectors replaced (see :func:`transform`)."""
    return transform(program, rewrite, name=name)


def prune(program: Program, keep: Iterable[Vector] = (), name: str | None = None) -> tuple[Program, Renaming]:
    """``program`` without the lines that neither ``keep`` nor the readouts depend on."""
    return transform(program, keep=keep, name=name)


def needed_lines(program: Program, keep: Iterable[Vector]) -> set[Vector]:
    """Vectors whose lines ``keep`` and the readouts depend on (a backward walk)."""
    needed = {v for r in program.readouts for v in r.vectors}
    for v in keep:
        program.check_own(v)
        needed.add(v)
    for line in reversed(program.lines):
        if line.out in needed:
            needed.update(line.inputs)
    return needed


def materialise(new: Program, dim: Dim, expr: Expr, name: str) -> Vector:
    """A vector of ``new`` equal to the expression ``expr`` over its vectors: ``expr``'s own vector
    when it is one, a LinComb line when it is linear, else a NonLin line."""
    if isinstance(expr, Var):
        return expr.vector
    form = expr.affine()
    if form is not None and form[1] == 0.0:
        terms = form[0]
        return new.add_line(LinCombLine(new.new_vector(dim, "G", name), tuple(c for _, c in terms),
                                        tuple(u for u, _ in terms)))
    return new.add_line(NonLinLine(new.new_vector(dim, "H", name), expr))


def substituted(e: Expr, repl: Mapping[Vector, Expr]) -> Expr | None:
    """``e`` with the vectors of ``repl`` replaced by expressions, rebuilt by the expression
    constructors (so that sums are collected and activations of affine forms recognised); None where
    a replaced vector is inside a node that cannot be rebuilt (opaque functions, BatchNorm)."""
    if not any(v in repl for v in e.args):
        return e
    if isinstance(e, Var):
        return repl[e.vector]
    if isinstance(e, Apply):
        child = substituted(e.child, repl)
        return None if child is None else apply(e.act, child)
    if isinstance(e, Sum):
        terms = [(c, substituted(t, repl)) for c, t in e.terms]
        return None if any(t is None for _, t in terms) else linear(e.const, terms)  # type: ignore[arg-type]
    if isinstance(e, Prod):
        factors = [substituted(f, repl) for f in e.factors]
        return None if any(f is None for f in factors) else product(factors)  # type: ignore[arg-type]
    return None
