"""What every tansaku command line shares: the bad-input wrapper (``friendly``) and ``--version``.

``synth`` (``tansaku.cli``) and ``train`` (``tansaku.trainer.cli``) commands are wrapped in ``friendly``: bad
input (a ``TansakuError``, an OS error on a path the user gave, a refused connection) ends in one line on
stderr and exit 2; anything else is a bug and keeps its traceback (exit 1). ``TANSAKU_DEBUG=1`` shows the
traceback of bad input too.
"""

from __future__ import annotations

import functools
import os
from typing import Annotated

import typer

from tansaku import __version__
from tansaku.core.errors import TansakuError, user_error_line


def _version(value: bool) -> None:
    if value:
        typer.echo(f"tansaku {__version__}")
        raise typer.Exit()


Version = Annotated[bool, typer.Option("--version", callback=_version, is_eager=True, help="Print tansaku's version.")]


def friendly(fn):
    """Bad input (``TansakuError``, OS error on a user's path, refused connection) → one line, exit 2."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except Exception as e:  # noqa: BLE001 - re-raised unless it is bad input
            given = [x for v in (*args, *kwargs.values()) for x in (v if isinstance(v, list) else [v])]
            ours = isinstance(e, TansakuError)
            text = (str(e).strip() or type(e).__name__) if ours else user_error_line(e, given)
            if text is None or os.environ.get("TANSAKU_DEBUG") == "1":
                raise
            typer.echo(f"error: {text if ours and e.multiline else text.splitlines()[0]}", err=True)
            raise typer.Exit(2) from None

    return wrapper
