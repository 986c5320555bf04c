"""Activation registry: each activation knows φ, φ', where φ is not smooth, and, where one
exists, the closed form of its Gaussian kernel (:mod:`netsor.activations.kernels`).

Calling an activation on an array applies φ elementwise; calling it on a symbolic vector of a
:class:`netsor.Program` adds a NonLin line (the vector does it: this module imports nothing
of the IR).
"""

from __future__ import annotations

import functools
import math
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy import special

from netsor.activations.distance_kernels import DistanceRule, JumpDistance, PiecewiseLinearDistance
from netsor.activations.kernels import (
    KernelRule,
    abs_kernel,
    arccos_kernel_0,
    arccos_kernel_0_modulus,
    arccos_kernel_1,
    cos_kernel,
    erf_deriv_kernel,
    erf_kernel,
    erf_kernel_modulus,
    exp_kernel,
    gaussian_kernel,
    identity_kernel,
    leaky_relu_kernel,
    sign_kernel,
    sign_kernel_modulus,
    sin_kernel,
)
from netsor.errors import HyperParameterError, NetsorError, ProgramError

Array = np.ndarray
MeanRule = Callable[[Array], Array]

_TWO_PI = 2.0 * np.pi


class FunctionIdentity:
    """A user function inside a cache key: equal only to the same object (``owner``, by default the
    function itself), but written (``repr``) from the function's name and bytecode, so that seeds
    derived from keys (randomised QMC) are the same in every run rather than following a memory
    address."""

    __slots__ = ("fn", "owner")

    def __init__(self, fn: Callable[..., Any], owner: object = None) -> None:
        self.fn = fn
        self.owner = fn if owner is None else owner

    def __eq__(self, other: object) -> bool:
        return isinstance(other, FunctionIdentity) and other.owner is self.owner

    def __hash__(self) -> int:
        return id(self.owner)

    def __repr__(self) -> str:
        return f"fn:{getattr(self.fn, '__qualname__', '?')}:{_function_fingerprint(self.fn)}"


def _function_fingerprint(fn: object, depth: int = 3) -> int | str:
    """A checksum of a function that is the same in every process: its bytecode, names and
    constants, nested code objects (a generator expression, an inner lambda) by their own checksum
    rather than their ``repr`` (which holds a memory address), and the functions and plain values
    its closure holds (a wrapper's checksum then follows the user function it wraps)."""
    code = getattr(fn, "__code__", fn)
    if not hasattr(code, "co_code"):
        return type(fn).__name__
    parts: list[object] = [code.co_names]
    parts += [_function_fingerprint(c) if hasattr(c, "co_code") else c for c in code.co_consts]
    for cell in getattr(fn, "__closure__", None) or ():
        try:
            held = cell.cell_contents
        except ValueError:  # an empty cell
            continue
        if callable(held) and depth > 0:
            parts.append(_function_fingerprint(held, depth - 1))
        elif isinstance(held, (str, int, float, bool, type(None))):
            parts.append(held)
    return zlib.crc32(code.co_code + repr(parts).encode())


def call_user_function(fn: Callable[..., Any], values: tuple[Array, ...], name: str) -> Array:
    """``fn(*values)`` for a user-supplied vectorised function, checked: any exception, a wrong
    shape or a non-numeric result becomes a :class:`ProgramError` that names the function (a
    user's nonlinearity is part of the program), wherever and on whatever array it is called."""
    shape = np.broadcast_shapes(*(np.shape(v) for v in values))
    try:
        raw = fn(*values)
        dtype = getattr(raw, "dtype", None)
        if isinstance(dtype, np.dtype) and dtype.kind == "f" and dtype.itemsize < 8:
            raise ProgramError(f"the custom nonlinearity {name!r} returned {dtype} values, whose rounding "
                               f"({np.finfo(dtype).eps:.1e}) is far above the kernels' tolerances (1e-8 by "
                               "default): return float64 (numpy's default; drop the .astype or the low-precision "
                               "constants)")
        if np.iscomplexobj(raw):
            raise ProgramError(f"the custom nonlinearity {name!r} returned complex values; a nonlinearity "
                               "must be real (take the real part or the modulus inside it)")
        out = np.asarray(raw, dtype=float)
    except NetsorError:  # already says what to change (netsor's own functions inside a program)
        raise
    except Exception as exc:  # noqa: BLE001 - user code: report whatever it raised
        raise ProgramError(f"the custom nonlinearity {name!r} failed on arrays of shape {shape}: {exc!r}; "
                           "it must be vectorised (numpy operations, no Python branching)") from None
    if out.shape != shape:
        raise ProgramError(f"the custom nonlinearity {name!r} returned shape {out.shape} on arrays of shape "
                           f"{shape}; it must act elementwise")
    return out


@dataclass(frozen=True, eq=False)
class Activation:
    """A coordinatewise nonlinearity φ : R → R.

    Attributes
    ----------
    name : str
        Registry name (``"relu"``, ``"tanh"``, ...) or a user-chosen name.
    fn, deriv : callable
        Vectorised φ and φ' (φ' almost everywhere; 0 at the jumps of step-like φ).
    kernel : callable or None
        Closed form of ``E[φ(u) φ(v)]`` given ``(a, b, c)``, if one exists.
    mean : callable or None
        Closed form of ``E[φ(u)]`` for ``u ~ N(0, a)``, if one exists.
    kernel_modulus : callable or None
        ``(a, b, c, delta) ↦`` a bound of ``|K(a, b, c') − K(a, b, c)|`` over ``|c' − c| ≤ delta``
        for φ with a kernel: error propagation through jumps (without it the engine evaluates
        ``kernel`` at ``c ± delta``, exact for kernels monotone in c), and for a continuous φ the
        pair-by-pair slope where the per-point Cauchy–Schwarz slope would compound (erf).
    smooth : bool
        True when φ is analytic (quadrature and Hermite series converge fast).
    odd : bool
        True when φ(−x) = −φ(x) (so E φ(u) = 0).
    even : bool
        True when φ(−x) = φ(x).
    kinks : tuple of float
        Points where φ or φ' jumps; quadrature splits its panels there.
    zeros : tuple of float or None
        The boundary of φ's zero set ``{x : φ(x) = 0}`` — its isolated zeros and the ends of the
        intervals where φ vanishes (relu: ``(0,)``; sigmoid: ``()``); None when unknown or
        infinite (sin). A kink at 0 of ψ(φ(a)·b) then lies on known hyperplanes.
    positive_above : float or None
        ``x₀`` when φ(x) > 0 exactly for x > x₀ (relu, tanh, gelu: 0); None when φ's positive set
        is not such a half-line (or is not known). ``step(φ(e))`` is then ``step(e − x₀)``: its jump
        lies on a known plane when ``e`` is affine.
    image : tuple (lo, hi, lo reached, hi reached) or None
        Bounds of φ's values: ``lo ≤ φ(x) ≤ hi`` for every x, with equality only where flagged
        (relu: ``(0, inf, True, False)``; erf: ``(-1, 1, False, False)``; gelu: ``(-0.17, inf, False,
        False)``, its minimum being −0.16997); None when not known. The tracer bounds sums of
        activations with it: ``(1 + erf x)/2`` is never 0, so ``relu(((1 + erf x)/2)·g)`` kinks on
        ``g = 0`` only.
    negative_below : bool
        True when moreover φ(x) < 0 exactly for x < ``positive_above`` (tanh, not relu): then
        ``step(−φ(e)) = step(x₀ − e)`` too.
    kinks_known : bool
        False when φ may have kinks or jumps that ``kinks`` does not list (a custom callable
        whose kinks nobody declared): the Gaussian engine then locates them numerically.
    continuous : bool
        True when φ is absolutely continuous with φ' its weak derivative (every registry
        activation but ``step``). Error bounds of expectations use ``E φ'²`` then; for
        discontinuous (or unknown) φ they use a bound that needs no derivative.
    params : dict
        Parameters of a parametric activation (``alpha`` of leaky_relu, elu).
    registered : bool
        False for user callables wrapped by :func:`custom`.
    homogeneous : float, optional
        ``p`` when φ is positively homogeneous of degree p (``φ(cx) = cᵖ φ(x)`` for ``c > 0``:
        relu, leaky_relu, abs and identity have p = 1, step p = 0); moments at any variance then
        follow from those at variance 1.
    cache_key : tuple, optional
        Identity of an unregistered φ for caches (a composite function built from an expression
        uses the expression's content key); default: the object itself.
    second : callable, optional
        φ'' in closed form (tanh, sigmoid, erf, gelu, silu, softplus): the derivative of φ' as an activation
        (:func:`netsor.ir.differentiate.derived_activation`) is then exact, not a finite difference, and
        pairs of φ' can bound their change by their own slope (chaotic and exploding NTKs).
    exact_slope : bool
        False when ``deriv`` is a finite difference (a custom φ without ``deriv``; the derivative of a φ
        without ``second``).
    local : bool
        True when φ varies on the scale of x only near its features (its kinks, or 0 where it has none)
        and is, away from them, a saturating, linear or vanishing tail (tanh, gelu, softplus, elu): panels
        graded towards the features at the scale of the argument then resolve ``φ(σz)`` at every σ, and
        quadratures need no uniform grid at the scale σ (gelu at σ ~ 10⁶ took 20 000 × 20 000 nodes a
        pair). False for oscillating (sin, cos) or unknown φ.
    distance_kernel : callable, optional
        ``E[(φ(u) − φ(v))²]`` with its error bound from the variances, the pair's distance ``E[(u − v)²]``
        and its angle, with their bounds (:mod:`netsor.activations.distance_kernels`; piecewise-linear and
        step-like φ): the infinite-width engine carries distances through deep networks whose inputs'
        correlations approach 1, where a covariance loses ``1 − ρ`` to rounding.
    pieces : tuple of (coef, power, rate, threshold, above), optional
        φ as a sum of ``coef · x^power · e^(rate·x) · 1{x > threshold}`` (``above``; else ``x < threshold``)
        with power 0 or 1, when it is one: elu is ``x·1{x > 0} + α e^x 1{x < 0} − α 1{x < 0}``. Pairs of such
        functions have closed forms (:mod:`netsor.gaussian.piecewise`); piecewise-linear φ are recognised
        without it.
    value_error : callable, optional
        A pointwise bound of ``|fn(x) − φ(x)|`` where ``fn`` only approximates φ (the central difference that
        stands for φ' of a custom φ given without ``deriv``): expectations add its share by Cauchy–Schwarz,
        ``√(E δ(u)²)·√(E ψ(v)²)`` (:func:`netsor.gaussian.pair_expectation`, ``mean``). None: ``fn`` is φ.
    deriv_error : callable, optional
        The same bound for ``deriv`` (:func:`central_difference_error` for a custom φ without ``deriv``); it is
        the ``value_error`` of φ' as an activation (:func:`netsor.ir.differentiate.derived_activation`).
    difference_of : Activation, optional
        The φ whose central difference (step ``FD_STEP·max(1, |x|)`` at most) ``fn`` is: φ' of a custom φ given
        without ``deriv`` (:func:`netsor.ir.differentiate.derived_activation`). The engine locates φ's kinks and
        jumps and reads the difference beside them, where its stencil would straddle them.
    source : callable, optional
        The user's vectorised callable of a :func:`custom` φ given without ``deriv``. Programs trace it when
        they apply φ to a vector (:func:`netsor.ir.trace.applied`): a φ written with numpy arithmetic and
        elementwise functions (``np.tanh``, ``lambda x: np.maximum(x + 0.3, 0)``) then has exact kinks,
        derivative and closed forms; one the tracer cannot see through stays this opaque activation.
    """

    name: str
    fn: Callable[[Array], Array]
    deriv: Callable[[Array], Array]
    kernel: KernelRule | None = None
    mean: MeanRule | None = None
    kernel_modulus: Callable[[Array, Array, Array, Array], Array] | None = None
    smooth: bool = True
    odd: bool = False
    even: bool = False
    kinks: tuple[float, ...] = ()
    zeros: tuple[float, ...] | None = None
    positive_above: float | None = None
    negative_below: bool = False
    image: tuple[float, float, bool, bool] | None = None
    kinks_known: bool = True
    continuous: bool = True
    params: dict[str, Any] = field(default_factory=dict)
    registered: bool = True
    homogeneous: float | None = None
    cache_key: tuple[Any, ...] | None = None
    pieces: tuple[tuple[float, int, float, float, bool], ...] | None = None
    local: bool = False
    second: Callable[[Array], Array] | None = None
    exact_slope: bool = True
    distance_kernel: DistanceRule | None = None
    source: Callable[[Array], Array] | None = None
    value_error: Callable[[Array], Array] | None = None
    deriv_error: Callable[[Array], Array] | None = None
    difference_of: Activation | None = None

    @functools.cached_property
    def at_zero(self) -> float:
        """``φ(0)``: the constant a coordinate of variance 0 takes (NaN if φ is undefined there); evaluated
        once (the engine asks for it at every pair of a sweep)."""
        with np.errstate(all="ignore"):
            return float(np.asarray(self.fn(np.zeros(1)), dtype=float)[0])

    @property
    def key(self) -> tuple[Any, ...]:
        """Identity for caching: registry name and parameters, or the object for custom φ."""
        if self.registered:
            return (self.name, tuple(sorted(self.params.items())))
        if self.cache_key is not None:
            return self.cache_key
        return ("~custom", self.name, FunctionIdentity(self.fn, owner=self))

    def __call__(self, x: Any, *extra: Any, **options: Any) -> Any:
        if extra or options:  # leaky_relu(g, 0.1) raised Python's "takes 2 positional arguments"
            given = ", ".join([*(repr(e) for e in extra), *(f"{k}={v!r}" for k, v in options.items())])
            raise HyperParameterError(
                f"{self.name} takes one vector, got also {given}; parameters belong to the activation: "
                f"netsor.activation({self.name!r}, alpha=...)(g) for leaky_relu and elu, netsor.nonlin(fn, a, b, ...) "
                "for a function of several vectors")
        # A symbolic vector applies the activation itself (adds a NonLin line to its program).
        apply = getattr(x, "__netsor_apply__", None)
        if apply is not None:
            return apply(self)
        if hasattr(x, "in_dim") or hasattr(x, "matrix"):  # a Matrix or its transpose (no import: ir uses us)
            raise HyperParameterError(f"{self.name} applies to vectors, not to the matrix {x!r}; apply it to a "
                                      "product such as W @ h")
        return self.fn(np.asarray(x, dtype=float))

    def __repr__(self) -> str:
        extra = "".join(f", {k}={v!r}" for k, v in self.params.items())
        return f"Activation({self.name!r}{extra})"


def _sigmoid_deriv(x: Array) -> Array:
    s = special.expit(x)
    return s * (1.0 - s)


def _gelu(x: Array) -> Array:
    return x * special.ndtr(x)


def _gelu_deriv(x: Array) -> Array:
    return special.ndtr(x) + x * np.exp(-0.5 * x * x) / np.sqrt(_TWO_PI)


def _silu_deriv(x: Array) -> Array:
    s = special.expit(x)
    return s * (1.0 + x * (1.0 - s))


def _sigmoid_second(x: Array) -> Array:
    s = special.expit(x)
    return s * (1.0 - s) * (1.0 - 2.0 * s)


def _silu_second(x: Array) -> Array:  # (σ + xσ(1 − σ))' = σ(1 − σ)(2 + x(1 − 2σ))
    s = special.expit(x)
    return s * (1.0 - s) * (2.0 + x * (1.0 - 2.0 * s))


def _tanh_second(x: Array) -> Array:
    t = np.tanh(x)
    return -2.0 * t * (1.0 - t * t)


def _relu(x: Array) -> Array:
    return np.maximum(x, 0.0)


def _step(x: Array) -> Array:
    return (x > 0).astype(float)


def _alpha(alpha: Any) -> float:
    if isinstance(alpha, bool) or not isinstance(alpha, int | float | np.integer | np.floating):
        raise HyperParameterError(f"alpha must be a real number, got {alpha!r}")
    if not math.isfinite(float(alpha)):
        raise HyperParameterError(f"alpha must be finite, got {alpha!r}")
    return float(alpha)


def _make_leaky_relu(alpha: float = 0.01) -> Activation:
    alpha = _alpha(alpha)
    return Activation(
        name="leaky_relu",
        zeros=(0.0,),
        fn=lambda x: np.where(x > 0, x, alpha * x),
        deriv=lambda x: np.where(x > 0, 1.0, alpha),
        kernel=leaky_relu_kernel(alpha),
        mean=lambda a: (1.0 - alpha) * np.sqrt(np.asarray(a) / _TWO_PI),
        smooth=False,
        kinks=(0.0,),
        params={"alpha": alpha},
        homogeneous=1.0,
        distance_kernel=PiecewiseLinearDistance(1.0, alpha),
    )


def _make_elu(alpha: float = 1.0) -> Activation:
    alpha = _alpha(alpha)
    return Activation(
        name="elu",
        zeros=(0.0,),
        fn=lambda x: np.where(x > 0, x, alpha * np.expm1(np.minimum(x, 0.0))),
        deriv=lambda x: np.where(x > 0, 1.0, alpha * np.exp(np.minimum(x, 0.0))),
        smooth=False,
        kinks=(0.0,),
        params={"alpha": alpha},
        pieces=((1.0, 1, 0.0, 0.0, True), (alpha, 0, 1.0, 0.0, False), (-alpha, 0, 0.0, 0.0, False)),
        local=True,
    )


#: Images (infimum, supremum, attained?) shared by several activations.
_UNBOUNDED = (-np.inf, np.inf, False, False)
_OPEN_UNIT, _CLOSED_UNIT = (-1.0, 1.0, False, False), (-1.0, 1.0, True, True)

#: φ(x) has the sign of x (positive above 0, negative below): ``step(±φ(e)) = step(±e)``.
_SIGN_OF_X: dict[str, Any] = {"positive_above": 0.0, "negative_below": True}

_FIXED: dict[str, Activation] = {
    a.name: a
    for a in [
        Activation("identity", fn=lambda x: np.asarray(x, dtype=float), deriv=np.ones_like, zeros=(0.0,), **_SIGN_OF_X,
                   image=_UNBOUNDED,
                   kernel=identity_kernel, mean=np.zeros_like, odd=True, homogeneous=1.0,
                   distance_kernel=PiecewiseLinearDistance(1.0, 1.0)),
        Activation("relu", fn=_relu, deriv=_step, zeros=(0.0,), positive_above=0.0, kernel=arccos_kernel_1,
                   image=(0.0, np.inf, True, False),
                   mean=lambda a: np.sqrt(np.asarray(a) / _TWO_PI), smooth=False, kinks=(0.0,), homogeneous=1.0,
                   distance_kernel=PiecewiseLinearDistance(1.0, 0.0)),
        Activation("step", fn=_step, deriv=np.zeros_like, zeros=(0.0,), positive_above=0.0, kernel=arccos_kernel_0,
                   image=(0.0, 1.0, True, True),
                   kernel_modulus=arccos_kernel_0_modulus, mean=lambda a: np.full(np.shape(a), 0.5), smooth=False,
                   kinks=(0.0,), continuous=False,
                   homogeneous=0.0, distance_kernel=JumpDistance(1.0, (1.0, 0.0))),
        Activation("erf", fn=special.erf, zeros=(0.0,), **_SIGN_OF_X, image=_OPEN_UNIT,
                   deriv=lambda x: 2.0 / np.sqrt(np.pi) * np.exp(-x * x),
                   kernel=erf_kernel, kernel_modulus=erf_kernel_modulus, mean=np.zeros_like, odd=True, local=True,
                   second=lambda x: -4.0 / np.sqrt(np.pi) * x * np.exp(-x * x)),
        Activation("erf_deriv", fn=lambda x: 2.0 / np.sqrt(np.pi) * np.exp(-x * x), zeros=(),
                   image=(0.0, 2.0 / np.sqrt(np.pi), False, True),
                   deriv=lambda x: -4.0 / np.sqrt(np.pi) * x * np.exp(-x * x), kernel=erf_deriv_kernel,
                   mean=lambda a: 2.0 / np.sqrt(np.pi * (1.0 + 2.0 * np.asarray(a))), even=True, local=True),
        Activation("tanh", fn=np.tanh, zeros=(0.0,), **_SIGN_OF_X, deriv=lambda x: 1.0 - np.tanh(x) ** 2, odd=True,
                   image=_OPEN_UNIT, local=True, second=_tanh_second),
        Activation("hard_tanh", fn=lambda x: np.clip(x, -1.0, 1.0), zeros=(0.0,), **_SIGN_OF_X, image=_CLOSED_UNIT,
                   deriv=lambda x: (np.abs(x) < 1.0).astype(float), smooth=False, odd=True,
                   kinks=(-1.0, 1.0), local=True),
        Activation("sigmoid", fn=special.expit, zeros=(), deriv=_sigmoid_deriv, image=(0.0, 1.0, False, False),
                   local=True, second=_sigmoid_second),
        Activation("gelu", fn=_gelu, zeros=(0.0,), **_SIGN_OF_X, deriv=_gelu_deriv,
                   image=(-0.17, np.inf, False, False), local=True,  # min −0.16997 at x = −0.7518
                   second=lambda x: (2.0 - x * x) * np.exp(-0.5 * x * x) / np.sqrt(_TWO_PI)),
        Activation("silu", fn=lambda x: x * special.expit(x), zeros=(0.0,), **_SIGN_OF_X, deriv=_silu_deriv,
                   image=(-0.279, np.inf, False, False), local=True,  # min −0.27846 at x = −1.2785
                   second=_silu_second),
        Activation("softplus", fn=lambda x: np.logaddexp(0.0, x), zeros=(), deriv=special.expit,
                   image=(0.0, np.inf, False, False), local=True, second=_sigmoid_deriv),
        Activation("abs", fn=np.abs, zeros=(0.0,), deriv=np.sign, kernel=abs_kernel, image=(0.0, np.inf, True, False),
                   mean=lambda a: np.sqrt(2.0 * np.asarray(a) / np.pi), smooth=False, kinks=(0.0,), homogeneous=1.0,
                   even=True, distance_kernel=PiecewiseLinearDistance(1.0, -1.0)),
        Activation("sin", fn=np.sin, deriv=np.cos, kernel=sin_kernel, mean=np.zeros_like, odd=True, image=_CLOSED_UNIT),
        Activation("cos", fn=np.cos, deriv=lambda x: -np.sin(x), kernel=cos_kernel, image=_CLOSED_UNIT,
                   mean=lambda a: np.exp(-0.5 * np.asarray(a)), even=True),
        Activation("exp", fn=np.exp, zeros=(), deriv=np.exp, kernel=exp_kernel, image=(0.0, np.inf, False, False),
                   mean=lambda a: np.exp(0.5 * np.asarray(a))),
        Activation("gaussian", fn=lambda x: np.exp(-0.5 * x * x), zeros=(), deriv=lambda x: -x * np.exp(-0.5 * x * x),
                   image=(0.0, 1.0, False, True),
                   kernel=gaussian_kernel, mean=lambda a: 1.0 / np.sqrt(1.0 + np.asarray(a)), even=True, local=True),
    ]
}
_PARAMETRIC: dict[str, Callable[..., Activation]] = {"leaky_relu": _make_leaky_relu, "elu": _make_elu}
_ALIASES = {"swish": "silu", "linear": "identity", "heaviside": "step", "hardtanh": "hard_tanh"}

identity = _FIXED["identity"]
relu = _FIXED["relu"]
step = _FIXED["step"]
erf = _FIXED["erf"]
erf_deriv = _FIXED["erf_deriv"]
tanh = _FIXED["tanh"]
hard_tanh = _FIXED["hard_tanh"]
sigmoid = _FIXED["sigmoid"]
gelu = _FIXED["gelu"]
silu = swish = _FIXED["silu"]
softplus = _FIXED["softplus"]
abs_ = _FIXED["abs"]
sin = _FIXED["sin"]
cos = _FIXED["cos"]
exp = _FIXED["exp"]
gaussian = _FIXED["gaussian"]
leaky_relu = _make_leaky_relu()
elu = _make_elu()


# Elementary functions met when a user function is traced (netsor.builder): numpy ufunc →
# activation. Functions that are only defined on part of the line (log, sqrt, 1/x) are
# included: evaluating them outside their domain gives NaN/Inf, which the interpreters report.
def _recip_deriv(x: Array) -> Array:
    with np.errstate(divide="ignore"):
        return -1.0 / (x * x)


_UFUNCS: dict[Any, Activation] = {
    np.tanh: tanh, np.exp: exp, np.sin: sin, np.cos: cos, np.absolute: abs_, special.erf: erf,
    special.expit: sigmoid,
    np.log: Activation("log", fn=np.log, zeros=(1.0,), deriv=lambda x: 1.0 / x, smooth=False, kinks=(0.0,),
                       continuous=False),
    np.sqrt: Activation("sqrt", fn=np.sqrt, zeros=(0.0,), deriv=lambda x: 0.5 / np.sqrt(x), smooth=False, kinks=(0.0,),
                        continuous=False, homogeneous=0.5),
    np.reciprocal: Activation("reciprocal", fn=lambda x: 1.0 / x, zeros=(), deriv=_recip_deriv, smooth=False,
                              kinks=(0.0,), continuous=False, homogeneous=-1.0),
    np.expm1: Activation("expm1", fn=np.expm1, zeros=(0.0,), **_SIGN_OF_X, deriv=np.exp),
    np.log1p: Activation("log1p", fn=np.log1p, zeros=(0.0,), deriv=lambda x: 1.0 / (1.0 + x), smooth=False,
                         kinks=(-1.0,), continuous=False),
    np.arctan: Activation("arctan", fn=np.arctan, zeros=(0.0,), **_SIGN_OF_X,
                          image=(-np.pi / 2, np.pi / 2, False, False), deriv=lambda x: 1.0 / (1.0 + x * x), odd=True,
                          local=True),
    np.arcsinh: Activation("arcsinh", fn=np.arcsinh, zeros=(0.0,), **_SIGN_OF_X,
                           deriv=lambda x: 1.0 / np.sqrt(1.0 + x * x),
                           odd=True, local=True),
    np.sinh: Activation("sinh", fn=np.sinh, zeros=(0.0,), **_SIGN_OF_X, deriv=np.cosh, odd=True),
    np.cosh: Activation("cosh", fn=np.cosh, zeros=(), deriv=np.sinh, even=True, image=(1.0, np.inf, True, False)),
    np.sign: Activation("sign", fn=np.sign, zeros=(0.0,), **_SIGN_OF_X, kernel=sign_kernel,
                        kernel_modulus=sign_kernel_modulus, mean=np.zeros_like, image=_CLOSED_UNIT,
                        deriv=np.zeros_like, smooth=False, odd=True, kinks=(0.0,),
                        continuous=False, homogeneous=0.0, distance_kernel=JumpDistance(2.0, (1.0, -1.0))),
    special.ndtr: Activation("ndtr", fn=special.ndtr, zeros=(), image=(0.0, 1.0, False, False),
                             deriv=lambda x: np.exp(-0.5 * x * x) / np.sqrt(_TWO_PI), local=True),
}


def from_ufunc(ufunc: Any) -> Activation | None:
    """The activation computing a one-argument numpy/scipy ufunc, if it is known."""
    try:
        return _UFUNCS.get(ufunc)
    except TypeError:  # unhashable
        return None


def available() -> list[str]:
    """Names accepted by :func:`activation`."""
    return sorted([*_FIXED, *_PARAMETRIC, *_ALIASES])


def activation(spec: str | Activation | Callable[[Array], Array], **params: Any) -> Activation:
    """Look up an activation by name (or wrap a callable).

    Parameters
    ----------
    spec : str, Activation or callable
        A registry name such as ``"relu"`` or ``"leaky_relu"``, an existing
        :class:`Activation`, a numpy/scipy ufunc the registry knows (``np.tanh`` is netsor's tanh,
        with its closed forms), or a vectorised callable (see :func:`custom`; a program that applies
        it to a vector traces it, :func:`netsor.ir.trace.applied`).
    **params
        Parameters of parametric activations: ``alpha`` for leaky_relu and elu.
    """
    if isinstance(spec, Activation):
        if params:
            return activation(spec.name, **{**spec.params, **params})
        return spec
    if callable(spec):
        known = None if params else from_ufunc(spec)
        return known if known is not None else custom(spec, **params)  # np.tanh is netsor's tanh
    if not isinstance(spec, str):
        raise HyperParameterError(f"activation must be a name or a callable, got {type(spec).__name__}")
    name = _ALIASES.get(spec.lower(), spec.lower())
    if name in _PARAMETRIC:
        try:
            return _PARAMETRIC[name](**params)
        except TypeError as exc:
            raise HyperParameterError(f"bad parameters {params} for activation {name!r}: {exc}") from None
    if name in _FIXED:
        if params:
            raise HyperParameterError(f"activation {name!r} takes no parameters, got {sorted(params)}")
        return _FIXED[name]
    raise HyperParameterError(
        f"unknown activation {spec!r}; choose one of {', '.join(available())}, "
        "or pass a vectorised callable (netsor.activations.custom)"
    )


#: Step of the central difference that stands for φ' of a custom φ given without ``deriv`` (relative, times
#: ``max(1, |x|)``, for the partial derivatives of opaque functions and for φ'' of a derived φ').
FD_STEP = 1e-6


def relative_step(x: Array) -> Array:
    """``FD_STEP·max(1, |x|)``: the step of the differences along an opaque function's arguments and of φ''."""
    return FD_STEP * np.maximum(1.0, np.abs(x))


def central_difference(fn: Callable[[Array], Array], x: Array, h: float | Array = FD_STEP) -> Array:
    """φ' of a custom φ given without ``deriv`` (``h`` per point for φ'' of a derived φ',
    netsor.ir.differentiate): :func:`partial_difference` of a function of one argument."""
    return partial_difference(fn, (x,), 0, h)


def partial_difference(fn: Callable[..., Array], args: tuple[Array, ...], i: int, h: float | Array) -> Array:
    """``∂ᵢ fn`` at ``args`` almost everywhere: ``(f(x + h) − f(x − h)) / 2h`` along argument ``i``, except where
    that stencil straddles a jump of f, where it is a spike of height jump/2h — not the derivative (that of a step
    is 0, as in autodiff), and at finite width one such coordinate in a network made an empirical NTK ~1e10 too
    large. A jump is told by the differences beside the stencil, centred at x ± 2h, which do not see it: the central
    difference then exceeds their mean by more than they differ and than its rounding. There the value is the one
    of those two on the side of x away from the jump (the one-sided step from x that holds the jump changes more);
    its error, ~2h·f'', is that of a derivative read 2h away."""
    def shifted(t: float) -> Array:
        moved = list(args)
        moved[i] = np.asarray(args[i], dtype=float) + t * h
        return np.asarray(fn(*moved), dtype=float)

    down, up = shifted(-1.0), shifted(1.0)
    central = (up - down) / (2.0 * h)
    with np.errstate(all="ignore"):
        far_down, far_up = shifted(-3.0), shifted(3.0)
        below, above = (down - far_down) / (2.0 * h), (far_up - up) / (2.0 * h)
        eps = np.finfo(float).eps
        rounding = 8.0 * eps * (np.abs(far_down) + np.abs(down) + np.abs(up) + np.abs(far_up)) / (2.0 * h)
        spike = (np.abs(central - 0.5 * (below + above))
                 > np.abs(above - below) + rounding + 1e-7 * (1.0 + np.abs(below) + np.abs(above)))
    if not np.any(spike):
        return central
    middle = shifted(0.0)
    jump_above = np.abs(up - middle) > np.abs(middle - down)
    return np.where(spike, np.where(jump_above, below, above), central)


def central_difference_error(fn: Callable[[Array], Array], x: Array, kinks: tuple[float, ...] = (),
                             h: float = FD_STEP) -> Array:
    """A pointwise bound of the error of :func:`central_difference` at ``x``: twice its truncation, read from the
    difference with the step 2h (``(D₂ₕ − Dₕ)/3`` for an error ∝ h², rounding noise included), plus the rounding of
    φ's two values divided by the step (2 ulps of each); within 2h of a kink, where the difference straddles it,
    the size of the two one-sided slopes (it is a mean of them there). The error it bounds is ~1e-10 of φ' for
    smooth φ: tanh's NTK by central differences was up to 39× its reported bound before it was counted."""
    x = np.asarray(x, dtype=float)
    with np.errstate(all="ignore"):
        values = [np.asarray(fn(x + t * h), dtype=float) for t in (-2.0, -1.0, 1.0, 2.0)]
        narrow = (values[2] - values[1]) / (2.0 * h)
        wide = (values[3] - values[0]) / (4.0 * h)
        rounding = 2.0 * np.finfo(float).eps * (np.abs(values[1]) + np.abs(values[2])) / (2.0 * h)
        error = 2.0 * np.abs(wide - narrow) / 3.0 + rounding
        for k in kinks:
            near = np.abs(x - k) <= 2.0 * h
            if near.any():
                slopes = np.abs(central_difference(fn, np.array([k - 3.0 * h, k + 3.0 * h]), h))
                error = np.where(near, error + 2.0 * float(np.max(slopes)), error)
    return np.where(np.isfinite(error), error, np.inf)


def custom(
    fn: Callable[[Array], Array],
    deriv: Callable[[Array], Array] | None = None,
    name: str | None = None,
    smooth: bool = False,
    continuous: bool | None = None,
    kinks: tuple[float, ...] = (),
) -> Activation:
    """Wrap a vectorised one-argument callable as an activation.

    Parameters
    ----------
    fn : callable
        Vectorised φ: an array in, an array of the same shape out.
    deriv : callable, optional
        φ'. Without it the derivative is a central finite difference (step 1e-6), good to
        about 1e-9 for smooth φ.
    smooth : bool
        Promise that φ is analytic (fewer quadrature nodes).
    continuous : bool, optional
        Promise that φ is absolutely continuous (tighter error bounds downstream). Default:
        True when ``deriv`` is given, else unknown (False).
    kinks : tuple of float
        Points where φ or φ' jumps (quadrature splits its panels there; unknown kinks are
        found by adaptive refinement).
    """
    if not callable(fn):
        raise HyperParameterError("custom activation: fn must be callable")
    if deriv is not None and not callable(deriv):
        raise HyperParameterError("custom activation: deriv must be callable")
    with np.errstate(all="ignore"):  # values out of a domain (log of a negative) show later, where they matter
        call_user_function(fn, (np.linspace(-1.0, 1.0, 5),), name or getattr(fn, "__name__", "custom"))
    try:
        kinks = tuple(sorted(float(k) for k in kinks))
    except (TypeError, ValueError):
        raise HyperParameterError(f"kinks must be real numbers, got {kinks!r}") from None

    label = name or getattr(fn, "__name__", "custom")

    def values(x: Array) -> Array:
        return call_user_function(fn, (x,), label)

    return Activation(
        name=label,
        fn=values,
        deriv=(lambda x: call_user_function(deriv, (x,), label + "'")) if deriv is not None
        else lambda x: central_difference(values, x),
        deriv_error=None if deriv is not None else lambda x: central_difference_error(values, x, kinks),
        smooth=bool(smooth),
        kinks=kinks,
        kinks_known=bool(smooth) or bool(kinks),
        continuous=(deriv is not None) if continuous is None else bool(continuous),
        registered=False,
        exact_slope=deriv is not None,
        source=fn if deriv is None else None,
    )
