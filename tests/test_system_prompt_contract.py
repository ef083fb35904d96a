"""One system-prompt contract per task: the SFT rows of ``synth build trajectories``, the prompts of
``train rl`` and the episodes of ``train eval`` put the same text before the same question — the task's own
(``Task.system_prompt``: a stable variant per question), or one override given to all three
(``--system-prompt`` / a recipe task's ``system_prompt``). General chat rows carry none.

Run: pytest tests/test_system_prompt_contract.py
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from tansaku.cli import synth_app, train_app
from tansaku.core.context import BuildContext
from tansaku.core.errors import InputError
from tansaku.core.llm import ScriptedLLM
from tansaku.core.store import read_rows
from tansaku.envs.evaluate import run_eval
from tansaku.envs.tasks import TASKS
from tansaku.pipelines.corpus.config import CorpusConfig
from tansaku.pipelines.multihop.config import MultihopConfig
from tansaku.pipelines.trajectories.build import build_trajectories
from tansaku.pipelines.trajectories.config import TrajectoriesConfig
from tansaku.trainer.data import normalize_conversation
from tansaku.trainer.recipe_arguments import RLTask
from tansaku.trainer.recipes import RecipeError
from tansaku.trainer.rl import task_rows
from tansaku.trainer.rl_rewards import rl_task

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "examples" / "teacher_script.py"
GENERAL = ROOT / "tests" / "fixtures" / "sft" / "general.jsonl"
OVERRIDE = "あなたは架空の検索エージェントです。考えは日本語で書き、{{答え}} の形で答えてください。"


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    from tansaku.envs.search import build_index
    from tansaku.pipelines.corpus.build import build_corpus
    from tansaku.pipelines.multihop.build import build_multihop

    base = tmp_path_factory.mktemp("contract")
    build_corpus(CorpusConfig(input=ROOT / "examples" / "miniwiki.jsonl", format="jsonl"), base / "corpus", BuildContext(quiet=True))
    build_index(base / "corpus", base / "index")
    build_multihop(MultihopConfig(corpus=base / "corpus", max_per_subject=0, max_per_bridge=0, max_per_relation_pair=0, heldout_share=0.0), base / "multihop", BuildContext(quiet=True))  # every question in train: the three views read the same rows
    return base


def sft_rows(inputs, name: str, system_prompt: str | None = None) -> list[dict]:
    build_trajectories(TrajectoriesConfig(
        dataset=inputs / "multihop", teacher=f"scripted:{SCRIPT}", index=inputs / "index",
        translator=f"scripted:{SCRIPT}:rewrite", general=GENERAL, ratio=0.5, n=1, limit=12,
        system_prompt=system_prompt), inputs / name, BuildContext(quiet=True))
    return read_rows(inputs / name)


def eval_system_prompts(inputs, system_prompt: str | None = None) -> dict[str, str]:
    """The system message each question's episode of ``train eval`` opens with (seen by a recording model)."""
    seen: dict[str, str] = {}

    def model(request):
        user = next(m["content"] for m in request.messages if m["role"] == "user")
        seen.setdefault(user, request.messages[0]["content"] if request.messages[0]["role"] == "system" else "")
        return "{{不明}}"

    run_eval("multihop_qa", inputs / "multihop", ScriptedLLM(model), str(inputs / "index"), split="train", k=1,
             limit=12, system_prompt=system_prompt)
    return seen


def rl_system_prompts(inputs, system_prompt: str | None = None) -> dict[str, str]:
    spec = RLTask(name="multihop_qa", data=str(inputs / "multihop"), index=str(inputs / "index"),
                  system_prompt=system_prompt)
    return {row["prompt"][1]["content"]: row["prompt"][0]["content"] for row in task_rows(spec, rl_task(spec))}


def agentic_system_prompts(rows: list[dict]) -> dict[str, str]:
    out = {}
    for row in rows:
        if row["kind"] == "agentic":
            assert row["messages"][0]["role"] == "system"
            out[next(m["content"] for m in row["messages"] if m["role"] == "user")] = row["messages"][0]["content"]
        else:
            assert all(m["role"] != "system" for m in row["messages"])  # the general side of the switch
    assert out, "the scripted teacher solved no question"
    return out


def test_sft_rows_rl_prompts_and_eval_render_the_same_system_prompt(inputs):
    sft = agentic_system_prompts(sft_rows(inputs, "sft"))
    rl, episodes = rl_system_prompts(inputs), eval_system_prompts(inputs)
    task = TASKS["multihop_qa"]
    assert len(set(task.system_prompts)) == 2 and len(set(sft.values())) >= 1
    for question, system in sft.items():
        assert system == rl[question] == episodes[question] == task.system_prompt({"question": question})
    assert all("日本語" in prompt for prompt in task.system_prompts)  # every variant asks for Japanese reasoning


def test_an_override_reaches_sft_rl_and_eval_alike(inputs, tmp_path):
    prompt_file = tmp_path / "system.txt"
    prompt_file.write_text(OVERRIDE + "\n", encoding="utf-8")
    sft = agentic_system_prompts(sft_rows(inputs, "sft-override", system_prompt=OVERRIDE))
    rl, episodes = rl_system_prompts(inputs, f"@{prompt_file}"), eval_system_prompts(inputs, OVERRIDE)
    assert set(sft.values()) == {OVERRIDE}
    assert all(rl[q] == episodes[q] == OVERRIDE for q in sft)
    from tansaku.core.store import read_manifest
    assert read_manifest(inputs / "sft-override")["config"]["system_prompts"] == [OVERRIDE]


def test_the_cli_takes_text_or_a_file_and_refuses_a_missing_one(inputs, tmp_path):
    args = ["build", "trajectories", "--dataset", str(inputs / "multihop"), "--index", str(inputs / "index"),
            "--teacher", f"scripted:{SCRIPT}", "--translator", f"scripted:{SCRIPT}:rewrite", "--n", "1",
            "--limit", "3", "-q"]
    for bad, says in ((f"@{tmp_path / 'missing.txt'}", "no such file"), (" ", "empty")):
        result = CliRunner().invoke(synth_app, [*args, "--out", str(tmp_path / "t"), "--system-prompt", bad])
        lines = result.stderr.strip().splitlines()
        assert result.exit_code == 2 and len(lines) == 1 and says in lines[0], result.stderr
        assert not (tmp_path / "t").exists()
    result = CliRunner().invoke(train_app, ["eval", "--task", "multihop_qa", "--dataset", str(inputs / "multihop"),
                                            "--model", f"scripted:{SCRIPT}", "--index", str(inputs / "index"),
                                            "--system-prompt", f"@{tmp_path / 'missing.txt'}"])
    assert result.exit_code == 2 and "no such file" in result.stderr


def test_an_sft_source_cannot_put_a_second_system_prompt_over_the_rows_own():
    agentic = {"messages": [{"role": "system", "content": "行の指示"}, {"role": "user", "content": "q"},
                            {"role": "assistant", "content": "{{a}}"}]}
    with pytest.raises(RecipeError, match="already carries a system prompt"):
        normalize_conversation(agentic, system_prompt="別の指示")
    assert normalize_conversation(agentic, system_prompt="行の指示")["messages"][0]["content"] == "行の指示"
    general = {"kind": "general", "messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]}
    assert normalize_conversation(general, system_prompt="別の指示")["messages"][0]["role"] == "user"


def test_an_empty_override_is_refused():
    with pytest.raises(InputError, match="non-empty"):
        TASKS["multihop_qa"].with_system_prompt("  ")
