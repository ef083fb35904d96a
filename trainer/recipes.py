"""Training recipes: YAML files that TRL's own ``TrlParser`` reads, as open-r1's training scripts read theirs.

    from trl import GRPOConfig, ModelConfig, TrlParser
    parser = TrlParser((TansakuRLArguments, GRPOConfig, ModelConfig))
    script_args, training_args, model_args = parser.parse_args_and_config(
        args=["--config", "trainer/recipes/rl-tiny.yaml", "--beta", "0.04"])
    recipe = load_recipe("trainer/recipes/rl-tiny.yaml", ["--beta", "0.04"], kind="rl")   # the same three

A recipe is one flat mapping over three dataclasses; every key has one spelling:

- ``TansakuSFTArguments`` / ``TansakuRLArguments``: what is tansaku's own: the SFT data mix (``data``,
  ``mix_size``, ``overlong``), the RL tasks (``tasks``: task name, prompt data, search index, corpus, reward
  weights, system prompt, tools) and the checks around RL (``watch``, ``readiness``, ``difficulty``, ``judge``);
- TRL's ``SFTConfig`` / ``GRPOConfig``: every training setting, under TRL's name, checked by TRL itself;
- TRL's ``ModelConfig``: the model (``model_name_or_path``: ``tiny``, a folder or a Hub id), ``dtype`` (the dtype
  the weights are loaded, updated and saved in) and LoRA (``use_peft``, ``lora_r``, ``lora_alpha`` …).

Overrides are TRL's ``--key value`` (``train sft --config R.yaml --max_steps 2``); a nested section is given whole
as YAML or JSON text (``--readiness '{k: 2}'``, ``--tasks '[{…}]'``), read by ``typed_config.section``.
``load_recipe`` parses with TRL's parser too, and adds what the parser leaves to the trainer (which fails only
once the model is loaded): each error is one ``RecipeError`` line naming the key; values TRL declares choices
for are checked when they come from the file too (argparse checks only the command line); numbers must be
finite; a batch of 0 is refused. The NeMo-RL names of the seed recipe and their TRL keys: ``docs/recipes.md``.

Data paths are relative to the working directory; one missing there but shipped with tansaku (``examples/…``,
what the tiny recipes use) resolves to the shipped file (``shipped_path``). An RL task with ``index: auto``
and a ``corpus`` searches ``<output_dir>/index/<task>``, which ``train rl`` builds once (``task_indexes.ensure_indexes``).
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
from typing import Any, Literal

import yaml

from tansaku.core.hardware import emulated_bf16_warning
from tansaku.core.heldout import HELDOUT_SPLITS
from tansaku.core.heldout import RL as RL_SPLIT
from tansaku.core.llm.identity import resolve_model as resolve_local_model
from tansaku.core.redact import redact_mapping
from tansaku.core.tiny_model import tiny_model_dir
from tansaku.trainer.recipe_sections import DifficultySpec, JudgeSpec, ReadinessSpec, RetentionSpec, WatchSpec
from tansaku.trainer.typed_config import RecipeError, section

log = logging.getLogger(__name__)

AUTO_INDEX = "auto"  # tasks.N.index: build <output_dir>/index/<task> from tasks.N.corpus when absent
OVERLONG = ("drop", "fit", "error")  # what `train sft` does with rows longer than max_length
PACKAGE_ROOT = Path(__file__).resolve().parents[1]  # the `tansaku` package: the repository root, or site-packages
# Keys of earlier tansaku recipes and of NeMo-RL: refused, with the key to use instead (docs/recipes.md).
RENAMED = {
    "kind": "no key; the command (train sft / train rl) is the kind", "model": "model_name_or_path",
    "weights_dtype": "dtype", "lora": "use_peft, lora_r, lora_alpha, lora_dropout, lora_target_modules",
    "trl": "its keys at the top level", "algorithm": "importance_sampling_level, loss_type, epsilon, epsilon_high",
    "prompts_per_step": "per_device_train_batch_size × gradient_accumulation_steps",
    "reward_aggregation": "multi_objective_aggregation", "policy_kl_penalty": "beta", "ratio_clip_min": "epsilon",
    "ratio_clip_max": "epsilon_high", "adam_eps": "adam_epsilon", "num_generations_per_prompt": "num_generations",
    "num_prompts_per_step": "per_device_train_batch_size × gradient_accumulation_steps",
    "set": "TRL's --KEY VALUE (--max_steps 3)",
}


@dataclass
class DataSource:
    """One SFT dataset in the mix: a tansaku store folder (``data/<split>-*.parquet``) or a .jsonl/.parquet file."""

    path: str
    ratio: float = 1.0  # share of the mix, normalized over all sources
    split: str = "train"
    system_prompt: str | None = None  # prepended to conversations that have no system message
    max_rows: int | None = None


@dataclass
class RLTask:
    """One task of an RL run: ``tansaku.envs.tasks.TASKS[name]`` over a prompt dataset, searching one index."""

    name: str
    data: str
    ratio: float = 1.0
    split: str | None = None  # None: the dataset's `rl` split (prompts SFT never saw), else `train` (prompt_split)
    index: str | None = None  # search index folder or OpenSearch URL; "auto": built from `corpus` (task_indexes.ensure_indexes)
    corpus: str | None = None  # documents (.jsonl or dataset folder) the "auto" index is built from, once
    # a `synth serve-env` server (http://host:port) instead of an index: tools and rewards run there
    environment_url: str | None = None  # (tansaku.envs.remote_env; its task's tools and reward weights)
    max_rows: int | None = None
    reward_weights: dict[str, float] = field(default_factory=dict)  # overrides of the task's weights
    abstention_weight: float = 0.0  # > 0: add abstention_reward (Task.with_abstention; at most the answer's weight)
    system_prompt: str | None = None  # text or @FILE instead of the task's own (the one the SFT rows were built with)
    tools: dict[str, Any] = field(default_factory=dict)  # ToolsConfig fields over the task's (interface_variants: 2 …)
    # zh_mix_penalty: the global step it starts at, and what it reads (reasoning | reasoning+answer); None: the
    # task's own (Task.with_zh_mix, applied by rl_rewards.rl_task)
    zh_mix_start_step: int | None = None
    zh_mix_scope: str | None = None

    def prompt_split(self) -> str:
        """The split RL prompts come from: ``split`` when the recipe names one, else the dataset's ``rl`` split
        (multihop and egov write one: questions SFT never trained on, so the policy is not near-deterministic
        on them), else ``train`` with a warning (an older dataset, or a .jsonl file)."""
        if self.split is not None:
            return self.split
        if any((Path(self.data) / "data").glob(f"{RL_SPLIT}-*.parquet")):
            return RL_SPLIT
        if Path(self.data).is_dir():
            log.warning("task %s: %s has no '%s' split; RL prompts come from 'train', the questions SFT trains on "
                        "(rebuild it with --rl-share > 0)", self.name, self.data, RL_SPLIT)
        return "train"


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise RecipeError(message)


def _check_train_split(where: str, split: str) -> None:
    """Training never reads a held-out split (``tansaku.core.heldout``: test, test_phrasing): ``train eval``
    measures on them."""
    _check(split not in HELDOUT_SPLITS, f"{where}.split: '{split}' is the held-out split ({', '.join(HELDOUT_SPLITS)} "
                                        "are kept for `train eval`); train on 'train'")


RL_SECTIONS = {"watch": WatchSpec, "readiness": ReadinessSpec, "difficulty": DifficultySpec, "judge": JudgeSpec,
               "retention": RetentionSpec}
# A nested section's type is `Section | str | None`: TRL's parser then passes the YAML's mapping through and reads
# the command line's text as a string (as TrainingArguments' `dict | str` fields), which __post_init__ builds.


@dataclass
class TansakuSFTArguments:
    """tansaku's own keys of an SFT recipe: the data mix and what happens to rows longer than ``max_length``."""

    data: list[DataSource] | str | None  # sources mixed by ratio (path, ratio, split, system_prompt, max_rows)
    mix_size: int | None = None  # rows in the mixed dataset; default: the sources' total
    # Rows longer than max_length (tansaku.trainer.length): drop | fit (elide tool results) | error; never truncated.
    overlong: Literal["drop", "fit", "error"] = "drop"
    retention: RetentionSpec | str | None = field(default_factory=RetentionSpec)  # general ability while training

    def __post_init__(self):
        self.data = section(list[DataSource], self.data, "data")
        _check(bool(self.data), "data: list at least one source (path, ratio, system_prompt)")
        for i, src in enumerate(self.data):
            _check(src.ratio > 0, f"data.{i}.ratio: must be > 0 (got {src.ratio})")
            _check_train_split(f"data.{i}", src.split)
        _check(self.mix_size is None or self.mix_size > 0, "mix_size: must be > 0")
        _check(self.overlong in OVERLONG, f"overlong: one of {', '.join(OVERLONG)} (got {self.overlong!r})")
        self.retention = section(RetentionSpec, self.retention or {}, "retention")
        _check(not self.retention.problems(), "; ".join(self.retention.problems()))


@dataclass
class TansakuRLArguments:
    """tansaku's own keys of an RL recipe: the tasks and the checks around training."""

    tasks: list[RLTask] | str | None  # name, data, index (or auto + corpus), ratio, reward_weights, system_prompt …
    mix_size: int | None = None  # prompts in the task mix; default: the tasks' total
    # Compute the prompt tokens every episode shares once: per generate call without vLLM
    # (tansaku.trainer.cpu.prefix_generate) and, on CPU, per optimizer step in the training forward
    # (tansaku.trainer.cpu.prefix_train); false = TRL's plain generate and forward.
    share_prompt_prefix: bool = True
    # Without vLLM, on CPU, fp32 weights under bf16: true: generate with a bf16 copy of the weights refreshed at
    # every generate call (tansaku.trainer.cpu.generation_copy); false = the training model under autocast.
    bf16_generation_copy: bool = True
    # true: log `kl_to_start` each generation round, the policy's KL to the starting weights on its own rollouts
    # (a frozen copy of the start scores them: one no-grad forward per round; tansaku.trainer.drift). TRL logs
    # `kl` only when beta > 0, and with beta 0 nothing says how far the policy went.
    kl_to_start: bool = False
    # DAPO's dynamic sampling: > 0: a rollout round's zero-variance groups (all G rewards equal) are dropped and
    # refilled with fresh prompts, at most this many refill rounds per rollout round; the batch keeps its shape
    # (tansaku.trainer.dynamic_sampling). 0: off, TRL's round as sampled.
    dynamic_sampling_max_refills: int = 0
    watch: WatchSpec | str | None = field(default_factory=WatchSpec)
    readiness: ReadinessSpec | str | None = field(default_factory=ReadinessSpec)
    difficulty: DifficultySpec | str | None = field(default_factory=DifficultySpec)
    judge: JudgeSpec | str | None = field(default_factory=JudgeSpec)  # `judge: SPEC` or a mapping (JudgeSpec)
    retention: RetentionSpec | str | None = field(default_factory=RetentionSpec)  # general ability while training

    def __post_init__(self):
        self.tasks = section(list[RLTask], self.tasks, "tasks")
        _check(bool(self.tasks), "tasks: list at least one task (name, data, index)")
        for i, task in enumerate(self.tasks):
            _check(task.ratio > 0, f"tasks.{i}.ratio: must be > 0 (got {task.ratio})")
            _check(task.abstention_weight >= 0,
                   f"tasks.{i}.abstention_weight: must be >= 0 (got {task.abstention_weight})")
            _check_train_split(f"tasks.{i}", task.split or "train")
            _check(bool(task.index) or bool(task.environment_url),
                   f"tasks.{i}.index: the search index (folder or OpenSearch target) is required "
                   "(or environment_url: a serve-env server)")
            _check(not (task.index and task.environment_url),
                   f"tasks.{i}: index or environment_url (a serve-env server searching its own), not both")
            _check(task.index != AUTO_INDEX or bool(task.corpus),
                   f"tasks.{i}.index: 'auto' builds the index from the task's corpus; set tasks.{i}.corpus")
        names = [t.name for t in self.tasks]
        _check(len(set(names)) == len(names), f"tasks: each task name once (got {names}); merge their datasets")
        _check(self.dynamic_sampling_max_refills >= 0,
               f"dynamic_sampling_max_refills: must be >= 0 (got {self.dynamic_sampling_max_refills}; 0 turns it off)")
        if isinstance(self.judge, str) and not self.judge.lstrip().startswith("{"):
            self.judge = {"model": self.judge}  # `judge: http:MODEL@URL`, the spec alone
        for name, section_type in RL_SECTIONS.items():  # null: the section's defaults
            setattr(self, name, section(section_type, getattr(self, name) or {}, name))
        for problem in self.difficulty.problems() + self.judge.problems() + self.retention.problems():
            raise RecipeError(problem)


SCRIPT_ARGUMENTS = {"sft": TansakuSFTArguments, "rl": TansakuRLArguments}


@dataclass
class Recipe:
    """A loaded recipe: the three dataclasses TRL's parser fills, and where they came from."""

    kind: str  # sft | rl
    script_args: TansakuSFTArguments | TansakuRLArguments
    training_args: Any  # trl.SFTConfig | trl.GRPOConfig (trl is imported when a recipe loads, not with this module)
    model_args: Any  # trl.ModelConfig
    config: str = ""  # the YAML file
    args: list[str] = field(default_factory=list)  # the --key value overrides

    def record(self) -> dict:
        """What ``tansaku_recipe.json`` holds: enough to run it again (``config`` with ``args``, or the values), with
        no secret in it (``tansaku.core.redact``): the judge's ``api_key`` and URL password, ``--hub_token …`` in
        ``args`` are masked, as TRL's ``to_dict`` masks its own ``*_token`` fields."""
        return redact_mapping({"kind": self.kind, "config": self.config, "args": self.args,
                               "script_args": dataclasses.asdict(self.script_args),
                               "training_args": self.training_args.to_dict(),
                               "model_args": dataclasses.asdict(self.model_args)})


def recipe_parser(kind: str):
    """TRL's ``TrlParser`` over the kind's three dataclasses; where argparse would print its usage and exit the
    process, it raises a RecipeError."""
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    from trl import GRPOConfig, ModelConfig, SFTConfig, TrlParser

    class Parser(TrlParser):
        def error(self, message):  # "argument --max_steps/--max-steps: invalid int value" → "max_steps: …"
            raise RecipeError(re.sub(r"^argument --(\w+)(/--[\w-]+)*: ", r"\1: ", message))

    return Parser((SCRIPT_ARGUMENTS[kind], {"sft": SFTConfig, "rl": GRPOConfig}[kind], ModelConfig))


def read_recipe_file(path: str | Path) -> dict:
    """The recipe's YAML mapping; RecipeError (one line) for a missing, non-UTF-8, malformed or non-mapping file."""
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
    """Unknown keys, and values outside the choices TRL declares (argparse checks those on the command line only)."""
    actions = {action.dest: action for action in parser._actions}
    other = {"sft": "tasks", "rl": "data"}[kind]
    if other in data and other not in actions:
        theirs = "rl" if kind == "sft" else "sft"
        raise RecipeError(f"recipe {path} is for train {theirs} (it has {other}:), not train {kind}")
    unknown = [str(key) for key in data if key not in actions and key != "env"]  # env: TrlParser's environment
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
    """The dataclass whose construction raised ``exc``: TRL's ``__post_init__`` messages name the field only."""
    tb = exc.__traceback__
    while tb is not None:
        owner = tb.tb_frame.f_locals.get("self")
        if isinstance(owner, classes):
            return type(owner).__name__
        tb = tb.tb_next
    return "recipe"


def _check_loaded(training_args, model_args) -> None:
    """What TRL leaves to the trainer, which fails only after the model loaded."""
    _check(bool(model_args.model_name_or_path), "model_name_or_path: required ('tiny', a folder, or a hub id)")
    for config in (training_args, model_args):
        for f in dataclasses.fields(config):
            value = getattr(config, f.name, None)
            if isinstance(value, float) and not math.isfinite(value) and value != f.default:
                raise RecipeError(f"{f.name}: expected a finite number, got {value!r}")
    # transformers takes 0 and hands it to the DataLoader, which fails only once the model is loaded
    for name in ("per_device_train_batch_size", "gradient_accumulation_steps"):
        _check(getattr(training_args, name) >= 1, f"{name}: must be >= 1 (got {getattr(training_args, name)})")


def _training_device(training_args) -> str:
    import torch

    return "cpu" if training_args.use_cpu or not torch.cuda.is_available() else "cuda"


def load_recipe(path: str | Path, args: list[str] | None = None, *, kind: str) -> Recipe:
    """Read recipe ``path`` of ``kind`` (``sft`` or ``rl``) with TRL's parser, ``args`` (``--key value``) over it;
    check it, resolve its paths and return the ``Recipe``. Every problem is one RecipeError line."""
    if kind not in SCRIPT_ARGUMENTS:
        raise RecipeError(f"recipe kind must be one of {', '.join(SCRIPT_ARGUMENTS)} (got {kind!r})")
    path, args = Path(path), [str(a) for a in args or []]
    parser = recipe_parser(kind)
    _check_file_keys(read_recipe_file(path), parser, kind, path)
    try:
        *parsed, _, extra = parser.parse_args_and_config(["--config", str(path), *args], return_remaining_strings=True,
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
        raise _unknown_keys(keys, known, "command line") if keys else RecipeError(f"unexpected values {extra}")
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
    """The folder of the recipe's ``model_name_or_path`` (``tiny``, a folder, a cached or downloadable Hub id),
    found before any model loads, with the one-line refusal ``train rl``'s rollouts give
    (``tansaku.core.llm.identity``) where transformers would end in a traceback; a folder without ``config.json``
    (or a LoRA adapter's) is no model."""
    folder = resolve_local_model(resolve_model(name))
    if not folder.is_dir() or not any((folder / f).is_file() for f in ("config.json", "adapter_config.json")):
        raise RecipeError(f"model_name_or_path: {name} is not a model folder (no config.json in {folder})")
    return str(folder)
