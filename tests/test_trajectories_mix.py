"""Scenario catalog and draws (reproducible by seed, only scenarios the trajectory supports), mixing ratios
and the general-set reader.

Run: pytest tests/test_trajectories_mix.py
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from tansaku.pipelines.trajectories.mix import mix_rows, mix_stage, read_chat_rows
from tansaku.pipelines.trajectories.rewrite import (
    CatalogError,
    applicable_scenarios,
    draw_scenario,
    load_catalog,
    trajectory_features,
)

GENERAL = Path(__file__).parent / "fixtures" / "sft" / "general.jsonl"


def call(name, args, result, i):
    return [{"role": "assistant", "content": "", "reasoning_content": "r",
             "tool_calls": [{"id": f"c{i}", "type": "function",
                             "function": {"name": name, "arguments": json.dumps(args, ensure_ascii=False)}}]},
            {"role": "tool", "name": name, "tool_call_id": f"c{i}", "content": result}]


def msgs(*calls):
    out = [{"role": "user", "content": "q"}]
    for i, c in enumerate(calls):
        out += call(*c, i)
    return out + [{"role": "assistant", "content": "{{a}}", "reasoning_content": "r"}]


EMPTY_THEN_FOUND = msgs(("search", {"query": "xyz"}, "No results. Try other words."),
                        ("search", {"query": "x"}, "[1] doc_id: d1 | title: X\nsnippet"))
BOOL_ONE = msgs(("search", {"query": '{"bool": {"must": [{"match_phrase": {"title": "X"}}]}}'}, "[1] doc_id: d1 | …"))


def test_catalog_loads_and_rejects_bad_files(tmp_path):
    catalog = load_catalog()
    ids = [s["id"] for s in catalog["scenarios"]]
    assert {"replan_after_empty", "narrow_with_bool", "broaden_query", "verify_second_search",
            "enough_then_answer"} <= set(ids) and len(ids) == len(set(ids))
    bad = tmp_path / "bad.yaml"
    bad.write_text("scenarios:\n  - id: a\n    guide: g\n    requires: {telepathy: true}\n", encoding="utf-8")
    with pytest.raises(CatalogError, match="telepathy"):
        load_catalog(bad)
    bad.write_text("scenarios: [", encoding="utf-8")
    with pytest.raises(CatalogError):
        load_catalog(bad)


def test_only_scenarios_the_trajectory_really_shows_apply():
    catalog = load_catalog()
    assert trajectory_features(EMPTY_THEN_FOUND) == {"tool_calls": 2, "searches": 2, "empty_result": True,
                                                     "bool_query": False, "opened_doc": False}
    empty_ids = {s["id"] for s in applicable_scenarios(catalog, EMPTY_THEN_FOUND)}
    assert {"replan_after_empty", "broaden_query", "verify_second_search"} <= empty_ids
    assert "narrow_with_bool" not in empty_ids and "read_document" not in empty_ids
    bool_ids = {s["id"] for s in applicable_scenarios(catalog, BOOL_ONE)}
    assert "narrow_with_bool" in bool_ids and "replan_after_empty" not in bool_ids
    assert draw_scenario(catalog, msgs(), seed=0, key="k") is None  # no tool call: nothing applies


def test_scenario_draws_are_reproducible_by_seed_and_follow_weights():
    catalog = load_catalog()
    def draw(seed):
        return [draw_scenario(catalog, EMPTY_THEN_FOUND, seed, f"t{i}")["id"] for i in range(300)]
    assert draw(1) == draw(1)
    assert draw(1) != draw(2)
    counts = Counter(draw(1))
    weights = {s["id"]: s["weight"] for s in applicable_scenarios(catalog, EMPTY_THEN_FOUND)}
    assert set(counts) == set(weights)  # every applicable one is drawn, nothing else
    heaviest, lightest = max(weights, key=weights.get), min(weights, key=weights.get)
    assert counts[heaviest] > counts[lightest]


def agentic_rows(n):  # as the format stage writes them: under their task's system prompt
    return [{"id": f"a{i}", "kind": "agentic", "messages": [{"role": "system", "content": "S"},
                                                             {"role": "user", "content": f"q{i}"}]}
            for i in range(n)]


def general_rows(n):
    return [{"id": f"g{i}", "kind": "general", "messages": [{"role": "user", "content": f"g{i}"}]}
            for i in range(n)]


@pytest.mark.parametrize("ratio, n_agentic, n_general, want", [
    (0.5, 40, 100, 20), (1.0, 40, 100, 40), (0.25, 10, 100, 2), (0.0, 10, 5, 0), (2.0, 10, 7, 7)])
def test_mix_ratio(ratio, n_agentic, n_general, want):
    mixed = mix_rows(agentic_rows(n_agentic), general_rows(n_general), ratio, seed=3)
    kinds = Counter(r["kind"] for r in mixed)
    assert kinds == Counter({"agentic": n_agentic, **({"general": want} if want else {})})
    assert len({r["id"] for r in mixed}) == len(mixed)  # no general row twice
    for r in mixed:
        has_system = r["messages"][0]["role"] == "system"
        assert has_system == (r["kind"] == "agentic")
        if has_system:
            assert r["messages"][0]["content"] == "S"  # the general rows never get one


def test_mix_is_seeded_and_its_stage_records_the_ratio():
    a, g = agentic_rows(30), general_rows(50)
    def ids(seed):
        return [r["id"] for r in mix_rows(a, g, 0.5, seed)]
    assert ids(7) == ids(7) and ids(7) != ids(8)
    stage = mix_stage(g, 0.5, 7)
    out = list(stage.fn(iter(a)))
    assert [r["id"] for r in out] == ids(7) and len(out) == 30 + 15
    assert stage.params == {"ratio": 0.5, "general_rows": 50}  # part of the resume fingerprint
    with pytest.raises(ValueError, match="ratio"):
        mix_rows(a, g, -1, 0)


def test_read_general_rows_from_jsonl_parquet_and_bad_input(tmp_path):
    rows = read_chat_rows(GENERAL)
    assert rows and all(r["kind"] == "general" and r["messages"][-1]["role"] == "assistant" for r in rows)
    import pyarrow as pa
    import pyarrow.parquet as pq

    with_system = [{"messages": [{"role": "system", "content": "old"}, {"role": "user", "content": "u"},
                                 {"role": "assistant", "content": "a"}]}]
    pq.write_table(pa.Table.from_pylist(with_system), tmp_path / "g.parquet")
    parsed = read_chat_rows(tmp_path / "g.parquet")
    assert [m["role"] for m in parsed[0]["messages"]] == ["user", "assistant"]  # no system prompt in general rows
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"messages": [{"role": "user", "content": "only a question"}]}\n', encoding="utf-8")
    with pytest.raises(ValueError, match="assistant"):
        read_chat_rows(bad)
    with pytest.raises(FileNotFoundError):
        read_chat_rows(tmp_path / "missing.jsonl")
