"""Write reference NNGP kernels (and cross kernels, and NTKs) of LayerNorm MLPs computed by Neural Tangents.

Run in the Neural Tangents venv (see ``nt_baseline.py`` for its setup; never imports netsor)::

    /work/nt-venv/bin/python benchmarks/nt_reference_layernorm.py [--out tests/data/nt_reference_layernorm.npz]

Inputs as in ``nt_reference_ntk.py``: ``X`` (6, 5) from ``reference_inputs()`` and ``X2`` (4, 5) from
``default_rng(SEED + 1)``. For each key ``lnmlp_{act}_d{depth}_w{σw}_b{σb}`` the file holds ``/nngp``
(``kernel_fn(X, None)``), ``/nngp_cross`` (``kernel_fn(X, X2)``) and ``/ntk``, of
``depth × [Dense(W_std=σw, b_std=σb, 'ntk'), LayerNorm(), act]`` + ``Dense(1, σw, σb)`` —
``netsor.zoo.layernorm_mlp(depth, act, σw, σb)``. NT's LayerNorm adds ``eps = 1e-12`` to the variance
(a relative change of ~1e-12 for variances of order one).
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import nt_baseline as ntb  # noqa: E402  (installs the NT import shim and enables x64)
import numpy as np  # noqa: E402
from nt_reference_kernels import SEED, reference_pair  # noqa: E402

stax = ntb.stax
CASES = [(act, depth, sw, sb) for act in ("relu", "erf") for depth in (1, 2, 3)
         for sw, sb in ((1.0, 0.0), (1.5, 0.3))]
DEFAULT_OUT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "tests", "data",
                                            "nt_reference_layernorm.npz"))


def layernorm_mlp(act: str, depth: int, sw: float, sb: float, width: int = 512):
    phi = ntb.ACTIVATIONS[act]
    layers = []
    for _ in range(depth):
        layers += [stax.Dense(width, W_std=sw, b_std=sb, parameterization="ntk"), stax.LayerNorm(), phi()]
    return stax.serial(*layers, stax.Dense(1, W_std=sw, b_std=sb, parameterization="ntk"))


def main(argv=None) -> int:
    args = ntb.reference_arguments(argv, __doc__.splitlines()[0], DEFAULT_OUT)
    X, X2 = reference_pair()
    arrays = {"X": X, "X2": X2}
    keys = []
    for act, depth, sw, sb in CASES:
        key = f"lnmlp_{act}_d{depth}_w{sw}_b{sb}"
        keys.append(key)
        _, _, kernel_fn = layernorm_mlp(act, depth, sw, sb)
        both = kernel_fn(X, None, ("nngp", "ntk"))
        arrays[f"{key}/nngp"] = np.asarray(both.nngp, dtype=np.float64)
        arrays[f"{key}/ntk"] = np.asarray(both.ntk, dtype=np.float64)
        arrays[f"{key}/nngp_cross"] = np.asarray(kernel_fn(X, X2, "nngp"), dtype=np.float64)
    ntb.save_reference(args.out, arrays, keys, SEED)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
