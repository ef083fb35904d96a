"""YAML mappings → tansaku's own recipe sections (``tasks``, ``data``, ``readiness``, ``judge`` …), typed.

    task = build(RLTask, {"name": "multihop_qa", "data": "q.jsonl", "ratio": "2"})    # ratio == 2.0
    readiness = section(ReadinessSpec, "{k: 2}", "readiness")   # YAML text, as a command line gives it

TRL's parser (``TrlParser``) reads every flat key of a recipe; a nested section reaches the recipe's dataclass
as the mapping (or list of mappings) the YAML holds, or as YAML/JSON text from the command line (``--tasks
'[{…}]'``). ``build`` and ``section`` turn those into the section dataclasses, coercing each value to its
field's type (``1e-7`` is a float even though YAML 1.1 reads it as a string; ``none``/``null`` clears an
optional field). Unknown keys fail with the closest valid name. A number must be finite: ``.nan`` and ``.inf``
are refused. Every failure is a ``RecipeError`` naming the key and what was expected.

>>> from dataclasses import dataclass
>>> @dataclass
... class Demo:
...     steps: int = 1
...     rate: float | None = None
>>> build(Demo, {"steps": "1e3", "rate": "none"})
Demo(steps=1000, rate=None)
>>> section(Demo, "{steps: 2}", "demo")
Demo(steps=2, rate=None)
>>> build(Demo, {"stpes": 2})
Traceback (most recent call last):
...
tansaku.trainer.typed_config.RecipeError: recipe: unknown key 'stpes' (did you mean 'steps'?)
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import types
import typing
from typing import Any

import yaml

from tansaku.core.errors import InputError


class RecipeError(InputError):
    """A recipe file or override is malformed; the message names the key and what was expected."""


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
    """Turn a YAML value into ``tp``; raise RecipeError naming ``where`` when it cannot."""
    optional, inner = _is_optional(tp)
    if optional and isinstance(value, str) and value.strip().lower() in ("none", "null", "~", ""):
        return None
    if value is None:
        if optional:
            return None
        raise RecipeError(f"{where}: a value is required (got null)")
    try:
        return _coerce_present(value, inner, where)
    except RecipeError:
        raise
    except (TypeError, ValueError):  # the value does not fit the type: say which type was expected
        raise RecipeError(f"{where}: expected {getattr(inner, '__name__', inner)}, got {value!r}") from None


def _coerce_present(value: Any, tp, where: str) -> Any:
    """``value`` (not null) as ``tp``: a section, a union, a list, a mapping or a scalar; TypeError or
    ValueError when it does not fit (``_coerce`` words it)."""
    origin = typing.get_origin(tp)
    if dataclasses.is_dataclass(tp):
        return _coerce_section(value, tp, where)
    if origin in (typing.Union, types.UnionType):  # e.g. str | list[str]: the first type that fits
        for option in typing.get_args(tp):
            if isinstance(value, typing.get_origin(option) or option):
                return _coerce(value, option, where)
        return _coerce(value, typing.get_args(tp)[0], where)
    if origin is list:
        (item_tp,) = typing.get_args(tp)
        if not isinstance(value, list):
            raise RecipeError(f"{where}: expected a list, got {value!r}")
        return [_coerce(v, item_tp, f"{where}.{i}") for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise RecipeError(f"{where}: expected a mapping, got {value!r}")
        _, val_tp = typing.get_args(tp)
        return {str(k): _coerce(v, val_tp, f"{where}.{k}") for k, v in value.items()}
    if tp is bool:
        return _to_bool(value)
    if tp is int:
        return _to_int(value)
    if tp is float:
        if isinstance(value, bool):
            raise ValueError(value)
        return finite(float(value), value, where)
    if tp is str:
        if isinstance(value, (dict, list)):
            raise ValueError(value)
        return str(value)
    if tp is Any:
        return value
    raise RecipeError(f"{where}: unsupported field type {tp}")


def _coerce_section(value: Any, tp, where: str) -> Any:
    """A section dataclass from its mapping, or from an instance built elsewhere (checked like a mapping)."""
    if isinstance(value, tp):
        value = dataclasses.asdict(value)
    if not isinstance(value, dict):
        raise RecipeError(f"{where}: expected a mapping of {tp.__name__} fields, got {value!r}")
    return build(tp, value, where)


def _to_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "yes", "on", "1"):
        return True
    if text in ("false", "no", "off", "0"):
        return False
    raise ValueError(value)


def _to_int(value: Any) -> int:
    # "1e3" is a whole number YAML 1.1 leaves as text; 1.5 and True are not ints
    if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
        raise ValueError(value)
    return int(float(value)) if isinstance(value, str) and "e" in value.lower() else int(value)


def finite(number: float, value: Any, where: str) -> float:
    """``number`` unless it is NaN or ±inf (YAML ``.nan``/``.inf``): no recipe number means that, and NaN
    passes every ``> 0`` check (each comparison with it is False) to fail deep inside training."""
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
    try:
        return cls(**kwargs)
    except TypeError as exc:  # a required field left out: "missing 1 required positional argument: 'data'"
        raise RecipeError(f"{where}: {str(exc).split('() ', 1)[-1]}") from None


def section(tp, value: Any, where: str):
    """``value`` as ``tp`` (a section dataclass, or ``list[...]`` of one): a mapping or list from the YAML, a
    section already built, or YAML/JSON text as the command line gives it (``--readiness '{k: 2}'``)."""
    if isinstance(value, str):
        try:
            value = yaml.safe_load(value)
        except RecursionError:  # PyYAML composes nested nodes recursively
            raise RecipeError(f"{where}: the value is nested too deeply") from None
        except yaml.YAMLError as exc:
            raise RecipeError(f"{where}: not valid YAML ({str(exc).splitlines()[0]})") from None
    return _coerce(value, tp, where)
