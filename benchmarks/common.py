"""Shared ending of the benchmark scripts: record the load and write the figures."""

import json
import os
import statistics
import time
from collections.abc import Callable
from typing import Any


def median_time(fn: Callable[[], Any], repeats: int = 7) -> float:
    """Median seconds of ``repeats`` calls of ``fn`` after one warm-up call."""
    return interleaved_medians({"fn": fn}, repeats)[0]["fn"]


def interleaved_medians(calls: dict[str, Callable[[], Any]], repeats: int) -> tuple[dict[str, float], dict[str, Any]]:
    """Warm each call up once, then time ``repeats`` rounds of all calls interleaved (so that every
    call sees the same machine load); returns (median seconds by name, warm-up results by name)."""
    results = {name: f() for name, f in calls.items()}
    times: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(repeats):
        for name, f in calls.items():
            t0 = time.perf_counter()
            f()
            times[name].append(time.perf_counter() - t0)
    return {name: statistics.median(v) for name, v in times.items()}, results


def finish(fig: dict, json_path: str | None) -> int:
    """Print the load average at the end and write ``fig`` as JSON if ``json_path``; returns 0."""
    fig["loadavg_end"] = os.getloadavg()
    print(f"  load average (1, 5, 15 min) at start {fig['loadavg_start']}, at end {fig['loadavg_end']}")
    if json_path:
        with open(json_path, "w") as f:
            json.dump(fig, f, indent=2)
        print(f"  figures written to {json_path}")
    return 0
