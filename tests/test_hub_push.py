"""``synth push`` without the network: every pipeline's card meets the Hub's metadata rules (checked offline,
``data_cards.card_problems``), egov's ``articles`` is a config, a dry run lists exactly the files that would
upload (no index, no lock files, no checkpoints), uploaded manifests and cards hold no absolute local path,
and offline mode, an unchosen visibility or a card the Hub would reject end in one line (exit 2).

Run: pytest tests/test_hub_push.py
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from huggingface_hub import DatasetCard
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from tansaku.cli import synth_app
from tansaku.core.context import BuildContext
from tansaku.core.hub import local_name, upload_plan
from tansaku.data_cards import HUB_LICENSES, card_problems, render_card
from tansaku.pipelines.corpus.config import CorpusConfig
from tansaku.pipelines.deepresearch.config import DeepResearchConfig
from tansaku.pipelines.egov.config import EgovConfig
from tansaku.pipelines.multihop.config import MultihopConfig
from tansaku.pipelines.trajectories.config import TrajectoriesConfig

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "examples" / "teacher_script.py"
LICENSE_NAME_PROBLEM = "license: other needs a license_name"
PIPELINES = ["corpus", "multihop", "egov", "egov/articles", "sft", "deepresearch"]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """One tiny dataset of every pipeline, built with the rule-based and scripted paths (no model)."""
    from tansaku.envs.search import build_index
    from tansaku.pipelines.corpus.build import build_corpus
    from tansaku.pipelines.deepresearch.build import build_deepresearch
    from tansaku.pipelines.egov.build import build_egov
    from tansaku.pipelines.multihop.build import build_multihop
    from tansaku.pipelines.trajectories.build import build_trajectories

    base = tmp_path_factory.mktemp("hub")
    build_corpus(CorpusConfig(input=ROOT / "examples" / "miniwiki.jsonl", format="jsonl"), base / "corpus", BuildContext(quiet=True))
    build_index(base / "corpus", base / "index")
    build_multihop(MultihopConfig(corpus=base / "corpus", max_per_subject=0, max_per_bridge=0, max_per_relation_pair=0), base / "multihop", BuildContext(quiet=True))
    build_egov(EgovConfig(laws=[ROOT / "examples" / "laws"]), base / "egov", BuildContext(quiet=True))
    build_trajectories(TrajectoriesConfig(
        dataset=base / "multihop", teacher=f"scripted:{SCRIPT}:respond_compact",
        translator=f"scripted:{SCRIPT}:rewrite_compact", index=base / "index", n=1, limit=4), base / "sft",
        BuildContext(quiet=True))
    build_deepresearch(DeepResearchConfig(corpus=base / "corpus", index=base / "index", llm="scripted:deepresearch"),
                       base / "deepresearch", BuildContext(quiet=True))
    return base


def _give_license(folder: Path, name: str = "egov-terms") -> None:
    """What a build with a propagated license writes: `other` with its id and link."""
    card = DatasetCard.load(folder / "README.md")
    card.data.license_name, card.data.license_link = name, "https://laws.e-gov.go.jp/terms/"
    card.save(folder / "README.md")


@pytest.mark.parametrize("name", PIPELINES)
def test_every_pipeline_card_meets_the_hub_rules(built, name):
    folder = built / name
    card = DatasetCard.load(folder / "README.md")
    meta = card.data.to_dict()
    assert meta["license"] in HUB_LICENSES and meta["configs"][0]["config_name"] == "default"
    problems = card_problems(meta, folder)
    # The only problem allowed is the one `synth push` refuses: an `other` license without its id.
    expected = [p for p in problems if p.startswith(LICENSE_NAME_PROBLEM)]
    assert problems == expected and (expected == []) == (meta["license"] != "other" or "license_name" in meta)
    for config in meta["configs"]:  # every declared file set exists
        assert all(list(folder.glob(f["path"])) for f in config["data_files"]), config


def test_egov_card_declares_articles_as_a_config(built, tmp_path):
    from datasets import load_dataset

    configs = {c["config_name"]: c for c in DatasetCard.load(built / "egov" / "README.md").data.configs}
    assert set(configs) >= {"default", "articles"}
    assert configs["articles"]["data_files"] == [{"split": "train", "path": "articles/data/train-*.parquet"}]
    articles = load_dataset(str(built / "egov"), "articles", cache_dir=str(tmp_path))
    manifest = json.loads((built / "egov" / "articles" / "manifest.json").read_text())
    assert len(articles["train"]) == manifest["splits"]["train"] > 0


def _data_files(folder: Path) -> set[str]:
    return {p.relative_to(folder).as_posix() for p in folder.glob("**/data/*.parquet")}


def test_dry_run_lists_exactly_the_files_that_would_upload(built, tmp_path, monkeypatch):
    import huggingface_hub

    monkeypatch.setattr(huggingface_hub, "HfApi", None)  # any network use fails the test
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # a dry run needs no network
    folder = built / "egov"
    _give_license(folder)
    (folder / ".work").mkdir(exist_ok=True)  # a leftover checkpoint never uploads
    (folder / ".work" / "chunk.partial").write_text("x")
    (folder / ".LICENSE.k1ll3d.tmp").write_text("x")  # a write killed before its os.replace never uploads
    result = CliRunner().invoke(synth_app, ["push", str(folder), "--repo-id", "me/egov", "--dry-run"])
    assert result.exit_code == 0, result.output
    listed = result.stdout.split()
    expected = _data_files(folder) | {"README.md", "manifest.json", "articles/README.md", "articles/manifest.json"}
    assert sorted(listed) == listed and set(listed) == expected and len(listed) == len(expected)
    assert (folder / "index").is_dir() and any(f.suffix == ".lock" for f in (folder / "index").iterdir())

    result = CliRunner().invoke(synth_app, ["push", str(folder), "--repo-id", "me/egov", "--dry-run",
                                            "--include-index"])
    with_index = set(result.stdout.split())
    index_files = {f"index/{f.name}" for f in (folder / "index").iterdir() if not f.name.endswith(".lock")}
    assert result.exit_code == 0 and with_index == expected | index_files and "index/meta.json" in with_index


def test_uploaded_manifests_and_cards_hold_no_absolute_path(built):
    _give_license(built / "egov")
    plan = upload_plan(built / "egov")
    assert str(built) in (built / "egov" / "manifest.json").read_text()  # the local manifest keeps them
    for rel in ("manifest.json", "README.md", "articles/manifest.json", "articles/README.md"):
        assert str(built) not in plan[rel].decode() and "/tmp" not in plan[rel].decode(), rel
    manifest = json.loads(plan["manifest.json"])
    local = json.loads((built / "egov" / "manifest.json").read_text())
    assert manifest["parents"] == ["articles"]
    assert [i["sha256"] for i in manifest["inputs"]] == [i["sha256"] for i in local["inputs"]]
    assert {k: v for k, v in manifest.items() if k not in ("inputs", "parents", "config", "stages")} == \
        {k: v for k, v in local.items() if k not in ("inputs", "parents", "config", "stages")}
    card = DatasetCard(plan["README.md"].decode())
    assert card_problems(card.data.to_dict(), built / "egov") == []


class FakeHub:
    """Records what push would send to the Hub."""

    calls: list = []

    def __init__(self, token=None):
        pass

    def create_repo(self, repo_id, **kw):
        FakeHub.calls.append(("create_repo", repo_id, kw))

    def create_commit(self, repo_id, operations, **kw):
        FakeHub.calls.append(("create_commit", repo_id, sorted(op.path_in_repo for op in operations)))


def test_push_sends_the_dry_run_files_with_the_chosen_visibility(built, monkeypatch):
    import huggingface_hub

    monkeypatch.setattr(huggingface_hub, "HfApi", FakeHub)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)  # CI runs offline; huggingface_hub read it at import
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    FakeHub.calls = []
    folder = built / "multihop"
    result = CliRunner().invoke(synth_app, ["push", str(folder), "--repo-id", "me/mh", "--private"])
    assert result.exit_code == 0, result.output
    assert result.output.strip().endswith("https://huggingface.co/datasets/me/mh")
    assert FakeHub.calls[0] == ("create_repo", "me/mh", {"repo_type": "dataset", "private": True, "exist_ok": True})
    assert FakeHub.calls[1][2] == sorted(upload_plan(folder)) == sorted(_data_files(folder) |
                                                                         {"README.md", "manifest.json"})


@pytest.mark.parametrize("args, env, message", [
    (["--repo-id", "me/mh"], {}, "pass --private or --public"),
    (["--repo-id", "me/mh", "--public"], {"HF_HUB_OFFLINE": "1"}, "HF_HUB_OFFLINE is set"),
])
def test_push_refuses_in_one_line(built, monkeypatch, args, env, message):
    import huggingface_hub

    monkeypatch.setattr(huggingface_hub, "HfApi", None)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    result = CliRunner().invoke(synth_app, ["push", str(built / "multihop"), *args])
    assert result.exit_code == 2 and message in result.output and result.output.count("\n") == 1, result.output


def test_push_refuses_a_card_the_hub_would_reject(built, tmp_path, monkeypatch):
    import shutil

    import huggingface_hub

    monkeypatch.setattr(huggingface_hub, "HfApi", None)
    folder = tmp_path / "corpus"
    shutil.copytree(built / "corpus", folder)
    card = DatasetCard.load(folder / "README.md")
    card.data.license = "other"
    card.data.license_name = None
    card.save(folder / "README.md")
    result = CliRunner().invoke(synth_app, ["push", str(folder), "--repo-id", "me/c", "--private"])
    assert result.exit_code == 2 and LICENSE_NAME_PROBLEM in result.output, result.output
    result = CliRunner().invoke(synth_app, ["push", str(folder), "--repo-id", "me/c", "--dry-run"])
    assert result.exit_code == 2 and LICENSE_NAME_PROBLEM in result.output, result.output


MANIFEST = {"name": "t", "version": "v", "pipeline": "p", "pipeline_version": "1", "created_at": "now",
            "code": {"commit": None, "dirty": None}, "splits": {"train": 1}, "stages": [], "llm": None,
            "inputs": [], "parents": [], "config": {}, "seed": 0}


def test_card_renders_inputs_without_records_or_hash_and_the_version_without_a_commit():
    """A manifest input without ``records`` (an older manifest) and a remote index (``opensearch:NAME``, no
    sha256) render as a line each; a wheel install (commit None) shows its version and no `None` commit."""
    from tansaku.core.provenance import describe_input

    remote = describe_input("opensearch:wiki")
    assert remote == {"path": "opensearch:wiki", "sha256": None, "records": None}
    manifest = {**MANIFEST, "code": {"package": "tansaku", "version": "9.8.7", "commit": None, "dirty": None},
                "inputs": [{"path": "old/corpus", "sha256": "ab" * 32}, remote,
                           {"path": "q.jsonl", "sha256": "cd" * 32, "records": 3}]}
    text = render_card(manifest, [{"q": "x"}], {})
    assert "- `old/corpus` (sha256 `abababababababab`)\n" in text
    assert "- `opensearch:wiki` (not hashed)\n" in text
    assert "- `q.jsonl` (sha256 `cdcdcdcdcdcdcdcd`, 3 records)\n" in text
    assert "with tansaku 9.8.7\n" in text and "None" not in text.split("## Funnel")[0]
    checkout = {**manifest, "code": {**manifest["code"], "commit": "f00d", "dirty": True}}
    assert "with tansaku 9.8.7, commit `f00d` (with uncommitted changes)\n" in render_card(checkout, [], {})


GOOD_NAMES = ["egov-terms", "my-license-1.0", "jemhopqa", "cc-by-sa-4.0+egov"]
BAD_NAMES = ["", "My License", "日本の規約", "-leading-dash", "with space"]
PLAIN_TEXT = st.text(st.characters(blacklist_categories=("Cc", "Cs", "Zl", "Zp")), min_size=1, max_size=12)


@settings(max_examples=40, deadline=None)
@given(license=st.one_of(st.sampled_from(sorted(HUB_LICENSES)), st.just("other"), PLAIN_TEXT),
       license_name=st.one_of(st.none(), st.sampled_from(GOOD_NAMES + BAD_NAMES)),
       link=st.one_of(st.none(), st.just("https://example.org/terms")))
def test_rendered_cards_are_flagged_exactly_when_the_hub_would_reject_them(tmp_path_factory, license,
                                                                           license_name, link):
    root = tmp_path_factory.mktemp("card")
    (root / "data").mkdir()
    (root / "data" / "train-00000-of-00001.parquet").write_bytes(b"")
    card = {"license": license, "license_name": license_name, "license_link": link}
    meta = DatasetCard(render_card(MANIFEST, [{"q": "x"}], card)).data.to_dict()
    assert meta["license"] == license
    assert meta.get("license_name") == (license_name or None) and meta.get("license_link") == link
    problems = card_problems(meta, root)
    bad_license = license not in HUB_LICENSES
    bad_name = license == "other" and license_name not in GOOD_NAMES
    assert any("not a Hub license id" in p for p in problems) == bad_license
    assert any(p.startswith(LICENSE_NAME_PROBLEM) for p in problems) == bad_name
    assert len(problems) == bad_license + bad_name  # the data files exist: no config problem


@settings(max_examples=60, deadline=None)
@given(parts=st.lists(st.text(st.characters(whitelist_categories=("L", "N")), min_size=1, max_size=6),
                      min_size=1, max_size=4))
def test_local_names_are_relative_to_the_dataset(tmp_path_factory, parts):
    root = tmp_path_factory.mktemp("ds")
    name = local_name(str(root.joinpath(*parts)), root)
    assert name == "/".join(parts) and not name.startswith("/")
    assert local_name("/nowhere/near/" + "/".join(parts), root) == parts[-1]


def _edit_manifest(folder: Path, **changes) -> None:
    manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
    (folder / "manifest.json").write_text(json.dumps({**manifest, **changes}), encoding="utf-8")


def _truncate_shard(folder: Path) -> None:
    shard = next((folder / "data").glob("train-*.parquet"))
    shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])


def _nested(folder: Path, text: str) -> None:
    (folder / "sub").mkdir()
    (folder / "sub" / "manifest.json").write_text(text, encoding="utf-8")


PUSH, BOTH = ("push",), ("push", "info")
DAMAGED = {  # issue 28: each was a traceback from these commands
    "card_yaml_broken": (PUSH, lambda d: (d / "README.md").write_text("---\nlicense: [x\n  a: : :\n---\n", encoding="utf-8")),
    "card_yaml_a_list": (PUSH, lambda d: (d / "README.md").write_text("---\n- a\n---\nhi\n", encoding="utf-8")),
    "card_not_utf8": (PUSH, lambda d: (d / "README.md").write_bytes(b"\xff\xfe---\n")),
    "card_missing": (PUSH, lambda d: (d / "README.md").unlink()),
    "parquet_truncated": (PUSH, _truncate_shard),
    "nested_manifest_a_list": (PUSH, lambda d: _nested(d, "[]")),
    "nested_manifest_deep": (PUSH, lambda d: _nested(d, "[" * 100_000 + "]" * 100_000)),
    "splits_a_list": (BOTH, lambda d: _edit_manifest(d, splits=[1])),
    "split_count_text": (BOTH, lambda d: _edit_manifest(d, splits={"train": "x"})),
    "stages_of_numbers": (BOTH, lambda d: _edit_manifest(d, stages=[5])),
}


@pytest.fixture(scope="module")
def corpus_dataset(tmp_path_factory) -> Path:
    from tansaku.pipelines.corpus.build import build_corpus

    out = tmp_path_factory.mktemp("damaged") / "corpus"
    build_corpus(CorpusConfig(input=ROOT / "examples" / "miniwiki.jsonl", format="jsonl", license="cc-by-4.0"), out, BuildContext(quiet=True))
    return out


@pytest.mark.parametrize("damage", sorted(DAMAGED))
def test_a_damaged_dataset_is_one_line_for_push_and_info(damage, corpus_dataset, tmp_path, monkeypatch):
    monkeypatch.delenv("TANSAKU_DEBUG", raising=False)
    commands, damage_it = DAMAGED[damage]
    folder = tmp_path / "ds"
    shutil.copytree(corpus_dataset, folder)
    assert CliRunner().invoke(synth_app, ["push", str(folder), "--repo-id", "org/x", "--dry-run"]).exit_code == 0
    damage_it(folder)
    argvs = {"push": ["push", str(folder), "--repo-id", "org/x", "--dry-run"], "info": ["info", str(folder)]}
    for argv in (argvs[name] for name in commands):
        result = CliRunner().invoke(synth_app, argv)
        assert result.exit_code == 2, (argv[0], result.exit_code, result.stderr, result.exception)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"error: {folder}"), result.stderr
