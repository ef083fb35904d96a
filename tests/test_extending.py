"""Adding a task, a reward, a search backend or an LLM engine is one new module plus one registry line
(docs/extending.md): each toy below is written into a temporary module, registered with that one line, and
then shows up in the generated help and error lists and works through the normal path (``train eval``, ``synth
index build``, the search tool of a rollout, a task's rewards).

    pytest tests/test_extending.py -q
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from fixtures.envs.helpers import SEARCH_FIXTURE, tool_results
from typer.testing import CliRunner

from tansaku.cli import synth_app, train_app
from tansaku.core.llm import LLM_ENGINES, ChatRequest, Engine, ScriptedLLM, from_spec, parse_spec
from tansaku.core.llm.spec import engine_help
from tansaku.envs.environments import make_environment_factory
from tansaku.envs.reward_registry import REWARDS, make_reward, plain, reward_names
from tansaku.envs.rollout import run_rollouts
from tansaku.envs.search import open_index
from tansaku.envs.search.backend import SEARCH_BACKENDS, SearchEngine, backend_help
from tansaku.envs.tasks import TASKS

ROOT = Path(__file__).resolve().parents[1]

TOY_ENGINE = '''
"""A toy LLM engine, ``toy:WORD``: every answer is WORD in braces, after a line of reasoning."""
from tansaku.core.llm import ChatResult, LLMClient


class WordClient(LLMClient):
    backend = "toy"

    def __init__(self, word, cache=None):
        super().__init__(f"toy:{word}", cache)
        self.word = word

    def _generate(self, requests):
        return [ChatResult(content="<think>考える。</think>\\n{{" + self.word + "}}", finish_reason="stop")
                for _ in requests]


def open_client(spec, parts, cache, llm_options, **options):
    return WordClient(parts[0], cache=cache, **options)
'''

TOY_SEARCH = '''
"""A toy search engine: the index is one JSON file of documents; a hit is a document holding every word."""
import json
from pathlib import Path

from tansaku.core.errors import MissingInputError
from tansaku.envs.search.base import Hit, SearchResult
from tansaku.envs.search.documents import iter_documents
from tansaku.envs.search.dsl_limits import Limits


def _file(spec):
    return Path(str(spec).removeprefix("toy:")) / "toy.json"


class ToyBackend:
    def __init__(self, docs):
        self.docs = docs

    @classmethod
    def open(cls, spec, limits=Limits()):
        cls.require(spec, "build it")
        return cls(json.loads(_file(spec).read_text(encoding="utf-8")))

    @classmethod
    def build(cls, dataset_dir, spec, analyzer=None, chunk_chars=800, overwrite=True):
        docs = [{k: d.get(k) for k in ("doc_id", "title", "text")} for d in iter_documents(dataset_dir)]
        _file(spec).parent.mkdir(parents=True, exist_ok=True)
        _file(spec).write_text(json.dumps(docs, ensure_ascii=False), encoding="utf-8")
        return {"backend": "toy", "documents": len(docs)}

    @classmethod
    def exists(cls, spec):
        return _file(spec).is_file()

    @classmethod
    def require(cls, spec, hint):
        if not cls.exists(spec):
            raise MissingInputError(f"toy index {spec} does not exist; {hint}")

    def search(self, query, size=10, collapse=True, snippet_chars=200, default_size=10, max_size=None):
        words = str(query).split()
        hits = [Hit(d["doc_id"], d["title"], 1.0, "toy: " + d["text"][:snippet_chars])
                for d in self.docs if all(w in d["text"] for w in words)]
        return SearchResult(hits[: size or default_size], total=len(hits))

    def get(self, doc_id):
        return next((d for d in self.docs if d["doc_id"] == doc_id), None)

    def close(self):
        pass

    def describe(self):
        return {"backend": "toy", "documents": len(self.docs)}
'''

TOY_TASK = '''
"""A toy task: a question answered as {{答え}}, scored by the answer reward and the format reward."""
from dataclasses import dataclass, field

from tansaku.envs import rewards
from tansaku.envs.tasks import Task


@dataclass(frozen=True)
class EchoTask(Task):
    name: str = "toy_echo"
    system_prompts: tuple = ("必要なら検索し、考えを日本語で書いてから{{答え}}の形で答えてください。",)
    columns: dict = field(default_factory=lambda: {"question": "str", "answer": "str"})
    reward_weights: dict = field(default_factory=lambda: {"answer_reward": 1.0, "format_reward": 0.5})

    def gold_problem(self, row):
        score = rewards.answer_reward([self.gold_completion(row)], answer=[row["answer"]])[0]
        return None if score == 1.0 else f"gold answer scores {score}"
'''

TOY_REWARD = '''
"""A toy reward: 1.0 for a final message of at most 40 characters, else 0.0."""


def brevity_reward(completions, **columns):
    last = [(c[-1].get("content") if c and isinstance(c[-1], dict) else c) for c in completions]
    return [1.0 if len(str(text or "")) <= 40 else 0.0 for text in last]
'''

# The one registry line of each toy (the test runs them against the imported registries).
REGISTRY_LINES = '''
LLM_ENGINES["toy"] = Engine("toy:WORD", "toy_engine:open_client")
SEARCH_BACKENDS["toy"] = SearchEngine("toy_search:ToyBackend", ("plain",), ("toy:",), "Toy")
TASKS["toy_echo"] = toy_task.EchoTask()
REWARDS["brevity_reward"] = plain(toy_reward.brevity_reward)
'''


@pytest.fixture
def toys(tmp_path, monkeypatch):
    """The four toy modules on sys.path, each registered by its one line; the registries restored after."""
    for name, text in (("toy_engine", TOY_ENGINE), ("toy_search", TOY_SEARCH), ("toy_task", TOY_TASK),
                       ("toy_reward", TOY_REWARD)):
        (tmp_path / f"{name}.py").write_text(text, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    import toy_reward
    import toy_task

    scope = {"LLM_ENGINES": {}, "SEARCH_BACKENDS": {}, "TASKS": {}, "REWARDS": {}, "Engine": Engine,
             "SearchEngine": SearchEngine, "plain": plain, "toy_task": toy_task, "toy_reward": toy_reward}
    exec(REGISTRY_LINES, scope)  # noqa: S102 - the lines the docs show, run as written
    for registry, name in ((LLM_ENGINES, "LLM_ENGINES"), (SEARCH_BACKENDS, "SEARCH_BACKENDS"),
                           (TASKS, "TASKS"), (REWARDS, "REWARDS")):
        for key, value in scope[name].items():
            monkeypatch.setitem(registry, key, value)  # undone after the test
    yield tmp_path
    for module in ("toy_engine", "toy_search", "toy_task", "toy_reward"):
        sys.modules.pop(module, None)


def _refused(result, *names):
    assert result.exit_code == 2, result.output
    assert all(name in result.stderr for name in names), result.stderr


def test_a_toy_engine_answers_and_is_listed(toys):
    client = from_spec("toy:東京")
    [answer] = client.chat([ChatRequest(messages=[{"role": "user", "content": "首都は？"}])])
    assert answer.content.endswith("{{東京}}") and client.backend == "toy"
    assert parse_spec("toy:東京") == ("toy", ("東京",)) and "toy:WORD" in engine_help()
    with pytest.raises(Exception, match=r"unknown LLM backend 'gpt'.*toy"):
        parse_spec("gpt:x")
    result = CliRunner().invoke(train_app, ["eval", "--task", "multihop_qa", "--model", "gpt:x"])
    _refused(result, "unknown LLM backend 'gpt'", "toy")


def _dataset(tmp_path: Path) -> Path:
    sys.path.insert(0, str(SEARCH_FIXTURE))
    try:
        from dataset import write_dataset
    finally:
        sys.path.remove(str(SEARCH_FIXTURE))
    return write_dataset(tmp_path / "docs")


def test_a_toy_backend_builds_through_the_cli_and_answers_the_search_tool(toys):
    assert backend_help().endswith("| toy")
    result = CliRunner().invoke(synth_app, ["index", "build", "--dataset", str(toys / "nope"), "--index",
                                            str(toys / "ix"), "--backend", "elastic"])
    assert result.exit_code == 2 and "toy" in result.stderr, result.output
    dataset = _dataset(toys)
    result = CliRunner().invoke(synth_app, ["index", "build", "--dataset", str(dataset),
                                            "--index", str(toys / "ix"), "--backend", "toy", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["backend"] == "toy"
    backend = open_index(f"toy:{toys / 'ix'}")
    assert type(backend).__name__ == "ToyBackend"
    word = backend.docs[0]["text"].split()[0][:2]

    def model(request):
        if not tool_results(request):
            return '<tool_call>\n{"name": "search", "arguments": {"query": "' + word + '"}}\n</tool_call>'
        return "<think>読んだ。</think>\n{{" + word + "}}"

    task = TASKS["multihop_qa"]
    [episode] = run_rollouts(ScriptedLLM(model), task, [{"question": "q", "answer": word}],
                             make_environment_factory(task, f"toy:{toys / 'ix'}"), quiet=True)
    assert "toy: " in episode.completion[1]["content"] and episode.rewards["answer_reward"] == 1.0


def test_a_toy_task_and_engine_run_through_train_eval(toys, envs_index):
    rows = toys / "rows.jsonl"
    rows.write_text(json.dumps({"question": "日本の首都は？", "answer": "東京", "split": "test"},
                               ensure_ascii=False) + "\n", encoding="utf-8")
    result = CliRunner().invoke(train_app, ["eval", "--task", "nope", "--model", "toy:東京"])
    _refused(result, "toy_echo")
    result = CliRunner().invoke(train_app, ["eval", "--task", "toy_echo", "--dataset", str(rows), "--model",
                                            "toy:東京", "--index", str(envs_index), "--k", "1", "--json", "-q"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["task"] == "toy_echo" and report["pass@1"] == 1.0, report


def test_a_toy_reward_is_registered_listed_and_scores(toys):
    assert "brevity_reward" in reward_names()
    with pytest.raises(Exception, match="unknown reward 'nope'.*brevity_reward"):
        make_reward(TASKS["toy_echo"], "nope")
    reward = make_reward(TASKS["toy_echo"], "brevity_reward")
    short, long = [{"role": "assistant", "content": "{{東京}}"}], [{"role": "assistant", "content": "あ" * 50}]
    assert reward([short, long], answer=["東京", "東京"]) == [1.0, 0.0]


def test_a_task_weighs_a_registered_reward_by_name(toys):
    from dataclasses import replace

    task = replace(TASKS["toy_echo"], reward_weights={"answer_reward": 1.0, "brevity_reward": 0.1})
    [score] = task.score([[{"role": "assistant", "content": "<think>考える。</think>\n{{東京}}"}]],
                         [{"question": "q", "answer": "東京"}])
    assert score.components["brevity_reward"] == 1.0


def test_the_registered_toys_appear_in_the_generated_help(toys):
    """Help texts are made from the registries when the CLI is imported: a fresh interpreter that runs the
    registry lines first shows the toys in ``--help``."""
    script = textwrap.dedent(f'''
        import sys
        sys.path.insert(0, {str(toys)!r})
        import toy_reward, toy_task
        from tansaku.core.llm import LLM_ENGINES, Engine
        from tansaku.envs.reward_registry import REWARDS, plain
        from tansaku.envs.search.backend import SEARCH_BACKENDS, SearchEngine
        from tansaku.envs.tasks import TASKS
        ''') + REGISTRY_LINES + textwrap.dedent('''
        from typer.testing import CliRunner
        from tansaku.cli import synth_app, train_app
        for app, args in ((train_app, ["eval"]), (synth_app, ["index", "build"]), (synth_app, ["demo"])):
            print(CliRunner().invoke(app, [*args, "--help"], terminal_width=240).output)
        ''')
    env = {**os.environ, "COLUMNS": "240", "TERMINAL_WIDTH": "240", "NO_COLOR": "1"}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          cwd=ROOT, env=env)
    assert done.returncode == 0, done.stderr
    assert "deepresearch | multihop_qa_compact | toy_echo | general" in done.stdout, done.stdout
    assert "embedded | opensearch | toy" in done.stdout and "toy: plain (default)" in done.stdout
    assert "toy:WORD" in done.stdout
