"""Training recipes: YAML files that TRL's own ``TrlParser`` reads, as open-r1's training scripts read theirs.

    from trl import GRPOConfig, ModelConfig, TrlParser
    parser = TrlParser((TansakuRLArguments, GRPOConfig, ModelConfig))
    script_args, training_args, model_args = parser.parse_args_and_config(
        args=["--config", "trainer/recipes/rl-tiny.yaml", "--beta", "0.04"])
    recipe = load_recipe("trainer/recipes/rl-tiny.yaml", ["--beta", "0.04"], kind="rl")   # the same three

A recipe is one flat mapping over three dataclasses; every key has one spelling:

- ``TansakuSFTArguments`` / ``TansakuRLArguments`` (``tansaku.trainer.recipe_arguments``): what is
  tansaku's own: the SFT data mix (``data``, ``mix_size``, ``overlong``), the RL tasks (``tasks``: task name,
  prompt data, search index, corpus, reward weights, system prompt, tools) and the checks around RL
  (``watch``, ``readiness``, ``difficulty``, ``judge``);
- TRL's ``SFTConfig`` / ``GRPOConfig``: every training setting, under TRL's name, checked by TRL itself;
- TRL's ``ModelConfig``: the model (``model_name_or_path``: ``tiny``, a folder or a Hub id), ``dtype`` (the
  dtype the weights are loaded, updated and saved in) and LoRA (``use_peft``, ``lora_r``, ``lora_alpha`` …).

Overrides are TRL's ``--key value`` (``train sft --config R.yaml --max_steps 2``); a nested section is given
whole as YAML or JSON text (``--readiness '{k: 2}'``, ``--tasks '[{…}]'``), read by ``typed_config.section``.
``load_recipe`` parses with TRL's parser too, and adds what the parser leaves to the trainer (which fails only
once the model is loaded): each error is one ``RecipeError`` line naming the key; values TRL declares choices
for are checked when they come from the file too (argparse checks only the command line); numbers must be
finite; a batch of 0 is refused. The NeMo-RL names of the seed recipe and their TRL keys: ``docs/recipes.md``.

Data paths are relative to the working directory; one missing there but shipped with tansaku (``examples/…``,
what the tiny recipes use) resolves to the shipped file (``shipped_path``). An RL task with ``index: auto``
and a ``corpus`` searches ``<output_dir>/index/<task>``, which ``train rl`` builds once
(``task_indexes.ensure_indexes``).
"""

from __future__ import annotations

import dataclasses
import difflib
import logging
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tansaku.core.hardware import emulated_bf16_warning
from tansaku.core.llm.identity import resolve_model as resolve_local_model
from tansaku.core.redact import redact_mapping
from tansaku.core.tiny_model import tiny_model_dir
from tansaku.trainer.recipe_arguments import (
    AUTO_INDEX,
    SCRIPT_ARGUMENTS,
    TansakuRLArguments,
    TansakuSFTArguments,
    check,
)
from tansaku.trainer.typed_config import RecipeError

log = logging.getLogger(__name__)

# the `tansaku` package: the repository root, or site-packages
PACKAGE_ROOT = Path(__file__).resolve().parents[1]
# Keys of earlier tansaku recipes and of NeMo-RL: refused, with the key to use instead (docs/recipes.md).
RENAMED = {
    "kind": "no key; the command (train sft / train rl) is the kind", "model": "model_name_or_path",
    "weights_dtype": "dtype", "lora": "use_peft, lora_r, lora_alpha, lora_dropout, lora_target_modules",
    "trl": "its keys at the top level",
    "algorithm": "importance_sampling_level, loss_type, epsilon, epsilon_high",
    "prompts_per_step": "per_device_train_batch_size × gradient_accumulation_steps",
    "reward_aggregation": "multi_objective_aggregation", "policy_kl_penalty": "beta",
    "ratio_clip_min": "epsilon",
    "ratio_clip_max": "epsilon_high", "adam_eps": "adam_epsilon",
    "num_generations_per_prompt": "num_generations",
    "num_prompts_per_step": "per_device_train_batch_size × gradient_accumulation_steps",
    "set": "TRL's --KEY VALUE (--max_steps 3)",
}


@dataclass
class Recipe:
    """A loaded recipe: the three dataclasses TRL's parser fills, and where they came from."""

    kind: str  # sft | rl
    script_args: TansakuSFTArguments | TansakuRLArguments
    # trl.SFTConfig | trl.GRPOConfig (trl is imported when a recipe loads, not with this module)
    training_args: Any
    model_args: Any  # trl.ModelConfig
    config: str = ""  # the YAML file
    args: list[str] = field(default_factory=list)  # the --key value overrides

    def record(self) -> dict:
        """What ``tansaku_recipe.json`` holds: enough to run it again (``config`` with ``args``, or the
        values), with
        no secret in it (``tansaku.core.redact``): the judge's ``api_key`` and URL password, ``--hub_token …``
        in ``args`` are masked, as TRL's ``to_dict`` masks its own ``*_token`` fields."""
        return redact_mapping({"kind": self.kind, "config": self.config, "args": self.args,
                               "script_args": dataclasses.asdict(self.script_args),
                               "training_args": self.training_args.to_dict(),
                               "model_args": dataclasses.asdict(self.model_args)})


def recipe_parser(kind: str):
    """TRL's ``TrlParser`` over the kind's three dataclasses; where argparse would print its usage and exit
    the process, it raises a RecipeError."""
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    from trl import GRPOConfig, ModelConfig, SFTConfig, TrlParser

    class Parser(TrlParser):
        def error(self, message):  # "argument --max_steps/--max-steps: invalid int value" → "max_steps: …"
            raise RecipeError(re.sub(r"^argument --(\w+)(/--[\w-]+)*: ", r"\1: ", message))

    return Parser((SCRIPT_ARGUMENTS[kind], {"sft": SFTConfig, "rl": GRPOConfig}[kind], ModelConfig))


def read_recipe_file(path: str | Path) -> dict:
    """The recipe's YAML mapping; RecipeError (one line) for a missing, non-UTF-8, malformed or non-mapping
    file."""
    path = Path(path)
    if not path.is_file():
        raise RecipeError(f"recipe {path} not found")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        raise RecipeError(f"recipe {path} is not UTF-8 text (byte {exc.start}); save it as UTF-8") from None
    except RecursionError:  # PyYAML composes nested nodes recursively: thousands of levels overflow the stack
        raise RecipeError(f"recipe {path} is not a recipe: its YAML is nested too deeply") from None
    except yaml.YAMLError as exc:
        raise RecipeError(f"recipe {path} is not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise RecipeError(f"recipe {path}: the top level must be a mapping of keys")
    return data


def _unknown_keys(keys: list[str], known: set[str], where: str) -> RecipeError:
    parts = []
    for key in keys:
        close = difflib.get_close_matches(key, sorted(known), n=1)
        hint = f"use {RENAMED[key]}" if key in RENAMED else f"did you mean '{close[0]}'?" if close else ""
        parts.append(f"'{key}'" + (f" ({hint})" if hint else ""))
    return RecipeError(f"{where}: unknown key{'s' if len(parts) > 1 else ''} {', '.join(parts)}")


def _check_file_keys(data: dict, parser, kind: str, path: Path) -> None:
    """Unknown keys, and values outside the choices TRL declares (argparse checks those on the command line
    only)."""
    actions = {action.dest: action for action in parser._actions}
    other = {"sft": "tasks", "rl": "data"}[kind]
    if other in data and other not in actions:
        theirs = "rl" if kind == "sft" else "sft"
        raise RecipeError(f"recipe {path} is for train {theirs} (it has {other}:), not train {kind}")
    # env: TrlParser's environment
    unknown = [str(key) for key in data if key not in actions and key != "env"]
    if unknown:
        raise _unknown_keys(unknown, set(actions), f"recipe {path}")
    for key, value in data.items():
        action = actions.get(key)
        if action is None or not action.choices:
            continue
        for item in value if isinstance(value, list) else [value]:
            if item is None:  # null: the field's "unset", which the config itself judges
                continue
            given = action.type(item) if isinstance(item, str) and callable(action.type) else item
            if given not in action.choices:
                raise RecipeError(f"{key}: one of {', '.join(map(str, action.choices))} (got {item!r})")


def _raised_by(exc: BaseException, classes: tuple) -> str:
    """The dataclass whose construction raised ``exc``: TRL's ``__post_init__`` messages name the field
    only."""
    tb = exc.__traceback__
    while tb is not None:
        owner = tb.tb_frame.f_locals.get("self")
        if isinstance(owner, classes):
            return type(owner).__name__
        tb = tb.tb_next
    return "recipe"


def _check_loaded(training_args, model_args) -> None:
    """What TRL leaves to the trainer, which fails only after the model loaded."""
    check(bool(model_args.model_name_or_path), "model_name_or_path: required ('tiny', a folder, or a hub id)")
    for config in (training_args, model_args):
        for f in dataclasses.fields(config):
            value = getattr(config, f.name, None)
            if isinstance(value, float) and not math.isfinite(value) and value != f.default:
                raise RecipeError(f"{f.name}: expected a finite number, got {value!r}")
    # transformers takes 0 and hands it to the DataLoader, which fails only once the model is loaded
    for name in ("per_device_train_batch_size", "gradient_accumulation_steps"):
        check(getattr(training_args, name) >= 1, f"{name}: must be >= 1 (got {getattr(training_args, name)})")


def _training_device(training_args) -> str:
    import torch

    return "cpu" if training_args.use_cpu or not torch.cuda.is_available() else "cuda"


def load_recipe(path: str | Path, args: list[str] | None = None, *, kind: str) -> Recipe:
    """Read recipe ``path`` of ``kind`` (``sft`` or ``rl``) with TRL's parser, ``args`` (``--key value``) over
    it; check it, resolve its paths and return the ``Recipe``. Every problem is one RecipeError line."""
    if kind not in SCRIPT_ARGUMENTS:
        raise RecipeError(f"recipe kind must be one of {', '.join(SCRIPT_ARGUMENTS)} (got {kind!r})")
    path, args = Path(path), [str(a) for a in args or []]
    parser = recipe_parser(kind)
    _check_file_keys(read_recipe_file(path), parser, kind, path)
    try:
        *parsed, _, extra = parser.parse_args_and_config(["--config", str(path), *args],
                                                         return_remaining_strings=True,
                                                         separate_remaining_strings=True)
    except RecipeError:
        raise
    except RecursionError:
        raise RecipeError("a recipe value is nested too deeply") from None
    except (ValueError, TypeError) as exc:  # TRL's / transformers' own checks (__post_init__): one line each
        line = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise RecipeError(f"{_raised_by(exc, tuple(parser.dataclass_types))}: {line}") from None
    if extra:
        keys = [word[2:].split("=", 1)[0] for word in extra if word.startswith("--")]
        known = {action.dest for action in parser._actions}
        raise _unknown_keys(keys, known, "command line") if keys else RecipeError(f"unexpected values "
                                                                                  f"{extra}")
    script_args, training_args, model_args = parsed
    _check_loaded(training_args, model_args)
    if warning := emulated_bf16_warning(training_args.bf16, _training_device(training_args)):
        log.warning("%s: %s", path.name, warning)
    for src in getattr(script_args, "data", []):
        src.path = shipped_path(src.path)
    for task in getattr(script_args, "tasks", []):
        task.data = shipped_path(task.data)
        task.corpus = task.corpus and shipped_path(task.corpus)
        if task.index == AUTO_INDEX:
            task.index = auto_index_dir(training_args.output_dir, task.name)
    return Recipe(kind, script_args, training_args, model_args, str(path.resolve()), args)


def shipped_path(path: str) -> str:
    """A relative path missing from the working directory but shipped with tansaku (``examples/…`` of the tiny
    recipes, in a wheel as ``tansaku/examples``) → the shipped file; anything else is returned unchanged."""
    if Path(path).is_absolute() or Path(path).exists() or not (PACKAGE_ROOT / path).exists():
        return path
    return str(PACKAGE_ROOT / path)


def auto_index_dir(output_dir: str, task_name: str) -> str:
    """Where ``index: auto`` lives: inside the run's own output folder, so the run can prove it made it."""
    return str(Path(output_dir) / "index" / task_name)


def resolve_model(name: str) -> str:
    """``tiny`` → the tiny model folder (materialized once); anything else is returned as given."""
    if name == "tiny":
        return str(tiny_model_dir())
    return name


def require_model(name: str) -> str:
    """The folder of the recipe's ``model_name_or_path`` (``tiny``, a folder, a cached or downloadable Hub
    id), found before any model loads, with the one-line refusal ``train rl``'s rollouts give
    (``tansaku.core.llm.identity``) where transformers would end in a traceback; a folder without
    ``config.json`` (or a LoRA adapter's) is no model."""
    folder = resolve_local_model(resolve_model(name))
    if not folder.is_dir() or not any((folder / f).is_file() for f in ("config.json", "adapter_config.json")):
        raise RecipeError(f"model_name_or_path: {name} is not a model folder (no config.json in {folder})")
    return str(folder)
