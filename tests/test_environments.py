"""The TRL environment class: tool discovery as TRL does it, schemas, budget, and one GRPO step per task on CPU."""

import inspect

import pytest
from fixtures.envs.helpers import build_fixture_index, task_rows

from tansaku.envs.environments import SearchEnvironment, make_environment_factory, tool_methods
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


def test_reset_tools_and_errors_as_text(index_dir):
    environment = make_environment_factory(TASKS["multihop_qa"], index_dir)()
    row = {**task_rows("multihop")[0], "prompt": [{"role": "user", "content": "x"}]}
    assert environment.reset(**row) is None
    assert "f002" in environment.search("雪村清一郎 出身")
    assert "白砂市出身" in environment.open_doc("f002")
    assert environment.open_doc("nope").startswith("Error")
    assert environment.open_doc("f002", offset=10**6).startswith("Error")
    assert environment.search('{"bool": {"must": [{"regexp": {"text": ".*"}}]}}').startswith("Error")


def test_call_budget_is_per_episode(index_dir):
    from tansaku.envs.search import open_index

    environment = SearchEnvironment(open_index(str(index_dir)), max_tool_calls=2)
    environment.reset(question="q")
    assert not environment.search("白砂市").startswith("Error")
    assert not environment.open_doc("f004").startswith("Error")
    assert "budget" in environment.search("白砂市")
    environment.reset(question="q2")
    assert not environment.search("白砂市").startswith("Error") and environment.tool_calls_made == 1


def test_factory_shares_one_backend(index_dir):
    factory = make_environment_factory(TASKS["egov_mcq"], index_dir)
    first, second = factory(), factory()
    assert first is not second and first._tools.backend is second._tools.backend


@pytest.mark.slow
@pytest.mark.parametrize("task_name", ["multihop_qa", "egov_mcq", "deepresearch"])
def test_one_grpo_step_with_environment_factory(task_name, index_dir, tiny_model_path, tmp_path, monkeypatch):
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    from datasets import Dataset
    from transformers import AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from tansaku.core.llm import ScriptedLLM

    task = TASKS[task_name]
    fixture = {"multihop_qa": "multihop", "egov_mcq": "egov_mcq", "deepresearch": "deepresearch"}[task_name]
    rows = task.to_trl_rows(task_rows(fixture)[:2])
    for row in rows:
        row.pop("aliases", None)  # ragged optional column; not needed for one step
    judge = ScriptedLLM(lambda request: '{"scores": [1, 0, 1, 0]}' if "4 項目" in request.messages[-1]["content"]
                        else '{"scores": [1, 0, 0]}')
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_path)
    args = GRPOConfig(
        output_dir=str(tmp_path), max_steps=1, per_device_train_batch_size=2, num_generations=2,
        max_completion_length=48, max_tool_calling_iterations=2, use_vllm=False, use_cpu=True,
        reward_weights=task.weights(), report_to=[], logging_steps=1, save_strategy="no", temperature=1.0,
    )
    trainer = GRPOTrainer(model=str(tiny_model_path), processing_class=tokenizer, args=args,
                          reward_funcs=task.reward_functions(judge=judge), train_dataset=Dataset.from_list(rows),
                          environment_factory=make_environment_factory(task, index_dir))
    assert sorted(t.__name__ for t in trainer.tools) == ["open_doc", "search"]
    trainer.train()
    logged = trainer.state.log_history[0]
    for name in task.reward_weights:
        assert f"rewards/{name}/mean" in logged
    assert "tools/call_frequency" in logged
