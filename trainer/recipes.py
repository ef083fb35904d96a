"""Training recipes: one YAML file per run → a validated dataclass (`SFTRecipe`, `RLRecipe`).

    recipe = load_recipe("trainer/recipes/rl-tiny.yaml", ["max_steps=3", "lora.r=8", "tasks.0.ratio=2"])

Values from YAML and from ``--set key=value`` are coerced to the field's type (``1e-7`` is a float even
though YAML 1.1 reads it as a string; ``none``/``null`` clears an optional field). Dotted keys reach into
nested sections and list items. Unknown keys fail with the closest valid name. Keys that are also fields of
TRL's config (``SFTConfig`` for sft, ``GRPOConfig`` for rl: ``learning_rate``, ``bf16``, ``report_to`` …) and
every key under ``trl:`` (any other TRL config key) are read by TRL's own ``HfArgumentParser``
(``typed_config.coerce_trl_fields``), so they mean exactly what they mean in TRL; tansaku's additions
(``tasks``, ``data``/``mix_size``, ``lora``, ``weights_dtype``, ``overlong``, ``prompts_per_step``, the NeMo-RL
aliases) are coerced by ``typed_config`` on top.

Data paths are relative to the working directory; one missing there but shipped with tansaku (``examples/…``,
what the tiny recipes use) resolves to the shipped file (``shipped_path``). An RL task with ``index: auto``
and a ``corpus`` searches ``<output_dir>/index/<task>``, which ``train rl`` builds once (``rl.ensure_indexes``).

The RL recipe also accepts the NeMo-RL names used by the seed recipe (see ``NEMO_RL_KEYS``); they are
renamed before validation, and giving both spellings with different values is an error:

| NeMo-RL key                  | tansaku recipe key          | TRL ``GRPOConfig``                                   |
|------------------------------|-----------------------------|------------------------------------------------------|
| ``policy_kl_penalty``        | ``beta``                    | ``beta`` (>0 loads a reference model)                |
| ``ratio_clip_min``           | ``epsilon``                 | ``epsilon`` (ratio ≥ 1 − ε)                          |
| ``ratio_clip_max``           | ``epsilon_high``            | ``epsilon_high`` (ratio ≤ 1 + ε_high)                |
| ``num_prompts_per_step``     | ``prompts_per_step``        | P×G = ``per_device_train_batch_size`` × world size × |
| ``num_generations_per_prompt`` | ``num_generations``       | ``gradient_accumulation_steps`` (= ``steps_per_generation``), ``num_generations`` = G |
| ``learning_rate``            | ``learning_rate``           | ``learning_rate``                                    |
| ``adam_eps``                 | ``adam_epsilon``            | ``adam_epsilon``                                     |
"""

from __future__ import annotations

import dataclasses
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tansaku.core.heldout import RL as RL_SPLIT
from tansaku.core.heldout import TEST as HELDOUT_SPLIT
from tansaku.core.llm.identity import resolve_model as resolve_local_model
from tansaku.core.tiny_model import tiny_model_dir
from tansaku.trainer.recipe_sections import DifficultySpec, JudgeSpec, ReadinessSpec, WatchSpec
from tansaku.trainer.typed_config import (
    RecipeError,
    apply_override,
    build,
    coerce_trl_fields,
    trl_field_names,
)

log = logging.getLogger(__name__)

NEMO_RL_KEYS = {
    "policy_kl_penalty": "beta",
    "ratio_clip_min": "epsilon",
    "ratio_clip_max": "epsilon_high",
    "num_prompts_per_step": "prompts_per_step",
    "num_generations_per_prompt": "num_generations",
    "adam_eps": "adam_epsilon",
}
ALGORITHMS = ("grpo", "gspo")
# GSPO's sequence-level ratios stay close to 1, so the paper clips much tighter than token-level GRPO.
ALGORITHM_DEFAULTS = {
    "grpo": {"importance_sampling_level": "token", "epsilon": 0.2, "epsilon_high": 0.28, "loss_type": "dapo"},
    "gspo": {"importance_sampling_level": "sequence", "epsilon": 3e-4, "epsilon_high": 4e-4, "loss_type": "grpo"},
}
AUTO_INDEX = "auto"  # tasks.N.index: build <output_dir>/index/<task> from tasks.N.corpus when absent
OVERLONG = ("drop", "fit", "error")  # what `train sft` does with rows longer than max_length
WEIGHTS_DTYPES = ("float32", "bfloat16", "float16")
LOSS_TYPES = ("grpo", "dr_grpo", "dapo", "bnpo", "cispo", "sapo", "luspo", "vespo")
REWARD_AGGREGATIONS = ("sum_then_normalize", "normalize_then_sum")  # GRPOConfig.multi_objective_aggregation


@dataclass
class LoraSpec:
    r: int = 16
    alpha: int = 32
    dropout: float = 0.05
    target_modules: str | list[str] = "all-linear"  # "all-linear": every linear layer except the LM head


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
    index: str | None = None  # search index folder or OpenSearch URL; "auto": built from `corpus` (rl.ensure_indexes)
    corpus: str | None = None  # documents (.jsonl or dataset folder) the "auto" index is built from, once
    max_rows: int | None = None
    reward_weights: dict[str, float] = field(default_factory=dict)  # overrides of the task's weights
    abstention_weight: float = 0.0  # > 0: add abstention_reward (Task.with_abstention; at most the answer's weight)
    system_prompt: str | None = None  # text or @FILE instead of the task's own (the one the SFT rows were built with)
    tools: dict[str, Any] = field(default_factory=dict)  # ToolsConfig fields over the task's (interface_variants: 2 …)

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


@dataclass
class TrainCommon:
    model: str = ""  # "tiny" = tansaku.core.tiny_model.tiny_model_dir(); else a folder or hub id
    output_dir: str = ""
    learning_rate: float = 1e-5
    adam_epsilon: float = 1e-8
    weight_decay: float = 0.0
    lr_scheduler_type: str = "constant"
    warmup_steps: float = 0.0  # <1 is a ratio of the total steps (transformers 5)
    max_grad_norm: float = 1.0
    num_train_epochs: float = 1.0
    max_steps: int = -1
    per_device_train_batch_size: int | None = None
    gradient_accumulation_steps: int = 1
    gradient_checkpointing: bool = False
    bf16: bool = False  # bf16 compute (autocast); the weights stay in ``weights_dtype``
    # The dtype the weights are loaded, updated and saved in. float32 = mixed precision with fp32 master weights
    # (what `bf16: true` means to transformers users). bfloat16 halves memory and is ~2x faster on CPU, but an
    # Adam step below bf16's resolution rounds away (on the tiny model's matrices a 1e-5 step changes 2% of the
    # weights, 3e-4 56%): fine for SFT at 1e-4+, a silent near no-op for RL at 1e-6..1e-5.
    weights_dtype: str = "float32"
    use_cpu: bool = False
    seed: int = 42
    logging_steps: int = 1
    save_steps: int = 500
    save_total_limit: int | None = None
    report_to: list[str] = field(default_factory=list)  # [], ["trackio"], ["wandb"]
    resume_from_checkpoint: str | None = None  # "latest" = newest checkpoint-* in output_dir, or a path
    lora: LoraSpec | None = None
    trl: dict[str, Any] = field(default_factory=dict)  # any other SFTConfig/GRPOConfig key


@dataclass
class SFTRecipe(TrainCommon):
    data: list[DataSource] = field(default_factory=list)
    mix_size: int | None = None  # rows in the mixed dataset; default: the sources' total
    max_length: int = 4096
    packing: bool = False
    # Rows longer than max_length (tansaku.trainer.length): drop | fit (elide tool results) | error; never truncated.
    overlong: str = "drop"


@dataclass
class RLRecipe(TrainCommon):
    tasks: list[RLTask] = field(default_factory=list)
    algorithm: str = "gspo"
    beta: float = 0.0
    epsilon: float | None = None  # None: the algorithm's default (ALGORITHM_DEFAULTS)
    epsilon_high: float | None = None
    loss_type: str | None = None
    num_generations: int = 8
    prompts_per_step: int = 1
    mix_size: int | None = None  # prompts in the task mix; default: the tasks' total
    max_completion_length: int = 1024  # the whole multi-turn completion, tool results included
    max_tool_calling_iterations: int | None = None  # None: the largest max_turns of the tasks
    temperature: float = 1.0
    top_p: float = 1.0
    use_vllm: bool = False
    vllm_mode: str = "colocate"
    vllm_gpu_memory_utilization: float = 0.3
    vllm_server_base_url: str | None = None
    log_completions: bool = True
    # Without vLLM: compute the prompt tokens every episode of a generate call shares once
    # (tansaku.trainer.prefix_generate); false = TRL's plain model.generate.
    share_prompt_prefix: bool = True
    # How the weighted components become one reward (TRL's multi_objective_aggregation): sum, then normalise per
    # group (GRPO), or normalise each component per group first, then sum (GDPO, arXiv 2601.05242).
    reward_aggregation: str = "sum_then_normalize"
    watch: WatchSpec = field(default_factory=WatchSpec)
    readiness: ReadinessSpec = field(default_factory=ReadinessSpec)
    difficulty: DifficultySpec = field(default_factory=DifficultySpec)
    judge: JudgeSpec = field(default_factory=JudgeSpec)  # `judge: SPEC` or a mapping (recipe_sections.JudgeSpec)
    learning_rate: float = 5e-7


# --------------------------------------------------------------------------- NeMo-RL names


def _rename_nemo_keys(data: dict) -> dict:
    out = dict(data)
    for nemo, ours in NEMO_RL_KEYS.items():
        if nemo in out:
            value = out.pop(nemo)
            if ours in out and str(out[ours]) != str(value):
                raise RecipeError(f"both '{nemo}' ({value!r}) and '{ours}' ({out[ours]!r}) are set; keep one")
            out[ours] = value
    return out


# --------------------------------------------------------------------------- validation


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise RecipeError(message)


def _check_train_split(where: str, split: str) -> None:
    """Training never reads the held-out split (``tansaku.core.heldout``): ``train eval`` measures on it."""
    _check(split != HELDOUT_SPLIT, f"{where}.split: '{HELDOUT_SPLIT}' is the held-out split, kept for `train eval`; "
                                   "train on 'train'")


def validate(recipe) -> None:
    """Cross-field checks that a single type cannot express; raise RecipeError with the fix."""
    _check(bool(recipe.model), "model: required ('tiny', a folder, or a hub id)")
    _check(bool(recipe.output_dir), "output_dir: required")
    _check(recipe.learning_rate > 0, f"learning_rate: must be > 0 (got {recipe.learning_rate})")
    _check(recipe.weights_dtype in WEIGHTS_DTYPES,
           f"weights_dtype: one of {', '.join(WEIGHTS_DTYPES)} (got {recipe.weights_dtype!r})")
    _check(recipe.max_steps > 0 or recipe.num_train_epochs > 0, "max_steps or num_train_epochs must be > 0")
    # transformers takes 0 and hands it to the DataLoader, which fails only once the model is loaded
    _check(recipe.per_device_train_batch_size is None or recipe.per_device_train_batch_size >= 1,
           f"per_device_train_batch_size: must be >= 1 (got {recipe.per_device_train_batch_size})")
    _check(recipe.gradient_accumulation_steps >= 1,
           f"gradient_accumulation_steps: must be >= 1 (got {recipe.gradient_accumulation_steps})")
    if recipe.lora is not None:
        _check(recipe.lora.r > 0, f"lora.r: must be > 0 (got {recipe.lora.r})")
    if isinstance(recipe, SFTRecipe):
        _check(bool(recipe.data), "data: list at least one source (path, ratio, system_prompt)")
        for i, src in enumerate(recipe.data):
            _check(src.ratio > 0, f"data.{i}.ratio: must be > 0 (got {src.ratio})")
            _check_train_split(f"data.{i}", src.split)
        _check(recipe.mix_size is None or recipe.mix_size > 0, "mix_size: must be > 0")
        _check(recipe.overlong in OVERLONG, f"overlong: one of {', '.join(OVERLONG)} (got {recipe.overlong!r})")
        _check(recipe.max_length > 0, f"max_length: must be > 0 (got {recipe.max_length})")
        return
    _check(bool(recipe.tasks), "tasks: list at least one task (name, data, index)")
    for i, task in enumerate(recipe.tasks):
        _check(task.ratio > 0, f"tasks.{i}.ratio: must be > 0 (got {task.ratio})")
        _check(task.abstention_weight >= 0, f"tasks.{i}.abstention_weight: must be >= 0 (got {task.abstention_weight})")
        _check_train_split(f"tasks.{i}", task.split or "train")
        _check(bool(task.index), f"tasks.{i}.index: the search index (folder or OpenSearch target) is required")
        _check(task.index != AUTO_INDEX or bool(task.corpus),
               f"tasks.{i}.index: 'auto' builds the index from the task's corpus; set tasks.{i}.corpus")
    names = [t.name for t in recipe.tasks]
    _check(len(set(names)) == len(names), f"tasks: each task name once (got {names}); merge their datasets")
    _check(recipe.gradient_accumulation_steps == 1,
           "gradient_accumulation_steps: derived from prompts_per_step × num_generations for RL; do not set it")
    _check(recipe.algorithm in ALGORITHMS, f"algorithm: one of {', '.join(ALGORITHMS)} (got {recipe.algorithm!r})")
    _check(recipe.reward_aggregation in REWARD_AGGREGATIONS,
           f"reward_aggregation: one of {', '.join(REWARD_AGGREGATIONS)} (got {recipe.reward_aggregation!r})")
    _check(recipe.loss_type is None or recipe.loss_type in LOSS_TYPES,
           f"loss_type: one of {', '.join(LOSS_TYPES)} (got {recipe.loss_type!r})")
    _check(recipe.num_generations >= 2, f"num_generations: GRPO needs >= 2 per prompt (got {recipe.num_generations})")
    _check(recipe.prompts_per_step >= 1, f"prompts_per_step: must be >= 1 (got {recipe.prompts_per_step})")
    _check(recipe.beta >= 0, f"beta / policy_kl_penalty: must be >= 0 (got {recipe.beta})")
    for name in ("epsilon", "epsilon_high"):
        value = getattr(recipe, name)
        _check(value is None or value > 0, f"{name}: must be > 0 (got {value})")
    _check(recipe.vllm_mode in ("colocate", "server"), f"vllm_mode: colocate or server (got {recipe.vllm_mode!r})")
    _check(not (recipe.use_vllm and recipe.use_cpu), "use_vllm needs a GPU: set use_cpu=false or use_vllm=false")
    for problem in recipe.difficulty.problems() + recipe.judge.problems():
        _check(False, problem)
    batch_plan(recipe)  # raises when the batch does not divide


def world_size() -> int:
    return int(os.environ.get("WORLD_SIZE", "1"))


def batch_plan(recipe: RLRecipe, processes: int | None = None) -> dict[str, int]:
    """P prompts × G generations per optimizer step → TRL's micro-batch and accumulation.

    One optimizer step sees ``per_device_train_batch_size × processes × gradient_accumulation_steps``
    completions, which must equal P×G; TRL generates them all at once (``steps_per_generation`` =
    accumulation), so one step = one generation round = NeMo-RL's step.
    """
    processes = processes or world_size()
    completions = recipe.prompts_per_step * recipe.num_generations
    micro = recipe.per_device_train_batch_size or min(recipe.num_generations, completions // processes or 1)
    _check(completions % (micro * processes) == 0,
           f"prompts_per_step×num_generations = {completions} completions per step must divide into "
           f"per_device_train_batch_size ({micro}) × processes ({processes}); change one of them")
    accumulation = completions // (micro * processes)
    return {"per_device_train_batch_size": micro, "gradient_accumulation_steps": accumulation,
            "steps_per_generation": accumulation, "num_generations": recipe.num_generations}


# --------------------------------------------------------------------------- loading

RECIPE_KINDS = {"sft": SFTRecipe, "rl": RLRecipe}
PACKAGE_ROOT = Path(__file__).resolve().parents[1]  # the `tansaku` package: the repository root, or site-packages
TRL_CONFIG_NAMES = {"sft": "SFTConfig", "rl": "GRPOConfig"}  # the TRL config each kind's TRL keys belong to


def trl_config_class(kind: str):
    """TRL's config class of a recipe kind (imported here so ``trl`` loads only when a recipe does)."""
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    import trl

    return getattr(trl, TRL_CONFIG_NAMES[kind])


def _judge_as_section(data: dict, kind: str) -> None:
    """``judge: http:MODEL@URL`` (the spec alone) is ``judge: {model: http:MODEL@URL}``."""
    if kind == "rl" and isinstance(data.get("judge"), str):
        data["judge"] = {"model": data["judge"]}


def load_recipe(path: str | Path, overrides: list[str] | None = None, kind: str | None = None):
    """Read a recipe YAML, apply ``--set`` overrides, coerce, validate; return the dataclass.

    ``kind`` is ``sft`` or ``rl``; without it the file's ``kind:`` key decides.
    """

    path = Path(path)
    if not path.is_file():
        raise RecipeError(f"recipe {path} not found")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except UnicodeDecodeError as exc:
        raise RecipeError(f"recipe {path} is not UTF-8 text (byte {exc.start}); save it as UTF-8") from None
    except RecursionError:  # PyYAML composes nested nodes recursively: thousands of levels overflow the stack
        raise RecipeError(f"recipe {path} is not a recipe: its YAML is nested too deeply") from None
    except yaml.YAMLError as exc:
        raise RecipeError(f"recipe {path} is not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise RecipeError(f"recipe {path}: the top level must be a mapping of keys")
    file_kind = data.pop("kind", None)
    kind = kind or file_kind
    if kind not in RECIPE_KINDS:
        raise RecipeError(f"recipe {path}: kind must be one of {', '.join(RECIPE_KINDS)} (got {kind!r})")
    if file_kind and file_kind != kind:
        raise RecipeError(f"recipe {path} is a '{file_kind}' recipe, not '{kind}'")
    if kind == "rl":
        data = _rename_nemo_keys(data)
    for assignment in overrides or []:
        _judge_as_section(data, kind)  # so `--set judge.model=…` reaches a recipe that says `judge: SPEC`
        apply_override(data, assignment, NEMO_RL_KEYS if kind == "rl" else None)
    _judge_as_section(data, kind)
    config_cls = trl_config_class(kind)
    shared = {f.name for f in dataclasses.fields(RECIPE_KINDS[kind])} & trl_field_names(config_cls)
    recipe = build(RECIPE_KINDS[kind], coerce_trl_fields(config_cls, data, shared))
    validate(recipe)
    for src in getattr(recipe, "data", []):
        src.path = shipped_path(src.path)
    for task in getattr(recipe, "tasks", []):
        task.data = shipped_path(task.data)
        task.corpus = task.corpus and shipped_path(task.corpus)
        if task.index == AUTO_INDEX:
            task.index = auto_index_dir(recipe.output_dir, task.name)
    return recipe


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
    """The folder of the recipe's ``model`` (``tiny``, a folder, a cached or downloadable Hub id), found before
    any model loads, with the one-line refusal ``train rl``'s rollouts give (``tansaku.core.llm.identity``) where
    transformers would end in a traceback; a folder without ``config.json`` (or a LoRA adapter's) is no model."""
    folder = resolve_local_model(resolve_model(name))
    if not folder.is_dir() or not any((folder / f).is_file() for f in ("config.json", "adapter_config.json")):
        raise RecipeError(f"model: {name} is not a model folder (no config.json in {folder})")
    return str(folder)
