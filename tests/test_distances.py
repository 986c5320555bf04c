"""Known-answer and unbiasedness tests of netsor.distances.

The statistical tests use a model whose answer is known in closed form: a linear
hidden layer of width ``m`` with a Gaussian readout. Its conditional kernel is
``K̂ = HᵀH / m`` (rows of ``H`` iid ``N(0, K)``), so every projection ``θᵀy`` is
``σ_θ Z sqrt(V)`` with ``V ~ χ²_m / m``: a variance-gamma law with the closed-form
tail ``P(θᵀy/σ_θ > t) = e^{−√2 t}/2`` (``m = 2``, Laplace) and
``(2 + 2t) e^{−2t}/4`` (``m = 4``). Its sliced W1 to ``N(0, K)`` is
``w1(m) · mean_θ σ_θ`` with ``w1(m)`` computed below by scipy quadrature.
"""

from __future__ import annotations

import itertools

import numpy as np
import ot
import pytest
from scipy import integrate, optimize, stats

from netsor.errors import HyperParameterError, InputError, NetsorError, NumericalError
from netsor.stats.distances import (
    bures_w2,
    debias,
    debias_argument,
    gaussian_samples,
    median_bandwidth,
    mmd2_unbiased,
    noise_floor,
    random_directions,
    rb_mmd2,
    rb_sliced_w1,
    sliced_w1,
    sliced_w1_to_gaussian,
    w1_1d,
    w1_scale_mixture_to_gaussian,
    w1_to_gaussian,
    w2_pot,
)

K3 = np.array([[1.0, 0.5, 0.2], [0.5, 1.2, 0.3], [0.2, 0.3, 0.8]])
TAILS = {
    2: lambda t: 0.5 * np.exp(-np.sqrt(2.0) * t),
    4: lambda t: 0.25 * (2.0 + 2.0 * t) * np.exp(-2.0 * t),
}


def _mixture_w1(m: int) -> float:
    """W1 between the standardised variance-gamma law (width m) and N(0, 1), by quad,
    split at the sign changes of the CDF difference (the kinks of its absolute value)."""
    tail = TAILS[m]

    def diff(t):
        return stats.norm.sf(t) - tail(t)

    grid = np.linspace(1e-9, 60, 6001)
    vals = diff(grid)
    roots = [
        optimize.brentq(diff, a, b)
        for a, b, fa, fb in zip(grid[:-1], grid[1:], vals[:-1], vals[1:], strict=True)
        if fa * fb < 0
    ]
    edges = [0.0, *roots, 60.0]
    pieces = [
        integrate.quad(diff, a, b, epsabs=1e-14, epsrel=1e-12) for a, b in zip(edges[:-1], edges[1:], strict=True)
    ]
    assert max(err for _, err in pieces) < 1e-11
    return 2.0 * sum(abs(val) for val, _ in pieces)


def _draw(m: int, num: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Outputs Y (num, 3) and conditional kernels Khat (num, 3, 3) of num networks."""
    h = gaussian_samples(K3, num * m, seed=rng).reshape(num, m, 3)
    y = np.einsum("smd,sm->sd", h, rng.standard_normal((num, m))) / np.sqrt(m)
    return y, np.einsum("smd,sme->sde", h, h) / m


def _sigma_mean(dirs: np.ndarray) -> float:
    return float(np.sqrt(np.einsum("nd,de,ne->n", dirs, K3, dirs)).mean())


def _mean_sem(values: list[float]) -> tuple[float, float]:
    v = np.asarray(values)
    return float(v.mean()), float(v.std(ddof=1) / np.sqrt(len(v)))


# --------------------------------------------------------------------------- exact 1-D W1


def test_w1_1d_matches_pot_equal_and_unequal_sizes():
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=300), rng.exponential(size=217)
    assert w1_1d(x, y) == pytest.approx(ot.wasserstein_1d(x, y, p=1), rel=1e-12)
    assert w1_1d(x, y[:3]) == pytest.approx(ot.wasserstein_1d(x, y[:3], p=1), rel=1e-12)
    assert w1_1d(x[:217], y) == pytest.approx(np.abs(np.sort(x[:217]) - np.sort(y)).mean())
    assert w1_1d(x, x + 0.3) == pytest.approx(0.3)
    assert w1_1d(x, y) == pytest.approx(w1_1d(y, x), rel=1e-14)


def test_w1_1d_batches_over_leading_axes():
    rng = np.random.default_rng(1)
    x, y = rng.normal(size=(4, 50)), rng.normal(size=(4, 31))
    batch = w1_1d(x, y)
    assert batch.shape == (4,)
    assert np.allclose(batch, [w1_1d(a, b) for a, b in zip(x, y, strict=True)], rtol=1e-13)


def test_w1_to_gaussian_matches_quadrature_of_cdf_difference():
    rng = np.random.default_rng(2)
    x = np.sort(rng.normal(0.3, 1.5, size=9))
    sigma = 1.2

    def piece(a, b, c):
        return integrate.quad(lambda t: abs(c - stats.norm.cdf(t / sigma)), a, b)[0]

    edges = np.concatenate([[-40.0], x, [40.0]])
    levels = np.arange(len(x) + 1) / len(x)
    expected = sum(piece(a, b, c) for a, b, c in zip(edges[:-1], edges[1:], levels, strict=True))
    assert w1_to_gaussian(x, sigma) == pytest.approx(expected, rel=1e-9)
    both = w1_to_gaussian(np.stack([x, x]), np.array([sigma, 2.0]))
    assert both[0] == pytest.approx(expected, rel=1e-9) and both.shape == (2,)


# --------------------------------------------------------------------------- scale mixtures


@pytest.mark.parametrize("s", [0.25, 0.9, 1.0, 1.7, 4.0])
def test_w1_between_centred_gaussians_is_known(s):
    # W1(N(0,1), N(0,s²)) = |s − 1| sqrt(2/π): a one-component mixture.
    expected = abs(s - 1.0) * np.sqrt(2.0 / np.pi)
    assert w1_scale_mixture_to_gaussian([s], 1.0) == pytest.approx(expected, rel=1e-7, abs=1e-12)
    assert w1_scale_mixture_to_gaussian([2.0 * s], 2.0) == pytest.approx(2 * expected, rel=1e-7)


def test_scale_mixture_w1_matches_scipy_quadrature():
    scales = np.array([0.7, 1.0, 1.6])

    def diff(t):
        return abs(stats.norm.cdf(t / scales).mean() - stats.norm.cdf(t))

    expected = 2.0 * integrate.quad(diff, 0, 30, limit=400, epsabs=1e-13, epsrel=1e-12)[0]
    assert w1_scale_mixture_to_gaussian(scales, 1.0) == pytest.approx(expected, rel=1e-5)
    fine = w1_scale_mixture_to_gaussian(scales, 1.0, num_grid=4097)
    assert fine == pytest.approx(expected, rel=1e-8)


def test_scale_mixture_of_many_components_converges_to_variance_gamma():
    """σ_s² = the N midpoint quantiles of χ²_2/2 (an exponential): the mixture tends to the
    Laplace law. The midpoint rule in the mixing variable has an O(1/N) error (measured
    0.21/N for N = 2500–40000); with a fine grid the error must be below 0.5/N and halve
    when N doubles, and the default grid may add at most 5e-5 (the documented quadrature
    accuracy with sign changes)."""
    truth = _mixture_w1(2)
    errors = {}
    for num in (2500, 5000):
        u = (np.arange(num) + 0.5) / num
        scales = np.sqrt(-np.log1p(-u))
        fine = w1_scale_mixture_to_gaussian(scales, 1.0, num_grid=4097)
        errors[num] = abs(fine / truth - 1)
        assert errors[num] < 0.5 / num
        assert w1_scale_mixture_to_gaussian(scales, 1.0) == pytest.approx(fine, rel=5e-5)
    assert 1.5 < errors[2500] / errors[5000] < 2.5


# --------------------------------------------------------------------------- sliced W1


def test_random_directions_are_unit_and_isotropic():
    d = random_directions(3, 20000, seed=3)
    assert d.shape == (20000, 3)
    assert np.allclose(np.linalg.norm(d, axis=1), 1.0)
    # E θθᵀ = I/3; each entry of the empirical mean has sd <= sqrt(1/(5·20000)).
    assert np.abs(d.T @ d / 20000 - np.eye(3) / 3).max() < 4 * np.sqrt(0.2 / 20000)
    assert np.array_equal(d, random_directions(3, 20000, seed=3))


def test_sliced_estimators_reduce_to_one_dimensional_ones():
    rng = np.random.default_rng(4)
    y1, y2 = gaussian_samples(K3, 200, seed=rng), gaussian_samples(K3, 150, seed=rng)
    e1 = np.array([[1.0, 0.0, 0.0]])
    assert sliced_w1(y1, y2, e1) == pytest.approx(w1_1d(y1[:, 0], y2[:, 0]))
    assert sliced_w1_to_gaussian(y1, K3, e1) == pytest.approx(w1_to_gaussian(y1[:, 0], 1.0))
    dirs = random_directions(3, 5, seed=rng)
    per = sliced_w1_to_gaussian(y1, K3, dirs, per_direction=True)
    assert per.shape == (5,) and sliced_w1_to_gaussian(y1, K3, dirs) == pytest.approx(per.mean())


def test_rb_sliced_w1_exact_cases():
    dirs = random_directions(3, 7, seed=5)
    same = np.broadcast_to(K3, (10, 3, 3))
    value, floor = rb_sliced_w1(same, K3, dirs, with_floor=True)
    assert value == pytest.approx(0.0, abs=1e-12) and floor == pytest.approx(0.0, abs=1e-12)
    # K̂ = c K for all s: every projection is N(0, c σ_θ²).
    scaled = np.broadcast_to(2.25 * K3, (4, 3, 3))
    expected = 0.5 * np.sqrt(2.0 / np.pi) * _sigma_mean(dirs)
    assert rb_sliced_w1(scaled, K3, dirs) == pytest.approx(expected, rel=1e-7)


def test_rb_floor_is_the_pointwise_noise_integral():
    # One direction, two distinct scales: the floor is sqrt(2/π) ∫ sd_s Φ(t/σ_s)/sqrt(S) dt.
    scales = np.array([0.8, 1.3, 0.8, 1.3])
    _, floor = w1_scale_mixture_to_gaussian(scales, 1.0, with_floor=True)

    def noise(t):
        return np.std(stats.norm.cdf(t / scales), ddof=1) / 2.0

    expected = 2.0 * np.sqrt(2.0 / np.pi) * integrate.quad(noise, 0, 30, limit=200)[0]
    assert floor == pytest.approx(expected, rel=1e-6)


@pytest.fixture(scope="module")
def laplace_case():
    dirs = random_directions(3, 16, seed=6)
    return dirs, _mixture_w1(2) * _sigma_mean(dirs)


def test_every_w1_estimator_is_unbiased_after_floor_correction(laplace_case):
    """m = 2 (Laplace projections), 40 seeds. The quadrature rule is exact at zero signal
    and over-corrects by about f²/(2d) when the signal d dominates the floor f, so the
    tolerance is 4 standard errors plus that second-order term."""
    dirs, truth = laplace_case
    n_sample, n_rb, seeds = 1500, 300, 40

    def limit(rng):
        return gaussian_samples(K3, n_sample, seed=rng)

    floor_gauss = noise_floor(lambda y: sliced_w1_to_gaussian(y, K3, dirs), limit, seed=7)
    floor_two = noise_floor(lambda y: sliced_w1(y, limit(np.random.default_rng(8)), dirs), limit)
    out = {"to_gaussian": [], "two_sample": [], "rb": []}
    floors = {"to_gaussian": floor_gauss.mean, "two_sample": floor_two.mean, "rb": []}
    same_networks = []
    for seed in range(seeds):
        rng = np.random.default_rng(100 + seed)
        y, _ = _draw(2, n_sample, rng)
        y_small, khat = _draw(2, n_rb, rng)
        same_networks.append(sliced_w1_to_gaussian(y_small, K3, dirs))
        out["to_gaussian"].append(debias(sliced_w1_to_gaussian(y, K3, dirs), floor_gauss.mean))
        out["two_sample"].append(debias(sliced_w1(y, limit(rng), dirs), floor_two.mean))
        d, f = rb_sliced_w1(khat, K3, dirs, with_floor=True)
        out["rb"].append(debias(d, f))
        floors["rb"].append(f)
    floors["rb"] = float(np.mean(floors["rb"]))
    for name, values in out.items():
        mean, sem = _mean_sem(values)
        tol = 4 * sem + floors[name] ** 2 / (2 * truth)
        assert abs(mean - truth) < tol, (name, mean, truth, sem, floors[name])
    # Rao–Blackwellisation: on the same networks, a smaller spread than the sample version.
    assert np.std(out["rb"]) < 0.7 * np.std(same_networks)


def test_quadrature_debiasing_beats_subtraction_near_the_floor():
    """m = 4, S = 500: the signal (≈ 0.07) is close to the floor of the sample-based
    sliced W1. Subtracting the floor is biased low by far more than its error bar; the
    quadrature rule lands closer to the truth."""
    dirs = random_directions(3, 16, seed=9)
    truth = _mixture_w1(4) * _sigma_mean(dirs)
    num = 500

    def est(y):
        return sliced_w1_to_gaussian(y, K3, dirs)

    floor = noise_floor(est, lambda rng: gaussian_samples(K3, num, seed=rng), num_reps=30).mean
    raw = [est(_draw(4, num, np.random.default_rng(200 + s))[0]) for s in range(40)]
    quad_mean, quad_sem = _mean_sem(debias(np.array(raw), floor))
    sub_mean, sub_sem = _mean_sem(debias(np.array(raw), floor, rule="subtract"))
    assert 0.5 < floor / truth < 2.0
    assert abs(quad_mean - truth) < abs(sub_mean - truth)
    assert truth - sub_mean > 4 * sub_sem
    assert abs(quad_mean - truth) < 4 * quad_sem + floor**2 / (2 * truth)


# --------------------------------------------------------------------------- MMD


def _rbf_gauss(cov_sum, ell):
    return np.linalg.det(np.eye(len(cov_sum)) + cov_sum / ell**2) ** -0.5


def test_median_bandwidth_is_exact_for_isotropic_kernels():
    assert median_bandwidth(np.eye(4)) == pytest.approx(np.sqrt(2 * stats.chi2.ppf(0.5, 4)))
    assert median_bandwidth(3.0 * np.eye(2)) == pytest.approx(np.sqrt(6 * stats.chi2.ppf(0.5, 2)))


def test_mmd2_u_statistic_is_unbiased():
    a = np.array([[1.0, 0.3], [0.3, 0.6]])
    b = np.array([[1.4, -0.2], [-0.2, 0.5]])
    ell = median_bandwidth(b)
    truth = _rbf_gauss(2 * a, ell) + _rbf_gauss(2 * b, ell) - 2 * _rbf_gauss(a + b, ell)
    values = []
    for seed in range(60):
        rng = np.random.default_rng(300 + seed)
        y1, y2 = gaussian_samples(a, 80, seed=rng), gaussian_samples(b, 60, seed=rng)
        values.append(mmd2_unbiased(y1, y2, bandwidth=ell))
    mean, sem = _mean_sem(values)
    assert abs(mean - truth) < 4 * sem
    assert truth > 6 * sem  # the test has power: the signal is well above the noise


def test_rb_mmd2_enumerates_every_pair_once():
    rng = np.random.default_rng(10)
    k = np.array([[1.0, 0.2], [0.2, 0.7]])
    for num in (2, 5, 6):
        g = rng.normal(size=(num, 2, 3))
        khat = g @ g.transpose(0, 2, 1) / 3
        ell = 1.3
        pairs = np.mean([_rbf_gauss(khat[i] + khat[j], ell) for i, j in itertools.permutations(range(num), 2)])
        cross = np.mean([_rbf_gauss(kh + k, ell) for kh in khat])
        expected = pairs - 2 * cross + _rbf_gauss(2 * k, ell)
        assert rb_mmd2(khat, k, bandwidth=ell) == pytest.approx(expected, rel=1e-12, abs=1e-15)
    assert rb_mmd2(np.broadcast_to(k, (4, 2, 2)), k) == pytest.approx(0.0, abs=1e-14)


@pytest.mark.parametrize("max_pairs", [1_000_000, 60])
def test_rb_mmd2_is_unbiased_complete_and_incomplete(max_pairs):
    # K̂_s is A1 or A2 with probability 1/2: the finite law is the two-Gaussian mixture.
    a1 = np.array([[1.3, 0.4], [0.4, 0.9]])
    a2 = np.array([[0.7, 0.1], [0.1, 0.5]])
    k = 0.5 * (a1 + a2)
    ell = median_bandwidth(k)
    kxx = 0.25 * (_rbf_gauss(2 * a1, ell) + _rbf_gauss(2 * a2, ell)) + 0.5 * _rbf_gauss(a1 + a2, ell)
    kxy = 0.5 * (_rbf_gauss(a1 + k, ell) + _rbf_gauss(a2 + k, ell))
    truth = kxx - 2 * kxy + _rbf_gauss(2 * k, ell)
    values = []
    for seed in range(60):
        pick = np.random.default_rng(400 + seed).random(30) < 0.5
        values.append(rb_mmd2(np.where(pick[:, None, None], a1, a2), k, max_pairs=max_pairs))
    mean, sem = _mean_sem(values)
    assert abs(mean - truth) < 4 * sem


# --------------------------------------------------------------------------- W2


def test_bures_w2_closed_form_for_diagonal_matrices():
    a, b = np.array([2.0, 0.5, 1.0]), np.array([1.0, 0.0, 4.0])
    expected = np.sqrt(((np.sqrt(a) - np.sqrt(b)) ** 2).sum())
    assert bures_w2(np.diag(a), np.diag(b)) == pytest.approx(expected, rel=1e-12)
    assert bures_w2(np.diag(b), np.diag(a)) == pytest.approx(expected, rel=1e-12)
    assert bures_w2(K3, K3) == pytest.approx(0.0, abs=1e-7)
    rot = np.linalg.qr(np.random.default_rng(11).normal(size=(3, 3)))[0]
    rotated = bures_w2(rot @ np.diag(a) @ rot.T, rot @ np.diag(b) @ rot.T)
    # b is singular: rotating it moves its zero eigenvalue by ~eps·tr, and W2 moves by the square
    # root of that (the documented accuracy √(eps·tr K); 8e-9 with one LAPACK, 1e-11 with another)
    assert rotated == pytest.approx(expected, abs=np.sqrt(np.finfo(float).eps * (a.sum() + b.sum())))


def test_bures_w2_rejects_indefinite_matrices():
    with pytest.raises(NumericalError, match="positive semi-definite"):
        bures_w2(np.diag([1.0, -0.5]), np.eye(2))


def test_w2_pot_is_exact_on_small_samples():
    rng = np.random.default_rng(12)
    x, y = rng.normal(size=(6, 2)), rng.normal(size=(6, 2))
    brute = min(((x - y[list(p)]) ** 2).sum(axis=1).mean() for p in itertools.permutations(range(6)))
    assert w2_pot(x, y) == pytest.approx(np.sqrt(brute), rel=1e-10)
    u, v = rng.normal(size=50), rng.normal(size=50)
    assert w2_pot(u, v) == pytest.approx(np.sqrt(((np.sort(u) - np.sort(v)) ** 2).mean()))
    with pytest.raises(InputError, match="max_samples"):
        w2_pot(rng.normal(size=(30, 2)), rng.normal(size=(30, 2)), max_samples=20)


@pytest.mark.slow
def test_w2_pot_debiased_matches_bures():
    a, b = np.diag([1.0, 0.5]), np.array([[1.5, 0.3], [0.3, 0.4]])
    truth, num = bures_w2(a, b), 800

    def two_limit(rng):
        return gaussian_samples(b, num, seed=rng), gaussian_samples(b, num, seed=rng)

    floor = noise_floor(lambda pair: w2_pot(*pair), two_limit, num_reps=20).mean
    values = []
    for seed in range(30):
        rng = np.random.default_rng(500 + seed)
        values.append(debias(w2_pot(gaussian_samples(a, num, seed=rng), gaussian_samples(b, num, seed=rng)), floor))
    mean, sem = _mean_sem(values)
    assert abs(mean - truth) < 4 * sem + floor**2 / (2 * truth)


# --------------------------------------------------------------------------- floors, errors


def test_noise_floor_is_reproducible_and_matches_sqrt_n_scaling():
    def est(y):
        return w1_to_gaussian(y[:, 0], 1.0)

    small = noise_floor(est, lambda rng: gaussian_samples(np.eye(1), 200, seed=rng), num_reps=40)
    again = noise_floor(est, lambda rng: gaussian_samples(np.eye(1), 200, seed=rng), num_reps=40)
    big = noise_floor(est, lambda rng: gaussian_samples(np.eye(1), 800, seed=rng), num_reps=40)
    assert np.array_equal(small.values, again.values)
    # E W1(empirical_n, N(0,1)) ∝ n^{-1/2}: the ratio is 2 up to noise.
    ratio_se = 2 * np.hypot(small.sem / small.mean, big.sem / big.mean)
    assert abs(small.mean / big.mean - 2.0) < 4 * ratio_se


def test_seeds_follow_the_project_policy():
    """The same SeedSequence object twice gives the same numbers (it is not spawned from in
    place); a Generator is consumed; negative seeds are refused."""
    seq = np.random.SeedSequence(42)
    first = noise_floor(lambda y: float(y.sum()), lambda rng: rng.standard_normal(3), num_reps=3, seed=seq)
    second = noise_floor(lambda y: float(y.sum()), lambda rng: rng.standard_normal(3), num_reps=3, seed=seq)
    assert np.array_equal(first.values, second.values)
    assert np.array_equal(random_directions(3, 4, seed=seq), random_directions(3, 4, seed=seq))
    gen = np.random.default_rng(0)
    assert not np.array_equal(gaussian_samples(K3, 2, seed=gen), gaussian_samples(K3, 2, seed=gen))
    with pytest.raises(HyperParameterError, match="seed"):
        random_directions(3, 4, seed=-1)


def test_debias_argument_and_its_gradient():
    d = np.array([5.0, 2.0, 1.0, 0.5])
    f = np.array([3.0, 1.0, 0.2, 0.9])  # the last is below the floor: debiased to 0
    h = 1e-6
    for rule, kappa in (("quadrature", 0.5), ("subtract", 1.0)):
        q, dq_dd, dq_df = debias_argument(d, f, rule=rule)
        np.testing.assert_allclose(debias(d, f, rule=rule), np.maximum(q, 0) ** kappa)
        for grad, step in ((dq_dd, (h, 0.0)), (dq_df, (0.0, h))):
            up = debias_argument(d + step[0], f + step[1], rule=rule)[0]
            down = debias_argument(d - step[0], f - step[1], rule=rule)[0]
            np.testing.assert_allclose(grad, (up - down) / (2 * h), atol=1e-7)


def test_gaussian_samples_handle_singular_kernels():
    k = np.array([[1.0, 1.0], [1.0, 1.0]])
    y = gaussian_samples(k, 4000, seed=13)
    assert np.allclose(y[:, 0], y[:, 1])
    assert abs(np.var(y[:, 0]) - 1.0) < 4 * np.sqrt(2 / 4000)


def test_debias_rules():
    assert debias(5.0, 3.0) == pytest.approx(4.0)
    assert debias(5.0, 3.0, rule="subtract") == pytest.approx(2.0)
    assert debias(1.0, 3.0) == 0.0
    assert np.allclose(debias(np.array([5.0, 13.0]), np.array([4.0, 5.0])), [3.0, 12.0])
    with pytest.raises(HyperParameterError):
        debias(1.0, 0.5, rule="median")


@pytest.mark.parametrize(
    "call",
    [
        lambda: w1_1d([1.0, np.nan], [0.0]),
        lambda: w1_to_gaussian([0.1, 0.2], -1.0),
        lambda: sliced_w1(np.zeros((5, 3)), np.zeros((5, 2)), np.eye(3)),
        lambda: sliced_w1_to_gaussian(np.zeros((5, 3)), K3, np.eye(2)),
        lambda: rb_sliced_w1(np.zeros((5, 2, 2)), K3, np.eye(3)),
        lambda: mmd2_unbiased(np.zeros((5, 3)), np.zeros((5, 3)), bandwidth=-1.0),
        lambda: mmd2_unbiased(np.zeros((1, 3)), np.zeros((5, 3)), bandwidth=1.0),
        lambda: rb_mmd2(np.broadcast_to(K3, (1, 3, 3)), K3),
        lambda: bures_w2(K3, np.eye(2)),
        lambda: bures_w2(np.array([[1.0, 0.5], [0.0, 1.0]]), np.eye(2)),
        lambda: random_directions(0, 3),
        lambda: w1_scale_mixture_to_gaussian([1.0], 1.0, num_grid=100),
        lambda: noise_floor(lambda y: 0.0, lambda rng: 0.0, num_reps=1),
    ],
)
def test_bad_input_raises_netsor_errors(call):
    with pytest.raises(NetsorError):
        call()


def test_mmd2_is_exact_at_every_bandwidth():
    """Two points 0 and 1 on each side: MMD² = 2e − 2(1 + e)/2 = e − 1 with e = exp(−1/(2ℓ²)). Shifted by 1e8
    (the Gram expansion ‖x‖² + ‖y‖² − 2xᵀy loses the unit distance to rounding there) and at ℓ = 1e-300 (ℓ²
    underflows: the value was NaN), where e = 0; at ℓ = 1e300, e = 1 and MMD² = 0. With repeated points the
    ℓ → 0 limit counts equal pairs: Y1 = (0, 0, 1), Y2 = (0, 2) gives 2/6 + 0 − 2·2/6 = −1/3."""
    pair = np.array([[0.0], [1.0]])
    assert mmd2_unbiased(pair, pair, bandwidth=1.0) == pytest.approx(np.exp(-0.5) - 1.0, rel=1e-14)
    assert mmd2_unbiased(pair + 1e8, pair + 1e8, bandwidth=0.5) == pytest.approx(np.exp(-2.0) - 1.0, rel=1e-14)
    assert mmd2_unbiased(pair, pair, bandwidth=1e-300) == -1.0
    assert mmd2_unbiased(pair, pair, bandwidth=1e300) == 0.0
    assert mmd2_unbiased([0.0, 0.0, 1.0], [0.0, 2.0], bandwidth=1e-300) == pytest.approx(-1.0 / 3.0, rel=1e-15)


def test_rb_mmd2_has_its_limits_at_extreme_bandwidths():
    """E k(X, Y) = det(I + (A + B)/ℓ²)^{-1/2} is 0 for ℓ → 0 (A + B ≠ 0) and 1 for ℓ → ∞, so the
    Rao–Blackwellised MMD² is 0 − 0 + 0 and 1 − 2 + 1; ℓ² used to underflow or overflow into NaN."""
    khat = np.stack([K3 * 1.1, K3 * 0.9, K3])
    assert rb_mmd2(khat, K3, bandwidth=1e-300) == 0.0
    assert rb_mmd2(khat, K3, bandwidth=1e300) == 0.0
    with pytest.raises(NumericalError, match="not PSD"):
        rb_mmd2(np.stack([-K3, -K3]), K3, bandwidth=1.0)


def test_a_noise_floor_with_a_nan_estimate_is_refused():
    with pytest.raises(NumericalError, match="replicate 0"):
        noise_floor(lambda y: float("nan"), lambda rng: rng.standard_normal(3))
    with pytest.raises(InputError, match="one real number"):
        noise_floor(lambda y: y, lambda rng: rng.standard_normal(3))
    with pytest.raises(InputError, match="callable"):
        noise_floor(1.0, lambda rng: rng.standard_normal(3))


def test_debias_refuses_negative_distances_and_floors():
    """debias(−1, 0.5) returned sqrt(1 − 0.25) = 0.866 for a negative "distance"."""
    with pytest.raises(InputError, match="distance must be >= 0"):
        debias(-1.0, 0.5)
    with pytest.raises(InputError, match="floor must be >= 0"):
        debias(1.0, -0.5, rule="subtract")
