"""Does the main job teach the tiny model to search? SFT, then GSPO over seeds, measured on held-out questions.

    python bench/efficacy.py --out runs/efficacy                 # the run reported in the README
    python bench/efficacy.py --out runs/efficacy --seeds         # SFT and its learning curve only
    python bench/efficacy.py --aggregations sum_then_normalize normalize_then_sum   # GDPO normalisation on/off

Cost on 2 cores (measured 2026-11-30, while other jobs shared the cores): a compact SFT row is ~1.1k
tokens and the tiny model trains at ~30 CPU-seconds per 1k tokens in bf16, so SFT (24 steps × 2 rows)
took 29 min shared (~14 min alone); one held-out evaluation of 24 questions 2.3–12 min; GSPO with
768-token multi-turn completions takes minutes per step. The sizes below are what fits; more SFT rows
would help the second hop most (see the failures in ``OUT/eval/sft/trajectories.jsonl``).

The product end to end, each step one toolkit call (what its CLI command runs), all on the fictional
``examples/miniwiki_large.jsonl`` (``examples/make_miniwiki.py``):

1. ``synth build corpus`` + ``synth index build``; ``synth build multihop`` (template questions, the scripted
   agent as solvability policy) — its ``test`` split (questions whose bridge entity is held out) is never
   trained on;
2. ``synth build trajectories`` from the ``train`` split with the scripted teacher in the compact style
   (``teacher_script.py:respond_compact`` / ``rewrite_compact``) for the task ``multihop_qa_compact``
   (short prompt, 2 hits of 80 characters: ``tansaku.envs.tasks.COMPACT_TOOLS_CONFIG``);
3. ``train sft`` on the tiny model, checkpoints along the way; ``train eval`` of each checkpoint on the
   held-out questions gives the SFT learning curve;
4. ``train rl`` (GSPO) from the SFT model, once per seed; ``train eval`` of each on the same held-out rows;
   each run's reward components and tool calls per step are plotted to ``OUT/plots/gspo-seed<N>.png``.

Measured per model: pass@1 and mean task reward (``run_eval``'s report, unchanged), the share of episodes
with at least one valid (parsed, successful) tool call, and the share ending in a ``{{…}}`` answer. The
table — per seed and mean ± sd — is printed and written to ``OUT/efficacy.json``. Reruns reuse finished
datasets, models and eval reports (delete a folder to redo it).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import time
from pathlib import Path

import yaml

from tansaku.demo import EXAMPLES, evaluate_model
from tansaku.envs.search import build_index
from tansaku.pipelines.corpus import build_corpus
from tansaku.pipelines.multihop.build import build_multihop
from tansaku.pipelines.trajectories.build import build_trajectories
from tansaku.trainer.report import plot_learning_curves
from tansaku.trainer.rl import run_rl
from tansaku.trainer.sft import run_sft

TASK = "multihop_qa_compact"
TEACHER = f"scripted:{EXAMPLES / 'teacher_script.py'}:respond_compact"
REWRITER = f"scripted:{EXAMPLES / 'teacher_script.py'}:rewrite_compact"
ANSWER = re.compile(r"\{\{.+?\}\}", re.S)


def log(message: str, start: float) -> None:
    print(f"[{time.time() - start:7.1f}s] {message}", flush=True)


def write_recipe(path: Path, recipe: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(recipe, allow_unicode=True, sort_keys=False), encoding="utf-8")
    return path


def trained(folder: Path) -> bool:
    return (folder / "model.safetensors").exists()


def behaviour(report_dir: Path) -> dict:
    """Shares of episodes with a valid tool call and with a final ``{{…}}`` answer (from trajectories.jsonl)."""
    episodes = [json.loads(line) for line in (report_dir / "trajectories.jsonl").open(encoding="utf-8")]
    valid_call = sum(1 for e in episodes if e["tool_calls"] - e["tool_errors"] > 0)
    finals = [next((m for m in reversed(e["messages"]) if m["role"] == "assistant"), {}) for e in episodes]
    answered = sum(1 for e, m in zip(episodes, finals)
                   if e["stop_reason"] == "answer" and ANSWER.search(m.get("content") or ""))
    n = max(len(episodes), 1)
    return {"tool_call_rate": valid_call / n, "answer_rate": answered / n}


def evaluate(label: str, model_dir: Path, out: Path, args) -> dict:
    """``train eval`` on the held-out split; the report plus the two behaviour shares."""
    report_dir = out / "eval" / label
    if (report_dir / "report.json").exists():
        report = json.loads((report_dir / "report.json").read_text(encoding="utf-8"))
    else:
        report = evaluate_model(TASK, out / "multihop", model_dir, out / "index", split="test", k=args.eval_k,
                                limit=args.eval_rows, out_dir=report_dir, max_tokens=args.max_tokens, seed=0)
    return {"pass@1": report["pass@1"], "reward": report["mean_total_reward"],
            "tool_calls": report["mean_tool_calls"], **behaviour(report_dir)}


def build_data(out: Path, start: float) -> None:
    corpus = build_corpus(EXAMPLES / "miniwiki_large.jsonl", out / "corpus", quiet=True)
    if not (out / "index" / "tansaku_index.json").exists():
        build_index(out / "corpus", out / "index")
    multihop = build_multihop(corpus=out / "corpus", out=out / "multihop", policy=TEACHER, index=out / "index",
                              k=1, m=1, quiet=True)
    trajectories = build_trajectories(out / "multihop", out / "trajectories", TEACHER, str(out / "index"),
                                      translator=REWRITER, general=EXAMPLES / "general_chat.jsonl", ratio=0.1,
                                      n=1, quiet=True, task=TASK)
    log(f"data: corpus {corpus['splits']}; multihop {multihop['splits']}; SFT rows {trajectories['splits']}", start)


def sft(out: Path, args, start: float) -> Path:
    sft_dir = out / "sft"
    recipe = write_recipe(out / "recipes" / "sft.yaml", {
        "kind": "sft", "model": "tiny", "output_dir": str(sft_dir),
        "data": [{"path": str(out / "trajectories"), "ratio": 1.0}],
        # compact rows are 1.2–1.35k tokens (≈ 530 of them the system prompt + tool schemas)
        "max_length": 1536, "learning_rate": args.sft_lr, "lr_scheduler_type": "constant",
        "per_device_train_batch_size": args.sft_batch, "max_steps": args.sft_steps, "bf16": True,
        "weights_dtype": "bfloat16",  # pure bf16: ~2x faster here, and lr 3e-4 is far above bf16 resolution
        "use_cpu": True, "seed": 42, "logging_steps": 1, "save_steps": max(1, args.sft_steps // args.curve_points),
        "report_to": [],
    })
    if not trained(sft_dir):
        result = run_sft(recipe)
        log(f"train sft: {result['global_step']} steps, loss {result['training_loss']:.3f}", start)
    return sft_dir


def gspo(out: Path, sft_dir: Path, seed: int, args, start: float, aggregation: str = "sum_then_normalize") -> Path:
    name = f"gspo-seed{seed}" + ("" if aggregation == "sum_then_normalize" else f"-{aggregation}")
    rl_dir = out / name
    recipe = write_recipe(out / "recipes" / f"{name}.yaml", {
        "kind": "rl", "model": str(sft_dir), "output_dir": str(rl_dir),
        "tasks": [{"name": TASK, "data": str(out / "multihop"), "index": str(out / "index")}],
        "algorithm": "gspo", "num_generations": args.rl_generations, "prompts_per_step": args.rl_prompts,
        # one completion per micro-batch: a 1.3k-token row's fp32 logits over 49k tokens are 250 MB each
        "per_device_train_batch_size": 1,
        "beta": 0.0, "max_completion_length": args.rl_completion, "max_tool_calling_iterations": 3,
        "temperature": args.rl_temperature, "learning_rate": args.rl_lr, "max_steps": args.rl_steps, "bf16": True,
        "use_cpu": True, "seed": seed, "save_steps": 1000, "logging_steps": 1, "log_completions": True,
        "report_to": [], "reward_aggregation": aggregation,
    })
    if not trained(rl_dir):
        result = run_rl(recipe, skip_readiness=True)  # readiness is measured below, on held-out rows
        log(f"train rl {name}: {result['global_step']} steps", start)
    (out / "plots").mkdir(exist_ok=True)
    plot_learning_curves(rl_dir, out / "plots" / f"{name}.png")
    return rl_dir


def mean_sd(values: list[float]) -> str:
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.mean(values):.3f} ± {sd:.3f}"


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("runs/efficacy"))
    parser.add_argument("--sft-steps", type=int, default=24)
    parser.add_argument("--sft-batch", type=int, default=2)
    parser.add_argument("--sft-lr", type=float, default=3e-4)
    parser.add_argument("--curve-points", type=int, default=2, help="SFT checkpoints evaluated for the curve")
    parser.add_argument("--rl-steps", type=int, default=2)
    # the SFT model is near-deterministic (entropy ~0.006): most groups of one prompt have zero reward variance
    parser.add_argument("--rl-prompts", type=int, default=4)
    parser.add_argument("--rl-generations", type=int, default=4)
    # A compact episode (3 turns + 2 tool results) measures 630–700 tokens after the prompt.
    parser.add_argument("--rl-completion", type=int, default=768, help="tokens of the whole multi-turn completion")
    parser.add_argument("--rl-lr", type=float, default=3e-5)
    parser.add_argument("--rl-temperature", type=float, default=0.9, help="sampling temperature of GSPO rollouts")
    parser.add_argument("--seeds", type=int, nargs="*", default=[0, 1, 2], help="GSPO seeds (none: SFT only)")
    # Per-reward normalisation (GDPO) against TRL's default, each GSPO seed once per way (the recipe key).
    parser.add_argument("--aggregations", nargs="+", default=["sum_then_normalize"],
                        choices=["sum_then_normalize", "normalize_then_sum"], help="reward_aggregation values to run")
    parser.add_argument("--eval-rows", type=int, default=48, help="held-out questions per evaluation")
    parser.add_argument("--eval-k", type=int, default=1)
    # The hop turn (a sentence naming both entities + a tool call) needs ~100 tokens: 96 cut 5 of 24 episodes.
    parser.add_argument("--max-tokens", type=int, default=160, help="new tokens per turn in evaluation")
    args = parser.parse_args(argv)
    out, start = args.out, time.time()
    out.mkdir(parents=True, exist_ok=True)

    build_data(out, start)
    sft_dir = sft(out, args, start)

    sft_result = evaluate("sft", sft_dir, out, args)
    log(f"eval sft: {sft_result}", start)

    runs = {}  # (aggregation, seed) → held-out result
    for aggregation in args.aggregations:
        for seed in args.seeds:
            rl_dir = gspo(out, sft_dir, seed, args, start, aggregation)
            runs[aggregation, seed] = evaluate(rl_dir.name, rl_dir, out, args)
            log(f"eval {rl_dir.name}: {runs[aggregation, seed]}", start)

    # The SFT learning curve: the saved checkpoints (evaluated last: the table above needs only the final model).
    curve = {args.sft_steps: sft_result}
    for checkpoint in sorted(sft_dir.glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1])):
        step = int(checkpoint.name.split("-")[1])
        if step < args.sft_steps:
            curve[step] = evaluate(f"sft-step{step}", checkpoint, out, args)
            log(f"eval sft step {step}: {curve[step]}", start)

    metrics = ("pass@1", "reward", "tool_call_rate", "answer_rate", "tool_calls")
    lines = ["| model | " + " | ".join(metrics) + " |", "|---" * (len(metrics) + 1) + "|"]
    lines.append("| SFT | " + " | ".join(f"{sft_result[m]:.3f}" for m in metrics) + " |")
    for aggregation in args.aggregations:
        label = "GSPO" if aggregation == "sum_then_normalize" else f"GSPO {aggregation}"
        results = [runs[aggregation, seed] for seed in args.seeds]
        for seed, result in zip(args.seeds, results):
            lines.append(f"| {label} seed {seed} | " + " | ".join(f"{result[m]:.3f}" for m in metrics) + " |")
        if results:
            lines.append(f"| {label} mean ± sd | " + " | ".join(mean_sd([r[m] for r in results]) for m in metrics)
                         + " |")
    lines += ["", "SFT learning curve (held-out): step → pass@1 / tool-call rate / answer rate"]
    lines += [f"  {s}: {r['pass@1']:.3f} / {r['tool_call_rate']:.3f} / {r['answer_rate']:.3f}"
              for s, r in sorted(curve.items())]
    table = "\n".join(lines)
    print(table)
    result = {"args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
              "sft": sft_result, "sft_curve": curve, "seconds": round(time.time() - start, 1), "table": table,
              "gspo": {f"{aggregation}/seed{seed}": r for (aggregation, seed), r in runs.items()},
              "plots": sorted(str(p) for p in (out / "plots").glob("gspo-*.png"))}
    (out / "efficacy.json").write_text(json.dumps(result, ensure_ascii=False, indent=2), encoding="utf-8")
    return result


if __name__ == "__main__":
    main()
