"""Kernels of functions with kinks and jumps off the origin at nearly parallel points, from the pair's angle
(:mod:`netsor.gaussian.near_parallel`), against 40-digit references — and the networks they make exact: hard_tanh,
relu6 and ``max(x, 0.7)`` NTKs at inputs a perturbation apart (refused at the default rtol before, bounds 5e-8 …
1e-5 relative)."""

from __future__ import annotations

import mpmath
import numpy as np
import pytest
import references

import netsor
from netsor.activations import activation, hard_tanh
from netsor.activations.distance_kernels import Angle
from netsor.gaussian import near_parallel, piecewise
from netsor.interpret import infinite

RELU6 = activation(lambda x: np.clip(x, 0.0, 6.0), kinks=(0.0, 6.0), name="relu6")
FLOOR = activation(lambda x: np.maximum(x, 0.7), kinks=(0.7,), name="max_0.7")
CLIP = activation(lambda x: np.clip(x, -0.5, 1.3), kinks=(-0.5, 1.3), name="clip")
THRESHOLDED = activation(lambda x: x * (x > 0.5), kinks=(0.5,), name="thresholded_relu")
HARD_SHRINK = activation(lambda x: np.where(np.abs(x) > 0.5, x, 0.0), kinks=(-0.5, 0.5), name="hard_shrink")
ODD_CLIP = activation(lambda x: np.clip(x, -0.5, 0.5), kinks=(-0.5, 0.5), name="clip_half")
EVEN_CLIP = activation(lambda x: np.clip(np.abs(x), 0.0, 0.5), kinks=(-0.5, 0.0, 0.5), name="clip_abs")


def _pieces(steps: near_parallel.Steps) -> tuple[piecewise.Piece, ...]:
    """A step function as pieces ``base + Σ jump · 1{x > t}`` (for the reference)."""
    return ((steps.base, 0, 0.0, -np.inf, True),
            *((j, 0, 0.0, t, True) for t, j in zip(steps.thresholds, steps.jumps, strict=True)))


def _random_kinked(rng: np.random.Generator) -> netsor.activations.Activation:
    """A continuous piecewise-linear function with 1–3 kinks at random places and random slopes."""
    kinks = np.sort(rng.uniform(-2.0, 2.0, size=rng.integers(1, 4))).round(2)
    slopes = rng.uniform(-1.5, 1.5, size=kinks.size + 1).round(2)

    def fn(x):
        x = np.asarray(x, dtype=float)
        return slopes[0] * x + sum((s1 - s0) * np.maximum(x - k, 0.0)
                                   for k, s0, s1 in zip(kinks, slopes[:-1], slopes[1:], strict=True))

    return activation(fn, kinks=tuple(float(k) for k in kinks), name=f"kinked{kinks.tolist()}{slopes.tolist()}")


def _box(rng: np.random.Generator) -> tuple[float, float, float, float, float, float, float, float, float]:
    """A pair ``(a, δa, b, δb, θ, width)`` — variances nearly or exactly equal, angles from 0 to 0.05 — and a point
    ``(a', b', θ')`` of its box, where the reference is taken."""
    a = float(rng.uniform(0.3, 40.0))
    b = a * (1.0 + float(rng.choice([0.0, 1e-12, 1e-8, 1e-4, 1e-2])) * float(rng.standard_normal()))
    theta = 0.0 if rng.random() < 0.1 else float(10 ** rng.uniform(-12, np.log10(near_parallel.SMALL_ANGLE)))
    da, db = (float(rng.choice([0.0, 1e-14, 1e-11])) * v for v in (a, b))
    width = float(rng.choice([0.0, 1e-9, 1e-4])) * theta
    point = (a + da * rng.uniform(-1, 1), b + db * rng.uniform(-1, 1), max(theta + width * rng.uniform(-1, 1), 0.0))
    return a, da, b, db, theta, width, *point


def _angle(theta: float, width: float) -> Angle:
    return Angle(np.array(theta), np.array(max(theta - width, 0.0)), np.array(theta + width))


@pytest.mark.parametrize("seed", [0, pytest.param(1, marks=pytest.mark.slow), pytest.param(2, marks=pytest.mark.slow)])
def test_step_pairs_equal_a_30_digit_reference_anywhere_in_their_box_within_their_bounds(seed):
    """``E[F(u) G(v)]`` of the derivatives of hard_tanh, relu6, ``max(x, 0.7)`` and random piecewise-linear
    functions (two step functions of different thresholds, scaled by ±k): the value at the box's centre is within
    its bound of the 30-digit value at any point of the box (its variances and angle perturbed within their bounds)."""
    rng = np.random.default_rng(seed)
    for act in (hard_tanh, RELU6, FLOOR, _random_kinked(rng), _random_kinked(rng)):
        F = near_parallel.Steps.of(piecewise.of(act), derivative=True)
        G = near_parallel.Steps.of(piecewise.of(_random_kinked(rng)), derivative=True).scaled(
            float(rng.choice([0.7, -1.3])))
        a, da, b, db, theta, width, a2, b2, theta2 = _box(rng)
        value, bound = near_parallel.step_pair(F, G, a, da, b, db, _angle(theta, width))
        with mpmath.workdps(30):
            ref = references.piecewise_pair_at_angle_by_mpmath(
                _pieces(F), _pieces(G), mpmath.mpf(a2), mpmath.mpf(b2), mpmath.mpf(theta2), F.thresholds, G.thresholds)
        assert abs(float(value) - float(ref)) <= float(bound), (act.name, a, b, theta)
        scale = (F.largest + F.total_jump) * (G.largest + G.total_jump)
        assert float(bound) < scale * (1e-11 + width)


@pytest.mark.parametrize("seed", [0, pytest.param(1, marks=pytest.mark.slow), pytest.param(2, marks=pytest.mark.slow)])
def test_distances_of_kinked_functions_equal_a_40_digit_reference_and_keep_their_relative_accuracy(seed):
    """``E[(φ(u) − φ(v))²]`` of continuous piecewise-linear φ (kinks off the origin) at nearly parallel points: within
    its bound of the 40-digit ``E φ(u)² + E φ(v)² − 2 E φ(u) φ(v)`` (taken at any point of the box), and where the
    arguments are exact, the bound is a small share of the distance itself (at most 1e-6 + 1e-2·θ of it, for variances
    equal or at least 1e-8 apart; ``a + b − 2c`` of float64 covariances holds it to ~1e-16 absolute only, 100 % of a
    distance at inputs 1e-8 apart)."""
    rng = np.random.default_rng(10 + seed)
    for act in (hard_tanh, RELU6, FLOOR, CLIP, _random_kinked(rng), _random_kinked(rng)):
        pieces = piecewise.of(act)
        slopes = near_parallel.Steps.of(pieces, derivative=True)
        a, da, b, db, theta, width, a2, b2, theta2 = _box(rng)
        value, bound = near_parallel.kinked_distance(slopes, a, da, b, db, _angle(theta, width))
        with mpmath.workdps(40):
            A, B = mpmath.mpf(a2), mpmath.mpf(b2)
            kinks = slopes.thresholds
            pair = references.piecewise_pair_at_angle_by_mpmath
            ref = (pair(pieces, pieces, A, A, mpmath.mpf(0), kinks, kinks)
                   + pair(pieces, pieces, B, B, mpmath.mpf(0), kinks, kinks)
                   - 2 * pair(pieces, pieces, A, B, mpmath.mpf(theta2), kinks, kinks))
        assert abs(float(value) - float(ref)) <= float(bound), (act.name, a, b, theta)
        exact, exact_bound = near_parallel.kinked_distance(slopes, a, 0.0, b, 0.0, _angle(theta, 0.0))
        # F₀ ∝ (a − b)² moves by ~eps·a/|a − b| of itself as √a rounds: a share that grows as the variances meet
        if exact > 0.0 and theta > 0.0 and (a == b or abs(a - b) >= 1e-8 * a):
            assert exact_bound <= (1e-2 * theta + 1e-6) * exact


def test_steps_are_the_functions_and_derivatives_they_stand_for():
    """``Steps.of`` of a step function's pieces takes its values; of a continuous piecewise-linear function's, its
    slopes (central differences off the kinks); ``scaled(k)`` is ``F(k x)`` for k of both signs; ``plus`` adds; a
    function with a jump has no derivative as steps."""
    rng = np.random.default_rng(4)
    x = rng.uniform(-8.0, 8.0, 2000)
    for act in (hard_tanh, RELU6, FLOOR, CLIP, _random_kinked(rng), _random_kinked(rng)):
        slopes = near_parallel.Steps.of(piecewise.of(act), derivative=True)
        far = np.min(np.abs(x[:, None] - np.array(slopes.thresholds)[None, :]), axis=1) > 1e-3
        h = 1e-6
        fd = (act.fn(x + h) - act.fn(x - h)) / (2 * h)
        np.testing.assert_allclose(slopes.level_at(x)[far], fd[far], atol=1e-8)
        for k in (2.5, -0.75):
            np.testing.assert_allclose(slopes.scaled(k).level_at(x)[far], slopes.level_at(k * x)[far], atol=1e-14)
        twice = slopes.plus(slopes)
        np.testing.assert_allclose(twice.level_at(x), 2 * slopes.level_at(x), rtol=1e-15)
    step_pieces = piecewise.of(netsor.activations.activation(lambda v: (v > 0.3) * 2.0 - 1.0, kinks=(0.3,),
                                                              continuous=False, name="jump"))
    steps = near_parallel.Steps.of(step_pieces)
    np.testing.assert_array_equal(steps.level_at(x), np.where(x > 0.3, 1.0, -1.0))
    assert near_parallel.Steps.of(step_pieces, derivative=True) is None
    assert near_parallel.Steps.of(piecewise.of(netsor.activations.elu)) is None  # exponential pieces


def _kinked_mlp_case(fn, act, separation, depth=3, sigma_w=1.5, sigma_b=0.3, sign=1.0, rtol=1e-8):
    """``X[1] = sign · X[0]`` plus noise of scale ``separation``; the kernels at ``rtol`` within their bounds of the
    30-digit recursion, and meeting it."""
    rng = np.random.default_rng(5)
    X = rng.standard_normal((2, 4))
    X[1] = sign * X[0] + separation * rng.standard_normal(4)
    pieces = piecewise.of(act)
    slopes = near_parallel.Steps.of(pieces, derivative=True) or near_parallel.Steps.split(pieces)[0]
    K, T = references.piecewise_mlp_kernels_by_mpmath(X, depth, sigma_w, sigma_b, pieces, _pieces(slopes),
                                                      slopes.thresholds)
    program = netsor.zoo.mlp(depth, fn, sigma_w, sigma_b)
    # inputs at an angle below NEAR_INPUTS_ANGLE/rtol = 1e-4 carry distances from the start (here θ ≈ 0.5·separation),
    # the others on a retry
    if rtol == 1e-8:
        assert netsor.limit(program, X).distances == (separation <= 1e-5 and infinite.NEAR_INPUTS_ANGLE > 0)
    k = netsor.kernel(program, X, rtol=rtol)
    for got, err, ref in ((k.nngp, k.nngp_error, K), (k.ntk, k.ntk_error, T)):
        assert np.all(np.abs(got - ref) <= err)
        assert np.max(err / np.sqrt(np.outer(np.diag(ref), np.diag(ref)))) < rtol


@pytest.mark.parametrize(("name", "separation"), [("hard_tanh", 1e-5), ("relu6", 1e-8)])
def test_kinked_mlp_kernels_at_inputs_a_perturbation_apart_meet_the_default_rtol_against_a_30_digit_recursion(
        name, separation):
    """Depth-3 MLPs of hard_tanh and relu6 (traced ``np.clip(x, 0, 6)``) on two inputs 1e-5 / 1e-8 apart: the NTK's
    step kernels ``E[1{|u| < 1} 1{|v| < 1}]`` are ~1/(2π sin θ) in the covariance; before, refused at the default
    rtol (bounds 1.1e-5 and 3.4e-7 relative). Their angle, carried through the layers by the distances of the
    kinked functions, meets it, with bounds that cover the true error against the recursion in 30 digits."""
    fn, act = {"hard_tanh": ("hard_tanh", hard_tanh), "relu6": (lambda x: np.clip(x, 0, 6), RELU6)}[name]
    _kinked_mlp_case(fn, act, separation)


def test_kinked_mlp_kernels_on_a_retry_carrying_distances_meet_the_default_rtol_against_a_30_digit_recursion(
        monkeypatch):
    """The hard_tanh case above without distances from the start (as inputs a little further apart, or a network
    that drives them together, take it): the first attempt misses rtol, the retry carries the distances."""
    monkeypatch.setattr(infinite, "NEAR_INPUTS_ANGLE", 0.0)
    _kinked_mlp_case("hard_tanh", hard_tanh, 1e-5)


@pytest.mark.parametrize(("name", "separation"), [("hard_tanh", 1e-6), ("clip", 1e-9), ("even", 1e-6)])
def test_kinked_mlp_kernels_at_nearly_anti_parallel_inputs_meet_the_default_rtol_against_a_30_digit_recursion(
        name, separation):
    """Bias-free depth-3 MLPs of odd kinked functions (hard_tanh, traced ``np.clip(x, −½, ½)``) keep two nearly
    anti-parallel inputs nearly anti-parallel at every layer, where the covariances hold ``1 + ρ`` (and the angle
    ``π − θ``) to ½-Hölder digits only: refused at the default rtol before (the NNGP's bound 2.7e-8, a fuzzed NTK's
    8.4e-7). The sums ``E[(Z(x) + Z(x'))²]`` (:class:`~netsor.interpret.infinite.SumDistance`) carry the angle to π
    and the step pairs are read at the reflected angle; an even φ (``clip(|x|, 0, ½)``) takes its distance so. The
    kernels are within their bounds of the recursion in 30 digits, which they meet at the default rtol."""
    fn, act = {"hard_tanh": ("hard_tanh", hard_tanh), "clip": (lambda x: np.clip(x, -0.5, 0.5), ODD_CLIP),
               "even": (lambda x: np.clip(np.abs(x), 0.0, 0.5), EVEN_CLIP)}[name]
    _kinked_mlp_case(fn, act, separation, sigma_b=0.0, sign=-1.0)


@pytest.mark.parametrize(("depth", "separation", "rtol"), [(1, 1e-6, 1e-8), (1, 1e-8, 1e-8), (2, 1e-6, 1e-6),
                                                            (2, 1e-8, 1e-6)])
@pytest.mark.parametrize("name", ["thresholded_relu", "hard_shrink"])
def test_piecewise_linear_functions_with_jumps_at_nearly_parallel_inputs_against_a_30_digit_recursion(
        name, depth, separation, rtol):
    """x·1{x > ½} (Keras' ThresholdedReLU) and hard shrink (PyTorch's Hardshrink) jump where they kink: neither the
    steps' nor the continuous functions' rule took their pairs, whose covariance route is ½-Hölder at nearly parallel
    inputs (depth 1 at inputs 1e-8 apart: refused at 1.65e-8). Their pair is now ``(E φ(u)² + E φ(v)² − D)/2`` with
    ``D`` split into the continuous part's distance, the jumps' and a cross term bounded by Cauchy–Schwarz
    (:func:`~netsor.gaussian.near_parallel.jumped_pair`): depth 1 meets the default rtol (bounds ~1e-12 … 2e-9),
    depth 2 — whose second layer's angle, ~√θ, comes from the covariances — is within bounds of 3e-8 … 4e-7 (true
    errors up to 1.1e-8: the value itself is that uncertain), met at rtol 1e-6; both within their bounds of the
    recursion in 30 digits."""
    fn, act = {"thresholded_relu": (lambda x: x * (x > 0.5), THRESHOLDED),
               "hard_shrink": (lambda x: np.where(np.abs(x) > 0.5, x, 0.0), HARD_SHRINK)}[name]
    _kinked_mlp_case(fn, act, separation, depth=depth, rtol=rtol)


@pytest.mark.parametrize("near", [1e-6, 1e-9])
@pytest.mark.parametrize(("fn", "parity"), [(lambda x: np.clip(2.0 * x, -1.0, 1.0) + 0.3 * x, -1.0),
                                            (lambda x: np.clip(np.abs(x), 0.0, 0.5), 1.0)])
def test_odd_and_even_networks_at_nearly_anti_parallel_inputs_have_the_kernels_of_the_reflected_inputs(fn, parity,
                                                                                                      near):
    """A bias-free network of an odd φ is an odd function of its input, of an even φ an even one, for every draw of its
    weights: ``K(x, x') = ±K(x, −x')`` for the NNGP and the NTK alike. At ``x'`` nearly anti-parallel to ``x`` the
    left side is taken by the sums and reflected angles, the right one at nearly parallel inputs by the distances
    (checked against 30-digit recursions above): both meet the default rtol and agree within their two bounds."""
    X = np.random.default_rng(1).standard_normal((2, 4))
    X[1] = -X[0] + near * np.random.default_rng(2).standard_normal(4)
    for depth in (1, 2, 3):
        program = netsor.zoo.mlp(depth, fn, 0.9 if depth < 3 else 1.5, 0.0)
        k, reflected = netsor.kernel(program, X), netsor.kernel(program, X[:1], -X[1:])
        for what in ("nngp", "ntk"):
            K, E = getattr(k, what), getattr(k, f"{what}_error")
            Kr, Er = getattr(reflected, what), getattr(reflected, f"{what}_error")
            assert abs(K[0, 1] - parity * Kr[0, 0]) <= E[0, 1] + Er[0, 0]
            assert E[0, 1] <= 1e-8 * np.sqrt(K[0, 0] * K[1, 1])


def test_limits_carry_distances_from_the_start_only_where_inputs_are_nearly_parallel_at_kinks_off_the_origin():
    """Rows at exact angles θ (a rotation in a plane, norms 1 … 3): flagged where θ is known positive and below the
    angle; the same, proportional (rounded 3x) and zero rows are not; positions of sequences are inputs; a pair
    across X and X2 counts. A Limit starts with distances for hard_tanh at inputs 1e-6 apart at rtol 1e-8 (its
    first attempt would miss), not at rtol 1e-2 (θ above 1e-12/rtol), nor for relu (kinks at the origin: its first
    attempt is cheap) or tanh."""
    def rotated(theta, norm=1.0):
        return norm * np.array([np.cos(theta), np.sin(theta), 0.0])

    near = infinite.has_nearly_parallel_inputs
    for theta in (1e-7, 1e-5, 5e-5):
        X = np.stack([rotated(0.0, 2.0), rotated(theta, 3.0), rotated(1.0)])
        assert near(X, X, angle=1e-4, symmetric=True) and near(X, X, angle=1e-4)
        assert not near(X, X, angle=theta / 2, symmetric=True)
    X = np.stack([rotated(0.3), rotated(0.3), 3.0 * rotated(0.3), np.zeros(3), rotated(0.3 + 1e-3)])
    assert not near(X, X, angle=1e-4, symmetric=True) and near(X, X, angle=2e-3, symmetric=True)
    tokens = np.stack([np.stack([rotated(0.0), rotated(1.0)]), np.stack([rotated(2.0), rotated(1.0 + 1e-6, 2.0)])])
    assert near(tokens, tokens, angle=1e-4, symmetric=True)  # (B, T, d): positions of different sequences
    assert near(X[:1], rotated(0.3 + 1e-6)[None], angle=1e-4) and not near(X[:1], rotated(0.3)[None], angle=1e-4)
    rng = np.random.default_rng(0)
    base = rng.standard_normal((3, 8))
    X = np.concatenate([base, base[:1] + 1e-6 * rng.standard_normal((1, 8))])
    assert netsor.limit(netsor.zoo.mlp(3, "hard_tanh", 1.5, 0.3), X).distances
    assert not netsor.limit(netsor.zoo.mlp(3, "hard_tanh", 1.5, 0.3), X, rtol=1e-2).distances
    assert not netsor.limit(netsor.zoo.mlp(3, "hard_tanh", 1.5, 0.3), base).distances
    assert netsor.limit(netsor.zoo.mlp(3, "hard_tanh", 1.5, 0.0), np.concatenate([base, -X[3:]])).distances
    assert not any(netsor.limit(netsor.zoo.mlp(3, name), X).distances for name in ("relu", "tanh"))


@pytest.mark.slow
@pytest.mark.parametrize("separation", [1e-8, 1e-6, 1e-5, 1e-3])
@pytest.mark.parametrize("name", ["hard_tanh", "relu6", "max_0.7", "clip"])
def test_more_kinked_mlp_kernels_near_duplicate_inputs_against_a_30_digit_recursion(name, separation):
    """As above for hard_tanh, relu6, ``max(x, 0.7)`` and ``clip(x, −0.5, 1.3)`` (traced) at separations 1e-8 …
    1e-3 (1e-3: the crossover between the angle's rule and the covariances', refused before for hard_tanh)."""
    fn, act = {"hard_tanh": ("hard_tanh", hard_tanh), "relu6": (lambda x: np.clip(x, 0, 6), RELU6),
               "max_0.7": (lambda x: np.maximum(x, 0.7), FLOOR),
               "clip": (lambda x: np.clip(x, -0.5, 1.3), CLIP)}[name]
    _kinked_mlp_case(fn, act, separation)


@pytest.mark.slow
def test_a_deep_relu6_network_in_the_ordered_phase_meets_the_default_rtol_against_the_relu_recursion():
    """relu6 (traced ``np.clip(x, 0, 6)``) at depth 40, σ_w = 1, σ_b = 0.1, inputs scaled so that every variance stays
    below 0.1: the kink at 6 lies ≥ 19 standard deviations out, so the kernels are relu's to e^(−180) — the 40-digit
    arc-cosine recursion is the reference. Correlations approach 1 (1 − ρ ~ 1e-11 at the nearly duplicate pair); the
    distance of the kinked function carried its relative accuracy only with the angle's slope bounded by the step
    kernel at the angle (sup φ'² there doubled the relative error a layer: bound 4.7e-8, refused)."""
    X = 0.3 * np.random.default_rng(1).standard_normal((6, 10))
    X[4] = X[3] + 1e-6 * X[0]
    k = netsor.kernel(netsor.zoo.mlp(40, lambda x: np.clip(x, 0.0, 6.0), 1.0, 0.1), X)
    K, T = references.relu_mlp_kernels_by_mpmath(X, 40, 1.0, 0.1)
    for got, err, ref in ((k.nngp, k.nngp_error, K), (k.ntk, k.ntk_error, T)):
        assert np.all(np.abs(got - ref) <= err)
        assert np.max(err / np.sqrt(np.outer(np.diag(ref), np.diag(ref)))) < 1e-8
