"""SFT trajectories (issue 8): teacher rollouts → correct only → Japanese reasoning → scenario rewrites →
byte-identity + replay checks → HF chat rows → mix with a general chat set.

Entry point: ``tansaku.pipelines.trajectories.build.build_trajectories`` (CLI: ``synth build trajectories``).
Modules: ``config`` (``TrajectoriesConfig``: every setting), ``teacher`` (rollouts), ``filter`` (correct
only), ``rewrite`` (LLM rewrites, scenario catalog ``scenarios.yaml``, prompts in ``prompts/``), ``language``
(every rewritten step is Japanese), ``verify`` (byte identity, replay), ``format`` (chat rows), ``mix``
(agentic + general), ``records`` (failure tagging). Tests: ``pytest tests/test_trajectories_*.py``.
"""
