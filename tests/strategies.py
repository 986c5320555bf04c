"""A hypothesis strategy for random Netsor programs.

A program is drawn as a short recipe — a list of steps over a growing pool of vectors — and
built from it, so that hypothesis can shrink a failing program to a small one. Steps: input
layers (with and without bias), biases, MatMuls by a new or an already used matrix (weight
sharing), LinCombs of G-vectors, one-argument activations (kinked, discontinuous, smooth),
products of vectors, constant shifts, traced multi-argument functions (max, where, clip,
products of activations), NetsorK steps (LayerNorm of a G-vector, an RMS norm, a G-vector scaled by a moment,
attention over two G-vectors), rarely an opaque function the tracer cannot see through, and on
request an activation of a BatchNorm output across the pool's G-vectors (``batchnorm=True``), a
product of normal-CDF gates of two pool vectors (``gates=True``) or a G-vector times a function of a form
it enters (``factors=True``).
Readouts: one or two, of one or two vectors each, plain or concatenated (``readout_concat``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from hypothesis import strategies as st
from scipy import special

import netsor

ACTIVATIONS = ["relu", "tanh", "erf", "step", "abs", "sin", "gelu", "hard_tanh", "sigmoid", "leaky_relu",
               "softplus", "identity", "elu", "silu"]


def _opaque_max(u, v):
    return np.maximum(np.asarray(u), np.asarray(v))  # np.asarray of a tracer stops the trace


TRACED = {
    "max": lambda u, v: np.maximum(u, v),
    "where": lambda u, v: np.where(u > v, u, 0.5 * v),
    "clip": lambda u, v: np.clip(u + v, -1.0, 1.0),
    "relu*tanh": lambda u, v: np.maximum(u, 0.0) * np.tanh(v),
    "abs-diff": lambda u, v: np.abs(u - v) * 0.5,
    "gate*relu": lambda u, v: 0.5 * (1.0 + special.erf(u)) * np.maximum(v, 0.0),
}
#: Functions of two correlated G-vectors (``u`` and ``0.6u + 0.8v``, v data-free for a third of the draws, and a
#: bias inside u too for a sixth)
#: separable given one of them — products of one function of each, and a function of one shifted by a function
#: of the other — drawn only with ``recipes(separable=True)``: kinks off the origin and smooth functions, whose
#: nearly colinear pairs are conditioned (netsor.gaussian.separable).
SEPARABLE = {
    "hard_tanh*step": lambda u, v: netsor.hard_tanh(u) * netsor.step(v + 0.3),
    "relu-shift*relu": lambda u, v: netsor.relu(u - 0.5) * netsor.relu(v),
    "tanh*erf": lambda u, v: netsor.tanh(u) * netsor.erf(v + 0.2),
    "tanh(v+relu(u))": lambda u, v: netsor.tanh(v + netsor.relu(u)),
    "relu(v+step(u))": lambda u, v: netsor.relu(v - 0.2 + 0.5 * netsor.step(u + 0.3)),
    "relu(v+tanh(u))": lambda u, v: netsor.relu(v + netsor.tanh(u)),  # kinked on a curve
}
#: Traced functions drawn only with ``recipes(growth=True)`` (the draws of the others stay as they were):
#: exp and cosh, whose Gaussian expectations need mass far out (E φ² from z = 2σ), and the cusp √|u + v|
#: (exact on polynomial rules to no order: a bound from ``E φ²`` alone held 1/40 of the error).
CUSPS = {
    "exp": lambda u, v: np.exp(0.5 * (u + v)),
    "cosh": lambda u, v: np.cosh(u - v),
    "sqrt-abs": lambda u, v: np.sqrt(np.abs(u + v)),
}


#: A G-vector times a function of a form it enters, ``v · f(u + αv)`` (recipes(factors=True) only): pairs by
#: conditioning on the two forms (netsor.gaussian.conditioned), kinked, smooth, cusped and clipped f.
FACTORS = {
    "tanh": np.tanh,
    "erf": special.erf,
    "relu-shift": lambda w: np.maximum(w + 0.3, 0.0),
    "clip": lambda w: np.clip(w, -1.0, 1.0),
    "abs": np.abs,
    "sqrt-abs": lambda w: np.sqrt(np.abs(w)),
}


def gate(x):
    """The normal-CDF gate ``(1 + erf x)/2`` (GRU gates)."""
    return 0.5 * (1.0 + special.erf(x))


#: Products of normal-CDF gates of two vectors (recipes(gates=True) only): their pairs are cone moments of
#: up to 6 dependent gate forms, beyond the exact orthants (the Genz rule, or the deterministic rules where
#: the functions are smooth and of rank ≤ 2).
GATES = {
    "gate3": lambda u, v: gate(u) * gate(v) * gate(u - v),
    "gate2*u": lambda u, v: u * gate(v) * gate(0.5 * u + v),
}

#: Traced sums and products of netsor's own activations (traced as Apply nodes with their rules, not opaque:
#: netsor.ir.trace), drawn only with ``recipes(activation_sums=True)``: step-like sums whose levels the engine sums
#: exactly, piecewise-linear sums with a linear part, a kink plus a smooth function, differences of saturating
#: functions, and a parametrised activation.
ACTIVATION_SUMS = {
    "step-levels": lambda u, v: 2.0 * netsor.step(u) - netsor.step(-u) + 1.0,
    "odd-steps": lambda u, v: netsor.step(u - v) - netsor.step(v - u),
    "relu+linear": lambda u, v: netsor.relu(u) + 0.01 * u,
    "leaky": lambda u, v: netsor.activation("leaky_relu", alpha=0.2)(u) - 0.5 * v,
    "relu+tanh": lambda u, v: netsor.relu(u) + 0.1 * netsor.tanh(v),
    "hard_tanh-diff": lambda u, v: netsor.hard_tanh(u) - netsor.hard_tanh(v),
    "gelu*step": lambda u, v: netsor.gelu(u) * netsor.step(v),
    "abs-relu": lambda u, v: netsor.abs_(u) - netsor.relu(u),
}


@dataclass(frozen=True)
class Recipe:
    sigmas: tuple[tuple[float, float], ...]  # input layers (sigma, bias)
    steps: tuple[tuple, ...]
    readouts: tuple[tuple[tuple[int, ...], float, float, bool], ...]  # (vectors, sigma, bias, concatenated)


def step_strategy() -> st.SearchStrategy:
    idx = st.integers(min_value=0, max_value=1000)
    sig = st.sampled_from([0.5, 0.9, 1.0, 1.3])
    return st.one_of(
        st.tuples(st.just("matmul"), idx, st.integers(0, 3), sig),
        st.tuples(st.just("lincomb"), idx, idx, st.sampled_from([-0.7, 0.5, 1.0])),
        st.tuples(st.just("act"), idx, st.sampled_from(ACTIVATIONS)),
        st.tuples(st.just("mul"), idx, idx),
        st.tuples(st.just("shift"), idx, st.sampled_from([-0.5, 0.3, 1.0])),
        st.tuples(st.just("traced"), idx, idx, st.sampled_from(sorted(TRACED))),
        st.tuples(st.just("bias"), st.sampled_from([0.2, 0.5])),
        st.tuples(st.just("layernorm"), idx),
        st.tuples(st.just("rmsnorm"), idx, st.sampled_from([1.0, 2.0])),
        st.tuples(st.just("moment-scale"), idx, idx),
        st.tuples(st.just("attention"), idx, idx, st.sampled_from([0.5, 1.0])),
    )


@st.composite
def recipes(draw, max_steps: int = 5, opaque: bool = False, batchnorm: bool = False, gates: bool = False,
            growth: bool = False, factors: bool = False, separable: bool = False,
            activation_sums: bool = False) -> Recipe:
    n_inputs = draw(st.integers(1, 2))
    sigmas = tuple(draw(st.tuples(st.sampled_from([0.8, 1.0, 1.2]), st.sampled_from([0.0, 0.3])))
                   for _ in range(n_inputs))
    steps = list(draw(st.lists(step_strategy(), min_size=1, max_size=max_steps)))
    if growth:  # a function growing exponentially or with a cusp, at a drawn place
        at = draw(st.integers(0, len(steps)))
        steps.insert(at, ("growth", draw(st.integers(0, 1000)), draw(st.integers(0, 1000)),
                          draw(st.sampled_from(sorted(CUSPS)))))
    if separable:  # f(g)·h(g') of two pool G-vectors, at a drawn place
        at = draw(st.integers(0, len(steps)))
        steps.insert(at, ("separable", draw(st.integers(0, 1000)), draw(st.integers(0, 1000)),
                          draw(st.sampled_from(sorted(SEPARABLE)))))
    if factors:  # a G-vector times a function of a form it enters, at a drawn place
        at = draw(st.integers(0, len(steps)))
        steps.insert(at, ("factor", draw(st.integers(0, 1000)), draw(st.integers(0, 1000)),
                          draw(st.sampled_from(sorted(FACTORS))), draw(st.sampled_from([-1.0, 0.5, 1.5]))))
    if gates:  # a product of gates of two pool vectors, inserted at a drawn place
        at = draw(st.integers(0, len(steps)))
        steps.insert(at, ("gates", draw(st.integers(0, 1000)), draw(st.integers(0, 1000)),
                          draw(st.sampled_from(sorted(GATES)))))
    if activation_sums:  # a traced sum or product of netsor activations of two pool vectors, at a drawn place
        at = draw(st.integers(0, len(steps)))
        steps.insert(at, ("activation-sum", draw(st.integers(0, 1000)), draw(st.integers(0, 1000)),
                          draw(st.sampled_from(sorted(ACTIVATION_SUMS)))))
    if opaque and draw(st.booleans()):
        steps.append(("opaque", draw(st.integers(0, 1000)), draw(st.integers(0, 1000))))
    if batchnorm:  # BatchNorm across the distinct G-vectors of the pool, then an activation
        steps.append(("batchnorm", draw(st.integers(0, 1000)), draw(st.sampled_from(ACTIVATIONS))))
    readouts = tuple(draw(st.tuples(st.lists(st.integers(0, 1000), min_size=1, max_size=2).map(tuple),
                                    st.sampled_from([1.0, 0.7]), st.sampled_from([0.0, 0.2]), st.booleans()))
                     for _ in range(draw(st.integers(1, 2))))
    return Recipe(sigmas, tuple(steps), readouts)


def build(recipe: Recipe) -> netsor.Program:
    """The program of a recipe (vector indices are taken modulo the pool size)."""
    p = netsor.Program("fuzz")
    n = p.dim("n")
    pool = [p.input(n, sigma=s, bias=b) for s, b in recipe.sigmas]
    matrices: list[netsor.Matrix] = []
    factors: list[netsor.Vector] = []

    def pick(i: int, kind: str | None = None) -> netsor.Vector:
        cands = [v for v in pool if kind is None or v.kind == kind]
        return cands[i % len(cands)]

    for step in recipe.steps:
        op = step[0]
        if op == "matmul":
            _, i, which, sigma = step
            if which < len(matrices):
                W = matrices[which]  # weight sharing
            else:
                W = p.matrix(n, n, sigma=sigma)
                matrices.append(W)
            pool.append(W @ pick(i))
        elif op == "lincomb":
            _, i, j, c = step
            pool.append(pick(i, "G") + c * pick(j, "G"))
        elif op == "act":
            _, i, name = step
            pool.append(netsor.activation(name)(pick(i)))
        elif op == "mul":
            _, i, j = step
            pool.append(pick(i) * pick(j))
        elif op == "shift":
            _, i, c = step
            pool.append(pick(i) + c)
        elif op == "traced":
            _, i, j, name = step
            pool.append(netsor.nonlin(TRACED[name], pick(i), pick(j), name=name))
        elif op == "activation-sum":
            _, i, j, name = step
            pool.append(netsor.nonlin(ACTIVATION_SUMS[name], pick(i), pick(j), name=name))
            factors.append(pool[-1])  # read out (below)
        elif op == "growth":  # of G-vectors: exp of a product g·g' or exp(exp g) would have no finite limit
            _, i, j, name = step
            pool.append(netsor.nonlin(CUSPS[name], pick(i, "G"), pick(j, "G"), name=name))
        elif op == "separable":
            _, i, j, name = step
            u = pick(i, "G")  # and a G-vector correlated with it (independent ones factorise exactly); for every
            # third j the other part is data-free, one variable at every input (p.gaussian: a bias-like source
            # inside an argument that reads the data), and for every sixth one a bias in both (relu(g − ½)·relu(0.6g
            # + 0.8b), g = u + b: functions of two forms of the arguments, conditioned on a form)
            if j % 6 == 1:
                other = p.bias(n, 0.5)
                u = u + other
            else:
                other = p.gaussian(n) if j % 3 == 0 else pick(j, "G")
            pool.append(SEPARABLE[name](u, 0.6 * u + 0.8 * other))
            factors.append(pool[-1])  # read out (below)
        elif op == "factor":  # of two distinct G-vectors where the pool has them; read out as well (below)
            _, i, j, name, alpha = step
            f = FACTORS[name]
            gs = list(dict.fromkeys(v for v in pool if v.kind == "G"))
            u, v = gs[i % len(gs)], gs[(i + 1 + j % max(len(gs) - 1, 1)) % len(gs)]
            pool.append(netsor.nonlin(lambda u, v, f=f, alpha=alpha: v * f(u + alpha * v), u, v,
                                      name=f"v*{name}(u+{alpha}v)"))
            factors.append(pool[-1])
        elif op == "gates":
            _, i, j, name = step
            pool.append(netsor.nonlin(GATES[name], pick(i), pick(j), name=name))
        elif op == "opaque":
            _, i, j = step
            pool.append(netsor.nonlin(_opaque_max, pick(i), pick(j), name="opaque_max"))
        elif op == "bias":
            pool.append(p.bias(n, step[1]))
        elif op == "layernorm":
            pool.append(netsor.layernorm(pick(step[1], "G")))
        elif op == "rmsnorm":  # λ g / √(gᵀg/n): a normalised G-vector (exact variance λ²) not written by layernorm
            _, i, gain = step
            g = pick(i, "G")
            pool.append((gain * g) * netsor.inner(g, g) ** -0.5)
        elif op == "moment-scale":  # θ = (1/n) Σ tanh(x_α)², a per-input coefficient of a G-vector
            _, i, j = step
            pool.append(netsor.moment(lambda x: np.tanh(x) ** 2, pick(i, "G")) * pick(j, "G"))
        elif op == "attention":
            _, i, j, temperature = step
            tokens = list(dict.fromkeys([pick(i, "G"), pick(j, "G")]))
            pool.extend(netsor.attention(tokens, tokens, tokens, temperature=temperature))
        elif op == "batchnorm":  # skipped with fewer than two distinct G-vectors
            _, i, name = step
            batch = list(dict.fromkeys(v for v in pool if v.kind == "G"))[:4]
            if len(batch) >= 2:
                pool.append(netsor.activation(name)(netsor.batchnorm(batch)[i % len(batch)]))
    for vecs, sigma, bias, concatenated in recipe.readouts:
        chosen = tuple(dict.fromkeys(pick(i) for i in vecs))
        if concatenated:
            p.readout_concat(*chosen, sigma=sigma, bias=bias)
        else:
            p.readout(*chosen, sigma=sigma, bias=bias)
    if factors:  # with the pool's first vector, by one readout: their cross moments too
        p.readout(*dict.fromkeys([factors[-1], pool[0]]))
    return p


def inputs(B: int, d: int, seed: int, duplicate: bool = False, near: float = 0.0) -> np.ndarray:
    """``B`` random inputs; ``duplicate``: the last a copy of the first; ``near``: the second is ``±`` the first
    (the sign of ``near``) plus noise of scale ``|near|`` (nearly colinear)."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((B, d))
    if duplicate and B > 2:
        X[-1] = X[0]
    if near:
        X[1] = np.sign(near) * X[0] + abs(near) * rng.standard_normal(d)
    return X


# ---- Netsor⊤: random programs with transposes ---------------------------------------------------------
TRANSPOSE_ACTIVATIONS = ["tanh", "relu", "erf", "sin", "identity"]


@dataclass(frozen=True)
class TransposeRecipe:
    """Two dims ``n`` and ``m`` (``m = ratio · n``), ``W1 : n × m`` and ``W2 : n × n``; a chain of
    operations on a current vector (started by a Gaussian vector in ``n``, or an input layer with
    data), each MatMul by a use of ``W1``, ``W1ᵀ``, ``W2`` or ``W2ᵀ`` that fits its dim — so uses of
    one matrix both ways follow each other and ``Ż`` is common — and NetsorK steps (a vector scaled
    by a moment, LayerNorm of a G-vector) among them."""

    ratio: float
    sigmas: tuple[float, float]
    data: bool
    steps: tuple[tuple, ...]


@st.composite
def transpose_recipes(draw, max_steps: int = 6) -> TransposeRecipe:
    idx = st.integers(min_value=0, max_value=1000)
    matmul = st.tuples(st.just("matmul"), idx)
    back = st.tuples(st.just("back"),)
    step = st.one_of(
        matmul, matmul, back, back,  # chains of MatMuls both ways are what makes Ż
        st.tuples(st.just("act"), st.sampled_from(TRANSPOSE_ACTIVATIONS)),
        st.tuples(st.just("lincomb"), idx, st.sampled_from([-0.7, 0.5, 1.0])),
        st.tuples(st.just("gate"), idx),
        st.tuples(st.just("moment-scale"), idx),
        st.tuples(st.just("layernorm"),),
        st.tuples(st.just("readout"),),
    )
    return TransposeRecipe(draw(st.sampled_from([0.5, 1.0, 1.5])),
                           (draw(st.sampled_from([0.8, 1.1])), draw(st.sampled_from([0.9, 1.3]))),
                           draw(st.booleans()), tuple(draw(st.lists(step, min_size=1, max_size=max_steps))))


def build_transposed(recipe: TransposeRecipe) -> netsor.Program:
    """The program of a transpose recipe: the chain's vectors are read out where it says, and at its end."""
    p = netsor.Program("fuzz-transposed")
    n, m = p.dim("n"), p.dim("m", ratio=recipe.ratio)
    W1 = p.matrix(n, m, sigma=recipe.sigmas[0])
    W2 = p.matrix(n, n, sigma=recipe.sigmas[1])
    # the uses that start in each dim: (matrix, transposed)
    uses = {n: [(W1, True), (W2, False), (W2, True)], m: [(W1, False)]}
    current = p.input(n, sigma=1.0) if recipe.data else p.gaussian(n)
    seen = {n: [current], m: [p.gaussian(m, sigma=0.8)]}
    last = None  # the last MatMul use: "back" applies its other orientation (current is in its out-dim)
    for op, *rest in recipe.steps:
        dim = current.dim
        if op == "matmul" or (op == "back" and last is None):
            W, transposed = last = uses[dim][rest[0] % len(uses[dim])] if rest else uses[dim][0]
            current = W.T @ current if transposed else W @ current
        elif op == "back":
            W, transposed = last = (last[0], not last[1])
            current = W.T @ current if transposed else W @ current
        elif op == "act":
            current = netsor.activation(rest[0])(current)
        elif op == "lincomb":
            gs = [v for v in seen[dim] if v.kind == "G"]
            if current.kind == "G" and gs:
                current = current + rest[1] * gs[rest[0] % len(gs)]
        elif op == "gate":  # a bounded factor: products of raw vectors make heavy-tailed polynomials
            current = current * netsor.tanh(seen[dim][rest[0] % len(seen[dim])])
        elif op == "moment-scale":  # NetsorK: θ = (1/n) Σ tanh(x_α)² scales the current vector
            current = netsor.moment(lambda x: np.tanh(x) ** 2, seen[dim][rest[0] % len(seen[dim])]) * current
        elif op == "layernorm":
            if current.kind == "G":
                current = netsor.layernorm(current)
        else:
            p.readout(current, sigma=1.0)
        seen[current.dim].append(current)
    p.readout(current, sigma=1.0)
    return p


# ---- activations written with numpy: random expression trees of one argument -------------------------
#: A constant of the trees, to two decimals (ties between constants, e.g. a kink at a clip's level, are common).
_CONSTANTS = st.integers(-100, 100).map(lambda k: k / 100)


def activation_trees(max_leaves: int = 6, piecewise_linear: bool = False) -> st.SearchStrategy:
    """Expression trees of one argument ``x`` as nested tuples (``evaluate`` applies one to an array): sums,
    products by a leaf, max with a constant, tanh, erf, sin, softplus (``np.logaddexp``), ``e^(−t²)``, a
    ``where`` on ``x`` against a constant (also with a branch, log, √ or 1/·, that is not finite where it is not
    selected), clip, ``|t − c|`` and affine maps — the activations users write as
    lambdas, kinked at levels of other functions, saturating, periodic. ``piecewise_linear``: sums, max, clip,
    ``|t − c|`` and affine maps only (continuous, piecewise linear, kinks anywhere: relu6, hard_tanh and kin)."""
    leaf = st.one_of(st.just(("x",)), st.tuples(st.just("c"), _CONSTANTS))

    def extend(tree: st.SearchStrategy) -> st.SearchStrategy:
        if piecewise_linear:
            return st.one_of(
                st.tuples(st.just("add"), tree, tree),
                st.tuples(st.just("max"), tree, _CONSTANTS),
                st.tuples(st.just("clip"), tree, _CONSTANTS, _CONSTANTS),
                st.tuples(st.just("abs"), tree, _CONSTANTS),
                st.tuples(st.just("scale"), tree, _CONSTANTS),
            )
        return st.one_of(
            st.tuples(st.just("add"), tree, tree),
            st.tuples(st.just("mul"), tree, leaf),
            st.tuples(st.just("max"), tree, _CONSTANTS),
            st.tuples(st.sampled_from(["tanh", "erf", "sin", "softplus", "gauss"]), tree),
            st.tuples(st.just("where"), tree, _CONSTANTS, tree),
            st.tuples(st.just("guard"), tree, _CONSTANTS, st.sampled_from(["log", "sqrt", "reciprocal"])),
            st.tuples(st.just("clip"), tree, _CONSTANTS, _CONSTANTS),
            st.tuples(st.just("abs"), tree, _CONSTANTS),
            st.tuples(st.just("scale"), tree, _CONSTANTS),
        )

    return st.recursive(st.just(("x",)), extend, max_leaves=max_leaves)


def evaluate(tree: tuple, x):
    """The value of an activation tree at ``x`` (an array, or a tracer: only numpy functions are used)."""
    op, *args = tree
    if op == "x":
        return x
    if op == "c":
        return args[0] + 0 * x
    value = evaluate(args[0], x)
    if op == "add":
        return value + evaluate(args[1], x)
    if op == "mul":
        return value * evaluate(args[1], x)
    if op == "max":
        return np.maximum(value, args[1])
    if op == "where":
        return np.where(x > args[1], value, evaluate(args[2], x))
    if op == "guard":  # a function not finite where it is not selected (x ≤ c − 1 or c − ½), smooth where it is
        partial = {"log": np.log, "sqrt": lambda t: np.sqrt(t - 0.5), "reciprocal": np.reciprocal}[args[2]]
        with np.errstate(all="ignore"):
            return np.where(x > args[1], partial(x - args[1] + 1.0), value)
    if op == "clip":  # the interval's ends in order, at least 1 apart
        return np.clip(value, min(args[1], 0.0) - 0.5, max(args[2], 0.0) + 0.5)
    if op == "abs":
        return np.abs(value - args[1])
    if op == "scale":
        return (1.0 + args[1]) * value + args[1]
    unary = {"tanh": np.tanh, "erf": special.erf, "sin": np.sin, "softplus": lambda t: np.logaddexp(0.0, t),
             "gauss": lambda t: np.exp(-t * t)}
    return unary[op](value)
