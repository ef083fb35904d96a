"""Decode steps with transformers' DynamicCache against tansaku's in-place GrowingLayer cache, same model, same
prompts, greedy, both alternating in one run; printed as a table.

    python bench/kv_cache.py                      # the tiny model in bf16, 16 rows × 800 prompt tokens, 48 new
    python bench/kv_cache.py --rows 8 --prompt 400 --new 96 --dtype float32

Prefill and decode forwards are timed apart (a wrapper around the backbone's forward), so the table shows the
decode step the cache changes. Both sides must give the same tokens; the bench stops if they do not.
Writes ``bench/results/kv_cache.md``.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM

from tansaku.core.llm.growing_cache import growing_cache
from tansaku.core.tiny_model import tiny_model_dir

RESULTS = Path(__file__).resolve().parent / "results"


def timed_backbone(model, seconds: dict):
    forward = model.model.forward

    @functools.wraps(forward)
    def timed(*args, **kwargs):
        width = kwargs["input_ids"].shape[1] if kwargs.get("input_ids") is not None else 1
        start = time.perf_counter()
        try:
            return forward(*args, **kwargs)
        finally:
            seconds["prefill" if width > 1 else "decode"] += time.perf_counter() - start

    model.model.forward = timed


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=16)
    parser.add_argument("--prompt", type=int, default=800)
    parser.add_argument("--new", type=int, default=48)
    parser.add_argument("--repeats", type=int, default=4)
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--results", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir(), dtype=getattr(torch, args.dtype)).eval()
    seconds = {"prefill": 0.0, "decode": 0.0}
    timed_backbone(model, seconds)
    ids = torch.randint(100, 40000, (args.rows, args.prompt))
    mask = torch.ones_like(ids)
    for i in range(args.rows):  # left padding of different widths, as in a batch of episodes
        mask[i, :(i * 7) % 60] = 0
    caches = {"DynamicCache": lambda: None, "GrowingLayer": lambda: growing_cache(model.config)}
    decode: dict[str, list[float]] = {name: [] for name in caches}
    outputs = {}
    for _ in range(args.repeats):
        for name, make in caches.items():
            seconds.update(prefill=0.0, decode=0.0)
            extra = {} if make() is None else {"cache": make()}
            with torch.no_grad():
                outputs[name] = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=args.new,
                                               min_new_tokens=args.new, do_sample=False, pad_token_id=0, **extra)
            decode[name].append(seconds["decode"] / (args.new - 1))
    if not torch.equal(outputs["DynamicCache"], outputs["GrowingLayer"]):
        raise SystemExit("the two caches gave different tokens")
    base = statistics.median(decode["DynamicCache"])
    lines = ["| cache | decode step ms (median) | all repeats ms | ratio |", "|---|---|---|---|"]
    for name, values in decode.items():
        lines.append(f"| {name} | {statistics.median(values) * 1e3:.1f} | "
                     f"{', '.join(f'{v * 1e3:.0f}' for v in values)} | {statistics.median(values) / base:.2f} |")
    text = (f"{args.rows} rows × {args.prompt} prompt tokens, {args.new} new tokens, {args.dtype}, greedy, "
            f"{args.repeats} alternating repeats; same tokens from both.\n\n" + "\n".join(lines))
    print(text)
    args.results.mkdir(parents=True, exist_ok=True)
    (args.results / "kv_cache.md").write_text(f"# Decode with an in-place KV cache\n\n{text}\n", encoding="utf-8")
    return text


if __name__ == "__main__":
    main()
