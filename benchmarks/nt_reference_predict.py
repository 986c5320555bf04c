"""Write reference predictions of Neural Tangents' ``predict`` module, for cross-checking
``netsor.predict`` (run in the Neural Tangents venv; never imports netsor)::

    /work/nt-venv/bin/python benchmarks/nt_reference_predict.py [--out tests/data/nt_reference_predict.npz]

Kernels: NNGP and NTK of NT's depth-2 ReLU MLP (``nt_baseline.build_network(2, "relu", 1.5, 0.1)``)
on 8 training and 5 test inputs from ``default_rng(7)`` (d = 4); targets ``y`` (8, 2). Stored:
the kernels, ``y``, ``gp_mean`` / ``gp_cov`` (``predict.gp_inference`` with ``diag_reg=1e-3``,
``diag_reg_absolute_scale=True``), and for t in ``T`` the means of
``predict.gradient_descent_mse(ntk_tt, y, learning_rate=0.5)(t, 0., 0., ntk_st)`` and mean and
covariance of ``gradient_descent_mse_ensemble(kernel_fn, x_train, y, learning_rate=0.5)(x_test, "ntk", t,
compute_cov=True)``.
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import nt_baseline as ntb  # noqa: E402
import numpy as np  # noqa: E402
import scipy.linalg  # noqa: E402

# The pinned jax wraps scipy.linalg.tril/triu, which newer scipy removed (numpy's are the same).
for _name in ("tril", "triu"):
    if not hasattr(scipy.linalg, _name):
        setattr(scipy.linalg, _name, getattr(np, _name))

T = (0.0, 0.3, 5.0, 1e3, None)
DEFAULT_OUT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "tests", "data",
                                            "nt_reference_predict.npz"))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=DEFAULT_OUT)
    args = p.parse_args(argv)
    predict = ntb.nt.predict
    rng = np.random.default_rng(7)
    x_train, x_test, y = rng.standard_normal((8, 4)), rng.standard_normal((5, 4)), rng.standard_normal((8, 2))
    _, _, kernel_fn = ntb.build_network(2, "relu", 1.5, 0.1)
    k_tt = kernel_fn(x_train, None, ("nngp", "ntk"))
    k_st = kernel_fn(x_test, x_train, ("nngp", "ntk"))
    k_ss = kernel_fn(x_test, None, "nngp")
    out = {"y": y, "nngp_tt": k_tt.nngp, "ntk_tt": k_tt.ntk, "nngp_st": k_st.nngp, "ntk_st": k_st.ntk, "nngp_ss": k_ss,
           "t": np.array([np.inf if t is None else t for t in T])}
    gp = predict.gp_inference(k_tt, y, diag_reg=1e-3, diag_reg_absolute_scale=True)
    mean_cov = gp("nngp", k_st, k_ss)
    out["gp_mean"], out["gp_cov"] = mean_cov.mean, mean_cov.covariance
    fn = predict.gradient_descent_mse(k_tt.ntk, y, learning_rate=0.5)
    ens = predict.gradient_descent_mse_ensemble(kernel_fn, x_train, y, learning_rate=0.5)
    for i, t in enumerate(T):
        out[f"gd_mean_{i}"] = fn(t, 0.0, 0.0, k_st.ntk)[1]
        g = ens(t, x_test, "ntk", compute_cov=True)
        out[f"ens_mean_{i}"], out[f"ens_cov_{i}"] = g.mean, g.covariance
    np.savez(args.out, **{k: np.asarray(v, dtype=np.float64) for k, v in out.items()})
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
