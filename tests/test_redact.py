"""``tansaku.core.redact``: every secret channel masked, everything else left as it is, idempotent; and the two
places that redact what an older tansaku recorded: a rerun's recipe comparison, and ``synth push``'s upload plan.
End to end through the CLI: ``tests/test_secret_scan.py``.

    pytest tests/test_redact.py -q
"""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tansaku.core.context import BuildContext
from tansaku.core.engine import Drop, map_stage
from tansaku.core.hub import upload_plan
from tansaku.core.redact import MASK, is_secret_name, redact_mapping, redact_text
from tansaku.core.store import build_dataset, read_manifest

MASKED = [
    # URL user information: user and password, a token as the user, several URLs in a spec, in error text
    ("http://alice:pw1@h:8000/v1", "http://***@h:8000/v1"),
    ("https://tok123@h", "https://***@h"),
    ("http:m@http://u:p@gpu1:8000,http://u2:p2@gpu2:8000", "http:m@http://***@gpu1:8000,http://***@gpu2:8000"),
    ("opensearch https://admin:p@ss@os:9200/idx", "opensearch https://***@os:9200/idx"),
    # query strings: every value, names kept, sentence punctuation after the URL kept
    ("at http://h/v1?api-key=k1&x=2: Connection error.", "at http://h/v1?api-key=***&x=***: Connection error."),
    ("'http://h/v1/?api-key=k1/v1'", "'http://h/v1/?api-key=***'"),
    # secret-named keys: bare, JSON, Python repr, options, headers
    ("api_key=sk1 apikey: k2 x-api-key=k3", "api_key=*** apikey: *** x-api-key=***"),
    ('{"hub_token": "hf1", "password": "p w"}', '{"hub_token": "***", "password": "***"}'),
    ("{'client_secret': 'c1', 'HF_TOKEN': 'h1'}", "{'client_secret': '***', 'HF_TOKEN': '***'}"),
    ("--hub_token hf1 --api-key=k1 --password p1", "--hub_token *** --api-key=*** --password ***"),
    ("Authorization: Basic dXNlcjpw", "Authorization: ***"),
    ("Authorization: Bearer abc.def", "Authorization: ***"),
    ("401: Bearer xyz was refused", "401: Bearer *** was refused"),
    # well-known token shapes anywhere
    ("key sk-proj-abcdefghij0123456789 used", "key *** used"),
    ("hf_abcdefghijklmnop1234 expired", "*** expired"),
]

KEPT = [
    "架空図書館運営法 第一条（目的）この法律は、住民の読書環境の向上に資することを目的とする。",
    "https://laws.e-gov.go.jp/law/506AC0000000901",
    "http://gpu1:8000/v1",
    "/work/main/tests/fixtures/egov/506AC0000000901_20250401_000000000000000.xml",
    "C:\\data\\corpus.jsonl",
    "3.14 -2 1e-05 0.30000000000000004 12,345",
    "max_tokens=512 max_new_tokens: 64 tokens=3 num_tokens: 9 tokenizer=tiny",
    "pad_token: <|im_end|> eos_token=<|endoftext|> key=article_id keyword_fields: law_id",
    "2026-12-05 04:22:48 tansaku egov_mcq · generate done: received 9, kept 2, dropped 7 (llm_error=7)",
    "stage 'judge' param threshold 0.75 → 0.9; llm scripted:a → scripted:b",
    "http:Qwen/Qwen3-8B@http://gpu1:8000 vllm:Qwen/Qwen3-8B transformers:tiny scripted:examples/x.py:rewrite",
    "sk-learn-extension, hf_hub_download, a basic question",
    "author: 山田 authority=国 passage: 本文",
    "",
]


@pytest.mark.parametrize("text, expected", MASKED)
def test_each_channel_is_masked(text, expected):
    assert redact_text(text) == expected
    assert redact_text(expected) == expected  # idempotent: a redacted record redacts to itself


@pytest.mark.parametrize("text", KEPT)
def test_ordinary_text_urls_paths_and_numbers_are_left_alone(text):
    assert redact_text(text) == text


def test_secret_environment_values_are_masked_wherever_they_appear(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "envkey-0123456789")
    monkeypatch.setenv("HF_TOKEN", "hftok-0123456789")
    monkeypatch.setenv("TANSAKU_SHORT_TOKEN", "x")  # too short to mask: it would mangle ordinary words
    monkeypatch.setenv("PWD", "/work/main")  # the working directory is no password
    text = "sent envkey-0123456789 and hftok-0123456789 from /work/main x"
    assert redact_text(text) == "sent *** and *** from /work/main x"
    assert redact_mapping({"note": text}) == {"note": "sent *** and *** from /work/main x"}


def test_a_mapping_masks_secret_keys_whole_and_redacts_every_string():
    record = {
        "judge": {"model": "http:j@http://u:p@h:1/v1?api-key=q", "api_key": "sk-judge", "api_keys": {"*": "k"},
                  "timeout": 30.0, "hub_token": None, "token": "", "password": 1234},
        "args": ["--max_steps", "2", "--hub_token", "hf1", "--api-key", "k2", "--seed", "0"],
        "pair": ("--token", "t1"),
        "http://u:p@h/v1": "endpoint as a key",
        "text": "探索 max_tokens=512",
    }
    assert redact_mapping(record) == {
        "judge": {"model": "http:j@http://***@h:1/v1?api-key=***", "api_key": MASK, "api_keys": {"*": MASK},
                  "timeout": 30.0, "hub_token": None, "token": "", "password": 1234},
        "args": ["--max_steps", "2", "--hub_token", MASK, "--api-key", MASK, "--seed", "0"],
        "pair": ("--token", MASK),
        "http://***@h/v1": "endpoint as a key",
        "text": "探索 max_tokens=512",
    }
    assert redact_mapping(redact_mapping(record)) == redact_mapping(record)


def test_secret_names():
    assert all(map(is_secret_name, ["api_key", "API-KEY", "apiKeys", "private_key", "hubToken", "auth",
                                    "aws_secret_access_key", "db_passwd", "Cookie"]))
    assert not any(map(is_secret_name, ["key", "keys", "monkey", "sort_key", "token_count", "tokens_per_second",
                                        "author", "oauth_url", "bos_token", "PWD", None, 3]))


def _drop_with_endpoint(record):
    return Drop("llm_error", detail="gave up: APIConnectionError at http://alice:pw@h:1/v1?api-key=q1") \
        if record["id"] == 0 else record


def test_a_rerun_matches_and_a_push_redacts_what_an_older_build_recorded(tmp_path):
    """A build records its rejected detail and LLM endpoints redacted; a folder an older tansaku wrote with them
    in clear still resumes (its recipe compares redacted) and uploads redacted: manifest, card, rejected rows."""
    out = tmp_path / "ds"
    llm = {"backend": "http", "model": "m", "params": {"base_urls": ["http://alice:pw@h:1/v1?api-key=q1"]}}

    def build():
        return build_dataset(out=out, name="t", pipeline="test", pipeline_version="1", config={"x": 1}, seed=0,
                             inputs=[], source=[{"id": i, "text": f"本文{i}"} for i in range(5)],
                             stages=[map_stage("call", _drop_with_endpoint)], llm=llm, keep_rejected=True,
                             card={"license": "cc-by-sa-4.0"}, context=BuildContext(quiet=True))

    manifest = build()
    secrets = ("alice", ":pw@", "q1")
    rejected = next((out / "data").glob("rejected-*.parquet"))
    recorded = [(out / "manifest.json").read_text(encoding="utf-8"), (out / "README.md").read_text(encoding="utf-8"),
                json.dumps(pq.read_table(rejected).to_pylist())]
    assert not [s for s in secrets for text in recorded if s in text]
    assert manifest["llm"]["params"]["base_urls"] == ["http://***@h:1/v1?api-key=***"]

    # what an older tansaku wrote: the endpoint in clear in the manifest, the card and the rejected detail
    clear = "http://alice:pw@h:1/v1?api-key=q1"
    old = read_manifest(out)
    old["llm"]["params"]["base_urls"] = [clear]
    (out / "manifest.json").write_text(json.dumps(old, ensure_ascii=False), encoding="utf-8")
    card = (out / "README.md").read_text(encoding="utf-8")
    (out / "README.md").write_text(card + f"\nServed by {clear}\n", encoding="utf-8")
    table = pq.read_table(rejected)
    pq.write_table(table.set_column(table.column_names.index("detail"), "detail", pa.array([f"at {clear}"])),
                   rejected)

    assert build()["version"] == manifest["version"]  # the finished folder is this recipe's: returned as it is
    plan = upload_plan(out)
    uploaded = {rel: src if isinstance(src, bytes) else src.read_bytes() for rel, src in plan.items()}
    rows = pq.read_table(pa.BufferReader(uploaded[str(rejected.relative_to(out))])).to_pylist()
    assert rows[0]["detail"] == "at http://***@h:1/v1?api-key=***" and rows[0]["reason"] == "llm_error"
    assert json.loads(rows[0]["record"]) == {"id": 0, "text": "本文0"}  # the record is data: as it was
    assert not [f"{rel}: {s}" for rel, data in uploaded.items() for s in secrets if s.encode() in data]
