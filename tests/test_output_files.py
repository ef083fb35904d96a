"""Every single-file output option (declared ``PathType(…, OUTPUT_FILE)``: ``train report --out``, ``synth
serve-env --export`` …) writes only where nothing is, or over a file tansaku can prove it made: a PNG carrying
its ``tansaku`` text chunk (``tansaku.core.output_files``). Anything else at the path — the user's file, a
symbolic link, dangling or not — is refused in one ``error:`` line naming the option, exit 2, and left as it was.

The options are read from the Typer apps by their declared type, so an option added tomorrow is covered the day
it is added; each runs over its command's baseline of the CLI matrix (``tests/fixtures/cli_matrix_commands.py``,
which every command must have) on the matrix's small inputs, in every mode that option means something in.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from fixtures.cli_matrix_commands import BASELINES, MODE_OF, ROOT, build_inputs, set_traps
from fixtures.cli_matrix_kinds import surface
from fixtures.cli_matrix_run import invoke, replace, tree

from tansaku.core import output_files
from tansaku.core.cli_types import PathType
from tansaku.core.errors import InputError
from tansaku.core.value_checks import OUTPUT_FILE

PARAMS = surface()
OUTPUT_FILES = [p for p in PARAMS if isinstance(p.parser, PathType) and p.parser.kind == OUTPUT_FILE]


def _cases():
    for p in OUTPUT_FILES:
        modes = [MODE_OF[p.command, p.name]] if (p.command, p.name) in MODE_OF else [m for m, _ in BASELINES[p.command]]
        for mode in modes:
            yield pytest.param(p, mode, id=f"{p.command.replace(' ', '-')}:{p.opts[0]}:{mode}")


CASES = list(_cases())


@pytest.fixture(scope="module")
def fx(tmp_path_factory):
    return build_inputs(tmp_path_factory.mktemp("output-files-inputs"))


@pytest.fixture
def sandbox(tmp_path, monkeypatch, fx):
    """The run's folders (cwd, home, out, hx: the things a user has), the matrix's traps and quiet settings."""
    for name in ("cwd", "home", "out", "hx"):
        (tmp_path / name).mkdir()
    monkeypatch.chdir(tmp_path / "cwd")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("TANSAKU_CACHE", str(fx.parent / "cache"))
    monkeypatch.setenv("MPLCONFIGDIR", str(fx.parent / "matplotlib"))
    monkeypatch.setenv("TANSAKU_QUIET", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for name in ("TANSAKU_DEBUG", "TANSAKU_ENV_TOKEN", "OPENSEARCH_URL", "OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    set_traps(monkeypatch, [])
    return tmp_path


def _app(command: str):
    from tansaku.cli import synth_app, train_app

    return synth_app if command.split()[0] == "synth" else train_app


def _name(p, mode: str) -> str:
    """The file name the baseline gives the option (its suffix chooses a format), else a PNG's."""
    argv = dict(BASELINES[p.command])[mode]
    given = next((argv[i + 1] for i, t in enumerate(argv[:-1]) if t in p.opts), None)
    return Path(given).name if given else "output.png"


def _run(p, mode: str, target: Path, fx: Path, sandbox: Path):
    params = [q for q in PARAMS if q.command == p.command]
    fill = {"{fx}": str(fx), "{ROOT}": str(ROOT), "{out}": str(sandbox / "out")}
    argv = []
    for token in dict(BASELINES[p.command])[mode]:
        for key, value in fill.items():
            token = token.replace(key, value)
        argv.append(token)
    return invoke(_app(p.command), p.command.split()[1:] + replace(params, argv, p, str(target)))


def _refused(result, p) -> None:
    lines = [line for line in (result.stderr or "").splitlines() if line.strip()]
    assert result.exit_code == 2, (result.exit_code, result.stderr, result.exception)
    assert len(lines) == 1 and lines[0].startswith("error: ") and any(o in lines[0] for o in p.opts), lines


def _png(path: Path, **metadata) -> Path:
    """A PNG matplotlib drew (the user's figure: no tansaku mark unless given)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(1, 1))
    FigureCanvasAgg(figure)
    figure.subplots().plot([1, 2])
    figure.savefig(path, format="png", metadata=metadata or None)
    return path


def _plant(kind: str, path: Path, hx: Path) -> None:
    """What the user has at ``path`` (its targets in ``hx``)."""
    if kind == "user_text":
        path.write_text("the user's notes\n", encoding="utf-8")
    elif kind == "user_png":
        _png(path)
    elif kind == "symlink_to_file":
        (hx / "secret").write_text("keep me\n", encoding="utf-8")
        path.symlink_to(hx / "secret")
    elif kind == "symlink_to_tansaku_png":  # even a link to a file tansaku made: the link is the user's
        _png(hx / "theirs.png", **output_files.PNG_METADATA)
        path.symlink_to(hx / "theirs.png")
    elif kind == "dangling_symlink":
        path.symlink_to(hx / "nowhere")
    elif kind == "empty_file":
        path.touch()
    else:  # pragma: no cover
        raise ValueError(kind)


def test_the_output_file_options_are_found():
    found = {(p.command, p.name) for p in OUTPUT_FILES}
    assert {("synth serve-env", "export"), ("train report", "out")} <= found
    assert all(p.command in BASELINES for p in OUTPUT_FILES), "write a baseline in tests/fixtures/cli_matrix_commands.py"


@pytest.mark.parametrize("kind", ["user_text", "user_png", "empty_file", "symlink_to_file", "symlink_to_tansaku_png",
                                  "dangling_symlink"])
@pytest.mark.parametrize("p, mode", CASES)
def test_what_the_user_has_is_refused_and_untouched(p, mode, kind, fx, sandbox):
    target = sandbox / "out" / _name(p, mode)
    _plant(kind, target, sandbox / "hx")
    before, inputs = tree(sandbox), tree(fx)
    result = _run(p, mode, target, fx, sandbox)
    _refused(result, p)
    assert tree(sandbox) == before and tree(fx) == inputs


@pytest.mark.parametrize("where", ["missing_folder", "under_a_file"])
@pytest.mark.parametrize("p, mode", CASES)
def test_a_path_without_a_folder_to_write_in_is_refused(p, mode, where, fx, sandbox):
    (sandbox / "out" / "a_file").write_text("x", encoding="utf-8")
    folder = sandbox / "out" / ("missing" if where == "missing_folder" else "a_file")
    before = tree(sandbox)
    result = _run(p, mode, folder / _name(p, mode), fx, sandbox)
    _refused(result, p)
    assert tree(sandbox) == before


@pytest.mark.parametrize("p, mode", CASES)
def test_a_fresh_path_is_written_and_only_a_marked_one_written_again(p, mode, fx, sandbox):
    target = sandbox / "out" / _name(p, mode)
    result = _run(p, mode, target, fx, sandbox)
    assert result.exit_code == 0, (result.stderr, result.exception)
    assert target.is_file() and not target.is_symlink() and target.stat().st_size > 0
    assert sorted(os.listdir(target.parent)) == [target.name]  # no temp file left beside it
    first, before = target.read_bytes(), tree(sandbox)
    again = _run(p, mode, target, fx, sandbox)
    if output_files.made_by_tansaku(target):  # a drawing of its own: a rerun draws it again
        assert again.exit_code == 0, (again.stderr, again.exception)
        assert output_files.made_by_tansaku(target) and sorted(os.listdir(target.parent)) == [target.name]
    else:  # nothing in it proves it tansaku's (rows): never written over
        _refused(again, p)
        assert target.read_bytes() == first and tree(sandbox) == before


# ------------------------------------------------------------------------------------- the mechanism itself


def test_a_link_planted_while_working_is_left_and_refused(tmp_path):
    out = tmp_path / "rows.jsonl"
    (tmp_path / "secret").write_text("keep me", encoding="utf-8")
    with pytest.raises(InputError, match="^--export .*symbolic link"):
        with output_files.output_file(out, "--export") as tmp:
            tmp.write_text("rows\n", encoding="utf-8")
            out.symlink_to(tmp_path / "secret")  # after the check at the start, before the write lands
    assert os.readlink(out) == str(tmp_path / "secret") and (tmp_path / "secret").read_text() == "keep me"
    assert sorted(os.listdir(tmp_path)) == ["rows.jsonl", "secret"]  # the temp file is gone


def test_a_file_appearing_between_the_last_check_and_the_link_is_kept(tmp_path, monkeypatch):
    out = tmp_path / "rows.jsonl"
    real_check, calls = output_files._ours_there, []

    def check_then_plant(path, option):
        found = real_check(path, option)
        calls.append(path)
        if len(calls) == 2:  # the check just before publishing passed; the narrowest race: os.link refuses it
            Path(path).write_text("the user's", encoding="utf-8")
        return found

    monkeypatch.setattr(output_files, "_ours_there", check_then_plant)
    with pytest.raises(InputError, match="appeared while tansaku worked"):
        with output_files.output_file(out, "--export") as tmp:
            tmp.write_text("rows\n", encoding="utf-8")
    assert out.read_text(encoding="utf-8") == "the user's" and sorted(os.listdir(tmp_path)) == ["rows.jsonl"]


def test_the_mark_proves_only_a_regular_file_of_ones_own(tmp_path, monkeypatch):
    marked = _png(tmp_path / "marked.png", **output_files.PNG_METADATA)
    assert output_files.made_by_tansaku(marked)
    assert output_files.check_output_file(marked, "--out") == marked
    assert not output_files.made_by_tansaku(_png(tmp_path / "plain.png"))
    assert not output_files.made_by_tansaku(_png(tmp_path / "other.png", Software="tansaku"))  # a value, not the key
    (tmp_path / "short.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00")  # cut short
    assert not output_files.made_by_tansaku(tmp_path / "short.png")
    (tmp_path / "mark.txt").write_bytes(b"tEXttansaku\0")
    assert not output_files.made_by_tansaku(tmp_path / "mark.txt")
    monkeypatch.setattr(output_files, "owned_by_me", lambda st: False)  # another user's drawing
    with pytest.raises(InputError, match="cannot prove it made it"):
        output_files.check_output_file(marked, "--out")


def test_a_python_caller_is_refused_before_any_work(tmp_path, monkeypatch):
    from tansaku.envs import gym_service

    (tmp_path / "rows.jsonl").write_text("mine\n", encoding="utf-8")
    monkeypatch.setattr(gym_service, "make_environment_factory", lambda *a, **k: pytest.fail("work began"))
    with pytest.raises(InputError, match="^--export .* exists and tansaku cannot prove it made it"):
        gym_service.export_rows("multihop_qa", None, tmp_path / "data.jsonl", tmp_path / "rows.jsonl")
    assert (tmp_path / "rows.jsonl").read_text(encoding="utf-8") == "mine\n"
