"""What every tansaku command line shares: the bad-input wrapper (``friendly``) and ``--version``; and what
the ``synth build`` commands share: ``--license``/``--license-file`` and the funnel table (``print_manifest``).

``synth`` (``tansaku.cli``) and ``train`` (``tansaku.trainer.cli``) commands are wrapped in ``friendly``: bad
input (a ``TansakuError``, an OS error on a path the user gave, a refused connection, a full disk) ends in one line on
stderr and exit 2; anything else is a bug and keeps its traceback (exit 1). ``TANSAKU_DEBUG=1`` shows the
traceback of bad input too.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Annotated

import typer

from tansaku import __version__
from tansaku.core.errors import TansakuError, user_error_line


def _version(value: bool) -> None:
    if value:
        typer.echo(f"tansaku {__version__}")
        raise typer.Exit()


Version = Annotated[bool, typer.Option("--version", callback=_version, is_eager=True, help="Print tansaku's version.")]
License = Annotated[str | None, typer.Option("--license", help="The card's license: a Hub id (cc-by-sa-4.0, cc-by-4.0 …) or other:NAME (with --license-file; the card links LICENSE). Default: the input's license.")]
LicenseFile = Annotated[Path | None, typer.Option("--license-file", help="License text, copied into the dataset as LICENSE; needed with --license other:NAME unless the input folder ships a LICENSE (then carried over).")]


# The options that name what a command writes, most specific first: a full disk names the first one given.
# Only outputs: ``--index`` is an input of most commands (``train eval``, ``train select``, ``synth search``), so a
# command whose output is another option names it itself (``synth index build``: ``friendly(outputs=("index",))``).
OUTPUT_OPTIONS = ("out", "export", "dir")


def friendly(fn=None, *, outputs: tuple[str, ...] = OUTPUT_OPTIONS):
    """Bad input (``TansakuError``, OS error on a user's path, refused connection, full disk) → one line, exit 2.

    ``@friendly``, or ``@friendly(outputs=(…))`` for a command that writes to options other than
    ``OUTPUT_OPTIONS``: the parameter names, most specific first, that a full disk with no file name is
    reported against (none given: the line says the command's output could not be written)."""
    if fn is None:
        return functools.partial(friendly, outputs=outputs)

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except Exception as e:  # noqa: BLE001 - re-raised unless it is bad input
            given = [x for v in (*args, *kwargs.values()) for x in (v if isinstance(v, list) else [v])]
            written = [kwargs[name] for name in outputs if kwargs.get(name) is not None]
            ours = isinstance(e, TansakuError)
            text = (str(e).strip() or type(e).__name__) if ours else user_error_line(e, given, written)
            if text is None or os.environ.get("TANSAKU_DEBUG") == "1":
                raise
            typer.echo(f"error: {text if ours and e.multiline else text.splitlines()[0]}", err=True)
            raise typer.Exit(2) from None

    return wrapper


def print_manifest(manifest: dict, out: Path) -> None:
    """A build's funnel (stage, received, kept, dropped by reason) on stderr; for a shard, what it committed."""
    from rich.console import Console  # here, not at the top: `train --help` imports this module too
    from rich.table import Table

    if "shard" in manifest:
        s = manifest["shard"]
        typer.echo(f"shard {s['shard']}/{s['of']} of {manifest['name']} → {out}: its chunks of "
                   f"{s['input_chunks']} committed; merge: the same command with --out D --from-shards …",
                   err=True)
        return
    table = Table(title=f"{manifest['name']} v{manifest['version']} → {out}")
    for col in ("stage", "received", "kept", "dropped"):
        table.add_column(col)
    for s in manifest["stages"]:  # .get: `synth info` shows what a hand-edited or older manifest has
        dropped = s.get("dropped")
        dropped = ", ".join(f"{k}: {v}" for k, v in dropped.items()) if isinstance(dropped, dict) else dropped
        table.add_row(*(str(x) for x in (s.get("name"), s.get("received"), s.get("kept"), dropped or "–")))
    Console(stderr=True).print(table)
