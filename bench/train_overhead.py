"""Overhead of `train sft` / `train rl` over plain TRL with identical settings, measured in the same run.

    python bench/train_overhead.py [--sft-steps 3] [--rl-steps 2] [--rounds 2]

SFT: tokens/s of ``tansaku.trainer.sft.build_sft_trainer`` (recipe → SFTConfig, mixed data) vs an ``SFTTrainer`` built
by hand from the same config object and dataset. RL: s/step of ``tansaku.trainer.rl.build_rl_trainer`` (wrapped reward
functions, reward watch callback) vs a ``GRPOTrainer`` given the task's raw reward functions, the same
GRPOConfig, dataset and environment factory. Rounds alternate ours/plain so machine load drifts evenly.
Ratios are ours/plain throughput (target ≥ 0.95). Uses the tiny model on CPU and the fictional fixtures.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


def sft_pair(out: Path, steps: int):
    from trl import SFTTrainer

    from tansaku.trainer.data import mix_sources, to_dataset
    from tansaku.trainer.recipes import load_recipe, resolve_model
    from tansaku.trainer.sft import build_sft_trainer, peft_config, sft_config

    recipe = load_recipe(ROOT / "trainer/recipes/sft-tiny.yaml", [
        "--output_dir", str(out), "--max_steps", str(steps), "--save_steps", "1000",
        "--per_device_train_batch_size", "1", "--mix_size", "8"], kind="sft")
    script_args = recipe.script_args

    def ours():
        return build_sft_trainer(recipe)

    def plain():
        return SFTTrainer(model=resolve_model(recipe.model_args.model_name_or_path), args=sft_config(recipe),
                          peft_config=peft_config(recipe), train_dataset=to_dataset(
                              mix_sources(script_args.data, script_args.mix_size, recipe.training_args.seed)))

    return ours, plain


def rl_pair(out: Path, steps: int, index: Path):
    from trl import GRPOTrainer

    from tansaku.envs.environments import make_environment_factory
    from tansaku.envs.tasks import TASKS
    from tansaku.trainer.recipes import load_recipe, read_recipe_file, resolve_model
    from tansaku.trainer.rl import build_dataset, build_rl_trainer, grpo_config
    from tansaku.trainer.rl_rewards import build_rewards

    rl_tiny = ROOT / "trainer/recipes/rl-tiny.yaml"
    tasks = [{**spec, "index": str(index)} for spec in read_recipe_file(rl_tiny)["tasks"]]
    recipe = load_recipe(rl_tiny, [
        "--output_dir", str(out), "--max_steps", str(steps), "--save_steps", "1000", "--tasks", json.dumps(tasks),
        "--max_completion_length", "48", "--log_completions", "false"], kind="rl")
    spec = recipe.script_args.tasks[0]
    task = TASKS[spec.name]

    def ours():
        return build_rl_trainer(recipe)

    def plain():
        _, weights, _ = build_rewards(recipe)
        return GRPOTrainer(model=resolve_model(recipe.model_args.model_name_or_path),
                           reward_funcs=task.reward_functions(), args=grpo_config(recipe, weights),
                           train_dataset=build_dataset(recipe), environment_factory=make_environment_factory(task,
                                                                                                       spec.index))

    return ours, plain


def timed_train(make) -> tuple[float, int, int]:
    """(train seconds, optimizer steps, tokens seen) of one fresh trainer; construction not timed."""
    trainer = make()
    start = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - start
    tokens = max((e.get("num_tokens", 0) for e in trainer.state.log_history), default=0)
    return seconds, trainer.state.global_step, int(tokens)


def throughput(name: str, runs: list[tuple[float, int, int]]) -> float:
    """SFT: tokens/s over all runs; RL: seconds per optimizer step."""
    seconds = sum(r[0] for r in runs)
    return sum(r[2] for r in runs) / seconds if name == "sft" else seconds / sum(r[1] for r in runs)


def build_index(tmp: Path) -> Path:
    sys.path.insert(0, str(ROOT / "tests/fixtures/envs"))
    from helpers import build_fixture_index

    return build_fixture_index(tmp)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sft-steps", type=int, default=3)
    parser.add_argument("--rl-steps", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        pairs = {"sft": sft_pair(tmp / "sft", args.sft_steps),
                 "rl": rl_pair(tmp / "rl", args.rl_steps, build_index(tmp / "corpus"))}
        results = {name: {"ours": [], "plain": []} for name in pairs}
        for round_no in range(args.rounds):
            for name, (ours, plain) in pairs.items():
                order = [("ours", ours), ("plain", plain)] if round_no % 2 == 0 else [("plain", plain), ("ours", ours)]
                for label, make in order:
                    results[name][label].append(timed_train(make))
    print(f"{'run':<6}{'metric':<12}{'train (ours)':>14}{'plain TRL':>12}{'ratio':>8}")
    for name, res in results.items():
        ours_v, plain_v = throughput(name, res["ours"]), throughput(name, res["plain"])
        # Throughput ratio: tokens/s ours/plain for SFT; for RL s/step plain/ours (higher = ours faster).
        ratio = ours_v / plain_v if name == "sft" else plain_v / ours_v
        metric = "tokens/s" if name == "sft" else "s/step"
        print(f"{name:<6}{metric:<12}{ours_v:>14.2f}{plain_v:>12.2f}{ratio:>8.3f}")


if __name__ == "__main__":
    main()
