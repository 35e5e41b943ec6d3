"""What hypothesis strategies of shapes share: a size split into the
factors that reshapes may regroup."""

from __future__ import annotations


def prime_factors(n: int) -> list[int]:
    """The prime factors of ``n`` (>= 1), smallest first, with repeats:
    every shape of ``n`` elements is a grouping of them."""
    found, p = [], 2
    while n > 1:
        while n % p == 0:
            found.append(p)
            n //= p
        p += 1
    return found
