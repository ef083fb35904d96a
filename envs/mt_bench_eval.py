"""``train eval --task mt_bench``: Japanese MT-Bench with an LLM judge, the seed's measure of general ability.

The model under test answers both turns of every question twice, without a system prompt (``plain``) and with
the agentic one (``agentic``: the task's search-agent prompt, or ``--system-prompt``): the switch the seed
trains, checked in generation. ``answers=FILE`` grades pre-generated answers (``model_answer`` format)
instead. The judge is any LLM client (``http:``, ``vllm:``, ``transformers:``, ``scripted:``; its retries,
cache and concurrency). Single-answer grading gives per-category, per-turn and overall means with 95 %
intervals; ``pairwise=MODEL_B`` (an LLM spec, or a ``model_answer`` file) grades A against B with positions
swapped. ``baselines``: earlier ``mt_bench`` result folders (before SFT, after SFT …): the report gets one
table of every model × condition with retention = mean / the first baseline's mean.

The result folder (``out_dir``, an eval folder as every ``train eval`` writes): ``tansaku_eval.json`` first,
``answers/<condition>.jsonl`` (model_answer format, reusable as ``--answers``), ``judgments.jsonl`` (every
verdict: the judge's text, status, tokens), then ``report.json``.

    from tansaku.envs.mt_bench_eval import run_mt_bench
    report = run_mt_bench("../shared/data/ja_mt_bench", answers="…/model_answer/gpt-3.5-turbo.jsonl",
                          judge="http:Qwen/Qwen3-32B@http://gpu1:8000", out_dir="runs/mt-bench-gpt35")
"""

from __future__ import annotations

from pathlib import Path

from tansaku.core import jsontext, ownership, safe_write
from tansaku.core.errors import InputError
from tansaku.core.llm import LLMOptions, as_client
from tansaku.core.options import check_limit, read_system_prompt
from tansaku.core.redact import redact_mapping
from tansaku.envs.evaluate import eval_out
from tansaku.envs.mt_bench import (
    TASK,
    TASK_VERSION,
    answer_record,
    generate_answers,
    judge_all,
    judge_requests,
    load_answers,
    load_questions,
    load_references,
    pairwise_requests,
)
from tansaku.envs.mt_bench_prompts import judge_prompts
from tansaku.envs.mt_bench_score import judge_usage, retention_table, summarize_pairs, summarize_scores
from tansaku.envs.tasks import TASKS

AGENTIC_TASK = "multihop_qa"  # whose system prompt is the agentic side of the switch by default
CONDITIONS = ("plain", "agentic")


def agentic_prompt(system_prompt: str | None) -> str:
    """The agentic system prompt: ``system_prompt`` (text or ``@FILE``), else the search task's first one."""
    return read_system_prompt(system_prompt) or TASKS[AGENTIC_TASK].system_prompts[0]


def load_baseline(folder: str | Path) -> dict:
    """An earlier ``train eval --task mt_bench`` report (single-answer grading) from its result folder."""
    path = Path(folder) / "report.json" if Path(folder).is_dir() else Path(folder)
    try:
        report = jsontext.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InputError(f"--baseline {folder}: no readable report.json ({exc})") from None
    if not isinstance(report, dict) or report.get("task") != TASK or report.get("mode") != "single":
        raise InputError(
            f"--baseline {folder}: not a train eval --task mt_bench report (single-answer grading)"
        )
    return report


def model_answers(
    model,
    questions: list[dict],
    answers_file,
    system_prompt: str | None,
    max_tokens: int,
    seed: int,
    llm_options: LLMOptions | None,
) -> tuple[dict, dict]:
    """``({condition: (model_id, {question_id: [a1, a2]})}, generation usage)``: the file's answers as one
    condition, or the model's own without and with the agentic system prompt."""
    if answers_file is not None:
        return {"answers": load_answers(answers_file)}, {}
    if model is None:
        raise InputError("give --model (the model that answers) or --answers FILE (answers to grade)")
    client = as_client(model, llm_options=llm_options)
    name = model if isinstance(model, str) else getattr(client, "model", type(client).__name__)
    prompts = {"plain": None, "agentic": agentic_prompt(system_prompt)}
    out, usage = {}, {}
    try:
        for condition in CONDITIONS:
            answers, usage[condition] = generate_answers(
                client, questions, prompts[condition], max_tokens, seed
            )
            out[condition] = (f"{name} [{condition}]", answers)
    finally:
        if isinstance(model, str):  # made here: its weights go before the judge loads
            client.close()
    return out, usage


def _other_answers(
    pairwise, questions, condition: str, system_prompt, max_tokens, seed, llm_options
) -> tuple:
    if str(pairwise).endswith(".jsonl") and Path(pairwise).is_file():
        return load_answers(pairwise)
    client = as_client(pairwise, llm_options=llm_options)
    try:
        prompt = agentic_prompt(system_prompt) if condition == "agentic" else None
        answers, _ = generate_answers(client, questions, prompt, max_tokens, seed)
    finally:
        if isinstance(pairwise, str):
            client.close()
    return f"{pairwise} [{condition}]", answers


def run_mt_bench(dataset: str | Path, model=None, judge=None, answers: str | Path | None = None,
                 pairwise=None, system_prompt: str | None = None,
                 judge_prompts_file: str | Path | None = None, limit: int | None = None,
                 out_dir: str | Path | None = None, max_tokens: int = 1024, seed: int = 0,
                 price_in: float = 0.0, price_out: float = 0.0, baselines: list | tuple = (),
                 llm_options: LLMOptions | None = None) -> dict:
    """Answer (or read) and judge MT-Bench; return (and, with ``out_dir``, write) the report (module
    docstring). ``model``/``judge``/``pairwise``: LLM specs or clients; ``price_in``/``price_out``: per 1M
    judge tokens."""
    check_limit(limit)
    if judge is None:
        raise InputError("mt_bench is graded by an LLM judge: give --judge SPEC")
    out = eval_out(out_dir, dataset, None)  # before any model loads
    prompts = judge_prompts(judge_prompts_file)
    questions = load_questions(dataset, limit)
    references = load_references(dataset, questions)
    earlier = [(str(b), load_baseline(b)) for b in baselines]
    answered, generation = model_answers(model, questions, answers, system_prompt, max_tokens, seed,
                                         llm_options)
    other = {"pairwise": pairwise, "system_prompt": system_prompt, "max_tokens": max_tokens, "seed": seed,
             "llm_options": llm_options}
    judge_client = as_client(judge, llm_options=llm_options)
    try:
        conditions, records = _judged(judge_client, prompts, questions, references, answered, other)
        judge_described = getattr(judge_client, "describe", dict)()
    finally:
        if isinstance(judge, str):
            judge_client.close()
    report = {"task": TASK, "task_version": TASK_VERSION, "dataset": str(dataset),
              "questions": len(questions),
              "mode": "single" if pairwise is None else "pairwise",
              "categories": sorted({q["category"] for q in questions}),
              "model": str(answers) if answers is not None else (model if isinstance(model, str) else None),
              "judge": judge_described, "judge_prompts": {k: prompts[k] for k in ("source", "version")},
              "conditions": conditions, "graded": len(records),
              "unreadable": sum(r["status"] == "unreadable" for r in records),
              "judge_errors": sum(r["status"] == "error" for r in records),
              "judge_usage": judge_usage(records, price_in, price_out), "generation": generation,
              "seed": seed, "max_tokens": max_tokens}
    if earlier:
        rows = [{"label": label, "report": r} for label, r in earlier]
        rows.append({"label": "this run", "report": report})
        report["retention"] = retention_table(rows)
    if out is not None:
        write_result(out, report, answered, records)
    return report


def _judged(
    judge, prompts: dict, questions: list[dict], references: dict, answered: dict, other: dict
) -> tuple[dict, list[dict]]:
    """``({condition: summary}, every judgment record)``: single-answer grades, or with ``other["pairwise"]``
    the pairs against model B (its answers read or generated under the same condition)."""
    records, conditions = [], {}
    for condition, (model_id, given) in answered.items():
        if other["pairwise"] is None:
            found = judge_all(judge, judge_requests(prompts, questions, given, references))
            conditions[condition] = summarize_scores(found)
        else:
            other_id, answers_b = _other_answers(
                other["pairwise"],
                questions,
                condition,
                other["system_prompt"],
                other["max_tokens"],
                other["seed"],
                other["llm_options"],
            )
            found = judge_all(
                judge, pairwise_requests(prompts, questions, given, answers_b, references), pairwise=True
            )
            conditions[condition] = {"model_a": model_id, "model_b": other_id, **summarize_pairs(found)}
        records += [{"condition": condition, **r} for r in found]
    return conditions, records


def write_result(out: Path, report: dict, answered: dict, records: list[dict]) -> None:
    """The marker first (a killed run's folder stays provably an eval folder), the answers and judgments, then
    ``report.json``: its presence means the evaluation finished. Names of models and judges are redacted."""
    report = redact_mapping(report)
    files = ["answers", "judgments.jsonl", "report.json"]
    ownership.write_marker(
        out,
        ownership.EVAL_MARKER,
        {"kind": "eval", "task": TASK, "dataset": report["dataset"], "files": files},
    )
    (out / "answers").mkdir(exist_ok=True)
    for condition, (model_id, answers) in answered.items():
        with safe_write.open_atomic(out / "answers" / f"{condition}.jsonl") as f:
            for question_id, turns in answers.items():
                f.write(jsontext.dumps(answer_record(question_id, turns, model_id)) + "\n")
    with safe_write.open_atomic(out / "judgments.jsonl") as f:
        for record in records:
            f.write(jsontext.dumps(record) + "\n")
    (out / "trajectories.jsonl").unlink(
        missing_ok=True
    )  # an earlier search eval's episodes are not this run's
    safe_write.write_text_atomic(out / "report.json", jsontext.dumps(report, indent=2, default=str))
