"""How errors of covariances propagate through Gaussian expectations (first-order bounds).

Every quantity of the infinite interpreter carries an absolute error bound. An expectation
``E[F(U) G(V)]`` computed from covariances that are themselves off by ``δΣ`` inherits an error
bounded, to first order, as follows.

*Absolutely continuous F, G* (Price's theorem and Cauchy–Schwarz). A change ``δC`` of the
cross-covariance changes the expectation by ``Σ_ij E[∂ᵢF ∂ⱼG] δC_ij`` and
``|E[∂ᵢF ∂ⱼG]| ≤ Sᶠᵢ Sᵍⱼ`` with ``S = √E(∂F)²``. A change ``δΣₓ`` of the covariance of ``U`` is
the linear map ``U ↦ A U``, ``‖A − I‖ ≤ ½ κ ‖δΣₓ‖ / λ_min(Σₓ)`` (κ the condition number of
``Σₓ^{1/2}``), which moves the expectation by at most ``‖A − I‖ √E|∇F|²|U|² · √E G²`` and
the cross-covariance by ``(A − I) C``, charged with the first rule. In one dimension this
reads ``½ (δa/a)(√E φ'²u² · √E ψ² + |c| Sφ Sψ)``.

*Jumps* (``step``, a custom function of unknown regularity): no derivative exists, and the
bound uses the χ² distance between the two Gaussian laws instead, valid for any function:
``|δE| ≤ √E[F²G²] · ‖Σ^{−1/2} δΣ Σ^{−1/2}‖_F / √2``, with ``E[F²G²] ≤ √(E F⁴ E G⁴)`` and
``‖Σ^{−1/2} δΣ Σ^{−1/2}‖ ≤ ‖δ̃‖ / (1 − ‖R‖)`` (``δ̃`` the errors whitened per point, ``R`` the
whitened cross-correlation). It grows as the two points become colinear, as the true
sensitivity of a jump does; identical points take the per-point value instead. Near colinear
pairs (‖R‖ > 0.99) whiten the joint covariance itself, on its range where it is singular — two
uses of one bias vector at two inputs are one variable, and their covariances are exact: the χ²
distance is then that of two laws on one subspace (and infinite if an error could leave it). Any
vector that does not read the data is one variable at both inputs, whatever its covariances' bounds
say: its second copy is dropped from the joint law.

Every bound is capped by ``2 √(E F² E G²)`` (both the true and the computed value lie within
``±√(E F² E G²)``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from netsor.gaussian.pairs import MOMENT_RTOL
from netsor.interpret.bounds import Bound
from netsor.linalg import largest_ratio

Array = np.ndarray
_SQRT2 = np.sqrt(2.0)
_EPS = np.finfo(float).eps


def _ratio(num: Array, den: Array) -> Array:
    """``num / den``, with ``0 / 0 = 0`` and ``x / 0 = inf`` for ``x > 0``."""
    if np.min(den) > 0:
        return num / den
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(den > 0, num / np.where(den > 0, den, 1.0), np.where(num > 0, np.inf, 0.0))
    return out


def _cap(bound: Array, scale: Array) -> Array:
    return np.minimum(np.nan_to_num(bound, nan=np.inf), 2.0 * scale)


def pair_1d(a: Array, b: Array, c: Array, da: Array, db: Array, dc: Array,
            left: dict[str, Array], right: dict[str, Array]) -> Array:
    """Propagated error of ``E[φ(u) ψ(v)]`` (``left``/``right``: :func:`moments_1d` of φ at ``a``, ψ at ``b``).

    Written per point where it can be (``a``, ``da`` and the moments of the left side are
    columns, those of the right side rows): one pass over the pairs for ``dc`` and ``|c|``.
    """
    scale = np.sqrt(left["m2"] * right["m2"])
    if np.all(np.isfinite(left["grad2"])) and np.all(np.isfinite(right["grad2"])):
        sl, sr = np.sqrt(left["grad2"]), np.sqrt(right["grad2"])
        ea, eb = 0.5 * _ratio(da, a), 0.5 * _ratio(db, b)
        # S_φ S_ψ (dc + (ea + eb)|c|) + ea √(E φ'²u² E ψ²) + eb √(E ψ'²v² E φ²)
        bound = np.abs(c) * (ea + eb)
        bound += dc
        bound *= sl * sr
        bound += ea * np.sqrt(left["euler"] * right["m2"]) + eb * np.sqrt(right["euler"] * left["m2"])
        return bound if np.all(bound <= 2.0 * scale) else _cap(bound, scale)
    rho = np.minimum(np.abs(_ratio(np.abs(c), np.sqrt(a * b))), 1.0)
    whitened = _ratio(da, a) + _ratio(db, b) + 2.0 * _ratio(dc, np.sqrt(a * b))
    bound = (left["m4"] * right["m4"]) ** 0.25 * _ratio(whitened, _SQRT2 * (1.0 - rho))
    return _cap(bound, scale)


def pair_1d_relative(a: Array, b: Array, da: Array, db: Array, c_bound: Bound, left: dict[str, Array],
                     right: dict[str, Array], env_l: Array, env_r: Array) -> Bound:
    """:func:`pair_1d` for absolutely continuous φ, ψ on a tile, as a :class:`Bound` on the envelope
    ``env_l ⊗ env_r = √(E φ²) ⊗ √(E ψ²)`` — per-point maxima only, O(B) instead of O(B²)::

        |δE_ij| ≤ Sφ Sψ (δc_ij + (eaᵢ + eb_j) |c_ij|) + eaᵢ Mφ,ᵢ rψ,j + eb_j Mψ,j rφ,ᵢ

    with ``δc ≤ η_c lᵢ r_j + dense``, ``|c_ij| ≤ √(aᵢ b_j)``, ``S = √E φ'²``, ``M = √E φ'²u²``,
    ``ea = ½ δa/a``; dividing by the envelope leaves products of per-point ratios.
    """
    sl, sr = np.sqrt(left["grad2"]), np.sqrt(right["grad2"])
    ea, eb = 0.5 * _ratio(da, a), 0.5 * _ratio(db, b)
    hl, hr = sl * np.sqrt(a), sr * np.sqrt(b)
    # the per-point factors of each side stacked: one division and one maximum per side
    ml = _side_maxima(np.stack([sl * c_bound.left, ea * hl, hl, ea * np.sqrt(left["euler"])]), env_l)
    mr = _side_maxima(np.stack([sr * c_bound.right, hr, eb * hr, eb * np.sqrt(right["euler"])]), env_r)
    eta = float(c_bound.eta * ml[0] * mr[0] + ml[1] * mr[1] + ml[2] * mr[2] + ml[3] + mr[3])
    dense = None if c_bound.dense is None else (sl * sr) * c_bound.dense
    return Bound(2.0 if not eta <= 2.0 else eta, env_l, env_r, dense)  # NaN: no better than the cap


def hermite_modulus(a: Array, b: Array, c: Array, delta: Array, left: dict[str, Array],
                    right: dict[str, Array]) -> Array:
    """A bound of ``|K(c') − K(c)|`` over ``|c' − c| ≤ delta`` for ``K = E[φ(u) ψ(v)]``, φ and ψ absolutely
    continuous: ``delta`` times a bound of the slope ``∂K/∂c = E[φ'(u) ψ'(v)]`` there, pair by pair.

    With ``αₖ``, ``βₖ`` the normalised Hermite coefficients of ``φ'(√a z)`` and ``ψ'(√b z)`` (Mehler),
    ``E[φ'(u) ψ'(v)] = Σₖ αₖ βₖ ρᵏ`` at ``ρ = c/√(ab)``, where ``α₀ = E φ'``, ``α₁ = E[φ' u]/√a`` and
    ``Σₖ αₖ² = E φ'²``. So for ``|ρ| ≤ r = min((|c| + δ)/√(ab), 1)`` (Cauchy–Schwarz on the rest)::

        |E φ'ψ'| ≤ |α₀β₀| + r |α₁β₁| + r² √((E φ'² − α₀² − α₁²)(E ψ'² − β₀² − β₁²))

    — per-point moments only. The per-point bound is its value at ``r = 1`` (``√(E φ'² E ψ'²)`` at most):
    in the chaotic phase that exceeds 1 and compounded over depth while correlations near the stable
    fixed point contract (tanh at σ_w = 3, ρ* = 0: 0.81 against 1.86; for even φ' — tanh, sigmoid — α₁ = 0
    and this is at most the chord of the slope, convex in c²). ``left``/``right``: :func:`moments_1d` of φ
    at ``a`` (a column) and of ψ at ``b`` (a row)."""
    root = np.sqrt(np.maximum(np.multiply(a, b), 0.0))
    with np.errstate(divide="ignore", invalid="ignore"):  # a constant form (ab = 0): the slope at ρ = 1
        reach = np.where(root > 0, np.minimum((np.abs(c) + delta) / np.where(root > 0, root, 1.0), 1.0), 1.0)
    zeroth_l, first_l, rest_l = _coefficients(a, left)
    zeroth_r, first_r, rest_r = _coefficients(b, right)
    slope = reach * np.sqrt(rest_l * rest_r)
    slope += first_l * first_r
    slope *= reach
    slope += zeroth_l * zeroth_r
    return delta * slope


def _coefficients(var: Array, stats: dict[str, Array]) -> tuple[Array, Array, Array]:
    """``|α₀|``, ``|α₁|`` and ``Σ_{k≥2} αₖ² = E φ'² − α₀² − α₁²`` of ``φ'(√var z)`` (``α₁ = E[φ'u]/√var``, 0
    at var = 0), each widened by the moments' quadrature error (:data:`MOMENT_RTOL` of ``√E φ'²`` on a
    coefficient, so ≤ 5 · MOMENT_RTOL · E φ'² on the remainder, a difference that cancels for nearly linear
    φ, where that error would otherwise decide it)."""
    scale = MOMENT_RTOL * np.sqrt(stats["grad2"])
    with np.errstate(divide="ignore", invalid="ignore"):
        first = np.where(var > 0, stats["grad1u"] / np.sqrt(np.where(var > 0, var, 1.0)), 0.0)
    rest = np.maximum(stats["grad2"] - stats["grad1"] ** 2 - first**2, 0.0) + 5.0 * scale * np.sqrt(stats["grad2"])
    return np.abs(stats["grad1"]) + scale, np.abs(first) + scale, rest


def jump_relative(modulus: Callable[[Array, Array, Array, Array], Array], a: Array, b: Array, da: Array,
                  db: Array, c: Array, c_bound: Bound, env_l: Array, env_r: Array, skip_diagonal: bool,
                  supplement: Array | None = None) -> float:
    """A scalar bound ``eta`` on the envelope ``env_l ⊗ env_r`` of the propagated error of a closed-form
    kernel ``K(ρ)`` of positively homogeneous activations of degree 0 (``step``: a function of
    ``ρ = c/√(ab)`` alone), from per-point maxima and the largest ``|ρ|`` of the tile — one pass
    over the pairs instead of a dense modulus. With ``δ_ij`` the interval of ``c_ij``::

        δ_ij / √(aᵢ b_j) ≤ ε = η_c max(l/√a) max(r/√b) + max(dense/√(ab)) + ½ max(da/a) + ½ max(db/b)

    (``|ρ| ≤ 1``), and ``modulus`` — a function of ``c/√(ab)`` and ``δ/√(ab)``, nondecreasing in
    ``|c|`` and ``δ`` — at ``(1, 1, max|ρ|, ε)`` bounds the change of every pair of the tile.
    ``skip_diagonal``: the tile's diagonal holds pairs of a point with itself (``ρ = 1``), which
    take per-point values instead. ``supplement``: ``π − θ`` for ``θ = arccos ρ`` of the tile where it
    is known already (two reductions then find ``max|ρ| = max(cos min(π − θ), −cos max(π − θ))``,
    the same expression as of θ). Near-colinear pairs make this bound large: the
    caller then keeps the dense form, which is tight away from them.
    """
    root_a, root_b = np.sqrt(a), np.sqrt(b)
    eps = c_bound.relative(root_a, root_b) + 0.5 * (largest_ratio(da, a) + largest_ratio(db, b))
    if c_bound.dense is not None:
        eps += largest_ratio(c_bound.dense, root_a * root_b)
    if supplement is not None:
        # the smallest over the whole (contiguous) tile: pairs of a point with itself are at π − θ ≈ π, the
        # largest value there, so they can only lower it (a larger bound); the largest needs them left out
        smallest = float(np.min(supplement, initial=np.pi))
        largest = float(np.max(_off_diagonal(supplement) if skip_diagonal else supplement, initial=0.0))
        rho_max = max(np.cos(smallest), -np.cos(largest)) + 4 * _EPS  # the rounding of θ and cos
    else:
        with np.errstate(divide="ignore", invalid="ignore"):  # a zero variance: inf or NaN, never accepted
            rho = np.abs(c) * (1.0 / root_a)
            rho *= 1.0 / root_b
        if skip_diagonal:
            np.fill_diagonal(rho, 0.0)
        rho_max = float(np.max(rho, initial=0.0))
    rho_max = min(rho_max, 1.0)
    change = float(modulus(np.ones(1), np.ones(1), np.full(1, rho_max), np.full(1, eps))[0])
    return change * _reciprocal_min(env_l) * _reciprocal_min(env_r)


def _off_diagonal(A: Array) -> Array:
    """The entries of the square array ``A`` off its diagonal, as a strided view (rows of the
    flattened array shifted by one: each row's last entry is the next diagonal one), or a copy."""
    n = A.shape[0]
    if n < 2 or not A.flags.c_contiguous:
        return A[~np.eye(n, dtype=bool)]
    return A.reshape(-1)[1:].reshape(n - 1, n + 1)[:, :-1]


def _reciprocal_min(envelope: Array) -> float:
    """``max 1/envelope`` (inf where an entry is 0 or NaN)."""
    smallest = float(np.min(envelope, initial=np.inf))
    return 1.0 / smallest if smallest > 0.0 else np.inf


def _side_maxima(factors: Array, envelope: Array) -> Array:
    """``max_i factors[k, i] / envelope_i`` for each k (0 where the factor is 0, inf where only
    the envelope is)."""
    k = factors.shape[0]
    factors, envelope = factors.reshape(k, -1), np.ravel(envelope)
    if envelope.size == 0:
        return np.zeros(k)
    if np.min(envelope) > 0.0:
        return np.maximum(np.max(factors / envelope, axis=1), 0.0)
    return np.array([largest_ratio(f, envelope) for f in factors])


def point_homogeneous(value: Array, a: Array, da: Array, degree: float) -> Array:
    """Propagated error of ``E h(u) = a^{p/2} E h(z)`` for h positively homogeneous of degree ``p``:
    its exact change over the interval ``[a − da, a + da]``, ``|E h| · max|(1 ± da/a)^{p/2} − 1|``
    (no Cauchy–Schwarz factor: the general bound :func:`point_1d` is √6/2 times larger for relu²,
    and that factor compounds layer after layer on deep networks' diagonals)."""
    if degree == 0:  # E h(u) does not depend on the variance (step²)
        return np.zeros(np.shape(value))
    r = np.minimum(_ratio(da, a), 1.0)
    q = 0.5 * degree
    with np.errstate(divide="ignore"):  # r = 1: log1p(−1) = −inf
        up, down = np.expm1(q * np.log1p(r)), -np.expm1(q * np.log1p(-r))
    return np.abs(value) * np.where(np.isfinite(down), np.maximum(up, down), np.inf)


def point_1d(a: Array, da: Array, stats: dict[str, Array]) -> Array:
    """Propagated error of ``E h(u)``, ``u ~ N(0, a)`` (``stats``: :func:`moments_1d` of h at ``a``)."""
    scale = np.sqrt(stats["m2"])
    eps = _ratio(da, a)
    if np.all(np.isfinite(stats["grad2"])):
        return _cap(0.5 * eps * np.sqrt(stats["euler"]), scale)
    return _cap(scale * eps / _SQRT2, scale)


def point_square(a: Array, da: Array, stats: dict[str, Array]) -> Array:
    """Propagated error of ``E φ(u)²``, ``u ~ N(0, a)`` (``stats``: :func:`moments_1d` of φ at ``a``):
    to first order ``(δa/a) |E[φ φ' u]|``, as ``d/da E φ² = E[φ φ' u]/a`` (Stein) — φ's moments, which
    the engine has, instead of a quadrature of ``(φ²)'``. Not its Cauchy–Schwarz bound
    ``√(E φ² E φ'²u²)``: where ``E φ²`` is nearly flat in ``a`` (``sin``: ``d/da = e^{−2a}``, against a
    bound of 1.2 at ``a = 3``) that bound compounded over depth (a sin network at σ_w = 2.5: 1.75× a
    layer). The change of the derivative over ``δa`` (second order) is allowed for by ``(δa/a)`` times that
    Cauchy–Schwarz scale: ``(δa/a)(|E φφ'u| + (δa/a) √(E φ² E φ'²u²))``, at least the change of E φ² over
    ``δa/a ≤ 1e-2`` for tanh, erf, gelu, sin and softplus at variances 0.01–25 (``tests/test_gaussian.py``;
    the first-order term alone fell 2e-5 short for tanh at a = 0.01 and δa/a = 1e-3). φ without a
    derivative: :func:`point_1d` of h = φ² on its fourth moment."""
    if np.all(np.isfinite(stats["cross"])):
        eps = _ratio(da, a)
        return _cap(eps * (np.abs(stats["cross"]) + eps * np.sqrt(stats["m2"] * stats["euler"])), np.sqrt(stats["m4"]))
    return point_1d(a, da, {"m2": stats["m4"], "grad2": stats["grad2"]})  # no derivative: the χ² form


def _spectrum(cov: Array) -> tuple[Array, Array]:
    """Smallest non-zero and largest eigenvalue of each (…, k, k) matrix."""
    vals = np.linalg.eigvalsh(cov)
    top = np.maximum(vals[..., -1], 0.0)
    positive = np.where(vals > 1e-12 * top[..., None], vals, np.inf)
    return np.min(positive, axis=-1), top


def _inv_sqrt(cov: Array) -> Array:
    """Pseudo-inverse square roots of a stack of PSD matrices."""
    vals, vecs = np.linalg.eigh(cov)
    top = np.maximum(vals[..., -1:], 0.0)
    inv = np.where(vals > 1e-12 * top, 1.0 / np.sqrt(np.where(vals > 0, vals, 1.0)), 0.0)
    return np.einsum("mik,mk,mjk->mij", vecs, inv, vecs)


def _frobenius(x: Array) -> Array:
    return np.sqrt(np.sum(x * x, axis=(-2, -1)))


def pair_joint(cov_x: Array, cov_y: Array, C: Array, d_x: Array, d_y: Array, d_c: Array,
               left: dict[str, Array], right: dict[str, Array], rows: Array, cols: Array,
               shared: Sequence[tuple[int, int]] = ()) -> Array:
    """Propagated error of ``E[F(U) G(V)]`` for pairs (M,) of a left point ``rows[m]`` and a right point
    ``cols[m]``: per-point covariances of U (P₁, k₁, k₁) and V (P₂, k₂, k₂) and their error bounds
    (their spectra are taken once per point, not once per pair), per-pair cross-covariances ``C``
    (M, k₁, k₂) and bounds, ``left``/``right`` the per-pair moments of F and G (keys ``m2``, ``m4``,
    ``arg_grad2`` (M, k) ``= E(∂ᵢF)²``, ``joint_euler = E|∇F|²|U|²``, ``gradnorm2 = E|∇F|²``).
    ``shared``: pairs ``(i, j)`` of an argument of F and one of G that are one random variable at
    both points (a data-free vector): the joint law keeps one copy."""
    scale = np.sqrt(left["m2"] * right["m2"])
    lx, tx = (v[rows] for v in _spectrum(cov_x))
    ly, ty = (v[cols] for v in _spectrum(cov_y))
    ex, ey = _ratio(_frobenius(d_x)[rows], lx), _ratio(_frobenius(d_y)[cols], ly)
    if np.all(np.isfinite(left["gradnorm2"])) and np.all(np.isfinite(right["gradnorm2"])):
        sf, sg = np.sqrt(left["arg_grad2"]), np.sqrt(right["arg_grad2"])  # (M, k1), (M, k2)
        cross = np.einsum("mi,mij,mj->m", sf, d_c, sg)
        spread = np.sqrt(np.sum(sf * sf, axis=1) * np.sum(sg * sg, axis=1)) * _frobenius(C)
        ax = 0.5 * np.sqrt(_ratio(tx, lx)) * ex
        ay = 0.5 * np.sqrt(_ratio(ty, ly)) * ey
        # each side's own covariance error, whitened or by the ½-Hölder coupling of point_joint (U + W with W
        # independent leaves the cross-covariance as it is): whichever is smaller (a nearly singular side)
        hx = _holder(cov_x.shape[-1], _frobenius(d_x)[rows], left["gradnorm2"]) * np.sqrt(right["m2"])
        hy = _holder(cov_y.shape[-1], _frobenius(d_y)[cols], right["gradnorm2"]) * np.sqrt(left["m2"])
        bound = (cross + np.minimum(ax * (np.sqrt(left["joint_euler"] * right["m2"]) + spread), hx)
                 + np.minimum(ay * (np.sqrt(right["joint_euler"] * left["m2"]) + spread), hy))
        return _cap(bound, scale)
    R = np.einsum("mij,mjk,mkl->mil", _inv_sqrt(cov_x)[rows], C, _inv_sqrt(cov_y)[cols])
    norm_r = np.minimum(np.sqrt(np.maximum(np.linalg.eigvalsh(np.einsum("mij,mkj->mik", R, R))[..., -1], 0.0)),
                        1.0)
    whitened = _ratio(ex + ey + 2.0 * _ratio(_frobenius(d_c), np.sqrt(lx * ly)), 1.0 - norm_r)
    near = np.flatnonzero(norm_r > _NEAR_COLINEAR)
    if near.size:  # the joint law's own whitening: exact on its range (shared sources, e.g. a bias)
        joint, d_joint = _joint(cov_x[rows[near]], cov_y[cols[near]], C[near]), _joint(
            d_x[rows[near]], d_y[cols[near]], d_c[near])
        if shared:  # the second copy of a shared variable is the first: it adds a null vector, not a law
            keep = np.setdiff1d(np.arange(joint.shape[1]), [cov_x.shape[1] + j for _, j in shared])
            joint, d_joint = joint[:, keep][:, :, keep], d_joint[:, keep][:, :, keep]
        whitened[near] = np.minimum(whitened[near], _range_whitened(joint, d_joint))
    bound = (left["m4"] * right["m4"]) ** 0.25 * whitened / _SQRT2
    return _cap(bound, scale)


#: Pairs whose whitened cross-correlation is above this take the joint covariance's own whitening.
_NEAR_COLINEAR = 0.99


def _joint(cov_x: Array, cov_y: Array, C: Array) -> Array:
    """The joint (M, k₁ + k₂, k₁ + k₂) matrices of per-pair blocks."""
    return np.concatenate([np.concatenate([cov_x, C], axis=2), np.concatenate([np.swapaxes(C, 1, 2), cov_y], axis=2)],
                          axis=1)


def _range_whitened(cov: Array, d_cov: Array) -> Array:
    """``‖Σ^{+½} δΣ Σ^{+½}‖_F`` bounded over ``|δΣ| ≤ d_cov`` entrywise (M, k, k), on the range of Σ: the
    χ² distance of two Gaussian laws on one subspace. That needs δΣ to vanish on the null space, i.e.
    every error bound to be 0 where a null vector of Σ lives (two uses of one bias vector, whose
    covariances are exact) — else inf. The per-side whitening divides by ``1 − ‖R‖``, which is 0 there."""
    vals, vecs = np.linalg.eigh(cov)
    top = np.maximum(vals[:, -1:], 1e-300)
    null = vals <= 1e-12 * top  # (M, k)
    support = (np.abs(vecs) > 1e-8) & null[:, None, :]  # (M, coordinate, eigenvector)
    # the errors on the coordinates of a null vector: d[i, j] for i, j both in its support
    leak = np.einsum("mia,mij,mja->ma", support.astype(float), d_cov, support.astype(float))
    scaled = np.abs(vecs) / np.sqrt(np.where(null, np.inf, vals))[:, None, :]
    whitened = _frobenius(np.einsum("mia,mij,mjb->mab", scaled, d_cov, scaled))
    return np.where(np.any(leak > 0, axis=-1), np.inf, whitened)


def _holder(k: int, delta: Array, gradnorm2: Array) -> Array:
    """``(1 + √2) √(kδ)`` times twice the RMS gradient: the ½-Hölder change of ``E H(U)`` (U of k
    coordinates) over covariance errors of Frobenius norm ``δ`` (:func:`point_joint`)."""
    return 2.0 * (1.0 + _SQRT2) * np.sqrt(gradnorm2 * k * delta)


def point_joint(cov: Array, d_cov: Array, stats: dict[str, Array]) -> Array:
    """Propagated error of ``E H(U)``, ``U ~ N(0, cov)`` (``stats``: :func:`point_moments` of H).

    For H absolutely continuous, the smaller of two bounds: the whitened one,
    ``½ √(λmax/λmin) ε √(E|∇H|²|U|²)`` with ``ε = ‖δΣ‖_F / λmin`` — linear in ``δΣ`` but blowing up as
    ``λmin^{-3/2}`` for a nearly singular ``cov`` (two forms of correlation 1 − 1e-8: a bound 5× the
    value, strict campaign seed 441) — and a ½-Hölder one that ignores ``λmin``: with ``δ = ‖δΣ‖_F ≥
    ‖Σ' − Σ‖₂``, both ``Σ`` and ``Σ'`` reach ``Σ + δI`` by adding an independent Gaussian ``W`` of
    covariance ``δI`` or ``δI − (Σ' − Σ) ⪯ 2δI``, and ``|E H(U + W) − E H(U)| ≤ sup_t √(E|∇H(U + tW)|²)
    √(E|W|²)``: ``(1 + √2) √(kδ)`` times the gradient's RMS, taken as twice its value at ``cov`` (the
    laws on the way differ from it by ``δ``)."""
    scale = np.sqrt(stats["m2"])
    lmin, lmax = _spectrum(cov)
    delta = _frobenius(d_cov)
    eps = _ratio(delta, lmin)
    if np.all(np.isfinite(stats["gradnorm2"])):
        whitened = 0.5 * np.sqrt(_ratio(lmax, lmin)) * eps * np.sqrt(stats["joint_euler"])
        return _cap(np.minimum(whitened, _holder(cov.shape[-1], delta, stats["gradnorm2"])), scale)
    return _cap(scale * eps / _SQRT2, scale)
