"""Dynamic sampling (``tansaku.trainer.dynamic_sampling``): zero-variance groups are dropped and refilled from the
prompt pool up to a bound, the batch keeps its shape, and the refill is logged. Fast part: a scripted round (fake
rewards, no model); slow part: TRL's GRPOTrainer on the tiny model, generation scripted (certain) and sampled.

Run: pytest tests/test_dynamic_sampling.py            (fast part)
     pytest tests/test_dynamic_sampling.py -m slow    (tiny model)
"""

from __future__ import annotations

import json
import random
from collections import defaultdict, deque
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from fixtures.recipe_args import section_arg

from tansaku.trainer.dynamic_sampling import PREFIX, DynamicSampling, draw_prompts, merge_rows, prompt_key
from tansaku.trainer.recipes import RecipeError, load_recipe

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "trainer" / "recipes" / "rl-tiny.yaml"
ENV_FIXTURES = ROOT / "tests" / "fixtures" / "envs"
G = 2
PAD = 0


def log_columns(size: int) -> dict:
    return {"images": deque(maxlen=size), "prompt": deque(maxlen=size), "completion": deque(maxlen=size),
            "rewards": defaultdict(lambda: deque(maxlen=size)), "advantages": deque(maxlen=size),
            "extra": defaultdict(lambda: deque(maxlen=size))}


class ScriptedRound:
    """A stand-in for the trainer and its generate-and-score: a prompt ``same…`` always scores 1 (zero variance),
    ``mixed…`` scores 1 then 0 within its group. Prompt i's ids are as long as its text, a completion as long as
    its row's position in the group + the prompt's number, so sub-rounds differ in width. It logs the way TRL
    does: one ``reward`` entry per call, each row into the completion log."""

    def __init__(self, pool: list[dict], rows: int, seed: int = 3):
        self.train_dataset, self.num_generations, self.reward_weights = pool, G, torch.tensor([1.0])
        self._metrics = {"train": defaultdict(list)}
        self._logs = log_columns(rows)
        self.args, self.state = SimpleNamespace(seed=seed), SimpleNamespace(global_step=0)
        self._tokenizer = SimpleNamespace(pad_token_id=PAD)
        self.calls: list[list[str]] = []
        self.sampling: DynamicSampling | None = None

    def __call__(self, inputs: list[dict]) -> dict:
        prompts = [row["prompt"] for row in inputs]
        self.calls.append(prompts)
        scores = [1.0 if p.startswith("same") or i % G else 0.0 for i, p in enumerate(prompts)]
        # mixed groups: the first row 0, the second 1 (i % G); same groups: 1, 1
        rewards = torch.tensor(scores).view(-1, G)
        advantages = (rewards - rewards.mean(1, keepdim=True)).flatten()
        prompt_ids = [torch.full((len(p),), 10 + len(p)) for p in prompts]
        completions = [torch.full((1 + i % G + int(p[-1]),), 100 + i) for i, p in enumerate(prompts)]
        width, cwidth = max(len(x) for x in prompt_ids), max(len(x) for x in completions)
        output = {
            "prompt_ids": torch.stack([torch.nn.functional.pad(x, (width - len(x), 0), value=PAD) for x in prompt_ids]),
            "prompt_mask": torch.stack([torch.tensor([0] * (width - len(x)) + [1] * len(x)) for x in prompt_ids]),
            "completion_ids": torch.stack([torch.nn.functional.pad(x, (0, cwidth - len(x)), value=PAD)
                                           for x in completions]),
            "completion_mask": torch.stack([torch.tensor([1] * len(x) + [0] * (cwidth - len(x))) for x in completions]),
            "advantages": advantages,
            "num_items_in_batch": torch.tensor(sum(len(x) for x in completions)),
        }
        self._metrics["train"]["reward"].append(sum(scores) / len(scores))
        self._logs["prompt"].extend(prompts)
        self._logs["completion"].extend(f"c{i}" for i in range(len(prompts)))
        self._logs["rewards"]["answer"].extend(scores)
        self._logs["advantages"].extend(advantages.tolist())
        self.sampling.rewards = torch.tensor(scores).unsqueeze(1)  # what _calculate_rewards hands over
        return output


def rows_of(*prompts: str) -> list[dict]:
    return [{"prompt": p, "task": "t"} for p in prompts for _ in range(G)]


def run(pool: list[str], batch: list[str], max_refills: int, seed: int = 3):
    scripted = ScriptedRound([{"prompt": p, "task": "t"} for p in pool], len(batch) * G, seed)
    scripted.sampling = DynamicSampling(max_refills)
    output = scripted.sampling.refill(scripted, rows_of(*batch), scripted)
    metrics = {k[len(PREFIX):]: v for k, v in scripted._metrics["train"].items() if k.startswith(PREFIX)}
    return scripted, output, metrics


def group_prompts(scripted) -> list[str]:
    return list(scripted._logs["prompt"])[::G]


def test_zero_variance_groups_are_replaced_in_place_and_the_refill_is_logged():
    pool = ["same1", "mixed1", "same2", "mixed2", "mixed3", "mixed4", "mixed5", "mixed6"]
    scripted, output, metrics = run(pool, ["same1", "mixed1", "same2"], max_refills=5)
    trained = group_prompts(scripted)
    assert len(trained) == 3 and trained[1] == "mixed1"  # the group with signal keeps its slot
    assert all(p.startswith("mixed") for p in trained) and len(set(trained)) == 3
    assert metrics["zero_std_groups_kept"] == [0.0] and metrics["zero_std_share"] == [0.0]
    assert metrics["groups_dropped"] == [2.0] and metrics["refills"] == [1.0] and metrics["extra_rollouts"] == [4.0]
    # the batch as trained: every group has signal, the advantages are the refills' own
    assert output["advantages"].view(-1, G).abs().sum(1).gt(0).all()
    assert scripted._metrics["train"]["reward"] == [pytest.approx(5 / 6)]  # the first draw's, alone
    assert list(scripted._logs["rewards"]["answer"]) == [0.0, 1.0] * 3  # the log holds the rows as trained


def test_the_batch_keeps_its_shape_and_rows_are_padded_to_the_widest_sub_round():
    scripted, output, _ = run(["same1", "mixed10", "mixed2"], ["same1", "mixed2"], max_refills=3)
    assert [len(call) for call in scripted.calls] == [4, 2]  # the round, then one group of G for the one dropped
    assert output["prompt_ids"].shape[0] == output["completion_ids"].shape[0] == output["advantages"].shape[0] == 4
    assert output["prompt_ids"].shape[1] == len("mixed10")  # the refill's wider prompt: everyone left-padded to it
    first, second = output["prompt_mask"][2], output["prompt_mask"][0]  # mixed2 (round), mixed10 (refill)
    assert first.tolist() == [0] + [1] * 6 and second.tolist() == [1] * 7
    assert output["prompt_ids"][2, 0] == PAD
    mask = output["completion_mask"]
    assert int(output["num_items_in_batch"]) == int(mask.sum())
    for row, ids in zip(mask, output["completion_ids"], strict=True):  # right-padded: mask ones, then zeros
        n = int(row.sum())
        assert row[:n].all() and not row[n:].any() and (ids[n:] == PAD).all()


def test_the_bound_is_respected_and_what_stays_zero_variance_is_kept_and_counted():
    pool = ["same1", "mixed1", "same2", "same3", "same4", "same5", "same6", "same7", "same8"]
    scripted, output, metrics = run(pool, ["same1", "mixed1", "same2"], max_refills=2)
    assert len(scripted.calls) == 3 and metrics["refills"] == [2.0]  # the round + 2 refill rounds, no more
    assert metrics["groups_dropped"] == [4.0] and metrics["zero_std_groups_kept"] == [2.0]
    assert metrics["zero_std_share"] == [pytest.approx(2 / 3)] and output["advantages"].shape == (6,)
    drawn = [p for call in scripted.calls[1:] for p in call[::G]]
    assert len(set(drawn)) == 4 and not set(drawn) & {"same1", "mixed1", "same2"}  # never a prompt used this round


def test_an_exhausted_pool_stops_the_refill():
    scripted, output, metrics = run(["same1", "mixed1"], ["same1", "mixed1"], max_refills=3)
    assert len(scripted.calls) == 1 and metrics["refills"] == [0.0] and metrics["zero_std_groups_kept"] == [1.0]
    assert group_prompts(scripted) == ["same1", "mixed1"]


def test_no_zero_variance_group_leaves_the_round_as_trl_scored_it():
    scripted = ScriptedRound([{"prompt": "mixed1", "task": "t"}], 4)
    scripted.sampling = DynamicSampling(2)
    scores: list[dict] = []
    output = scripted.sampling.refill(scripted, rows_of("mixed1", "mixed2"), lambda rows: scores.append(scripted(rows))
                                      or scores[-1])
    assert output is scores[0] and scripted._metrics["train"][PREFIX + "refills"] == [0.0]


def test_earlier_log_rows_are_kept_before_the_rounds_rows():
    scripted = ScriptedRound([{"prompt": p, "task": "t"} for p in ("same1", "mixed1", "mixed2")], 8)
    scripted._logs["prompt"].extend(["old1", "old2"])
    scripted._logs["extra"]["tool_variant"].extend([0, 1])
    scripted.sampling = DynamicSampling(1)
    scripted.sampling.refill(scripted, rows_of("same1", "mixed1"), scripted)
    assert list(scripted._logs["prompt"]) == ["old1", "old2", "mixed2", "mixed2", "mixed1", "mixed1"]
    assert list(scripted._logs["extra"]["tool_variant"]) == [0, 1]  # a column this round did not log: untouched


def test_the_draw_is_a_function_of_seed_and_step():
    pool = [f"same{i}" for i in range(30)]
    first = run(pool, ["same0"], 1, seed=5)[0].calls[1]
    assert run(pool, ["same0"], 1, seed=5)[0].calls[1] == first
    assert any(run(pool, ["same0"], 1, seed=s)[0].calls[1] != first for s in (6, 7, 8))


def test_draw_prompts_keeps_the_batch_columns_and_skips_duplicates():
    pool = [{"prompt": "a", "task": "t", "extra": 1}, {"prompt": "a", "task": "t", "extra": 2},
            {"prompt": "b", "task": "t", "extra": 3}]
    rows = draw_prompts(pool, 5, set(), random.Random(0), columns=["prompt", "task"])
    assert sorted(r["prompt"] for r in rows) == ["a", "b"] and all(set(r) == {"prompt", "task"} for r in rows)
    assert draw_prompts(pool, 5, {prompt_key({"prompt": "a"}), prompt_key({"prompt": "b"})}, random.Random(0)) == []


def test_merge_pads_per_token_values_and_keeps_per_row_ones():
    def out(width, rows, ratio_width):
        return {"prompt_ids": torch.ones(rows, 2, dtype=torch.long), "prompt_mask": torch.ones(rows, 2, dtype=torch.long),
                "completion_ids": torch.ones(rows, width, dtype=torch.long),
                "completion_mask": torch.ones(rows, width, dtype=torch.long),
                "tool_mask": torch.ones(rows, width, dtype=torch.long),
                "old_per_token_logps": -torch.ones(rows, width),
                "importance_sampling_ratio": torch.full((rows, ratio_width), 0.5),
                "advantages": torch.ones(rows, width), "num_items_in_batch": torch.tensor(rows * width)}

    merged = merge_rows([out(1, 2, 1), out(3, 2, 3)], [(0, 0), (1, 1)], PAD)
    assert merged["old_per_token_logps"].tolist() == [[-1.0, 0.0, 0.0], [-1.0, -1.0, -1.0]]
    assert merged["tool_mask"].tolist() == [[1, 1, 1], [1, 1, 1]]  # TRL pads tool_mask with 1
    assert merged["importance_sampling_ratio"].tolist() == [[0.5, 1.0, 1.0], [0.5, 0.5, 0.5]]
    assert merged["advantages"].shape == (2, 3) and int(merged["num_items_in_batch"]) == 4
    sequence = merge_rows([out(1, 2, 1), out(3, 2, 1)], [(0, 0), (1, 1)], PAD)  # a sequence-level ratio: [B, 1]
    assert sequence["importance_sampling_ratio"].shape == (2, 1)
    with pytest.raises(ValueError, match="pixel_values"):
        merge_rows([{**out(1, 2, 1), "pixel_values": [1, 2]}, {**out(1, 2, 1), "pixel_values": [1, 2]}],
                   [(0, 0), (1, 1)], PAD)


# ---------------------------------------------------------------- the recipe key


def test_the_key_is_off_by_default_and_checked(tmp_path):
    recipe = load_recipe(RECIPE, ["--output_dir", str(tmp_path)], kind="rl")
    assert recipe.script_args.dynamic_sampling_max_refills == 0
    on = load_recipe(RECIPE, ["--output_dir", str(tmp_path), "--dynamic_sampling_max_refills", "2"], kind="rl")
    assert on.script_args.dynamic_sampling_max_refills == 2
    assert on.record()["script_args"]["dynamic_sampling_max_refills"] == 2  # tansaku_recipe.json says so
    with pytest.raises(RecipeError, match="dynamic_sampling_max_refills: must be >= 0"):
        load_recipe(RECIPE, ["--output_dir", str(tmp_path), "--dynamic_sampling_max_refills", "-1"], kind="rl")
    yaml_file = tmp_path / "r.yaml"
    yaml_file.write_text(RECIPE.read_text(encoding="utf-8") + "dynamic_sampling_max_refills: 3\n", encoding="utf-8")
    assert load_recipe(yaml_file, ["--output_dir", str(tmp_path)], kind="rl").script_args.dynamic_sampling_max_refills == 3


# ---------------------------------------------------------------- TRL's trainer on the tiny model


def question_rows(tmp_path, count: int) -> Path:
    rows = [{"id": f"q{i}", "question": f"雪村製菓の創業者の出身地は？（{i}）", "answer": "白砂市"} for i in range(count)]
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.mark.slow
def test_trl_round_with_zero_variance_groups_is_refilled_and_trains_in_shape(tmp_path, envs_index, monkeypatch):
    """TRL's own GRPOTrainer path (``build_rl_trainer``), generation scripted: the round's first draw answers every
    prompt the same (both groups zero-variance), the refill answers right then wrong. The 2 groups are replaced by
    2 fresh prompts with signal; the round keeps 2 prompts × 2 completions and feeds 2 optimizer steps of 2 rows
    (off-policy: the merged old log-probs are used); the refill is in the logs, the run report's signals and the
    completions table."""
    import polars as pl

    from tansaku.trainer.report import write_run_report
    from tansaku.trainer.rl import build_rl_trainer

    data = question_rows(tmp_path, 8)
    out = tmp_path / "out"
    recipe = load_recipe(RECIPE, ["--output_dir", str(out), *section_arg(RECIPE, "tasks", data=str(data),
                                                                         index=str(envs_index)),
                                  "--max_steps", "2", "--gradient_accumulation_steps", "1",
                                  "--steps_per_generation", "2", "--seed", "3", "--save_steps", "100",
                                  "--dynamic_sampling_max_refills", "2"], kind="rl")
    trainer = build_rl_trainer(recipe)
    assert trainer.dynamic_sampling is not None and trainer.dynamic_sampling.max_refills == 2
    tokenizer = trainer.processing_class
    right = tokenizer.encode("{{白砂市}}<|im_end|>", add_special_tokens=False)
    wrong = tokenizer.encode("{{黒松市}}<|im_end|>", add_special_tokens=False)
    calls: list[list[str]] = []

    def scripted(prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        calls.append([tokenizer.decode(ids) for ids in prompt_ids])
        if len(calls) == 1:  # the round as first drawn: every completion the same
            return [list(right) for _ in prompt_ids], None
        return [list(right if i % 2 == 0 else wrong) for i in range(len(prompt_ids))], None

    monkeypatch.setattr(trainer, "_generate_single_turn", scripted)
    shapes = []
    prepare = trainer._prepare_inputs

    def recording(batch):
        inputs = prepare(batch)
        shapes.append((*(inputs[k].shape[0] for k in ("prompt_ids", "completion_ids", "advantages")),
                       inputs["old_per_token_logps"].shape == inputs["completion_ids"].shape))
        return inputs

    monkeypatch.setattr(trainer, "_prepare_inputs", recording)
    trainer.train()

    assert trainer.state.global_step == 2 and shapes == [(2, 2, 2, True)] * 2  # 2 rows, twice
    assert [len(call) for call in calls] == [4, 4]  # the round, then one refill of its 2 groups
    first = trainer.state.log_history[0]
    assert first["frac_reward_zero_std"] == 1.0  # TRL's share, of the round as first drawn
    assert (first[PREFIX + "refills"], first[PREFIX + "groups_dropped"], first[PREFIX + "extra_rollouts"]) == (1, 2, 4)
    assert first[PREFIX + "zero_std_share"] == 0 and first[PREFIX + "zero_std_groups_kept"] == 0
    parquet = pl.read_parquet(out / "completions" / "completions_00001.parquet")
    question = lambda text: text.rsplit("（", 1)[-1].split("）")[0]  # noqa: E731
    trained = {question(m["content"]) for p in parquet["prompt"].to_list() for m in p if m["role"] == "user"}
    assert len(parquet) == 4 and len(trained) == 2 and not trained & {question(t) for t in calls[0]}
    assert (parquet["advantage"].abs() > 0).all()  # every trained group has signal
    report = write_run_report(out)
    assert report["per_step"][0]["signals"][PREFIX + "refills"] == 1
    assert report["per_step"][0]["zero_variance_group_share"] == 0


@pytest.mark.slow
def test_sampled_tiny_run_logs_the_refill(tmp_path, envs_index):
    """A real (sampled) tiny-model run with the key on: the metrics reach trainer_state.json and run_report.json,
    and refills never pass the bound."""
    from tansaku.trainer.rl import run_rl

    data = question_rows(tmp_path, 8)
    out = tmp_path / "out"
    run_rl(RECIPE, ["--output_dir", str(out), *section_arg(RECIPE, "tasks", data=str(data), index=str(envs_index)),
                    "--max_steps", "1", "--steps_per_generation", "2", "--max_completion_length", "32",
                    "--seed", "3", "--dynamic_sampling_max_refills", "1"], skip_readiness=True)
    history = json.loads((out / "trainer_state.json").read_text(encoding="utf-8"))["log_history"]
    logged = history[0]
    assert 0 <= logged[PREFIX + "refills"] <= 1 and 0 <= logged[PREFIX + "zero_std_share"] <= 1
    assert logged[PREFIX + "groups_dropped"] >= logged[PREFIX + "refills"]
    report = json.loads((out / "run_report.json").read_text(encoding="utf-8"))
    assert PREFIX + "zero_std_share" in report["signals"]
