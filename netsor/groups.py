"""Connected components of items under a symmetric relation (union-find): the independent groups
of a pair term's atoms, of a cone form's arguments, of an orthant's step forms."""

from __future__ import annotations

from collections.abc import Callable
from itertools import combinations


def connected_groups(n: int, linked: Callable[[int, int], bool]) -> list[int]:
    """Labels 0, 1, … of the connected components of ``n`` items under ``linked(i, j)`` (i < j),
    numbered in order of first appearance (union-find)."""
    parent = list(range(n))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i, j in combinations(range(n), 2):
        if linked(i, j):
            parent[find(i)] = find(j)
    roots = [find(i) for i in range(n)]
    first = {r: k for k, r in enumerate(dict.fromkeys(roots))}
    return [first[r] for r in roots]
