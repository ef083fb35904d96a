"""General chat data by Hub dataset id (``hf:OWNER/NAME[:CONFIG][@REVISION][#SPLIT]``), read offline from a real
local HF hub cache built here (``datasets--OWNER--NAME/{blobs,refs,snapshots/<sha>}``, as ``hf download`` leaves
it), through ``datasets.load_dataset``: ``synth build general --prompts hf:…`` with a stand-in LLM records the
id, the commit sha and the card's license; an uncached id, revision, config or split is one line and exit 2;
the common chat columns are mapped and unmappable rows dropped with their reason; the same grammar reads a Hub
chat set as ``synth build trajectories --general`` and as a ``train sft`` data source. No socket is opened.

Run: pytest tests/test_general_hub.py
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import socket
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from tansaku.cli import synth_app
from tansaku.core.chat_sources import (
    HubSource,
    UnusableRow,
    chat_messages,
    load_hub_rows,
    parse_hub_source,
    read_chat_source,
)
from tansaku.core.context import BuildContext
from tansaku.core.errors import InputError, MissingInputError
from tansaku.core.store import read_manifest, read_rows
from tansaku.pipelines.general.build import build_general
from tansaku.pipelines.general.config import GeneralConfig
from tansaku.pipelines.trajectories.mix import read_chat_rows
from tansaku.trainer.data import load_sources
from tansaku.trainer.recipe_arguments import DataSource

OLD, NEW = "1" * 40, "2" * 40
CARD = b"---\nlicense: apache-2.0\npretty_name: chat\n---\n# chat\n"
SHAREGPT = [{"id": f"s{i}", "conversations": [{"from": "system", "value": ""}, {"from": "human", "value": f"質問{i}"},
                                              {"from": "gpt", "value": f"参照{i}"}]} for i in range(6)]
MIXED = [  # one row per format, and one with none of them
    {"messages": [{"role": "user", "content": "メッセージ"}, {"role": "assistant", "content": "答"}]},
    {"conversations": [{"from": "human", "value": "シェアGPT"}, {"from": "gpt", "value": "答"}]},
    {"prompt": "プロンプト", "response": "答"},
    {"instruction": "指示", "input": "入力", "output": "答"},
    {"title": "列が無い", "text": "本文"},
]
RESPONDER = "def respond(request):\n    return '答え：' + request.messages[-1]['content']\n"


def parquet_bytes(rows: list[dict]) -> bytes:
    """Rows of several shapes as one table: every column in every row (null where a row has none)."""
    columns = list(dict.fromkeys(k for r in rows for k in r))
    sink = io.BytesIO()
    pq.write_table(pa.Table.from_pylist([{k: r.get(k) for k in columns} for r in rows]), sink)
    return sink.getvalue()


def jsonl_bytes(rows: list[dict]) -> bytes:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows).encode()


def cache_dataset(cache: Path, repo_id: str, sha: str, files: dict[str, bytes], refs: tuple[str, ...] = ("main",)):
    """One commit of a dataset repo in the hub cache layout huggingface_hub writes: content-addressed blobs, the
    snapshot's files as relative links to them, and refs naming the commit."""
    repo = cache / f"datasets--{repo_id.replace('/', '--')}"
    for rel, data in files.items():
        blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
        blob.parent.mkdir(parents=True, exist_ok=True)
        blob.write_bytes(data)
        link = repo / "snapshots" / sha / rel
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    for ref in refs:
        (repo / "refs" / ref).parent.mkdir(parents=True, exist_ok=True)
        (repo / "refs" / ref).write_text(sha)
    return repo / "snapshots" / sha


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    """Offline as a user without a network sets it, and any connection attempt fails the test."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")

    def refuse(*args, **kwargs):
        raise AssertionError(f"a network connection was attempted: {args}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


@pytest.fixture()
def cache(tmp_path, monkeypatch) -> Path:
    """A hub cache of this test's own (HF_HUB_CACHE), holding owner/chat at two commits (tag v1: 3 ShareGPT rows,
    main: 6, and a `ja` config with a `train_sft` split), owner/mixed (one row per format) and owner/tansaku (a
    tansaku dataset with its held-out `test` split)."""
    hub = tmp_path / "hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    cache_dataset(hub, "owner/chat", OLD, {"README.md": CARD, "data/train-00000-of-00001.parquet":
                                           parquet_bytes(SHAREGPT[:3])}, refs=("v1",))
    configs = (b"---\nlicense: apache-2.0\nconfigs:\n- config_name: default\n  data_files:\n  - split: train\n"
               b"    path: data/train-*.parquet\n- config_name: ja\n  data_files:\n  - split: train_sft\n"
               b"    path: ja/sft-*.parquet\n---\n# chat\n")
    cache_dataset(hub, "owner/chat", NEW, {"README.md": configs, "data/train-00000-of-00001.parquet":
                                           parquet_bytes(SHAREGPT), "ja/sft-0.parquet": parquet_bytes(MIXED[:4])})
    cache_dataset(hub, "owner/mixed", "3" * 40, {"data/train.jsonl": jsonl_bytes(MIXED)})
    rows = [{"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]}]
    cache_dataset(hub, "owner/tansaku", "4" * 40, {"manifest.json": b"{}", "data/train-0.parquet": parquet_bytes(rows),
                                                   "data/test-0.parquet": parquet_bytes(rows)})
    return hub


def invoke(*args: str):
    return CliRunner().invoke(synth_app, ["build", "general", *args, "-q"])


def test_the_grammar():
    assert parse_hub_source("hf:owner/chat") == HubSource("owner/chat")
    assert parse_hub_source(Path("hf:owner/chat:ja@v1#train_sft")) == HubSource("owner/chat", "ja", "v1", "train_sft")
    assert parse_hub_source("hf:squad@" + NEW) == HubSource("squad", None, NEW)
    assert parse_hub_source("owner/chat") is None and parse_hub_source("data/x.jsonl") is None
    for bad, says in [("hf:", "empty"), ("hf:a/b/c", "Repo id must be"), ("hf:owner/chat#", "empty split"),
                      ("hf:owner/chat:@v1", "empty config"), ("hf:owner/chat@ v1", "no spaces"), ("hf:owner/chat@", "empty revision")]:
        with pytest.raises(InputError, match=says):
            parse_hub_source(bad, "--prompts")


def test_datasets_offline_resolves_the_snapshot_folder_not_the_id(cache, tmp_path, monkeypatch):
    """What datasets 5.2 does offline: ``load_dataset("owner/name")`` finds only what an online
    ``load_dataset`` once prepared in its own cache, never a hub-cache snapshot; the snapshot folder loads."""
    import datasets
    from huggingface_hub import constants

    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)  # read at import: set as the env says now
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(ConnectionError, match="Couldn't reach"):
        datasets.load_dataset("owner/chat", split="train", cache_dir=str(tmp_path / "datasets-cache"))
    snapshot = cache / "datasets--owner--chat" / "snapshots" / NEW
    assert len(datasets.load_dataset(str(snapshot), split="train", streaming=False,
                                     cache_dir=str(tmp_path / "datasets-cache"))) == 6


def test_build_general_from_a_hub_id_offline_records_id_revision_and_license(cache, tmp_path):
    (tmp_path / "resp.py").write_text(RESPONDER, encoding="utf-8")
    out = tmp_path / "general"
    result = invoke("--prompts", "hf:owner/chat", "--llm", f"scripted:{tmp_path / 'resp.py'}", "--out", str(out),
                    "--heldout-share", "0")
    assert result.exit_code == 0, (result.stderr, result.exception)
    rows = read_rows(out)
    assert len(rows) == 6
    assert [m["content"] for m in rows[0]["messages"]] == ["質問0", "答え：質問0"]  # ShareGPT mapped, answer replaced
    assert {r["prompt_id"] for r in rows} == {f"s{i}" for i in range(6)}
    manifest = read_manifest(out)
    [given] = manifest["inputs"]
    assert given["path"] == f"hf:owner/chat:default@{NEW}#train" and given["records"] == 6 and len(given["sha256"]) == 64
    [hub] = manifest["hub_inputs"]
    assert hub == {"repo_id": "owner/chat", "revision": NEW, "requested": "hf:owner/chat", "config": "default",
                   "split": "train", "license": "apache-2.0", "data_files": ["data/train-00000-of-00001.parquet"]}
    assert manifest["config"]["prompts"] == "hf:owner/chat" and manifest["name"] == "general-chat"
    card = (out / "README.md").read_text(encoding="utf-8")
    assert "license: apache-2.0" in card and "owner/chat" in card and NEW in card  # the Hub card's license carried
    # nothing was written to the cache, and a rerun is the same build
    assert not list(cache.rglob("*.lock")) and invoke("--prompts", "hf:owner/chat", "--llm",
                                                      f"scripted:{tmp_path / 'resp.py'}", "--out", str(out),
                                                      "--heldout-share", "0").exit_code == 0


def test_revision_config_and_split_pick_what_is_read(cache, tmp_path):
    old = load_hub_rows(parse_hub_source("hf:owner/chat@v1"), "--prompts")
    assert old.revision == OLD and len(old.rows) == 3 and old.text() == f"hf:owner/chat:default@{OLD}#train"
    pinned = load_hub_rows(parse_hub_source(f"hf:owner/chat@{OLD}"), "--prompts")
    assert pinned.revision == OLD and len(pinned.rows) == 3
    ja = load_hub_rows(parse_hub_source("hf:owner/chat:ja#train_sft"), "--prompts")
    assert ja.config == "ja" and ja.split == "train_sft" and len(ja.rows) == 4 and ja.files[0].name == "sft-0.parquet"
    out = tmp_path / "general"
    manifest = build_general(GeneralConfig(prompts="hf:owner/chat@v1", llm="scripted:" + str(_responder(tmp_path)),
                                           heldout_share=0), out, BuildContext(quiet=True))
    assert manifest["hub_inputs"][0]["revision"] == OLD and manifest["splits"]["train"] == 3


def _responder(tmp_path: Path) -> Path:
    path = tmp_path / "resp.py"
    path.write_text(RESPONDER, encoding="utf-8")
    return path


@pytest.mark.parametrize("spec, says", [
    ("hf:owner/missing", "not in the local Hugging Face cache"),
    ("hf:owner/chat@v9", "at revision v9"),
    ("hf:owner/chat:nope", "could not read it"),
    ("hf:owner/chat#validation", "no split 'validation' in config 'default' (splits: train)"),
    ("hf:owner/chat@", "empty revision"),
])
def test_what_cannot_be_read_offline_is_one_line_exit_2(cache, tmp_path, spec, says):
    result = invoke("--prompts", spec, "--llm", f"scripted:{_responder(tmp_path)}", "--out", str(tmp_path / "out"))
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error: --prompts ") and says in lines[0], \
        result.stderr
    if "cache" in says:
        assert "hf download --repo-type dataset owner/missing" in lines[0] and "pass a local file" in lines[0]
    assert not (tmp_path / "out").exists()


def test_a_missing_path_that_reads_like_a_repo_id_names_the_hub_form(tmp_path, cache):
    result = invoke("--prompts", "owner/chat", "--llm", f"scripted:{_responder(tmp_path)}", "--out",
                    str(tmp_path / "out"))
    assert result.exit_code == 2 and "(a Hub dataset is named hf:owner/chat)" in result.stderr, result.stderr


def test_common_chat_columns_are_mapped():
    assert chat_messages(MIXED[0]) == ("messages", MIXED[0]["messages"])
    assert chat_messages(MIXED[1])[1] == [{"role": "user", "content": "シェアGPT"}, {"role": "assistant", "content": "答"}]
    assert chat_messages(MIXED[2])[1] == [{"role": "user", "content": "プロンプト"}, {"role": "assistant", "content": "答"}]
    assert chat_messages(MIXED[3])[1] == [{"role": "user", "content": "指示\n\n入力"}, {"role": "assistant", "content": "答"}]
    assert chat_messages({"prompt": [{"role": "user", "content": "q"}], "completion": [
        {"role": "assistant", "content": "a"}]})[1][-1] == {"role": "assistant", "content": "a"}
    assert chat_messages({"instruction": "i", "input": "", "output": None})[1] == [{"role": "user", "content": "i"}]
    assert chat_messages({"messages": None, "prompt": "p"})[0] == "prompt"  # a null column is absent
    for row, reason in [(MIXED[4], "unmappable"), ({"conversations": [{"from": "tool", "value": "x"}]}, "malformed"),
                        ({"messages": "{not json"}, "malformed"), (5, "malformed")]:
        with pytest.raises(UnusableRow) as caught:
            chat_messages(row)
        assert caught.value.reason == reason


def test_unmappable_rows_are_dropped_with_their_reason(cache, tmp_path):
    out = tmp_path / "general"
    build_general(GeneralConfig(prompts="hf:owner/mixed", llm="scripted:" + str(_responder(tmp_path)),
                                heldout_share=0), out, BuildContext(quiet=True))
    manifest = read_manifest(out)
    assert manifest["stages"][0]["dropped"] == {"unmappable": 1} and manifest["splits"]["train"] == 4
    [rejected] = read_rows(out, "rejected")
    assert rejected["reason"] == "unmappable" and "row 4: none of 'messages'" in rejected["detail"]
    assert rejected["detail"].endswith("(keys: title, text)")  # the columns it has values in
    prompts = sorted(r["messages"][0]["content"] for r in read_rows(out))
    assert prompts == sorted(["メッセージ", "シェアGPT", "プロンプト", "指示\n\n入力"])


def test_the_same_id_reads_a_hub_chat_set_for_trajectories_and_train_sft(cache, caplog):
    rows = read_chat_rows("hf:owner/mixed")  # synth build trajectories --general hf:owner/mixed
    assert len(rows) == 4 and all(r["kind"] == "general" and r["messages"][-1]["role"] == "assistant" for r in rows)
    assert "unmappable 1" in caplog.text  # the dropped row, counted with its reason
    assert [m["role"] for m in read_chat_rows("hf:owner/chat")[0]["messages"]] == ["user", "assistant"]
    [(source, trained)] = load_sources([DataSource(path="hf:owner/chat:ja#train_sft")])  # a train sft source
    assert len(trained) == 4 and trained[3]["messages"][0]["content"] == "指示\n\n入力"
    with pytest.raises(InputError, match="held-out split"):  # a tansaku dataset's test split is for train eval
        read_chat_source("hf:owner/tansaku#test")
    assert len(read_chat_source("hf:owner/tansaku")) == 1
    with pytest.raises(MissingInputError, match="hf download --repo-type dataset owner/missing"):
        load_sources([DataSource(path="hf:owner/missing")])


def test_trajectories_mix_a_hub_chat_set_and_record_its_commit(cache, tmp_path):
    from tansaku.envs.search import build_index
    from tansaku.pipelines.corpus.build import build_corpus
    from tansaku.pipelines.corpus.config import CorpusConfig
    from tansaku.pipelines.multihop.build import build_multihop
    from tansaku.pipelines.multihop.config import MultihopConfig
    from tansaku.pipelines.trajectories.build import build_trajectories
    from tansaku.pipelines.trajectories.config import TrajectoriesConfig

    root = Path(__file__).resolve().parents[1]
    script = root / "examples" / "teacher_script.py"
    quiet = BuildContext(quiet=True)
    build_corpus(CorpusConfig(input=root / "examples" / "miniwiki.jsonl", format="jsonl"), tmp_path / "corpus", quiet)
    build_index(tmp_path / "corpus", tmp_path / "index")
    build_multihop(MultihopConfig(corpus=tmp_path / "corpus", max_per_subject=0, max_per_bridge=0,
                                  max_per_relation_pair=0, heldout_share=0.0), tmp_path / "multihop", quiet)
    manifest = build_trajectories(TrajectoriesConfig(
        dataset=tmp_path / "multihop", teacher=f"scripted:{script}", index=str(tmp_path / "index"),
        translator=f"scripted:{script}:rewrite", general=Path("hf:owner/mixed"), ratio=1.0, n=1, limit=4),
        tmp_path / "sft", quiet)
    mixed = [r for r in read_rows(tmp_path / "sft") if r["kind"] == "general"]
    assert mixed and {r["messages"][0]["content"] for r in mixed} <= {"メッセージ", "シェアGPT", "プロンプト", "指示\n\n入力"}
    given = manifest["inputs"][-1]
    assert given["path"] == f"hf:owner/mixed:default@{'3' * 40}#train" and given["records"] == 4 and given["sha256"]
