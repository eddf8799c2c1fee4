"""Every command in the README works on a fresh clone after the set-up.

The README's commands (fenced blocks and inline code) are read from the file, then: every ``prag`` command line
parses with the real CLI (subcommand, options, required arguments); every script it names is tracked by git (so a
fresh clone has it) and is valid bash; every option it passes to ``mlflow`` / ``dagster`` is in that tool's help;
every ``PRAG__*`` variable it sets is a valid setting. The cheap commands then run for real from a ``git clone`` of
the repository with the existing venv: ``prag --help``, ``prag doctor``, ``prag report`` and ``prag sql``. The set-up
and the demo themselves (``scripts/demo.sh``, ``scripts/test.sh``) are what CI runs around this test, not run here.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
VENV_BIN = Path(sys.executable).parent
#: The first word of a README line that makes it a command (other lines of a block are TOML, JSON, output).
COMMAND_WORDS = ("prag", "bash", "mlflow", "dagster", "curl", "source", "export", ".venv/bin/mlflow")
_INLINE = re.compile(r"`((?:[A-Z_]+=\S+ )*(?:prag|bash|mlflow|dagster|\.venv/bin/mlflow|scripts/\S+\.sh)\b[^`]*)`")
_ENV = re.compile(r"^[A-Z_][A-Z0-9_]*=")


def readme_commands(text: str) -> list[list[str]]:
    """The README's command lines as argument lists (comments dropped, ``\\`` continuations joined)."""
    lines: list[str] = []
    for i, block in enumerate(re.split(r"^```\w*\s*$", text, flags=re.M)):
        if i % 2:  # inside a fenced block
            joined = re.sub(r"\\\n\s*", " ", block)
            lines += [ln.strip() for ln in joined.splitlines()]
        else:
            lines += _INLINE.findall(block)
    out = []
    for line in lines:
        words = [w for w in shlex.split(line, comments=True)] if line else []
        command = [w for w in words if not _ENV.match(w)]
        first, second = (command + ["", ""])[:2]
        if (first in COMMAND_WORDS or first.startswith("scripts/")) and second != "=":  # not TOML's `source = ...`
            out.append(words)
    return out


COMMANDS = readme_commands(README.read_text(encoding="utf-8"))


def _split_env(words: list[str]) -> tuple[dict[str, str], list[str]]:
    """Leading ``NAME=value`` words and the command after them."""
    n = next(i for i, w in enumerate(words) if not _ENV.match(w))
    return dict(w.split("=", 1) for w in words[:n]), words[n:]


def _placeholders_filled(args: list[str]) -> list[str]:
    """README placeholders made concrete: ``[--apply]`` -> ``--apply``, ``FILE...`` -> ``FILE``."""
    return [a.strip("[]").removesuffix("...") for a in args if a.strip("[]")]


class _Parsed(Exception):
    """Raised instead of running the command once argparse accepted it."""


def test_the_readme_names_its_commands() -> None:
    """The extraction finds the commands the README is about (so a broken extraction cannot pass silently)."""
    firsts = {" ".join(_split_env(c)[1][:2]) for c in COMMANDS}
    for expected in ("bash scripts/demo.sh", "bash scripts/test.sh", "prag materialize", "prag report", "prag sql",
                     "prag doctor", "prag ingest", "prag promote", "prag rollback", "prag answer", "mlflow models"):
        assert expected in firsts, f"{expected!r} not found among the README commands {sorted(firsts)}"


@pytest.mark.parametrize("words", [c for c in COMMANDS if _split_env(c)[1][0] == "prag"], ids=" ".join)
def test_every_prag_command_parses(words: list[str], monkeypatch) -> None:
    """Subcommand, options and required arguments of each README ``prag`` line exist in the CLI (a bare ``prag <sub>``
    in the text names the subcommand: its ``--help`` must exist)."""
    from prag_assets.cli import commands as cli
    from prag_models.config.settings import load_settings

    env, command = _split_env(words)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    if env:
        load_settings()  # the README's PRAG__* variables are real settings with valid values
    original = argparse.ArgumentParser.parse_args

    def parse_only(self, args=None, namespace=None):
        raise _Parsed(original(self, args, namespace))

    if len(command) == 2:
        with pytest.raises(SystemExit) as helped:
            cli.main([command[1], "--help"])
        assert helped.value.code == 0, f"prag has no subcommand {command[1]!r}"
        return
    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", parse_only)
    with pytest.raises(_Parsed) as parsed:
        cli.main(_placeholders_filled(command[1:]))
    assert parsed.value.args[0].command == command[1]


@pytest.fixture(scope="module")
def clone(tmp_path_factory) -> Path:
    """A fresh ``git clone`` of this repository (committed files only)."""
    target = tmp_path_factory.mktemp("clone") / "prag"
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(target)], check=True, timeout=120)
    return target


def test_every_script_the_readme_runs_is_in_a_fresh_clone(clone: Path) -> None:
    scripts = {w for c in COMMANDS for w in c if re.fullmatch(r"scripts/[\w./-]+\.sh", w)}
    assert {"scripts/demo.sh", "scripts/test.sh", "scripts/ui.sh"} <= scripts
    for script in sorted(scripts):
        assert (clone / script).is_file(), f"{script} is not tracked by git"
        checked = subprocess.run(["bash", "-n", str(clone / script)], capture_output=True, text=True)
        assert checked.returncode == 0, f"{script}: {checked.stderr}"


def test_tool_options_the_readme_uses_exist() -> None:
    """``mlflow`` and ``dagster`` lines use subcommands and options those tools have (the venv's versions): the
    README's own lines and the tool lines of the scripts it runs (scripts/ui.sh, scripts/mlflow_ui.sh)."""
    checked = 0
    for words in [*COMMANDS, *_script_tool_lines()]:
        command = _split_env(words)[1]
        tool = Path(command[0]).name
        if tool not in ("mlflow", "dagster"):
            continue
        subcommands = [w for w in command[1:3] if not w.startswith("-")]
        help_text = subprocess.run([str(VENV_BIN / tool), *subcommands, "--help"], capture_output=True, text=True,
                                   timeout=120).stdout  # fmt: skip
        for option in (w.split("=")[0] for w in command if w.startswith("--")):
            assert option in help_text, f"`{' '.join(command)}`: {tool} {' '.join(subcommands)} has no {option}"
        checked += 1
    assert checked >= 2


def _script_tool_lines() -> list[list[str]]:
    """``exec "$PRAG_VENV/bin/<tool>" ...`` lines (or ``cmd=("$PRAG_VENV/bin/<tool>" ...)``, the command a script
    then runs) of the scripts the README runs, as words (tool name first)."""
    scripts = {w for c in COMMANDS for w in c if re.fullmatch(r"scripts/[\w./-]+\.sh", w)}
    found = []
    for script in sorted(scripts):
        for line in (ROOT / script).read_text(encoding="utf-8").splitlines():
            if line.startswith(('exec "$PRAG_VENV/bin/', 'cmd=("$PRAG_VENV/bin/')):
                text = line.removeprefix("exec ").removeprefix("cmd=(").rstrip(")")
                words = shlex.split(text, posix=True)
                found.append([Path(words[0]).name, *words[1:]])
    return found


def _prag(clone: Path, home: Path, *args: str) -> subprocess.CompletedProcess:
    """Run the clone's ``prag`` with the venv's interpreter on a given home."""
    env = {**os.environ, "PYTHONPATH": str(clone), "PRAG_HOME": str(home)}
    env.pop("PRAG_CONFIG", None)
    return subprocess.run([str(VENV_BIN / "prag"), *args], cwd=clone, env=env, capture_output=True, text=True,
                          timeout=120)  # fmt: skip


def test_the_cheap_commands_run_from_a_fresh_clone(clone: Path, tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(clone)}
    where = subprocess.run([str(VENV_BIN / "python"), "-c", "import prag_assets; print(prag_assets.__file__)"],
                           cwd=clone.parent, env=env, capture_output=True, text=True, check=True).stdout  # fmt: skip
    assert where.startswith(str(clone)), where  # the clone's code runs, not this checkout's
    helped = _prag(clone, tmp_path / "fresh", "--help")
    assert helped.returncode == 0 and all(c in helped.stdout for c in ("materialize", "report", "sql", "doctor"))
    doctor = _prag(clone, tmp_path / "fresh", "doctor")
    assert doctor.returncode == 0, doctor.stderr[-2000:]
    report = _prag(clone, tmp_path / "fresh", "report")  # before the demo: a clear message, no traceback
    assert report.returncode in (1, 3) and "materialize" in report.stderr + report.stdout
    assert "Traceback" not in report.stderr
    home = tmp_path / "home"
    home.mkdir()
    with duckdb.connect(str(home / "prag.duckdb")) as con:
        con.execute("CREATE TABLE lamp_evaluation AS SELECT 'LaMP-2' AS task, 'cfrag' AS method, 0.5 AS accuracy")
    sql = _prag(clone, home, "sql", "select * from lamp_evaluation", "--format", "csv")
    assert sql.returncode == 0 and "LaMP-2,cfrag,0.5" in sql.stdout, sql.stderr[-2000:]
