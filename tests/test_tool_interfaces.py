"""Tool-interface variants (envs/tool_interfaces.py): find/read next to search/open_doc, drawn per episode, opt-in,
reaching the prompt (TRL's class listing, the schemas, the system prompt), the environment, RL routing, eval, SFT."""

import inspect
import json
from dataclasses import replace
from pathlib import Path

import pytest
from fixtures.envs.helpers import task_rows, tool_results

from tansaku.core.llm import ScriptedLLM
from tansaku.envs.environments import (
    FindReadEnvironment,
    SearchEnvironment,
    call_tool,
    episode_interface,
    episode_variant,
    make_environment_factory,
    tool_methods,
    tool_schemas,
    variant_factories,
)
from tansaku.envs.search import open_index
from tansaku.envs.tasks import TASKS
from tansaku.envs.tool_interfaces import FIND_SUMMARIES, READ_SUMMARIES, draw_interface, interface_text
from tansaku.envs.tools import N_VARIANTS, ToolsConfig, draw_variant

TWO = {"interface_variants": 2}
TASK = replace(TASKS["multihop_qa"], tools_config={**TASKS["multihop_qa"].tools_config, **TWO})
RL_TINY = Path(__file__).resolve().parents[1] / "trainer" / "recipes" / "rl-tiny.yaml"


def listed(environment) -> list[str]:
    """The tool names TRL 1.16 reads: public functions of the *class*, but reset/get_reward."""
    return sorted(n for n, _ in inspect.getmembers(type(environment), predicate=inspect.isfunction)
                  if n not in ("reset", "get_reward") and not n.startswith("_"))


def test_interface_one_reaches_the_class_and_the_schemas(envs_index):
    backend = open_index(str(envs_index))
    for variant in range(N_VARIANTS):
        environment = SearchEnvironment(backend, ToolsConfig(interface_variant=1), variant=variant)
        assert type(environment) is FindReadEnvironment and environment.tool_interface == 1
        assert listed(environment) == ["find", "read"] == sorted(tool_methods(environment))
        schemas = {s["function"]["name"]: s["function"] for s in tool_schemas(environment)}
        assert schemas["find"]["description"] == FIND_SUMMARIES[variant]
        assert schemas["read"]["description"] == READ_SUMMARIES[variant]
        keywords = schemas["find"]["parameters"]["properties"]["keywords"]
        assert keywords["type"] == "array" and keywords["items"] == {"type": "string"} and keywords["description"]
        assert schemas["find"]["parameters"]["required"] == ["keywords"]
        assert schemas["find"]["parameters"]["properties"]["top_k"]["type"] == "integer"
        assert set(schemas["read"]["parameters"]["properties"]) == {"doc_id", "page"}
    short = SearchEnvironment(backend, ToolsConfig(interface_variant=1, short_descriptions=True))
    assert [s["function"]["name"] for s in tool_schemas(short)] == ["find", "read"]


def test_each_interface_accepts_exactly_its_own_calls(envs_index):
    backend = open_index(str(envs_index))
    config = ToolsConfig(page_chars=30, interface_variants=2)
    zero = SearchEnvironment(backend, config, interface=0)
    one = SearchEnvironment(backend, config, interface=1)
    old, new = tool_methods(zero), tool_methods(one)
    # The same backend calls and replies: keywords joined into one plain-text query; page p = offset p × page size.
    found, failed = call_tool(new, "find", {"keywords": ["雪村清一郎", "出身"]})
    assert not failed and "f002" in found and found == call_tool(old, "search", {"query": "雪村清一郎 出身"})[0]
    page, failed = call_tool(new, "read", {"doc_id": "f002", "page": 1})
    by_offset = call_tool(old, "open_doc", {"doc_id": "f002", "offset": 30})[0]
    assert not failed and page.split("\n")[:2] == by_offset.split("\n")[:2]
    assert page.endswith('[continues: read(doc_id="f002", page=2)]')  # the reply names the next call in its shape
    # Calls in the other interface's shape are tool errors ({'error': …}), as TRL would show them.
    for functions, name, arguments in ((new, "search", {"query": "白砂市"}), (new, "open_doc", {"doc_id": "f002"}),
                                       (new, "find", {"query": "白砂市"}), (new, "find", {"keywords": "白砂市"}),
                                       (new, "read", {"doc_id": "f002", "offset": 30}),
                                       (new, "find", {"keywords": ["白砂市"], "top_k": 11}),
                                       (old, "find", {"keywords": ["白砂市"]}), (old, "search", {"keywords": ["x"]})):
        content, failed = call_tool(functions, name, arguments)
        assert failed and content.startswith("{'error':"), (name, arguments, content)
    assert call_tool(new, "find", {"keywords": ["白砂市"], "top_k": 11})[0] == "{'error': 'top_k must be between 1 and 10.'}"
    assert "past the end" in call_tool(new, "read", {"doc_id": "f002", "page": 10**4})[0]


def test_an_interface_zero_episode_is_unchanged(envs_index):
    backend = open_index(str(envs_index))
    rows = [{"id": f"r{i}", "question": f"質問{i}"} for i in range(40)]
    environment = SearchEnvironment(backend, ToolsConfig(**TWO))
    zeros = 0
    for row in rows:
        environment.reset(**row)
        if environment.tool_interface == 0:
            zeros += 1
            plain = SearchEnvironment(backend, ToolsConfig(), variant=environment.tool_variant)
            assert type(environment) is SearchEnvironment and listed(environment) == ["open_doc", "search"]
            assert tool_schemas(environment) == tool_schemas(plain)
            assert environment.search("白砂市") == plain.search("白砂市")
        else:
            assert listed(environment) == ["find", "read"] and "search" not in environment.__dict__
    assert 0 < zeros < len(rows)  # one instance, reset across both interfaces


def test_the_draw_is_opt_in_stable_balanced_and_independent_of_the_description():
    keys = [f"q{i}" for i in range(800)]
    assert {draw_interface(k) for k in keys} == {0}  # default: one interface, interface 0
    assert {episode_interface(TASKS["multihop_qa"], {"id": k}) for k in keys} == {0}
    drawn = [draw_interface(k, 0, 2) for k in keys]
    assert drawn == [draw_interface(k, 0, 2) for k in keys]  # stable per key and seed
    assert 0.4 < sum(drawn) / len(drawn) < 0.6
    assert drawn != [draw_interface(k, 1, 2) for k in keys]  # the seed moves it
    pairs = [(draw_variant(k), i) for k, i in zip(keys, drawn)]
    for variant in range(N_VARIANTS):  # every description variant meets both interfaces, about evenly
        ones = [i for v, i in pairs if v == variant]
        assert 0.3 < sum(ones) / len(ones) < 0.7
    assert [episode_interface(TASK, {"id": k}) for k in keys] == drawn
    assert {episode_interface(replace(TASK, tools_config={"interface_variant": 1}), {"id": k}) for k in keys} == {1}
    for bad in ({"interface_variants": 3}, {"interface_variants": 0}, {"interface_variant": 2}):
        with pytest.raises(ValueError, match="interface_variant"):
            ToolsConfig(**bad)


def test_one_factory_per_pair_and_the_dataset_routes_each_row(envs_index, tmp_path):
    from fixtures.recipe_args import section_arg

    from tansaku.trainer.recipes import RecipeError, load_recipe
    from tansaku.trainer.rl import build_dataset, build_environments, check_recipe
    from tansaku.trainer.rl_rewards import task_of_environment

    assert sorted(variant_factories(TASKS["multihop_qa"], envs_index)) == [(v, 0) for v in range(N_VARIANTS)]
    factories = variant_factories(TASK, envs_index)
    assert sorted(factories) == [(v, i) for v in range(N_VARIANTS) for i in (0, 1)]
    for (variant, interface), factory in factories.items():
        probe = factory()  # TRL's probe: the class lists the pair's tools
        assert (probe.tool_variant, probe.tool_interface) == (variant, interface)
        assert listed(probe) == (["find", "read"] if interface else ["open_doc", "search"])

    rows = [{"id": f"r{i}", "question": f"質問{i}", "answer": "白砂市"} for i in range(60)]
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    def with_tools(tools: dict):  # the recipe's own key: tasks[].tools
        return load_recipe(RL_TINY, ["--output_dir", str(tmp_path / "out"),
                                     *section_arg(RL_TINY, "tasks", data=str(data), index=str(envs_index), tools=tools)],
                           kind="rl")

    recipe = with_tools({"interface_variants": 2})
    seed = recipe.training_args.seed
    dataset, environments = build_dataset(recipe), build_environments(recipe)
    assert len(environments) == 2 * N_VARIANTS and "multihop_qa@tools-v0" in environments
    probes = {name: factory() for name, factory in environments.items()}
    seen, named = set(), set()
    for row in dataset:
        name = row["environment"]
        assert task_of_environment(name) == "multihop_qa"
        variant, interface = episode_variant(TASK, row, seed), episode_interface(TASK, row, seed)
        assert name == f"multihop_qa@tools-v{variant}" + (f"-i{interface}" if interface else "")
        env = environments[name]()  # TRL: a pooled instance, then reset(**row): the same pair it was routed by
        env.reset(**{k: v for k, v in row.items() if k != "environment"})
        assert (env.tool_variant, env.tool_interface) == (probes[name].tool_variant, probes[name].tool_interface)
        system = row["prompt"][0]["content"]  # names the tools of the row's interface
        assert system == interface_text(TASK.system_prompt(row), interface)
        named.add(("search" in system, "find" in system, interface))
        seen.add((variant, interface))
    assert {i for _, i in seen} == {0, 1} and len(seen) > 4
    assert (True, False, 0) in named and (False, True, 1) in named
    with pytest.raises(RecipeError, match="interface_variants"):  # checked before any model loads
        check_recipe(with_tools({"interface_variants": 5}))
    with pytest.raises(RecipeError, match="tasks multihop_qa: tools"):
        check_recipe(with_tools({"no_such_setting": 1}))


def search_then_answer(request):
    """A model that speaks interface 0 only: searches, then answers."""
    if not tool_results(request):
        return '<think>検索する。</think>\n<tool_call>\n{"name": "search", "arguments": {"query": "白砂市"}}\n</tool_call>'
    return "<think>答える。</think>{{白砂市}}"


def test_eval_report_breaks_errors_down_by_variant_and_interface(envs_index):
    from tansaku.envs.evaluate import summarize
    from tansaku.envs.rollout import run_rollouts

    rows = [{"id": f"r{i}", "question": f"白砂市の質問{i}", "answer": "白砂市"} for i in range(24)]
    trajectories = run_rollouts(ScriptedLLM(search_then_answer), TASK, rows, make_environment_factory(TASK, envs_index))
    for t in trajectories:
        names = sorted(s["function"]["name"] for s in t.tools)
        assert names == (["find", "read"] if t.tool_interface else ["open_doc", "search"])
        assert t.to_record()["tool_interface"] == t.tool_interface
        assert t.tool_errors == (1 if t.tool_interface else 0)  # search on a find/read episode: a tool error
        system = t.prompt[0]["content"]  # the system prompt names the episode's tools
        assert system == interface_text(TASK.system_prompt(rows[t.row_index]), t.tool_interface)
        assert not (t.tool_interface and "search" in system)
    report = summarize(TASK, trajectories, k=1)
    cells = report["by_tool_variant"]
    assert sum(c["episodes"] for c in cells.values()) == len(trajectories)
    assert {label[-2:] for label in cells} == {"i0", "i1"}
    for label, cell in cells.items():
        assert set(cell) >= {"episodes", "parse_failures", "tool_errors", "pass@1"}
        assert cell["tool_error_rate"] == (1.0 if label.endswith("i1") else 0.0)
    plain = run_rollouts(ScriptedLLM(search_then_answer), TASKS["multihop_qa"], rows,
                         make_environment_factory(TASKS["multihop_qa"], envs_index), score=False)
    assert all(t.tool_interface == 0 and t.tool_errors == 0 for t in plain)  # the default draws interface 0 only


def test_trajectories_drop_a_teacher_that_speaks_another_interface(envs_index):
    from tansaku.core.engine import Drop
    from tansaku.envs.rollout import run_rollouts
    from tansaku.pipelines.trajectories.format import chat_row
    from tansaku.pipelines.trajectories.rewrite import trajectory_features
    from tansaku.pipelines.trajectories.teacher import trajectory_records
    from tansaku.pipelines.trajectories.verify import replay_violation

    def bilingual(request):  # a teacher that reads the schemas it is shown
        if tool_results(request):
            return "<think>答える。</think>{{白砂市}}"
        if any(t["function"]["name"] == "find" for t in request.tools):
            return '<tool_call>\n{"name": "find", "arguments": {"keywords": ["白砂市"]}}\n</tool_call>'
        return search_then_answer(request)

    rows = [{**task_rows("multihop")[0], "id": f"r{i}"} for i in range(16)]
    for model, kept_interfaces in ((search_then_answer, {0}), (bilingual, {0, 1})):
        factory = make_environment_factory(TASK, envs_index)
        trajectories = run_rollouts(ScriptedLLM(model), TASK, rows, factory, score=False)
        assert {t.tool_interface for t in trajectories} == {0, 1}
        for t in trajectories:
            [record] = trajectory_records({"question_id": f"q{t.row_index}", "row": rows[t.row_index]}, [t], TASK.name)
            if t.tool_interface not in kept_interfaces:
                assert isinstance(record, Drop) and record.reason == "wrong_interface" and "find, read" in record.detail
                continue
            assert not isinstance(record, Drop) and record["tool_interface"] == t.tool_interface
            row = chat_row(record, TASK)  # the SFT row: the episode's schemas and a system prompt naming them
            assert row["tool_interface"] == t.tool_interface and json.loads(row["tools"]) == t.tools
            assert row["messages"][0]["content"] == t.prompt[0]["content"]
            assert trajectory_features(record["messages"])["searches"] == 1
            assert replay_violation(record["messages"], factory, rows[t.row_index]) is None  # the verify stage


def test_the_demo_teacher_speaks_the_interface_its_schemas_name():
    """examples/teacher_script.py: find(keywords=…)/read(doc_id=…) when the schemas name find (plain keywords, no
    bool query), search/open_doc otherwise; a read counts as an opened document."""
    import importlib.util
    from types import SimpleNamespace

    path = Path(__file__).resolve().parents[1] / "examples" / "teacher_script.py"
    spec = importlib.util.spec_from_file_location("demo_teacher_interfaces", path)
    teacher = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(teacher)
    question = "「水城遥」の最終学歴が設立された年を答えてください。"
    hit = "[1] doc_id: mw0008 | title: 水城遥\n水城遥は小説家。"
    page = "doc_id: mw0008 | title: 水城遥 | characters 0-16 of 16\n水城遥は、小説家。青葉大学卒業。\n[end of document]"

    def turn(names, *steps):  # steps: (tool name, arguments, result)
        messages = [{"role": "system", "content": "s"}, {"role": "user", "content": question}]
        for name, arguments, result in steps:
            messages += [{"role": "assistant", "content": "", "tool_calls": [
                {"type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}]},
                {"role": "tool", "content": result}]
        tools = [{"type": "function", "function": {"name": n}} for n in names]
        [call] = teacher.respond(SimpleNamespace(messages=messages, tools=tools))["tool_calls"]
        return call["name"], call["arguments"]

    one, zero = ("find", "read"), ("search", "open_doc")
    assert turn(one) == ("find", {"keywords": ["水城遥"]}) and turn(zero) == ("search", {"query": "水城遥"})
    assert turn(one, ("find", {"keywords": ["水城遥"]}, hit)) == ("read", {"doc_id": "mw0008"})
    assert turn(zero, ("search", {"query": "水城遥"}, hit)) == ("open_doc", {"doc_id": "mw0008"})
    read = turn(one, ("find", {"keywords": ["水城遥"]}, hit), ("read", {"doc_id": "mw0008"}, page))
    assert read == ("find", {"keywords": ["青葉大学"]})  # the bridge, as plain keywords
    unread = turn(one, ("find", {"keywords": ["水城遥"]}, hit), ("read", {"doc_id": "mw0008"}, "[end of document]"))
    assert unread == ("find", {"keywords": ["水城遥", "最終学歴"]})  # read counted as opened: it broadens instead
    step = {"tool_calls": [{"name": "find", "arguments": {"keywords": ["水城遥", "最終学歴"]}},
                           {"name": "read", "arguments": {"doc_id": "mw0008"}}]}
    assert teacher._step_reasoning(step, None, "translate", None) == "「水城遥 最終学歴」で検索する。文書 mw0008 を開いて本文を読む。"
