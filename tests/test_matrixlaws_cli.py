"""``netsor spectrum`` and ``netsor laws`` through the console entry point ``netsor.cli.main``:
results on good input, and for every option a bad value ends with one line ``error: ...`` on
stderr and exit status 2, without a traceback."""

import pytest

from netsor.cli import main


def run(capsys, argv):
    """``(exit status, stdout, stderr)`` of ``netsor argv``."""
    try:
        main(argv)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    out, err = capsys.readouterr()
    return code, out, err


def test_spectrum_and_laws_write_their_figures(tmp_path, capsys):
    code, out, err = run(capsys, ["spectrum", "--activation", "relu", "--depth", "3", "--sigma-w",
                                  "1.4142135623730951", "--width", "60", "--samples", "2", "--grid-size", "200",
                                  "--out", str(tmp_path)])
    assert code == 0, err
    assert "chi = 1" in out and "atom at 0: mass 0.5" in out
    assert (tmp_path / "spectrum_relu_gaussian_L3.png").stat().st_size > 0
    new_dir = tmp_path / "missing" / "dir"  # created, as the other commands' --out
    code, out, err = run(capsys, ["laws", "--size", "100", "--ratio", "0.5", "--out", str(new_dir)])
    assert code == 0, err
    assert (new_dir / "laws.png").stat().st_size > 0


def test_spectrum_of_a_point_mass(tmp_path, capsys):
    """hard-tanh at σ_w = 1: q* = 0 and the law is the point mass at 1 (no continuous part to plot)."""
    code, out, err = run(capsys, ["spectrum", "--activation", "hard_tanh", "--depth", "4", "--weights",
                                  "orthogonal", "--width", "20", "--samples", "2", "--out", str(tmp_path)])
    assert code == 0, err
    assert "q* = 0 " in out and "atom at 1: mass 1" in out


SPECTRUM_BAD = [
    (["--activation", "nosuch"], "unknown activation"),
    (["--depth", "-1"], "--depth"),
    (["--depth", "0"], "--depth"),
    (["--depth", "2.5"], "--depth"),
    (["--depth", "abc"], "--depth"),
    (["--weights", "uniform"], "--weights"),
    (["--sigma-w", "-1"], "--sigma-w"),
    (["--sigma-w", "0"], "--sigma-w"),
    (["--sigma-w", "nan"], "--sigma-w"),
    (["--sigma-w", "x"], "--sigma-w"),
    (["--sigma-b", "-0.5"], "--sigma-b"),
    (["--sigma-b", "inf"], "--sigma-b"),
    (["--q0", "-1"], "--q0"),
    (["--width", "0"], "--width"),
    (["--width", "1000000"], "--width"),
    (["--samples", "0"], "--samples"),
    (["--seed", "-3"], "--seed"),
    (["--grid-size", "3"], "--grid-size"),
    (["--grid-size", "-10"], "--grid-size"),
    (["--out", "UNDER_FILE"], "cannot create"),
    (["--out", "FILE"], "not a directory"),
    (["--activation", "exp", "--depth", "2"], "diverges"),
    (["--sigma-w", "1e-300"], "--sigma-w"),
    (["--sigma-w", "1e300"], "--sigma-w"),
    (["--sigma-b", "1e300"], "--sigma-b"),
]
LAWS_BAD = [
    (["--size", "0"], "--size"),
    (["--size", "1"], "--size"),
    (["--size", "1e3"], "--size"),
    (["--ratio", "0"], "--ratio"),
    (["--ratio", "-2"], "--ratio"),
    (["--ratio", "1e-9"], "--ratio"),
    (["--ratio", "1e300"], "--ratio"),
    (["--size", "10", "--ratio", "100"], "--ratio"),
    (["--seed", "-1"], "--seed"),
    (["--out", "UNDER_FILE"], "cannot create"),
]


def _paths(args, tmp_path):
    (tmp_path / "file.txt").write_text("x")
    swap = {"UNDER_FILE": str(tmp_path / "file.txt" / "dir"), "FILE": str(tmp_path / "file.txt")}
    return [swap.get(a, a) for a in args]


@pytest.mark.parametrize("command,args,needle",
                         [("spectrum", a, n) for a, n in SPECTRUM_BAD] + [("laws", a, n) for a, n in LAWS_BAD])
def test_bad_values_are_one_line_errors_with_status_2(command, args, needle, tmp_path, capsys):
    argv = [command, *_paths(args, tmp_path)]
    if "--out" not in args:
        argv += ["--out", str(tmp_path)]
    code, out, err = run(capsys, argv)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], err
    assert "Traceback" not in err and not list(tmp_path.glob("*.png"))


def test_one_sample_prints_no_interval(tmp_path, capsys):
    """A standard error needs two networks: with --samples 1 no ``±`` (and never ``nan``) is printed."""
    code, out, err = run(capsys, ["spectrum", "--activation", "tanh", "--depth", "2", "--width", "40",
                                  "--samples", "1", "--grid-size", "100", "--out", str(tmp_path)])
    assert code == 0, err
    assert "nan" not in out.lower() and "±" not in out and "--samples >= 2" in out


def test_diverging_homogeneous_recursion_prints_no_infinite_fixed_point(tmp_path, capsys):
    """ReLU at σ_w = 2: q doubles each layer, but the law of φ'² = step does not depend on q."""
    code, out, err = run(capsys, ["spectrum", "--activation", "relu", "--depth", "2", "--sigma-w", "2",
                                  "--width", "40", "--samples", "2", "--grid-size", "100", "--out", str(tmp_path)])
    assert code == 0, err
    assert "q* = none" in out and "inf" not in out and "nan" not in out
