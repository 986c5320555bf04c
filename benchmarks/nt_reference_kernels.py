"""Write reference NNGP kernels computed by Neural Tangents, for cross-checking netsor.

Run in the Neural Tangents venv (see ``nt_baseline.py`` for its setup; never imports netsor)::

    /work/nt-venv/bin/python benchmarks/nt_reference_kernels.py \
        [--out tests/data/nt_reference_kernels.npz]

Inputs ``X`` (shape (6, 5), float64), from ``np.random.default_rng(20261129)``::

    a, b, c = rng.standard_normal((3, 5))
    X = [a, 2a, b, 2b, c, -c]

so rows (0, 1) and (2, 3) are colinear pairs (x and 2x, correlation +1) and rows (4, 5) are an
anti-colinear pair (x and -x, correlation -1); all other pairs are generic.

For every activation in (relu, erf), depth in (1, 3, 10) and (sigma_w, sigma_b) in
((1.0, 0.0), (1.5, 0.3)) the file holds the (6, 6) float64 NNGP matrix under the key
``f"{activation}_d{depth}_w{sigma_w}_b{sigma_b}"`` (e.g. ``relu_d3_w1.5_b0.3``,
``erf_d10_w1.0_b0.0``), plus ``X`` and ``meta`` (a JSON string with the versions and the
conventions).

Network and conventions are those of ``nt_baseline.build_network`` / ``nngp_kernel``:
``depth`` hidden layers ``Dense(W_std=sigma_w, b_std=sigma_b, parameterization='ntk')`` + act,
then a readout ``Dense(1, same stds)``; input covariance ``x . x' / d``; each Dense maps
``K -> sigma_w**2 K + sigma_b**2``; Relu is plain max(0, x), Erf is plain erf.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import nt_baseline as ntb  # noqa: E402  (installs the NT import shim and enables x64)
import numpy as np  # noqa: E402

SEED = 20261129
ACTIVATIONS = ("relu", "erf")
DEPTHS = (1, 3, 10)
SIGMAS = ((1.0, 0.0), (1.5, 0.3))
DEFAULT_OUT = os.path.join(
    os.path.dirname(os.path.abspath(__file__)),
    os.pardir,
    "tests",
    "data",
    "nt_reference_kernels.npz",
)


def reference_pair(seed: int = SEED) -> tuple[np.ndarray, np.ndarray]:
    """``X`` of :func:`reference_inputs` and a second set ``X2`` (4, 5) for cross kernels."""
    return reference_inputs(seed), np.random.default_rng(seed + 1).standard_normal((4, 5))


def reference_inputs(seed: int = SEED) -> np.ndarray:
    a, b, c = np.random.default_rng(seed).standard_normal((3, 5))
    return np.stack([a, 2.0 * a, b, 2.0 * b, c, -c]).astype(np.float64)


def key(activation: str, depth: int, sigma_w: float, sigma_b: float) -> str:
    return f"{activation}_d{depth}_w{sigma_w}_b{sigma_b}"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=os.path.normpath(DEFAULT_OUT))
    args = p.parse_args(argv)

    X = reference_inputs()
    arrays = {"X": X}
    for act in ACTIVATIONS:
        for depth in DEPTHS:
            for sw, sb in SIGMAS:
                K = ntb.nngp_kernel(X, depth, act, sw, sb)
                if K.shape != (6, 6) or not np.isfinite(K).all():
                    raise RuntimeError(f"bad kernel for {key(act, depth, sw, sb)}: {K}")
                arrays[key(act, depth, sw, sb)] = K

    meta = {
        "source": "neural_tangents stax kernel_fn(X, None, get='nngp')",
        "neural_tangents_version": getattr(ntb.nt, "__version__", None),
        "jax_version": ntb.jax.__version__,
        "x64": bool(ntb.jax.config.jax_enable_x64),
        "seed": SEED,
        "inputs": "X = [a, 2a, b, 2b, c, -c], a,b,c = default_rng(seed).standard_normal((3, 5))",
        "activations": list(ACTIVATIONS),
        "depths": list(DEPTHS),
        "sigmas": [list(s) for s in SIGMAS],
        "key_format": "{activation}_d{depth}_w{sigma_w}_b{sigma_b}",
        "network": "depth x [Dense(W_std=sigma_w, b_std=sigma_b, parameterization='ntk'), act] "
        "+ Dense(1, W_std=sigma_w, b_std=sigma_b, parameterization='ntk')",
        "conventions": "input cov = x.x'/d; Dense: K -> sigma_w^2 K + sigma_b^2; "
        "relu = max(0,x) (no He factor); erf = erf(x)",
    }
    arrays["meta"] = np.array(json.dumps(meta))

    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    np.savez(args.out, **arrays)
    print(f"wrote {len(arrays) - 2} kernels + X to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
