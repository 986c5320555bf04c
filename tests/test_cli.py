"""The `netsor` command line: results of kernel / sample / converge / reproduce, and every
user error ending as one line ``error: ...`` on stderr with exit status 2."""

from __future__ import annotations

import json

import numpy as np
import pytest

import netsor
from netsor.cli import main


def run_ok(args: list[str], capsys) -> str:
    main(args)  # returns normally on success (no SystemExit)
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    return captured.out


def run_error(args: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as info:
        main(args)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


def relu_mlp1_kernel(X: np.ndarray, sigma_w: float, sigma_b: float) -> np.ndarray:
    """Depth-1 ReLU MLP, independently of netsor: g ~ N(0, σw² xᵀx'/d + σb²) and
    K = σw² E[relu(g) relu(g')] + σb² with the arc-cosine formula."""
    cov = sigma_w**2 * X @ X.T / X.shape[1] + sigma_b**2
    norms = np.sqrt(np.diag(cov))
    cos = np.clip(cov / np.outer(norms, norms), -1.0, 1.0)
    theta = np.arccos(cos)
    relu = np.outer(norms, norms) * (np.sin(theta) + (np.pi - theta) * cos) / (2 * np.pi)
    return sigma_w**2 * relu + sigma_b**2


def test_kernel_matches_the_arccos_formula_and_creates_the_out_directory(tmp_path, capsys):
    X = np.random.default_rng(0).standard_normal((4, 3))
    np.save(tmp_path / "X.npy", X)
    out = tmp_path / "new" / "dir" / "K"  # missing directories are created; no ".npy" is appended
    text = run_ok(["kernel", "mlp", "--depth", "1", "--sigma-w", "1.5", "--sigma-b", "0.2",
                   "--inputs", str(tmp_path / "X.npy"), "--out", str(out)], capsys)
    assert f"saved {out}" in text
    np.testing.assert_allclose(np.load(out), relu_mlp1_kernel(X, 1.5, 0.2), rtol=1e-12, atol=1e-14)


def test_sample_compares_covariances_and_saves_outputs(tmp_path, capsys):
    out = tmp_path / "missing" / "Y.npy"
    text = run_ok(["sample", "rnn", "--depth", "2", "--random", "3,4", "--width", "64", "--samples", "50",
                   "--out", str(out)], capsys)
    assert np.load(out).shape == (50, 3 * 2)  # rnn: one output per step
    assert "max z-score =" in text and "nan" not in text


def test_sample_with_one_network_says_no_covariance_check(capsys):
    text = run_ok(["sample", "mlp", "--random", "3,3", "--samples", "1"], capsys)
    assert "needs at least 2 networks" in text and "nan" not in text


def test_sample_with_few_networks_cautions_about_its_z_scores(capsys):
    """Three width-1 networks gave "max z-score = 3824.76" with no comment: standard errors from three
    fourth moments are themselves noise. Below 30 networks the line says so; at 50 it does not."""
    few = run_ok(["sample", "mlp", "--random", "3,4", "--width", "1", "--samples", "3"], capsys)
    assert "max z-score" in few and "with 3 networks the standard errors are themselves uncertain" in few
    many = run_ok(["sample", "mlp", "--random", "3,4", "--width", "8", "--samples", "50"], capsys)
    assert "max z-score" in many and "uncertain" not in many


def test_converge_writes_json_csv_png_with_snake_case_keys(tmp_path, capsys):
    js = tmp_path / "sub" / "c.json"
    text = run_ok(["converge", "resnet", "--depth", "2", "--random", "3,4", "--widths", "16,32,64",
                   "--samples", "100", "-R", "3", "--metric", "kernel-lln", "--json", str(js)], capsys)
    assert "Student-t interval over 3 replicates" in text
    data = json.loads(js.read_text())
    assert data["metric"] == "kernel_lln" and data["interval"] == "95 % Student-t interval over 3 replicates"
    assert [row["width"] for row in data["rows"]] == [16, 32, 64]
    assert set(data["rows"][0]) == {"width", "distance", "ci", "raw", "stderr"}  # no noise floor here
    assert data["slope_ci"][0] < data["slope"] < data["slope_ci"][1]
    assert js.with_suffix(".csv").read_text().splitlines()[0] == "width,distance,ci_low,ci_high,floor,stderr"
    assert js.with_suffix(".png").read_bytes()[:4] == b"\x89PNG"


def test_help_exits_normally(capsys):
    assert "converge" in run_ok(["--help"], capsys)


@pytest.fixture
def files(tmp_path):
    np.save(tmp_path / "good.npy", np.ones((3, 2)))
    np.save(tmp_path / "flat.npy", np.ones(3))
    np.save(tmp_path / "nan.npy", np.array([[1.0, np.nan]]))
    np.savez(tmp_path / "arch.npz", a=np.ones((3, 2)))
    (tmp_path / "garbage.npy").write_bytes(b"not an array at all")
    (tmp_path / "empty.npy").write_bytes(b"")
    (tmp_path / "afile").write_text("x")
    return tmp_path


ERRORS = {
    # --seed
    "negative seed": ["kernel", "mlp", "--random", "3,3", "--seed", "-1"],
    "seed not an integer": ["kernel", "mlp", "--random", "3,3", "--seed", "abc"],
    "reproduce negative seed": ["reproduce", "--seed", "-1", "--out", "{tmp}/r"],
    # --memory-budget
    "negative budget": ["kernel", "mlp", "--random", "3,3", "--memory-budget", "-1"],
    "zero budget": ["kernel", "mlp", "--random", "3,3", "--memory-budget", "0"],
    "nan budget": ["kernel", "mlp", "--random", "3,3", "--memory-budget", "nan"],
    "inf budget": ["kernel", "mlp", "--random", "3,3", "--memory-budget", "inf"],
    # --width / --samples
    "huge width": ["sample", "mlp", "--random", "3,3", "--width", "1000000000000"],
    "zero width": ["sample", "mlp", "--random", "3,3", "--width", "0"],
    "zero samples": ["sample", "mlp", "--random", "3,3", "--samples", "0"],
    "negative samples": ["sample", "mlp", "--random", "3,3", "--samples", "-5"],
    "huge samples": ["sample", "mlp", "--random", "3,3", "--samples", "100000000000000"],
    "converge one sample": ["converge", "mlp", "--samples", "1", "--json", "{tmp}/c.json"],
    "converge one replicate": ["converge", "mlp", "--replicates", "1", "--json", "{tmp}/c.json"],
    "converge no directions": ["converge", "mlp", "--directions", "0", "--json", "{tmp}/c.json"],
    # --widths
    "one width": ["converge", "mlp", "--widths", "16", "--json", "{tmp}/c.json"],
    "one distinct width": ["converge", "mlp", "--widths", "16,16", "--json", "{tmp}/c.json"],
    "width not an integer": ["converge", "mlp", "--widths", "16,a", "--json", "{tmp}/c.json"],
    "fractional width": ["converge", "mlp", "--widths", "16,2.5", "--json", "{tmp}/c.json"],
    "zero in widths": ["converge", "mlp", "--widths", "0,16", "--json", "{tmp}/c.json"],
    "empty widths": ["converge", "mlp", "--widths", "", "--json", "{tmp}/c.json"],
    "huge converge width": ["converge", "mlp", "--widths", "16,1000000000000", "--json", "{tmp}/c.json"],
    # --metric
    "metric with underscore": ["converge", "mlp", "--metric", "kernel_lln", "--json", "{tmp}/c.json"],
    # --random
    "random zero inputs": ["kernel", "mlp", "--random", "0,3"],
    "random one number": ["kernel", "mlp", "--random", "3"],
    "random three numbers": ["kernel", "mlp", "--random", "3,4,5"],
    "random negative": ["kernel", "mlp", "--random", "-1,3"],
    "random huge": ["kernel", "mlp", "--random", "100000000000,100000000"],
    "random kernel too big": ["kernel", "mlp", "--random", "10000000,2"],
    "no inputs": ["kernel", "mlp"],
    "both inputs": ["kernel", "mlp", "--random", "3,2", "--inputs", "{tmp}/good.npy"],
    # hyper-parameters
    "nan sigma-w": ["kernel", "mlp", "--random", "3,3", "--sigma-w", "nan"],
    "inf sigma-w": ["kernel", "mlp", "--random", "3,3", "--sigma-w", "inf"],
    "negative sigma-w": ["kernel", "mlp", "--random", "3,3", "--sigma-w", "-1"],
    "nan sigma-b": ["sample", "mlp", "--random", "3,3", "--sigma-b", "nan"],
    "nan sigma-u": ["kernel", "rnn", "--random", "3,3", "--sigma-u", "nan"],
    "inf sigma-v": ["kernel", "rnn", "--random", "3,3", "--sigma-v", "inf"],
    "nan sigma-u for mlp": ["kernel", "mlp", "--random", "3,3", "--sigma-u", "nan"],
    "zero depth": ["kernel", "mlp", "--random", "3,3", "--depth", "0"],
    "huge depth": ["kernel", "mlp", "--random", "3,3", "--depth", "1000000000"],
    "unknown activation": ["kernel", "mlp", "--activation", "nope", "--random", "3,3"],
    "unknown architecture": ["kernel", "transformer9", "--random", "3,3"],
    "unknown method": ["sample", "mlp", "--random", "3,3", "--method", "sparse"],
    "unknown option": ["kernel", "mlp", "--random", "3,3", "--nope"],
    # --inputs
    "inputs missing": ["kernel", "mlp", "--inputs", "{tmp}/missing.npy"],
    "inputs garbage": ["kernel", "mlp", "--inputs", "{tmp}/garbage.npy"],
    "inputs empty file": ["kernel", "mlp", "--inputs", "{tmp}/empty.npy"],
    "inputs a directory": ["kernel", "mlp", "--inputs", "{tmp}"],
    "inputs npz": ["kernel", "mlp", "--inputs", "{tmp}/arch.npz"],
    "inputs 1-D": ["kernel", "mlp", "--inputs", "{tmp}/flat.npy"],
    "inputs with NaN": ["sample", "mlp", "--inputs", "{tmp}/nan.npy"],
    "rnn needs steps": ["sample", "rnn", "--inputs", "{tmp}/good.npy"],
    # outputs
    "kernel out is a directory": ["kernel", "mlp", "--random", "3,3", "--out", "{tmp}"],
    "sample out unwritable": ["sample", "mlp", "--random", "3,3", "--out", "/proc/netsor-test/Y.npy"],
    "json is a directory": ["converge", "mlp", "--json", "{tmp}"],
    "reproduce out is a file": ["reproduce", "--quick", "--out", "{tmp}/afile"],
    "reproduce unknown arch": ["reproduce", "--arch", "deep_mlp", "--out", "{tmp}/r"],
}


@pytest.mark.parametrize("name", sorted(ERRORS))
def test_user_errors_are_one_line_with_status_2(name, files, capsys):
    args = [a.replace("{tmp}", str(files)) for a in ERRORS[name]]
    run_error(args, capsys)


def test_error_messages_name_the_option(files, capsys):
    assert "--seed" in run_error(ERRORS["negative seed"], capsys)
    assert "--memory-budget" in run_error(ERRORS["nan budget"], capsys)
    assert "--widths" in run_error([a.replace("{tmp}", str(files)) for a in ERRORS["one width"]], capsys)
    assert "--samples" in run_error(ERRORS["zero samples"], capsys)
    assert "--width" in run_error(ERRORS["huge width"], capsys)
    assert "--sigma-w" in run_error(ERRORS["nan sigma-w"], capsys)
    assert "--inputs" in run_error([a.replace("{tmp}", str(files)) for a in ERRORS["inputs garbage"]], capsys)


def test_nothing_is_computed_before_the_options_are_checked(tmp_path, capsys, monkeypatch):
    """A bad --out is reported before the (possibly long) computation starts."""
    calls = []
    monkeypatch.setattr(netsor, "kernel", lambda *a, **k: calls.append(1))
    run_error(["kernel", "mlp", "--random", "3,3", "--out", str(tmp_path)], capsys)
    assert calls == []


def test_kernel_command_runs_the_netsork_architectures(tmp_path, capsys) -> None:
    out = tmp_path / "k.npy"
    run_ok(["kernel", "transformer", "--depth", "2", "--sigma-u", "1.2", "--random", "2,5", "--seed", "4",
            "--out", str(out)], capsys)
    X = np.random.default_rng(4).standard_normal((2, 4, 5))  # (B, tokens = 4, d)
    expected = netsor.nngp(netsor.zoo.transformer(2, sigma_u=1.2), X)
    assert np.array_equal(np.load(out), expected)
    run_ok(["kernel", "layernorm_mlp", "--depth", "2", "--activation", "erf", "--random", "3,4",
            "--out", str(out)], capsys)
    X = np.random.default_rng(0).standard_normal((3, 4))
    assert np.array_equal(np.load(out), netsor.nngp(netsor.zoo.layernorm_mlp(2, "erf"), X))
    assert "has no --activation" in run_error(["kernel", "transformer", "--activation", "tanh", "--random", "2,3"],
                                              capsys)


def test_kernel_command_gives_the_ntk(tmp_path, capsys) -> None:
    out = tmp_path / "ntk.npy"
    text = run_ok(["kernel", "mlp", "--ntk", "--depth", "2", "--sigma-b", "0.1", "--random", "3,4", "--out", str(out)],
                  capsys)
    assert "NTK (3, 3)" in text
    X = np.random.default_rng(0).standard_normal((3, 4))
    assert np.array_equal(np.load(out), netsor.ntk(netsor.zoo.mlp(2, "relu", 1.0, 0.1), X))


def test_kernel_command_simulates_long_recurrences(tmp_path, capsys) -> None:
    """``--rtol`` within QMC's reach and a GRU of 3 steps: the simulated limit (method auto), the
    same kernel as the library's for the same seed, and its bound printed."""
    out = tmp_path / "k.npy"
    text = run_ok(["kernel", "gru", "--depth", "3", "--random", "2,3", "--rtol", "2e-2", "--seed", "5",
                   "--out", str(out)], capsys)
    assert "joint randomised QMC simulation" in text
    X = np.random.default_rng(5).standard_normal((2, 3, 3))
    assert np.array_equal(np.load(out), netsor.nngp(netsor.zoo.gru(3), X, rtol=2e-2, seed=5))
    assert "expectation engine" in run_ok(["kernel", "gru", "--depth", "1", "--random", "2,3", "--rtol", "2e-2",
                                           "--method", "expectations"], capsys)
    assert "--rtol" in run_error(["kernel", "mlp", "--random", "2,2", "--rtol", "0"], capsys)


def test_cnn_kernel_on_the_command_line(tmp_path, capsys):
    """``--length`` sets the positions of a cnn; the kernel is that of ``netsor.zoo.cnn``."""
    X = np.random.default_rng(2).standard_normal((3, 5, 2))
    np.save(tmp_path / "x.npy", X)
    out = run_ok(["kernel", "cnn", "--depth", "2", "--length", "5", "--sigma-b", "0.1",
                  "--inputs", str(tmp_path / "x.npy"), "--out", str(tmp_path / "k.npy")], capsys)
    assert "cnn(depth=2, length=5" in out
    K = netsor.nngp(netsor.zoo.cnn(2, "relu", 1.0, 0.1, length=5), X)
    assert np.array_equal(np.load(tmp_path / "k.npy"), K)
    assert "--length" in run_error(["kernel", "cnn", "--length", "0", "--random", "3,2"], capsys)


def test_a_cnn_on_the_command_line_takes_the_positions_of_its_input_file(tmp_path, capsys):
    """Without ``--length`` a cnn reads every position of ``--inputs`` (a cnn of the default 8
    positions read 8 of these 11 and wrapped its circular padding there: another network); with
    ``--random`` it gets the default 8."""
    X = np.random.default_rng(3).standard_normal((2, 11, 2))
    np.save(tmp_path / "x.npy", X)
    out = run_ok(["kernel", "cnn", "--depth", "1", "--inputs", str(tmp_path / "x.npy"),
                  "--out", str(tmp_path / "k.npy")], capsys)
    assert "cnn(depth=1, length=11" in out
    assert np.array_equal(np.load(tmp_path / "k.npy"), netsor.nngp(netsor.zoo.cnn(1, length=11), X))
    assert "length=8" in run_ok(["kernel", "cnn", "--depth", "1", "--random", "2,2"], capsys)
    np.save(tmp_path / "flat.npy", X[:, 0])  # no positions: refused by the input check, not the peek
    assert "(B, T, d)" in run_error(["kernel", "cnn", "--inputs", str(tmp_path / "flat.npy")], capsys)


def test_transformer_tokens_on_the_command_line(tmp_path, capsys):
    """``--length`` sets the transformer's tokens per sequence (default 4), and ``--random B,d`` draws
    (B, T, d) inputs; the kernel is that of ``netsor.zoo.transformer``."""
    out = run_ok(["kernel", "transformer", "--depth", "1", "--length", "3", "--random", "2,4",
                  "--out", str(tmp_path / "k.npy")], capsys)
    assert "tokens=3" in out
    X = np.random.default_rng(0).standard_normal((2, 3, 4))
    K = netsor.nngp(netsor.zoo.transformer(1, tokens=3), X)
    assert np.array_equal(np.load(tmp_path / "k.npy"), K)
    assert "tokens=4" in run_ok(["kernel", "transformer", "--depth", "1", "--random", "2,3"], capsys)
    np.save(tmp_path / "x.npy", X)  # without --length, the tokens of the file (not the default 4)
    assert "tokens=3" in run_ok(["kernel", "transformer", "--depth", "1", "--inputs", str(tmp_path / "x.npy")],
                                capsys)


def test_default_rtol_is_what_the_limit_is_built_to_meet(tmp_path, capsys) -> None:
    """Without --rtol every architecture's kernel runs: 1e-8 where pair integrals are at most
    4-dimensional or cone moments (a GRU of 2 steps: its erf gates are smoothed steps; it was
    refused at 1e-8 when they were integrated as functions of three correlated Gaussians), and the
    simulation's 2e-2 where expectations are higher-dimensional (GRU of 4 steps). converge and
    sample take the same default (converge gru failed with "pass a larger rtol" and had no --rtol)."""
    assert "rtol 1e-08" in run_ok(["kernel", "mlp", "--random", "2,3"], capsys)
    out = tmp_path / "k.npy"
    text = run_ok(["kernel", "gru", "--depth", "2", "--random", "2,2", "--out", str(out)], capsys)
    assert "rtol 1e-08" in text and "expectation engine" in text
    X = np.random.default_rng(0).standard_normal((2, 2, 2))
    assert np.array_equal(np.load(out), netsor.nngp(netsor.zoo.gru(2), X, rtol=1e-8))
    text = run_ok(["kernel", "gru", "--depth", "4", "--random", "2,2"], capsys)
    assert "rtol 0.02" in text and "joint randomised QMC simulation" in text
    text = run_ok(["converge", "gru", "--depth", "2", "--random", "2,2", "--widths", "16,32", "-S", "20", "-R", "2",
                   "--json", str(tmp_path / "c.json")], capsys)
    assert "limit kernels: largest error bound" in text and "expectation engine" in text
    assert "max z-score" in run_ok(["sample", "gru", "--depth", "2", "--random", "2,2", "-n", "32", "-S", "50"], capsys)


def test_batchnorm_batch_size_on_the_command_line(capsys) -> None:
    """--batch sets the examples per batch of batchnorm_mlp; its NTK is infinite for batches of 3 or
    fewer (see test_simulation.py), and the refusal says so."""
    text = run_ok(["kernel", "batchnorm_mlp", "--batch", "6", "--random", "1,5"], capsys)
    assert "NNGP kernel (6, 6)" in text
    text = run_ok(["kernel", "batchnorm_mlp", "--depth", "1", "--random", "1,5", "--ntk"], capsys)
    assert "NTK (4, 4)" in text and "joint randomised QMC simulation" in text
    assert "at least 4" in run_error(["kernel", "batchnorm_mlp", "--batch", "3", "--random", "1,5", "--ntk"], capsys)
    assert "--batch" in run_error(["kernel", "batchnorm_mlp", "--batch", "1", "--random", "1,5"], capsys)


@pytest.mark.parametrize("args", [["kernel", "mlp", "--random", "3,2", "--out", ""],
                                  ["sample", "mlp", "--random", "3,2", "-n", "8", "-S", "5", "--out", ""],
                                  ["kernel", "mlp", "--random", "3,2", "--sigma-w", "1e300"]])
def test_an_empty_output_name_and_an_overflowing_sigma_are_errors(args, capsys):
    """``--out ""`` exited 0 and wrote nothing; ``--sigma-w 1e300`` printed an OverflowError traceback."""
    assert "error:" in run_error(args, capsys)


def test_a_one_dimensional_input_file_gets_advice_for_the_command_line(tmp_path, capsys):
    """Not the Python spelling "--inputs[None, :]"."""
    np.save(tmp_path / "one.npy", np.ones(3))
    text = run_error(["kernel", "mlp", "--inputs", str(tmp_path / "one.npy")], capsys)
    assert "save one input as shape (1, d)" in text and "--inputs[" not in text


def test_the_kernel_summary_gives_the_bound_in_both_units(tmp_path, capsys):
    """The largest bound printed absolute and relative to √(K_ii K_jj), the unit rtol is in (one absolute
    number beside "rtol … relative" read as a broken promise when the kernel's scale was above 1)."""
    out = run_ok(["kernel", "mlp", "--depth", "2", "--sigma-w", "3", "--random", "4,3", "--rtol", "1e-6",
                  "--seed", "1", "--out", str(tmp_path / "k.npy")], capsys)
    line = next(t for t in out.splitlines() if t.startswith("largest error bound"))
    absolute, relative = (float(line.split()[k]) for k in (3, 5))
    X = np.random.default_rng(1).standard_normal((4, 3))
    K, E = netsor.limit(netsor.zoo.mlp(2, "relu", 3.0), X, rtol=1e-6).nngp(with_error=True)
    root = np.sqrt(np.diag(K))
    assert absolute == pytest.approx(np.max(E), rel=1e-2)
    assert relative == pytest.approx(np.max(E / np.outer(root, root)), rel=1e-2)
    assert "relative to √(K_ii K_jj) (rtol 1e-06" in line
