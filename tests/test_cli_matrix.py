"""A generated robustness matrix over the whole CLI (issue 48): every option and argument of every ``synth`` and
``train`` command, each given every hostile value of its kind, in turn, over a minimal valid command line.

The parameters are read from the Typer apps and classified by kind (``tests/fixtures/cli_matrix_kinds.py``: an
option placed nowhere fails ``test_every_option_is_classified``); each command's minimal valid line, its
*baseline*, is the one hand-written part (``tests/fixtures/cli_matrix_commands.py``) and must itself succeed.
Each run replaces one parameter's value and must keep the contract:

* exit 0 (the value is usable), or exit 2 with one line naming the option (``error: …``, or click's own usage
  error for a value Typer checks); never a traceback;
* no hang: each run is bounded (RUN_SECONDS), and the hostile FIFO never gets a writer;
* nothing created, changed or removed outside the command's own new output, and that only on exit 0;
* a value never usable is refused before a model would load, a server start or an upload begin: those are
  traps here (``set_traps``), so a ``train`` command with a usable value stops there and counts as accepted.

Runs in this process (CliRunner), each in a fresh folder that is also its working folder and its $HOME. Every
parameter gets every value of its kind (no sampling): about 3,150 runs, 4–5 min wall on a 2-core machine shared
with other work (about 2 min of CPU); the synth builds run for real on tiny fixtures with scripted LLMs.

    pytest tests/test_cli_matrix.py -q                          # everything
    pytest tests/test_cli_matrix.py -q -k train-merge          # one command (ids: command:option:value)
    pytest tests/test_cli_matrix.py -q -s -k coverage          # the count per kind
"""

from __future__ import annotations

import getpass
import os
import shutil
import uuid
from collections import Counter
from pathlib import Path

import pytest
from fixtures.cli_matrix_commands import (
    BASELINES,
    COPIED,
    INPUTS,
    MAY_EXIST,
    MODE_OF,
    OUTPUTS,
    ROOT,
    Reached,
    build_inputs,
    set_traps,
)
from fixtures.cli_matrix_kinds import OUTPUT_KINDS, classify, surface, values_of
from fixtures.cli_matrix_run import (
    AS_ROOT,
    RUN_SECONDS,
    Hang,
    changed,
    invoke,
    make_hostile,
    replace,
    shown,
    tree,
    violations,
)

PARAMS = surface()
BY_COMMAND: dict[str, list] = {}
for _p in PARAMS:
    BY_COMMAND.setdefault(_p.command, []).append(_p)
GROUPS = {"synth": [("version", ["--version"])], "train": [("version", ["--version"])]}  # the apps' own --version
ALL_BASELINES = {**GROUPS, **BASELINES}


def _cases():
    for p in PARAMS:
        kind = classify(p)
        if kind is None:
            continue
        mode = MODE_OF.get((p.command, p.name))
        for value in values_of(p, kind):
            if value.label == "inside_input" and p.command not in INPUTS:
                continue  # every input of this command is a file: there is no folder to aim into
            if value.label == "unreadable" and AS_ROOT:
                continue  # root reads it anyway; "under_a_file" stands in
            yield pytest.param(p, kind, mode, value, id=f"{p.command.replace(' ', '-')}:{p.opts[0]}:{value.label}")


CASES = list(_cases())


# ------------------------------------------------------------------------------------------------------ fixtures


class Inputs:
    """The shared inputs, rebuilt when a run changed them (that run fails; the next ones get clean inputs)."""

    def __init__(self, root: Path):
        self.root, self.builds, self.runs = root, 0, 0
        self.rebuild()

    def rebuild(self) -> None:
        self.builds += 1
        self.fx = self.root / f"fx{self.builds}"
        self.fx.mkdir()
        build_inputs(self.fx)
        self.state = tree(self.fx)


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    import resource

    limits = resource.getrlimit(resource.RLIMIT_AS)
    yield Inputs(tmp_path_factory.mktemp("matrix-inputs"))
    resource.setrlimit(resource.RLIMIT_AS, limits)  # a hang keeps its memory ceiling until here


@pytest.fixture
def sandbox(monkeypatch, inputs):
    """A run's own folder: its working folder, $HOME, output folder, hostile things; the traps set; the caches
    and any variable that would reach a real server pointed away. (Not ``tmp_path``: pytest numbers those by
    listing the ones made so far, which grows slow over three thousand runs.)"""
    inputs.runs += 1
    run = inputs.root / "runs" / str(inputs.runs)
    for name in ("cwd", "home", "out"):
        (run / name).mkdir(parents=True)
    monkeypatch.chdir(run / "cwd")
    monkeypatch.setenv("HOME", str(run / "home"))
    monkeypatch.setenv("TANSAKU_CACHE", str(inputs.root / "cache"))  # the LLM cache: outside every tree compared
    monkeypatch.setenv("MPLCONFIGDIR", str(inputs.root / "matplotlib"))  # its font cache, not the run's $HOME
    monkeypatch.setenv("TANSAKU_QUIET", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for name in ("TANSAKU_DEBUG", "TANSAKU_ENV_TOKEN", "OPENSEARCH_URL", "OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    hits: list = []
    set_traps(monkeypatch, hits)
    hostile = make_hostile(run / "hx")
    yield run, hits
    hostile.close()
    monkeypatch.undo()  # leave the folder before removing it
    for dirpath, _dirs, _files in os.walk(run):
        os.chmod(dirpath, 0o755)  # the read-only folder, and any a command made read-only
    shutil.rmtree(run, ignore_errors=True)


def _app(command: str):
    from tansaku.cli import synth_app, train_app

    return synth_app if command.split()[0] == "synth" else train_app


def _fill(text: str, fx: Path, run: Path, command: str) -> str:
    inside = os.path.relpath(INPUTS.get(command, "{fx}").replace("{fx}", str(fx)), run / "cwd")
    for key, value in {"{fx}": str(fx), "{out}": str(run / "out"), "{ROOT}": str(ROOT), "{hx}": str(run / "hx"),
                       "{inside}": inside, "{user}": getpass.getuser(), "{uid}": uuid.uuid4().hex[:8]}.items():
        text = text.replace(key, value)
    return text


def _run(command: str, argv: list[str], inputs: Inputs, run: Path, hits: list, own_output: bool,
         refuse: bool = False):
    """Run ``command argv``; ``(result or None if it hung, reached a trap, files changed where it may not)``.
    A refusal of a value that could be used (``refuse`` False: a dead endpoint, a build that ends with 0 rows) is
    found during the work, and keeps what that work wrote in its own output ("loses nothing already done"); a
    value that is never usable must be refused before any work, so then its output must not change at all."""
    for name in COPIED.get(command, ()):
        shutil.copytree(inputs.fx / name, run / "out" / name, symlinks=True)
    opt = OUTPUTS.get(command)
    given = next((argv[i + 1] for i, t in enumerate(argv[:-1]) if t == opt), None) if opt else None
    # the output as given, and as a shell would have expanded a quoted "~" ($HOME is the run's own): either is
    # the command's to write, when nothing was there before
    targets = [os.path.normpath(os.path.join(run / "cwd", p)) for p in {given, os.path.expanduser(given)}] \
        if given else []
    may_write = targets and (own_output or command in MAY_EXIST or not any(os.path.lexists(t) for t in targets))
    before = tree(inputs.fx, run)
    tilde_user = [os.path.expanduser(a[:a.index("/")]) + a[a.index("/"):] for a in argv
                  if a.startswith("~") and "/tansaku-matrix-" in a]
    try:
        result = invoke(_app(command), command.split()[1:] + argv)
    except Hang:
        result = None
    reached = bool(hits) or (result is not None and isinstance(result.exception, Reached))
    after = tree(inputs.fx, run)
    ok = result is not None and (result.exit_code == 0 or reached)
    found_at_work = result is not None and result.exit_code == 2 and not refuse
    stray = changed(before, after, targets if ((ok or found_at_work) and may_write) else [])
    for path in tilde_user:  # "~user/…" read as that user's home: outside every tree above
        if os.path.lexists(path):
            stray.append(path)
            shutil.rmtree(path, ignore_errors=True)
    if tree(inputs.fx) != inputs.state:
        inputs.rebuild()
    return result, reached, stray


def _check(command, argv, target, value, text, inputs, run, hits, own_output=False) -> list[str]:
    """The contract's breaches by ``command argv``; ``target`` None: the baseline (exit 0 or a trap, nothing else)."""
    refuse = target is not None and value.refuse
    result, reached, stray = _run(command, argv, inputs, run, hits, own_output, refuse)
    if result is None:
        return [f"hang: still running after {RUN_SECONDS} s"]
    accepted = result.exit_code == 0 or reached
    if target is not None:
        found = violations(result, target, text, refuse=value.refuse, reached=reached)
    elif not accepted:
        found = [f"baseline exit {result.exit_code}: {result.stderr[:300]!r} {result.exception!r}"]
    else:
        found = []
    if stray:
        shown_paths = [os.path.relpath(p, run) if p.startswith(str(run)) else p for p in stray]
        what = "changed outside its output" if accepted else "a refusal left or changed"
        found.append(f"{what}: {', '.join(shown_paths[:5])}" + (f" (+{len(stray) - 5})" if len(stray) > 5 else ""))
    return found


# ------------------------------------------------------------------------------------------------------ tests


def test_every_option_is_classified():
    missing = [f"{p.command} {p.opts[0]} ({p.name}: {p.annotation}, {p.parser!r})" for p in PARAMS
               if classify(p) is None]
    assert not missing, ("classify these in tests/fixtures/cli_matrix_kinds.py (KIND_OF_NAME, or KIND_OF for a name "
                         "that means something else in one command; a kind must fit the declared type, FAMILIES):"
                         "\n  " + "\n  ".join(missing))


def test_every_command_has_a_baseline():
    assert sorted(ALL_BASELINES) == sorted(BY_COMMAND), "write a baseline in tests/fixtures/cli_matrix_commands.py"
    for (command, name), mode in MODE_OF.items():
        assert mode in dict(ALL_BASELINES[command]), (command, name, mode)


def test_coverage_per_kind():
    """Every parameter classified (100 %), every parameter run with every value of its kind; the counts printed."""
    kinds = Counter(classify(p) for p in PARAMS)
    runs = Counter(case.values[1] for case in CASES)
    covered = {(case.values[0].command, case.values[0].name) for case in CASES}
    print(f"\n{len(PARAMS)} parameters in {len(BY_COMMAND)} commands; {len(CASES)} runs")
    for kind in sorted(kinds, key=str):
        print(f"  {kind!s:12} {kinds[kind]:4} parameters {runs[kind]:5} runs")
    assert None not in kinds and len(covered) == len(PARAMS), "coverage is below 100 %"


def test_the_checks_see_a_hang_a_bug_and_a_stray_write(tmp_path):
    """The matrix's own checks, on a toy command: a reader blocked on the FIFO is a hang, an exception is not a
    refusal, a file written next to the output is seen, a refusal that does not name its option is flagged."""
    import resource

    import typer
    from fixtures.cli_matrix_kinds import Param

    app = typer.Typer()

    @app.command()
    def toy(what: str, path: str = ""):
        if what == "hang":
            Path(path).read_text()
        elif what == "bug":
            raise ValueError("a bug")
        elif what == "stray":
            Path(path).write_text("x")
        elif what == "vague":
            typer.echo("error: something is wrong", err=True)
            raise typer.Exit(2)

    option = Param("toy", "path", ("--path",), (), False, False, 1, str)
    hostile, limits = make_hostile(tmp_path / "hx"), resource.getrlimit(resource.RLIMIT_AS)
    try:
        with pytest.raises(Hang):
            invoke(app, ["hang", "--path", str(tmp_path / "hx" / "fifo")], seconds=1)
    finally:
        hostile.close()
        resource.setrlimit(resource.RLIMIT_AS, limits)
    bug = invoke(app, ["bug"])
    assert violations(bug, option, "", refuse=False, reached=False) == ["exit 1: ValueError: a bug"]
    vague = invoke(app, ["vague"])
    assert violations(vague, option, "x", refuse=False, reached=False)[0].startswith("refusal does not name")
    before = tree(tmp_path)
    invoke(app, ["stray", "--path", str(tmp_path / "stray")])
    assert changed(before, tree(tmp_path), [str(tmp_path / "out")]) == [str(tmp_path / "stray")]


@pytest.mark.parametrize("command, mode", [pytest.param(c, m, id=f"{c.replace(' ', '-')}:{m}")
                                           for c, modes in ALL_BASELINES.items() for m, _ in modes])
def test_baseline_succeeds(command, mode, inputs, sandbox):
    run, hits = sandbox
    argv = [_fill(a, inputs.fx, run, command) for a in dict(ALL_BASELINES[command])[mode]]
    found = _check(command, argv, None, None, "", inputs, run, hits, own_output=True)
    assert not found, f"{command} {shown(argv)}\n" + "\n".join(found)


@pytest.mark.parametrize("param, kind, mode, value", CASES)
def test_hostile_value(param, kind, mode, value, inputs, sandbox):
    run, hits = sandbox
    modes = dict(ALL_BASELINES[param.command])
    baseline = [_fill(a, inputs.fx, run, param.command) for a in modes[mode or next(iter(modes))]]
    text = _fill(value.text, inputs.fx, run, param.command)
    argv = replace(BY_COMMAND[param.command], baseline, param, text)
    replaced_output = param.opts[0] == OUTPUTS.get(param.command) or kind in OUTPUT_KINDS
    found = _check(param.command, argv, param, value, text, inputs, run, hits, own_output=not replaced_output)
    assert not found, f"{param.command} {shown(argv)}\n" + "\n".join(found)
