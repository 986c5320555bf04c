"""Neural Tangents (NT) timing baseline for the NNGP kernel of a deep fully-connected net.

Runs in a *separate* virtual environment (NT 0.6.5 needs numpy<2; netsor needs numpy 2),
so this script must never import netsor. Set the environment up with::

    python3 -m venv /work/nt-venv
    /work/nt-venv/bin/pip install jax==0.4.23 jaxlib==0.4.23 "numpy<2" "scipy<1.14" \
        "ml-dtypes<0.5" frozendict opt_einsum
    /work/nt-venv/bin/pip install --no-deps neural-tangents==0.6.5
    # NT imports its TensorFlow bridge at import time: without these, ``import neural_tangents``
    # fails (no tensorflow, no tree; tf2jax 0.3.6+ needs a newer jax)
    /work/nt-venv/bin/pip install "tensorflow-cpu==2.15.*" dm-tree absl-py
    /work/nt-venv/bin/pip install --no-deps tf2jax==0.3.5

and run, for example::

    /work/nt-venv/bin/python benchmarks/nt_baseline.py --depth 10 --activation relu \
        --n 1000 --d 100 --sigma-w 1 --sigma-b 0 --repeats 7 --seed 0 --out nt_relu_d10.json

The network is::

    stax.serial(Dense(N, W_std=sigma_w, b_std=sigma_b, parameterization='ntk'), Act(),
                ... ``depth`` times (Dense, Act) in all ...,
                Dense(1, W_std=sigma_w, b_std=sigma_b, parameterization='ntk'))

i.e. ``depth`` hidden layers = ``depth + 1`` Dense layers and ``depth`` nonlinearities, and
the reported kernel is the NNGP of the final (readout) Dense layer. ``Act`` is ``stax.Relu()``
(= ``ABRelu(0, 1)``, i.e. plain max(x, 0), no sqrt(2) / He factor) or ``stax.Erf()``
(``a=1, b=1, c=0``, i.e. plain erf). ``--activation hard_tanh``: NT has no closed form for it; its
``ElementwiseNumerical(clip, deg=--deg)`` layer (Gauss–Hermite quadrature) is timed instead.

NT conventions (confirmed by reading neural_tangents 0.6.5,
``_src/stax/linear.py`` and ``_src/stax/requirements.py``):

* Input kernel: ``_inputs_to_kernel`` -> ``_cov`` returns ``x1 @ x2.T / x1.shape[channel_axis]``,
  i.e. the input-layer covariance is ``x . x' / d`` (divided by the input dimension ``d``,
  no mean subtraction).
* ``Dense(..., parameterization='ntk')``: its ``kernel_fn`` maps ``cov1, nngp, cov2`` through
  ``_affine(mat, W_std, b_std)``, which is ``mat * W_std**2 + b_std**2`` (the ``+ b_std**2`` is
  skipped only when ``b_std is None``; ``b_std=0.0`` adds 0). ``out_dim`` is ignored by
  ``kernel_fn``. So the NNGP after a Dense layer is ``W_std**2 * cov_in + b_std**2``, and for
  the first layer ``cov_in = x . x' / d``. (Finite-width meaning: ``z = W_std/sqrt(fan_in) W x
  + b_std b`` with ``W, b ~ N(0, 1)``.)
* ReLU layer (``ABRelu`` kernel with a=0, b=1): ``K' = (sqrt(k11 k22 - k12^2)
  + (pi - theta) k12) / (2 pi)`` with ``theta = arctan2(sqrt(k11 k22 - k12^2), k12)`` (the
  sqrt argument is clamped at 0).
* Erf layer: ``K' = (2/pi) arctan2(2 k12, sqrt((1+2k11)(1+2k22) - 4 k12^2))``
  = ``(2/pi) arcsin(2 k12 / sqrt((1+2k11)(1+2k22)))``.

Timing: ``kernel_fn`` is jitted with ``static_argnames="get"``; the inputs are moved to the
default device once (``jnp.asarray``) so host->device copies are not timed; one warm-up call
(includes compilation, reported as ``warmup_s``), then ``--repeats`` timed calls of
``kernel_fn(x, None, get="nngp").block_until_ready()``. Results go to ``--out`` as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
import types

# neural_tangents.experimental imports TensorFlow; stub it out before importing NT.
sys.modules.setdefault(
    "neural_tangents.experimental", types.ModuleType("neural_tangents.experimental")
)

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import neural_tangents as nt  # noqa: E402
import numpy as np  # noqa: E402
from neural_tangents import stax  # noqa: E402

ACTIVATIONS = {"relu": stax.Relu, "erf": stax.Erf,
               # NT has no hard_tanh kernel: its numerical layer (Gauss–Hermite of degree ``deg``) instead
               "hard_tanh": lambda deg: stax.ElementwiseNumerical(lambda x: jnp.clip(x, -1.0, 1.0), deg=deg)}


def build_network(depth: int, activation: str, sigma_w: float, sigma_b: float, width: int = 512, deg: int = 25):
    """Return NT's ``(init_fn, apply_fn, kernel_fn)`` for the MLP described in the module doc."""
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got {activation!r}")
    if depth < 0:
        raise ValueError(f"depth must be >= 0, got {depth}")
    act = ACTIVATIONS[activation] if activation != "hard_tanh" else (lambda: ACTIVATIONS["hard_tanh"](deg))
    layers = []
    for _ in range(depth):
        layers += [
            stax.Dense(width, W_std=sigma_w, b_std=sigma_b, parameterization="ntk"),
            act(),
        ]
    layers.append(stax.Dense(1, W_std=sigma_w, b_std=sigma_b, parameterization="ntk"))
    return stax.serial(*layers)


def nngp_kernel(
    x: np.ndarray, depth: int, activation: str, sigma_w: float, sigma_b: float
) -> np.ndarray:
    """NT's float64 NNGP matrix ``K(x, x)`` of shape ``(n, n)`` (no timing, no jit)."""
    _, _, kernel_fn = build_network(depth, activation, sigma_w, sigma_b)
    k = kernel_fn(jnp.asarray(np.asarray(x, dtype=np.float64)), None, get="nngp")
    return np.asarray(k, dtype=np.float64)


def reference_arguments(argv, description: str, default_out: str) -> argparse.Namespace:
    """The command line of the reference writers: ``--out PATH``."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--out", default=default_out)
    return p.parse_args(argv)


def save_reference(path: str, arrays: dict, keys: list, seed: int) -> None:
    """Write reference kernels (``{key}/{name}`` arrays, plus inputs) with a ``meta`` record of
    the NT and jax versions; refuses non-finite kernels."""
    for name, value in arrays.items():
        if "/" in name and not np.isfinite(value).all():
            raise RuntimeError(f"non-finite reference {name}")
    meta = {"source": "neural_tangents stax kernel_fn(X, None | X2, ('nngp', 'ntk'))",
            "neural_tangents_version": getattr(nt, "__version__", None), "jax_version": jax.__version__,
            "x64": bool(jax.config.jax_enable_x64), "seed": seed, "keys": list(keys)}
    np.savez_compressed(path, **arrays, meta=np.array(json.dumps(meta)))
    print(f"wrote {len(keys)} architectures to {path}")


def make_inputs(n: int, d: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, d))


def thread_info() -> dict:
    info = {
        "os_cpu_count": os.cpu_count(),
        "XLA_FLAGS": os.environ.get("XLA_FLAGS"),
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
    }
    if hasattr(os, "sched_getaffinity"):
        info["cpu_affinity_count"] = len(os.sched_getaffinity(0))
    return info


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--depth", type=int, required=True, help="number of hidden (Dense, act) layers")
    p.add_argument("--activation", choices=sorted(ACTIVATIONS), required=True)
    p.add_argument("--n", type=int, default=None, help="number of inputs (default 1000)")
    p.add_argument("--d", type=int, default=None, help="input dimension (default 100)")
    p.add_argument("--sigma-w", type=float, default=1.0)
    p.add_argument("--sigma-b", type=float, default=0.0)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True, help="JSON file for the timing results")
    p.add_argument(
        "--inputs", default=None, help="optional .npy of shape (n, d); overrides the rng"
    )
    p.add_argument(
        "--kernel-out", default=None, help="optional .npy to save the float64 NNGP matrix (NTK with --ntk)"
    )
    p.add_argument("--ntk", action="store_true", help="time get=('nngp', 'ntk') instead of get='nngp'")
    p.add_argument("--deg", type=int, default=25, help="Gauss–Hermite degree of the numerical layer (hard_tanh)")
    args = p.parse_args(argv)
    if args.repeats < 1:
        p.error("--repeats must be >= 1")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)

    if args.inputs is not None:
        x = np.asarray(np.load(args.inputs), dtype=np.float64)
        if x.ndim != 2:
            raise SystemExit(f"--inputs must hold a 2-D array (n, d), got shape {x.shape}")
        for name, want, got in (("n", args.n, x.shape[0]), ("d", args.d, x.shape[1])):
            if want is not None and want != got:
                raise SystemExit(f"--{name}={want} contradicts --inputs shape {x.shape}")
    else:
        x = make_inputs(
            args.n if args.n is not None else 1000, args.d if args.d is not None else 100, args.seed
        )
    n, d = x.shape

    _, _, kernel_fn = build_network(args.depth, args.activation, args.sigma_w, args.sigma_b, deg=args.deg)
    kernel_fn = jax.jit(kernel_fn, static_argnames="get")
    xj = jax.device_put(jnp.asarray(x))

    get = ("nngp", "ntk") if args.ntk else "nngp"

    def call():
        out = kernel_fn(xj, None, get=get)
        return out.ntk.block_until_ready() if args.ntk else out.block_until_ready()

    t0 = time.perf_counter()
    k = call()
    warmup_s = time.perf_counter() - t0

    times = []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        k = call()
        times.append(time.perf_counter() - t0)

    k_np = np.asarray(k, dtype=np.float64)
    result = {
        "library": "neural_tangents",
        "median_s": statistics.median(times),
        "min_s": min(times),
        "times_s": times,
        "warmup_s": warmup_s,
        "n": n,
        "d": d,
        "depth": args.depth,
        "activation": args.activation,
        "sigma_w": args.sigma_w,
        "sigma_b": args.sigma_b,
        "repeats": args.repeats,
        "seed": args.seed if args.inputs is None else None,
        "inputs": args.inputs,
        "kernel_dtype": str(k.dtype),
        "kernel_shape": list(k.shape),
        "kernel_finite": bool(np.isfinite(k_np).all()),
        "jax_version": jax.__version__,
        "jaxlib_version": _jaxlib_version(),
        "neural_tangents_version": getattr(nt, "__version__", None),
        "numpy_version": np.__version__,
        "devices": [str(dev) for dev in jax.devices()],
        "backend": jax.default_backend(),
        "x64": bool(jax.config.jax_enable_x64),
        "threads": thread_info(),
        "python": platform.python_version(),
        "machine": platform.machine(),
    }
    if args.kernel_out is not None:
        np.save(args.kernel_out, k_np)
        result["kernel_out"] = args.kernel_out

    with open(args.out, "w") as f:
        json.dump(result, f, indent=2)
    summary = ("n", "depth", "activation", "median_s", "warmup_s", "jax_version", "devices")
    print(json.dumps({key: result[key] for key in summary}))
    return 0


def _jaxlib_version():
    try:
        import jaxlib

        return jaxlib.__version__
    except Exception:  # pragma: no cover
        return None


if __name__ == "__main__":
    raise SystemExit(main())
