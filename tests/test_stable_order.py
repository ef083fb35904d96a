"""What reaches a prompt or a file does not depend on ``PYTHONHASHSEED`` (a set's iteration order): the search
snippet's 【】 marks, the redaction order of secrets; and the stand-in LLM answers multihop's cardinality
confirmation (it answered 500 before, and the client retried for ~17 s).

Run: pytest tests/test_stable_order.py
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

from tansaku.core.llm import from_spec
from tansaku.pipelines.multihop.cardinality import confirm_with_llm

ROOT = Path(__file__).resolve().parents[1]

# Two query words of which only overlapping two-character pieces occur ("レン", "ント" in "サイレント"): the
# piece marked first wins the overlap, so an order left to the set changed the snippet with the hash seed.
SNIPPET = """
from tansaku.envs.search.base import make_snippet
print(make_snippet("サイレントの話。オーケストラのリハーサル", ["レンズ ントロ", "オーラ リハビリ"], 40))
"""

SECRETS = """
import ast
import os
from tansaku.core.redact import _env_secrets
print(_env_secrets())
"""


def _under_hash_seeds(code: str, seeds=range(6), env: dict | None = None) -> set[str]:
    outputs = set()
    for seed in seeds:
        run_env = {**os.environ, **(env or {}), "PYTHONHASHSEED": str(seed)}
        done = subprocess.run([sys.executable, "-c", code], env=run_env, capture_output=True, text=True,
                              timeout=120, check=True)
        outputs.add(done.stdout)
    return outputs


def test_a_snippet_is_the_same_under_every_hash_seed():
    outputs = _under_hash_seeds(SNIPPET)
    assert outputs == {"サイ【レン】トの話。【オー】ケストラの【リハ】ーサル\n"}, outputs


def test_secrets_of_equal_length_are_redacted_in_one_order_under_every_hash_seed():
    env = {f"TANSAKU_TEST_{n}_TOKEN": value for n, value in enumerate(["zzzz-secret-1", "aaaa-secret-2",
                                                                         "mmmm-secret-3"])}
    outputs = _under_hash_seeds(SECRETS, env=env)
    assert len(outputs) == 1
    listed = ast.literal_eval(outputs.pop())
    ours = [v for v in listed if v.endswith(("secret-1", "secret-2", "secret-3"))]
    assert ours == ["aaaa-secret-2", "mmmm-secret-3", "zzzz-secret-1"]


def test_the_stand_in_llm_answers_the_cardinality_confirmation():
    llm = from_spec(f"scripted:{ROOT / 'examples' / 'stand_in_llm.py'}")
    verdicts = confirm_with_llm(["出身地", "出演者"], llm)
    assert verdicts == {"出身地": True, "出演者": True}
    assert llm.cache_stats()["errors"] == 0
