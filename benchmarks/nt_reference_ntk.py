"""Write reference NNGP and NTK kernels (and cross kernels) computed by Neural Tangents.

Run in the Neural Tangents venv (see ``nt_baseline.py`` for its setup; never imports netsor)::

    /work/nt-venv/bin/python benchmarks/nt_reference_ntk.py [--out tests/data/nt_reference_ntk.npz]

Inputs: ``X`` of shape (6, 5) as in ``nt_reference_kernels.py`` (colinear, anti-colinear and
generic pairs) and ``X2`` of shape (4, 5) from ``default_rng(SEED + 1)``. For each
architecture key the file holds ``{key}/nngp``, ``{key}/ntk`` (``kernel_fn(X, None)``) and
``{key}/ntk_cross`` (``kernel_fn(X, X2)``), float64:

* ``mlp_{act}_d{depth}_w{σw}_b{σb}``: ``depth × [Dense(W_std=σw, b_std=σb, 'ntk'), act]`` +
  ``Dense(1, σw, σb)`` — ``netsor.zoo.mlp(depth, act, σw, σb)``;
* ``resnet_{act}_k{blocks}_w{σw}_b{σb}``: ``Dense(σw, σb)``, then ``blocks ×`` the residual
  block ``g ← g + Dense(σw, σb)(act(g))`` (``FanOut(2)``, ``parallel(serial(act, Dense),
  Identity())``, ``FanInSum()``), then ``act``, ``Dense(1, σw, σb)`` —
  ``netsor.zoo.resnet(blocks, act, σw, σb)``.

Every Dense uses ``parameterization='ntk'``: the NTK is taken with respect to standard-normal
parameters, every layer trained.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import nt_baseline as ntb  # noqa: E402  (installs the NT import shim and enables x64)
import numpy as np  # noqa: E402
from nt_reference_kernels import SEED, reference_pair  # noqa: E402

stax = ntb.stax
MLP_CASES = [(act, depth, sw, sb) for act in ("relu", "erf") for depth in (1, 2, 3, 5, 10)
             for sw, sb in ((1.0, 0.0), (1.5, 0.3))]
RESNET_CASES = [(act, blocks, sw, sb) for act in ("relu", "erf") for blocks in (1, 3)
                for sw, sb in ((1.0, 0.0), (0.8, 0.2))]
DEFAULT_OUT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "tests", "data",
                                            "nt_reference_ntk.npz"))


def dense(out: int, sw: float, sb: float):
    return stax.Dense(out, W_std=sw, b_std=sb, parameterization="ntk")


def resnet(act: str, blocks: int, sw: float, sb: float, width: int = 512):
    phi = ntb.ACTIVATIONS[act]
    block = stax.serial(stax.FanOut(2), stax.parallel(stax.serial(phi(), dense(width, sw, sb)), stax.Identity()),
                        stax.FanInSum())
    return stax.serial(dense(width, sw, sb), *([block] * blocks), phi(), dense(1, sw, sb))


def main(argv=None) -> int:
    args = ntb.reference_arguments(argv, __doc__.splitlines()[0], DEFAULT_OUT)
    X, X2 = reference_pair()
    arrays = {"X": X, "X2": X2}
    nets = {f"mlp_{a}_d{d}_w{sw}_b{sb}": ntb.build_network(d, a, sw, sb) for a, d, sw, sb in MLP_CASES}
    nets |= {f"resnet_{a}_k{k}_w{sw}_b{sb}": resnet(a, k, sw, sb) for a, k, sw, sb in RESNET_CASES}
    for key, (_, _, kernel_fn) in nets.items():
        both = kernel_fn(X, None, ("nngp", "ntk"))
        cross = kernel_fn(X, X2, "ntk")
        arrays[f"{key}/nngp"] = np.asarray(both.nngp, dtype=np.float64)
        arrays[f"{key}/ntk"] = np.asarray(both.ntk, dtype=np.float64)
        arrays[f"{key}/ntk_cross"] = np.asarray(cross, dtype=np.float64)
    ntb.save_reference(args.out, arrays, list(nets), SEED)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
