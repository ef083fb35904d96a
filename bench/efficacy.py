"""Does RL beat SFT on held-out questions — unseen bridges, unseen phrasings, an unseen wiki? (efficacy v2)

    nohup python bench/efficacy.py --work runs/efficacy > runs/efficacy.log 2>&1 &   # hours; resumable
    python bench/efficacy.py --table-only                                            # the report from the results

The product end to end, each step one toolkit call:

1. ``synth build corpus`` + ``synth index build`` of ``examples/miniwiki_large.jsonl``, then ``synth build multihop
   --rl-share 0.35 --heldout-phrasing answer`` (template questions, the scripted agent as solvability policy):
   bridges split three ways, ``train`` (SFT trajectories), ``rl`` (RL prompts and checkpoint selection) and
   ``test``; the phrasing family ``answer`` (「…を答えてください。」) never appears in ``train``/``rl``/``test`` and
   asks every ``test`` chain again in ``test_phrasing``;
2. ``synth build trajectories`` from ``train`` with the scripted compact teacher (task ``multihop_qa_compact``);
3. per seed s: ``train sft`` → ``train select`` on ``rl`` (the RL start is the best checkpoint by measurement) → the
   **sft** arm;
4. per seed s, from SFT seed s's start, on the ``rl`` prompts banded by that start (K samples per candidate, kept
   when 0 < pass rate < 1), ``--rl-steps`` optimizer steps each:
   - **gspo**: sequence-level ratios, the GSPO paper's clip (3e-4 / 4e-4), off-policy: each rollout round of
     P prompts × G generations is trained in ``--minibatches`` minibatches (``steps_per_generation`` =
     minibatches × ``gradient_accumulation_steps``), so from the second one on the ratio moves and the clip acts;
   - **grpo**: token-level ratios, the GRPO paper's clip (0.2 / 0.2), the same minibatching and loss averaging;
   - **gspo-onpolicy** (control, ``--control-seeds``): GSPO with one optimizer step per round of the same size as
     a minibatch (ratio 1, the clip inert), the same number of optimizer steps and completions.

   Rollouts come from the bf16 generation copy; the sampler–trainer gap is logged and corrected per token
   (``vllm_importance_sampling_mode: token_truncate``); ``kl_to_start`` is logged each round.

Every model is measured by one protocol, greedy, pass@1, on three held-out sets: (a) the first ``--eval-rows``
questions of ``test`` (unseen bridges); (b) the first ``--eval-rows`` of ``test_phrasing`` (the same chains in the
held-out phrasing family); (c) every question of ``examples/miniwiki_unseen_questions.jsonl``, hand-written in
the free style of users over ``examples/miniwiki_unseen.jsonl``, a wiki no model trains on (its own index).
Each (arm, seed) writes ``bench/results/efficacy/<arm>-seed<s>.json`` when it finishes (the three sets' numbers,
the selection table or band counts, per-step curves, the run's stability); a rerun skips finished ones, so the
experiment spans sittings. Work folders are in ``--work`` and reused (a killed RL run resumes from its last
checkpoint); on a fresh checkout an RL arm's SFT start is trained again and used only when its choice and held-out
numbers equal the recorded ones, and results measured on other questions (a different task view of the multihop
dataset, ``task_view``) are refused. The report (``bench/efficacy_report.py``: per seed, mean ± sd, the target,
each RL run's gain over its own SFT start, stability, one PNG per arm with its seeds overlaid) is written to
``bench/results/efficacy/README.md`` from whatever result files exist.
The first experiment's results (on-policy, one held-out set) are in ``bench/results/efficacy-v1/``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import time
from pathlib import Path

import yaml
from efficacy_report import stability, write_report  # bench/, beside this script

from tansaku.core.context import BuildContext
from tansaku.core.hardware import native_bf16
from tansaku.core.heldout import TEST, TEST_PHRASING
from tansaku.core.recipe import canonical_json
from tansaku.core.store import iter_rows
from tansaku.demo import EXAMPLES, evaluate_model
from tansaku.envs.search import build_index
from tansaku.envs.tasks import task_named
from tansaku.pipelines.corpus.build import build_corpus
from tansaku.pipelines.corpus.config import CorpusConfig
from tansaku.pipelines.multihop.build import build_multihop
from tansaku.pipelines.multihop.config import MultihopConfig
from tansaku.pipelines.trajectories.build import build_trajectories
from tansaku.pipelines.trajectories.config import TrajectoriesConfig
from tansaku.trainer.report import load_log_history
from tansaku.trainer.rl import run_rl
from tansaku.trainer.select import select_checkpoint, selection_table
from tansaku.trainer.sft import run_sft

TASK = "multihop_qa_compact"
TEACHER = f"scripted:{EXAMPLES / 'teacher_script.py'}:respond_compact"
REWRITER = f"scripted:{EXAMPLES / 'teacher_script.py'}:rewrite_compact"
RESULTS = Path(__file__).resolve().parent / "results" / "efficacy"
HELDOUT_FAMILY = "answer"  # the phrasing family no training row is written in
UNSEEN_WIKI, UNSEEN_QUESTIONS = EXAMPLES / "miniwiki_unseen.jsonl", EXAMPLES / "miniwiki_unseen_questions.jsonl"
START = time.time()
# Every model is evaluated without the backend's KV-cache reuse: in bf16 the reuse changes rounding (a token here
# and there), and one protocol measures every model the same way.
EVAL_CLIENT = {"prefix_cache": False, "turn_cache": False}
DTYPE = "bfloat16"  # trained and evaluated in bf16 (~2x fp32 on CPUs with native bf16)
# The arms as GRPOConfig keys. Both off-policy arms use loss_type grpo (each sequence's tokens averaged), so
# they differ only in the ratio's level and the clip of their papers.
ARMS = {
    "gspo": {"importance_sampling_level": "sequence", "epsilon": 3e-4, "epsilon_high": 4e-4, "loss_type": "grpo"},
    "grpo": {"importance_sampling_level": "token", "epsilon": 0.2, "epsilon_high": 0.2, "loss_type": "grpo"},
    "gspo-onpolicy": {"importance_sampling_level": "sequence", "epsilon": 3e-4, "epsilon_high": 4e-4,
                      "loss_type": "grpo"},
}
CURVE_KEYS = ("reward", "reward_std", "frac_reward_zero_std", "entropy", "loss", "tools/call_frequency",
              "clip_ratio/region_mean", "kl_to_start", "sampling/sampling_logp_difference/mean",
              "sampling/importance_sampling_ratio/mean")


def log(message: str) -> None:
    print(f"[{time.time() - START:7.1f}s] {message}", flush=True)


def write_recipe(path: Path, recipe: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(recipe, allow_unicode=True, sort_keys=False), encoding="utf-8")
    return path


def result_path(results: Path, arm: str, seed: int) -> Path:
    return results / f"{arm}-seed{seed}.json"


def save_result(results: Path, arm: str, seed: int, result: dict) -> None:
    results.mkdir(parents=True, exist_ok=True)
    path = result_path(results, arm, seed)
    partial = path.with_suffix(".json.partial")
    partial.write_text(json.dumps(result, ensure_ascii=False, indent=2, default=str), encoding="utf-8")
    partial.replace(path)  # whole or absent: a killed run never leaves half a result
    log(f"{arm} seed {seed}: " + json.dumps({k: v["pass@1"] for k, v in result["heldout"].items()}))


def build_data(work: Path, args) -> dict:
    """The experiment's datasets, built once: every (arm, seed) of one experiment trains and is measured on
    the same rows, so finished datasets are reused as they are, even when a newer pipeline version would
    build them otherwise (each result records the multihop dataset version it used)."""
    done = [work / n / "manifest.json" for n in ("corpus", "multihop", "trajectories", "unseen-corpus")]
    if all(p.exists() for p in done) and (work / "index" / "tansaku_index.json").exists():
        versions = {p.parent.name: json.loads(p.read_text(encoding="utf-8"))["version"] for p in done}
        log(f"data: reused as built ({versions})")
        return {**versions, "multihop_task_view": task_view(work / "multihop")}
    quiet = BuildContext(quiet=True)
    corpus = build_corpus(CorpusConfig(input=EXAMPLES / "miniwiki_large.jsonl"), work / "corpus", quiet)
    if not (work / "index" / "tansaku_index.json").exists():
        build_index(work / "corpus", work / "index")
    multihop = build_multihop(MultihopConfig(
        corpus=work / "corpus", policy=TEACHER, index=work / "index", k=1, m=1, rl_share=args.rl_share,
        heldout_phrasing=[HELDOUT_FAMILY]), work / "multihop", quiet)
    trajectories = build_trajectories(TrajectoriesConfig(
        dataset=work / "multihop", teacher=TEACHER, index=str(work / "index"), translator=REWRITER,
        general=EXAMPLES / "general_chat.jsonl", ratio=0.1, n=1, task=TASK), work / "trajectories", quiet)
    build_corpus(CorpusConfig(input=UNSEEN_WIKI), work / "unseen-corpus", quiet)
    if not (work / "unseen-index" / "tansaku_index.json").exists():
        build_index(work / "unseen-corpus", work / "unseen-index")
    log(f"data: corpus {corpus['splits']}; multihop {multihop['splits']}; SFT rows {trajectories['splits']}")
    return {"corpus": corpus["version"], "multihop": multihop["version"], "trajectories": trajectories["version"],
            "multihop_task_view": task_view(work / "multihop")}


def task_view(dataset: Path) -> str:
    """A digest of what the task reads of each split (its columns and optional columns). A dataset's version
    hashes whole rows, so a later pipeline that records more about a row (its chain's relation labels, say)
    changes the version; equal task views mean every model is trained and measured on the same questions."""
    task = task_named(TASK)
    read = [*task.columns, *task.optional_columns]
    digest = hashlib.sha256()
    for split in sorted(json.loads((dataset / "manifest.json").read_text(encoding="utf-8"))["splits"]):
        digest.update(f"\x00split:{split}\x00".encode())
        for row in iter_rows(dataset, split):
            digest.update(canonical_json({k: row[k] for k in read if k in row}).encode() + b"\n")
    return digest.hexdigest()[:16]


def check_same_data(results: Path, data: dict) -> None:
    """Refuse to add results measured on other questions than the finished ones (a dataset rebuilt by later code
    is fine when the task reads the same of it)."""
    for path in sorted(results.glob("*-seed*.json")):
        recorded = json.loads(path.read_text(encoding="utf-8")).get("data") or {}
        view = recorded.get("multihop_task_view")
        if view and view != data["multihop_task_view"]:
            raise SystemExit(f"efficacy: {path.name} was measured on other questions (task view {view}) than this "
                             f"--work's dataset ({data['multihop_task_view']}); use its --work or a new --results")
        if not view and recorded.get("multihop") not in (None, data["multihop"]):
            log(f"data: {path.name} recorded multihop {recorded['multihop']} without a task view; this build is "
                f"{data['multihop']} (compare the task's columns of both before mixing them)")


def heldout_sets(work: Path, args) -> dict[str, tuple]:
    """(dataset, split, index, rows) of each held-out set."""
    return {"test": (work / "multihop", TEST, work / "index", args.eval_rows),
            "phrasing": (work / "multihop", TEST_PHRASING, work / "index", args.eval_rows),
            "unseen": (UNSEEN_QUESTIONS, TEST, work / "unseen-index", None)}


def heldout(label: str, model_dir: Path, work: Path, args) -> dict:
    """The one protocol on each held-out set: ``train eval``, greedy (reports reused)."""
    numbers = {}
    for name, (dataset, split, index, rows) in heldout_sets(work, args).items():
        report_dir = work / "eval" / label / name
        if (report_dir / "report.json").exists():
            report = json.loads((report_dir / "report.json").read_text(encoding="utf-8"))
        else:
            report = evaluate_model(TASK, dataset, model_dir, index, split=split, k=1, limit=rows,
                                    out_dir=report_dir, max_tokens=args.max_tokens, temperature=0.0, seed=0,
                                    client_options=EVAL_CLIENT, dtype=DTYPE)
        numbers[name] = {"pass@1": report["pass@1"], "reward": report["mean_total_reward"],
                         "tool_calls": report["mean_tool_calls"], "entropy": report.get("mean_token_entropy"),
                         "questions": report["questions"], "stop_reasons": report["stop_reasons"]}
    return numbers


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


def sft_start(work: Path, seed: int, recorded: dict, args) -> Path:
    """The RL start SFT seed ``seed`` chose. Checkpoints live in ``--work``, not in the repository: on a fresh
    checkout the SFT run is trained again (same recipe, same seed) and its choice and held-out numbers are
    checked against the committed result, so an RL arm never starts from a model other than the one measured."""
    start = Path(recorded["start"])
    if not start.exists():  # another checkout or machine: the same checkpoint under this --work
        start = work / start.parent.name / start.name
    if start.exists():
        return start
    log(f"sft seed {seed}: its start {start} is not here; training it again")
    again = sft_seed(work, seed, args)
    recorded_numbers = {k: v["pass@1"] for k, v in recorded["heldout"].items()}
    again_numbers = {k: v["pass@1"] for k, v in again["heldout"].items()}
    if again["start_step"] != recorded["start_step"] or again_numbers != recorded_numbers:
        raise SystemExit(f"efficacy: SFT seed {seed} trained again chose step {again['start_step']} with held-out "
                         f"{again_numbers}, not the recorded step {recorded['start_step']} with "
                         f"{recorded_numbers}; its RL arms would start from an unmeasured model")
    log(f"sft seed {seed}: reproduced (step {again['start_step']}, held-out {again_numbers})")
    return Path(again["start"])


def batch_keys(arm: str, args) -> dict:
    """P prompts × G generations per rollout round; off-policy arms train a round in ``minibatches`` optimizer
    steps, the on-policy control takes one optimizer step per round of a minibatch's size."""
    per_step = args.rl_prompts * args.rl_generations // args.minibatches  # completions per optimizer step
    rounds = per_step if arm.endswith("onpolicy") else per_step * args.minibatches
    # one completion per micro-batch: a 1.3k-token row's fp32 logits over 49k tokens are 250 MB each
    return {"num_generations": args.rl_generations, "per_device_train_batch_size": 1,
            "gradient_accumulation_steps": per_step, "steps_per_generation": rounds}


def rl_seed(work: Path, arm: str, seed: int, start: Path, args) -> dict:
    """One RL arm from ``start`` on the banded rl prompts, then its held-out numbers and stability."""
    run = work / f"{arm}-seed{seed}"
    recipe = write_recipe(work / "recipes" / f"{arm}-seed{seed}.yaml", {
        "model_name_or_path": str(start), "output_dir": str(run),
        "tasks": [{"name": TASK, "data": str(work / "multihop"), "index": str(work / "index"), "split": "rl"}],
        **ARMS[arm], **batch_keys(arm, args),
        "vllm_importance_sampling_mode": "token_truncate", "kl_to_start": True,
        "beta": 0.0, "max_completion_length": args.rl_completion, "max_tool_calling_iterations": 3,
        "temperature": args.rl_temperature, "learning_rate": args.rl_lr, "lr_scheduler_type": "constant",
        "max_steps": args.rl_steps, "bf16": True, "gradient_checkpointing": False,
        "use_cpu": True, "seed": seed, "save_steps": args.rl_save_steps, "logging_steps": 1, "log_completions": True,
        "save_total_limit": 1,  # a checkpoint is ~1.6 GB (fp32 weights + AdamW): the latest one is all resume needs
        "report_to": "none", "resume_from_checkpoint": "latest" if any(run.glob("checkpoint-*")) else None,
        "difficulty": {"samples": args.band_samples, "rows": args.band_rows, "max_tokens": args.max_tokens,
                       "min_pass": args.band_min_pass, "max_pass": args.band_max_pass},
    })
    began = time.time()
    if not (run / "model.safetensors").exists():
        trained = run_rl(recipe)
        log(f"{arm} seed {seed}: {trained['global_step']} steps; band {trained['difficulty']}")
    band = json.loads((run / "difficulty" / TASK / "band.json").read_text(encoding="utf-8"))
    history = load_log_history(run)
    report_file = run / "run_report.json"
    run_report = json.loads(report_file.read_text(encoding="utf-8")) if report_file.exists() else None
    curves = {key: [(e["step"], e[key]) for e in history if key in e] for key in
              (*CURVE_KEYS, *sorted({k for e in history for k in e if k.startswith("rewards/") and k.endswith("/mean")}))}
    return {"method": arm, "seed": seed, "start": str(start), "recipe": yaml.safe_load(recipe.read_text("utf-8")),
            "heldout": heldout(f"{arm}-seed{seed}", run, work, args), "band": band["summary"],
            "band_report": {k: band["report"].get(k) for k in ("pass@1", "mean_tool_calls", "mean_token_entropy")},
            "stability": stability(history, run_report), "curves": curves,
            "steps": max((e.get("step", 0) for e in history), default=0),
            "minutes_this_sitting": round((time.time() - began) / 60, 1)}


def protocol(args) -> str:
    return (f"Greedy pass@1, bf16, batch 16, {args.max_tokens} new tokens per turn, the same for every model, on "
            f"(a) the first {args.eval_rows} `test` questions (unseen bridges), (b) the first {args.eval_rows} "
            f"`test_phrasing` questions (the same chains, phrasing family `{HELDOUT_FAMILY}` held out of all "
            f"training data), (c) the {len(UNSEEN_QUESTIONS.read_text(encoding='utf-8').splitlines())} hand-written "
            "questions over `examples/miniwiki_unseen.jsonl`. RL arms: "
            f"{args.rl_steps} optimizer steps from the SFT start `train select` chose, {args.rl_prompts} prompts × "
            f"{args.rl_generations} generations per round, {args.minibatches} minibatches per round off-policy "
            f"(one optimizer step per round of {args.rl_prompts * args.rl_generations // args.minibatches} "
            "completions on-policy), lr "
            f"{args.rl_lr}, temperature {args.rl_temperature}, prompts banded by the start (K = {args.band_samples} "
            f"samples of {args.band_rows} `rl` candidates). One result file per (arm, seed); plots in `plots/`.")


def parse_args(argv: list[str] | None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=Path("runs/efficacy"))
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--table-only", action="store_true", help="write the report from the result files")
    parser.add_argument("--seeds", type=int, nargs="*", default=[0, 1, 2])
    parser.add_argument("--arms", nargs="+", default=list(("sft", *ARMS)), choices=["sft", *ARMS])
    parser.add_argument("--control-seeds", type=int, nargs="*", default=[0], help="seeds of gspo-onpolicy")
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
    parser.add_argument("--rl-steps", type=int, default=20, help="optimizer steps per RL run")
    parser.add_argument("--rl-save-steps", type=int, default=4, help="checkpoints: a killed run resumes from one")
    parser.add_argument("--rl-prompts", type=int, default=4, help="prompts per rollout round")
    parser.add_argument("--rl-generations", type=int, default=4)
    parser.add_argument("--minibatches", type=int, default=2, help="optimizer steps per rollout round (off-policy)")
    # A compact episode (3 turns + 2 tool results) measures 630–700 tokens after the prompt.
    parser.add_argument("--rl-completion", type=int, default=768, help="tokens of the whole multi-turn completion")
    parser.add_argument("--rl-lr", type=float, default=3e-5)
    parser.add_argument("--rl-temperature", type=float, default=0.9)
    parser.add_argument("--eval-rows", type=int, default=96, help="questions of (a) and (b) per evaluation")
    # The hop turn (a sentence naming both entities + a tool call) needs ~100 tokens: 96 cut 5 of 24 episodes.
    parser.add_argument("--max-tokens", type=int, default=160, help="new tokens per turn")
    args = parser.parse_args(argv)
    if (args.rl_prompts * args.rl_generations) % args.minibatches:
        parser.error("--minibatches must divide rl-prompts × rl-generations")
    return args


def main(argv: list[str] | None = None) -> str:
    args = parse_args(argv)
    results = Path(args.results)
    if args.table_only:
        text = write_report(results, protocol(args))
        print(text)
        return text
    if not native_bf16():
        # An AVX2-only CPU emulates bf16 (a 1024³ matmul 68x slower than fp32): the protocol would take days.
        raise SystemExit("efficacy: this CPU has no native bf16 (AVX512_BF16 or AMX); the experiment's models are "
                         "trained and evaluated in bf16, so run it on one that has it (--table-only works anywhere)")
    args.work.mkdir(parents=True, exist_ok=True)
    data = build_data(args.work, args)  # dataset versions, recorded in each result
    check_same_data(results, data)
    # Paired order (SFT s, then each RL arm from its start): every finished pair is a comparison on its own.
    for seed in args.seeds:
        sft_file = result_path(results, "sft", seed)
        if not sft_file.exists():
            save_result(results, "sft", seed, {**sft_seed(args.work, seed, args), "data": data})
        for arm in ARMS:
            wanted = arm in args.arms and (not arm.endswith("onpolicy") or seed in args.control_seeds)
            if wanted and not result_path(results, arm, seed).exists():
                start = sft_start(args.work, seed, json.loads(sft_file.read_text(encoding="utf-8")), args)
                save_result(results, arm, seed, {**rl_seed(args.work, arm, seed, start, args), "data": data})
                write_report(results, protocol(args))
        write_report(results, protocol(args))
    text = write_report(results, protocol(args))
    print(text)
    return text


if __name__ == "__main__":
    main()
