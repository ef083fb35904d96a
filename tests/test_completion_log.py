"""A logged batch whose tool-call arguments mix JSON objects and raw text still writes as TRL's parquet
(tansaku.trainer.completion_log); the small demo's GSPO round died on ``ArrowInvalid`` before."""

from __future__ import annotations

import pandas as pd
import pyarrow as pa
import pytest

from tansaku.trainer.completion_log import parquet_safe
from tansaku.trainer.report import episode_calls


def _call(arguments):
    return [{"role": "assistant", "content": "", "tool_calls": [
        {"type": "function", "function": {"name": "search", "arguments": arguments}}]},
            {"role": "tool", "name": "search", "content": "[1] …"}]


def test_mixed_arguments_write_and_read_back_as_the_same_calls(tmp_path):
    batch = [_call({"query": "霧島"}), _call('{"query": "霧島", '), _call({"query": "灯台", "size": 3})]
    with pytest.raises((pa.ArrowInvalid, pa.ArrowTypeError)):
        pd.DataFrame({"completion": batch}).to_parquet(tmp_path / "before.parquet")
    safe = parquet_safe(batch)
    pd.DataFrame({"completion": safe}).to_parquet(tmp_path / "after.parquet")
    back = pd.read_parquet(tmp_path / "after.parquet")["completion"].tolist()
    assert [episode_calls(list(c)) for c in back] == [episode_calls(c) for c in batch]  # same calls, same keys


def test_a_batch_pyarrow_takes_is_left_as_it_is():
    batch = [_call({"query": "霧島"}), _call({"query": "灯台"})]
    assert parquet_safe(batch) == batch and parquet_safe(batch)[0][0]["tool_calls"][0]["function"]["arguments"] == {
        "query": "霧島"}
