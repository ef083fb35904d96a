"""`train eval` on 2 cores against a plain ``model.generate`` loop over the same requests, in one run.

    python bench/eval_speed.py --work runs/efficacy --model runs/efficacy/sft-seed0/checkpoint-16 --rows 96

tansaku's side is what ``bench/efficacy.py`` and ``train eval`` run: ``run_eval`` of the compact multi-hop task
on the first ``--rows`` held-out questions, greedy, through the transformers backend in bf16 (batch 16), tools
executed, every turn parsed and scored. The peer replays every request that evaluation made — each turn's
whole context, as the chat template renders it with the episode's tool schemas — through a bare loop of
``tokenizer`` + ``model.generate`` (same dtype, batch, greedy, per-turn token budget), turn by turn as the
episodes ran: nothing but generation. The ratio peer time / tansaku time is the share of tansaku's evaluation
spent generating what a hand-written loop would generate. Writes ``bench/results/eval_speed.md``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from tansaku.core.llm import from_spec
from tansaku.core.parsing import to_hf
from tansaku.envs.environments import make_environment_factory, tool_schemas
from tansaku.envs.evaluate import run_eval
from tansaku.envs.tasks import TASKS

RESULTS = Path(__file__).resolve().parent / "results"
TASK = "multihop_qa_compact"


def turn_requests(trajectories: list[dict]) -> list[list[tuple[list[dict], list[dict]]]]:
    """Per turn, the (messages before the assistant turn, tools) of every episode that generated in that turn."""
    turns: list[list] = []
    for t in trajectories:
        messages = t["messages"]
        turn = 0
        for i, message in enumerate(messages):
            if i >= t["n_prompt_messages"] and message["role"] == "assistant":
                while len(turns) <= turn:
                    turns.append([])
                turns[turn].append((messages[:i], t["tools"]))
                turn += 1
    return turns


def plain_loop(model_dir: str, turns, batch_size: int, max_tokens: int) -> tuple[float, int]:
    """Seconds and generated tokens of a bare generate loop over ``turns`` (model loading not counted)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    tokenizer.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16).eval()
    generated, start = 0, time.perf_counter()
    for requests in turns:
        for b in range(0, len(requests), batch_size):
            texts = [tokenizer.apply_chat_template(to_hf(m), tools=tools, add_generation_prompt=True, tokenize=False)
                     for m, tools in requests[b:b + batch_size]]
            enc = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
            with torch.inference_mode():
                out = model.generate(**enc, max_new_tokens=max_tokens, do_sample=False, temperature=None,
                                     top_p=None, top_k=None, pad_token_id=tokenizer.pad_token_id)
            new = out[:, enc["input_ids"].shape[1]:]
            generated += int((new != tokenizer.pad_token_id).sum())
    return time.perf_counter() - start, generated


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=Path("runs/efficacy"), help="bench/efficacy.py's work folder")
    parser.add_argument("--model", required=True, help="a model folder (an SFT start)")
    parser.add_argument("--rows", type=int, default=96)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--max-tokens", type=int, default=160)
    parser.add_argument("--results", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    out = args.work / "eval-speed"

    client = from_spec(f"transformers:{args.model}", dtype="bfloat16", batch_size=args.batch_size, cache=False)
    client._load()  # loading is not evaluation: both sides start with the weights in memory
    start = time.perf_counter()
    report = run_eval(TASK, args.work / "multihop", client, args.work / "index", split="test", k=1, limit=args.rows,
                      out_dir=out, max_tokens=args.max_tokens, temperature=0.0, seed=0)
    tansaku_seconds = time.perf_counter() - start
    client.close()
    trajectories = [json.loads(line) for line in (out / "trajectories.jsonl").open(encoding="utf-8")]
    schemas = {}  # the schemas each episode was shown: its description variant's
    for t in trajectories:
        variant = t["tool_variant"]
        if variant not in schemas:
            schemas[variant] = tool_schemas(make_environment_factory(TASKS[TASK], args.work / "index", variant)())
        t["tools"] = schemas[variant]
    turns = turn_requests(trajectories)
    peer_seconds, peer_tokens = plain_loop(args.model, turns, args.batch_size, args.max_tokens)
    tokens = sum(t["generated_tokens"] for t in trajectories)
    requests = sum(len(r) for r in turns)
    lines = ["| | wall s | requests | generated tokens | tokens/s |", "|---|---|---|---|---|",
             f"| tansaku `train eval` ({report['questions']} questions, greedy) | {tansaku_seconds:.1f} | {requests} | "
             f"{tokens} | {tokens / tansaku_seconds:.1f} |",
             f"| plain `model.generate` loop, same requests | {peer_seconds:.1f} | {requests} | {peer_tokens} | "
             f"{peer_tokens / peer_seconds:.1f} |",
             f"| peer time / tansaku time | {peer_seconds / tansaku_seconds:.2f} | | | |"]
    text = "\n".join(lines)
    print(text)
    args.results.mkdir(parents=True, exist_ok=True)
    (args.results / "eval_speed.md").write_text(f"# train eval vs a plain generate loop (model {args.model})\n\n"
                                                f"{text}\n\npass@1 {report['pass@1']:.3f}\n", encoding="utf-8")
    return text


if __name__ == "__main__":
    main()
