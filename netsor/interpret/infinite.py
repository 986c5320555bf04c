"""Infinite-width interpreter: the Gaussian-process limit of a program (DESIGN §2), with error bounds.

Every vector ``x`` gets a random variable ``Z^x``. Each line kind says how its variable is
expressed (:meth:`LineRule.limit`): data, a Gaussian *source* (MatMul, bias) whose covariance
with other sources it gives, a linear combination of G-vectors, or a function of G-vectors
(an expression tree, expanded into monomials). A second moment ``E[Z^u(x) Z^v(x')]`` then
unfolds into source covariances (linear parts), data inner products, and Gaussian expectations
of pairs of monomials. A monomial pair factorises over groups of *structurally independent*
factors (arguments with no correlated sources); each group is one call to the Gaussian engine:
a one-argument rule (closed forms, Stein, Mehler series) when each side is a function of one
G-vector, else the multi-dimensional engine (:mod:`netsor.gaussian.joint`). Monomials ``φ(u_b)`` of
BatchNorm outputs of one batch of G-vectors with positively homogeneous φ take one-dimensional
integrals instead (:mod:`netsor.gaussian.batchnorm`) at one input (a batch is one input), and
two-dimensional ones between two inputs (two batches).

Errors. Every quantity is a pair (value, error bound): the engine's own error of each
expectation plus the first-order propagation of the errors of its input covariances
(:mod:`netsor.interpret.propagation`), summed through the linear parts and products. Results
carry the bound (``Limit.error``, per entry with ``with_error=True``); a result whose bound is
above the requested relative tolerance raises :class:`NumericalError` saying what was reached.

How it runs. The quantities a query needs are found by a dependency walk (a flat *plan* in
topological order), then the plan is executed on tiles of the (B1, B2) pair grid; per-point
quantities (variances, means, moments for the error bounds) come from a cheap "diagonal" run
of the same machinery on each input set. Tiles bound the working memory, run on several
threads, and a kernel of one input set with itself only computes tiles on or above the
diagonal. Entries of two identical inputs take the per-point value.
"""

from __future__ import annotations

import functools
import math
import os
import zlib
from collections.abc import Callable, Hashable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, NoReturn

import numpy as np
from threadpoolctl import ThreadpoolController

from netsor.activations import Activation, distance_kernels, identity, relu, step
from netsor.activations.kernels import known_supplement, remembered_angles
from netsor.activations.registry import from_ufunc
from netsor.allocator import reused_memory
from netsor.errors import HyperParameterError, NumericalError, ProgramError, UnsupportedError
from netsor.gaussian import conditioned, joint, near_parallel, piecewise
from netsor.gaussian.batchnorm import batchnorm_cross_expectation, batchnorm_expectation, centred_covariance
from netsor.gaussian.conditioned import FactorTimesForm
from netsor.gaussian.pairs import (
    MOMENT_RTOL,
    CoefficientMemo,
    is_elementary,
    is_located,
    mean,
    moments_1d,
    pair_expectation,
    product_activation,
    same_kernel,
    with_located_kinks,
)
from netsor.gaussian.quadrature import Z_MAX, expect_1d_err
from netsor.groups import connected_groups
from netsor.interpret import bounds, parity, pointcoef, propagation, ties
from netsor.interpret.functions import activation_of, conditions_on, joint_function, shifted
from netsor.interpret.rules import (
    DataForm,
    FunctionForm,
    LinearForm,
    MomentForm,
    SourceCovariance,
    SourceForm,
    data_view,
    rule_for,
)
from netsor.ir import DataLine, MatMulLine, Matrix, NonLinLine, Program, Vector
from netsor.ir.differentiate import derived_activation, differentiate
from netsor.ir.expr import (
    Apply,
    BatchNormalized,
    BatchNormPartial,
    Const,
    Expr,
    Monomial,
    Polynomial,
    Prod,
    Sum,
    Var,
    constant,
    expand,
    linear,
    opaque_nodes,
    product,
)
from netsor.ir.homogeneity import input_scaling
from netsor.ir.transforms import substituted
from netsor.linalg import (
    PSD_TOLERANCE,
    colinear_rows,
    combination_of,
    ensure_psd,
    identical_rows,
    largest_ratio,
    mirror_upper,
    symmetrized_upper,
)
from netsor.validate import (
    check_choice,
    check_fits_in_memory,
    check_memory_budget,
    check_real,
    check_threads,
    limit_inputs,
    seed_sequence,
)

if TYPE_CHECKING:
    from netsor.interpret.simulation import SimulatedLimit

Array = np.ndarray
Key = tuple[Hashable, ...]
Value = tuple[Any, Any]  # (value, error bound), arrays on a tile or per point

#: An entry whose scale √(K_ii K_jj) is below this share of the result's largest is at rounding: its
#: bound is checked against the largest scale (an output that vanishes in the limit).
VANISHING_SCALE = 64 * np.finfo(float).eps
#: A refused entry whose own correlation is this close to ±1 gets the hint that step-like kernels are
#: ½-Hölder there (refused ordered-phase ReLU NTKs: 1 − ρ from 2e-16 to 2e-7).
ORDERED_HINT_GAP = 1e-6
#: Default relative tolerance of every result (relative to √(K_ii K_jj)).
DEFAULT_RTOL = 1e-8
#: Fraction of the tolerance given to the expectations of one layer (divided by the nesting depth).
TERM_SHARE = 0.1
#: A result that misses rtol by at most this factor (no Monte Carlo) is computed once more with the
#: expectations' share divided by twice the factor.
RETRY_REACH = 1e4
#: A dense (pair-dependent) bound of a tile is collapsed to rank one when its largest ratio to the
#: envelope is below this share of the term tolerance: the looser form takes at most a tenth of
#: the term's budget, and later steps combine in O(B) per tile (the NTK's step kernels: −15 %).
COMPACT_SHARE = 1e-1
#: Where a propagated bound (its dense part included) exceeds this share of the tolerance given to all
#: layers' expectations (``term_share · rtol``, a tenth of rtol), pairs of continuous activations take a
#: bound of their own slope from per-point Hermite coefficients (:func:`~netsor.interpret.propagation.
#: hermite_modulus`, a dense pass a tile): where depth has made the per-point slope's bound grow towards
#: rtol (tanh at σ_w = 3 from depth ~10), not in shallow networks (tanh at σ_w = 1.5, depth 5, N = 1000:
#: +18 % time for a 10 % tighter bound when tried from the compact threshold on, +7 % from half this share).
PAIR_SLOPE_SHARE = 1.0
#: Correlations below which a pair whose Hermite bound has not contracted takes its slope ``E[φ'ψ']`` itself
#: (:meth:`Run._slope_modulus`; above, that slope is nearly the per-point one and costs a nested rule).
SLOPE_CORRELATION = 0.999
#: Relative tolerance of that slope: its error is added to it, so a coarse one only widens the bound by that
#: factor, while the Mehler series of φ', ψ' at high correlation needs orders far beyond its tables at the
#: engine's rtol (gelu's NTK at depth 30, σ_w = 1.5: variances ~100, pairs at ρ ~ 0.93 took the nested rule).
SLOPE_RTOL = 1e-4
#: Default bound on the working memory of kernel computations (bytes), beyond the result.
DEFAULT_MEMORY_BUDGET = 2 * 2**30
#: Largest tile side of the pair grid when every pair term has a closed form (tiles spread over
#: threads; each quantity of a tile costs ~40 µs of Python besides its arithmetic, so larger tiles pay
#: until they leave the caches: depth-10 ReLU NNGP + NTK, 2 cores, N = 1000: 67 ms at 384, 61–63 at
#: 512–700, N = 2000: 217 → 165 ms, NNGP 102 → 86 ms; 1024 was slower), when some term needs the
#: Mehler series (whose per-call setup is amortised over more pairs), and when some term is a joint
#: multi-dimensional expectation.
TILE_MAX, SERIES_TILE_MAX, JOINT_TILE_MAX = 512, 512, 256
PSD_POLICIES = ("auto", "clip", "check", "skip")
#: Relative tolerance of the expectations ``E[∂Z^h/∂Ẑ]`` of the Netsor⊤ corrections.
DERIVATIVE_RTOL = 1e-12
_EPS = np.finfo(float).eps


# --------------------------------------------------------------------- analysis
@dataclass(frozen=True)
class Component:
    """One group of structurally independent factors of a monomial pair: the product of the
    ``left`` atoms at the left point and of the ``right`` atoms at the right point."""

    left: Monomial | None
    right: Monomial | None


@dataclass(frozen=True)
class BatchNormForm:
    """A monomial ``act(u_index)`` of one BatchNorm output ``u`` of a batch of G-vectors ``args``
    (positively homogeneous ``act``): its expectations reduce to one-dimensional integrals
    (:mod:`netsor.gaussian.batchnorm`)."""

    args: tuple[Vector, ...]
    index: int
    act: Activation


@dataclass(frozen=True)
class Projection:
    """A monomial that is a function of one linear form ``w = Σ coefs · args`` of G-vectors:
    ``act(w)`` (one-dimensional, whatever the number of arguments)."""

    args: tuple[Vector, ...]
    coefs: Array
    act: Activation


class Analysis:
    """Facts about a program needed by the interpreter, computed once per program (content-keyed:
    monomials by their expression keys, so equal terms of different lines are computed once).

    ``sources[g]`` holds every G-vector as a linear combination ``Z^g = Σ coef · Ẑ^s`` of the
    Gaussian parts of source lines (MatMul, bias). In a program with transposes the correction
    ``Ż`` of a MatMul (:mod:`netsor.interpret.rules.matmul`) is folded in, so that
    ``E[∂Z^g/∂Ẑ^s]`` is the coefficient ``sources[g][s]`` and ``Z^g`` stays Gaussian. The analysis is
    also the rules' :class:`~netsor.interpret.rules.LimitContext` while it walks the program.
    """

    def __init__(self, program: Program) -> None:
        self.program = program
        self.num_lines = len(program.lines)
        self._uses: dict[Matrix, list[MatMulLine]] = {}
        #: Largest error bound of an expectation ``E[∂Z^h/∂Ẑ]`` of a nonlinear ``h`` (Netsor⊤
        #: corrections); those coefficients enter the covariances as exact numbers.
        self.derivative_error = 0.0
        self.sources: dict[Vector, dict[Vector, pointcoef.Coefficient]] = {}
        #: Netsor⊤: each MatMul output's correction ``Ż = Σ coef · Z^arg`` (empty without transposes).
        self.corrections: dict[Vector, tuple[tuple[float, Vector], ...]] = {}
        #: Bounds on the errors of source coefficients that carry numerical Netsor⊤ corrections
        #: (``E[∂φ]`` by quadrature), by G-vector and source; absent where exact.
        self.source_errors: dict[Vector, dict[Vector, float]] = {}
        #: Scalars (NetsorK): how each is computed at one input (see :class:`ScalarLimit`).
        self.scalars: dict[Vector, MomentForm | FunctionForm] = {}
        self.moment_terms: dict[Vector, tuple[float, list[MomentTerm]]] = {}
        #: Scalars of the limit that are not lines of the program: per-input coefficients of Netsor⊤
        #: corrections (``E[∂Z^h/∂Ẑ]`` in programs that read data, NetsorK scalars), by request
        #: ``(vector, source, scale)`` of :meth:`derivative`.
        self.derived_scalars: dict[tuple[Vector, Vector, float], float | Vector] = {}
        self.polys: dict[Vector, Polynomial] = {}
        self.steps: dict[Vector, int | None] = {}
        self.monomials: dict[Key, Monomial] = {}
        #: The first NonLin line whose polynomial has each monomial (for error messages).
        self.owners: dict[Key, Vector] = {}
        #: Why the expectation engine cannot take this program (None when it can): raised by
        #: :class:`Limit`; the simulation may still run it.
        self.refusal: str | None = None
        self._source_cov: dict[tuple[Vector, Vector], SourceCovariance | None] = {}
        #: Parity under the program's declared sign symmetry: sources of opposite parities are independent.
        self.parity = parity.vector_parities(program)
        self._correlated: dict[tuple[Vector, Vector], bool] = {}
        self._components: dict[tuple[Key, Key, bool], list[Component]] = {}
        self._factors: dict[Key, list[Monomial]] = {}
        self._functions: dict[Key, Any] = {}
        #: Plans of the tile runs (by their roots) and of the per-point runs (by the keys they add): the
        #: dependency walk costs ~0.5–1.5 ms, once per program and roots.
        self.plans: dict[Any, Plan] = {}
        #: Vectors that do not depend on the data (biases, matrices applied to them, functions of
        #: those): one random variable at every input, whatever the input.
        self.data_free: set[Vector] = set()
        nesting: dict[Vector, int] = {}
        for line in program.lines:
            form = rule_for(line).limit(line, self)
            out = line.out
            expectation = isinstance(form, FunctionForm | MomentForm)
            nesting[out] = max((nesting[v] for v in line.inputs), default=0) + expectation
            if not isinstance(line, DataLine) and all(v in self.data_free for v in line.inputs):
                self.data_free.add(out)
            if isinstance(line, MatMulLine):
                self._uses.setdefault(line.matrix, []).append(line)
            if out.kind == "scalar":
                assert isinstance(form, MomentForm | FunctionForm)
                self.scalars[out] = form
                if isinstance(form, MomentForm):
                    self.moment_terms[out] = self._moment_terms(out, form.expr)
            elif isinstance(form, DataForm):
                self.steps[out] = form.step
            elif isinstance(form, SourceForm):
                self.sources[out] = self._combination(out, ((1.0, out),), form.correction)
                self._record_errors(out, form.correction, form.errors)
                self.corrections[out] = form.correction
                self._register_gaussian(out)
            elif isinstance(form, LinearForm):
                self.sources[out] = self._combination(out, (), form.terms)
                self._record_errors(out, form.terms, ())
                self._register_gaussian(out)
            elif isinstance(form, FunctionForm):
                if self.refusal is None and _contains(form.expr, BatchNormPartial):
                    self.refusal = (
                        f"{out.name} = {form.expr.describe()}: BatchNorm's derivative ∂u_b/∂g_j (backward programs: "
                        "the NTK of BatchNorm networks) divides by the batch standard deviation, a B-dimensional "
                        "expectation that only the QMC simulation computes: pass rtol >= "
                        f"{SIMULATION_MIN_RTOL:g} (method='auto', ~1e-2 in a minute) or method='qmc'")
                self.polys[out] = _with_scalar_coefficients(out, expand(self._in_sources(form.expr)))
                for _, m in self.polys[out].terms:
                    self.monomials.setdefault(m.key, m)
                    self.owners.setdefault(m.key, out)
        #: Most NonLin lines on one path of the program: the number of expectations whose errors
        #: add up (through the layers' gains) in one kernel entry.
        self.nesting = max(nesting.values(), default=0)

    def _in_sources(self, expr: Expr) -> Expr:
        """``expr`` over the sources of its G-vectors where they are fewer than its arguments: with
        ``g4 = g1 − g2`` and ``g8 = g2 − 0.2g1``, ``relu(g1)·step(g4)·relu(g8)`` becomes
        ``relu(g1)·step(g1 − g2)·relu(g2 − 0.2g1)``, a function of the two G-vectors its law lives on. Over
        three arguments their covariance was singular at every point, and the cone moments — which tell
        forms determined by others from the forms' coefficients — lost every digit where conditioning on
        two forms determined the third (a bound 819× the value of a point with itself). Only sources that
        are their own Gaussian parts (no Netsor⊤ correction) and real coefficients; else ``expr``."""
        args = [v for v in expr.args if v.kind != "scalar"]
        used: set[Vector] = set()
        for v in args:
            src = self.sources.get(v)
            if src is None or not all(isinstance(c, float | int) for c in src.values()):
                return expr
            if any(self.sources.get(s) != {s: 1.0} for s in src):
                return expr
            used.update(src)
        # a data-free source inside an argument that reads the data (b = 0.6a + 0.8c, c = p.gaussian): over the
        # sources it is one argument shared by every input, which the pair rules take as one coordinate; left in
        # b, the pair's law had an exact null vector (b − 0.6a at two inputs) that no rule saw
        hidden = len(args) > 1 and any(
            v not in self.data_free and any(s in self.data_free for s in self.sources[v]) for v in args)
        repl = {v: linear(0.0, [(float(c), Var(s)) for s, c in self.sources[v].items()]) for v in args
                if self.sources[v] != {v: 1.0}}
        if hidden and len(used) == len(args) + 1:
            # one source more (relu(g − ½)·relu(0.6g + 0.8β), g = Ux + b, β another bias): over the sources
            # only where conditioning on a form then leaves a data-free source as the inner argument; other
            # functions keep their arguments (three took a tanh(v + relu(u)) to control variates, 4 → 40 s)
            rewritten = substituted(expr, repl)
            if rewritten is not None and conditions_on(rewritten, self.data_free):
                return rewritten
        if len(used) > len(args) or (len(used) == len(args) and not hidden):
            return self._in_basis(expr, args, sorted(used, key=lambda s: s.index))
        rewritten = substituted(expr, repl)
        return expr if rewritten is None else rewritten

    def _in_basis(self, expr: Expr, args: list[Vector], sources: list[Vector]) -> Expr:
        """``expr`` over a basis of its G-vectors where they are linearly dependent although their
        sources are not fewer (``g6 = a − c``, ``g10 = c − a/5`` with ``c = Ux + b`` of two sources:
        ``g10 = 0.8a − g6``): each vector outside the basis (chosen greedily in argument order) written
        as a combination of the basis, when that combination reproduces its source coefficients to
        rounding; else ``expr``."""
        A = np.array([[float(self.sources[v].get(s, 0.0)) for s in sources] for v in args])
        basis: list[int] = []
        for i in range(len(args)):
            if np.linalg.matrix_rank(A[basis + [i]]) > len(basis):
                basis.append(i)
        if len(basis) == len(args):
            return expr
        repl = {}
        for i in sorted(set(range(len(args))) - set(basis)):
            coef = combination_of(A[basis].T, A[i])
            if coef is None:
                return expr
            repl[args[i]] = linear(0.0, [(float(c), Var(args[b])) for b, c in zip(basis, coef, strict=True)
                                         if c != 0.0])
        rewritten = substituted(expr, repl)
        return expr if rewritten is None else rewritten

    def _moment_terms(self, out: Vector, expr: Any) -> tuple[float, list[MomentTerm]]:
        """``E ψ`` as ``const + Σ coef · (scalar factor) · E[vector monomial]``: each monomial of ψ
        split into its factors of scalars only and its factors of G-vectors."""
        poly = expand(expr)
        terms = []
        for coef, m in poly.terms:
            scalar_atoms, vector_atoms = _scalar_factors(m, f"the moment {out.name} = mean[{expr.describe()}]")
            scalar_part = Monomial(scalar_atoms).expr if scalar_atoms else None
            if not vector_atoms:
                terms.append(MomentTerm(coef, scalar_part, "one", None))
            elif len(vector_atoms) == 1 and isinstance(vector_atoms[0], Var):
                continue  # a G-vector is centred: its mean is exactly 0
            elif len(vector_atoms) == 2 and all(isinstance(a, Var) for a in vector_atoms):
                terms.append(MomentTerm(coef, scalar_part, "cov",
                                        canonical(("g", vector_atoms[0].vector, vector_atoms[1].vector))))
            else:
                terms.append(MomentTerm(coef, scalar_part, "mean", ("mean", self.register(vector_atoms).key)))
        return poly.const, terms

    def normalized_variance(self, v: Vector) -> float | None:
        """``λ²`` when the G-vector ``v`` is ``λ · u · θ`` with ``θ = 1/√(E u² − (E u)²)`` (or ``1/√(E u²)``) of a
        G-vector ``u`` — a LayerNorm (:func:`netsor.layers.layernorm`) or an RMS norm, ``E u = 0`` in the limit: the
        variance of ``v`` at every input is then exactly ``λ²``. Taken as ``θ(x)² Var u(x)`` with ``θ``'s own bound,
        the variance's relative bound doubled a layer (a LayerNorm ReLU MLP at σ_w = 1: 1e-7 at depth 20, refused
        at the default rtol; 2 at depth 50). None otherwise."""
        found = self.normalization(v)
        return None if found is None else found[0]

    def normalization(self, v: Vector) -> tuple[float, Vector] | None:
        """``(λ², u)`` when the G-vector ``v`` is ``λ · u · θ`` normalising ``u`` (:meth:`normalized_variance`),
        else None."""
        key = ("normalized", v)
        if key not in self._functions:
            self._functions[key] = self._normalization(v)
        return self._functions[key]

    def _normalization(self, v: Vector) -> tuple[float, Vector] | None:
        coefs = self.sources.get(v, {})
        if not coefs or v in self.source_errors:
            return None
        # θ: a scalar in every term of every coefficient of v
        common = set.intersection(*(set(ss) for c in coefs.values() for _, ss in pointcoef.terms_of(c)))
        for theta in sorted(common, key=lambda s: s.index):
            u = _normalizer_of(self.scalars, theta)
            if u is None or u not in self.sources or u in self.source_errors or self.sources[u].keys() != coefs.keys():
                continue
            scale = _common_scale({s: pointcoef.scale(theta, c) for s, c in self.sources[u].items()}, coefs)
            if scale is not None:
                return scale * scale, u
        return None

    def coefficient_scalars(self, g: Vector) -> list[Vector]:
        """The scalars the per-input source coefficients of ``g`` depend on."""
        return list(dict.fromkeys(s for c in self.sources[g].values() if isinstance(c, pointcoef.PointCoefficient)
                                  for s in c.scalars))

    def _combination(self, out: Vector, own: tuple[tuple[float, Vector], ...],
                     terms: tuple[tuple[float | Vector, Vector], ...]) -> dict[Vector, pointcoef.Coefficient]:
        """``own + Σ coef · Z^arg`` over sources, for the G-vector ``out`` (a coefficient is a
        number or a scalar of the program: per-input coefficients, :mod:`netsor.interpret.pointcoef`)."""
        acc: dict[Vector, pointcoef.Coefficient] = {s: c for c, s in own}
        for coef, arg in terms:
            if arg not in self.sources:
                raise UnsupportedError(
                    f"in the limit, {out.name} = Ẑ + c·Z^{arg.name} where {arg.name} is a nonlinear "
                    f"vector: {out.name} is not Gaussian, which this interpreter does not represent; the "
                    "expectation engine supports a MatMul by W (or Wᵀ) of a vector that depends nonlinearly on "
                    "earlier uses of Wᵀ (or W) only when those uses multiply G-vectors; the simulation takes it: "
                    "netsor.limit(p, X, method='qmc', rtol=1e-3)")
            for s, c in self.sources[arg].items():
                acc[s] = pointcoef.add(acc.get(s, 0.0), pointcoef.scale(coef, c))
        for s, c in acc.items():
            if isinstance(c, float) and not math.isfinite(c):  # 1e300·1e300 (then ·0: NaN, a raw LinAlgError)
                raise NumericalError(
                    f"{out.name} is {c} times {s.name}: the product of its lines' constants overflows float64; "
                    "use smaller constants (or fold them into the matrices' sigma)")
        return {s: c for s, c in acc.items() if not pointcoef.is_zero(c)}

    def _register_gaussian(self, g: Vector) -> None:
        """The monomial ``Z^g`` of a G-vector, registered as soon as ``g`` is walked: a later line's
        Netsor⊤ derivative may integrate it before the walk ends."""
        m = Monomial((Var(g),))
        self.monomials.setdefault(m.key, m)

    def _record_errors(self, out: Vector, terms: tuple[tuple[float | Vector, Vector], ...],
                       errors: tuple[float, ...]) -> None:
        """Bounds on the errors of ``out``'s source coefficients, for ``Σ coef · Z^arg`` with
        ``coef`` off by ``errors`` (a Netsor⊤ correction's ``E[∂φ]``) and the args' own errors:
        ``|coef| ε_s + e |c_s| + e ε_s`` per source. Empty (exact) for programs without them."""
        acc: dict[Vector, float] = {}
        for k, (coef, arg) in enumerate(terms):
            e = errors[k] if errors else 0.0
            arg_errors = self.source_errors.get(arg, {})
            if not (e or arg_errors):
                continue
            if isinstance(coef, Vector):
                raise UnsupportedError(f"{out.name}: a NetsorK scalar times a vector whose Netsor⊤ corrections are "
                                       "numerical is not in the expectation engine; use method='qmc'")
            for s, c in self.sources[arg].items():
                self._check_plain(arg, c)
                eps = arg_errors.get(s, 0.0)
                acc[s] = acc.get(s, 0.0) + abs(coef) * eps + e * (abs(c) + eps)
        if acc:
            self.source_errors[out] = acc

    # ---- the LimitContext of the rules (valid while the walk is at a line: earlier lines only)
    def uses(self, matrix: Matrix) -> list[MatMulLine]:
        """The MatMul lines of ``matrix`` seen so far, in program order."""
        return self._uses.get(matrix, [])

    def derivative(self, vector: Vector, source: Vector, scale: float = 1.0) -> tuple[float | Vector, float]:
        """``scale · E[∂Z^vector / ∂Ẑ^source]`` and a bound on its error: a coefficient of ``sources``
        for a G-vector (with its error from earlier corrections); for an H-vector
        ``h = φ(g¹, …, gᵏ)``, ``Σᵢ E[∂ᵢφ(Z)] · ∂Z^{gⁱ}/∂Ẑ^source`` (the symbolic derivative of the
        NonLin expression): at the one symbolic point of a program that reads no data a number,
        integrated here by the Gaussian engine (its error the engine's plus the coefficients' times
        ``|E[∂ᵢφ]|``); in a program that reads data a different number at every input, so a scalar
        of the limit, :meth:`_derivative_scalar`."""
        if vector in self.sources:
            coefficient = self.sources[vector].get(source, 0.0)
            error = scale * self.source_errors.get(vector, {}).get(source, 0.0)
            if isinstance(coefficient, pointcoef.PointCoefficient):  # NetsorK scalars (LayerNorm's 1/σ)
                if error:
                    raise UnsupportedError(
                        f"the Netsor⊤ correction through {vector.name}, whose coefficients are NetsorK scalars "
                        "with numerical errors of earlier corrections, is not in the expectation engine; the "
                        "simulation takes it: method='qmc', rtol=1e-3")
                expr = linear(0.0, [(scale, _coefficient_expr(coefficient))])
                return self._derived_scalar((vector, source, scale), FunctionForm(expr)), 0.0
            return scale * coefficient, error
        if vector in self.steps:
            return 0.0, 0.0
        line = self.program.line_of(vector)
        assert isinstance(line, NonLinLine)
        # a scalar is deterministic in the limit: no derivative flows through it
        terms = [g for g in line.expr.args if g.kind != "scalar" and source in self.sources[g]]
        if not terms:
            return 0.0, 0.0
        if self.program.reads_data or any(isinstance(self.sources[g][source], pointcoef.PointCoefficient)
                                          for g in terms):
            return self._derivative_scalar(line, terms, source, scale), 0.0
        value, err = 0.0, 0.0
        for g in terms:
            c = self.sources[g][source]
            e = self.source_errors.get(g, {}).get(source, 0.0)
            v, ev = self._point_expectation(differentiate(line.expr, g))
            value += c * v
            err += abs(c) * ev + e * (abs(v) + ev)
        self.derivative_error = max(self.derivative_error, err)
        return scale * value, scale * err

    def _derivative_scalar(self, line: NonLinLine, terms: list[Vector], source: Vector, scale: float
                           ) -> float | Vector:
        """``scale · Σᵢ cᵢ E[∂ᵢφ(Z)]`` per input (``cᵢ`` the coefficient of ``Ẑ^source`` in ``gⁱ``, a number
        or NetsorK scalars) as a NetsorK moment of the limit that is not a line of the program
        (:meth:`_derived_scalar`), entering ``Ż`` as a per-input coefficient
        (:mod:`netsor.interpret.pointcoef`)."""
        parts = []
        for g in terms:
            c = self.sources[g][source]
            if self.source_errors.get(g, {}).get(source, 0.0):
                raise UnsupportedError(
                    f"the Netsor⊤ correction through {line.out.name}, where {g.name}'s own correction is "
                    "numerical and its derivative differs at every input, is not in the expectation engine; "
                    "the simulation takes it: method='qmc', rtol=1e-3")
            parts.append((scale, product([_coefficient_expr(c), differentiate(line.expr, g)])))
        return self._derived_scalar((line.out, source, scale), MomentForm(linear(0.0, parts)))

    def _derived_scalar(self, request: tuple[Vector, Vector, float], form: MomentForm | FunctionForm
                        ) -> float | Vector:
        """A scalar of the limit that is not a line of the program — the per-input coefficient
        ``request = (vector, source, scale)`` of a Netsor⊤ correction — registered with the
        program's own (``scalars``, ``moment_terms``) and computed per input with its error bound
        by the same rule (:class:`ScalarLimit`); a number where the expression is constant (0: the
        derivative of a step). Its index is negative: it orders before the program's scalars and
        names no line."""
        if request in self.derived_scalars:
            return self.derived_scalars[request]
        vector, source, _ = request
        if isinstance(form.expr, Const):
            self.derived_scalars[request] = form.expr.value
            return form.expr.value
        name = f"E[∂{vector.name}/∂Ẑ^{source.name}]"
        theta = Vector(-1 - len(self.derived_scalars), self.program.scalar_dim, "scalar", name, self.program)
        self.derived_scalars[request] = theta
        self.scalars[theta] = form
        if isinstance(form, MomentForm):
            self.moment_terms[theta] = self._moment_terms(theta, form.expr)
        return theta

    @staticmethod
    def _check_plain(vector: Vector, coefficient: pointcoef.Coefficient) -> None:
        if isinstance(coefficient, pointcoef.PointCoefficient):
            raise UnsupportedError(f"the Netsor⊤ correction through {vector.name}, whose coefficients are "
                                   "NetsorK scalars (per input), is not in the expectation engine; the "
                                   "simulation takes it: method='qmc', rtol=1e-3")

    def _point_expectation(self, expr: Expr) -> tuple[float, float]:
        """``E[expr(Z)]`` at the one symbolic point of a program that reads no data (lines so far)."""
        poly = expand(expr)
        # NetsorK scalars are numbers at the point: each monomial is (scalar factors) · E[vector factors]
        split = [_scalar_factors(m, f"E[{expr.describe()}]") for _, m in poly.terms]
        means: list[Key | None] = [("mean", self.register(vectors).key) if vectors else None for _, vectors in split]
        scalars: list[Key] = [("sc", s) for atoms, _ in split for a in atoms for s in a.args]
        run = Run(self, diag=True, term_rtol=DERIVATIVE_RTOL, memo=CoefficientMemo(), tables=joint.TableMemo(),
                  X=np.zeros((1, 1)))
        with np.errstate(all="ignore"):
            run.run(make_plan(self, [k for k in means if k is not None] + scalars, diag=True))
        value, err = poly.const, 0.0
        for (a, _), (atoms, _), key in zip(poly.terms, split, means, strict=True):
            v, e = (1.0, 0.0) if key is None else (float(x[0]) for x in run.values[key])
            sv, se = (1.0, 0.0) if not atoms else (float(x[0]) for x in run.scalar_expression(Monomial(atoms).expr))
            value += a * sv * v
            err += abs(a) * (abs(sv) * e + se * (abs(v) + e))
        return value, err

    def poly(self, v: Vector) -> Polynomial:
        if v in self.polys:
            return self.polys[v]
        return Polynomial(0.0, ((1.0, self.monomials[Monomial((Var(v),)).key]),))

    def source_cov(self, s1: Vector, s2: Vector) -> SourceCovariance | None:
        """The covariance rule of two sources, None where they are independent: by their lines'
        rule, and also where it is ``scale · E[Z^a Z^b]`` of two structurally uncorrelated G-vectors
        (``W a`` and ``W b`` with ``a`` from the data and ``b`` a Gaussian of the program: exactly 0,
        so the two Gaussian sources are independent — kept joint, a kinked function of one times
        the other had a Hellinger-type bound that is infinite where the other is the same vector at
        every input), and where the two have opposite parities (:mod:`netsor.interpret.parity`)."""
        key = (s1, s2)
        if key not in self._source_cov:
            if self.parity[s1] * self.parity[s2] == parity.ODD:
                self._source_cov[key] = None
                return None
            l1, l2 = self.program.line_of(s1), self.program.line_of(s2)
            cov = rule_for(l1).source_covariance(l1, l2)
            if cov is not None and cov.moment is not None:
                a, b = cov.moment
                if a in self.sources and b in self.sources and not self.correlated(a, b):
                    cov = None
            self._source_cov[key] = cov
        return self._source_cov[key]

    def correlated(self, g1: Vector, g2: Vector) -> bool:
        """Structural correlation: some source of ``g1`` is correlated with some source of ``g2``."""
        key = (g1, g2)
        if key not in self._correlated:
            self._correlated[key] = any(self.source_cov(s1, s2) is not None
                                        for s1 in self.sources[g1] for s2 in self.sources[g2])
        return self._correlated[key]

    def register(self, atoms: tuple[Any, ...]) -> Monomial:
        m = Monomial(atoms)
        return self.monomials.setdefault(m.key, m)

    def components(self, k1: Key, k2: Key, same_point: bool) -> list[Component]:
        """Independent groups of the factors of the monomial pair ``(k1, k2)``."""
        key = (k1, k2, same_point)
        if key in self._components:
            return self._components[key]
        atoms = [(0, a) for a in self.monomials[k1].atoms] + [(1, a) for a in self.monomials[k2].atoms]
        out = []
        for items in self._independent_groups(atoms, lambda item: item[1].args):
            left = tuple(a for side, a in items if side == 0)
            right = tuple(a for side, a in items if side == 1)
            out.append(Component(self.register(left) if left else None, self.register(right) if right else None))
        self._components[key] = out
        return out

    def factors(self, m: Monomial) -> list[Monomial]:
        """The structurally independent groups of the atoms of ``m`` (registered): ``E m`` is the
        product of their means. A Netsor⊤ derivative or a NetsorK moment multiplies functions of
        independent G-vectors (``E[f(g, b)·v]`` with ``v`` independent: 0, where one joint rule of
        rank 3 took ~1 s to find 1e-20)."""
        if m.key not in self._factors:
            self._factors[m.key] = [self.register(tuple(group))
                                    for group in self._independent_groups(list(m.atoms), lambda a: a.args)]
        return self._factors[m.key]

    def _independent_groups(self, items: list[Any], args: Callable[[Any], tuple[Vector, ...]]) -> list[list[Any]]:
        """``items`` split into the connected groups of structural correlation of their arguments."""
        label = connected_groups(len(items), lambda i, j: any(
            self.correlated(u, v) for u in args(items[i]) for v in args(items[j])))
        groups: dict[int, list[Any]] = {}
        for i, item in enumerate(items):
            groups.setdefault(label[i], []).append(item)
        return list(groups.values())

    def projection(self, m: Monomial) -> Projection | None:
        """``m`` as a function of one linear form of G-vectors, when it is one: a function of a
        single G-vector, one activation of an affine combination (``relu(a − b)``, the traced
        ``max(a, b) = b + relu(a − b)``), or activations of one form up to offsets (``clip(a − b)``,
        kept whole by :func:`~netsor.ir.expr.expand`); None otherwise."""
        key = ("proj", m.key)
        if key not in self._functions:
            self._functions[key] = _function_of_one_form(m)
        return self._functions[key]

    def source_form(self, proj: Projection) -> tuple[dict[Vector, pointcoef.Coefficient], float]:
        """The form of ``proj`` over sources, ``Σ_s k_s Z^s`` (``k_s`` per-input coefficients where NetsorK
        scalars enter: LayerNorm's ``θ·g``), and a bound on the error of its numbers."""
        acc: dict[Vector, pointcoef.Coefficient] = {}
        err = 0.0
        for v, c in zip(proj.args, proj.coefs, strict=True):
            for source, k in self.sources[v].items():
                acc[source] = pointcoef.add(acc.get(source, 0.0), pointcoef.scale(float(c), k))
                err += abs(float(c)) * self.source_errors.get(v, {}).get(source, 0.0)
        return {source: k for source, k in acc.items() if not pointcoef.is_zero(k)}, err

    def factor_times_form(self, m: Monomial) -> FactorTimesForm | None:
        """``m`` as ``g · f(w)`` over its arguments (:mod:`netsor.gaussian.conditioned`): one atom a
        G-vector ``g``, the others a function of one linear form ``w`` (or ``m`` a function of one
        form alone, no factor); None otherwise."""
        key = ("factor", m.key)
        if key not in self._functions:
            self._functions[key] = _factor_times_form(m, self.projection(m))
        return self._functions[key]

    def factor_term(self, m: Monomial) -> FactorTimesForm | None:
        """:meth:`factor_times_form` of ``m`` when it has a factor and is not piecewise linear (whose cone
        moments are exact): its mean and moments are then taken by conditioning on its form."""
        ftf = self.factor_times_form(m)
        return ftf if ftf is not None and ftf.factor is not None and self.joint(m).cone is None else None

    def conditioned(self, comp: Component) -> tuple[FactorTimesForm, FactorTimesForm] | None:
        """Both sides of ``comp`` as :meth:`factor_times_form`, at least one with a factor, when their
        expectations are taken by conditioning on the forms (:mod:`netsor.gaussian.conditioned`); None
        for other terms, and for piecewise-linear ones, whose cone moments are exact."""
        if comp.left is None or comp.right is None:
            return None
        fl, fr = self.factor_times_form(comp.left), self.factor_times_form(comp.right)
        if fl is None or fr is None or (fl.factor is None and fr.factor is None):
            return None
        if self.joint(comp.left).cone is not None and self.joint(comp.right).cone is not None:
            return None
        return fl, fr

    def distance_rule(self, v: Vector) -> tuple[Any, ...] | None:
        """How :class:`Distance` carries ``E[(Z^v(x) − Z^v(x'))²]`` of ``v`` between two points:
        ``("sum", ((w, h), …), common)`` for a G-vector whose varying sources are uncorrelated MatMuls ``W h``
        (``w`` = coefficient² · σ²; sources that are the same vector at every input — biases, Gaussians of
        the program — drop out; ``common``: there are such); ``("act", rule, g, c)`` for a NonLin ``c + Σ α act(k · g)``
        whose activations' distance kernels combine into one ``rule`` of ``g`` (:meth:`_function_distance`; ``c``
        None where biases are added besides);
        ``("kinked", slopes, g, φ(0))`` for a continuous piecewise-linear function of ``g`` (:meth:`_kinked_distance`);
        ``("data", step)``
        for an input; ``("norm", λ², u)`` for a normalised G-vector ``λ · u · θ`` (:meth:`normalization`: a
        LayerNorm or RMS norm), whose distance is ``λ² · 4 sin²(θᵤ/2)`` in the angle of ``u``; None where it is
        ``a + b − 2c`` of the covariances (other point coefficients, Netsor⊤ corrections with numerical errors,
        correlated sources, other functions)."""
        key = ("distance", v)
        if key not in self._functions:
            self._functions[key] = self._distance_rule(v)
        return self._functions[key]

    def _distance_rule(self, v: Vector) -> tuple[Any, ...] | None:
        if v in self.steps:
            return ("data", self.steps[v])
        if v in self.sources:
            items = list(self.sources[v].items())
            if (found := self.normalization(v)) is not None:
                return ("norm", *found)
            if v in self.source_errors or any(isinstance(c, pointcoef.PointCoefficient) for _, c in items):
                return None
            terms, common = [], False
            for i, (s, c) in enumerate(items):
                cov = self.source_cov(s, s)
                if cov is None or any(self.source_cov(s, t) is not None for t, _ in items[i + 1:]):
                    return None
                if cov.moment is None:  # the same vector at every input
                    common = common or (float(c) != 0.0 and cov.scale != 0.0)
                    continue
                h, h2 = cov.moment
                if h is not h2:
                    return None
                terms.append((float(c) * float(c) * cov.scale, h))
            return ("sum", tuple(terms), common)
        poly = self.polys.get(v)
        if poly is None or isinstance(poly.const, pointcoef.PointCoefficient):
            return None
        return self._function_distance(poly) or self._kinked_distance(poly)

    def _kinked_distance(self, poly: Polynomial) -> tuple[Any, ...] | None:
        """``("kinked", slopes, g)`` when ``poly`` is ``c + Σ α φ(k · g)`` of one G-vector ``g`` with every ``φ``
        continuous and piecewise linear (kinks anywhere: hard_tanh, relu6, ``max(x, 0.7)``; ``slopes`` the
        derivative of the sum as a function of ``g``, :class:`~netsor.gaussian.near_parallel.Steps`): its distance
        at nearly parallel points is :func:`~netsor.gaussian.near_parallel.kinked_distance`."""
        total: near_parallel.Steps | None = None
        args = set()
        at_zero = float(poly.const or 0.0)
        for alpha, m in poly.terms:
            proj = self.projection(m)
            if isinstance(alpha, pointcoef.PointCoefficient) or proj is None or len(proj.args) != 1:
                return None
            k = float(proj.coefs[0])
            slopes = _slopes_of(proj.act)
            if slopes is None or k == 0.0:
                return None
            args.add(proj.args[0])
            term = slopes.scaled(k).times(float(alpha) * k)
            total = term if total is None else total.plus(term)
            if proj.act.key != identity.key:
                at_zero += float(alpha) * near_parallel.value_at_zero(piecewise.of(proj.act))
        if len(args) != 1 or total is None or not total.thresholds:
            return None
        (g,) = args
        return ("kinked", total, g, at_zero) if g in self.sources else None

    def _function_distance(self, poly: Polynomial) -> tuple[Any, ...] | None:
        """``("act", rule, g, c)`` when ``poly`` is ``c + Σ α φ(k · w)`` of one form ``w`` (a G-vector ``g`` up to a
        factor), every ``φ`` with a distance kernel that combine into one rule of ``g``
        (:func:`~netsor.activations.distance_kernels.combination`): ``relu(w) + 0.01 w`` is one piecewise-linear
        function of ``w``. The linear terms may differ from a multiple of ``w`` by sources that are the same vector
        at every input (biases: they drop out of a distance), ``c`` is any constant."""
        one = self._one_vector_distance(poly)
        if one is not None:
            return one
        linear: dict[Vector, float] = {}
        kinked: list[tuple[float, dict[Vector, float], Any]] = []
        for alpha, m in poly.terms:
            proj = self.projection(m)
            if isinstance(alpha, pointcoef.PointCoefficient) or proj is None or proj.act.distance_kernel is None:
                return None
            form, err = self.source_form(proj)
            if err or any(isinstance(k, pointcoef.PointCoefficient) for k in form.values()):
                return None
            if proj.act.key == identity.key:
                for source, k in form.items():
                    linear[source] = linear.get(source, 0.0) + float(alpha) * float(k)
            else:
                numbers = {source: float(k) for source, k in form.items()}
                kinked.append((float(alpha), numbers, proj.act.distance_kernel))
        if not kinked:
            return None
        found = self._vector_of_form(kinked[0][1])
        if found is None:
            return None
        g, scale = found  # the first form is scale · g
        ref = {source: scale * float(k) for source, k in self.sources[g].items()}
        varying = {source for source in {*linear, *ref} if (cov := self.source_cov(source, source)) is None
                   or cov.moment is not None}
        if not varying & ref.keys():  # w is the same vector at every input
            return None
        pivot = max(varying & ref.keys(), key=lambda source: (abs(ref[source]), -source.index))
        parts = []
        for alpha, form, rule in kinked:
            k = _ratio(form, ref, pivot)
            if k is None:
                return None
            parts.append((alpha, k * scale, rule))
        # the linear part is slope · w up to sources that are the same vector at every input
        slope = linear.get(pivot, 0.0) / ref[pivot]
        if any(abs(linear.get(s, 0.0) - slope * ref.get(s, 0.0)) > _PROPORTIONAL * abs(linear.get(s, 0.0))
               for s in varying):
            return None
        # the constant the function has beside its rule of g, where nothing else is added (a bias in the linear part
        # drops out of a distance, not out of a sum: SumDistance)
        exact = all(linear.get(s, 0.0) == slope * ref.get(s, 0.0) for s in {*linear, *ref} - varying)
        const = float(poly.const) if exact else None
        rule = distance_kernels.combination([*parts, (slope * scale, 1.0, identity.distance_kernel)], const)
        return None if rule is None else ("act", rule, g, const)

    def _only_product(self, g: Vector) -> Vector | None:
        """``h`` when the G-vector ``g`` is a multiple of one MatMul ``W h`` alone (no bias, no other source)."""
        items = list(self.sources.get(g, {}).items())
        if len(items) != 1 or g in self.source_errors or isinstance(items[0][1], pointcoef.PointCoefficient):
            return None
        cov = self.source_cov(items[0][0], items[0][0])
        if cov is None or cov.moment is None or cov.moment[0] is not cov.moment[1]:
            return None
        return cov.moment[0]

    def data_direction(self, g: Vector) -> Vector | None:
        """The input ``x`` when the G-vector ``g`` is a multiple of ``U x`` alone (no bias, one input): its angle
        between two points is then the inputs' angle (:func:`data_angle`)."""
        h = self._only_product(g)
        return h if h is not None and h in self.steps else None

    def angle_through(self, g: Vector) -> tuple[distance_kernels.PiecewiseLinearDistance, Vector] | None:
        """``(rule, g')`` when the G-vector ``g`` is a multiple of ``W h`` alone (no bias) and ``h = φ(g')`` is
        piecewise linear with its kink at 0 (its distance rule ``rule``): the angle of ``g`` between two points
        is then a function of the angle of ``g'``
        (:func:`~netsor.activations.distance_kernels.piecewise_linear_angle`)."""
        h = self._only_product(g)
        rule = None if h is None else self.distance_rule(h)
        if rule is None or rule[0] != "act" or not isinstance(rule[1], distance_kernels.PiecewiseLinearDistance):
            return None
        return rule[1], rule[2]

    def _one_vector_distance(self, poly: Polynomial) -> tuple[Any, ...] | None:
        """``("act", rule, g, c)`` when every term of ``poly`` is ``α φ(k · g)`` of one G-vector ``g`` itself (not
        only of its form over sources: a LayerNorm's output, whose sources carry per-input coefficients)."""
        parts, args = [], set()
        for alpha, m in poly.terms:
            proj = self.projection(m)
            if (isinstance(alpha, pointcoef.PointCoefficient) or proj is None or len(proj.args) != 1
                    or proj.act.distance_kernel is None):
                return None
            args.add(proj.args[0])
            parts.append((float(alpha), float(proj.coefs[0]), proj.act.distance_kernel))
        if len(args) != 1:
            return None
        (g,) = args
        rule = distance_kernels.combination(parts, float(poly.const))
        return None if rule is None or g not in self.sources else ("act", rule, g, float(poly.const))

    def _vector_of_form(self, form: dict[Vector, float]) -> tuple[Vector, float] | None:
        """A G-vector ``g`` of the program and ``scale`` with ``form = scale · (g's form over sources)``, or None."""
        if "forms" not in self._functions:
            index: dict[Any, tuple[Vector, float]] = {}
            for g, sources in self.sources.items():
                if g in self.source_errors or any(isinstance(k, pointcoef.PointCoefficient) for k in sources.values()):
                    continue
                key, pivot = _form_key(sources)
                if key is not None:
                    index.setdefault(key, (g, pivot))
            self._functions["forms"] = index
        key, pivot = _form_key(form)
        hit = self._functions["forms"].get(key)
        return None if hit is None else (hit[0], pivot / hit[1])

    def angle_pair(self, comp: Component) -> Vector | None:
        """The G-vector ``g`` of :meth:`step_like_pair` or :meth:`near_parallel_pair` when there is one: the pair is
        then a function of the angle of ``g`` at the two points with a bounded slope (:meth:`Run.angle_pair`,
        :meth:`Run.near_parallel_pair`), which the engine takes from ``g``'s distance (:class:`Distance`)."""
        step_like = self.step_like_pair(comp)
        if step_like is not None:
            return step_like[0]
        near = self.near_parallel_pair(comp)
        return None if near is None else near[1]

    def near_parallel_pair(self, comp: Component) -> tuple[Any, ...] | None:
        """How a pair of functions of one G-vector ``g`` with kinks or jumps off the origin is taken from the angle
        of ``g`` at nearly parallel points (:mod:`netsor.gaussian.near_parallel`), when :meth:`step_like_pair` does
        not take it: ``("steps", g, F, G)`` for piecewise-constant functions of the two forms (the derivatives of
        hard_tanh, relu6, ``max(x, 0.7)`` in an NTK's backward pass; ``G`` as a function of the left form's sign);
        ``("kinked", g, slopes, pieces)`` for one continuous piecewise-linear function of one form on both sides
        (``slopes`` its derivative, ``pieces`` of :mod:`~netsor.gaussian.piecewise`). None otherwise."""
        if comp.left is None or comp.right is None:
            return None
        key = ("near-parallel", comp.left.key, comp.right.key)
        if key not in self._functions:
            self._functions[key] = self._near_parallel_pair(comp)
        return self._functions[key]

    def _near_parallel_pair(self, comp: Component) -> tuple[Any, ...] | None:
        pl, pr = self.projection(comp.left), self.projection(comp.right)
        if (pl is None or pr is None or len(pl.args) != 1 or pl.args != pr.args or pl.args[0] not in self.sources
                or self.step_like_pair(comp) is not None):
            return None
        g, k, k2 = pl.args[0], float(pl.coefs[0]), float(pr.coefs[0])
        if k == 0.0 or k2 == 0.0:
            return None
        F, G = _steps_of(pl.act), _steps_of(pr.act)
        if F is not None and G is not None and F.thresholds and G.thresholds:
            return "steps", g, F, G if k * k2 > 0 else G.scaled(-1.0)
        if k != k2 or pl.act.key != pr.act.key:
            return None
        slopes = _slopes_of(pl.act)
        if slopes is not None:
            return ("kinked", g, slopes, piecewise.of(pl.act)) if slopes.thresholds else None
        split = _jumps_and_slopes_of(pl.act)
        return None if split is None else ("jumped", g, *split, piecewise.of(pl.act))

    def step_like_pair(self, comp: Component) -> tuple[Vector | None, tuple[float, float], tuple[float, float]] | None:
        """``(g, left levels, right levels)`` when both sides of ``comp`` are functions of degree 0 with known
        levels (step, sign, ``2·step(w) − step(−w) + c``: their jump rule's) of forms proportional to each other,
        exactly (``step(g + b)·step(−g − b)``): each side's levels are its values where the *left* form is
        positive and negative, and ``g`` is a G-vector of the program whose form that is up to a factor (None if
        none is), whose angle is the forms' angle between two points."""
        if comp.left is None or comp.right is None:
            return None
        key = ("step-like", comp.left.key, comp.right.key)
        if key not in self._functions:
            self._functions[key] = self._step_like_pair(self.projection(comp.left), self.projection(comp.right))
        return self._functions[key]

    def _step_like_pair(self, pl: Projection | None, pr: Projection | None
                        ) -> tuple[Vector | None, tuple[float, float], tuple[float, float]] | None:
        if pl is None or pr is None:
            return None
        levels = [proj.act.distance_kernel.levels if isinstance(proj.act.distance_kernel, distance_kernels.JumpDistance)
                  else None for proj in (pl, pr)]
        if None in levels:
            return None
        left, right = levels
        if len(pl.args) == 1 and pl.args == pr.args and pl.args[0] in self.sources:  # k·g, k'·g (g: a LayerNorm's too)
            k, k2 = float(pl.coefs[0]), float(pr.coefs[0])
            return (pl.args[0], left, right if k * k2 > 0 else right[::-1]) if k * k2 != 0 else None
        (fl, el), (fr, er) = self.source_form(pl), self.source_form(pr)
        if el or er or not fl or fl.keys() != fr.keys() or any(
                isinstance(k, pointcoef.PointCoefficient) for k in (*fl.values(), *fr.values())):
            return None
        pivot = next(iter(fl))
        if any(float(fr[s]) * float(fl[pivot]) != float(fl[s]) * float(fr[pivot]) for s in fl):
            return None  # not exactly proportional
        if float(fr[pivot]) * float(fl[pivot]) < 0:  # ψ(λw), λ < 0: its value where w > 0 is ψ's below 0
            right = right[::-1]
        found = self._vector_of_form({s: float(k) for s, k in fl.items()})
        return (None if found is None else found[0]), left, right

    @functools.cached_property
    def has_angle_pairs(self) -> bool:
        """Some monomial is a function of degree 0 with known levels (step, sign) of a form of the program's
        G-vectors, or :attr:`has_near_parallel_pairs`: the program may have angle pairs (:meth:`angle_pair`)."""
        return self.has_near_parallel_pairs or any(
            (proj := self.projection(m)) is not None and isinstance(
                rule := proj.act.distance_kernel, distance_kernels.JumpDistance) and rule.levels is not None
            for m in list(self.monomials.values()))

    @functools.cached_property
    def has_near_parallel_pairs(self) -> bool:
        """Some monomial is a piecewise-constant or continuous piecewise-linear function of one G-vector with kinks
        or jumps off the origin (:meth:`near_parallel_pair`): at nearly parallel points only the angle's rules
        bound its pairs, and without them the covariance route's corners (nested quadrature) are slow."""
        return any((proj := self.projection(m)) is not None and len(proj.args) == 1 and any(
            found is not None and any(t != 0.0 for t in found.thresholds)
            for found in (_steps_of(proj.act), _slopes_of(proj.act), *(_jumps_and_slopes_of(proj.act) or ())))
            for m in list(self.monomials.values()))

    def batchnorm(self, m: Monomial) -> BatchNormForm | None:
        """``m`` as ``act(u_b)`` of a BatchNorm output over distinct G-vectors with a positively
        homogeneous ``act`` (identity included), when it is one; None otherwise."""
        key = ("bn", m.key)
        if key not in self._functions:
            self._functions[key] = _batchnorm_form(m)
        return self._functions[key]

    def batchnorm_pair(self, comp: Component) -> tuple[BatchNormForm, BatchNormForm] | None:
        """Both sides of ``comp`` as BatchNorm forms of one batch whose pair expectation has a closed
        form (or Stein's identity), else None (the multi-dimensional engine takes it)."""
        if comp.left is None or comp.right is None:
            return None
        fl, fr = self.batchnorm(comp.left), self.batchnorm(comp.right)
        if fl is None or fr is None or fl.args != fr.args or not is_elementary(fl.act, fr.act):
            return None
        return fl, fr

    def joint(self, m: Monomial) -> joint.JointFunction:
        key = ("joint", m.key)
        if key not in self._functions:
            self._functions[key] = joint_function(m.expr, m.args)
        return self._functions[key]


def _ratio_with_bound(k: Array, e: Array, k_ref: Array, e_ref: Array) -> tuple[Array, Array]:
    """``k / k_ref`` and a bound on its error, from bounds ``e``, ``e_ref`` of the two (``|k_ref| > e_ref``)."""
    ratio = k / k_ref
    return ratio, (e + np.abs(ratio) * e_ref) / (np.abs(k_ref) - e_ref) + 2 * _EPS * np.abs(ratio)


def _contains(e: Expr, kind: type) -> bool:
    return isinstance(e, kind) or any(_contains(c, kind) for c in e.children())


def _coefficient_expr(c: pointcoef.Coefficient) -> Expr:
    """A source coefficient as an expression over the program's scalars (a number: a constant)."""
    if not isinstance(c, pointcoef.PointCoefficient):
        return constant(float(c))
    return linear(0.0, [(w, product([Var(s) for s in scalars])) for w, scalars in c.terms])


def _scalar_factors(m: Monomial, what: str) -> tuple[tuple[Expr, ...], tuple[Expr, ...]]:
    """The atoms of ``m`` that are functions of scalars only, and the others (functions of vectors);
    a scalar inside a function of vectors is refused (its limit is not a per-input coefficient)."""
    scalar = tuple(a for a in m.atoms if a.args and all(v.kind == "scalar" for v in a.args))
    rest = tuple(a for a in m.atoms if a not in scalar)
    if any(v.kind == "scalar" for a in rest for v in a.args):
        raise UnsupportedError(
            f"{what}: a scalar inside a nonlinearity ({' · '.join(a.describe() for a in rest)}); the "
            "infinite-width limit takes scalars (NetsorK) as factors and coefficients of vectors (θ * relu(g), "
            "LayerNorm of G-vectors, attention), not inside activations yet — normalise pre-activations instead, "
            "or simulate the limit: netsor.limit(..., method='qmc', rtol=1e-3)")
    return scalar, rest


def _normalizer_of(scalars: dict[Vector, Any], theta: Vector) -> Vector | None:
    """``u`` when the scalar ``theta`` is ``1/√σ`` with ``σ = E[u u]`` or ``E[u u] − E[u]²`` of one vector ``u``."""
    expr = scalars.get(theta)
    expr = expr.expr if isinstance(expr, FunctionForm) else None
    reciprocal, sqrt = from_ufunc(np.reciprocal), from_ufunc(np.sqrt)  # (not a user's function of that name)
    if not (isinstance(expr, Apply) and expr.act is reciprocal and isinstance(expr.child, Apply)
            and expr.child.act is sqrt and isinstance(expr.child.child, Var)):
        return None
    sigma = scalars.get(expr.child.child.vector)
    if isinstance(sigma, MomentForm):
        return _square_of(sigma.expr)  # E[u u]
    terms = sigma.expr.terms if isinstance(sigma, FunctionForm) and isinstance(sigma.expr, Sum) else ()
    if [c for c, _ in terms] != [1.0, -1.0] or sigma.expr.const != 0.0 or not all(isinstance(t, Var) for _, t in terms):
        return None
    second, squared = (scalars.get(t.vector) for _, t in terms)  # E[u u] − m·m with m = E[u]
    u = _square_of(second.expr) if isinstance(second, MomentForm) else None
    m = _square_of(squared.expr) if isinstance(squared, FunctionForm) else None
    mean = None if m is None else scalars.get(m)
    ok = u is not None and isinstance(mean, MomentForm) and isinstance(mean.expr, Var) and mean.expr.vector == u
    return u if ok else None


def _square_of(expr: Expr) -> Vector | None:
    """``v`` when ``expr`` is the product ``v · v`` of one variable."""
    if isinstance(expr, Prod) and len(expr.factors) == 2 and all(isinstance(f, Var) for f in expr.factors) \
            and expr.factors[0].vector == expr.factors[1].vector:
        return expr.factors[0].vector
    return None


def _common_scale(unscaled: dict[Vector, pointcoef.Coefficient], coefs: dict[Vector, pointcoef.Coefficient]
                  ) -> float | None:
    """``λ`` with ``coefs = λ · unscaled`` term by term (the same scalars in each term, every weight ``λ`` times its
    own, exactly), else None."""
    scale = None
    for s, c in coefs.items():
        mine, theirs = dict((ss, w) for w, ss in pointcoef.terms_of(unscaled[s])), pointcoef.terms_of(c)
        if len(mine) != len(theirs):
            return None
        for w, ss in theirs:
            if ss not in mine or mine[ss] == 0.0:
                return None
            scale = w / mine[ss] if scale is None else scale
            if w != scale * mine[ss]:
                return None
    return scale


#: Two forms are taken as proportional when each coefficient is within this share of the multiple of the other's
#: (the rounding of a product of coefficients: ``relu(2·g)`` expanded over ``g``'s sources).
_PROPORTIONAL = 8 * _EPS


def _form_key(form: dict[Vector, Any]) -> tuple[Any, float]:
    """A hashable key of the direction of ``form`` (its coefficients over the first source's, in source order) and
    that first coefficient; ``(None, 0.0)`` for an empty form."""
    order = sorted(form, key=lambda source: source.index)
    if not order or float(form[order[0]]) == 0.0:
        return None, 0.0
    pivot = float(form[order[0]])
    return tuple((source.index, float(form[source]) / pivot) for source in order), pivot


def _steps_of(act: Activation) -> near_parallel.Steps | None:
    """``act`` as a piecewise-constant function (step, ``1{|x| < 1}``), from its pieces; None otherwise."""
    pieces = piecewise.of(act)
    return None if pieces is None else near_parallel.Steps.of(pieces)


def _jumps_and_slopes_of(act: Activation) -> tuple[near_parallel.Steps, near_parallel.Steps] | None:
    """``(φ' a.e., φ's jumps)`` of a piecewise-linear ``act`` that jumps and is not piecewise constant (x·1{x > ½},
    hard shrink; :meth:`~netsor.gaussian.near_parallel.Steps.split`); None for other functions."""
    pieces = piecewise.of(act)
    split = None if pieces is None or act.continuous else near_parallel.Steps.split(pieces)
    if split is None or not split[1].thresholds or not (split[0].base or split[0].jumps):
        return None
    return split


def _slopes_of(act: Activation) -> near_parallel.Steps | None:
    """The derivative of a continuous piecewise-linear ``act`` (identity, relu, hard_tanh, a traced clip) as a
    :class:`~netsor.gaussian.near_parallel.Steps`; None for other functions."""
    if act.key == identity.key:
        return near_parallel.Steps(1.0, (), ())
    pieces = piecewise.of(act)
    return None if pieces is None or not act.continuous else near_parallel.Steps.of(pieces, derivative=True)


def _ratio(form: dict[Vector, float], ref: dict[Vector, float], pivot: Vector) -> float | None:
    """``k`` with ``form = k · ref`` (within :data:`_PROPORTIONAL`), else None."""
    if form.keys() != ref.keys():
        return None
    k = form[pivot] / ref[pivot]
    return k if all(abs(form[s] - k * ref[s]) <= _PROPORTIONAL * abs(form[s]) for s in form) else None


def _with_scalar_coefficients(out: Vector, poly: Polynomial) -> Polynomial:
    """A NonLin's polynomial with its factors that are scalars (NetsorK: ``θ · relu(g)``) moved into
    per-input coefficients (:mod:`netsor.interpret.pointcoef`); plain polynomials are unchanged."""
    if not any(v.kind == "scalar" for _, m in poly.terms for v in m.args):
        return poly
    const: pointcoef.Coefficient = poly.const
    merged: dict[Key, tuple[pointcoef.Coefficient, Monomial]] = {}
    for coef, m in poly.terms:
        scalars, rest = _scalar_factors(m, out.name)
        if not all(isinstance(a, Var) for a in scalars):
            raise UnsupportedError(f"{out.name}: a function of scalars inside a vector's expression; make it a "
                                   "scalar of its own first (e.g. s = netsor.exp(theta)), then multiply by it")
        c: pointcoef.Coefficient = float(coef)
        for theta in scalars:
            c = pointcoef.scale(theta.vector, c)
        if not rest:
            const = pointcoef.add(const, c)
            continue
        vector_part = Monomial(rest)
        previous = merged.get(vector_part.key, (0.0, vector_part))[0]
        merged[vector_part.key] = (pointcoef.add(previous, c), vector_part)
    return Polynomial(const, tuple((c, m) for c, m in merged.values() if not pointcoef.is_zero(c)))  # type: ignore[arg-type]


@dataclass(frozen=True)
class MomentTerm:
    """One term ``coef · scalars · E[vector part]`` of a moment's limit; ``kind`` is ``"one"``
    (no vector part), ``"cov"`` (two G-vectors: ``key`` their covariance) or ``"mean"``."""

    coef: float
    scalars: Any  # an expression over scalars, or None
    kind: str
    key: Key | None


def _batchnorm_form(m: Monomial) -> BatchNormForm | None:
    if len(m.atoms) != 1:
        return None
    atom, act = m.atoms[0], identity
    if isinstance(atom, Apply):
        atom, act = atom.child, atom.act
    # a negative degree (1/u) has no Laplace representation, and its moments are infinite
    if not isinstance(atom, BatchNormalized) or act.homogeneous is None or act.homogeneous < 0:
        return None
    if not all(isinstance(e, Var) and e.vector.kind == "G" for e in atom.operands) or len(m.args) != len(atom.operands):
        return None
    return BatchNormForm(m.args, atom.index, act)


def _projection(m: Monomial) -> Projection | None:
    if len(m.args) == 1:
        return Projection(m.args, np.ones(1), activation_of(m.expr, m.args[0]))
    if len(m.atoms) != 1 or not isinstance(m.atoms[0], Apply):
        return None
    form = m.atoms[0].child.affine()
    if form is None:
        return None
    terms, offset = form
    act = m.atoms[0].act
    if offset != 0.0:
        act = shifted(act, offset)
    return Projection(tuple(v for v, _ in terms), np.array([c for _, c in terms]), act)


def _function_of_one_form(m: Monomial) -> Projection | None:
    """:func:`_projection`, or ``m`` as one function of the single linear form that all its arguments enter
    through (``√|a + b/2|``, ``relu(a + b/2)·tanh(a + b/2 + 1)``: nested or several activations of one form,
    up to constant offsets), with the form written as one G-vector; None otherwise."""
    proj = _projection(m)
    if proj is not None or not m.args:
        return proj
    forms = m.expr.input_forms()
    if len({terms for terms, _ in forms}) != 1:
        return None
    terms = forms[0][0]
    v, cv = terms[0]
    repl: dict[Vector, Expr] = {u: Const(0.0) for u, _ in terms[1:]}
    repl[v] = linear(0.0, [(1.0 / cv, Var(v))])  # the form becomes v itself (its offsets stay)
    over_v = substituted(m.expr, repl)
    if over_v is None:
        return None
    return Projection(tuple(u for u, _ in terms), np.array([c for _, c in terms]), activation_of(over_v, v))


def _factor_times_form(m: Monomial, whole: Projection | None) -> FactorTimesForm | None:
    if whole is not None:
        return FactorTimesForm(None, _embed(whole, m.args), whole.act)
    bare = [k for k, atom in enumerate(m.atoms) if isinstance(atom, Var)]
    if len(bare) != 1 or len(m.atoms) < 2:
        return None
    rest = _function_of_one_form(Monomial(tuple(atom for k, atom in enumerate(m.atoms) if k != bare[0])))
    if rest is None:
        return None
    return FactorTimesForm(m.args.index(m.atoms[bare[0]].vector), _embed(rest, m.args), rest.act)


def _over(F: FactorTimesForm, args: tuple[Vector, ...], union: tuple[Vector, ...]) -> FactorTimesForm:
    """``F`` over ``args`` written over the longer argument list ``union``."""
    return FactorTimesForm(None if F.factor is None else union.index(args[F.factor]),
                           _embedded(args, F.form, union), F.act)


def analysis_of(program: Program) -> Analysis:
    """The analysis of a program: held by the program (it lives as long as the program and is
    redone when lines are added), its quantities keyed by content."""
    return program.derived("infinite-width analysis", Analysis)


# ------------------------------------------------------------------ quantities
# Keys: ("g", g1, g2) covariance of G-vectors; ("s", s1, s2) of sources; ("m", u, v) second
# moment of any vectors; ("d", t1, t2) data inner products; ("t", k1, k2) expectation of a
# monomial pair; tiles only: ("D", v) distance of a vector between the two points, ("A", g) angle of a
# G-vector (plans with distances, :func:`walk`); per point only: ("mean", k) of a monomial, ("pm", k)
# moments for error bounds.
_SYMMETRIC = {"g", "s", "m", "d", "t"}
_NONE_PROPORTIONAL = (np.empty(0, dtype=int), np.empty(0, dtype=int), np.empty(0))


def _order(x: Any) -> tuple[int, Any]:
    if isinstance(x, Vector):
        return (0, x.index)
    if x is None:
        return (1, -1)
    if isinstance(x, int):
        return (1, x)
    return (2, repr(x))


def canonical(key: Key) -> Key:
    """The form of a per-point key (a quantity at one point is symmetric in its two arguments)."""
    if key[0] in _SYMMETRIC and _order(key[2]) < _order(key[1]):
        return (key[0], key[2], key[1])
    return key


class Quantity:
    """One kind of quantity: its dependencies and its computation on a run."""

    def deps(self, key: Key, an: Analysis, diag: bool) -> tuple[list[Key], list[Key]]:
        """(keys of the same run, per-point keys of the diagonal runs) that ``key`` needs."""
        raise NotImplementedError

    def compute(self, key: Key, run: Run) -> Value:
        raise NotImplementedError


class GaussianCovariance(Quantity):
    def deps(self, key: Key, an: Analysis, diag: bool) -> tuple[list[Key], list[Key]]:
        _, g1, g2 = key
        own: list[Key] = [("s", s1, s2) for s1 in an.sources[g1] for s2 in an.sources[g2]
                          if an.source_cov(s1, s2) is not None]
        scalars: list[Key] = [("sc", s) for s in an.coefficient_scalars(g1) + an.coefficient_scalars(g2)]
        if diag:
            return own + scalars, []
        return own, envelope_keys(key, an) + scalars

    def compute(self, key: Key, run: Run) -> Value:
        _, g1, g2 = key
        an = run.an
        if run.diag and g1 == g2 and (variance := an.normalized_variance(g1)) is not None:
            return np.full(run.shape, variance), np.full(run.shape, 4 * _EPS * variance)
        e1, e2 = an.source_errors.get(g1, {}), an.source_errors.get(g2, {})
        parts = [run.term(c1, c2, run.get(("s", s1, s2)), e1.get(s1, 0.0), e2.get(s2, 0.0))
                 for s1, c1 in an.sources[g1].items() for s2, c2 in an.sources[g2].items()
                 if an.source_cov(s1, s2) is not None]
        return linear_combination(parts, run, key)


class SourceCovarianceQuantity(Quantity):
    def deps(self, key: Key, an: Analysis, diag: bool) -> tuple[list[Key], list[Key]]:
        cov = an.source_cov(key[1], key[2])
        return ([("m", *cov.moment)] if cov is not None and cov.moment is not None else []), []

    def compute(self, key: Key, run: Run) -> Value:
        cov = run.an.source_cov(key[1], key[2])
        assert cov is not None
        if cov.moment is None:
            if run.diag:
                return np.full(run.shape, cov.scale), np.zeros(run.shape)
            root = np.sqrt(cov.scale)
            # a constant tile (a bias's variance): a read-only broadcast, no pass over the pairs
            return (np.broadcast_to(np.float64(cov.scale), run.shape),
                    bounds.zero(np.full((run.shape[0], 1), root), np.full((1, run.shape[1]), root)))
        value, err = run.get(("m", *cov.moment))
        if cov.scale == 1.0:  # exact: no pass over the pairs
            return value, err
        if run.diag:
            return cov.scale * value, cov.scale * err + _EPS * cov.scale * np.abs(value)
        root = np.sqrt(cov.scale)  # the envelope scales with the variance
        return cov.scale * value, bounds.Bound(err.eta + _EPS, root * err.left, root * err.right,
                                              None if err.dense is None else cov.scale * err.dense)


class Moment(Quantity):
    def deps(self, key: Key, an: Analysis, diag: bool) -> tuple[list[Key], list[Key]]:
        _, v1, v2 = key
        if v1 in an.steps:
            return [("d", an.steps[v1], an.steps[v2])], []
        if v1 in an.sources and v2 in an.sources:
            return [("g", v1, v2)], []
        p1, p2 = an.poly(v1), an.poly(v2)
        own = [("t", m1.key, m2.key) for _, m1 in p1.terms for _, m2 in p2.terms]
        c1, c2 = not pointcoef.is_zero(p1.const), not pointcoef.is_zero(p2.const)
        means = ([("mean", m.key) for _, m in p1.terms] if c2 else []) + (
            [("mean", m.key) for _, m in p2.terms] if c1 else [])
        scalars: list[Key] = [("sc", s) for p in (p1, p2) for c in (p.const, *(a for a, _ in p.terms))
                              if isinstance(c, pointcoef.PointCoefficient) for s in c.scalars]
        if diag:
            return own + means + scalars, []
        envelopes = ([("pm", m.key) for _, m in p1.terms] if c2 else []) + (
            [("pm", m.key) for _, m in p2.terms] if c1 else [])
        return own, means + envelopes + envelope_keys(key, an) + scalars

    def compute(self, key: Key, run: Run) -> Value:
        _, v1, v2 = key
        an = run.an
        if v1 in an.steps:
            return run.get(("d", an.steps[v1], an.steps[v2]))
        if v1 in an.sources and v2 in an.sources:
            return run.get(("g", v1, v2))
        p1, p2 = an.poly(v1), an.poly(v2)
        parts = [run.term(a1, a2, run.get(("t", m1.key, m2.key))) for a1, m1 in p1.terms for a2, m2 in p2.terms]
        c1, c2 = not pointcoef.is_zero(p1.const), not pointcoef.is_zero(p2.const)
        if c2:
            parts += [run.term(a1, p2.const, run.point_mean(m1.key, "left")) for a1, m1 in p1.terms]
        if c1:
            parts += [run.term(p1.const, a2, run.point_mean(m2.key, "right")) for a2, m2 in p2.terms]
        if c1 and c2:
            parts.append(run.term(p1.const, p2.const, run.constant()))
        return linear_combination(parts, run, key)


class DataInnerProduct(Quantity):
    def deps(self, key: Key, an: Analysis, diag: bool) -> tuple[list[Key], list[Key]]:
        return [], []

    def compute(self, key: Key, run: Run) -> Value:
        _, t1, t2 = key
        A, B = data_view(run.X_left, t1), data_view(run.X_right, t2)
        d = A.shape[-1]
        if run.diag:
            value = np.einsum("bi,bi->b", A, B) / d
            scale = np.sqrt(np.einsum("bi,bi->b", A, A) * np.einsum("bi,bi->b", B, B)) / d
            return value, (d + 2) * _EPS * scale
        left = np.linalg.norm(A, axis=1)[:, None] / np.sqrt(d)
        right = np.linalg.norm(B, axis=1)[None, :] / np.sqrt(d)
        return (A @ B.T) / d, bounds.Bound((d + 2) * _EPS, left, right)


class MonomialPair(Quantity):
    """``E[m₁(Z at the left point) m₂(Z at the right point)]``: a product over independent groups."""

    def deps(self, key: Key, an: Analysis, diag: bool) -> tuple[list[Key], list[Key]]:
        own: list[Key] = []
        side: list[Key] = []
        comps = an.components(key[1], key[2], diag)
        if _vanishes(comps):  # only the envelopes of the zero
            return [], [] if diag else [("pm", m.key) for comp in comps for m in (comp.left, comp.right) if m]
        for comp in comps:
            if comp.left is None or comp.right is None:
                only = comp.left or comp.right
                (own if diag else side).append(("mean", only.key))
                if not diag:
                    side.append(("pm", only.key))
                continue
            if diag:
                union = _union(comp.left.args, comp.right.args)
                own += _block_keys(union)
                if an.batchnorm_pair(comp) is not None:
                    continue
                if (an.projection(comp.left) is not None and an.projection(comp.right) is not None
                        or an.conditioned(comp) is not None):
                    own += [("pm", comp.left.key), ("pm", comp.right.key)]
                    # the per-input coefficients of forms proportional through scalars (Run._proportional_point)
                    own += [("sc", s) for v in union for s in an.coefficient_scalars(v)]
                else:
                    own.append(("pm", an.register(comp.left.atoms + comp.right.atoms).key))
            elif _data_free_joint(an, comp):
                side += [canonical(("t", comp.left.key, comp.right.key)), ("pm", comp.left.key),
                         ("pm", comp.right.key)]
            else:
                own += [("g", x, y) for x in comp.left.args for y in comp.right.args]
                side += [canonical(k) for k in _block_keys(comp.left.args) + _block_keys(comp.right.args)]
                side += [("pm", comp.left.key), ("pm", comp.right.key)]
        return own, side

    def compute(self, key: Key, run: Run) -> Value:
        comps = run.an.components(key[1], key[2], run.diag)
        if _vanishes(comps):
            zero = np.zeros(run.shape)
            if run.diag:
                return zero, zero
            left = np.prod([np.sqrt(run.point(("pm", c.left.key), "left")[0]["m2"]) for c in comps if c.left],
                           axis=0) * np.ones((run.shape[0], 1))
            right = np.prod([np.sqrt(run.point(("pm", c.right.key), "right")[0]["m2"]) for c in comps if c.right],
                            axis=0) * np.ones((1, run.shape[1]))
            return zero, bounds.zero(left, right)
        if run.diag:
            return _product_of_means([run.point(("mean", (comp.left or comp.right).key), "left")
                                      if comp.right is None or comp.left is None else run.same_point(comp)
                                      for comp in comps], run.shape)
        factors = []
        for comp in comps:
            if comp.right is None:
                factors.append(run.point_mean(comp.left.key, "left"))
            elif comp.left is None:
                factors.append(run.point_mean(comp.right.key, "right"))
            elif _data_free_joint(run.an, comp):
                factors.append(run.data_free_pair(comp))
            else:
                factors.append(run.pair(comp))
        if len(factors) == 1:
            v, b = factors[0]
            return np.broadcast_to(v, run.shape), b.plus_rounding(16)
        value = factors[0][0]
        for v, _ in factors[1:]:
            value = value * v
        left = np.prod([b.left for _, b in factors], axis=0)
        right = np.prod([b.right for _, b in factors], axis=0)
        return np.broadcast_to(value, run.shape), bounds.product(factors, left, right).plus_rounding(16)


def _data_free_joint(an: Analysis, comp: Component) -> bool:
    """A two-sided group of the joint engine none of whose arguments reads the data: it is one random
    variable at every input, so its pair at two inputs is its value at one (:meth:`Run.data_free_pair`)."""
    assert comp.left is not None and comp.right is not None
    return (all(x in an.data_free for x in comp.left.args + comp.right.args)
            and (an.projection(comp.left) is None or an.projection(comp.right) is None)
            and an.batchnorm(comp.left) is None and an.batchnorm(comp.right) is None)


def _single_gaussian(m: Monomial) -> bool:
    """``m`` is one G-vector: its mean is exactly 0."""
    return len(m.atoms) == 1 and isinstance(m.atoms[0], Var)


def _has_centred_factor(groups: list[Monomial]) -> bool:
    """A monomial's independent groups include one G-vector alone: its mean is exactly 0."""
    return len(groups) > 1 and any(_single_gaussian(g) for g in groups)


def _vanishes(comps: list[Component]) -> bool:
    """Some independent group is one G-vector on one side only: its mean, a factor of the
    expectation, is exactly 0 (``E[relu(g) step(g') v']`` with ``v`` independent: the other
    groups' pair — here a Mehler series with colinear fallbacks, 10 s on 200 inputs — is never
    needed)."""
    return any((c.left is None) != (c.right is None) and _single_gaussian(c.left or c.right) for c in comps)


def _product_of_means(factors: list[Value], shape: tuple[int, ...]) -> Value:
    """The product of per-point expectations ``(value, error)`` of independent groups, its error
    bounded exactly: the rounding of each expectation's evaluation, then (v₁ ± e₁)(v₂ ± e₂)."""
    value: Any = 1.0
    err: Any = 0.0
    for v, e in factors:
        e = e + 16 * _EPS * np.abs(v)
        err = np.abs(value) * e + err * (np.abs(v) + e)
        value = value * v
    return np.broadcast_to(np.asarray(value, dtype=float), shape), np.broadcast_to(err, shape)


class MonomialMean(Quantity):
    """``E m(Z)`` per point: the product of the means of its independent groups, each a
    one-dimensional rule (a function of one linear form), BatchNorm's, or the joint engine's."""

    def deps(self, key: Key, an: Analysis, diag: bool) -> tuple[list[Key], list[Key]]:
        m = an.monomials[key[1]]
        groups = an.factors(m)
        if _has_centred_factor(groups):
            return [], []  # exactly 0 (compute)
        if len(groups) > 1:
            return [("mean", g.key) for g in groups], []
        return _block_keys(m.args) + ([] if an.batchnorm(m) is not None else [("pm", key[1])]), []

    def compute(self, key: Key, run: Run) -> Value:
        m = run.an.monomials[key[1]]
        groups = run.an.factors(m)
        if _has_centred_factor(groups):
            return np.zeros(run.shape), np.zeros(run.shape)
        if len(groups) > 1:
            return _product_of_means([run.get(("mean", g.key)) for g in groups], run.shape)
        form = run.an.batchnorm(m)
        if form is not None:
            return run.batchnorm(m, form, None)
        cov, d_cov = run.block(m.args)
        stats = run.get(("pm", key[1]))[0]
        proj = run.an.projection(m)
        if proj is not None:
            a, da = _form_variance(proj, cov, d_cov)
            value, err = mean(proj.act, a, run.term_rtol)
            return value, err + propagation.point_1d(a, da, stats)
        ftf = run.an.factor_term(m)
        conditioned_mean = None if ftf is None else conditioned.point_mean(ftf, cov, rtol=run.term_rtol, d_cov=d_cov)
        if conditioned_mean is not None:
            value, err = conditioned_mean
        else:
            value, err, se = joint.point_expectation(run.an.joint(m), cov, seed=_seed(key),
                                                     atol=run.term_rtol * np.sqrt(stats["m2"]))
            run.note_stderr(se)
        return value, err + propagation.point_joint(cov, d_cov, stats)


class PointMoments(Quantity):
    """Per-point moments of a monomial as a function of its arguments (for error propagation)."""

    def deps(self, key: Key, an: Analysis, diag: bool) -> tuple[list[Key], list[Key]]:
        return _block_keys(an.monomials[key[1]].args), []

    def compute(self, key: Key, run: Run) -> Value:
        m = run.an.monomials[key[1]]
        form = run.an.batchnorm(m)
        if form is not None:  # only the second moment: BatchNorm pairs propagate errors themselves
            return {"m2": run.batchnorm(m, form, form)[0]}, None
        cov, d_cov = run.block(m.args)
        proj = run.an.projection(m)
        if proj is not None:
            var = _form_variance(proj, cov, d_cov)[0]
            stats = moments_1d(proj.act, var)
            return _with_joint_moments(stats, proj.coefs, cov, var), None
        ftf = run.an.factor_term(m)
        if ftf is not None:
            bounded = conditioned.point_moments(ftf, cov, d_cov)
            if bounded is not None:
                return bounded, None
        return joint.point_moments(run.an.joint(m), cov, seed=_seed(key)), None


class ScalarLimit(Quantity):
    """A scalar's limit at each input (NetsorK; per point only): a moment ``E ψ(Z)`` from the
    terms of :meth:`Analysis._moment_terms`, or arithmetic of scalars, with first-order error
    propagation (derivatives of the arithmetic times the errors of its arguments)."""

    def deps(self, key: Key, an: Analysis, diag: bool) -> tuple[list[Key], list[Key]]:
        form = an.scalars[key[1]]
        if isinstance(form, FunctionForm):
            return [("sc", a) for a in form.expr.args], []
        own: list[Key] = []
        for term in an.moment_terms[key[1]][1]:
            if term.scalars is not None:
                own += [("sc", a) for a in term.scalars.args]
            if term.key is not None:
                own.append(term.key)
        return own, []

    def compute(self, key: Key, run: Run) -> Value:
        scalar = key[1]
        form = run.an.scalars[scalar]
        if isinstance(form, FunctionForm):
            value, err = run.scalar_arithmetic(scalar, form.expr)
            if not np.all(np.isfinite(value)):
                bad = int(np.flatnonzero(~np.isfinite(value))[0])
                raise NumericalError(
                    f"the scalar {scalar.name} = {form.expr.describe()} is not finite in the limit at input {bad} "
                    "(e.g. LayerNorm or BatchNorm of a vector whose limiting variance is 0, or 1/0): change "
                    "the program or the inputs")
            return value, err
        const, terms = run.an.moment_terms[scalar]
        value, err = np.full(run.shape, const), np.zeros(run.shape)
        for term in terms:
            sv, se = (1.0, 0.0) if term.scalars is None else run.scalar_expression(term.scalars)
            v, e = (1.0, 0.0) if term.key is None else run.get(term.key)
            value = value + term.coef * sv * v
            err = err + abs(term.coef) * (np.abs(sv) * e + se * (np.abs(v) + e)) + 4 * _EPS * np.abs(term.coef * sv * v)
        return value, err


class Distance(Quantity):
    """``("D", v)``: the squared distance ``E[(Z^v(x) − Z^v(x'))²]`` of one vector between the tile's two
    points, with a dense bound on its absolute error, by :meth:`Analysis.distance_rule`.

    Networks in the ordered phase drive two inputs' correlation towards 1; a covariance then holds ``1 − ρ``
    to a few ulps of 1, and the step kernel of an NTK's backward pass (slope ``1/(2π sin θ)``) could only be
    bounded by its ½-Hölder modulus, ~1e-8 a layer. The distance recursion keeps ``1 − ρ`` to a few ulps of
    itself (:mod:`netsor.activations.distance_kernels`): a relu MLP at σ_w = 1, σ_b = 0.1, depth 50 took the NTK's
    error from 2.5e-10 to 1.7e-16 and its bound from 1.4e-7 to 5.3e-14 (relative to √(K_ii K_jj)). Pairs of
    identical inputs are 0 exactly."""

    #: the quantity's key letter; :class:`SumDistance` reads the same rules through ``v ↦ −v``
    letter = "D"
    summed = False

    def rule(self, an: Analysis, v: Vector) -> tuple[Any, ...] | None:
        """How the quantity of ``v`` is carried (:meth:`Analysis.distance_rule`)."""
        return an.distance_rule(v)

    def deps(self, key: Key, an: Analysis, diag: bool) -> tuple[list[Key], list[Key]]:
        v = key[1]
        rule = self.rule(an, v)
        if rule is None:
            return [("m", v, v)], [("m", v, v)]
        if rule[0] == "data":
            return [], []
        if rule[0] == "sum":
            return [(self.letter, h) for _, h in rule[1]], []
        if rule[0] == "norm":
            return [("A", rule[2])], []
        g = rule[2]
        if rule[0] == "kinked":
            return [("A", g), ("m", v, v)], [("g", g, g), ("m", v, v)]
        return [(self.letter, g), ("A", g)], [("g", g, g)]

    def compute(self, key: Key, run: Run) -> Value:
        v = key[1]
        rule = self.rule(run.an, v)
        summed = self.summed

        def angle(g: Vector) -> distance_kernels.Angle:  # of (u, −v) for the sum
            ang = run.get(("A", g))[0]
            return distance_kernels.reflected(ang) if summed else ang

        if rule is None:  # a + b ∓ 2c, no better than the covariances
            D, dD = _distance_by_covariance(v, run, sign=-1.0 if summed else 1.0)
        elif rule[0] == "kinked":
            D, dD = _distance_by_angle(v, rule[1], rule[2], run, sum_offset=rule[3] if summed else None)
        elif rule[0] == "data":
            right = data_view(run.X_right, rule[1])
            D, dD = data_distance(data_view(run.X_left, rule[1]), -right if summed else right)
        elif rule[0] == "sum":
            D, dD = np.zeros(run.shape), np.zeros(run.shape)
            for weight, h in rule[1]:
                Dh, dDh = run.get((self.letter, h))
                D, dD = D + weight * Dh, dD + weight * dDh
            dD += (len(rule[1]) + 2) * _EPS * D
        elif rule[0] == "norm":
            D, dD = _normalized_distance(rule[1], angle(rule[2]))
        else:
            _, distance, g, at_zero = rule
            Dg, dDg = run.get((self.letter, g))
            (a, da), (b, db) = run.point(("g", g, g), "left"), run.point(("g", g, g), "right")
            D, dD = distance(a, da, b, db, Dg, dDg, angle(g))
            if summed and isinstance(distance, distance_kernels.PiecewiseLinearDistance):
                D = D + 4.0 * at_zero * at_zero  # as in _distance_by_angle (a jump rule's levels hold the constant)
            dD = dD + 4 * _EPS * D  # the rule's slopes, rounded once from their exact sums
        if np.shape(D) != run.shape or not D.flags.writeable:
            D = np.array(np.broadcast_to(D, run.shape))
        if np.shape(dD) != run.shape or not dD.flags.writeable:
            dD = np.array(np.broadcast_to(dD, run.shape))
        if not summed:
            same = run.identical  # the same vector at the same input
            D[same] = dD[same] = 0.0
        return D, dD


def _distance_by_covariance(v: Vector, run: Run, sign: float = 1.0) -> tuple[Array, Array]:
    """``a + b − 2c`` of ``v``'s second moments (``sign = −1``: the sum's ``a + b + 2c``): no better than the
    covariances' bounds."""
    c, c_bound = run.get(("m", v, v))
    (a, da), (b, db) = run.point(("m", v, v), "left"), run.point(("m", v, v), "right")
    D = np.maximum(a + b - 2.0 * sign * c, 0.0)
    return D, da + db + 2.0 * c_bound.array() + 4 * _EPS * (a + b + 2.0 * np.abs(c))


def _distance_by_angle(v: Vector, slopes: near_parallel.Steps, g: Vector, run: Run,
                       sum_offset: float | None = None) -> tuple[Array, Array]:
    """The distance of ``v = φ(g)`` for a continuous piecewise-linear ``φ`` (``φ' = slopes``) with kinks off the
    origin: :func:`~netsor.gaussian.near_parallel.kinked_distance` at the pairs whose angle is small
    (:data:`~netsor.gaussian.near_parallel.SMALL_ANGLE`), where it keeps the distance's relative accuracy — and,
    for an even φ (φ' odd), at the nearly anti-parallel pairs, whose distance is that of ``(u, −v)`` at the
    reflected angle — and the covariances' ``a + b − 2c`` wherever that has the smaller bound.

    ``sum_offset``: the sum ``E[(φ(u) + φ(v))²]`` instead, of a φ odd up to its value ``φ(0) = sum_offset`` (φ'
    even): ``E[(φ(u) − φ(−v))²] + 4φ(0)²`` (the cross term ``4φ(0) E[φ(u) − φ(0) + φ(v) − φ(0)]`` vanishes: an odd
    function of a centred Gaussian) at the reflected angle, small where the pair is nearly anti-parallel."""
    summed = sum_offset is not None
    D, dD = _distance_by_covariance(v, run, sign=-1.0 if summed else 1.0)
    D, dD = np.array(np.broadcast_to(D, run.shape)), np.array(np.broadcast_to(dD, run.shape))
    ang = run.get(("A", g))[0]
    (a, da), (b, db) = run.point(("g", g, g), "left"), run.point(("g", g, g), "right")
    a, da, b, db = (np.broadcast_to(x, run.shape) for x in (a, da, b, db))
    reflections = [True] if summed else [False, True] if slopes.scaled(-1.0) == slopes.times(-1.0) else [False]
    square = 4.0 * sum_offset * sum_offset if summed else 0.0
    for reflect in reflections:
        at = distance_kernels.reflected(ang) if reflect else ang
        small = np.broadcast_to(at.hi <= near_parallel.SMALL_ANGLE, run.shape) & (a > da) & (b > db)
        if np.any(small):
            theta, lo, hi = (np.broadcast_to(x, run.shape)[small] for x in (at.theta, at.lo, at.hi))
            near, d_near = near_parallel.kinked_distance(slopes, a[small], da[small], b[small], db[small],
                                                         distance_kernels.Angle(theta, lo, hi), limit=dD[small])
            near, d_near = near + square, d_near + 4 * _EPS * square
            take = d_near < dD[small]
            D[small] = np.where(take, near, D[small])
            dD[small] = np.where(take, d_near, dD[small])
    return D, dD


def _normalized_distance(square: float, ang: distance_kernels.Angle) -> tuple[Array, Array]:
    """``E[(λ θ(x) u(x) − λ θ(x') u(x'))²] = λ² (2 − 2ρᵤ) = 4 λ² sin²(θᵤ/2)`` of a normalised vector
    (``θ(x)² Var u(x) = 1``), from the angle of ``u``: no cancellation at small angles; its bound the
    change of the increasing ``sin²(t/2)`` over the angle's interval, and the rounding."""
    def at(theta: Array) -> Array:
        return 4.0 * square * np.sin(0.5 * np.clip(theta, 0.0, np.pi)) ** 2

    D = at(ang.theta)
    dD = np.maximum(at(ang.hi) - D, D - at(ang.lo)) + 8 * _EPS * D
    return D, dD


class SumDistance(Distance):
    """``("S", v)``: ``E[(Z^v(x) + Z^v(x'))²]`` — the distance of ``(Z^v(x), −Z^v(x'))`` — between the tile's two
    points, with a dense bound on its absolute error, carried beside :class:`Distance` where the plan carries
    distances (:func:`walk`).

    Odd networks (bias-free, odd φ: hard_tanh, a traced clip) keep two nearly anti-parallel inputs nearly
    anti-parallel at every layer: the covariances then hold ``1 + ρ`` to ½-Hölder digits only, the angle ``π − θ``
    with them, and the step kernels of hard_tanh's NTK (slope ``1/(2π sin θ)``) missed rtol 1e-8 by 80× at inputs
    1e-6 from anti-parallel. The sum is the distance of ``(u, −v)``, small there: for an odd φ of ``g`` it is φ's
    distance rule at the reflected angle ``π − θ`` of ``g`` (:func:`~netsor.activations.distance_kernels.reflected`)
    and ``g``'s own sum — the same rules as :class:`Distance` read through ``v ↦ −v``. Functions of no parity,
    biases and other vectors take ``a + b + 2c`` of the covariances (no anti-parallel pair survives them)."""

    letter = "S"
    summed = True

    def rule(self, an: Analysis, v: Vector) -> tuple[Any, ...] | None:
        return _sum_rule(an, v)


def _sum_rule(an: Analysis, v: Vector) -> tuple[Any, ...] | None:
    """:meth:`Analysis.distance_rule` where it carries ``E[(Z^v(x) + Z^v(x'))²]`` too (:class:`SumDistance`): data,
    normalised vectors, sums of MatMuls without a common source, odd functions (a linear rule up to its constant, a
    jump rule whose levels, constant included, are opposite — sign; a continuous piecewise-linear φ whose φ' is even:
    φ odd up to its value at 0); None elsewhere."""
    rule = an.distance_rule(v)
    if rule is None or rule[0] in ("data", "norm"):
        return rule
    if rule[0] == "sum":
        return None if rule[2] else rule
    if rule[0] == "kinked":
        return rule if rule[1].scaled(-1.0) == rule[1] else None
    return rule if rule[3] is not None and getattr(rule[1], "odd", False) else None


class PairAngle(Quantity):
    """``("A", g)``: the angle of a G-vector ``g`` between the tile's two points, from its distance, with an
    interval that holds the true angle (:func:`netsor.activations.distance_kernels.angle`) — exact at exactly
    proportional inputs, where the interval would be ½-Hölder. Shared by the distance kernel of ``φ(k·g)`` and
    the angle pairs of ``g`` (θ is that of ``k·g`` for any ``k ≠ 0``). Its value is an
    :class:`~netsor.activations.distance_kernels.Angle` (three arrays), its bound None."""

    def deps(self, key: Key, an: Analysis, diag: bool) -> tuple[list[Key], list[Key]]:
        g = key[1]
        through = an.angle_through(g)
        return [("D", g), *([] if through is None else [("A", through[1])])], [("g", g, g)]

    def compute(self, key: Key, run: Run) -> Value:
        g = key[1]
        D, dD = run.get(("D", g))
        (a, da), (b, db) = run.point(("g", g, g), "left"), run.point(("g", g, g), "right")
        ang = distance_kernels.angle(a, da, b, db, D, dD)
        # points of different variances (inputs nearly proportional in a bias-free network): the distance form
        # cancels, the inputs' directions and the angle map of a homogeneous layer do not
        if (x := run.an.data_direction(g)) is not None:
            step = run.an.steps[x]
            ang = ang.within(data_angle(data_view(run.X_left, step), data_view(run.X_right, step)))
        if (through := run.an.angle_through(g)) is not None:
            mapped = distance_kernels.piecewise_linear_angle(through[0], run.get(("A", through[1]))[0])
            if mapped is not None:
                ang = ang.within(mapped)
        if ("S", g) in run.values:  # π − θ from the sum, accurate relative to itself where the pair is anti-parallel
            S, dS = run.get(("S", g))
            ang = ang.within(distance_kernels.reflected(distance_kernels.angle(a, da, b, db, S, dS)))
        if (exact := run.colinear((g,))) is not None:
            ang = ang.at(exact[0], exact[1], np.where(exact[2] > 0, 0.0, np.pi))
        return ang, None


#: Pairs of inputs whose squared distance is below this share of their squared norms' sum are recomputed from
#: their differences (the Gram form ‖x‖² + ‖x'‖² − 2x·x' holds it to (2d + 4) ulps of that sum only).
DIRECT_DISTANCE_SHARE = 1e-2


def data_angle(A: Array, B: Array) -> distance_kernels.Angle:
    """The angle between the rows of ``A`` (B1, d) and of ``B`` (B2, d), with an interval that holds it: from the
    chord ``‖a/‖a‖ ∓ b/‖b‖‖`` of the normalised rows where their correlation exceeds 0.99 in size — ~(2d + 10)
    ulps absolute, where the distance form ``(D − (√a − √b)²)/(4√(ab))`` of rows of different norms cancels to
    ½-Hölder (x and 3x rounded, or 2x + δ, in a bias-free network) — and from their Gram correlation elsewhere.
    Zero rows: any angle."""
    d = A.shape[1]
    norm_a, norm_b = np.linalg.norm(A, axis=1), np.linalg.norm(B, axis=1)
    zero = (norm_a[:, None] == 0.0) | (norm_b[None, :] == 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        U, V = A / norm_a[:, None], B / norm_b[:, None]
        rho = np.clip(U @ V.T, -1.0, 1.0)
    d_rho = (2 * d + 8) * _EPS
    theta = np.arccos(rho)
    # arccos' slope 1/√(1 − ρ²) at the interval's end nearer ±1
    slope = 1.0 / np.sqrt(np.maximum(1.0 - (np.abs(rho) + d_rho) ** 2, 1e-300))
    width = d_rho * slope + 4 * _EPS * theta
    close = np.argwhere((np.abs(rho) > 0.99) & ~zero)
    rows = max(1, 2**22 // max(1, d))
    for start in range(0, len(close), rows):
        i, j = close[start:start + rows].T
        sign = np.sign(rho[i, j])[:, None]
        chord = np.linalg.norm(U[i] - sign * V[j], axis=1)  # of the nearer direction: small, no cancellation
        half = 2.0 * np.arcsin(np.minimum(0.5 * chord, 1.0))
        theta[i, j] = np.where(sign[:, 0] > 0, half, np.pi - half)
        # each normalised row within (d + 2) ulps of its direction (its norm's rounding), their difference within
        # (2d + 4), and the difference's norm within (d + 2) ulps of itself
        d_chord = (2 * d + 10) * _EPS * (1.0 + chord)
        width[i, j] = d_chord / np.sqrt(np.maximum(1.0 - (0.5 * (chord + d_chord)) ** 2, 1e-300)) + 4 * _EPS * half
    lo, hi = np.maximum(theta - width, 0.0), np.minimum(theta + width, np.pi)
    lo, hi = np.where(zero, 0.0, lo), np.where(zero, np.pi, hi)
    return distance_kernels.Angle(np.where(zero, 0.5 * np.pi, theta), lo, hi)


#: :class:`Limit` carries distances from the start where two inputs are at an angle below this over rtol: the
#: covariances bound a step pair of hard_tanh's NTK to ~1e-11/θ of its scale (depth 3: refused at rtol 1e-8 from
#: θ ≈ 4e-4, at 1e-6 from θ ≈ 1e-5), so below it the first attempt would miss rtol by ~10×.
NEAR_INPUTS_ANGLE = 1e-12


def has_nearly_parallel_inputs(X: Array, X2: Array, *, angle: float, symmetric: bool = False) -> bool:
    """Whether two inputs — rows of ``X`` (B1, ..., d) and ``X2`` (B2, ..., d), each position of a sequence an input
    — are at an angle known to be positive and below ``angle`` (:func:`data_angle`; the same or proportional inputs
    are not: the engine takes those exactly). ``symmetric``: ``X2`` is ``X``, its pairs taken once."""
    if X.shape[-1] == 0:
        return False
    A, B = X.reshape(-1, X.shape[-1]), X2.reshape(-1, X2.shape[-1])
    rows = max(1, 2**20 // max(1, len(B)))  # the block's angles within ~8 MB an array
    for start in range(0, len(A), rows):
        ang = data_angle(A[start:start + rows], B[start:] if symmetric else B)
        if np.any((ang.lo > 0.0) & (ang.theta < angle)):
            return True
    return False


def data_distance(A: Array, B: Array) -> tuple[Array, Array]:
    """``‖x − x'‖²/d`` between the rows of ``A`` (B1, d) and of ``B`` (B2, d), with a bound on its error: the
    Gram form, and the differences themselves where the inputs are close (:data:`DIRECT_DISTANCE_SHARE`;
    ~(d + 2) ulps of the distance) — inputs a perturbation apart keep their distance's digits."""
    d = A.shape[1]
    norms_a, norms_b = np.einsum("bi,bi->b", A, A)[:, None] / d, np.einsum("bi,bi->b", B, B)[None, :] / d
    scale = norms_a + norms_b
    D = scale - 2.0 * (A @ B.T) / d
    np.maximum(D, 0.0, out=D)
    # the norms to (d + 1) ulps of theirs, the inner product to d ulps of (‖x‖² + ‖x'‖²)/2 each side, the difference
    dD = (2 * d + 4) * _EPS * scale * np.ones_like(D)
    close = np.argwhere(D <= DIRECT_DISTANCE_SHARE * scale)
    rows = max(1, 2**22 // max(1, d))  # pairs a chunk: their differences within ~32 MB
    for start in range(0, len(close), rows):
        i, j = close[start:start + rows].T
        diff = A[i] - B[j]
        near = np.einsum("ki,ki->k", diff, diff) / d
        D[i, j], dD[i, j] = near, (d + 3) * _EPS * near
    return D, dD


QUANTITIES: dict[str, Quantity] = {
    "g": GaussianCovariance(), "s": SourceCovarianceQuantity(), "m": Moment(), "d": DataInnerProduct(),
    "t": MonomialPair(), "mean": MonomialMean(), "pm": PointMoments(), "sc": ScalarLimit(), "D": Distance(),
    "S": SumDistance(), "A": PairAngle(),
}


def _with_joint_moments(stats: dict[str, Array], c: Array, cov: Array, var: Array) -> dict[str, Array]:
    """Add to the moments of φ(w), w = cᵀU, those of F(U) = φ(cᵀU) as a function of U
    (:func:`netsor.interpret.propagation.pair_joint`): ∂ᵢF = cᵢ φ'(w), and with U = βw + U⊥
    (β = Σc / var w, U⊥ independent of w), E|∇F|²|U|² = |c|² (|β|² E φ'²w² + E φ'² E|U⊥|²)."""
    c2 = float(c @ c)
    beta2 = np.einsum("pij,j,pik,k->p", cov, c, cov, c) / np.maximum(var, 1e-300) ** 2
    orth = np.maximum(np.trace(cov, axis1=1, axis2=2) - beta2 * var, 0.0)
    return {**stats, "arg_grad2": stats["grad2"][:, None] * (c * c)[None, :], "gradnorm2": c2 * stats["grad2"],
            "joint_euler": c2 * (beta2 * stats["euler"] + stats["grad2"] * orth)}


def _form_variance(proj: Projection, cov: Array, d_cov: Array) -> tuple[Array, Array]:
    """Variance ``cᵀΣc`` of a linear form at each point (cov (P, k, k)) and its error bound."""
    c = proj.coefs
    return np.einsum("i,pij,j->p", c, cov, c), np.einsum("i,pij,j->p", np.abs(c), d_cov, np.abs(c))


def _union(a: tuple[Vector, ...], b: tuple[Vector, ...]) -> tuple[Vector, ...]:
    return tuple(dict.fromkeys((*a, *b)))


def _block_keys(args: tuple[Vector, ...]) -> list[Key]:
    return [canonical(("g", x, y)) for i, x in enumerate(args) for y in args[i:]]


def _seed(key: Key) -> int:
    return zlib.crc32(repr(key).encode())


def linear_combination(parts: list[tuple[float, Value]], run: Run, key: Key) -> Value:
    """Σ coef · value, with the error Σ |coef| · error plus the rounding of the sum: arrays on the
    diagonal, a :class:`~netsor.interpret.bounds.Bound` on the envelope of ``key`` on tiles."""
    shape = run.shape
    if run.diag:
        if not parts:
            return np.zeros(shape), np.zeros(shape)
        if len(parts) == 1 and parts[0][0] == 1.0 and np.shape(parts[0][1][0]) == shape:
            return parts[0][1]
        value, err, size = np.zeros(shape), np.zeros(shape), np.zeros(shape)
        for coef, (v, e) in parts:
            value += coef * v
            err += abs(coef) * e
            size += np.abs(coef * v)
        return value, err + len(parts) * _EPS * size
    if len(parts) == 1 and parts[0][0] == 1.0 and np.shape(parts[0][1][0]) == shape:
        return parts[0][1]
    left, right = run.envelope(key)
    if not parts:
        return np.zeros(shape), bounds.zero(left, right)
    value, scratch = np.empty(shape), None
    (c0, (v0, _)), rest = parts[0], parts[1:]
    if c0 == 1.0 and rest and rest[0][0] == 1.0 and not _is_constant(rest[0][1][0]):
        np.add(v0, rest[0][1][0], out=value)  # one pass for the common Σ of two (an NTK's Ẇh + Wḣ)
        rest = rest[1:]
    else:
        np.multiply(v0, c0, out=value)
    for coef, (v, _) in rest:
        if _is_constant(v):
            value += coef * float(v.flat[0])
        elif coef == 1.0:
            value += v
        else:
            scratch = np.empty(shape) if scratch is None else scratch
            np.multiply(v, coef, out=scratch)
            value += scratch
    # the terms are at most their envelopes: rounding relative to the largest ratio to the target
    ratios = [b.envelope_ratio(left, right) for _, (_, b) in parts]
    size = max(abs(c) * r for (c, _), r in zip(parts, ratios, strict=True))
    return value, bounds.combination([(c, b) for c, (_, b) in parts], left, right, size=size, ratios=ratios)


def _is_constant(v: Any) -> bool:
    """``v`` is a broadcast constant (a read-only view with zero strides: a bias's variance)."""
    return isinstance(v, np.ndarray) and v.size > 0 and not any(v.strides)


def envelope_keys(key: Key, an: Analysis) -> list[Key]:
    """The per-point keys whose square roots make the envelope of a tile quantity."""
    kind, u, v = key
    if kind in ("g", "s"):
        return [("g", u, u), ("g", v, v)]
    if kind == "m":
        if u in an.steps:
            return []
        if u in an.sources and v in an.sources:
            return [("g", u, u), ("g", v, v)]
        return [("m", u, u), ("m", v, v)]
    return []


# ------------------------------------------------------------------------ plans
@dataclass
class Plan:
    """Quantities to compute, in dependency order, with their last use (for freeing)."""

    order: list[Key]
    deps: dict[Key, list[Key]]
    last_use: dict[Key, int]
    side: set[Key] = field(default_factory=set)  # per-point keys needed from the diagonal runs


def make_plan(an: Analysis, roots: list[Key], diag: bool, keep_all: bool = False, distances: bool = False) -> Plan:
    """The plan of ``roots``: the walk's order (:func:`walk`) or the same quantities by levels
    (:func:`_by_levels`), whichever holds fewer tiles at once; ``keep_all`` (per-point runs) frees
    nothing; ``distances``: with the distances that angle pairs read (:func:`walk`)."""
    order, deps, side = walk(an, roots, diag, distances)
    if keep_all:
        return Plan(order, deps, dict.fromkeys(order, len(order)), side)
    plans = [Plan(o, deps, last_uses(o, deps, roots), side) for o in (_by_levels(order, deps), order)]
    return min(plans, key=peak_live)


def walk(an: Analysis, roots: list[Key], diag: bool, distances: bool = False
         ) -> tuple[list[Key], dict[Key, list[Key]], set[Key]]:
    """The depth-first dependency walk from ``roots`` (no recursion): the quantities in a dependency
    order, each one's dependencies, and the per-point keys needed from the diagonal runs. ``distances``
    (tiles only): each pair term's angle pairs (:meth:`Analysis.angle_pair`) also need their G-vector's
    angle (:class:`PairAngle`, from its :class:`Distance`) — a refinement that costs ~10–15× an NTK's time,
    taken where the covariances alone missed the tolerance (:meth:`Limit.retried`)."""
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
        own, need = QUANTITIES[key[0]].deps(key, an, diag)
        if distances and key[0] == "t" and not diag:
            own = own + [("A", g) for comp in an.components(key[1], key[2], False)
                         if (g := an.angle_pair(comp)) is not None]
        if distances and key[0] == "A" and not diag:
            own = own + [("S", key[1])]  # the angle near π (SumDistance)
        if diag:
            own = [canonical(k) for k in own]
        deps[key] = own
        side.update(need)
        stack.append((key, True))
        stack.extend((d, False) for d in own if d not in deps)
    return order, deps, side


def last_uses(order: list[Key], deps: dict[Key, list[Key]], roots: list[Key]) -> dict[Key, int]:
    """The position in ``order`` of each quantity's last consumer (past the end for the roots)."""
    last_use = {k: i for i, k in enumerate(order)}
    for i, k in enumerate(order):
        for d in deps[k]:
            last_use[d] = max(last_use[d], i)
    for r in roots:
        last_use[r] = len(order)
    return last_use


def _by_levels(order: list[Key], deps: dict[Key, list[Key]]) -> list[Key]:
    """``order`` (a dependency order) sorted by each quantity's height — the longest chain of
    consumers above it — highest first, ties in ``order``'s order: a quantity is computed one
    level before its tallest consumer chain needs it. Valid: a dependency is strictly higher than
    each of its consumers.

    The depth-first walk finishes one root's whole chain before the next: an NTK's tangent program
    ran after the entire forward pass, every layer's angle held (and evicted from the caches) until
    the tangent's step kernel read it. By levels, a forward layer and the tangent layer that reads it
    are neighbours (the depth-10 ReLU MLP's NTK holds 4 tiles at once instead of 12); a recurrence
    whose inputs are read step by step can hold more (the RNN's 100 instead of 76), so
    :func:`make_plan` keeps the order with the smaller peak."""
    height: dict[Key, int] = dict.fromkeys(order, 0)
    for k in reversed(order):  # consumers come after their dependencies
        for d in deps[k]:
            height[d] = max(height[d], height[k] + 1)
    return sorted(order, key=lambda k: -height[k])  # a stable sort: ties keep the walk's order


# -------------------------------------------------------------------- execution
@dataclass
class Side:
    """Per-point values (arrays of shape (B,)) from a diagonal run, and the data they came from."""

    values: dict[Key, Value]
    X: Array


class Run:
    """Executes a plan on one tile of the pair grid, or on the diagonal (per point)."""

    def __init__(self, an: Analysis, *, diag: bool, term_rtol: float, memo: CoefficientMemo,
                 tables: joint.TableMemo, X: Array | None = None, left: Side | None = None,
                 right: Side | None = None, rows: slice = slice(None), cols: slice = slice(None),
                 geometry_uses: dict[Hashable, int] | None = None,
                 proportional: tuple[Array, Array, Array] | None = None, distances: bool = False) -> None:
        self.an, self.diag, self.term_rtol, self.memo, self.tables = an, diag, term_rtol, memo, tables
        #: the plan carries distances (:func:`walk`): angle pairs read them
        self.distances = distances
        self.values: dict[Key, Value] = {}
        #: pair geometries (Run.geometry) still to be used, and those computed; arc-cosine angles
        #: of geometries used more than once (kept until the last use)
        self.geometry_uses = dict(geometry_uses or {})
        self.geometries: dict[Hashable, tuple[Array, Array, Array, Array, Array, bounds.Bound, Any]] = {}
        self.angles: dict[tuple[int, int, int], tuple[Array, ...]] = {}
        #: BatchNorm expectations between two batches, every (b, c) of a pair of batch forms
        self.batch_pairs: dict[Hashable, tuple[Array, Array]] = {}
        #: per-point scalars (NetsorK): derivatives of each arithmetic scalar with respect to the independent error
        #: sources it depends on (moments, and the rounding of each arithmetic step), and those sources' bounds
        self.sensitivities: dict[Vector, dict[Hashable, Array]] = {}
        self.error_sources: dict[Hashable, Array] = {}
        self.stderr = 0.0
        self._all_proportional = proportional
        #: envelopes of tile quantities and per-point quantities at the tile's points (fixed by the sides' values)
        self._envelopes: dict[Key, tuple[Array, Array]] = {}
        self._points: dict[tuple[Key, str], Value] = {}
        if diag:
            assert X is not None
            self.X_left = self.X_right = X
            self.shape: tuple[int, ...] = (X.shape[0],)
        else:
            assert left is not None and right is not None
            self.left, self.right, self.rows, self.cols = left, right, rows, cols
            self.X_left, self.X_right = left.X[rows], right.X[cols]
            self.shape = (self.X_left.shape[0], self.X_right.shape[0])

    def note_stderr(self, se: Array) -> None:
        if np.size(se):
            self.stderr = max(self.stderr, float(np.max(se)))

    def get(self, key: Key) -> Value:
        return self.values[canonical(key) if self.diag else key]

    def point(self, key: Key, side: str) -> Value:
        """A per-point quantity at the left (rows) or right (columns) points of the tile (views, kept for
        the run: each pair of a tile reads its sides' moments)."""
        key = canonical(key)
        if self.diag:
            return self.values[key]
        found = self._points.get((key, side))
        if found is None:
            found = self._points[(key, side)] = self._new_point(key, side)
        return found

    def _new_point(self, key: Key, side: str) -> Value:
        src = self.left if side == "left" else self.right
        v, e = src.values[key]
        sl = self.rows if side == "left" else self.cols

        def shaped(x: Array) -> Array:
            return x[sl][:, None] if side == "left" else x[sl][None, :]

        if isinstance(v, dict):  # per-point moments for error bounds
            return {k: shaped(x) for k, x in v.items()}, None
        return shaped(v), shaped(e)

    def envelope(self, key: Key) -> tuple[Array, Array]:
        """Per-point factors ``l_i, r_j`` with ``|Q_ij| ≤ l_i r_j`` (Cauchy–Schwarz) of a tile quantity."""
        found = self._envelopes.get(key)
        if found is None:
            found = self._envelopes[key] = self._new_envelope(key)
        return found

    def _new_envelope(self, key: Key) -> tuple[Array, Array]:
        kind, u, v = key
        if kind == "m" and u in self.an.steps:
            A = data_view(self.X_left, self.an.steps[u])
            B = data_view(self.X_right, self.an.steps[v])
            return (np.linalg.norm(A, axis=1)[:, None] / np.sqrt(A.shape[1]),
                    np.linalg.norm(B, axis=1)[None, :] / np.sqrt(B.shape[1]))
        lk, rk = envelope_keys(key, self.an)
        return (np.sqrt(np.maximum(self.point(lk, "left")[0], 0.0)),
                np.sqrt(np.maximum(self.point(rk, "right")[0], 0.0)))

    def point_mean(self, monomial: Key, side: str) -> tuple[Array, Any]:
        """A per-point mean as a term: on a tile, with its bound on the envelope √(E m²) ⊗ 1."""
        value, err = self.point(("mean", monomial), side)
        if self.diag:
            return value, err
        root = np.sqrt(self.point(("pm", monomial), side)[0]["m2"])
        if side == "left":
            left, right = root, np.ones((1, self.shape[1]))
            return value, bounds.from_dense(err * right, left, right)
        left, right = np.ones((self.shape[0], 1)), root
        return value, bounds.from_dense(err * left, left, right)

    def scalar_expression(self, expr: Any) -> Value:
        """An expression over scalars at each point (diagonal runs) and its first-order error bound."""
        args = expr.args
        vals = {a: self.get(("sc", a)) for a in args}
        point = {a: v for a, (v, _) in vals.items()}
        value = np.broadcast_to(np.asarray(expr.evaluate(point), dtype=float), self.shape)
        err = 16 * _EPS * np.abs(value)
        for a, (_, e) in vals.items():
            if np.any(e):
                err = err + np.abs(expr.derivative(point, a)) * e
        return value, err

    def scalar_arithmetic(self, scalar: Vector, expr: Any) -> Value:
        """An arithmetic scalar at each point (diagonal runs) and its first-order error bound, by the chain rule
        down to the independent error sources (the moments, and the rounding of each arithmetic step): errors
        that cancel in the composition cancel in the bound. A softmax is invariant under a shift of its scores
        (the running maximum drops out) and its weights sum to 1; LayerNorm's ``1/√(E g² − (E g)²)`` reads
        ``E g`` twice — bounded step by step from each argument's own bound, a transformer's bound grew ~8× a
        layer more than by the chain rule."""
        args = expr.args
        point = {a: self.get(("sc", a))[0] for a in args}
        value = np.broadcast_to(np.asarray(expr.evaluate(point), dtype=float), self.shape)
        rounding = ("rounding", scalar)
        self.error_sources[rounding] = 16 * _EPS * np.abs(value)
        sensitivity: dict[Hashable, Array] = {rounding: np.ones(self.shape)}
        for a in args:
            slope = np.asarray(expr.derivative(point, a), dtype=float)
            for source, d in self._sensitivity(a).items():
                sensitivity[source] = sensitivity.get(source, 0.0) + slope * d
        self.sensitivities[scalar] = sensitivity
        err = np.zeros(self.shape)
        for source, d in sensitivity.items():
            err = err + np.abs(d) * self.error_sources[source]
        return value, err

    def _sensitivity(self, scalar: Vector) -> dict[Hashable, Array]:
        """The derivatives of ``scalar`` with respect to the error sources (a moment: itself, with its bound)."""
        if scalar not in self.sensitivities:
            self.error_sources[("moment", scalar)] = self.get(("sc", scalar))[1]
            self.sensitivities[scalar] = {("moment", scalar): np.ones(self.shape)}
        return self.sensitivities[scalar]

    def coefficient(self, c: pointcoef.Coefficient, side: str) -> tuple[Any, Any]:
        """A source coefficient at the points of one side (a number, or per-point arrays)."""
        if not isinstance(c, pointcoef.PointCoefficient):
            return c, 0.0
        return c.evaluate(lambda s: self.point(("sc", s), side))

    def term(self, c1: pointcoef.Coefficient, c2: pointcoef.Coefficient, value: Value,
             e1: float = 0.0, e2: float = 0.0) -> tuple[float, Value]:
        """A part ``(coef, value)`` of a linear combination for ``c1(x) c2(x') Q``: exact numbers stay
        the coefficient; per-input coefficients, and numbers with errors ``e1, e2``, are applied to
        the value (:meth:`scaled`)."""
        if (isinstance(c1, pointcoef.PointCoefficient) or isinstance(c2, pointcoef.PointCoefficient)
                or e1 or e2):
            return 1.0, self.scaled(value, c1, c2, e1, e2)
        return c1 * c2, value

    def scaled(self, value: Value, c1: pointcoef.Coefficient, c2: pointcoef.Coefficient,
               e1: float = 0.0, e2: float = 0.0) -> Value:
        """``c1(x) c2(x') Q`` for per-input coefficients (or numbers off by ``e1, e2``): the errors of
        ``Q`` scaled, plus the coefficients' errors times ``|Q|`` (at most its envelope)."""
        cl, el = self.coefficient(c1, "left")
        cr, er = self.coefficient(c2, "right")
        el, er = el + e1, er + e2
        v, b = value
        al, ar = np.abs(cl), np.abs(cr)
        if self.diag:
            return cl * cr * v, al * ar * b + (el * ar + (al + el) * er) * np.abs(v) + 4 * _EPS * np.abs(cl * cr * v)
        left, right = (al + el) * b.left, (ar + er) * b.right
        parts = [(1.0, bounds.Bound(b.eta, al * b.left, ar * b.right, None if b.dense is None else al * ar * b.dense))]
        if np.any(el) or np.any(er):
            parts += [(1.0, bounds.Bound(1.0, el * b.left, ar * b.right)),
                      (1.0, bounds.Bound(1.0, (al + el) * b.left, er * b.right))]
        return (cl * cr) * v, bounds.combination(parts, left, right, size=4.0)

    def constant(self) -> tuple[Array, Any]:
        """The constant 1 as a term (exact)."""
        if self.diag:
            return np.ones(1), np.zeros(1)
        return np.ones(1), bounds.zero(np.ones((self.shape[0], 1)), np.ones((1, self.shape[1])))

    def run(self, plan: Plan) -> None:
        for i, key in enumerate(plan.order):
            self.values[key] = QUANTITIES[key[0]].compute(key, self)
            for d in plan.deps[key]:
                if plan.last_use[d] <= i:
                    self.values.pop(d, None)
                    if d[0] == "sc":  # its derivatives are read by the scalars that use it only
                        self.sensitivities.pop(d[1], None)

    # --- blocks of covariances of arguments
    def block(self, args: tuple[Vector, ...], side: str = "left") -> tuple[Array, Array]:
        """Per-point covariance (P, k, k) of ``args`` and its error bound (P = points of the side)."""
        source = self.values if self.diag else (self.left if side == "left" else self.right).values
        sl = slice(None) if self.diag else (self.rows if side == "left" else self.cols)
        k = len(args)
        first = source[canonical(("g", args[0], args[0]))][0][sl]
        cov, err = np.empty((first.shape[0], k, k)), np.empty((first.shape[0], k, k))
        for i, x in enumerate(args):
            for j in range(i, k):
                v, e = source[canonical(("g", x, args[j]))]
                cov[:, i, j] = cov[:, j, i] = v[sl]
                err[:, i, j] = err[:, j, i] = e[sl]
        return cov, err

    def cross(self, left_args: tuple[Vector, ...], right_args: tuple[Vector, ...]) -> tuple[Array, Array]:
        """Tile cross-covariances (b1, b2, k1, k2) and their error bounds (dense)."""
        c = np.empty((*self.shape, len(left_args), len(right_args)))
        e = np.empty_like(c)
        for i, x in enumerate(left_args):
            for j, y in enumerate(right_args):
                value, bound = self.values[("g", x, y)]
                c[..., i, j], e[..., i, j] = value, bound.array()
        return c, e

    def linear_form_cross(self, pl: Projection, pr: Projection) -> tuple[Array, bounds.Bound]:
        """``Cov(cₗᵀU, cᵣᵀV)`` on the tile and its bound, from the cross-covariances of the arguments."""
        if len(pl.args) == 1 and len(pr.args) == 1:
            value, bound = self.values[("g", pl.args[0], pr.args[0])]
            coef = pl.coefs[0] * pr.coefs[0]
            return (value if coef == 1.0 else coef * value), bound.scaled(coef)
        parts = [(ci * cj, self.values[("g", x, y)]) for x, ci in zip(pl.args, pl.coefs, strict=True)
                 for y, cj in zip(pr.args, pr.coefs, strict=True)]
        value = sum(c * v for c, (v, _) in parts)
        first = parts[0][1][1]
        return value, bounds.combination([(c, b) for c, (_, b) in parts], first.left, first.right,
                                         size=float(sum(abs(c) for c, _ in parts)))

    # --- expectations of one independent group
    def same_point(self, comp: Component) -> Value:
        """``E[L(U) R(V)]`` with both sides at the same point (diagonal run)."""
        an = self.an
        left, right = comp.left, comp.right
        forms = an.batchnorm_pair(comp)
        if forms is not None:
            return self.batchnorm(left, *forms)
        pl, pr = an.projection(left), an.projection(right)
        if pl is not None and pr is not None:
            union = _union(left.args, right.args)
            cov, d_cov = self.block(union)
            cl, cr = _embed(pl, union), _embed(pr, union)
            c, dc = _quadratic(cl, cov, d_cov, cr)
            if _linear_pair(pl, pr):
                # E[UV] of two linear forms is their covariance cₗᵀΣcᵣ, off by the bound of Σ on the forms and the
                # rounding of the form (one product and one sum per term): no kernel (an NTK's tangent vectors)
                size = np.einsum("i,pij,j->p", np.abs(cl), np.abs(cov), np.abs(cr))
                return c, dc + 4 * len(union) ** 2 * _EPS * size
            a, da = _quadratic(cl, cov, d_cov, cl)
            b, db = _quadratic(cr, cov, d_cov, cr)
            phi, psi = _located(pl.act, a, b), _located(pr.act, a, b)  # continuity is known once located
            step_like = an.step_like_pair(comp)
            if step_like is not None and np.all(a > da):
                # step-like functions of proportional forms at one point (step(g + b)·step(−g − b)): the angle is 0,
                # the pair (φ₊ψ₊ + φ₋ψ₋)/2 exactly — the two-form rules saw correlation ±1 to rounding, ½-Hölder
                # there (a depth-3 MLP of 2·step(g) − step(−g) + 1 with biases: bound 1.5e-2 relative, refused)
                at_one = distance_kernels.angle_pair_line(*step_like[1:])[0]
                return np.full(np.shape(a), at_one), np.full(np.shape(a), 8 * _EPS * abs(at_one))
            one_form = np.array_equal(cl, cr)
            if one_form and pl.act.key != pr.act.key:
                # E[(φψ)(w)], one dimension: the pair rules read ρ = c/√(ab), rounded below 1 at some variances,
                # where a discontinuous pair is ½-Hölder (E[step(e)·g · step(e)], e = g + g² − 0.79: 1.4e-9 off
                # within a bound of 1e-17; a random NTK of such activations, found by a campaign)
                value, err = mean(product_activation(pl.act, pr.act), a, self.term_rtol)
            elif one_form and same_kernel(pl.act, pr.act) and np.all(a > 0.0):
                # E φ(w)² of a registered φ: its closed form at ρ = 1 (exact at colinear pairs, which it reads
                # bitwise: a = b = c here), rounding on its own size — the tiles' rule, not a quadrature
                value = pair_expectation(pl.act, pr.act, a, a, a, errors=False)[0]
                err = 32 * _EPS * np.abs(value)
            else:
                value, err = pair_expectation(pl.act, pr.act, a, b, c, memo=self.memo, rtol=self.term_rtol)
            if one_form:  # E[(φψ)(w)], whose change in a is tighter than the partials in a, b, c
                h = product_activation(pl.act, pr.act)
                if h.homogeneous is not None:
                    prop = propagation.point_homogeneous(value, a, da, h.homogeneous)
                elif pl.act.key == pr.act.key:  # E φ(w)²: from φ's own moments, no quadrature of φ²
                    prop = propagation.point_square(a, da, self.get(("pm", left.key))[0])
                else:
                    prop = propagation.point_1d(a, da, moments_1d(h, a))
                vanishing = _vanishing(a, da)
                if vanishing.any():  # |E h(w) − h(0)| ≤ √E(h(w) − h(0))²
                    prop = np.array(prop, dtype=float)
                    prop[vanishing] = _spread_at_zero(h, da[vanishing])
                return value, err + prop
            # a jump at two forms proportional by their sources: one form (continuous pairs are Lipschitz at ρ = 1)
            proportional = (None if phi.continuous and psi.continuous
                            else self._proportional_point(pl, pr, a, da, b, db))
            if proportional is not None:
                return proportional
            if not (phi.continuous and psi.continuous):  # a jump: a closed form's change stays finite at
                change = _closed_form_change(pl.act, pr.act, a, da, b, db, c, dc, value)  # colinear forms
                if change is not None:
                    return value, err + change
            s_left, s_right = self.get(("pm", left.key))[0], self.get(("pm", right.key))[0]
            zero_a, zero_b = _vanishing(a, da), _vanishing(b, db)
            if not (zero_a.any() or zero_b.any()):
                return value, err + propagation.pair_1d(a, b, c, da, db, dc, s_left, s_right)
            prop = propagation.pair_1d(a, b, c, np.where(zero_a, 0.0, da), np.where(zero_b, 0.0, db), dc,
                                       s_left, s_right)
            for zero, phi, dphi, psi, var, dvar, m2 in ((zero_a, pl.act, da, pr.act, b, db, s_right["m2"]),
                                                        (zero_b, pr.act, db, pl.act, a, da, s_left["m2"])):
                i = np.flatnonzero(zero)
                if i.size:
                    prop[i] = _from_vanishing(phi, dphi[i], m2[i], _mean_change(psi, var[i], dvar[i]))
            return value, err + prop
        forms = an.conditioned(comp)
        if forms is not None:
            return self._conditioned_point(comp, *forms)
        # in the product's own argument order: it may have been registered before with its atoms in
        # another order (the mirrored pair), and its joint function takes that order
        product = an.register(left.atoms + right.atoms)
        cov, d_cov = self.block(product.args)
        along = self._cone_along_one_source(product, cov, d_cov)
        if along is not None:
            return along
        stats = self.get(("pm", product.key))[0]
        value, err, se = joint.point_expectation(an.joint(product), cov, seed=_seed(product.key),
                                                 atol=self.term_rtol * np.sqrt(stats["m2"]))
        self.note_stderr(se)
        return value, err + propagation.point_joint(cov, d_cov, stats)

    def _one_source(self, m: Monomial, side: str, P: int) -> tuple[Array, Array, int] | None:
        """The arguments of ``m`` as one source times per-input coefficients (``g`` and its LayerNorm ``θ·g``):
        ``(λ, δλ, ref)`` with ``U_a = λ_a U_ref`` at the ``P`` points of ``side`` (λ, δλ (P, k)), or None."""
        sources = [self.an.sources[v] for v in m.args]
        if any(len(src) != 1 for src in sources) or len({next(iter(src)) for src in sources}) != 1:
            return None
        source = next(iter(sources[0]))
        ks, dks = [], []
        for v, src in zip(m.args, sources, strict=True):
            k, e = self.coefficient(src[source], side)
            ks.append(np.broadcast_to(np.asarray(k, dtype=float).reshape(-1), (P,)))
            dks.append(np.broadcast_to(np.abs(np.asarray(e, dtype=float)).reshape(-1)
                                       + self.an.source_errors.get(v, {}).get(source, 0.0), (P,)))
        ref = int(np.argmax([np.min(np.abs(k) - e) for k, e in zip(ks, dks, strict=True)]))
        if not np.all(np.abs(ks[ref]) > dks[ref]):
            return None
        ratios = [_ratio_with_bound(k, e, ks[ref], dks[ref]) for k, e in zip(ks, dks, strict=True)]
        return np.stack([r for r, _ in ratios], axis=1), np.stack([d for _, d in ratios], axis=1), ref

    def _cone_terms(self, m: Monomial, side: str, P: int) -> tuple[list[tuple[int, float, Array, Array]], int] | None:
        """A cone function of one source (:meth:`_one_source`, no smoothed steps) along it: ``U = λ z`` makes
        each term ``|z|^d`` times its value at ``±λ``, so ``F(λz) = Σ_(d, σ) T_(d,σ) |z|^d 1{σz > 0}``; returns
        those ``(d, σ, T, δT)`` (T, δT (P,): the steps' signs certain, else None) and the argument ``ref`` that
        is ``z``."""
        cone = self.an.joint(m).cone
        found = None if cone is None or np.any(cone.noise != 0.0) else self._one_source(m, side, P)
        if found is None:
            return None
        lam, dlam, ref = found
        normals = cone.normals.T
        forms = lam @ normals  # (P, forms): each form at λ, with its bound
        d_forms = dlam @ np.abs(normals) + 2 * lam.shape[1] * _EPS * (np.abs(lam) @ np.abs(normals))
        out: dict[tuple[int, float], tuple[Array, Array]] = {}
        for coef, poly, steps in cone.terms:
            if steps and not np.all(np.abs(forms[:, list(steps)]) > d_forms[:, list(steps)]):
                return None  # a step's sign is not certain along the source: the jump may move
            x, dx = np.abs(forms[:, list(poly)]), d_forms[:, list(poly)]
            size = abs(coef) * (np.prod(x + dx, axis=1) - np.prod(x, axis=1))
            for sign in (1.0, -1.0):
                on = np.all(sign * forms[:, list(steps)] > 0.0, axis=1) if steps else np.ones(P, dtype=bool)
                key = (len(poly), sign)
                t, dt = out.get(key, (0.0, 0.0))
                out[key] = (t + coef * sign ** len(poly) * np.prod(forms[:, list(poly)], axis=1) * on, dt + size * on)
        return [(d, sign, t, dt) for (d, sign), (t, dt) in out.items()], ref

    def _cone_along_one_source(self, product: Monomial, cov: Array, d_cov: Array) -> Value | None:
        """``E F(U)`` at each point for a cone function of arguments that are one source times per-input
        coefficients (:meth:`_cone_terms`): ``Σ T_(d,σ) E[|z|^d 1{σz > 0}] = Σ T E|z|^d / 2``, a closed form whose
        errors are the λ's and ``Var z``'s. The law of ``U`` has rank one, where the joint rule's propagated
        error of a jump divides by its smallest eigenvalue: ``where(g > LN(g), …)`` had bounds of 3 % of the
        values, refused at every rtol (strict campaign seed 550). None where that does not hold."""
        found = self._cone_terms(product, "left", cov.shape[0])
        if found is None:
            return None
        terms, ref = found
        var, dvar = cov[:, ref, ref], d_cov[:, ref, ref]
        value, err = np.zeros(cov.shape[0]), np.zeros(cov.shape[0])
        for d, _, t, dt in terms:
            half = 2.0 ** (0.5 * d - 1) * math.gamma(0.5 * (d + 1)) / math.sqrt(math.pi) * var ** (0.5 * d)
            d_half = propagation.point_homogeneous(half, var, dvar, d)  # E[|z|^d 1{σz > 0}] over var ± dvar
            value += half * t
            err += half * dt + d_half * (np.abs(t) + dt)
        return value, err + 16 * _EPS * np.abs(value)

    def _cone_pair_along_sources(self, comp: Component, env_l: Array, env_r: Array
                                 ) -> tuple[Array, bounds.Bound] | None:
        """:meth:`pair` of two cone functions each of one source (:meth:`_cone_terms`) with forms of degree at
        most one: ``E[F G] = Σ T_L T_R E[(σz)^d 1{σz > 0} (σ'z')^d' 1{σ'z' > 0}]``, arc-cosine pairs of the two
        sources' reference arguments (piecewise closed forms), their laws' errors propagated as for one-argument
        pairs, the coefficients' through the T's. Each side's law has rank one (``where(g > LN(g), …)``), where
        the joint rule's propagated error of a jump divided by its smallest eigenvalue (strict campaign seed
        550). None where that does not hold (also where a pair of non-identical inputs is colinear)."""
        b1, b2 = self.shape
        sides = self._cone_terms(comp.left, "left", b1), self._cone_terms(comp.right, "right", b2)
        if sides[0] is None or sides[1] is None or any(d > 1 for side in sides for d, *_ in side[0]):
            return None
        (terms_l, rl), (terms_r, rr) = sides
        cov_x, d_x = self.block(comp.left.args, "left")
        cov_y, d_y = self.block(comp.right.args, "right")
        C, dC = self.cross(comp.left.args, comp.right.args)
        a, da = cov_x[:, rl, rl][:, None], d_x[:, rl, rl][:, None]
        b, db = cov_y[:, rr, rr][None, :], d_y[:, rr, rr][None, :]
        c, dc = C[..., rl, rr], dC[..., rl, rr]
        wanted = ~self.identical  # pairs of identical inputs take per-point values
        value, err = np.zeros(self.shape), np.zeros(self.shape)
        for dl, sl, tl, dtl in terms_l:
            for dr, sr, tr, dtr in terms_r:
                phi, psi = (relu if dl else step), (relu if dr else step)
                J, eJ, done = piecewise.pair_expectation(piecewise.of(phi), piecewise.of(psi), a, b, sl * sr * c)
                if not np.all(done | ~wanted):
                    return None  # colinear inputs that are not identical: left to the other rules
                prop = propagation.pair_1d(a, b, sl * sr * c, da, db, dc, moments_1d(phi, a), moments_1d(psi, b))
                J, e = np.where(wanted, J, 0.0), np.where(wanted, eJ + prop, 0.0)
                T = tl[:, None] * tr[None, :]
                dT = dtl[:, None] * np.abs(tr)[None, :] + np.abs(tl)[:, None] * dtr[None, :] + np.outer(dtl, dtr)
                value += T * J
                err += np.abs(T) * e + dT * (np.abs(J) + e)
        return value, bounds.from_dense(err + 16 * _EPS * np.abs(value), env_l, env_r, keep_dense=True)

    def _proportional_point(self, pl: Projection, pr: Projection, a: Array, da: Array, b: Array, db: Array
                            ) -> Value | None:
        """``E[φ(w) ψ(w')]`` at each point when ``w' = λ w`` exactly, ``λ > 0`` per input (two forms of the same
        sources: ``g`` and its LayerNorm ``θ·g``) and ψ (or φ) is positively homogeneous of degree p: then
        ``λ^p E[(φψ)(w)]``, a one-dimensional mean. Their correlation is 1 at every point, where the
        two-form rules' propagated error of a step is ½-Hölder in it: bounds 1.7–2 × the value, refused at
        every rtol (strict campaign seeds 372, 381). None where that does not hold."""
        (fl, el0), (fr, er0) = self.an.source_form(pl), self.an.source_form(pr)
        if not fl or set(fl) != set(fr):
            return None
        if pr.act.homogeneous is not None:
            power, var, dvar = pr.act.homogeneous, a, da
        elif pl.act.homogeneous is not None:
            power, var, dvar = -pl.act.homogeneous, b, db
        else:
            return None
        # λ from each source, with its bound; they must agree (to their bounds) for the forms to be proportional
        lams, dlams = [], []
        for source in fl:
            (kl, el), (kr, er) = self.coefficient(fl[source], "left"), self.coefficient(fr[source], "left")
            kl, kr = np.broadcast_to(kl, var.shape), np.broadcast_to(kr, var.shape)
            el, er = np.abs(el) + el0, np.abs(er) + er0
            if not (np.all(np.abs(kl) > el) and np.all(np.abs(kr) > er) and np.all(kl * kr > 0)):
                return None
            lam, dlam = _ratio_with_bound(kr, er, kl, el)
            lams.append(lam)
            dlams.append(dlam)
        lam, dlam = lams[0], dlams[0]
        for other, d_other in zip(lams[1:], dlams[1:], strict=True):
            if np.any(np.abs(other - lam) > d_other + dlam):
                return None
        if not np.all(dlam < lam):
            return None
        scale = lam**power
        # |λ'^p − λ^p| ≤ |p| max |λ''^(p−1)| dλ over the interval λ ± dλ
        slope = np.maximum((lam - dlam) ** (power - 1.0), (lam + dlam) ** (power - 1.0)) if power else 0.0
        dscale = np.abs(power) * slope * dlam
        h = product_activation(pl.act, pr.act)
        m, e = mean(h, var, self.term_rtol)
        e = e + propagation.point_1d(var, dvar, moments_1d(h, var))
        value = scale * m
        return value, scale * e + dscale * (np.abs(m) + e) + 4 * _EPS * np.abs(value)

    def _conditioned_point(self, comp: Component, fl: FactorTimesForm, fr: FactorTimesForm) -> Value:
        """:meth:`same_point` of ``g · f(w)`` against ``g' · h(w')`` (or ``h(w')``) by conditioning on the
        forms; points where that does not apply (colinear forms of two terms) by the joint engine. The
        propagated error takes ``E[(FG)²] ≤ √(E F⁴ E G⁴)`` as its scale (the product's own moments would
        be a two-dimensional rule per point)."""
        left, right = comp.left, comp.right
        union = _union(left.args, right.args)
        cov, d_cov = self.block(union)
        value, err, done = conditioned.point_pair(_over(fl, left.args, union), _over(fr, right.args, union), cov,
                                                  rtol=self.term_rtol, d_cov=d_cov)
        s_left, s_right = self.get(("pm", left.key))[0], self.get(("pm", right.key))[0]
        stats = {"m2": np.sqrt(s_left["m4"] * s_right["m4"]), "gradnorm2": np.full(cov.shape[0], np.inf)}
        if not done.all():
            rest = np.flatnonzero(~done)
            product = self.an.register(left.atoms + right.atoms)
            value[rest], err[rest], se = joint.point_expectation(
                self.an.joint(product), self.block(product.args)[0][rest], seed=_seed(product.key),
                atol=self.term_rtol * np.sqrt(stats["m2"][rest]))
            self.note_stderr(se)
        return value, err + propagation.point_joint(cov, d_cov, stats)

    def batchnorm(self, m: Monomial, form: BatchNormForm, other: BatchNormForm | None) -> Value:
        """``E[φ(u_b) ψ(u_c)]`` (``other`` the form of ψ(u_c) of the same batch) or ``E φ(u_b)``
        (``other`` None) at each point of a diagonal run, exactly (:mod:`netsor.gaussian.batchnorm`)."""
        cov, d_cov = self.block(form.args)
        centred = np.trace(centred_covariance(cov), axis1=1, axis2=2)
        flat = centred <= 64 * _EPS * np.maximum(np.trace(cov, axis1=1, axis2=2), 1e-300)
        if flat.any():
            owner, bad = self.an.owners.get(m.key), int(np.flatnonzero(flat)[0])
            raise NumericalError(
                f"{owner.name if owner is not None else m.expr.describe()} = "
                f"{(self.an.program.line_of(owner).expr if owner is not None else m.expr).describe()}: the batch "
                f"{', '.join(v.name for v in form.args)} has no spread in the limit at input {bad} "
                "(every example of the batch has the same pre-activation, e.g. equal inputs), so BatchNorm divides by "
                "a zero variance; make the examples of a batch differ")
        return batchnorm_expectation(form.act, None if other is None else other.act, form.index,
                                     0 if other is None else other.index, cov, d_cov,
                                     rtol=self.term_rtol, memo=self.memo)

    def batchnorm_tile(self, comp: Component) -> tuple[Array, bounds.Bound]:
        """A tile term with a BatchNorm output on a side. Between two different inputs (two batches)
        both sides must be BatchNorm forms of positively homogeneous activations: the joint
        expectation of the two batches is a two-dimensional Laplace integral
        (:func:`~netsor.gaussian.batchnorm.batchnorm_cross_expectation`). Entries of identical inputs
        take per-point values (:meth:`Limit._pairs`): zeros here."""
        env_l = np.sqrt(self.point(("pm", comp.left.key), "left")[0]["m2"])
        env_r = np.sqrt(self.point(("pm", comp.right.key), "right")[0]["m2"])
        rows, cols = np.nonzero(~self.identical)
        if not rows.size:
            return np.zeros(self.shape), bounds.zero(env_l, env_r)
        fl, fr = self.an.batchnorm(comp.left), self.an.batchnorm(comp.right)
        if fl is None or fr is None:
            raise UnsupportedError(
                f"E[{comp.left.expr.describe()} · {comp.right.expr.describe()}] between two different program "
                "inputs: BatchNorm couples the examples of one batch, and the expectation engine takes two batches "
                "jointly only when both sides are BatchNorm outputs under positively homogeneous activations "
                "(relu, step, abs, leaky_relu, identity); pass the batches as one input, or simulate the limit: "
                "netsor.limit(..., method='qmc', rtol=1e-3)")
        key = (fl.args, fr.args, fl.act.key, fr.act.key)
        if key not in self.batch_pairs:  # every (b, c) of the two batches at once: one integral grid
            (cov_x, d_x), (cov_y, d_y) = self.block(fl.args, "left"), self.block(fr.args, "right")
            C, dC = self.cross(fl.args, fr.args)
            joint, d_joint = (np.block([[x[rows], c[rows, cols]], [np.swapaxes(c[rows, cols], 1, 2), y[cols]]])
                              for x, y, c in ((cov_x, cov_y, C), (d_x, d_y, dC)))
            self.batch_pairs[key] = batchnorm_cross_expectation(fl.act, fr.act, joint, d_joint,
                                                                rtol=self.term_rtol, memo=self.memo)
        value, err = self.batch_pairs[key]
        out, bound = np.zeros(self.shape), np.zeros(self.shape)
        out[rows, cols], bound[rows, cols] = value[:, fl.index, fr.index], err[:, fl.index, fr.index]
        return out, bounds.from_dense(bound, env_l, env_r, keep_dense=True)

    @functools.cached_property
    def identical(self) -> Array:
        """Mask (b1, b2) of the tile's pairs of identical inputs (they take per-point values)."""
        return _identical_rows(self.X_left, self.X_right)

    @functools.cached_property
    def proportional(self) -> tuple[Array, Array, Array]:
        """``(i, j, s)`` of the tile's inputs with ``X_right[j] = s·X_left[i]`` exactly, any ``s ≠ 0``
        (the limit's pairs, :attr:`Limit._proportional_pairs`, that fall on the tile)."""
        if self._all_proportional is None:
            return _NONE_PROPORTIONAL
        ii, jj, s = self._all_proportional
        (r0, r1, _), (c0, c1, _) = self.rows.indices(len(self.left.X)), self.cols.indices(len(self.right.X))
        keep = (ii >= r0) & (ii < r1) & (jj >= c0) & (jj < c1)
        return ii[keep] - r0, jj[keep] - c0, s[keep]

    def exactly_colinear(self, pl: Projection, pr: Projection) -> tuple[Array, Array, Array] | None:
        """``(i, j, ±1)`` of the tile's entries where one linear form ``w`` sits at exactly proportional
        inputs ``x`` and ``s·x`` and ``w(s·x) = λ w(x)`` draw by draw (all its arguments scale alike,
        :func:`netsor.ir.homogeneity.input_scaling`): correlation exactly ``sign λ``; or None."""
        if self.diag or pl.args != pr.args or not np.array_equal(pl.coefs, pr.coefs):
            return None
        return self.colinear(pl.args)

    def colinear(self, args: tuple[Vector, ...]) -> tuple[Array, Array, Array] | None:
        """``(i, j, ±1)`` of the tile's entries at exactly proportional inputs ``x`` and ``s·x`` where every
        vector of ``args`` is ``λ`` times itself draw by draw, one ``λ`` for all (``sign λ``); or None."""
        ii, jj, s = self.proportional
        if not ii.size:
            return None
        factors = [input_scaling(self.an.program, v, s) for v in args]
        same = np.isfinite(factors[0]) & np.all([f == factors[0] for f in factors], axis=0)
        return (ii[same], jj[same], np.sign(factors[0][same])) if same.any() else None

    def geometry(self, pl: Projection, pr: Projection
                 ) -> tuple[tuple[Array, Array, Array, Array, Array, bounds.Bound, Any], dict[Any, Any] | None]:
        """``a, δa`` (column), ``b, δb`` (row) — the variances of two linear forms at the tile's
        points and their bounds — and their cross-covariance ``c`` with its bound, read-only, and
        the entries ``(i, j)`` where ``c = ±√(ab)`` exactly (:meth:`exactly_colinear`, or None); and
        the store of arc-cosine angles to evaluate kernels with (None for a geometry used once).

        A geometry used by several pair terms (the relu kernel of the forward pass and the step
        kernel of the backward pass of an NTK) is one object until its last use, so that its
        angle is computed once (:func:`netsor.activations.kernels.remembered_angles`); it is
        then dropped, with its angle (memory: the tile plan's, plus one angle per shared geometry).
        """
        key = _geometry_key(pl, pr)
        if key not in self.geometries:
            cov_x, d_x = self.block(pl.args, "left")
            cov_y, d_y = self.block(pr.args, "right")
            a, da = (x[:, None] for x in _form_variance(pl, cov_x, d_x))
            b, db = (x[None, :] for x in _form_variance(pr, cov_y, d_y))
            c, c_bound = self.linear_form_cross(pl, pr)
            c, c_bound = _exactly_zero_rows(a, da, b, db, c, c_bound)
            exact = self.exactly_colinear(pl, pr)
            if exact is not None:  # ρ = ±1 exactly (its rounding-level bound would be ½-Hölder)
                ii, jj, sign = exact
                c = np.array(c, dtype=float)
                c[ii, jj] = sign * np.sqrt(a[ii, 0] * b[0, jj])
                exact = (ii, jj)
            c = c.view()
            for x in (a, da, b, db, c):
                x.flags.writeable = False
            self.geometries[key] = (a, da, b, db, c, c_bound, exact)
        geo = self.geometries[key]
        left = self.geometry_uses.get(key, 1) - 1
        self.geometry_uses[key] = left
        if left > 0:
            return geo, self.angles
        del self.geometries[key]
        angle_key = (id(geo[0]), id(geo[2]), id(geo[4]))
        angle = self.angles.pop(angle_key, None)
        return geo, (None if angle is None else {angle_key: angle})

    def data_free_pair(self, comp: Component) -> tuple[Array, bounds.Bound]:
        """``E[L(U) R(V)]`` of a group that does not read the data (:func:`_data_free_joint`): the
        same expectation at every pair of inputs, the per-point ``E[L(U) R(U)]`` of the left points, with
        its bound. The pair's own law would hold two copies of each vector, whose covariances' rounding
        bounds the χ² rule cannot tell from a law off the copies' common range (a LayerNorm of a bias
        against the bias: strict campaign seed 92)."""
        value, err = self.point(("t", comp.left.key, comp.right.key), "left")
        env_l = np.sqrt(self.point(("pm", comp.left.key), "left")[0]["m2"])
        env_r = np.sqrt(self.point(("pm", comp.right.key), "right")[0]["m2"])
        return np.broadcast_to(value, self.shape), bounds.from_dense(np.broadcast_to(err, self.shape), env_l, env_r)

    def _pair_by_modulus(self, phi: Activation, psi: Activation, a: Array, b: Array, da: Array, db: Array,
                         c: Array, c_bound: bounds.Bound, s_left: dict[str, Array], s_right: dict[str, Array],
                         env_l: Array, env_r: Array, threshold: float, diagonal: bool) -> bounds.Bound:
        """The propagated error of a continuous pair ``E[φ(u) ψ(v)]`` with the covariance's part taken pair
        by pair — from φ's ``kernel_modulus`` where ψ = φ has one (the correlation map's own slope; erf),
        else a bound of the pair's own slope from Hermite coefficients (:func:`propagation.hermite_modulus`;
        tanh, gelu, …), tightened where it stays large by that slope itself (:meth:`_slope_modulus`) — and
        the variances' part per point as in :meth:`_pair_1d_relative`. Where the per-point slope
        ``√(E φ'² E ψ'²)`` — the slope at ρ = 1 — exceeds 1 (the chaotic phase: erf at σ_w = 3, 2.1× a
        layer), it compounded over depth while the pairs' own slopes, at correlations near the stable fixed
        point, contract (a dense pass a layer, only where the per-point bound has grown: see :meth:`pair`)."""
        variances = self._pair_1d_relative(phi, psi, a, b, da, db, bounds.zero(c_bound.left, c_bound.right),
                                           s_left, s_right, env_l, env_r)
        delta = c_bound.array()
        if phi.kernel_modulus is not None and phi.key == psi.key:
            dense = phi.kernel_modulus(a, b, c, delta)
        else:
            dense = propagation.hermite_modulus(a, b, c, delta, s_left, s_right)
            if phi.smooth and psi.smooth and phi.exact_slope and psi.exact_slope:  # φ', ψ' in closed form
                self._slope_modulus(phi, psi, a, b, c, delta, dense, env_l * env_r)
        if diagonal:  # its diagonal entries take per-point values (Limit._pairs)
            np.fill_diagonal(dense, 0.0)
        if variances.dense is not None:
            dense += variances.dense
        change = bounds.compact(dense, env_l, env_r, threshold=threshold)
        return bounds.Bound(variances.eta + change.eta, env_l, env_r, change.dense)

    def _slope_modulus(self, phi: Activation, psi: Activation, a: Array, b: Array, c: Array, delta: Array,
                       dense: Array, envelope: Array) -> None:
        """Tighten ``dense``, a bound of ``|K(c') − K(c)|`` over ``|c' − c| ≤ delta`` for smooth φ, ψ, in place
        from the pair's slope itself: ``K' = E[φ'(u) ψ'(v)]`` computed at c (the engine's pair rule, with its
        error), whose change over the interval is at most ``delta · √(E φ''² E ψ''²)`` (Price's theorem and
        Cauchy–Schwarz at every correlation). A pair integral, taken for the entries whose bound exceeds the
        layers' share of rtol on ``envelope`` and whose correlation is below :data:`SLOPE_CORRELATION` (near ±1
        the slope is the per-point one, and the pair costs a nested rule): chaotic networks whose
        correlations' fixed point is high (tanh at σ_w = 4, σ_b = 2, depth 200: 1e57 → 6.5e-10), where the
        Cauchy–Schwarz remainder of the Hermite bound exceeds 1 while the slope there is below it."""
        a, b, c = np.broadcast_arrays(a, b, c)
        with np.errstate(divide="ignore", invalid="ignore"):
            rho = np.abs(c) / np.sqrt(a * b)
        share = PAIR_SLOPE_SHARE * self.term_rtol * max(1, self.an.nesting)
        todo = (dense > share * envelope) & (rho < SLOPE_CORRELATION)
        if not todo.any():
            return
        slope_phi, slope_psi = derived_activation(phi), derived_activation(psi)
        at_a, at_b, gap = a[todo], b[todo], delta[todo]
        value, err = pair_expectation(slope_phi, slope_psi, at_a, at_b, c[todo], memo=self.memo,
                                      rtol=max(self.term_rtol, SLOPE_RTOL))
        curvature = np.sqrt(moments_1d(slope_phi, at_a)["grad2"] * moments_1d(slope_psi, at_b)["grad2"])
        dense[todo] = np.minimum(dense[todo], gap * (np.abs(value) + err + (1.0 + MOMENT_RTOL) * gap * curvature))

    def _pair_1d_relative(self, phi: Activation, psi: Activation, a: Array, b: Array, da: Array, db: Array,
                          c_bound: bounds.Bound, s_left: dict[str, Array], s_right: dict[str, Array], env_l: Array,
                          env_r: Array) -> bounds.Bound:
        """:func:`~netsor.interpret.propagation.pair_1d_relative` on the tile, with the rows (columns)
        whose form vanishes up to its error (:func:`_vanishing`) bounded by :func:`_from_vanishing`
        as a dense part instead of capping the whole tile's bound."""
        zero_l, zero_r = _vanishing(a, da)[:, 0], _vanishing(b, db)[0]
        if not (zero_l.any() or zero_r.any()):
            return propagation.pair_1d_relative(a, b, da, db, c_bound, s_left, s_right, env_l, env_r)
        da_kept, db_kept = np.where(zero_l[:, None], 0.0, da), np.where(zero_r[None, :], 0.0, db)
        prop = propagation.pair_1d_relative(a, b, da_kept, db_kept, c_bound, s_left, s_right, env_l, env_r)
        dense = np.zeros(self.shape) if prop.dense is None else np.array(prop.dense, dtype=float)
        sides = ((zero_l, phi, da[:, 0], psi, b[0], db[0], s_right["m2"][0], False),
                 (zero_r, psi, db[0], phi, a[:, 0], da[:, 0], s_left["m2"][:, 0], True))
        for zero, act, dvar_own, other, var, dvar, m2, columns in sides:
            own = np.flatnonzero(zero)
            if not own.size:
                continue
            block = _from_vanishing(act, dvar_own[own][:, None], m2[None, :], _mean_change(other, var, dvar)[None, :])
            if columns:
                dense[:, own] += block.T
            else:
                dense[own, :] += block
        return bounds.Bound(prop.eta, env_l, env_r, dense)

    def _conditioned_pair(self, comp: Component, cx: Array, cy: Array, Cf: Array, todo: Array, value: Array,
                          err: Array, d_x: Array, d_y: Array) -> Array:
        """The pairs ``todo`` of a term ``g · f(w)`` against ``g' · h(w')`` (or ``h(w')``), by conditioning
        on the forms (:mod:`netsor.gaussian.conditioned`: one-dimensional rules), into ``value`` and
        ``err``; returns the mask of those left to the joint engine (all of them for other terms, and
        for piecewise-linear ones, whose cone moments are exact)."""
        forms = self.an.conditioned(comp)
        if forms is None:
            return np.ones(todo.size, dtype=bool)
        v, e, done = conditioned.pair_expectation(*forms, cx, cy, Cf, rtol=self.term_rtol, memo=self.memo, d_x=d_x,
                                                  d_y=d_y)
        value[todo[done]], err[todo[done]] = v[done], e[done]
        return ~done

    def angle_pair(self, g: Vector, levels: tuple[tuple[float, float], tuple[float, float]], a: Array, da: Array,
                   b: Array, db: Array, env_l: Array, env_r: Array) -> tuple[Array, bounds.Bound] | None:
        """``E[φ(k·g(x)) ψ(k'·g(x'))]`` of functions of degree 0 with known levels (:meth:`Analysis.angle_pair`):
        ``A + Bθ``, linear in the angle θ of the two points (each sign orthant of the pair has a probability
        linear in θ; :func:`~netsor.activations.distance_kernels.angle_pair_line`; ``levels``: both sides' values
        where the left form is positive and negative, :meth:`Analysis.step_like_pair`). θ is ``g``'s
        (:class:`PairAngle`), with an interval that holds the true angle; the bound is ``|B|`` times its width.
        None where a variance ``a, b`` of the form may vanish within its bound (the covariance rules take those)."""
        if np.any(a <= da) or np.any(b <= db):
            return None
        ang = self.get(("A", g))[0]
        theta = ang.theta
        at_one, slope = distance_kernels.angle_pair_line(*levels)
        value = at_one + slope * theta
        # the rounding of A + Bθ, and of A and B (from levels rounded once)
        dense = abs(slope) * ang.width() + 4 * _EPS * np.abs(value) + 8 * _EPS * (abs(at_one) + abs(slope) * np.pi)
        if self.left is self.right and self.rows == self.cols:  # its diagonal takes per-point values
            np.fill_diagonal(dense, 0.0)
        return value, bounds.compact(dense, env_l, env_r, threshold=COMPACT_SHARE * self.term_rtol)

    def near_parallel_pair(self, rule: tuple[Any, ...], a: Array, da: Array, b: Array, db: Array, env_l: Array,
                           env_r: Array) -> tuple[Array, bounds.Bound] | None:
        """A pair of :meth:`Analysis.near_parallel_pair` from the angle of its G-vector (:class:`PairAngle`) at the
        entries whose angle is small (:data:`~netsor.gaussian.near_parallel.SMALL_ANGLE`; an infinite bound
        elsewhere: the covariance rules take those), given the two forms' variances ``a, δa`` (column) and
        ``b, δb`` (row). Steps: :func:`~netsor.gaussian.near_parallel.step_pair`, whose slope in the angle is
        bounded where the covariance's is ``1/(2π sin θ)``. One continuous piecewise-linear φ:
        ``E[φ(u) φ(v)] = (E φ(u)² + E φ(v)² − E(φ(u) − φ(v))²)/2``, the distance by
        :func:`~netsor.gaussian.near_parallel.kinked_distance` (accurate relative to itself), each second moment at
        one point (closed form), whose change in its variance is at most ``√(E φ²/a) sup|φ'|`` (Cauchy–Schwarz), with
        ``E φ² ≤ (|φ(0)| + sup|φ'| √a)²`` over the box — where the closed form from ``ρ`` is ~1/sin θ in ρ's
        rounding. None where a variance may vanish within its bound."""
        if np.any(a <= da) or np.any(b <= db):
            return None
        ang = self.get(("A", rule[1]))[0]
        small = np.broadcast_to(ang.hi <= near_parallel.SMALL_ANGLE, self.shape)
        # nearly anti-parallel (an odd network): the pair of (u, −v), whose angle π − θ is small, read back
        far = np.broadcast_to(ang.lo >= np.pi - near_parallel.SMALL_ANGLE, self.shape)
        if not np.any(small) and not np.any(far):
            return None
        value, dense = np.zeros(self.shape), np.full(self.shape, np.inf)
        filled = False
        for where, reflect in ((small, False), (far, True)):
            if np.any(where):
                at = [np.broadcast_to(x, self.shape)[where] for x in (a, da, b, db)]
                near = distance_kernels.Angle(*(np.broadcast_to(x, self.shape)[where]
                                                for x in (ang.theta, ang.lo, ang.hi)))
                found = self._near_parallel_values(rule, at, distance_kernels.reflected(near) if reflect else near,
                                                   reflect)
                if found is not None:
                    value[where], dense[where] = found
                    filled = True
        if not filled:
            return None
        if self.left is self.right and self.rows == self.cols:  # its diagonal takes per-point values
            np.fill_diagonal(dense, 0.0)
        return value, bounds.from_dense(dense, env_l, env_r)

    @staticmethod
    def _near_parallel_values(rule: tuple[Any, ...], at: list[Array], near: distance_kernels.Angle, reflect: bool
                              ) -> tuple[Array, Array] | None:
        """:meth:`near_parallel_pair` at selected entries (``at``: ``a, δa, b, δb`` there) whose angle ``near`` is
        small; ``reflect``: ``near`` is that of ``(u, −v)``, the right function read as ``ψ(−·)`` — steps by their
        reflection, one continuous piecewise-linear φ where it is even or odd up to ``φ(0)`` (None otherwise)."""
        if rule[0] == "steps":
            return near_parallel.step_pair(rule[2], rule[3].scaled(-1.0) if reflect else rule[3], *at, near)
        if rule[0] == "jumped":
            return None if reflect else near_parallel.jumped_pair(*rule[2:], *at, near)
        slopes, pieces = rule[2], rule[3]
        at_zero = near_parallel.value_at_zero(pieces)
        # E[φ(u)φ(v)] = ±E[φ(u)φ(−v)] + (1 ∓ 1)φ(0)²: even φ (φ' odd) or odd up to φ(0) (φ' even)
        sign = 1.0
        if reflect:
            if slopes.scaled(-1.0) == slopes.times(-1.0):
                sign = 1.0
            elif slopes.scaled(-1.0) == slopes:
                sign = -1.0
            else:
                return None
        D, dD = near_parallel.kinked_distance(slopes, *at, near)
        halves = []
        for var, dvar in ((at[0], at[1]), (at[2], at[3])):
            m2, m2_err, _ = piecewise.pair_expectation(pieces, pieces, var, var, 1.0, colinear=True)
            top = (abs(at_zero) + slopes.largest * np.sqrt(var + dvar)) * slopes.largest / np.sqrt(var - dvar)
            halves.append((m2, m2_err + top * dvar))
        (ma, ea), (mb, eb) = halves
        if sign > 0:
            got = 0.5 * (ma + mb - D)
        else:  # φ = φ₀ + φ(0), φ₀ odd: E[φ₀(u)φ₀(v)] = −(E φ₀(u)² + E φ₀(v)² − D)/2, E φ₀² = E φ² − φ(0)²
            got = 0.5 * (D - ma - mb) + 2.0 * at_zero * at_zero
        err = 0.5 * (ea + eb + dD) + 4 * _EPS * (ma + mb + D + 4.0 * at_zero * at_zero)
        return got, err

    def pair(self, comp: Component) -> tuple[Array, bounds.Bound]:
        """``E[L(U at left points) R(V at right points)]`` on the tile, with its bound on the envelope
        ``√(E L²) ⊗ √(E R²)``."""
        an = self.an
        left, right = comp.left, comp.right
        if an.batchnorm(left) is not None or an.batchnorm(right) is not None:
            return self.batchnorm_tile(comp)
        s_left = self.point(("pm", left.key), "left")[0]
        s_right = self.point(("pm", right.key), "right")[0]
        env_l, env_r = np.sqrt(s_left["m2"]), np.sqrt(s_right["m2"])
        pl, pr = an.projection(left), an.projection(right)
        if _linear_pair(pl, pr):
            # E[UV] of two linear forms is their covariance, with its own bound: no kernel and no
            # propagation of the variances' errors (the backward vectors of an NTK: a third of its pairs)
            assert pl is not None and pr is not None
            value, c_bound = self.linear_form_cross(pl, pr)
            value = value.view()
            value.flags.writeable = False  # may be a covariance of the run itself
            return value, c_bound.to(env_l, env_r)
        if pl is not None and pr is not None:
            (a, da, b, db, c, c_bound, exact), angles = self.geometry(pl, pr)
            step_like = an.step_like_pair(comp) if self.distances else None
            by_angle = (None if step_like is None or step_like[0] is None
                        else self.angle_pair(step_like[0], step_like[1:], a, da, b, db, env_l, env_r))
            if by_angle is None and self.distances and (rule := an.near_parallel_pair(comp)) is not None:
                by_angle = self.near_parallel_pair(rule, a, da, b, db, env_l, env_r)
            phi, psi = _located(pl.act, a, b), _located(pr.act, a, b)  # continuity is known once located
            with remembered_angles(angles):
                # beside a rule from the angle, per entry: one nearly parallel pair's bound must not stand for all
                value, err = pair_expectation(phi, psi, a, b, c, memo=self.memo, rtol=self.term_rtol,
                                              errors="relative" if by_angle is None else True,
                                              envelope=(env_l, env_r))
                supplement = known_supplement(a, b, c)
            # a closed form's error is rounding: 32 eps on the envelope (the engine's own bound)
            if by_angle is None or err is None:
                own = bounds.Bound(32 * _EPS if err is None else err, env_l, env_r)
            else:
                own = bounds.from_dense(err, env_l, env_r, keep_dense=True)
            diagonal = self.left is self.right and self.rows == self.cols
            if np.isinf(own.eta):
                # an error on an envelope of 0 (a second moment that underflowed, e^(−130)): no relative bound
                # holds, the absolute one does — kept dense (it was an infinite eta: the entry refused)
                with remembered_angles(angles):
                    _, dense_err = pair_expectation(phi, psi, a, b, c, memo=self.memo, rtol=self.term_rtol)
                # Cauchy–Schwarz where the envelope is 0: |E[LR]| ≤ √(E L² E R²) = 0, so the error is |value|
                # (a vector that vanishes in the limit: |g − s·g| with a scalar s = 1 has the NNGP 0, bound 0)
                dense_err = np.where(env_l * env_r == 0.0, np.minimum(dense_err, np.abs(value)), dense_err)
                if diagonal:
                    # its diagonal takes per-point values: a rule that fails at ρ = 1 (jumps at every integer,
                    # np.floor: inf there) must not stand for the tile (every NTK entry of a floor MLP refused at
                    # 2× its value, the NNGP alone kept it dense)
                    dense_err = np.array(np.broadcast_to(dense_err, self.shape))
                    np.fill_diagonal(dense_err, 0.0)
                own = bounds.from_dense(dense_err, env_l, env_r)
            threshold = COMPACT_SHARE * self.term_rtol
            if phi.continuous and psi.continuous:
                prop = self._pair_1d_relative(phi, psi, a, b, da, db, c_bound, s_left, s_right, env_l, env_r)
                # erf: its own slope where the bound is worth compacting; any pair: a bound of its own slope
                # where the bound has grown towards rtol (a dense pass)
                exact_modulus = phi.kernel_modulus is not None and phi.key == psi.key and prop.eta > threshold
                if exact_modulus or prop.largest() > PAIR_SLOPE_SHARE * self.term_rtol * max(1, an.nesting):
                    sharper = self._pair_by_modulus(phi, psi, a, b, da, db, c, c_bound, s_left, s_right, env_l,
                                                    env_r, threshold, diagonal)
                    if sharper.largest() < prop.largest():  # never looser, never NaN
                        prop = sharper
            elif (phi.kernel_modulus is not None and phi.homogeneous == 0 and phi.key == psi.key
                  and (eta := propagation.jump_relative(phi.kernel_modulus, a, b, da, db, c, c_bound, env_l,
                                                        env_r, diagonal, supplement)) <= threshold):
                prop = bounds.Bound(eta, env_l, env_r)  # O(B) where no pair is near colinear
            else:
                dc = c_bound.array()
                # entries the angle's rule bounds within the compaction threshold are not corners of the Stein
                # change (nearly colinear corners cost the nested 2-D rule: 73 of 94 s for 100 near duplicates
                # among 200 hard_tanh inputs); the covariance route is then unbounded there (inf), never taken
                covered = (None if by_angle is None else
                           by_angle[1].array() <= threshold * np.broadcast_to(env_l * env_r, self.shape))
                skip = np.eye(*self.shape, dtype=bool) if diagonal else None
                if covered is not None:
                    skip = covered if skip is None else covered | skip
                dense = _closed_form_change(phi, psi, a, da, b, db, c, dc, value, skip)
                if dense is None:
                    dense = propagation.pair_1d(a, b, c, da, db, dc, s_left, s_right)
                    loose = dense > threshold * np.broadcast_to(env_l * env_r, self.shape)
                    if skip is not None:
                        loose &= ~skip
                    if np.any(loose):  # the χ² bound's 1/(1 − ρ) near colinear: bounds that stay finite there
                        dense = np.array(np.broadcast_to(dense, self.shape))
                        at = [np.broadcast_to(x, self.shape)[loose] for x in (a, da, b, db, c, dc)]
                        by_angle_change = _change_by_angle(phi, psi, *at)
                        dense[loose] = np.minimum(dense[loose], by_angle_change)
                        # the change itself (four nested quadratures an entry, ~60 ms near colinear points) only
                        # where the angle's rule has no bound (values with an error — a central difference —, kinks
                        # not located, values not finite): where it has one, the two measured within 2× of each
                        # other, and this evaluation cost 60 % of the time (relu + 0.1 tanh, inputs 1e-3 apart) and
                        # changed no refusal in a 60-case campaign (depth 3, inputs 3e-6 … 1e-4 apart)
                        no_angle_bound = np.zeros(self.shape, dtype=bool)
                        no_angle_bound[loose] = ~np.isfinite(by_angle_change)
                        still = no_angle_bound & (dense > threshold * np.broadcast_to(env_l * env_r, self.shape))
                        if np.any(still):
                            at = [np.broadcast_to(x, self.shape)[still] for x in (a, da, b, db, c, dc)]
                            dense[still] = np.minimum(dense[still], _change_along_axes(
                                phi, psi, *at, memo=self.memo, rtol=self.term_rtol))
                if covered is not None:
                    dense = np.where(covered & ~np.eye(*self.shape, dtype=bool) if diagonal else covered, np.inf,
                                     dense)
                if exact is not None and phi.homogeneous is not None and psi.homogeneous is not None:
                    dense = _colinear_change(dense, value, exact, a, da, b, db, phi.homogeneous, psi.homogeneous)
                if diagonal:
                    # a diagonal tile: its diagonal entries take per-point values (Limit._pairs)
                    dense = dense.copy()
                    np.fill_diagonal(dense, 0.0)
                zero_l, zero_r = _exact_zero(a, da), _exact_zero(b, db)
                if zero_l.any() or zero_r.any():  # a form exactly 0 at a point: its pairs are exact (modulus NaN)
                    dense = np.where(zero_l | zero_r, 0.0, dense)
                # beside a rule from the angle, per entry (as the own bound above): the nearly parallel pairs' slope
                # would stand for every pair's
                prop = (bounds.compact(dense, env_l, env_r, threshold=threshold) if by_angle is None
                        else bounds.from_dense(dense, env_l, env_r, keep_dense=True))
            by_covariance = value, bounds.Bound(own.eta + prop.eta, env_l, env_r, _sum_dense(own.dense, prop.dense))
            if by_angle is None:
                return by_covariance
            # both enclose the pair: the angle's where its distance was carried, the covariance's where it
            # was not (a + b − 2c: inputs proportional up to rounding in a bias-free network)
            return _tighter(by_angle, by_covariance, env_l, env_r, threshold)
        along = self._cone_pair_along_sources(comp, env_l, env_r)
        if along is not None:
            return along
        cov_x, d_x = self.block(left.args, "left")
        cov_y, d_y = self.block(right.args, "right")
        C, dC = self.cross(left.args, right.args)
        b1, b2 = self.shape
        # Pairs of two identical inputs are per-point quantities: their entries are replaced by
        # per-point values (Limit._pairs), so the expensive joint engine skips them here. On a
        # diagonal tile of a symmetric term (same monomial on both sides) only the upper triangle
        # is computed, and mirrored.
        mirror = self.left is self.right and self.rows == self.cols and left.key == right.key
        wanted = ~self.identical
        if mirror:
            wanted &= np.triu(np.ones(self.shape, dtype=bool), 1)
        todo = np.flatnonzero(wanted.ravel())
        rows, cols = np.divmod(todo, b2)
        cx, cy = cov_x[rows], cov_y[cols]
        Cf, dCf = C[rows, cols], dC[rows, cols]
        stats_l = {k: v[rows, 0] for k, v in s_left.items()}
        stats_r = {k: v[0, cols] for k, v in s_right.items()}
        value, err = np.zeros(b1 * b2), np.zeros(b1 * b2)
        if todo.size:  # none on a tile of identical inputs (one symbolic point of a data-free program)
            rest = self._conditioned_pair(comp, cx, cy, Cf, todo, value, err, d_x[rows], d_y[cols])
            if rest.any():
                value[todo[rest]], err[todo[rest]], se = joint.pair_expectation(
                    an.joint(left), an.joint(right), cx[rest], cy[rest], Cf[rest], rtol=self.term_rtol,
                    memo=self.tables, seed=_seed((left.key, right.key)),
                    scale=np.sqrt(stats_l["m2"][rest] * stats_r["m2"][rest]))
                self.note_stderr(se)
            # a data-free argument on both sides is one variable at the two points: its copies are one
            # coordinate of the pair's law, whose errors cannot separate them
            shared = [(i, j) for i, u in enumerate(left.args) for j, v in enumerate(right.args)
                      if u is v and u in an.data_free]
            err[todo] += propagation.pair_joint(cov_x, cov_y, Cf, d_x, d_y, dCf, stats_l, stats_r, rows, cols,
                                                shared)
        value, err = value.reshape(self.shape), err.reshape(self.shape)
        if mirror:  # the lower triangle is zero
            value, err = value + value.T, err + err.T
        return value, bounds.from_dense(err, env_l, env_r, keep_dense=True)


def _tighter(first: tuple[Array, bounds.Bound], second: tuple[Array, bounds.Bound], env_l: Array, env_r: Array,
             threshold: float) -> tuple[Array, bounds.Bound]:
    """Two enclosures of one quantity, value and bound: at each entry the one with the smaller bound."""
    e1, e2 = first[1].array(), second[1].array()
    take = e1 <= e2
    return np.where(take, first[0], second[0]), bounds.compact(np.where(take, e1, e2), env_l, env_r, threshold)


def _geometry_key(pl: Projection, pr: Projection) -> Hashable:
    return (pl.args, pl.coefs.tobytes(), pr.args, pr.coefs.tobytes())


def _pair_terms(an: Analysis, plan: Plan) -> Iterator[tuple[Component, Projection | None, Projection | None]]:
    """Each two-sided independent group of each pair term of a tile plan, with the projections of
    its sides (None for a side that is not a function of one linear form)."""
    for k in plan.order:
        if k[0] != "t":
            continue
        for comp in an.components(k[1], k[2], False):
            if comp.left is not None and comp.right is not None:
                yield comp, an.projection(comp.left), an.projection(comp.right)


def _geometry_uses(an: Analysis, plan: Plan) -> dict[Hashable, int]:
    """How many pair terms of a tile plan use each pair of linear forms (:meth:`Run.geometry`)."""
    uses: dict[Hashable, int] = {}
    for comp, pl, pr in _pair_terms(an, plan):
        if (pl is not None and pr is not None and not _linear_pair(pl, pr)
                and not (an.batchnorm(comp.left) or an.batchnorm(comp.right))):
            key = _geometry_key(pl, pr)
            uses[key] = uses.get(key, 0) + 1
    return uses


def _linear_pair(pl: Projection | None, pr: Projection | None) -> bool:
    """Both sides are linear forms: their pair expectation is their covariance (no geometry)."""
    return pl is not None and pr is not None and pl.act.name == "identity" == pr.act.name


def _identical_rows(A: Array, B: Array) -> Array:
    """(len(A), len(B)) mask of pairs of byte-identical input rows: the pairs that take per-point
    values (:attr:`Limit._identical_pairs`, the same definition — a row equal in value but with
    ``-0.0`` for ``0.0`` is not one of them, so its tile entry must be computed)."""
    mask = np.zeros((A.shape[0], B.shape[0]), dtype=bool)
    mask[identical_rows(A, B)] = True
    return mask


def _embed(proj: Projection, args: tuple[Vector, ...]) -> Array:
    """The coefficients of a projection over a larger argument list."""
    return _embedded(proj.args, proj.coefs, args)


def _embedded(args: tuple[Vector, ...], coefs: Array, union: tuple[Vector, ...]) -> Array:
    """Coefficients ``coefs`` over ``args`` written over the longer argument list ``union``."""
    out = np.zeros(len(union))
    for v, c in zip(args, coefs, strict=True):
        out[union.index(v)] += c
    return out


def _quadratic(u: Array, cov: Array, d_cov: Array, v: Array) -> tuple[Array, Array]:
    """``uᵀ Σ v`` per point and its error bound ``|u|ᵀ δΣ |v|``."""
    return np.einsum("i,pij,j->p", u, cov, v), np.einsum("i,pij,j->p", np.abs(u), d_cov, np.abs(v))


def _rows(stats: dict[str, Array]) -> dict[str, Array]:
    """Per-point stats broadcast as a column (b1, 1, ...) back to (b1, ...)."""
    return {k: v[:, 0] for k, v in stats.items()}


def _cols(stats: dict[str, Array]) -> dict[str, Array]:
    return {k: v[0] for k, v in stats.items()}


# ------------------------------------------------------------------ public API
_BLAS = ThreadpoolController()


def _one_blas_thread(method: Callable[..., Any]) -> Callable[..., Any]:
    """Run with single-threaded BLAS: the tiles are spread over our own threads, and BLAS
    threads on top of them (or on a busy machine) make OpenBLAS spin — measured 10–20× slower; and
    once more at tighter shares of the tolerance where the result missed it (:meth:`Limit.retried`)."""

    @functools.wraps(method)
    def wrapped(self: Limit, *args: Any, **kwargs: Any) -> Any:
        if self.program.version != self.version:
            raise ProgramError(f"{self.program.name!r} changed after netsor.limit(...) was built on it (lines or "
                               f"readouts were added); call netsor.limit(...) again for the new program")
        with _BLAS.limit(limits=1, user_api="blas"):
            return self.retried(lambda: method(self, *args, **kwargs))

    return wrapped


def _not_a_scalar(u: Vector, method: str) -> None:
    if u.kind == "scalar":
        what = "covariance" if method == "cov" else "variance"
        raise ProgramError(f"{u.name} is a scalar (a NetsorK moment): its limit is deterministic, it has no {what}; "
                           f"ask Limit.scalar({u.name}) for its value")


def _closed_form_change(phi: Activation, psi: Activation, a: Array, da: Array, b: Array, db: Array, c: Array,
                        dc: Array, value: Array, skip: Array | None = None) -> Array | None:
    """The exact change of a closed-form pair ``E[φ(u) ψ(v)]`` over the errors of its covariance — φ's
    own kernel (its modulus where it has one), or Stein's form of the identity against ψ — or None
    when the pair has no closed form. Unlike the χ² bound it stays finite at colinear forms. ``skip``
    (the shape of ``c``): entries whose change is not wanted, which Stein's corners leave out (0 there;
    :func:`_stein_change`) — the kernels' own changes cost a few array passes and take every entry."""
    if same_kernel(phi, psi):
        delta = dc + np.abs(c) * 0.5 * (da / np.maximum(a, 1e-300) + db / np.maximum(b, 1e-300))
        if phi.kernel_modulus is not None:
            return phi.kernel_modulus(a, b, c, delta)
        limit = np.sqrt(a * b)
        return np.maximum(np.abs(phi.kernel(a, b, np.minimum(c + delta, limit)) - value),
                          np.abs(phi.kernel(a, b, np.maximum(c - delta, -limit)) - value))
    if is_elementary(phi, psi):  # the identity against a discontinuous ψ, or two piecewise-linear functions
        return _stein_change(phi, psi, a, da, b, db, c, dc, value, skip)
    return None


def _stein_change(phi: Activation, psi: Activation, a: Array, da: Array, b: Array, db: Array, c: Array, dc: Array,
                  value: Array, skip: Array | None = None) -> Array:
    """The exact change of ``E[u ψ(v)] = (c/b) E[v ψ(v)]`` (or of ``E[φ(u) v]``) over the errors of its
    covariance: the largest difference at the corners of the box ``b ± δb, c ± δc`` (``a ± δa``), the
    expectation being linear in ``c`` and, over a box of a few ulps, monotone in the variance. Piecewise-
    linear pairs (steps with offsets) take the corners of ``a ± δa, b ± δb, c ± δc``: their closed forms are
    smooth in the covariance off colinear pairs, so over such a box monotone too, and an orthant grows with ρ up
    to colinear (the right variance's error was left out: ``E[1{u > 0.5} 1{v > 0.7}]`` with ``δb = 1e-3 b`` changes
    by 6.8e-7, its bound was 0). (The pair's own kernel — the identity's ``c``, or the step kernel's modulus — was
    used before: 0.3 of the kernel for ``E[g step(g')]`` on a tile, and below the true change elsewhere.)"""
    # E[u ψ(v)] does not depend on Var u, nor E[φ(u) v] on Var v
    lefts = [a] if phi.name == "identity" else [np.maximum(a - da, 0.0), a + da]
    rights = [b] if psi.name == "identity" else [np.maximum(b - db, 0.0), b + db]
    if skip is not None:
        # a diagonal tile's points with themselves take per-point values: their corners, a hair off colinear,
        # cost the nested 2-D rule (elu's deep NTK: 16 s of 17 on 40 inputs), so they are taken uncorrelated
        c, dc = np.where(skip, 0.0, c), np.where(skip, 0.0, dc)
    change = np.zeros_like(value)
    for a2 in lefts:
        for b2 in rights:
            limit = np.sqrt(a2 * b2)
            for sign_c in (-1.0, 1.0):
                corner, _ = pair_expectation(phi, psi, a2, b2, np.clip(c + sign_c * dc, -limit, limit),
                                             errors=False)
                np.maximum(change, np.abs(corner - value), out=change)
    return change if skip is None else np.where(skip, 0.0, change)


#: :func:`_change_along_axes` takes a box whose extent in ρ is at most this share of ``1 − ρ²``.
AXES_REACH = 1e-2


def _change_along_axes(phi: Activation, psi: Activation, a: Array, da: Array, b: Array, db: Array, c: Array,
                       dc: Array, *, memo: CoefficientMemo | None = None, rtol: float) -> Array:
    """A bound of the change of ``E[φ(u) ψ(v)]`` over the box ``a ± δa, b ± δb, c ± δc`` (1-D arrays) from the
    expectation at its centre and at one end of each of its three axes, each with its error: twice the sum of the
    three changes. For discontinuous φ, ψ (an NTK's ``step + 0.1 tanh'``) whose pair has no closed form, where the
    χ² bound grows as ``1/(1 − ρ)`` towards colinear points (inputs 1e-3 apart: 3e-7 of the kernel) while the true
    slope ``E[φ'(u) ψ'(v)]`` — the jumps' joint density ``≤ 1/(2π√(ab) sin θ)`` and bounded cross terms — grows as
    ``1/sin θ`` only. The expectation is smooth in the box off colinear points; where the box's extent in ρ (its
    whitened size) is at most :data:`AXES_REACH` of ``1 − ρ²`` (the scale on which that slope changes), it is linear
    over the box to that share: it changes as much towards either end of an axis, and the factor 2 covers the
    curvature. Elsewhere: inf. Each evaluation at nearly colinear points is a nested quadrature (~30 ms an entry), so
    :meth:`Run.pair` takes it only where :func:`_change_by_angle` has no bound (:func:`_jumps_and_sups` is None)."""
    root = np.sqrt(a * b)
    gap = (root - np.abs(c)) * (root + np.abs(c)) / (root * root)  # 1 − ρ², without cancelling 1 − ρ
    reach = (dc + 0.5 * np.abs(c) * (da / a + db / b)) / root
    ok = (a > da) & (b > db) & (reach <= AXES_REACH * gap)
    change = np.full(a.shape, np.inf)
    if not np.any(ok):
        return change
    a, da, b, db, c, dc = (x[ok] for x in (a, da, b, db, c, dc))
    centre, centre_err = pair_expectation(phi, psi, a, b, c, memo=memo, rtol=rtol)
    total = np.array(3 * centre_err)
    for end_point in ((a + da, b, c), (a, b + db, c), (a, b, c + dc)):
        end, end_err = pair_expectation(phi, psi, *end_point, memo=memo, rtol=rtol)
        total += np.abs(end - centre) + end_err
    change[ok] = 2.0 * total
    return change


def _jumps_and_sups(act: Activation, reach: float) -> tuple[Array, Array, float, float] | None:
    """``(kinks, |jumps|, sup |φ|, sup |φ'|)`` of a located φ on ``|x| ≤ reach``: φ's jumps at its kinks, and the sups
    of φ and of its slope off the kinks (φ's continuous part), on a grid of 20 001 points (less those within 1e-6 of
    a kink) padded by the largest step between neighbours not across a kink (a function that varies within a grid
    step by more than between steps is not met: φ here is φ' of a traced or registered activation). None where φ's
    values are not finite, or are approximate (``value_error``), or its kinks are not located."""
    if act.value_error is not None or not act.kinks_known:
        return None
    kinks = np.sort(np.array([k for k in act.kinks if np.isfinite(k)], dtype=float))
    x = np.linspace(-reach, reach, 20001)
    if kinks.size:
        # off the kinks: a user's φ differentiated numerically has slope ~jump/h at a jump (0.2/h for relu + 0.2·step
        # + 0.1·tanh, on the grid point x = 0: its bound 10⁵–10¹⁰ times the change)
        distance = np.abs(x[:, None] - kinks[None, :]) / np.maximum(1.0, np.abs(kinks))[None, :]
        x = x[np.min(distance, axis=1) > 1e-6]
    with np.errstate(all="ignore"):
        values, slopes = np.asarray(act.fn(x), dtype=float), np.asarray(act.deriv(x), dtype=float)
    if not (np.all(np.isfinite(values)) and np.all(np.isfinite(slopes))):
        return None
    values, slopes = np.broadcast_to(values, x.shape), np.broadcast_to(slopes, x.shape)
    # the pad is the largest step between neighbours off the kinks: a step across a kink is the jump itself (it
    # doubled sup |φ| of a step)
    across = np.zeros(x.size - 1, dtype=bool)
    at = np.searchsorted(x, kinks)
    across[np.clip(np.concatenate([at - 1, at]), 0, x.size - 2)] = True
    sup = float(np.max(np.abs(values)) + np.max(np.abs(np.diff(values))[~across], initial=0.0))
    slope = float(np.max(np.abs(slopes)) + np.max(np.abs(np.diff(slopes))[~across], initial=0.0))
    offset = 1e-9 * np.maximum(1.0, np.abs(kinks))
    with np.errstate(all="ignore"):
        above, below = (np.asarray(act.fn(kinks + sign * offset), dtype=float) for sign in (1.0, -1.0))
        jumps = np.abs(above - below)
    if not np.all(np.isfinite(jumps)):
        return None
    return kinks, jumps + 2.0 * offset * slope, sup, slope  # the continuous part's change over ±offset


def _jump_exponent(k: Array, m: Array, a_lo: Array, a_hi: Array, b_lo: Array, b_hi: Array, rho_lo: Array,
                   rho_hi: Array) -> Array:
    """A lower bound, over the box, of the exponent ``Q = (x² − 2ρxy + y²)/(1 − ρ²)`` of the joint density of two
    standard normals with correlation ρ at ``x = k/√a``, ``y = m/√b`` (entries × k × m): the largest of ``max(x², y²)``
    (Q is at least either square), ``((x − y)² + 2(1 − ρ)xy)/(1 − ρ²)`` and ``((x + y)² − 2(1 + ρ)xy)/(1 − ρ²)``,
    each at its least over the intervals of x, y and ρ. The second is large near ρ = 1 unless the jumps' lines
    meet (``k/√a = m/√b``): jumps that do not line up do not pile up towards colinear points."""
    def interval(t: Array, lo: Array, hi: Array) -> tuple[Array, Array]:
        ends = (t[None, :] / np.sqrt(lo[:, None]), t[None, :] / np.sqrt(hi[:, None]))
        return np.minimum(*ends), np.maximum(*ends)

    (x_lo, x_hi), (y_lo, y_hi) = interval(k, a_lo, a_hi), interval(m, b_lo, b_hi)
    x_lo, x_hi, y_lo, y_hi = x_lo[:, :, None], x_hi[:, :, None], y_lo[:, None, :], y_hi[:, None, :]
    rho_lo, rho_hi = rho_lo[:, None, None], rho_hi[:, None, None]
    off_zero = lambda lo, hi: np.maximum(0.0, np.maximum(lo, -hi)) ** 2  # noqa: E731 (least square on [lo, hi])
    corners = np.stack([x_lo * y_lo, x_lo * y_hi, x_hi * y_lo, x_hi * y_hi])
    xy_min, xy_max = corners.min(axis=0), corners.max(axis=0)
    least_abs_rho = np.where((rho_lo <= 0) & (rho_hi >= 0), 0.0, np.minimum(np.abs(rho_lo), np.abs(rho_hi)))
    widest = (1.0 - least_abs_rho) * (1.0 + least_abs_rho)  # the largest 1 − ρ² over the interval
    apart = off_zero(x_lo - y_hi, x_hi - y_lo)  # least (x − y)²
    opposite = off_zero(x_lo + y_lo, x_hi + y_hi)  # least (x + y)²
    near_one = apart + 2.0 * xy_min * np.where(xy_min < 0, 1.0 - rho_lo, 1.0 - rho_hi)
    near_minus_one = opposite - 2.0 * xy_max * np.where(xy_max > 0, 1.0 + rho_hi, 1.0 + rho_lo)
    with np.errstate(divide="ignore", invalid="ignore"):
        by_line = np.maximum(np.maximum(near_one, near_minus_one), 0.0) / widest
    by_line = np.where(widest > 0, by_line, np.inf)
    return np.maximum(np.maximum(off_zero(x_lo, x_hi), off_zero(y_lo, y_hi)), by_line)


def _change_by_angle(phi: Activation, psi: Activation, a: Array, da: Array, b: Array, db: Array, c: Array,
                     dc: Array) -> Array:
    """A bound of the change of ``E[φ(u) ψ(v)]`` over the box ``a ± δa, b ± δb, c ± δc`` (1-D arrays) for bounded φ,
    ψ with jumps ``J_k`` at kinks ``k`` (``L_l`` at ``l``) and continuous parts of slope at most ``R_φ``, ``R_ψ``
    (:func:`_jumps_and_sups`): in the variances and the angle θ (``c = √(ab) cos θ``), by the largest derivatives
    over the box times its extent. Price's theorem gives ``∂/∂θ = −√(ab) sin θ E[φ'(u) ψ'(v)]``, and of
    ``E[φ'ψ']`` the jumps' part is ``Σ J_k L_l p(k, l)`` with the joint density
    ``p(k, l) = e^{−Q/2} / (2π√(ab) sin θ)`` (Q at least :func:`_jump_exponent` over the box), so
    ``|∂/∂θ| ≤ Σ |J_k L_l| e^{−Q/2}/(2π) + √(ab) sin θ (Σ |J_k| p_a(k) R_ψ + Σ |L_l| p_b(l) R_φ + R_φ R_ψ)`` — finite
    up to colinear points, where the χ² bound grows as ``1/(1 − ρ)``. In a variance,
    ``∂/∂a = E[u φ'(u) ψ(v)]/(2a) ≤ sup|ψ| (Σ |J_k k| p_a(k) + R_φ √(2a/π))/(2a)``.
    The angle's extent comes from the extreme correlations at the box's corners (with 4 ulps for rounding), so it
    is ``δρ/sin θ`` off colinear and ``√(2δρ)`` where the box reaches it. Costs a few array passes; inf where a sup
    is not finite."""
    change = np.full(np.shape(a), np.inf)
    a_hi, b_hi = a + da, b + db
    a_lo, b_lo = np.maximum(a - da, 0.0), np.maximum(b - db, 0.0)
    usable = (a_lo > 0) & (b_lo > 0)
    if not np.any(usable):
        return change
    reach = Z_MAX * float(np.sqrt(max(np.max(a_hi), np.max(b_hi))))
    left, right = _jumps_and_sups(phi, reach), _jumps_and_sups(psi, reach)
    if left is None or right is None:
        return change
    (k, jk, sup_f, slope_f), (m, jm, sup_g, slope_g) = left, right
    da, db, c, dc, a_hi, b_hi, a_lo, b_lo = (x[usable] for x in (da, db, c, dc, a_hi, b_hi, a_lo, b_lo))
    pad = 4 * _EPS
    top, bottom = c + dc, c - dc
    wide, narrow = np.sqrt(a_hi * b_hi), np.sqrt(a_lo * b_lo)
    rho_hi = np.clip(np.where(top >= 0, top / narrow, top / wide) + pad, -1.0, 1.0)
    rho_lo = np.clip(np.where(bottom >= 0, bottom / wide, bottom / narrow) - pad, -1.0, 1.0)
    theta_lo, theta_hi = np.arccos(rho_hi), np.arccos(rho_lo)
    sin_max = np.sin(np.clip(0.5 * np.pi, theta_lo, theta_hi))  # sin is concave on [0, π]
    density_f = np.exp(-0.5 * k**2 / a_hi[:, None]) / np.sqrt(2 * np.pi * a_lo[:, None])  # (entries, kinks)
    density_g = np.exp(-0.5 * m**2 / b_hi[:, None]) / np.sqrt(2 * np.pi * b_lo[:, None])
    both = np.exp(-0.5 * _jump_exponent(k, m, a_lo, a_hi, b_lo, b_hi, rho_lo, rho_hi))
    jumps_part = np.einsum("ekl,k,l->e", both, jk, jm) / (2 * np.pi)
    smooth_part = (density_f @ jk) * slope_g + (density_g @ jm) * slope_f + slope_f * slope_g
    by_theta = jumps_part + np.sqrt(a_hi * b_hi) * sin_max * smooth_part
    by_a = sup_g * (density_f @ (jk * np.abs(k)) + slope_f * np.sqrt(2 * a_hi / np.pi)) / (2 * a_lo)
    by_b = sup_f * (density_g @ (jm * np.abs(m)) + slope_g * np.sqrt(2 * b_hi / np.pi)) / (2 * b_lo)
    change[usable] = by_theta * (theta_hi - theta_lo) + by_a * da + by_b * db
    return change


def _located(act: Activation, *variances: Array) -> Activation:
    """``act`` with its kinks located on the range of ``variances`` (itself when they are known): a traced or a
    user's φ' found without jumps is continuous there, a φ said continuous with a jump found is not."""
    if is_located(act):  # no pass over the variances for the range
        return act
    sd = float(np.sqrt(max(np.max(v, initial=0.0) for v in variances)))
    return with_located_kinks(act, sd)


def _sum_dense(*parts: Array | None) -> Array | None:
    """The sum of the dense parts of bounds that have one (None where none has)."""
    present = [p for p in parts if p is not None]
    return sum(present[1:], present[0]) if present else None


def _exact_zero(a: Array, da: Array) -> Array:
    """Points whose linear form has variance exactly 0 with no error (e.g. a zero input without
    bias): the form is the constant 0 there, so every pair with it is exact."""
    return (a == 0.0) & (da == 0.0)


def _vanishing(a: Array, da: Array) -> Array:
    """Points whose linear form has variance exactly 0 but an error bound (``g − s·g`` with ``s = 1``
    computed exactly, up to its scalar's rounding): its variance is somewhere in ``[0, da]``, where the
    first-order rules divide by ``a`` (:func:`_from_vanishing`)."""
    return (a == 0.0) & (da > 0.0)


def _spread_at_zero(act: Activation, da: Array) -> Array:
    """``√ E(φ(u) − φ(0))²`` for ``u ~ N(0, δ)`` over ``δ ≤ da``, per entry of ``da``: the largest of four
    variances down from ``da`` (near 0 the leading term of φ — linear, a kink's √δ, a jump's ½ — grows
    with δ), with its quadrature error, doubled."""
    phi0 = act.at_zero
    spread = np.zeros(da.size)
    for shrink in (1.0, 0.25, 0.0625, 0.015625):
        value, err = expect_1d_err(lambda x: (np.asarray(act.fn(x), dtype=float) - phi0) ** 2,
                                   shrink * np.ravel(da), features=act.kinks or (0.0,))
        spread = np.maximum(spread, value + err)
    return (2.0 * np.sqrt(spread)).reshape(np.shape(da))


def _from_vanishing(phi: Activation, da: Array, m2_psi: Array, mean_change_psi: Array) -> Array:
    """A bound of the change of ``E[φ(u) ψ(v)]`` where u's variance is 0 up to ``da``, whatever its
    covariance with v (Cauchy–Schwarz): ``√E(φ(u) − φ(0))² √E ψ² + |φ(0)| |ΔE ψ|``, the arrays broadcast
    (a column of ``da`` against rows of ψ's moments on a tile). The first-order rules divided ``da`` by
    the variance 0 and capped the bound at twice the scale: ``g₁₀ + relu(g₁ − g₁₀ + 0.3)`` with g₁₀ a
    one-token attention of g₁ (weight 1 up to rounding) was refused at every rtol (strict campaign
    seed 230)."""
    return _spread_at_zero(phi, da) * np.sqrt(m2_psi) + abs(phi.at_zero) * mean_change_psi


def _mean_change(act: Activation, var: Array, dvar: Array) -> Array:
    """A bound of the change of ``E ψ(v)`` over the error ``dvar`` of ``Var v = var`` (1-D): the first-order
    one, or the spread about ψ(0) where the form vanishes (:func:`_vanishing`)."""
    change = np.zeros(var.size)
    vanishing = _vanishing(var, dvar)
    if vanishing.any():
        change[vanishing] = _spread_at_zero(act, dvar[vanishing])
    if (~vanishing).any():
        rest = ~vanishing
        change[rest] = propagation.point_1d(var[rest], dvar[rest], moments_1d(act, var[rest]))
    return change


def _exactly_zero_rows(a: Array, da: Array, b: Array, db: Array, c: Array, c_bound: bounds.Bound
                       ) -> tuple[Array, bounds.Bound]:
    """The cross-covariance of two linear forms on a tile with its rows (columns) at points where
    the left (right) form is exactly 0 set to exact zeros — its bound there may sit on a wider
    envelope (the arguments' variances), which per-point ratios to the forms' envelopes turn into
    an infinite bound for the whole tile."""
    zero_l, zero_r = _exact_zero(a, da), _exact_zero(b, db)
    if not (zero_l.any() or zero_r.any()):
        return c, c_bound
    zero = zero_l | zero_r
    dense = None if c_bound.dense is None else np.where(zero, 0.0, c_bound.dense)
    return (np.where(zero, 0.0, c),
            bounds.Bound(c_bound.eta, np.where(zero_l, 0.0, c_bound.left), np.where(zero_r, 0.0, c_bound.right), dense))


def _colinear_change(dense: Array, value: Array, exact: tuple[Array, Array], a: Array, da: Array, b: Array,
                     db: Array, p: float, q: float) -> Array:
    """``dense`` with the bound of each exactly colinear entry ``(i, j)`` replaced by the change of
    ``E[φ(u)ψ(±u')] = a^{p/2} b^{q/2} E[φ(z)ψ(±z)]`` (φ, ψ homogeneous of degrees p, q) over the
    variances' intervals: ``|value| (|p| δa/a + |q| δb/b)`` — twice the first order, which covers
    the rest while ``δa/a, δb/b ≤ 1/4`` (elsewhere the bound is kept)."""
    ii, jj = exact
    ra, rb = da[ii, 0] / np.maximum(a[ii, 0], 1e-300), db[0, jj] / np.maximum(b[0, jj], 1e-300)
    ok = (ra <= 0.25) & (rb <= 0.25)
    out = np.array(dense, dtype=float)
    out[ii[ok], jj[ok]] = np.abs(value[ii[ok], jj[ok]]) * (abs(p) * ra[ok] + abs(q) * rb[ok])
    return out


def _tiles(n1: int, n2: int, size: int, symmetric: bool) -> Iterator[tuple[slice, slice]]:
    for r0 in range(0, n1, size):
        for c0 in range(r0 if symmetric else 0, n2, size):
            yield slice(r0, min(r0 + size, n1)), slice(c0, min(c0 + size, n2))


class Limit:
    """The infinite-width limit of a program on inputs ``X`` (and ``X2``).

    Parameters
    ----------
    program : Program
    X : array, shape (B, d) or (B, T, d), optional
        Inputs (``(B, T, d)`` for programs reading time steps). A program that reads no data
        (its initial vectors are :meth:`Program.gaussian` vectors) may omit it: it runs on one
        symbolic point, so every covariance is a 1×1 array (``B1 = B2 = 1``).
    X2 : array, optional
        Second input set for cross-covariances; defaults to ``X``.
    rtol : float
        Relative tolerance of every result: each entry's error bound must be at most
        ``rtol · √(K_ii K_jj)`` (the scale of the two points), else :class:`NumericalError`
        says what was reached.
    memory_budget : int
        Bytes of working memory (beyond results) a computation may use; the pair grid is
        processed in tiles that fit.
    threads : int, optional
        Worker threads for tiles (default: the number of CPUs, at most 8).

    Attributes
    ----------
    error : float or None
        The largest absolute error bound over the entries of the last result (kernel units; when the
        per-entry bounds were not asked for, an upper bound of it from per-point factors); None before
        the first result.
    relative_error : float or None
        The largest ratio of that result's bounds to the scale its tolerance applies to
        (``√(K_ii K_jj)`` for kernels); None before the first result.
    stderr : float
        The largest standard error of Monte-Carlo parts in the last result (0 when every
        expectation was deterministic); those parts enter ``error`` as ``MC_ERROR_SIGMAS`` (5.24) standard errors.

    Notes
    -----
    ``cov(u, v)[i, j] = E[Z^u(x_i) Z^v(x2_j)]`` is the second moment (the covariance for
    G-vectors, which are centred). Weights are ``N(0, σ²/n_in)``.
    """

    def __init__(self, program: Program, X: Any = None, X2: Any = None, *, rtol: float = DEFAULT_RTOL,
                 memory_budget: int = DEFAULT_MEMORY_BUDGET, threads: int | None = None) -> None:
        if not isinstance(program, Program):
            raise ProgramError(f"expected a netsor.Program, got {type(program).__name__}")
        self.program = program
        self.version = program.version
        self.analysis = analysis_of(program)
        if self.analysis.refusal is not None:
            raise UnsupportedError(self.analysis.refusal)
        self.X, self.X2 = limit_inputs(program, X, X2)
        outputs = max(1, program.num_outputs)
        # the kernel and its error bound (and their mirrored or clipped copies): refused up front
        check_fits_in_memory(3 * self.X.shape[0] * self.X2.shape[0] * outputs**2,
                             f"the kernel of {self.X.shape[0]} × {self.X2.shape[0]} inputs and its error bounds")
        self.symmetric = X2 is None
        self.rtol = check_real(rtol, "rtol", minimum=1e-15, maximum=1.0)
        self.memory_budget = check_memory_budget(memory_budget)
        self.threads = check_threads(threads) or min(os.cpu_count() or 1, 8)
        self.term_share = TERM_SHARE
        # tile plans carry distances (Limit.retried): from the start where two inputs are so nearly parallel that
        # the covariances would surely miss rtol at a kink off the origin (its first attempt: ~4× the retry's time)
        # (or anti-parallel: an odd network keeps them so, SumDistance)
        self.distances = self.analysis.has_near_parallel_pairs and any(
            has_nearly_parallel_inputs(self.X, sign * self.X2, angle=NEAR_INPUTS_ANGLE / self.rtol,
                                       symmetric=self.symmetric) for sign in (1.0, -1.0))
        self.error: float | None = None  # no result yet
        self.relative_error: float | None = None
        self.stderr = 0.0
        self._diag: dict[str, Side] = {}
        self._ties_checked: set[str] = set()  # sides whose jumps on ties were checked (netsor.interpret.ties)
        self._memo = CoefficientMemo()  # per-point Hermite coefficients, shared by all tiles
        self._tables = joint.TableMemo()

    @property
    def term_rtol(self) -> float:
        """Tolerance of each expectation: a share of ``rtol`` split over the nested layers."""
        return self.term_share * self.rtol / max(1, self.analysis.nesting)

    def retried(self, compute: Callable[[], Any]) -> Any:
        """:meth:`_retried_share`, and once more carrying distances between the points (:class:`Distance`)
        where it missed ``rtol`` and the program has angle pairs (step-like functions of one G-vector: a
        ReLU network's NTK): from then on for this limit. The distances cost ~10–15× an NTK's time, and only
        networks that drive correlations towards 1 (the ordered phase, depth ≥ 50) or inputs a perturbation apart
        need them (the latter, at kinks off the origin, are given them from the start: :data:`NEAR_INPUTS_ANGLE`)."""
        try:
            return self._retried_share(compute)
        except NumericalError as exc:
            # only a bound that missed rtol (Limit.refuse): not a refusal of the program or of its inputs (a tie)
            if self.distances or not self.analysis.has_angle_pairs or not hasattr(exc, "overshoot"):
                raise
            self.distances = True
            return self._retried_share(compute)

    def _retried_share(self, compute: Callable[[], Any]) -> Any:
        """``compute()``, and once more with each expectation's share of the tolerance divided by twice
        the overshoot where it missed ``rtol`` by at most ``RETRY_REACH`` without Monte Carlo: the shares
        are relative to the expectations' own scales, and a sum whose terms cancel (``clip(2g) =
        relu(2g + 1) − relu(2g − 1) − 1``: terms 4× the result) overshot rtol by 13 % at every rtol."""
        try:
            return compute()
        except NumericalError as exc:
            overshoot = getattr(exc, "overshoot", np.inf)
            if self.stderr or not 1.0 < overshoot <= RETRY_REACH or self.term_share < TERM_SHARE:
                raise
            self.term_share = TERM_SHARE / (2.0 * overshoot)
            self._diag = {}  # per-point values at the looser tolerance
            try:
                return compute()
            finally:
                self.term_share = TERM_SHARE

    def _new_run(self, **kwargs: Any) -> Run:
        return Run(self.analysis, term_rtol=self.term_rtol, memo=self._memo, tables=self._tables, **kwargs)

    # ---- per-point runs
    def _side(self, which: str, keys: set[Key]) -> Side:
        """Per-point values on X (``which="left"``) or X2, extended to cover ``keys``."""
        which = "left" if self.symmetric else which
        side = self._diag.get(which)
        if side is None:
            side = self._diag[which] = Side({}, self.X if which == "left" else self.X2)
        missing = [canonical(k) for k in keys if canonical(k) not in side.values]
        if missing:
            run = self._new_run(diag=True, X=side.X)
            run.values = side.values
            plans, key = self.analysis.plans, ("points", frozenset(missing))
            plan = plans.get(key) or plans.setdefault(key, make_plan(self.analysis, missing, diag=True, keep_all=True))
            with np.errstate(all="ignore"):  # overflow is reported by _finite_or_raise
                run.run(replace(plan, order=[k for k in plan.order if k not in side.values]))
            self.stderr = max(self.stderr, run.stderr)
        if which not in self._ties_checked:
            self._ties_checked.add(which)  # before the check: its own moments come through here

            def limits(keys: list[Key]) -> list[Array]:
                values = self._side(which, set(keys)).values
                return [values[k][0] for k in keys]

            ties.check_jump_ties(self.program, side.X, lambda pairs: limits([canonical(("g", *p)) for p in pairs]),
                                 lambda scalars: limits([("sc", s) for s in scalars]),
                                 what="X" if which == "left" else "X2")
        return side

    @reused_memory()
    def _grid(self, roots: list[Key], fill: Callable[[slice, slice, dict[Key, Value]], None],
              symmetric: bool) -> None:
        plans = self.analysis.plans
        key = (tuple(roots), self.distances)
        plan = plans.get(key) or plans.setdefault(key, make_plan(self.analysis, roots, diag=False,
                                                                 distances=self.distances))
        left = self._side("left", plan.side)
        right = left if self.symmetric else self._side("right", plan.side)
        peak = peak_live(plan)
        n1, n2 = self.X.shape[0], self.X2.shape[0]
        kind = self._plan_kind(plan)
        # live values, four temporaries, and two arrays (an angle) per geometry used more than once
        uses = _geometry_uses(self.analysis, plan)
        angles = 2 * sum(n > 1 for n in uses.values())
        per_entry = 8 * 2 * (peak + 4 + angles) * self.threads * (64 if kind == "joint" else 1)
        cap = {"closed": TILE_MAX, "series": SERIES_TILE_MAX, "joint": JOINT_TILE_MAX}[kind]
        size = max(16, min(cap, int(np.sqrt(self.memory_budget / per_entry))))
        size = -(-max(n1, n2) // -(-max(n1, n2) // size))  # equal tiles: the threads finish together

        def work(tile: tuple[slice, slice]) -> float:
            rows, cols = tile
            run = self._new_run(diag=False, left=left, right=right, rows=rows, cols=cols, geometry_uses=uses,
                                proportional=self._proportional_pairs, distances=self.distances)
            with np.errstate(all="ignore"):  # overflow is reported by _finite_or_raise
                run.run(plan)
            fill(rows, cols, {r: run.values[r] for r in roots})
            return run.stderr

        tiles = list(_tiles(n1, n2, size, symmetric))
        if self.threads > 1 and len(tiles) > 1:
            with ThreadPoolExecutor(self.threads) as pool:
                errs = list(pool.map(work, tiles))
        else:
            errs = [work(t) for t in tiles]
        self.stderr = max([self.stderr, *errs])

    def _plan_kind(self, plan: Plan) -> str:
        """``"closed"`` when every pair expectation is a closed form (or Stein), ``"joint"`` when
        some is multi-dimensional, else ``"series"``."""
        kind = "closed"
        for _, pl, pr in _pair_terms(self.analysis, plan):
            if pl is None or pr is None:
                return "joint"
            if not is_elementary(pl.act, pr.act):
                kind = "series"
        return kind

    def _sweep(self, pairs: list[tuple[Vector, Vector]],
               on_block: Callable[[Any, Any, list[Value], bool], None],
               on_identical: Callable[[Array, Array, list[Value]], None], *, lower_blocks: bool = True) -> None:
        """The one walk of the pair grid for the second moments of ``pairs``.

        ``on_block(rows, cols, moments, diagonal)`` gets each computed block's ``(value, Bound)``
        per pair (from worker threads; blocks are disjoint). For one input set only blocks on or
        above the diagonal are computed, and (``lower_blocks``) the block below is handed over
        too, as the transpose of the mirrored pair ``(v, u)``; ``diagonal`` marks a block on the
        diagonal, whose entries below it may be missing for a pair ``(u, u)``. Last,
        ``on_identical(ii, jj, per_point)`` gets the per-point ``(value, error)`` (indexed by input)
        of each pair for the pairs of identical inputs ``(ii, jj)``: exact colinearity, no cross error.
        """
        roots = [("m", u, v) for u, v in pairs]
        mirrored = self.symmetric and lower_blocks
        mirror = {r: ("m", r[2], r[1]) for r in roots}

        def fill(rows: slice, cols: slice, vals: dict[Key, Value]) -> None:
            on_block(rows, cols, [vals[r] for r in roots], self.symmetric and rows == cols)
            if mirrored and rows != cols:
                on_block(cols, rows, [(vals[mirror[r]][0].T, bounds.transposed(vals[mirror[r]][1])) for r in roots],
                         False)

        needed = roots + ([mirror[r] for r in roots] if mirrored else [])
        self._grid(list(dict.fromkeys(needed)), fill, self.symmetric)
        ii, jj = self._identical_pairs
        si, sj, s, factors = self._scaled_pairs(roots)
        if ii.size or si.size:
            side = self._side("left", {canonical(r) for r in roots})
            per_point = []
            for r, factor in zip(roots, factors, strict=True):
                value, error = side.values[canonical(r)]
                scaled = value[si] * factor
                rounding = np.abs(scaled) * (np.abs(np.log2(np.abs(s))) + 2.0) * _EPS
                per_point.append((np.concatenate([value[ii], scaled]),
                                  np.concatenate([error[ii], error[si] * np.abs(factor) + rounding])))
            on_identical(np.concatenate([ii, si]), np.concatenate([jj, sj]), per_point)

    def _scaled_pairs(self, roots: list[Key]) -> tuple[Array, Array, Array, list[Array]]:
        """``(i, j, s)`` of the inputs with ``X2[j] = s·X[i]`` where every vector of the second moments
        ``roots`` scales, and each moment's factor: ``E[Z^u(x) Z^v(s·x)] = λ_v(s) E[Z^u(x) Z^v(x)]``
        (:mod:`netsor.ir.homogeneity`), exact up to the rounding of ``s``."""
        si, sj, s = self._proportional_pairs
        factors = [input_scaling(self.program, r[2], s) for r in roots]
        known = np.all([np.isfinite(input_scaling(self.program, v, s)) for r in roots for v in r[1:]], axis=0)
        return si[known], sj[known], s[known], [f[known] for f in factors]

    def per_point_pairs(self, pairs: list[tuple[Vector, Vector]]) -> tuple[Array, Array]:
        """Index arrays ``(i, j)`` of the entries to which a sweep of ``pairs`` gives per-point values
        (identical and exactly proportional inputs; handed to the consumer last, replacing the
        blocks' values there)."""
        ii, jj = self._identical_pairs
        si, sj, _, _ = self._scaled_pairs([("m", u, v) for u, v in pairs])
        return np.concatenate([ii, si]), np.concatenate([jj, sj])

    def _pairs(self, pairs: list[tuple[Vector, Vector]]) -> list[tuple[Array, bounds.TiledBound]]:
        """Second moments of vector pairs on the pair grid: values (B1, B2) and their bounds (a
        block on the diagonal of a pair ``(u, u)`` is made exactly symmetric)."""
        n1, n2 = self.X.shape[0], self.X2.shape[0]
        outs = [(np.empty((n1, n2)), bounds.TiledBound((n1, n2))) for _ in pairs]

        def on_block(rows: slice, cols: slice, moments: list[Value], diagonal: bool) -> None:
            for (out, err), (u, v), (value, bound) in zip(outs, pairs, moments, strict=True):
                mirrored = diagonal and u is v
                out[rows, cols] = symmetrized_upper(value) if mirrored else value
                err.add(rows, cols, bound, symmetric=mirrored)

        def on_identical(ii: Array, jj: Array, per_point: list[Value]) -> None:
            for (out, err), (v, e) in zip(outs, per_point, strict=True):
                out[ii, jj] = v
                err.override(ii, jj, e)

        self._sweep(pairs, on_block, on_identical)
        return outs

    @functools.cached_property
    def _proportional_pairs(self) -> tuple[Array, Array, Array]:
        """``(i, j, s)`` of the inputs with ``X2[j] = s·X[i]`` exactly, ``s ≠ 0``, not identical."""
        return colinear_rows(self.X, self.X2, negative=True)

    @functools.cached_property
    def _identical_pairs(self) -> tuple[Array, Array]:
        """Index arrays (i, j) of all pairs with ``X[i] == X2[j]`` exactly (the diagonal of a
        kernel of one input set, and any repeated input)."""
        return identical_rows(self.X, self.X2)

    def checked(self, value: Array, err: Array | bounds.TiledBound, scale: Array | tuple[Array, Array],
                what: str, with_error: bool) -> Any:
        """Refuse a result whose bound exceeds ``rtol`` relative to ``scale`` (an array, or the
        per-point factors ``(l, r)`` of ``l_i r_j``); record the largest bound in ``self.error`` and
        its largest ratio to ``scale`` in ``self.relative_error``."""
        if not isinstance(with_error, bool | np.bool_):
            raise HyperParameterError(f"with_error must be True or False, got {with_error!r}")
        if isinstance(err, bounds.TiledBound):
            assert isinstance(scale, tuple)
            value = _finite_or_raise(value, what)
            self.error = err.max()
            self.relative_error = err.max_ratio(*scale)
            if self.relative_error <= self.rtol:
                return (value, err.array()) if with_error else value
            err, scale = err.array(), np.outer(*scale)
        assert isinstance(scale, np.ndarray)
        # an output that vanishes in the limit (|g − attention(g)| of one token: 0 up to the rounding of the
        # weight 1) has a scale at rounding of the kernel's: its entries are judged in the kernel's units,
        # where a relative bound would be 1e286 and no rtol could accept it (strict campaign seed 408)
        top = float(np.max(scale, initial=0.0))
        scale = np.where(scale < VANISHING_SCALE * top, top, scale)
        worst = largest_ratio(err, np.maximum(scale, 1e-300))
        if top == 0.0 and worst > self.rtol:
            # every output cancels to 0 in the limit (0.5·|g − attention(g)| over one token): a bound
            # relative to it means nothing, and the general advice (rescale, simulate) would mislead
            raise NumericalError(
                f"{what}: every entry is 0 in the limit up to its error bound (at most {float(np.max(err)):.3g}: "
                "rounding of terms that cancel), so no relative tolerance (rtol) applies; an output that cancels "
                "exactly (|g − attention(g)| over one token, W h − W h) gives this — read out something else")
        value, err = self.checked_worst(value, err, worst, worst_entry(err, scale) if worst > self.rtol else (), what)
        return (value, err) if with_error else value

    def checked_worst(self, value: Array, err: Array, worst: float, at: tuple[int, ...], what: str
                      ) -> tuple[Array, Array]:
        """:meth:`checked` for a caller that found the largest ratio ``worst`` of the bounds to their
        scale itself (block by block, while the blocks were in cache), at entry ``at``."""
        value = _finite_or_raise(value, what)
        self.error = float(np.max(err, initial=0.0))
        self.relative_error = worst
        if worst > self.rtol:
            self.refuse(worst, at, value.shape, what, value)
        return value, err

    def refuse(self, worst: float, at: tuple[int, ...], shape: tuple[int, ...], what: str,
               value: Array | None = None) -> NoReturn:
        """Raise the :class:`NumericalError` of a result whose bound is ``worst`` relative to its scale
        (above ``rtol``) at entry ``at`` of a result of ``shape`` (``value``: the result, for a hint
        about the refused entry)."""
        # a kernel's entry (i, j), or a per-input quantity's input i (var, scalar)
        where, relative = (f"entry {at}", "√(K_ii K_jj)") if len(at) == 2 else (f"input {at[0]}", "its value")
        if not np.isfinite(worst):  # no tolerance accepts it: say what to change instead
            raise NumericalError(
                f"{what}: {where} has no finite error bound — an expectation of the limit could "
                "not be bounded there (e.g. a quadrature that does not resolve an activation at the "
                "variance of an input: inputs whose scales differ by many orders of magnitude; an activation "
                "with hundreds of kinks in range at two nearly parallel inputs, whose pair no rule integrates "
                "in reasonable time; or a vector whose limit variance is 0 by cancellation, W(g − LN(g)) on "
                "inputs with K(x, x) = 1, under a jump, whose limit is then not defined); rescale the inputs, "
                "compute those entries separately (X2), or simulate the limit (method='qmc', rtol >= "
                f"{SIMULATION_MIN_RTOL:g})")
        advice = ("pass a larger rtol to accept it" if worst < 1.0 else
                  "no rtol accepts a bound as large as the value itself: reduce the depth or the scale of the "
                  "inputs, or simulate the limit (method='qmc')")
        if self.stderr and worst < 1.0 and self.rtol < SIMULATION_MIN_RTOL:
            # QMC rules decided the bound: the engine's reach there is ~1e-3 to 1e-5, while the simulation
            # takes such programs in a fraction of the time (a tanh BatchNorm MLP on one batch of 4: refused
            # at 1.5e-3 after 35 s at the default rtol; 0.3 s by the simulation at 1e-3)
            how = (f"at rtol >= {SIMULATION_MIN_RTOL:g} method='auto' simulates this program's limit instead"
                   if limit_method(self.program, SIMULATION_MIN_RTOL) == "qmc" else
                   f"method='qmc' (rtol >= {SIMULATION_MIN_RTOL:g}) simulates the limit")
            advice += (f"; Monte-Carlo parts of high-dimensional expectations decided the bound: {how}, in seconds "
                       "where its reach (~1e-2 to 1e-4) meets the rtol")
        if self.stderr and (opaque := _opaque_functions_of_several(self.program)):
            advice += (f"; the program's untraced functions of several vectors ({opaque}) have no exact rule, so QMC "
                       "integrates their expectations: written with numpy arithmetic, elementwise functions, "
                       "comparisons and np.where (no np.asarray, Python branching or indexing) they are traced into "
                       "expressions whose expectations have exact rules")
        refusal = NumericalError(
            f"{what}: the error bound reached {worst:.3g} relative to {relative} at {where}, "
            f"above rtol = {self.rtol:g}; {advice} (largest absolute bound "
            f"{self.error:.3g}{f', Monte-Carlo standard error {self.stderr:.3g}' if self.stderr else ''})"
            f"{self._pair_hint(*at, shape, value, what) if len(at) == 2 else ''}")
        refusal.overshoot = worst / self.rtol  # read by Limit.retried
        raise refusal

    def _pair_hint(self, i: int, j: int, shape: tuple[int, ...], value: Array | None, what: str) -> str:
        """A hint for a refused entry ``(i, j)`` whose correlation is within rounding-amplifying reach of ±1:
        kernels of step-like functions are only ½-Hölder there. Either the two inputs are nearly (not
        exactly) parallel, or the network itself drives their correlation to ±1 (a deep network in the
        ordered phase) through a part that the distances between the points (:class:`Distance`) cannot be
        carried through: the covariances' rounding-level bound on each correlation costs its square root a
        layer in the NTK's step kernel (~6e-8 a layer while the true error is ~1e-10)."""
        per = shape[0] // self.X.shape[0]  # outputs per input
        x, y = self.X[i // per].ravel(), self.X2[j // per].ravel()
        norms = float(np.linalg.norm(x) * np.linalg.norm(y))
        pair = f"inputs {i // per} and {j // per}" if self.symmetric else f"X[{i // per}] and X2[{j // per}]"
        if norms > 0.0 and x.tobytes() != y.tobytes() and abs(1.0 - abs(float(x @ y)) / norms) <= 1e-9:
            return (f". The {pair} are nearly but not exactly (anti-)parallel, where kernels of "
                    "step-like functions are only ½-Hölder in the correlation and the network amplifies a "
                    "rounding-level angle; exactly proportional inputs (e.g. x and 2x or −x, a power-of-two "
                    "factor: 3·x is rounded) are recognised and computed exactly")
        gap = self._correlation_gap(i, j, value)
        if gap is None or gap > ORDERED_HINT_GAP:
            return ""
        return (f". The network drives the {what} correlation of {pair} to within {gap:.1g} of ±1 (e.g. a deep "
                "network in the ordered phase). Kernels of step-like functions (relu's "
                "derivative in an NTK, a jump) are only ½-Hölder in the correlation there: the rounding-level "
                "bound of each correlation enters a layer's bound as its square root. The engine carries 1 − ρ "
                "itself (the distances between the points) through sums of independent sources and through "
                "relu, leaky_relu, abs, identity, step and sign of one vector and their sums (relu(g) + 0.01·g); "
                "some part of this program is none of those (another function such as tanh, a mix of kinks and "
                "jumps, a LayerNorm's or attention's scalar, sources sharing a matrix), so "
                "the bound is what it can certify: an rtol above it accepts the result, fewer layers avoid it")

    def _correlation_gap(self, i: int, j: int, value: Array | None) -> float | None:
        """``1 − |K_ij| / √(K_ii K_jj)`` of a symmetric result ``value`` (None where not known)."""
        if value is None or not self.symmetric or value.ndim != 2 or value.shape[0] != value.shape[1]:
            return None
        scale = float(np.sqrt(abs(value[i, i])) * np.sqrt(abs(value[j, j])))  # no overflow at extreme scales
        return None if not scale > 0.0 else max(0.0, 1.0 - abs(float(value[i, j])) / scale)

    def _variances(self, pairs: list[tuple[Vector, Vector]]) -> list[tuple[Array, Array]]:
        """``E[Z^u(x_i)²]`` (B1,) and ``E[Z^v(x2_j)²]`` (B2,) of each pair ``(u, v)``, from one
        per-point run per side (a run per pair cost 40 ms of a depth-10 NTK's 250)."""
        left = self._side("left", {canonical(("m", u, u)) for u, _ in pairs}).values
        right = self._side("right", {canonical(("m", v, v)) for _, v in pairs}).values
        return [(left[canonical(("m", u, u))][0], right[canonical(("m", v, v))][0]) for u, v in pairs]

    @_one_blas_thread
    def cov(self, u: Vector, v: Vector | None = None, *, with_error: bool = False) -> Any:
        """``E[Z^u(x_i) Z^v(x2_j)]``, shape (B1, B2) (``v`` defaults to ``u``); with
        ``with_error`` also the error bound of every entry."""
        v = u if v is None else v
        for w in (u, v):
            self.program.check_own(w)
            _not_a_scalar(w, "cov")
        if (u.kind == "data") != (v.kind == "data"):
            raise ProgramError("the data point is not a random vector of the limit: cov(data, vector) is "
                               "undefined; ask for cov(p.data(), p.data()) (the inputs' Gram matrix / d) "
                               "or for covariances of G- and H-vectors")
        self.stderr = 0.0
        (value, err), = self._pairs([(u, v)])
        (left, right), = self._variances([(u, v)])  # relative to √(E[Z^u(x_i)²] E[Z^v(x2_j)²])
        return self.checked(value, err, (np.sqrt(np.abs(left)), np.sqrt(np.abs(right))), "cov", with_error)

    @_one_blas_thread
    def var(self, u: Vector, *, with_error: bool = False) -> Any:
        """``E[(Z^u(x_i))²]`` for each input of ``X``, shape (B,) (the diagonal of ``cov(u)``)."""
        self.program.check_own(u)
        _not_a_scalar(u, "var")
        self.stderr = 0.0
        key = canonical(("m", u, u))
        value, err = self._side("left", {key}).values[key]
        return self.checked(value.copy(), err.copy(), np.abs(value), "var", with_error)

    @_one_blas_thread
    def scalar(self, s: Vector, *, with_error: bool = False) -> Any:
        """The limit of a scalar (NetsorK: a moment or arithmetic of moments) at each input of
        ``X``, shape (B,); with ``with_error`` also its error bound per input."""
        self.program.check_own(s)
        if s.kind != "scalar":
            raise ProgramError(f"{s.name} is a vector, not a scalar; use cov/var for vectors")
        self.stderr = 0.0
        key = ("sc", s)
        value, err = self._side("left", {key}).values[key]
        return self.checked(value.copy(), err.copy(), np.abs(value), "scalar", with_error)

    @_one_blas_thread
    def sweep_second_moments(self, pairs: list[tuple[Vector, Vector]],
                             consume: Callable[[Any, Any, list[tuple[Array, bounds.Bound, Array, Array]]], None],
                             *, lower_blocks: bool = True) -> None:
        """One sweep of the pair grid handing each block's second moments to ``consume`` instead of
        materialising them: a combination of many moments (the NTK's) then needs memory for its
        result only, not a (B1, B2) array and bound per moment.

        ``consume(rows, cols, moments)`` is called once per block, from worker threads (blocks are
        disjoint), with ``moments[k] = (value, bound, var_left, var_right)`` of ``pairs[k] = (u, v)``:
        ``E[Z^u Z^v]``, its :class:`~netsor.interpret.bounds.Bound` and ``E[Z^u²]``, ``E[Z^v²]``
        at the block's points. ``rows, cols`` are slices (values (b1, b2), variances (b1,) and
        (b2,)), or, last, index arrays of the pairs of identical inputs (values and variances of
        their shape; those entries take per-point values, exact at colinearity). For one input
        set only blocks on and above the diagonal are computed (the block below is the mirrored
        pair's transpose, handed over unless ``lower_blocks`` is False: a consumer whose result
        is symmetric then fills it by symmetry, and the mirrored pairs are not computed), and on a
        diagonal block of ``(u, u)`` the entries below the diagonal may be missing: a consumer
        keeps the upper triangle of its result (:func:`~netsor.linalg.symmetrized_upper`).
        """
        for u, v in pairs:
            self.program.check_own(u)
            self.program.check_own(v)
        self.stderr = 0.0
        variances = self._variances(pairs)

        def on_block(rows: slice, cols: slice, moments: list[Value], diagonal: bool) -> None:
            consume(rows, cols, [(value, bound, var_l[rows], var_r[cols])
                                 for (value, bound), (var_l, var_r) in zip(moments, variances, strict=True)])

        def on_identical(ii: Array, jj: Array, per_point: list[Value]) -> None:
            same = []
            for (v, e), (var_l, var_r) in zip(per_point, variances, strict=True):
                envelope_l, envelope_r = np.sqrt(np.abs(var_l[ii])), np.sqrt(np.abs(var_r[jj]))
                same.append((v, bounds.Bound(0.0, envelope_l, envelope_r, e), var_l[ii], var_r[jj]))
            consume(ii, jj, same)

        self._sweep(pairs, on_block, on_identical, lower_blocks=lower_blocks)

    def psd_policy(self, K: Array, E: Any, relative: float, psd: str, what: str) -> tuple[Array, Any]:
        """Apply the ``psd`` policy of :meth:`nngp` to a kernel of one input set with bounds ``E``
        (largest bound ``relative`` to the diagonal scale); clipping is added to the bounds."""
        if not self.symmetric or psd == "skip":
            return K, E
        if psd == "auto":  # bounds this small cannot move an eigenvalue visibly below 0
            psd = "clip" if relative > 1e-9 else "skip"
        if psd == "skip":
            return K, E
        lmax = max(float(np.max(np.abs(np.diag(K)))), 1e-300)
        norm = E.frobenius() if isinstance(E, bounds.TiledBound) else float(np.linalg.norm(E))
        # one BLAS thread here too: OpenBLAS threads woken for this factorisation spin afterwards and
        # slowed the next call's tiles by 25 % (measured: relu NNGP after a tanh NNGP, 68 → 85 ms)
        clipped = ensure_psd(K, clip=(psd == "clip"), tol=max(PSD_TOLERANCE, norm / lmax), what=what)
        if clipped is not K:  # the clipping moved entries: that is part of their error
            E = (E.array() if isinstance(E, bounds.TiledBound) else E) + np.abs(clipped - K)
            self.error = float(np.max(E))
            K = clipped
        return K, E

    @_one_blas_thread
    @reused_memory()
    def nngp(self, *, psd: str = "auto", with_error: bool = False) -> Any:
        """Covariance of the outputs, shape (B1·R, B2·R), indexed ``b·R + r``.

        ``K[(i,r),(j,s)] = σ_v²/K Σ_k E[Z^{h_{r,k}}(x_i) Z^{h_{s,k}}(x2_j)] + bias²`` for outputs of
        the same readout (K parts per output: 1 for :meth:`~netsor.Program.readout`), 0 across
        readouts (independent readout vectors). With ``with_error``, returns ``(K, E)`` where
        ``E`` bounds the error of every entry.

        ``psd`` (kernels of one input set only):

        * ``"auto"`` (default): ``"clip"`` when the largest error bound exceeds ``PSD_TOLERANCE``
          (1e-9) relative to the diagonal scale, else nothing — such bounds cannot move an
          eigenvalue below ``−1e-9·λ_max``;
        * ``"clip"``: verify PSD (Cholesky; eigen-decomposition if that fails); clip negative
          eigenvalues above ``−max(PSD_TOLERANCE·λ_max, ‖E‖_F)`` (the error bound allows no more
          negativity), raise below;
        * ``"check"``: verify and raise below that tolerance, no clipping;
        * ``"skip"``.
        """
        check_choice(psd, "psd", PSD_POLICIES)
        outputs = self.program.outputs
        if not outputs:
            raise ProgramError("the program has no outputs; add p.readout(h, sigma=...) first")
        self.stderr = 0.0
        R = len(outputs)
        n1, n2 = self.X.shape[0], self.X2.shape[0]
        pairs = [(r, s) for r in range(R) for s in range(R) if outputs[r][0] is outputs[s][0]]
        wanted = list(dict.fromkeys(uv for r, s in pairs for uv in zip(outputs[r][1], outputs[s][1], strict=True)))
        results = dict(zip(wanted, self._pairs(wanted), strict=True))
        # one output reading one vector: its bound stays per tile, checked in O(B) per tile
        tiled = R == 1 and len(outputs[0][1]) == 1

        def block(r: int, s: int) -> tuple[Array, bounds.TiledBound | Array, Array, Array]:
            """Output pair (r, s): its kernel, bound and per-point scale factors."""
            ro, us, vs = outputs[r][0], outputs[r][1], outputs[s][1]
            coef, offset = ro.sigma**2 / len(us), ro.bias**2
            if tiled:  # the only use of this result: rescaled in place
                (value, err), = (results[(u, v)] for u, v in zip(us, vs, strict=True))
                (left, right), = self._variances([(us[0], vs[0])])
                value *= coef
                value += offset
                bound: bounds.TiledBound | Array = err.affine(coef, _EPS * offset)
            else:
                parts = [results[(u, v)] for u, v in zip(us, vs, strict=True)]
                variances = self._variances(list(zip(us, vs, strict=True)))
                total = sum(value for value, _ in parts)
                value = coef * total + offset
                # the parts' bounds, plus the rounding of their sum (K − 1 additions)
                bound = (coef * (sum(err.array() for _, err in parts) + (len(parts) - 1) * _EPS * np.abs(total))
                         + _EPS * offset)
                left, right = (sum(side) for side in zip(*variances, strict=True))
            scale_left = np.sqrt(np.abs(coef * left + offset))
            scale_right = np.sqrt(np.abs(coef * right + offset))
            return value, bound, scale_left, scale_right

        if tiled:
            K, bound, scale_left, scale_right = block(0, 0)
            assert isinstance(bound, bounds.TiledBound)
            K = self.checked(K, bound, (scale_left, scale_right), "nngp", False)
            E: Any = bound
            relative = self.relative_error
        else:
            K, E, S = np.zeros((n1, R, n2, R)), np.zeros((n1, R, n2, R)), np.zeros((n1, R, n2, R))
            for r, s in pairs:
                K[:, r, :, s], bound, scale_left, scale_right = block(r, s)
                E[:, r, :, s] = bound.array() if isinstance(bound, bounds.TiledBound) else bound
                S[:, r, :, s] = np.outer(scale_left, scale_right)
            K, E, S = (A.reshape(n1 * R, n2 * R) for A in (K, E, S))
            if self.symmetric:  # blocks of different output pairs were computed separately
                K, E = mirror_upper(K), mirror_upper(E)
            K, E = self.checked(K, E, S, "nngp", True)
            relative = self.relative_error
        K, E = self.psd_policy(K, E, relative, psd, "nngp")
        if not with_error:
            return K
        if isinstance(E, bounds.TiledBound):
            E = E.array()
            self.error = float(np.max(E, initial=0.0))  # the per-point one was an upper bound of it
        return K, E


def peak_live(plan: Plan) -> float:
    """The most tiles a run of ``plan`` holds at once, in quantities of two arrays (a value and its dense bound;
    an angle, :class:`PairAngle`, holds three: θ and its interval)."""
    live, peak = 0.0, 0.0
    ends: dict[int, float] = {}
    for i, k in enumerate(plan.order):
        size = 1.5 if k[0] == "A" else 1.0
        live += size
        peak = max(peak, live)
        ends[plan.last_use[k]] = ends.get(plan.last_use[k], 0.0) + size
        live -= ends.pop(i, 0.0)
    return peak


def worst_entry(err: Array, scale: Array) -> tuple[int, ...]:
    """The index of the largest ``err / scale`` (over entries with ``err > 0``)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(err > 0, err / np.maximum(scale, 1e-300), 0.0)
    return tuple(int(k) for k in np.unravel_index(int(np.argmax(ratio)), ratio.shape))


def _opaque_functions_of_several(program: Program) -> str:
    """The untraced (opaque) user functions of two or more vectors in ``program``, each with why the tracer
    could not see through it: the expectations a refusal decided by QMC rules most likely came from."""
    found: dict[str, str] = {}
    for line in program.lines:
        expr = getattr(line, "expr", None)
        for node in [] if expr is None else opaque_nodes(expr):
            if len(node.args) >= 2:
                # a derivative by differences (an NTK's tangent program) stands for the user's function
                source = node.difference_of[0] if node.difference_of is not None else node
                found.setdefault(getattr(source, "name", node.name), getattr(source, "untraced", node.untraced))
    return "; ".join(f"{name!r}" + (f": {why}" if why else "") for name, why in found.items())


def _finite_or_raise(K: Array, what: str) -> Array:
    # Row blocks: a full boolean mask of a 20 000² kernel would be 400 MB outside the budget.
    rows = max(1, 2**24 // max(1, K[:1].size))
    if not all(np.isfinite(K[i:i + rows]).all() for i in range(0, K.shape[0], rows)):
        raise NumericalError(
            f"{what}: the limit produced non-finite values (overflow of an unbounded activation such "
            "as exp, or variances that blow up with depth); reduce sigma_w / depth or rescale inputs"
        )
    if K.ndim == 2 and K.shape[0] == K.shape[1]:
        # a kernel's diagonal (variances, or a cross kernel's matching pairs) below float64's normal
        # range has lost its digits to underflow, and the entries beside it with it (a tanh network of
        # depth 300 at sigma_w = 0.3 shrinks its variances to 2e-316: correlations came out 0 under a
        # bound of 4e-8 relative)
        diagonal = np.abs(np.diagonal(K))
        if np.any((diagonal > 0.0) & (diagonal < UNDERFLOW_SCALE)):
            raise NumericalError(
                f"{what}: the kernel's diagonal reaches {float(np.min(diagonal[diagonal > 0.0])):.3g}, below "
                f"{UNDERFLOW_SCALE:g}, where float64 loses digits to underflow (a network that shrinks its "
                "variances layer by layer: sigma_w below its critical value with no bias); scale the weights or "
                "the readout up (for positively homogeneous networks such as ReLU the kernel scales exactly)")
    return K


#: Diagonal kernel entries below this are refused (float64's normal range ends at 2.2e-308).
UNDERFLOW_SCALE = 1e-300


#: Limit methods: the expectation engine, the joint QMC simulation, or a choice by the program.
LIMIT_METHODS = ("auto", "expectations", "qmc")
#: ``method="auto"`` simulates programs with a monomial of this many Gaussian arguments or more
#: (a pair of them is a joint expectation of twice as many, beyond nested quadrature, and their
#: number grows exponentially along a recurrence), when ``rtol`` is within QMC's reach.
SIMULATION_MIN_ARITY = 4
SIMULATION_MIN_RTOL = 1e-3


def limit_method(program: Program, rtol: float, method: str = "auto") -> str:
    """The method :func:`limit` uses: ``"expectations"`` (:class:`Limit`) or ``"qmc"``
    (:class:`~netsor.interpret.simulation.SimulatedLimit`). ``"auto"`` takes ``"qmc"`` when
    ``rtol >= SIMULATION_MIN_RTOL`` for programs the engine refuses (Netsor⊤ corrections through
    nonlinear vectors of programs that read data, non-Gaussian corrections; BatchNorm's backward
    pass) and for programs without transposes that have a NonLin monomial of
    ``SIMULATION_MIN_ARITY`` or more Gaussian arguments without an exact rule (recurrent gates;
    BatchNorm of a non-homogeneous φ)."""
    check_choice(method, "method", LIMIT_METHODS)
    if method != "auto":
        return method
    if not isinstance(program, Program) or rtol < SIMULATION_MIN_RTOL:
        return "expectations"
    if any(isinstance(ln, MatMulLine) and ln.transposed for ln in program.lines):
        try:  # Netsor⊤: the engine is exact where it takes the program at all
            analysis_of(program)
        except UnsupportedError:
            return "qmc"
        return "expectations"
    an = analysis_of(program)
    if an.refusal is not None:  # the engine cannot take it at all
        return "qmc"
    return "qmc" if _inexact_arity(an) >= SIMULATION_MIN_ARITY else "expectations"


def _inexact_arity(an: Analysis) -> int:
    """The most Gaussian arguments of a monomial without an exact rule (BatchNorm, cone moments).

    A cone form is exact for the pairs the kernel needs when, in every group of correlated
    arguments (independent groups factorise), a term's steps fill at most half an orthant of
    ``MAX_ORTHANT_DIM``: the pair of the monomial with itself at two inputs doubles them (the
    gates of a recurrent state over several steps are one correlated group)."""
    def inexact(m: Monomial) -> bool:
        if an.batchnorm(m) is not None:
            return False
        cone = an.joint(m).cone
        if cone is None:
            return True
        groups = connected_groups(len(m.args), lambda i, j: an.correlated(m.args[i], m.args[j]))
        for _, _, steps in cone.terms:
            per_group = [0] * (max(groups) + 1)
            for q in steps:
                for g in {groups[i] for i in np.flatnonzero(cone.normals[q])}:
                    per_group[g] += 1
            if 2 * max(per_group) > joint.MAX_ORTHANT_DIM:
                return True
        return False

    return max((len(m.args) for m in an.monomials.values() if len(m.args) > 2 and inexact(m)), default=2)


#: What the expectation engine is built to reach, by the arity of a program's monomials without an
#: exact rule: pair integrals of two-argument functions (4-dimensional) to DEFAULT_RTOL, of three
#: arguments (6-dimensional) to 1e-6, of four or more (where ``method="auto"`` simulates) to 1e-5.
ENGINE_REACH = {2: DEFAULT_RTOL, 3: 1e-6}
ENGINE_REACH_BEYOND = 1e-5


#: What the simulation reaches in seconds to a minute on most programs (a GRU of 10 steps on 4
#: sequences: 8e-3 in 23 s, 2.8e-3 in 2 minutes; the NTK of a depth-3 BatchNorm MLP, batch 8: 53 s).
SIMULATION_REACH = 2e-2


def default_rtol(program: Program, method: str = "auto") -> float:
    """A tolerance the limit of ``program`` is built to meet (for tools that pick one: the command
    line): :data:`SIMULATION_REACH` where :func:`limit_method` simulates, else the engine's reach
    for the arity of the program's monomials (:data:`ENGINE_REACH`)."""
    if limit_method(program, SIMULATION_MIN_RTOL, method) == "qmc":
        return SIMULATION_REACH
    an = analysis_of(program)
    return DEFAULT_RTOL if an.refusal is not None else ENGINE_REACH.get(_inexact_arity(an), ENGINE_REACH_BEYOND)


def limit(program: Program, X: Any = None, X2: Any = None, *, rtol: float = DEFAULT_RTOL,
          memory_budget: int = DEFAULT_MEMORY_BUDGET, threads: int | None = None, method: str = "auto",
          seed: Any = 0) -> Limit | SimulatedLimit:
    """The infinite-width limit of ``program`` on inputs ``X``: a :class:`Limit` (the expectation
    engine: closed forms, quadrature, series, error bounds) or, with ``method="qmc"`` (or
    ``"auto"`` for programs whose expectations are high-dimensional, see :func:`limit_method`),
    a :class:`~netsor.interpret.simulation.SimulatedLimit` (joint randomised QMC, error bounds
    from independent replicates; ``seed`` scrambles it). Both answer ``nngp``, ``cov``, ``var``,
    ``scalar`` and carry ``error``."""
    rtol = check_real(rtol, "rtol", minimum=1e-15, maximum=1.0)
    seed_sequence(seed)  # validated whatever the method (only the simulation draws from it)
    if limit_method(program, rtol, method) == "qmc":
        from netsor.interpret.simulation import SimulatedLimit

        return SimulatedLimit(program, X, X2, rtol=rtol, memory_budget=memory_budget, seed=seed)
    return Limit(program, X, X2, rtol=rtol, memory_budget=memory_budget, threads=threads)


def nngp(program: Program, X: Any = None, X2: Any = None, *, rtol: float = DEFAULT_RTOL,
         memory_budget: int = DEFAULT_MEMORY_BUDGET, threads: int | None = None, psd: str = "auto",
         method: str = "auto", seed: Any = 0) -> Array:
    """NNGP kernel: the covariance of the outputs of ``program`` in the infinite-width limit.

    Parameters
    ----------
    program : Program
    X : array, shape (B1, d) or (B1, T, d), optional
        Omitted for a program that reads no data (one symbolic point, ``B1 = 1``).
    X2 : array, shape (B2, ...), optional
        If given, returns the cross-covariance between outputs on ``X`` and on ``X2``.
    rtol : float
        Relative tolerance of every entry (relative to √(K_ii K_jj)); met or
        :class:`NumericalError`.
    memory_budget : int
        Bytes of working memory beyond the result (computed in tiles that fit).
    threads : int, optional
    psd : {"auto", "clip", "check", "skip"}
        PSD handling of ``nngp(program, X)`` (see :meth:`Limit.nngp`).
    method : {"auto", "expectations", "qmc"}
        See :func:`limit` (``seed`` scrambles the ``"qmc"`` simulation).

    Returns
    -------
    K : array, shape (B1·R, B2·R)
        Indexed ``b·R + r`` for R outputs (``(B1, B2)`` when R = 1). The error bounds are on
        :func:`limit`'s :meth:`Limit.nngp` with ``with_error=True``.
    """
    return limit(program, X, X2, rtol=rtol, memory_budget=memory_budget, threads=threads, method=method,
                 seed=seed).nngp(psd=psd)

