"""Click commands ``spectrum`` and ``laws`` (added to the ``netsor`` group by netsor/cli.py)."""

from __future__ import annotations

from pathlib import Path

import click
import numpy as np

from netsor.errors import NetsorError
from netsor.matrixlaws.empirical import empirical_jacobian_spectrum, moment_table
from netsor.matrixlaws.esd import esd
from netsor.matrixlaws.jacobian import WEIGHT_KINDS, jacobian_spectrum
from netsor.matrixlaws.laws import MarchenkoPastur, Semicircle


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


@click.command("spectrum")
@click.option("--activation", default="tanh", show_default=True, help="Activation name.")
@click.option("--depth", default=8, show_default=True, type=int)
@click.option("--weights", type=click.Choice(WEIGHT_KINDS), default="gaussian", show_default=True)
@click.option("--sigma-w", default=1.0, show_default=True, type=float)
@click.option("--sigma-b", default=0.0, show_default=True, type=float)
@click.option("--q0", default=None, type=float, help="Input second moment (default: q*).")
@click.option("--width", default=1000, show_default=True, type=int)
@click.option("--samples", default=5, show_default=True, type=int)
@click.option("--seed", default=0, show_default=True, type=int)
@click.option("--out", default=".", show_default=True, type=click.Path(file_okay=False))
def spectrum_command(activation, depth, weights, sigma_w, sigma_b, q0, width, samples, seed,
                     out):
    """Predicted Jacobian spectrum of a deep MLP against finite networks (PNG + moments)."""
    try:
        law = jacobian_spectrum(activation, depth, sigma_w, sigma_b, weights, q0=q0)
        ev = empirical_jacobian_spectrum(activation, depth, sigma_w, sigma_b, weights,
                                         width=width, samples=samples, q0=q0, seed=seed)
        x, rho = law.grid
    except NetsorError as exc:
        raise click.ClickException(str(exc)) from None
    spec = esd(ev)
    pred = law.moments(4)
    click.echo(f"q* = {law.q_star:.10g}   chi = {law.chi:.10g}   chi^L = "
               f"{np.prod(law.chi_layers):.10g}")
    if samples >= 2:
        emp, se = moment_table(ev)
    else:
        emp, se = spec.moments(4), np.full(4, np.nan)
    for k in range(4):
        click.echo(f"m{k + 1}: predicted {pred[k]:.6g}   empirical {emp[k]:.6g} ± {se[k]:.2g}")
    loc, mass = law.atoms
    for a, m in zip(loc, mass, strict=True):
        click.echo(f"atom at {a:.6g}: mass {m:.6g}")
    click.echo(f"W1 = {spec.w1(law):.4g}   KS = {spec.ks(law):.4g}")
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    cont = ev.ravel()[ev.ravel() > 1e-9 * max(1.0, ev.max())]
    top = law.support[1]
    ax.hist(cont, bins=80, range=(0, top * 1.02), density=True,
            weights=np.full(cont.size, cont.size / ev.size) if cont.size else None,
            alpha=0.5, label=f"{samples} networks, width {width}")
    ax.plot(x, rho, "k", lw=1.2, label="free prediction")
    ax.set_ylim(0, 1.3 * np.percentile(rho[rho > 0], 95) if np.any(rho > 0) else 1)
    ax.set_xlabel("eigenvalue of J Jᵀ")
    ax.set_title(f"{activation}, depth {depth}, {weights}, σ_w={sigma_w:g}, σ_b={sigma_b:g}")
    ax.legend()
    path = Path(out) / f"spectrum_{activation}_{weights}_L{depth}.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    click.echo(f"wrote {path}")


@click.command("laws")
@click.option("--size", default=1000, show_default=True, type=int, help="Matrix size n.")
@click.option("--ratio", default=0.5, show_default=True, type=float, help="MP aspect ratio.")
@click.option("--seed", default=0, show_default=True, type=int)
@click.option("--out", default=".", show_default=True, type=click.Path(file_okay=False))
def laws_command(size, ratio, seed, out):
    """Semicircle and Marchenko–Pastur laws against sampled matrices (PNG + distances)."""
    try:
        laws = [Semicircle(1.0), MarchenkoPastur(ratio, 1.0)]
        spectra = [np.linalg.eigvalsh(law.sample_matrix(size, seed)) for law in laws]
    except NetsorError as exc:
        raise click.ClickException(str(exc)) from None
    plt = _pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, law, ev in zip(axes, laws, spectra, strict=True):
        spec = esd(ev)
        lo, hi = law.support
        x = np.linspace(lo, hi, 400)
        ax.hist(ev, bins=60, density=True, alpha=0.5, label=f"n = {size}")
        ax.plot(x, law.density(x), "k", label=repr(law))
        ax.legend(fontsize=8)
        click.echo(f"{law!r}: KS = {spec.ks(law):.4g}  W1 = {spec.w1(law):.4g}  moments "
                   f"{np.round(law.moments(4), 6)} vs {np.round(spec.moments(4), 4)}")
    path = Path(out) / "laws.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    click.echo(f"wrote {path}")
