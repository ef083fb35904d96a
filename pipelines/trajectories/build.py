"""``synth build trajectories``: teacher rollouts → correct only → the reasoning rewritten in three passes
(``translate`` to Japanese → ``refine`` → ``scenario``, each its own LLM call, prompt and language check, each
fed what the pass before it wrote) → verify → HF chat rows → mixed SFT set, as stages on the pipeline engine,
into one versioned dataset.

    from tansaku.pipelines.trajectories.build import build_trajectories
    from tansaku.pipelines.trajectories.config import TrajectoriesConfig
    manifest = build_trajectories(TrajectoriesConfig(dataset="out/multihop", index="out/index",
                                                     teacher="http:Qwen/Qwen3-32B@http://gpu:8000",
                                                     general="data/chat.jsonl", ratio=0.5, n=4),
                                  out="out/sft")

Splits: ``train`` (the SFT set: agentic rows under the agentic system prompt + general rows) and
``rejected`` (the engine's rejected split: every trajectory a stage dropped, as ``stage, reason, detail,
record`` with the whole trajectory record as JSON text; its own card config, so ``load_dataset(OUT)`` gives
``train`` only). The manifest's ``stages`` is the trajectory funnel (per stage: params, received, kept,
dropped by reason) and ``trajectories`` holds the scenario distribution, rejections by stage/reason,
teacher/translator/judge models, prompt versions and ratios; the card shows both. ``translator=None`` reuses
the teacher for translation and rewriting.

A deepresearch ``--dataset`` (``synth build deepresearch``) needs ``--judge``: correct-only scores each report
against its row's rubric (``--min-reward``, e.g. the task's pass threshold 0.5). A row with a clarifying
exchange is the teacher's prompt as RL shows it (``DeepResearch.build_prompt``): the user's initial request,
the assistant's clarifying question, the user's answer; so its trajectory's ``messages`` open with that
exchange (the question an assistant turn, trained on like every assistant turn; the answer a user turn) before
the research, and the rewrite passes leave those turns as they are.

The config (``TrajectoriesConfig``, every setting) is the manifest's, with ``task`` and ``system_prompt`` as
they came to (the task's name, the prompt's text).

Demo (no GPU):
``--teacher scripted:examples/teacher_script.py --translator scripted:examples/teacher_script.py:rewrite``.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from tansaku.core.chat_sources import describe_source
from tansaku.core.context import BuildContext
from tansaku.core.errors import InputError
from tansaku.core.licenses import choose_license
from tansaku.core.options import dataset_manifest as checked_manifest
from tansaku.core.options import read_system_prompt
from tansaku.core.out_folder import precheck_out
from tansaku.core.provenance import describe_input
from tansaku.core.store import REJECTED, build_dataset, iter_rows
from tansaku.envs.tasks import task_named
from tansaku.pipelines.trajectories.config import TrajectoriesConfig
from tansaku.pipelines.trajectories.filter import correct_only_stage
from tansaku.pipelines.trajectories.format import COLUMN_TYPES, format_stage
from tansaku.pipelines.trajectories.mix import mix_stage, read_chat_rows
from tansaku.pipelines.trajectories.rewrite import (
    CATALOG_PATH,
    PROMPTS,
    REWRITE_PASSES,
    load_catalog,
    rewrite_stage,
)
from tansaku.pipelines.trajectories.teacher import guess_task, make_tools, teacher_stage
from tansaku.pipelines.trajectories.verify import verify_stage

PIPELINE_VERSION = "6"  # 2: failed trajectories go to the engine's rejected split (was a failures split);
# 3: `answer` is a typed struct (was JSON text); agentic rows carry their task's system prompt (the one RL and
# eval use) 4: a `tool_interface` column (the episode's tool interface, tansaku.envs.tool_interfaces; 0
# before) 5: the config is TrajectoriesConfig's fields (the rewriter's settings and min_reward too); mix's
# ratio always 6: rewrite prompts v2 (the clarifying exchange shown as `dialogue`; scenario keeps the refined
# facts); a judge
#    for judged answer rewards (deepresearch), whose prompt turns (the clarifying exchange) are never
#    rewritten
REWRITE_SETTINGS = ("result_chars", "rewrite_max_tokens", "rewrite_temperature", "min_japanese_share",
                    "min_chinese_chars")


def question_source(dataset: str | Path, limit: int | None = None):
    """Question records ``{"question_id", "row"}`` in dataset order (stable ids: the row's ``id`` or
    ``q<i>``).

    The ``train`` split only: held-out ``test`` questions (``tansaku.core.heldout``) never become SFT rows."""

    def rows():
        for i, row in enumerate(iter_rows(dataset, split="train")):
            if limit is not None and i >= limit:
                return
            yield {"question_id": str(row.get("qid") or row.get("id") or f"q{i}"), "row": row}

    return rows


def _describe(client) -> dict:
    info = client.describe() if hasattr(client, "describe") else {"model": str(client)}
    return {k: v for k, v in info.items() if k != "cache"}  # the cache path is not part of the recipe


def _empty_hints(rewriter_is_teacher: bool) -> dict[str, str]:
    """What fixes a build that kept no trajectory, per stage (``tansaku.core.out_folder.refuse_empty``)."""
    rewrite = ("the rewriter is the teacher (no --translator): pass --translator SPEC, an LLM that answers "
               "the rewrite prompts in JSON" if rewriter_is_teacher
               else "check --translator: its rewrites were unusable")
    return {"input": "the --dataset train split has no questions",
            "teacher": "the teacher gave no rollout: check --teacher (with tool interface variants, a "
                       "teacher that calls another interface's tools is dropped as wrong_interface: the "
                       "rejected split)",
            "correct_only": "no teacher rollout reached the gold answer: check --teacher and that --index "
                            "holds the documents the questions come from, or raise --n",
            **{stage: rewrite for stage in REWRITE_PASSES},
            "verify": "every rewrite changed the tool calls or results: check --translator"}


def trajectory_task(c: TrajectoriesConfig, dataset_manifest: dict, system_prompt: str | None):
    """The task whose questions these are (``--task``, else the dataset's), with the build's system prompt
    and tool interfaces; refused when it cannot say which rollouts are correct."""
    first = next(iter(question_source(c.dataset, 1)()), None)
    if first is None:
        raise InputError(f"{c.dataset} has no questions in its train split")
    overrides = {**({"system_prompt": system_prompt} if system_prompt is not None else {}),
                 **({"tools": {"interface_variants": c.interface_variants}}
                    if c.interface_variants is not None else {})}
    task = task_named(c.task or guess_task(dataset_manifest, first["row"])).configured(overrides)
    if c.judge is None:  # correct-only needs an answer reward: an automatic one, or a rubric and --judge
        try:
            task.answer_reward()
        except ValueError as exc:
            raise InputError(f"task {task.name!r} cannot filter trajectories: {exc}") from None
    return task


def trajectory_stages(c: TrajectoriesConfig, task, tools, clients: dict, catalog_data: dict,
                      general_rows) -> list:
    """Teacher rollouts → correct only → the rewrite passes → verify → format → mix with general chat."""
    return [
        teacher_stage(clients["teacher"], task, tools, seed=c.seed,
                      **c.pick("n", "temperature", "max_tokens")),
        correct_only_stage(task, judge=clients["judge"], **c.pick("min_reward")),
        # The seed's passes, in its order, one stage each: translate, then refine the translation, then
        # rewrite the refined reasoning into a drawn scenario (each stage's prompt and language check its
        # own).
        *(rewrite_stage(kind, clients["translator"], seed=c.seed,
                        catalog=catalog_data if kind == "scenario" else None, **c.pick(*REWRITE_SETTINGS))
          for kind in REWRITE_PASSES),
        verify_stage(tools).configured({"tools_config": tools.config.to_dict()}),
        format_stage(task),
        mix_stage(general_rows, c.ratio, c.seed),
    ]


def build_trajectories(config: TrajectoriesConfig, out="out/sft",
                       context: BuildContext | None = None) -> dict:
    """Build the mixed SFT trajectory dataset into ``out`` and return its manifest (see module docstring).

    ``config`` holds every setting and its bounds (``TrajectoriesConfig``: its help texts are the CLI's);
    ``task`` defaults to the dataset's own (``teacher.guess_task``); the license defaults to the
    ``dataset`` card's, whose questions the rows hold. ``system_prompt`` (text or ``@FILE``) replaces the
    task's own system prompts in every agentic row and the teacher: give ``train rl``/``train eval`` the same
    so the switch stays one text. ``interface_variants``: tool interfaces the teacher's episodes draw from
    (``tansaku.envs.tool_interfaces``). ``context``: shards, LLM options, progress (``BuildContext``)."""
    context = context or BuildContext()
    c = config.check()  # every number before any work: a bad --ratio once failed after every rollout was paid
    system_prompt = read_system_prompt(c.system_prompt)  # @FILE: a missing file is refused before any work
    catalog_data = load_catalog(c.catalog)  # an input's shape, checked before the out folder is claimed
    out = precheck_out(out, pipeline="trajectories", inputs={  # before the questions are read
        "--dataset": c.dataset, "--index": c.index, "--general": c.general, "--catalog": c.catalog,
        "--license-file": c.license_file})
    dataset_manifest = checked_manifest(c.dataset, "--dataset")
    # refused before the first rollout is paid for
    chosen = choose_license(c.license, c.license_file, c.dataset)
    task = trajectory_task(c, dataset_manifest, system_prompt)
    # The recipe records what the options came to: a guessed task and a build naming it are the same build,
    # as are a prompt given as text and as @FILE.
    c = c.replace(task=task.name, system_prompt=system_prompt)
    general_rows = read_chat_rows(c.general) if c.general else None
    teacher = context.client(c.teacher)
    clients = {"teacher": teacher, "translator": context.client(c.translator) if c.translator is not None
               else teacher, "judge": context.client(c.judge) if c.judge is not None else None}
    tools = make_tools(task, c.index, seed=c.seed)
    recipe = {
        **c.recipe(), "task_version": task.version, "prompts": PROMPTS,
        "scenario_catalog_version": catalog_data["version"], "tools_config": tools.config.to_dict(),
        "system_prompts": list(task.system_prompts),
        **chosen.recipe(),  # another license is another recipe: a rerun refuses it, never mixes
    }
    # Full descriptions for the card; the fingerprint holds only their identities (the stages' llm).
    models = {name: _describe(client) if client is not None else None for name, client in clients.items()}
    inputs = [describe_input(c.dataset), describe_input(c.catalog or CATALOG_PATH), describe_input(c.index)]
    if c.general:
        # hf:…: the commit read
        inputs.append(describe_source(c.general, len(general_rows), option="--general"))

    def summarize(manifest: dict) -> dict:
        train = list(iter_rows(out, split="train", columns=["kind", "scenario", "question_id"]))
        rejected = (list(iter_rows(out, split=REJECTED, columns=["stage", "reason"]))
                    if manifest["splits"].get(REJECTED) else [])
        return {"trajectories": summary(train, rejected, recipe, models, general_rows)}

    return chosen.write(out, build_dataset(
        out=out, name=c.name or f"trajectories-{Path(c.dataset).name}", pipeline="trajectories",
        pipeline_version=PIPELINE_VERSION, config=recipe, seed=c.seed, inputs=inputs,
        source=question_source(c.dataset, c.limit),
        stages=trajectory_stages(c, task, tools, clients, catalog_data, general_rows), llm=teacher,
        keep_rejected=True, summarize=summarize, card=lambda m: trajectory_card(m) | chosen.card,
        chunk_size=c.chunk_size, column_types=COLUMN_TYPES, context=context,
        empty_hints=_empty_hints(c.translator is None),
        parents=[dataset_manifest.get("version")] if dataset_manifest.get("version") else []))


def summary(train: list[dict], rejected: list[dict], config: dict, models: dict, general_rows) -> dict:
    """Scenario distribution, rejections by stage/reason, models and the mix actually reached."""
    agentic = sum(1 for r in train if r["kind"] == "agentic")
    general = len(train) - agentic
    return {
        "teacher": models["teacher"], "translator": models["translator"], "judge": models.get("judge"),
        "prompts": config["prompts"],
        "scenario_distribution": dict(Counter(r["scenario"] for r in train if r["kind"] == "agentic")
                                      .most_common()),
        "failure_reasons": dict(Counter(f"{r['stage']}/{r['reason']}" for r in rejected).most_common()),
        "questions_with_a_kept_trajectory": len({r["question_id"] for r in train if r["kind"] == "agentic"}),
        "mix": {"ratio_requested": config["ratio"] if general_rows else None, "agentic_rows": agentic,
                "general_rows": general, "general_available": len(general_rows) if general_rows else 0,
                "ratio_actual": round(general / agentic, 4) if agentic else None},
    }


def trajectory_card(manifest: dict) -> dict:
    """The card text of a trajectory dataset: models, mix, scenario distribution, rejections by stage."""
    t = manifest["trajectories"]
    scen = "\n".join(f"| {k} | {v} |" for k, v in t["scenario_distribution"].items()) or "| – | 0 |"
    fails = "\n".join(f"| {k} | {v} |" for k, v in t["failure_reasons"].items()) or "| – | 0 |"
    mix = t["mix"]
    description = (
        "SFT trajectories for a Japanese agentic-search model: teacher rollouts with real search tool calls, "
        f"kept only when the final answer scores at least {manifest['config']['min_reward']} under the "
        "task's answer reward, each step's reasoning "
        "translated to Japanese, then refined, then rewritten to follow a drawn scenario (three LLM passes, "
        "each checked to be Japanese), with tool calls and tool "
        "results verified byte-identical and replayed against the index. Train with `train sft` "
        "(assistant-only loss: tool results are masked).\n\n"
        f"- **Teacher:** `{t['teacher'].get('backend')}` `{t['teacher'].get('model')}`; "
        f"**rewriter:** `{t['translator'].get('backend')}` `{t['translator'].get('model')}`; "
        + (f"**judge:** `{t['judge'].get('backend')}` `{t['judge'].get('model')}`; " if t.get("judge")
           else "")
        + "prompts "
        + ", ".join(f"`{v}`" for v in t["prompts"].values()) + "\n"
        f"- **Mix:** {mix['agentic_rows']} agentic rows (agentic system prompt) + {mix['general_rows']} "
        f"general rows (no system prompt); ratio requested {mix['ratio_requested']}, reached "
        f"{mix['ratio_actual']}\n- **Rejected split:** {sum(t['failure_reasons'].values())} failed "
        "trajectories (config `rejected`), never positive examples\n\n"
        f"### Scenario distribution\n\n| scenario | rows |\n|---|---:|\n{scen}\n\n"
        f"### Rejected by stage/reason\n\n| stage/reason | rows |\n|---|---:|\n{fails}"
    )
    # `license: other` (no name) until build_trajectories puts the chosen license over it.
    return {"pretty_name": f"tansaku SFT trajectories: {manifest['name']}", "license": "other",
            "task_categories": ["text-generation"], "tags": ["sft", "tool-use", "agentic-search"],
            "description": description,
            "limitations": ["Reasoning is rewritten by an LLM: faithful to the tool results by instruction "
                            "and review, not by proof. Tool calls and results are verified byte-identical.",
                            "Only questions the teacher solved appear; hard questions are "
                            "under-represented."]}
