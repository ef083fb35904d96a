"""How sure a pass@1 is: Wilson score intervals for one pass rate, Newcombe's interval for a difference of
two.

    from tansaku.envs.intervals import wilson, difference, describe_change
    wilson(3, 16)                            # (0.066, 0.430): 95 % interval of 3 passes out of 16
    describe_change("SFT", (3, 16), "RL", (2, 16))   # '… differ by less than noise …'

A demo on 16 held-out questions moves pass@1 in steps of 1/16; a change of one or two questions is what
greedy decoding after any small weight change does on its own. The interval says so in numbers, and
``describe_change`` in words: the difference is called noise when Newcombe's 95 % interval for it (method 10,
from the two Wilson intervals: good coverage at small n, never outside [−1, 1]) contains 0. The two rates are
treated as independent samples; on the same questions (paired) this is conservative.
"""

from __future__ import annotations

import math

Z95 = 1.959964


def wilson(passes: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval of a pass rate ``passes / n``.

    >>> [round(x, 3) for x in wilson(3, 16)]
    [0.066, 0.43]
    >>> wilson(0, 0)
    (0.0, 1.0)
    """
    if n <= 0:
        return 0.0, 1.0
    p = passes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def difference(a: tuple[int, int], b: tuple[int, int], z: float = Z95) -> tuple[float, float, float]:
    """(b − a, low, high): Newcombe's interval for the difference of two pass rates ``(passes, n)``.

    >>> [round(x, 3) for x in difference((3, 16), (2, 16))]
    [-0.062, -0.321, 0.202]
    """
    (pa, na), (pb, nb) = a, b
    ra, rb = pa / na if na else 0.0, pb / nb if nb else 0.0
    (la, ua), (lb, ub) = wilson(pa, na, z), wilson(pb, nb, z)
    delta = rb - ra
    return (delta, delta - math.sqrt((rb - lb) ** 2 + (ua - ra) ** 2),
            delta + math.sqrt((ub - rb) ** 2 + (ra - la) ** 2))


def passes(rate: float, n: int) -> int:
    """The pass count behind a pass@1 over ``n`` questions (reports store the rate)."""
    return round(rate * n)


def describe_change(label_a: str, a: tuple[int, int], label_b: str, b: tuple[int, int]) -> str:
    """One sentence on whether pass@1 moved from ``a`` to ``b`` by more than noise.

    >>> describe_change("SFT", (3, 16), "RL", (2, 16))
    'SFT → RL: pass@1 0.19 → 0.12 (−0.06, 95 % interval −0.32 … +0.20): the two differ by less than noise (16
    questions)'
    >>> describe_change("base", (0, 16), "SFT", (9, 16)).split(": ")[-1]
    'a real change, larger than noise (16 questions)'
    """
    delta, low, high = difference(a, b)
    rate_a, rate_b = a[0] / a[1] if a[1] else 0.0, b[0] / b[1] if b[1] else 0.0
    verdict = "the two differ by less than noise" if low <= 0 <= high else "a real change, larger than noise"
    size = f"{a[1]} questions" if a[1] == b[1] else f"{a[1]} and {b[1]} questions"
    return (f"{label_a} → {label_b}: pass@1 {rate_a:.2f} → {rate_b:.2f} ({_signed(delta)}, 95 % interval "
            f"{_signed(low)} … {_signed(high)}): {verdict} ({size})")


def _signed(x: float) -> str:
    return f"{'+' if x >= 0 else '−'}{abs(x):.2f}"
