"""The option types every ``synth`` and ``train`` command uses: one per kind of value, checked while Typer
parses the command line, before any work, each refusal one ``error:`` line naming the option (exit 2).

    PathType      a path of a declared kind (``value_checks.INPUT_FILE`` … ``OUTPUT_FOLDER``): ``~`` expanded,
                  a FIFO, device or socket refused without being opened, a folder for a file refused …
    NumberType    a whole number or float with declared bounds: 64 bits at most, finite
    SpecType      an LLM spec, read by the one grammar ``tansaku.core.llm.spec.parse_spec``; a ``scripted:``
                  file must exist
    RepoIdType    a Hugging Face repo id, by ``huggingface_hub``'s own validator
    ModelRefType  a local model folder (a path-like value must exist) or a Hub repo id
    IndexType     a search index: a folder, opensearch:NAME or http(s)://host:port/NAME
    TextType      text: one line (or free text), no control characters, bounded; its choices where known
    (the LLM options' own ``LLMOptionType``, ``--api-key`` … ``--llm-option``:
    ``tansaku.core.llm.cli_options``)

Each is a parser (Typer's ``parser=``) bound to its option's name; :func:`option` and :func:`argument` attach
one. A config field of a build gets its type from ``tansaku.core.build_config.option`` (``path=``, ``min=``
…), so ``synth build`` options are checked the same way. The checks themselves are
``tansaku.core.value_checks`` (and ``parse_spec``), which Python callers use too.

    out: Annotated[Path, option("--out", parser=PathType("--out", OUTPUT_FOLDER), help="Folder to write.")]
    size: Annotated[int, option("--size", parser=NumberType("--size", min=1), help="Hits.")] = 10

An output is also checked against the command's inputs: ``friendly`` (``tansaku.core.cli_common``) calls
:func:`refuse_overlaps`, which refuses an output that is, lies inside or holds an input
(``tansaku.core.ownership.refuse_overlap``) before the command starts.
"""

from __future__ import annotations

import importlib
import os
import typing
from collections.abc import Callable, Mapping
from typing import Any, NoReturn

import typer

from tansaku.core import ownership, value_checks
from tansaku.core.errors import InputError, MissingInputError, TansakuError
from tansaku.core.llm.spec import check_spec
from tansaku.core.redact import redact_text
from tansaku.core.text_values import check_text
from tansaku.core.value_checks import (
    INDEX,
    INPUT_FOLDER,
    INPUT_KINDS,
    OUTPUT_INDEX,
    OUTPUT_KINDS,
    check_number,
    check_path,
)


def echo_refusal(text: str) -> None:
    """The one ``error: …`` line of a refusal, on stderr, secrets masked (a spec may carry user:pass@)."""
    typer.echo(redact_text(f"error: {text}"), err=True)


def current_context():
    """The click context of the command being parsed or run, or None (outside a command)."""
    # typer >= 0.2x carries its own click; older ones use click's
    for name in ("typer._click.globals", "click"):
        try:
            ctx = importlib.import_module(name).get_current_context(silent=True)
        except (ImportError, AttributeError):
            continue
        if ctx is not None:
            return ctx
    return None


def _completing() -> bool:
    """Whether the shell is asking for completions (Typer parses leniently then; no line may be printed)."""
    ctx = current_context()
    return bool(ctx is not None and ctx.resilient_parsing)


def refuse(exc: TansakuError) -> NoReturn:
    """End the command line's parse: one ``error:`` line and exit 2, as ``friendly`` ends a command."""
    if _completing():
        raise ValueError(str(exc)) from None  # Typer drops it quietly while completing
    if os.environ.get("TANSAKU_DEBUG") == "1":
        raise RuntimeError(f"refused while parsing: {exc}") from exc  # the traceback, as friendly shows it
    echo_refusal(str(exc).strip().splitlines()[0])
    raise typer.Exit(2)


class OptionType:
    """A Typer ``parser=``: checks one value of ``option`` (``check``), refusing bad input in one line."""

    def __init__(self, option: str):
        self.option = option

    def check(self, value):  # pragma: no cover - each type has its own
        raise NotImplementedError

    def __call__(self, value):
        try:
            return self.check(value)
        except TansakuError as exc:
            refuse(exc)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.option!r})"


class PathType(OptionType):
    """A path of ``kind`` (``value_checks``' kinds); ``text=True`` for an option whose value the command takes
    as a string (an index option, which may also name a service, and model lists). ``guarded=False``: an input
    an output may lie in (``--from-shards``' folder holding the shards may hold their merge too: the shards
    are found by their markers, never the merge)."""

    def __init__(self, option: str, kind: str, text: bool = False, guarded: bool = True):
        super().__init__(option)
        if kind not in INPUT_KINDS + OUTPUT_KINDS:
            raise ValueError(f"unknown path kind {kind!r}")
        self.kind, self.text, self.guarded = kind, text, guarded

    def check(self, value):
        path = check_path(value, self.kind, self.option)
        return str(path) if self.text else path

    @property
    def is_input(self) -> bool:
        return self.kind in INPUT_KINDS


class NumberType(OptionType):
    """A whole number (``integer``, the default) or a finite float within ``[min, max]`` (``*_open``: the
    bound excluded); whole numbers never past 64 bits."""

    def __init__(self, option: str, *, integer: bool = True, min=None, max=None, min_open: bool = False,
                 max_open: bool = False):
        super().__init__(option)
        self.integer, self.min, self.max, self.min_open, self.max_open = integer, min, max, min_open, max_open

    def check(self, value):
        return check_number(self.option, value, integer=self.integer, low=self.min, high=self.max,
                            low_open=self.min_open, high_open=self.max_open, text=True)


class SpecType(OptionType):
    """An LLM spec (``parse_spec``'s grammar; a bare model folder or Hub id too); ``builtins``: specs the
    command knows by name."""

    def __init__(self, option: str, builtins: tuple[str, ...] = ()):
        super().__init__(option)
        self.builtins = builtins

    def check(self, value):
        return check_spec(value, self.option, self.builtins, files=True)  # a scripted: file must be there


class RepoIdType(OptionType):
    """A Hugging Face repo id the Hub accepts; ``namespaced``: as ``namespace/name``."""

    def __init__(self, option: str, namespaced: bool = True):
        super().__init__(option)
        self.namespaced = namespaced

    def check(self, value):
        return value_checks.check_repo_id(value, self.option, self.namespaced)


def is_model_path(text: str) -> bool:
    """Whether a model reference names a local folder rather than a Hub id: it exists, starts with ``.``,
    ``/`` or ``~``, or has more than one ``/`` (a Hub id is NAME or ORG/NAME)."""
    return (os.path.lexists(os.path.expanduser(text)) or text.startswith((".", "/", "~"))
            or text.count("/") > 1)


class ModelRefType(OptionType):
    """A model: a local folder (checked as an input folder, and it must exist), else a Hub repo id."""

    def check(self, value):
        text = os.fspath(value)
        if is_model_path(text):
            path = check_path(text, INPUT_FOLDER, self.option)
            # a path is never a Hub id: missing, it would fail only when the model loads
            if not path.exists():
                raise MissingInputError(f"{self.option} {path}: no such model folder (a Hub id is ORG/NAME)")
            return str(path)
        return value_checks.check_repo_id(text, self.option)


class IndexType(PathType):
    """A search index: a folder, ``opensearch:NAME`` or ``http(s)://host:port/NAME``
    (``tansaku.core.index_target``'s grammar; another scheme or a malformed URL is refused); ``output``: the
    index a command writes; ``text=False``: a folder comes back as a ``Path`` (a service is always its text).
    ``opensearch:NAME`` needs $OPENSEARCH_URL, so without it it is refused here too."""

    def __init__(self, option: str, output: bool = False, text: bool = True):
        super().__init__(option, OUTPUT_INDEX if output else INDEX, text=text)

    def check(self, value):
        target = super().check(value)
        if (isinstance(target, str) and target.startswith("opensearch:")
                and not os.environ.get("OPENSEARCH_URL")):
            raise InputError(f"{self.option} {target}: OPENSEARCH_URL is not set; set it (and "
                             "OPENSEARCH_USER/PASSWORD) or give the cluster: https://host:9200/NAME")
        return target


class TextType(OptionType):
    """Text (``tansaku.core.text_values.check_text``): one line unless ``multiline`` (a prompt, a query),
    never a lone surrogate, NUL or other control character, at most ``max_chars``; ``required``: not empty;
    ``choices``: the values it may take (a callable: asked only when a value is given, so ``--help`` imports
    nothing); ``split``: several values in one (``answer,about``), each checked; ``grammar``: a callable that
    raises ``InputError`` for a value of the wrong form (``--shard``'s ``parse_shard``)."""

    def __init__(self, option: str, *, choices=None, required: bool = True, multiline: bool = False,
                 max_chars: int | None = None, split: str | None = None, grammar: Callable | None = None):
        super().__init__(option)
        self.choices, self.required, self.multiline = choices, required, multiline
        self.max_chars, self.split, self.grammar = max_chars, split, grammar

    def check(self, value):
        choices = self.choices() if callable(self.choices) else self.choices
        value = check_text(value, self.option, choices=choices, required=self.required,
                           multiline=self.multiline, max_chars=self.max_chars, split=self.split)
        if self.grammar is not None:
            self.grammar(value)
        return value


def shown_bounds(parser: OptionType | None) -> dict:
    """A ``NumberType``'s closed bounds as Typer's ``min``/``max``, for ``--help`` only (``[x>=1]``: Typer has
    no open bound, so an open one is left to the help text); the parser does the checking."""
    if not isinstance(parser, NumberType):
        return {}
    return {"min": None if parser.min_open else parser.min, "max": None if parser.max_open else parser.max}


def option(*decls: str, parser: OptionType, **kwargs) -> Any:
    """``typer.Option(*decls, parser=parser, **kwargs)``; a ``NumberType``'s bounds also show in
    ``--help``."""
    return typer.Option(*decls, parser=parser, **{**shown_bounds(parser), **kwargs})


def argument(parser: OptionType, **kwargs) -> Any:
    """``typer.Argument(parser=parser, **kwargs)``."""
    return typer.Argument(parser=parser, **kwargs)


def types_of(fn: Callable) -> dict[str, OptionType]:
    """Parameter name → the ``OptionType`` its option was declared with, for a Typer command function."""
    try:
        hints = typing.get_type_hints(fn, include_extras=True)
    except Exception:  # noqa: BLE001 - a hint that does not resolve declares no type
        hints = dict(getattr(fn, "__annotations__", {}))
    found = {}
    for name, hint in hints.items():
        for info in getattr(hint, "__metadata__", ()):
            if isinstance(getattr(info, "parser", None), OptionType):
                found[name] = info.parser
    return found


def refuse_overlaps(types: Mapping[str, OptionType], values: Mapping[str, Any]) -> None:
    """``InputError`` when an output option's value is, lies inside or holds one of the input paths given
    (``tansaku.core.ownership.refuse_overlap``: a command never writes where it reads)."""
    paths = {name: t for name, t in types.items() if isinstance(t, PathType) and values.get(name) is not None}
    inputs = {t.option: values[name] for name, t in paths.items() if t.is_input and t.guarded}
    for name, t in paths.items():
        value = values[name]
        if not t.is_input and inputs and not value_checks.is_remote(str(value)):
            ownership.refuse_overlap(value, inputs, t.option)
