# compiled: mypyc (setup.py builds each module whose first line this is)
"""Draws from the node's injected ``random.Random``: the very values its own
``randint``, ``choice`` and ``sample`` give from the same state (CPython's
random.py, for a Random whose ``getrandbits`` is its own, as the process's
and the simulator's are), without running their interpreted code: a
replicated ACKJOB drew its GC jitter with ``randint`` and an ADDJOB on more
nodes than copies drew its peers with ``sample``, several thousand
instructions each, more than the rest of their work on the node."""

from __future__ import annotations

from typing import Any


def below(rng: Any, n: int) -> int:
    """``rng.randrange(n)`` (random.py's ``_randbelow_with_getrandbits``), n > 0."""
    k = n.bit_length()
    r: int = rng.getrandbits(k)
    while r >= n:
        r = rng.getrandbits(k)
    return r


def randint(rng: Any, a: int, b: int) -> int:
    """``rng.randint(a, b)``."""
    return a + below(rng, b - a + 1)


def choice(rng: Any, seq: Any) -> Any:
    """``rng.choice(seq)`` of a non-empty sequence."""
    return seq[below(rng, len(seq))]


def sample(rng: Any, population: Any, k: int) -> list:
    """``rng.sample(population, k)``: the small populations a cluster has
    (random.py's pool method, up to 21 items and 5 draws); anything else is
    left to ``rng.sample``."""
    n = len(population)
    if k > 5 or n > 21 or not 0 <= k <= n:
        return rng.sample(population, k)
    pool = list(population)
    result: list = [None] * k
    for i in range(k):
        j = below(rng, n - i)
        result[i] = pool[j]
        pool[j] = pool[n - i - 1]
    return result
