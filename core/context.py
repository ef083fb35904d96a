"""``BuildContext``: how one build runs, as opposed to what it makes: the shard plan, the LLM client options,
progress output. The config object (``tansaku.core.build_config``) says *what* a build makes and is its
recipe; the context never changes a row, so it is not fingerprinted.

Every builder takes one, passed down explicitly to ``build_dataset`` and to the clients it builds; nothing is
kept per process, so two builds with different settings in one process (or in two threads) never see each
other's plan or keys:

    from tansaku.core.context import BuildContext
    from tansaku.core.llm.settings import LLMOptions
    from tansaku.core.shards import ShardPlan

    context = BuildContext(shards=ShardPlan.from_options("0/4"), llm=LLMOptions(concurrency=16), quiet=True)
    build_multihop(MultihopConfig(corpus="out/corpus"), out="out/mh-s0", context=context)

>>> BuildContext().nested("articles").shards.sub, BuildContext(quiet=True).whole().quiet
('articles', True)
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from tansaku.core.llm import as_client
from tansaku.core.llm.settings import LLMOptions
from tansaku.core.shards import ShardPlan


@dataclass(frozen=True)
class BuildContext:
    """The shard plan (``--shard`` / ``--from-shards``), the LLM options (``--no-cache``, ``--api-key``,
    ``--extra-body``, ``--concurrency``, ``--llm-option``) and ``quiet`` (``-q``) of one build."""

    shards: ShardPlan = field(default_factory=ShardPlan)
    llm: LLMOptions = field(default_factory=LLMOptions)
    quiet: bool = False

    def client(self, spec_or_client):
        """A client from an LLM spec with these options (a client, or None, as it is)."""
        return as_client(spec_or_client, llm_options=self.llm)

    def nested(self, sub: str) -> BuildContext:
        """The context of a build a pipeline nests at ``--out/sub`` (its shards lie at ``…/sub`` too)."""
        return replace(self, shards=self.shards.under(sub))

    def whole(self) -> BuildContext:
        """The context of a build that runs whole whatever the plan (no shard, no merge)."""
        return replace(self, shards=ShardPlan())
