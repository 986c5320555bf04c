"""Statistical tests of the finite-width interpreter (dense and matrix-free samplers).

Every tolerance is a number of standard errors computed from the samples themselves
(4 SE unless stated); all runs are seeded, so a test either always passes or always fails.
"""

from __future__ import annotations

import numpy as np
import pytest
from programs import weight_sharing

import netsor
from netsor.interpret.finite import block_size, network_bytes, resolve_widths
from netsor.interpret.forward import ForwardPlan

Z_MAX = 4.0


# ---- programs ------------------------------------------------------------------------------------
def shared_weights(scale: float = 1.0) -> netsor.Program:
    """One matrix W used on two different vectors (weight sharing inside a layer)."""
    return weight_sharing(scale).p


def mlp3(scale: float = 1.0) -> netsor.Program:
    return netsor.zoo.mlp(3, "relu", scale * 2**0.5, 0.1)


def rnn3(scale: float = 1.0) -> netsor.Program:
    return netsor.zoo.rnn(3, "tanh", scale * 1.2, 1.0, 0.1)


def transposed(scale: float = 1.0) -> netsor.Program:
    """``W : m × n`` (``m = n/2``) used on both sides, nonlinearly: ``c = W(Wᵀ tanh(W relu(g)) + g)``."""
    p = netsor.Program("transposed")
    n, m = p.dim("n"), p.dim("m", ratio=0.5)
    g = p.input(n, sigma=1.0, bias=0.1)
    W = p.matrix(m, n, sigma=scale * 1.2)
    b = W.T @ netsor.tanh(W @ netsor.relu(g))
    p.readout(netsor.relu(W @ (b + g)), sigma=1.0)
    return p


def flat_inputs(B: int, d: int = 5, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((B, d))


def seq_inputs(B: int, T: int, d: int = 4, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((B, T, d))


# ---- statistics ----------------------------------------------------------------------------------
def mean_and_se(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sample mean over axis 0 and its standard error (across-network std / √S)."""
    return x.mean(0), x.std(0, ddof=1) / np.sqrt(x.shape[0])


def moments_with_se(x: np.ndarray) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Mean, variance and kurtosis m4/m2² of each column, with delta-method standard errors.

    The SE of a smooth statistic T = f(sample moments) is std(IF(x))/√N with IF the
    influence function: mean → x−μ; variance → (x−μ)² − m2; kurtosis →
    [(x−μ)⁴ − m4 − 4 m3 (x−μ)]/m2² − 2 m4/m2³ [(x−μ)² − m2].
    """
    N = x.shape[0]
    mu = x.mean(0)
    c = x - mu
    m2, m3, m4 = (c**2).mean(0), (c**3).mean(0), (c**4).mean(0)
    influence = {
        "mean": (mu, c),
        "var": (m2, c**2 - m2),
        "kurtosis": (m4 / m2**2, (c**4 - m4 - 4 * m3 * c) / m2**2 - 2 * m4 / m2**3 * (c**2 - m2)),
    }
    return {k: (est, inf.std(0, ddof=1) / np.sqrt(N)) for k, (est, inf) in influence.items()}


def law_features(run: netsor.FiniteRun) -> np.ndarray:
    """Per network: the outputs and the upper triangle of K̂, shape (S, m + m(m+1)/2)."""
    iu = np.triu_indices(run.kernels.shape[1])
    return np.concatenate([run.outputs, run.kernels[:, iu[0], iu[1]]], axis=1)


def two_sample_z(fa: np.ndarray, fb: np.ndarray) -> dict[str, np.ndarray]:
    """Two-sample z-scores of mean, variance and kurtosis of every feature column."""
    a, b = moments_with_se(fa), moments_with_se(fb)
    return {k: (a[k][0] - b[k][0]) / np.hypot(a[k][1], b[k][1]) for k in a}


def max_abs_z(z: dict[str, np.ndarray]) -> float:
    return float(max(np.max(np.abs(v)) for v in z.values()))


# ---- E K̂ = NNGP at large width ----------------------------------------------------------------------
ZOO_CASES = [
    (arch, act)
    for arch in ("mlp", "resnet", "rnn")
    for act in ("relu", "tanh", "erf")
]


def zoo_program(arch: str, act: str) -> tuple[netsor.Program, np.ndarray]:
    if arch == "mlp":
        return netsor.zoo.mlp(3, act, 1.4, 0.1), flat_inputs(4)
    if arch == "resnet":
        return netsor.zoo.resnet(2, act, 1.0, 0.1), flat_inputs(4)
    return netsor.zoo.rnn(4, act, 1.2, 1.0, 0.1, 1.0), seq_inputs(2, 4)


@pytest.mark.parametrize("arch, act", ZOO_CASES)
def test_mean_empirical_kernel_matches_nngp(arch, act):
    """Mean over S = 400 networks of K̂ at width 2048 (matrix-free) is the NNGP within 4 SE.

    E K̂ − K = O(1/n) is neglected here; test_finite_width_bias_is_negligible checks that claim.
    """
    program, X = zoo_program(arch, act)
    run = netsor.run_finite(program, X, width=2048, samples=400, seed=11, method="matrix-free",
                            return_kernels=True)
    K = netsor.nngp(program, X)
    mean, se = mean_and_se(run.kernels)
    assert run.kernels.shape == (400, *K.shape)
    assert np.all(se > 0)
    z = (mean - K) / se
    assert np.max(np.abs(z)) < Z_MAX, np.round(z, 2)
    # the outputs' second moment agrees too (noisier: one Gaussian draw per network)
    y = run.outputs
    prod_mean, prod_se = mean_and_se(y[:, :, None] * y[:, None, :])
    assert np.max(np.abs((prod_mean - K) / prod_se)) < Z_MAX


def test_mean_empirical_kernel_matches_nngp_dense():
    """Dense reference sampler at width 2048 with only S = 30 networks (t₂₉ at 4: p ≈ 4e-4)."""
    program, X = netsor.zoo.mlp(2, "relu", 1.4, 0.1), flat_inputs(3, seed=3)
    run = netsor.run_finite(program, X, width=2048, samples=30, seed=5, method="dense",
                            return_kernels=True)
    mean, se = mean_and_se(run.kernels)
    z = (mean - netsor.nngp(program, X)) / se
    assert np.max(np.abs(z)) < Z_MAX, np.round(z, 2)


def test_finite_width_bias_is_negligible():
    """The claim behind the tests above: |E K̂ − K| at n = 2048 is far below their SE.

    The bias is O(1/n): measure it at n = 32 with many networks, where it is detectable,
    and scale it (plus 4 of its SE) by 32/2048. That bound, in units of the SE of the
    n = 2048, S = 400 test of the same program, is the most the bias can shift its z-scores;
    a shift below 0.5 keeps the false-alarm rate of a 4-SE test below 3e-4 per entry
    (P(|Z + 0.5| > 4) ≈ 2.3e-4, against 6.3e-5 without bias).
    """
    program, X = netsor.zoo.mlp(3, "relu", 1.4, 0.1), flat_inputs(4)
    K = netsor.nngp(program, X)
    small = netsor.run_finite(program, X, width=32, samples=40_000, seed=2, method="matrix-free",
                              return_kernels=True)
    bias32, se32 = mean_and_se(small.kernels)
    bias32 = bias32 - K
    # at n = 32 the O(1/n) bias is real and visible (relu MLP, depth 3)
    assert np.max(np.abs(bias32 / se32)) > Z_MAX
    bound2048 = (np.abs(bias32) + Z_MAX * se32) * 32 / 2048
    large = netsor.run_finite(program, X, width=2048, samples=400, seed=11, method="matrix-free",
                              return_kernels=True)
    _, se2048 = mean_and_se(large.kernels)
    assert np.max(bound2048 / se2048) < 0.5


# ---- matrix-free = dense in law at tiny widths ----------------------------------------------------------
LAW_CASES = [
    ("mlp", mlp3, flat_inputs(2, d=3, seed=1)),
    ("rnn", rnn3, seq_inputs(2, 3, d=3, seed=1)),
    ("shared", shared_weights, flat_inputs(2, d=3, seed=1)),
    ("transposed", transposed, flat_inputs(2, d=3, seed=1)),
]
S_LAW = 40_000


def law_sample(factory, X, width, seed, method, scale=1.0, samples=S_LAW):
    run = netsor.run_finite(factory(scale), X, width=width, samples=samples, seed=seed, method=method,
                            return_kernels=True)
    return law_features(run)


@pytest.mark.parametrize("width", [4, 8])
@pytest.mark.parametrize("name, factory, X", LAW_CASES, ids=[c[0] for c in LAW_CASES])
def test_matrix_free_equals_dense_in_law(name, factory, X, width):
    """Mean, variance and kurtosis of the outputs and of every K̂ entry agree between
    40 000 matrix-free and 40 000 dense networks (independent seeds), two-sample z < 4."""
    mf = law_sample(factory, X, width, 101, "matrix-free")
    dense = law_sample(factory, X, width, 202, "dense")
    z = two_sample_z(mf, dense)
    assert max_abs_z(z) < Z_MAX, {k: np.round(v, 2) for k, v in z.items()}


@pytest.mark.slow
@pytest.mark.parametrize("name, factory, X", LAW_CASES, ids=[c[0] for c in LAW_CASES])
def test_law_comparison_has_power(name, factory, X):
    """The same statistic flags wrong samplers at width 4: matrix-free at width 6 instead
    of 4, and dense with every matrix sigma 10 % too large."""
    dense = law_sample(factory, X, 4, 202, "dense")
    wrong_width = law_sample(factory, X, 6, 101, "matrix-free")
    assert max_abs_z(two_sample_z(wrong_width, dense)) > Z_MAX
    mf = law_sample(factory, X, 4, 101, "matrix-free")
    wrong_sigma = law_sample(factory, X, 4, 303, "dense", scale=1.1)
    assert max_abs_z(two_sample_z(mf, wrong_sigma)) > Z_MAX


def test_delta_method_standard_errors_are_calibrated():
    """The delta-method SEs used above match the spread over 24 independent replicates of
    40 000 width-4 MLP networks (the heaviest tails of the three programs): the ratio
    replicate-std / RMS(SE) lies in 1 ± 0.6 (the std of 24 values has a relative SE of
    ≈ 1/√46 ≈ 0.15; 0.6 is 4 of those). At 5 000 networks the kurtosis SE is ≈ 2× too small
    (8th moments of heavy-tailed K̂), which is why the law tests use 40 000."""
    X = flat_inputs(2, d=3, seed=1)
    est: dict[str, list] = {"mean": [], "var": [], "kurtosis": []}
    se: dict[str, list] = {k: [] for k in est}
    for seed in range(24):
        m = moments_with_se(law_sample(mlp3, X, 4, 5000 + seed, "matrix-free"))
        for k in est:
            est[k].append(m[k][0])
            se[k].append(m[k][1])
    for k in est:
        ratio = np.std(est[k], axis=0, ddof=1) / np.sqrt(np.mean(np.square(se[k]), axis=0))
        assert np.all(np.abs(ratio - 1) < 0.6), (k, np.round(ratio, 2))


# ---- determinism and chunking ---------------------------------------------------------------------------
def test_same_seed_same_outputs_and_different_seed_different():
    program, X = mlp3(), flat_inputs(3)
    for method in ("matrix-free", "dense"):
        a = netsor.sample(program, X, width=16, samples=20, seed=4, method=method)
        b = netsor.sample(program, X, width=16, samples=20, seed=4, method=method)
        c = netsor.sample(program, X, width=16, samples=20, seed=5, method=method)
        assert np.array_equal(a, b)
        assert not np.any(a == c)


def test_matrix_free_results_do_not_depend_on_chunking():
    """Width 4096, B = 8: blocks of 32 networks, so S = 100 spans 4 blocks (the last one
    partial); memory budgets giving 1, 2 and all blocks per chunk give identical results."""
    program, X = mlp3(), flat_inputs(8)
    sizes = resolve_widths(program, 4096, X.shape[1])
    assert block_size("matrix-free", 8, sizes) == 32
    per_net = network_bytes("matrix-free", ForwardPlan(program), 8, sizes)
    assert per_net > 2**20  # so that a budget of one network is a valid budget
    h = program.outputs[0][1][0]
    runs = [netsor.run_finite(program, X, width=4096, samples=100, seed=9, method="matrix-free",
                              memory_budget=budget, return_kernels=True, vectors=[h])
            for budget in (2**30, per_net, 64 * per_net + 1)]  # all blocks, one, two per chunk
    for run in runs[1:]:
        assert np.array_equal(run.outputs, runs[0].outputs)
        assert np.array_equal(run.kernels, runs[0].kernels)
        assert np.array_equal(run.vectors[h], runs[0].vectors[h])
    # a block's draws do not depend on how many networks follow it
    head = netsor.sample(program, X, width=4096, samples=32, seed=9, method="matrix-free")
    assert np.array_equal(head, runs[0].outputs[:32])
    assert np.array_equal(netsor.sample(program, X, width=4096, samples=100, seed=9, method="matrix-free",
                                        memory_budget=per_net), runs[0].outputs)


def test_dense_results_do_not_depend_on_chunking():
    program, X = rnn3(), seq_inputs(3, 3)
    sizes = resolve_widths(program, 400, X.shape[-1])
    per_net = network_bytes("dense", ForwardPlan(program), 3, sizes)
    assert per_net > 2**20  # so that a budget of one network is a valid budget
    budgets = (2**30, per_net, 3 * per_net + 1)  # all networks, one, three per chunk
    runs = [netsor.run_finite(program, X, width=400, samples=10, seed=3, method="dense",
                              memory_budget=b, return_kernels=True) for b in budgets]
    for run in runs[1:]:
        assert np.array_equal(run.outputs, runs[0].outputs)
        assert np.array_equal(run.kernels, runs[0].kernels)


def test_a_recurrence_evaluates_each_activation_once_per_step():
    """A NonLin's expression inlines those of the H-vectors it reads (``h_t = f(g_t) (1 + h_{t−1}/2)`` inlines every
    earlier step): the forward executor takes the values of those still held instead of evaluating them again, so T
    steps call f T times per chunk, not T(T + 1)/2 (the simulated GRU of 10 steps: 5× fewer erf calls, 10.6 → 5.7 s,
    the same kernel to the last bit). A state the tracer flattens into the next (``f(g) + h/2``: one sum of all
    steps) has no node of its own and is evaluated again."""
    calls = [0]

    def counted(x):
        calls[0] += 1
        return np.tanh(x)

    f = netsor.activation(counted, deriv=lambda x: 1.0 - np.tanh(x) ** 2, name="counted_tanh")

    def recurrence(steps):
        p = netsor.Program()
        n = p.dim("n")
        W = p.matrix(n, n, sigma=0.9)
        h = netsor.nonlin(lambda g: f(g), p.input(n, sigma=1.0))
        for _ in range(steps - 1):
            h = netsor.nonlin(lambda g, prev: f(g) + 0.5 * f(g) * prev, W @ h, h)
        p.readout(h)
        return p

    X = np.random.default_rng(0).standard_normal((3, 4))
    counts = {}
    for steps in (4, 8):
        program = recurrence(steps)
        calls[0] = 0
        netsor.sample(program, X, width=64, samples=8, seed=1)
        counts[steps] = calls[0]
    assert counts[8] <= 2 * counts[4] + 2  # linear in the steps (quadratic: 36/10 = 3.6×)
