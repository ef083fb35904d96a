"""The command-line options every command that names an LLM shares: ``--no-cache``, ``--api-key``,
``--extra-body``, ``--concurrency``, ``--llm-option`` (vLLM engine arguments), and ``llm_options`` that turns
their values into the one ``LLMOptions`` the command hands to its pipeline (nothing is stored per process: two
commands in one process, or one after another, never see each other's options). A malformed value is refused
before the command starts, with Typer's usage box and exit 2 (as for any option Typer validates): the
callbacks check the values (an ``--llm-option`` name against vLLM's ``EngineArgs``,
``tansaku.core.llm.vllm_engine``), ``llm_options`` parses them.

    @app.command()
    def run(llm: str, no_cache: NoCache = False, api_key: ApiKey = None, extra_body: ExtraBody = None,
            concurrency: Concurrency = None, llm_option: LlmOption = None):
        client = from_spec(llm, llm_options=llm_options(no_cache, api_key, extra_body, concurrency, llm_option))
"""

from __future__ import annotations

from typing import Annotated

import typer

from .settings import LLMOptions, load_extra_body, parse_api_keys
from .vllm_engine import check_engine_options, parse_engine_options


def _check_api_keys(values):
    try:
        parse_api_keys(values)
        return values
    except Exception as exc:  # noqa: BLE001 - shown as click's one "Invalid value" line
        raise typer.BadParameter(str(exc)) from None


def _check_extra_body(value):
    try:
        load_extra_body(value)
        return value
    except Exception as exc:  # noqa: BLE001 - shown as click's one "Invalid value" line
        raise typer.BadParameter(str(exc)) from None


def _check_engine_options(values):
    try:  # the names too, so a misspelt one is refused before any work (not when vLLM starts, on the GPU)
        check_engine_options(parse_engine_options(values))
        return values
    except Exception as exc:  # noqa: BLE001 - shown as click's one "Invalid value" line
        raise typer.BadParameter(str(exc)) from None


def llm_options(no_cache: bool = False, api_key: dict[str, str] | list[str] | None = None,
                extra_body: dict | str | None = None, concurrency: int | None = None,
                engine: dict | list[str] | None = None) -> LLMOptions:
    """The ``LLMOptions`` of these option values (as the command received them, or already parsed);
    ``engine``: the ``--llm-option`` texts (``KEY=VALUE``) or their mapping.

    >>> llm_options(api_key=["sk-all"], concurrency=4, engine=["tensor_parallel_size=8"])
    LLMOptions(no_cache=False, api_keys={'*': 'sk-all'}, extra_body=None, concurrency=4, engine={'tensor_parallel_size': 8})
    """
    keys = api_key if isinstance(api_key, dict) else parse_api_keys(api_key)
    body = extra_body if isinstance(extra_body, dict) or extra_body is None else load_extra_body(extra_body)
    engine = dict(engine) if isinstance(engine, dict) else parse_engine_options(engine)
    return LLMOptions(no_cache=bool(no_cache), api_keys=dict(keys or {}), extra_body=body, concurrency=concurrency,
                      engine=engine)


NoCache = Annotated[bool, typer.Option(
    "--no-cache", help="Neither read nor write the LLM response cache (also TANSAKU_NO_CACHE=1).")]
ApiKey = Annotated[list[str] | None, typer.Option(
    "--api-key", callback=_check_api_keys,
    help="Key for http: LLM servers: KEY, URL=KEY for one server, @FILE to read it, env:NAME to send that "
         "environment variable; repeat for several. Without it $OPENAI_API_KEY goes only to $OPENAI_BASE_URL "
         "(default api.openai.com); other servers get EMPTY.")]
ExtraBody = Annotated[str | None, typer.Option(
    "--extra-body", callback=_check_extra_body,
    help="JSON object merged into every http: request body (e.g. '{\"chat_template_kwargs\": "
         "{\"enable_thinking\": false}}'), or @FILE.yaml.")]
Concurrency = Annotated[int | None, typer.Option(
    "--concurrency", min=1,
    help="Requests in flight per http: endpoint (its slots; default 64): LLM stages keep slots × endpoints "
         "records in flight. Set it to what one server serves at once (vLLM --max-num-seqs).")]
LlmOption = Annotated[list[str] | None, typer.Option(
    "--llm-option", metavar="KEY=VALUE", callback=_check_engine_options,
    help="vLLM engine argument for vllm: LLM specs (tensor_parallel_size=8, max_model_len=16384, "
         "gpu_memory_utilization=0.85 …); repeat for several. Checked against vLLM's EngineArgs.")]
