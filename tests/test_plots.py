"""The log-log sweep plot writes a real PNG."""

from __future__ import annotations

import numpy as np
import pytest

from netsor.errors import InputError
from netsor.report import loglog_plot
from netsor.stats.rates import fit_loglog

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_loglog_plot_writes_a_png(tmp_path):
    widths = np.array([16, 64, 256, 1024], dtype=float)
    rng = np.random.default_rng(0)
    fit = fit_loglog(widths, widths**-0.9 * np.exp(0.1 * rng.standard_normal((8, 4))))
    floor = np.full(4, 0.01)
    band = np.stack([0.8 * floor, 1.2 * floor], axis=1)
    out = loglog_plot(widths, fit.center, fit.value_ci, tmp_path / "a" / "p.png", floor=floor, floor_band=band,
                      fit=fit, title="MLP", interval=fit.interval)
    data = out.read_bytes()
    assert data[:8] == PNG_MAGIC and len(data) > 10_000
    bare = loglog_plot(widths, fit.center, fit.value_ci, tmp_path / "q.png")
    assert bare.read_bytes()[:8] == PNG_MAGIC
    # the bare plot has less in it (no floor band, fit line or long legend)
    assert len(bare.read_bytes()) < len(data)


def test_loglog_plot_rejects_mismatched_shapes(tmp_path):
    with pytest.raises(InputError):
        loglog_plot([1, 2], [1.0, 0.5], np.ones((3, 2)), tmp_path / "x.png")
    with pytest.raises(InputError):
        loglog_plot([1, 2], [1.0, -0.5], np.ones((2, 2)), tmp_path / "x.png")
    with pytest.raises(InputError):
        loglog_plot([1, 2], [1.0, 0.5], np.ones((2, 2)), tmp_path / "x.png", floor=[1.0, np.nan])
    assert not (tmp_path / "x.png").exists()
