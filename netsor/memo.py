"""One bounded, thread-safe memo for what is derived once per activation (located kinks, pieces, segments,
unit moments, derivatives as activations): the most recently used entries are kept, so that a session that
builds many activations (a sweep over lambdas) holds a bounded number of them, not every one it ever made."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

V = TypeVar("V")

#: Entries each memo keeps (a located activation, its pieces, … are small: a few kB each at most).
DEFAULT_ENTRIES = 2048


class BoundedMemo(Generic[V]):
    """``key → value`` computed once while it stays among the ``entries`` most recently used (least recently
    used evicted first). Values may be None (a property that does not hold)."""

    def __init__(self, entries: int = DEFAULT_ENTRIES) -> None:
        self.entries = entries
        self._data: OrderedDict[Hashable, V] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._data)

    def get(self, key: Hashable, compute: Callable[[], V]) -> V:
        """The value of ``key``, computed by ``compute()`` outside the lock when absent (the first value stored
        wins where two threads compute one key at once)."""
        with self._lock:
            if key in self._data:
                self._data.move_to_end(key)
                return self._data[key]
        value = compute()
        with self._lock:
            if key in self._data:
                self._data.move_to_end(key)
                return self._data[key]
            self._data[key] = value
            if len(self._data) > self.entries:
                self._data.popitem(last=False)
        return value
