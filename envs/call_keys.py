"""What makes two tool calls the same call: one key, used where calls are counted or compared.

``tool_call_key`` is a call as ``name(canonical JSON arguments)`` (``train report``'s repeated-call counts);
``normalized_call_key`` also folds cosmetic differences of the text (``tool_call_reward``'s distinct calls).

    from tansaku.envs.call_keys import tool_call_key
    tool_call_key("search", '{"query": "a", "size": 3}')   # 'search({"query": "a", "size": 3})'
"""

from __future__ import annotations

import json

from tansaku.core import jsontext
from tansaku.envs.normalize import normalize_answer


def tool_call_key(name, arguments) -> str:
    """``name(canonical JSON arguments)``: arguments given as JSON text or as a dict, keys in any order, and
    None-valued keys (parquet structs fill absent keys with None) give one key.

    >>> as_text = tool_call_key("search", '{"size": 3, "query": "a"}')
    >>> as_text == tool_call_key("search", {"query": "a", "size": 3, "top_k": None})
    True
    """
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            pass
    if isinstance(arguments, dict):
        arguments = {k: v for k, v in arguments.items() if v is not None}
    return f"{name}({jsontext.dumps(arguments, sort_keys=True, default=str)})"


def normalized_call_key(name, arguments) -> str:
    """``tool_call_key`` with the text normalized as answers are (``normalize_answer``): the same call with
    cosmetic differences ("東京 都" vs "東京都", full-width digits) counts once. Arguments that cannot be
    keyed (unsortable keys, absurd nesting) make a call of their own.

    >>> (normalized_call_key("search", {"query": "東京 都"})
    ...  == normalized_call_key("search", {"query": "東京都"}))
    True
    """
    try:
        return normalize_answer(tool_call_key(name, arguments))
    except (TypeError, ValueError, RecursionError):
        return f"{name}#{id(arguments)}"
