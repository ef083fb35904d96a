"""Memory of a live ``synth serve-env`` under oversized bodies and a flood of seeds (issue 47: ten 20 MB seeds grew
the server from 406 MB to 660 MB for good, and one client could pin hundreds of GB at the defaults).

The server runs in its own process (uvicorn, one worker, the defaults but ``--max-client-episodes``); its RSS
(``/proc/PID/status``) is read before, after ``--posts`` bodies of ``--mb`` MB each (half with a Content-Length,
half chunked without one), and after ``--seeds`` ordinary seeds from one client. Printed: each phase's statuses
and RSS; a bounded server answers 413 and 429 and keeps its RSS within a few MB.

    python bench/serve_env_memory.py                    # 10 × 20 MB posts, 2,000 seeds
    python bench/serve_env_memory.py --posts 20 --mb 50 --seeds 5000
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tansaku.testing.canned_server import free_port, wait_for_health  # noqa: E402

MB = 1 << 20
ROW = {"id": "q1", "question": "暁瀬県の県庁所在地は？", "answer": "雫ヶ丘市"}


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _status(sock: socket.socket) -> int | None:
    """The status code of the response on ``sock``, or None when the server closed without one."""
    sock.settimeout(30)
    try:
        head = sock.recv(65536)
    except OSError:
        return None
    return int(head.split(b" ", 2)[1]) if head.startswith(b"HTTP/") else None


def post_big(port: int, size: int, chunked: bool) -> int | None:
    """POST ``size`` bytes of JSON text to /seed_session over a raw socket, sending until the server stops
    taking them (it may answer 413 and close before the body is through); the status it answered."""
    with socket.create_connection(("127.0.0.1", port)) as sock:
        framing = b"Transfer-Encoding: chunked" if chunked else f"Content-Length: {size}".encode()
        sock.sendall(b"POST /seed_session HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n"
                     + framing + b"\r\n\r\n")
        piece = b"x" * MB
        try:
            for _ in range(size // MB):
                sock.sendall(f"{len(piece):x}\r\n".encode() + piece + b"\r\n" if chunked else piece)
            if chunked:
                sock.sendall(b"0\r\n\r\n")
        except OSError:  # the server answered and closed: the rest was never read
            pass
        return _status(sock)


def seed(port: int) -> int | None:
    body = json.dumps(ROW, ensure_ascii=False).encode()
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(b"POST /seed_session HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n"
                     + f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body)
        return _status(sock)


def prepare(work: Path) -> Path:
    """A small index (the search tests' fixture documents): what is measured is the HTTP layer, not the search."""
    import importlib.util

    from tansaku.envs.search import build_index

    if not (work / "index").exists():
        spec = importlib.util.spec_from_file_location("fixture", ROOT / "tests" / "fixtures" / "search" / "dataset.py")
        fixture = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(fixture)
        fixture.write_dataset(work / "docs")
        build_index(work / "docs", work / "index")
    return work / "index"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--posts", type=int, default=10)
    parser.add_argument("--mb", type=int, default=20)
    parser.add_argument("--seeds", type=int, default=2000)
    parser.add_argument("--max-client-episodes", type=int, default=500)
    parser.add_argument("--work", type=Path, default=Path("/tmp/tansaku-bench-env-memory"))
    args = parser.parse_args(argv)
    index = prepare(args.work)
    port = free_port()
    server = subprocess.Popen([sys.executable, "-c", "import sys; from tansaku.cli import synth_app; "
                               "sys.argv[0] = 'synth'; synth_app()", "serve-env", "--task", "multihop_qa",
                               "--index", str(index), "--port", str(port),
                               "--max-client-episodes", str(args.max_client_episodes)],
                              cwd=ROOT, stderr=subprocess.DEVNULL)
    try:
        wait_for_health(f"http://127.0.0.1:{port}")
        seed(port)  # one ordinary episode first: the RSS before counts what serving one costs
        rows = [("started", "", rss_mb(server.pid))]
        started = time.perf_counter()
        statuses = Counter(post_big(port, args.mb * MB, chunked=i % 2 == 1) for i in range(args.posts))
        rows.append((f"{args.posts} × {args.mb} MB posts ({time.perf_counter() - started:.1f} s)",
                     dict(statuses), rss_mb(server.pid)))
        statuses = Counter(seed(port) for _ in range(args.seeds))
        rows.append((f"{args.seeds} seeds from one client", dict(statuses), rss_mb(server.pid)))
        time.sleep(1.0)
        rows.append(("1 s later", "", rss_mb(server.pid)))
    finally:
        server.kill()
        server.wait()
    print("| phase | statuses | RSS MB |\n|---|---|---|")
    for phase, seen, rss in rows:
        print(f"| {phase} | {seen} | {rss:.0f} |")


if __name__ == "__main__":
    main()
