"""The compact style for the tiny model: the generated mini-wiki, the compact task, the compact teacher.

    python -m pytest -q tests/test_compact_style.py

What ``bench/efficacy.py`` relies on: the generator is deterministic with unique titles; the multihop
pipeline finds a few hundred questions on it with a held-out split; the compact teacher solves them with
plain queries and one short reasoning sentence per step that states the bridge before searching it; the
compact task shows terse tool schemas.
"""

from __future__ import annotations

import json

from tansaku.core.context import BuildContext
from tansaku.demo import EXAMPLES
from tansaku.envs.environments import SearchEnvironment, tool_schemas
from tansaku.envs.search import build_index
from tansaku.envs.tasks import COMPACT_TOOLS_CONFIG, TASKS
from tansaku.examples.make_miniwiki import make_miniwiki
from tansaku.pipelines.corpus.build import build_corpus
from tansaku.pipelines.corpus.config import CorpusConfig
from tansaku.pipelines.multihop.build import build_multihop
from tansaku.pipelines.multihop.config import MultihopConfig
from tansaku.pipelines.trajectories.build import build_trajectories
from tansaku.pipelines.trajectories.config import TrajectoriesConfig

TEACHER = f"scripted:{EXAMPLES / 'teacher_script.py'}:respond_compact"
REWRITER = f"scripted:{EXAMPLES / 'teacher_script.py'}:rewrite_compact"


def test_generator_is_deterministic_and_matches_the_committed_file():
    rows = make_miniwiki(0)
    assert rows == make_miniwiki(0) and len({r["title"] for r in rows}) == len(rows) > 200
    committed = [json.loads(line) for line in (EXAMPLES / "miniwiki_large.jsonl").open(encoding="utf-8")]
    assert committed == rows  # regenerate with: python -m tansaku.examples.make_miniwiki


def test_compact_task_keeps_the_rewards_and_shortens_the_tools():
    compact, full = TASKS["multihop_qa_compact"], TASKS["multihop_qa"]
    assert compact.reward_weights == full.reward_weights and compact.source_pipelines == ()
    assert compact.tools_config == COMPACT_TOOLS_CONFIG and compact.max_turns == 4
    short = json.dumps(tool_schemas(SearchEnvironment(None, compact.tools_config)))
    long = json.dumps(tool_schemas(SearchEnvironment(None, full.tools_config, variant=0)))
    assert len(short) < len(long) and "Search the wiki." in short and "OpenSearch" in long


def test_compact_trajectories_state_the_bridge_then_search_it(tmp_path):
    wiki = tmp_path / "wiki.jsonl"
    wiki.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in make_miniwiki(0)[:120]),
                    encoding="utf-8")
    build_corpus(CorpusConfig(input=wiki), tmp_path / "corpus", BuildContext(quiet=True))
    build_index(tmp_path / "corpus", tmp_path / "index")
    multihop = build_multihop(MultihopConfig(corpus=tmp_path / "corpus", policy=TEACHER, index=tmp_path / "index", k=1, m=1), tmp_path / "mh", BuildContext(quiet=True))
    assert multihop["splits"]["train"] > 20 and multihop["splits"]["test"] > 0
    task = TASKS["multihop_qa_compact"]
    built = build_trajectories(TrajectoriesConfig(
        dataset=tmp_path / "mh", teacher=TEACHER, index=str(tmp_path / "index"), translator=REWRITER, n=1,
        task=task.name, system_prompt=task.system_prompts[0], limit=10), tmp_path / "traj", BuildContext(quiet=True))
    assert built["splits"]["train"] == 10  # every question solved, none rejected
    from tansaku.core.store import read_rows

    row = read_rows(tmp_path / "traj", split="train")[0]
    messages = json.loads(row["messages"]) if isinstance(row["messages"], str) else row["messages"]
    steps = [m for m in messages if m["role"] == "assistant"]
    assert messages[0]["content"] == task.system_prompts[0] and len(steps) == 3
    bridge = json.loads(steps[1]["tool_calls"][0]["function"]["arguments"])["query"]
    assert steps[1]["reasoning_content"].endswith(f"は{bridge}。「{bridge}」を検索する。")
    assert all(len(s["reasoning_content"]) < 60 for s in steps) and steps[2]["content"].startswith("{{")
