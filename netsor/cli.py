"""The ``netsor`` command line.

``netsor kernel ARCH``   infinite-width NNGP kernel of a zoo architecture;
``netsor sample ARCH``   outputs of finite-width networks;
``netsor converge ARCH`` distance to the limit versus width, with floor and slope;
``netsor reproduce``     the quantitative-limits report (the main job);
``netsor spectrum``, ``netsor laws``: neural matrix laws.

Every user error ends with a one-line message and exit status 2; no traceback.
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
import numpy as np

from netsor.errors import NetsorError
from netsor.ir.program import Program
from netsor.matrixlaws.cli import laws_command, spectrum_command
from netsor.stats.convergence import METRICS
from netsor.zoo import ARCHITECTURES

_COUNT_PARAMETER = {"mlp": "depth", "resnet": "blocks", "rnn": "steps"}



def build_architecture(arch: str, depth: int, activation: str, sigma_w: float, sigma_b: float,
                       sigma_u: float = 1.0, sigma_v: float = 1.0) -> Program:
    """A zoo program from command-line hyper-parameters (``depth`` = layers, blocks or steps)."""
    if arch not in ARCHITECTURES:
        raise NetsorError(f"unknown architecture {arch!r}; choose one of {', '.join(ARCHITECTURES)}")
    kwargs: dict[str, Any] = {_COUNT_PARAMETER[arch]: depth, "activation": activation,
                              "sigma_w": sigma_w, "sigma_b": sigma_b}
    if arch == "rnn":
        kwargs.update(sigma_u=sigma_u, sigma_v=sigma_v)
    return ARCHITECTURES[arch](**kwargs)


def load_inputs(inputs: str | None, random: str | None, program: Program, seed: int) -> np.ndarray:
    """``--inputs FILE.npy`` or ``--random B,d`` (shape (B, T, d) for programs with steps)."""
    if (inputs is None) == (random is None):
        raise NetsorError("give exactly one of --inputs FILE.npy or --random B,d")
    if inputs is not None:
        try:
            return np.load(inputs, allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise NetsorError(f"cannot read {inputs} as a .npy array: {exc}") from None
    try:
        B, d = (int(t) for t in random.split(","))
    except ValueError:
        raise NetsorError(f"--random expects B,d (two integers), got {random!r}") from None
    if B < 1 or d < 1:
        raise NetsorError(f"--random B,d needs B >= 1 and d >= 1, got {random!r}")
    shape = (B, d) if program.steps is None else (B, program.steps, d)
    return np.random.default_rng(seed).standard_normal(shape)


def architecture_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """The shared hyper-parameter options of commands taking an ARCH argument."""
    options = [
        click.argument("arch", type=click.Choice(sorted(ARCHITECTURES))),
        click.option("--depth", "-L", default=3, show_default=True,
                     help="Hidden layers (mlp), residual blocks (resnet) or time steps (rnn)."),
        click.option("--activation", "-a", default=None, help="Activation (default relu; tanh for rnn)."),
        click.option("--sigma-w", default=1.0, show_default=True, help="Weight std: W ~ N(0, σw²/fan_in)."),
        click.option("--sigma-b", default=0.0, show_default=True, help="Bias std: b ~ N(0, σb²)."),
        click.option("--sigma-u", default=1.0, show_default=True, help="rnn: input weight std."),
        click.option("--sigma-v", default=1.0, show_default=True, help="rnn: readout std."),
        click.option("--inputs", type=click.Path(exists=True, dir_okay=False), help="Inputs as .npy (B, d)."),
        click.option("--random", help="Random Gaussian inputs B,d instead of --inputs."),
        click.option("--seed", default=0, show_default=True, help="Seed for random inputs and networks."),
    ]
    for option in reversed(options):
        f = option(f)
    return f


def _program(arch: str, depth: int, activation: str | None, sigma_w: float, sigma_b: float,
             sigma_u: float, sigma_v: float) -> Program:
    act = activation or ("tanh" if arch == "rnn" else "relu")
    return build_architecture(arch, depth, act, sigma_w, sigma_b, sigma_u, sigma_v)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="netsor")
def cli() -> None:
    """netsor: tensor programs at finite width, at infinite width, and coupled."""


@cli.command()
@architecture_options
@click.option("--out", type=click.Path(dir_okay=False), help="Save the kernel as .npy.")
@click.option("--memory-budget", default=2.0, show_default=True, help="Working memory in GiB.")
def kernel(arch: str, depth: int, activation: str | None, sigma_w: float, sigma_b: float, sigma_u: float,
           sigma_v: float, inputs: str | None, random: str | None, seed: int, out: str | None,
           memory_budget: float) -> None:
    """Infinite-width NNGP kernel of ARCH on the inputs; prints a summary."""
    from netsor.interpret.infinite import nngp

    program = _program(arch, depth, activation, sigma_w, sigma_b, sigma_u, sigma_v)
    X = load_inputs(inputs, random, program, seed)
    start = time.perf_counter()
    K = nngp(program, X, memory_budget=int(memory_budget * 2**30))
    elapsed = time.perf_counter() - start
    eig = np.linalg.eigvalsh(K) if K.shape[0] <= 4000 else None
    click.echo(program.name)
    click.echo(f"inputs {X.shape} -> kernel {K.shape} in {elapsed:.3f} s")
    d = np.diag(K)
    click.echo(f"diagonal: min {d.min():.6g}  mean {d.mean():.6g}  max {d.max():.6g}")
    if eig is not None:
        click.echo(f"eigenvalues: min {eig[0]:.6g}  max {eig[-1]:.6g}")
    with np.printoptions(precision=6, suppress=False, linewidth=120):
        click.echo(K[:6, :6])
    if out:
        np.save(out, K)
        click.echo(f"saved {out}")


@cli.command()
@architecture_options
@click.option("--width", "-n", default=256, show_default=True, help="Hidden width of the networks.")
@click.option("--samples", "-S", default=1000, show_default=True, help="Number of independent networks.")
@click.option("--method", type=click.Choice(["auto", "dense", "matrix-free"]), default="auto", show_default=True)
@click.option("--out", type=click.Path(dir_okay=False), help="Save the outputs (S, B·R) as .npy.")
def sample(arch: str, depth: int, activation: str | None, sigma_w: float, sigma_b: float, sigma_u: float,
           sigma_v: float, inputs: str | None, random: str | None, seed: int, width: int, samples: int,
           method: str, out: str | None) -> None:
    """Outputs of SAMPLES finite-width networks of ARCH; compares their covariance with the limit."""
    from netsor.interpret.finite import sample as draw
    from netsor.interpret.infinite import nngp

    program = _program(arch, depth, activation, sigma_w, sigma_b, sigma_u, sigma_v)
    X = load_inputs(inputs, random, program, seed)
    start = time.perf_counter()
    Y = draw(program, X, width=width, samples=samples, seed=seed, method=method)
    elapsed = time.perf_counter() - start
    K = nngp(program, X)
    C = Y.T @ Y / samples
    se = np.sqrt((np.einsum("si,sj->ij", Y**2, Y**2) / samples - C**2) / samples)
    z = np.abs(C - K) / np.maximum(se, 1e-300)
    click.echo(program.name)
    click.echo(f"{samples} networks of width {width} on {X.shape[0]} inputs in {elapsed:.3f} s -> outputs {Y.shape}")
    click.echo(f"empirical vs limit covariance: max |C - K| = {np.abs(C - K).max():.4g}, "
               f"max z-score = {z.max():.2f} (over {C.size} entries)")
    if out:
        np.save(out, Y)
        click.echo(f"saved {out}")


@cli.command()
@architecture_options
@click.option("--widths", default="32,64,128,256,512,1024", show_default=True, help="Comma-separated widths.")
@click.option("--samples", "-S", default=2000, show_default=True, help="Networks per (width, replicate) cell.")
@click.option("--replicates", "-R", default=4, show_default=True, help="Independent replicates per width.")
@click.option("--metric", type=click.Choice(METRICS), default="rb-sw1", show_default=True)
@click.option("--directions", default=64, show_default=True, help="Slicing directions (sliced metrics).")
@click.option("--json", "json_out", type=click.Path(dir_okay=False), default="converge.json", show_default=True,
              help="Results as JSON; a CSV, a log-log PNG and the resumable cell store go beside it.")
def converge(arch: str, depth: int, activation: str | None, sigma_w: float, sigma_b: float, sigma_u: float,
             sigma_v: float, inputs: str | None, random: str | None, seed: int, widths: str, samples: int,
             replicates: int, metric: str, directions: int, json_out: str) -> None:
    """Distance between finite-width ARCH networks and their GP limit versus width, with floor and slope.

    Interrupted runs resume: finished cells are kept in JSON lines beside --json.
    """
    from netsor.stats.convergence import Study, plot_summary

    program = _program(arch, depth, activation, sigma_w, sigma_b, sigma_u, sigma_v)
    X = load_inputs(inputs, random or ("4,8" if inputs is None else None), program, seed)
    try:
        width_list = [int(w) for w in widths.split(",") if w.strip()]
    except ValueError:
        raise NetsorError(f"--widths expects comma-separated integers, got {widths!r}") from None
    study = Study(program, X, metric, samples, replicates, seed, directions, arch)
    out = Path(json_out)
    out.parent.mkdir(parents=True, exist_ok=True)
    # The cell store is tied to everything a cell depends on (widths and replicates may grow).
    fingerprint = hashlib.sha1(repr((program.name, samples, seed, directions)).encode() + X.tobytes()).hexdigest()[:10]
    summary = study.run(width_list, out.with_name(f"{out.stem}-cells-{fingerprint}.jsonl"))
    click.echo(summary.table())
    payload = summary.to_json()
    write_json(out, payload)
    with out.with_suffix(".csv").open("w") as fh:
        fh.write("width,distance,ci_low,ci_high,floor\n")
        for row in payload["rows"]:
            fh.write(f"{row['width']},{row['distance']},{row['ci'][0]},{row['ci'][1]},{row['floor']}\n")
    png = plot_summary(summary, out.with_suffix(".png"))
    click.echo(f"wrote {out}, {out.with_suffix('.csv')}, {png}")


@cli.command()
@click.option("--out", "-o", default="netsor-report", show_default=True, type=click.Path(file_okay=False),
              help="Report directory (re-running resumes from the cells stored there).")
@click.option("--quick", is_flag=True, help="Smaller widths, fewer networks: about a minute.")
@click.option("--arch", "archs", multiple=True, type=click.Choice(["mlp", "deep-mlp", "rnn", "resnet"]),
              help="Only these architectures (repeatable; default all four).")
@click.option("--seed", default=0, show_default=True)
def reproduce(out: str, quick: bool, archs: tuple[str, ...], seed: int) -> None:
    """Reproduce the numerical section of the quantitative-limits paper (the main job).

    For MLP, deep MLP, RNN and ResNet: sliced-W1, coupling and kernel-LLN curves versus width, slopes
    with 95 % CIs next to the paper's, in OUT/report.md with PNGs, JSON and CSV.
    """
    from dataclasses import replace

    from netsor.report.reproduce import Settings
    from netsor.report.reproduce import reproduce as run

    settings = replace(Settings.quick() if quick else Settings(), seed=seed)
    report = run(out, settings, architectures=archs or None)
    click.echo(f"{'architecture':<12} {'sliced W1 slope':>26} {'paper':>8} {'coupling slope':>26} "
               f"{'kernel-LLN slope':>26}")
    for key, e in report["architectures"].items():
        paper = f"{e['paper_slope']:.3f}" if e["paper_slope"] is not None else "-"
        cells = [_slope_text(e[m]) for m in ("sliced_w1", "coupling", "kernel_lln")]
        click.echo(f"{key:<12} {cells[0]:>26} {paper:>8} {cells[1]:>26} {cells[2]:>26}")
    click.echo(f"theorem rate -0.5; report: {Path(out) / 'report.md'} ({report['elapsed_s']:.0f} s)")


def _slope_text(entry: dict[str, Any]) -> str:
    lo, hi = entry["slope_ci"]
    return f"{entry['slope']:.3f} [{lo:.3f}, {hi:.3f}]"


def main(argv: list[str] | None = None) -> None:
    """Console entry point: user errors print one line and exit with status 2."""
    try:
        cli.main(args=argv, standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except NetsorError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)


cli.add_command(spectrum_command)
cli.add_command(laws_command)


def _json_default(obj: Any) -> Any:
    if isinstance(obj, np.generic | np.ndarray):
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(type(obj).__name__)


def write_json(path: str | Path, payload: dict[str, Any]) -> None:
    """Write ``payload`` as indented JSON (numpy values converted)."""
    Path(path).write_text(json.dumps(payload, indent=2, default=_json_default))
