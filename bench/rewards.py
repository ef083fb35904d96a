"""Do the reward functions run in linear time on hostile text? A table per reward and input shape.

    python bench/rewards.py            # 1 MB and 250 KB of each shape; ~1 min on 2 cores

For every reward function in ``tansaku.envs.rewards`` and every hostile shape (brace storms, unclosed tool
calls, think-tag storms, long Han/kana runs, random mixed text), it times one completion of 1 MB and one of
250 KB and prints:

* ``ms@1MB`` — the target is < 50 ms (issue 15);
* ``×peer`` — against a linear peer measured in the same run on the same text (one pass of a linear regex,
  ``re.findall(r"\\{\\{([^{}]*)\\}\\}")``, plus ``str.encode``), so machine load cancels out;
* ``scaling`` — ms@1MB / ms@250KB: 4 is linear, 16 would be quadratic.

The tests check that every reward scores these inputs and never hangs (``tests/test_rewards_robust.py``);
how fast is measured here, never asserted in a test.
"""

from __future__ import annotations

import random
import re
import statistics
import time

from tansaku.core.llm.base import ChatResult
from tansaku.envs.rewards import (
    answer_reward,
    format_reward,
    make_format_reward,
    mcq_reward,
    tool_call_reward,
    zh_mix_penalty,
)
from tansaku.envs.rubric_reward import make_rubric_reward

PEER = re.compile(r"\{\{([^{}]*)\}\}")


class OneVerdictJudge:
    """A judge that answers every rubric with full marks (the reward's own parsing is what is timed)."""

    def chat(self, requests):
        return [ChatResult(content='{"scores": [1]}') for _ in requests]


REWARDS = {
    "tool_call_reward": tool_call_reward,
    "format_reward": format_reward,
    "report_format_reward": make_format_reward(answer_style="report"),
    "answer_reward": lambda c: answer_reward(c, answer=["x"], aliases=[["y"]]),
    "mcq_reward": lambda c: mcq_reward(c, answer_index=[1], choices=[["3", "1", "2", "4"]]),
    "zh_mix_penalty": zh_mix_penalty,
    "rubric_reward": lambda c: make_rubric_reward(OneVerdictJudge())(c, rubric=[["基準"]], instruction=["x"]),
}


def random_text(n: int, seed: int = 15) -> str:
    rng = random.Random(seed)
    pools = ["abc {}<>/\n\"':", "あいうえおカキクケコ", "的是我们这個東京都漢字経駅", "。、！？「」", "{{}}<think></think>"]
    return "".join(rng.choice(rng.choice(pools)) for _ in range(n))


def shapes(n: int) -> dict[str, str]:
    return {"open_braces": "{" * n, "double_open": "{{" * (n // 2), "close_open": "}}{{" * (n // 4),
            "random": random_text(n), "one_huge_answer": "{{" + random_text(n) + "}}",
            "han_kana_runs": "あ漢" * (n // 2), "unclosed_tool_calls": "<tool_call>[" * (n // 12),
            "think_storm": "<think>" * (n // 7)}


def best_ms(fn, arg, repeat: int = 3, batch: bool = False) -> float:
    """Best of ``repeat`` runs of ``fn(arg)`` (``fn([arg])`` with ``batch``: a reward scores a list)."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn([arg] if batch else arg)
        times.append(time.perf_counter() - start)
    return min(times) * 1000


def peer(text: str) -> None:
    PEER.findall(text)
    text.encode("utf-8", "replace")


def main() -> None:
    big, small = shapes(1_000_000), shapes(250_000)
    rows = []
    for name, fn in REWARDS.items():
        fn(["{{x}}"])  # warm up lazily built tables (zh_detect) outside the measurement
        for shape, text in big.items():
            ms_big = best_ms(fn, text, batch=True)
            ms_small = best_ms(fn, small[shape], batch=True)
            rows.append((name, shape, ms_big, ms_big / max(best_ms(peer, text), 1e-3), ms_big / max(ms_small, 1e-3)))
    print(f"{'reward':22} {'shape':20} {'ms@1MB':>8} {'×peer':>7} {'scaling':>8}")
    for name, shape, ms, vs_peer, scaling in rows:
        print(f"{name:22} {shape:20} {ms:8.1f} {vs_peer:7.1f} {scaling:8.1f}")
    worst = max(rows, key=lambda r: r[2])
    print(f"\nworst: {worst[0]} on {worst[1]}: {worst[2]:.1f} ms; median {statistics.median(r[2] for r in rows):.1f} ms; "
          f"max scaling {max(r[4] for r in rows):.1f} (4 = linear); over 50 ms: {sum(r[2] > 50 for r in rows)} of {len(rows)}")


if __name__ == "__main__":
    main()
