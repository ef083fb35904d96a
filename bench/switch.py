"""The seed's system-prompt switch, reproduced small: does general chat without a system prompt, mixed into
agentic SFT, keep the model's general behaviour?

    python bench/switch.py --out runs/switch

Two SFT recipes from the same tiny base model, same seed, same agentic rows (compact multihop trajectories,
each with the agentic system prompt):

* ``agentic-only``: the agentic rows alone;
* ``switch``: the same agentic rows plus general chat rows that carry **no** system prompt, so the system
  prompt is the switch between "search agent" and "the model it was before".

General behaviour is measured with no system prompt on held-out general prompts, as the likelihood the model
gives to the base model's own greedy answers ("what the model used to say"; ``tansaku.envs.retention``):
retention = exp(mean token log-prob after − before), 1.0 = unchanged. The general prompts
(``examples/general_prompts.jsonl``, 85 short English and Japanese requests) are split by id
(``tansaku.core.heldout``, share 0.4): the switch recipe trains on the base's answers to the train prompts
only. Each SFT model is also evaluated on held-out multihop questions (``multihop_qa_compact``), so the table
shows what the switch costs the agentic skill.

The switch run sees the same 24 agentic rows plus 24 general rows, so at 2 rows a step it takes 24 optimizer
steps to the agentic-only run's 12: its pass@1 column is not a like-for-like measure of agentic skill (more
steps at a constant learning rate); retention is what this bench measures.

Cost on 2 cores: 48 min measured (2026-11-30, sharing the cores with another benchmark): two SFT runs over
~1.2k-token agentic rows, the base's self-answers (~2.5 min), three likelihood passes (seconds) and two
held-out evaluations of 24 questions. Reruns reuse what is finished (delete a folder to redo it).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import yaml

from tansaku.core.context import BuildContext
from tansaku.core.heldout import heldout_split
from tansaku.core.jsonl import iter_jsonl
from tansaku.core.tiny_model import tiny_model_dir
from tansaku.demo import EXAMPLES, evaluate_model
from tansaku.envs.retention import answer_loglik, retention, self_answers
from tansaku.envs.search import build_index
from tansaku.pipelines.corpus.build import build_corpus
from tansaku.pipelines.corpus.config import CorpusConfig
from tansaku.pipelines.multihop.build import build_multihop
from tansaku.pipelines.multihop.config import MultihopConfig
from tansaku.pipelines.trajectories.build import build_trajectories
from tansaku.pipelines.trajectories.config import TrajectoriesConfig
from tansaku.trainer.sft import run_sft

TASK = "multihop_qa_compact"
TEACHER = f"scripted:{EXAMPLES / 'teacher_script.py'}:respond_compact"
REWRITER = f"scripted:{EXAMPLES / 'teacher_script.py'}:rewrite_compact"
RECIPES = ("agentic-only", "switch")


def log(message: str, start: float) -> None:
    print(f"[{time.time() - start:7.1f}s] {message}", flush=True)


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    with path.open("w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    return path


def general_sets(out: Path, base: str, args, start: float) -> tuple[Path, list[dict]]:
    """The base model's own answers to the general prompts: train rows as chat (a file), test rows to score."""
    answers_path = out / "general_self_answers.jsonl"
    if answers_path.exists():
        answers = [row for _, row in iter_jsonl(answers_path)]
    else:
        prompts = [{**row, "answer": ""} for _, row in iter_jsonl(EXAMPLES / "general_prompts.jsonl")]
        answers = self_answers(base, prompts, max_new_tokens=args.answer_tokens, batch_size=8)
        write_jsonl(answers_path, [{"id": a["id"], "prompt": a["prompt"], "answer": a["answer"]} for a in answers])
        log(f"base self-answers: {len(answers)} prompts", start)
    split = {a["id"]: heldout_split(a["id"], args.general_heldout, seed=0) for a in answers}
    train = [{"id": a["id"], "messages": [*a["prompt"], {"role": "assistant", "content": a["answer"]}]}
             if isinstance(a["prompt"], list) else
             {"id": a["id"], "messages": [{"role": "user", "content": a["prompt"]},
                                          {"role": "assistant", "content": a["answer"]}]}
             for a in answers if split[a["id"]] == "train"]
    test = [a for a in answers if split[a["id"]] == "test"]
    return write_jsonl(out / "general_train.jsonl", train), test


def agentic_set(out: Path) -> Path:
    """Compact multihop trajectories (train split only) with the agentic system prompt and no general rows."""
    build_corpus(CorpusConfig(input=EXAMPLES / "miniwiki_large.jsonl"), out / "corpus", BuildContext(quiet=True))
    if not (out / "index" / "tansaku_index.json").exists():
        build_index(out / "corpus", out / "index")
    build_multihop(MultihopConfig(corpus=out / "corpus", policy=TEACHER, index=out / "index", k=1, m=1), out / "multihop", BuildContext(quiet=True))
    build_trajectories(TrajectoriesConfig(dataset=out / "multihop", teacher=TEACHER, index=str(out / "index"),
                                          translator=REWRITER, general=None, n=1, task=TASK),
                       out / "trajectories", BuildContext(quiet=True))
    return out / "trajectories"


def sft(name: str, out: Path, agentic: Path, general: Path, n_general: int, args, start: float) -> Path:
    model_dir = out / name
    data = [{"path": str(agentic), "ratio": float(args.agentic_rows)}]
    rows = args.agentic_rows
    if name == "switch":  # the same agentic rows, plus general rows with no system prompt
        general_rows = min(args.general_rows, n_general)
        data.append({"path": str(general), "ratio": float(general_rows)})
        rows += general_rows
    recipe = out / "recipes" / f"{name}.yaml"
    recipe.parent.mkdir(parents=True, exist_ok=True)
    recipe.write_text(yaml.safe_dump({
        "model_name_or_path": "tiny", "output_dir": str(model_dir), "data": data, "mix_size": rows,
        "max_length": 1536, "assistant_only_loss": True, "shuffle_dataset": True, "learning_rate": args.lr,
        "lr_scheduler_type": "constant", "per_device_train_batch_size": 2, "num_train_epochs": 1, "bf16": True,
        "gradient_checkpointing": False, "dtype": "bfloat16",
        "use_cpu": True, "seed": 42, "logging_steps": 1, "save_steps": 10_000, "report_to": "none",
    }, allow_unicode=True, sort_keys=False), encoding="utf-8")
    if not (model_dir / "model.safetensors").exists():
        result = run_sft(recipe)
        log(f"train sft {name}: {rows} rows, {result['global_step']} steps, loss {result['training_loss']:.3f}", start)
    return model_dir


def agentic_eval(name: str, model_dir: Path, out: Path, args) -> dict:
    report_path = out / "eval" / name / "report.json"
    if report_path.exists():
        return json.loads(report_path.read_text(encoding="utf-8"))
    return evaluate_model(TASK, out / "multihop", model_dir, out / "index", split="test", k=1,
                          limit=args.eval_rows, out_dir=report_path.parent, max_tokens=160, seed=0)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("runs/switch"))
    parser.add_argument("--agentic-rows", type=int, default=24, help="agentic rows in both recipes")
    parser.add_argument("--general-rows", type=int, default=24, help="general rows added by the switch recipe")
    parser.add_argument("--general-heldout", type=float, default=0.4, help="share of general prompts held out")
    parser.add_argument("--answer-tokens", type=int, default=96, help="max new tokens of the base's self-answers")
    parser.add_argument("--lr", type=float, default=3e-4)
    parser.add_argument("--eval-rows", type=int, default=24, help="held-out multihop questions (0: skip)")
    args = parser.parse_args(argv)
    out, start = args.out, time.time()
    out.mkdir(parents=True, exist_ok=True)

    base = str(tiny_model_dir())
    general_train, general_test = general_sets(out, base, args, start)
    n_general = sum(1 for _ in iter_jsonl(general_train))  # (line number, row) pairs
    agentic = agentic_set(out)
    log(f"data: {n_general} general train rows, {len(general_test)} held-out general prompts", start)

    before = answer_loglik(base, general_test)
    results = {"base": {"mean_token_logprob": before["mean_token_logprob"], "retention": 1.0}}
    for name in RECIPES:
        model_dir = sft(name, out, agentic, general_train, n_general, args, start)
        after = answer_loglik(str(model_dir), general_test)
        results[name] = {"mean_token_logprob": after["mean_token_logprob"], "retention": retention(before, after)}
        if args.eval_rows:
            report = agentic_eval(name, model_dir, out, args)
            results[name].update({"pass@1": report["pass@1"], "tool_calls": report["mean_tool_calls"]})
        log(f"{name}: {results[name]}", start)

    lines = ["| model | general mean token log-prob (no system prompt) | retention vs base | "
             "held-out multihop pass@1 | tool calls / episode |", "|---|---|---|---|---|"]
    for name, r in results.items():
        agentic = (f"{r['pass@1']:.3f} | {r['tool_calls']:.2f}" if "pass@1" in r else "– | –")  # base: not run
        lines.append(f"| {name} | {r['mean_token_logprob']:.3f} | {r['retention']:.3f} | {agentic} |")
    table = "\n".join(lines)
    print(table)
    summary = {"args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
               "general_heldout_prompts": len(general_test), "results": results, "table": table,
               "seconds": round(time.time() - start, 1)}
    (out / "switch.json").write_text(json.dumps(summary, ensure_ascii=False, indent=2), encoding="utf-8")
    return summary


if __name__ == "__main__":
    main()
