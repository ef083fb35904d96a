"""What every tansaku command line shares: the bad-input wrapper (``friendly``), ``--version``, ``--quiet``
and ``--json`` (``Quiet``, ``AsJson``) and how a summary is printed; and what the ``synth build`` commands
share: ``--license``/``--license-file`` and the funnel table (``print_manifest``).

Output contract. A command's summary (a build's funnel, an index's counts, the cache's size) is a table on
stderr, for a person, unless quiet (``--quiet`` or ``TANSAKU_QUIET=1``); stdout carries JSON only when
``--json`` is given, so ``synth … --json | jq`` reads one JSON value and nothing else. Floats are rounded
for people (3 significant digits in tables, ``cell``) and cleaned of binary noise in JSON (12 significant
digits, ``rounded``: ``0.30000000000000004`` prints as ``0.3``, a threshold of ``0.7255`` stays itself)::

    print_manifest(manifest, out, as_json=as_json, quiet=quiet)           # a build's funnel
    print_summary(f"index → {index}", meta, as_json=as_json, quiet=quiet)  # any flat summary
    print_table(comparison_table(result), result, as_json=as_json, quiet=quiet)  # a command's own table

``synth`` (``tansaku.cli``) and ``train`` (``tansaku.trainer.cli``) commands are wrapped in ``friendly``: bad
input (a ``TansakuError``, an OS error on a path the user gave, a refused connection, a full disk) ends in one
line on stderr and exit 2; anything else is a bug and keeps its traceback (exit 1). ``TANSAKU_DEBUG=1`` shows
the traceback of bad input too. An option's value is checked by its type (``tansaku.core.cli_types``) while
Typer parses it, refused in the same one line; ``friendly`` then refuses an output option that is, lies inside
or holds an input option, before the command starts.
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

import typer

from tansaku import __version__
from tansaku.core import jsontext
from tansaku.core.cli_types import current_context, echo_refusal, refuse_overlaps, types_of
from tansaku.core.errors import TansakuError, user_error_line
from tansaku.core.redact import redact_mapping


def _version(value: bool) -> None:
    if value:
        typer.echo(f"tansaku {__version__}")
        raise typer.Exit()


Version = Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                       help="Print tansaku's version.")]
License = Annotated[str | None, typer.Option("--license",
                                             help="The card's license: a Hub id (cc-by-sa-4.0, cc-by-4.0 …) "
                                                  "or other:NAME (with --license-file; the card links "
                                                  "LICENSE). Default: the input's license.")]
Quiet = Annotated[bool, typer.Option("--quiet", "-q", help="No progress and no summary table on stderr "
                                                           "(TANSAKU_QUIET=1 does the same).")]
AsJson = Annotated[bool, typer.Option("--json", help="Print the summary as one JSON value on stdout (without "
                                                     "it stdout stays empty).")]

_SHOWN_REASONS = 3  # drop reasons named per funnel row; a long tail would bury the counts
_JSON_DIGITS = 12  # significant digits of a float in printed JSON: binary noise gone, every set value kept


# The options that name what a command writes, most specific first: a full disk names the first one given.
# Only outputs: ``--index`` is an input of most commands (``train eval``, ``train select``, ``synth search``),
# so a command whose output is another option names it itself (``synth index build``:
# ``friendly(outputs=("index",))``).
OUTPUT_OPTIONS = ("out", "export", "dir")


def friendly(fn=None, *, outputs: tuple[str, ...] = OUTPUT_OPTIONS):
    """Bad input (``TansakuError``, OS error on a user's path, refused connection, full disk) → one line, exit
    2.

    ``@friendly``, or ``@friendly(outputs=(…))`` for a command that writes to options other than
    ``OUTPUT_OPTIONS``: the parameter names, most specific first, that a full disk with no file name is
    reported against (none given: the line says the command's output could not be written)."""
    if fn is None:
        return functools.partial(friendly, outputs=outputs)
    types: dict = {}  # its options' types (tansaku.core.cli_types), read at the first call

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            if not types:
                types.update(types_of(fn) or {None: None})
            # an output is no input, before any work
            refuse_overlaps({k: v for k, v in types.items() if k}, kwargs)
            return fn(*args, **kwargs)
        except Exception as e:  # noqa: BLE001 - re-raised unless it is bad input
            given = [x for v in (*args, *kwargs.values()) for x in (v if isinstance(v, list) else [v])]
            written = [kwargs[name] for name in outputs if kwargs.get(name) is not None]
            ours = isinstance(e, TansakuError)
            text = (str(e).strip() or type(e).__name__) if ours else user_error_line(e, given, written)
            if text is None or os.environ.get("TANSAKU_DEBUG") == "1":
                raise
            # an error may quote a --llm spec or an endpoint with its user:pass@ or ?api-key=
            # (tansaku.core.redact)
            echo_refusal(naming_the_option(text if ours and e.multiline else text.splitlines()[0], kwargs))
            raise typer.Exit(2) from None

    return wrapper


def naming_the_option(text: str, values: Mapping[str, Any]) -> str:
    """``text`` as it is when it names one of the running command's options; else led by the option(s) whose
    given value it quotes (``--format: unknown format 'nope'``), so a refusal raised deep in a builder or
    reader
    still says which option to change. One place for every command: a message need not know its option.

    >>> import click
    >>> cmd = click.Command("x", params=[click.Option(["--format"]), click.Option(["--out"])])
    >>> with click.Context(cmd):
    ...     naming_the_option("unknown format 'nope'", {"format": "nope", "out": "o"})
    "--format: unknown format 'nope'"
    >>> with click.Context(cmd):
    ...     naming_the_option("out/ds: No space left on device", {"format": "nope", "out": "out/ds"})
    '--out out/ds: No space left on device'
    """
    ctx = current_context()  # Typer's own click (typer._click) holds the command's context, not click's
    if ctx is None:
        return text
    options = [p for p in ctx.command.params if getattr(p, "param_type_name", None) == "option"]
    flags = [flag for p in options for flag in (*p.opts, *p.secondary_opts)]
    if any(_quotes_flag(text, flag) for flag in flags):
        return text
    quoted = []  # the longest quoted values first: --split "test" inside an --out path quotes nothing
    for p in sorted(options, key=lambda p: -len(str(values.get(p.name, "")))):
        if p.name in values and _quotes_value(text, values[p.name]) and \
                not any(str(values[p.name]) in str(values[q.name]) for q in quoted):
            quoted.append(p)
    if len(quoted) == 1 and text.startswith(str(values[quoted[0].name])):  # "PATH: …" → "--out PATH: …"
        return f"{quoted[0].opts[-1]} {text}"
    return f"{', '.join(p.opts[-1] for p in quoted)}: {text}" if quoted else text


def _quotes_flag(text: str, flag: str) -> bool:
    at = text.find(flag)
    while at != -1:  # "--out" must not count inside "--output"
        end = at + len(flag)
        if end == len(text) or not (text[end].isalnum() or text[end] in "-_"):
            return True
        at = text.find(flag, end)
    return False


def _quotes_value(text: str, value: Any) -> bool:
    """Whether ``text`` quotes ``value`` (a path or text the user gave; numbers and flags are too short to
    tell)."""
    items = value if isinstance(value, list | tuple) else [value]
    shown = [str(v) for v in items if isinstance(v, str | Path) and not isinstance(v, bool)]
    return any(len(v.strip()) >= 2 and v in text for v in shown)


def round_sig(x: float, digits: int = 3) -> float:
    """``x`` to ``digits`` significant digits, never dropping a digit left of the point.

    >>> round_sig(0.30000000000000004), round_sig(0.012345), round_sig(12345.678), round_sig(2.0)
    (0.3, 0.0123, 12346.0, 2.0)
    """
    if x == 0 or not math.isfinite(x):
        return x
    return round(x, max(digits - 1 - math.floor(math.log10(abs(x))), 0))


def rounded(value: Any, digits: int = _JSON_DIGITS) -> Any:
    """``value`` with every float in it (nested dicts, lists) to ``digits`` significant digits.

    >>> rounded({"share": 0.1 + 0.2, "n": 3, "t": [1 / 3]}, 3)
    {'share': 0.3, 'n': 3, 't': [0.333]}
    """
    if isinstance(value, float):
        return round_sig(value, digits)
    if isinstance(value, Mapping):
        return {k: rounded(v, digits) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [rounded(v, digits) for v in value]
    return value


def cell(value: Any) -> str:
    """A table cell: floats to 3 significant digits, whole numbers with thousands separators, None as –.

    >>> [cell(x) for x in (0.30000000000000004, 4.0, 12345, 1.23456e-05, None, "x", True)]
    ['0.3', '4', '12,345', '1.23e-05', '–', 'x', 'True']
    """
    if value is None:
        return "–"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        r = round_sig(value)
        return f"{int(r):,}" if math.isfinite(r) and r.is_integer() and abs(r) < 1e15 else repr(r)
    if isinstance(value, list | tuple):
        return ", ".join(cell(v) for v in value) or "–"
    if isinstance(value, Mapping):
        return ", ".join(f"{k} {cell(v)}" for k, v in value.items()) or "–"
    return str(value)


def print_json(value: Any) -> None:
    """``value`` as one JSON line on stdout, floats cleaned (``rounded``), secrets masked
    (``redact_mapping``)."""
    typer.echo(jsontext.dumps(redact_mapping(rounded(value)), default=str))


def _stderr_table(table) -> None:
    from rich.console import Console  # here, not at the top: `train --help` imports this module too

    Console(stderr=True).print(table)


def _quiet(quiet: bool) -> bool:
    from tansaku.core.progress import is_quiet  # rich, imported when something is printed

    return is_quiet(quiet)


def print_table(table, value: Any, *, as_json: bool = False, quiet: bool = False) -> None:
    """A command's own rich ``table`` on stderr unless quiet; ``value`` as one JSON value on stdout with
    ``as_json`` (``train compare``, ``train select`` …: nothing goes to stdout without it)."""
    if not _quiet(quiet):
        _stderr_table(table)
    if as_json:
        print_json(value)


def print_summary(title: str, summary: Mapping, *, as_json: bool = False, quiet: bool = False,
                  json_value: Any = None) -> None:
    """A flat summary as a two-column table (key, value) on stderr unless quiet; as JSON on stdout with
    ``as_json`` (``json_value`` when given, else ``summary``)."""
    from rich.table import Table  # rich: imported when something is printed

    summary = redact_mapping(summary)
    if not _quiet(quiet):
        table = Table(title=title, show_header=False)
        table.add_column("", style="bold")
        table.add_column("")
        for key, value in summary.items():
            table.add_row(str(key), cell(value))
        _stderr_table(table)
    if as_json:
        print_json(summary if json_value is None else json_value)


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def top_reasons(dropped: Any, shown: int = _SHOWN_REASONS) -> str:
    """A funnel row's drops: the total, then the most frequent reasons.

    >>> top_reasons({"a": 1, "b": 7, "c": 2, "d": 1})
    '11 (b 7, c 2, a 1, +1 more)'
    >>> top_reasons({})
    '0'
    """
    if not isinstance(dropped, Mapping):  # a hand-edited or older manifest: shown as it is
        return cell(dropped)
    counts = {str(k): v for k, v in dropped.items() if _count(v) is not None}
    if len(counts) != len(dropped):
        return cell(dict(dropped))
    top = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    named = [f"{reason} {n:,}" for reason, n in top[:shown]]
    if len(top) > shown:
        named.append(f"+{len(top) - shown} more")
    total = f"{sum(counts.values()):,}"
    return f"{total} ({', '.join(named)})" if named else total


def produced(stage: Mapping) -> str:
    """Rows out per row in, for a stage that emits more than one item per input (kept + dropped > in: a
    teacher sampling 4 answers per question), '' for the others; read with ``in`` and ``out`` it says why a
    stage ends with more rows than it received.

    >>> (produced({"received": 20, "kept": 80, "dropped": {}}),
    ...  produced({"received": 20, "kept": 15, "dropped": {"x": 5}}))
    ('×4 per input', '')
    """
    received, kept = _count(stage.get("received")), _count(stage.get("kept"))
    dropped = stage.get("dropped")
    drops = sum(v for v in dropped.values() if _count(v) is not None) if isinstance(dropped, Mapping) else 0
    if not received or kept is None or kept + drops <= received:
        return ""
    return f"×{cell(kept / received)} per input"


def funnel_table(manifest: Mapping, out: Path | str):
    """A build's funnel as a rich table: stage | in | out | produced (fan-out stages only) | dropped |
    seconds."""
    from rich.table import Table  # rich: imported when something is printed

    stages = [s for s in manifest.get("stages") or [] if isinstance(s, Mapping)]
    fan_out = {id(s): produced(s) for s in stages}
    splits = manifest.get("splits")
    caption = []
    if isinstance(splits, Mapping):
        caption.append("splits: " + ", ".join(f"{k} {cell(v)}" for k, v in splits.items()))
    if isinstance(manifest.get("seconds"), int | float):
        caption.append(f"{cell(manifest['seconds'])} s")
    table = Table(title=f"{manifest.get('name')} v{manifest.get('version')} → {out}",
                  caption=" · ".join(caption) or None)
    columns = ["stage", "in", "out", *(["produced"] if any(fan_out.values()) else []), "dropped", "seconds"]
    for col in columns:
        table.add_column(col, justify="left" if col in ("stage", "dropped", "produced") else "right")
    for s in stages:  # .get: `synth info` shows what a hand-edited or older manifest has
        row = [cell(s.get("name")), cell(s.get("received")), cell(s.get("kept"))]
        if "produced" in columns:
            row.append(fan_out[id(s)])
        row += [top_reasons(s.get("dropped", {})), cell(s.get("seconds"))]
        table.add_row(*row)
    return table


def print_manifest(manifest: dict, out: Path, *, as_json: bool = False, quiet: bool = False) -> None:
    """A build's funnel (``funnel_table``) on stderr unless quiet; for a shard, what it committed. With
    ``as_json``, the manifest as one JSON value on stdout (nothing goes to stdout without it)."""
    if not _quiet(quiet):
        if "shard" in manifest:
            s = manifest["shard"]
            typer.echo(f"shard {s['shard']}/{s['of']} of {manifest['name']} → {out}: its chunks of "
                       f"{s['input_chunks']} committed; merge: the same command with --out D --from-shards …",
                       err=True)
        else:
            _stderr_table(funnel_table(manifest, out))
    if as_json:
        print_json(manifest)
