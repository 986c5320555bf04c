"""Convergence studies, the resumable sweep, `netsor reproduce` and the CLI."""

import json

import numpy as np
import pytest
from click.testing import CliRunner

import netsor
from netsor.cli import cli
from netsor.report.reproduce import Settings, reproduce
from netsor.stats.convergence import Study


def test_study_rates_match_theory(tmp_path):
    """Kernel LLN and coupling decay like n^-1/2; the RB sliced W1 of a deep MLP faster than n^-1/2."""
    X = np.random.default_rng(0).standard_normal((3, 6))
    program = netsor.zoo.mlp(4, "relu", 2**0.5, 0.0)
    widths = [16, 64, 256]
    for metric, lo, hi in [("kernel-lln", -0.6, -0.4), ("coupling", -0.6, -0.4)]:
        s = Study(program, X, metric, samples=300, replicates=3, seed=1).run(widths, tmp_path / f"{metric}.jsonl",
                                                                              progress=False)
        assert lo < s.slope < hi, (metric, s.slope)
        assert s.slope_ci[0] <= s.slope <= s.slope_ci[1]
    s = Study(program, X, "rb-sw1", samples=800, replicates=3, seed=1).run(widths, tmp_path / "rb.jsonl",
                                                                          progress=False)
    assert s.slope_ci[1] < -0.5
    assert np.all(s.floor.mean(axis=0) < s.raw.mean(axis=0))


def test_sweep_resumes_without_recomputing(tmp_path, monkeypatch):
    X = np.random.default_rng(0).standard_normal((2, 3))
    study = Study(netsor.zoo.mlp(2), X, "kernel-lln", samples=50, replicates=2, seed=3)
    store = tmp_path / "cells.jsonl"
    first = study.run([8, 16], store, progress=False)
    calls = []
    original = study.measure
    monkeypatch.setattr(study, "measure", lambda cell: calls.append(cell) or original(cell))
    again = study.run([8, 16, 32], store, progress=False)
    assert [c[2] for c in calls] == [32, 32]  # only the new width is computed
    np.testing.assert_array_equal(again.raw[:, :2], first.raw)
    # A half-written last line (interrupted write) is ignored.
    with store.open("a") as fh:
        fh.write('{"cell": ["mlp", "kernel-lln", 64')
    study.run([8, 16, 32], store, progress=False)


def test_bad_study_parameters():
    X = np.ones((2, 3))
    with pytest.raises(netsor.HyperParameterError):
        Study(netsor.zoo.mlp(2), X, "wasserstein")
    with pytest.raises(netsor.HyperParameterError):
        Study(netsor.zoo.mlp(2), X, samples=1)
    with pytest.raises(netsor.HyperParameterError):
        Study(netsor.zoo.mlp(2), X, replicates=1)
    with pytest.raises(netsor.HyperParameterError):
        Study(netsor.zoo.mlp(2), X, "kernel-lln", samples=10).run([8], "unused.jsonl")


def test_reproduce_writes_a_self_contained_report(tmp_path):
    settings = Settings(widths=(16, 32, 64), samples=200, coupling_samples=30, replicates=2, directions=8)
    report = reproduce(tmp_path, settings, progress=False, architectures=("mlp", "resnet"))
    assert set(report["architectures"]) == {"mlp", "resnet"}
    for key in ("mlp", "resnet"):
        for name in ("sliced-w1", "coupling", "kernel-lln"):
            png = tmp_path / f"{key}-{name}.png"
            assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    data = json.loads((tmp_path / "results.json").read_text())
    assert data["architectures"]["resnet"]["paper_slope"] == -0.797
    md = (tmp_path / "report.md").read_text()
    assert "-0.797" in md and "ResNet" in md
    cells = list(tmp_path.glob("cells-*.jsonl"))
    assert len(cells) == 1
    before = cells[0].read_text()
    reproduce(tmp_path, settings, progress=False, architectures=("mlp", "resnet"))  # resumes: nothing new
    assert cells[0].read_text() == before


@pytest.mark.slow
def test_quick_reproduce_meets_the_papers_claims(tmp_path):
    """The acceptance criteria of the paper's Section 5 on the --quick settings."""
    report = reproduce(tmp_path, Settings.quick(), progress=False)
    for key in ("deep-mlp", "resnet"):
        assert report["architectures"][key]["sliced_w1"]["slope_ci"][1] < -0.5
    for e in report["architectures"].values():
        assert -0.6 <= e["coupling"]["slope"] <= -0.4
        assert -0.6 <= e["kernel_lln"]["slope"] <= -0.4
        assert e["rb_variance_reduction"] > 1


def test_cli_kernel_sample_converge(tmp_path):
    runner = CliRunner()
    X = np.random.default_rng(0).standard_normal((4, 3))
    np.save(tmp_path / "X.npy", X)
    out = tmp_path / "K.npy"
    r = runner.invoke(cli, ["kernel", "mlp", "--depth", "3", "--activation", "erf", "--sigma-b", "0.2",
                            "--inputs", str(tmp_path / "X.npy"), "--out", str(out)])
    assert r.exit_code == 0, r.output
    np.testing.assert_allclose(np.load(out), netsor.nngp(netsor.zoo.mlp(3, "erf", 1.0, 0.2), X), rtol=1e-13)
    r = runner.invoke(cli, ["sample", "rnn", "--depth", "2", "--random", "3,4", "--width", "64", "--samples", "50"])
    assert r.exit_code == 0, r.output
    js = tmp_path / "c.json"
    r = runner.invoke(cli, ["converge", "resnet", "--depth", "2", "--random", "3,4", "--widths", "16,32,64",
                            "--samples", "200", "-R", "2", "--metric", "coupling", "--json", str(js)])
    assert r.exit_code == 0, r.output
    data = json.loads(js.read_text())
    assert data["metric"] == "coupling" and len(data["slope_ci"]) == 2
    assert [row["width"] for row in data["rows"]] == [16, 32, 64]
    assert set(data["rows"][0]) >= {"width", "distance", "ci", "floor"}
    assert js.with_suffix(".png").exists() and js.with_suffix(".csv").exists()


@pytest.mark.parametrize("args", [
    ["kernel", "mlp", "--activation", "nope", "--random", "3,3"],
    ["kernel", "mlp", "--random", "3"],
    ["kernel", "mlp"],
    ["sample", "mlp", "--random", "3,3", "--width", "0"],
    ["converge", "mlp", "--widths", "16,a"],
    ["converge", "mlp", "--metric", "coupling", "--widths", "16"],
])
def test_cli_errors_are_one_line(args, capsys):
    with pytest.raises(SystemExit) as info:
        netsor.cli.main(args)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.strip()
