"""Click commands ``spectrum`` and ``laws`` (added to the ``netsor`` group by netsor/cli.py).

Every user error raises a :class:`~netsor.errors.NetsorError` (never click's own
``BadParameter``, whose usage message spans several lines, nor ``ClickException``, which
exits with status 1): ``netsor.cli.main`` prints it as one line ``error: ...`` and exits with
status 2. Option values are parsed and checked by the parameter types below (with the
checks of :mod:`netsor.validate`) before any computation starts; the output directory must
exist.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import click
import numpy as np

from netsor.activations import activation as resolve_activation
from netsor.errors import HyperParameterError
from netsor.matrixlaws.empirical import empirical_jacobian_spectrum, moment_table
from netsor.matrixlaws.esd import esd
from netsor.matrixlaws.jacobian import SIGMA_W_RANGE, WEIGHT_KINDS, jacobian_spectrum
from netsor.matrixlaws.laws import MarchenkoPastur, Semicircle
from netsor.validate import check_choice, check_count, check_real

#: Largest matrix size the commands build (dense ``n × n`` matrices and eigen-decompositions).
MAX_SIZE = 10_000


def _option_name(param: click.Parameter | None) -> str:
    if param is None:
        return "value"
    opts = getattr(param, "opts", None) or [param.name or "value"]
    return max(opts, key=len)


class CountType(click.ParamType):
    """An integer option in ``[minimum, maximum]``."""

    name = "integer"

    def __init__(self, minimum: int, maximum: int | None = None) -> None:
        self.minimum, self.maximum = minimum, maximum

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        what = _option_name(param)
        if isinstance(value, str):
            try:
                value = int(value.strip())
            except ValueError:
                raise HyperParameterError(f"{what} must be an integer, got {value!r}") from None
        return check_count(value, what, minimum=self.minimum, maximum=self.maximum)


class RealType(click.ParamType):
    """A finite real option ``≥ minimum`` (``> minimum`` when ``strict``) and ``≤ maximum``."""

    name = "number"

    def __init__(self, minimum: float | None = None, strict: bool = False,
                 maximum: float | None = None) -> None:
        self.minimum, self.strict, self.maximum = minimum, strict, maximum

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        what = _option_name(param)
        if isinstance(value, str):
            try:
                value = float(value.strip())
            except ValueError:
                raise HyperParameterError(f"{what} must be a number, got {value!r}") from None
        return check_real(value, what, minimum=self.minimum, strict=self.strict, maximum=self.maximum)


class ChoiceType(click.ParamType):
    """One of a few strings."""

    name = "choice"

    def __init__(self, choices: tuple[str, ...]) -> None:
        self.choices = choices

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        return check_choice(value, _option_name(param), self.choices)


class ActivationType(click.ParamType):
    """A registry activation name (checked at once, so a typo costs no computation)."""

    name = "activation"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        resolve_activation(value)
        return value


class DirectoryType(click.ParamType):
    """A writable directory, created with its parents if missing (as the other commands' ``--out``)."""

    name = "directory"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Path:
        what = _option_name(param)
        path = Path(value)
        if not path.exists():
            try:
                path.mkdir(parents=True)
            except OSError as exc:
                raise HyperParameterError(f"cannot create {what} {str(path)!r}: {exc.strerror}") from None
        if not path.is_dir():
            raise HyperParameterError(f"{what} {str(path)!r} is not a directory")
        if not os.access(path, os.W_OK):
            raise HyperParameterError(f"{what} {str(path)!r} is not writable")
        return path


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


@click.command("spectrum")
@click.option("--activation", type=ActivationType(), default="tanh", show_default=True,
              help="Activation name.")
@click.option("--depth", type=CountType(1), default=8, show_default=True, help="Layers L >= 1.")
@click.option("--weights", type=ChoiceType(WEIGHT_KINDS), default="gaussian", show_default=True,
              help=f"Weight law: {', '.join(WEIGHT_KINDS)}.")
@click.option("--sigma-w", type=RealType(SIGMA_W_RANGE[0], maximum=SIGMA_W_RANGE[1]), default=1.0,
              show_default=True, help=f"Weight std σ_w in [{SIGMA_W_RANGE[0]:g}, {SIGMA_W_RANGE[1]:g}].")
@click.option("--sigma-b", type=RealType(0.0, maximum=SIGMA_W_RANGE[1]), default=0.0, show_default=True,
              help=f"Bias std σ_b in [0, {SIGMA_W_RANGE[1]:g}].")
@click.option("--q0", type=RealType(0.0), default=None, help="Input second moment >= 0 (default: q*).")
@click.option("--width", type=CountType(1, MAX_SIZE), default=1000, show_default=True,
              help=f"Width of the finite networks (at most {MAX_SIZE}).")
@click.option("--samples", type=CountType(1), default=5, show_default=True, help="Finite networks.")
@click.option("--seed", type=CountType(0), default=0, show_default=True, help="Seed (integer >= 0).")
@click.option("--grid-size", type=CountType(16), default=1000, show_default=True,
              help="Initial points of the adaptive density grid (>= 16).")
@click.option("--out", type=DirectoryType(), default=".", show_default=True,
              help="Directory for the PNG (created if missing).")
def spectrum_command(activation: str, depth: int, weights: str, sigma_w: float, sigma_b: float,
                     q0: float | None, width: int, samples: int, seed: int, grid_size: int,
                     out: Path) -> None:
    """Predicted Jacobian spectrum of a deep MLP against finite networks (PNG + moments)."""
    law = jacobian_spectrum(activation, depth, sigma_w, sigma_b, weights=weights, q0=q0,
                            grid_size=grid_size)
    ev = empirical_jacobian_spectrum(activation, depth, sigma_w, sigma_b, weights=weights,
                                     width=width, samples=samples, q0=q0, seed=seed)
    x, rho = law.grid
    spec = esd(ev)
    pred = law.moments(4)
    q_star = (f"{law.q_star:.10g}" if np.isfinite(law.q_star)
              else "none (the variance recursion diverges; this law does not depend on q)")
    click.echo(f"q* = {q_star}   chi = {law.chi:.10g}   chi^L = {np.prod(law.chi_layers):.10g}")
    if samples >= 2:
        emp, se = moment_table(ev)
        spread = [f" ± {v:.2g}" for v in se]
    else:
        emp, spread = spec.moments(4), [""] * 4
        click.echo("one network: no standard errors (they need --samples >= 2)")
    for k in range(4):
        click.echo(f"m{k + 1}: predicted {pred[k]:.6g}   empirical {emp[k]:.6g}{spread[k]}")
    loc, mass = law.atoms
    for a, m in zip(loc, mass, strict=True):
        click.echo(f"atom at {a:.6g}: mass {m:.6g}")
    click.echo(f"W1 = {spec.w1(law):.4g}   KS = {spec.ks(law):.4g}")
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    flat = ev.ravel()
    cont = flat[flat > 1e-9 * max(1.0, float(flat.max()))]
    top = max(law.support[1], float(flat.max()))
    ax.hist(cont, bins=80, range=(0, top * 1.02), density=True,
            weights=np.full(cont.size, cont.size / flat.size) if cont.size else None,
            alpha=0.5, label=f"{samples} networks, width {width}")
    ax.plot(x, rho, "k", lw=1.2, label="free prediction")
    ax.set_ylim(0, 1.3 * np.percentile(rho[rho > 0], 95) if np.any(rho > 0) else 1)
    ax.set_xlabel("eigenvalue of J Jᵀ")
    ax.set_title(f"{activation}, depth {depth}, {weights}, σ_w={sigma_w:g}, σ_b={sigma_b:g}")
    ax.legend()
    path = out / f"spectrum_{activation}_{weights}_L{depth}.png"
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    click.echo(f"wrote {path}")


@click.command("laws")
@click.option("--size", type=CountType(2, MAX_SIZE), default=1000, show_default=True,
              help=f"Matrix size n (2..{MAX_SIZE}).")
@click.option("--ratio", type=RealType(0.0, strict=True, maximum=MAX_SIZE), default=0.5, show_default=True,
              help=f"Marchenko–Pastur aspect ratio λ in (0, {MAX_SIZE}], at most --size.")
@click.option("--seed", type=CountType(0), default=0, show_default=True, help="Seed (integer >= 0).")
@click.option("--out", type=DirectoryType(), default=".", show_default=True,
              help="Directory for the PNG (created if missing).")
def laws_command(size: int, ratio: float, seed: int, out: Path) -> None:
    """Semicircle and Marchenko–Pastur laws against sampled matrices (PNG + distances)."""
    laws = [Semicircle(1.0), MarchenkoPastur(ratio, 1.0)]
    rows = round(size / ratio)
    if not 1 <= rows <= MAX_SIZE:
        raise HyperParameterError(
            f"--size / --ratio = {size / ratio:.6g} rows for the Marchenko–Pastur sample is outside "
            f"[1, {MAX_SIZE}]; use a --ratio between {size / MAX_SIZE:.6g} and {size} (or change --size)")
    spectra = [np.linalg.eigvalsh(law.sample_matrix(size, seed)) for law in laws]
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
    path = out / "laws.png"
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    click.echo(f"wrote {path}")
