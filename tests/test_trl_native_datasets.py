"""TRL-native question datasets (issue 16): every question dataset carries TRL's conversational ``prompt``
(the system + user turns ``train rl`` builds), declared column types (no ``null``-typed or option-dependent
columns, ``derivations`` as structs), Hub-valid licenses carried from the inputs, JEMHopQA's dev file as
``validation``, the multihop diversity caps as options, and environments that refuse a row without a prompt."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from huggingface_hub import DatasetCard
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from tansaku.core.context import BuildContext
from tansaku.core.errors import InputError
from tansaku.core.features import DERIVATIONS, PROMPT, declare, derivation_lists, derivation_structs
from tansaku.core.store import read_rows
from tansaku.data_cards import card_problems
from tansaku.envs.environments import make_environment_factory, require_prompt
from tansaku.envs.tasks import TASKS
from tansaku.pipelines.corpus.config import CorpusConfig
from tansaku.pipelines.deepresearch.config import DeepResearchConfig
from tansaku.pipelines.egov.config import EgovConfig
from tansaku.pipelines.multihop.build import build_multihop
from tansaku.pipelines.multihop.chains import Caps
from tansaku.pipelines.multihop.config import MultihopConfig
from tansaku.pipelines.multihop.jemhopqa import import_jemhopqa
from tansaku.pipelines.multihop.jemhopqa_config import JemhopqaImportConfig

TESTS = Path(__file__).parent
MINIWIKI = TESTS / "fixtures" / "miniwiki" / "miniwiki.jsonl"
DR_WIKI = TESTS / "fixtures" / "deepresearch" / "wiki.jsonl"
LAWS = Path(__file__).resolve().parents[1] / "examples" / "laws"
JEM_ITEMS = [{"qid": f"q{i}", "type": "compositional", "question": f"『本{i}』の著者の出生地は？", "answer": "朝霧市",
              "derivations": [[f"本{i}", "著者", ["水城遥"]], ["水城遥", "出生地", ["朝霧市"]]],
              "page_ids": ["1", "2"], "time_dependent": False} for i in range(12)]


@pytest.fixture(scope="module")
def datasets(tmp_path_factory) -> dict[str, tuple[Path, str]]:
    """One small build of every question pipeline: name → (dataset folder, task)."""
    from tansaku.envs.search import build_index
    from tansaku.pipelines.corpus.build import build_corpus
    from tansaku.pipelines.deepresearch.build import build_deepresearch
    from tansaku.pipelines.egov.build import build_egov

    root = tmp_path_factory.mktemp("trl")
    build_corpus(CorpusConfig(input=MINIWIKI, format="jsonl"), root / "corpus", BuildContext(quiet=True))
    build_multihop(MultihopConfig(corpus=root / "corpus", max_per_subject=0, max_per_bridge=0, max_per_relation_pair=0), root / "multihop", BuildContext(quiet=True))
    build_egov(EgovConfig(laws=[LAWS]), root / "egov", BuildContext(quiet=True))
    build_corpus(CorpusConfig(input=DR_WIKI), root / "dr-corpus", BuildContext(quiet=True))
    build_index(root / "dr-corpus", root / "dr-index")
    build_deepresearch(DeepResearchConfig(corpus=root / "dr-corpus", index=root / "dr-index", llm="scripted:deepresearch",
                                          heldout_share=0), root / "deepresearch", BuildContext(quiet=True))
    jem = root / "train_ver1.2.json"
    jem.write_text(json.dumps(JEM_ITEMS, ensure_ascii=False), encoding="utf-8")
    # --as-train: the import a trainer would read (by default JEMHopQA is all 'test': tests/test_jemhopqa_import.py)
    import_jemhopqa(JemhopqaImportConfig(path=jem, as_train=True, heldout_share=0.3), root / "jemhopqa", BuildContext(quiet=True))
    return {"multihop": (root / "multihop", "multihop_qa"), "egov": (root / "egov", "egov_mcq"),
            "deepresearch": (root / "deepresearch", "deepresearch"), "jemhopqa": (root / "jemhopqa", "multihop_qa")}


NAMES = ("multihop", "egov", "deepresearch", "jemhopqa")


@pytest.mark.parametrize("name", NAMES)
def test_prompt_column_is_what_train_rl_builds(datasets, name):
    folder, task_name = datasets[name]
    task = TASKS[task_name]
    rows = [r for split in ("train", "test") if any((folder / "data").glob(f"{split}-*"))
            for r in read_rows(folder, split)]
    assert rows
    for row in rows:
        assert row["prompt"] == task.to_trl_rows([row])[0]["prompt"]  # what trainer/rl.py task_rows() hands TRL
        assert [m["role"] for m in row["prompt"]][0] == "system" and row["prompt"][-1]["content"].strip()


@pytest.mark.parametrize("name", NAMES)
def test_plain_load_dataset_sees_a_non_empty_user_turn(datasets, name):
    """What ``GRPOTrainer(train_dataset=load_dataset(…))`` reads: a conversational ``prompt`` per row."""
    from datasets import load_dataset

    folder, _ = datasets[name]
    ds = load_dataset("parquet", data_dir=str(folder / "data"), split="train")
    assert "prompt" in ds.column_names and len(ds)
    for prompt in ds["prompt"]:
        users = [m["content"] for m in prompt if m["role"] == "user"]
        assert users and all(u.strip() for u in users)


def _types(folder: Path) -> dict[str, pa.DataType]:
    schemas = {f.name: pq.read_schema(f) for f in (folder / "data").glob("*.parquet") if "rejected" not in f.name}
    first = next(iter(schemas.values()))
    assert all(s.equals(first) for s in schemas.values()), "splits must share one schema"
    return {field.name: field.type for field in first}


@pytest.mark.parametrize("name", NAMES)
def test_declared_features_no_null_types_no_null_strings(datasets, name):
    folder, _ = datasets[name]
    types = _types(folder)
    assert types["prompt"] == PROMPT
    assert not [n for n, t in types.items() if pa.types.is_null(t) or (pa.types.is_list(t) and pa.types.is_null(t.value_type))]
    for row in read_rows(folder):
        assert "null" not in {v for v in row.values() if isinstance(v, str)}


def test_multihop_column_types_do_not_depend_on_the_options(datasets):
    types = _types(datasets["multihop"][0])
    assert types["derivations"] == DERIVATIONS and types["pass_rate"] == pa.float64()  # no --policy: all null
    assert pa.types.is_struct(types["quality"])  # no --llm: all null, still typed
    assert _types(datasets["jemhopqa"][0])["derivations"] == DERIVATIONS
    egov = _types(datasets["egov"][0])
    assert egov["quality"] == pa.float64() and egov["retrieval_rank"] == pa.int64()
    deepresearch = _types(datasets["deepresearch"][0])
    assert deepresearch["dialogue"] == PROMPT and deepresearch["unconfirmed_doc_ids"] == pa.list_(pa.string())


@pytest.mark.parametrize("name", NAMES)
def test_cards_have_hub_valid_licenses(datasets, name):
    folder, _ = datasets[name]
    meta = DatasetCard.load(folder / "README.md").data.to_dict()
    assert [p for p in card_problems(meta, folder) if "license" in p] == []


def test_licenses_propagate_and_override(datasets, tmp_path):
    egov = DatasetCard.load(datasets["egov"][0] / "README.md").data
    assert (egov.license, egov.license_name) == ("other", "e-gov-terms")
    assert egov.license_link == "https://www.digital.go.jp/resources/open_data/public_data_license_v1.0"
    assert DatasetCard.load(datasets["jemhopqa"][0] / "README.md").data.license == "cc-by-sa-4.0"
    assert DatasetCard.load(datasets["multihop"][0] / "README.md").data.license == "cc-by-sa-4.0"
    path = tmp_path / "dev_ver1.2.json"
    path.write_text(json.dumps(JEM_ITEMS[:3], ensure_ascii=False), encoding="utf-8")
    import_jemhopqa(JemhopqaImportConfig(path=path, license="cc-by-4.0"), tmp_path / "dev", BuildContext(quiet=True))
    assert DatasetCard.load(tmp_path / "dev" / "README.md").data.license == "cc-by-4.0"
    with pytest.raises(InputError, match="--license 'other'"):
        import_jemhopqa(JemhopqaImportConfig(path=path, license="other"), tmp_path / "bad", BuildContext(quiet=True))
    assert not (tmp_path / "bad").exists()


def test_jemhopqa_dev_file_is_the_validation_split(tmp_path):
    path = tmp_path / "dev_ver1.2.json"
    path.write_text(json.dumps(JEM_ITEMS, ensure_ascii=False), encoding="utf-8")
    manifest = import_jemhopqa(JemhopqaImportConfig(path=path), tmp_path / "dev", BuildContext(quiet=True))
    assert manifest["splits"] == {"validation": len(JEM_ITEMS)}
    from datasets import load_dataset

    assert load_dataset(str(tmp_path / "dev"), split="validation").num_rows == len(JEM_ITEMS)


# ---------------------------------------------------------------- caps


def _star_triples(n: int) -> list[dict]:
    """One subject with ``n`` two-hop chains through distinct bridges (cap_subject keeps 3 by default)."""
    rows = []
    for i in range(n):
        rows.append({"subject": "星の本", "relation": f"登場人物{i}", "object": f"人物{i}"})
        rows.append({"subject": f"人物{i}", "relation": "出生地", "object": f"町{i}"})
    return rows


def test_caps_zero_keeps_every_given_chain(tmp_path):
    path = tmp_path / "triples.jsonl"
    path.write_text("".join(json.dumps(t, ensure_ascii=False) + "\n" for t in _star_triples(6)), encoding="utf-8")
    capped = build_multihop(MultihopConfig(triples=path, until="chains"), tmp_path / "capped", BuildContext(quiet=True))
    kept = build_multihop(MultihopConfig(triples=path, until="chains", max_per_subject=0, max_per_bridge=0), tmp_path / "all", BuildContext(quiet=True))
    assert capped["splits"]["train"] == 3
    assert kept["splits"]["train"] == 6 and kept["config"]["max_per_subject"] == 0


@settings(max_examples=40, deadline=None)
@given(subject=st.integers(-5, 50), bridge=st.integers(-5, 50))
def test_caps_from_options(subject, bridge):
    if subject < 0 or bridge < 0:
        with pytest.raises(InputError, match="whole number ≥ 0"):
            Caps.from_options(subject, bridge)
        return
    caps = Caps.from_options(subject, bridge)
    assert caps.per_subject == (subject or None) and caps.per_bridge == (bridge or None)
    assert caps.per_relation_pair == Caps().per_relation_pair


def test_cli_caps_and_license_options(tmp_path):
    from tansaku.cli import synth_app as app

    runner = CliRunner()
    bad = runner.invoke(app, ["build", "multihop", "--out", str(tmp_path / "o"), "--triples", "x.jsonl",
                              "--max-per-subject", "-1"])
    assert bad.exit_code == 2 and "--max-per-subject must be a whole number >= 0, got -1" in bad.output
    path = tmp_path / "triples.jsonl"
    path.write_text("".join(json.dumps(t, ensure_ascii=False) + "\n" for t in _star_triples(5)), encoding="utf-8")
    ok = runner.invoke(app, ["build", "multihop", "--out", str(tmp_path / "mh"), "--triples", str(path), "--until",
                             "chains", "--max-per-subject", "0", "--license", "cc-by-4.0", "--quiet"])
    assert ok.exit_code == 0, ok.output
    assert len(read_rows(tmp_path / "mh")) == 5
    assert DatasetCard.load(tmp_path / "mh" / "README.md").data.license == "cc-by-4.0"


# ---------------------------------------------------------------- environment refusal

messages = st.lists(st.fixed_dictionaries({"role": st.sampled_from(["system", "user", "assistant"]),
                                           "content": st.sampled_from(["", "  ", "\n", "質問", "q"])}), max_size=4)


@settings(max_examples=50, deadline=None)
@given(prompt=st.one_of(st.none(), messages, st.just("not a list")))
def test_require_prompt_refuses_rows_without_a_user_turn(prompt):
    row = {"id": "r1", "question": "q"} | ({} if prompt is None else {"prompt": prompt})
    has_user_text = isinstance(prompt, list) and any(m["role"] == "user" and m["content"].strip() for m in prompt)
    if has_user_text:
        require_prompt(row)
    else:
        with pytest.raises(InputError, match="prompt"):
            require_prompt(row)


def test_environment_reset_refuses_a_row_without_prompt(datasets):
    from tansaku.envs.search import build_index

    folder, _ = datasets["multihop"]
    index = folder.parent / "mh-index"
    build_index(folder.parent / "corpus", index)
    environment = make_environment_factory(TASKS["multihop_qa"], index)()
    row = read_rows(folder)[0]
    assert environment.reset(**row) is None
    with pytest.raises(InputError, match="no prompt column"):
        environment.reset(**{k: v for k, v in row.items() if k != "prompt"})
    with pytest.raises(InputError, match="non-empty user turn"):  # TRL's default for a missing prompt
        environment.reset(**{**row, "prompt": [{"role": "user", "content": ""}]})


# ---------------------------------------------------------------- features helpers

triples = st.lists(st.tuples(st.text(max_size=5), st.text(max_size=5), st.lists(st.text(max_size=5), max_size=3)),
                   max_size=4)


@settings(max_examples=40, deadline=None)
@given(derivations=triples)
def test_derivations_round_trip_through_arrow(derivations):
    lists = [[s, r, objs] for s, r, objs in derivations]
    structs = derivation_structs(lists)
    table = pa.Table.from_pylist([{"derivations": structs}], schema=pa.schema([("derivations", DERIVATIONS)]))
    assert derivation_lists(table.to_pylist()[0]["derivations"]) == lists
    assert derivation_structs(structs) == structs


@settings(max_examples=40, deadline=None)
@given(columns=st.dictionaries(st.sampled_from(list("abcdef")), st.sampled_from(["null", "int", "str", "nulls"]),
                               max_size=6),
       declared=st.dictionaries(st.sampled_from(list("abcdefgh")), st.sampled_from(["float", "str"]), max_size=4))
def test_declare_types_null_columns_and_adds_declared_ones(columns, declared):
    kinds = {"null": pa.null(), "int": pa.int64(), "str": pa.string(), "float": pa.float64(),
             "nulls": pa.list_(pa.null()), "strs": pa.list_(pa.string())}
    schema = declare(pa.schema([(n, kinds[k]) for n, k in columns.items()]), {n: kinds[k] for n, k in declared.items()})
    assert set(schema.names) == set(columns) | set(declared)
    for field in schema:
        inferred = columns.get(field.name)
        expected = declared.get(field.name) or {"null": "str", "nulls": "strs"}.get(inferred, inferred)
        assert field.type == kinds[expected]


@pytest.mark.slow
def test_plain_grpo_trainer_rolls_out_the_datasets_own_prompts(datasets, tiny_model_path, tmp_path, monkeypatch):
    """A TRL user's run, no tansaku trainer: ``GRPOTrainer(train_dataset=load_dataset(folder), environment_factory=…)``.
    The questions the model was prompted with are the dataset's own user turns, never TRL's empty default."""
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    from datasets import load_dataset
    from transformers import AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from tansaku.envs.search import build_index

    folder, task_name = datasets["multihop"]
    task = TASKS[task_name]
    build_index(folder.parent / "corpus", tmp_path / "index")
    train = load_dataset(str(folder), split="train").select(range(2))
    questions = {row["prompt"][-1]["content"] for row in train}
    args = GRPOConfig(output_dir=str(tmp_path / "run"), max_steps=1, per_device_train_batch_size=2, num_generations=2,
                      max_completion_length=32, max_tool_calling_iterations=1, use_cpu=True, report_to=[],
                      logging_steps=1, save_strategy="no", reward_weights=list(task.reward_weights.values()),
                      temperature=1.0)
    trainer = GRPOTrainer(model=str(tiny_model_path), processing_class=AutoTokenizer.from_pretrained(tiny_model_path),
                          args=args, reward_funcs=task.reward_functions(), train_dataset=train,
                          environment_factory=make_environment_factory(task, tmp_path / "index"))
    trainer.train()
    prompted = list(trainer._logs["prompt"])  # what TRL logged as each rollout's prompt (its own bookkeeping)
    assert len(prompted) == 2  # one step: 2 rollouts (1 prompt × 2 generations)
    for messages in prompted:
        user = [m["content"] for m in messages if m["role"] == "user"]
        assert user and user[-1] in questions
        assert messages[0]["role"] == "system" and messages[0]["content"] == train[0]["prompt"][0]["content"]
