"""The generic forward executor: one walk over a program's lines, shared by the finite-width and
the coupled runs.

A run holds a :class:`ForwardPlan` (the lines needed, in order, with the last use of every
vector and matrix), a :class:`Chunk` of networks (their random streams) and a *state* — the
values computed so far, per world (one world for a finite run; the finite and the limit world
for a coupled run) and per-matrix memories of the samplers. For each line it looks up the
line kind's rule (:mod:`netsor.interpret.rules`) and calls its method for the interpretation,
stores the result and frees what is no longer needed. The executor knows nothing of what the
lines mean.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from netsor.ir import Dim, Line, MatMulLine, Matrix, NonLinLine, Program, Vector
from netsor.ir.transforms import needed_lines

Array = np.ndarray


class ForwardPlan:
    """The lines a run executes (those the kept vectors and the readouts need) and last uses."""

    def __init__(self, program: Program, keep: Iterable[Vector] = ()) -> None:
        keep = set(keep) | {v for r in program.readouts for v in r.vectors}
        needed = needed_lines(program, keep)
        self.program = program
        self.lines: list[Line] = [ln for ln in program.lines if ln.out in needed]
        self.last_use: dict[Vector, int] = {}
        self.matrix_last_use: dict[Matrix, int] = {}
        #: Matrices used both as ``W`` and as ``Wᵀ`` (Netsor⊤: their uses constrain each other).
        self.two_way: set[Matrix] = set()
        orientations: dict[Matrix, set[bool]] = {}
        for i, line in enumerate(self.lines):
            for v in line.inputs:
                self.last_use[v] = i
            if isinstance(line, MatMulLine):
                self.matrix_last_use[line.matrix] = i
                orientations.setdefault(line.matrix, set()).add(line.transposed)
        self.two_way = {W for W, seen in orientations.items() if len(seen) == 2}
        #: Per NonLin line, the H-vectors whose expressions it inlines (the tracer composes a NonLin of an H-vector
        #: with that vector's expression), by those expressions' keys: held until then, their values stand for those
        #: subexpressions (:class:`~netsor.interpret.rules.nonlin.NonLinRule`).
        self.inlined: dict[int, dict[Any, Vector]] = {}
        defined: dict[Any, Vector] = {}
        for i, line in enumerate(self.lines):
            if isinstance(line, NonLinLine) and line.out.kind == "H":
                self.inlined[i] = _inlined(line.expr, defined)
                for v in self.inlined[i].values():
                    self.last_use[v] = max(self.last_use.get(v, i), i)
                defined[line.expr.key] = line.out
        for v in keep:
            self.last_use[v] = len(self.lines)
        self.keep = keep
        #: The vectors whose values can be freed after each line.
        self.freed: list[list[Vector]] = [[] for _ in self.lines]
        for v, i in self.last_use.items():
            if i < len(self.lines):
                self.freed[i].append(v)


def _inlined(expr: Any, defined: Mapping[Any, Vector]) -> dict[Any, Vector]:
    """The entries of ``defined`` (expression key → vector) that are the outermost subexpressions of ``expr``."""
    found: dict[Any, Vector] = {}
    seen: set[int] = set()
    stack = list(expr.children())
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        vector = defined.get(node.key)
        if vector is not None:
            found[node.key] = vector
        else:
            stack.extend(node.children())
    return found


class Chunk:
    """A group of networks executed together: whole blocks, each block with its own stream."""

    def __init__(self, rngs: list[np.random.Generator], block_sizes: list[int]) -> None:
        self.rngs, self.block_sizes = rngs, block_sizes
        self.size = sum(block_sizes)

    def normal(self, shape: tuple[int, ...]) -> Array:
        """Standard normals of shape (S_c, *shape), each block from its own stream."""
        return np.concatenate([rng.standard_normal((b, *shape)) for rng, b in
                               zip(self.rngs, self.block_sizes, strict=True)])


@dataclass
class World:
    """The values of one execution (arrays of shape (S, B, n)) and its per-matrix memories."""

    values: dict[Vector, Array] = field(default_factory=dict)
    memory: dict[Matrix, Any] = field(default_factory=dict)


@dataclass
class FiniteState:
    """What a finite-width rule sees: sizes of every dim, the data, the chunk, the sampler."""

    plan: ForwardPlan
    sizes: Mapping[Dim, int]
    X: Array
    chunk: Chunk
    method: str
    world: World = field(default_factory=World)
    position: int = 0  # index of the line being executed in plan.lines

    @property
    def values(self) -> dict[Vector, Array]:
        return self.world.values

    @property
    def batch(self) -> int:
        return self.X.shape[0]

    def last_use_of(self, W: Matrix) -> int:
        return self.plan.matrix_last_use[W]


@dataclass
class CoupledState:
    """What a coupled rule sees: two worlds (finite and limit) sharing the chunk's noise."""

    fin: FiniteState
    lim: FiniteState
    limit: Any  # the limit's Gram blocks (netsor.interpret.coupled.LimitGram)
    degenerate: set[str]


def run_forward(plan: ForwardPlan, state: FiniteState | CoupledState, mode: str,
                on_line: Callable[[Line, FiniteState | CoupledState], None] | None = None) -> None:
    """Execute ``plan`` in ``state``: ``mode`` is ``"finite"``, ``"simulated"`` (one world, the
    limit's copies: :mod:`netsor.interpret.simulation`) or ``"coupled"``; ``on_line`` is
    called after each line with its value stored (before inputs that died are freed)."""
    from netsor.interpret.rules import rule_for

    worlds = [state.world] if isinstance(state, FiniteState) else [state.fin.world, state.lim.world]
    finite_states = [state] if isinstance(state, FiniteState) else [state.fin, state.lim]
    for i, line in enumerate(plan.lines):
        for st in finite_states:
            st.position = i
        result = getattr(rule_for(line), mode)(line, state)
        outs = (result,) if isinstance(state, FiniteState) else result
        for world, value in zip(worlds, outs, strict=True):
            world.values[line.out] = value
        if on_line is not None:
            on_line(line, state)
        for world in worlds:
            for v in plan.freed[i]:
                world.values.pop(v, None)
            if isinstance(line, MatMulLine) and plan.matrix_last_use[line.matrix] <= i:
                world.memory.pop(line.matrix, None)
