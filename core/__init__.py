"""What every layer of tansaku uses: LLM backends and their cache, the dataset store and pipeline engine,
progress bars, errors, the model-output parser, Japanese analysis and the tiny test model.

Nothing in ``tansaku.core`` imports ``envs``, ``pipelines``, ``trainer`` or the CLI (an import-linter
contract in CI holds that).
"""
