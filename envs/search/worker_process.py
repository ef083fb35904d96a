"""What a search worker process runs: open the index read-only, say ``{"ready": identity}``, then answer one
JSON line per request line on stdin until it closes (the protocol and the pool: ``workers``).

    python -c "import sys; from tansaku.envs.search.worker_process import serve; serve(sys.argv[1])" INDEX_DIR

Its own module, apart from the pool (``workers``) that ``embedded`` imports: the worker opens an
``EmbeddedBackend``, so it imports ``embedded``, and neither of those imports it.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time

from tansaku.core import jsontext

from .dsl_limits import Limits
from .embedded import EmbeddedBackend
from .workers import WORKER_NICE, index_identity


def serve(index_dir: str) -> None:
    """The worker: answer requests from stdin until it closes."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's; the worker ends with its stdin
    if hasattr(os, "nice"):
        os.nice(WORKER_NICE)
    out = os.fdopen(os.dup(1), "wb")  # the answers; anything else printed to stdout goes to stderr (nowhere)
    os.dup2(2, 1)

    def say(message: dict) -> None:
        out.write(jsontext.dumps(message).encode("utf-8") + b"\n")
        out.flush()

    try:
        backend = EmbeddedBackend(index_dir, Limits(timeout_ms=0))
    except Exception as e:  # noqa: BLE001 - reported to the parent, which raises it as a QueryError
        say({"error": " ".join(str(e).split())[:300]})
        return
    say({"ready": index_identity(index_dir)})
    for line in sys.stdin.buffer:
        request = json.loads(line)
        if time.time() > request["deadline"]:
            say({"expired": True})
            continue
        try:
            query = backend.translate(request["query"])
            hits = backend.searcher.search(query, request["limit"], count=False).hits
            say({"hits": [[score, a.segment_ord, a.doc] for score, a in hits]})
        except ValueError as e:  # tantivy refuses a query it cannot run
            say({"error": " ".join(f"the engine refused it ({e})".split())[:300]})
        except Exception as e:  # noqa: BLE001 - a bug: said as one line rather than a dead worker
            say({"error": " ".join(f"the search worker failed ({type(e).__name__}: {e})".split())[:300]})
