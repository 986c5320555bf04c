"""Shared ending of the benchmark scripts: record the load and write the figures."""

import json
import os


def finish(fig: dict, json_path: str | None) -> int:
    """Print the load average at the end and write ``fig`` as JSON if ``json_path``; returns 0."""
    fig["loadavg_end"] = os.getloadavg()
    print(f"  load average (1, 5, 15 min) at start {fig['loadavg_start']}, at end {fig['loadavg_end']}")
    if json_path:
        with open(json_path, "w") as f:
            json.dump(fig, f, indent=2)
        print(f"  figures written to {json_path}")
    return 0
