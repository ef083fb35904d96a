"""tansaku's search tasks in other trainers' environment interfaces (optional extras).

``episode`` steps one task episode a model turn at a time, exactly as ``train eval``'s rollout loop runs it
(no optional dependency). ``openenv_env`` serves it through OpenEnv (``pip install 'tansaku[openenv]'``),
``verifiers_env`` loads it as a ``verifiers`` environment (``tansaku[verifiers]``). Each module imports its
library only when its classes are first built, so the package imports without the extras.
"""
