"""One search-task episode stepped a model turn at a time, as ``train eval``'s rollout loop runs it.

What another library's environment drives (OpenEnv's ``step``, a ``verifiers`` rollout): the task's prompt and
the tool schemas of this episode's description variant and interface (drawn at ``reset``, as in TRL), each
model turn read and its tools run by the rollout loop's own step (``tansaku.envs.rollout``), and the finished
completion scored by ``Task.score``. So an episode here is the episode ``run_rollouts`` runs for the same row
and model turns, with the same rewards.

    from tansaku.core.llm import ChatResult
    episode = SearchEpisode(TASKS["multihop_qa"], make_environment_factory(task, "out/index"))
    trajectory = episode.reset(row)  # trajectory.prompt, trajectory.tools: what the model is shown
    new_messages = episode.step(ChatResult(content=model_text))  # the parsed turn and its tool results
    episode.done, episode.score  # a tansaku.envs.tasks.Score once done
"""

from __future__ import annotations

from tansaku.core.errors import InputError
from tansaku.core.llm import ChatResult
from tansaku.envs.environments import episode_prompt, tool_methods, tool_schemas
from tansaku.envs.rewards import episode_stats
from tansaku.envs.rollout import Trajectory
from tansaku.envs.rollout import _take_turn as take_turn  # the loop's own turn step: identical episodes
from tansaku.envs.tasks import Score, Task


class SearchEpisode:
    """One episode of ``task`` over the environments of ``factory`` (``make_environment_factory``).

    ``functions``: ``task.scoring_functions(judge)`` made once by the caller (a served app), else made here
    with ``judge`` (the rubric tasks' client). ``max_turns``: default the task's."""

    def __init__(self, task: Task, factory, functions: dict | None = None, judge=None,
                 max_turns: int | None = None):
        self.task, self.factory = task, factory
        self.functions = functions if functions is not None else task.scoring_functions(judge)
        self.max_turns = max_turns or task.max_turns
        self.row: dict | None = None
        self.trajectory: Trajectory | None = None
        self.score: Score | None = None
        self._tools: dict = {}

    def reset(self, row: dict) -> Trajectory:
        """Start the episode of dataset ``row`` (what ``run_rollouts`` does per episode): a fresh environment
        reset with the row and its prompt, the system prompt naming this interface's tools."""
        if not isinstance(row, dict) or not self.task.fits(row):
            raise InputError(f"task {self.task.name} needs a row with {sorted(self.task.columns)}")
        environment = self.factory()
        prompt = self.task.build_prompt(row)
        observation = environment.reset(**{**row, "prompt": prompt})
        prompt = episode_prompt(environment, prompt)
        if observation:  # TRL appends reset()'s text to the last prompt message
            prompt[-1] = {**prompt[-1], "content": prompt[-1]["content"] + observation}
        self._tools = tool_methods(environment)
        self.trajectory = Trajectory(0, 0, prompt, tools=tool_schemas(environment),
                                     tool_variant=getattr(environment, "tool_variant", None),
                                     tool_interface=getattr(environment, "tool_interface", None))
        self.row, self.score = row, None
        return self.trajectory

    @property
    def done(self) -> bool:
        return self.trajectory is not None and self.trajectory.stop_reason != "running"

    def step(self, result: ChatResult) -> list[dict]:
        """One model turn (its text as generated, or what a server's parsers took out of it): the messages it
        adds — the assistant turn as parsed and its tool results. The episode ends, and is scored, when the
        rollout loop would end it: an answer, a malformed call, a cut generation, or ``max_turns``."""
        if self.trajectory is None:
            raise InputError("reset the episode with a dataset row first")
        if self.done:
            raise InputError(f"the episode is over ({self.trajectory.stop_reason}); reset for another")
        completion = self.trajectory.completion
        before = len(completion)
        take_turn(self.trajectory, self._tools, self.trajectory.turns, result)
        if not self.done and self.trajectory.turns >= self.max_turns:
            self.trajectory.stop_reason = "max_turns"
        if self.done:
            self.trajectory.tool_errors = episode_stats(completion).failed_calls
            [self.score] = self.task.score([completion], [self.row], functions=self.functions)
            self.trajectory.rewards.update(self.score.components)
            self.trajectory.total_reward = self.score.total
        return completion[before:]
