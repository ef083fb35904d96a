"""vLLM engine options of ``vllm:MODEL`` clients: read (``--llm-option KEY=VALUE``), checked by name, refused
early.

vLLM's offline engine (``vllm.LLM``) takes its engine arguments as keyword arguments: the fields of
``vllm.engine.arg_utils.EngineArgs`` (``tensor_parallel_size``, ``max_model_len``, ``gpu_memory_utilization``,
``dtype``, ``enable_prefix_caching`` …). A misspelt one would only fail once vLLM starts (minutes into a run,
on the GPU), so every option is checked when the client is made, and on the command line before any work:

- vLLM importable: against its own ``EngineArgs`` fields (the installed version's; ``model`` is the spec's);
- vLLM missing: against ``COMMON_ENGINE_ARGS``, the names tansaku knows every recent vLLM takes; a name there
  is still refused by ``require_vllm``, which says vLLM is missing.

    parse_engine_options(["tensor_parallel_size=8", "dtype=bfloat16"])
    # {'dtype': 'bfloat16', 'tensor_parallel_size': 8}
    check_engine_options({"max_model_length": 4})   # InputError: … (did you mean max_model_len?) …

>>> parse_engine_options(["max-model-len=16384", "gpu_memory_utilization=0.85", "enforce_eager=true"])
{'enforce_eager': True, 'gpu_memory_utilization': 0.85, 'max_model_len': 16384}
"""

from __future__ import annotations

import dataclasses
import difflib
from typing import Any

import yaml

from tansaku.core.errors import InputError

from .option_values import MAX_ENGINE_DEPTH, engine_text_problem, shown, value_problem

# EngineArgs fields of every recent vLLM (0.8 … 0.11): what the options are checked against without vLLM.
COMMON_ENGINE_ARGS = frozenset({
    "tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size", "enable_expert_parallel",
    "distributed_executor_backend", "disable_custom_all_reduce", "max_parallel_loading_workers",
    "max_model_len", "gpu_memory_utilization", "swap_space", "cpu_offload_gb", "num_gpu_blocks_override",
    "block_size", "kv_cache_dtype", "calculate_kv_scales", "enable_prefix_caching", "disable_sliding_window",
    "max_num_seqs", "max_num_batched_tokens", "enable_chunked_prefill", "scheduling_policy", "max_logprobs",
    "dtype", "quantization", "enforce_eager", "compilation_config", "seed", "trust_remote_code",
    "tokenizer", "tokenizer_mode", "tokenizer_revision", "skip_tokenizer_init", "revision", "code_revision",
    "download_dir", "load_format", "config_format", "hf_overrides", "served_model_name", "generation_config",
    "override_generation_config", "enable_lora", "max_loras", "max_lora_rank", "max_cpu_loras",
    "fully_sharded_loras", "limit_mm_per_prompt", "mm_processor_kwargs", "speculative_config",
    "reasoning_parser", "enable_sleep_mode", "disable_log_stats", "model_impl",
})


def installed_engine_args() -> tuple[str, frozenset[str]] | None:
    """(vLLM's version, its ``EngineArgs`` field names but ``model``), or None when vLLM cannot be
    imported."""
    try:
        import vllm  # vllm: GPU only
        from vllm.engine.arg_utils import EngineArgs
    except ImportError:  # not installed (a CPU machine); any other failure is vLLM's own, shown as it is
        return None
    return (str(getattr(vllm, "__version__", "?")),
            frozenset(f.name for f in dataclasses.fields(EngineArgs)) - {"model"})


def check_engine_options(options: dict[str, Any] | None) -> dict[str, Any]:
    """``options`` with sorted keys (equal options, equal cache identity and manifest), each name checked
    against vLLM's ``EngineArgs`` (``COMMON_ENGINE_ARGS`` without vLLM); an unknown one is an ``InputError``
    line."""
    options = dict(options or {})
    if "model" in options:
        raise InputError("vLLM engine option 'model': the spec names the model (vllm:MODEL)")
    installed = installed_engine_args()
    known = installed[1] if installed else COMMON_ENGINE_ARGS
    for name in sorted(options):
        if (name in known
                and (problem := value_problem(options[name], controls=True, max_depth=MAX_ENGINE_DEPTH))):
            # vLLM would fail on it, later
            raise InputError(f"vLLM engine option {name}: the value {problem}")
        if name not in known:
            close = difflib.get_close_matches(name, sorted(known), n=3, cutoff=0.6)
            hint = f" (did you mean {' or '.join(close)}?)" if close else ""
            where = (f"checked against vLLM {installed[0]}'s EngineArgs" if installed else
                     "vLLM is not installed here, so checked against the EngineArgs names every recent vLLM "
                     "takes")
            raise InputError(f"unknown vLLM engine option {name!r}{hint}: {where}")
    return dict(sorted(options.items()))


def require_vllm(model: str, options: dict[str, Any]) -> None:
    """Refuse a ``vllm:`` client where vLLM cannot be imported (after its options passed the name check)."""
    if installed_engine_args() is None:
        checked = ", ".join(f"{k}={v!r}" for k, v in options.items()) or "none given"
        raise InputError(f"vllm:{model} needs vLLM, which is not installed here: pip install vllm on a GPU "
                         f"machine (engine options checked by name only: {checked})")


def parse_engine_options(values: list[str] | None) -> dict[str, Any]:
    """``KEY=VALUE`` texts → a mapping; values are YAML (``8`` int, ``0.9`` float, ``true`` bool, ``bfloat16``
    str, ``{image: 2}`` a mapping); ``max-model-len`` means ``max_model_len``, as vLLM's own command line
    spells it."""
    found: dict[str, Any] = {}
    for text in values or []:
        key, eq, raw = text.partition("=")
        key = key.strip().replace("-", "_")
        if not eq or not key:
            raise InputError(f"{shown(text)}: give an engine option as KEY=VALUE (e.g. "
                             f"tensor_parallel_size=8)")
        if problem := engine_text_problem(text):  # before YAML reads it: its parser recurses per level
            raise InputError(f"engine option {shown(text)} {problem}")
        try:
            value = yaml.safe_load(raw) if raw.strip() else None
        except (yaml.YAMLError, RecursionError) as exc:
            reason = "nested too deeply" if isinstance(exc, RecursionError) else str(exc).splitlines()[0]
            raise InputError(f"{shown(text)}: the value is not valid YAML ({reason})") from None
        if key in found and found[key] != value:
            raise InputError(f"engine option {key} given twice ({found[key]!r} and {value!r})")
        found[key] = value
    return dict(sorted(found.items()))
