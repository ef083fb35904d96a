"""tansaku (探索): post-training toolkit for Japanese agentic-search LLMs.

The repository root is this package: ``core/`` (what every layer uses), ``envs/`` (search, tools, tasks,
rewards), ``pipelines/`` (data synthesis), ``trainer/`` (TRL SFT / GRPO / GSPO), ``demo.py`` and ``cli.py``
install as ``tansaku.core``, ``tansaku.envs``, … so nothing but the name ``tansaku`` lands in site-packages.

    import tansaku
    tansaku.__version__
"""

from importlib import metadata as _metadata

try:
    __version__ = _metadata.version("tansaku")
except _metadata.PackageNotFoundError:  # running from a checkout that was never installed
    __version__ = "0+unknown"
