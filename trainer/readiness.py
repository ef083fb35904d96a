"""The pre-flight check of ``train rl``: sample the model on each task before step 1, refuse when it never
succeeds.

    from tansaku.trainer.readiness import check_readiness, readiness_model
    readiness_model(recipe, "/models/qwen3-1.7b")   # the LLM spec the rollouts go through
    check_readiness(recipe, "/models/qwen3-1.7b")   # one run_eval report per task, or NotReadyForRL

The rollouts go through the backend that training itself will generate with, so the check measures the model
GRPO will sample from and costs what a training step's generation costs:

- ``use_vllm`` + ``vllm_mode: server`` → the ``trl vllm-serve`` server, which is vLLM's OpenAI-compatible
  server (TRL's own client posts to ``/v1/chat/completions``): ``http:MODEL@BASE_URL/v1``;
- ``use_vllm`` + ``colocate`` → a vLLM engine on this GPU (``vllm:MODEL``) with the recipe's memory share,
  closed again before the trainer starts its own;
- otherwise transformers, in the dtype training generates in (``bf16: true`` → bfloat16) on the device it
  trains on (CUDA unless ``use_cpu``).

``readiness.model`` in the recipe (any LLM spec) overrides all of these.
"""

from __future__ import annotations

from pathlib import Path

from tansaku.core.llm import as_client
from tansaku.envs.evaluate import check_rl_readiness, run_eval
from tansaku.trainer.recipes import Recipe
from tansaku.trainer.rl_rewards import rl_task

TRL_SERVER_DEFAULT = "http://localhost:8000"  # GRPOConfig's vllm_server_host / vllm_server_port defaults


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def readiness_model(recipe: Recipe, model_path: str) -> str:
    """The LLM spec (``tansaku.core.llm.from_spec``) the readiness rollouts use for this recipe."""
    config, name = recipe.training_args, recipe.model_args.model_name_or_path
    if recipe.script_args.readiness.model:
        return recipe.script_args.readiness.model
    if config.use_vllm and config.vllm_mode == "server":
        base = (config.vllm_server_base_url or TRL_SERVER_DEFAULT).rstrip("/")
        # the server serves the model under the name it was started with: the recipe's model as written
        served = name if name != "tiny" else model_path
        return f"http:{served}@{base}/v1"
    if config.use_vllm:
        return f"vllm:{model_path}"
    return f"transformers:{model_path}"


def readiness_options(recipe: Recipe) -> dict:
    """Constructor options for the client ``readiness_model`` names (dtype, device, GPU memory share)."""
    spec, config = readiness_model(recipe, ""), recipe.training_args
    if recipe.script_args.readiness.model or spec.startswith("http:"):
        return {}
    dtype = "bfloat16" if config.bf16 else "float32"
    if spec.startswith("vllm:"):
        return {"dtype": dtype, "gpu_memory_utilization": config.vllm_gpu_memory_utilization}
    device = "cuda" if not config.use_cpu and _cuda_available() else "cpu"
    return {"dtype": dtype, "device": device}


def check_readiness(recipe: Recipe, model_path: str, judge=None, client=None) -> list[dict]:
    """Run ``tansaku.envs.evaluate`` per task — the recipe's task as ``train rl`` trains it (``rl_task``) —
    and raise ``NotReadyForRL`` when one gives no learning signal.

    The rollouts use ``client`` if given, else ``readiness_model(recipe, model_path)``; each report is written
    to ``<output_dir>/readiness/<task>/``. A client made here is closed afterwards (a colocated vLLM engine
    must give its GPU memory back before the trainer starts its own).
    """
    spec_r, output_dir = recipe.script_args.readiness, recipe.training_args.output_dir
    own = client is None
    client = client if client is not None else as_client(readiness_model(recipe, model_path),
                                                        **readiness_options(recipe))
    reports = []
    try:
        for task in recipe.script_args.tasks:
            # rl_task: the task as the run trains it (system prompt, abstention, tools, reward weights), not
            # the task's defaults, so the gate measures the same rewards GRPO will optimise.
            report = run_eval(
                rl_task(task), task.data, client, task.index, split=spec_r.split or task.prompt_split(),
                k=spec_r.k, limit=spec_r.rows, max_tokens=spec_r.max_tokens, seed=recipe.training_args.seed,
                out_dir=Path(output_dir) / "readiness" / task.name, judge=judge)
            check_rl_readiness(report, min_pass_at_k=spec_r.min_pass_at_k)
            reports.append(report)
    finally:
        if own:
            client.close()
    return reports
