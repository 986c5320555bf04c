"""Time ``netsor.kernel(p, X)`` (NNGP and NTK together) on a deep ReLU MLP, against the NNGP alone
and against Neural Tangents' ``kernel_fn(x, None, ("nngp", "ntk"))``, in one run.

Goals (issue: Netsor⊤ and the NTK): NNGP+NTK at most 1.5× the NNGP-only time, and at least 3×
faster than Neural Tangents. Then the NTK of the zoo's RNN (4 sequences of T steps, 3 features) by
the tangent program (the default) against the backward program under gradient independence
(``backward="independent"``: O(T⁴) pairs of uses of the shared matrix), T in ``--rnn-steps``.
Calls are interleaved (nngp, kernel, nngp, ...) so that both see the
same machine load; medians of ``--repeats`` after a warm-up. NT runs as a subprocess in its own
venv (``benchmarks/nt_baseline.py --ntk``) if ``--nt-python`` exists; the NTKs must agree to 1e-10.

Run::

    python benchmarks/bench_ntk.py            # N = 1000, d = 100, depth 10, 7 repeats
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

import numpy as np
from bench_nngp import DEFAULT_NT_PYTHON, run_nt
from common import finish, interleaved_medians

import netsor


def _rnn_row(T: int) -> dict:
    """The RNN's NTK on 4 sequences of T steps by the tangent and the backward program (one timed round each)."""
    X = np.random.default_rng(0).standard_normal((4, T, 3))
    rnn = netsor.zoo.rnn(T)
    med, res = interleaved_medians({"tangent": lambda: netsor.kernel(rnn, X),
                                    "backward": lambda: netsor.kernel(rnn, X, backward="independent")}, 1)
    diff = float(np.max(np.abs(res["tangent"].ntk - res["backward"].ntk)))
    ratio = med["backward"] / med["tangent"]
    print(f"RNN NTK, T = {T}: tangent program {med['tangent']:.2f} s, backward program {med['backward']:.2f} s "
          f"({ratio:.1f}×); NTKs differ by {diff:.1e} (bounds {res['tangent'].error:.1e})")
    return {"median_s": med, "backward_over_tangent": ratio, "max_abs_diff": diff}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=1000)
    p.add_argument("--d", type=int, default=100)
    p.add_argument("--depth", type=int, default=10)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--nt-python", default=DEFAULT_NT_PYTHON)
    p.add_argument("--rnn-steps", type=int, nargs="*", default=[10])
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    load = os.getloadavg()
    X = np.random.default_rng(0).standard_normal((args.n, args.d))
    prog = netsor.zoo.mlp(args.depth, "relu", 1.0, 0.0)
    calls = {"nngp": lambda: netsor.nngp(prog, X), "kernel": lambda: netsor.kernel(prog, X)}
    med, result = interleaved_medians(calls, args.repeats)
    fig = {"loadavg_start": load, "n": args.n, "d": args.d, "depth": args.depth, "cpus": os.cpu_count(),
           "median_s": med, "kernel_over_nngp": med["kernel"] / med["nngp"]}
    print(f"NNGP + NTK, depth-{args.depth} ReLU MLP, N = {args.n}, d = {args.d} ({os.cpu_count()} CPUs), "
          f"medians of {args.repeats}")
    print(f"  netsor.nngp        {med['nngp'] * 1e3:8.1f} ms")
    print(f"  netsor.kernel      {med['kernel'] * 1e3:8.1f} ms   kernel / nngp = {fig['kernel_over_nngp']:.2f} "
          f"(goal ≤ 1.5: {'met' if fig['kernel_over_nngp'] <= 1.5 else 'MISSED'})")
    if Path(args.nt_python).exists():
        with tempfile.TemporaryDirectory() as tmp:
            nt, k_nt = run_nt(args.nt_python, X, args.depth, "relu", args.repeats, Path(tmp), extra=["--ntk"])
        ratio = nt["median_s"] / med["kernel"]
        diff = float(np.max(np.abs(result["kernel"].ntk - k_nt)) / np.max(np.abs(k_nt)))
        fig |= {"nt_median_s": nt["median_s"], "nt_over_netsor": ratio, "max_rel_diff": diff}
        print(f"  Neural Tangents    {nt['median_s'] * 1e3:8.1f} ms   NT / netsor = {ratio:.2f} "
              f"(goal ≥ 3: {'met' if ratio >= 3 else 'MISSED'}); NTKs differ by {diff:.1e} of the largest entry")
    for T in args.rnn_steps:
        fig[f"rnn_T{T}"] = _rnn_row(T)
    return finish(fig, args.json)


if __name__ == "__main__":
    raise SystemExit(main())
