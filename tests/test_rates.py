"""Tests of netsor.rates: width grids, log-log fits and their intervals, floor-aware
fits, the kernel LLN error and the resumable sweep runner."""

from __future__ import annotations

import json

import numpy as np
import pytest

from netsor.errors import HyperParameterError, InputError, NetsorError
from netsor.stats.rates import (
    cell_key,
    cell_seed,
    fit_loglog,
    fit_with_floor,
    geometric_widths,
    kernel_lln_error,
    load_sweep,
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
    assert fit.value_ci.shape == (len(WIDTHS), 2)


def test_slope_interval_covers_the_truth_at_about_the_nominal_rate():
    """200 simulated sweeps (R = 20 replicates, 10 % multiplicative noise): the 95 %
    bootstrap interval must cover the true slope in at least 89 % of them (nominal
    0.95 minus 4 binomial standard errors, 4·sqrt(0.95·0.05/200) ≈ 0.06)."""
    rng = np.random.default_rng(0)
    covered, value_covered = 0, 0
    for i in range(200):
        noise = np.exp(0.1 * rng.standard_normal((20, len(WIDTHS))))
        values = 2.0 * WIDTHS**-0.9 * noise
        fit = fit_loglog(WIDTHS, values, num_boot=500, seed=i)
        covered += fit.slope_ci[0] <= -0.9 <= fit.slope_ci[1]
        true_mean = 2.0 * WIDTHS[3] ** -0.9 * np.exp(0.005)  # E e^{0.1 Z} = e^{0.005}
        value_covered += fit.value_ci[3, 0] <= true_mean <= fit.value_ci[3, 1]
    assert covered >= 178 and value_covered >= 178


def test_median_center_and_nonpositive_values():
    rng = np.random.default_rng(1)
    values = WIDTHS**-0.5 * np.exp(0.05 * rng.standard_normal((9, len(WIDTHS))))
    fit = fit_loglog(WIDTHS, values, center="median")
    assert np.allclose(fit.center, np.median(values, axis=0))
    assert np.all(fit.value_ci[:, 0] <= fit.center) and np.all(fit.center <= fit.value_ci[:, 1])
    values[:, 2] = 0.0
    with pytest.raises(InputError, match="not positive at widths"):
        fit_loglog(WIDTHS, values)


def test_fit_with_floor_drops_widths_lost_in_the_noise():
    """Signal 0.5/w, floor 0.01 (added in quadrature): at w >= 512 the signal is a tenth
    of the floor or less, so raw − floor is below its error bar there and those widths
    must be dropped; the debiased slope on the rest is -1 while the raw slope is
    flattened by the floor."""
    rng = np.random.default_rng(2)
    signal = 0.5 / WIDTHS
    raw = np.sqrt(signal**2 + 0.01**2) + 0.0005 * rng.standard_normal((30, len(WIDTHS)))
    floor = 0.01 + 0.0005 * rng.standard_normal((30, len(WIDTHS)))
    fit = fit_with_floor(WIDTHS, raw, floor)
    assert set(fit.dropped_widths) >= {512.0, 1024.0}
    assert set(fit.kept_widths) >= {16.0, 32.0, 64.0}
    assert fit.debiased is not None and np.array_equal(fit.debiased.widths, fit.kept_widths)
    assert fit.debiased.slope_ci[0] - 0.05 <= -1.0 <= fit.debiased.slope_ci[1] + 0.05
    assert fit.raw.slope > -0.8  # flattened by the floor
    assert abs(fit.floor.slope) < 0.05
    assert fit.debiased_values.shape == raw.shape


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
