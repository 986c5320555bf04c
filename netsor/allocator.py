"""Keep freed memory for reuse while the pair grid is swept (glibc only; elsewhere a no-op).

A sweep of the pair grid allocates and frees many tile-sized temporaries (a 512 × 512 tile is
2 MB). glibc serves such blocks by ``mmap`` and returns the top of its heap to the system as
soon as more than ``M_TRIM_THRESHOLD`` is free, so most temporaries are fresh pages: the first
write to each page faults. On the depth-10 ReLU NNGP and NTK at N = 1000 (2 cores), those page
faults were ~20 % of the run (``benchmarks/bench_ntk.py``). Within :func:`reused_memory` blocks
up to 64 MiB come from the heap and up to 256 MiB of freed memory stays there; on leaving, the
thresholds are set to glibc's largest dynamic values (32 MiB / 64 MiB), which its own adaptive
rule reaches after freeing blocks of that size: free memory beyond 64 MiB at the top of the heap
goes back to the system at the next ``free``. (Handing everything back on leaving, with
``malloc_trim``, made the next kernel start cold: the NTK benchmark, which alternates NNGP and
NTK calls, ran 20 % slower.)

Set the environment variable ``NETSOR_MALLOPT=0`` to leave the allocator alone.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
_INSIDE = (64 * 2**20, 256 * 2**20)  # mmap threshold, trim threshold during a sweep
_AFTER = (32 * 2**20, 64 * 2**20)  # glibc's DEFAULT_MMAP_THRESHOLD_MAX and twice it


def _glibc() -> Any:
    if os.environ.get("NETSOR_MALLOPT", "1") == "0":
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return libc if hasattr(libc, "mallopt") else None
    except OSError:
        return None


_LIBC = _glibc()
_LOCK = threading.Lock()
_depth = 0


def _set(mmap_threshold: int, trim_threshold: int) -> None:
    _LIBC.mallopt(_M_MMAP_THRESHOLD, mmap_threshold)
    _LIBC.mallopt(_M_TRIM_THRESHOLD, trim_threshold)


@contextmanager
def reused_memory() -> Iterator[None]:
    """Within the block, tile-sized temporaries reuse freed heap memory instead of fresh pages
    (nested and concurrent blocks share one setting; the last one out restores glibc's limits)."""
    global _depth
    if _LIBC is None:
        yield
        return
    with _LOCK:
        _depth += 1
        if _depth == 1:
            _set(*_INSIDE)
    try:
        yield
    finally:
        with _LOCK:
            _depth -= 1
            if _depth == 0:
                _set(*_AFTER)
