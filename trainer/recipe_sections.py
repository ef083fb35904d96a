"""The nested sections of an RL recipe that configure checks around training: the reward watch (``watch:``),
the readiness check (``readiness:``) and difficulty banding (``difficulty:``), and the rubric judge
(``judge:``); and retention during SFT and RL (``retention:``). ``tansaku.trainer.recipe_arguments`` reads
them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tansaku.core.errors import InputError
from tansaku.core.llm.settings import parse_api_keys
from tansaku.core.llm.spec import check_spec
from tansaku.core.llm.vllm_engine import check_engine_options


@dataclass
class WatchSpec:
    """The reward-hacking watch: warn when a component rises while answer correctness stays flat."""

    window: int = 10  # logged steps compared: mean of the last `window` vs the `window` before
    rise: float = 0.1  # a component "rises" when its mean grows by at least this much
    flat: float = 0.02  # correctness is "flat" when its mean moves less than this
    correctness: str | None = None  # None: the task's answer reward; else a substring of a component name


@dataclass
class ReadinessSpec:
    """The pre-flight check of ``train rl`` (``tansaku.envs.evaluate``): refuse when the model never
    succeeds."""

    k: int = 4  # samples per question
    rows: int = 16  # questions per task
    split: str | None = None  # default: the task's own split
    model: str | None = None  # LLM spec for the rollouts; default transformers:<recipe model>
    max_tokens: int = 1024
    min_pass_at_k: float = 0.02


@dataclass
class DifficultySpec:
    """Difficulty banding before step 1 (``tansaku.trainer.difficulty``): keep prompts the start model solves
    sometimes. Off while ``samples`` is 0; on, it replaces the readiness rollouts."""

    samples: int = 0  # K rollouts per candidate prompt with the model RL starts from (0: off)
    min_pass: float = 0.05  # keep pass rate >= min_pass (the default drops never-solved prompts for K < 20)
    max_pass: float = 0.95  # keep pass rate <= max_pass (the default drops always-solved prompts for K < 20)
    rows: int | None = None  # candidate prompts per task: the first N of its prompt split (None: all)
    max_tokens: int = 1024  # new tokens per turn
    temperature: float | None = None  # None: the recipe's temperature (what GRPO samples at)

    def problems(self) -> list[str]:
        """What is wrong with these settings, as recipe error messages (empty: fine)."""
        checks = [
            (self.samples == 0 or self.samples >= 2,
             f"difficulty.samples: >= 2 rollouts per prompt give a pass rate (got {self.samples}; 0 turns "
             f"banding off)"),
            (0.0 <= self.min_pass <= self.max_pass <= 1.0,
             f"difficulty: need 0 <= min_pass <= max_pass <= 1 (got {self.min_pass}, {self.max_pass})"),
            (self.rows is None or self.rows > 0, f"difficulty.rows: must be > 0 (got {self.rows})"),
            (self.max_tokens > 0, f"difficulty.max_tokens: must be > 0 (got {self.max_tokens})"),
            (self.temperature is None or self.temperature > 0,
             f"difficulty.temperature: sampling needs > 0 (got {self.temperature})"),
        ]
        return [message for ok, message in checks if not ok]


@dataclass
class JudgeSpec:
    """The LLM that scores rubric tasks (``deepresearch``) during ``train rl``: in the recipe as
    ``judge: SPEC`` or as a mapping with the client options synthesis takes on the command line
    (``--api-key``, ``--extra-body``, ``--concurrency``, ``--no-cache``; ``engine``: ``--llm-option``'s vLLM
    engine arguments, for a ``vllm:`` judge). ``train rl --judge SPEC`` replaces ``model``. The readiness and
    difficulty rollouts and every training step score through it; a judge that fails, times out or answers out
    of range gives that completion no score (None, counted in ``rubric/judge_failures``), never a stopped
    run."""

    # LLM spec: http:MODEL@URL, vllm:MODEL, transformers:PATH, scripted:FILE.jsonl|.py[:FN]
    model: str | None = None
    # http: KEY, URL=KEY, @FILE or env:NAME (default --api-key; see core/llm/settings)
    api_key: str | None = None
    extra_body: dict[str, Any] | None = None  # http: merged into every request body
    concurrency: int | None = None  # http: requests in flight (a step's completions are judged at once)
    timeout: float = 120.0  # http: seconds per request before it counts as a judge failure
    cache: bool = False  # replay judge replies from the response cache (off: a rerun judges again)
    max_tokens: int = 256  # tokens of one verdict
    engine: dict[str, Any] | None = None  # vllm: engine arguments (max_model_len, tensor_parallel_size …)

    def problems(self) -> list[str]:
        """What is wrong with these settings, as recipe error messages (empty: fine)."""
        http, vllm = (self.model or "").startswith("http:"), (self.model or "").startswith("vllm:")
        given = [k for k in ("api_key", "extra_body", "concurrency") if getattr(self, k) is not None]
        # vLLM is imported for the names only where a vllm: judge has engine arguments
        engine_problem = self._engine_problem() if vllm and self.engine else None
        checks = [
            (self._spec_problem() is None, self._spec_problem()),
            (http or not given, f"judge: {', '.join(given)} apply to http: judges only (judge.model is "
                                f"{self.model!r})"),
            (vllm or self.engine is None,
             f"judge.engine: applies to vllm: judges only (judge.model is {self.model!r})"),
            (engine_problem is None, f"judge.engine: {engine_problem}"),
            (self.concurrency is None or self.concurrency >= 1,
             f"judge.concurrency: must be >= 1 (got {self.concurrency})"),
            (self.timeout > 0, f"judge.timeout: must be > 0 seconds (got {self.timeout})"),
            (self.max_tokens > 0, f"judge.max_tokens: must be > 0 (got {self.max_tokens})"),
        ]
        return [message for ok, message in checks if not ok]

    def _spec_problem(self) -> str | None:
        """Why ``model`` is no spec ``from_spec`` takes (``check_spec``, the check of every
        ``--judge``/``--llm``: ``http:m@``, an unknown backend, a ``scripted:`` file of no known form …),
        refused with the recipe, before any file is read or run; ``judge.model: …``."""
        if self.model is None:
            return None
        try:
            check_spec(self.model, "judge.model")
        except InputError as exc:
            return str(exc)
        return None

    def _engine_problem(self) -> str | None:
        """Why ``engine`` names no vLLM engine arguments (a misspelt one is refused with the recipe, not on
        the GPU)."""
        try:
            check_engine_options(self.engine)
        except InputError as exc:
            return str(exc)
        return None

    def client_options(self) -> dict:
        """Keyword arguments for ``tansaku.core.llm.as_client``: the cache, for http: judges the client
        options, for
        vllm: judges the engine arguments (over the command's ``--llm-option``)."""
        options: dict = {"cache": "default" if self.cache else False}
        if (self.model or "").startswith("vllm:"):
            options.update(self.engine or {})
        if (self.model or "").startswith("http:"):
            options.update(timeout=self.timeout, max_concurrency=self.concurrency)
            if self.extra_body is not None:
                options["extra_body"] = self.extra_body
            if self.api_key is not None:  # KEY, URL=KEY or @FILE, as --api-key reads it
                options["api_key"] = parse_api_keys([self.api_key])
        return options


@dataclass
class RetentionSpec:
    """Retention inside training (``tansaku.trainer.retention_callback``, ``train sft`` and ``train rl``):
    every ``every_steps`` optimizer steps, general ability on held-out prompts against the start of the run,
    logged as ``retention/*`` beside the rewards. Without ``judge``: the log-likelihood proxy
    (``tansaku.envs.retention``) on ``prompts``; with a judge: MT-Bench on the first ``subset`` questions of
    ``questions``, judged."""

    every_steps: int = 0  # 0: off
    prompts: str = "examples/general_chat.jsonl"  # general chat rows (messages, or prompt + answer) held out
    rows: int = 8  # the first N rows of prompts
    self_answers: bool = True  # proxy: score the start model's own greedy answers ("what it used to say")
    max_new_tokens: int = 64  # the start model's answers (proxy) / each MT-Bench turn (judge)
    max_drop: float | None = None  # stop training once retention < 1 - max_drop (None: never stop)
    judge: str | None = None  # LLM spec: MT-Bench on a fixed subset instead of the proxy
    questions: str | None = None  # an MT-Bench folder (question.jsonl, reference_answer/), with judge
    subset: int = 8  # MT-Bench questions judged each time

    def problems(self) -> list[str]:
        """What is wrong with these settings, as recipe error messages (empty: fine)."""
        checks = [
            (self.every_steps >= 0,
             f"retention.every_steps: must be >= 0 (got {self.every_steps}; 0 turns it off)"),
            (self.rows >= 1 and self.subset >= 1 and self.max_new_tokens >= 1,
             "retention: rows, subset and max_new_tokens must be >= 1"),
            (self.max_drop is None or 0 < self.max_drop < 1,
             f"retention.max_drop: a fraction, 0 < max_drop < 1 (got {self.max_drop})"),
            (self.judge is None or bool(self.questions),
             "retention.judge: MT-Bench needs retention.questions (an MT-Bench folder)"),
            (self.judge is None or self._spec_problem() is None, self._spec_problem()),
        ]
        return [message for ok, message in checks if not ok]

    def _spec_problem(self) -> str | None:
        if self.judge is None:
            return None
        try:
            check_spec(self.judge, "retention.judge")
        except InputError as exc:
            return str(exc)
        return None
