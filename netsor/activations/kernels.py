"""Closed forms of Gaussian kernels ``E[φ(u) φ(v)]`` of registry activations.

Conventions. ``(u, v)`` is a centred Gaussian pair with ``Var u = a``, ``Var v = b``,
``Cov(u, v) = c``; ``θ = arccos(c / sqrt(ab))``. A kernel rule returns ``E[φ(u) φ(v)]``
elementwise for broadcastable arrays ``a, b, c``. Rules may assume ``a, b > 0``: the Gaussian
engine (:mod:`netsor.gaussian`) handles degenerate variances.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import numpy as np

Array = np.ndarray
KernelRule = Callable[[Array, Array, Array], Array]

_TWO_PI = 2.0 * np.pi


def _scalar_safe(rule: KernelRule) -> KernelRule:
    """Let a kernel rule that updates arrays in place also accept scalars (0-d inputs)."""

    def wrapped(a: Array, b: Array, c: Array) -> Array:
        a, b, c = (np.asarray(t, dtype=float) for t in (a, b, c))
        if a.ndim or b.ndim or c.ndim:
            return rule(a, b, c)
        return rule(a.reshape(1), b.reshape(1), c.reshape(1)).reshape(())

    wrapped.__doc__, wrapped.__name__ = rule.__doc__, rule.__name__
    return wrapped


def _full(x: Array, *operands: Array) -> Array:
    """``x`` with the broadcast shape of ``operands`` (a fresh array: updated in place next)."""
    shape = np.broadcast_shapes(*(np.shape(o) for o in operands))
    return x if x.shape == shape else np.broadcast_to(x, shape).copy()


class _AngleStore(threading.local):
    store: dict[tuple[int, int, int], tuple[Array, Array, Array, Array, Array]] | None = None


_ANGLES = _AngleStore()


@contextmanager
def remembered_angles(store: dict[tuple[int, int, int], tuple[Array, Array, Array, Array, Array]]
                      ) -> Iterator[None]:
    """Within the block (on this thread), arc-cosine kernels at read-only ``(a, b, c)`` reuse
    ``S, π − θ`` found in ``store`` and put new ones there.

    An NTK evaluates ``E[relu relu]`` on the forward pass and ``E[step step]`` on the backward
    pass at the same pre-activation covariances; the engine passes the same read-only arrays
    for both, and the arctangent — most of either kernel's cost — is computed once. Read-only
    arrays cannot change under the same identity, and the store holds references to them, so
    their ids are not reused while it lives.
    """
    outer, _ANGLES.store = _ANGLES.store, store
    try:
        yield
    finally:
        _ANGLES.store = outer


def _sine_and_supplement(a: Array, b: Array, c: Array) -> tuple[Array, Array]:
    """``S = √(ab − c²)`` (= √(ab)·sin θ) and ``ψ = π − θ`` for ``θ = atan2(S, c)`` (= arccos(c/√(ab)),
    :func:`supplement`), read-only when remembered (:func:`remembered_angles`), else fresh arrays the
    caller may overwrite. The kernels use ``π − θ``, never θ itself: storing it saves each a pass.

    This form is exact at colinear pairs (``ab = c²`` bitwise: a point with itself), where
    ``arccos`` of a correlation rounded to ``1 − ε`` would be off by √(2ε) ≈ 1.5e-8; near them
    the error is the unavoidable conditioning of θ. ``a`` and ``b`` are typically (B1, 1) and
    (1, B2) and ``c`` (B1, B2) (these kernels run once per layer on every pair of inputs).
    """
    store = _ANGLES.store
    key = None
    if store is not None and all(isinstance(x, np.ndarray) and not x.flags.writeable for x in (a, b, c)):
        key = (id(a), id(b), id(c))
        if key in store:
            return store[key][3], store[key][4]
    a_min, b_min = float(np.min(a, initial=np.inf)), float(np.min(b, initial=np.inf))
    powers = None
    if a_min > 0.0 and b_min > 0.0 and a_min * b_min < TINY_PRODUCT:
        (a_, b_, c_), powers = _scaled_by_powers_of_four(a, b, c)
    else:
        a_, b_, c_ = a, b, c
    S = _full(np.multiply(a_, b_), a_, b_, c_)
    S -= np.multiply(c_, c_)
    np.maximum(S, 0.0, out=S)
    np.sqrt(S, out=S)
    # per-point variances whose smallest product is positive leave no 0/0: S = 0 then means c² ≥ ab > 0
    # (rounding is monotone), so the angle needs no pass over the pairs looking for NaN
    per_point = a.size + b.size < S.size
    psi = supplement(S, c_, nonzero=per_point and a_min * b_min > 0.0)
    if powers is not None:
        S = np.ldexp(S, powers)
    if key is not None:
        S.flags.writeable = psi.flags.writeable = False
        store[key] = (a, b, c, S, psi)
    return S, psi


#: Below this product of two variances, ``ab − c²`` may lose digits to underflow (floats below
#: 2.2e-308 are subnormal, and 0 below 4.9e-324): such variances are scaled by powers of four first.
TINY_PRODUCT = 1e-250


def _scaled_by_powers_of_four(a: Array, b: Array, c: Array) -> tuple[tuple[Array, Array, Array], Array]:
    """``(a', b', c')`` with every variance scaled by a power of four into [0.5, 2) and ``c`` by the
    product of the square roots of those powers, and the exponents ``q`` with ``S = 2^q S'``: exact
    scalings (colinear pairs stay bitwise colinear), for variances whose product underflows where both
    are below ~1e-154 (inputs of norm ~1e-77, or the variances of a deep network that shrinks them:
    ``ab`` rounded to a subnormal or to 0 made ``S`` and the angle wrong, e.g. a step network's kernel
    0.5 instead of 0.379 at inputs scaled by 1e-100). A few passes more; taken only where needed."""
    (_, ea), (_, eb) = np.frexp(a), np.frexp(b)
    qa, qb = ea // 2, eb // 2  # a = a' 4^qa with a' in [0.5, 2)
    q = _full(np.add(qa, qb), a, b, c)
    return (np.ldexp(a, -2 * qa), np.ldexp(b, -2 * qb), np.ldexp(c, -q)), q


def supplement(S: Array, c: Array, nonzero: bool = False) -> Array:
    """``π − θ`` for ``θ = atan2(S, c)`` in [0, π], ``S ≥ 0`` (a fresh array of the broadcast shape), as
    ``π/2 + atan(c/S)``.

    numpy's float64 ``arctan2`` is ~1.7× the cost of ``arctan`` and was most of an arc-cosine kernel,
    i.e. of a ReLU NNGP; ``π/2 + atan(c/S)`` needs no branch on the sign of ``c`` (the earlier
    ``atan(S/c) + π·[c < 0]`` spent as long on the sign as on the arctangent). It agrees with
    ``π − arctan2`` to 1 ulp of π: the addition is exact or rounds once, and the error is absolute —
    an angle within ~1e-16 of π (``S/c`` of that order) is π − θ = 0, which every kernel formula here
    takes (they use ``π − θ``, ``sin θ``, ``cos θ``, not the relative size of θ). ``S = 0`` gives
    π − θ = π or 0 exactly (colinear pairs: ``c/0 = ±∞``); ``S = c = 0`` (``ab`` below the smallest
    float) gives π/2, the angle of uncorrelated forms. ``nonzero``: the caller knows that ``S`` and
    ``c`` are never both 0 (no 0/0 to look for)."""
    with np.errstate(all="ignore"):  # c/S = ±inf gives π or 0; 0/0 is handled below
        psi = np.divide(c, S)
        np.arctan(psi, out=psi)
    psi += 0.5 * np.pi
    if not nonzero and np.isnan(np.min(psi, initial=0.0)):  # 0/0: inputs are finite here (the engine
        psi[np.isnan(psi)] = 0.5 * np.pi  # rejects NaN before)
    return psi


def known_supplement(a: Array, b: Array, c: Array) -> Array | None:
    """``π − θ`` for ``θ = arccos(c/√(ab))`` of read-only ``(a, b, c)`` if the active store
    (:func:`remembered_angles`) holds it (read-only), else None."""
    store = _ANGLES.store
    entry = None if store is None else store.get((id(a), id(b), id(c)))
    return None if entry is None else entry[4]


def _owned(x: Array) -> Array:
    """``x`` itself when it may be overwritten (a fresh angle), else a new array of its shape."""
    return x if x.flags.writeable else np.empty_like(x)


@_scalar_safe
def arccos_kernel_1(a: Array, b: Array, c: Array) -> Array:
    """E[relu u relu v] = (√(ab − c²) + (π − θ) c) / (2π) (Cho & Saul, order 1)."""
    S, psi = _sine_and_supplement(a, b, c)
    out = np.multiply(psi, c, out=_owned(psi))
    out += S
    out *= 1.0 / _TWO_PI
    return out


@_scalar_safe
def arccos_kernel_0(a: Array, b: Array, c: Array) -> Array:
    """E[step u step v] = (π − θ) / (2π) (Cho & Saul, order 0)."""
    _, psi = _sine_and_supplement(a, b, c)
    return np.multiply(psi, 1.0 / _TWO_PI, out=_owned(psi))


def arccos_kernel_0_modulus(a: Array, b: Array, c: Array, delta: Array) -> Array:
    """A bound of ``|K₀(a, b, c') − K₀(a, b, c)|`` over ``|c' − c| ≤ delta`` (K₀ = E[step u step v]).

    K₀ = (π − arccos ρ)/(2π) with ρ = c/√(ab); arccos has slope 1/√(1 − ρ²), growing with |ρ|,
    so the change is at most ``δ / √(ab − (|c| + δ)²) / (2π)``, and, where that is not finite or
    large (the interval reaches ρ = ±1), at most ``arccos(1 − h) ≤ π √(h/2)`` with
    ``h = δ/√(ab)``, over 2π. Square roots only — no arctangent; the second form only where needed.
    """
    t = _full(np.abs(c), a, b, c, delta)
    t += delta
    np.multiply(t, t, out=t)
    np.subtract(np.multiply(a, b), t, out=t)  # ab − (|c| + δ)²
    np.maximum(t, 0.0, out=t)
    np.sqrt(t, out=t)
    with np.errstate(divide="ignore", invalid="ignore"):
        bound = np.divide(delta, t, out=t)
    bound *= 1.0 / _TWO_PI
    near = ~(bound <= 0.25)  # where the Hölder form may be smaller (or the slope form is inf/NaN)
    if near.any():
        ab = np.broadcast_to(np.multiply(a, b), bound.shape)[near]
        h = np.broadcast_to(delta, bound.shape)[near] / np.sqrt(ab)
        bound[near] = np.fmin(bound[near], 0.5 * np.sqrt(0.5 * h))
    return bound


@_scalar_safe
def sign_kernel(a: Array, b: Array, c: Array) -> Array:
    """E[sign u sign v] = 1 − 2θ/π = (2/π) arcsin ρ (= 4 K₀ − 1)."""
    _, psi = _sine_and_supplement(a, b, c)
    out = np.multiply(psi, 2.0 / np.pi, out=_owned(psi))
    out -= 1.0
    return out


def sign_kernel_modulus(a: Array, b: Array, c: Array, delta: Array) -> Array:
    """A bound of ``|K(a, b, c') − K(a, b, c)|`` over ``|c' − c| ≤ delta`` for K = E[sign u sign v] = 4 K₀ − 1."""
    return 4.0 * arccos_kernel_0_modulus(a, b, c, delta)


def erf_kernel_modulus(a: Array, b: Array, c: Array, delta: Array) -> Array:
    """A bound of ``|K(a, b, c') − K(a, b, c)|`` over ``|c' − c| ≤ delta`` for ``K = E[erf u erf v]``.

    ``∂K/∂c = E[erf' u erf' v] = (4/π) / √((1 + 2a)(1 + 2b) − 4c²)`` grows with ``|c|`` (and stays finite:
    ``(1 + 2a)(1 + 2b) − 4ab = 1 + 2a + 2b``), so its value at ``min(|c| + δ, √(ab))`` times ``δ`` bounds the
    change. Pair by pair it is the correlation map's own slope, below the Cauchy–Schwarz slope
    ``√(E erf'² E erf'²)`` (its value at ρ = 1) that the per-point bounds use: in the chaotic phase
    (σ_w = 3) that one exceeds 1 and compounded layer after layer (2.1× a layer: 7.8e-8 at depth 20,
    refused, while correlations near the fixed point contract)."""
    reach = _full(np.abs(c), a, b, c, delta)
    reach += delta
    np.minimum(reach, np.sqrt(np.maximum(np.multiply(a, b), 0.0)), out=reach)
    np.multiply(reach, reach, out=reach)
    reach *= -4.0
    reach += np.multiply(1.0 + 2.0 * np.asarray(a), 1.0 + 2.0 * np.asarray(b))
    np.sqrt(reach, out=reach)
    return np.divide(delta, reach, out=reach) * (4.0 / np.pi)


def erf_kernel(a: Array, b: Array, c: Array) -> Array:
    # Williams (1997): E[erf u erf v] = (2/π) arcsin(2c / sqrt((1+2a)(1+2b))).
    return (2.0 / np.pi) * np.arcsin(np.clip(2.0 * c / np.sqrt((1.0 + 2.0 * a) * (1.0 + 2.0 * b)), -1, 1))


@_scalar_safe
def abs_kernel(a: Array, b: Array, c: Array) -> Array:
    # |u| = relu(u) + relu(-u): 2 E[relu u relu v] + 2 E[relu u relu(-v)] = (2/π)(S + c (π/2 − θ)).
    S, psi = _sine_and_supplement(a, b, c)
    return (2.0 * S + (2.0 * psi - np.pi) * c) / np.pi


def leaky_relu_kernel(alpha: float) -> KernelRule:
    # leaky(u) = relu(u) − α relu(−u); E[relu(−u) relu(−v)] = E[relu u relu v] and
    # E[relu u relu(−v)] is the order-1 arc-cosine kernel at covariance −c.
    def kernel(a: Array, b: Array, c: Array) -> Array:
        return (1 + alpha * alpha) * arccos_kernel_1(a, b, c) - 2 * alpha * arccos_kernel_1(a, b, -c)

    return kernel


def _covariance(a: Array, b: Array, c: Array) -> Array:
    """``c`` within ``±√(ab)`` (Cauchy–Schwarz), for kernels that are exponentials of c: a covariance past it
    by rounding — or a tile's entry of a point with itself, whose recursion is unstable in the chaotic
    phase (sin at σ_w = 2, depth 52: it drifted to c = 1078 at a = 1.96, sinh overflowed and the inf
    poisoned its tile's bound, although per-point values replace such entries) — stays a covariance."""
    reach = np.sqrt(np.maximum(np.multiply(a, b), 0.0))
    return np.clip(c, -reach, reach)


def exp_kernel(a: Array, b: Array, c: Array) -> Array:
    return np.exp(0.5 * (a + b) + _covariance(a, b, c))


def sin_kernel(a: Array, b: Array, c: Array) -> Array:
    # e^{−(a+b)/2} sinh c as ½(e^{c−h} − e^{−c−h}) with both exponents ≤ 0 (|c| ≤ h = (a+b)/2: no inf·0
    # at large variances), where that difference does not cancel; for |c| < 1 as e^{−h} sinh c, whose
    # relative accuracy does not depend on c (the difference lost all digits at c ~ 1e-8: variances 1e-8)
    a, b, c = np.broadcast_arrays(*(np.asarray(x, dtype=float) for x in (a, b, c)))
    c = _covariance(a, b, c)
    half = 0.5 * (a + b)
    with np.errstate(over="ignore", invalid="ignore"):
        small = np.exp(-half) * np.sinh(c)
        large = 0.5 * (np.exp(c - half) - np.exp(-c - half))
    return np.where(np.abs(c) < 1.0, small, large)


def cos_kernel(a: Array, b: Array, c: Array) -> Array:
    half = 0.5 * (np.asarray(a) + np.asarray(b))
    c = _covariance(a, b, c)
    return 0.5 * (np.exp(c - half) + np.exp(-c - half))


def _det_plus_identity(a: Array, b: Array, c: Array, scale: float) -> Array:
    """``det(I + scale·Σ) = 1 + scale (a + b) + scale² (ab − c²)`` with ``ab − c² ≥ 0`` formed on
    its own: the product form ``(1 + sa)(1 + sb) − s²c²`` cancels catastrophically at large
    variances (a point with itself at variance 1e16 gave 0 or a negative number)."""
    a, b, c = (np.asarray(x, dtype=float) for x in (a, b, c))
    return 1.0 + scale * (a + b) + scale * scale * np.maximum(a * b - c * c, 0.0)


def gaussian_kernel(a: Array, b: Array, c: Array) -> Array:
    # E[exp(-u²/2) exp(-v²/2)] = det(I + Σ)^(-1/2).
    return 1.0 / np.sqrt(_det_plus_identity(a, b, c, 1.0))


def erf_deriv_kernel(a: Array, b: Array, c: Array) -> Array:
    # φ = erf' = (2/√π) exp(-x²): E[φ(u) φ(v)] = (4/π) det(I + 2Σ)^(-1/2).
    return (4.0 / np.pi) / np.sqrt(_det_plus_identity(a, b, c, 2.0))


def identity_kernel(a: Array, b: Array, c: Array) -> Array:
    # E[u v] = c: a copy of c at the broadcast shape (one pass)
    return _full(np.array(c, dtype=float), a, b, c)
