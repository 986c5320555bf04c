"""Positive homogeneity in the data, and kernels of exactly colinear inputs.

A kernel entry of two colinear inputs ``x`` and ``s·x`` sits at correlation 1, where step kernels
are only ½-Hölder: computed from the pair's covariances, rounding-level input errors gave bounds
of 8.5e-3 at depth 3 (a step MLP's NNGP) and refused ReLU NTKs at the default rtol. For networks
that are positively homogeneous in the data the entry is exactly ``s^k`` times the per-point one.
"""

from fractions import Fraction

import numpy as np
import pytest
from references import abs_kernel, pairwise, relu_kernel, relu_mlp_kernels_by_mpmath, step_kernel

import netsor
from netsor.interpret.finite import run_finite
from netsor.ir.homogeneity import input_degrees, input_parities, input_scaling
from netsor.linalg import colinear_rows, identical_rows, mirror_tile, mirror_upper


def _exactly_colinear(x, y):
    """Reference in rational arithmetic: y = s·x for a real s > 0 (both non-zero)."""
    fx, fy = [Fraction(float(v)) for v in x], [Fraction(float(v)) for v in y]
    k = next((i for i, v in enumerate(fx) if v != 0), None)
    if k is None or fy[k] == 0:
        return False
    s = fy[k] / fx[k]
    return s > 0 and all(b == s * a for a, b in zip(fx, fy, strict=True))


def test_colinear_rows_agree_with_exact_rational_arithmetic():
    rng = np.random.default_rng(5)
    base = np.vstack([rng.integers(-4, 5, size=(6, 5)).astype(float), rng.standard_normal((6, 5))])
    scales = [2.0, 0.5, 1 / 3, 3.0, 0.3, -2.0, 1.0 + 2.0 ** -52, 7.25]
    rows = [base] + [s * base[rng.permutation(len(base))[:4]] for s in scales]
    A = np.vstack(rows + [np.zeros((1, 5))])
    B = A[rng.permutation(len(A))]
    ii, jj, s = colinear_rows(A, B)
    found = set(zip(ii.tolist(), jj.tolist(), strict=True))
    want = {(i, j) for i in range(len(A)) for j in range(len(B))
            if A[i].tobytes() != B[j].tobytes() and _exactly_colinear(A[i], B[j])}
    assert found == want
    assert len(want) > 20  # integer rows times 2, 1/2, 3, 7.25, and exactly scaled floats
    for i, j, r in zip(ii, jj, s, strict=True):
        k = np.flatnonzero(A[i])[0]
        assert r == B[j, k] / A[i, k] and r > 0


def test_colinear_rows_of_one_set_with_itself():
    """``colinear_rows(A, A)`` (one input set: every row its own byte-identical candidate) finds
    exactly the colinear pairs of distinct rows, both ways round, and no row with itself."""
    rng = np.random.default_rng(6)
    base = rng.integers(-3, 4, size=(5, 4)).astype(float)
    A = np.vstack([base, 2.0 * base[:2], -0.5 * base[3:4], base[:1], np.zeros((1, 4)), rng.standard_normal((3, 4))])
    ii, jj, _ = colinear_rows(A, A, negative=True)
    found = set(zip(ii.tolist(), jj.tolist(), strict=True))
    want = {(i, j) for i in range(len(A)) for j in range(len(A))
            if A[i].tobytes() != A[j].tobytes() and (_exactly_colinear(A[i], A[j]) or _exactly_colinear(A[i], -A[j]))}
    assert found == want and len(want) >= 6


@pytest.mark.parametrize("one_set", [True, False])
def test_identical_rows_are_all_byte_identical_pairs_in_order(one_set):
    """Every pair of byte-identical rows (repeats, -0.0 apart from 0.0, NaN rows equal to themselves),
    ``i`` ascending then ``j`` — against the pairwise definition."""
    rng = np.random.default_rng(7)
    A = rng.integers(-1, 2, size=(40, 3)).astype(float)
    A[3, 0], A[5] = -0.0, np.nan
    B = A if one_set else np.vstack([A[rng.permutation(40)[:25]], rng.integers(-1, 2, size=(10, 3))])
    want = [(i, j) for i in range(len(A)) for j in range(len(B)) if A[i].tobytes() == B[j].tobytes()]
    ii, jj = identical_rows(A, B)
    assert list(zip(ii.tolist(), jj.tolist(), strict=True)) == want
    assert len(want) > len(A) // 2  # the small integer alphabet repeats rows


def test_mirror_upper_copies_the_upper_triangle_across_tiles():
    A = np.random.default_rng(8).standard_normal((300, 300))
    want = np.triu(A) + np.triu(A, 1).T
    assert np.array_equal(mirror_upper(A.copy(), tile=64), want)
    assert np.array_equal(mirror_upper(A.copy()), want)


def test_mirroring_the_tiles_of_the_upper_triangle_one_by_one_is_the_whole_mirror():
    """Tiles of unequal sizes on and above the diagonal (as the pair grid's last row and column of
    tiles), each mirrored on its own, in any order, leave the symmetric matrix of the upper triangle."""
    A = np.random.default_rng(9).standard_normal((300, 300))
    want = np.triu(A) + np.triu(A, 1).T
    spans = [slice(0, 128), slice(128, 256), slice(256, 300)]
    tiles = [(rows, cols) for i, rows in enumerate(spans) for cols in spans[i:]]
    for order in (tiles, tiles[::-1]):
        B = A.copy()
        for rows, cols in order:
            mirror_tile(B, rows, cols, tile=64)
        assert np.array_equal(B, want)


def test_colinear_rows_of_sequences_scale_the_whole_sequence():
    X = np.random.default_rng(0).standard_normal((2, 3, 4))
    X2 = np.stack([2 * X[0], X[1] * np.array([1.0, 2.0, 1.0])[:, None]])
    ii, jj, s = colinear_rows(X, X2)
    assert ii.tolist() == [0] and jj.tolist() == [0] and s.tolist() == [2.0]


PROGRAMS = {
    "mlp relu": lambda: netsor.zoo.mlp(3, "relu", 1.3),
    "mlp step": lambda: netsor.zoo.mlp(2, "step", 1.3),
    "mlp abs": lambda: netsor.zoo.mlp(2, "abs", 1.3),
    "mlp relu, biases": lambda: netsor.zoo.mlp(2, "relu", 1.3, 0.4),
    "resnet": lambda: netsor.zoo.resnet(2, "relu", 1.1),
    "layernorm mlp": lambda: netsor.zoo.layernorm_mlp(2, "relu", 1.2),
    "cnn": lambda: netsor.zoo.cnn(2, length=3),
    "rnn tanh": lambda: netsor.zoo.rnn(3),
}


@pytest.mark.parametrize("name", PROGRAMS)
def test_input_degrees_and_parities_hold_draw_by_draw_at_finite_width(name):
    """Every vector the analysis gives a degree k satisfies v(s·X) = s^k v(X) for the same weights
    (dense sampler, same seed), and with a parity π also v(−s·X) = (−1)^π s^k v(X); in a program
    with biases some vector has no degree, and indeed is not homogeneous (the analysis is not
    vacuous); abs and tanh networks have parities, relu networks beyond the first layer none."""
    p = PROGRAMS[name]()
    degrees, parities = input_degrees(p), input_parities(p)
    vectors = [ln.out for ln in p.lines if ln.out.kind in ("G", "H")]
    rng = np.random.default_rng(1)
    shape = (2, p.steps, 3) if p.steps else (2, 3, 3) if name == "cnn" else (2, 4)
    X = rng.standard_normal(shape)
    s = 2.5
    at = [run_finite(p, scale * X, width=16, samples=2, seed=7, method="dense", vectors=vectors).vectors
          for scale in (1.0, s, -s)]
    for v in vectors:
        lam = input_scaling(p, v, np.array([s, -s]))
        for k, got in enumerate(at[1:]):
            if np.isfinite(lam[k]):
                np.testing.assert_allclose(got[v], lam[k] * at[0][v], rtol=1e-12, atol=1e-300, err_msg=v.name)
    none = [v for v in vectors if degrees[v] is None]
    if name in ("mlp relu, biases", "rnn tanh"):
        assert none and not any(np.allclose(at[1][v], s * at[0][v]) for v in none)
    else:
        assert not none
    with_parity = {v.name for v in vectors if parities[v] is not None}
    if name in ("mlp abs", "rnn tanh"):
        assert with_parity == {v.name for v in vectors}
    if name == "mlp relu":
        assert with_parity == {vectors[0].name}  # U x only


C_PHI = {"relu": 0.5, "leaky_relu": (1 + 0.01 ** 2) / 2, "abs": 1.0, "step": 0.5}  # E φ(√q z)² / q^deg
DEGREE = {"relu": 1, "leaky_relu": 1, "abs": 1, "step": 0}


def _textbook_diagonal(act, depth, sigma_w, x):
    """K(x, x) of the bias-free MLP: q¹ = σ²|x|²/d, qˡ⁺¹ = σ² c_φ (qˡ)^deg, output σ² c_φ q^deg."""
    q = sigma_w ** 2 * x @ x / x.size
    for _ in range(depth):
        q = sigma_w ** 2 * C_PHI[act] * q ** DEGREE[act]
    return q


@pytest.mark.parametrize("act", ["relu", "step", "leaky_relu", "abs"])
@pytest.mark.parametrize("depth", [1, 3, 5])
def test_exactly_colinear_inputs_of_homogeneous_networks_meet_the_default_rtol(act, depth):
    """x with 2x and with x/3 (exact: integer rows), and a cross kernel against 2·X: the NNGP entries
    equal s^k times the textbook diagonal, the NTK entries s^k times its own diagonal, within bounds
    that meet the default rtol (the step kernel's conditioning at correlation 1 refused these)."""
    rng = np.random.default_rng(2)
    x, z = rng.standard_normal((2, 4))
    X = np.stack([x, 2 * x, z, [3.0, 6.0, -3.0, 1.5], [1.0, 2.0, -1.0, 0.5]])
    sigma_w = 1.3
    k = netsor.kernel(netsor.zoo.mlp(depth, act, sigma_w), X)
    deg = DEGREE[act]
    for i, j, s in [(0, 1, 2.0), (3, 4, 1 / 3)]:
        want = s ** deg * _textbook_diagonal(act, depth, sigma_w, X[i])
        assert abs(k.nngp[i, j] - want) <= k.nngp_error[i, j] + 1e-14 * want
        assert k.nngp_error[i, j] <= 1e-8 * np.sqrt(k.nngp[i, i] * k.nngp[j, j])
        assert abs(k.ntk[i, j] - s ** deg * k.ntk[i, i]) <= k.ntk_error[i, j] + s ** deg * k.ntk_error[i, i] \
            + 1e-14 * k.ntk[i, i]
    cross = netsor.ntk(netsor.zoo.mlp(depth, act, sigma_w), X[:3], 2 * X[:3])
    np.testing.assert_allclose(np.diag(cross), 2.0 ** deg * np.diag(k.ntk)[:3], rtol=1e-12)


def test_colinear_inputs_of_a_network_with_biases_are_not_rescaled():
    """With biases the network is not homogeneous: K(x, 2x) is a genuine pair entry — equal to the
    textbook arc-cosine recursion, and far from 2 K(x, x)."""
    x = np.random.default_rng(4).standard_normal(4)
    X = np.stack([x, 2 * x])
    sigma_w, sigma_b, depth = 1.3, 0.5, 3
    K = netsor.nngp(netsor.zoo.mlp(depth, "relu", sigma_w, sigma_b), X)
    ref = sigma_w ** 2 * X @ X.T / X.shape[1] + sigma_b ** 2
    for _ in range(depth):
        ref = sigma_w ** 2 * relu_kernel(*pairwise(ref)) + sigma_b ** 2
    np.testing.assert_allclose(K, ref, rtol=1e-12)
    assert abs(K[0, 1] - 2 * K[0, 0]) > 1e-2 * K[0, 0]


def _textbook_nngp_ntk(X, depth, sigma_w, kernel, derivative):
    """NNGP and NTK of a bias-free MLP by the textbook recursion (readout σ_w): Θ¹ = K¹ = σ²XXᵀ/d,
    Kˡ⁺¹ = σ² k(Kˡ), Θˡ⁺¹ = Kˡ⁺¹ + σ² k'(Kˡ) Θˡ."""
    K = sigma_w ** 2 * X @ X.T / X.shape[1]
    theta = K.copy()
    for _ in range(depth):
        K, theta = sigma_w ** 2 * kernel(*pairwise(K)), sigma_w ** 2 * kernel(*pairwise(K)) \
            + sigma_w ** 2 * derivative(*pairwise(K)) * theta
    return K, theta


@pytest.mark.parametrize("act", ["relu", "step", "abs"])
@pytest.mark.parametrize("depth", [1, 2, 4])
def test_anti_colinear_inputs_meet_the_default_rtol(act, depth):
    """x and −x: the first layer's forms sit at correlation exactly −1, where the step kernel (the
    NNGP of step, relu's NTK) is only ½-Hölder: bounds of 2e-8 to 0.18 relative were refused at
    rtol 1e-8. The forms' correlation is now known exactly (the first layer is odd in the data),
    and abs networks are even beyond it (K(x, −x) = K(x, x)). Against the textbook recursion
    (exact at ρ = −1: the angle is atan2(√(ab − c²), c) with c = −a bitwise)."""
    rng = np.random.default_rng(8)
    x, z = rng.standard_normal((2, 4))
    X = np.stack([x, -x, z])
    sigma_w = 1.3
    k = netsor.kernel(netsor.zoo.mlp(depth, act, sigma_w), X)
    kernel = {"relu": relu_kernel, "step": step_kernel, "abs": abs_kernel}[act]
    derivative = {"relu": step_kernel, "step": lambda a, b, c: 0.0 * c,
                  "abs": lambda a, b, c: 1.0 - 2.0 * np.arccos(c / np.sqrt(a * b)) / np.pi}[act]
    K, theta = _textbook_nngp_ntk(X, depth, sigma_w, kernel, derivative)
    scale = np.sqrt(np.outer(np.diag(K), np.diag(K)))
    assert np.all(np.abs(k.nngp - K) <= k.nngp_error + 1e-13 * scale)
    scale_ntk = np.sqrt(np.outer(np.diag(theta), np.diag(theta)))
    assert np.all(np.abs(k.ntk - theta) <= k.ntk_error + 1e-13 * scale_ntk)
    assert k.ntk_error[0, 1] <= 1e-8 * scale_ntk[0, 1]
    if act == "abs":
        assert k.nngp[0, 1] == pytest.approx(k.nngp[0, 0], rel=1e-14)


def test_nearly_parallel_inputs_are_refused_with_the_reason_where_the_angle_is_below_rounding():
    """3·x is rounded, so x and 3·x are not exactly proportional: their angle (~1e-16) is below what the
    inputs' directions hold (~1e-15 absolute), and each step layer takes its square root — the true kernel of a
    depth-3 step MLP there differs from the colinear one by up to ~1e-3, and the honest bound is refused at the
    default rtol, saying why. A ReLU network's angle map is smooth there: its NTK at (x, 3x) is met, within its
    bound of the 40-digit recursion (it was refused too before the angles went through homogeneous layers)."""
    x = np.random.default_rng(3).standard_normal((3, 4))
    assert colinear_rows(x[1:2], 3 * x[1:2], negative=True)[0].size == 0
    with pytest.raises(netsor.NumericalError, match="inputs 1 and 3 are nearly but not exactly"):
        netsor.nngp(netsor.zoo.mlp(3, "step", 1.2), np.vstack([x, 3 * x[1:2]]))
    k = netsor.kernel(netsor.zoo.mlp(3, "relu", 1.2), x, 3 * x[1:2])
    _, T = relu_mlp_kernels_by_mpmath(np.vstack([x, 3 * x[1:2]]), 3, 1.2, 0.0)
    assert np.all(np.abs(k.ntk - T[:3, 3:]) <= k.ntk_error)
