"""Largest-remainder apportionment: split a whole number in proportion to weights so that the
parts are whole and sum to it exactly.

The context meter scales its estimated categories to the provider's measured total with it: a
meter whose categories do not add up to its `used` figure would show a gap or an overflow.
Integer arithmetic only, so the same inputs always give the same parts (no float rounding).
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["largest_remainder"]


def largest_remainder(weights: Sequence[int], total: int) -> tuple[int, ...]:
    """`total` split in proportion to `weights` (Hamilton's method).

    Each part is the floor of its exact quota; the seats left over go to the largest
    remainders, ties to the earlier weight. A zero weight gets zero unless every weight is zero,
    in which case the last part takes the whole total (the meter's last category is the
    conversation, where unexplained tokens most likely sit).
    """
    if total < 0:
        raise ValueError("total must not be negative")
    if any(w < 0 for w in weights):
        raise ValueError("weights must not be negative")
    if not weights:
        if total:
            raise ValueError("a positive total needs at least one weight")
        return ()
    whole = sum(weights)
    if whole == 0:
        return (0,) * (len(weights) - 1) + (total,)
    parts = [w * total // whole for w in weights]
    remainders = [w * total % whole for w in weights]
    left = total - sum(parts)
    for i in sorted(range(len(weights)), key=lambda i: (-remainders[i], i))[:left]:
        parts[i] += 1
    return tuple(parts)
