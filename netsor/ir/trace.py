"""Tracing vectorised user functions into expression trees.

``netsor.nonlin(fn, a, b)`` calls ``fn`` once on :class:`Tracer` objects instead of arrays.
A tracer records numpy arithmetic, the elementwise ufuncs the activation registry knows
(``np.tanh``, ``np.exp``, ``scipy.special.erf``, ...), netsor's own activations
(``netsor.activation("step")(u)``), ``np.maximum``/``np.minimum``, ``np.heaviside``,
comparisons, ``np.where`` and ``np.clip`` as nodes of :mod:`netsor.ir.expr`, rewriting the
non-smooth ones through kinked activations of *affine* arguments so that their kinks are
known hyperplanes:

* ``max(a, b) = b + relu(a − b)``, ``min(a, b) = a − relu(a − b)``, ``|a|`` = ``abs(a)``;
* ``a == b`` is ``1{a − b = 0}`` (``1 − step(a − b) − step(b − a)``: ``relu(g) == 0`` holds with probability ½);
* ``a > b`` is ``step(a − b)`` and ``a ≥ b`` is ``1 − step(b − a)`` (exact at ties too, which have positive
  probability where ``a − b`` vanishes on a set of positive measure: ``relu(g) ≥ 0`` is 1, ``relu(g) > 0`` is
  ``step(g)``); ``np.heaviside(a, c) = step(a) + c·1{a = 0}`` with ``1{a = 0} = 1 − step(a) − step(−a)``;
* ``np.select`` and ``np.piecewise`` as nested wheres; ``x.clip``, ``x.astype(float)``;
* ``where(c, x, y) = y + c·(x − y)``, ``c`` the truth of the condition (a comparison, ``&``, ``|``, ``^``, ``~`` and
  ``np.logical_*`` of comparisons; any other value is true where it is not 0, as for numpy); where a branch may
  not be finite (``log``, ``sqrt`` or ``1/x`` inside) it is ``c·x + (1 − c)·y`` instead, each branch a product
  with its selection, 0 where not selected (:attr:`~netsor.ir.expr.Expr.selects`);
  ``clip(x, lo, hi) = lo + relu(x − lo) − relu(x − hi)`` for constant bounds (a bound None: one side).

Anything else (Python branching on values, unknown functions, reductions) stops the trace:
:func:`trace` returns None and the builder keeps ``fn`` as an :class:`~netsor.ir.expr.Opaque`
node, still correct but without structure.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable
from typing import Any

import numpy as np
from scipy import special

from netsor.activations import Activation, abs_, erf, exp, relu, softplus, step
from netsor.activations.registry import from_ufunc
from netsor.ir.expr import Const, Expr, apply, constant, linear, product


class TraceError(Exception):
    """The function did something a tracer cannot represent."""


def _lift(x: Any) -> Expr:
    if isinstance(x, Tracer):
        return x.expr
    if isinstance(x, numbers.Real) and not isinstance(x, bool):
        return constant(float(x))
    if isinstance(x, np.ndarray) and x.ndim == 0 and x.dtype.kind in "iuf":
        return constant(float(x))
    if isinstance(x, np.generic) and np.ndim(x) == 0 and np.asarray(x).dtype.kind in "iuf":
        return constant(float(x))
    raise TraceError(f"cannot trace an operand of type {type(x).__name__}")


def _sub(a: Expr, b: Expr) -> Expr:
    return linear(0.0, [(1.0, a), (-1.0, b)])


def _maximum(a: Expr, b: Expr) -> Expr:
    return linear(0.0, [(1.0, b), (1.0, apply(relu, _sub(a, b)))])


def _minimum(a: Expr, b: Expr) -> Expr:
    return linear(0.0, [(1.0, a), (-1.0, apply(relu, _sub(a, b)))])


def _not(indicator: Expr) -> Expr:
    return linear(1.0, [(-1.0, indicator)])


def _is_zero(a: Expr) -> Expr:
    """``1{a = 0} = 1 − step(a) − step(−a)``: an event of positive probability where ``a`` vanishes on a set of
    positive measure (``relu(g)``, a clip)."""
    return linear(1.0, [(-1.0, apply(step, a)), (-1.0, apply(step, linear(0.0, [(-1.0, a)])))])


def _where(condition: Expr, x: Expr, y: Expr) -> Expr:
    """``np.where(condition, x, y)`` for a condition that is 0 or 1 (:func:`_truth`)."""
    if x.total and y.total:
        return linear(0.0, [(1.0, y), (1.0, product([condition, _sub(x, y)]))])
    return linear(0.0, [(1.0, product([condition, x])), (1.0, product([_not(condition), y]))])


#: numpy's marker of an argument not given (``np.clip(x, a_max=1)`` passes ``a_min`` so).
_NOT_GIVEN = getattr(np, "_NoValue", None)


def _bound(value: Any) -> Expr | None:
    return None if value is None or value is _NOT_GIVEN else _lift(value)


def _clip_arguments(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Expr, Expr | None, Expr | None]:
    """``(x, lo, hi)`` of a call of ``np.clip``: positional, ``a_min``/``a_max`` or numpy 2.1's ``min``/``max``;
    None where a side is open."""
    x, *given = args
    if len(given) > 2:
        raise TraceError("np.clip is traced with at most two bounds")
    bounds = [*given, None, None][:2]
    rest = dict(kwargs)
    for i, names in enumerate((("a_min", "min"), ("a_max", "max"))):
        for name in names:
            if name in rest:
                bounds[i] = rest.pop(name)
    if rest:
        raise TraceError(f"np.clip is traced without {sorted(rest)}")
    return _lift(x), _bound(bounds[0]), _bound(bounds[1])


def _clip(x: Expr, lo: Expr | None, hi: Expr | None) -> Expr:
    """``np.clip(x, lo, hi) = min(max(x, lo), hi)`` (numpy's order: ``hi`` where ``lo > hi``), a side open where
    its bound is None; constant bounds ``lo ≤ hi`` as ``lo + relu(x − lo) − relu(x − hi)``."""
    if isinstance(lo, Const) and isinstance(hi, Const):
        if lo.value > hi.value:
            return hi
        return linear(lo.value, [(1.0, apply(relu, _sub(x, lo))), (-1.0, apply(relu, _sub(x, hi)))])
    out = x if lo is None else _maximum(x, lo)
    return out if hi is None else _minimum(out, hi)


def _conditions(condlist: Any) -> list[Expr]:
    if isinstance(condlist, Tracer | bool | np.bool_):
        return [_truth(condlist)]
    return [_truth(c) for c in condlist]


def _select(condlist: Any, choicelist: Any, default: Any = 0.0) -> Expr:
    """``np.select``: the first condition that holds chooses (nested wheres, the last one innermost)."""
    conditions = _conditions(condlist)
    if len(conditions) != len(choicelist):
        raise TraceError("np.select needs as many choices as conditions")
    out = _lift(default)
    for condition, choice in reversed(list(zip(conditions, choicelist, strict=True))):
        out = _where(condition, _lift(choice), out)
    return out


def _piecewise(x: Any, condlist: Any, funclist: Any, *args: Any, **kw: Any) -> Expr:
    """``np.piecewise``: each function (or constant) where its condition holds, a later condition over an earlier
    one, 0 where none holds (or the extra last function there). The functions are called on the whole argument
    (they are elementwise, as numpy's are called on its selected values)."""
    conditions = _conditions(condlist)
    if len(funclist) == len(conditions) + 1:
        none = constant(1.0)
        for condition in conditions:
            none = product([none, _not(condition)])
        conditions.append(none)
    if len(funclist) != len(conditions):
        raise TraceError("np.piecewise needs a function for each condition (and at most one more)")
    out: Expr = constant(0.0)
    for condition, f in zip(conditions, funclist, strict=True):
        out = _where(condition, _lift(f(x, *args, **kw) if callable(f) else f), out)
    return out


def _both(a: Expr, b: Expr) -> Expr:
    return product([a, b])


def _either(a: Expr, b: Expr) -> Expr:
    return linear(0.0, [(1.0, a), (1.0, b), (-1.0, product([a, b]))])


def _differ(a: Expr, b: Expr) -> Expr:
    return linear(0.0, [(1.0, a), (1.0, b), (-2.0, product([a, b]))])


_LOGICAL: dict[Any, Callable[[Expr, Expr], Expr]] = {
    np.logical_and: _both, np.bitwise_and: _both,
    np.logical_or: _either, np.bitwise_or: _either, np.logical_xor: _differ, np.bitwise_xor: _differ,
}


def _power(a: Expr, b: Expr) -> Expr:
    """``a ** k`` for a constant integer ``|k| ≤ 8``: a product (``1/(a·a)`` for ``k = −2``); ``c ** b`` for a
    constant ``c > 0``: ``exp(b ln c)``."""
    if isinstance(a, Const) and not isinstance(b, Const) and a.value > 0.0:
        return apply(exp, linear(0.0, [(float(np.log(a.value)), b)]))
    if isinstance(b, Const) and float(b.value).is_integer() and abs(b.value) <= 8:
        if b.value == 0:
            return constant(1.0)
        powered = product([a] * int(abs(b.value)))
        return powered if b.value > 0 else apply(from_ufunc(np.reciprocal), powered)
    raise TraceError("only constant integer powers up to 8 are traced (np.sqrt for a square root)")


def _divide(a: Expr, b: Expr) -> Expr:
    if isinstance(b, Const):
        if b.value == 0.0:
            raise TraceError("division by zero")
        return linear(0.0, [(1.0 / b.value, a)])
    return product([a, apply(from_ufunc(np.reciprocal), b)])


_BINARY: dict[Any, Callable[[Expr, Expr], Expr]] = {
    np.add: lambda a, b: linear(0.0, [(1.0, a), (1.0, b)]),
    np.subtract: _sub,
    np.multiply: lambda a, b: product([a, b]),
    np.true_divide: _divide,
    np.maximum: _maximum,
    np.minimum: _minimum,
    np.fmax: _maximum,
    np.fmin: _minimum,
    np.power: _power,
    np.float_power: _power,
    np.logaddexp: lambda a, b: linear(0.0, [(1.0, a), (1.0, apply(softplus, _sub(b, a)))]),  # log(eᵃ + eᵇ)
    np.greater: lambda a, b: apply(step, _sub(a, b)),
    np.greater_equal: lambda a, b: _not(apply(step, _sub(b, a))),
    np.less: lambda a, b: apply(step, _sub(b, a)),
    np.less_equal: lambda a, b: _not(apply(step, _sub(a, b))),
    np.equal: lambda a, b: _is_zero(_sub(a, b)),
    np.not_equal: lambda a, b: _not(_is_zero(_sub(a, b))),
    np.heaviside: lambda a, b: linear(0.0, [(1.0, apply(step, a)), (1.0, product([b, _is_zero(a)]))]),
}
_UNARY: dict[Any, Callable[[Expr], Expr]] = {
    np.negative: lambda a: linear(0.0, [(-1.0, a)]),
    np.positive: lambda a: a,
    np.absolute: lambda a: apply(abs_, a),
    np.fabs: lambda a: apply(abs_, a),
    np.square: lambda a: product([a, a]),
    # exact identities onto the registry's functions
    special.erfc: lambda a: linear(1.0, [(-1.0, apply(erf, a))]),
    special.log_expit: lambda a: linear(0.0, [(-1.0, apply(softplus, linear(0.0, [(-1.0, a)])))]),
    np.exp2: lambda a: apply(exp, linear(0.0, [(np.log(2.0), a)])),
    np.log2: lambda a: linear(0.0, [(1.0 / np.log(2.0), apply(from_ufunc(np.log), a))]),
    np.log10: lambda a: linear(0.0, [(1.0 / np.log(10.0), apply(from_ufunc(np.log), a))]),
}


_COMPARISONS = (np.greater, np.greater_equal, np.less, np.less_equal, np.equal, np.not_equal)
#: On truth values only (numpy refuses them on floats).
_BITWISE = (np.bitwise_and, np.bitwise_or, np.bitwise_xor, np.invert)
#: numpy's arithmetic when every operand holds truth values (None: numpy raises).
_ON_TRUTH_VALUES: dict[Any, Any] = {np.add: np.logical_or, np.multiply: np.logical_and, np.subtract: None,
                                    np.negative: None}


def _truth(x: Any) -> Expr:
    """The truth of ``x`` as 0 or 1: a comparison's own value; any other value is true where it is not 0
    (``np.where(g, 1, 0)`` is ``1{g ≠ 0}``, not ``g``)."""
    if isinstance(x, Tracer) and x.boolean:
        return x.expr
    if isinstance(x, bool | np.bool_):
        return constant(float(x))
    value = _lift(x)
    if isinstance(value, Const):
        return constant(float(value.value != 0.0))
    return _not(_is_zero(value))


class Tracer:
    """Stands for an array inside a traced function; operations build expression nodes. ``boolean``: the
    array holds truth values (a comparison's), whose expression is 0 or 1."""

    __array_priority__ = 1000

    def __init__(self, expr: Expr, boolean: bool = False) -> None:
        self.expr = expr
        self.boolean = boolean

    # numpy protocols
    def __array_ufunc__(self, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Tracer:
        if method != "__call__" or kwargs:
            raise TraceError(f"cannot trace {ufunc.__name__}.{method} with {sorted(kwargs)}")
        if ufunc in _BITWISE and any(isinstance(x, Tracer) and not x.boolean for x in inputs):
            raise TraceError(f"{ufunc.__name__} of values that are not truth values")
        if all(isinstance(x, Tracer) and x.boolean for x in inputs) and ufunc in _ON_TRUTH_VALUES:
            # numpy's arithmetic on boolean arrays: + is or, * is and; − and unary − refuse them
            ufunc = _ON_TRUTH_VALUES[ufunc]
            if ufunc is None:
                raise TraceError("the function subtracts or negates truth values (numpy refuses it)")
        if ufunc in _LOGICAL and len(inputs) == 2:
            return Tracer(_LOGICAL[ufunc](*(_truth(x) for x in inputs)), boolean=True)
        if ufunc in (np.logical_not, np.invert) and len(inputs) == 1:
            return Tracer(_not(_truth(inputs[0])), boolean=True)
        operands = [_lift(x) for x in inputs]
        if len(operands) == 2 and ufunc in _BINARY:
            return Tracer(_BINARY[ufunc](*operands), boolean=ufunc in _COMPARISONS)
        if len(operands) == 1:
            if ufunc in _UNARY:
                return Tracer(_UNARY[ufunc](operands[0]))
            act = from_ufunc(ufunc)
            if act is not None:
                return Tracer(apply(act, operands[0]))
        raise TraceError(f"cannot trace the ufunc {getattr(ufunc, '__name__', ufunc)}")

    def __array_function__(self, func: Any, types: Any, args: Any, kwargs: Any) -> Tracer:
        if func is np.where and len(args) == 3 and not kwargs:
            return Tracer(_where(_truth(args[0]), _lift(args[1]), _lift(args[2])))
        if func is np.clip:
            return Tracer(_clip(*_clip_arguments(args, kwargs)))
        if func is np.select:
            return Tracer(_select(*args, **kwargs))
        if func is np.piecewise:
            return Tracer(_piecewise(*args, **kwargs))
        raise TraceError(f"cannot trace {getattr(func, '__name__', func)}")

    def clip(self, min: Any = None, max: Any = None) -> Tracer:  # noqa: A002 - ndarray.clip's names
        return Tracer(_clip(self.expr, _bound(min), _bound(max)))

    def astype(self, dtype: Any, copy: bool = True) -> Tracer:
        kind = np.dtype(dtype).kind
        if kind == "b":
            return Tracer(_truth(self), boolean=True)
        if kind != "f" and not (kind in "iu" and self.boolean):  # truth values are exact integers
            raise TraceError(f"the function casts its values to {np.dtype(dtype)}")
        return Tracer(self.expr)

    def __array__(self, *args: Any, **kwargs: Any) -> Any:
        raise TraceError("the function converts its argument to a plain array")

    def __netsor_apply__(self, act: Any) -> Tracer:
        """``act(self)`` for a netsor activation (``netsor.activation("step")``, ``netsor.relu``, a
        parametrised leaky_relu) called inside the traced function: a node with the activation's own rules."""
        return Tracer(applied(act, self.expr))

    def __bool__(self) -> bool:
        raise TraceError("the function branches on values")

    def __len__(self) -> int:
        raise TraceError("the function asks for a length")

    def __getitem__(self, item: Any) -> Any:
        raise TraceError("the function indexes its argument")

    # Python operators
    def _bin(self, other: Any, ufunc: Any, reflected: bool = False) -> Tracer:
        return self.__array_ufunc__(ufunc, "__call__", *((other, self) if reflected else (self, other)))

    def __neg__(self) -> Tracer: return self.__array_ufunc__(np.negative, "__call__", self)  # noqa: E704
    def __pos__(self) -> Tracer: return self  # noqa: E704
    def __abs__(self) -> Tracer: return Tracer(apply(abs_, self.expr))  # noqa: E704
    def __invert__(self) -> Tracer: return self.__array_ufunc__(np.invert, "__call__", self)  # noqa: E704

    __hash__ = None  # type: ignore[assignment]


def _operator(ufunc: Any, reflected: bool = False) -> Callable[[Tracer, Any], Tracer]:
    def op(self: Tracer, other: Any) -> Tracer:
        return self._bin(other, ufunc, reflected)
    return op


# Python's operators as numpy's ufuncs (``&``, ``|``, ``^`` are numpy's bitwise ones: logical on truth values)
for _name, _ufunc in {"add": np.add, "sub": np.subtract, "mul": np.multiply, "truediv": np.true_divide,
                      "pow": np.power, "and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor}.items():
    setattr(Tracer, f"__{_name}__", _operator(_ufunc))
    setattr(Tracer, f"__r{_name}__", _operator(_ufunc, reflected=True))
for _name, _ufunc in {"gt": np.greater, "ge": np.greater_equal, "lt": np.less, "le": np.less_equal,
                      "eq": np.equal, "ne": np.not_equal}.items():  # (Python reflects comparisons itself)
    setattr(Tracer, f"__{_name}__", _operator(_ufunc))
del _name, _ufunc


def trace(fn: Callable[..., Any], operands: list[Expr]) -> Expr | None:
    """The expression ``fn(*operands)`` if ``fn`` can be traced, else None."""
    return trace_or_reason(fn, operands)[0]


def trace_or_reason(fn: Callable[..., Any], operands: list[Expr]) -> tuple[Expr | None, str]:
    """``(expression, "")`` if ``fn`` can be traced, else ``(None, why not)`` — for error messages that say
    what to change (``"the function converts its argument to a plain array"``: an ``np.asarray`` inside)."""
    try:
        with np.errstate(all="ignore"):
            out = fn(*(Tracer(e) for e in operands))
        return _lift(out), ""
    except TraceError as stop:
        return None, str(stop)
    except Exception as exc:  # noqa: BLE001 - user code raising on tracers: fall back to an opaque node
        return None, f"it raised {type(exc).__name__} on traced arguments ({exc})"


def applied(act: Activation, x: Expr) -> Expr:
    """``act(x)`` as an expression: the trace of a custom φ's callable (:attr:`Activation.source`) where it can
    be traced — its kinks, derivative and closed forms are then exact (``np.tanh`` is netsor's tanh; the
    derivative of an opaque φ is a finite difference whose rounding noise no kink locator can tell from
    kinks, so the NTK of ``mlp(2, np.tanh)`` was refused) — else the activation's own node."""
    if act.source is not None:
        traced = trace(act.source, [x])
        if traced is not None:
            return traced
    return apply(act, x)
