"""Time ``netsor.nngp`` on a deep MLP, against Neural Tangents and the memory-bandwidth bound.

What is measured (all in one run, so the ratios are not spoiled by machine noise):

1. NNGP of a depth-``--depth`` ReLU MLP (sigma_w = 1, sigma_b = 0) on ``--n`` random Gaussian
   inputs of dimension ``--d`` (float64): one warm-up call, then the median of ``--repeats``.
2. Neural Tangents on the same inputs, if ``/work/nt-venv/bin/python`` (or ``--nt-python``)
   exists: ``benchmarks/nt_baseline.py`` runs as a subprocess on the inputs saved to a temporary
   ``.npy`` (``--inputs``, ``--repeats``), its JSON ``median_s`` is read and the ratio NT/netsor
   printed. The two kernels must agree to 1e-10 relative (``--kernel-out``); the largest
   absolute and relative differences are printed.
3. Memory bandwidth, measured with a large ``np.copyto`` (bytes read + bytes written per second),
   and the bandwidth bound of the NNGP: ``N² · depth`` elementwise passes, each reading and
   writing one float64 per pair, i.e. ``N² · depth · 8 B · 2 / bandwidth``; the gap factor is
   ``netsor median / bound``.
4. The same NNGP with tanh instead of ReLU, interleaved with the ReLU calls (relu, tanh, relu,
   ...) so that both see the same machine load: median and ratio to the ReLU median (goal <= 3);
   process CPU times are reported too (less sensitive to other users of the machine).
5. With ``--large``: N = ``--large-n`` (default 20000) with ``memory_budget = 1 GiB``, one call:
   time and peak RSS (``ru_maxrss`` before / after; the result alone is N² · 8 bytes).

Run::

    python benchmarks/bench_nngp.py                      # N = 1000, depth 10, 7 repeats
    python benchmarks/bench_nngp.py --large --json nngp.json

Threads: netsor uses its default tile threads (the CPU count, at most 8) unless ``--threads``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from common import finish

import netsor

HERE = Path(__file__).resolve().parent
DEFAULT_NT_PYTHON = "/work/nt-venv/bin/python"
GIB = 2**30


def timed(fn, repeats: int, warmup: int = 1) -> tuple[float, list[float], object]:
    """(median seconds, all times, last result) of ``repeats`` calls after ``warmup`` calls."""
    out = None
    for _ in range(warmup):
        out = fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), times, out


def maxrss_bytes() -> int:
    """Peak resident set size of this process so far (Linux reports KiB, macOS bytes)."""
    r = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(r) if sys.platform == "darwin" else int(r) * 1024


def measure_bandwidth(nbytes: int = 512 * 2**20, repeats: int = 7) -> float:
    """Copy bandwidth in bytes/s: (read + write) bytes of a big ``np.copyto`` per second."""
    n = nbytes // 8
    src = np.random.default_rng(1).standard_normal(n)
    dst = np.empty_like(src)
    med, _, _ = timed(lambda: np.copyto(dst, src), repeats)
    return 2 * src.nbytes / med


def run_nt(nt_python: str, x: np.ndarray, depth: int, activation: str, repeats: int,
           tmp: Path, extra: list[str] | None = None) -> tuple[dict, np.ndarray]:
    inputs, out, kout = tmp / "inputs.npy", tmp / "nt.json", tmp / "nt_kernel.npy"
    np.save(inputs, x)
    cmd = [nt_python, str(HERE / "nt_baseline.py"), "--depth", str(depth), "--activation", activation,
           "--sigma-w", "1", "--sigma-b", "0", "--repeats", str(repeats), "--inputs", str(inputs),
           "--out", str(out), "--kernel-out", str(kout), *(extra or [])]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    with open(out) as f:
        result = json.load(f)
    return result, np.load(kout)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=1000, help="number of inputs (default 1000)")
    p.add_argument("--d", type=int, default=100, help="input dimension (default 100)")
    p.add_argument("--depth", type=int, default=10, help="hidden layers (default 10)")
    p.add_argument("--repeats", type=int, default=7, help="timed calls after a warm-up (default 7)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=None, help="netsor tile threads (default: its own)")
    p.add_argument("--psd", choices=["auto", "clip", "check", "skip"], default="auto",
                   help="PSD handling of the kernel (netsor default: auto)")
    p.add_argument("--nt-python", default=None,
                   help=f"python of the Neural Tangents venv (default {DEFAULT_NT_PYTHON} if it exists)")
    p.add_argument("--no-nt", action="store_true", help="skip the Neural Tangents comparison")
    p.add_argument("--large", action="store_true", help="also time N = --large-n with a 1 GiB budget")
    p.add_argument("--large-n", type=int, default=20000)
    p.add_argument("--large-budget", type=int, default=GIB, help="memory_budget in bytes (default 1 GiB)")
    p.add_argument("--json", default=None, metavar="OUT", help="write all figures to this JSON file")
    args = p.parse_args(argv)
    if args.repeats < 1:
        p.error("--repeats must be >= 1")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    rng = np.random.default_rng(args.seed)
    x = rng.standard_normal((args.n, args.d))
    relu = netsor.zoo.mlp(args.depth, "relu", 1.0, 0.0)
    tanh = netsor.zoo.mlp(args.depth, "tanh", 1.0, 0.0)
    kw = {"threads": args.threads, "psd": args.psd}
    fig: dict = {"n": args.n, "d": args.d, "depth": args.depth, "repeats": args.repeats,
                 "threads": args.threads, "psd": args.psd, "cpu_count": os.cpu_count(),
                 "numpy": np.__version__, "netsor": netsor.__version__, "python": platform.python_version()}
    fig["loadavg_start"] = os.getloadavg()
    print(f"netsor NNGP, MLP depth {args.depth}, N = {args.n}, d = {args.d}, float64, "
          f"median of {args.repeats} after a warm-up ({os.cpu_count()} CPUs)")

    # 1. Neural Tangents first, then netsor right after it (noisy shared machines: keep close in time)
    nt_python = args.nt_python or (DEFAULT_NT_PYTHON if os.path.exists(DEFAULT_NT_PYTHON) else None)
    nt = K_nt = None
    if nt_python and not args.no_nt:
        with tempfile.TemporaryDirectory() as tmp:
            nt, K_nt = run_nt(nt_python, x, args.depth, "relu", args.repeats, Path(tmp))

    # 2. ReLU and tanh, interleaved (relu, tanh, relu, tanh, ...) so their ratio sees the same load
    K = netsor.nngp(relu, x, **kw)
    netsor.nngp(tanh, x, **kw)
    wall: dict[str, list[float]] = {"relu": [], "tanh": []}
    cpu: dict[str, list[float]] = {"relu": [], "tanh": []}
    for _ in range(args.repeats):
        for name, prog in (("relu", relu), ("tanh", tanh)):
            t0, c0 = time.perf_counter(), time.process_time()
            out = netsor.nngp(prog, x, **kw)
            wall[name].append(time.perf_counter() - t0)
            cpu[name].append(time.process_time() - c0)
            if name == "relu":
                K = out
    t_relu, t_tanh = (statistics.median(wall[k]) for k in ("relu", "tanh"))
    c_relu, c_tanh = (statistics.median(cpu[k]) for k in ("relu", "tanh"))
    paired = statistics.median(t / r for t, r in zip(wall["tanh"], wall["relu"], strict=True))
    fig.update(relu_median_s=t_relu, relu_times_s=wall["relu"], relu_cpu_median_s=c_relu,
               tanh_median_s=t_tanh, tanh_times_s=wall["tanh"], tanh_cpu_median_s=c_tanh,
               tanh_over_relu=t_tanh / t_relu, tanh_over_relu_paired=paired,
               tanh_over_relu_cpu=c_tanh / c_relu)
    print(f"  relu  median {t_relu * 1e3:9.1f} ms   (min {min(wall['relu']) * 1e3:.1f}, "
          f"max {max(wall['relu']) * 1e3:.1f}; CPU time median {c_relu * 1e3:.1f} ms)")

    if nt is not None:
        diff = np.abs(K - K_nt)
        rel = float(np.max(diff / np.maximum(np.abs(K_nt), np.finfo(float).tiny)))
        rel_norm = float(np.max(diff) / np.max(np.abs(K_nt)))
        ok = max(rel, rel_norm) <= 1e-10
        fig.update(nt_median_s=nt["median_s"], nt_min_s=nt["min_s"], nt_times_s=nt["times_s"],
                   nt_warmup_s=nt["warmup_s"], nt_over_netsor=nt["median_s"] / t_relu,
                   nt_over_netsor_min=nt["min_s"] / min(wall["relu"]), nt_max_abs_diff=float(np.max(diff)),
                   nt_max_rel_diff=rel, nt_max_diff_over_max=rel_norm, nt_agree_1e10=bool(ok),
                   nt_jax=nt.get("jax_version"), nt_devices=nt.get("devices"))
        print(f"  Neural Tangents relu median {nt['median_s'] * 1e3:9.1f} ms (min {nt['min_s'] * 1e3:.1f}; "
              f"warm-up incl. jit {nt['warmup_s']:.2f} s)   NT / netsor = {nt['median_s'] / t_relu:.2f} "
              f"(medians), {fig['nt_over_netsor_min']:.2f} (minima)")
        print(f"  kernels: max |K - K_nt| = {np.max(diff):.3e}, max elementwise relative {rel:.3e}, "
              f"max |dK| / max |K_nt| = {rel_norm:.3e}  -> {'AGREE' if ok else 'DISAGREE'} to 1e-10")
    else:
        print("  Neural Tangents: skipped (no --nt-python and /work/nt-venv/bin/python missing, or --no-nt)")

    # 3. bandwidth bound
    bw = measure_bandwidth()
    bytes_moved = args.n**2 * args.depth * 8 * 2
    bound = bytes_moved / bw
    fig.update(copy_bandwidth_GBps=bw / 1e9, bound_bytes=bytes_moved, bound_s=bound, gap_factor=t_relu / bound,
               gap_factor_min=min(wall["relu"]) / bound)
    print(f"  np.copyto bandwidth {bw / 1e9:.2f} GB/s (read + write); bound N²·depth·8 B·2 = "
          f"{bytes_moved / 1e9:.2f} GB -> {bound * 1e3:.1f} ms; netsor relu / bound = {t_relu / bound:.1f}x "
          f"(median), {min(wall['relu']) / bound:.1f}x (min)")

    # 4. tanh
    print(f"  tanh  median {t_tanh * 1e3:9.1f} ms   (min {min(wall['tanh']) * 1e3:.1f}; CPU median "
          f"{c_tanh * 1e3:.1f} ms)   tanh / relu = {t_tanh / t_relu:.2f} (medians), {paired:.2f} (median of "
          f"paired runs), {c_tanh / c_relu:.2f} (CPU time); goal <= 3: "
          f"{'met' if t_tanh / t_relu <= 3 else 'MISSED'}")

    # 5. large N
    if args.large:
        n = args.large_n
        xl = np.random.default_rng(args.seed + 1).standard_normal((n, args.d))
        del K
        rss0 = maxrss_bytes()
        t0 = time.perf_counter()
        KL = netsor.nngp(relu, xl, memory_budget=args.large_budget, threads=args.threads, psd=args.psd)
        t_large = time.perf_counter() - t0
        rss1 = maxrss_bytes()
        ok = bool(np.isfinite(KL[:: max(1, n // 100)]).all())
        fig.update(large_n=n, large_budget=args.large_budget, large_s=t_large, large_rss_before=rss0,
                   large_rss_after=rss1, large_result_bytes=KL.nbytes,
                   large_rss_beyond_result=rss1 - KL.nbytes,
                   large_per_pair_ns=t_large / n**2 * 1e9,
                   large_bound_s=n**2 * args.depth * 16 / bw)
        print(f"  N = {n}, memory_budget = {args.large_budget / GIB:g} GiB: {t_large:.1f} s "
              f"({t_large / n**2 * 1e9:.1f} ns/pair vs {t_relu / args.n**2 * 1e9:.1f} at N = {args.n}; "
              f"bound {fig['large_bound_s']:.1f} s); peak RSS {rss0 / GIB:.2f} -> {rss1 / GIB:.2f} GiB "
              f"(result {KL.nbytes / GIB:.2f} GiB; peak beyond the result {(rss1 - KL.nbytes) / GIB:.2f} GiB); "
              f"finite sample {ok}")
        del KL

    return finish(fig, args.json)


if __name__ == "__main__":
    raise SystemExit(main())
