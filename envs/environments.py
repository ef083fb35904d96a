"""TRL-native search environment for ``GRPOTrainer(environment_factory=…)`` (TRL 1.16, transformers ≥ 5.2).

TRL creates one instance per rollout with a zero-argument factory, calls ``reset(**row)`` with every dataset
column (its return value, if any, is appended to the last prompt message), and exposes every public method
of the class — except ``reset`` and ``get_reward`` — as a tool, its JSON schema read from type hints and the
Google-style docstring. A tool that raises becomes ``{'error': …}`` for the model; ours never raise: errors
come back as text starting with ``Error:`` (see ``tansaku.envs.tools``).

No ``get_reward`` here on purpose: TRL would add it as an extra reward with weight 1, outside the task's
weights; scoring stays in the task's reward functions, which read the completion messages.

    from tansaku.envs.environments import make_environment_factory
    from tansaku.envs.tasks import TASKS
    task = TASKS["multihop_qa"]
    trainer = GRPOTrainer(model, reward_funcs=task.reward_functions(), train_dataset=ds,
                          args=GRPOConfig(reward_weights=task.weights(), ...),
                          environment_factory=make_environment_factory(task, "out/index"))
"""

from __future__ import annotations

import inspect
import zlib
from collections.abc import Callable

from tansaku.envs.tools import SearchTools, ToolsConfig


class SearchEnvironment:
    """One rollout's search tools over a shared backend, with a per-episode call budget."""

    def __init__(self, backend, tools_config: dict | None = None, max_tool_calls: int = 16):
        self._tools = SearchTools(backend, ToolsConfig(**(tools_config or {})))
        self._max_tool_calls = max_tool_calls
        self._calls = 0
        self._row: dict = {}

    def reset(self, **row) -> str | None:
        """Start an episode for one dataset row; nothing is added to the prompt."""
        self._row = row
        self._calls = 0
        # The seed only picks the wording of tool errors/descriptions inside SearchTools: keep it per question.
        key = str(row.get("id") or row.get("question") or row.get("instruction") or "")
        self._tools.reset(seed=zlib.crc32(key.encode("utf-8")))
        return None

    def _budget_left(self) -> bool:
        self._calls += 1
        return self._calls <= self._max_tool_calls

    def search(self, query: str, size: int = 5) -> str:
        """Search the document collection and return ranked hits with doc_id, title and snippet.

        Args:
            query: Plain-text keywords, or a JSON OpenSearch query (match, match_phrase, bool, ...).
            size: How many hits to return.

        Returns:
            The hits as text, or a line starting with "Error:".
        """
        if not self._budget_left():
            return f"Error: tool call budget of {self._max_tool_calls} calls is used up; answer now."
        return self._tools.search(query, size)

    def open_doc(self, doc_id: str, offset: int = 0) -> str:
        """Read a document by its doc_id, one page at a time.

        Args:
            doc_id: The doc_id from a search hit.
            offset: Character offset to start reading from (0 = beginning).

        Returns:
            A page of the document and the offset to continue from, or a line starting with "Error:".
        """
        if not self._budget_left():
            return f"Error: tool call budget of {self._max_tool_calls} calls is used up; answer now."
        return self._tools.open_doc(doc_id, offset)

    @property
    def tool_calls_made(self) -> int:
        """Calls made in this episode (a property, so TRL does not list it as a tool)."""
        return self._calls


def tool_methods(environment) -> dict[str, Callable]:
    """The tools TRL would expose for this instance: public functions of its class but reset/get_reward."""

    return {
        name: getattr(environment, name)
        for name, _ in inspect.getmembers(type(environment), predicate=inspect.isfunction)
        if name not in ("reset", "get_reward") and not name.startswith("_")
    }


def make_environment_factory(task, index) -> Callable[[], SearchEnvironment]:
    """Zero-argument factory for ``environment_factory``: opens the index once, shares it across instances.

    ``index``: an index folder / OpenSearch target for ``tansaku.envs.search.open_index``, or an opened backend.
    """
    if isinstance(index, str) or hasattr(index, "__fspath__"):
        from tansaku.envs.search import open_index

        backend = open_index(str(index))
    else:
        backend = index
    tools_config = dict(task.tools_config)
    max_tool_calls = task.max_tool_calls

    def environment_factory() -> SearchEnvironment:
        return SearchEnvironment(backend, tools_config, max_tool_calls)

    return environment_factory
