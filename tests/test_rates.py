"""Tests of netsor.rates: width grids, log-log fits and their intervals, floor-aware
fits, the kernel LLN error and the resumable sweep runner."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy import stats

from netsor.errors import HyperParameterError, InputError, NetsorError
from netsor.stats.distances import debias
from netsor.stats.rates import (
    above,
    cell_key,
    cell_seed,
    debias_replicates,
    fit_loglog,
    fit_with_floor,
    geometric_widths,
    kernel_lln_error,
    load_sweep,
    mean_interval,
    run_sweep,
)

WIDTHS = np.array([16, 32, 64, 128, 256, 512, 1024], dtype=float)


def test_geometric_widths():
    w = geometric_widths(10, 10_000, 7)
    assert w.dtype == np.int64 and w[0] == 10 and w[-1] == 10_000 and len(w) == 7
    assert np.allclose(np.diff(np.log(w)), np.log(10) / 2, rtol=0.02)
    small = geometric_widths(1, 4, 10)
    assert np.array_equal(small, [1, 2, 3, 4])  # rounding merges neighbours
    for bad in [(0, 10, 3), (10, 5, 3), (1, 10, 1), (1.5, 10, 3)]:
        with pytest.raises(HyperParameterError):
            geometric_widths(*bad)


def test_fit_recovers_an_exact_power_law():
    values = np.tile(3.0 * WIDTHS**-0.75, (5, 1))
    fit = fit_loglog(WIDTHS, values)
    assert fit.slope == pytest.approx(-0.75, abs=1e-12)
    assert fit.intercept == pytest.approx(np.log(3.0), abs=1e-12)
    assert fit.slope_ci == pytest.approx((-0.75, -0.75), abs=1e-12)
    assert np.allclose(fit.predict(WIDTHS), values[0])
    assert fit.interval == "95 % Student-t interval over 5 replicates"


def test_slope_interval_is_the_t_interval_of_the_replicate_slopes():
    """Values ``s_r · 2 w^(−0.9 + δ_r)`` with tiny δ. The slope of log(mean) is
    ``−0.9 + Σ s_r δ_r / Σ s_r`` and replicate r's linearised slope is
    ``slope + (s_r δ_r − mean(s δ)) / mean(s)`` (the influence of row r), to O(δ²); the
    interval is their t-interval, mean ± t_{R−1} sd/√R. With equal s_r that is the
    textbook t-interval of the per-replicate slopes −0.9 + δ_r."""
    eps = 1e-4
    deltas = eps * np.array([1.0, -2.0, 0.5, 1.2])
    t = stats.t.ppf(0.975, 3)
    for scale in (np.ones(4), np.array([1.0, 1.3, 0.8, 1.1])):
        values = scale[:, None] * 2.0 * WIDTHS ** (-0.9 + deltas[:, None])
        fit = fit_loglog(WIDTHS, values)
        influence = (scale * deltas - (scale * deltas).mean()) / scale.mean()
        assert fit.slope == pytest.approx(-0.9 + (scale * deltas).sum() / scale.sum(), abs=eps**2 * 100)
        np.testing.assert_allclose(fit.replicate_slopes - fit.slope, influence, atol=eps**2 * 100)
        half = t * influence.std(ddof=1) / 2.0
        assert fit.slope_ci == pytest.approx((fit.slope - half, fit.slope + half), abs=eps**2 * 100)
    # equal scales: the per-replicate least-squares slopes themselves
    assert fit_loglog(WIDTHS, 2.0 * WIDTHS ** (-0.9 + deltas[:, None])).slope_ci[1] - (-0.9 + deltas.mean()) \
        == pytest.approx(t * deltas.std(ddof=1) / 2.0, abs=eps**2 * 100)


COVERAGE_SIMULATIONS = 2000


def _binomial_band(n: int, p: float = 0.95) -> tuple[float, float]:
    """Nominal coverage ± 4 binomial standard errors of ``n`` simulations."""
    se = np.sqrt(p * (1 - p) / n)
    return p - 4 * se, p + 4 * se


@pytest.mark.parametrize("replicates", [3, 4])
def test_slope_and_value_intervals_cover_at_the_nominal_rate(replicates):
    """Seeded simulations of a known power law 2·w^-0.9 with R = 3 or 4 replicates, 10 %
    multiplicative noise per cell plus a 20 % factor per replicate shared by all widths
    (like common slicing directions). The 95 % intervals must cover the truth in a fraction
    within 4 binomial standard errors of 0.95 (2000 simulations: ±0.019). The old intervals
    fail this: 2·sd/√R covers 86 % at R = 4, a bootstrap over 4 rows about as little."""
    rng = np.random.default_rng(20240)
    lo, hi = _binomial_band(COVERAGE_SIMULATIONS)
    slope_hits = value_hits = intercept_hits = 0
    j = 3
    for _ in range(COVERAGE_SIMULATIONS):
        noise = 0.1 * rng.standard_normal((replicates, len(WIDTHS))) + 0.2 * rng.standard_normal((replicates, 1))
        values = 2.0 * WIDTHS**-0.9 * np.exp(noise)
        fit = fit_loglog(WIDTHS, values)
        slope_hits += fit.slope_ci[0] <= -0.9 <= fit.slope_ci[1]
        # E e^{0.1 Z + 0.2 Z'} = e^{0.025}: the true mean and the true log-intercept.
        true_mean = 2.0 * WIDTHS[j] ** -0.9 * np.exp(0.025)
        value_hits += fit.value_ci[j, 0] <= true_mean <= fit.value_ci[j, 1]
        intercept_hits += fit.intercept_ci[0] <= np.log(2.0) + 0.025 <= fit.intercept_ci[1]
    for hits in (slope_hits, value_hits, intercept_hits):
        assert lo <= hits / COVERAGE_SIMULATIONS <= hi, (slope_hits, value_hits, intercept_hits)


def test_mean_interval_is_student_t():
    values = np.array([[1.0, 2.0], [2.0, 2.5], [4.0, 3.0], [5.0, 2.0]])
    mean, ci = mean_interval(values, level=0.9)
    half = stats.t.ppf(0.95, 3) * values.std(axis=0, ddof=1) / 2.0
    np.testing.assert_allclose(mean, [3.0, 2.375])
    np.testing.assert_allclose(ci, np.stack([mean - half, mean + half], axis=1))
    with pytest.raises(InputError, match="R >= 2"):
        mean_interval(values[:1])
    with pytest.raises(HyperParameterError):
        mean_interval(values, level=1.0)


def test_fit_needs_replicates_and_positive_means():
    rng = np.random.default_rng(1)
    values = WIDTHS**-0.5 * np.exp(0.05 * rng.standard_normal((9, len(WIDTHS))))
    with pytest.raises(InputError, match="2 independent replicates"):
        fit_loglog(WIDTHS, values[:1])
    values[:, 2] = 0.0
    with pytest.raises(InputError, match="not positive at widths"):
        fit_loglog(WIDTHS, values)


def test_paired_test_keeps_what_is_above_the_floor():
    """Rows of raw and floor are the same replicates: a common per-replicate shift cancels
    in the paired test, which then detects a small but consistent excess."""
    shift = np.array([0.0, 1.0, -1.0, 0.5])[:, None]
    floor = 1.0 + shift + np.zeros((4, 2))
    raw = floor + np.array([[0.01, 0.0], [0.012, 0.001], [0.011, -0.001], [0.013, 0.0]])
    np.testing.assert_array_equal(above(raw, floor), [True, False])


def test_fit_with_floor_drops_widths_lost_in_the_noise():
    """Signal 0.5/w, floor 0.01 (added in quadrature): at w >= 512 the signal is a tenth
    of the floor or less, so raw − floor is below its error bar there and those widths
    must be dropped; the raw slope is flattened by the floor, the floor's is 0."""
    rng = np.random.default_rng(2)
    signal = 0.5 / WIDTHS
    raw = np.sqrt(signal**2 + 0.01**2) + 0.0005 * rng.standard_normal((30, len(WIDTHS)))
    floor = 0.01 + 0.0005 * rng.standard_normal((30, len(WIDTHS)))
    fit = fit_with_floor(WIDTHS, raw, floor)
    assert set(fit.dropped_widths) >= {512.0, 1024.0}
    assert set(fit.kept_widths) >= {16.0, 32.0, 64.0}
    assert fit.debiased is not None and np.array_equal(fit.debiased.widths, fit.kept_widths)
    assert fit.raw.slope_ci[0] > -0.8  # flattened by the floor
    assert fit.floor.slope_ci[0] <= 0.0 <= fit.floor.slope_ci[1]
    with pytest.raises(InputError, match="same shape"):
        fit_with_floor(WIDTHS, raw, floor[:10])


def test_debiased_interval_per_width_covers_also_at_the_floor():
    """Raw distances sqrt(s² + f²)·(1 + 5 % noise) and floors f·(1 + 30 % noise), f = 0.01,
    R = 4, with signal s = 2f, f, f/2 and 0. The per-width 95 % interval of the debiased
    distance must cover s at the nominal rate (±4 binomial standard errors over 2000
    simulations) where s > 0, and at least that often at s = 0, where it is [0, upper]
    (a one-sided statement; [0, 0] only when the whole interval of d² − f² is negative)."""
    signal = np.array([0.02, 0.01, 0.005, 0.0])
    lo, hi = _binomial_band(COVERAGE_SIMULATIONS)
    rng = np.random.default_rng(11)
    hits = np.zeros(len(signal))
    for _ in range(COVERAGE_SIMULATIONS):
        raw = np.sqrt(signal**2 + 0.01**2) * (1 + 0.05 * rng.standard_normal((4, len(signal))))
        floor = 0.01 * (1 + 0.3 * rng.standard_normal((4, len(signal))))
        out = debias_replicates(raw, floor)
        np.testing.assert_allclose(out.value, debias(raw.mean(axis=0), floor.mean(axis=0)))
        hits += (out.ci[:, 0] <= signal) & (signal <= out.ci[:, 1])
    coverage = hits / COVERAGE_SIMULATIONS
    assert np.all((lo <= coverage[:3]) & (coverage[:3] <= hi)), coverage
    assert coverage[3] >= lo, coverage


def test_debiased_slope_interval_covers_and_carries_the_floor_noise():
    """Simulated sweeps with a known debiased truth: raw = sqrt(s² + f²) + noise with
    s = 0.5·w^-1 and f = 0.01 at widths where s ≥ 2f; the floor replicates are as noisy as
    the distances. The debiased 95 % slope interval must cover −1 at the nominal rate
    (1000 simulations, ±4 binomial standard errors = ±0.028); without the floor's noise
    (debias with the mean floor only) the intervals are too short and cover about 75 %,
    which the test also checks."""
    widths = np.array([4.0, 8.0, 12.0, 16.0, 25.0])
    signal = 0.5 / widths
    sims, reps = 1000, 4
    lo, hi = _binomial_band(sims)
    rng = np.random.default_rng(7)
    hits = naive_hits = 0
    for _ in range(sims):
        raw = np.sqrt(signal**2 + 0.01**2) * (1 + 0.02 * rng.standard_normal((reps, len(widths))))
        floor = 0.01 * (1 + 0.3 * rng.standard_normal((reps, len(widths))))
        fit = fit_with_floor(widths, raw, floor)
        assert fit.debiased is not None and len(fit.kept_widths) == len(widths)
        hits += fit.debiased.slope_ci[0] <= -1.0 <= fit.debiased.slope_ci[1]
        naive = fit_loglog(widths, debias(raw, floor.mean(axis=0)))
        naive_hits += naive.slope_ci[0] <= -1.0 <= naive.slope_ci[1]
    assert lo <= hits / sims <= hi, hits
    assert naive_hits / sims < lo, naive_hits


def test_kernel_lln_error_decays_like_inverse_sqrt_width():
    """K̂ = HᵀH/n with rows of H iid N(0, K): E|K̂ − K| = c n^{-1/2} (1 + O(1/n)); widths
    from 64 so that the O(1/n) correction is below the interval's resolution."""
    k = np.array([[1.0, 0.4], [0.4, 0.8]])
    root = np.linalg.cholesky(k)
    widths = np.array([64, 256, 1024, 4096], dtype=float)
    rng = np.random.default_rng(3)
    values = np.empty((12, len(widths)))
    for j, n in enumerate(widths.astype(int)):
        for r in range(12):
            h = rng.standard_normal((50, n, 2)) @ root.T
            khat = np.einsum("snd,sne->sde", h, h) / n
            values[r, j] = kernel_lln_error(khat, k)
    fit = fit_loglog(widths, values)
    assert fit.slope_ci[0] <= -0.5 <= fit.slope_ci[1]
    khat = np.stack([k + np.array([[0.3, 0.0], [0.0, -0.4]])] * 3)
    assert kernel_lln_error(khat, k) == pytest.approx(0.7 / 4)
    assert kernel_lln_error(khat, k, norm="fro") == pytest.approx(0.5 / 2)
    with pytest.raises(InputError):
        kernel_lln_error(khat, np.eye(3))


def test_run_sweep_resumes_without_recomputing(tmp_path):
    store = tmp_path / "sub" / "sweep.jsonl"
    calls = []

    def fn(cell):
        calls.append(cell)
        rng = np.random.default_rng(cell_seed(cell, seed=1))
        return {"value": rng.random(), "vector": np.arange(cell[1])}

    cells = [("mlp", w, r) for w in (2, 4) for r in range(2)]
    first = run_sweep(cells, fn, store, progress=False)
    assert len(calls) == 4 and first[("mlp", 4, 1)]["vector"] == [0, 1, 2, 3]
    again = run_sweep(cells + [("mlp", 8, 0)], fn, store, progress=False)
    assert len(calls) == 5 and calls[-1] == ("mlp", 8, 0)
    assert all(again[c] == first[c] for c in cells)
    # Same cell, same numbers, whatever ran before it.
    assert fn(("mlp", 2, 0))["value"] == first[("mlp", 2, 0)]["value"]


def test_run_sweep_survives_a_half_written_last_line(tmp_path):
    store = tmp_path / "sweep.jsonl"
    run_sweep([1, 2], lambda c: {"x": float(c)}, store, progress=False)
    with store.open("ab") as fh:
        fh.write(b'{"cell": 3, "result": {"x": 3.')  # killed mid-write
    assert set(load_sweep(store)) == {cell_key(1), cell_key(2)}
    out = run_sweep([1, 2, 3], lambda c: {"x": 10.0 * c}, store, progress=False)
    assert out == {1: {"x": 1.0}, 2: {"x": 2.0}, 3: {"x": 30.0}}
    lines = store.read_text().splitlines()
    assert len(lines) == 3 and all(json.loads(line) for line in lines)


def test_run_sweep_rejects_corruption_duplicates_and_unstorable_values(tmp_path):
    store = tmp_path / "sweep.jsonl"
    store.write_text('garbage\n{"cell": 1, "result": {}}\n')
    with pytest.raises(InputError, match="sweep.jsonl:1"):
        run_sweep([1], lambda c: {}, store, progress=False)
    with pytest.raises(NetsorError, match="duplicates"):
        run_sweep([5, 5], lambda c: {}, tmp_path / "b.jsonl", progress=False)
    with pytest.raises(InputError, match="cannot store"):
        run_sweep([object()], lambda c: {}, tmp_path / "c.jsonl", progress=False)
    with pytest.raises(InputError, match="must return a dict"):
        run_sweep([1], lambda c: 1.0, tmp_path / "d.jsonl", progress=False)


def test_cell_keys_are_canonical():
    assert cell_key(("a", 1)) == cell_key(["a", 1])
    assert cell_key({"b": 1, "a": 2}) == cell_key({"a": 2, "b": 1})
    a = np.random.default_rng(cell_seed(("a", 1))).random()
    assert a == np.random.default_rng(cell_seed(["a", 1])).random()
    assert a != np.random.default_rng(cell_seed(("a", 2))).random()


def test_sweep_stores_and_cells_of_the_wrong_kind_are_refused(tmp_path):
    """A directory as the store raised IsADirectoryError; a list cell raised TypeError (unhashable) only after
    every cell had run; cells 1 and 1.0 are distinct keys but one dict key, and the result lost one."""
    with pytest.raises(InputError, match="not a file.*run_sweep"):
        load_sweep(tmp_path)
    with pytest.raises(InputError, match="not a file"):
        run_sweep([1], lambda c: {}, tmp_path, progress=False)
    store = tmp_path / "sweep.jsonl"
    calls = []
    with pytest.raises(InputError, match="not hashable.*tuples"):
        run_sweep([[1]], lambda c: calls.append(c) or {}, store, progress=False)
    assert calls == [] and not store.exists()
    with pytest.raises(InputError, match="duplicates"):
        run_sweep([1, 1.0], lambda c: {}, store, progress=False)
    with pytest.raises(InputError, match="iterable"):
        run_sweep(5, lambda c: {}, store, progress=False)
    with pytest.raises(InputError, match="callable"):
        run_sweep([1], None, store, progress=False)
    with pytest.raises(InputError, match="store_path must be a path"):
        load_sweep(5)
