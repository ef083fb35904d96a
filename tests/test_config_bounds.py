"""Option bounds are declared once, with the option (``option(min=…, max=…)``): the CLI's parser, a Python
caller's ``BuildConfig.check()`` and every builder read them from there, and a builder refuses an
out-of-bounds value before any work (nothing is written)."""

from __future__ import annotations

import dataclasses
import importlib
import typing
from pathlib import Path

import pytest

from tansaku.core.build_config import _value_type, cli_flag
from tansaku.core.errors import InputError

BUILDS = {  # config class → builder (module:function)
    "tansaku.pipelines.corpus.config:CorpusConfig": "tansaku.pipelines.corpus.build:build_corpus",
    "tansaku.pipelines.multihop.config:MultihopConfig": "tansaku.pipelines.multihop.build:build_multihop",
    "tansaku.pipelines.egov.config:EgovConfig": "tansaku.pipelines.egov.build:build_egov",
    "tansaku.pipelines.trajectories.config:TrajectoriesConfig":
        "tansaku.pipelines.trajectories.build:build_trajectories",
    "tansaku.pipelines.deepresearch.config:DeepResearchConfig":
        "tansaku.pipelines.deepresearch.build:build_deepresearch",
    "tansaku.pipelines.general.config:GeneralConfig": "tansaku.pipelines.general.build:build_general",
    "tansaku.pipelines.multihop.jemhopqa_config:JemhopqaImportConfig":
        "tansaku.pipelines.multihop.jemhopqa:import_jemhopqa",
}


def load(target: str):
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


def required(config_class) -> dict:
    """Placeholder values for the required fields (bounds are checked before any path is read)."""
    hints = typing.get_type_hints(config_class)
    values = {}
    for f in dataclasses.fields(config_class):
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            kind = _value_type(hints[f.name])
            values[f.name] = [Path("x")] if "list" in str(hints[f.name]) else Path("x") if kind is Path else "x"
    return values


def below_bounds() -> list:
    """(config class, field, an out-of-bounds value) for every bounded number field of every build."""
    cases = []
    for target in BUILDS:
        cls = load(target)
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            bounds = f.metadata.get("bounds") or {}
            kind = _value_type(hints[f.name])
            if kind not in (int, float) or (bounds.get("min") is None and bounds.get("max") is None):
                continue
            value = bounds["min"] - 1 if bounds.get("min") is not None else bounds["max"] + 1
            cases.append(pytest.param(target, f.name, kind(value), id=f"{cls.__name__}.{f.name}"))
    return cases


@pytest.mark.parametrize("target, name, value", below_bounds())
def test_check_refuses_a_value_outside_the_declared_bounds_naming_the_flag(target, name, value):
    cls = load(target)
    flag = cli_flag(next(f for f in dataclasses.fields(cls) if f.name == name)).split("/")[0]
    config = cls(**{**required(cls), name: value})
    with pytest.raises(InputError, match=f"^{flag} must be"):
        config.check()


def test_a_value_within_bounds_passes():
    cls = load("tansaku.pipelines.multihop.config:MultihopConfig")
    assert cls(corpus=Path("x"), k=1, cardinality_confidence=0.5).check().k == 1


def test_cross_field_rules_are_the_configs_own():
    cls = load("tansaku.pipelines.deepresearch.config:DeepResearchConfig")
    with pytest.raises(InputError, match="--keyword-max-chars must be >= --keyword-min-chars"):
        cls(**required(cls), keyword_min_chars=5, keyword_max_chars=4).check()


@pytest.mark.parametrize("target", list(BUILDS))
def test_every_builder_refuses_before_any_work(target, tmp_path):
    """The first bounded field of each build, out of bounds: the builder's first act refuses it."""
    cls, builder = load(target), load(BUILDS[target])
    _, name, value = next(p.values for p in below_bounds() if p.values[0] == target)
    flag = cli_flag(next(f for f in dataclasses.fields(cls) if f.name == name)).split("/")[0]
    out = tmp_path / "out"
    with pytest.raises(InputError, match=f"^{flag} must be"):
        builder(cls(**{**required(cls), name: value}), out)
    assert not out.exists()
