"""The command-line options every command that names an LLM shares: ``--no-cache``, ``--api-key``,
``--extra-body``, ``--concurrency``, ``--llm-option`` (vLLM engine arguments), and ``llm_options`` that turns
their values into the one ``LLMOptions`` the command hands to its pipeline (nothing is stored per process: two
commands in one process, or one after another, never see each other's options). A value that is never usable
is refused while Typer parses the command line, before any model loads or server starts, in one
``error: --option: …`` line (exit 2): each option's ``LLMOptionType`` reads its value as ``llm_options`` will
(the grammar is ``tansaku.core.llm.option_values``; an ``--llm-option`` name is checked against vLLM's
``EngineArgs``, ``tansaku.core.llm.vllm_engine``), and ``llm_options`` parses them for the command.

    @app.command()
    def run(llm: str, no_cache: NoCache = False, api_key: ApiKey = None, extra_body: ExtraBody = None,
            concurrency: Concurrency = None, llm_option: LlmOption = None):
        options = llm_options(no_cache, api_key, extra_body, concurrency, llm_option)
        client = from_spec(llm, llm_options=options)
"""

from __future__ import annotations

from typing import Annotated

import typer

from tansaku.core.cli_types import NumberType, OptionType, option, refuse
from tansaku.core.errors import InputError, TansakuError

from .settings import LLMOptions, load_extra_body, parse_api_keys
from .vllm_engine import check_engine_options, parse_engine_options


class LLMOptionType(OptionType):
    """One value of an LLM option, checked by ``read``: the function ``llm_options`` reads it with, so the
    parse accepts exactly what the command will use (``option_values``' grammar: a key an HTTP header carries,
    a body JSON can send, an engine argument with finite numbers and no control character). A refusal is one
    ``error: --option: …`` line (exit 2) before any work; the value itself is kept as given."""

    def __init__(self, option: str, read):
        super().__init__(option)
        self.read = read

    def check(self, value):
        try:
            self.read(value)
        except (TansakuError, OSError, ValueError, RecursionError) as exc:  # any way a value fails: one line
            text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise InputError(text if text.startswith(self.option) else f"{self.option}: {text}") from None
        return value


def _check_engine_list(values):
    """The ``--llm-option`` values together: one name given twice with different values is refused."""
    try:
        parse_engine_options(values)
    except InputError as exc:
        refuse(InputError(f"--llm-option: {exc}"))
    return values


def llm_options(no_cache: bool = False, api_key: dict[str, str] | list[str] | None = None,
                extra_body: dict | str | None = None, concurrency: int | None = None,
                engine: dict | list[str] | None = None) -> LLMOptions:
    """The ``LLMOptions`` of these option values (as the command received them, or already parsed);
    ``engine``: the ``--llm-option`` texts (``KEY=VALUE``) or their mapping.

    >>> llm_options(api_key=["sk-all"], concurrency=4, engine=["tensor_parallel_size=8"])
    LLMOptions(no_cache=False, api_keys={'*': 'sk-all'}, extra_body=None, concurrency=4,
    engine={'tensor_parallel_size': 8})
    """
    keys = api_key if isinstance(api_key, dict) else parse_api_keys(api_key)
    body = extra_body if isinstance(extra_body, dict) or extra_body is None else load_extra_body(extra_body)
    engine = dict(engine) if isinstance(engine, dict) else parse_engine_options(engine)
    return LLMOptions(no_cache=bool(no_cache), api_keys=dict(keys or {}), extra_body=body,
                      concurrency=concurrency, engine=engine)


NoCache = Annotated[bool, typer.Option(
    "--no-cache", help="Neither read nor write the LLM response cache (also TANSAKU_NO_CACHE=1).")]
ApiKey = Annotated[list[str] | None, option(
    "--api-key", parser=LLMOptionType("--api-key", lambda value: parse_api_keys([value])),
    help="Key for http: LLM servers: KEY, URL=KEY for one server, @FILE to read it, env:NAME to send that "
         "environment variable; repeat for several. Without it $OPENAI_API_KEY goes only to $OPENAI_BASE_URL "
         "(default api.openai.com); other servers get EMPTY.")]
ExtraBody = Annotated[str | None, option(
    "--extra-body", parser=LLMOptionType("--extra-body", load_extra_body),
    help="JSON object merged into every http: request body (e.g. '{\"chat_template_kwargs\": "
         "{\"enable_thinking\": false}}'), or @FILE.yaml.")]
Concurrency = Annotated[int | None, option(
    "--concurrency", parser=NumberType("--concurrency", min=1),
    help="Requests in flight per http: endpoint (its slots; default 64): LLM stages keep slots × endpoints "
         "records in flight. Set it to what one server serves at once (vLLM --max-num-seqs).")]
LlmOption = Annotated[list[str] | None, option(
    "--llm-option", metavar="KEY=VALUE", callback=_check_engine_list,
    parser=LLMOptionType("--llm-option", lambda value: check_engine_options(parse_engine_options([value]))),
    help="vLLM engine argument for vllm: LLM specs (tensor_parallel_size=8, max_model_len=16384, "
         "gpu_memory_utilization=0.85 …); repeat for several. Checked against vLLM's EngineArgs.")]
