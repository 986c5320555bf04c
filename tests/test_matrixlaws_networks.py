"""Free predictions against finite networks and sampled matrices; the FIP check; the seed policy.

Statistical tolerances: moments are compared within 3 standard errors of the mean over
independent networks (a network's eigenvalues are strongly dependent, so networks, not
eigenvalues, are the samples), after removing the leading ``1/n`` finite-width bias by Richardson
extrapolation from widths ``n`` and ``2n``. W1 distances are bounded by a triangle inequality whose
terms are all measured (see :func:`w1_bound`). Every seed is fixed.
"""

import numpy as np
import pytest

import netsor
from netsor.matrixlaws import (
    MarchenkoPastur,
    Semicircle,
    classical_prediction,
    empirical_jacobian_spectrum,
    esd,
    fip_check,
    jacobian_spectrum,
    ks_distance,
    moment_table,
    w1_distance,
)
from netsor.stats.distances import w1_1d


def extrapolated_moments(case, width, samples, seed, **kwargs):
    """Moments m1..m4 extrapolated to infinite width from widths ``n`` and ``2n``, and their SE.

    Finite-width moments are ``m(n) = m + b/n + O(1/n²)`` (at width 200 the bias of m4 for ReLU
    at depth 4 is ~10 %, far above the SE of a dozen networks), so ``2 m(2n) − m(n)`` removes the
    leading bias; the two widths use independent networks, so its SE is
    ``sqrt(4 SE(2n)² + SE(n)²)``.
    """
    act, depth, sw, sb, kind = case
    seeds = np.random.SeedSequence(seed).spawn(2)
    (m1, s1), (m2, s2) = (moment_table(empirical_jacobian_spectrum(
        act, depth, sw, sb, weights=kind, width=n, samples=samples, seed=ss, **kwargs))
        for n, ss in zip((width, 2 * width), seeds, strict=True))
    return 2.0 * m2 - m1, np.sqrt(4.0 * s2**2 + s1**2)


CASES = [("tanh", 4, 1.2, 0.1, "gaussian"), ("relu", 4, np.sqrt(2.0), 0.0, "gaussian"),
         ("hard_tanh", 4, 1.1, 0.05, "orthogonal"), ("relu", 6, np.sqrt(2.0), 0.0, "orthogonal"),
         ("hard_tanh", 6, 1.2, 0.0, "gaussian")]


@pytest.mark.parametrize("case", CASES)
def test_moments_within_three_standard_errors(case):
    act, depth, sw, sb, kind = case
    law = jacobian_spectrum(act, depth, sw, sb, weights=kind)
    mean, se = extrapolated_moments(case, 128, 12, 3)
    assert np.all(np.abs(mean - law.moments(4)) <= 3 * se)


@pytest.mark.parametrize("q0", [None, 0.0])
def test_relu_networks_at_zero_input_variance_follow_the_predicted_law(q0):
    """σ_w = 1, σ_b = 0: q* = 0 (or q0 = 0 given), every pre-activation at relu's kink. The prediction is the
    law of q → 0+ (χ = 1/2 per layer; relu's Jacobian law is the same at every q > 0); the finite networks
    drew zero inputs, whose Jacobians are exactly 0 (relu'(0) = 0): m1 = 0 against 0.125, a NaN density in
    the command line's plot. They now draw inputs of second moment 1 there."""
    case = ("relu", 3, 1.0, 0.0, "gaussian")
    law = jacobian_spectrum(*case[:4], weights=case[4], q0=q0)
    assert law.chi == pytest.approx(0.5, rel=1e-15)
    mean, se = extrapolated_moments(case, 128, 12, 5, q0=q0)
    assert np.all(se > 0) and np.all(np.abs(mean - law.moments(4)) <= 3 * se)


def test_hard_tanh_finite_networks():
    """hard-tanh, σ_w = 1, σ_b = 0, orthogonal (Pennington et al.): from q0 = 1 the first two moments of
    finite networks match the law within 3 SE; at q* = 0 the input is 0, every unit sits at h = 0
    where φ' = 1, and JJᵀ is exactly the identity."""
    case = ("hard_tanh", 8, 1.0, 0.0, "orthogonal")
    law = jacobian_spectrum(*case[:4], weights=case[4], q0=1.0)
    mean, se = extrapolated_moments(case, 96, 12, 5, q0=1.0)
    assert np.all(np.abs(mean[:2] - law.moments(2)) <= 3 * se[:2])
    ev = empirical_jacobian_spectrum(*case[:4], weights=case[4], width=64, samples=2, seed=0)
    assert np.allclose(ev, 1.0, rtol=0, atol=1e-12)
    assert np.allclose(jacobian_spectrum(*case[:4], weights=case[4]).atoms[0], [1.0])


def w1_floor(ev, splits=20, seed=0):
    """An upper estimate of the W1 noise of the spectrum pooled over networks (rows of ``ev``).

    For a split of the networks into halves A, B with fluctuations ``ε_A``, ``ε_B`` of their cdfs
    about the finite-width expectation, the pooled cdf fluctuates by ``(ε_A + ε_B)/2`` and
    ``W1(A, B) = ‖ε_A − ε_B‖₁``; for independent, symmetric fluctuations the two have the same law,
    so ``W1(A, B)/2`` estimates the pooled noise. The largest of ``splits`` seeded random splits is
    taken (an upper quantile, not the mean: the realised noise, not its expectation, enters
    :func:`w1_bound`). W1 of two samples: :func:`netsor.stats.distances.w1_1d`.
    """
    rng = np.random.default_rng(seed)
    half = ev.shape[0] // 2
    values = []
    for _ in range(splits):
        order = rng.permutation(ev.shape[0])
        values.append(0.5 * float(w1_1d(ev[order[:half]].ravel(), ev[order[half:2 * half]].ravel())))
    return max(values)


def w1_bound(ev_n, ev_half):
    """Bound on ``W1(F̂_n, F)`` from spectra at widths ``n`` and ``n/2``.

    With ``F̂_m = G_m + ε_m`` (``G_m`` the expected spectral cdf at width m) and
    ``G_m = F + b/m + O(m⁻²)``: ``‖G_n − F‖ = ‖G_{n/2} − G_n‖ + O(n⁻²)``, so by the triangle
    inequality ``W1(F̂_n, F) ≤ W1(F̂_{n/2}, F̂_n) + ‖ε_{n/2}‖ + 2‖ε_n‖ + O(n⁻²)``, the noises
    bounded by :func:`w1_floor`.
    """
    return float(w1_1d(ev_half.ravel(), ev_n.ravel())) + w1_floor(ev_half) + 2 * w1_floor(ev_n)


def _w1_check(case, width, samples, seed):
    act, depth, sw, sb, kind = case
    law = jacobian_spectrum(act, depth, sw, sb, weights=kind)
    seeds = np.random.SeedSequence(seed).spawn(2)
    ev_n, ev_h = (empirical_jacobian_spectrum(act, depth, sw, sb, weights=kind, width=n, samples=samples, seed=ss)
                  for n, ss in zip((width, width // 2), seeds, strict=True))
    distance = w1_distance(esd(ev_n), law)
    assert distance <= w1_bound(ev_n, ev_h), (distance, w1_bound(ev_n, ev_h))
    return law, ev_n, distance


@pytest.mark.parametrize("case", [("tanh", 4, 1.05, 0.05, "gaussian"), ("tanh", 4, 1.05, 0.05, "orthogonal"),
                                  ("relu", 4, np.sqrt(2.0), 0.1, "orthogonal")])
def test_w1_at_width_300(case):
    _w1_check(case, 300, 8, 11)


def test_sampled_matrices_have_the_exact_finite_n_moments():
    """GOE model ``c I + √(v/2n)(G + Gᵀ)``: ``E tr(X − c)²/n = v (1 + 1/n)``; Wishart ``v XᵀX/m``
    (X of shape m × n): ``E tr Y/n = v`` and ``E tr Y²/n = v² (1 + (n + 1)/m)``. Within 3 SE over 16
    matrices; the spectra also have the laws' moments to ``O(1/n)``."""
    n, reps = 200, 16
    sc, mp = Semicircle(2.0, center=0.5), MarchenkoPastur(0.5, 1.5)
    goe = np.array([np.trace((x := sc.sample_matrix(n, seed=s) - 0.5 * np.eye(n)) @ x) / n for s in range(reps)])
    assert abs(goe.mean() - 2.0 * (1 + 1 / n)) <= 3 * goe.std(ddof=1) / np.sqrt(reps)
    m = round(n / 0.5)
    ys = [mp.sample_matrix(n, seed=np.random.SeedSequence(s)) for s in range(reps)]
    t1 = np.array([np.trace(y) / n for y in ys])
    t2 = np.array([np.trace(y @ y) / n for y in ys])
    assert abs(t1.mean() - 1.5) <= 3 * t1.std(ddof=1) / np.sqrt(reps)
    assert abs(t2.mean() - 1.5**2 * (1 + (n + 1) / m)) <= 3 * t2.std(ddof=1) / np.sqrt(reps)


def test_seed_policy():
    """int, SeedSequence and Generator seeds; the same seed object gives the same spectra (a
    SeedSequence is not consumed); network s does not depend on how many are drawn."""
    args = ("tanh", 2, 1.1, 0.1)
    ss = np.random.SeedSequence(7)
    a = empirical_jacobian_spectrum(*args, width=20, samples=3, seed=ss)
    assert np.array_equal(a, empirical_jacobian_spectrum(*args, width=20, samples=3, seed=ss))
    assert np.array_equal(a[:1], empirical_jacobian_spectrum(*args, width=20, samples=1, seed=ss))
    assert np.array_equal(empirical_jacobian_spectrum(*args, width=20, seed=7), a[:1])
    g = np.random.default_rng(1)
    first = empirical_jacobian_spectrum(*args, width=20, seed=g)
    assert not np.array_equal(first, empirical_jacobian_spectrum(*args, width=20, seed=g))  # consumed
    assert np.array_equal(Semicircle().sample_matrix(5, ss), Semicircle().sample_matrix(5, ss))


def test_fip_free_decays_classical_does_not():
    """The W1 to the free law decays with width (the whole 95 % CI of the log-log slope is below 0).
    The classical (commuting) law stays away: by the triangle inequality
    ``W1(finite, classical) ≥ D − W1(finite, free) − noise`` with ``D`` the W1 between the classical
    samples and the free law, computed here independently of the widths, and the classical samples'
    own noise bounded by the W1 between two halves of them."""
    rep = fip_check("relu", 4, np.sqrt(2.0), widths=(100, 200, 400, 800), replicates=2, seed=1)
    assert rep.slope_free[2] < 0
    law = jacobian_spectrum("relu", 4, np.sqrt(2.0))
    wrong = classical_prediction(law, seed=np.random.SeedSequence(1).spawn(1)[0])  # fip_check's stream 0
    dist = w1_distance(wrong, law)
    half = wrong.eigenvalues.size // 2
    noise = float(w1_1d(wrong.eigenvalues[::2][:half], wrong.eigenvalues[1::2][:half]))
    assert np.all(rep.w1_classical >= dist - rep.w1_free - noise)
    assert dist - rep.w1_free[-1].max() - noise > 0  # so the classical distance cannot vanish


VALIDATION = [("tanh", 8, 1.05, 0.05, "gaussian"), ("tanh", 8, 1.05, 0.05, "orthogonal"),
              ("relu", 8, np.sqrt(2.0), 0.0, "gaussian"), ("relu", 8, np.sqrt(2.0), 0.1, "orthogonal"),
              ("hard_tanh", 8, 1.05, 0.05, "gaussian"), ("hard_tanh", 8, 1.05, 0.05, "orthogonal"),
              ("erf", 8, 0.9, 0.05, "gaussian"), ("tanh", 16, 1.2992209668018506, 0.19504153688706546, "orthogonal"),
              ("relu", 16, np.sqrt(2.0), 0.0, "gaussian"), ("tanh", 16, 1.05, 0.05, "gaussian")]


@pytest.mark.slow
@pytest.mark.parametrize("case", VALIDATION)
def test_large_width_w1_and_moments(case):
    """Width 1000 (and 500 for the bias term of :func:`w1_bound`), 12 networks each: W1 within the
    measured bound and m1..m4 within 3 SE of the extrapolation from widths 500 and 1000."""
    act, depth, sw, sb, kind = case
    seeds = np.random.SeedSequence(11).spawn(2)
    law = jacobian_spectrum(act, depth, sw, sb, weights=kind)
    ev = {n: empirical_jacobian_spectrum(act, depth, sw, sb, weights=kind, width=n, samples=12, seed=ss)
          for n, ss in zip((1000, 500), seeds, strict=True)}
    distance = w1_distance(esd(ev[1000]), law)
    assert distance <= w1_bound(ev[1000], ev[500])
    (m_h, s_h), (m_n, s_n) = moment_table(ev[500]), moment_table(ev[1000])
    mean, se = 2.0 * m_n - m_h, np.sqrt(4.0 * s_n**2 + s_h**2)
    assert np.all(np.abs(mean - law.moments(4)) <= 3 * se)


def test_distances_take_eigenvalues_and_name_misplaced_arguments():
    """``w1_distance`` / ``ks_distance`` take eigenvalues as well as an EmpiricalSpectrum (same value); the
    law first, or something that is not a law, is a one-line InputError (both raised AttributeError)."""
    ev = np.random.default_rng(3).standard_normal(400)
    law = Semicircle()
    for distance in (w1_distance, ks_distance):
        assert distance(ev, law) == distance(esd(ev), law)
        with pytest.raises(netsor.InputError, match="first and the law second"):
            distance(law, ev)
        with pytest.raises(netsor.InputError, match="spectral law"):
            distance(ev, ev)


def test_haar_orthogonal_follows_the_seed_policy():
    """An int, a SeedSequence or a Generator (it took only a Generator, as a required argument): the
    matrix is orthogonal, one int seed gives one matrix, and n = 0 is a clear error."""
    from netsor.matrixlaws import haar_orthogonal

    for seed in (4, np.random.SeedSequence(4), np.random.default_rng(4)):
        Q = haar_orthogonal(6, seed)
        np.testing.assert_allclose(Q @ Q.T, np.eye(6), atol=1e-13)
    np.testing.assert_array_equal(haar_orthogonal(6, 4), haar_orthogonal(6, np.random.SeedSequence(4)))
    with pytest.raises(netsor.HyperParameterError, match="n must be"):
        haar_orthogonal(0)


@pytest.mark.parametrize("call,needle", [
    (lambda: netsor.matrixlaws.haar_orthogonal(10**6), "smaller n"),  # 3 × 8 TB
    (lambda: MarchenkoPastur(ratio=1e-12).sample_matrix(10), "larger ratio"),  # 10¹³ × 10 entries
    (lambda: Semicircle().sample_matrix(10**7), "smaller n"),
    (lambda: w1_distance(np.array([0.1, 0.2]), Semicircle(), resolution=10**13), "smaller resolution"),
    (lambda: empirical_jacobian_spectrum("tanh", 2, 1.0, width=10**7), "smaller width"),
])
def test_impossible_allocations_are_refused_before_they_start(call, needle):
    with pytest.raises(netsor.NetsorError, match=needle):
        call()
