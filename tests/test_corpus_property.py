"""The corpus reader never lets one row stop a build: generated JSONL files of good, mistyped and garbage
lines always build, every line is either a document or a drop with a reason, and the output schema does not
depend on any one row (issue 15)."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tansaku.core.context import BuildContext
from tansaku.core.store import read_manifest, read_rows
from tansaku.pipelines.corpus.build import build_corpus
from tansaku.pipelines.corpus.config import CorpusConfig

SCHEMA = {"id", "title", "text", "url", "source"}

good_row = st.fixed_dictionaries({
    "id": st.text(alphabet="abcdef0123456789", min_size=1, max_size=8),
    "title": st.text(min_size=1, max_size=20),
    "text": st.text(min_size=1, max_size=200),
}, optional={"url": st.just("https://example.org/x")})
hostile_value = st.one_of(st.integers(), st.floats(allow_nan=True), st.booleans(), st.none(),
                          st.lists(st.integers(), max_size=3), st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))
mistyped_row = st.builds(lambda row, key, value: {**row, key: value}, good_row,
                         st.sampled_from(["id", "title", "text", "url"]), hostile_value)
garbage_line = st.sampled_from([b"{", b"[1, 2]", b"\xff\xfe\xfa", b"[" * 5000, b'{"text": 1e999}', b"null", b"\"x\""])
line = st.one_of(good_row.map(lambda r: json.dumps(r, ensure_ascii=False).encode()),
                 mistyped_row.map(lambda r: json.dumps(r, ensure_ascii=False).encode()), garbage_line)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lines=st.lists(line, min_size=1, max_size=12), bom=st.booleans())
def test_every_line_is_a_document_or_a_named_drop(lines, bom):
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "docs.jsonl"
        source.write_bytes((b"\xef\xbb\xbf" if bom else b"") + b"\n".join(lines) + b"\n")
        try:
            manifest = build_corpus(CorpusConfig(input=source, keep_rejected=True), Path(tmp) / "out", BuildContext(quiet=True))
        except Exception as exc:  # only "nothing usable at all" may refuse, and only as bad input
            from tansaku.core.errors import TansakuError

            assert isinstance(exc, TansakuError) and "\n" not in str(exc), repr(exc)
            return
        manifest = read_manifest(Path(tmp) / "out")
        rows = read_rows(Path(tmp) / "out", "train") if manifest["splits"].get("train") else []
        for row in rows:
            assert SCHEMA <= set(row) and isinstance(row["text"], str) and isinstance(row["id"], str)
        read_stage = manifest["stages"][0]
        assert read_stage["received"] == len(lines)  # every line was looked at: kept or dropped with a reason
        assert read_stage["kept"] + sum(read_stage["dropped"].values()) == read_stage["received"]
