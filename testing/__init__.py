"""Stand-ins for the services tansaku talks to, kept out of the product layers (core, envs, pipelines,
trainer).

- :mod:`tansaku.testing.canned_server`: an OpenAI-compatible HTTP server with canned or scripted answers
  (``python -m tansaku.testing.canned_server --port 8001``).

It ships in the wheel because installed users need it too: the ``rl-tiny-mixed`` recipe's judge and
``examples/stand_in_llm.py`` are served by it, and the benchmarks start it with ``python -m``. It may import
``tansaku.core``; product code must never import it (an import-linter ``forbidden`` contract in
pyproject.toml).
"""
