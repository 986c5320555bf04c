"""Time ``pair_expectation`` on one NNGP layer of 10⁶ pairs: relu closed form vs tanh.

Shapes as in a tanh MLP layer: ``a : (N, 1)``, ``b : (1, N)``, ``c : (N, N)`` with N = 1000,
for random Gaussian inputs (d = 100, |ρ| mostly < 0.3) and for near-colinear inputs
(``x_i = x_0 + 0.1 ξ_i``, ρ ≈ 0.99). The old nested rule is timed on a sample of pairs and
extrapolated. Also reports the fast path's largest error against the nested rule on a sample.

Run: ``python benchmarks/bench_pair_expectation.py``
"""

from __future__ import annotations

import time

import numpy as np

from netsor.activations import relu, tanh
from netsor.gaussian import pairs as g


def median_time(fn, repeats=5):
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def layer(x):
    k = x @ x.T / x.shape[1]
    q = np.diag(k).copy()
    return q[:, None], q[None, :], k


def main(n=1000, d=100, nested_sample=200):
    rng = np.random.default_rng(0)
    x0 = rng.standard_normal(d)
    cases = {"random": rng.standard_normal((n, d)),
             "near-colinear": x0 + 0.1 * rng.standard_normal((n, d))}
    for label, x in cases.items():
        a, b, c = layer(x)
        off = ~np.eye(n, dtype=bool)
        rho = np.abs(c / np.sqrt(a * b))[off]
        t_relu = median_time(lambda a=a, b=b, c=c: relu.kernel(a, b, c))
        t_tanh = median_time(lambda a=a, b=b, c=c: g.pair_expectation(tanh, tanh, a, b, c))
        flat = [np.broadcast_to(t, c.shape).ravel() for t in (a, b, c)]
        idx = rng.choice(c.size, nested_sample, replace=False)
        sample = [t[idx] for t in flat]
        t0 = time.perf_counter()
        exact = g._nested_pair(tanh, tanh, *sample)[0]
        t_nested = (time.perf_counter() - t0) * c.size / nested_sample
        fast, bound = (x.ravel()[idx] for x in g.pair_expectation(tanh, tanh, a, b, c))
        err = np.max(np.abs(fast - exact))
        print(f"{label}: N = {n} ({c.size:.0e} pairs), off-diagonal |rho| median "
              f"{np.median(rho):.3f}, max {rho.max():.3f}")
        print(f"  relu closed form      {t_relu * 1e3:9.1f} ms")
        print(f"  tanh fast path        {t_tanh * 1e3:9.1f} ms   ratio to relu {t_tanh / t_relu:6.2f}")
        print(f"  tanh nested (old)     {t_nested:9.1f} s    (extrapolated from {nested_sample} "
              f"pairs; ratio {t_nested / t_tanh:.0f}x the fast path)")
        print(f"  max |fast - nested| on the sample: {err:.1e} (largest reported bound there {bound.max():.1e})")

    # Whole depth-10 NNGP (σ_w² = 1 for tanh, 2 for relu, no bias) on the random inputs.
    def net(act, sw2, k):
        for _ in range(10):
            q = np.diag(k).copy()
            k = sw2 * g.pair_expectation(act, act, q[:, None], q[None, :], k)[0]
        return k

    k0 = layer(cases["random"])[2]
    t_relu = median_time(lambda: net(relu, 2.0, k0), 3)
    t_tanh = median_time(lambda: net(tanh, 1.0, k0), 3)
    print(f"depth-10 NNGP, random inputs: relu {t_relu:.3f} s, tanh {t_tanh:.3f} s, "
          f"ratio {t_tanh / t_relu:.2f}")


if __name__ == "__main__":
    main()
