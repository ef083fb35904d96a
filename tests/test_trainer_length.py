"""`train sft` never truncates silently: rows are counted with the tiny model's real tokenizer and chat template
(as TRL renders them), and rows over ``max_length`` are dropped, fitted (tool results elided) or refused.

Run: pytest tests/test_trainer_length.py   (loads the tokenizer only)
"""

from __future__ import annotations

import json
import logging

import pytest

from tansaku.trainer.data import as_trained, load_sources
from tansaku.trainer.length import ELIDED, REPORT, apply_overlong, count_tokens, training_template
from tansaku.trainer.recipe_arguments import DataSource
from tansaku.trainer.recipes import RecipeError, load_recipe

ANSWER = "答えは{{朝霧市}}です。"
TOOLS = [{"type": "function", "function": {"name": "search", "description": "検索する",
                                           "parameters": {"type": "object", "properties": {
                                               "query": {"type": "string", "description": "検索語"}},
                                               "required": ["query"]}}}]


@pytest.fixture(scope="module")
def tokenizer(tiny_model_path):
    from transformers import AutoProcessor

    return AutoProcessor.from_pretrained(tiny_model_path)


def conversation(tool_chars: int, answer: str = ANSWER) -> dict:
    """One search, a tool result of ``tool_chars`` characters, then the final answer."""
    return {"messages": [
        {"role": "system", "content": "あなたは検索エージェントです。"},
        {"role": "user", "content": "『硝子の灯台』の著者の出生地は？"},
        {"role": "assistant", "content": "", "reasoning_content": "著者を調べる。",
         "tool_calls": [{"type": "function", "function": {"name": "search", "arguments": {"query": "硝子の灯台"}}}]},
        {"role": "tool", "name": "search", "content": "[w1] 硝子の灯台: 水城遥の小説。水城遥は朝霧市生まれ。" + "資料" * tool_chars},
        {"role": "assistant", "content": answer, "reasoning_content": "出生地は朝霧市。"},
    ], "tools": TOOLS}


def trained(tmp_path, rows: list[dict]) -> list[dict]:
    """``rows`` normalized and Arrow-round-tripped exactly as ``train sft`` holds them."""
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return as_trained(load_sources([DataSource(str(path))]))[0][1]


def final_answer_labeled(tokenizer, row: dict, max_length: int) -> bool:
    """Whether the final assistant turn (answer + end token) is entirely inside the assistant-only loss mask
    of the sequence TRL trains on (its ``assistant_masks``, cut at ``max_length`` as TRL cuts)."""
    out = tokenizer.apply_chat_template(row["messages"], tools=json.loads(row["tools"]), tokenize=True,
                                        return_dict=True, return_assistant_tokens_mask=True,
                                        chat_template=training_template(tokenizer))
    ids, mask = out["input_ids"][:max_length], out["assistant_masks"][:max_length]
    last_run, start = [], None
    for i, m in enumerate(mask + [0]):
        if m and start is None:
            start = i
        elif not m and start is not None:
            last_run, start = list(range(start, i)), None
    text = tokenizer.decode([ids[i] for i in last_run])
    return "{{朝霧市}}" in text and text.rstrip().endswith("<|im_end|>")


def test_counts_match_the_tokenized_training_sequence(tokenizer, tmp_path):
    short, long = trained(tmp_path, [conversation(10), conversation(400)])
    n_short, n_long = count_tokens(tokenizer, short), count_tokens(tokenizer, long)
    assert n_long > n_short + 300  # the tool result's 800 characters are hundreds of tokens
    rendered = tokenizer.apply_chat_template(long["messages"], tools=json.loads(long["tools"]), tokenize=False)
    assert n_long == len(tokenizer(rendered, add_special_tokens=False)["input_ids"])


@pytest.mark.parametrize("policy", ["drop", "fit", "error"])
def test_rows_around_max_length(tokenizer, tmp_path, policy):
    fits, over = trained(tmp_path, [conversation(10), conversation(400)])
    n_over = count_tokens(tokenizer, over)
    max_length = n_over - 4  # `over` is a few tokens too long (its answer's last tokens); `fits` far below
    only_answer_long = trained(tmp_path, [conversation(0, answer=ANSWER + "詳しく述べる。" * 400)])[0]
    # What TRL alone would do: cut `over` at max_length, losing the end of its final answer turn.
    assert not final_answer_labeled(tokenizer, over, max_length)
    rows = [fits, over, only_answer_long]
    if policy == "error":
        with pytest.raises(RecipeError, match=rf"src row 1: {n_over} tokens > max_length {max_length}"):
            apply_overlong(rows, tokenizer, max_length, policy, "src")
        return
    kept, stats = apply_overlong(rows, tokenizer, max_length, policy, "src")
    assert stats["rows"] == 3 and stats["tokens"]["over_max_length"] == 2
    assert stats["tokens"]["max"] == count_tokens(tokenizer, only_answer_long)
    if policy == "drop":
        assert kept == [fits]
        assert stats["dropped"] == {"too_long": 2} and stats["fitted"] == 0 and stats["kept"] == 1
    else:  # fit: `over` loses its tool result's text, never its answer; the long answer cannot fit: dropped
        assert len(kept) == 2 and kept[0] == fits
        fitted = kept[1]
        assert [m["content"] for m in fitted["messages"] if m["role"] == "tool"] == [ELIDED]
        assert fitted["messages"][-1] == over["messages"][-1]
        assert [m for m in fitted["messages"] if m["role"] != "tool"] == [m for m in over["messages"]
                                                                           if m["role"] != "tool"]
        assert stats["fitted"] == 1 and stats["dropped"] == {"too_long": 1}
    for row in kept:
        assert count_tokens(tokenizer, row) <= max_length
        assert final_answer_labeled(tokenizer, row, max_length)


def test_sft_dataset_reports_per_source_and_warns(tokenizer, tmp_path, caplog):
    from tansaku.trainer.sft import sft_dataset

    rows = [conversation(10), conversation(10), conversation(400)]
    path = tmp_path / "agentic.jsonl"
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    general = tmp_path / "general.jsonl"
    general.write_text(json.dumps({"messages": [{"role": "user", "content": "こんにちは"},
                                                {"role": "assistant", "content": "こんにちは！"}]},
                                  ensure_ascii=False) + "\n", encoding="utf-8")
    max_length = count_tokens(tokenizer, trained(tmp_path, rows)[2]) - 1
    out = tmp_path / "run"
    recipe = load_recipe_text(tmp_path, f"""model_name_or_path: tiny
use_cpu: true
output_dir: {out}
max_length: {max_length}
data:
  - {{path: {path}, ratio: 2}}
  - {{path: {general}, ratio: 1}}
""")
    with caplog.at_level(logging.WARNING, logger="tansaku.trainer.length"):
        dataset = sft_dataset(recipe, tokenizer)
    report = json.loads((out / REPORT).read_text(encoding="utf-8"))
    assert report["overlong"] == "drop" and report["max_length"] == max_length
    assert [(s["path"], s["rows"], s["kept"], s["dropped"]) for s in report["sources"]] == [
        (str(path), 3, 2, {"too_long": 1}), (str(general), 1, 1, {})]
    assert report["mixed_rows"] == len(dataset) == 3  # the mix is drawn from the kept rows only
    assert "1 dropped (too_long)" in caplog.text and str(out / REPORT) in caplog.text
    assert all(ELIDED not in json.dumps(r["messages"], ensure_ascii=False) for r in dataset)

    recipe.script_args.overlong = "error"
    with pytest.raises(RecipeError, match=r"row 2: \d+ tokens > max_length"):
        sft_dataset(recipe, tokenizer)
    recipe.script_args.overlong, recipe.training_args.max_length = "drop", 8
    with pytest.raises(RecipeError, match="no row fits max_length"):
        sft_dataset(recipe, tokenizer)


def load_recipe_text(tmp_path, text: str):
    path = tmp_path / "recipe.yaml"
    path.write_text(text, encoding="utf-8")
    return load_recipe(path, kind="sft")
