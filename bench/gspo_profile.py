"""Where one GSPO step's time goes on this machine: generation (prefill / decode), tools, rewards, log-probs,
forward / backward, optimizer — for several step configurations in one run, printed as a table.

    python bench/gspo_profile.py --work runs/efficacy --model runs/efficacy/sft-seed0/checkpoint-16
    python bench/gspo_profile.py --work runs/efficacy --model tiny --steps 1 --variants full lora

Each variant runs ``--steps`` real ``train rl`` steps (``build_rl_trainer``) of the efficacy experiment's GSPO
arm, its keys read from ``bench/efficacy.py`` (``efficacy_keys``): a step is one rollout round of 4 prompts ×
4 generations (16 multi-turn compact episodes over the ``rl`` split of ``WORK/multihop`` and ``WORK/index``,
which ``bench/efficacy.py`` builds), the trainer's log-probs of the round without gradients (the off-policy
ratio's old log-probs, and the sampler gap), and the round trained off-policy in 2 optimizer steps of 8
completions. Timers are wrapped around:

- ``model.generate`` — every forward inside it, split into prefill (more than one new position: the prompt, and
  in TRL's tool loop the whole context again at each turn) and decode (one position);
- tool execution (``SearchEnvironment.search`` / ``open_doc``) and reward functions (``_calculate_rewards``);
- ``_get_per_token_logps_and_entropies`` without grad (old log-probs; the start model's for ``kl_to_start``)
  and with grad (the training forward), ``accelerator.backward`` with the shared prompt tokens' backward (``tansaku.trainer.cpu.prefix_train``),
  and the optimizer step (callback events).

Rows are seconds per rollout round (mean over the rounds) and the share of the step. Variants: ``full`` (full fine-tune,
fp32 master weights, bf16 autocast: what RL needs at lr 1e-5; the shared prompt prefix computed once per call,
``tansaku.trainer.cpu.prefix_generate``), ``no-shared-prefix`` (TRL's plain generate), ``batch4`` (4 completions
per micro-batch instead of 1), ``lora`` (LoRA r=16 on all linear layers), ``short`` (512-token completions),
``trl-lm-head`` (TRL's fused LM head on CPU, scoring every position, instead of ``tansaku.trainer.cpu.lm_head``),
``autocast-generation`` (the fp32 policy generates under bf16 autocast instead of ``tansaku.trainer.cpu.generation_copy``'s
bf16 copy), ``unshared-training`` (every training micro-batch runs its whole prompt instead of
``tansaku.trainer.cpu.prefix_train``'s shared tokens once per optimizer step), ``dynamic-cache`` (rollouts with
transformers' ``DynamicCache``, which copies the whole cache at every decode step, instead of
``tansaku.core.llm.growing_cache``), ``no-turn-cache`` (each turn of TRL's tool loop prefills the episodes'
whole contexts again instead of reusing the last turn's cache, ``tansaku.core.llm.turn_cache``),
``all-head-fields`` (the CPU head computes entropy and is_top1 for every model, not only the fields each
TRL head was asked for), ``unshared-start`` (``kl_to_start``'s start model runs every completion's whole
prompt), ``strided-head`` (prefills hand the LM head the strided last-position slice, not
``tansaku.core.llm.contiguous_head``'s copy) and ``2026-12-05-start`` (those three together: the step as it
was before they were added). Writes ``bench/results/gspo_profile.json`` and ``.md`` (``--results``).
"""

from __future__ import annotations

import argparse
import functools
import json
import time
from contextlib import ExitStack, contextmanager
from pathlib import Path
from unittest import mock

import efficacy  # bench/, beside this script: the experiment whose step is profiled
import yaml

from tansaku.core.llm.turn_cache import TurnCache
from tansaku.envs.environments import SearchEnvironment
from tansaku.trainer import cpu, drift
from tansaku.trainer.cpu import lm_head as cpu_lm_head
from tansaku.trainer.cpu import prefix_generate
from tansaku.trainer.cpu.prefix_train import SharedPrefix
from tansaku.trainer.recipes import load_recipe
from tansaku.trainer.rl import build_rl_trainer

RESULTS = Path(__file__).resolve().parent / "results"
TASK = "multihop_qa_compact"
VARIANTS = {
    "full": {},
    "no-shared-prefix": {"share_prompt_prefix": False},
    "batch4": {"per_device_train_batch_size": 4, "gradient_accumulation_steps": 2, "steps_per_generation": 4},
    "lora": {"use_peft": True, "lora_r": 16, "lora_alpha": 32, "lora_dropout": 0.0, "lora_target_modules": "all-linear",
             "learning_rate": 1e-4},
    "short": {"max_completion_length": 512},
    "trl-lm-head": {},  # TRL's own fused LM head on CPU instead of tansaku.trainer.cpu.lm_head (ABLATIONS)
    "autocast-generation": {"bf16_generation_copy": False},  # the fp32 policy generates under autocast
    "unshared-training": {},  # every micro-batch runs its whole prompt (ABLATIONS)
    "dynamic-cache": {},  # transformers' DynamicCache in generation instead of the in-place one (ABLATIONS)
    "no-turn-cache": {},  # each tool-loop turn prefills the episode's whole context again (ABLATIONS)
    "all-head-fields": {},  # the CPU head computes entropy and is_top1 for every model (ABLATIONS)
    "unshared-start": {},  # kl_to_start's start model runs each completion's whole prompt (ABLATIONS)
    "strided-head": {},  # prefills hand the LM head the strided last-position slice (ABLATIONS)
    "2026-12-05-start": {},  # all three of the above: the step as this stop found it (ABLATIONS)
}
# Variants that put one of tansaku's CPU paths back to what TRL / transformers do, by patching it out for the
# trainer's build and training (the recipe stays the same).
ABLATIONS = {
    "trl-lm-head": (cpu_lm_head, "handles", lambda model: False),  # TRL's fused forward stays in place
    "unshared-training": (SharedPrefix, "usable", lambda self, extra: False),  # every call: the full forward
    "dynamic-cache": (prefix_generate, "growing_cache", lambda config, cache=None: cache),  # generate's own cache
    "no-turn-cache": (TurnCache, "plan", lambda self, rows: None),  # nothing kept between turns
    "all-head-fields": [(cpu, "GRPO_EXTRAS", cpu_lm_head.EXTRAS),
                        (cpu_lm_head, "REFERENCE_EXTRAS", cpu_lm_head.EXTRAS)],
    "unshared-start": (drift, "SharedPrefix", lambda model, min_tokens: None),
    "strided-head": (cpu, "contiguous_head_input", lambda model: False),
}
ABLATIONS["2026-12-05-start"] = [*ABLATIONS["all-head-fields"], ABLATIONS["unshared-start"],
                                 ABLATIONS["strided-head"]]
ROWS = ("generation (total)", "  prefill forwards", "  decode forwards", "  tool execution", "rewards",
        "old log-probs (no grad)", "start log-probs (kl_to_start)", "training forward", "backward",
        "optimizer step", "other")


class Timers:
    def __init__(self):
        self.seconds: dict[str, float] = {}
        self.counts: dict[str, int] = {}
        self.tokens = {"prefill": 0, "decode_steps": 0}

    @contextmanager
    def time(self, name: str):
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - start
            self.counts[name] = self.counts.get(name, 0) + 1

    def wrap(self, fn, name: str, pick=None):
        @functools.wraps(fn)
        def timed(*args, **kwargs):
            with self.time(pick(*args, **kwargs) if pick else name):
                return fn(*args, **kwargs)

        return timed


def instrument(trainer, timers: Timers) -> None:
    """Wrap the trainer's parts in timers (instance attributes only; the classes stay untouched except tools)."""
    import torch
    from transformers import TrainerCallback

    model = trainer.model
    # With LoRA the trainer holds a PeftModel; the forwards generate runs are the wrapped model's own.
    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    inner = getattr(model.generate, "bf16_copy", inner)  # tansaku.trainer.cpu.generation_copy: the copy's forwards
    inside_generate = {"on": False}
    generate, forward = model.generate, inner.forward

    @functools.wraps(generate)
    def timed_generate(*args, **kwargs):
        inside_generate["on"] = True
        try:
            with timers.time("generation (total)"):
                return generate(*args, **kwargs)
        finally:
            inside_generate["on"] = False

    @functools.wraps(forward)  # generate reads forward's signature (cache_position, logits_to_keep): keep it
    def timed_forward(*args, **kwargs):
        if not inside_generate["on"]:
            return forward(*args, **kwargs)
        ids = kwargs.get("input_ids", args[0] if args else None)
        width = ids.shape[1] if ids is not None else 1
        kind = "  prefill forwards" if width > 1 else "  decode forwards"
        timers.tokens["prefill" if width > 1 else "decode_steps"] += width * ids.shape[0] if width > 1 else 1
        with timers.time(kind):
            return forward(*args, **kwargs)

    model.generate, inner.forward = timed_generate, timed_forward
    trainer._calculate_rewards = timers.wrap(trainer._calculate_rewards, "rewards")
    start = trainer.drift.start if trainer.drift is not None else None  # kl_to_start's frozen start model

    def logps_row(model, *args, **kwargs) -> str:
        if torch.is_grad_enabled():
            return "training forward"
        return "start log-probs (kl_to_start)" if model is start else "old log-probs (no grad)"

    trainer._get_per_token_logps_and_entropies = timers.wrap(
        trainer._get_per_token_logps_and_entropies, "", pick=logps_row)
    trainer.accelerator.backward = timers.wrap(trainer.accelerator.backward, "backward")
    if getattr(trainer, "shared_prefix", None) is not None:  # the shared prompt tokens' backward, once a step
        trainer.shared_prefix.flush = timers.wrap(trainer.shared_prefix.flush, "backward")

    class StepClock(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            self.step_start = time.perf_counter()

        def on_pre_optimizer_step(self, args, state, control, **kwargs):
            self.opt_start = time.perf_counter()

        def on_optimizer_step(self, args, state, control, **kwargs):
            timers.seconds["optimizer step"] = timers.seconds.get("optimizer step", 0.0) + (
                time.perf_counter() - self.opt_start)

        def on_step_end(self, args, state, control, **kwargs):
            timers.seconds["step"] = timers.seconds.get("step", 0.0) + time.perf_counter() - self.step_start

    trainer.add_callback(StepClock())


def ablation(variant: str) -> ExitStack:
    """The variant's patches (``ABLATIONS``: one or a list), or none."""
    patches = ABLATIONS.get(variant, [])
    stack = ExitStack()
    for owner, name, replacement in [patches] if isinstance(patches, tuple) else patches:
        stack.enter_context(mock.patch.object(owner, name, replacement))
    return stack


@contextmanager
def timed_tools(timers: Timers):
    search, open_doc = SearchEnvironment.search, SearchEnvironment.open_doc
    SearchEnvironment.search = timers.wrap(search, "  tool execution")
    SearchEnvironment.open_doc = timers.wrap(open_doc, "  tool execution")
    try:
        yield
    finally:
        SearchEnvironment.search, SearchEnvironment.open_doc = search, open_doc


def efficacy_keys(arm: str = "gspo") -> dict:
    """The efficacy experiment's GRPOConfig keys for ``arm`` (``bench/efficacy.py``: its defaults, one source)."""
    args = efficacy.parse_args([])
    return {**efficacy.ARMS[arm], **efficacy.batch_keys(arm, args),
            "vllm_importance_sampling_mode": "token_truncate", "kl_to_start": True,
            "beta": 0.0, "max_completion_length": args.rl_completion, "max_tool_calling_iterations": 3,
            "temperature": args.rl_temperature, "learning_rate": args.rl_lr, "lr_scheduler_type": "constant"}


def profile(variant: str, args) -> dict:
    out = args.work / "profile" / variant
    keys = {**efficacy_keys(), **VARIANTS[variant]}
    # one rollout round (P prompts × G generations) is trained in steps_per_generation / accumulation optimizer
    # steps: a profiled "step" is a whole round, whatever the variant's batch shape
    steps_per_round = keys["steps_per_generation"] // keys["gradient_accumulation_steps"]
    recipe_dict = {
        "model_name_or_path": args.model, "output_dir": str(out),
        "tasks": [{"name": TASK, "data": str(args.work / "multihop"), "index": str(args.work / "index"),
                   "split": "rl"}],
        **keys, "max_steps": args.steps * steps_per_round, "bf16": True,
        "gradient_checkpointing": False, "use_cpu": True, "seed": 0,
        "save_steps": 10_000, "logging_steps": 1, "log_completions": False, "report_to": "none",
    }
    path = args.work / "profile" / f"{variant}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(recipe_dict, sort_keys=False), encoding="utf-8")
    recipe = load_recipe(path, kind="rl")
    for task in recipe.script_args.tasks:
        task.split = task.prompt_split()
    with ablation(variant):
        trainer = build_rl_trainer(recipe)
        timers = Timers()
        instrument(trainer, timers)
        with timed_tools(timers):
            trainer.train()
    steps = max(trainer.state.global_step // steps_per_round, 1)  # rollout rounds
    per_step = {name: seconds / steps for name, seconds in timers.seconds.items()}
    accounted = sum(per_step.get(r, 0.0) for r in ("generation (total)", "rewards", "old log-probs (no grad)",
                                                 "start log-probs (kl_to_start)", "training forward",
                                                 "backward", "optimizer step"))
    per_step["other"] = max(per_step.get("step", 0.0) - accounted, 0.0)
    history = trainer.state.log_history
    return {"variant": variant, "steps": steps, "per_step_seconds": per_step,
            "prefill_tokens_per_step": timers.tokens["prefill"] / steps,
            "decode_steps_per_step": timers.tokens["decode_steps"] / steps,
            "completion_mean_length": [e.get("completions/mean_length") for e in history if "loss" in e]}


def table(results: list[dict]) -> str:
    head = "| part of a step | " + " | ".join(f"{r['variant']} s (share)" for r in results) + " |"
    lines = [head, "|---" * (len(results) + 1) + "|"]
    for row in ROWS:
        cells = []
        for r in results:
            seconds, step = r["per_step_seconds"].get(row, 0.0), r["per_step_seconds"].get("step", 1.0)
            cells.append(f"{seconds:.1f} ({seconds / step:.0%})")
        lines.append(f"| {row} | " + " | ".join(cells) + " |")
    lines.append("| **step** | " + " | ".join(f"**{r['per_step_seconds'].get('step', 0.0):.1f}**" for r in results)
                 + " |")
    lines.append("| prefill tokens / decode steps per step | " + " | ".join(
        f"{r['prefill_tokens_per_step']:.0f} / {r['decode_steps_per_step']:.0f}" for r in results) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=Path("runs/efficacy"), help="bench/efficacy.py's work folder")
    parser.add_argument("--model", default="tiny", help="the policy: 'tiny' or a model folder (an SFT start)")
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--results", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    results = [profile(variant, args) for variant in args.variants]
    text = table(results)
    print(text)
    args.results.mkdir(parents=True, exist_ok=True)
    (args.results / "gspo_profile.json").write_text(json.dumps({"model": args.model, "results": results}, indent=2),
                                                    encoding="utf-8")
    (args.results / "gspo_profile.md").write_text(f"# One GSPO step, profiled (model {args.model})\n\n{text}\n",
                                                  encoding="utf-8")
    return text


if __name__ == "__main__":
    main()
