"""No process-wide state: two builds with different settings in one process, in threads at the same time, do not
affect each other — neither their shard plans (``BuildContext.shards``) nor their LLM options
(``BuildContext.llm``: keys, extra body, slots, cache)."""

from __future__ import annotations

import json
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tansaku.core.context import BuildContext
from tansaku.core.llm import ChatRequest
from tansaku.core.llm.http_backend import DEFAULT_SLOTS
from tansaku.core.llm.settings import LLMOptions
from tansaku.core.shards import ShardPlan
from tansaku.core.store import read_manifest
from tansaku.pipelines.corpus.build import build_corpus
from tansaku.pipelines.corpus.config import CorpusConfig
from tansaku.testing.canned_server import ServerThread, secret_fingerprint

MINIWIKI = Path(__file__).resolve().parents[1] / "examples" / "miniwiki.jsonl"


def _last_request(url: str) -> dict:
    with urllib.request.urlopen(f"{url}/stats/last", timeout=5) as resp:
        return json.loads(resp.read())


def test_two_builds_in_threads_keep_their_own_shard_plans(tmp_path):
    config = CorpusConfig(input=MINIWIKI, format="jsonl")
    alone = build_corpus(config.replace(name="whole"), tmp_path / "alone", BuildContext(quiet=True))
    contexts = {"shard": BuildContext(shards=ShardPlan.from_options("0/2"), quiet=True),
                "whole": BuildContext(quiet=True)}
    with ThreadPoolExecutor(2) as pool:
        futures = {name: pool.submit(build_corpus, config.replace(name="whole"), tmp_path / name, context)
                   for name, context in contexts.items()}
        results = {name: f.result() for name, f in futures.items()}
    assert results["shard"]["shard"]["shard"] == 0 and results["shard"]["version"] is None
    assert not (tmp_path / "shard" / "manifest.json").exists()  # a shard is no dataset
    assert results["whole"]["version"] == alone["version"] == read_manifest(tmp_path / "whole")["version"]


def test_two_contexts_in_threads_keep_their_own_llm_options(monkeypatch):
    """Each client carries the key and extra body of the context that built it, also when both are built and
    used at once (the options used to live in one process-wide object that the last command set)."""
    with ServerThread("canned") as url:
        contexts = [BuildContext(llm=LLMOptions(api_keys={"*": f"sk-{i}"}, extra_body={"top_k": i}, no_cache=True,
                                                concurrency=i + 1)) for i in range(2)]

        def ask(i: int) -> tuple[dict, int]:
            client = contexts[i].client(f"http:canned@{url}")
            client.chat([ChatRequest(messages=[{"role": "user", "content": f"q{i}"}])])
            return _last_request(url), client.max_concurrency

        for i in range(2):  # sequentially: the second command never sees the first one's options
            seen, slots = ask(i)
            assert seen["headers"]["authorization"] == secret_fingerprint(f"Bearer sk-{i}")  # no key echoed
            assert seen["body"]["top_k"] == i
            assert slots == i + 1
        with ThreadPoolExecutor(2) as pool:
            slots = sorted(s for _, s in pool.map(ask, range(2)))
        assert slots == [1, 2]
        monkeypatch.delenv("OPENAI_API_KEY", raising=False)
        monkeypatch.setenv("TANSAKU_NO_CACHE", "1")  # the user's cache stays untouched
        plain = BuildContext().client(f"http:canned@{url}")  # defaults: nothing left behind by the others
        plain.chat([ChatRequest(messages=[{"role": "user", "content": "q"}])])
        seen = _last_request(url)
        assert seen["headers"]["authorization"] == secret_fingerprint("Bearer EMPTY") and "top_k" not in seen["body"]
        assert plain.max_concurrency == DEFAULT_SLOTS
