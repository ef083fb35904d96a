"""Standalone multi-turn rollout runner (solvability checks, teacher rollouts, evaluation).

generate → parse → execute tools → append the tool messages → generate again, until the model answers
without a tool call, writes a malformed one, hits ``max_turns``, or a generation is cut by ``max_tokens``. For
a local backend all active episodes of a turn go to the client in one ``client.chat`` call, which it batches;
for a client with server slots (HTTP) each episode runs on its own thread, its next turn sent as soon as its
own answer is back (the same requests, so the same trajectories). Trajectories are HF chat messages: assistant
turns carry ``reasoning_content`` (every step's, not just the last) and ``tool_calls`` with dict arguments,
tool results are ``{"role": "tool", …}`` — the same shape TRL hands to reward functions, so
``tansaku.envs.rewards`` scores both alike.

Tools come from an environment factory (``tansaku.envs.environments.make_environment_factory``), one fresh
``SearchEnvironment`` per episode, ``reset(**row)`` as in TRL: each episode's request carries the schemas of
its own description variant and tool interface (drawn at reset; ``Trajectory.tool_variant`` /
``tool_interface`` record them, ``Trajectory.tools`` keeps the schemas; a system prompt names the interface's
tools: ``environments.episode_prompt``). A tool call runs through ``environments.call_tool``, exactly TRL's
tool loop: a tool that raises gives ``{'error': '<message>'}`` as the tool content and counts in
``tool_errors``.

Model output is read by ``tansaku.core.parsing`` exactly as TRL's GRPO loop reads it (transformers'
``parse_response``): strictly, never repaired. A turn with a malformed tool call is plain text there — TRL
runs none of its calls and the episode ends — so here too: it ends the episode (``stop_reason``
``parse_error``), is counted in ``parse_failures`` and keeps its raw ``<tool_call>`` blocks in the assistant
content, where ``tansaku.envs.rewards.format_reward`` counts them. Eval therefore measures the loop GSPO
trains. Requests carry the messages in the wire form (``to_wire``: arguments as JSON text).

    from tansaku.envs.rollout import run_rollouts
    trajectories = run_rollouts(client, TASKS["multihop_qa"], rows, make_environment_factory(task, idx), k=4)
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field

from tansaku.core import jsontext
from tansaku.core.llm import ChatRequest
from tansaku.core.llm.base import in_callers_priority, llm_turn
from tansaku.core.parsing import (
    ParseError,
    ToolCall,
    coerce_tool_call,
    parse_tool_calls,
    split_think,
    strip_end_markers,
    to_wire,
)
from tansaku.core.progress import progress_bar
from tansaku.envs.environments import call_tool, episode_prompt, tool_methods, tool_schemas
from tansaku.envs.rewards import episode_stats


@dataclass
class Trajectory:
    row_index: int
    sample_index: int
    prompt: list[dict]
    completion: list[dict] = field(default_factory=list)
    stop_reason: str = "running"  # answer | max_turns | max_tokens | parse_error | llm_error
    error: str | None = None
    turns: int = 0
    tool_calls: int = 0
    tool_errors: int = 0
    parse_failures: int = 0
    rewards: dict[str, float | None] = field(default_factory=dict)
    total_reward: float | None = None
    tool_variant: int | None = None  # tool description variant the model was shown (drawn at reset)
    tool_interface: int | None = None  # tool interface (0: search/open_doc, 1: find/read; drawn at reset)
    generated_tokens: int = 0  # over all turns, when the backend counts them
    # mean next-token entropy over those tokens (``ChatResult.entropy``; local backends): how deterministic
    token_entropy: float | None = None
    tools: list[dict] = field(default_factory=list, repr=False)  # those tool schemas (not in to_record)

    def add_generation(self, tokens: int | None, entropy: float | None) -> None:
        """Count one turn's generated tokens into ``generated_tokens`` and its entropy into the running
        mean."""
        if not tokens:
            return
        if entropy is not None:
            seen = self.generated_tokens if self.token_entropy is not None else 0
            self.token_entropy = ((self.token_entropy or 0.0) * seen + entropy * tokens) / (seen + tokens)
        self.generated_tokens += tokens

    @property
    def messages(self) -> list[dict]:
        return self.prompt + self.completion

    def to_record(self) -> dict:
        """JSON-able record (one line of trajectories.jsonl)."""
        record = asdict(self)
        record.pop("tools")  # the variant number says which schemas; keeps trajectories.jsonl small
        record["messages"] = record.pop("prompt") + record.pop("completion")
        record["n_prompt_messages"] = len(self.prompt)
        return record


def _environment_for_episode(environment_factory):
    """A fresh environment per episode, as TRL's ``environment_factory`` gives (budgets and variants are per
    episode, so one shared instance would be wrong)."""
    if not callable(environment_factory) or hasattr(environment_factory, "reset"):
        raise TypeError("run_rollouts needs a zero-argument environment factory, e.g. "
                        "tansaku.envs.environments.make_environment_factory(task, index); got "
                        f"{type(environment_factory).__name__}")
    return environment_factory()


def _parse_result(result) -> tuple[str | None, str, list[ToolCall], list[ParseError]]:
    """``(reasoning, content, calls to run, parse errors)`` of one generation, read by
    ``tansaku.core.parsing``.

    The raw text is parsed strictly; calls a server already parsed (``server_tool_calls``, wire form) are
    validated by the same ``coerce_tool_call``. A turn with any malformed call is plain text, as in TRL's
    loop (``parse_response`` fails, TRL keeps the decoded text and runs nothing): no call is returned and
    the content keeps every ``<tool_call>`` block, where ``format_reward`` finds the errors.
    """
    # A response of the wrong shape (a scripted {"content": 5}, a server's odd fields) is the model's mistake:
    # a parse failure of this episode, never an exception out of the rollout.
    malformed = [ParseError("not_text", f"the response's {name} is {type(value).__name__}, not text", "")
                 for name, value in (("content", result.content), ("reasoning", result.server_reasoning))
                 if value is not None and not isinstance(value, str)]
    reasoning, rest = split_think(strip_end_markers(result.content if isinstance(result.content, str)
                                                    else ""))
    reasoning = (result.server_reasoning if isinstance(result.server_reasoning, str) else None) or reasoning
    content, calls, errors = parse_tool_calls(rest)
    errors = malformed + errors
    server_calls = result.server_tool_calls
    server_blocks = []
    for raw_call in (server_calls if isinstance(server_calls, list) else [server_calls] if server_calls
                     else []):
        # Shown as JSON text in the content when malformed; json.dumps would recurse into a hostile nesting.
        shown = ("" if jsontext.depth_exceeds(raw_call, jsontext.MAX_DEPTH)
                 else jsontext.dumps(raw_call, default=str))
        parsed = coerce_tool_call(raw_call, raw=shown)
        if isinstance(parsed, ToolCall):
            calls.append(parsed)
            server_blocks.append(jsontext.dumps({"name": parsed.name, "arguments": parsed.arguments}))
        else:
            errors.append(parsed)
            server_blocks.append(parsed.raw)
    if errors:
        return (reasoning, "\n".join([rest, *(f"<tool_call>{b}</tool_call>" for b in server_blocks)]).strip(),
                [], errors)
    return reasoning, content, calls, errors


def _execute(functions: dict, call: ToolCall) -> str:
    """The tool message content, as TRL writes it (``{'error': …}`` when the tool raised; never raises)."""
    content, _failed = call_tool(functions, call.name, call.arguments)
    return content


def _take_turn(episode: Trajectory, functions: dict, turn: int, result) -> None:
    """Append one generation (and the results of the tools it called) to ``episode``; end it when TRL's loop
    would: an answer, a cut generation, a malformed call or an LLM error."""
    if result.error:
        episode.stop_reason, episode.error = "llm_error", result.error
        return
    reasoning, content, calls, errors = _parse_result(result)
    message = {"role": "assistant", "content": content}
    if reasoning:
        message["reasoning_content"] = reasoning
    if calls:
        message["tool_calls"] = [{"id": f"call_{turn}_{j}", **c.as_message_call()} for j,
                                 c in enumerate(calls)]
    episode.completion.append(message)
    episode.add_generation(result.tokens, result.entropy)
    episode.turns += 1
    episode.tool_calls += len(calls)
    episode.parse_failures += len(errors)
    for j, call in enumerate(calls):
        output = _execute(functions, call)
        episode.completion.append({"role": "tool", "name": call.name, "tool_call_id": f"call_{turn}_{j}",
                                   "content": output})
    if errors or not calls:
        episode.stop_reason = ("max_tokens" if result.finish_reason == "length"
                               else "parse_error" if errors else "answer")


def _run_turns_batched(client, episodes, functions, request, max_turns: int, advance) -> None:
    """Turn by turn, every running episode's request in one ``client.chat`` call: what a local backend
    (transformers, scripted) batches."""
    for turn in range(max_turns):
        active = [i for i, e in enumerate(episodes) if e.stop_reason == "running"]
        if not active:
            break
        with llm_turn(turn):  # one episode on a client with slots comes here: its turn ranks its request
            results = client.chat([request(episodes[i], turn) for i in active])
        for i, result in zip(active, results, strict=True):
            _take_turn(episodes[i], functions[i], turn, result)
        advance(sum(1 for i in active if episodes[i].stop_reason != "running"))


def _run_episodes_concurrently(client, episodes, functions, request, max_turns: int, slots: int,
                               advance) -> None:
    """Each episode on its own thread, turn after turn, for a client with server slots (HTTP): an episode's
    next turn goes out as soon as its own answer is back, not when the slowest of the others is. The requests,
    and so the trajectories, are those of the batched loop."""
    lock = threading.Lock()

    def run(i: int) -> None:
        episode = episodes[i]
        for turn in range(max_turns):
            with llm_turn(turn):  # an earlier turn, more turns to come after it: it waits less for a slot
                [result] = client.chat([request(episode, turn)])
            _take_turn(episode, functions[i], turn, result)
            if episode.stop_reason != "running":
                break
        with lock:
            advance(1)

    with ThreadPoolExecutor(max_workers=min(slots, len(episodes)),
                            thread_name_prefix="tansaku-episode") as pool:
        # each episode under the record's rank for a server slot (a streaming stage set it here)
        for future in [pool.submit(in_callers_priority(run), i) for i in range(len(episodes))]:
            future.result()  # a bug in a tool or a backend is raised here, with its traceback


def run_rollouts(client, task, rows: list[dict], environment_factory, k: int = 1,
                 max_turns: int | None = None,
                 max_tokens: int = 1024, temperature: float = 0.7, top_p: float = 1.0, seed: int = 0,
                 judge=None, score: bool = True, quiet: bool = False) -> list[Trajectory]:
    """Run ``k`` episodes per row; return trajectories ordered by (row, sample).

    A progress bar counts finished episodes (shown on a terminal only; ``quiet`` turns it off).

    ``environment_factory``: zero-argument callable returning a fresh environment per episode
    (``make_environment_factory(task, index)``); ``reset(**row)`` draws its description variant, and the
    episode's requests carry that variant's tool schemas. ``score``: fill ``rewards`` with the task's
    reward functions (``judge`` needed for rubric tasks) and ``total_reward``.
    """

    max_turns = max_turns or task.max_turns
    episodes, functions = [], []
    for row_index, row in enumerate(rows):
        for sample_index in range(k):
            environment = _environment_for_episode(environment_factory)
            prompt = task.build_prompt(row)
            # As TRL does: the row with its prompt (the environment refuses a row without one).
            # draws this episode's variant and interface
            observation = environment.reset(**{**row, "prompt": prompt})
            prompt = episode_prompt(environment, prompt)  # the system prompt names this interface's tools
            if observation:  # TRL appends reset()'s text to the last prompt message; do the same
                prompt[-1] = {**prompt[-1], "content": prompt[-1]["content"] + observation}
            # Read after reset: the tools (and their descriptions) this episode's model is shown.
            functions.append(tool_methods(environment))
            episodes.append(Trajectory(row_index, sample_index, prompt, tools=tool_schemas(environment),
                                       tool_variant=getattr(environment, "tool_variant", None),
                                       tool_interface=getattr(environment, "tool_interface", None)))

    def request(episode: Trajectory, turn: int) -> ChatRequest:
        # One seed per turn (not per episode): the transformers backend batches only requests sharing a seed.
        return ChatRequest(messages=to_wire(episode.messages), max_tokens=max_tokens, temperature=temperature,
                           top_p=top_p, seed=seed + turn, tools=episode.tools,
                           sample_index=episode.sample_index)

    with progress_bar(f"{task.name} rollouts", total=len(episodes), quiet=quiet) as advance:
        slots = getattr(client, "slots", None)
        if slots and len(episodes) > 1:
            _run_episodes_concurrently(client, episodes, functions, request, max_turns, int(slots), advance)
        else:
            _run_turns_batched(client, episodes, functions, request, max_turns, advance)
    for episode in episodes:
        if episode.stop_reason == "running":
            episode.stop_reason = "max_turns"
        episode.tool_errors = episode_stats(episode.completion).failed_calls
    if score:
        score_trajectories(task, rows, episodes, judge=judge)
    return episodes


def score_trajectories(task, rows: list[dict], trajectories: list[Trajectory], judge=None) -> None:
    """Fill each trajectory's ``rewards`` (per component) and ``total_reward``: ``task.score`` (a row field
    named like one of TRL's reward arguments, e.g. "completions", is ``InputError``)."""
    completions = [t.completion for t in trajectories]
    scores = task.score(completions, [rows[t.row_index] for t in trajectories], judge)
    for trajectory, score in zip(trajectories, scores, strict=True):
        trajectory.rewards.update(score.components)
        trajectory.total_reward = score.total
