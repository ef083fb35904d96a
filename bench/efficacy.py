"""Does RL beat SFT on held-out questions? SFT over seeds, then GSPO (and GRPO) from each seed's chosen start.

    nohup python bench/efficacy.py --work runs/efficacy > runs/efficacy.log 2>&1 &   # hours; resumable
    python bench/efficacy.py --table-only                                            # the table from the results

The product end to end on the fictional ``examples/miniwiki_large.jsonl``, each step one toolkit call:

1. ``synth build corpus`` + ``synth index build`` + ``synth build multihop --rl-share 0.35`` (template
   questions, the scripted agent as solvability policy): bridges split three ways, ``train`` (SFT
   trajectories), ``rl`` (RL prompts and the checkpoint-selection slice) and ``test`` (held out, evaluated only);
2. ``synth build trajectories`` from ``train`` with the scripted compact teacher (task ``multihop_qa_compact``);
3. per seed s: ``train sft`` (seed s, checkpoints along the way) → ``train select`` on the first
   ``--select-rows`` questions of ``rl`` (greedy pass@1 and token entropy per checkpoint; the RL start is the best
   by measurement, not the last) → ``train eval`` of that start on the ``test`` split: the **SFT** row of seed s;
4. per seed s: ``train rl`` GSPO from SFT seed s's start, prompts banded by that start (recipe ``difficulty:``,
   K samples per ``rl`` candidate, kept when 0 < pass rate < 1) → ``train eval`` on ``test``: the **GSPO** row;
   GRPO likewise for ``--grpo-seeds``.

Every model is evaluated by one protocol: the first ``--eval-rows`` questions of ``test``, greedy, pass@1.
Each (method, seed) writes ``bench/results/efficacy/<method>-seed<s>.json`` when it finishes (result, the eval
report's numbers, the selection table or the band counts, per-step curves) and a PNG of its reward
components, zero-variance share and entropy under ``plots/``; a rerun skips finished ones, so the experiment
spans sittings. Work folders (datasets, models) are in ``--work`` and reused. The table (per seed, mean ± sd)
is printed and written to ``bench/results/efficacy/README.md`` from whatever result files exist.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import yaml

from tansaku.core.context import BuildContext
from tansaku.core.hardware import native_bf16
from tansaku.demo import EXAMPLES, evaluate_model
from tansaku.envs.search import build_index
from tansaku.pipelines.corpus import build_corpus
from tansaku.pipelines.corpus_config import CorpusConfig
from tansaku.pipelines.multihop.build import build_multihop
from tansaku.pipelines.multihop.config import MultihopConfig
from tansaku.pipelines.trajectories.build import build_trajectories
from tansaku.pipelines.trajectories.config import TrajectoriesConfig
from tansaku.trainer.report import load_log_history, plot_learning_curves
from tansaku.trainer.rl import run_rl
from tansaku.trainer.select import select_checkpoint, selection_table
from tansaku.trainer.sft import run_sft

TASK = "multihop_qa_compact"
TEACHER = f"scripted:{EXAMPLES / 'teacher_script.py'}:respond_compact"
REWRITER = f"scripted:{EXAMPLES / 'teacher_script.py'}:rewrite_compact"
RESULTS = Path(__file__).resolve().parent / "results" / "efficacy"
METRICS = ("pass@1", "reward", "tool_calls", "entropy")
START = time.time()
# The held-out protocol is fixed for the whole experiment: its first models were evaluated before the
# transformers backend reused the system turn's KV cache, and in bf16 that reuse changes rounding (a token
# here and there), so every model of this experiment is evaluated without it, nor the last turn's caches.
EVAL_CLIENT = {"prefix_cache": False, "turn_cache": False}
# ... and in bf16, trained and evaluated (its first models were made on CPUs with native bf16, ~2x fp32 there).
DTYPE = "bfloat16"
# The two methods compared, as GRPOConfig keys: GSPO's sequence-level ratio with the paper's tight clip, and
# token-level GRPO with DAPO's asymmetric clip and loss.
ALGORITHMS = {
    "gspo": {"importance_sampling_level": "sequence", "epsilon": 3e-4, "epsilon_high": 4e-4, "loss_type": "grpo"},
    "grpo": {"importance_sampling_level": "token", "epsilon": 0.2, "epsilon_high": 0.28, "loss_type": "dapo"},
}


def log(message: str) -> None:
    print(f"[{time.time() - START:7.1f}s] {message}", flush=True)


def write_recipe(path: Path, recipe: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(recipe, allow_unicode=True, sort_keys=False), encoding="utf-8")
    return path


def result_path(results: Path, method: str, seed: int) -> Path:
    return results / f"{method}-seed{seed}.json"


def save_result(results: Path, method: str, seed: int, result: dict) -> None:
    results.mkdir(parents=True, exist_ok=True)
    path = result_path(results, method, seed)
    partial = path.with_suffix(".json.partial")
    partial.write_text(json.dumps(result, ensure_ascii=False, indent=2, default=str), encoding="utf-8")
    partial.replace(path)  # whole or absent: a killed run never leaves half a result
    log(f"{method} seed {seed}: {json.dumps(result['heldout'])}")


def build_data(work: Path, args) -> None:
    corpus = build_corpus(CorpusConfig(input=EXAMPLES / "miniwiki_large.jsonl"), work / "corpus", BuildContext(quiet=True))
    if not (work / "index" / "tansaku_index.json").exists():
        build_index(work / "corpus", work / "index")
    multihop = build_multihop(MultihopConfig(corpus=work / "corpus", policy=TEACHER, index=work / "index", k=1, m=1, rl_share=args.rl_share), work / "multihop", BuildContext(quiet=True))
    trajectories = build_trajectories(TrajectoriesConfig(
        dataset=work / "multihop", teacher=TEACHER, index=str(work / "index"), translator=REWRITER,
        general=EXAMPLES / "general_chat.jsonl", ratio=0.1, n=1, task=TASK), work / "trajectories",
        BuildContext(quiet=True))
    log(f"data: corpus {corpus['splits']}; multihop {multihop['splits']}; SFT rows {trajectories['splits']}")


def heldout(label: str, model_dir: Path, work: Path, args) -> dict:
    """The one protocol: ``train eval`` on the first ``eval_rows`` test questions, greedy (reports reused)."""
    report_dir = work / "eval" / label
    if (report_dir / "report.json").exists():
        report = json.loads((report_dir / "report.json").read_text(encoding="utf-8"))
    else:
        report = evaluate_model(TASK, work / "multihop", model_dir, work / "index", split="test", k=1,
                                limit=args.eval_rows, out_dir=report_dir, max_tokens=args.max_tokens,
                                temperature=0.0, seed=0, client_options=EVAL_CLIENT, dtype=DTYPE)
    return {"pass@1": report["pass@1"], "reward": report["mean_total_reward"],
            "tool_calls": report["mean_tool_calls"], "entropy": report.get("mean_token_entropy"),
            "questions": report["questions"], "stop_reasons": report["stop_reasons"]}


def sft_seed(work: Path, seed: int, args) -> dict:
    """SFT with ``seed``, the RL start chosen on the rl slice, and that start's held-out numbers."""
    run = work / f"sft-seed{seed}"
    recipe = write_recipe(work / "recipes" / f"sft-seed{seed}.yaml", {
        "model_name_or_path": "tiny", "output_dir": str(run),
        "data": [{"path": str(work / "trajectories"), "ratio": 1.0}],
        # compact rows are 1.2–1.35k tokens (≈ 530 of them the system prompt + tool schemas)
        "max_length": 1536, "assistant_only_loss": True, "shuffle_dataset": True, "learning_rate": args.sft_lr,
        "lr_scheduler_type": "constant", "per_device_train_batch_size": args.sft_batch, "max_steps": args.sft_steps,
        "bf16": True, "gradient_checkpointing": False,
        "dtype": "bfloat16",  # pure bf16: ~2x faster here, and lr 3e-4 is far above bf16 resolution
        "use_cpu": True, "seed": seed, "logging_steps": 1, "save_steps": args.sft_save_steps, "report_to": "none",
    })
    if not (run / "model.safetensors").exists():
        trained = run_sft(recipe)
        log(f"sft seed {seed}: {trained['global_step']} steps, loss {trained['training_loss']:.3f}")
    selection = select_checkpoint(run, TASK, work / "multihop", work / "index", split="rl", rows=args.select_rows,
                                  max_tokens=args.max_tokens, dtype=DTYPE)
    log(f"sft seed {seed} selection:\n{selection_table(selection)}")
    start = Path(selection["chosen"]["path"])
    history = load_log_history(run)
    return {"method": "sft", "seed": seed, "start": str(start), "start_step": selection["chosen"]["step"],
            "heldout": heldout(f"sft-seed{seed}", start, work, args), "selection": selection["checkpoints"],
            "loss_curve": [(e["step"], e["loss"]) for e in history if "loss" in e]}


def rl_seed(work: Path, method: str, seed: int, start: Path, args) -> dict:
    """GSPO or GRPO from ``start`` on the banded rl prompts, then its held-out numbers."""
    run = work / f"{method}-seed{seed}"
    recipe = write_recipe(work / "recipes" / f"{method}-seed{seed}.yaml", {
        "model_name_or_path": str(start), "output_dir": str(run),
        "tasks": [{"name": TASK, "data": str(work / "multihop"), "index": str(work / "index"), "split": "rl"}],
        **ALGORITHMS[method], "num_generations": args.rl_generations,
        # one completion per micro-batch: a 1.3k-token row's fp32 logits over 49k tokens are 250 MB each;
        # P prompts × G generations per optimizer step (one process)
        "per_device_train_batch_size": 1, "gradient_accumulation_steps": args.rl_prompts * args.rl_generations,
        "beta": 0.0, "max_completion_length": args.rl_completion, "max_tool_calling_iterations": 3,
        "temperature": args.rl_temperature, "learning_rate": args.rl_lr, "lr_scheduler_type": "constant",
        "max_steps": args.rl_steps, "bf16": True, "gradient_checkpointing": False,
        "use_cpu": True, "seed": seed, "save_steps": args.rl_save_steps, "logging_steps": 1, "log_completions": True,
        "report_to": "none", "resume_from_checkpoint": "latest" if any(run.glob("checkpoint-*")) else None,
        "difficulty": {"samples": args.band_samples, "rows": args.band_rows, "max_tokens": args.max_tokens,
                       "min_pass": args.band_min_pass, "max_pass": args.band_max_pass},
    })
    if not (run / "model.safetensors").exists():
        trained = run_rl(recipe)
        log(f"{method} seed {seed}: {trained['global_step']} steps; band {trained['difficulty']}")
    band = json.loads((run / "difficulty" / TASK / "band.json").read_text(encoding="utf-8"))
    history = load_log_history(run)
    curves = {key: [(e["step"], e[key]) for e in history if key in e]
              for key in ("reward", "frac_reward_zero_std", "entropy", "loss", "tools/call_frequency",
                          *sorted({k for e in history for k in e if k.startswith("rewards/") and k.endswith("/mean")}))}
    plots = Path(args.results) / "plots"
    plots.mkdir(parents=True, exist_ok=True)
    plot_learning_curves(run, plots / f"{method}-seed{seed}.png")
    return {"method": method, "seed": seed, "start": str(start), "heldout": heldout(f"{method}-seed{seed}", run,
                                                                                    work, args),
            "band": band["summary"], "band_report": {k: band["report"].get(k) for k in
                                                     ("pass@1", "mean_tool_calls", "mean_token_entropy")},
            "curves": curves, "steps": max((e.get("step", 0) for e in history), default=0)}


def mean_sd(values: list[float]) -> str:
    values = [v for v in values if v is not None]
    if not values:
        return "–"
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.mean(values):.3f} ± {sd:.3f}"


def table(results: Path) -> str:
    """Per-seed rows and mean ± sd per method, from the result files present."""
    rows = [json.loads(p.read_text(encoding="utf-8")) for p in sorted(results.glob("*-seed*.json"))]
    lines = ["| method | seed | start | " + " | ".join(METRICS) + " | band kept / candidates |",
             "|---" * (len(METRICS) + 4) + "|"]
    for method in ("sft", "gspo", "grpo"):
        group = [r for r in rows if r["method"] == method]
        for r in group:
            start = f"step {r['start_step']}" if method == "sft" else Path(r["start"]).parent.name + "/" + \
                Path(r["start"]).name
            band = f"{r['band']['kept']} / {r['band']['candidates']}" if "band" in r else ""
            cells = [f"{r['heldout'][m]:.3f}" if r["heldout"].get(m) is not None else "–" for m in METRICS]
            lines.append(f"| {method.upper()} | {r['seed']} | {start} | " + " | ".join(cells) + f" | {band} |")
        if len(group) > 1:
            lines.append(f"| {method.upper()} | mean ± sd (n={len(group)}) | | "
                         + " | ".join(mean_sd([r["heldout"].get(m) for r in group]) for m in METRICS) + " | |")
    return "\n".join(lines)


def write_table(results: Path, args) -> str:
    text = table(results)
    results.mkdir(parents=True, exist_ok=True)
    (results / "README.md").write_text(
        "# RL efficacy (bench/efficacy.py)\n\nHeld-out `test` split, first "
        f"{args.eval_rows} questions, greedy, bf16, batch 16, {args.max_tokens} new tokens per turn (the same "
        "protocol for every model); `start` is the checkpoint `train select` chose on the `rl` split; `band` is "
        "how many `rl` candidates the start solved sometimes (K samples each). One row per (method, seed) result "
        "file here; per-seed curves in `plots/`.\n\n"
        + text + "\n", encoding="utf-8")
    return text


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=Path("runs/efficacy"))
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--table-only", action="store_true", help="print the table from the result files")
    parser.add_argument("--seeds", type=int, nargs="*", default=[0, 1, 2])
    parser.add_argument("--methods", nargs="+", default=["sft", "gspo", "grpo"], choices=["sft", "gspo", "grpo"])
    parser.add_argument("--grpo-seeds", type=int, nargs="*", default=[0])
    parser.add_argument("--rl-share", type=float, default=0.35, help="share of bridges in the rl split")
    parser.add_argument("--sft-steps", type=int, default=24)
    parser.add_argument("--sft-save-steps", type=int, default=8)
    parser.add_argument("--sft-batch", type=int, default=2)
    parser.add_argument("--sft-lr", type=float, default=3e-4)
    parser.add_argument("--select-rows", type=int, default=24, help="rl questions per checkpoint evaluation")
    parser.add_argument("--band-samples", type=int, default=4, help="K rollouts per candidate prompt")
    parser.add_argument("--band-rows", type=int, default=48, help="candidate rl prompts banded")
    parser.add_argument("--band-min-pass", type=float, default=0.05, help="keep pass rate >= this (drops never)")
    parser.add_argument("--band-max-pass", type=float, default=0.95, help="keep pass rate <= this (drops always)")
    parser.add_argument("--rl-steps", type=int, default=20)
    parser.add_argument("--rl-save-steps", type=int, default=5, help="checkpoints: a killed run resumes from one")
    parser.add_argument("--rl-prompts", type=int, default=4)
    parser.add_argument("--rl-generations", type=int, default=4)
    # A compact episode (3 turns + 2 tool results) measures 630–700 tokens after the prompt.
    parser.add_argument("--rl-completion", type=int, default=768, help="tokens of the whole multi-turn completion")
    parser.add_argument("--rl-lr", type=float, default=3e-5)
    parser.add_argument("--rl-temperature", type=float, default=0.9)
    parser.add_argument("--eval-rows", type=int, default=96, help="held-out questions per evaluation")
    # The hop turn (a sentence naming both entities + a tool call) needs ~100 tokens: 96 cut 5 of 24 episodes.
    parser.add_argument("--max-tokens", type=int, default=160, help="new tokens per turn")
    args = parser.parse_args(argv)
    if not args.table_only and not native_bf16():
        # An AVX2-only CPU emulates bf16 (a 1024³ matmul 68x slower than fp32): the protocol would take days.
        raise SystemExit("efficacy: this CPU has no native bf16 (AVX512_BF16 or AMX); the experiment's models are "
                         "trained and evaluated in bf16, so run it on one that has it (--table-only works anywhere)")
    results = Path(args.results)
    if args.table_only:
        text = write_table(results, args)
        print(text)
        return text

    args.work.mkdir(parents=True, exist_ok=True)
    build_data(args.work, args)
    # Paired order (SFT s, then RL from its start): every finished pair is a comparison on its own.
    for seed in args.seeds:
        sft_file = result_path(results, "sft", seed)
        if not sft_file.exists():
            save_result(results, "sft", seed, sft_seed(args.work, seed, args))
        start = Path(json.loads(sft_file.read_text(encoding="utf-8"))["start"])
        if not start.exists():  # another checkout or machine: the same checkpoint under this --work
            start = args.work / start.parent.name / start.name
        for method in ("gspo", "grpo"):
            wanted = method in args.methods and (method == "gspo" or seed in args.grpo_seeds)
            if wanted and not result_path(results, method, seed).exists():
                save_result(results, method, seed, rl_seed(args.work, method, seed, start, args))
        print(write_table(results, args), flush=True)
    text = write_table(results, args)
    print(text)
    return text


if __name__ == "__main__":
    main()
