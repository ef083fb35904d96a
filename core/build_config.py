"""One config object per build: every setting once, with its default and help, read by the CLI, the builder,
each stage's params and the manifest.

A build's config is a frozen dataclass of :class:`BuildConfig` whose fields are made with :func:`option`.
``synth build X`` is generated from it (``command_from_config``: each field becomes ``--field-name``), the
builder takes it, stages read their params from it (``config.pick("k", "m")``), and the manifest's
``config`` is ``config.recipe()``: every recipe field, so the resume fingerprint sees a change to any of
them (``tests/test_build_configs.py`` changes each field of each build and checks that). How a build runs —
shards, LLM keys and slots, progress — is not config but ``tansaku.core.context.BuildContext``.

    @dataclass(frozen=True)
    class CorpusConfig(BuildConfig):
        input: Path = option(help="File or folder of documents.")
        min_chars: int = option(1, help="Drop documents shorter than this.")

    CorpusConfig(input=Path("wiki.jsonl")).recipe()   # {'input': 'wiki.jsonl', 'min_chars': 1}

>>> from dataclasses import dataclass
>>> @dataclass(frozen=True)
... class Toy(BuildConfig):
...     k: int = option(4, help="Tries per question.")
...     label: str = option("x", help="A label.", recipe=False)
>>> Toy().recipe(), Toy(k=8).pick("k"), cli_flag(fields(Toy)[0])
({'k': 4}, {'k': 8}, '--k')
"""

from __future__ import annotations

import dataclasses
import inspect
import types
import typing
from dataclasses import MISSING, fields
from pathlib import Path
from typing import Annotated, Any

import typer

from tansaku.core.cli_types import (
    IndexType,
    NumberType,
    OptionType,
    PathType,
    SpecType,
    TextType,
    shown_bounds,
)
from tansaku.core.engine import llm_identity
from tansaku.core.heldout import DEFAULT_RL_SHARE, DEFAULT_SHARE
from tansaku.core.value_checks import INDEX, INPUT_FILE, OUTPUT_INDEX, check_number


def option(default: Any = MISSING, *, help: str, flag: str | None = None, recipe: bool = True,
           llm: bool = False,
           argument: bool = False, factory: Any = MISSING, path: str | None = None, min: Any = None,
           max: Any = None, min_open: bool = False, max_open: bool = False, builtins: tuple[str, ...] = (),
           choices: Any = None, multiline: bool = False, split: str | None = None, **typer_options: Any):
    """A config field: ``default`` (none: required), ``help`` (the CLI's), ``flag`` (default ``--field-name``;
    ``"--x/--no-x"`` for a bool), ``recipe=False`` for a field that names where output goes rather than what
    it holds, ``llm=True`` for an LLM spec (or client), whose recipe value is its identity (``spec_identity``:
    the server URLs are how it runs, not what it makes; ``builtins``: specs the build knows by name),
    ``argument=True`` for a positional argument; other keywords go to ``typer.Option``.

    How the CLI checks the value (``tansaku.core.cli_types``): ``path`` is a path field's kind
    (``tansaku.core.value_checks.INPUT_FILE`` …; every path field declares one), ``min``/``max`` (``*_open``:
    the bound excluded) bound a number field; every number is also checked to fit in 64 bits, or be finite.
    A text field is checked as text (``TextType``): one line unless ``multiline`` (a prompt), non-empty, no
    control characters, bounded; ``choices`` (a tuple, or a callable asked when a value is given) the values
    it may take; ``split``: several values in one (``answer,about``)."""
    metadata = {"help": help, "flag": flag, "recipe": recipe, "llm": llm, "argument": argument,
                "path": path, "bounds": {"min": min, "max": max, "min_open": min_open, "max_open": max_open},
                "builtins": tuple(builtins),
                "text": {"choices": choices, "multiline": multiline, "split": split}, "typer": typer_options}
    if factory is not MISSING:
        return dataclasses.field(default_factory=factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


# The options most builds share, worded once.
def seed_option():
    return option(0, min=0, help="Seed for every random draw in the build.")


def limit_option(what: str = "items"):
    return option(None, min=1, help=f"Stop after N {what} (smoke runs).")


def heldout_share_option(what: str = "questions"):
    return option(DEFAULT_SHARE, min=0, max=1, max_open=True,
                  help=f"Share of {what} held out as the 'test' split (train on 'train', eval on 'test'; 0: "
                       f"none).")


def rl_share_option(what: str = "questions"):
    return option(DEFAULT_RL_SHARE, min=0, max=1, max_open=True,
                  help=f"Share of {what} in the 'rl' split: train rl's prompts, never in SFT's train split "
                       f"(0: none).")


def license_option(default: str = "the input's license"):
    return option(None, help="The card's license: a Hub id (cc-by-sa-4.0, cc-by-4.0 …) or other:NAME (with "
                             f"--license-file; the card links LICENSE). Default: {default}.")


def license_file_option():
    return option(None, path=INPUT_FILE,
                  help="License text, copied into the dataset as LICENSE; needed with --license other:NAME "
                       "unless the input folder ships a LICENSE (then carried over).")


def cli_flag(f: dataclasses.Field) -> str:
    return f.metadata.get("flag") or "--" + f.name.replace("_", "-")


def plain(value: Any) -> Any:
    """A JSON value for the recipe: paths as strings, tuples as lists, nested configs as dicts."""
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in fields(value)}
    return value


def spec_identity(spec: Any) -> str | None:
    """An LLM spec or client as the recipe knows it: backend and model, no server URLs.

    >>> spec_identity("http:Qwen/Qwen3-8B@http://gpu1:8000,http://gpu2:8000"), spec_identity(None)
    ('http:Qwen/Qwen3-8B', None)
    """
    if spec is None:
        return None
    if isinstance(spec, str):
        kind, _, rest = spec.partition(":")
        return f"{kind}:{rest.partition('@')[0]}" if kind == "http" else spec
    identity = llm_identity(spec) or {}
    return f"{identity.get('backend')}:{identity.get('model')}"


class BuildConfig:
    """Base of every build's config dataclass (``recipe``, ``pick``, ``replace``, ``check``)."""

    def check(self) -> BuildConfig:
        """Refuse, naming the option, a number outside the bounds its field declares (``option(min=…)``).

        The CLI's parsers check the same bounds as a value is typed; this is the same rule for a Python
        caller, run by every builder before any work, so no builder retypes an option's bounds.
        ``cross_checks`` (a subclass's) then checks what one field cannot say alone (``--m`` ≤ ``--k``)."""
        hints = typing.get_type_hints(type(self))
        for f in fields(self):
            value, bounds = getattr(self, f.name), f.metadata.get("bounds") or {}
            if _value_type(hints[f.name]) not in (int, float) or value is None:
                continue
            name = f.name.upper() if f.metadata.get("argument") else cli_flag(f).split("/")[0].split(" ")[0]
            for one in value if isinstance(value, (list, tuple)) else [value]:
                check_number(name, one, integer=_value_type(hints[f.name]) is int, low=bounds.get("min"),
                             high=bounds.get("max"), low_open=bounds.get("min_open", False),
                             high_open=bounds.get("max_open", False))
        self.cross_checks()
        return self

    def cross_checks(self) -> None:
        """Rules between fields (none here); a subclass raises ``InputError`` naming the options."""

    def recipe(self) -> dict:
        """Every recipe field as a JSON value: the manifest's ``config`` and part of the fingerprint."""
        return {f.name: spec_identity(getattr(self, f.name)) if f.metadata.get("llm")
                else plain(getattr(self, f.name)) for f in fields(self) if f.metadata.get("recipe", True)}

    def pick(self, *names: str) -> dict:
        """These fields as a stage's ``params`` (so a stage never retypes a setting)."""
        return {name: plain(getattr(self, name)) for name in names}

    def replace(self, **changes) -> BuildConfig:
        return dataclasses.replace(self, **changes)


def _value_type(annotation: Any) -> Any:
    """The type of one value of a field: ``int`` for ``int | None``, ``Path`` for ``list[Path]``."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType, list, tuple) and len(set(args)) == 1:
        return _value_type(args[0])
    return annotation


def field_parser(f: dataclasses.Field, annotation: Any, name: str) -> OptionType | None:
    """The ``tansaku.core.cli_types`` type that checks field ``f``'s value on the command line (``name``: its
    flag or argument), from what the field declares: an LLM spec, a path of its kind (an index:
    ``IndexType``), a bounded number, text."""
    meta, value_type = f.metadata, _value_type(annotation)
    if meta.get("llm"):
        return SpecType(name, meta.get("builtins", ()))
    if meta.get("path") in (INDEX, OUTPUT_INDEX):
        return IndexType(name, output=meta["path"] == OUTPUT_INDEX, text=value_type is str)
    if meta.get("path"):
        return PathType(name, meta["path"], text=value_type is str)
    if value_type is Path:
        raise TypeError(f"config field {f.name} is a path: declare its kind (option(path=INPUT_FILE …))")
    if value_type in (int, float):
        return NumberType(name, integer=value_type is int, **meta.get("bounds", {}))
    if value_type is str:
        return TextType(name, **meta.get("text", {}))
    return None


def _typer_parameter(f: dataclasses.Field, annotation: Any) -> inspect.Parameter:
    meta = f.metadata
    name = f.name.upper() if meta.get("argument") else cli_flag(f).split("/")[0].split(" ")[0]
    parser = field_parser(f, annotation, name)
    # bounds: in --help too
    checked = {"parser": parser, **shown_bounds(parser)} if parser is not None else {}
    info = (typer.Argument(help=meta["help"], **checked, **meta["typer"]) if meta.get("argument")
            else typer.Option(*cli_flag(f).split(" "), help=meta["help"], **checked, **meta["typer"]))
    if f.default is not MISSING:
        default = f.default
    elif f.default_factory is not MISSING:
        default = f.default_factory()
    else:
        default = inspect.Parameter.empty
    return inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=default,
                             annotation=Annotated[annotation, info])


def config_parameters(config_class: type) -> list[inspect.Parameter]:
    """The Typer parameters of a config dataclass, one per field, in field order."""
    hints = typing.get_type_hints(config_class)
    return [_typer_parameter(f, hints[f.name]) for f in fields(config_class)]


def command_from_config(config_class: type, run, extra: list[inspect.Parameter], doc: str):
    """A function Typer reads as a command: the config's fields, then ``extra`` (the context options), whose
    body calls ``run(config, **extra_values)``. Typer sees the parameters through ``__signature__``."""
    names = [f.name for f in fields(config_class)]
    parameters = config_parameters(config_class) + extra
    required = [p for p in parameters if p.default is inspect.Parameter.empty]
    ordered = required + [p for p in parameters if p.default is not inspect.Parameter.empty]

    def command(**values):
        config = config_class(**{n: values.pop(n) for n in names})
        return run(config, **values)

    command.__signature__ = inspect.Signature(ordered)
    command.__annotations__ = {p.name: p.annotation for p in ordered}
    command.__doc__ = doc
    command.__name__ = config_class.__name__.removesuffix("Config").lower()
    return command
