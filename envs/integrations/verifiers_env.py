"""tansaku's search tasks as a ``verifiers`` (v1) environment (``pip install 'tansaku[verifiers]'``).

A verifiers taskset: ``vf-eval`` (and prime-rl) load it as ``tansaku_search``, the one-module package in
``examples/verifiers`` (verifiers looks a taskset up by a top-level module name). Its tasks are a tansaku
dataset's rows, each with the task's prompt and the tool schemas of the row's episode (``nemo_gym_row``, as
``synth serve-env --export`` writes them). Its environment serves the task's tools and scoring with tansaku's
own NeMo Gym resources server (``tansaku.envs.gym_service``, started in-process on a free loopback port unless
``--env.taskset.task.resources-url`` names a running ``synth serve-env``), which verifiers' NeMo Gym taskset
drives: each tool call runs tansaku's tools, and the finished episode's reward is ``/verify``, i.e.
``Task.score`` (the rubric judge of ``deepresearch`` given with ``--env.taskset.judge``).

    pip install -e examples/verifiers      # the `tansaku_search` module, after tansaku[verifiers]
    vf-eval tansaku_search --env.taskset.tansaku-task multihop_qa \\
        --env.taskset.dataset out/multihop --env.taskset.index out/index --env.agent.harness.id null \\
        --model Qwen/Qwen3-8B --client.base-url http://gpu1:8000/v1 --no-push

    env = load_environment(task="multihop_qa", dataset="out/multihop", index="out/index")   # in Python

The classes are built on first use (``TansakuTaskset``, ``TansakuEnv`` through the module's ``__getattr__``),
so this module imports without the extra.
"""

from __future__ import annotations

import functools
import threading
import time
from pathlib import Path

from tansaku.core.llm import as_client
from tansaku.envs.environments import make_environment_factory
from tansaku.envs.evaluate import load_rows
from tansaku.envs.gym_service import build_app, nemo_gym_row
from tansaku.envs.tasks import task_named

TASKSET_ID = "tansaku_search"  # the module verifiers' loader imports: examples/verifiers/tansaku_search.py

MISSING = ("verifiers is not installed: pip install 'tansaku[verifiers]' (see pyproject.toml for the "
           "--no-deps install that keeps tansaku's openai client)")


def __getattr__(name: str):
    """``TansakuTaskset``, ``TansakuEnv``, ``TansakuConfig``, built on first use (verifiers' subclasses)."""
    if name in ("TansakuTaskset", "TansakuEnv", "TansakuConfig"):
        return _classes()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class _LoopbackServer:
    """tansaku's resources server under uvicorn in a daemon thread on a free loopback port."""

    def __init__(self, app):
        import socket

        import uvicorn

        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error"))
        self.thread = threading.Thread(target=self.server.run, daemon=True, name="tansaku-resources-server")

    def start(self) -> str:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError(f"tansaku's resources server at {self.url} did not start")
            time.sleep(0.02)
        return self.url

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


@functools.cache
def _classes() -> dict:
    try:
        from verifiers.v1.dialects.responses import ResponsesDialect
        from verifiers.v1.taskset import Taskset
        from verifiers.v1.tasksets.nemo_gym import (
            NeMoGymConfig,
            NeMoGymData,
            NeMoGymEnv,
            NeMoGymTask,
            NeMoGymTaskset,
        )
    except ImportError as exc:
        raise ImportError(MISSING) from exc

    class TansakuConfig(NeMoGymConfig):
        # a tansaku dataset folder (or .jsonl/.json/.parquet rows); a default, as the CLI builds a bare config
        dataset: Path = Path()
        index: str = ""  # the search index folder / OpenSearch target the tools search
        tansaku_task: str = "multihop_qa"  # a TASKS name
        split: str = "test"
        judge: str | None = None  # LLM spec of the rubric judge (deepresearch)
        seed: int = 0  # the tool-variant draw's, as train rl / train eval --seed

    class TansakuTaskset(NeMoGymTaskset, Taskset[NeMoGymTask, TansakuConfig]):
        def load(self):
            config = self.config
            if config.dataset == Path():
                raise ValueError("set --env.taskset.dataset (a tansaku dataset folder or rows file)")
            task = task_named(config.tansaku_task)
            # No backend: building a row's prompt and tool schemas searches nothing.
            factory = make_environment_factory(task, None, seed=config.seed, require_prompt=False)
            dialect = ResponsesDialect()
            for i, row in enumerate(load_rows(config.dataset, split=config.split)):
                nemo_row = nemo_gym_row(task, row, factory)
                request = dialect.parse_request(nemo_row["responses_create_params"])
                name = str(row.get("id") or f"{task.name}:{i}")
                yield NeMoGymTask(NeMoGymData(name=name, prompt=request.messages, row=nemo_row), config.task)

    return {"TansakuConfig": TansakuConfig, "TansakuTaskset": TansakuTaskset,
            "TansakuEnv": _env_class(NeMoGymEnv)}


def _env_class(base):
    """``TansakuEnv``: verifiers' NeMo Gym env (``base``) whose resources server is tansaku's own."""

    class TansakuEnv(base):
        """Serves the task with tansaku's resources server for the run (unless a URL is given)."""

        _tansaku_server: _LoopbackServer | None = None

        async def start(self) -> None:
            config = self.taskset.config
            if config.task.resources_url is not None:
                return
            if not config.index:
                raise ValueError("set --env.taskset.index (or --env.taskset.task.resources-url)")
            app = build_app(task_named(config.tansaku_task), config.index, judge=as_client(config.judge),
                            seed=config.seed)
            self._tansaku_server = _LoopbackServer(app)
            config.task.resources_url = self._tansaku_server.start()

        async def stop(self) -> None:
            if self._tansaku_server is None:
                return
            server, self._tansaku_server = self._tansaku_server, None
            self.taskset.config.task.resources_url = None
            server.stop()

    return TansakuEnv


def load_environment(task: str = "multihop_qa", dataset: str | Path = "", index: str | Path = "",
                     split: str = "test", judge: str | None = None, seed: int = 0, **agent):
    """The verifiers ``Env`` of ``task`` over ``dataset``'s ``split`` and ``index`` (what ``vf-eval`` builds
    from the flags in the module docstring; ``tansaku_search`` must be importable). ``agent``: the agent
    seat's config (e.g. ``harness={"id": "null"}``)."""
    _classes()  # ImportError with the install line when the extra is missing
    from verifiers.v1.envs.single_agent import SingleAgentEnvConfig
    from verifiers.v1.utils.loaders import load_environment as vf_load_environment

    taskset = {"id": TASKSET_ID, "tansaku_task": task, "dataset": str(dataset), "index": str(index),
               "split": split, "judge": judge, "seed": seed}
    return vf_load_environment(SingleAgentEnvConfig.model_validate({"taskset": taskset, "agent": agent}))
