"""Exact expectations of piecewise-polynomial functions on cones: ``E[Π linear forms · Π step(forms)]``.

A :class:`ConeFunction` of ``k`` arguments is a sum of terms ``c · Π_{p ∈ poly} (n_p·u) ·
Π_{s ∈ steps} 1{n_s·u > 0}`` over a list of linear forms ``n`` (rows of ``normals``, shape
(m, k)): ``relu(a)·relu(b) = a·b·1{a>0}·1{b>0}``, ``relu(a)·b``, ``|a|·step(c)``, ``max(a, b)``.
A step may be *smoothed* by a private Gaussian noise, ``1{n·u + ε > 0}``: averaged over ε it is
a normal-CDF gate ``Φ(n·u/√v)`` (erf, ``(1 + erf)/2``, the Φ of gelu), and in the augmented vector
``(u, ε)`` it is a plain step (its derivative, a Gaussian density, is not in the class: moments
of gradients are bounded by dominating functions instead). Products, derivatives and pairs of
such functions stay in the class, so every expectation the engine needs of them (pair
expectations, second and fourth moments, gradient moments) is a
*cone moment* ``E[Π_{i∈S} x_i · 1{x_t > 0, t ∈ T}]`` of a zero-mean Gaussian vector ``x`` of
the forms, computed here exactly — no series, no quadrature in the dimension of ``x``:

* Gaussian integration by parts, ``E[x_i H] = Σ_j Σ_ij E[∂_j H]``, lowers the degree: the
  derivative of a polynomial factor gives a moment of lower degree, the derivative of an
  indicator ``δ(x_j)`` gives ``Σ_ij / √(2π Σ_jj)`` times the moment of the law conditioned on
  ``x_j = 0`` (still zero-mean; ``x_j`` then leaves the orthant);
* degree 0 is an orthant probability: closed forms up to dimension 3 (``1/4 + asin ρ/(2π)``,
  ``1/8 + Σ asin ρ_ij/(4π)``) and, in dimension 4, Plackett's identity integrated along
  ``R(t) = R₀ + t (R − R₀)`` from the block-diagonal ``R₀`` of the split of the four forms into
  the two pairs least correlated across (per point; forms permuted to blocks {0, 1} and {2, 3}), so
  that only the four cross correlations move; with ``t ρ_ij = sin θ`` the density
  ``φ₂(0, 0; tρ_ij)`` cancels and ``P₄ = P₂(ρ₀₁) P₂(ρ₂₃) + Σ_{i∈{0,1}, j∈{2,3}} [asin ρ_ij/(8π)
  + asin ρ_ij/(4π²) ∫₀¹ asin ρ_{kl|ij}(u) du]``: four smooth 1-D integrals (15-point Gauss–Kronrod,
  on panels graded towards u = 1 only where the error estimate — the difference with the embedded
  7-point Gauss rule — asks for it: there a nearly singular ``R`` makes the conditional
  correlation steep).

Orthants of forms that split into independent groups (zero covariance across: the gates and the
candidates of a recurrent state) are products of the groups' orthants. A group of more than 4
forms (up to ``GENZ_MAX_DIM``) is integrated by Genz's separation of variables — ``P(x > 0) =
E Π_i Φ(s_i(y)/L_ii)`` with ``y`` drawn sequentially from the truncated conditionals, a smooth
integrand on the unit cube — with randomised QMC (``MC_REPLICATES`` independent scramblings of
one Sobol' set); its error is ``MC_ERROR_SIGMAS`` standard errors, reported as such, and the
points grow 4× per round until it meets the caller's ``atol``.

Everything is vectorised over points (covariances of shape (M, m, m)); the recursion runs over
a few dozen index states, memoised, each an array operation of length M.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from itertools import combinations, product

import numpy as np
from scipy import special, stats

from netsor.groups import connected_groups
from netsor.linalg import combination_of

Array = np.ndarray
#: One term: (coefficient, polynomial factors (form indices, sorted, repeats allowed), step forms (sorted, distinct)).
Term = tuple[float, tuple[int, ...], tuple[int, ...]]

_EPS = np.finfo(float).eps
#: Highest orthant dimension computed (closed forms up to 3, Plackett's identity at 4).
MAX_ORTHANT_DIM = 4
#: Error estimate of a four-dimensional orthant probability below which a rule is accepted.
_P4_TOL = 1e-12
#: Points per batch of the Plackett integral (bounds its working arrays to ~10 MB).
_CHUNK = 4096
#: Highest dimension of a group of dependent forms integrated by randomised QMC (Genz).
GENZ_MAX_DIM = 16
#: Independent scramblings behind every randomised QMC estimate (the Genz rule here, the joint
#: expectations' QMC in :mod:`netsor.gaussian.joint`): its standard error is their spread.
MC_REPLICATES = 16
#: log2 of the Genz rule's points per scrambling, by round.
GENZ_LOG2_POINTS = (9, 11, 13, 15)
#: Chance that a Monte-Carlo estimate's reported error is below its true error: the error is the
#: two-sided Student-t quantile with ``MC_REPLICATES − 1`` degrees of freedom (the standard error is
#: itself estimated from the replicates) times the standard error — 5.24 standard errors. With 8
#: replicates and 5 standard errors the miss was 1.6e-3 per estimate, seen as a failed CI run.
MC_MISS_PROBABILITY = 1e-4
MC_ERROR_SIGMAS = float(stats.t.isf(MC_MISS_PROBABILITY / 2, MC_REPLICATES - 1))
#: Values per batch of the Genz rule (points × QMC nodes × forms: ~32 MB of working arrays).
_GENZ_CHUNK = 1 << 22


class SingularOrthant(ValueError):
    """A group of more than 4 forms whose covariance is singular at some point (the Genz rule
    needs a positive-definite one): the caller integrates by other rules."""


def _graded(levels: int, split: int) -> Array:
    """Panel edges ``[0, 1/2, 3/4, …, 1 − 2^−levels, 1]`` (graded towards u = 1), each panel cut in ``split``."""
    graded = np.concatenate([[0.0], 1.0 - 0.5 ** np.arange(1, levels + 1), [1.0]])
    return np.concatenate([np.linspace(a, b, split + 1)[:-1] for a, b in zip(graded[:-1], graded[1:], strict=True)]
                          + [[1.0]])


# The 15-point Gauss–Kronrod rule on [−1, 1] (exact to degree 22) and its embedded 7-point Gauss rule
# (degree 13), nodes ≥ 0 from the largest (the constants of QUADPACK's qk15; tests check both degrees).
_KRONROD_X = np.array([0.991455371120812639206854697526329, 0.949107912342758524526189684047851,
                       0.864864423359769072789712788640926, 0.741531185599394439863864773280788,
                       0.586087235467691130294144845693013, 0.405845151377397166906606412076961,
                       0.207784955007898467600689403773245, 0.0])
_KRONROD_W = np.array([0.022935322010529224963732008058970, 0.063092092629978553290700663189204,
                       0.104790010322250183839876322541518, 0.140653259715525918745189590510238,
                       0.169004726639267902826583426598550, 0.190350578064785409913256402421014,
                       0.204432940075298892414161999234649, 0.209482141084727828012999174891714])
_GAUSS7_W = np.array([0.0, 0.129484966168869693270611432679082, 0.0, 0.279705391489276667901467771423780,
                      0.0, 0.381830050505118944950369775488975, 0.0, 0.417959183673469387755102040816327])


def _mirrored(half: Array, sign: float) -> Array:
    """The 15 values on [−1, 1] from those at the 8 nodes ≥ 0 (``sign`` −1 mirrors the nodes)."""
    return np.concatenate([sign * half[:-1], half[::-1]])


KRONROD_NODES = _mirrored(_KRONROD_X, -1.0)
KRONROD_WEIGHTS = _mirrored(_KRONROD_W, 1.0)
GAUSS7_WEIGHTS = _mirrored(_GAUSS7_W, 1.0)  # on the same nodes (zero at the Kronrod-only ones)


#: Terms of the Taylor series of sin used on |x| ≤ π/2 (the first omitted, (π/2)^23/23!, is 1.3e-18).
SINE_TERMS = 11


def sine_basis(u: Array) -> Array:
    """``C`` (SINE_TERMS, Q) with ``sin(u_q θ) = Σ_k θ^{2k+1} C[k, q]`` for ``|u_q θ| ≤ π/2``:
    ``C[k, q] = (−1)^k u_q^{2k+1} / (2k+1)!``. The sines of the Plackett path at all nodes are then
    one small matrix product of the powers of θ (numpy's float64 sine is scalar code, ~7 ns a value,
    and was 40 % of every four-dimensional orthant); the terms alternate and their absolute sum is
    at most sinh(π/2) ≈ 2.3, so rounding stays below ~1e-15."""
    k = np.arange(SINE_TERMS)[:, None]
    factorials = np.array([float(math.factorial(2 * j + 1)) for j in range(SINE_TERMS)])[:, None]
    return (-1.0) ** k * u[None, :] ** (2 * k + 1) / factorials


def sines(theta: Array, basis: Array) -> Array:
    """``sin(u_q θ_m)`` (Q, M) for ``|θ| ≤ π/2`` from :func:`sine_basis` of the nodes ``u`` in [0, 1]."""
    powers = np.empty((SINE_TERMS, theta.size))
    powers[0] = theta
    square = theta * theta
    for k in range(1, SINE_TERMS):
        np.multiply(powers[k - 1], square, out=powers[k])
    return basis.T @ powers


def _panel_rules(edges: Array) -> tuple[Array, Array, Array, Array]:
    """Nodes, Kronrod weights and embedded Gauss weights of the 15-point rule on each panel of
    ``edges`` (and the :func:`sine_basis` of the nodes): one set of function values gives the rule
    and, by the difference of the two weight sets, its error estimate (a bound of the 7-point rule's
    error, so conservative by orders of magnitude for the 15-point rule on smooth panels)."""
    lo, hi = edges[:-1, None], edges[1:, None]
    half = 0.5 * (hi - lo)
    nodes = (0.5 * (hi + lo) + half * KRONROD_NODES).ravel()
    return nodes, (half * KRONROD_WEIGHTS).ravel(), (half * GAUSS7_WEIGHTS).ravel(), sine_basis(nodes)


#: Ever finer rules of the Plackett integral, tried in turn on the points the previous one left above
#: ``_P4_TOL`` (on pairs of random inputs the first suffices for all but ~0.1–2%).
_LADDER = [_panel_rules(e) for e in (np.array([0.0, 1.0]), np.array([0.0, 0.75, 1.0]), _graded(6, 2),
                                     _graded(12, 4), _graded(24, 8))]
#: The three ways of splitting four forms into two pairs, as permutations putting the pairs first and last.
_SPLITS = np.array([[0, 1, 2, 3], [0, 2, 1, 3], [0, 3, 1, 2]])


@dataclass(frozen=True, eq=False)
class ConeFunction:
    """``Σ_terms c · Π_{p∈poly} (n_p·u) · Π_{s∈steps} 1{n_s·u + ε_s > 0}`` of ``u`` of shape (..., k),
    averaged over the private noises ``ε_s``.

    A form with a noise of variance ``v > 0`` is a *smoothed step*: ``E_ε 1{x + ε > 0} = Φ(x/√v)``
    — the normal-CDF gates ``Φ``, ``(1 + erf)/2``, ``erf = 2Φ(√2·) − 1`` and ``gelu(x) = x Φ(x)``. The
    noises are zero-mean Gaussians independent of ``u`` and of each other, so every expectation of
    the function is a cone moment of the augmented Gaussian vector ``(u, ε)``: the forms'
    covariance gains ``v`` on its diagonal, nothing else changes.

    Attributes
    ----------
    normals : array (m, k)
        The linear forms.
    terms : tuple of (coef, poly, steps)
        ``poly``: sorted form indices, with repeats (plain forms only); ``steps``: sorted distinct
        form indices.
    noise : array (m,), optional
        Variance of each form's noise (0: a plain form; default all 0).
    labels : array (m,) of int, optional
        Which noise variable each smoothed form carries (0 for plain forms). Forms of one term
        carry distinct noises; forms of different terms may share one (their sum is linear in it).
    """

    normals: Array
    terms: tuple[Term, ...]
    noise: Array | None = None
    labels: Array | None = None

    def __post_init__(self) -> None:
        m = self.normals.shape[0]
        object.__setattr__(self, "noise", np.zeros(m) if self.noise is None else np.asarray(self.noise, dtype=float))
        object.__setattr__(self, "labels", np.zeros(m, dtype=int) if self.labels is None
                           else np.asarray(self.labels, dtype=int))

    @property
    def dim(self) -> int:
        return self.normals.shape[1]

    @property
    def smoothed(self) -> bool:
        """Some step carries a noise (a normal-CDF gate): derivatives leave the class."""
        return bool(np.any(self.noise > 0))

    def __call__(self, u: Array) -> Array:
        x = np.asarray(u, dtype=float) @ self.normals.T
        noisy = self.noise > 0
        gate = np.where(noisy, special.ndtr(x / np.sqrt(np.where(noisy, self.noise, 1.0))), x > 0)
        out = np.zeros(x.shape[:-1])
        for c, poly, steps in self.terms:
            out = out + c * np.prod(x[..., list(poly)], axis=-1) * np.prod(gate[..., list(steps)], axis=-1)
        return out

    def times(self, other: ConeFunction) -> ConeFunction:
        """The product (same arguments; the noises of ``other`` are independent of those of ``self``)."""
        shift = int(self.labels.max(initial=0))
        merged, remap = _merge_forms(self, other, np.where(other.labels > 0, other.labels + shift, 0))
        terms = [(c1 * c2, tuple(sorted(p1 + tuple(remap[list(p2)].tolist()))),
                  tuple(sorted(set(s1) | set(remap[list(s2)].tolist()))))
                 for (c1, p1, s1), (c2, p2, s2) in product(self.terms, other.terms)]
        return merged.with_terms(_collect(terms))

    def derivative(self, i: int) -> ConeFunction:
        """``∂F/∂u_i`` off the kinks (the a.e. derivative; the δ terms of discontinuous steps are dropped).
        Not defined for smoothed steps (their derivative is a Gaussian density)."""
        if self.smoothed:
            raise ValueError("the derivative of a smoothed step is not a cone function")
        terms = [(c * poly.count(p) * self.normals[p, i], _drop(poly, p), steps)
                 for c, poly, steps in self.terms for p in sorted(set(poly)) if self.normals[p, i] != 0.0]
        return self.with_terms(_collect(terms))

    def argument(self, i: int) -> ConeFunction:
        """The coordinate ``u_i`` as a cone function of the same arguments."""
        return ConeFunction(np.eye(self.dim)[i:i + 1], ((1.0, (0,), ()),))

    def plus(self, other: ConeFunction) -> ConeFunction:
        """The sum (same arguments)."""
        merged, remap = _merge_forms(self, other, other.labels)
        terms = list(self.terms) + [(c, tuple(sorted(remap[list(p)].tolist())), tuple(sorted(remap[list(s)].tolist())))
                                    for c, p, s in other.terms]
        return merged.with_terms(_collect(terms))

    def tied(self, source: Array, ratio: Array) -> ConeFunction:
        """The function where each argument ``j`` equals ``ratio[j] · u_{source[j]}`` (itself when
        ``source[j] == j``; 0 when ``source[j] < 0``), written in the sources alone: equal to ``F`` on
        that subspace, where the arguments' law lives when they are so tied at every point. Normals
        that cancel to rounding (``step(g₂ − 2g₁)`` with ``g₂ = 2g₁``) are exact zeros; forms that
        become equal merge (``1{x > 0}² = 1{x > 0}``: an orthant of fewer forms, where the tied forms
        made a singular one); a plain step of a form that vanishes is 0 (``step(0) = 0``), a smoothed
        one its noise's ``P(ε > 0) = 1/2``; a polynomial factor that vanishes drops its term."""
        normals, size = self.normals.copy(), np.abs(self.normals)
        for j, (i, c) in enumerate(zip(np.asarray(source).tolist(), np.asarray(ratio).tolist(), strict=True)):
            if i != j:
                if i >= 0:
                    normals[:, i] += c * normals[:, j]
                    size[:, i] += abs(c) * size[:, j]
                normals[:, j] = 0.0
        normals[np.abs(normals) <= 1e-12 * size] = 0.0
        # plain forms merge by direction (1{λx > 0} = 1{x > 0} and λx = λ·x for λ > 0: the scale moves into
        # the coefficients), smoothed ones only when equal (their noise is not rescaled)
        keys: list[tuple[tuple[float, ...], float, int]] = []
        first: list[int] = []
        remap, scale = [], []
        forms = zip(normals, self.noise.tolist(), self.labels.tolist(), strict=True)
        for q, (normal, noise, label) in enumerate(forms):
            norm = float(np.linalg.norm(normal))
            plain = noise == 0 and norm > 0
            key = (tuple(np.round(normal / norm, 12).tolist()) if plain else tuple(normal.tolist()), noise, label)
            if key not in keys:
                keys.append(key)
                first.append(q)
            remap.append(keys.index(key))
            scale.append(norm / float(np.linalg.norm(normals[first[remap[-1]]])) if plain else 1.0)
        zero = [not np.any(normals[q]) for q in first]
        terms = []
        for c, poly, steps in self.terms:
            p = tuple(sorted(remap[q] for q in poly))
            st = sorted({remap[q] for q in steps})
            if any(zero[q] for q in p) or any(zero[q] and keys[q][1] == 0 for q in st):
                continue
            coef = c * math.prod(scale[q] for q in poly) * 0.5 ** sum(zero[q] for q in st)
            terms.append((coef, p, tuple(q for q in st if not zero[q])))
        used = sorted({q for _, p, st in terms for q in p + st})
        index = {q: n for n, q in enumerate(used)}
        terms = [(c, tuple(index[q] for q in p), tuple(index[q] for q in st)) for c, p, st in terms]
        return ConeFunction(normals[[first[q] for q in used]].reshape(len(used), self.dim), _collect(terms),
                            np.array([keys[q][1] for q in used]), np.array([keys[q][2] for q in used], dtype=int))

    def without_redundant_steps(self) -> ConeFunction:
        """Each term without the plain steps that two others of it imply: ``1{n_s·u > 0}`` with
        ``n_s = α n_i + β n_j``, ``α, β ≥ 0`` (to rounding), is 1 wherever ``n_i·u > 0`` and ``n_j·u > 0``.
        ``relu(a)·step(a − b)·relu(b − a/5)`` lives on the wedge ``a > b > a/5``, where ``a > 0``: two
        forms, not three of two arguments — whose every orthant was singular (a bound 823× the value at a
        point with itself), and whose pairs needed six-dimensional orthants (randomised QMC)."""
        terms = []
        for c, poly, steps in self.terms:
            kept = list(steps)
            while len(kept) > 2:
                plain = [q for q in kept if self.noise[q] == 0]
                redundant = next((q for q in plain if any(
                    _in_cone(self.normals[q], self.normals[i], self.normals[j])
                    for i, j in combinations([r for r in plain if r != q], 2))), None)
                if redundant is None:
                    break
                kept.remove(redundant)
            terms.append((c, poly, tuple(kept)))
        return self.with_terms(_collect(terms))

    def with_terms(self, terms: tuple[Term, ...]) -> ConeFunction:
        """The same forms with other terms."""
        return ConeFunction(self.normals, terms, self.noise, self.labels)

    @property
    def parallel_steps(self) -> bool:
        """Two plain step forms are parallel: ``δ(x)·1{cx > 0}`` would then need a convention at 0 the
        recursion does not make (such functions are left to the other rules). Smoothed steps never
        are (in the augmented space each has its own noise coordinate)."""
        rows = sorted({q for _, _, steps in self.terms for q in steps if self.noise[q] == 0})
        return _parallel_rows(self.normals[rows])

    @property
    def orthant_dim(self) -> int:
        """The most step forms of a term: the dimension of the orthants its expectations need."""
        return max((len(s) for _, _, s in self.terms), default=0)

    def product_orthant_dim(self, other: ConeFunction) -> int:
        """``self.times(other).orthant_dim`` (or more, where terms would cancel) without forming the
        product: its terms are all pairs of terms, whose plain steps merge when their forms are equal
        and whose smoothed steps never do (the noises of ``other`` are independent). A recurrent
        state of 3 steps has ~30 terms: its fourth power would have ~10⁶ before collecting."""
        def signatures(F: ConeFunction) -> set[tuple[frozenset[tuple[float, ...]], int]]:
            plain = {q: tuple(row) for q, row in enumerate(F.normals.tolist()) if F.noise[q] == 0}
            return {(frozenset(plain[q] for q in steps if q in plain), sum(1 for q in steps if q not in plain))
                    for _, _, steps in F.terms}

        return max((len(p1 | p2) + n1 + n2 for p1, n1 in signatures(self) for p2, n2 in signatures(other)),
                   default=0)

    def dominating(self) -> ConeFunction:
        """A function of plain forms ``D ≥ |F|`` everywhere. The terms that share their linear
        factors and plain steps form ``Π poly · Π plain · g(Φ₁, …, Φ_m)`` with ``g`` multilinear in
        the smoothed steps ``Φ_s ∈ [0, 1]``; ``|g|`` is at most its largest absolute value on the
        vertices of ``[0, 1]^m`` (erf = 2Φ − 1: 1, not 3), linear factors are bounded by their
        absolute values (``|x| = 2 relu(x) − x``; a factor that is also a step of its term is
        positive there). Its moments bound F's."""
        return _sum_of_plain(self, [(_vertex_max(g), poly, plain) for (poly, plain), g in self._groups().items()])

    def gradient_bounds(self) -> list[ConeFunction]:
        """Functions of plain forms ``G_i ≥ |∂F/∂u_i|`` (F continuous: the δ terms of plain steps
        vanish): per group (see :meth:`dominating`) ``Π plain · (|∂ᵢ Π poly| max|g| + |Π poly| κᵢ)``
        with ``κᵢ = Σ_s max|∂g/∂Φ_s| · |n_{s,i}| / √(2π v_s)`` (the steepest slope of each smoothed
        step). Without smoothed steps, the derivatives themselves."""
        if not self.smoothed:
            return [self.derivative(i) for i in range(self.dim)]
        out = []
        for i in range(self.dim):
            parts = []
            for (poly, plain), g in self._groups().items():
                smoothed = sorted({q for _, qs in g for q in qs})
                kappa = sum(_vertex_max([(c, tuple(x for x in qs if x != q)) for c, qs in g if q in qs])
                            * abs(self.normals[q, i]) / math.sqrt(2 * math.pi * self.noise[q]) for q in smoothed)
                if kappa:
                    parts.append((kappa, poly, plain))
                top = _vertex_max(g)
                parts += [(top * abs(poly.count(p) * self.normals[p, i]), _drop(poly, p), plain)
                          for p in sorted(set(poly)) if self.normals[p, i] != 0.0]
            out.append(_sum_of_plain(self, parts))
        return out

    def _groups(self) -> dict[tuple[tuple[int, ...], tuple[int, ...]], list[tuple[float, tuple[int, ...]]]]:
        """The terms by (linear factors, plain steps): the multilinear polynomial ``g`` of the
        smoothed steps of each, as (coefficient, smoothed step forms) pairs."""
        groups: dict[tuple[tuple[int, ...], tuple[int, ...]], list[tuple[float, tuple[int, ...]]]] = {}
        for c, poly, steps in self.terms:
            plain = tuple(q for q in steps if self.noise[q] == 0)
            groups.setdefault((poly, plain), []).append((c, tuple(q for q in steps if self.noise[q] > 0)))
        return groups

    def singular_steps(self, cov: Array) -> Array:
        """Per point of ``cov`` (P, k, k): a plain step form is parallel to another form there
        (correlation ±1 to 1e-12), or has no variance — ``δ(x)·1{cx > 0}``, ``δ(x)·cx`` or ``1{0 > 0}``
        in the recursion, the numerical twin of :attr:`parallel_steps` (``step(g − LN(g))·g``: one form,
        rescaled per input by the LayerNorm). The rounding of such orthants was amplified into bounds of
        9× the kernel."""
        steps = sorted({q for _, _, st in self.terms for q in st if self.noise[q] == 0})
        if not steps:
            return np.zeros(cov.shape[0], dtype=bool)
        used = sorted({q for _, poly, st in self.terms for q in (*poly, *st)})
        if self.dim <= 2 and not _parallel_rows(self.normals[used]):
            # forms of distinct directions are parallel only where the arguments' covariance is singular
            var = np.diagonal(cov, axis1=-2, axis2=-1)
            det = var[:, 0] * var[:, -1] - cov[:, 0, -1] ** 2 if self.dim == 2 else var[:, 0]
            if np.all(det > 1e-9 * np.prod(var, axis=-1)):
                return np.zeros(cov.shape[0], dtype=bool)
        starts = _run_starts(cov)
        if starts.size < cov.shape[0]:  # per-pair rows repeat a point's block: once per run
            return np.repeat(self.singular_steps(cov[starts]), np.diff(np.append(starts, cov.shape[0])))
        forms = _forms(self.normals[used], cov, self.normals[used])
        var = np.diagonal(forms, axis1=-2, axis2=-1)
        size = np.max(np.abs(cov), axis=(-2, -1))[:, None] * np.sum(self.normals[used] ** 2, axis=1)
        at = [used.index(q) for q in steps]
        with np.errstate(divide="ignore", invalid="ignore"):
            corr2 = forms[:, at] ** 2 / (var[:, at, None] * var[:, None, :])
        corr2[:, np.arange(len(at)), at] = 0.0
        return np.any(var[:, at] <= 1e-12 * size[:, at], axis=-1) | np.any(corr2 >= 1.0 - 1e-12, axis=(-2, -1))

    def form_covariance(self, cov: Array) -> Array:
        """Covariance (M, m, m) of the forms ``n·u + ε`` for ``Cov u = cov`` (M, k, k)."""
        forms = _forms(self.normals, cov, self.normals)
        if self.smoothed:
            forms = forms + np.diag(self.noise)
        return forms


def _parallel_rows(n: Array) -> bool:
    """Two rows of ``n`` (m, k) are parallel to 1e-12 (a zero row is parallel to any other)."""
    gram = n @ n.T
    norms = np.sqrt(np.diag(gram))
    off = np.abs(gram) >= (1 - 1e-12) * np.outer(norms, norms)
    return bool(np.any(off[~np.eye(len(n), dtype=bool)]))


def _run_starts(x: Array) -> Array:
    """Indices where a run of equal consecutive entries of ``x`` (M, …) starts (0 first)."""
    if x.shape[0] < 2:
        return np.arange(x.shape[0])
    changes = np.any((x[1:] != x[:-1]).reshape(x.shape[0] - 1, -1), axis=1)
    return np.concatenate([[0], np.flatnonzero(changes) + 1])


def _sum_of_plain(F: ConeFunction, terms: list[Term]) -> ConeFunction:
    """``Σ c · Π_{p∈poly} |x_p| · Π_{s∈steps} 1{x_s > 0}`` over the plain forms of F (``c ≥ 0``): a
    function of those forms only."""
    total = F.with_terms(())
    for c, poly, steps in terms:
        part = F.with_terms(((c, (), steps),))
        for p in poly:  # |x_p|: x_p where x_p is a step of the term (positive there), else 2 relu − x
            part = part.times(F.with_terms(((1.0, (p,), ()),) if p in steps
                                           else ((2.0, (p,), (p,)), (-1.0, (p,), ()))))
        total = total.plus(part)
    # keep the forms the terms use (the smoothed ones of F are not among them)
    used = sorted({q for _, poly, steps in total.terms for q in (*poly, *steps)})
    index = {q: i for i, q in enumerate(used)}
    return ConeFunction(total.normals[used], tuple((c, tuple(index[q] for q in poly), tuple(index[q] for q in steps))
                                                   for c, poly, steps in total.terms))


def _vertex_max(g: list[tuple[float, tuple[int, ...]]]) -> float:
    """``max |Σ c Π_{s∈S} z_s|`` over ``z ∈ {0, 1}^m``: the largest absolute value of a multilinear
    polynomial on ``[0, 1]^m`` (it is reached at a vertex)."""
    variables = sorted({q for _, qs in g for q in qs})
    best = 0.0
    for corner in product((0.0, 1.0), repeat=len(variables)):
        z = dict(zip(variables, corner, strict=True))
        best = max(best, abs(sum(c * math.prod(z[q] for q in qs) for c, qs in g)))
    return best


def _merge_forms(a: ConeFunction, b: ConeFunction, b_labels: Array) -> tuple[ConeFunction, Array]:
    """The forms of ``a`` then those of ``b`` (noise labels ``b_labels``) not in ``a`` (same normal,
    noise and label), as a function with ``a``'s terms; and where each form of ``b`` went."""
    keys = [(tuple(r), v, int(lab)) for r, v, lab in zip(a.normals.tolist(), a.noise.tolist(), a.labels, strict=True)]
    remap = []
    for r, v, lab in zip(b.normals.tolist(), b.noise.tolist(), b_labels, strict=True):
        key = (tuple(r), v, int(lab))
        if key not in keys:
            keys.append(key)
        remap.append(keys.index(key))
    normals = np.array([k[0] for k in keys], dtype=float).reshape(len(keys), a.normals.shape[1])
    return (ConeFunction(normals, a.terms, np.array([k[1] for k in keys]), np.array([k[2] for k in keys], dtype=int)),
            np.array(remap, dtype=int))


def _drop(poly: tuple[int, ...], p: int) -> tuple[int, ...]:
    """``poly`` with one occurrence of ``p`` removed."""
    at = poly.index(p)
    return poly[:at] + poly[at + 1:]


def _in_cone(n: Array, p: Array, q: Array) -> bool:
    """``n = α p + β q`` with ``α, β ≥ 0``, not both 0, to rounding (``p``, ``q`` independent)."""
    coef = combination_of(np.stack([p, q], axis=1), n)
    return coef is not None and bool(np.all(coef >= 0.0) and np.any(coef > 0.0))


def _collect(terms: list[Term]) -> tuple[Term, ...]:
    acc: dict[tuple[tuple[int, ...], tuple[int, ...]], float] = {}
    for c, p, s in terms:
        acc[(p, s)] = acc.get((p, s), 0.0) + c
    return tuple((c, p, s) for (p, s), c in acc.items() if c != 0.0)


def cone_expectation(F: ConeFunction, cov: Array, *, atol: Array | float | None = None
                     ) -> tuple[Array, Array, Array]:
    """``(E F(U), error bound, standard error)`` for ``U ~ N(0, cov[p])``, ``cov`` of shape (P, k, k).

    Exact (standard error 0) when every group of dependent step forms of a term has at most 4;
    larger groups by the Genz rule until the error meets ``atol`` (absolute, per point; None: one
    round of ``2**GENZ_LOG2_POINTS[1]`` points). Raises :class:`SingularOrthant` where that rule
    cannot go."""
    return _integrate(F.form_covariance(np.asarray(cov, dtype=float)), F.terms, atol, _rows(F.normals, F.noise))


def cone_pair_expectation(F: ConeFunction, G: ConeFunction, cov_x: Array, cov_y: Array, C: Array, *,
                          atol: Array | float | None = None) -> tuple[Array, Array, Array]:
    """``(E[F(U) G(V)], error bound, standard error)`` for (U, V) zero-mean Gaussian with
    ``Cov U = cov_x`` (M, k₁, k₁), ``Cov V = cov_y`` (M, k₂, k₂) and ``Cov(U, V) = C`` (M, k₁, k₂);
    ``atol`` as for :func:`cone_expectation`."""
    nf, ng = F.normals, G.normals
    # the two functions' noises are independent: they enter the diagonal blocks only
    a, b, c = F.form_covariance(cov_x), G.form_covariance(cov_y), _forms(nf, C, ng)
    m = nf.shape[0]
    forms = np.empty((a.shape[0], m + ng.shape[0], m + ng.shape[0]))  # the blocks written once, no nested copies
    forms[:, :m, :m], forms[:, :m, m:], forms[:, m:, :m], forms[:, m:, m:] = a, c, np.swapaxes(c, 1, 2), b
    terms = [(c1 * c2, p1 + tuple(q + m for q in p2), s1 + tuple(q + m for q in s2))
             for (c1, p1, s1), (c2, p2, s2) in product(F.terms, G.terms)]
    rows = np.block([[_rows(nf, F.noise), np.zeros((m, ng.shape[1] + ng.shape[0]))],
                     [np.zeros((ng.shape[0], nf.shape[1] + m)), _rows(ng, G.noise)]])
    return _integrate(forms, tuple(terms), atol, rows)


def pair_cone(F: ConeFunction, G: ConeFunction) -> ConeFunction:
    """``F(u)·G(v)`` as one cone function of ``(u, v)`` (``k₁ + k₂`` arguments; G's forms after F's,
    its noises relabelled after F's: the two functions' noises are independent)."""
    (m, k1), (mg, k2) = F.normals.shape, G.normals.shape
    normals = np.block([[F.normals, np.zeros((m, k2))], [np.zeros((mg, k1)), G.normals]])
    terms = tuple((c1 * c2, p1 + tuple(q + m for q in p2), s1 + tuple(q + m for q in s2))
                  for (c1, p1, s1), (c2, p2, s2) in product(F.terms, G.terms))
    assert F.labels is not None and G.labels is not None
    labels = np.concatenate([F.labels, np.where(G.labels > 0, G.labels + int(F.labels.max(initial=0)), 0)])
    return ConeFunction(normals, terms, np.concatenate([F.noise, G.noise]), labels)


def _rows(normals: Array, noise: Array) -> Array:
    """The forms ``n·u + ε`` as rows over ``(u, ε)`` (each form's noise its own coordinate): a form
    whose row lies in the span of others' rows is exactly their combination, at every covariance."""
    return np.hstack([normals, np.diag(np.sqrt(noise))])


def _integrate(forms: Array, terms: tuple[Term, ...], atol: Array | float | None, rows: Array
               ) -> tuple[Array, Array, Array]:
    """``Σ c · moment`` of the forms' covariances (M, m, m) (``rows``: :func:`_rows`), with the Genz
    rule's points growing 4× per round on the points whose error misses ``atol`` (None: one round at
    the second size)."""
    rounds = GENZ_LOG2_POINTS[1:2] if atol is None else GENZ_LOG2_POINTS
    value, err, se = _Moments(forms, rows, rounds[0]).combine(terms)
    for log2 in rounds[1:]:
        todo = np.flatnonzero((se > 0) & ~(err <= atol))
        if not todo.size:
            break
        value[todo], err[todo], se[todo] = _Moments(forms[todo], rows, log2).combine(terms)
    return value, err, se


def _forms(left: Array, cov: Array, right: Array) -> Array:
    """``left · cov[p] · rightᵀ`` (M, m₁, m₂) for forms ``left`` (m₁, k₁), ``right`` (m₂, k₂), ``cov`` (M, k₁, k₂)."""
    if left.shape[0] == left.shape[1] and right.shape[0] == right.shape[1] and \
            np.array_equal(left, np.eye(left.shape[0])) and np.array_equal(right, np.eye(right.shape[0])):
        return cov
    return np.matmul(np.matmul(left, cov), right.T)


class _Moments:
    """Cone moments ``E[Π_{i∈S} x_i 1{x_T > 0} | x_D = 0]`` of one family of zero-mean Gaussians
    ``x`` (covariances given as (M, m, m)), memoised by ``(D, S, T)``; each moment is returned with the
    sum of the absolute values of its parts (for the rounding bound) and its quadrature error.
    Covariances are kept as a dict ``{(a, b): (M,) array}`` over ``a ≤ b`` of the forms not conditioned
    on, so that every operation runs over contiguous arrays of the M points and conditioning touches
    only the entries that remain."""

    def __init__(self, cov: Array, rows: Array, log2_points: int = GENZ_LOG2_POINTS[1]) -> None:
        self.M = cov.shape[0]
        self.rows = rows
        self.log2_points = log2_points
        self._determined: dict[tuple[frozenset[int], int], bool] = {}
        m = cov.shape[1]
        entries = {(a, b): np.ascontiguousarray(cov[:, a, b]) for a in range(m) for b in range(a, m)}
        ones = np.ones(self.M)
        self._cond: dict[frozenset[int], tuple[_Cov, dict[int, Array]]] = {
            frozenset(): (entries, {a: ones for a in range(m)})}
        #: Per conditioning, the factor that the step of each form it determines contributes (see
        #: :meth:`conditional`).
        self._at_zero: dict[frozenset[int], dict[int, Array]] = {frozenset(): {}}
        self._memo: dict[tuple[frozenset[int], tuple[int, ...], frozenset[int]], _Moment] = {}
        self._deltas: dict[tuple[frozenset[int], int, int], Array] = {}
        self._parallels: dict[tuple[frozenset[int], int, int], float] = {}
        self._groups: dict[tuple[frozenset[int], tuple[int, ...]], tuple[Array, Array | None, Array | None]] = {}
        #: The forms whose conditional entries some moment used, per conditioning (for the rounding bound).
        self._used: dict[frozenset[int], set[int]] = {}

    def combine(self, terms: tuple[Term, ...]) -> tuple[Array, Array, Array]:
        """``(Σ c · moment, bound, standard error)``: the bound is rounding (eps times the absolute
        sum, amplified by the loss of precision of conditioning on nearly dependent forms) plus the
        quadrature error plus ``MC_ERROR_SIGMAS`` standard errors. Every Genz orthant of one
        ``_Moments`` uses the same scramblings, so the sum is itself a randomised QMC estimate per
        scrambling: its standard error is the spread of the sum's replicates, which counts the
        correlation of the parts' errors (they may cancel or add)."""
        value, size, qerr, dev = np.zeros(self.M), np.zeros(self.M), np.zeros(self.M), None
        for c, poly, steps in terms:
            v, s, q, d = self.moment(frozenset(), poly, frozenset(steps))
            value += c * v
            size += abs(c) * s
            if q is not None:
                qerr += abs(c) * q
            dev = _plus(dev, c, d)
        se = np.zeros(self.M) if dev is None else _standard_error(dev)
        amplification = np.ones(self.M)  # the largest over the forms used (in place: no stack of them)
        for given, forms in self._used.items():
            for a in forms:
                np.maximum(amplification, self._cond[given][1][a], out=amplification)
        return value, qerr + MC_ERROR_SIGMAS * se + 64 * _EPS * size * amplification, se

    def conditional(self, given: frozenset[int]) -> tuple[_Cov, dict[int, Array]]:
        """Covariance entries given ``x_j = 0`` for ``j ∈ given``, and per form the worst ratio of its
        variance before and after a conditioning along the way (the relative rounding of its conditional
        entries, in eps). Per form, not over the family: a form made (nearly) dependent on the ones
        conditioned on — ``L₋ = L₊ + q`` among the pieces of ``|g − |g − h|/2|`` — loses all precision,
        but amplifies the bound only if a moment uses it under that conditioning (the family's worst
        ratio gave bounds 10³× the kernel)."""
        if given not in self._cond:
            j = max(given)
            base, base_amp = self.conditional(given - {j})
            inv = _where_positive(_entry(base, j, j), np.reciprocal)
            free = sorted({q for pair in base for q in pair} - {j})
            weight = {a: _entry(base, a, j) * inv for a in free}
            cov = {(a, b): base[(a, b)] - weight[a] * _entry(base, j, b) for a in free for b in free if a <= b}
            amp = {}
            at_zero = dict(self._at_zero[given - {j}])
            for a in free:
                if self.determined(given, a):
                    # exactly 0 given x_given = 0 at every covariance: its conditional entries are 0,
                    # not the rounding of a difference, which the ratio below would amplify by 1/eps
                    # (gate(g)·relu(b)·g·|g − b|: bounds 10³–10⁴× the kernel)
                    zero = np.zeros(self.M)
                    cov.update({(min(a, b), max(a, b)): zero for b in free})
                    amp[a] = np.maximum(base_amp[a], base_amp[j])
                    if a not in at_zero:
                        # x_a is a combination of the forms conditioned on, each of which is here by a
                        # δ(x_j) from a step 1{x_j > 0} of the same product as 1{x_a > 0}: the product of a
                        # δ and a step at its jump is the mean of the step's two sides, 1/2 — the only
                        # value that keeps the product rule (1{x > 0}² = 1{x > 0} has the derivative δ
                        # once: each of its two δ terms carries half), whatever the order of the δs.
                        # step(0) = 0 there lost half of x0·x2·1{x0, x1, x2 > 0} with x0 = x1 + x2
                        # (relu(relu(g − b) − b) of a bias b: 20 % off under a rounding-level bound,
                        # strict campaign seed 262). A form that is 0 everywhere keeps step(0) = 0.
                        at_zero[a] = np.full(self.M, 0.5 if np.any(self.rows[a]) else 0.0)
                    continue
                before, after = base[(a, a)], cov[(a, a)]
                if after.min(initial=1.0) <= 1e-300:
                    after = np.where(after > 1e-300, after, np.maximum(before, 1e-300))
                amp[a] = np.maximum(np.maximum(base_amp[a], base_amp[j]), before / after)
            self._cond[given] = (cov, amp)
            self._at_zero[given] = at_zero
        return self._cond[given]

    def determined(self, given: frozenset[int], a: int) -> bool:
        """Whether form ``a``'s row lies in the span of the rows of ``given`` (to 1e-12 of its norm)."""
        key = (given, a)
        if key not in self._determined:
            residual = self._off_span(given, a)
            self._determined[key] = bool(np.linalg.norm(residual) <= 1e-12 * np.linalg.norm(self.rows[a]))
        return self._determined[key]

    def _parallel(self, given: frozenset[int], a: int, b: int) -> float:
        """``λ`` where ``x_b = λ x_a`` given ``x_given = 0`` (their rows' parts off the span of the
        given rows are parallel, to 1e-12), else 0. Steps of such forms are one step (``λ > 0``) or
        none (``λ < 0``): left to the orthant's closed forms, their correlation ``1 − O(ε)`` cost
        ``√ε`` in ``asin`` (|x − b|-type kinks of a bias: 1e-10 under a 1e-13 bound, strict campaign
        seed 262)."""
        key = (given, a, b)
        if key not in self._parallels:
            ra, rb = self._off_span(given, a), self._off_span(given, b)
            na, nb = np.linalg.norm(ra), np.linalg.norm(rb)
            lam = 0.0
            if na > 0.0 and nb > 0.0:
                lam = float(ra @ rb) / na**2
                if np.linalg.norm(rb - lam * ra) > 1e-12 * nb:
                    lam = 0.0
            self._parallels[key] = lam
        return self._parallels[key]

    def _off_span(self, given: frozenset[int], a: int) -> Array:
        """Form ``a``'s row less its projection on the rows of ``given``."""
        row = self.rows[a]
        if not given:
            return row
        basis = self.rows[sorted(given)].T
        return row - basis @ np.linalg.lstsq(basis, row, rcond=None)[0]

    def _delta(self, given: frozenset[int], i: int, j: int) -> Array:
        """``Σ_ij / √(2π Σ_jj)`` given ``x_D = 0`` (0 where ``Σ_jj = 0``): the weight of ``δ(x_j)``."""
        key = (given, i, j)
        if key not in self._deltas:
            cov = self.conditional(given)[0]
            self._deltas[key] = _entry(cov, i, j) * _where_positive(_entry(cov, j, j),
                                                                     lambda var: 1.0 / np.sqrt(2 * math.pi * var))
        return self._deltas[key]

    def moment(self, given: frozenset[int], poly: tuple[int, ...], steps: frozenset[int]) -> _Moment:
        """``(value, Σ |parts|, quadrature error, replicate deviations)`` of
        ``E[Π_{i∈poly} x_i 1{x_steps > 0} | x_given = 0]``; the quadrature error is None where every
        orthant below is a closed form, the deviations (R, M) of the Genz rule's replicates from
        their mean None where no orthant below is by that rule."""
        key = (given, poly, steps)
        if key in self._memo:
            return self._memo[key]
        cov = self.conditional(given)[0]
        self._used.setdefault(given, set()).update(poly, steps)
        if not poly:
            value, qerr, dev = self._orthant(given, cov, sorted(steps))
            out = (value, np.abs(value), qerr, dev)
        else:
            i, rest = poly[0], poly[1:]
            children = [(rest.count(j) * _entry(cov, i, j), (given, _drop(rest, j), steps))
                        for j in sorted(set(rest))]  # derivative of a polynomial factor
            children += [(self._delta(given, i, j), (given | {j}, rest, steps - {j}))
                         for j in sorted(steps - set(rest))]  # of an indicator: δ(x_j), x_j leaves the orthant
            value, size, qerr, dev = np.zeros(self.M), np.zeros(self.M), None, None
            for coef, child in children:
                v, s, q, d = self.moment(*child)
                weight = np.abs(coef)
                value += coef * v
                size += weight * s
                qerr = _plus(qerr, weight, q)
                dev = _plus(dev, coef, d)
            out = (value, size, qerr, dev)
        self._memo[key] = out
        return out

    def _orthant(self, given: frozenset[int], cov: _Cov, idx: list[int]) -> tuple[Array, Array | None, Array | None]:
        """``(P(x_idx > 0 | x_given = 0), quadrature error, replicate deviations)``: the product over
        the groups of dependent forms (exactly zero covariance across, at every point), each group's
        orthant memoised; quadrature errors of the product ``|Π p̂ − Π p| ≤ Σ |p̂_g − p_g|`` (all in
        [0, 1]); Genz replicates multiplied replicate by replicate."""
        at_zero = self._at_zero[given]
        parts = [(at_zero[a], None, None) for a in idx if a in at_zero]
        kept: list[int] = []
        for a in (a for a in idx if a not in at_zero):
            ratios = [self._parallel(given, b, a) for b in kept]
            if any(r < 0.0 for r in ratios):  # 1{x > 0}·1{−λx > 0} = 0
                return np.zeros(self.M), None, None
            if not any(r > 0.0 for r in ratios):  # 1{x > 0}·1{λx > 0} = 1{x > 0}: one form of the two
                kept.append(a)
        idx = kept
        for group in _dependent_groups(cov, idx):
            key = (given, group)
            if key not in self._groups:
                self._groups[key] = _orthant(cov, list(group), self.M, self.log2_points)
            parts.append(self._groups[key])
        value, qerr = np.prod([p for p, _, _ in parts], axis=0), None
        for _, q, _ in parts:
            qerr = _plus(qerr, 1.0, q)
        if all(d is None for _, _, d in parts):
            return value, qerr, None
        replicates = np.prod([p if d is None else p + d for p, _, d in parts], axis=0)
        value = replicates.mean(axis=0)
        return value, qerr, replicates - value


#: Covariance entries ``{(a, b): (M,) array}``, ``a ≤ b``.
_Cov = dict[tuple[int, int], Array]
#: A cone moment: (value, Σ |parts|, quadrature error or None, Genz replicate deviations (R, M) or None).
_Moment = tuple[Array, Array, Array | None, Array | None]


def _plus(total: Array | None, weight: Array | float, part: Array | None) -> Array | None:
    """``total + weight · part`` where None stands for 0."""
    if part is None:
        return total
    return weight * part if total is None else total + weight * part


def _standard_error(dev: Array) -> Array:
    """Standard error of the mean of R replicates from their deviations from it (R, M)."""
    R = dev.shape[0]
    return np.sqrt(np.sum(dev * dev, axis=0) / ((R - 1) * R))


def _dependent_groups(cov: _Cov, idx: list[int]) -> list[tuple[int, ...]]:
    """``idx`` split into groups with exactly zero covariance across at every point (connected
    components of the dependence graph), in order."""
    label = connected_groups(len(idx), lambda i, j: bool(np.any(_entry(cov, idx[i], idx[j]) != 0.0)))
    out: dict[int, list[int]] = {}
    for a, g in zip(idx, label, strict=True):
        out.setdefault(g, []).append(a)
    return [tuple(g) for g in out.values()]


def _where_positive(var: Array, f: Callable[[Array], Array]) -> Array:
    """``f(var)`` where ``var > 0``, else 0 — without masks when every entry is positive (the usual
    case: masks were a third of the cone-moment recursion's passes)."""
    if var.min(initial=1.0) > 0:
        return f(var)
    return np.where(var > 0, f(np.where(var > 0, var, 1.0)), 0.0)


def _entry(cov: _Cov, a: int, b: int) -> Array:
    return cov[(a, b) if a <= b else (b, a)]


def orthant(cov: Array, idx: list[int], log2_points: int = GENZ_LOG2_POINTS[1]) -> tuple[Array, Array, Array]:
    """``(P(x_i > 0 ∀ i ∈ idx), error bound, standard error)`` for zero-mean ``x`` with covariances
    ``cov`` (M, m, m): closed forms up to 3 forms, Plackett's identity at 4, the Genz rule with
    ``2**log2_points`` points per scrambling beyond (``len(idx) ≤ GENZ_MAX_DIM``; its error is
    ``MC_ERROR_SIGMAS`` standard errors). A form of zero variance is 0, not positive (``step(0) = 0``)."""
    cov = np.asarray(cov, dtype=float)
    entries = {(a, b): cov[:, a, b] for a in idx for b in idx if a <= b}
    p, qerr, dev = _orthant(entries, idx, cov.shape[0], log2_points)
    se = np.zeros(cov.shape[0]) if dev is None else _standard_error(dev)
    return p, MC_ERROR_SIGMAS * se + (0.0 if qerr is None else qerr), se


def _orthant(cov: _Cov, idx: list[int], M: int, log2_points: int) -> tuple[Array, Array | None, Array | None]:
    """:func:`orthant` of covariance entries: ``(p, quadrature error, replicate deviations)`` — the
    error None for the closed forms (dimension ≤ 3), the deviations (R, M) None but for the Genz rule."""
    n = len(idx)
    if not n:
        return np.ones(M), None
    var = [_entry(cov, a, a) for a in idx]
    live = np.all([v > 0 for v in var], axis=0)
    sd = [np.sqrt(np.where(v > 0, v, 1.0)) for v in var]
    rho = {(p, q): np.clip(_entry(cov, idx[p], idx[q]) / (sd[p] * sd[q]), -1.0, 1.0)
           for p in range(n) for q in range(p + 1, n)}
    qerr = None
    if n == 1:
        p = np.full(M, 0.5)
    elif n == 2:
        p = 0.25 + np.arcsin(rho[(0, 1)]) / (2 * math.pi)
    elif n == 3:
        p = 0.125 + (np.arcsin(rho[(0, 1)]) + np.arcsin(rho[(0, 2)]) + np.arcsin(rho[(1, 2)])) / (4 * math.pi)
    elif n == 4:
        R = np.empty((4, 4, M))
        for p_ in range(4):
            R[p_, p_] = 1.0
        for (p_, q), r in rho.items():
            R[p_, q] = R[q, p_] = r
        p, qerr = _orthant4(R)
    elif n <= GENZ_MAX_DIM:
        R = np.empty((M, n, n))
        for p_ in range(n):
            R[:, p_, p_] = 1.0
        for (p_, q), r in rho.items():
            R[:, p_, q] = R[:, q, p_] = r
        replicates = np.zeros((MC_REPLICATES, M))
        replicates[:, live] = _genz_orthant(R[live], log2_points)
        p = replicates.mean(axis=0)
        return p, None, replicates - p
    else:
        raise ValueError(f"orthant: dimension {n} above {GENZ_MAX_DIM}")
    if live.all():
        return p, qerr, None
    return np.where(live, p, 0.0), None if qerr is None else np.where(live, qerr, 0.0), None


@lru_cache(maxsize=len(GENZ_LOG2_POINTS))
def _genz_uniforms(log2_points: int) -> Array:
    """``MC_REPLICATES`` independent scramblings (fixed seed: results are reproducible) of one
    Sobol' set of ``2**log2_points`` points in ``GENZ_MAX_DIM − 1`` dimensions, read-only, in single
    precision (42 MB for all rounds; 2^24 levels are far finer than the point sets); a group of
    n forms uses the first n − 1 coordinates (themselves a scrambled Sobol' set)."""
    sets = [stats.qmc.Sobol(d=GENZ_MAX_DIM - 1, scramble=True, seed=rng).random_base2(log2_points)
            for rng in np.random.default_rng(20261202).spawn(MC_REPLICATES)]
    out = np.stack(sets).astype(np.float32)
    out.flags.writeable = False
    return out


def _genz_orthant(R: Array, log2_points: int) -> Array:
    """The replicate estimates (``MC_REPLICATES``, M) of ``P(x > 0)`` for ``x ~ N(0, R[m])``,
    correlations ``R`` (M, n, n) positive definite, by Genz's separation of variables: with
    ``x = L y`` (Cholesky), ``x_i > 0`` is ``y_i > −s_i`` for ``s_i = Σ_{j<i} L_ij y_j / L_ii``, so
    ``P = E Π_i Φ(s_i)`` with each ``y_i`` drawn from its truncated conditional,
    ``y_i = −Φ⁻¹(w_i Φ(s_i))`` for uniform ``w_i`` — a smooth function on the unit cube, averaged
    over the randomised QMC points."""
    M, n, _ = R.shape
    try:
        L = np.linalg.cholesky(R)
    except np.linalg.LinAlgError:
        L = None
    pivots = None if L is None else np.diagonal(L, axis1=1, axis2=2)
    if pivots is None or not np.all(pivots > 1e-6):
        raise SingularOrthant(f"the covariance of {n} step forms is singular (or nearly) at some point")
    scaled = L / pivots[:, :, None]  # row i over L_ii: the thresholds s_i
    uniforms = _genz_uniforms(log2_points)
    R_, Q = uniforms.shape[:2]
    w = uniforms[:, :, :n - 1].reshape(R_ * Q, n - 1)  # the scramblings side by side: one pass for all
    estimates = np.empty((R_, M))
    step = max(1, _GENZ_CHUNK // (R_ * Q * n))
    for lo in range(0, M, step):
        rows = slice(lo, min(lo + step, M))
        m = rows.stop - rows.start
        y = np.empty((m, R_ * Q, n - 1))
        gate = np.full((m, R_ * Q), 0.5)  # Φ(s_0) with s_0 = 0
        f = gate.copy()
        for i in range(n):
            if i:
                gate = special.ndtr(np.matmul(y[:, :, :i], scaled[rows, i, :i, None])[..., 0])
                f *= gate
            if i < n - 1:
                y[:, :, i] = -special.ndtri(np.maximum(w[:, i] * gate, 1e-300))
        estimates[:, rows] = f.reshape(m, R_, Q).mean(axis=2).T
    return estimates


def _orthant4(R: Array) -> tuple[Array, Array]:
    """Four-dimensional orthant probabilities of correlation matrices (4, 4, M) by Plackett's identity,
    each with the coarsest rule of ``_LADDER`` whose error estimate is below ``_P4_TOL`` (or the finest).

    The path starts from the block-diagonal matrix of the split of the forms into two pairs whose
    cross correlations are smallest (Σ |asin ρ| over the four): the most correlated forms stay in the
    closed-form start, and the four integrals are short and smooth (on pairs of random inputs of a
    relu(a)·relu(b) term, ~1.5× fewer nodes than a fixed split; orthant probabilities are invariant
    under a permutation of the forms)."""
    M = R.shape[-1]
    angle = {(a, b): np.abs(np.arcsin(R[a, b])) for a in range(4) for b in range(a + 1, 4)}
    cross = np.stack([sum(angle[min(a, b), max(a, b)] for a in perm[:2] for b in perm[2:]) for perm in _SPLITS])
    split = np.argmin(cross, axis=0)
    R = R.copy()
    for choice in (1, 2):  # gather the points of each other split only (np.choose over three permuted
        at = np.flatnonzero(split == choice)  # copies was 15 % of a relu(a)·relu(b) kernel)
        R[:, :, at] = R[np.ix_(_SPLITS[choice], _SPLITS[choice], at)]
    p, err = np.empty(M), np.empty(M)
    todo = np.arange(M)
    for rule in _LADDER:
        for lo in range(0, todo.size, _CHUNK):
            idx = todo[lo:lo + _CHUNK]
            p[idx], err[idx] = _plackett(R[:, :, idx], rule)
        todo = todo[err[todo] > _P4_TOL]
    return p, err


def _plackett(R: Array, rule: tuple[Array, Array, Array, Array]) -> tuple[Array, Array]:
    """``P₄`` and its error estimate from a rule of :func:`_panel_rules`, for correlations (4, 4, M).

    Plackett's identity along ``R(t) = R₀ + t (R − R₀)`` from the block-diagonal ``R₀`` (blocks {0, 1},
    {2, 3}; ``P₄(R₀) = P₂(ρ₀₁) P₂(ρ₂₃)``): only the four cross correlations move, and each contributes
    ``θ/(8π) + θ/(4π²) ∫₀¹ asin ρ_{kl|ij} du`` with ``θ = asin ρ_ij``, ``t ρ_ij = sin(u θ)``."""
    _, w_kronrod, w_gauss, basis = rule
    p = (0.25 + np.arcsin(R[0, 1]) / (2 * math.pi)) * (0.25 + np.arcsin(R[2, 3]) / (2 * math.pi))
    err = np.full(R.shape[-1], 16 * _EPS)
    theta = np.arcsin(R[_CROSS_I, _CROSS_J])  # (4, M): the four cross correlations at once
    coefficients = _conditional_coefficients(R)
    work = np.empty((2, basis.shape[1], R.shape[-1]))
    for c in range(4):
        values = _conditional_asin(*(x[c] for x in coefficients), sines(theta[c], basis), work)
        integral = w_kronrod @ values
        p += theta[c] / (8 * math.pi) + theta[c] / (4 * math.pi**2) * integral
        err += np.abs(theta[c]) / (4 * math.pi**2) * np.abs(integral - w_gauss @ values)
    return p, err


#: The four cross pairs (i, j) of the Plackett path and their partners (k in the block of i, l in that of j).
_CROSS_I, _CROSS_J = np.array([0, 0, 1, 1]), np.array([2, 3, 2, 3])
_CROSS_K, _CROSS_L = 1 - _CROSS_I, 5 - _CROSS_J


def _conditional_coefficients(R: Array) -> tuple[Array, ...]:
    """Per-point coefficients ``g₁, g₃, p₀, p₂, q₀, q₂`` (each (4, M), one row per cross pair) of the
    conditional correlation ``ρ_{kl|ij} = s (g₁ + g₃ s²) / √((p₀ − p₂ s²)(q₀ − q₂ s²))`` at ``s = t ρ_ij``.

    Given ``x_i = x_j = 0`` under ``R(t)``, with ``s = t ρ_ij`` and ``c_a = (R_ai(t), R_aj(t))``:
    ``Cov(x_a, x_b) = R_ab(t) − (c_a₁ c_b₁ + c_a₂ c_b₂ − s (c_a₁ c_b₂ + c_a₂ c_b₁))/(1 − s²)`` (the
    cross correlations scaled by ``t = s/ρ_ij``)."""
    i, j, k, l = _CROSS_I, _CROSS_J, _CROSS_K, _CROSS_L
    rho = R[i, j]
    r = 1.0 / np.where(np.abs(rho) > 1e-100, rho, 1.0)  # (θ ≈ 0 when ρ ≈ 0: the term vanishes)
    Rki, Rlj, Rkj, Rli, Rkl = R[k, i], R[l, j], R[k, j], R[l, i], R[k, l]
    # (1 − s²) Cov = s [(R_kl − R_ki R_li − R_kj R_lj)/ρ + R_ki R_lj] + s³ [R_kj R_li/ρ² − R_kl/ρ]
    g1 = (Rkl - Rki * Rli - Rkj * Rlj) * r + Rki * Rlj
    g3 = (Rkj * Rli * r - Rkl) * r
    # (1 − s²) Var x_k = 1 − R_ki² − s² (1 + R_kj²/ρ² − 2 R_ki R_kj/ρ), and likewise for x_l
    p0, p2 = 1.0 - Rki * Rki, 1.0 + (Rkj * r - 2 * Rki) * Rkj * r
    q0, q2 = 1.0 - Rlj * Rlj, 1.0 + (Rli * r - 2 * Rlj) * Rli * r
    return g1, g3, p0, p2, q0, q2


def _conditional_asin(g1: Array, g3: Array, p0: Array, p2: Array, q0: Array, q2: Array, s: Array,
                      work: Array) -> Array:
    """``asin ρ_{kl|ij}`` (Q, M) at ``s = sin(u θ)`` (Q, M; the nodes u) from the coefficients (M,) of
    :func:`_conditional_coefficients`, in place in ``s`` and ``work`` (2, Q, M)."""
    # the innermost loop of every four-dimensional orthant (Q × M values; points last, so that each
    # operation's inner loop runs over M contiguous values, not over Q = 15)
    num, den = work
    s2 = np.multiply(s, s, out=den)
    np.multiply(s2, g3, out=num)
    num += g1
    num *= s
    np.multiply(s2, q2, out=s)  # s is not needed again
    np.subtract(q0, s, out=s)
    s2 *= p2
    np.subtract(p0, s2, out=den)
    den *= s
    np.maximum(den, 1e-300, out=den)
    np.sqrt(den, out=den)
    num /= den
    np.clip(num, -1.0, 1.0, out=num)
    return np.arcsin(num, out=num)
