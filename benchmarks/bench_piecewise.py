"""Speed and accuracy of kernels of piecewise-linear activations with kinks off the origin, and of elu.

hard_tanh (kinks at ±1) and elu (an exponential piece below 0) have closed-form pair expectations (Tallis'
truncated moments with Owen's T, exponentials by tilting: :mod:`netsor.gaussian.piecewise`); before, their
pairs went to the Mehler series (which converges algebraically for such kinks) and to nested 2-D quadrature.
Rows: the NNGP of a depth-3 MLP (σ_w 1.5, σ_b 0.1) on N inputs (``--n``, default 200 and 1000), with its
largest reported bound relative to √(K_ii K_jj), and the ratio to a tanh MLP of the same size measured in the
same run (medians of ``--repeats``, interleaved), for inputs of dimension ``--d`` (10 and 5: lower dimensions
give more nearly colinear pairs, which the series could not take). With the Neural Tangents venv
(``--nt-python``), NT's only route for hard_tanh, ``stax.ElementwiseNumerical`` (Gauss–Hermite of degree
``--nt-deg``), on the same inputs: its time and its largest deviation from netsor's kernel relative to √(K_ii
K_jj) (netsor's bounds are ~1e-11, so that deviation is NT's error).

Run::

    python benchmarks/bench_piecewise.py
"""

from __future__ import annotations

import argparse
import os
import subprocess
import tempfile
from pathlib import Path

import numpy as np
from bench_nngp import DEFAULT_NT_PYTHON, run_nt
from common import finish, interleaved_medians

import netsor


def _row(n: int, d: int, repeats: int, nt_python: str, nt_deg: list[int]) -> dict:
    X = np.random.default_rng(0).standard_normal((n, d))
    acts = {"hard_tanh": "hard_tanh", "elu": netsor.activation("elu", alpha=1.0), "tanh": "tanh"}
    progs = {name: netsor.zoo.mlp(3, act, 1.5, 0.1) for name, act in acts.items()}
    calls = {name: (lambda p=p: netsor.limit(p, X).nngp(with_error=True)) for name, p in progs.items()}
    med, res = interleaved_medians(calls, repeats)
    row: dict = {"n": n, "d": d, "median_s": med}
    for name in ("hard_tanh", "elu"):
        K, E = res[name]
        sd = np.sqrt(np.diag(K))
        row[name] = {"ratio_to_tanh": med[name] / med["tanh"], "relative_bound": float(np.max(E / np.outer(sd, sd)))}
        print(f"  N = {n:5d}, d = {d:3d}: {name:9s} {med[name]:7.3f} s, tanh {med['tanh']:7.3f} s "
              f"({row[name]['ratio_to_tanh']:.1f}×); largest bound {row[name]['relative_bound']:.1e} of √(K_ii K_jj)")
    K, E = res["hard_tanh"]
    sd = np.sqrt(np.diag(K))
    if Path(nt_python).exists():
        for deg in nt_deg:
            try:
                with tempfile.TemporaryDirectory() as tmp:
                    nt, k_nt = run_nt(nt_python, X, 3, "hard_tanh", repeats, Path(tmp),
                                      extra=["--sigma-w", "1.5", "--sigma-b", "0.1", "--deg", str(deg)])
            except subprocess.CalledProcessError as exc:  # its quadrature holds N² deg² values at once
                print(f"      Neural Tangents ElementwiseNumerical(deg={deg}): failed (exit status {exc.returncode})")
                row[f"nt_deg{deg}"] = {"failed": exc.returncode}
                continue
            off = float(np.max(np.abs(k_nt - K) / np.outer(sd, sd)))
            row[f"nt_deg{deg}"] = {"median_s": nt["median_s"], "relative_error": off}
            print(f"      Neural Tangents ElementwiseNumerical(deg={deg}): {nt['median_s']:7.3f} s, "
                  f"off by {off:.1e} of √(K_ii K_jj)")
    return row


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, nargs="*", default=[200, 1000])
    p.add_argument("--d", type=int, nargs="*", default=[10, 5],
                   help="input dimensions (d = 5: more nearly colinear pairs)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--nt-python", default=DEFAULT_NT_PYTHON)
    p.add_argument("--nt-deg", type=int, nargs="*", default=[25, 101])
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    print(f"NNGP of a depth-3 MLP, rtol 1e-8 ({os.cpu_count()} CPUs), medians of {args.repeats}")
    rows = [_row(n, d, args.repeats, args.nt_python, args.nt_deg) for d in args.d for n in args.n]
    fig = {"loadavg_start": os.getloadavg(), "cpus": os.cpu_count(), "rows": rows}
    return finish(fig, args.json)


if __name__ == "__main__":
    raise SystemExit(main())
