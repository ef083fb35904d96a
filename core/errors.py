"""The one error family of tansaku: bad input the user can fix.

Everything the toolkit raises for bad input — a missing file, a broken XML or JSONL line that stops a
whole input, an invalid search query, recipe or LLM spec, a dataset folder made by another run — is a
``TansakuError``. The CLI prints such an error as one line and exits with status 2 (and loses nothing
already done). Any other exception is a bug: the CLI lets it through with its traceback (exit 1).

Subclasses also derive from the matching built-in (``ValueError``, ``FileNotFoundError``, …) so code that
catches those keeps working.

>>> issubclass(InputError, ValueError) and issubclass(MissingInputError, FileNotFoundError)
True
>>> str(MissingInputError("no such file: x.jsonl"))
'no such file: x.jsonl'
"""


class TansakuError(Exception):
    """Base of every error that means "bad input": one line for the user, exit status 2."""

    multiline = False  # True: the CLI prints the whole message (e.g. the RL readiness refusal's numbers)


class InputError(TansakuError, ValueError):
    """An argument, spec, file content or dataset that the toolkit cannot use."""


class MissingInputError(TansakuError, FileNotFoundError):
    """A file or folder named by the user does not exist."""
