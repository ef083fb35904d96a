"""Run the doctests of every tansaku module, imported by its installed name (``tansaku.envs.rewards`` …).

pytest's ``--doctest-modules`` would import ``envs/rewards.py`` under a name derived from the checkout's folder
(the repository root is the package ``tansaku``), loading each module twice; walking the package avoids that.
"""

import doctest
import importlib
import pkgutil

import pytest

import tansaku

SKIP = ("tansaku.tests", "tansaku.bench", "tansaku.examples")


def _modules() -> list[str]:
    names = ["tansaku"]
    for info in pkgutil.walk_packages(tansaku.__path__, prefix="tansaku."):
        if not info.name.startswith(SKIP):
            names.append(info.name)
    return sorted(names)


def test_walk_finds_every_layer():
    names = _modules()
    for layer in ("tansaku.core.llm", "tansaku.core.engine", "tansaku.envs.rewards", "tansaku.trainer.recipes",
                  "tansaku.pipelines.multihop.chains", "tansaku.cli", "tansaku.demo"):
        assert layer in names


@pytest.mark.parametrize("name", _modules())
def test_doctests(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE, verbose=False)
    assert result.failed == 0, f"{result.failed} of {result.attempted} doctests failed in {name}"
