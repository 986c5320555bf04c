"""The ``netsor`` command line.

``netsor kernel ARCH``   infinite-width NNGP kernel of a zoo architecture (``--explain``: listing and
                         degenerate MatMul lines);
``netsor sample ARCH``   outputs of finite-width networks;
``netsor converge ARCH`` distance to the limit versus width, with floor and slope;
``netsor reproduce``     the quantitative-limits report (the main job);
``netsor spectrum``, ``netsor laws``: neural matrix laws.

Every option is checked with :mod:`netsor.validate` before any work starts. Every user
error (a bad option, an unreadable or unwritable file, a request that cannot fit in
memory) ends with one line ``error: ...`` on stderr and exit status 2; no traceback.

Names: metrics and architectures are written with hyphens on the command line
(``--metric rb-sw1``, ``--arch deep-mlp``) and with underscores in Python and in the
JSON / CSV files (``"rb_sw1"``, ``"deep_mlp"``), as click does for option names.
"""

from __future__ import annotations

import csv
import hashlib
import inspect
import json
import math
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
import numpy as np

import netsor
from netsor import Program
from netsor.errors import HyperParameterError, InputError, NetsorError
from netsor.interpret.infinite import DEFAULT_RTOL, LIMIT_METHODS, SIMULATION_REACH
from netsor.interpret.ntk import kernel_rtol
from netsor.interpret.rules.matmul import DEGENERACY_TOLERANCE
from netsor.matrixlaws.cli import laws_command, spectrum_command
from netsor.stats.convergence import CELL_FORMAT, CSV_COLUMNS, METRICS
from netsor.validate import (
    check_choice,
    check_count,
    check_fits_in_memory,
    check_inputs,
    check_memory_budget,
    check_real,
    check_sigma,
)
from netsor.zoo import ARCHITECTURES

_COUNT_PARAMETER = {"cnn": "depth", "gru": "steps", "mlp": "depth", "resnet": "blocks", "rnn": "steps",
                    "layernorm_mlp": "depth", "transformer": "layers", "batchnorm_mlp": "depth"}
#: Largest --depth accepted (a program line per layer; deeper programs take minutes to build).
MAX_DEPTH = 10_000
#: Command-line spelling of the metric names of :mod:`netsor.stats.convergence`.
CLI_METRICS = {m.replace("_", "-"): m for m in METRICS}
#: Positions of the cnn's input sequences when ``--length`` is not given.
DEFAULT_LENGTH = 8
#: Command-line spelling of the architecture keys of :mod:`netsor.report.reproduce`.
CLI_REPRODUCE_ARCHS = {"mlp": "mlp", "deep-mlp": "deep_mlp", "rnn": "rnn", "resnet": "resnet",
                       "layernorm-mlp": "layernorm_mlp", "transformer": "transformer"}


def build_architecture(arch: str, depth: int, *, activation: str | None, sigma_w: float, sigma_b: float,
                       sigma_u: float = 1.0, sigma_v: float = 1.0, length: int | None = None, batch: int = 4
                       ) -> Program:
    """A zoo program from command-line hyper-parameters (``depth`` = layers, blocks or steps;
    ``length`` = positions of the cnn's input sequences or tokens of the transformer's, None: the
    builder's default, ``batch`` = examples per batch of the batchnorm_mlp); each architecture gets
    the hyper-parameters it takes (``activation=None``: its default)."""
    check_choice(arch, "architecture", tuple(ARCHITECTURES))
    builder = ARCHITECTURES[arch]
    # checked for every architecture, although not all read them: a bad value is a mistake anyway
    given: dict[str, Any] = {"sigma_w": check_sigma(sigma_w, "--sigma-w"), "sigma_b": check_sigma(sigma_b, "--sigma-b"),
                             "sigma_u": check_sigma(sigma_u, "--sigma-u"), "sigma_v": check_sigma(sigma_v, "--sigma-v"),
                             "batch": check_count(batch, "--batch", minimum=2, maximum=MAX_DEPTH)}
    takes = inspect.signature(builder).parameters
    if length is None and "length" in takes and takes["length"].default is None:  # required by the builder
        length = DEFAULT_LENGTH
    if length is not None:  # the cnn's positions, the transformer's tokens
        given["length"] = given["tokens"] = check_count(length, "--length", maximum=MAX_DEPTH)
    if activation is not None:
        if "activation" not in takes:
            raise HyperParameterError(f"{arch} has no --activation (its nonlinearities are fixed)")
        given["activation"] = activation
    kwargs = {k: v for k, v in given.items() if k in takes}
    kwargs[_COUNT_PARAMETER[arch]] = check_count(depth, "--depth", maximum=MAX_DEPTH)
    return builder(**kwargs)


def load_inputs(inputs: str | None, random: str | None, program: Program, *, seed: int) -> np.ndarray:
    """``--inputs FILE.npy`` or ``--random B,d`` (shape (B, T, d) for programs with steps), checked."""
    if (inputs is None) == (random is None):
        raise InputError("give exactly one of --inputs FILE.npy or --random B,d")
    if inputs is not None:
        try:
            X = np.load(inputs, allow_pickle=False)
        except OSError as exc:
            raise InputError(f"cannot read --inputs {inputs}: {exc.strerror or exc}") from None
        except (ValueError, EOFError):
            raise InputError(f"--inputs {inputs} is not a .npy file of numbers; "
                             "save the inputs with numpy.save(path, X)") from None
        if not isinstance(X, np.ndarray):
            X.close()
            raise InputError(f"--inputs {inputs} is an .npz archive; save one array with numpy.save")
        return check_inputs(program, X, "--inputs")
    shape = random_shape(random, program)
    check_fits_in_memory(math.prod(shape), "the --random inputs")
    return np.random.default_rng(seed).standard_normal(shape)


def random_shape(random: str, program: Program) -> tuple[int, ...]:
    """The shape of ``--random B,d`` inputs: (B, d), or (B, T, d) for programs with steps."""
    parts = random.split(",")
    if len(parts) != 2 or not all(p.strip().isdigit() for p in parts):
        raise InputError(f"--random expects B,d (two positive integers), got {random!r}")
    B = check_count(int(parts[0]), "--random B (number of inputs)")
    d = check_count(int(parts[1]), "--random d (input dimension)")
    return (B, d) if program.steps is None else (B, program.steps, d)


def output_path(path: str, what: str) -> Path:
    """A file to write: its parent directory is created if missing; a directory or an empty name is refused."""
    if not path.strip():
        raise InputError(f"{what} is empty; give a file name (or leave {what} out to print the result)")
    out = Path(path)
    if out.is_dir():
        raise InputError(f"{what} {path} is a directory; give a file name")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"cannot create the directory of {what} {path}: {exc.strerror}") from None
    return out


def save_array(path: Path, array: np.ndarray, what: str) -> None:
    """``numpy.save`` to exactly ``path`` (no ``.npy`` appended), as a one-line error if it fails."""
    try:
        with path.open("wb") as fh:
            np.save(fh, array)
    except OSError as exc:
        raise InputError(f"cannot write {what} {path}: {exc.strerror}") from None


def architecture_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """The shared hyper-parameter options of commands taking an ARCH argument."""
    options = [
        click.argument("arch", type=click.Choice(sorted(ARCHITECTURES))),
        click.option("--depth", "-L", default=3, show_default=True, type=int,
                     help=f"Hidden layers (mlp, cnn, layernorm_mlp, transformer), residual blocks (resnet) or "
                          f"time steps (rnn); 1 to {MAX_DEPTH}."),
        click.option("--activation", "-a", default=None, help="Activation (default relu; tanh for rnn)."),
        click.option("--sigma-w", default=1.0, show_default=True, type=float,
                     help="Weight std: W ~ N(0, σw²/fan_in)."),
        click.option("--sigma-b", default=0.0, show_default=True, type=float, help="Bias std: b ~ N(0, σb²)."),
        click.option("--sigma-u", default=1.0, show_default=True, type=float,
                     help="rnn and transformer: input (key) weight std."),
        click.option("--sigma-v", default=1.0, show_default=True, type=float, help="rnn: readout std."),
        click.option("--length", default=None, type=int,
                     help=f"cnn: positions L of the input sequences (inputs (B, L, d)), default: those of --inputs, "
                          f"else {DEFAULT_LENGTH}; "
                          "transformer: tokens T per sequence (inputs (B, T, d)), default: those of --inputs, else 4."),
        click.option("--batch", default=4, show_default=True, type=int,
                     help="batchnorm_mlp: examples per batch (inputs (B, batch, d): B batches); its NTK needs "
                          "at least 4 (and inputs of dimension at least 3)."),
        click.option("--inputs", type=click.Path(exists=True, dir_okay=False),
                     help="Inputs as .npy, shape (B, d), or (B, T, d) for rnn, cnn and transformer."),
        click.option("--random", help="Random Gaussian inputs B,d instead of --inputs."),
        click.option("--seed", default=0, show_default=True, type=int,
                     help="Seed (integer >= 0) for random inputs and networks."),
    ]
    for option in reversed(options):
        f = option(f)
    return f


def rtol_option(f: Callable[..., Any]) -> Callable[..., Any]:
    """``--rtol`` of the limit's kernels; default: the engine's 1e-8, or the simulation's reach where
    the limit needs the simulation (:func:`choose_rtol`)."""
    return click.option(
        "--rtol", default=None, type=float,
        help=f"Relative tolerance of every limit-kernel entry (met, or an error says what was reached). "
             f"Default: what the limit is built to meet — {DEFAULT_RTOL:g}; 1e-6 for functions of three "
             f"correlated Gaussians without an exact rule (a 2-step gru); {SIMULATION_REACH:g} by the joint "
             "QMC simulation where the expectations are higher-dimensional (longer gru, BatchNorm across "
             "batches or in the NTK).")(f)


def limit_method_option(f: Callable[..., Any]) -> Callable[..., Any]:
    """``--method`` of the limit (:func:`netsor.limit`)."""
    return click.option(
        "--method", "limit_method", type=click.Choice(list(LIMIT_METHODS)), default="auto", show_default=True,
        help="expectations: closed forms, quadrature and series (to 1e-8); qmc: joint randomised QMC "
             "simulation (~1e-3 to 1e-5, for long recurrences such as gru); auto: qmc for programs with "
             "high-dimensional expectations when --rtol >= 1e-3.")(f)


def choose_rtol(rtol: float | None, program: Program, method: str, *, ntk: bool = False) -> float:
    """``--rtol`` checked, or its default: what the limit of ``program`` (of its gradient program
    for an NTK) is built to meet (:func:`netsor.interpret.ntk.kernel_rtol`)."""
    if rtol is not None:
        return check_real(rtol, "--rtol", minimum=1e-15, maximum=1.0)
    return kernel_rtol(program, method, ntk=ntk)


def _program(arch: str, depth: int, activation: str | None, sigma_w: float, sigma_b: float,
             sigma_u: float, sigma_v: float, length: int | None, batch: int, inputs: str | None) -> Program:
    takes = inspect.signature(ARCHITECTURES[arch]).parameters if arch in ARCHITECTURES else {}
    if length is None and inputs is not None and ("length" in takes or "tokens" in takes):
        length = _positions(inputs)
    return build_architecture(arch, depth, activation=activation, sigma_w=sigma_w, sigma_b=sigma_b,
                              sigma_u=sigma_u, sigma_v=sigma_v, length=length, batch=batch)


def _positions(inputs: str) -> int | None:
    """The positions L of ``--inputs`` of shape (B, L, C), read from the file's header: a cnn or a
    transformer built for another L would read only part of each input (or refuse it). None where
    the file is not such an array (:func:`load_inputs` then says what is wrong with it)."""
    try:
        X = np.load(inputs, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError, EOFError):
        return None
    shape = getattr(X, "shape", ())
    if isinstance(X, np.lib.npyio.NpzFile):
        X.close()
    return int(shape[1]) if len(shape) == 3 and shape[1] > 0 else None


def _seed(seed: int) -> int:
    return check_count(seed, "--seed", minimum=0)


def _check_kernel_size(batch: int, program: Program) -> None:
    size = batch * program.num_outputs
    check_fits_in_memory(size * size, f"the kernel of {batch} inputs")


def _check_network_size(width: int, X: np.ndarray, what: str) -> None:
    """A finite network of ``width`` on the inputs holds at least width·B floats per hidden layer."""
    check_fits_in_memory(width * X.shape[0], f"one network of {what} on {X.shape[0]} inputs")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="netsor")
def cli() -> None:
    """netsor: tensor programs at finite width, at infinite width, and coupled."""


@cli.command()
@architecture_options
@click.option("--out", type=click.Path(dir_okay=False),
              help="Save the kernel as .npy (missing directories are created).")
@click.option("--memory-budget", default=2.0, show_default=True, type=float,
              help="Working memory in GiB (at least 1 MiB = 0.0009765625).")
@click.option("--ntk", "neural_tangent", is_flag=True,
              help="The neural tangent kernel (every weight, bias and readout trained) instead of the NNGP.")
@rtol_option
@limit_method_option
@click.option("--explain", is_flag=True,
              help="First print the program listing and its degenerate MatMul lines (linear combinations of "
                   "earlier uses of their matrix in the limit); those with constant coefficients are "
                   "rewritten as LinComb lines and the kernel is computed on the rewritten program.")
def kernel(arch: str, depth: int, activation: str | None, sigma_w: float, sigma_b: float, sigma_u: float,
           sigma_v: float, length: int | None, batch: int, inputs: str | None, random: str | None, seed: int,
           out: str | None, memory_budget: float, neural_tangent: bool, rtol: float | None, limit_method: str,
           explain: bool) -> None:
    """Infinite-width NNGP kernel (or NTK with --ntk) of ARCH on the inputs; prints a summary."""
    seed = _seed(seed)
    gib = check_real(memory_budget, "--memory-budget (GiB)", minimum=2**-10)
    budget = check_memory_budget(int(gib * 2**30), "--memory-budget")
    program = _program(arch, depth, activation, sigma_w, sigma_b, sigma_u, sigma_v, length, batch, inputs)
    out_path = output_path(out, "--out") if out is not None else None
    if random is not None and inputs is None:  # refuse a kernel too large before drawing its inputs
        _check_kernel_size(random_shape(random, program)[0], program)
    X = load_inputs(inputs, random, program, seed=seed)
    _check_kernel_size(X.shape[0], program)
    if explain:
        listing = program.pretty()
        program, _, found = netsor.rewrite_degenerate(program, X)
        click.echo(listing)
        click.echo(degeneracy_report(found))
    start = time.perf_counter()
    rtol = choose_rtol(rtol, program, limit_method, ntk=neural_tangent)
    kernels = netsor.kernel(program, X, get="ntk" if neural_tangent else "nngp", rtol=rtol, memory_budget=budget,
                            method=limit_method, seed=seed)
    K = kernels.ntk if neural_tangent else kernels.nngp
    elapsed = time.perf_counter() - start
    eig = np.linalg.eigvalsh(K) if K.shape[0] <= 4000 else None
    click.echo(program.name)
    click.echo(f"inputs {X.shape} -> {'NTK' if neural_tangent else 'NNGP kernel'} {K.shape} in {elapsed:.3f} s")
    d = np.diag(K)
    click.echo(f"diagonal: min {d.min():.6g}  mean {d.mean():.6g}  max {d.max():.6g}")
    E = kernels.ntk_error if neural_tangent else kernels.nngp_error
    root = np.sqrt(np.abs(d))
    scale = root[:, None] * root[None, :]
    relative = float(np.max(E / scale, where=scale > 0, initial=0.0))
    click.echo(f"largest error bound: {float(np.max(E)):.3g} absolute, {relative:.3g} relative to √(K_ii K_jj) "
               f"(rtol {rtol:g}; {_method_name(kernels.method)})")
    if eig is not None:
        click.echo(f"eigenvalues: min {eig[0]:.6g}  max {eig[-1]:.6g}")
    with np.printoptions(precision=6, suppress=False, linewidth=120):
        click.echo(K[:6, :6])
    if out_path is not None:
        save_array(out_path, K, "--out")
        click.echo(f"saved {out_path}")


def _method_name(method: str) -> str:
    return "joint randomised QMC simulation" if method == "qmc" else "expectation engine"


def degeneracy_report(found: list[netsor.Degeneracy]) -> str:
    """The ``--explain`` rows of :func:`netsor.rewrite_degenerate`'s findings."""
    head = (f"degenerate MatMul lines (limiting conditional variance <= {DEGENERACY_TOLERANCE:g} of the variance "
            f"at every input): {len(found) or 'none'}")
    rows = [f"  {d.describe()}  [{'rewritten as a LinComb' if d.rewritable else 'kept as a MatMul'}]" for d in found]
    if any(d.rewritable for d in found):
        rows.append("  the kernel below is computed on the rewritten program (the same limit)")
    return "\n".join([head, *rows])


#: Below this many networks the z-scores of `sample` carry a caution.
FEW_NETWORKS = 30


def covariance_check(Y: np.ndarray, K: np.ndarray) -> str:
    """One line comparing the empirical output covariance of ``Y`` (S, D) with the limit ``K``.

    The z-score of an entry is ``|C − K|`` over the standard error of ``C`` (from the
    fourth moments); with fewer than 2 networks no comparison is possible.
    """
    S = Y.shape[0]
    if S < 2:
        return (f"covariance comparison needs at least 2 networks, got {S}: "
                "rerun with --samples 2 or more (a few hundred for a meaningful z-score)")
    C = Y.T @ Y / S
    se = np.sqrt(np.maximum(np.einsum("si,sj->ij", Y**2, Y**2) / S - C**2, 0.0) / S)
    gap = np.abs(C - K)
    ok = se > 0
    line = f"empirical vs limit covariance: max |C - K| = {gap.max():.4g}"
    if not ok.any():
        return line + " (no z-score: the outputs do not vary across networks)"
    line += f", max z-score = {(gap[ok] / se[ok]).max():.2f} (over {int(ok.sum())} entries)"
    if S < FEW_NETWORKS:  # the standard errors are then estimated from a handful of fourth moments
        line += (f"; with {S} networks the standard errors are themselves uncertain (z-scores of hundreds are "
                 "possible), use a few hundred")
    return line


@cli.command()
@architecture_options
@click.option("--width", "-n", default=256, show_default=True, type=int, help="Hidden width of the networks.")
@click.option("--samples", "-S", default=1000, show_default=True, type=int,
              help="Number of independent networks (>= 2 for the covariance check).")
@click.option("--method", type=click.Choice(["auto", "dense", "matrix-free"]), default="auto", show_default=True)
@click.option("--out", type=click.Path(dir_okay=False),
              help="Save the outputs (S, B·R) as .npy (missing directories are created).")
@rtol_option
def sample(arch: str, depth: int, activation: str | None, sigma_w: float, sigma_b: float, sigma_u: float,
           sigma_v: float, length: int | None, batch: int, inputs: str | None, random: str | None, seed: int,
           width: int, samples: int, method: str, out: str | None, rtol: float | None) -> None:
    """Outputs of SAMPLES finite-width networks of ARCH; compares their covariance with the limit."""
    seed = _seed(seed)
    width = check_count(width, "--width")
    samples = check_count(samples, "--samples")
    program = _program(arch, depth, activation, sigma_w, sigma_b, sigma_u, sigma_v, length, batch, inputs)
    X = load_inputs(inputs, random, program, seed=seed)
    out_path = output_path(out, "--out") if out is not None else None
    _check_network_size(width, X, f"--width {width}")
    # The outputs, their squares and the fourth-moment table of the covariance check.
    D = X.shape[0] * program.num_outputs
    check_fits_in_memory(3 * samples * D, f"the outputs of {samples} networks")
    start = time.perf_counter()
    Y = netsor.sample(program, X, width=width, samples=samples, seed=seed, method=method)
    elapsed = time.perf_counter() - start
    K = netsor.nngp(program, X, rtol=choose_rtol(rtol, program, "auto"))
    click.echo(program.name)
    click.echo(f"{samples} networks of width {width} on {X.shape[0]} inputs in {elapsed:.3f} s -> outputs {Y.shape}")
    click.echo(covariance_check(Y, K))
    if out_path is not None:
        save_array(out_path, Y, "--out")
        click.echo(f"saved {out_path}")


def parse_widths(text: str) -> list[int]:
    """``--widths`` as at least two distinct integers >= 1, sorted."""
    from netsor.stats.convergence import check_widths

    parts = [t.strip() for t in text.split(",")]
    if not all(p.isdigit() for p in parts):
        raise HyperParameterError(f"--widths expects comma-separated positive integers, got {text!r}")
    return check_widths([int(p) for p in parts], "--widths")


@cli.command()
@architecture_options
@click.option("--widths", default="32,64,128,256,512,1024", show_default=True,
              help="Comma-separated widths (at least two distinct).")
@click.option("--samples", "-S", default=2000, show_default=True, type=int,
              help="Networks per (width, replicate) cell (>= 2).")
@click.option("--replicates", "-R", default=4, show_default=True, type=int,
              help="Independent replicates per width (>= 2); intervals are Student-t over them.")
@click.option("--metric", type=click.Choice(sorted(CLI_METRICS)), default="rb-sw1", show_default=True,
              help="Written with underscores in the JSON (rb-sw1 -> rb_sw1, kernel-lln -> kernel_lln).")
@click.option("--directions", default=64, show_default=True, type=int, help="Slicing directions (sliced metrics).")
@click.option("--json", "json_out", type=click.Path(dir_okay=False), default="converge.json", show_default=True,
              help="Results as JSON; a CSV, a log-log PNG and the resumable cell store go beside it.")
@rtol_option
@limit_method_option
def converge(arch: str, depth: int, activation: str | None, sigma_w: float, sigma_b: float, sigma_u: float,
             sigma_v: float, length: int | None, batch: int, inputs: str | None, random: str | None, seed: int,
             widths: str, samples: int, replicates: int, metric: str, directions: int, json_out: str,
             rtol: float | None, limit_method: str) -> None:
    """Distance between finite-width ARCH networks and their GP limit versus width, with floor and slope.

    Interrupted runs resume: finished cells are kept in JSON lines beside --json.
    """
    from netsor.stats.convergence import Study, plot_summary

    seed = _seed(seed)
    samples = check_count(samples, "--samples", minimum=2)
    replicates = check_count(replicates, "--replicates", minimum=2)
    directions = check_count(directions, "--directions")
    width_list = parse_widths(widths)
    program = _program(arch, depth, activation, sigma_w, sigma_b, sigma_u, sigma_v, length, batch, inputs)
    X = load_inputs(inputs, random or ("4,8" if inputs is None else None), program, seed=seed)
    out = output_path(json_out, "--json")
    _check_network_size(width_list[-1], X, f"--widths {width_list[-1]}")
    D = X.shape[0] * program.num_outputs
    check_fits_in_memory(samples * D * D, f"the conditional kernels of {samples} networks")
    check_fits_in_memory(directions * D, f"{directions} directions")
    rtol = choose_rtol(rtol, program, limit_method, ntk=metric == "ntk")
    study = Study(program, X, metric=CLI_METRICS[metric], samples=samples, replicates=replicates, seed=seed,
                  directions=directions, name=arch, rtol=rtol, method=limit_method)
    # The cell store is tied to everything a cell depends on (widths and replicates may grow).
    key = repr((CELL_FORMAT, program.name, samples, seed, directions, rtol, study.limit_method)).encode() + X.tobytes()
    fingerprint = hashlib.sha1(key).hexdigest()[:10]
    summary = study.run(width_list, out.with_name(f"{out.stem}-cells-{fingerprint}.jsonl"))
    click.echo(summary.table())
    click.echo(f"limit kernels: largest error bound {study.limit_error:.3g} ({_method_name(study.limit_method)})")
    payload = summary.to_json()
    try:
        out.write_text(json.dumps(payload, indent=2))
        with out.with_suffix(".csv").open("w", newline="") as fh:
            writer = csv.writer(fh)
            writer.writerow(CSV_COLUMNS)
            writer.writerows(summary.csv_rows())
    except OSError as exc:
        raise InputError(f"cannot write the results beside --json {out}: {exc.strerror}") from None
    png = plot_summary(summary, out.with_suffix(".png"))
    click.echo(f"wrote {out}, {out.with_suffix('.csv')}, {png}")


@cli.command()
@click.option("--out", "-o", default="netsor-report", show_default=True, type=click.Path(file_okay=False),
              help="Report directory (re-running resumes from the cells stored there).")
@click.option("--quick", is_flag=True, help="Smaller widths, fewer networks: well under a minute.")
@click.option("--arch", "archs", multiple=True, type=click.Choice(sorted(CLI_REPRODUCE_ARCHS)),
              help="Only these architectures (repeatable; default all).")
@click.option("--seed", default=0, show_default=True, type=int, help="Seed (integer >= 0).")
def reproduce(out: str, quick: bool, archs: tuple[str, ...], seed: int) -> None:
    """Reproduce the numerical section of the quantitative-limits paper (the main job).

    For MLP, deep MLP, RNN and ResNet: sliced-W1, coupling and kernel-LLN curves versus width, slopes
    with 95 % Student-t intervals over the replicates next to the paper's, in OUT/report.md with PNGs,
    JSON and CSV.
    """
    from dataclasses import replace

    from netsor.report.reproduce import Settings, slope_text
    from netsor.report.reproduce import reproduce as run

    settings = replace(Settings.quick() if quick else Settings(), seed=_seed(seed))
    directory = Path(out)
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"cannot create --out {out}: {exc.strerror}") from None
    report = run(directory, settings=settings, architectures=tuple(CLI_REPRODUCE_ARCHS[a] for a in archs) or None)
    click.echo(f"intervals: {report['interval']}")
    click.echo(f"{'architecture':<12} {'sliced W1 slope':>26} {'paper':>8} {'coupling slope':>26} "
               f"{'kernel-LLN slope':>26}")
    for key, e in report["architectures"].items():
        paper = f"{e['paper_slope']:.3f}" if e["paper_slope"] is not None else "-"
        cells = [slope_text(e[m]) for m in ("rb_sw1", "coupling", "kernel_lln")]
        click.echo(f"{key.replace('_', '-'):<12} {cells[0]:>26} {paper:>8} {cells[1]:>26} {cells[2]:>26}")
    click.echo(f"theorem rate -0.5; report: {directory / 'report.md'} ({report['elapsed_s']:.0f} s)")


def _fail(message: str) -> None:
    """One line on stderr, exit status 2."""
    click.echo("error: " + " ".join(message.split()), err=True)
    sys.exit(2)


def main(argv: list[str] | None = None) -> None:
    """Console entry point: user errors print one line ``error: ...`` and exit with status 2."""
    try:
        code = cli.main(args=argv, prog_name="netsor", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except click.ClickException as exc:  # bad option values, unknown options, missing files
        _fail(exc.format_message())
    except NetsorError as exc:
        _fail(str(exc))
    except MemoryError:
        _fail("not enough memory for this request; reduce --width, --samples or the number of inputs")
    if isinstance(code, int) and code != 0:
        sys.exit(code)


cli.add_command(spectrum_command)
cli.add_command(laws_command)
