"""The JSON bodies ``synth serve-env`` accepts, with the size of each field capped
(``tansaku.envs.gym_limits.Limits``): a tool call's arguments and ``/verify``'s body as pydantic models
(FastAPI answers 422 to anything else), a row (``/seed_session``, ``/verify``'s row fields) by
:func:`check_row` (``InputError``: 422).

The models are made per app (``tool_models(limits)``, ``verify_model(limits)``): the caps are the app's, not
the process's.

    models = tool_models(Limits(max_text_chars=1024))
    models["search"](query="雪村製菓")          # a query of 1,025 characters: ValidationError → 422

>>> check_row({"question": "港", "aliases": ["みなと"]}, Limits()).decode()
'{"question":"港","aliases":["みなと"]}'
>>> check_row({"rubric": ["x" * 20]}, Limits(max_text_chars=10))
Traceback (most recent call last):
...
tansaku.core.errors.InputError: the row's rubric[0] has 20 characters, over 10 (--max-text-chars)
"""

# No ``from __future__ import annotations``: pydantic and FastAPI read the models' annotations as objects.
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator

from tansaku.core import jsontext
from tansaku.core.errors import InputError
from tansaku.core.parsing import MAX_JSON_DEPTH
from tansaku.envs.gym_limits import Limits

MAX_KEYWORDS = 64  # find's keywords: a model's call names a handful


def _strings(value, path: str = ""):
    """(path, text) of every string in a JSON value, keys included; iterative (the depth is bounded
    anyway)."""
    stack = [(path, value)]
    while stack:
        where, item = stack.pop()
        if isinstance(item, str):
            yield where, item
        elif isinstance(item, dict):
            for key, sub in item.items():
                inner = f"{where}.{key}" if where else str(key)
                yield inner, str(key)
                stack.append((inner, sub))
        elif isinstance(item, list):
            stack.extend((f"{where}[{i}]", sub) for i, sub in enumerate(item))


def check_row(row: dict, limits: Limits, what: str = "the row") -> bytes:
    """``row`` as compact JSON bytes (what an episode keeps), or ``InputError`` (422): a string longer than
    ``max_text_chars``, or the whole over ``max_row_bytes``."""
    for where, text in _strings(row):
        if len(text) > limits.max_text_chars:
            raise InputError(f"{what}'s {where} has {len(text)} characters, over {limits.max_text_chars} "
                             "(--max-text-chars)")
    data = jsontext.dumps(row, separators=(",", ":")).encode()
    if len(data) > limits.max_row_bytes:
        raise InputError(f"{what} is {len(data)} bytes as JSON, over {limits.max_row_bytes} "
                         f"(--max-row-bytes)")
    return data


def tool_models(limits: Limits) -> dict[str, type[BaseModel]]:
    """Each tool's arguments, by tool name; every string capped at ``max_text_chars``."""
    text = Annotated[str, StringConstraints(max_length=limits.max_text_chars)]

    class SearchArgs(BaseModel):
        model_config = ConfigDict(extra="forbid")
        query: text | dict
        size: int | None = None

        @field_validator("query")
        @classmethod
        def _query_is_bounded(cls, query):
            """A JSON OpenSearch query is capped as its text would be."""
            if isinstance(query, dict) and len(jsontext.dumps(query)) > limits.max_text_chars:
                raise ValueError(f"query is over {limits.max_text_chars} characters as JSON")
            return query

    class OpenDocArgs(BaseModel):
        model_config = ConfigDict(extra="forbid")
        doc_id: text
        offset: int = 0

    class FindArgs(BaseModel):  # tool interface 1 (tansaku.envs.tool_interfaces)
        model_config = ConfigDict(extra="forbid")
        keywords: Annotated[list[text], Field(max_length=MAX_KEYWORDS)]
        top_k: int | None = None

    class ReadArgs(BaseModel):
        model_config = ConfigDict(extra="forbid")
        doc_id: text
        page: int = 0

    return {"search": SearchArgs, "open_doc": OpenDocArgs, "find": FindArgs, "read": ReadArgs}


def verify_model(limits: Limits) -> type[BaseModel]:
    """NeMo Gym's ``BaseVerifyRequest``, with ``response`` at most ``max_response_bytes`` as JSON."""

    class VerifyBody(BaseModel):
        """The request and response of the rollout, plus the row's fields."""

        model_config = ConfigDict(extra="allow")
        responses_create_params: dict
        response: dict

        @field_validator("response")
        @classmethod
        def _output_is_a_list(cls, response: dict) -> dict:
            """``output`` is a list, a call's ``arguments`` text nests no deeper than a model's JSON may, and
            the whole is within ``max_response_bytes``."""
            output = response.get("output")
            if output is not None and not isinstance(output, list):
                raise ValueError(f"response.output must be a list of items, not {type(output).__name__}")
            for i, item in enumerate(output or []):
                arguments = item.get("arguments") if isinstance(item, dict) else None
                if isinstance(arguments, str) and jsontext.nesting_exceeds(arguments, MAX_JSON_DEPTH):
                    raise ValueError(f"response.output[{i}].arguments nests deeper than {MAX_JSON_DEPTH} "
                                     f"levels")
            size = len(jsontext.dumps(response, separators=(",", ":")).encode())
            if size > limits.max_response_bytes:
                raise ValueError(f"response is {size} bytes as JSON, over {limits.max_response_bytes} "
                                 "(--max-response-bytes)")
            return response

    return VerifyBody
