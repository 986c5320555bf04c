"""Activation registry: each activation knows φ, φ' and, where one exists, the
closed form of its Gaussian kernel.

Conventions. ``(u, v)`` is a centred Gaussian pair with ``Var u = a``,
``Var v = b``, ``Cov(u, v) = c``; ``θ = arccos(c / sqrt(ab))``. A kernel rule
returns ``E[φ(u) φ(v)]`` elementwise for broadcastable arrays ``a, b, c``; a
mean rule returns ``E[φ(u)]`` for ``u ~ N(0, a)``. Rules may assume ``a, b > 0``:
the Gaussian engine (:mod:`netsor.gaussian`) handles degenerate variances.

Calling an activation on an array applies φ elementwise; calling it on a
symbolic vector of a :class:`netsor.Program` adds a NonLin line.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy import special

from netsor.errors import HyperParameterError

Array = np.ndarray
KernelRule = Callable[[Array, Array, Array], Array]
MeanRule = Callable[[Array], Array]

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


def _correlation(a: Array, b: Array, c: Array) -> tuple[Array, Array, Array]:
    """sqrt(a), sqrt(b) and the correlation c/sqrt(ab) clipped to [-1, 1] (0 where ab = 0).

    ``a`` and ``b`` are typically (B1, 1) and (1, B2) and ``c`` (B1, B2): the square
    roots and reciprocals are taken on the small arrays and the big ones are updated in
    place (these kernels run once per layer on every pair of inputs).
    """
    sa = np.sqrt(np.maximum(a, 0.0))
    sb = np.sqrt(np.maximum(b, 0.0))
    if np.all(sa > 0) and np.all(sb > 0):
        rho = np.multiply(c, 1.0 / sa)
        rho *= 1.0 / sb
    else:
        s = sa * sb
        with np.errstate(divide="ignore", invalid="ignore"):
            rho = np.where(s > 0, c / np.where(s > 0, s, 1.0), 0.0)
    return sa, sb, np.clip(rho, -1.0, 1.0, out=rho)


def _sqrt_one_minus_square(rho: Array) -> Array:
    out = np.multiply(rho, rho)
    np.subtract(1.0, out, out=out)  # >= 0 exactly, since |rho| <= 1
    return np.sqrt(out, out=out)


@_scalar_safe
def arccos_kernel_1(a: Array, b: Array, c: Array) -> Array:
    """E[relu u relu v] = sqrt(ab) (sin θ + (π − θ) cos θ) / (2π) (Cho & Saul, order 1)."""
    sa, sb, rho = _correlation(a, b, c)
    out = _sqrt_one_minus_square(rho)
    theta = np.arccos(rho)
    np.subtract(np.pi, theta, out=theta)
    theta *= rho
    out += theta
    out *= sa * (1.0 / _TWO_PI)
    out *= sb
    return out


@_scalar_safe
def arccos_kernel_0(a: Array, b: Array, c: Array) -> Array:
    """E[step u step v] = (π − θ) / (2π) (Cho & Saul, order 0)."""
    _, _, rho = _correlation(a, b, c)
    out = np.arccos(rho, out=rho)
    np.subtract(np.pi, out, out=out)
    out *= 1.0 / _TWO_PI
    return out


def _erf_kernel(a: Array, b: Array, c: Array) -> Array:
    # Williams (1997): E[erf u erf v] = (2/π) arcsin(2c / sqrt((1+2a)(1+2b))).
    return (2.0 / np.pi) * np.arcsin(np.clip(2.0 * c / np.sqrt((1.0 + 2.0 * a) * (1.0 + 2.0 * b)), -1, 1))


@_scalar_safe
def _abs_kernel(a: Array, b: Array, c: Array) -> Array:
    # |u| = relu(u) + relu(-u): 2 E[relu u relu v] + 2 E[relu u relu(-v)].
    sa, sb, rho = _correlation(a, b, c)
    theta = np.arccos(rho)
    return sa * sb * (2.0 * _sqrt_one_minus_square(rho) + (np.pi - 2.0 * theta) * rho) / np.pi


def _leaky_relu_kernel(alpha: float) -> KernelRule:
    # leaky(u) = relu(u) − α relu(−u); E[relu(−u) relu(−v)] = E[relu u relu v] and
    # E[relu u relu(−v)] is the order-1 arc-cosine kernel at covariance −c.
    def kernel(a: Array, b: Array, c: Array) -> Array:
        return (1 + alpha * alpha) * arccos_kernel_1(a, b, c) - 2 * alpha * arccos_kernel_1(a, b, -c)

    return kernel


def _exp_kernel(a: Array, b: Array, c: Array) -> Array:
    return np.exp(0.5 * (a + b) + c)


def _sin_kernel(a: Array, b: Array, c: Array) -> Array:
    return np.exp(-0.5 * (a + b)) * np.sinh(c)


def _cos_kernel(a: Array, b: Array, c: Array) -> Array:
    return np.exp(-0.5 * (a + b)) * np.cosh(c)


def _gaussian_kernel(a: Array, b: Array, c: Array) -> Array:
    # E[exp(-u²/2) exp(-v²/2)] = det(I + Σ)^(-1/2).
    return 1.0 / np.sqrt((1.0 + a) * (1.0 + b) - c * c)


def _identity_kernel(a: Array, b: Array, c: Array) -> Array:
    return np.asarray(c, dtype=float) * np.ones(np.broadcast(a, b, c).shape)


@dataclass(frozen=True, eq=False)
class Activation:
    """A coordinatewise nonlinearity φ : R → R.

    Attributes
    ----------
    name : str
        Registry name (``"relu"``, ``"tanh"``, ...) or a user-chosen name.
    fn, deriv : callable
        Vectorised φ and φ' (φ' almost everywhere; 0 at kinks of step-like φ).
    kernel : callable or None
        Closed form of ``E[φ(u) φ(v)]`` given ``(a, b, c)``, if one exists.
    mean : callable or None
        Closed form of ``E[φ(u)]`` for ``u ~ N(0, a)``, if one exists.
    smooth : bool
        True when φ is analytic (Gauss–Hermite quadrature converges fast).
    odd : bool
        True when φ(−x) = −φ(x) (so E φ(u) = 0).
    kinks : tuple of float
        Points where φ or φ' jumps; quadrature splits its panels there.
    params : dict
        Parameters of a parametric activation (``alpha`` of leaky_relu, elu).
    registered : bool
        False for user callables wrapped by :func:`custom`.
    """

    name: str
    fn: Callable[[Array], Array]
    deriv: Callable[[Array], Array]
    kernel: KernelRule | None = None
    mean: MeanRule | None = None
    smooth: bool = True
    odd: bool = False
    kinks: tuple[float, ...] = ()
    params: dict[str, Any] = field(default_factory=dict)
    registered: bool = True

    @property
    def key(self) -> tuple[Any, ...]:
        """Identity for caching: registry name and parameters, or the object for custom φ."""
        if self.registered:
            return (self.name, tuple(sorted(self.params.items())))
        return ("~custom", id(self))

    def __call__(self, x: Any) -> Any:
        # A symbolic vector of a program applies the activation itself (adds a NonLin line):
        # duck typing keeps the registry free of any import of the IR.
        apply = getattr(x, "__netsor_apply__", None)
        if apply is not None:
            return apply(self)
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


def _relu(x: Array) -> Array:
    return np.maximum(x, 0.0)


def _step(x: Array) -> Array:
    return (x > 0).astype(float)


def _make_leaky_relu(alpha: float = 0.01) -> Activation:
    alpha = float(alpha)
    return Activation(
        name="leaky_relu",
        fn=lambda x: np.where(x > 0, x, alpha * x),
        deriv=lambda x: np.where(x > 0, 1.0, alpha),
        kernel=_leaky_relu_kernel(alpha),
        mean=lambda a: (1.0 - alpha) * np.sqrt(np.asarray(a) / _TWO_PI),
        smooth=False,
        kinks=(0.0,),
        params={"alpha": alpha},
    )


def _make_elu(alpha: float = 1.0) -> Activation:
    alpha = float(alpha)
    return Activation(
        name="elu",
        fn=lambda x: np.where(x > 0, x, alpha * np.expm1(np.minimum(x, 0.0))),
        deriv=lambda x: np.where(x > 0, 1.0, alpha * np.exp(np.minimum(x, 0.0))),
        smooth=False,
        kinks=(0.0,),
        params={"alpha": alpha},
    )


_FIXED: dict[str, Activation] = {
    a.name: a
    for a in [
        Activation("identity", fn=lambda x: np.asarray(x, dtype=float), deriv=np.ones_like,
                   kernel=_identity_kernel, mean=np.zeros_like, odd=True),
        Activation("relu", fn=_relu, deriv=_step, kernel=arccos_kernel_1,
                   mean=lambda a: np.sqrt(np.asarray(a) / _TWO_PI), smooth=False, kinks=(0.0,)),
        Activation("step", fn=_step, deriv=np.zeros_like, kernel=arccos_kernel_0,
                   mean=lambda a: np.full(np.shape(a), 0.5), smooth=False, kinks=(0.0,)),
        Activation("erf", fn=special.erf, deriv=lambda x: 2.0 / np.sqrt(np.pi) * np.exp(-x * x),
                   kernel=_erf_kernel, mean=np.zeros_like, odd=True),
        Activation("tanh", fn=np.tanh, deriv=lambda x: 1.0 - np.tanh(x) ** 2, odd=True),
        Activation("hard_tanh", fn=lambda x: np.clip(x, -1.0, 1.0),
                   deriv=lambda x: (np.abs(x) < 1.0).astype(float), smooth=False, odd=True,
                   kinks=(-1.0, 1.0)),
        Activation("sigmoid", fn=special.expit, deriv=_sigmoid_deriv),
        Activation("gelu", fn=_gelu, deriv=_gelu_deriv),
        Activation("silu", fn=lambda x: x * special.expit(x), deriv=_silu_deriv),
        Activation("softplus", fn=lambda x: np.logaddexp(0.0, x), deriv=special.expit),
        Activation("abs", fn=np.abs, deriv=np.sign, kernel=_abs_kernel,
                   mean=lambda a: np.sqrt(2.0 * np.asarray(a) / np.pi), smooth=False, kinks=(0.0,)),
        Activation("sin", fn=np.sin, deriv=np.cos, kernel=_sin_kernel, mean=np.zeros_like, odd=True),
        Activation("cos", fn=np.cos, deriv=lambda x: -np.sin(x), kernel=_cos_kernel,
                   mean=lambda a: np.exp(-0.5 * np.asarray(a))),
        Activation("exp", fn=np.exp, deriv=np.exp, kernel=_exp_kernel,
                   mean=lambda a: np.exp(0.5 * np.asarray(a))),
        Activation("gaussian", fn=lambda x: np.exp(-0.5 * x * x), deriv=lambda x: -x * np.exp(-0.5 * x * x),
                   kernel=_gaussian_kernel, mean=lambda a: 1.0 / np.sqrt(1.0 + np.asarray(a))),
    ]
}
_PARAMETRIC: dict[str, Callable[..., Activation]] = {"leaky_relu": _make_leaky_relu, "elu": _make_elu}
_ALIASES = {"swish": "silu", "linear": "identity", "heaviside": "step", "hardtanh": "hard_tanh"}

identity = _FIXED["identity"]
relu = _FIXED["relu"]
step = _FIXED["step"]
erf = _FIXED["erf"]
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


def available() -> list[str]:
    """Names accepted by :func:`activation`."""
    return sorted([*_FIXED, *_PARAMETRIC, *_ALIASES])


def activation(spec: str | Activation | Callable[[Array], Array], **params: Any) -> Activation:
    """Look up an activation by name (or wrap a callable).

    Parameters
    ----------
    spec : str, Activation or callable
        A registry name such as ``"relu"`` or ``"leaky_relu"``, an existing
        :class:`Activation`, or a vectorised callable (see :func:`custom`).
    **params
        Parameters of parametric activations: ``alpha`` for leaky_relu and elu.
    """
    if isinstance(spec, Activation):
        if params:
            return activation(spec.name, **{**spec.params, **params})
        return spec
    if callable(spec):
        return custom(spec, **params)
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


def custom(
    fn: Callable[[Array], Array],
    deriv: Callable[[Array], Array] | None = None,
    name: str | None = None,
    smooth: bool = False,
) -> Activation:
    """Wrap a vectorised one-argument callable as an activation.

    Without ``deriv`` the derivative is a central finite difference (step 1e-6),
    good to about 1e-9 for smooth φ. ``smooth=True`` promises analyticity, which
    lets the quadrature use fewer nodes.
    """
    if not callable(fn):
        raise HyperParameterError("custom activation: fn must be callable")
    probe = np.asarray(fn(np.linspace(-1.0, 1.0, 5)), dtype=float)
    if probe.shape != (5,):
        raise HyperParameterError(
            "custom activation must be vectorised: fn(array of shape (5,)) returned shape "
            f"{probe.shape}; use numpy operations (np.where instead of if)"
        )

    def fd_deriv(x: Array, h: float = 1e-6) -> Array:
        return (fn(x + h) - fn(x - h)) / (2 * h)

    return Activation(
        name=name or getattr(fn, "__name__", "custom"),
        fn=lambda x: np.asarray(fn(x), dtype=float),
        deriv=deriv if deriv is not None else fd_deriv,
        smooth=smooth,
        registered=False,
    )
