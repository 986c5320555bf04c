"""Write reference NNGP and NTK kernels of 1-D convolutional networks computed by Neural Tangents.

Run in the Neural Tangents venv (see ``nt_baseline.py`` for its setup; never imports netsor)::

    /work/nt-venv/bin/python benchmarks/nt_reference_cnn.py [--out tests/data/nt_reference_cnn.npz]

Inputs: ``X`` of shape (3, 5, 2) (B inputs, L positions, C channels) from ``default_rng(SEED)``
with ``X[2] = −X[0]`` (an anti-colinear pair), and ``X2`` of shape (2, 5, 2) from
``default_rng(SEED + 1)``. For each key the file holds ``{key}/nngp``, ``{key}/ntk``
(``kernel_fn(X, None)``), ``{key}/nngp_cross`` and ``{key}/ntk_cross`` (``kernel_fn(X, X2)``),
float64, for::

    stax.serial(*[Conv(512, (F,), padding=P, W_std=σw, b_std=σb, parameterization="ntk"), act] * depth,
                Flatten() | GlobalAvgPool(), Dense(1, W_std=σw, b_std=σb, parameterization="ntk"))

— ``netsor.zoo.cnn(depth, act, σw, σb, F, padding, pool, length=L)``. Keys:
``cnn_{act}_d{depth}_w{σw}_b{σb}_f{F}_{padding}_{pool}``.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import nt_baseline as ntb  # noqa: E402  (installs the NT import shim and enables x64)
import numpy as np  # noqa: E402
import scipy.linalg  # noqa: E402

# The pinned jax wraps scipy.linalg.tril/triu, which newer scipy removed (numpy's are the same).
for _name in ("tril", "triu"):
    if not hasattr(scipy.linalg, _name):
        setattr(scipy.linalg, _name, getattr(np, _name))

stax = ntb.stax
SEED = 11
B, L, C = 3, 5, 2
CASES = [(act, depth, sw, sb, 3, padding, pool) for act in ("relu", "erf") for depth in (1, 2, 3)
         for sw, sb in ((1.0, 0.0), (1.3, 0.2)) for padding in ("circular", "same") for pool in ("flatten", "gap")]
# an even filter: SAME padding is asymmetric (one tap before, two after: lax.padtype_to_pads)
CASES += [(act, 2, 1.3, 0.2, 4, padding, pool) for act in ("relu", "erf") for padding in ("circular", "same")
          for pool in ("flatten", "gap")]
DEFAULT_OUT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "tests", "data",
                                            "nt_reference_cnn.npz"))


def key_of(act: str, depth: int, sw: float, sb: float, F: int, padding: str, pool: str) -> str:
    return f"cnn_{act}_d{depth}_w{sw}_b{sb}_f{F}_{padding}_{pool}"


def cnn(act: str, depth: int, sw: float, sb: float, F: int, padding: str, pool: str, width: int = 512):
    phi = ntb.ACTIVATIONS[act]
    conv = stax.Conv(width, (F,), padding=padding.upper(), W_std=sw, b_std=sb, parameterization="ntk")
    pooling = stax.Flatten() if pool == "flatten" else stax.GlobalAvgPool()
    return stax.serial(*([conv, phi()] * depth), pooling,
                       stax.Dense(1, W_std=sw, b_std=sb, parameterization="ntk"))


def reference_inputs() -> tuple[np.ndarray, np.ndarray]:
    X = np.random.default_rng(SEED).standard_normal((B, L, C))
    X[2] = -X[0]
    return X, np.random.default_rng(SEED + 1).standard_normal((2, L, C))


def main(argv=None) -> int:
    args = ntb.reference_arguments(argv, __doc__.splitlines()[0], DEFAULT_OUT)
    X, X2 = reference_inputs()
    arrays = {"X": X, "X2": X2}
    keys = []
    for case in CASES:
        key = key_of(*case)
        keys.append(key)
        _, _, kernel_fn = cnn(*case)
        both = kernel_fn(X, None, ("nngp", "ntk"))
        cross = kernel_fn(X, X2, ("nngp", "ntk"))
        for name, value in (("nngp", both.nngp), ("ntk", both.ntk), ("nngp_cross", cross.nngp),
                            ("ntk_cross", cross.ntk)):
            arrays[f"{key}/{name}"] = np.asarray(value, dtype=np.float64)
    ntb.save_reference(args.out, arrays, keys, SEED)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
