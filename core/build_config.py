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
import typing
from dataclasses import MISSING, fields
from pathlib import Path
from typing import Annotated, Any

import typer

from tansaku.core.engine import llm_identity
from tansaku.core.heldout import DEFAULT_RL_SHARE, DEFAULT_SHARE


def option(default: Any = MISSING, *, help: str, flag: str | None = None, recipe: bool = True, llm: bool = False,
           argument: bool = False, factory: Any = MISSING, **typer_options: Any):
    """A config field: ``default`` (none: required), ``help`` (the CLI's), ``flag`` (default ``--field-name``;
    ``"--x/--no-x"`` for a bool), ``recipe=False`` for a field that names where output goes rather than what
    it holds, ``llm=True`` for an LLM spec (or client), whose recipe value is its identity (``spec_identity``:
    the server URLs are how it runs, not what it makes), ``argument=True`` for a positional argument; other
    keywords go to ``typer.Option``."""
    metadata = {"help": help, "flag": flag, "recipe": recipe, "llm": llm, "argument": argument,
                "typer": typer_options}
    if factory is not MISSING:
        return dataclasses.field(default_factory=factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


# The options most builds share, worded once.
def seed_option():
    return option(0, help="Seed for every random draw in the build.")


def limit_option(what: str = "items"):
    return option(None, help=f"Stop after N {what} (smoke runs).")


def heldout_share_option(what: str = "questions"):
    return option(DEFAULT_SHARE, help=f"Share of {what} held out as the 'test' split (train on 'train', eval on "
                                      "'test'; 0: none).")


def rl_share_option(what: str = "questions"):
    return option(DEFAULT_RL_SHARE, help=f"Share of {what} in the 'rl' split: train rl's prompts, never in SFT's "
                                         "train split (0: none).")


def license_option(default: str = "the input's license"):
    return option(None, help="The card's license: a Hub id (cc-by-sa-4.0, cc-by-4.0 …) or other:NAME (with "
                             f"--license-file; the card links LICENSE). Default: {default}.")


def license_file_option():
    return option(None, help="License text, copied into the dataset as LICENSE; needed with --license other:NAME "
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
    """Base of every build's config dataclass (``recipe``, ``pick``, ``replace``)."""

    def recipe(self) -> dict:
        """Every recipe field as a JSON value: the manifest's ``config`` and part of the fingerprint."""
        return {f.name: spec_identity(getattr(self, f.name)) if f.metadata.get("llm") else plain(getattr(self, f.name))
                for f in fields(self) if f.metadata.get("recipe", True)}

    def pick(self, *names: str) -> dict:
        """These fields as a stage's ``params`` (so a stage never retypes a setting)."""
        return {name: plain(getattr(self, name)) for name in names}

    def replace(self, **changes) -> BuildConfig:
        return dataclasses.replace(self, **changes)


def _typer_parameter(f: dataclasses.Field, annotation: Any) -> inspect.Parameter:
    meta = f.metadata
    info = (typer.Argument(help=meta["help"], **meta["typer"]) if meta.get("argument")
            else typer.Option(*cli_flag(f).split(" "), help=meta["help"], **meta["typer"]))
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
