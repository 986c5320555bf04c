"""Free predictions against finite networks, CLI, FIP check."""

import numpy as np
import pytest
from click.testing import CliRunner

from netsor.matrixlaws import (
    MarchenkoPastur,
    Semicircle,
    empirical_jacobian_spectrum,
    esd,
    fip_check,
    jacobian_spectrum,
    moment_table,
)
from netsor.matrixlaws.cli import laws_command, spectrum_command

CASES = [("tanh", 4, 1.2, 0.1, "gaussian"), ("relu", 4, np.sqrt(2.0), 0.0, "gaussian"),
         ("hard_tanh", 4, 1.1, 0.05, "orthogonal"), ("relu", 6, np.sqrt(2.0), 0.0, "orthogonal"),
         ("hard_tanh", 6, 1.2, 0.0, "gaussian")]


@pytest.mark.parametrize("act,depth,sw,sb,kind", CASES)
def test_moments_within_three_standard_errors(act, depth, sw, sb, kind):
    law = jacobian_spectrum(act, depth, sw, sb, kind)
    ev = empirical_jacobian_spectrum(act, depth, sw, sb, kind, width=200, samples=12, seed=3)
    mean, se = moment_table(ev, 2)
    assert np.all(np.abs(mean - law.moments(2)) <= 3 * se + 0.02 * law.moments(2))


def test_sampled_laws_are_close():
    for law in (Semicircle(2.0), MarchenkoPastur(0.5, 1.5)):
        ev = np.linalg.eigvalsh(law.sample_matrix(400, seed=1))
        assert esd(ev).ks(law) < 0.03


def test_cli_commands(tmp_path):
    runner = CliRunner()
    res = runner.invoke(spectrum_command, ["--activation", "relu", "--depth", "3",
                                           "--sigma-w", "1.4142135623730951", "--width", "100",
                                           "--samples", "2", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert "chi" in res.output and (tmp_path / "spectrum_relu_gaussian_L3.png").exists()
    res = runner.invoke(laws_command, ["--size", "200", "--out", str(tmp_path)])
    assert res.exit_code == 0 and (tmp_path / "laws.png").exists()
    res = runner.invoke(spectrum_command, ["--activation", "nope", "--out", str(tmp_path)])
    assert res.exit_code != 0 and "unknown activation" in res.output


@pytest.mark.slow
@pytest.mark.parametrize("act,depth,sw,sb,kind", [
    ("tanh", 8, 1.1, 0.05, "gaussian"), ("relu", 8, np.sqrt(2.0), 0.0, "gaussian"),
    ("hard_tanh", 8, 1.1, 0.05, "orthogonal"), ("relu", 16, np.sqrt(2.0), 0.0, "orthogonal")])
def test_large_width_w1(act, depth, sw, sb, kind):
    law = jacobian_spectrum(act, depth, sw, sb, kind)
    ev = empirical_jacobian_spectrum(act, depth, sw, sb, kind, width=1000, samples=4, seed=5)
    assert esd(ev).w1(law) <= 0.05 * law.mean
    mean, se = moment_table(ev, 4)
    assert np.all(np.abs(mean - law.moments(4)) <= 3 * se + 0.02 * law.moments(4))


@pytest.mark.slow
def test_fip_free_decays_classical_does_not():
    rep = fip_check("relu", 4, np.sqrt(2.0), widths=(50, 100, 200, 400), replicates=3, seed=1)
    assert rep.slope_free[2] < 0
    assert rep.w1_classical.mean() > 3 * rep.w1_free[-1].mean()
