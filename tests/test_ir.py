"""The IR: expression trees and tracing, program transforms, rule tables, the analysis cache."""

from __future__ import annotations

import gc
import itertools
import weakref
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import given, settings
from scipy import special
from strategies import activation_trees, evaluate

import netsor
from netsor.errors import ProgramError, UnsupportedError
from netsor.interpret.infinite import analysis_of
from netsor.interpret.rules import RULES, rule_for
from netsor.ir import LinCombLine, Line, NonLinLine, Vector
from netsor.ir.expr import Apply, Opaque, Prod, expand
from netsor.ir.transforms import clone, prune, substitute

X = np.random.default_rng(0).standard_normal((4, 3))


def two_inputs():
    p = netsor.Program()
    n = p.dim("n")
    return p, n, p.input(n), p.input(n, sigma=0.7, bias=0.2)


# ------------------------------------------------------------------ tracing
@pytest.mark.parametrize("fn", [
    lambda u, v: np.maximum(u, v),
    lambda u, v: np.minimum(u, 2.0 * v) + 1.0,
    lambda u, v: np.where(u > v, u, 0.5 * v),
    lambda u, v: np.clip(u + v, -1.0, 1.0),
    lambda u, v: np.abs(u - v) * np.tanh(v) ** 2,
    lambda u, v: (u >= 0.3) * np.exp(-v * v / 2),
    # netsor's own activations inside the function (they were opaque: the tracer could not call them)
    lambda u, v: netsor.relu(u) * netsor.step(v) + 0.01 * u,
    lambda u, v: 2.0 * netsor.step(u - v) - netsor.activation("leaky_relu", alpha=0.1)(-v),
])
def test_traced_functions_evaluate_like_numpy_and_keep_their_kinks_known(fn):
    p, n, a, b = two_inputs()
    h = netsor.nonlin(fn, a, b)
    expr = p.line_of(h).expr
    assert not isinstance(expr, Opaque) and not expr.hidden_kinks
    u, v = np.linspace(-2, 2, 11), np.linspace(1.5, -1.5, 11)
    np.testing.assert_allclose(expr.evaluate({a: u, b: v}), fn(u, v), rtol=1e-15, atol=1e-15)


def test_max_is_rewritten_through_relu_of_a_difference():
    p, n, a, b = two_inputs()
    expr = p.line_of(netsor.nonlin(np.maximum, a, b)).expr
    atoms = [m.atoms for _, m in expand(expr).terms]
    relu = [x for at in atoms for x in at if isinstance(x, Apply) and x.act is netsor.relu]
    assert relu and relu[0].child.affine() is not None  # relu(a − b): a function of one linear form


@pytest.mark.parametrize("fn, plane", [
    (lambda u, v: np.tanh(u) > 0, (1.0, 0.0)),                  # step(tanh a) = step(a)
    (lambda u, v: -2.0 * special.erf(u - v) > 0, (-1.0, 1.0)),  # step(−2 erf(a − b)) = step(b − a)
    (lambda u, v: np.maximum(u - 0.5, 0.0) > 0, (1.0, 0.0)),    # step(relu(a − ½)) = step(a − ½)
    (lambda u, v: np.tanh(np.arctan(u)) > 0, (1.0, 0.0)),       # through two sign-preserving functions
])
def test_the_step_of_a_function_with_the_sign_of_its_argument_jumps_on_a_plane(fn, plane):
    """``step(c·φ(e))`` for φ positive exactly above x₀ (and, for c < 0, negative exactly below) is the
    step of an affine form, so its jump lies on a known plane — not a hidden kink inside a composite;
    values are unchanged. ``step(−relu(a))`` is not rewritten: it is 0 everywhere, not ``step(−a)``."""
    p, n, a, b = two_inputs()
    expr = p.line_of(netsor.nonlin(fn, a, b)).expr
    assert isinstance(expr, Apply) and expr.act.key == netsor.step.key
    coefs = dict(expr.child.affine()[0])
    assert (coefs.get(a, 0.0), coefs.get(b, 0.0)) == plane and not expr.hidden_kinks
    u, v = np.linspace(-2, 2, 11) + 0.05, np.linspace(1.5, -1.5, 11)
    np.testing.assert_array_equal(expr.evaluate({a: u, b: v}), np.asarray(fn(u, v), dtype=float))
    kept = p.line_of(netsor.nonlin(lambda u, v: -np.maximum(u, 0.0) > 0, a, b)).expr
    assert kept.child.affine() is None and np.all(kept.evaluate({a: u, b: v}) == 0.0)


def test_a_jump_of_an_argument_cancelling_to_rounding_takes_the_value_on_the_jump():
    """``step(a + relu(b − a) − b)`` is ``step(relu(a − b))``: 0 wherever b > a in exact arithmetic, where its
    argument as evaluated is ±1 ulp — numpy's own evaluation flickers there, the expression's does not; where
    a > b it is 1. A step of one vector (nothing to cancel) is numpy's."""
    p, n, a, b = two_inputs()
    rng = np.random.default_rng(3)
    u, v = rng.standard_normal(20000), rng.standard_normal(20000)

    def fn(x, y):
        return (x + np.maximum(y - x, 0.0) - y) > 0

    expr = p.line_of(netsor.nonlin(fn, a, b)).expr
    assert np.any(fn(u, v)[v > u])  # the flicker this guards against
    np.testing.assert_array_equal(expr.evaluate({a: u, b: v}), (u > v).astype(float))
    plain = p.line_of(netsor.step(a)).expr
    np.testing.assert_array_equal(plain.evaluate({a: u}), (u > 0).astype(float))


@pytest.mark.parametrize("fn, never_zero", [
    (lambda u, v: 0.5 * special.erf(u) + 0.5, True),      # a gate: (0, 1)
    (lambda u, v: np.tanh(u) + 1.0, True),                # tanh > −1 strictly
    (lambda u, v: np.exp(u) - np.exp(v) + 3.0, False),    # unbounded below
    (lambda u, v: np.maximum(u, 0.0) + 1e-3, True),       # relu ≥ 0: ≥ 1e-3
    (lambda u, v: np.maximum(u, 0.0) * 1.0 + 0.0, False),  # relu reaches 0
    (lambda u, v: np.sin(u) + 1.0, False),                # sin reaches −1
    (lambda u, v: 2.0 - special.expit(u) - special.expit(v), True),  # > 0
])
def test_expressions_bounded_away_from_zero_have_no_zero_planes(fn, never_zero):
    """A sum of activations with known images is bounded (interval arithmetic), and one that is never
    0 has an empty zero set: ``relu(gate·b)`` then kinks on ``b = 0`` only (it was a hidden kink, left
    to QMC: a random NTK program took 156 s at rtol 1e-3, found by a campaign). Bounds hold on samples."""
    p, n, a, b = two_inputs()
    expr = p.line_of(netsor.nonlin(fn, a, b)).expr
    lo, hi, lo_hit, hi_hit = expr.image()
    u, v = np.random.default_rng(0).standard_normal((2, 10_000)) * 3.0
    values = expr.evaluate({a: u, b: v})
    assert np.all(values >= lo) and np.all(values <= hi)
    assert (expr.zero_planes() == ()) == never_zero
    gated = p.line_of(netsor.nonlin(lambda u, v, fn=fn: np.maximum(fn(u, v) * v, 0.0), a, b)).expr
    assert not gated.hidden_kinks if never_zero else True
    if never_zero:
        assert {b: 1.0} in [dict(terms) for terms, _ in gated.kink_planes()]


def test_integer_powers_are_traced_and_others_are_named():
    """``u ** −2`` is ``1/(u·u)`` (the same values as numpy); a non-integer power stays untraced, saying why."""
    p, n, a, b = two_inputs()
    expr = p.line_of(netsor.nonlin(lambda u, v: u ** -2 * v + u ** 3, a, b)).expr
    assert not isinstance(expr, Opaque)
    u, v = np.random.default_rng(3).standard_normal((2, 50))
    np.testing.assert_allclose(expr.evaluate({a: u, b: v}), u ** -2.0 * v + u ** 3, rtol=1e-14)
    untraced = p.line_of(netsor.nonlin(lambda u, v: np.abs(u) ** 1.5 * v, a, b)).expr
    assert isinstance(untraced, Opaque) and "integer powers" in untraced.untraced


@pytest.mark.parametrize("fn, image", [
    (lambda u, v: u * u, (0.0, np.inf, True, False)),
    (lambda u, v: 1.0 + v * v, (1.0, np.inf, True, False)),
    (lambda u, v: np.tanh(u) * np.tanh(u), (0.0, 1.0, True, False)),
    (lambda u, v: (0.5 * special.erf(u) + 0.5) * (0.5 * special.erf(v) + 0.5), (0.0, 1.0, False, False)),
    (lambda u, v: np.maximum(u, 0.0) * np.exp(v), (0.0, np.inf, True, False)),  # 0 where relu is
    (lambda u, v: np.tanh(u) * np.maximum(v, 0.0), (-np.inf, np.inf, False, False)),
    (lambda u, v: np.sign(u) * np.sign(v), (-1.0, 1.0, True, True)),
    (lambda u, v: (np.tanh(u) - 2.0) * np.exp(v), (-np.inf, 0.0, False, False)),
])
def test_products_are_bounded_by_their_factors_images(fn, image):
    """A product's image is the corners' of its factors' (a repeated factor a square): ``1 + b²`` is never 0,
    a product of gates never 0 nor 1; bounds hold on samples, an endpoint said unreached is not hit."""
    p, n, a, b = two_inputs()
    expr = p.line_of(netsor.nonlin(fn, a, b)).expr
    assert expr.image() == image
    u, v = np.random.default_rng(0).standard_normal((2, 10_000)) * 3.0
    values = expr.evaluate({a: u, b: v})
    lo, hi, lo_hit, hi_hit = image
    assert np.all(values >= lo) and np.all(values <= hi)


@settings(max_examples=200, deadline=None, derandomize=True, database=None)
@given(tree=activation_trees(max_leaves=8))
def test_random_expressions_take_values_within_their_image(tree):
    """Interval arithmetic over sums, products (squares among them), maxima, clips and activations bounds
    every value an expression takes (on normal samples and at its constants' levels)."""
    p, n, a, b = two_inputs()
    expr = p.line_of(netsor.nonlin(lambda u: evaluate(tree, u), a)).expr
    lo, hi, _, _ = expr.image()
    u = np.concatenate([np.random.default_rng(1).standard_normal(4000) * 4.0, np.linspace(-3.0, 3.0, 121)])
    values = np.asarray(evaluate(tree, u), dtype=float) + 0.0 * u
    assert np.all(values >= lo) and np.all(values <= hi), (tree, (lo, hi), values.min(), values.max())


@pytest.mark.parametrize("fn, planes", [
    (lambda u, v: np.log1p(np.exp(u)) * np.tanh(v), ()),  # log1p's singularity at −1: exp(u) > 0
    (lambda u, v: np.sqrt(1.0 + u * u) * v, ()),           # sqrt's at 0: 1 + u² ≥ 1
    (lambda u, v: np.tanh(u) / (1.0 + v * v), ()),         # 1/x's at 0
    (lambda u, v: np.log(np.cosh(u) + v * v), ()),         # log's at 0: cosh ≥ 1
    (lambda u, v: np.sqrt(u * u) * v, ({"a": 1.0},)),      # 0 is reached: |u|, kinked on u = 0
    (lambda u, v: np.log1p(u) * v, ({"a": 1.0},)),         # u = −1 is reached (an affine argument: a plane)
    (lambda u, v: np.log1p(-np.exp(u)) * v, None),         # −exp(u) reaches −1 at u = 0: a hidden kink
])
def test_singular_points_outside_the_arguments_image_are_never_met(fn, planes):
    """A kink (a singular point) of φ outside the image of its argument is never met: φ of it is smooth
    there (its products with functions of another vector take exact rules instead of QMC); one the argument
    reaches stays a kink plane, or a hidden kink off a plane."""
    p, n, a, b = two_inputs()
    expr = p.line_of(netsor.nonlin(fn, a, b)).expr
    if planes is None:
        assert expr.hidden_kinks and not expr.smooth
        return
    assert not expr.hidden_kinks
    assert [{"a": 1.0} if dict(t) == {a: 1.0} else dict(t) for t, _ in expr.kink_planes()] == list(planes)
    assert expr.smooth == (planes == ())
    assert expr.continuous or planes != ()


@pytest.mark.parametrize("fn, outside", [
    (lambda u, v: np.maximum((0.5 * special.erf(u) + 0.5) * v, 0.0), "relu"),   # gate·relu(b)
    (lambda u, v: np.abs(np.maximum(u, 0.0) * v), "abs"),                        # relu(a)·|b| (s ≥ 0 suffices)
    (lambda u, v: (np.exp(u) * v) > 0, "step"),                                  # step(b) (s > 0 needed)
])
def test_nonnegative_factors_leave_positively_homogeneous_functions(fn, outside):
    """φ(s·x) = s·φ(x) for s ≥ 0 (degree 1) and φ(x) for s > 0 (degree 0): the factor whose image says
    so leaves the argument, which becomes an affine form with a known kink; values are unchanged.
    ``step(relu(a)·b)`` keeps its form (relu(a) = 0 would make it 0, not step(b))."""
    p, n, a, b = two_inputs()
    expr = p.line_of(netsor.nonlin(fn, a, b)).expr
    applied = [f for f in (expr.factors if isinstance(expr, Prod) else (expr,)) if isinstance(f, Apply)
               and f.act.name == outside]
    assert applied and applied[0].child.affine() == (((b, 1.0),), 0.0) and not expr.hidden_kinks
    u, v = np.random.default_rng(1).standard_normal((2, 1000))
    np.testing.assert_array_equal(expr.evaluate({a: u, b: v}), np.asarray(fn(u, v), dtype=float))
    kept = p.line_of(netsor.nonlin(lambda u, v: np.maximum(u, 0.0) * v > 0, a, b)).expr
    assert isinstance(kept, Apply) and kept.act.name == "step" and isinstance(kept.child, Prod)


def test_logaddexp_is_traced_as_a_shifted_softplus():
    """``np.logaddexp(a, b) = a + softplus(b − a)`` (exact): traced, so ``lambda x: np.logaddexp(0, x)`` is
    netsor's softplus (closed-form derivative for the NTK) and a two-vector one a NonLin of known parts.
    Values equal numpy's to rounding, far out on both sides included."""
    p, n, a, b = two_inputs()
    expr = p.line_of(netsor.nonlin(np.logaddexp, a, b)).expr

    def nodes(e):
        yield e
        for child in e.children():
            yield from nodes(child)

    assert not any(isinstance(node, Opaque) for node in nodes(expr))
    u, v = np.random.default_rng(2).standard_normal((2, 1000)) * [[1.0], [40.0]]
    np.testing.assert_allclose(expr.evaluate({a: u, b: v}), np.logaddexp(u, v), rtol=1e-14, atol=1e-14)
    one = p.line_of(netsor.nonlin(lambda x: np.logaddexp(0.0, x), a)).expr
    assert isinstance(one, Apply) and one.act.name == "softplus"


@pytest.mark.parametrize("fn", [special.erfc, special.log_expit, np.exp2, np.log2, np.log10, np.fabs])
def test_ufuncs_with_exact_identities_onto_the_registry_are_traced(fn):
    """``erfc = 1 − erf``, ``log_expit(x) = −softplus(−x)``, ``exp2(x) = exp(x ln 2)``, ``log2``/``log10`` = log
    over a constant, ``fabs`` = abs: traced (no opaque node, so exact derivatives and closed forms), values equal to
    numpy's to rounding — where defined (the logarithms on positive values)."""
    p, n, a, b = two_inputs()
    expr = p.line_of(netsor.nonlin(fn, a)).expr
    assert not isinstance(expr, Opaque) and not expr.hidden_kinks
    x = np.random.default_rng(3).standard_normal(500) * 4.0
    if fn in (np.log2, np.log10):
        x = np.abs(x) + 1e-3
    np.testing.assert_allclose(expr.evaluate({a: x}), fn(x), rtol=1e-14, atol=1e-15)


def test_activation_of_a_known_ufunc_is_the_registered_activation():
    """``netsor.activation(np.tanh)`` is netsor's tanh (closed forms, exact derivative) — also where no program
    traces it (``matrixlaws.jacobian_spectrum(np.tanh, ...)``) — not an opaque callable."""
    for fn, name in ((np.tanh, "tanh"), (special.erf, "erf"), (np.sin, "sin"), (special.expit, "sigmoid")):
        act = netsor.activation(fn)
        assert act.registered and act is netsor.activation(name)


def branching(u, v):
    return u if float(np.mean(u)) > 0 else v  # Python control flow on values


@pytest.mark.parametrize("fn", [branching, lambda u, v: np.asarray(u) * v, lambda u, v: np.sort(u) + v])
def test_untraceable_functions_stay_opaque(fn):
    p, n, a, b = two_inputs()
    try:
        h = netsor.nonlin(fn, a, b)
    except ProgramError:  # fine as well: not elementwise
        return
    assert isinstance(p.line_of(h).expr, Opaque)


@pytest.mark.parametrize("fn, why", [(branching, "cannot trace mean"),
                                     (lambda u, v: np.asarray(u) * v, "converts its argument to a plain array"),
                                     (lambda u, v: u.round(2) * v, "raised AttributeError")])
def test_an_opaque_function_records_why_it_was_not_traced(fn, why):
    p, n, a, b = two_inputs()
    try:
        h = netsor.nonlin(fn, a, b)
    except ProgramError:  # not elementwise: refused before any opaque node
        return
    node = p.line_of(h).expr
    assert isinstance(node, Opaque) and why in node.untraced


def test_expansion_into_monomials():
    p, n, a, b = two_inputs()
    h = (netsor.relu(a) + b) * (netsor.relu(a) - b) + 2.0
    poly = expand(p.line_of(h).expr)
    assert poly.const == 2.0
    coefs = {tuple(sorted(x.describe() for x in m.atoms)): c for c, m in poly.terms}
    assert coefs == {("relu(g1)", "relu(g1)"): 1.0, (b.name, b.name): -1.0}


# ------------------------------------------------------------------ transforms
def test_clone_is_an_equal_and_independent_program():
    p = netsor.zoo.resnet(2, "tanh", 1.2, 0.1)
    q, ren = clone(p, name="copy")
    assert len(q.lines) == len(p.lines) and q.num_outputs == p.num_outputs
    np.testing.assert_array_equal(netsor.nngp(q, X), netsor.nngp(p, X))
    # extending the clone leaves the original untouched
    h = q.outputs[0][1][0]
    q.readout(netsor.relu(q.matrix(h.dim, h.dim) @ h))
    assert q.num_outputs == p.num_outputs + 1 and len(p.lines) < len(q.lines)
    with pytest.raises(ProgramError):
        p.readout(ren[p.outputs[0][1][0]])  # a vector of the copy is not a vector of p


def test_clone_keeps_the_ratios_of_dims():
    """A Marchenko–Pastur program (ratio 0.5): the copy has the same dims and the same limit (the
    moments of WᵀW depend on the ratio)."""
    p = netsor.zoo.marchenko_pastur_moments(2, 0.5)
    q, ren = clone(p)
    assert [(ren.dims[d].name, ren.dims[d].ratio) for d in p.dims] == [(d.name, d.ratio) for d in p.dims]
    np.testing.assert_array_equal(netsor.nngp(q), netsor.nngp(p))


def test_substitute_rewrites_a_degenerate_matmul_as_a_lincomb():
    """W relu(g) and W (2 relu(g)): the second use is 2·(the first) in law — rewriting it as a
    LinComb gives the same kernel."""
    p = netsor.Program()
    n = p.dim("n")
    g = p.input(n)
    W = p.matrix(n, n, sigma=1.3)
    first = W @ netsor.relu(g)
    second = W @ (2.0 * netsor.relu(g))
    p.readout(netsor.tanh(first + second))

    def as_lincomb(line: Line, new: netsor.Program, ren) -> Vector:
        return 2.0 * ren[first]

    q, _ = substitute(p, {second: as_lincomb})
    assert any(isinstance(ln, LinCombLine) for ln in q.lines)
    K, E = netsor.limit(p, X).nngp(with_error=True)
    Kq, Eq = netsor.limit(q, X).nngp(with_error=True)
    assert np.all(np.abs(K - Kq) <= E + Eq)


def test_lines_whose_dims_do_not_chain_are_refused_by_the_program() -> None:
    """A program transform that builds lines directly (not through the builder) cannot append a
    MatMul whose argument is not in the matrix's in-dim (out-dim for ``Wᵀ``), nor a LinComb or
    NonLin mixing dims: the gradient-independent copy of a rectangular ``Wᵀ`` once was one."""
    from netsor.errors import DimensionError
    from netsor.ir import MatMulLine
    from netsor.ir.expr import Var, product

    p = netsor.Program()
    n, m = p.dim("n"), p.dim("m", ratio=0.5)
    W = p.matrix(n, m)
    g, h = p.gaussian(n), p.gaussian(m)
    for bad in (MatMulLine(p.new_vector(n, "G"), W, g), MatMulLine(p.new_vector(m, "G"), W, h, True)):
        with pytest.raises(DimensionError, match="do not chain"):
            p.add_line(bad)
    with pytest.raises(DimensionError, match="do not chain"):
        p.add_line(LinCombLine(p.new_vector(n, "G"), (1.0, 1.0), (g, h)))
    with pytest.raises(DimensionError, match="do not chain"):
        p.add_line(NonLinLine(p.new_vector(n, "H"), product([Var(g), Var(h)])))
    assert p.add_line(MatMulLine(p.new_vector(n, "G"), W, h)).dim is n  # W h: m → n
    assert p.add_line(MatMulLine(p.new_vector(m, "G"), W, g, True)).dim is m  # Wᵀ g: n → m


def test_prune_keeps_what_the_readouts_need():
    p = netsor.Program()
    n = p.dim("n")
    g = p.input(n)
    dead = netsor.tanh(p.matrix(n, n) @ netsor.relu(g))
    p.readout(netsor.relu(g))
    q, ren = prune(p)
    assert len(q.lines) < len(p.lines)
    with pytest.raises(ProgramError, match="no image"):
        ren[dead]
    np.testing.assert_array_equal(netsor.nngp(q, X), netsor.nngp(p, X))


# ------------------------------------------------------------------ rules and the analysis
def test_every_line_kind_has_its_rules():
    for kind, rule in RULES.items():
        for method in ("finite", "coupled", "limit"):
            assert callable(getattr(rule, method)), (kind, method)

    @dataclass(frozen=True, eq=False)
    class NewLine:
        out: Vector

        @property
        def inputs(self) -> tuple:
            return ()

    with pytest.raises(UnsupportedError, match="NewLine"):
        rule_for(NewLine(None))


def test_the_analysis_is_held_by_the_program_and_keyed_by_content():
    p, n, a, b = two_inputs()
    h1 = netsor.relu(a) * b
    h2 = netsor.relu(a) * b  # another line, the same expression
    p.readout(h1, h2)
    an = analysis_of(p)
    (_, m1), = an.polys[h1].terms
    (_, m2), = an.polys[h2].terms
    assert m1.key == m2.key  # computed once
    assert analysis_of(p) is an  # cached while unchanged
    p.readout(netsor.tanh(a))
    assert analysis_of(p) is not an  # redone when lines were added
    ref = weakref.ref(an)
    del p, an, h1, h2, a, b, n, m1, m2
    gc.collect()
    assert ref() is None  # dies with its program: no cache grows without bound


def test_data_and_time_steps_do_not_mix():
    p = netsor.Program()
    p.data()
    with pytest.raises(ProgramError, match="time steps"):
        p.data(step=1)


def test_nonlin_lines_hold_expressions():
    p, n, a, b = two_inputs()
    h = netsor.nonlin(lambda u, v: u * v, a, b)
    line = p.line_of(h)
    assert isinstance(line, NonLinLine) and set(line.args) == {a, b}


def test_shared_evaluation_computes_a_repeated_subexpression_once() -> None:
    """The finite rules evaluate NonLins with evaluate_shared: equal activation nodes (equal
    content, as traced code repeats them) are computed once, with the same values."""
    from netsor.activations.registry import custom
    from netsor.ir.expr import Apply, Prod, Sum, Var, evaluate_shared

    calls = []

    def gate(u):
        calls.append(1)
        return 0.5 * (1.0 + np.tanh(u))

    act = custom(gate, name="gate")
    p = netsor.Program("repeat")
    n = p.dim("n")
    z, h = p.input(n), p.input(n)
    # h − gate(z)·h + gate(z): two distinct Apply nodes of equal content
    expr = Sum(0.0, ((1.0, Var(h)), (-1.0, Prod((Apply(act, Var(z)), Var(h)))), (1.0, Apply(act, Var(z)))))
    rng = np.random.default_rng(0)
    values = {z: rng.standard_normal((2, 5)), h: rng.standard_normal((2, 5))}
    calls.clear()
    plain = expr.evaluate(values)
    assert len(calls) == 2
    calls.clear()
    np.testing.assert_array_equal(evaluate_shared(expr, values), plain)
    assert len(calls) == 1


_KEY_SCRIPT = """
import numpy as np, netsor
def hidden(u, v):
    return sum(np.asarray(x) for x in (u, v)) ** 2  # a generator expression: a nested code object
p = netsor.Program()
n = p.dim("n")
g, h = p.gaussian(n), p.gaussian(n)
cube = netsor.activation(lambda x: np.tanh(x) ** 3, name="cube_tanh")
print(repr(p.line_of(netsor.nonlin(hidden, g, h)).expr.key), repr(cube.key))
"""


def test_keys_of_user_functions_are_the_same_in_every_process():
    """Randomised QMC seeds its scramblings from expression keys: a key that holds a user function
    (an opaque callable, a custom activation) is written from the function's bytecode, never from a
    memory address, so that the same program gets the same QMC estimate in every run (a nested
    code object's ``repr`` holds its address: that made a CI run draw a different seed)."""
    import subprocess
    import sys

    outs = {subprocess.run([sys.executable, "-c", _KEY_SCRIPT], capture_output=True, text=True, check=True).stdout
            for _ in range(2)}
    assert len(outs) == 1 and "0x" not in outs.pop()


def test_joint_functions_evaluate_each_function_node_once_per_call():
    """A costly node that a joint function reads several times — an activation inside both outputs of
    a BatchNorm of two examples and again in a product — is evaluated once per call of the function
    and once per gradient (not once per argument and occurrence), and values and gradients are
    those of the expression."""
    from netsor.activations import Activation
    from netsor.interpret.functions import joint_function
    from netsor.ir import expr as ex

    p = netsor.Program()
    n = p.dim("n")
    g1, g2 = p.input(n), p.input(n)
    calls = []

    def cube(x):
        calls.append("fn")
        return x**3

    def cube_slope(x):
        calls.append("deriv")
        return 3 * x**2

    act = Activation(name="counted_cube", fn=cube, deriv=cube_slope, smooth=True, registered=False)
    node = ex.apply(act, ex.Var(g1))
    operands = (node, ex.Var(g2))
    F = joint_function(ex.product([ex.BatchNormalized(0, operands), ex.BatchNormalized(1, operands), node]),
                       (g1, g2))
    u = np.random.default_rng(3).standard_normal((5, 2))
    c = u[:, 0] ** 3
    # a batch of two: u_0 = (c − g2)/|c − g2| = −u_1, so F = −c wherever c ≠ g2
    np.testing.assert_allclose(F(u), -c, rtol=1e-13)
    assert calls == ["fn"]
    calls.clear()
    grad = F.grad(u)
    assert calls.count("fn") == 1
    np.testing.assert_allclose(grad[:, 0], -3 * u[:, 0] ** 2, rtol=1e-12)
    np.testing.assert_allclose(grad[:, 1], 0.0, atol=1e-12 * np.max(np.abs(c)))


def test_a_jump_times_a_factor_that_vanishes_on_it_is_continuous():
    """``f·step(ℓ)`` is continuous where a continuous factor ``f`` vanishes on the plane ``ℓ = 0`` (the same plane
    up to a nonzero factor: ``step(−2g)``); not where it does not, or where the jumping factor is unbounded."""
    p = netsor.Program()
    n = p.dim("n")
    g, h = p.input(n), p.input(n)
    cases = {
        lambda u, v: u * netsor.step(u): True,
        lambda u, v: netsor.gelu(u) * netsor.step(-2.0 * u): True,
        lambda u, v: netsor.relu(u - 1.0) * netsor.step(u - 1.0) * netsor.tanh(v): True,
        lambda u, v: netsor.tanh(u) * netsor.step(u) * netsor.step(-u): True,
        lambda u, v: netsor.tanh(v) * netsor.step(u): False,
        lambda u, v: netsor.relu(u - 1.0) * netsor.step(u): False,
        lambda u, v: np.cosh(u) * netsor.step(u): False,
    }
    for fn, continuous in cases.items():
        netsor.nonlin(fn, g, h)
        assert p.lines[-1].expr.continuous is continuous, p.lines[-1].expr.describe()


def test_gelu_times_its_own_step_at_nearly_identical_and_anti_parallel_inputs():
    """``gelu(g)·step(g) + gelu(g)·step(−g) = gelu(g)``: the four covariances of the two pieces sum to gelu's kernel
    within their bounds, at inputs 1e-6 apart and nearly anti-parallel ones, at the default rtol — where the pieces
    were taken for jumps (½-Hölder in the correlation: refused, bounds 1e-2 … 5e-2)."""
    rng = np.random.default_rng(20)
    x = rng.standard_normal(6)
    X = np.stack([x, x + 1e-6 * rng.standard_normal(6), -x + 1e-6 * rng.standard_normal(6), rng.standard_normal(6)])
    p = netsor.Program()
    n = p.dim("n")
    g = p.input(n, sigma=1.2, bias=0.3)
    up = netsor.nonlin(lambda u: netsor.gelu(u) * netsor.step(u), g)
    down = netsor.nonlin(lambda u: netsor.gelu(u) * netsor.step(-u), g)
    whole = netsor.gelu(g)
    p.readout(up, down, whole)
    lim = netsor.limit(p, X)
    parts = [lim.cov(a, b, with_error=True) for a, b in ((up, up), (up, down), (down, up), (down, down))]
    K, E = lim.cov(whole, with_error=True)
    total = sum(k for k, _ in parts)
    assert np.all(np.abs(total - K) <= sum(e for _, e in parts) + E + 1e-15 * np.abs(K).max())


#: comparisons whose two sides tie with positive probability (relu(g) is 0 on a half-space), and heaviside:
#: (function, E h² in the limit at Var g = 1, computed by hand)
TIES = {
    "relu(g) >= 0": (lambda u: (np.maximum(u, 0.0) >= 0.0) * 1.0, 1.0),
    "relu(g) > 0": (lambda u: (np.maximum(u, 0.0) > 0.0) * 1.0, 0.5),
    "0 <= relu(g)": (lambda u: (0.0 <= np.maximum(u, 0.0)) * 1.0, 1.0),
    "relu(g) <= 0": (lambda u: (np.maximum(u, 0.0) <= 0.0) * 1.0, 0.5),
    "clip(g, 0, 1) >= 1": (lambda u: (np.clip(u, 0.0, 1.0) >= 1.0) * 1.0, 0.15865525393145707),  # P(g ≥ 1)
    "relu(g) == 0": (lambda u: (np.maximum(u, 0.0) == 0.0) * 1.0, 0.5),  # the constant False before (no __eq__)
    "clip(g, 0, 1) != 1": (lambda u: (np.clip(u, 0.0, 1.0) != 1.0) * 1.0, 0.8413447460685429),  # P(g < 1)
    "heaviside(g, 0.5)": (lambda u: np.heaviside(u, 0.5), 0.5),
    "heaviside(relu(g), 1)": (lambda u: np.heaviside(np.maximum(u, 0.0), 1.0), 1.0),
    "heaviside(−relu(g), 0.3)": (lambda u: np.heaviside(-np.maximum(u, 0.0), 0.3), 0.045),
}


@pytest.mark.parametrize("name", list(TIES))
def test_comparisons_and_heaviside_are_traced_exactly_at_ties(name):
    """``a ≥ b`` is ``1 − step(b − a)``, not ``step(a − b)``: they differ where ``a = b``, an event of probability
    1/2 for ``relu(g) ≥ 0`` (traced before as ``step(g)``: E h² = 0.5 instead of 1, in the limit and at finite
    width alike); ``np.heaviside`` is traced (it was opaque). The expression equals the user's function on values
    with exact zeros and ties, and its limit second moment the value by hand."""
    fn, second_moment = TIES[name]
    p = netsor.Program()
    n = p.dim("n")
    g = p.input(n)
    h = netsor.nonlin(fn, g)
    expr = p.lines[-1].expr
    assert not isinstance(expr, netsor.ir.expr.Opaque)
    z = np.concatenate([np.random.default_rng(0).standard_normal(50), [0.0, 1.0, -1.0, -0.0]])
    np.testing.assert_array_equal(expr.evaluate({g: z}), fn(z))
    p.readout(h)
    K, E = netsor.limit(p, np.ones((1, 3))).nngp(with_error=True)
    assert abs(K[0, 0] - second_moment) <= E[0, 0] + 1e-15


#: pieces that tie with positive probability (a clip, a max with 0, |u| − |v| at u = v = 0) and comparisons
_TIE_PIECES = [lambda u, v: np.maximum(u, 0.0), lambda u, v: np.clip(u + v, -0.5, 0.5),
               lambda u, v: np.abs(u) - np.abs(v), lambda u, v: np.minimum(u, v),
               lambda u, v: np.where(u > 0, u, 0.0) - np.maximum(v, 0.0), lambda u, v: u]
_COMPARISONS = [np.greater, np.greater_equal, np.less, np.less_equal, np.equal, np.not_equal,
                lambda a, b: np.heaviside(a - b, 0.3)]


def test_traced_comparisons_equal_numpy_at_ties_on_a_grid_of_functions():
    """All 252 functions ``c(f(u, v), f'(v, u)) + ½ c(f'(u, v), 0)`` of the grid above: the traced expression equals
    numpy's function at points with exact ties (zeros of both arguments, clipped values), to the rounding of its
    constants (1e-14) — 72 of them differed before (``≥``/``≤`` traced as strict comparisons; heaviside was
    opaque), and the ``==`` and ``!=`` ones were constants (Python's identity test)."""
    rng = np.random.default_rng(0)
    z = np.concatenate([rng.standard_normal(200), np.zeros(20), [0.5, -0.5, 1.0]])
    w = np.concatenate([rng.standard_normal(200), rng.standard_normal(20) * (rng.random(20) < 0.5), [0.0, 0.0, -0.5]])
    p = netsor.Program()
    n = p.dim("n")
    g, h = p.input(n), p.input(n)
    for f, f2, c in itertools.product(_TIE_PIECES, _TIE_PIECES, _COMPARISONS):
        def fn(u, v, f=f, f2=f2, c=c):
            return c(f(u, v), f2(v, u)) * 1.0 + 0.5 * c(f2(u, v), 0.0)

        netsor.nonlin(fn, g, h)
        got = np.broadcast_to(p.lines[-1].expr.evaluate({g: z, h: w}), z.shape)
        np.testing.assert_allclose(got, fn(z, w), rtol=0.0, atol=1e-14)


#: ``np.where`` with a branch that is not finite where it is not selected, truthiness, logical operators
_SELECTIONS = [
    lambda u, v: np.where(u > 0, np.sqrt(u), 0.0),
    lambda u, v: np.where(u <= 0, v, np.log(u)),
    lambda u, v: np.where(v < 1, u, 1 / v),
    lambda u, v: np.where(u > v, np.sqrt(u - v), np.sqrt(v - u)),
    (lambda u, v: (u > 0) * np.log(u), lambda u, v: np.where(u > 0, np.log(u), 0.0)),  # numpy: NaN for u ≤ 0
    lambda u, v: np.where(np.sin(u), v, 2.0),  # true where sin u ≠ 0 (also at u = 0 exactly: false)
    lambda u, v: np.where((u > -1) & (u < 1), u, v),
    lambda u, v: np.where((u < -1) | ~(v > 0), u, v),
    lambda u, v: np.where((u > 0) ^ (v > 0), 1.0, u * v),
    lambda u, v: np.where(np.logical_and(u > 0, np.logical_not(v > 0)), u, np.logical_xor(u > 1, v) * 1.0),
    lambda u, v: np.where(np.logical_or(u, v < 0), np.sqrt(np.abs(u)), v),
]


@pytest.mark.parametrize("fn", _SELECTIONS)
def test_where_selects_its_branches_as_numpy_does(fn):
    """The traced expression equals numpy's function at every point, also where the branch np.where does not
    select is NaN or infinite (``sqrt``, ``log`` of a negative value, ``1/0``: these were NaN, and the limit and
    the finite network refused the function); a product with a comparison is 0 where the comparison is false, as
    a where; a condition that is not a comparison is true where it is not 0 (it was multiplied in as a number);
    ``&``, ``|``, ``^``, ``~`` and ``np.logical_*`` are traced (they were opaque)."""
    fn, reference = fn if isinstance(fn, tuple) else (fn, fn)
    p, n, a, b = two_inputs()
    expr = p.line_of(netsor.nonlin(fn, a, b)).expr
    assert not isinstance(expr, Opaque)
    rng = np.random.default_rng(1)
    u = np.concatenate([rng.standard_normal(300) * 2.0, [0.0, 0.0, 1.0, -1.0]])
    v = np.concatenate([rng.standard_normal(300) * 2.0, [0.0, 1.0, 0.0, 1.0]])
    with np.errstate(all="ignore"):
        expected = reference(u, v) * 1.0
        got = np.broadcast_to(expr.evaluate({a: u, b: v}), u.shape)
        monomials = [m.evaluate({a: u, b: v}) for _, m in expand(expr).terms]
    np.testing.assert_allclose(got, expected, rtol=1e-14, atol=1e-14)
    assert np.all(np.isfinite(got))
    assert all(np.all(np.isfinite(m)) for m in monomials)  # the limit integrates monomials: none NaN where unselected


def test_bitwise_operations_of_values_that_are_not_truth_values_are_refused_as_numpy_refuses_them():
    """``&`` of floats is not read as a logical and: the function stays untraced, and numpy's own error names it."""
    p, n, a, b = two_inputs()
    for fn in (lambda u, v: np.bitwise_and(u, v > 0) * 1.0, lambda u, v: (u & (v > 0)) * 1.0, lambda u, v: ~u):
        with pytest.raises(ProgramError, match="bitwise_and|invert"):
            netsor.nonlin(fn, a, b)


_NUMPY_IDIOMS = [
    lambda u, v: np.clip(u, 0, None),
    lambda u, v: np.clip(u, None, 0.5) + np.clip(v, a_min=-1, a_max=1),
    lambda u, v: np.clip(u, 1.0, -1.0),  # numpy: the upper bound where the bounds cross
    lambda u, v: np.clip(u, v, None) + np.clip(u, -np.abs(v), np.abs(v)),
    lambda u, v: u.clip(0) + v.clip(-1, 1) + u.clip(max=0.3),
    lambda u, v: (u > v).astype(float) + np.abs(u).astype(np.float64),
    lambda u, v: np.select([u < -1, u > 1], [-1.0, v], u),
    lambda u, v: np.select([u > 0, u > 1], [u, 10.0]),  # the first that holds: u wherever u > 0, 0 elsewhere
    lambda u, v: np.piecewise(u, [u < 0, u >= 0], [lambda t: 0.1 * t, lambda t: t]),
    lambda u, v: np.piecewise(u, [u < -1, u > 1], [-1.0, lambda t: np.sqrt(t), lambda t: t * t]),
    lambda u, v: np.float_power(u, 2) + np.float_power(v, 3),
    lambda u, v: (u > 0).astype(int) * u + ((u > 0) + (v > 0)) * 1.0 + (u > 1) * (v < 0) * 2.0,  # bool + bool: or
    lambda u, v: (np.maximum(u, 0.0) == 0.0) * v + (np.clip(v, -1, 1) != 1) * 1.0 + np.equal(u, v) * 1.0,  # ties
    lambda u, v: 2.0 ** u + 0.5 ** (u * v),
]


@pytest.mark.parametrize("fn", _NUMPY_IDIOMS)
def test_clip_select_piecewise_and_casts_are_traced_as_numpy_computes_them(fn):
    """``np.clip`` with an open side or keyword bounds, ``x.clip``, ``.astype(float)``, ``np.select``, ``np.piecewise``
    (a function per condition, the extra one where none holds), ``np.float_power`` of integers and ``c ** x``:
    traced (they were opaque: randomised QMC, refused at the default rtol), equal to numpy's values. ``==`` and
    ``!=`` are traced at ties (``relu(u) == 0`` was the constant False: ``Tracer`` had no ``__eq__``), and ``+`` of
    two comparisons is their or, as numpy's boolean ``+`` (it was 2 where both hold)."""
    p, n, a, b = two_inputs()
    expr = p.line_of(netsor.nonlin(fn, a, b)).expr
    assert not isinstance(expr, Opaque), expr.untraced
    rng = np.random.default_rng(2)
    u = np.concatenate([rng.standard_normal(300) * 2.0, [0.0, 1.0, -1.0, 0.5]])
    v = np.concatenate([rng.standard_normal(300) * 2.0, [0.0, 1.0, 0.0, 0.5]])
    with np.errstate(all="ignore"):
        expected = fn(u, v) * 1.0
        got = np.broadcast_to(expr.evaluate({a: u, b: v}), u.shape)
    np.testing.assert_allclose(got, expected, rtol=1e-14, atol=1e-14)
