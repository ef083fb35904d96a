"""Opening an embedded index folder safely: its ``tansaku_index.json`` read and checked, and any damage found
while tantivy opens it reported as one ``InputError`` naming the folder (``synth search``, ``serve-env`` and
``train eval``/``rl`` then print one line, exit 2, instead of a ``JSONDecodeError``/``KeyError``/tantivy
``ValueError`` traceback).

    meta = read_index_meta(Path("out/index"), layout=2)   # {"format", "analyzer", "keyword_fields", …}
    raise damaged("out/index", "meta.json missing")

What counts as damage: ``tansaku_index.json`` unreadable, not JSON, not an object, or without the keys that
opening needs; tantivy's own files (``meta.json``, a segment file) missing, truncated or corrupt.
"""

from __future__ import annotations

from pathlib import Path

from tansaku.core import jsontext, ownership
from tansaku.core.errors import InputError, MissingInputError

META_FILE = ownership.INDEX_MARKER


def damaged(index_dir: str | Path, reason: str) -> InputError:
    """The one-line refusal of a damaged index: what is wrong and how to rebuild it."""
    reason = (reason.strip().splitlines() or ["unreadable"])[0]
    reason = reason if len(reason) <= 200 else reason[:199] + "…"  # tantivy's messages run to 300+ characters
    return InputError(f"{index_dir}: damaged search index ({reason}); rebuild it with "
                      f"`synth index build --dataset DIR --index {index_dir}`")


def read_index_meta(index_dir: Path, layout: int) -> dict:
    """``index_dir``'s metadata, checked: a JSON object of ``layout`` with a str ``analyzer`` and a list of
    str ``keyword_fields``. MissingInputError when the folder holds no index, InputError when it is
    damaged."""
    path = index_dir / META_FILE
    if not path.exists():
        raise MissingInputError(f"{index_dir} is not a tansaku search index (no {META_FILE}); "
                                "build one with `synth index build`")
    try:
        meta = jsontext.read_file(path)
    except jsontext.JSONInputError as exc:  # unreadable, not UTF-8, not JSON, nested too deeply
        raise damaged(index_dir, f"{META_FILE} is not readable JSON: {exc.msg}") from None
    if not isinstance(meta, dict):
        raise damaged(index_dir, f"{META_FILE} holds a JSON {type(meta).__name__}, not an object")
    if meta.get("format") != layout:
        raise InputError(f"{index_dir} has index layout {meta.get('format')!r}; this version reads "
                         f"layout {layout}. Rebuild it with `synth index build --dataset DIR --index "
                         f"{index_dir}`")
    keywords = meta.get("keyword_fields")
    if not isinstance(meta.get("analyzer"), str) or not isinstance(keywords, list) \
            or not all(isinstance(k, str) for k in keywords):
        raise damaged(index_dir, f"{META_FILE} lacks a text 'analyzer' or a list of 'keyword_fields'")
    return meta
