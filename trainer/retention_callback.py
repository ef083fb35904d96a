"""Retention inside training: a TRL callback for ``train sft`` and ``train rl`` that measures general ability
on held-out prompts every ``retention.every_steps`` optimizer steps and logs it beside the rewards.

    retention: {every_steps: 50, rows: 8, max_drop: 0.2}                      # the proxy, in a recipe
    retention: {every_steps: 100, judge: http:J@http://gpu1:8000, questions: ../shared/data/ja_mt_bench}

Without a judge: the log-likelihood proxy of ``tansaku.envs.retention`` on the first ``rows`` rows of
``prompts`` (by default the start model's own greedy answers to them: "what it used to say"), retention =
exp(mean token log-prob now − at the start). With ``judge``: MT-Bench on the first ``subset`` questions of
``questions`` (greedy answers by the model being trained, single-answer grading), retention = mean score now /
at the start. Measured once before step 1 (the start), then every N steps; each measurement is logged as
``retention/value``, ``retention/retention`` (and ``retention/unreadable`` with a judge) into that step's log
(trainer_state.json, the run report, trackio) and appended to ``<output_dir>/retention.jsonl``.

The stop rule: with ``max_drop`` set, training stops (``control.should_training_stop``, the checkpoint saved
as at any end) once retention < 1 − max_drop (:func:`falls_too_far`).
"""

from __future__ import annotations

import math
from pathlib import Path

from transformers import TrainerCallback

from tansaku.core import jsontext, safe_write
from tansaku.core.llm import ChatResult, as_client
from tansaku.envs.evaluate import load_rows
from tansaku.envs.mt_bench import generate_answers, judge_all, judge_requests, load_questions, load_references
from tansaku.envs.mt_bench_prompts import judge_prompts
from tansaku.envs.mt_bench_score import summarize_scores
from tansaku.envs.retention import answer_loglik, self_answers
from tansaku.trainer.recipe_sections import RetentionSpec
from tansaku.trainer.recipes import shipped_path


def falls_too_far(retention: float | None, max_drop: float | None) -> bool:
    """The stop rule: retention fell by more than ``max_drop`` (a fraction of the start).

    >>> falls_too_far(0.79, 0.2), falls_too_far(0.8, 0.2), falls_too_far(0.1, None), falls_too_far(None, 0.2)
    (True, False, False, False)
    """
    return max_drop is not None and retention is not None and retention < 1 - max_drop - 1e-12


class ProxyMeasure:
    """The log-likelihood proxy: mean token log-prob of reference answers; retention = exp(now − start)."""

    name = "loglik"

    def __init__(self, spec: RetentionSpec):
        self.spec = spec
        self.rows = load_rows(shipped_path(spec.prompts), "test", spec.rows)  # a folder: its held-out split

    def __call__(self, model, tokenizer, start: bool) -> dict:
        if start and self.spec.self_answers:
            self.rows = self_answers(model, self.rows, self.spec.max_new_tokens, tokenizer=tokenizer)
        return {"value": answer_loglik(model, self.rows, tokenizer=tokenizer)["mean_token_logprob"]}

    @staticmethod
    def retention(value: float, start: float) -> float:
        return math.exp(value - start)


class _LocalModel:
    """The model being trained as an LLM client for ``generate_answers``-style turns: greedy, no cache."""

    def __init__(self, model, tokenizer, max_new_tokens: int):
        self.model, self.tokenizer, self.max_new_tokens = model, tokenizer, max_new_tokens

    def chat(self, requests) -> list[ChatResult]:
        import torch

        out = []
        device = next(self.model.parameters()).device
        for request in requests:
            ids = self.tokenizer.apply_chat_template(
                request.messages, add_generation_prompt=True, return_tensors="pt", return_dict=True
            )
            with torch.no_grad():
                generated = self.model.generate(
                    **{k: v.to(device) for k, v in ids.items()},
                    do_sample=False,
                    max_new_tokens=self.max_new_tokens,
                    pad_token_id=self.tokenizer.pad_token_id,
                )
            text = self.tokenizer.decode(generated[0, ids["input_ids"].shape[1] :], skip_special_tokens=True)
            out.append(ChatResult(content=text.strip()))
        return out


class JudgeMeasure:
    """MT-Bench on a fixed subset, graded by ``spec.judge``; retention = mean score now / at the start."""

    name = "mt_bench"

    def __init__(self, spec: RetentionSpec):
        self.spec = spec
        self.questions = load_questions(spec.questions, spec.subset)
        self.references = load_references(spec.questions, self.questions)
        self.prompts, self.judge = judge_prompts(None), as_client(spec.judge)

    def __call__(self, model, tokenizer, start: bool) -> dict:
        answers, _ = generate_answers(_LocalModel(model, tokenizer, self.spec.max_new_tokens), self.questions)
        records = judge_all(
            self.judge, judge_requests(self.prompts, self.questions, answers, self.references)
        )
        overall = summarize_scores(records)["overall"]
        return {"value": overall["mean"], "unreadable": overall["unreadable"] + overall["errors"]}

    @staticmethod
    def retention(value: float | None, start: float | None) -> float | None:
        return value / start if value is not None and start else None


class RetentionCallback(TrainerCallback):
    """Measures at the start and every ``spec.every_steps`` steps (module docstring); ``measure(model,
    tokenizer, start) -> {"value", …}`` with a ``retention(value, start)`` (``ProxyMeasure`` /
    ``JudgeMeasure``)."""

    def __init__(self, spec: RetentionSpec, output_dir: str | None = None, measure=None, printer=print):
        self.spec, self.printer = spec, printer
        self.measure = measure or (JudgeMeasure(spec) if spec.judge else ProxyMeasure(spec))
        self.log_path = Path(output_dir) / "retention.jsonl" if output_dir else None
        self.start: float | None = None
        self.history: list[dict] = []
        self.pending: dict | None = None
        self.stopped_at: int | None = None

    def _measure(self, model, tokenizer, step: int, start: bool) -> dict:
        was_training = model.training
        try:
            found = self.measure(model, tokenizer, start)
        finally:
            model.train(was_training)  # the proxy and generation switch to eval mode
        if start:
            self.start = found["value"]
        retention = self.measure.retention(found["value"], self.start)
        entry = {"step": step, "measure": self.measure.name, **found, "retention": retention}
        self.history.append(entry)
        if self.log_path is not None:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            with safe_write.open_for_append(self.log_path) as f:  # a link at the log's name is refused
                f.write(jsontext.dumps(entry) + "\n")
        return entry

    def on_train_begin(self, args, state, control, model=None, processing_class=None, **kwargs):
        if self.start is None:  # a resumed run measures its own start
            self.pending = _logged(self._measure(model, processing_class, state.global_step, start=True))

    def on_step_end(self, args, state, control, model=None, processing_class=None, **kwargs):
        if state.global_step % self.spec.every_steps:
            return control
        entry = self._measure(model, processing_class, state.global_step, start=False)
        self.pending = {**(self.pending or {}), **_logged(entry)}
        control.should_log = True  # this step's log carries it, beside the rewards
        if falls_too_far(entry["retention"], self.spec.max_drop):
            self.stopped_at = state.global_step
            control.should_training_stop = True
            self.printer(
                f"[retention] step {state.global_step}: retention {entry['retention']:.3f} < "
                f"1 - max_drop ({self.spec.max_drop}): training stops"
            )
        return control

    def on_log(self, args, state, control, logs=None, **kwargs):
        if self.pending:
            if logs is not None:
                logs.update(self.pending)
            if state.log_history:  # the record the trainer just appended (trainer_state.json)
                state.log_history[-1].update(self.pending)
            self.pending = None


def _logged(entry: dict) -> dict:
    names = {
        "value": f"retention/{entry['measure']}",
        "retention": "retention/retention",
        "unreadable": "retention/unreadable",
    }
    return {names[k]: v for k, v in entry.items() if k in names and v is not None}


def attach_retention(trainer, spec: RetentionSpec, output_dir: str | None) -> None:
    """Put the callback first on ``trainer`` when ``spec.every_steps`` > 0, so that every logger after it
    (the progress bar, trackio …) sees the retention it adds to a step's log."""
    if spec.every_steps:
        trainer.callback_handler.callbacks.insert(0, RetentionCallback(spec, output_dir))
