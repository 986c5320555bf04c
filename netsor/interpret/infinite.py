"""Infinite-width interpreter: the Gaussian-process limit of a program (DESIGN §2).

Every vector ``x`` of a program gets a random variable ``Z^x``; the G-vectors
are jointly Gaussian with

* ``Cov(Z^{Wh}, Z^{Wh'}) = σ_W² E[Z^h Z^{h'}]`` for two MatMuls by the same ``W``,
  0 for different matrices;
* ``Cov(Z^{Ux}, Z^{Ux'}) = σ_U² ⟨x, x'⟩ / d`` for an input matrix ``U``;
* ``Cov(Z^b, Z^b) = σ_b²`` for a bias; LinCombs are linear;

and an H-vector is a function of G-vectors, so ``E[Z^h Z^{h'}]`` is a Gaussian
expectation (:mod:`netsor.gaussian`). All quantities are (B1, B2) arrays over
pairs of inputs.

How it runs. The needed pair quantities are found once per query by a
dependency walk (a flat *plan* in topological order, no recursion), then the
plan is executed on tiles of the (B1, B2) pair grid. Per-point quantities
(variances, means) come from a cheap "diagonal" run of the same machinery on
each input set. Tiles bound the working memory, are computed on several
threads, and, for a kernel of one input set with itself, only tiles on or
above the diagonal are computed.
"""

from __future__ import annotations

import functools
import os
import weakref
from collections.abc import Callable, Hashable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
from threadpoolctl import ThreadpoolController

from netsor import gaussian
from netsor.activations import identity
from netsor.errors import HyperParameterError, NumericalError, UnsupportedError
from netsor.interpret.finite import data_view
from netsor.ir import (
    BiasLine,
    LinCombLine,
    MatMulLine,
    NonLinLine,
    Program,
    Vector,
)
from netsor.ir.expr import Apply, Term
from netsor.validate import check_inputs, check_same_layout

Array = np.ndarray
Key = tuple[Hashable, ...]

#: Default bound on the working memory of kernel computations (bytes), beyond the result.
DEFAULT_MEMORY_BUDGET = 2 * 2**30
#: Relative tolerance on negative eigenvalues before a kernel is declared non-PSD.
PSD_TOLERANCE = 1e-9
#: Largest tile side of the pair grid when every pair term has a closed form: cache-sized tiles,
#: spread over threads, upper triangle only for symmetric kernels (see Limit._grid).
TILE_MAX = 256
#: Largest tile side when some term needs the Mehler series, whose per-call setup (coefficient
#: tables, order selection) is amortised over more pairs.
SERIES_TILE_MAX = 512
#: Kernels larger than this are not eigen-checked for PSD (O(B³)); their diagonal still is.
PSD_CHECK_MAX = 5000


# --------------------------------------------------------------------- analysis
class _Analysis:
    """Facts about a program needed by the interpreter, computed once per program."""

    def __init__(self, program: Program) -> None:
        self.program = program
        self.num_lines = len(program.lines)
        self.sources: dict[Vector, tuple[tuple[float, Vector], ...]] = {}
        self.terms: dict[Key, Term] = {}
        self.exprs: dict[Vector, tuple[float, tuple[tuple[float, Key], ...]]] = {}
        for line in program.lines:
            if isinstance(line, MatMulLine | BiasLine):
                self.sources[line.out] = ((1.0, line.out),)
            elif isinstance(line, LinCombLine):
                acc: dict[Vector, float] = {}
                for coef, arg in zip(line.coeffs, line.args, strict=True):
                    for c, s in self.sources[arg]:
                        acc[s] = acc.get(s, 0.0) + coef * c
                self.sources[line.out] = tuple((c, s) for s, c in acc.items() if c != 0.0)
            elif isinstance(line, NonLinLine):
                self.exprs[line.out] = (
                    line.expr.const,
                    tuple((c, self._term_key(t)) for c, t in line.expr.terms if c != 0.0),
                )
        for g in self.sources:
            self.exprs[g] = (0.0, ((1.0, self._term_key(Apply(identity, g))),))

    def _term_key(self, term: Term) -> Key:
        # One-argument activations of the same G-vector are the same random variable whatever
        # line they appear in: share them.
        key: Key = ("A", term.act.key, term.arg.index) if isinstance(term, Apply) else ("C", id(term))
        self.terms.setdefault(key, term)
        return key

    def line(self, v: Vector) -> Any:
        return self.program.line_of(v)


_ANALYSES: weakref.WeakKeyDictionary[Program, _Analysis] = weakref.WeakKeyDictionary()


def analysis_of(program: Program) -> _Analysis:
    """The analysis of a program, cached while the program lives; recomputed when lines were added."""
    a = _ANALYSES.get(program)
    if a is None or a.num_lines != len(program.lines):
        a = _ANALYSES[program] = _Analysis(program)
    return a


# ------------------------------------------------------------------------ plans
@dataclass
class _Plan:
    """Pair quantities to compute, in dependency order, with their last use (for freeing)."""

    order: list[Key]
    deps: dict[Key, list[Key]]
    last_use: dict[Key, int]
    side: set[Key]  # per-point keys needed from the diagonal runs (full mode)


class _Planner:
    """Turns root quantities into a plan. ``diag=True`` plans a per-point (diagonal) run."""

    def __init__(self, an: _Analysis, diag: bool) -> None:
        self.an = an
        self.diag = diag

    # Canonical keys: in diagonal mode a pair quantity is symmetric in its two arguments.
    def key(self, kind: str, x: Any, y: Any) -> Key:
        if self.diag and _sort_key(y) < _sort_key(x):
            x, y = y, x
        return (kind, x, y)

    def deps(self, key: Key) -> tuple[list[Key], list[Key]]:
        """(keys of this run, per-point keys of the diagonal runs) that ``key`` needs."""
        kind = key[0]
        an = self.an
        if kind == "cov":
            _, g1, g2 = key
            return [self.key("src", s1, s2) for _, s1 in an.sources[g1] for _, s2 in an.sources[g2]
                    if _sources_correlated(an, s1, s2)], []
        if kind == "src":
            _, s1, s2 = key
            l1, l2 = an.line(s1), an.line(s2)
            if isinstance(l1, BiasLine):
                return [], []
            for ln in (l1, l2):
                if ln.transposed:
                    raise UnsupportedError(
                        "the infinite-width interpreter does not execute transposed MatMul lines "
                        "(Netsor⊤) yet; use netsor.sample(..., method='dense') for finite widths"
                    )
            return [self.key("mom", l1.arg, l2.arg)], []
        if kind == "mom":
            _, v1, v2 = key
            if v1.kind == "data":
                return [self.key("data", an.line(v1).step, an.line(v2).step)], []
            if v1.kind == "G" and v2.kind == "G":
                return [self.key("cov", v1, v2)], []
            c1, t1 = an.exprs[v1]
            c2, t2 = an.exprs[v2]
            own = [self.key("term", a, b) for _, a in t1 for _, b in t2]
            means_l = [("mean", a) for _, a in t1] if c2 != 0.0 else []
            means_r = [("mean", b) for _, b in t2] if c1 != 0.0 else []
            if self.diag:
                return own + means_l + means_r, []
            return own, means_l + means_r
        if kind == "term":
            _, k1, k2 = key
            a1, a2 = self.an.terms[k1].args, self.an.terms[k2].args
            if self.diag:
                union = _union(a1, a2)
                return [self.key("cov", x, y) for i, x in enumerate(union) for y in union[i:]], []
            own = [self.key("cov", x, y) for x in a1 for y in a2]
            side = [("cov", x, y) for x in a1 for y in a1] + [("cov", x, y) for x in a2 for y in a2]
            return own, [_canonical_diag(k) for k in side]
        if kind == "mean":
            args = self.an.terms[key[1]].args
            return [self.key("cov", x, y) for i, x in enumerate(args) for y in args[i:]], []
        if kind == "data":
            return [], []
        raise AssertionError(kind)

    def plan(self, roots: list[Key]) -> _Plan:
        order: list[Key] = []
        deps: dict[Key, list[Key]] = {}
        side: set[Key] = set()
        stack: list[tuple[Key, bool]] = [(r, False) for r in reversed(roots)]
        while stack:
            key, expanded = stack.pop()
            if expanded:
                order.append(key)
                continue
            if key in deps:
                continue
            own, need = self.deps(key)
            deps[key] = own
            side.update(need)
            stack.append((key, True))
            stack.extend((d, False) for d in own if d not in deps)
        last_use = {k: i for i, k in enumerate(order)}
        for i, k in enumerate(order):
            for d in deps[k]:
                last_use[d] = max(last_use[d], i)
        for r in roots:
            last_use[r] = len(order)
        return _Plan(order, deps, last_use, side)


def _sort_key(x: Any) -> tuple[int, Any]:
    if isinstance(x, Vector):
        return (0, x.index)
    if x is None:
        return (1, -1)
    if isinstance(x, int):
        return (1, x)
    return (2, repr(x))


def _canonical_diag(key: Key) -> Key:
    kind, x, y = key
    return (kind, y, x) if _sort_key(y) < _sort_key(x) else key


def _union(a: tuple[Vector, ...], b: tuple[Vector, ...]) -> tuple[Vector, ...]:
    return tuple(dict.fromkeys((*a, *b)))


def _sources_correlated(an: _Analysis, s1: Vector, s2: Vector) -> bool:
    l1, l2 = an.line(s1), an.line(s2)
    if isinstance(l1, BiasLine) or isinstance(l2, BiasLine):
        return s1 is s2
    return l1.matrix is l2.matrix and l1.transposed == l2.transposed


# -------------------------------------------------------------------- execution
@dataclass
class _Side:
    """Per-point values (arrays of shape (B,)) from a diagonal run, and the data they came from."""

    values: dict[Key, Array]
    X: Array


class _Run:
    """Executes a plan on one tile (or on the diagonal)."""

    def __init__(self, an: _Analysis, d: int, diag: bool, left: _Side | None = None,
                 right: _Side | None = None, rows: slice = slice(None), cols: slice = slice(None),
                 X: Array | None = None, memo: gaussian.CoefficientMemo | None = None) -> None:
        self.an, self.d, self.diag, self.memo = an, d, diag, memo
        self.values: dict[Key, Array] = {}
        self.max_stderr = 0.0
        if diag:
            assert X is not None
            self.Xl = self.Xr = X
            self.shape: tuple[int, ...] = (X.shape[0],)
        else:
            assert left is not None and right is not None
            self.left, self.right = left, right
            self.Xl, self.Xr = left.X[rows], right.X[cols]
            self.rows, self.cols = rows, cols
            self.shape = (self.Xl.shape[0], self.Xr.shape[0])

    # Per-point quantities: in diagonal mode they live in this run; otherwise they are the
    # diagonal runs' values broadcast along rows (left point) or columns (right point).
    def point(self, key: Key, side: str) -> Array:
        if self.diag:
            return self.values[_canonical_diag(key)]
        src = self.left if side == "left" else self.right
        v = src.values[_canonical_diag(key)]
        return v[self.rows][:, None] if side == "left" else v[self.cols][None, :]

    def get(self, kind: str, x: Any, y: Any) -> Array:
        if self.diag and _sort_key(y) < _sort_key(x):
            x, y = y, x
        return self.values[(kind, x, y)]

    def run(self, plan: _Plan) -> None:
        for i, key in enumerate(plan.order):
            self.values[key] = self.compute(key)
            for d in plan.deps[key]:
                if plan.last_use[d] <= i:
                    self.values.pop(d, None)

    def compute(self, key: Key) -> Array:
        kind = key[0]
        an = self.an
        if kind == "cov":
            _, g1, g2 = key
            return _linear_combination(
                [(c1 * c2, self.get("src", s1, s2)) for c1, s1 in an.sources[g1] for c2, s2 in an.sources[g2]
                 if _sources_correlated(an, s1, s2)], self.shape)
        if kind == "src":
            _, s1, s2 = key
            l1, l2 = an.line(s1), an.line(s2)
            if isinstance(l1, BiasLine):
                return np.full(self.shape, l1.sigma**2)
            return l1.matrix.sigma**2 * self.get("mom", l1.arg, l2.arg)
        if kind == "mom":
            return self._moment(key[1], key[2])
        if kind == "term":
            return self._term(key[1], key[2])
        if kind == "mean":
            return self._mean(key[1])
        if kind == "data":
            _, t1, t2 = key
            A, B = data_view(self.Xl, t1), data_view(self.Xr, t2)
            if self.diag:
                return np.einsum("bi,bi->b", A, B) / self.d
            return (A @ B.T) / self.d
        raise AssertionError(kind)

    def _moment(self, v1: Vector, v2: Vector) -> Array:
        if v1.kind == "data":
            return self.get("data", self.an.line(v1).step, self.an.line(v2).step)
        if v1.kind == "G" and v2.kind == "G":
            return self.get("cov", v1, v2)
        c1, t1 = self.an.exprs[v1]
        c2, t2 = self.an.exprs[v2]
        parts = [(a1 * a2, self.get("term", k1, k2)) for a1, k1 in t1 for a2, k2 in t2]
        if c2 != 0.0:
            parts += [(c2 * a1, self.point(("mean", k1), "left")) for a1, k1 in t1]
        if c1 != 0.0:
            parts += [(c1 * a2, self.point(("mean", k2), "right")) for a2, k2 in t2]
        if c1 * c2 != 0.0:
            parts.append((c1 * c2, np.ones(1)))
        return _linear_combination(parts, self.shape)

    def _term(self, k1: Key, k2: Key) -> Array:
        t1, t2 = self.an.terms[k1], self.an.terms[k2]
        if isinstance(t1, Apply) and isinstance(t2, Apply):
            a = self.point(("cov", t1.arg, t1.arg), "left")
            b = self.point(("cov", t2.arg, t2.arg), "right")
            return gaussian.pair_expectation(t1.act, t2.act, a, b, self.get("cov", t1.arg, t2.arg), self.memo)
        return self._joint(t1, t2)

    def _joint(self, t1: Term, t2: Term) -> Array:
        """E[t1(Z at left point) t2(Z at right point)] by multivariate quadrature / QMC."""
        a1, a2 = t1.args, t2.args
        if self.diag:
            union = _union(a1, a2)
            cov = self._joint_cov_diag(union)
            p1 = [union.index(a) for a in a1]
            p2 = [union.index(a) for a in a2]
        else:
            cov = self._joint_cov_full(a1, a2)
            p1 = list(range(len(a1)))
            p2 = list(range(len(a1), len(a1) + len(a2)))

        def fn(x: Array) -> Array:
            return t1(*(x[..., i] for i in p1)) * t2(*(x[..., i] for i in p2))

        value, err = gaussian.expectation(fn, cov.reshape(-1, *cov.shape[-2:]))
        if err.size:
            self.max_stderr = max(self.max_stderr, float(np.max(err)))
        return value.reshape(self.shape)

    def _joint_cov_diag(self, args: tuple[Vector, ...]) -> Array:
        D = len(args)
        cov = np.empty((*self.shape, D, D))
        for i, x in enumerate(args):
            for j in range(i, D):
                cov[..., i, j] = cov[..., j, i] = self.get("cov", x, args[j])
        return cov

    def _joint_cov_full(self, a1: tuple[Vector, ...], a2: tuple[Vector, ...]) -> Array:
        k1, k2 = len(a1), len(a2)
        cov = np.empty((*self.shape, k1 + k2, k1 + k2))
        for i, x in enumerate(a1):
            for j, y in enumerate(a1):
                cov[..., i, j] = self.point(("cov", x, y), "left")
        for i, x in enumerate(a2):
            for j, y in enumerate(a2):
                cov[..., k1 + i, k1 + j] = self.point(("cov", x, y), "right")
        for i, x in enumerate(a1):
            for j, y in enumerate(a2):
                cov[..., i, k1 + j] = cov[..., k1 + j, i] = self.get("cov", x, y)
        return cov

    def _mean(self, k: Key) -> Array:
        t = self.an.terms[k]
        if isinstance(t, Apply):
            return gaussian.mean(t.act, self.get("cov", t.arg, t.arg))
        cov = self._joint_cov_diag(t.args)
        value, err = gaussian.expectation(lambda x: t(*(x[..., i] for i in range(len(t.args)))), cov)
        if err.size:
            self.max_stderr = max(self.max_stderr, float(np.max(err)))
        return value


def _linear_combination(parts: list[tuple[float, Array]], shape: tuple[int, ...]) -> Array:
    """Σ coef · array, broadcast to ``shape``; a lone unit term is returned without a copy
    (plan values are never modified in place)."""
    if not parts:
        return np.zeros(shape)
    if len(parts) == 1 and parts[0][0] == 1.0 and parts[0][1].shape == shape:
        return parts[0][1]
    out = np.zeros(shape)
    for coef, arr in parts:
        out += coef * arr
    return out


# ------------------------------------------------------------------ public API
_BLAS = ThreadpoolController()


def _one_blas_thread(method: Callable[..., Any]) -> Callable[..., Any]:
    """Run with single-threaded BLAS: the tiles are spread over our own threads, and BLAS
    threads on top of them (or on a busy machine) make OpenBLAS spin — measured 10–20× slower."""

    @functools.wraps(method)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        with _BLAS.limit(limits=1, user_api="blas"):
            return method(*args, **kwargs)

    return wrapped



def _tiles(n1: int, n2: int, size: int, symmetric: bool) -> Iterator[tuple[slice, slice]]:
    for r0 in range(0, n1, size):
        for c0 in range(r0 if symmetric else 0, n2, size):
            yield slice(r0, min(r0 + size, n1)), slice(c0, min(c0 + size, n2))


class Limit:
    """The infinite-width limit of a program on inputs ``X`` (and ``X2``).

    Parameters
    ----------
    program : Program
    X : array, shape (B, d) or (B, T, d)
        Inputs (``(B, T, d)`` for programs reading time steps).
    X2 : array, optional
        Second input set for cross-covariances; defaults to ``X``.
    memory_budget : int
        Bytes of working memory (beyond results) a computation may use; the pair
        grid is processed in tiles that fit.
    threads : int, optional
        Worker threads for tiles (default: the number of CPUs, at most 8).

    Notes
    -----
    ``cov(u, v)[i, j] = E[Z^u(x_i) Z^v(x2_j)]`` is the second moment (the
    covariance for G-vectors, which are centred). Weights are ``N(0, σ²/n_in)``.
    """

    def __init__(self, program: Program, X: Any, X2: Any = None, *,
                 memory_budget: int = DEFAULT_MEMORY_BUDGET, threads: int | None = None) -> None:
        self.program = program
        self.analysis = analysis_of(program)
        self.X = check_inputs(program, X, "X")
        self.X2 = self.X if X2 is None else check_inputs(program, X2, "X2")
        check_same_layout(self.X, self.X2)
        self.symmetric = X2 is None
        self.d = self.X.shape[-1]
        self.memory_budget = int(memory_budget)
        self.threads = threads or min(os.cpu_count() or 1, 8)
        self._diag: dict[str, _Side] = {}
        self.max_stderr = 0.0
        self.verified_accuracy = True  # the last kernel had only bounded-error expectations (nngp psd)
        self.memo = gaussian.CoefficientMemo()  # per-point Hermite coefficients, shared by all tiles

    # ---- per-point runs
    def _side(self, which: str, keys: set[Key]) -> _Side:
        """Per-point values on X (``which="left"``) or X2, extended to cover ``keys``."""
        which = "left" if self.symmetric else which
        side = self._diag.get(which)
        if side is None:
            side = self._diag[which] = _Side({}, self.X if which == "left" else self.X2)
        missing = [k for k in keys if k not in side.values]
        if missing:
            run = _Run(self.analysis, self.d, diag=True, X=side.X, memo=self.memo)
            run.values = side.values
            plan = _Planner(self.analysis, diag=True).plan(missing)
            # Keep every per-point value: they are (B,) arrays and later queries reuse them.
            plan.last_use = {k: len(plan.order) for k in plan.order}
            with np.errstate(all="ignore"):  # overflow is reported by _finite_or_raise
                run.run(plan)
            self.max_stderr = max(self.max_stderr, run.max_stderr)
        return side

    def _grid(self, roots: list[Key], fill: Callable[[slice, slice, dict[Key, Array]], None],
              symmetric: bool) -> None:
        planner = _Planner(self.analysis, diag=False)
        plan = planner.plan(roots)
        left = self._side("left", plan.side)
        right = left if self.symmetric else self._side("right", plan.side)
        peak = _peak_live(plan)
        n1, n2 = self.X.shape[0], self.X2.shape[0]
        per_entry = 8 * (peak + 4) * self.threads
        # Tiles of a few hundred points stay in cache, use every thread and, for a symmetric
        # kernel, skip the lower triangle; the budget can only make them smaller.
        closed_form = self._closed_form(plan)
        self.verified_accuracy = self._one_argument_terms(plan)
        size = max(16, min(TILE_MAX if closed_form else SERIES_TILE_MAX,
                           int(np.sqrt(self.memory_budget / per_entry))))

        def work(tile: tuple[slice, slice]) -> float:
            rows, cols = tile
            run = _Run(self.analysis, self.d, diag=False, left=left, right=right, rows=rows, cols=cols,
                       memo=self.memo)
            with np.errstate(all="ignore"):  # overflow is reported by _finite_or_raise
                run.run(plan)
            fill(rows, cols, {r: run.values[r] for r in roots})
            return run.max_stderr

        tiles = list(_tiles(n1, n2, size, symmetric))
        if self.threads > 1 and len(tiles) > 1:
            with ThreadPoolExecutor(self.threads) as pool:
                errs = list(pool.map(work, tiles))
        else:
            errs = [work(t) for t in tiles]
        self.max_stderr = max([self.max_stderr, *errs])

    def _closed_form(self, plan: _Plan) -> bool:
        """True when every pair expectation of the plan is a closed form (or Stein's identity)."""
        terms = self.analysis.terms
        for k in plan.order:
            if k[0] == "term":
                t1, t2 = terms[k[1]], terms[k[2]]
                if not (isinstance(t1, Apply) and isinstance(t2, Apply) and gaussian.is_elementary(t1.act, t2.act)):
                    return False
        return True

    def _one_argument_terms(self, plan: _Plan) -> bool:
        """True when every expectation is a closed form, the Mehler series (tail bound 1e-12) or the
        panelled quadrature (~1e-13): all far inside PSD_TOLERANCE. Joint multi-argument terms use
        tensor Gauss–Hermite or QMC, whose error is not bounded that tightly."""
        terms = self.analysis.terms
        return all(isinstance(terms[k[1]], Apply) and isinstance(terms[k[2]], Apply)
                   for k in plan.order if k[0] == "term")

    def _pair_matrix(self, pairs: list[tuple[Vector, Vector]]) -> list[Array]:
        roots = [("mom", u, v) for u, v in pairs]
        n1, n2 = self.X.shape[0], self.X2.shape[0]
        outs = [np.empty((n1, n2)) for _ in pairs]
        # A pair (u, u) on one input set is symmetric: compute only tiles on/above the diagonal.
        symmetric = self.symmetric and all(u is v for u, v in pairs)

        def fill(rows: slice, cols: slice, vals: dict[Key, Array]) -> None:
            for out, r in zip(outs, roots, strict=True):
                out[rows, cols] = vals[r]
                if symmetric and rows != cols:
                    out[cols, rows] = vals[r].T

        self._grid(roots, fill, symmetric)
        return outs

    @_one_blas_thread
    def cov(self, u: Vector, v: Vector | None = None) -> Array:
        """``E[Z^u(x_i) Z^v(x2_j)]``, shape (B1, B2) (``v`` defaults to ``u``)."""
        v = u if v is None else v
        for w in (u, v):
            self.program._check_own(w)
        if (u.kind == "data") != (v.kind == "data"):
            return np.zeros((self.X.shape[0], self.X2.shape[0]))
        return _finite_or_raise(self._pair_matrix([(u, v)])[0], "cov")

    @_one_blas_thread
    def var(self, u: Vector) -> Array:
        """``E[(Z^u(x_i))²]`` for each input of ``X``, shape (B,)."""
        self.program._check_own(u)
        key = ("mom", u, u)
        return _finite_or_raise(self._side("left", {key}).values[key].copy(), "var")

    @_one_blas_thread
    def nngp(self, psd: str = "auto") -> Array:
        """Covariance of the outputs, shape (B1·R, B2·R), indexed ``b·R + r``.

        ``K[(i,r),(j,s)] = σ_v² E[Z^{h_r}(x_i) Z^{h_s}(x2_j)] + bias²`` for outputs
        of the same readout, 0 across readouts (independent readout vectors).

        ``psd`` (kernels of one input set only):

        * ``"clip"``: verify PSD (Cholesky, eigen-decomposition if that fails); clip
          negative eigenvalues above ``-PSD_TOLERANCE·λ_max``, raise below;
        * ``"check"``: verify, raise below the tolerance, no clipping;
        * ``"auto"`` (default): ``"clip"`` when some expectation came from multi-dimensional
          quadrature or QMC (joint terms of several G-vectors); nothing when every expectation
          is a closed form or a one-argument rule with an error bound near 1e-12, whose kernel
          is PSD up to errors far below the tolerance (and no clipping in floating point
          improves on rounding);
        * ``"skip"``.
        """
        if psd not in ("auto", "clip", "check", "skip"):
            raise HyperParameterError(f"psd must be 'auto', 'clip', 'check' or 'skip', got {psd!r}")
        outputs = self.program.outputs
        if not outputs:
            from netsor.errors import ProgramError

            raise ProgramError("the program has no outputs; add p.readout(h, sigma=...) first")
        R = len(outputs)
        n1, n2 = self.X.shape[0], self.X2.shape[0]
        K = np.zeros((n1, R, n2, R))
        pairs = [(r, s) for r in range(R) for s in range(R) if outputs[r][0] is outputs[s][0]]
        roots = [("mom", outputs[r][1], outputs[s][1]) for r, s in pairs]
        unique_roots = list(dict.fromkeys(roots))
        symmetric = self.symmetric

        def fill(rows: slice, cols: slice, vals: dict[Key, Array]) -> None:
            for (r, s), root in zip(pairs, roots, strict=True):
                ro = outputs[r][0]
                block = ro.sigma**2 * vals[root] + ro.bias**2
                K[rows, r, cols, s] = block
                if symmetric and rows != cols:
                    K[cols, s, rows, r] = block.T

        self._grid(unique_roots, fill, symmetric)
        K = _finite_or_raise(K.reshape(n1 * R, n2 * R), "nngp")
        if psd == "auto":
            psd = "skip" if self.verified_accuracy else "clip"
        if self.symmetric and psd != "skip":
            K = ensure_psd(K, clip=(psd == "clip"))
        return K


def _peak_live(plan: _Plan) -> int:
    live, peak = 0, 0
    ends: dict[int, int] = {}
    for i, k in enumerate(plan.order):
        live += 1
        peak = max(peak, live)
        ends[plan.last_use[k]] = ends.get(plan.last_use[k], 0) + 1
        live -= ends.pop(i, 0)
    return peak


def _finite_or_raise(K: Array, what: str) -> Array:
    # Row blocks: a full boolean mask of a 20 000² kernel would be 400 MB outside the budget.
    rows = max(1, 2**24 // max(1, K[:1].size))
    if not all(np.isfinite(K[i:i + rows]).all() for i in range(0, K.shape[0], rows)):
        raise NumericalError(
            f"{what}: the limit produced non-finite values (overflow of an unbounded activation such "
            "as exp, or variances that blow up with depth); reduce sigma_w / depth or rescale inputs"
        )
    return K


def ensure_psd(K: Array, clip: bool = True, tol: float = PSD_TOLERANCE) -> Array:
    """Check that a symmetric kernel is PSD; clip eigenvalues in [-tol·λ_max, 0) if ``clip``.

    Raises :class:`NumericalError` when an eigenvalue is below ``-tol·λ_max``.
    Kernels larger than ``PSD_CHECK_MAX`` only get their diagonal checked.
    """
    diag = np.diag(K)
    scale = max(float(np.max(np.abs(diag))), np.finfo(float).tiny)
    if np.min(diag) < -tol * scale:
        raise NumericalError(f"kernel has a negative variance {np.min(diag):.3g}: not PSD")
    if K.shape[0] > PSD_CHECK_MAX:
        return K
    try:
        np.linalg.cholesky(K)
        return K
    except np.linalg.LinAlgError:
        pass
    vals, vecs = np.linalg.eigh(K)
    lmax = max(float(vals[-1]), np.finfo(float).tiny)
    if vals[0] < -tol * lmax:
        raise NumericalError(
            f"kernel is not PSD: smallest eigenvalue {vals[0]:.3g} vs largest {lmax:.3g} "
            f"(tolerance {tol:g}); this indicates an inaccurate expectation — report it"
        )
    if not clip or vals[0] >= 0:
        return K
    K = (vecs * np.maximum(vals, 0.0)) @ vecs.T
    return 0.5 * (K + K.T)


def limit(program: Program, X: Any, X2: Any = None, **kwargs: Any) -> Limit:
    """The infinite-width limit of ``program`` on inputs ``X`` (see :class:`Limit`)."""
    return Limit(program, X, X2, **kwargs)


def nngp(program: Program, X: Any, X2: Any = None, *, memory_budget: int = DEFAULT_MEMORY_BUDGET,
         threads: int | None = None, psd: str = "auto") -> Array:
    """NNGP kernel: the covariance of the outputs of ``program`` in the infinite-width limit.

    Parameters
    ----------
    program : Program
    X : array, shape (B1, d) or (B1, T, d)
    X2 : array, shape (B2, ...), optional
        If given, returns the cross-covariance between outputs on ``X`` and on ``X2``.
    memory_budget : int
        Bytes of working memory beyond the result (computed in tiles that fit).
    threads : int, optional
    psd : {"auto", "clip", "check", "skip"}
        PSD handling of ``nngp(program, X)`` (see :meth:`Limit.nngp`).

    Returns
    -------
    K : array, shape (B1·R, B2·R)
        Indexed ``b·R + r`` for R outputs (``(B1, B2)`` when R = 1).
    """
    return Limit(program, X, X2, memory_budget=memory_budget, threads=threads).nngp(psd=psd)
