"""The IR and the builder: construction, typing, and every user error path."""

import dataclasses

import numpy as np
import pytest
from programs import weight_sharing

import netsor
from netsor.errors import DimensionError, HyperParameterError, InputError, NetsorError, ProgramError


def small_program():
    w = weight_sharing()
    return w.p, w.n, w.g, w.W, w.a, w.b, w.c


def test_builder_kinds_and_fusion():
    p, n, g, W, a, b, c = small_program()
    assert g.kind == "G" and a.kind == "G" and b.kind == "G" and c.kind == "H"
    assert (a + b).kind == "G" and (2.0 * a - b).kind == "G"
    assert (a * b).kind == "H" and (a + 1.0).kind == "H" and netsor.tanh(netsor.relu(a)).kind == "H"
    # NonLin lines take G-vectors only: compositions are fused.
    line = p.line_of(netsor.tanh(netsor.relu(a) + b))
    assert all(v.kind == "G" for v in line.args)
    assert "relu" in p.pretty() and "W" in p.pretty()
    assert p.num_outputs == 1


def test_lines_are_immutable():
    p, *_ = small_program()
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.lines[0].step = 3


def test_expression_evaluates_like_numpy():
    p, n, g, W, a, b, c = small_program()
    h = netsor.nonlin(lambda u, v: np.sin(u) * v, a, b, name="sinmul")
    expr = p.line_of(h).expr
    u, v = np.linspace(-2, 2, 7), np.linspace(1, 3, 7)
    np.testing.assert_allclose(expr.evaluate({a: u, b: v}), np.sin(u) * v)
    e2 = p.line_of(netsor.relu(a) * 3.0 - b + 1.0).expr
    np.testing.assert_allclose(e2.evaluate({a: u, b: v}), 3 * np.maximum(u, 0) - v + 1)


@pytest.mark.parametrize(
    "build, error",
    [
        (lambda p, n, m, W: W @ p.data(), ProgramError),  # hidden matrix on the data point
        (lambda p, n, m, W: p.matrix(m, n) @ p.input(m), DimensionError),
        (lambda p, n, m, W: p.input(n) + p.input(m), DimensionError),
        (lambda p, n, m, W: p.matrix(n, n, sigma=-1.0), HyperParameterError),
        (lambda p, n, m, W: p.matrix(n, n, sigma=float("nan")), HyperParameterError),
        (lambda p, n, m, W: p.bias(n, sigma=-0.5), HyperParameterError),
        (lambda p, n, m, W: p.input(n, sigma=1.0, bias=-1.0), HyperParameterError),
        (lambda p, n, m, W: p.readout(p.input(n), sigma=-1.0), HyperParameterError),
        (lambda p, n, m, W: p.readout(p.input(n), p.input(m)), DimensionError),
        (lambda p, n, m, W: p.readout(), ProgramError),
        (lambda p, n, m, W: p.readout(p.data()), ProgramError),
        (lambda p, n, m, W: p.dim("n"), ProgramError),
        (lambda p, n, m, W: p.data() + 1.0, ProgramError),
        (lambda p, n, m, W: netsor.relu(p.data()), ProgramError),
        (lambda p, n, m, W: p.input(n) ** 2.5, ProgramError),
        (lambda p, n, m, W: p.input(n) ** p.input(n), ProgramError),
        (lambda p, n, m, W: p.input(n) + "a", ProgramError),
        (lambda p, n, m, W: p.data(step=-1), ProgramError),
        (lambda p, n, m, W: netsor.nonlin(lambda u: 1.0, p.input(n)), ProgramError),
        (lambda p, n, m, W: netsor.nonlin(lambda u: np.sum(u), p.input(n)), ProgramError),
        (lambda p, n, m, W: bool(p.input(n)), ProgramError),
    ],
)
def test_error_paths(build, error):
    p = netsor.Program()
    n, m = p.dim("n"), p.dim("m")
    W = p.matrix(n, n)
    with pytest.raises(error) as info:
        build(p, n, m, W)
    assert isinstance(info.value, NetsorError)
    assert len(str(info.value)) > 20  # says what to change


def test_foreign_vectors_and_dims_are_rejected():
    p, q = netsor.Program(), netsor.Program()
    n, k = p.dim("n"), q.dim("k")
    g = q.input(k)
    W = p.matrix(n, n)
    with pytest.raises(ProgramError, match="another program"):
        p.matrix(n, k)
    with pytest.raises(ProgramError):
        W @ g
    with pytest.raises(ProgramError, match="another program"):
        p.readout(g)
    with pytest.raises(ProgramError):
        p.input(n) + g


def test_unknown_activation():
    with pytest.raises(HyperParameterError, match="unknown activation"):
        netsor.activation("relu6")
    with pytest.raises(HyperParameterError):
        netsor.zoo.mlp(2, activation="sofplus")
    with pytest.raises(HyperParameterError):
        netsor.activation("relu", alpha=0.3)
    assert netsor.activation("leaky_relu", alpha=0.2).params == {"alpha": 0.2}
    assert netsor.activation("swish") is netsor.silu


@pytest.mark.parametrize("depth", [0, -1, 1.5, True, "3"])
def test_bad_depths(depth):
    with pytest.raises(HyperParameterError):
        netsor.zoo.mlp(depth)


def test_bad_inputs_and_widths():
    p, *_ = small_program()
    X = np.ones((3, 4))
    for bad in [np.array([[np.nan, 1.0]]), np.array([[np.inf, 0.0]]), np.ones(4), np.ones((0, 4)),
                np.ones((2, 3, 4)), "abc"]:
        with pytest.raises(InputError):
            netsor.nngp(p, bad)
        with pytest.raises(InputError):
            netsor.sample(p, bad, width=8, samples=2)
    for width in [0, -3, 2.5, True, {"m": 3}]:
        with pytest.raises(HyperParameterError):
            netsor.sample(p, X, width=width, samples=2)
    for samples in [0, -1, 1.5]:
        with pytest.raises(HyperParameterError):
            netsor.sample(p, X, width=4, samples=samples)
    with pytest.raises(HyperParameterError):
        netsor.sample(p, X, width=4, samples=2, method="magic")
    with pytest.raises(InputError):
        netsor.nngp(p, X, np.ones((2, 5)))
    rnn = netsor.zoo.rnn(3)
    with pytest.raises(InputError, match="steps"):
        netsor.nngp(rnn, np.ones((2, 4)))
    with pytest.raises(InputError, match="steps"):
        netsor.nngp(rnn, np.ones((2, 2, 4)))


def test_program_without_outputs():
    p = netsor.Program()
    p.input(p.dim("n"))
    with pytest.raises(ProgramError, match="readout"):
        netsor.nngp(p, np.ones((2, 3)))
    with pytest.raises(ProgramError, match="readout"):
        netsor.sample(p, np.ones((2, 3)), width=4, samples=2)


def test_overflow_is_reported_not_nan():
    p = netsor.Program()
    n = p.dim("n")
    g = p.input(n, sigma=30.0)
    p.readout(netsor.exp(p.matrix(n, n, sigma=30.0) @ netsor.exp(g)))
    with pytest.raises(netsor.NumericalError):
        netsor.nngp(p, np.ones((2, 3)))
