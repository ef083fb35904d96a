"""``synth build corpus``: a document collection → a normalized document dataset (``id, title, text, url,
source, meta``) in the store.

Modules: ``config`` (``CorpusConfig``: every setting of the build), ``readers`` (one reader per input
format: jsonl, CirrusSearch dumps, WikipediaAnnotatedCorpus, JaQuAD), ``build`` (normalization, dedup, the
pipeline and ``build_corpus``).

    from tansaku.pipelines.corpus.build import build_corpus
    from tansaku.pipelines.corpus.config import CorpusConfig
    build_corpus(CorpusConfig(input="examples/miniwiki.jsonl", format="jsonl"), out="out/corpus")
"""
