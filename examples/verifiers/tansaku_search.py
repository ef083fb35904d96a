"""The verifiers environment package of tansaku's search tasks: what ``vf-eval tansaku_search`` loads.

verifiers finds a taskset by a top-level module name that exports its ``Taskset`` (and ``Env``) via
``__all__``; tansaku installs only the ``tansaku`` package, so this one-module package (``pip install -e
examples/verifiers``, next to ``pip install 'tansaku[verifiers]'``) names them. Everything lives in
``tansaku.envs.integrations.verifiers_env``.

    vf-eval tansaku_search --env.taskset.tansaku-task multihop_qa --env.taskset.dataset out/multihop \\
        --env.taskset.index out/index --env.agent.harness.id null --model M --client.base-url URL --no-push
"""

from tansaku.envs.integrations.verifiers_env import TansakuEnv, TansakuTaskset, load_environment

__all__ = ["TansakuTaskset", "TansakuEnv", "load_environment"]
