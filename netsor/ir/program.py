"""A Netsor program: an append-only, straight-line sequence of typed lines (DESIGN §1).

Every line is validated when it is added and never changes afterwards. The interpreters
(:mod:`netsor.interpret`) read ``program.lines`` and know nothing of architectures; the
program knows nothing of execution.

A program is written for *one* symbolic data point; executed on a batch of ``B`` inputs,
every vector has one copy per input and all copies share the matrices (this is also how
weight sharing over time works). :class:`Readout` declares outputs ``yᵣ = vᵀ hᵣ / √n + b_v``
(:meth:`Program.readout`) or one output ``y = Σₖ vₖᵀ hₖ / √(K n) + b_v`` that reads several
vectors with independent readout vectors, a Dense layer on their concatenation
(:meth:`Program.readout_concat`).
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from netsor.errors import DimensionError, ProgramError
from netsor.ir.lines import BiasLine, DataLine, LinCombLine, Line, MatMulLine, NonLinLine
from netsor.ir.variables import Dim, Matrix, Vector
from netsor.validate import check_real, check_sigma


@dataclass(frozen=True, eq=False)
class Readout:
    """Outputs ``y_r = Σ_{k<K} v_kᵀ parts[r][k] / √(K n) + b_v``, r = 0..R−1.

    Every output reads ``K`` vectors (its *parts*), all in one dim of size ``n``; part ``k`` of
    every output is read by the same ``v_k ~ N(0, sigma² I)``, the ``v_k`` are independent, and
    all outputs share one ``b_v ~ N(0, bias²)``. :meth:`Program.readout` makes ``K = 1`` (R
    outputs sharing one ``v``); :meth:`Program.readout_concat` makes ``R = 1`` (a Dense layer of
    fan-in ``K·n`` on the concatenation of its parts).
    """

    index: int
    parts: tuple[tuple[Vector, ...], ...]
    sigma: float
    bias: float

    @property
    def num_parts(self) -> int:
        """``K``, the number of vectors each output reads."""
        return len(self.parts[0])

    @property
    def dim(self) -> Dim:
        """The dimension all parts live in."""
        return self.parts[0][0].dim

    @property
    def vectors(self) -> tuple[Vector, ...]:
        """Every vector this readout reads, in order of first appearance."""
        return tuple(dict.fromkeys(v for out in self.parts for v in out))


class Program:
    """A Netsor program, built line by line.

    Examples
    --------
    >>> import netsor
    >>> p = netsor.Program()
    >>> n = p.dim("n")
    >>> g = p.input(n, sigma=1.0, bias=0.1)
    >>> W = p.matrix(n, n, sigma=2 ** 0.5)
    >>> h = W @ netsor.relu(g)
    >>> p.readout(netsor.relu(h), sigma=1.0)
    (0,)
    """

    def __init__(self, name: str = "program") -> None:
        self.name = name
        self._dims: list[Dim] = []
        self._matrices: list[Matrix] = []
        self._lines: list[Line] = []
        self._readouts: list[Readout] = []
        self._line_of: dict[Vector, Line] = {}
        self._derived: dict[str, tuple[tuple[int, int, int], Any]] = {}
        self._odd: dict[Matrix | Vector, None] = {}
        self._data_dim = Dim("d", self, is_data=True)
        self._scalar_dim = Dim("scalar", self, is_scalar=True)

    # ---------------------------------------------------------------- views
    @property
    def data_dim(self) -> Dim:
        """The dimension of the data points (its size is read off the inputs)."""
        return self._data_dim

    @property
    def scalar_dim(self) -> Dim:
        """The one-coordinate dim of the program's scalars (NetsorK moments and their arithmetic)."""
        return self._scalar_dim

    @property
    def dims(self) -> tuple[Dim, ...]:
        return tuple(self._dims)

    @property
    def matrices(self) -> tuple[Matrix, ...]:
        return tuple(self._matrices)

    @property
    def lines(self) -> tuple[Line, ...]:
        return tuple(self._lines)

    @property
    def readouts(self) -> tuple[Readout, ...]:
        return tuple(self._readouts)

    @property
    def outputs(self) -> tuple[tuple[Readout, tuple[Vector, ...]], ...]:
        """All outputs in order (readout call, then position within it), each with the vectors
        it reads (its parts: one vector for :meth:`readout`, several for :meth:`readout_concat`)."""
        return tuple((r, out) for r in self._readouts for out in r.parts)

    @property
    def num_outputs(self) -> int:
        return sum(len(r.parts) for r in self._readouts)

    @property
    def steps(self) -> int | None:
        """Number of time steps the data must have (max step + 1), or None if no step is used."""
        used = [ln.step for ln in self._lines if isinstance(ln, DataLine) and ln.step is not None]
        return max(used) + 1 if used else None

    @property
    def version(self) -> tuple[int, int, int]:
        """Changes whenever the program grows (lines, outputs or odd sources added; programs only
        grow): what was derived from an earlier version is stale."""
        return len(self._lines), self.num_outputs, len(self._odd)

    @property
    def odd_sources(self) -> tuple[Matrix | Vector, ...]:
        """The matrices and bias vectors declared odd by :meth:`mark_odd`."""
        return tuple(self._odd)

    def derived(self, name: str, compute: Callable[[Program], Any]) -> Any:
        """A value interpreters derive from the program (an analysis), computed once and held by
        the program — so it lives exactly as long as the program — and recomputed after lines or
        outputs are added. The program itself never looks at it."""
        version = self.version
        cached = self._derived.get(name)
        if cached is None or cached[0] != version:
            cached = self._derived[name] = (version, compute(self))
        return cached[1]

    def line_of(self, vector: Vector) -> Line:
        """The line that defines ``vector``."""
        self.check_own(vector)
        return self._line_of[vector]

    # -------------------------------------------------------- construction
    def dim(self, name: str, ratio: float = 1.0) -> Dim:
        """A new hidden dimension: ``round(ratio · width)`` coordinates at the sampler's ``width``
        (at least 1); in the infinite-width limit the ratios of the dims stay fixed."""
        if not isinstance(name, str) or not name:
            raise ProgramError("a dimension needs a non-empty string name")
        if name == self._data_dim.name or any(d.name == name for d in self._dims):
            raise ProgramError(f"dimension name {name!r} is taken; pick another name")
        ratio = check_real(ratio, f"ratio of dim {name!r}", minimum=0.0, strict=True)
        d = Dim(name, self, ratio=ratio)
        self._dims.append(d)
        return d

    def matrix(self, out_dim: Dim, in_dim: Dim, sigma: float = 1.0, name: str | None = None) -> Matrix:
        """A matrix ``out_dim × in_dim`` with iid entries ``N(0, sigma²/n_in)``.

        Pass ``program.data_dim`` as ``in_dim`` for an input matrix ``U`` (then
        ``U @ program.data()`` has covariance ``sigma² ⟨x, x'⟩ / d``).
        """
        self.check_dim(out_dim, "out_dim")
        self.check_dim(in_dim, "in_dim")
        if out_dim.is_data:
            raise DimensionError("a matrix cannot map into the data dimension; use a hidden dim")
        if out_dim.is_scalar or in_dim.is_scalar:
            raise DimensionError("a matrix maps between width dims, not program.scalar_dim; use hidden dims")
        sigma = check_sigma(sigma, "matrix sigma")
        m = Matrix(len(self._matrices), out_dim, in_dim, sigma, name or f"W{len(self._matrices)}", self)
        self._matrices.append(m)
        return m

    def data(self, step: int | None = None) -> Vector:
        """The symbolic data point ``x`` (``X[:, step, :]`` of a ``(B, T, d)`` array if ``step``)."""
        if step is not None:
            if isinstance(step, bool) or not isinstance(step, numbers.Integral) or step < 0:
                raise ProgramError(f"data step must be a non-negative int or None, got {step!r}")
            step = int(step)
        used = {ln.step: ln.out for ln in self._lines if isinstance(ln, DataLine)}
        if step in used:
            return used[step]
        if used and (step is None) != (next(iter(used)) is None):
            raise ProgramError("a program reads either one data point (p.data()) or time steps "
                               "(p.data(step=t)), not both; use p.data(step=t) everywhere")
        name = "x" if step is None else f"x{step}"
        return self.add_line(DataLine(self.new_vector(self._data_dim, "data", name), step))

    def bias(self, dim: Dim, sigma: float, *, what: str = "bias") -> Vector:
        """An initial G-vector ``b ~ N(0, sigma² I)``, the same for every input (``what``: the name of
        the call in error messages)."""
        self.check_dim(dim, f"the dim of p.{what}")
        if dim.is_data or dim.is_scalar:
            raise DimensionError(f"a {what} vector lives in a hidden dimension, not the data or scalar dimension")
        sigma = check_sigma(sigma, f"{what} sigma")
        return self.add_line(BiasLine(self.new_vector(dim, "G", f"b{len(self._lines)}"), sigma))

    def gaussian(self, dim: Dim, sigma: float = 1.0) -> Vector:
        """An initial G-vector with iid ``N(0, sigma²)`` coordinates, independent of everything else
        and the same for every input (a :class:`BiasLine`): the starting vector of a program
        that reads no data, such as the matrix-law programs of :mod:`netsor.zoo`."""
        return self.bias(dim, sigma, what="gaussian")

    def mark_odd(self, *sources: Matrix | Vector) -> None:
        """Declare matrices and bias (Gaussian) vectors *odd*: flipped together by a sign symmetry.

        Every matrix and bias is a centred Gaussian independent of the others, so flipping the sign
        of any set of them leaves the law of the program unchanged: the declaration is always true.
        It tells the infinite-width engine the parity it implies — a vector built from odd sources
        linearly (``Ẇh``, ``Wḣ``, ``φ'(g)·ḣ``) is odd, one that reads none is even — so that every
        second moment of an odd and an even vector is exactly 0 and the two are independent G-vectors
        in the limit (the tangent program of the NTK: :mod:`netsor.ir.tangent`).
        """
        for s in sources:
            if isinstance(s, Matrix):
                if s.program is not self:
                    raise ProgramError(f"matrix {s.name} belongs to another program")
            else:
                self.check_own(s)
                if not isinstance(self._line_of[s], BiasLine):
                    raise ProgramError(f"{s.name} is not a bias or Gaussian vector (p.bias, p.gaussian): only "
                                       "matrices and those can be declared odd")
            self._odd[s] = None

    @property
    def reads_data(self) -> bool:
        """Whether some line reads the data point (a program that does not runs on one symbolic point)."""
        return any(isinstance(ln, DataLine) for ln in self._lines)

    def input(self, dim: Dim, sigma: float = 1.0, bias: float = 0.0, step: int | None = None) -> Vector:
        """The first layer ``U x + b``: ``U ~ N(0, sigma²/d)`` entrywise, ``b ~ N(0, bias²)``.

        Each call uses a fresh ``U`` and ``b``.
        """
        self.check_dim(dim, "the dim of p.input")
        U = self.matrix(dim, self._data_dim, sigma, name=f"U{len(self._matrices)}")
        g = U @ self.data(step)
        if check_sigma(bias, "input bias") > 0:
            g = g + self.bias(dim, bias)
        return g

    def readout(self, *vectors: Vector, sigma: float = 1.0, bias: float = 0.0) -> tuple[int, ...]:
        """Outputs ``y_r = vᵀ h_r / √n + b_v``; one fresh ``v ~ N(0, sigma²)`` shared by all
        ``vectors`` of this call, and one ``b_v ~ N(0, bias²)``.

        Returns the indices of the new outputs in the output vector.
        """
        if not vectors:
            raise ProgramError("readout needs at least one vector")
        return self.add_readout([(v,) for v in vectors], sigma=sigma, bias=bias)

    def readout_concat(self, *vectors: Vector, sigma: float = 1.0, bias: float = 0.0) -> int:
        """One output ``y = Σ_{k<K} v_kᵀ h_k / √(K n) + b_v`` reading the K ``vectors`` (all in
        one dim of size ``n``) with independent ``v_k ~ N(0, sigma² I)`` and ``b_v ~ N(0, bias²)``.

        This is a Dense layer with one output on the concatenation ``[h_1, …, h_K]`` (fan-in
        ``K·n``; Neural Tangents' ``Flatten()`` then ``Dense(1, W_std=sigma, b_std=bias)``). Its
        NNGP kernel is ``sigma²/K Σ_k E[Z^{h_k}(x) Z^{h_k}(x')] + bias²``; in the NTK every
        ``v_k`` and ``b_v`` is trained. Returns the index of the new output.

        Examples
        --------
        >>> import netsor
        >>> p = netsor.Program()
        >>> n = p.dim("n")
        >>> g1, g2 = p.input(n), p.input(n)
        >>> p.readout_concat(netsor.relu(g1), netsor.tanh(g2), sigma=1.0, bias=0.1)
        0
        """
        if not vectors:
            raise ProgramError("readout_concat needs at least one vector: "
                               "p.readout_concat(h1, h2, ..., sigma=...)")
        return self.add_readout([vectors], sigma=sigma, bias=bias)[0]

    # ------------------------------------------------------- for builders and transforms
    def new_vector(self, dim: Dim, kind: str, name: str | None = None) -> Vector:
        """A vector for the next line (pass it as the ``out`` of :meth:`add_line`)."""
        self.check_dim(dim, "dim")
        if kind not in ("G", "H", "data", "scalar"):
            raise ProgramError(f"vector kind must be 'G', 'H', 'data' or 'scalar', got {kind!r}")
        if (kind == "scalar") != dim.is_scalar:
            raise ProgramError("scalars (and only they) live in program.scalar_dim")
        return Vector(len(self._lines), dim, kind, name or f"{kind.lower()}{len(self._lines)}", self)

    def add_line(self, line: Line) -> Vector:
        """Append a line whose ``out`` came from :meth:`new_vector`; returns ``line.out``."""
        out = line.out
        self.check_own(out)
        if out.index != len(self._lines):
            raise ProgramError("a line's output must come from new_vector() just before add_line()")
        for v in line.inputs:
            self.check_own(v)
        _check_dims(line)
        self._lines.append(line)
        self._line_of[out] = line
        return out

    def add_readout(self, parts: Sequence[Sequence[Vector]], *, sigma: float, bias: float) -> tuple[int, ...]:
        """A :class:`Readout` with outputs ``parts[r]`` (each a sequence of K vectors, the same K
        for all); what :meth:`readout` and :meth:`readout_concat` build. Returns output indices."""
        outs = tuple(tuple(out) for out in parts)
        if not outs or not outs[0]:
            raise ProgramError("a readout needs at least one output reading at least one vector")
        if len({len(out) for out in outs}) != 1:
            raise ProgramError("every output of one readout reads the same number of vectors; "
                               f"got {sorted({len(out) for out in outs})}")
        for out in outs:
            for v in out:
                self.check_own(v)
                if v.kind in ("data", "scalar"):
                    what = "the data point" if v.kind == "data" else f"the scalar {v.name}"
                    raise ProgramError(f"{what} cannot be read out; read out a hidden vector")
        dims = {v.dim for out in outs for v in out}
        if len(dims) != 1:
            shared = "share one readout vector v" if len(outs[0]) == 1 else "form one Dense layer of fan-in K·n"
            raise DimensionError(
                f"the vectors of one readout {shared}, so they must live in the same dimension; "
                f"got {sorted(d.name for d in dims)}; use one readout per dim"
            )
        sigma = check_sigma(sigma, "readout sigma")
        bias = check_sigma(bias, "readout bias")
        start = self.num_outputs
        self._readouts.append(Readout(len(self._readouts), outs, sigma, bias))
        return tuple(range(start, start + len(outs)))

    def check_dim(self, dim: Any, what: str) -> None:
        """Raise unless ``dim`` is a :class:`Dim` of this program."""
        if not isinstance(dim, Dim):
            raise ProgramError(f"{what} must be a Dim made by program.dim(...), got {type(dim).__name__}")
        if dim.program is not self:
            raise ProgramError(f"{what} {dim.name!r} belongs to another program; use this program's dims")

    def check_own(self, v: Any) -> None:
        """Raise unless ``v`` is a vector of this program."""
        if not isinstance(v, Vector):
            raise ProgramError(f"expected a vector of this program, got {type(v).__name__}")
        if v.program is not self:
            raise ProgramError(
                f"vector {v.name} belongs to another program; build every line of a program "
                "from that program's own vectors"
            )

    def __repr__(self) -> str:
        return f"<Program {self.name!r}: {len(self._lines)} lines, {self.num_outputs} outputs>"

    def pretty(self) -> str:
        """A human-readable listing of the program, one line per line."""
        from netsor.ir.printing import describe_line

        rows = [f"program {self.name}"]
        rows += [f"  {m!r}" for m in self._matrices]
        rows += ["  " + describe_line(ln) for ln in self._lines]
        for r in self._readouts:
            names = ", ".join(" ⊕ ".join(v.name for v in out) for out in r.parts)
            rows.append(f"  readout{'' if r.num_parts == 1 else '_concat'} σ={r.sigma:g} bias={r.bias:g}: {names}")
        return "\n".join(rows)


def _check_dims(line: Line) -> None:
    """The dims of a line chain (the builder says what to change; this catches program transforms)."""
    out = line.out
    if isinstance(line, MatMulLine):
        W = line.matrix
        in_dim, out_dim = (W.out_dim, W.in_dim) if line.transposed else (W.in_dim, W.out_dim)
        ok = line.arg.dim is in_dim and out.dim is out_dim
    elif isinstance(line, LinCombLine | NonLinLine):
        ok = all(v.dim is out.dim or v.kind == "scalar" for v in line.inputs)
    else:
        ok = True
    if not ok:
        dims = ", ".join(f"{v.name} in {v.dim.name!r}" for v in line.inputs)
        raise DimensionError(f"{out.name}: the dims of its line do not chain ({dims}, out in {out.dim.name!r})")
