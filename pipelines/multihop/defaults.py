"""What ``config`` and the stage modules share: the build's stage names and the defaults of the chain caps and
the cardinality test.

    from tansaku.pipelines.multihop.defaults import STAGES, DEFAULT_THRESHOLD

Its own module, importing nothing: ``config`` reads these without importing polars (``synth --help``), and the
stage modules (``build``, ``chains``, ``cardinality``) import them without importing ``config``, which imports
those modules when a value is checked, so no two of them import each other.
"""

STAGES = ("triples", "link", "cardinality", "chains", "questions", "quality", "prefilter", "solve",
          "finalize")
MAX_PER_SUBJECT, MAX_PER_BRIDGE, MAX_PER_RELATION_PAIR = 3, 10, 50  # chains.Caps (0 = no cap)
DEFAULT_THRESHOLD = 0.9  # share of a relation's subjects with one object that makes it 1:1 / N:1
DEFAULT_CONFIDENCE = 0.95  # of the interval that decides whether a relation's class can be told from the data
