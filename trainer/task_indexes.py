"""``index: auto`` for ``train rl``: each task's search index built once from its ``corpus`` under the run's
``output_dir`` (``<output_dir>/index/<task>``), so ``train rl --config trainer/recipes/rl-tiny.yaml`` needs no
manual indexing step. Called by ``tansaku.trainer.rl.run_rl`` before anything loads a model.
"""

from __future__ import annotations

from pathlib import Path

from tansaku.core import ownership
from tansaku.core.store import StoreError, read_records
from tansaku.envs.search import build_index
from tansaku.envs.search.embedded import build_embedded
from tansaku.trainer.recipes import Recipe, RecipeError, auto_index_dir


def ensure_indexes(recipe: Recipe) -> list[str]:
    """Build each task's ``index: auto`` folder from its ``corpus`` when absent; return the folders built.

    A folder that is not a finished tansaku index (``ownership.is_index``) but holds something: refused, not
    overwritten.
    """
    built = []
    for spec in recipe.script_args.tasks:
        if not spec.corpus or spec.index != auto_index_dir(recipe.training_args.output_dir, spec.name):
            continue
        index = Path(spec.index)
        if ownership.is_index(index):
            continue
        if index.exists() and (not index.is_dir() or any(index.iterdir())):
            raise RecipeError(f"task {spec.name}: {index} exists but is not a finished index; remove it to "
                              f"rebuild")
        corpus = Path(spec.corpus)
        if not corpus.exists():
            raise RecipeError(f"task {spec.name}: corpus {corpus} not found")
        if corpus.is_dir():
            build_index(corpus, index)
        else:  # a document .jsonl/.parquet file: the rows themselves (build_index reads dataset folders)
            try:
                rows = read_records(corpus)
            except StoreError as exc:
                raise RecipeError(f"task {spec.name}: corpus {exc}") from None
            build_embedded(rows, index, source_name=str(corpus), quiet=True)
        built.append(str(index))
    return built
