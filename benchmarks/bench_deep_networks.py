"""Time of NNGP + NTK of deep MLPs of smooth relu-like and saturating activations in the ordered phase.

Deep networks drive the correlations of every pair of inputs towards 1 and the variances up: the pairs'
Mehler series then need orders in the hundreds (relu-like φ at large variances: gelu, silu, softplus, and
their derivatives in the NTK), and the nearly colinear ones a nested 2-D rule. For each case: the time of
``netsor.kernel(p, X, get=("nngp", "ntk"))`` on ``--n`` inputs (median of ``--repeats`` after a warm-up),
its largest bound relative to √(K_ii K_jj), and the ratio to a ReLU MLP of the same depth and size measured
in the same run (closed-form arc-cosine recursions: the floor of the engine's per-layer work).

Run::

    python benchmarks/bench_deep_networks.py                  # N = 40, d = 8, 3 repeats
    python benchmarks/bench_deep_networks.py --cases "gelu 1.5 0.1 30" --repeats 5
"""

from __future__ import annotations

import argparse
import os

import numpy as np
from common import finish, interleaved_medians

import netsor

#: (activation, σ_w, σ_b, depth): variances grow to ~30–150 and correlations reach 1 − 1e-11 … 0.95; the relu and
#: abs networks at σ_w = 1 drive every correlation to within rounding of 1, where the NTK's step (sign) kernel takes
#: the distances between the points (a retry after the covariances alone miss rtol: both attempts are timed).
CASES = [("softplus", 1.5, 0.1, 17), ("softplus", 1.5, 0.1, 20), ("gelu", 1.5, 0.1, 30), ("silu", 1.5, 0.1, 30),
         ("tanh", 1.2, 0.05, 100), ("elu", 1.5, 0.1, 20), ("relu", 1.0, 0.1, 50), ("abs", 1.0, 0.1, 50)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=40, help="inputs")
    parser.add_argument("--d", type=int, default=8, help="input dimension")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cases", nargs="+", default=None, help='only these cases, as "activation σ_w σ_b depth"')
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    cases = CASES if args.cases is None else [(a, float(w), float(b), int(d))
                                              for a, w, b, d in (c.split() for c in args.cases)]
    X = np.random.default_rng(0).standard_normal((args.n, args.d))
    fig: dict = {"loadavg_start": os.getloadavg(), "n": args.n, "d": args.d, "cases": {}}
    print(f"NNGP + NTK of deep MLPs on {args.n} inputs of dimension {args.d} ({os.cpu_count()} CPUs), medians of "
          f"{args.repeats}")
    print(f"  {'case':36s} {'time':>9s} {'bound':>9s} {'ReLU':>9s} {'/ ReLU':>8s}")
    for act, sigma_w, sigma_b, depth in cases:
        p, relu = netsor.zoo.mlp(depth, act, sigma_w, sigma_b), netsor.zoo.mlp(depth, "relu", 2**0.5, sigma_b)
        times, results = interleaved_medians(
            {"case": lambda p=p: netsor.kernel(p, X, get=("nngp", "ntk")),
             "relu": lambda relu=relu: netsor.kernel(relu, X, get=("nngp", "ntk"))}, args.repeats)
        got = results["case"]
        bound = max(float(np.max(err / np.sqrt(np.outer(np.diag(K), np.diag(K)))))
                    for K, err in ((got.nngp, got.nngp_error), (got.ntk, got.ntk_error)))
        name = f"{act} σ_w {sigma_w:g} σ_b {sigma_b:g} depth {depth}"
        ratio = times["case"] / times["relu"]
        fig["cases"][name] = {"time_s": times["case"], "relu_s": times["relu"], "bound": bound, "ratio_to_relu": ratio}
        print(f"  {name:36s} {times['case']:8.2f}s {bound:9.1e} {times['relu']:8.3f}s {ratio:7.0f}×")
    return finish(fig, args.json)


if __name__ == "__main__":
    raise SystemExit(main())
