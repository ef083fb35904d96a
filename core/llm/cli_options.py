"""The command-line options every command that names an LLM shares: ``--no-cache``, ``--api-key``,
``--extra-body``, ``--concurrency``. Each option's callback stores its value in ``settings.DEFAULTS`` (click calls it on every
invocation, given or not, so one command's options never leak into the next); the clients the command's
pipeline builds from spec strings pick them up. A malformed value is refused before the command starts,
with Typer's usage box and exit 2 (as for any option Typer validates).
"""

from __future__ import annotations

from typing import Annotated

import typer

from .settings import DEFAULTS, load_extra_body, parse_api_keys


def _set_no_cache(value: bool) -> bool:
    DEFAULTS.no_cache = bool(value)
    return value


def _set_api_keys(values: list[str] | None) -> list[str] | None:
    try:
        DEFAULTS.api_keys = parse_api_keys(values)
    except Exception as exc:  # noqa: BLE001 - shown as click's one "Invalid value" line
        raise typer.BadParameter(str(exc)) from None
    return values


def _set_extra_body(value: str | None) -> str | None:
    try:
        DEFAULTS.extra_body = load_extra_body(value)
    except Exception as exc:  # noqa: BLE001 - shown as click's one "Invalid value" line
        raise typer.BadParameter(str(exc)) from None
    return value


def _set_concurrency(value: int | None) -> int | None:
    DEFAULTS.concurrency = value
    return value


NoCache = Annotated[bool, typer.Option(
    "--no-cache", callback=_set_no_cache,
    help="Neither read nor write the LLM response cache (also TANSAKU_NO_CACHE=1).")]
ApiKey = Annotated[list[str] | None, typer.Option(
    "--api-key", callback=_set_api_keys,
    help="Key for http: LLM servers (default $OPENAI_API_KEY): KEY, URL=KEY for one server, @FILE to read it; "
         "repeat for several.")]
ExtraBody = Annotated[str | None, typer.Option(
    "--extra-body", callback=_set_extra_body,
    help="JSON object merged into every http: request body (e.g. '{\"chat_template_kwargs\": "
         "{\"enable_thinking\": false}}'), or @FILE.yaml.")]
Concurrency = Annotated[int | None, typer.Option(
    "--concurrency", min=1, callback=_set_concurrency,
    help="Requests in flight per http: endpoint (its slots; default 64): LLM stages keep slots × endpoints "
         "records in flight. Set it to what one server serves at once (vLLM --max-num-seqs).")]
