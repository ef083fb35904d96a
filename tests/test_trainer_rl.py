"""`train rl`: task mixing and per-task rewards, the readiness gate (scripted model, fast), and on the tiny
model 3 GSPO steps over the multi-hop search environment + resume from a checkpoint (slow).

Run: pytest tests/test_trainer_rl.py            (fast part)
     pytest tests/test_trainer_rl.py -m slow    (tiny-model GSPO)
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from fixtures.recipe_args import section_arg

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "trainer" / "recipes" / "rl-tiny.yaml"
ENV_FIXTURES = ROOT / "tests" / "fixtures" / "envs"
COMPONENTS = ("answer_reward", "format_reward", "tool_call_reward", "zh_mix_penalty")
GPU = torch.cuda.is_available()  # TrainingArguments refuses bf16 on a machine without one (unless use_cpu)


def fixture_task(index, **changes) -> list[str]:
    """rl-tiny.yaml trains on the examples/ mini-wiki; these tests search the fixture index, so they ask its
    questions: ``--tasks`` with the fixture data and ``index``."""
    return section_arg(RECIPE, "tasks", data=str(ENV_FIXTURES / "multihop.jsonl"), index=str(index), **changes)


def two_task_recipe(tmp_path):
    from tansaku.trainer.recipes import load_recipe

    tasks = [{"name": "multihop_qa", "data": str(ENV_FIXTURES / "multihop.jsonl"), "index": "idx", "ratio": 1},
             {"name": "egov_mcq", "data": str(ENV_FIXTURES / "egov_mcq.jsonl"), "index": "idx", "ratio": 1,
              "reward_weights": {"format_reward": 0.5}}]
    return load_recipe(RECIPE, ["--output_dir", str(tmp_path), "--tasks", json.dumps(tasks), "--mix_size", "8"],
                       kind="rl")


def test_task_mix_routes_rows_and_scores_each_task_with_its_own_rewards(tmp_path):
    from tansaku.trainer.rl import build_dataset
    from tansaku.trainer.rl_rewards import build_rewards, task_of_environment

    recipe = two_task_recipe(tmp_path)
    dataset = build_dataset(recipe)
    tasks = [task_of_environment(e) for e in dataset["environment"]]
    assert len(dataset) == 8 and sorted(set(tasks)) == ["egov_mcq", "multihop_qa"] and tasks.count("egov_mcq") == 4
    assert all("@tools-v" in e for e in dataset["environment"])  # each row routed to its description variant
    assert all(p[0]["role"] == "system" and p[1]["role"] == "user" for p in dataset["prompt"])

    funcs, weights, groups = build_rewards(recipe)
    names = [f.__name__ for f in funcs]
    assert names[:4] == [f"multihop_qa/{c}" for c in COMPONENTS]
    assert names[4] == "egov_mcq/mcq_reward" and weights[names.index("egov_mcq/format_reward")] == 0.5
    assert groups["egov_mcq"][1] == "egov_mcq/mcq_reward"

    rows = [dataset[i] for i in range(len(dataset))]
    completions = [[{"role": "assistant", "reasoning_content": "確認した。",
                     "content": "{{" + (r["answer"] if task_of_environment(r["environment"]) == "multihop_qa" else
                                        str(r["answer_index"] + 1)) + "}}"}] for r in rows]
    columns = {k: [r[k] for r in rows] for k in rows[0]}
    answer = funcs[names.index("multihop_qa/answer_reward")](completions, **columns)
    mcq = funcs[names.index("egov_mcq/mcq_reward")](completions, **columns)
    for row, a, m in zip(rows, answer, mcq):
        if task_of_environment(row["environment"]) == "multihop_qa":
            assert a == 1.0 and m is None  # None: TRL leaves this reward out for that row
        else:
            assert a is None and m == 1.0


def test_unknown_reward_override_is_refused(tmp_path):
    from tansaku.trainer.recipes import RecipeError, load_recipe
    from tansaku.trainer.rl_rewards import build_rewards

    recipe = load_recipe(RECIPE, ["--output_dir", str(tmp_path),
                                  *section_arg(RECIPE, "tasks", reward_weights={"answr_reward": 2})], kind="rl")
    with pytest.raises(RecipeError, match="unknown components \\['answr_reward'\\]"):
        build_rewards(recipe)


def test_missing_task_data_names_the_task(tmp_path):
    from tansaku.trainer.recipes import RecipeError, load_recipe
    from tansaku.trainer.rl import build_dataset

    recipe = load_recipe(RECIPE, ["--output_dir", str(tmp_path),
                                  *section_arg(RECIPE, "tasks", data=str(tmp_path / "none.jsonl"))], kind="rl")
    with pytest.raises(RecipeError, match="task multihop_qa: cannot read"):
        build_dataset(recipe)


@pytest.mark.parametrize("policy, ready", [("never", False), ("always", False), ("every_other", True)])
def test_readiness_gate_refuses_runs_without_learning_signal(tmp_path, envs_index, policy, ready):
    """Never correct → pass@k = 0; always correct → every group has zero variance; mixed → ready."""
    from tansaku.core.llm import ScriptedLLM
    from tansaku.envs.evaluate import NotReadyForRL
    from tansaku.trainer.readiness import check_readiness
    from tansaku.trainer.recipes import load_recipe

    rows = {json.loads(line)["question"]: json.loads(line)["answer"]
            for line in (ENV_FIXTURES / "multihop.jsonl").read_text(encoding="utf-8").splitlines()}
    calls: dict[str, int] = {}

    def respond(request):
        question = next(q for q in rows if q in request.messages[-1]["content"])
        calls[question] = calls.get(question, 0) + 1
        right = policy == "always" or (policy == "every_other" and calls[question] % 2 == 1)
        return {"content": "{{" + (rows[question] if right else "わかりません") + "}}", "reasoning": "調べた。"}

    recipe = load_recipe(RECIPE, ["--output_dir", str(tmp_path / "out"), *fixture_task(envs_index),
                                  "--readiness", "{rows: 4, k: 2}"], kind="rl")
    client = ScriptedLLM(respond)
    if ready:
        (report,) = check_readiness(recipe, "unused", client=client)
        assert report["pass@2"] == 1.0 and report["zero_variance_group_share"] == 0.0
    else:
        with pytest.raises(NotReadyForRL, match="pass@2 = 0.000" if policy == "never" else "zero-variance"):
            check_readiness(recipe, "unused", client=client)
    assert (tmp_path / "out" / "readiness" / "multihop_qa" / "report.json").is_file()


@pytest.mark.slow
def test_three_gspo_steps_log_every_component_and_resume_replays_the_same_data(tmp_path, envs_index,
                                                                                tiny_model_path):
    import polars as pl

    from tansaku.trainer.rl import run_rl

    first = tmp_path / "first"
    common = [*fixture_task(envs_index), "--max_completion_length", "48", "--save_steps", "2", "--seed", "3"]
    result = run_rl(RECIPE, ["--output_dir", str(first), "--max_steps", "3", *common], skip_readiness=True)
    assert result["global_step"] == 3
    assert json.loads((first / "run_report.json").read_text(encoding="utf-8"))["steps"] == 3  # trainer/report.py
    assert (first / "learning_curves.png").read_bytes()[:4] == b"\x89PNG" and "report_ok" in result
    card = (first / "README.md").read_text(encoding="utf-8")  # TRL's model card, written with each checkpoint
    assert "huggingface.co/None" not in card and "SmolLM2-135M-Instruct" in card

    state = json.loads((first / "trainer_state.json").read_text(encoding="utf-8"))
    steps = [e for e in state["log_history"] if "loss" in e]
    assert [e["step"] for e in steps] == [1, 2, 3]
    # rl-tiny trains each rollout round (4 prompts × 2) as 2 minibatches: rounds start at steps 1 and 3
    rounds = [e for e in steps if "reward" in e]
    assert [e["step"] for e in rounds] == [1, 3] and all("clip_ratio/region_mean" in e for e in steps)
    for entry in rounds:
        for component in COMPONENTS:
            assert f"rewards/{component}/mean" in entry
        assert "frac_reward_zero_std" in entry and "tools/call_frequency" in entry
    parquet = pl.read_parquet(first / "completions" / "completions_00003.parquet")
    assert len(parquet) == 8 and set(COMPONENTS) <= set(parquet.columns) and "advantage" in parquet.columns
    assert parquet["tool_variant"].is_between(0, 3).all()  # each completion's tool description variant
    assert parquet["prompt"][0][0]["role"] == "system"  # the task's prompt (tools are rendered by the template)
    # train rescore: the stored rollouts of a real run score the same again with the same reward functions.
    from tansaku.trainer.rescore import rescore

    rescored = rescore(first / "completions", "multihop_qa")
    assert rescored["rows"] == 16 and rescored["unchanged"], rescored["components"]

    # Resume in a fresh folder from checkpoint-2: it must continue at step 3 with step 3's prompts.
    resumed = tmp_path / "resumed"
    resumed.mkdir()
    shutil.move(first / "checkpoint-2", resumed / "checkpoint-2")
    # The first run's other weights are read no more: ~2 GB a CI disk need not hold while the resume writes its own.
    shutil.rmtree(first / "checkpoint-3")
    (first / "model.safetensors").unlink()
    again = run_rl(RECIPE, ["--output_dir", str(resumed), "--max_steps", "3", "--resume_from_checkpoint", "latest",
                            *common])
    assert again["global_step"] == 3
    assert sorted(p.name for p in (resumed / "completions").iterdir()) == ["completions_00003.parquet"]
    replay = pl.read_parquet(resumed / "completions" / "completions_00003.parquet")
    assert replay["prompt"].to_list() == parquet["prompt"].to_list()


@pytest.mark.slow
def test_prompt_order_is_a_function_of_seed_and_epoch(tmp_path, envs_index, tiny_model_path):
    """What resume relies on: a fresh trainer told 'epoch 1' yields the same batches as a trainer that ran
    through epoch 0 first (TRL's own sampler would repeat epoch 0's order after a restart)."""
    from tansaku.trainer.recipes import load_recipe
    from tansaku.trainer.rl import build_rl_trainer

    recipe = load_recipe(RECIPE, ["--output_dir", str(tmp_path), *fixture_task(envs_index), "--seed", "3"],
                         kind="rl")

    def epoch_orders(trainer, epochs):
        loader = trainer.get_train_dataloader()
        orders = {}
        for epoch in epochs:
            loader.set_epoch(epoch)
            orders[epoch] = [row["id"] for batch in loader for row in batch]
        return orders

    straight = epoch_orders(build_rl_trainer(recipe), [0, 1, 2])
    restarted = epoch_orders(build_rl_trainer(recipe), [1, 2])
    assert restarted[1] == straight[1] and restarted[2] == straight[2]
    assert len({tuple(order) for order in straight.values()}) > 1  # epochs are reshuffled


@pytest.mark.slow
def test_grpo_step_shows_each_row_its_tool_variant_and_counts_failed_calls(tmp_path, envs_index, monkeypatch):
    """The TRL path end to end (``build_rl_trainer``), with generation scripted so it is cheap and certain:
    each prompt TRL renders carries its own row's description variant (two rows, two variants, one step), the
    variant is logged per completion, and a call that raises (unknown doc id) shows up in
    ``tools/failure_frequency`` while the model reads TRL's ``{'error': …}`` content."""
    import polars as pl

    from tansaku.envs.environments import episode_variant
    from tansaku.envs.tasks import TASKS
    from tansaku.envs.tools import SEARCH_SUMMARIES
    from tansaku.trainer.recipes import load_recipe
    from tansaku.trainer.rl import build_rl_trainer

    task, rows, wanted, i = TASKS["multihop_qa"], [], set(range(len(SEARCH_SUMMARIES))), 0
    while wanted:  # one row per variant: whichever two rows the step draws, their variants differ
        row = {"id": f"v{i}", "question": f"雪村製菓の創業者の出身地は？（{i}）", "answer": "白砂市"}
        if episode_variant(task, row, seed=3) in wanted:
            wanted.discard(episode_variant(task, row, seed=3))
            rows.append(row)
        i += 1
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    recipe = load_recipe(RECIPE, ["--output_dir", str(tmp_path / "out"),
                                  *section_arg(RECIPE, "tasks", data=str(data), index=str(envs_index)),
                                  "--max_steps", "1", "--seed", "3", "--save_steps", "100",
                                  "--steps_per_generation", "2"], kind="rl")  # a round of 2 prompts, one step
    trainer = build_rl_trainer(recipe)
    tokenizer = trainer.processing_class
    bad_call = tokenizer.encode('<tool_call>\n{"name": "open_doc", "arguments": {"doc_id": "nope"}}\n</tool_call>'
                                "<|im_end|>", add_special_tokens=False)
    answer = tokenizer.encode("{{白砂市}}<|im_end|>", add_special_tokens=False)
    first_turn: list[tuple[str, int]] = []

    def scripted(prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        if not first_turn:  # the first call of the step: the prompts as TRL rendered them, tools included
            first_turn.extend((tokenizer.decode(ids), env.tool_variant)
                              for ids, env in zip(prompt_ids, trainer.environments, strict=True))
            return [list(bad_call) for _ in prompt_ids], None
        return [list(answer) for _ in prompt_ids], None

    monkeypatch.setattr(trainer, "_generate_single_turn", scripted)
    trainer.train()

    assert len({variant for _, variant in first_turn}) == 2
    for text, variant in first_turn:
        for other, summary in enumerate(SEARCH_SUMMARIES):
            assert (json.dumps(summary, ensure_ascii=False)[1:-1] in text) == (other == variant)
    logged = trainer.state.log_history[0]
    assert logged["tools/failure_frequency"] > 0 and logged["tools/distinct_description_variants"] == 2
    parquet = pl.read_parquet(tmp_path / "out" / "completions" / "completions_00001.parquet")
    assert sorted(parquet["tool_variant"].to_list()) == sorted(v for _, v in first_turn)
    tool_contents = [m["content"] for c in parquet["completion"].to_list() for m in c if m["role"] == "tool"]
    assert tool_contents and all(t.startswith("{'error': \"no document with doc_id 'nope'") for t in tool_contents)


# ---------------------------------------------------------------- readiness goes through the training backend


@pytest.mark.parametrize("args, spec, options", [
    (["--use_cpu", "true", "--bf16", "true"], "transformers:/m", {"dtype": "bfloat16", "device": "cpu"}),
    (["--use_cpu", "true", "--bf16", "false"], "transformers:/m", {"dtype": "float32", "device": "cpu"}),
    (["--use_cpu", "false", "--use_vllm", "true", "--bf16", str(GPU), "--vllm_gpu_memory_utilization", "0.4"],
     "vllm:/m", {"dtype": "bfloat16" if GPU else "float32", "gpu_memory_utilization": 0.4}),
    (["--use_cpu", "false", "--use_vllm", "true", "--vllm_mode", "server", "--model_name_or_path", "Qwen/Qwen3-1.7B"],
     "http:Qwen/Qwen3-1.7B@http://localhost:8000/v1", {}),
    (["--use_cpu", "false", "--use_vllm", "true", "--vllm_mode", "server",
      "--vllm_server_base_url", "http://gpu7:8001/"], "http:/m@http://gpu7:8001/v1", {}),
    (["--use_vllm", "false", "--readiness", "{model: 'http:judge@http://h:1'}"], "http:judge@http://h:1", {}),
])
def test_readiness_samples_through_the_backend_training_generates_with(tmp_path, args, spec, options):
    from tansaku.trainer.readiness import readiness_model, readiness_options
    from tansaku.trainer.recipes import load_recipe

    recipe = load_recipe(RECIPE, ["--output_dir", str(tmp_path), *args], kind="rl")
    assert readiness_model(recipe, "/m") == spec  # "/m": where resolve_model found the recipe's model
    assert readiness_options(recipe) == options


def test_readiness_against_a_trl_vllm_server_posts_chat_completions_to_it(tmp_path, envs_index):
    """``trl vllm-serve`` is vLLM's OpenAI server: the check's rollouts reach it as chat completions for the
    recipe's model (here a canned server, whose answers are never right: the check refuses, after asking)."""
    import urllib.request

    from tansaku.envs.evaluate import NotReadyForRL
    from tansaku.testing.canned_server import ServerThread
    from tansaku.trainer.readiness import check_readiness
    from tansaku.trainer.recipes import load_recipe

    with ServerThread("trl") as url:
        recipe = load_recipe(RECIPE, ["--output_dir", str(tmp_path), *fixture_task(envs_index),
                                      "--use_cpu", "false", "--use_vllm", "true", "--vllm_mode", "server",
                                      "--vllm_server_base_url", url, "--model_name_or_path", "Org/served-name",
                                      "--readiness", "{rows: 2, k: 1, max_tokens: 32}"], kind="rl")
        with pytest.raises(NotReadyForRL, match="pass@1 = 0.000"):
            check_readiness(recipe, "unused-local-path")
        with urllib.request.urlopen(f"{url}/stats", timeout=5) as resp:
            assert json.loads(resp.read())["requests"] >= 2
        with urllib.request.urlopen(f"{url}/stats/last", timeout=5) as resp:
            assert json.loads(resp.read())["body"]["model"] == "Org/served-name"
    assert (tmp_path / "readiness" / "multihop_qa" / "report.json").is_file()


@pytest.mark.slow
@pytest.mark.parametrize("bf16", ["false", "true"])
def test_the_cpu_paths_are_wired_into_the_trainer(tmp_path, envs_index, bf16):
    """On CPU the trainer generates through the prefix / turn-cache wrapper (on a bf16 copy when the fp32 policy
    trains under bf16) and its training forward shares the rollouts' prompts."""
    from tansaku.core.llm.turn_cache import TurnCache
    from tansaku.trainer.cpu.prefix_train import SharedPrefix
    from tansaku.trainer.recipes import load_recipe
    from tansaku.trainer.rl import build_rl_trainer

    recipe = load_recipe(RECIPE, ["--output_dir", str(tmp_path), *fixture_task(envs_index), "--bf16", bf16],
                         kind="rl")
    trainer = build_rl_trainer(recipe)
    copy = getattr(trainer.model.generate, "bf16_copy", None)
    assert (copy is not None) == (bf16 == "true")
    assert isinstance(trainer.turns, TurnCache) and trainer.turns.weights is trainer.model
    assert isinstance(trainer.shared_prefix, SharedPrefix)
