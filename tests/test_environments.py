"""The TRL environment class: tool discovery as TRL does it, schemas, budget, and one GRPO step per task on CPU."""

import inspect
from pathlib import Path

import pytest
from fixtures.envs.helpers import build_fixture_index, task_rows

from tansaku.envs.environments import SearchEnvironment, make_environment_factory, tool_methods, tool_schemas
from tansaku.envs.tasks import TASKS


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory):
    return build_fixture_index(tmp_path_factory.mktemp("envs_index"))


def test_trl_sees_exactly_the_two_tools(index_dir):
    environment = make_environment_factory(TASKS["multihop_qa"], index_dir)()
    # The same listing TRL 1.16 does in GRPOTrainer.__init__ (functions on the class, not the instance).
    members = [name for name, _ in inspect.getmembers(type(environment), predicate=inspect.isfunction)]
    assert "reset" in members and "get_reward" not in members
    assert sorted(tool_methods(environment)) == ["open_doc", "search"]


def test_tool_schemas_come_from_hints_and_docstrings(index_dir):
    from transformers.utils import get_json_schema

    environment = make_environment_factory(TASKS["multihop_qa"], index_dir)()
    schemas = {s["function"]["name"]: s["function"] for s in map(get_json_schema, tool_methods(environment).values())}
    assert schemas["search"]["parameters"]["required"] == ["query"]
    assert schemas["search"]["parameters"]["properties"]["size"]["type"] == "integer"
    assert schemas["open_doc"]["parameters"]["properties"]["doc_id"]["description"]
    assert "self" not in schemas["open_doc"]["parameters"]["properties"]


def test_reset_tools_and_failures_raise(index_dir):
    from tansaku.envs.tools import ToolError

    environment = make_environment_factory(TASKS["multihop_qa"], index_dir)()
    row = {**task_rows("multihop")[0], "prompt": [{"role": "user", "content": "x"}]}
    assert environment.reset(**row) is None
    assert "f002" in environment.search("雪村清一郎 出身")
    assert "白砂市出身" in environment.open_doc("f002")
    with pytest.raises(ToolError, match="no document"):
        environment.open_doc("nope")
    with pytest.raises(ToolError, match="past the end"):
        environment.open_doc("f002", offset=10**6)
    with pytest.raises(ToolError):
        environment.search('{"bool": {"must": [{"regexp": {"text": ".*"}}]}}')


def test_call_budget_is_per_episode(index_dir):
    from tansaku.envs.search import open_index
    from tansaku.envs.tools import ToolError

    environment = SearchEnvironment(open_index(str(index_dir)), max_tool_calls=2)
    environment.reset(question="q")
    environment.search("白砂市")
    environment.open_doc("f004")
    with pytest.raises(ToolError, match="budget of 2 calls"):
        environment.search("白砂市")
    environment.reset(question="q2")
    assert environment.search("白砂市") and environment.tool_calls_made == 1


def test_factory_shares_one_backend(index_dir):
    factory = make_environment_factory(TASKS["egov_mcq"], index_dir)
    first, second = factory(), factory()
    assert first is not second and first._backend is second._backend


def test_task_tools_config_reaches_the_tools(index_dir):
    from dataclasses import replace

    task = replace(TASKS["multihop_qa"], tools_config={"top_k": 2, "max_k": 3, "page_chars": 30})
    environment = make_environment_factory(task, index_dir)()
    environment.reset(id="q1", prompt=task.build_prompt({"question": "白砂市は？"}))
    assert environment.search("白砂市").count("doc_id:") == 2  # the task's top_k is the default size
    [size] = [s["function"]["parameters"]["properties"]["size"] for s in tool_schemas(environment)
              if s["function"]["name"] == "search"]
    assert "2" in size["description"] and "3" in size["description"]  # what the model is told
    from tansaku.envs.tools import ToolError

    with pytest.raises(ToolError, match="between 1 and 3"):
        environment.search("白砂市", 4)
    assert len(environment.open_doc("f004").split("\n")[1]) == 30


def test_trl_path_each_row_renders_its_own_variant(index_dir, tmp_path):
    """What GRPOTrainer does with tansaku.trainer.rl's factories (grpo_trainer.py: probe each factory at init,
    render each prompt with its environment name's probe schemas, reset per rollout): over 40 rows the prompts
    carry several variants, and each rollout's environment reports the variant its prompt showed."""
    import json

    from fixtures.recipe_args import section_arg
    from transformers.utils import get_json_schema

    from tansaku.envs.tools import SEARCH_SUMMARIES
    from tansaku.trainer.recipes import load_recipe
    from tansaku.trainer.rl import build_dataset, build_environments

    rows = [{"id": f"r{i}", "question": f"質問{i}", "answer": "白砂市"} for i in range(40)]
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    rl_tiny = Path(__file__).resolve().parents[1] / "trainer" / "recipes" / "rl-tiny.yaml"
    recipe = load_recipe(rl_tiny, ["--output_dir", str(tmp_path / "out"),
                                   *section_arg(rl_tiny, "tasks", data=str(data), index=str(index_dir))], kind="rl")
    dataset = build_dataset(recipe)
    factories = build_environments(recipe)
    # TRL __init__: one probe per factory; its tool functions are what every prompt of that name shows.
    probes = {name: factory() for name, factory in factories.items()}
    env_tools = {name: list(tool_methods(probe).values()) for name, probe in probes.items()}
    shown = set()
    for row in dataset:
        [search] = [f for f in env_tools[row["environment"]] if f.__name__ == "search"]
        description = get_json_schema(search)["function"]["description"]
        rollout_env = factories[row["environment"]]()  # TRL: a pooled instance, then reset(**row)
        rollout_env.reset(**{k: v for k, v in row.items() if k != "environment"})
        assert description == SEARCH_SUMMARIES[rollout_env.tool_variant]  # recorded = shown
        shown.add(description)
    assert len(shown) > 1


@pytest.mark.slow
@pytest.mark.parametrize("task_name", ["multihop_qa", "egov_mcq", "deepresearch"])
def test_one_grpo_step_with_environment_factory(task_name, index_dir, tiny_model_path, tmp_path, monkeypatch):
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    from datasets import Dataset
    from transformers import AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from tansaku.core.llm import ScriptedLLM
    from tansaku.envs.environments import episode_variant, variant_factories
    from tansaku.trainer.rl_rewards import environment_name

    task = TASKS[task_name]
    fixture = {"multihop_qa": "multihop", "egov_mcq": "egov_mcq", "deepresearch": "deepresearch"}[task_name]
    rows = task.to_trl_rows(task_rows(fixture)[:2])
    for row in rows:
        row.pop("aliases", None)  # ragged optional column; not needed for one step
        row["environment"] = environment_name(task_name, episode_variant(task, row))  # TRL routes by it
    judge = ScriptedLLM(lambda request: '{"scores": [1, 0, 1, 0]}' if "4 項目" in request.messages[-1]["content"]
                        else '{"scores": [1, 0, 0]}')
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_path)
    args = GRPOConfig(
        output_dir=str(tmp_path), max_steps=1, per_device_train_batch_size=2, num_generations=2,
        max_completion_length=48, max_tool_calling_iterations=2, use_vllm=False, use_cpu=True,
        reward_weights=list(task.reward_weights.values()), report_to=[], logging_steps=1, save_strategy="no",
        temperature=1.0,
    )
    trainer = GRPOTrainer(model=str(tiny_model_path), processing_class=tokenizer, args=args,
                          reward_funcs=task.reward_functions(judge=judge), train_dataset=Dataset.from_list(rows),
                          environment_factory={environment_name(task_name, *pair): f
                                               for pair, f in variant_factories(task, index_dir).items()})
    # One probe per variant factory: four search and four open_doc functions, each with its variant's text.
    assert sorted({t.__name__ for t in trainer.tools}) == ["open_doc", "search"] and len(trainer.tools) == 8
    assert len({t.__doc__ for t in trainer.tools if t.__name__ == "search"}) == 4
    trainer.train()
    logged = trainer.state.log_history[0]
    for name in task.reward_weights:
        assert f"rewards/{name}/mean" in logged
    assert "tools/call_frequency" in logged and "tools/failure_frequency" in logged
