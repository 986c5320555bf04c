"""Degenerate MatMul lines: detection (netsor.degeneracies), the LinComb rewrite
(netsor.rewrite_degenerate) and ``netsor kernel --explain``."""

from __future__ import annotations

import numpy as np
import pytest
from references import pairwise, relu_kernel
from test_cli import run_error, run_ok

import netsor
from netsor.ir import LinCombLine, MatMulLine

X = np.random.default_rng(0).standard_normal((4, 3))
Z_MAX = 4.0


def doubled(sigma_w: float = 1.3):
    """``a = W relu(U x)``, ``b = W (2 relu(U x))``, both read out."""
    p = netsor.Program()
    n = p.dim("n")
    g = p.input(n, sigma=1.0)
    h = netsor.relu(g)
    W = p.matrix(n, n, sigma=sigma_w)
    a = W @ h
    b = W @ (2.0 * h)
    p.readout(a, b, sigma=1.0)
    return p, a, b


def combined(nonlin_of_lincomb: bool):
    """``W h₁``, ``W h₂`` and ``W h₃`` with ``h₃ = h₁ + 0.5 h₂`` (h₁ a NonLin of a LinComb if asked)."""
    p = netsor.Program()
    n = p.dim("n")
    g1, g2 = p.input(n, bias=0.1), p.input(n)
    h1 = netsor.relu(g1 + g2) if nonlin_of_lincomb else netsor.relu(g1)
    h2 = netsor.tanh(g2)
    W = p.matrix(n, n, sigma=1.1)
    a, b = W @ h1, W @ h2
    c = W @ (h1 + 0.5 * h2)
    p.readout(netsor.erf(a + c), netsor.relu(b))
    return p, a, b, c


def test_doubled_argument_is_detected_with_coefficient_two_and_rewritten():
    p, a, b = doubled()
    found = netsor.degeneracies(p, X)
    assert [d.name for d in found] == [b.name]
    (d,) = found
    assert d.uses == (a,) and d.constant == (2.0,) and d.rewritable  # exactly 2
    np.testing.assert_allclose(d.coefficients, 2.0, rtol=1e-15)
    assert np.all(d.residual <= 1e-15)
    q, ren, report = netsor.rewrite_degenerate(p, X)
    assert [r.name for r in report] == [b.name]
    line = q.line_of(ren[b])
    assert isinstance(line, LinCombLine) and line.coeffs == (2.0,) and line.args == (ren[a],)
    assert sum(isinstance(ln, MatMulLine) for ln in q.lines) == sum(isinstance(ln, MatMulLine) for ln in p.lines) - 1
    K, Kq = netsor.nngp(p, X), netsor.nngp(q, X)
    np.testing.assert_allclose(Kq, K, rtol=0, atol=1e-14)
    # independently: Cov(W h, W (c h)) = σ_W² c c' E[relu(g) relu(g')], g ~ N(0, xᵀx'/d)
    base = 1.3**2 * relu_kernel(*pairwise(X @ X.T / X.shape[1]))
    expected = np.einsum("ij,r,s->irjs", base, [1.0, 2.0], [1.0, 2.0]).reshape(K.shape)
    np.testing.assert_allclose(K, expected, rtol=1e-13, atol=1e-15)


@pytest.mark.parametrize("nonlin_of_lincomb", [False, True])
def test_linear_combination_of_earlier_arguments_is_detected(nonlin_of_lincomb):
    p, a, b, c = combined(nonlin_of_lincomb)
    (d,) = netsor.degeneracies(p, X)
    assert d.name == c.name and d.uses == (a, b) and d.rewritable
    assert d.constant is not None
    np.testing.assert_allclose(d.constant, [1.0, 0.5], rtol=1e-12)
    np.testing.assert_allclose(d.coefficients, [[1.0, 0.5]] * len(X), rtol=1e-12)
    q, ren, _ = netsor.rewrite_degenerate(p, X)
    assert isinstance(q.line_of(ren[c]), LinCombLine)
    np.testing.assert_allclose(netsor.nngp(q, X), netsor.nngp(p, X), rtol=0, atol=1e-14)


def test_g_vectors_combined_without_nonlinearity():
    """``W g₁``, ``W g₂``, ``W (g₁ + 0.5 g₂)`` on G-vectors, and ``U x₂`` with ``x₂ = x₀ + 0.5 x₁``."""
    p = netsor.Program()
    n = p.dim("n")
    g1, g2 = p.input(n), p.input(n)
    W = p.matrix(n, n)
    a, b = W @ g1, W @ g2
    c = W @ (g1 + 0.5 * g2)
    p.readout(netsor.tanh(c))
    (d,) = netsor.degeneracies(p, X)
    assert d.name == c.name and d.uses == (a, b)
    np.testing.assert_allclose(d.constant, [1.0, 0.5], rtol=1e-12)

    rnn = netsor.zoo.rnn(3, "tanh", 1.2, 1.0, 0.1)
    Xs = np.random.default_rng(1).standard_normal((3, 3, 4))
    Xs[:, 2] = Xs[:, 0] + 0.5 * Xs[:, 1]
    (d,) = netsor.degeneracies(rnn, Xs)
    assert d.line.arg.name == "x2"
    np.testing.assert_allclose(d.constant, [1.0, 0.5], rtol=1e-12)


def test_coefficients_varying_with_the_input_are_reported_not_rewritten():
    """``W (θ h)`` with the NetsorK scalar ``θ = E[g²]`` (one value per input): θ(x) · W h."""
    p = netsor.Program()
    n = p.dim("n")
    g = p.input(n)
    h = netsor.relu(g)
    theta = netsor.moment(lambda a: a * a, g)
    W = p.matrix(n, n)
    a = W @ h
    b = W @ (theta * h)
    p.readout(a, b)
    (d,) = netsor.degeneracies(p, X)
    assert d.name == b.name and not d.rewritable
    np.testing.assert_allclose(d.coefficients[:, 0], np.sum(X * X, axis=1) / X.shape[1], rtol=1e-12)
    assert "varying over the inputs" in d.describe()
    q, ren, _ = netsor.rewrite_degenerate(p, X)
    assert isinstance(q.line_of(ren[b]), MatMulLine)


@pytest.mark.parametrize("program, inputs", [
    (netsor.zoo.mlp(3, "relu", 1.4, 0.1), X),
    (netsor.zoo.resnet(2, "tanh", 1.0, 0.1), X),
    (netsor.zoo.rnn(3, "tanh", 1.2, 1.0, 0.1), np.random.default_rng(2).standard_normal((3, 3, 4))),
], ids=["mlp", "resnet", "rnn"])
def test_non_degenerate_programs_report_nothing(program, inputs):
    assert netsor.degeneracies(program, inputs) == []
    q, _, report = netsor.rewrite_degenerate(program, inputs)
    assert report == [] and len(q.lines) == len(program.lines)


def test_the_coupled_run_reports_the_same_line():
    p, _, b = doubled()
    assert netsor.coupled(p, X, width=16, samples=4, seed=0).degenerate == [b.name]


def test_finite_width_samplers_agree_in_law():
    """The matrix-free sampler of the original and of the rewritten program: both output
    covariances match the (common) limit, and b = 2a network by network in both."""
    p, _, _ = doubled()
    q, _, _ = netsor.rewrite_degenerate(p, X)
    K = netsor.nngp(p, X)
    for program, seed in ((p, 1), (q, 2)):
        Y = netsor.sample(program, X, width=64, samples=3000, seed=seed, method="matrix-free")
        pairs = Y.reshape(len(Y), len(X), 2)
        np.testing.assert_allclose(pairs[..., 1], 2 * pairs[..., 0], rtol=1e-10, atol=1e-12)
        prod = Y[:, :, None] * Y[:, None, :]
        z = (prod.mean(0) - K) / (prod.std(0, ddof=1) / np.sqrt(len(Y)))
        assert np.max(np.abs(z)) < Z_MAX, np.round(z, 2)


@pytest.mark.parametrize("bad", ["program", None, netsor.zoo])
def test_a_non_program_is_refused(bad):
    with pytest.raises(netsor.ProgramError, match="needs a netsor.Program"):
        netsor.degeneracies(bad, X)
    with pytest.raises(netsor.NetsorError):
        netsor.rewrite_degenerate(bad, X)


@pytest.mark.parametrize("bad", [0.0, -1e-3, 1.5, float("nan"), "small", True])
def test_a_bad_tolerance_is_refused(bad):
    p, _, _ = doubled()
    with pytest.raises(netsor.HyperParameterError, match="tolerance"):
        netsor.degeneracies(p, X, tolerance=bad)


# ------------------------------------------------------------------ command line
def test_kernel_explain_lists_the_program_and_the_degenerate_line(tmp_path, capsys):
    Xs = np.random.default_rng(1).standard_normal((3, 3, 4))
    Xs[:, 2] = Xs[:, 0] + 0.5 * Xs[:, 1]
    np.save(tmp_path / "X.npy", Xs)
    args = ["kernel", "rnn", "--depth", "3", "--inputs", str(tmp_path / "X.npy"), "--out", str(tmp_path / "K.npy")]
    out = run_ok([*args, "--explain"], capsys)
    assert netsor.zoo.rnn(3, "tanh", 1.0, 1.0, 0.0).pretty() in out
    assert "degenerate MatMul lines (limiting conditional variance <= 1e-10 of the variance at every input): 1" in out
    assert "U @ x2 = 1*g1 + 0.5*g4  [rewritten as a LinComb]" in out
    K_explained = np.load(tmp_path / "K.npy")
    run_ok(args, capsys)
    np.testing.assert_allclose(K_explained, np.load(tmp_path / "K.npy"), rtol=0, atol=1e-14)


def test_kernel_explain_without_degeneracy(capsys):
    out = run_ok(["kernel", "mlp", "--depth", "2", "--random", "3,4", "--explain", "--ntk"], capsys)
    assert "program mlp" in out and "W1 @ h2" in out
    assert "at every input): none" in out and "NTK (3, 3)" in out


def test_kernel_explain_is_a_flag(capsys):
    assert "--explain" in run_error(["kernel", "mlp", "--random", "3,4", "--explain=yes"], capsys)


JOINT_OF_DOUBLED = {  # a function of (a, b = 2a), and the same function of a alone
    "relu(a)·relu(b)": (lambda a, b: netsor.relu(a) * netsor.relu(b), lambda a: 2.0 * netsor.relu(a) * netsor.relu(a)),
    "step(b)·a": (lambda a, b: netsor.step(b) * a, netsor.relu),
    "relu(b − 2a)·a + relu(a)": (lambda a, b: netsor.relu(b - 2.0 * a) * a + netsor.relu(a), netsor.relu),
}


def _readout_of_doubled(fn, *, doubled_argument: bool) -> netsor.Program:
    p = netsor.Program()
    n = p.dim("n")
    h = netsor.relu(p.input(n, sigma=1.0))
    W = p.matrix(n, n, sigma=1.3)
    a = W @ h
    p.readout(fn(a, W @ (2.0 * h)) if doubled_argument else fn(a))
    return p


@pytest.mark.parametrize("joint", sorted(JOINT_OF_DOUBLED))
def test_joint_terms_of_a_degenerate_pair_have_the_kernel_of_their_one_argument_form(joint):
    """``b = W(2h) = 2a`` in the limit: functions of (a, b) are functions of a alone — relu(a)·relu(2a) =
    2 relu(a)², step(2a)·a = relu(a), relu(0)·a + relu(a) = relu(a). The joint terms' tied step forms made
    singular orthants, whose rounding was amplified into bounds of 47× the kernel (refused at every
    rtol); the cone forms are now written in ``a`` alone where ``b = 2a`` at every point."""
    of_pair, of_one = JOINT_OF_DOUBLED[joint]
    K, E = netsor.limit(_readout_of_doubled(of_pair, doubled_argument=True), X).nngp(with_error=True)
    K_ref, E_ref = netsor.limit(_readout_of_doubled(of_one, doubled_argument=False), X).nngp(with_error=True)
    assert np.all(np.abs(K - K_ref) <= E + E_ref + 1e-14)
    assert np.max(E) <= 1e-9 * np.max(np.abs(K))


def test_a_jump_on_a_degenerate_pair_sees_the_tie_in_every_rule():
    """``where(b > 2a, a, a/2)`` with ``b = 2a``, through a function the tracer cannot see (randomised
    QMC over the whitened arguments): the whitened row of b is exactly 2× that of a, so every node takes
    ``a/2`` — the kernel is ¼ of a's, within the QMC bound (the eigensolver's rows put the nodes on a
    rounding-chosen side of the jump)."""
    def opaque(u, v):
        u, v = np.asarray(u), np.asarray(v)  # np.asarray stops the tracer
        return np.where(v > 2.0 * u, u, 0.5 * u)

    p = _readout_of_doubled(lambda a, b: netsor.nonlin(opaque, a, b, name="opaque_where"), doubled_argument=True)
    q = _readout_of_doubled(lambda a: a, doubled_argument=False)
    K, E = netsor.limit(p, X, rtol=1e-3).nngp(with_error=True)
    K_a = netsor.nngp(q, X)
    assert np.all(np.abs(K - 0.25 * K_a) <= E + 1e-14)


def test_a_rewrite_at_a_tolerance_that_would_change_the_kernel_is_refused():
    """At tolerance 0.6, W·tanh(a) was rewritten as 0.723·W·relu(a) (not degenerate) and the NNGP changed by
    20 %; rewrites now take tolerances up to 1e-6 (detection, netsor.degeneracies, any in (0, 1])."""
    q = netsor.Program()
    m = q.dim("n")
    a = q.input(m)
    W = q.matrix(m, m)
    q.readout(netsor.relu(W @ netsor.relu(a) + W @ netsor.tanh(a)))
    X = np.random.default_rng(0).standard_normal((4, 3))
    with pytest.raises(netsor.HyperParameterError, match="tolerance"):
        netsor.rewrite_degenerate(q, X, tolerance=0.6)
    assert netsor.degeneracies(q, X, tolerance=0.6)  # nearly degenerate at that looseness: reported, not rewritten
    new, _, found = netsor.rewrite_degenerate(q, X)
    assert not found
    np.testing.assert_array_equal(netsor.nngp(new, X), netsor.nngp(q, X))
