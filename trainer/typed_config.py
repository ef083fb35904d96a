"""YAML/CLI values → typed dataclasses: the coercion and ``--set key=value`` machinery behind recipes.

    recipe = build(SFTRecipe, {"model": "tiny", "max_steps": "3", "lora": {"r": "8"}})
    apply_override(data, "tasks.0.ratio=2")          # dotted keys reach into sections and list items

Kept apart from ``recipes.py`` (which holds the recipe fields and their cross-field checks) so each stays
short; every failure is a ``RecipeError`` naming the key and what was expected.

Keys that are TRL config fields (``learning_rate``, ``bf16``, ``lr_scheduler_type``, ``trl.*`` …) are coerced by
``transformers.HfArgumentParser`` over the TRL config class (``coerce_trl_fields``): the same parser that
``TrlParser`` / ``--learning_rate 3e-5`` uses, so a value means exactly what it means on TRL's command line
(``bf16: yes`` is True, ``lr_scheduler_type`` must be one of transformers' schedulers, ``max_steps: 1e3`` is
refused as TRL refuses it). Only parsing, never the config's ``__post_init__`` (``bf16`` on a CPU machine
must still load). ``none``/``null`` clears a field the recipe declares optional (``per_device_train_batch_size:
null`` = derived from the batch plan); mappings pass through. A number field must be finite: ``.nan`` and
``.inf`` are refused (tansaku's fields and TRL's alike).

>>> from dataclasses import dataclass
>>> @dataclass
... class Demo:
...     steps: int = 1
...     rate: float | None = None
>>> build(Demo, {"steps": "1e3", "rate": "none"})
Demo(steps=1000, rate=None)
>>> build(Demo, {"stpes": 2})
Traceback (most recent call last):
...
tansaku.trainer.typed_config.RecipeError: recipe: unknown key 'stpes' (did you mean 'steps'?)
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import functools
import math
import types
import typing
from typing import Any

import yaml

from tansaku.core.errors import InputError


class RecipeError(InputError):
    """A recipe file or override is malformed; the message names the key and what was expected."""


# --------------------------------------------------------------------------- coercion


def _is_optional(tp) -> tuple[bool, Any]:
    args = typing.get_args(tp)
    if typing.get_origin(tp) in (typing.Union, types.UnionType) and type(None) in args:
        rest = [a for a in args if a is not type(None)]
        inner = rest[0]
        for other in rest[1:]:
            inner = inner | other
        return True, inner
    return False, tp


def _coerce(value: Any, tp, where: str) -> Any:
    """Turn a YAML/CLI value into ``tp``; raise RecipeError naming ``where`` when it cannot."""
    optional, inner = _is_optional(tp)
    if optional and isinstance(value, str) and value.strip().lower() in ("none", "null", "~", ""):
        return None
    if value is None:
        if optional:
            return None
        raise RecipeError(f"{where}: a value is required (got null)")
    tp = inner
    origin = typing.get_origin(tp)
    try:
        if dataclasses.is_dataclass(tp):
            if isinstance(value, tp):
                return value
            if not isinstance(value, dict):
                raise RecipeError(f"{where}: expected a mapping of {tp.__name__} fields, got {value!r}")
            return build(tp, value, where)
        if origin in (typing.Union, types.UnionType):  # e.g. str | list[str]: the first type that fits
            for option in typing.get_args(tp):
                if isinstance(value, typing.get_origin(option) or option):
                    return _coerce(value, option, where)
            return _coerce(value, typing.get_args(tp)[0], where)
        if origin is list:
            (item_tp,) = typing.get_args(tp)
            if isinstance(value, str):  # --set report_to=wandb,trackio
                value = [v.strip() for v in value.split(",") if v.strip()]
            if not isinstance(value, list):
                raise RecipeError(f"{where}: expected a list, got {value!r}")
            return [_coerce(v, item_tp, f"{where}.{i}") for i, v in enumerate(value)]
        if origin is dict:
            if not isinstance(value, dict):
                raise RecipeError(f"{where}: expected a mapping, got {value!r}")
            _, val_tp = typing.get_args(tp)
            return {str(k): _coerce(v, val_tp, f"{where}.{k}") for k, v in value.items()}
        if tp is bool:
            if isinstance(value, bool):
                return value
            text = str(value).strip().lower()
            if text in ("true", "yes", "on", "1"):
                return True
            if text in ("false", "no", "off", "0"):
                return False
            raise ValueError(value)
        if tp is int:
            if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                raise ValueError(value)
            return int(float(value)) if isinstance(value, str) and "e" in value.lower() else int(value)
        if tp is float:
            if isinstance(value, bool):
                raise ValueError(value)
            return _finite(float(value), value, where)
        if tp is str:
            if isinstance(value, (dict, list)):
                raise ValueError(value)
            return str(value)
        if tp is Any:
            return value
    except RecipeError:
        raise
    except (TypeError, ValueError):
        raise RecipeError(f"{where}: expected {getattr(tp, '__name__', tp)}, got {value!r}") from None
    raise RecipeError(f"{where}: unsupported field type {tp}")


def _finite(number: float, value: Any, where: str) -> float:
    """``number`` unless it is NaN or ±inf (YAML ``.nan``/``.inf``): no recipe number means that, and NaN passes
    every ``> 0`` check (each comparison with it is False) to fail deep inside training."""
    if not math.isfinite(number):
        raise RecipeError(f"{where}: expected a finite number, got {value!r}")
    return number


def build(cls, data: dict, where: str = "recipe"):
    """Build dataclass ``cls`` from a dict, coercing each value; unknown keys fail with a suggestion."""
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    kwargs = {}
    for key, value in data.items():
        if key not in hints:
            close = difflib.get_close_matches(str(key), names, n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else f"; valid keys: {', '.join(names)}"
            raise RecipeError(f"{where}: unknown key '{key}'{hint}")
        kwargs[key] = _coerce(value, hints[key], f"{where}.{key}" if where != "recipe" else key)
    return cls(**kwargs)


# --------------------------------------------------------------------------- TRL's own parser


class _RaisingParser(argparse.ArgumentParser):
    """argparse exits the process on a bad value; a recipe error must name the key instead."""

    def error(self, message):
        raise argparse.ArgumentError(None, message)


@functools.cache
def _trl_parser(config_cls):
    from transformers import HfArgumentParser

    class Parser(HfArgumentParser, _RaisingParser):
        pass

    parser = Parser(config_cls)
    return parser, {action.dest: action for action in parser._actions}


def trl_field_names(config_cls) -> set[str]:
    return set(_trl_parser(config_cls)[1])


def _expected(action) -> str:
    if action.choices:
        return "one of " + ", ".join(map(str, action.choices))
    return "bool" if getattr(action.type, "__name__", "") == "string_to_bool" else getattr(action.type, "__name__", "str")


def _as_arg(value: Any, action) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer() and action.type is int:  # YAML 3.0 for an int field
        return str(int(value))
    return str(value)


def _parse_one(config_cls, key: str, args: list[str], value: Any, where: str):
    parser, actions = _trl_parser(config_cls)
    try:
        namespace, _ = parser.parse_known_args([f"--{key}", *args])
    except argparse.ArgumentError as exc:
        raise RecipeError(f"{where}: expected {_expected(actions[key])}, got {value!r} "
                          f"(TRL {config_cls.__name__}: {exc.message})") from None
    parsed = getattr(namespace, key)
    for number in parsed if isinstance(parsed, list) else [parsed]:
        if isinstance(number, float):
            _finite(number, value, where)
    return parsed


def coerce_trl_value(config_cls, key: str, value: Any, where: str) -> Any:
    """``value`` as TRL's ``HfArgumentParser`` reads ``--key value`` for ``config_cls``."""
    action = _trl_parser(config_cls)[1][key]
    if value is None or isinstance(value, dict):
        return value
    if isinstance(value, str) and value.strip().lower() in ("none", "null", "~"):
        return None  # kept only where the recipe field is optional (``build`` refuses null elsewhere)
    if isinstance(value, list):
        if action.nargs in ("+", "*"):
            return _parse_one(config_cls, key, [_as_arg(v, action) for v in value], value, where)
        return [coerce_trl_value(config_cls, key, v, f"{where}.{i}") for i, v in enumerate(value)]
    return _parse_one(config_cls, key, [_as_arg(value, action)], value, where)


def coerce_trl_fields(config_cls, data: dict, shared: set[str], section: str = "trl") -> dict:
    """``data`` with the recipe keys in ``shared`` and every key of ``data[section]`` coerced by TRL's parser.

    An unknown ``section`` key fails with the closest ``config_cls`` field names."""
    names = trl_field_names(config_cls)
    out = {key: coerce_trl_value(config_cls, key, value, key) if key in shared else value
           for key, value in data.items()}
    extra = out.get(section)
    if isinstance(extra, dict):
        for key in extra:
            if key not in names:
                close = difflib.get_close_matches(str(key), sorted(names), n=3)
                hint = f" (did you mean {', '.join(repr(c) for c in close)}?)" if close else ""
                raise RecipeError(f"{section}.{key}: not a {config_cls.__name__} field{hint}")
        out[section] = {k: coerce_trl_value(config_cls, k, v, f"{section}.{k}") for k, v in extra.items()}
    return out


# --------------------------------------------------------------------------- overrides


def apply_override(data: dict, assignment: str, aliases: dict[str, str] | None = None) -> None:
    """Apply one ``key=value`` (dotted key: ``lora.r=8``, ``tasks.0.ratio=2``) to the raw recipe dict.

    The value is parsed as YAML (lists, mappings, numbers); ``_coerce`` then fixes its type.
    """

    key, sep, raw = assignment.partition("=")
    key = key.strip()
    if not sep or not key:
        raise RecipeError(f"--set expects key=value, got {assignment!r}")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except RecursionError:
        raise RecipeError(f"--set {key}: the value is nested too deeply") from None
    except yaml.YAMLError:
        value = raw
    parts = key.split(".")
    parts[0] = (aliases or {}).get(parts[0], parts[0])
    node: Any = data
    for i, part in enumerate(parts[:-1]):
        if isinstance(node, list):
            if not part.isdigit() or int(part) >= len(node):
                raise RecipeError(f"--set {key}: '{part}' is not an index of a list of {len(node)}")
            node = node[int(part)]
        else:
            if node.get(part) is None:
                node[part] = {}
            node = node[part]
        if not isinstance(node, (dict, list)):
            raise RecipeError(f"--set {key}: '{'.'.join(parts[: i + 1])}' is a value, not a section")
    last = parts[-1]
    if isinstance(node, list):
        if not last.isdigit() or int(last) >= len(node):
            raise RecipeError(f"--set {key}: '{last}' is not an index of a list of {len(node)}")
        node[int(last)] = value
    else:
        node[last] = value
