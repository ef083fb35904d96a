"""Shared pytest fixtures. Keep each one small and named after what it provides."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ENV_FIXTURES = Path(__file__).resolve().parent / "fixtures" / "envs"


@pytest.fixture(scope="session")
def envs_index(tmp_path_factory):
    """The embedded search index over the fictional articles of ``tests/fixtures/envs`` (its questions'
    ``multihop.jsonl`` / ``egov_mcq.jsonl`` search it), built once per test session."""
    sys.path.insert(0, str(ENV_FIXTURES))
    try:
        from helpers import build_fixture_index
    finally:
        sys.path.remove(str(ENV_FIXTURES))
    return build_fixture_index(tmp_path_factory.mktemp("envs-corpus"))


@pytest.fixture(scope="session")
def tiny_model_path():
    """Folder of the tiny test model (SmolLM2-135M-Instruct), materialized once into the tansaku cache."""
    from tansaku.core.tiny_model import tiny_model_dir

    return tiny_model_dir()


@pytest.fixture(scope="session", autouse=True)
def fresh_datasets_cache(tmp_path_factory):
    """A `datasets` cache of this test session's own: `datasets` serves what it cached of a local folder again
    after that folder is rebuilt (a test would then read an earlier run's rows), and the user's cache stays
    untouched."""
    import os

    import datasets

    cache = tmp_path_factory.mktemp("hf-datasets-cache")
    old, old_env = datasets.config.HF_DATASETS_CACHE, os.environ.get("HF_DATASETS_CACHE")
    datasets.config.HF_DATASETS_CACHE = cache
    os.environ["HF_DATASETS_CACHE"] = str(cache)  # child processes (the CLI tests) too
    yield cache
    datasets.config.HF_DATASETS_CACHE = old
    if old_env is None:
        os.environ.pop("HF_DATASETS_CACHE", None)
    else:
        os.environ["HF_DATASETS_CACHE"] = old_env
