"""Time the NetsorK kernels against the issue's goals, and against a one-argument kernel of the
same size measured in the same run.

Goals (issue: NetsorK): the transformer with 2 layers on 4 sequences of 8 tokens under 10 s; the
LayerNorm MLP is reported beside the plain MLP of the same depth (LayerNorm adds per-input
scalars: the ratio shows their cost); the BatchNorm MLP (depth 3) on one batch of 4 and on two
(the kernel between batches: two-dimensional Laplace integrals), with its largest bound; a 6-layer
transformer and a depth-50 LayerNorm MLP (NNGP + NTK at the default rtol, with their largest bounds: the
scalars' errors by the chain rule and LayerNorm's exact variance keep them near 1e-10). Medians
of ``--repeats`` after a warm-up, calls interleaved.

Run::

    python benchmarks/bench_netsork.py
"""

from __future__ import annotations

import argparse
import os

import numpy as np
from common import finish, interleaved_medians

import netsor


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    load = os.getloadavg()
    rng = np.random.default_rng(0)
    X_seq = rng.standard_normal((4, 8, 16))
    X = rng.standard_normal((500, 50))
    transformer = netsor.zoo.transformer(2, tokens=8)
    deep_transformer = netsor.zoo.transformer(6, sigma_b=0.1, tokens=8)
    deep_layernorm = netsor.zoo.layernorm_mlp(50, "relu", 1.0, 0.1)
    layernorm = netsor.zoo.layernorm_mlp(3, "relu", 1.0, 0.1)
    plain = netsor.zoo.mlp(3, "relu", 1.0, 0.1)
    batchnorm = netsor.zoo.batchnorm_mlp(3, "relu", batch=4)
    X_batches = rng.standard_normal((2, 4, 5))
    calls = {"transformer": lambda: netsor.nngp(transformer, X_seq),
             "layernorm_mlp": lambda: netsor.nngp(layernorm, X),
             "mlp": lambda: netsor.nngp(plain, X),
             "batchnorm_one_batch": lambda: netsor.limit(batchnorm, X_batches[:1]).nngp(with_error=True),
             "batchnorm_two_batches": lambda: netsor.limit(batchnorm, X_batches).nngp(with_error=True),
             "deep_transformer": lambda: netsor.kernel(deep_transformer, X_seq),
             "deep_layernorm_mlp": lambda: netsor.kernel(deep_layernorm, X[:100])}
    med, results = interleaved_medians(calls, args.repeats)
    K, E = results["batchnorm_two_batches"]
    bn_bound = float(np.max(E / np.sqrt(np.outer(np.diag(K), np.diag(K)))))
    deep = {name: max(float(np.max(err / np.sqrt(np.outer(np.diag(k), np.diag(k)))))
                      for k, err in ((res.nngp, res.nngp_error), (res.ntk, res.ntk_error)))
            for name, res in (("deep_transformer", results["deep_transformer"]),
                              ("deep_layernorm_mlp", results["deep_layernorm_mlp"]))}
    fig = {"loadavg_start": load, "cpus": os.cpu_count(), "median_s": med,
           "layernorm_over_mlp": med["layernorm_mlp"] / med["mlp"], "batchnorm_two_batches_bound": bn_bound,
           "deep_bounds": deep}
    print(f"NetsorK kernels ({os.cpu_count()} CPUs), medians of {args.repeats}")
    print(f"  transformer, 2 layers, 4 sequences × 8 tokens   {med['transformer']:8.3f} s "
          f"(goal < 10 s: {'met' if med['transformer'] < 10 else 'MISSED'})")
    print(f"  LayerNorm MLP depth 3, N = 500                   {med['layernorm_mlp'] * 1e3:8.1f} ms")
    print(f"  MLP depth 3, N = 500 (same run)                  {med['mlp'] * 1e3:8.1f} ms   "
          f"LayerNorm / plain = {fig['layernorm_over_mlp']:.2f}")
    print(f"  BatchNorm MLP depth 3, one batch of 4            {med['batchnorm_one_batch']:8.3f} s")
    print(f"  BatchNorm MLP depth 3, two batches of 4          {med['batchnorm_two_batches']:8.3f} s   "
          f"largest bound / √(K_ii K_jj) = {bn_bound:.1e}")
    print(f"  transformer, 6 layers, NNGP + NTK, 4 × 8 tokens   {med['deep_transformer']:8.3f} s   "
          f"largest bound / √(K_ii K_jj) = {deep['deep_transformer']:.1e}")
    print(f"  LayerNorm MLP depth 50, NNGP + NTK, N = 100        {med['deep_layernorm_mlp']:8.3f} s   "
          f"largest bound / √(K_ii K_jj) = {deep['deep_layernorm_mlp']:.1e}")
    return finish(fig, args.json)


if __name__ == "__main__":
    raise SystemExit(main())
