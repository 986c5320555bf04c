"""Tests of the coupled (same-noise) finite/infinite execution."""

from __future__ import annotations

import numpy as np
import pytest
from programs import weight_sharing
from scipy import stats

import netsor

Z_MAX = 4.0


def shared_weights() -> netsor.Program:
    return weight_sharing().p


def flat_inputs(B: int, d: int = 5, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((B, d))


def seq_inputs(B: int, T: int, d: int = 4, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((B, T, d))


CASES = [
    ("mlp", lambda: netsor.zoo.mlp(3, "relu", 1.4, 0.1), flat_inputs(8)),
    ("resnet", lambda: netsor.zoo.resnet(2, "tanh", 1.0, 0.1), flat_inputs(4)),
    # d = 16 > B·T = 9 data vectors: no input line is in the span of earlier ones
    ("rnn", lambda: netsor.zoo.rnn(3, "tanh", 1.2, 1.0, 0.1), seq_inputs(3, 3, d=16)),
    ("shared", shared_weights, flat_inputs(4)),
]
IDS = [c[0] for c in CASES]


@pytest.mark.parametrize("name, factory, X", CASES, ids=IDS)
def test_finite_side_is_the_matrix_free_sampler(name, factory, X):
    """Draw for draw, across several blocks (width 4096, B = 8: blocks of 32) and chunkings."""
    program = factory()
    width, S = (4096, 100) if name == "mlp" else (64, 150)
    ref = netsor.sample(program, X, width=width, samples=S, seed=13, method="matrix-free")
    for budget in (2**30, 6 * 2**20):  # all networks in one chunk; one block per chunk
        run = netsor.coupled(program, X, width=width, samples=S, seed=13, memory_budget=budget)
        assert np.array_equal(run.outputs_finite, ref)
        assert run.degenerate == []
        assert run.widths["n"] == width
    assert not np.array_equal(run.outputs_limit, ref)


def test_costs_are_consistent_with_outputs():
    program, X = netsor.zoo.mlp(2, "relu", 1.4, 0.1), flat_inputs(3)
    run = netsor.coupled(program, X, width=128, samples=40, seed=1, p=1)
    assert np.allclose(run.output_costs, np.abs(run.outputs_finite - run.outputs_limit))
    assert run.distance() == pytest.approx(np.mean(run.output_costs))
    names = [name for name, _ in run.summary()]
    assert names[-1] == "outputs" and set(names[:-1]) == set(run.line_costs)
    for cost in run.line_costs.values():
        assert cost.shape == (40, 3) and np.all(cost >= 0)
    # the first layer U x is an exact Gaussian in both executions, drawn with the same noise: the two
    # draws differ by rounding only (coordinates are of order 1, a coupling cost of width 128 ~ 0.1)
    first = program.lines[1].out.name
    assert np.max(run.line_costs[first]) < 1e-12
    run2 = netsor.coupled(program, X, width=128, samples=40, seed=1, p=2)
    assert np.allclose(run2.output_costs, run.output_costs**2)
    assert run2.distance() == pytest.approx(np.sqrt(np.mean(run2.output_costs_expected)))


def test_expected_output_cost_is_the_conditional_mean_of_the_realised_cost():
    """output_costs_expected = E[|y_fin − y_lim|² | hidden]: the realised p = 2 cost minus it
    has mean 0 (z-test at 4 SE over 4000 networks)."""
    program, X = netsor.zoo.mlp(3, "relu", 1.4, 0.1), flat_inputs(3)
    run = netsor.coupled(program, X, width=16, samples=4000, seed=8)
    diff = run.output_costs - run.output_costs_expected
    z = diff.mean(0) / (diff.std(0, ddof=1) / np.sqrt(len(diff)))
    assert np.max(np.abs(z)) < Z_MAX, np.round(z, 2)
    assert np.all(run.output_costs_expected >= 0)


# ---- rate of the coupling distance -------------------------------------------------------------
WIDTHS = 64 * 2 ** np.arange(7)  # 64 .. 4096
REPLICATES = 10


def slope_ci(values: np.ndarray) -> tuple[float, float, float]:
    """Mean and 95 % t-interval of the per-replicate OLS slopes of log(value) on log(width)."""
    x = np.log(WIDTHS)
    slopes = np.polyfit(x, np.log(values).T, 1)[0]
    half = stats.t.ppf(0.975, len(slopes) - 1) * slopes.std(ddof=1) / np.sqrt(len(slopes))
    return float(slopes.mean()), float(slopes.mean() - half), float(slopes.mean() + half)


@pytest.mark.parametrize("name", ["mlp", "rnn"])
def test_coupling_distance_decays_like_inverse_sqrt_width(name):
    """Per replicate (own seed, S = 16 networks) the coupling distance of the last hidden
    vector and of the outputs at widths 64..4096 give one log-log slope each; the 95 % t-interval
    over 10 replicates must exclude 0 and lie within [−0.65, −0.35] (the theory says −1/2)."""
    factory, X = {c[0]: c[1:] for c in CASES}[name]
    program = factory()
    last = program.outputs[-1][1][0].name
    hidden = np.empty((REPLICATES, len(WIDTHS)))
    outputs = np.empty((REPLICATES, len(WIDTHS)))
    for r in range(REPLICATES):
        for j, n in enumerate(WIDTHS):
            run = netsor.coupled(program, X[:4], width=int(n), samples=16, seed=1000 * r + j)
            hidden[r, j] = run.distance(last)
            outputs[r, j] = run.distance()
    for values in (hidden, outputs):
        mean, lo, hi = slope_ci(values)
        assert hi < 0 and -0.65 <= lo and hi <= -0.35, (mean, lo, hi)


@pytest.mark.parametrize("name, factory, X", CASES[1:] + CASES[:1], ids=IDS[1:] + IDS[:1])
def test_limit_side_has_the_nngp_covariance(name, factory, X):
    """The limit outputs are exact N(0, K) draws at any width: the mean of y_i y_j over
    S = 4000 networks at width 32 is within 4 SE of the NNGP, and the kurtosis of each
    standardised output is 3 within 4 SE (delta-method SE, as in test_finite)."""
    program = factory()
    X = X[:4]
    run = netsor.coupled(program, X, width=32, samples=4000, seed=21)
    y = run.outputs_limit
    K = netsor.nngp(program, X)
    prod = y[:, :, None] * y[:, None, :]
    z = (prod.mean(0) - K) / (prod.std(0, ddof=1) / np.sqrt(len(y)))
    assert np.max(np.abs(z)) < Z_MAX, np.round(z, 2)
    c = y - y.mean(0)
    m2, m3, m4 = (c**2).mean(0), (c**3).mean(0), (c**4).mean(0)
    influence = (c**4 - m4 - 4 * m3 * c) / m2**2 - 2 * m4 / m2**3 * (c**2 - m2)
    zk = (m4 / m2**2 - 3) / (influence.std(0, ddof=1) / np.sqrt(len(y)))
    assert np.max(np.abs(zk)) < Z_MAX, np.round(zk, 2)


def transposed_programs():
    """``y = Wᵀ tanh(W v)`` without data (σ = 1.3), ``y = Wᵀ W g + W g`` with data, and
    ``y = Wᵀ tanh(W g)`` with data (its Ż has a different coefficient at every input)."""
    p = netsor.Program("nonlinear transpose")
    n = p.dim("n")
    W = p.matrix(n, n, sigma=1.3)
    p.readout(W.T @ netsor.tanh(W @ p.gaussian(n)), sigma=1.0)
    q = netsor.Program("linear transpose with data")
    m = q.dim("n")
    V = q.matrix(m, m, sigma=0.8)
    g = q.input(m, sigma=1.0)
    q.readout(V.T @ (V @ g) + V @ g, sigma=1.0)
    r = netsor.Program("nonlinear transpose with data")
    k = r.dim("n")
    U = r.matrix(k, k, sigma=1.3)
    r.readout(U.T @ netsor.tanh(U @ r.input(k, sigma=1.0)), sigma=1.0)
    X = np.random.default_rng(0).standard_normal((3, 4))
    return [(p, np.ones((1, 1))), (q, X), (r, X * [[0.5], [1.0], [2.0]])]


@pytest.mark.parametrize("case", [0, 1, 2], ids=["nonlinear-no-data", "linear-with-data", "nonlinear-with-data"])
def test_coupled_run_with_transposes_converges(case):
    """Netsor⊤: the limit world adds the engine's exact Ż (here ``σ² E[tanh'] Z^v``, ``σ² Z^g``,
    and ``σ² E[tanh'(Z^{Wg}_i)] Z^g_i`` per input i); the coupling distance of the transposed
    output falls like n^{-1/2}: ×4 from width 256 to 4096 in theory, ≥ 3 required over 100 networks
    (an Ż 5 % off leaves a floor: ×1.9 in the first case, ×2.9 in the third)."""
    program, X = transposed_programs()[case]
    name = program.outputs[-1][1][0].name
    d = {w: netsor.coupled(program, X, width=w, samples=100, seed=3).distance(name) for w in (256, 4096)}
    assert d[256] / d[4096] >= 3.0, d


def test_program_without_data_takes_no_inputs():
    """A program that reads no data runs coupled with ``X=None`` (one symbolic point), as the limit and
    the sampler take it (it raised "X must hold real numbers, got a object array"): draw for draw
    the run of an explicit one-point X; a program that reads data still says to pass X."""
    program = transposed_programs()[0][0]
    run = netsor.coupled(program, None, width=64, samples=4, seed=1)
    same = netsor.coupled(program, np.ones((1, 1)), width=64, samples=4, seed=1)
    np.testing.assert_array_equal(run.outputs_finite, same.outputs_finite)
    np.testing.assert_array_equal(run.outputs_limit, same.outputs_limit)
    with pytest.raises(netsor.InputError, match="reads the data point"):
        netsor.coupled(transposed_programs()[1][0], None, width=64, samples=4)


def test_repeated_matmul_is_degenerate():
    """``b = W h`` after ``a = W h``: b lies in the span of the past, so the limit executes it
    as the LinComb b = a (reported), the finite side gives b = a up to rounding, and the
    two lines have the same coupling cost."""
    p = netsor.Program()
    n = p.dim("n")
    g = p.input(n, sigma=1.0, bias=0.1)
    h = netsor.tanh(g)
    W = p.matrix(n, n, sigma=1.3)
    a = W @ h
    b = W @ h
    p.readout(a, b, sigma=1.0, bias=0.0)
    X = flat_inputs(3)
    run = netsor.coupled(p, X, width=64, samples=20, seed=2)
    assert run.degenerate == [b.name]
    np.testing.assert_allclose(run.line_costs[b.name], run.line_costs[a.name], rtol=1e-12)
    fin = run.outputs_finite.reshape(20, 3, 2)
    np.testing.assert_allclose(fin[..., 1], fin[..., 0], rtol=1e-12, atol=1e-14)
    # the limit outputs are √K-coloured noise with K singular (rows a and b equal): equal up to
    # the √eps error of a symmetric square root of a singular matrix
    lim = run.outputs_limit.reshape(20, 3, 2)
    np.testing.assert_allclose(lim[..., 1], lim[..., 0], rtol=0, atol=1e-6 * np.abs(lim).max())


def test_input_in_the_span_of_earlier_inputs_is_degenerate():
    """RNN with d = 4 < B·T: U x₂ is a linear combination of the U x₀, U x₁ already drawn
    (6 data vectors span R⁴), so that line, and only it, is reported."""
    program = netsor.zoo.rnn(3, "tanh", 1.2, 1.0, 0.1)
    expected = [ln.out.name for ln in program.lines
                if type(ln).__name__ == "MatMulLine" and ln.arg.name == "x2"]
    assert len(expected) == 1
    run = netsor.coupled(program, seq_inputs(3, 3, d=4), width=32, samples=8, seed=0)
    assert run.degenerate == expected
    run = netsor.coupled(program, seq_inputs(3, 3, d=16), width=32, samples=8, seed=0)
    assert run.degenerate == []


@pytest.mark.parametrize("bad", [0.5, 0.0, -1.0, float("nan"), float("inf"), "two", None])
def test_bad_p_raises(bad):
    with pytest.raises(netsor.HyperParameterError):
        netsor.coupled(netsor.zoo.mlp(2), flat_inputs(2), width=8, samples=2, p=bad)


def test_cost_exponents_whose_powers_overflow_are_refused():
    """p = 1e300 returned infinite distances; exponents are at most 64."""
    X = np.random.default_rng(0).standard_normal((5, 3))
    with pytest.raises(netsor.HyperParameterError, match="p must be <= 64"):
        netsor.coupled(netsor.zoo.mlp(2), X, width=4, samples=4, p=1e300)
