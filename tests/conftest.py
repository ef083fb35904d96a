"""Shared pytest fixtures. Keep each one small and named after what it provides."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def tiny_model_path():
    """Folder of the tiny test model (SmolLM2-135M-Instruct), materialized once into the tansaku cache."""
    from tansaku.core.tiny_model import tiny_model_dir

    return tiny_model_dir()
