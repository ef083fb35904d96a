"""One config object per build: the CLI is generated from it, every field reaches the recipe fingerprint, and no
stage param is a literal.

For each ``synth build`` pipeline (``CASES``) the builder runs up to the ``build_dataset`` call under test
(``call``: earlier calls, such as e-Gov's article build, run for real), which is stopped and its recipe taken.
Then each recipe field of the config is changed, one at a time (``variations``, else an automatic change
for numbers and booleans), and the fingerprint must change; a stage param named like a config field must
follow the field's value, so a stage cannot hard-code a setting its config holds.
"""

from __future__ import annotations

import dataclasses
import importlib
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import typer

from tansaku.core.build_config import cli_flag
from tansaku.core.context import BuildContext
from tansaku.core.llm import ScriptedLLM
from tansaku.core.recipe import build_recipe, fingerprint

FIXTURES = Path(__file__).parent / "fixtures"
MINIWIKI = FIXTURES / "miniwiki" / "miniwiki.jsonl"


class Stopped(Exception):
    def __init__(self, kwargs):
        self.kwargs = kwargs


def _load(target: str):
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


@dataclass
class Case:
    config_class: str  # module:Class
    config: Callable[[type, Path], Any]  # (the config class, a fixture folder) → the base config
    builder: str  # module:function
    variations: dict[str, Any] = field(default_factory=dict)  # field → another valid value (or root → value)
    call: int = 0  # which build_dataset call of the builder is this config's
    skip_fields: tuple[str, ...] = ()  # fields a build refuses to vary on its fixture (say why in the case)


def _corpus(root: Path) -> Path:
    from tansaku.pipelines.corpus.build import build_corpus
    from tansaku.pipelines.corpus.config import CorpusConfig

    out = root / "corpus"
    if not out.exists():
        build_corpus(CorpusConfig(input=MINIWIKI, format="jsonl"), out, BuildContext(quiet=True))
    return out


def _copy(source: Path, name: str) -> Callable[[Path], Path]:
    """A variation: a copy of ``source`` (or of the fixture folder's ``source``) under another name."""
    def make(root: Path) -> Path:
        src = source if source.is_absolute() else root / source
        target = root / name
        if not target.exists():
            (shutil.copytree if src.is_dir() else shutil.copyfile)(src, target)
        return target
    return make


def _question_dataset(root: Path) -> Path:
    """A multihop question dataset and its index (``root / "index"``), for the builds that read questions."""
    from tansaku.envs.search import build_index
    from tansaku.pipelines.multihop.build import build_multihop
    from tansaku.pipelines.multihop.config import MultihopConfig

    out = root / "multihop"
    if not out.exists():
        build_index(_corpus(root), root / "index")
        build_multihop(MultihopConfig(corpus=_corpus(root), index=root / "index", max_per_subject=0,
                                      max_per_bridge=0, max_per_relation_pair=0), out, BuildContext(quiet=True))
    return out


def _written(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def _index(root: Path) -> Path:
    from tansaku.envs.search import build_index

    if not (root / "index").exists():
        build_index(_corpus(root), root / "index")
    return root / "index"


CASES: dict[str, Case] = {
    "corpus": Case("tansaku.pipelines.corpus.config:CorpusConfig", lambda cls, root: cls(input=MINIWIKI, format="jsonl"),
                   "tansaku.pipelines.corpus.build:build_corpus", variations={
                       "input": _copy(MINIWIKI, "other.jsonl"), "format": "auto", "id_field": "doc_id",
                       "title_field": "name", "text_field": "body", "url_field": "link", "license": "cc0-1.0",
                       "license_file": _copy(MINIWIKI, "LICENSE.txt")}),
    "multihop": Case("tansaku.pipelines.multihop.config:MultihopConfig", lambda cls, root: cls(corpus=_corpus(root)),
                     "tansaku.pipelines.multihop.build:build_multihop", variations={
        "corpus": lambda root: _copy(_corpus(root), "corpus-copy")(root),
        "triples": lambda root: _written(root / "triples.jsonl", '{"subject": "灯台", "relation": "所在地", '
                                                                 '"object": "霧島"}\n'),
        "index": _index, "llm": ScriptedLLM(lambda request: "{}", model="scripted:a"),
        "policy": ScriptedLLM(lambda request: "{{x}}", model="scripted:b"), "m": 2, "min_pass_rate": 0.75,
        "until": "chains", "limit": 5, "relations": lambda root: _written(root / "relations.json", "{}"),
        "license": "cc0-1.0", "license_file": _copy(MINIWIKI, "LICENSE.txt"), "heldout_phrasing": ["answer"],
        "min_support": 20}),
    # other builds' cases below (one entry each)
    "trajectories": Case("tansaku.pipelines.trajectories.config:TrajectoriesConfig", lambda cls, root: cls(
        dataset=_question_dataset(root), index=str(root / "index"),
        teacher=f"scripted:{FIXTURES.parent.parent / 'examples' / 'teacher_script.py'}",
        task="multihop_qa"),  # named: the manifest records the task a build guessed, not None
        "tansaku.pipelines.trajectories.build:build_trajectories", variations={
        "dataset": lambda root: _copy(_question_dataset(root), "multihop-copy")(root),
        "index": lambda root: _question_dataset(root) and _copy(root / "index", "index-copy")(root),
        "teacher": f"scripted:{FIXTURES.parent.parent / 'examples' / 'teacher_script.py'}:respond_compact",
        "translator": f"scripted:{FIXTURES.parent.parent / 'examples' / 'teacher_script.py'}:rewrite",
        "judge": f"scripted:{FIXTURES.parent.parent / 'examples' / 'stand_in_llm.py'}",
        "general": FIXTURES / "sft" / "general.jsonl", "limit": 5, "task": "multihop_qa_compact",
        "system_prompt": "日本語で考え、検索してから答えてください。", "interface_variants": 2,
        "catalog": FIXTURES.parent.parent / "pipelines" / "trajectories" / "scenarios.yaml",
        "license": "cc0-1.0", "license_file": MINIWIKI}),
    "deepresearch": Case("tansaku.pipelines.deepresearch.config:DeepResearchConfig", lambda cls, root: cls(
        corpus=_corpus(root), llm="scripted:deepresearch",  # the builder opens the index before build_dataset
        index=importlib.import_module("tansaku.envs.search").build_index(_corpus(root), root / "index")
        and root / "index"),
        "tansaku.pipelines.deepresearch.build:build_deepresearch", variations={
        "llm": f"scripted:{FIXTURES.parent.parent / 'examples' / 'stand_in_llm.py'}", "limit": 5,
        "keyword_max_groups": 5, "license": "cc0-1.0", "license_file": MINIWIKI},
        skip_fields=("corpus", "index")),  # another corpus and its index would be a second fixture build
    "egov": Case("tansaku.pipelines.egov.config:EgovConfig",
                 lambda cls, root: cls(laws=[FIXTURES.parent.parent / "examples" / "laws"]),
                 "tansaku.pipelines.egov.build:build_egov", call=1, variations={
        "laws": [FIXTURES / "egov" / "506AC0000000901_20250401_000000000000000.xml"],
        "llm": f"scripted:{FIXTURES.parent.parent / 'examples' / 'stand_in_llm.py'}",
        "index": "opensearch:never-contacted", "limit": 5, "max_retrieval_rank": 10, "license": "cc0-1.0",
        "license_file": MINIWIKI}),
    "general": Case("tansaku.pipelines.general.config:GeneralConfig", lambda cls, root: cls(
        prompts=FIXTURES.parent.parent / "examples" / "general_prompts.jsonl",
        llm=f"scripted:{FIXTURES.parent.parent / 'examples' / 'stand_in_llm.py'}"),
        "tansaku.pipelines.general.build:build_general", variations={
        "prompts": FIXTURES / "sft" / "general.jsonl", "limit": 3, "license": "cc0-1.0", "license_file": MINIWIKI,
        "llm": f"scripted:{FIXTURES.parent.parent / 'examples' / 'teacher_script.py'}:rewrite"}),
    "jemhopqa": Case("tansaku.pipelines.multihop.jemhopqa_config:JemhopqaImportConfig",
                     lambda cls, root: cls(path=FIXTURES / "jemhopqa" / "train_mini.json"),
                     "tansaku.pipelines.multihop.jemhopqa:import_jemhopqa", variations={
        "path": FIXTURES / "jemhopqa" / "dev_mini.json", "license": "cc0-1.0", "license_file": MINIWIKI}),
}


def _auto_variation(value):
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, float):
        return round(value / 2, 6) if value else 0.1
    raise KeyError


def _captured(case: Case, config, root: Path, monkeypatch) -> dict:
    """The recipe of the builder's ``case.call``-th build_dataset call (earlier calls run for real)."""
    module_name, _, function = case.builder.partition(":")
    module = importlib.import_module(module_name)
    real, calls = module.build_dataset, []

    def stop(**kwargs):
        calls.append(kwargs)
        if len(calls) - 1 < case.call:
            return real(**kwargs)
        raise Stopped(kwargs)

    monkeypatch.setattr(module, "build_dataset", stop)
    out = root / f"out-{len(list(root.glob('out-*')))}"
    with pytest.raises(Stopped) as stopped:
        getattr(module, function)(config, out, BuildContext(quiet=True))
    k = stopped.value.kwargs
    heldout = k.get("heldout")
    return build_recipe(pipeline=k["pipeline"], pipeline_version=k["pipeline_version"], config=k["config"],
                        seed=k["seed"], inputs=k["inputs"], stages=k["stages"], llm=k.get("llm"),
                        chunk_size=k.get("chunk_size", 1000), keep_rejected=k.get("keep_rejected", False),
                        heldout=heldout.recipe() if heldout is not None else None)


def _check_stage_params(recipe: dict, config) -> None:
    names = {f.name for f in dataclasses.fields(config)}
    for stage in recipe["stages"]:
        for key, value in (stage["params"] or {}).items():
            if key in names:
                assert value == config.pick(key)[key], f"stage {stage['name']} param {key} is not the config's"


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_field_changes_the_fingerprint(name, tmp_path, monkeypatch):
    case = CASES[name]
    base_config = case.config(_load(case.config_class), tmp_path)
    base = _captured(case, base_config, tmp_path, monkeypatch)
    _check_stage_params(base, base_config)
    assert base["config"] == {**base["config"], **base_config.recipe()}  # every recipe field is in the manifest
    unvaried = []
    for f in dataclasses.fields(base_config):
        if not f.metadata.get("recipe", True) or f.name in case.skip_fields:
            continue
        try:
            value = case.variations[f.name] if f.name in case.variations else _auto_variation(getattr(base_config, f.name))
            value = value(tmp_path) if callable(value) else value
        except KeyError:
            unvaried.append(f.name)
            continue
        changed = base_config.replace(**{f.name: value})
        recipe = _captured(case, changed, tmp_path, monkeypatch)
        assert fingerprint(recipe) != fingerprint(base), f"{name}: changing {f.name} left the fingerprint as it was"
        _check_stage_params(recipe, changed)
    assert not unvaried, f"{name}: give CASES a variation for {unvaried}"


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_cli_is_the_config(name):
    """``synth build NAME --help`` (or ``synth import NAME --help``) lists every config field's flag with its help
    text."""
    from tansaku.cli import synth_app

    groups = typer.main.get_command(synth_app).commands
    command = groups["build"].commands.get(name) or groups["import"].commands[name]
    options = {opt: param for param in command.params for opt in param.opts}
    for f in dataclasses.fields(_load(CASES[name].config_class)):
        flag = cli_flag(f).split("/")[0].split(" ")[0]
        assert f.metadata.get("argument") or flag in options, f"{name}: no {flag}"
        assert f.metadata.get("argument") or options[flag].help == f.metadata["help"]
