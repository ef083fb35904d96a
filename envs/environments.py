"""The search tools, as TRL's environment class: ``GRPOTrainer(environment_factory=…)`` and every other
episode.

``SearchEnvironment`` is the only tool implementation. RL (TRL 1.16), eval (``tansaku.envs.evaluate``),
teacher rollouts (``pipelines/trajectories``) and solvability checks (``pipelines/multihop``) all get one
instance per episode from an ``EnvironmentFactory`` and call ``reset(**row)``; ``tansaku.envs.rollout``
mimics TRL there, ``call_tool`` included (a raised ``ToolError`` becomes ``{'error': …}``, as in TRL).

Per-episode tool descriptions: ``reset`` draws a description variant (``tansaku.envs.tools.draw_variant``,
stable per row and seed; ``variant=`` or ``ToolsConfig.description_variant`` fixes it) and binds
``search``/``open_doc`` as *instance* functions carrying that variant's docstrings. An omitted ``size``
means the task's ``top_k`` (stated in the description: schemas carry no defaults; ``None`` rather than
``top_k`` in the signature so a ``"size"`` inside a JSON query body still counts). ``tool_methods`` /
``tool_schemas`` read what the model is shown; ``tool_variant`` records which variant it was.

Per-episode tool interfaces (opt-in, ``tansaku.envs.tool_interfaces``): with
``ToolsConfig.interface_variants`` = 2, ``reset`` also draws an interface (``draw_interface``: stable per row
and seed, independent of the description draw; ``interface=`` or ``ToolsConfig.interface_variant`` fixes it).
Interface 0 is this class, ``search(query, size)`` / ``open_doc(doc_id, offset)``; interface 1 is
``FindReadEnvironment``, ``find(keywords: list[str], top_k)`` / ``read(doc_id, page)``, the same backend calls
and replies. TRL lists tool names on the *class*, so the instance takes its interface's class (``_bind`` sets
``__class__``; the subclass hides ``search``/``open_doc`` behind non-functions): ``type(env)`` lists exactly
the drawn tools, and a call in the other interface's shape (``search`` on interface 1, ``find(query=…)``)
fails like any other tool error. ``tool_interface`` records it; ``episode_prompt`` renames the tools a system
prompt mentions (``search で…`` → ``find で…``), as RL's dataset, eval/teacher rollouts and SFT rows all do.

How TRL 1.16 (``trl/trainer/grpo_trainer.py``) uses this class, and why RL passes one factory per variant:
* ``__init__`` (l. 685-704) calls each factory once (a probe instance), lists the tool names on the *class*
  (``inspect.getmembers(type(instance), isfunction)``, minus ``reset``/``get_reward``/``_…``) and keeps
  ``getattr(instance, name)`` — our instance functions — as ``_env_tools[env name]``.
* ``_tokenize_prompts`` (l. 1707-1713) renders every prompt with ``_env_tools[its env name]``: the probe's
  schemas, read once. A variant drawn later in ``reset`` never reaches a TRL prompt.
* Per batch (l. 2364-2383) it builds the callables from each pooled instance, then calls ``reset(**row)``
  (l. 2385-2389, ``environment`` column left out); a tool that raises counts in ``tools/failure_frequency``
  (l. 1980-1990, 2312-2320) and its content is ``str({"error": str(e)})`` (l. 1989, 2018).
So with a single factory every prompt shows one fixed variant (and one class: one interface; worse, TRL takes
a batch's callables before ``reset``, which may then switch an instance to another interface's class).
``tansaku.trainer.rl`` passes ``variant_factories`` instead — one factory per (description variant,
interface), ``{"<task>@tools-v<d>": factory}`` for interface 0 and ``"<task>@tools-v<d>-i<k>"`` for the
others — with an ``environment`` column drawn per row by ``episode_variant`` / ``episode_interface`` (the
draws ``reset`` makes), so each row's prompt carries its variant and its interface.

No ``get_reward`` on purpose: TRL would add it as an extra reward with weight 1, outside the task's weights.

    from tansaku.envs.environments import make_environment_factory
    factory = make_environment_factory(TASKS["multihop_qa"], "out/index")
    env = factory(); env.reset(**row); env.search("白砂市"); env.tool_variant; tool_schemas(env)
    task = replace(task, tools_config={**task.tools_config, "interface_variants": 2})  # find/read too
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tansaku.core.errors import InputError
from tansaku.envs.search import open_index
from tansaku.envs.tool_interfaces import INTERFACES, check_interfaces, draw_interface, interface_prompt
from tansaku.envs.tools import (
    N_VARIANTS,
    ToolError,
    ToolsConfig,
    draw_variant,
    keyword_search_text,
    numbered_page_text,
    page_text,
    search_text,
    tool_docstrings,
)


def episode_key(row: dict) -> str:
    """What identifies a row for the variant draw: its id, else its question or instruction."""
    return str(row.get("id") or row.get("question") or row.get("instruction") or "")


def require_prompt(row: dict) -> None:
    """Refuse a row TRL would roll out with an empty user turn: TRL defaults a missing ``prompt`` to
    ``[{"role": "user", "content": ""}]`` when an environment is given, and trains on it without a word."""
    prompt = row.get("prompt")
    users = [m.get("content") for m in prompt if isinstance(m, dict) and m.get("role") == "user"] \
        if isinstance(prompt, list) else []
    if not users or not any(isinstance(c, str) and c.strip() for c in users):
        what = "no prompt column" if prompt is None else "a prompt without a non-empty user turn"
        raise InputError(f"row {episode_key(row)[:60]!r} has {what}: build the dataset with this tansaku "
                         "(synth build … writes `prompt`) or add it with TASKS[task].to_trl_rows(rows)")


class _NotATool:
    """A class attribute hiding an inherited tool: not a function, so neither TRL nor ``tool_methods`` lists
    it; called directly, it fails as a tool error."""

    def __set_name__(self, owner, name):
        self.name, self.owner = name, owner

    def __call__(self, *args, **kwargs):
        raise ToolError(f"{self.name} is not a tool of this episode; its tools are "
                        f"{' and '.join(INTERFACES[self.owner.interface])}.")


class SearchEnvironment:
    """One episode's tools over a shared backend: config, description variant, interface, call budget.

    This class is interface 0 (``search``/``open_doc``); ``FindReadEnvironment`` is interface 1. An instance
    takes the class of its episode's interface (``_bind``), so ``type(env)`` lists exactly its tools."""

    interface = 0

    def __init__(self, backend, tools_config: dict | ToolsConfig | None = None, max_tool_calls: int = 16,
                 variant: int | None = None, seed: int = 0, require_prompt: bool = False,
                 interface: int | None = None):
        config = (tools_config if isinstance(tools_config, ToolsConfig)
                  else ToolsConfig(**(tools_config or {})))
        fixed = variant if variant is not None else config.description_variant
        if fixed is not None and not 0 <= fixed < N_VARIANTS:
            raise ValueError(f"variant must be in 0..{N_VARIANTS - 1}, got {fixed}")
        fixed_interface = interface if interface is not None else config.interface_variant
        check_interfaces(config.interface_variants, fixed_interface)
        self._backend, self._config, self._max_tool_calls = backend, config, max_tool_calls
        self._fixed_variant, self._seed, self._require_prompt = fixed, seed, require_prompt
        self._fixed_interface = fixed_interface
        self._calls, self._variant, self._interface = 0, None, None
        # Before any reset (TRL's probe instance): the fixed variant/interface, else the draws for an empty
        # row.
        self._bind(*self._draw(""))

    def _draw(self, key: str) -> tuple[int, int]:
        """(description variant, interface) of the episode of row key ``key``."""
        variant = self._fixed_variant if self._fixed_variant is not None else draw_variant(key, self._seed)
        interface = (self._fixed_interface if self._fixed_interface is not None
                     else draw_interface(key, self._seed, self._config.interface_variants))
        return variant, interface

    def _bind(self, variant: int, interface: int = 0) -> None:
        """Take ``interface``'s class and shadow its tools with instance functions carrying ``variant``'s
        descriptions (the signatures are the interface's: a call in another shape is a TypeError)."""
        if (variant, interface) == (self._variant, self._interface):
            return
        for name in INTERFACES[self._interface or 0]:
            self.__dict__.pop(name, None)
        if type(self).interface != interface:  # a subclass of the right interface is kept
            self.__class__ = ENVIRONMENT_CLASSES[interface]
        self._variant, self._interface = variant, interface
        docs = tool_docstrings(variant, self._config, interface)
        for function in self._tool_functions():
            function.__doc__ = docs[function.__name__]
            function.__qualname__ = function.__name__  # TypeErrors the model reads say "search()", not a path
            setattr(self, function.__name__, function)  # getattr(instance, name), as TRL does, finds these

    def _tool_functions(self) -> tuple[Callable, ...]:
        def search(query: str, size: int | None = None) -> str:
            return type(self).search(self, query, size)

        def open_doc(doc_id: str, offset: int = 0) -> str:
            return type(self).open_doc(self, doc_id, offset)

        return search, open_doc

    def reset(self, /, **row) -> str | None:
        """Start an episode for one dataset row: fresh call budget, this episode's description variant and
        interface. With ``require_prompt`` (factories' default) a row without a non-empty user turn is
        refused. ``self`` is positional-only: a row may have a field named ``self`` (TRL and ``serve-env``
        pass the row as keywords)."""
        if self._require_prompt:
            require_prompt(row)
        self._calls = 0
        self._bind(*self._draw(episode_key(row)))
        return None

    def _spend(self) -> None:
        self._calls += 1
        if self._calls > self._max_tool_calls:
            raise ToolError(f"tool call budget of {self._max_tool_calls} calls is used up; answer now.")

    # The class methods give TRL the tool names; each instance replaces them in _bind (see there).
    def search(self, query: str, size: int | None = None) -> str:
        """Search the document collection (the episode's variant replaces this description).

        Args:
            query: Plain-text keywords or a JSON OpenSearch query.
            size: How many hits to return (default: the task's top_k).

        Returns:
            Ranked hits with doc_id, title and snippet.
        """
        return self._search(query, size)

    def open_doc(self, doc_id: str, offset: int = 0) -> str:
        """Read a document by doc_id, one page at a time (the episode's variant replaces this description).

        Args:
            doc_id: The doc_id from a search hit.
            offset: Character offset to start reading from (0 = beginning).

        Returns:
            A page of the document and the offset to continue from.
        """
        return self._open_doc(doc_id, offset)

    # What a call does, apart from what the model sees (a served episode, remote_env, answers elsewhere).
    def _search(self, query: str, size: int | None) -> str:
        self._spend()
        return search_text(self._backend, self._config, query, size)

    def _open_doc(self, doc_id: str, offset: int) -> str:
        self._spend()
        return page_text(self._backend, self._config, doc_id, offset)

    # Properties, not methods: TRL would list a public method as a tool.
    @property
    def tool_variant(self) -> int:
        """The description variant this episode's model sees."""
        return self._variant

    @property
    def tool_interface(self) -> int:
        """The tool interface this episode's model sees (0: search/open_doc, 1: find/read)."""
        return self._interface

    @property
    def tools_config(self) -> ToolsConfig:
        return self._config

    @property
    def tool_calls_made(self) -> int:
        """Calls made in this episode."""
        return self._calls


class FindReadEnvironment(SearchEnvironment):
    """Interface 1: ``find(keywords, top_k)`` and ``read(doc_id, page)``, over the same backend calls and
    replies (``tools.keyword_search_text`` / ``numbered_page_text``); interface 0's tools are hidden."""

    interface = 1
    search = _NotATool()
    open_doc = _NotATool()

    def _tool_functions(self) -> tuple[Callable, ...]:
        def find(keywords: list[str], top_k: int | None = None) -> str:
            return type(self).find(self, keywords, top_k)

        def read(doc_id: str, page: int = 0) -> str:
            return type(self).read(self, doc_id, page)

        return find, read

    def find(self, keywords: list[str], top_k: int | None = None) -> str:
        """Search the document collection by keywords (the episode's variant replaces this description).

        Args:
            keywords: Keywords to search for, as a list of strings.
            top_k: How many hits to return (default: the task's top_k).

        Returns:
            Ranked hits with doc_id, title and snippet.
        """
        self._spend()
        return keyword_search_text(self._backend, self._config, keywords, top_k)

    def read(self, doc_id: str, page: int = 0) -> str:
        """Read a document by doc_id, one numbered page at a time (the episode's variant replaces this).

        Args:
            doc_id: The doc_id from a search hit.
            page: Page number to read (0 = first page).

        Returns:
            A page of the document and the next page number.
        """
        self._spend()
        return numbered_page_text(self._backend, self._config, doc_id, page)


# by interface number (tool_interfaces.INTERFACES)
ENVIRONMENT_CLASSES = (SearchEnvironment, FindReadEnvironment)


def tool_methods(environment) -> dict[str, Callable]:
    """The tools TRL exposes for this instance: names of the class's public functions but reset/get_reward,
    values looked up on the instance (so ``SearchEnvironment``'s per-episode functions)."""
    return {
        name: getattr(environment, name)
        for name, _ in inspect.getmembers(type(environment), predicate=inspect.isfunction)
        if name not in ("reset", "get_reward") and not name.startswith("_")
    }


def tool_schemas(environment) -> list[dict]:
    """The JSON tool schemas the model is shown for this instance (what transformers' chat template gets)."""
    from transformers.utils import get_json_schema

    return [get_json_schema(f) for f in tool_methods(environment).values()]


def call_tool(functions: dict[str, Callable], name: str, arguments) -> tuple[str, bool]:
    """Run one tool call exactly as TRL 1.16's tool loop does: ``(content the model reads, failed)``.

    Any exception (``ToolError``, wrong argument names, unknown tool) is a failure whose content is
    ``str({"error": message})``, the text TRL writes and ``tansaku.core.parsing.is_tool_error`` recognizes.
    """
    try:
        function = functions.get(name)
        if function is None:
            raise ValueError(f"Tool {name} not found.")
        result = function(**arguments)
    except Exception as e:
        return str({"error": str(e)}), True
    return (result if isinstance(result, list) else str(result)), False


def open_backend(index):
    """An opened search backend from an index folder / OpenSearch target, or ``index`` itself if already
    open."""
    if isinstance(index, (str, Path)):
        return open_index(str(index))
    return index


@dataclass
class EnvironmentFactory:
    """Zero-argument callable for TRL's ``environment_factory`` and ``run_rollouts``: one fresh environment
    per call, all sharing one backend. ``variant`` / ``interface``: fix the description variant / the tool
    interface (else drawn at ``reset``). ``require_prompt``: ``reset(**row)`` refuses a row without a
    ``prompt`` whose user turn has text."""

    backend: object
    config: ToolsConfig
    max_tool_calls: int = 16
    variant: int | None = None
    seed: int = 0
    require_prompt: bool = True
    interface: int | None = None

    def __call__(self) -> SearchEnvironment:
        return SearchEnvironment(self.backend, self.config, self.max_tool_calls, self.variant, self.seed,
                                 self.require_prompt, self.interface)


def make_environment_factory(task, index, variant: int | None = None, seed: int = 0,
                             require_prompt: bool = True, interface: int | None = None) -> EnvironmentFactory:
    """The task's environments (its ``tools_config`` and ``max_tool_calls``) over ``index``.

    ``index``: an index folder / OpenSearch target for ``tansaku.envs.search.open_index``, or an opened
    backend. ``seed`` changes which variant (and interface) each row draws.
    """
    return EnvironmentFactory(open_backend(index), ToolsConfig(**task.tools_config), task.max_tool_calls,
                              variant, seed, require_prompt, interface)


def task_variants(task) -> list[int]:
    """The description variants a task's episodes can show: all, or the one its ``tools_config`` fixes."""
    fixed = task.tools_config.get("description_variant")
    return [fixed] if fixed is not None else list(range(N_VARIANTS))


def task_interfaces(task) -> list[int]:
    """The tool interfaces a task's episodes can show: the one its ``tools_config`` fixes, else the first
    ``interface_variants`` (default 1: interface 0 only)."""
    config = ToolsConfig(**task.tools_config)
    fixed = config.interface_variant
    return [fixed] if fixed is not None else list(range(config.interface_variants))


def episode_variant(task, row: dict, seed: int = 0) -> int:
    """The variant ``reset(**row)`` draws for ``row`` in the task's environments (fixed one if configured)."""
    fixed = task.tools_config.get("description_variant")
    return fixed if fixed is not None else draw_variant(episode_key(row), seed)


def episode_interface(task, row: dict, seed: int = 0) -> int:
    """The interface ``reset(**row)`` draws for ``row`` in the task's environments (fixed one if
    configured)."""
    config = ToolsConfig(**task.tools_config)
    fixed = config.interface_variant
    return fixed if fixed is not None else draw_interface(episode_key(row), seed, config.interface_variants)


def variant_factories(task, index) -> dict[tuple[int, int], EnvironmentFactory]:
    """``{(variant, interface): factory with both fixed}`` over one backend, for TRL (see module
    docstring)."""
    backend = open_backend(index)
    return {(v, i): make_environment_factory(task, backend, variant=v, interface=i)
            for v in task_variants(task) for i in task_interfaces(task)}


def episode_prompt(environment, prompt: list[dict]) -> list[dict]:
    """``prompt`` as this episode shows it: system messages name the tools of its interface
    (``tool_interfaces.interface_prompt``; unchanged for interface 0)."""
    return interface_prompt(prompt, getattr(environment, "tool_interface", 0) or 0)
