"""Redis' glob matcher (``stringmatchlen``), for patterns clients send:
CONFIG GET's, and any other command that takes a Redis pattern."""

from __future__ import annotations

__all__ = ["stringmatch"]


def stringmatch(pattern: str, string: str, nocase: bool = True) -> bool:
    """Redis ``stringmatchlen`` glob: ``*``, ``?``, ``[a-z]``, ``[^x]``, ``\\``.

    Not fnmatch: fnmatch spells negation ``[!x]`` and has no backslash escape,
    and CONFIG GET patterns are written for Redis.
    """
    if nocase:
        pattern, string = pattern.lower(), string.lower()
    return _match(pattern, 0, string, 0, set())


def _match(p: str, pi: int, s: str, si: int, failed: set[tuple[int, int]]) -> bool:
    # `failed` remembers (pattern, string) positions already known not to
    # match, so "*a*a*a*...b" from a client costs O(len(p) * len(s)), not an
    # exponential backtrack that would stall the node.
    plen, slen = len(p), len(s)
    while pi < plen:
        c = p[pi]
        if c == "*":
            while pi + 1 < plen and p[pi + 1] == "*":
                pi += 1
            if pi + 1 == plen:
                return True
            for k in range(si, slen + 1):
                if (pi + 1, k) in failed:
                    continue
                if _match(p, pi + 1, s, k, failed):
                    return True
                failed.add((pi + 1, k))
            return False
        if si >= slen:
            return False
        if c == "?":
            pass
        elif c == "[":
            pi += 1
            negate = pi < plen and p[pi] == "^"
            if negate:
                pi += 1
            matched = False
            while pi < plen and p[pi] != "]":
                if p[pi] == "\\" and pi + 1 < plen:
                    pi += 1
                    matched |= p[pi] == s[si]
                elif pi + 2 < plen and p[pi + 1] == "-":
                    lo, hi = sorted((p[pi], p[pi + 2]))
                    matched |= lo <= s[si] <= hi
                    pi += 2
                else:
                    matched |= p[pi] == s[si]
                pi += 1
            # An unterminated class still counts as a class, as in Redis.
            if negate:
                matched = not matched
            if not matched:
                return False
        else:
            if c == "\\" and pi + 1 < plen:
                pi += 1
                c = p[pi]
            if c != s[si]:
                return False
        pi += 1
        si += 1
    return si == slen
