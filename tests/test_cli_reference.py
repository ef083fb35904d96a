"""docs/cli.md is the ``--help`` of every command as it is now: regenerate it with
``.venv/bin/python docs/make_cli_reference.py`` after changing an option.

    pytest tests/test_cli_reference.py -q
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_cli_reference_is_current():
    done = subprocess.run([sys.executable, str(ROOT / "docs" / "make_cli_reference.py"), "--check"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
