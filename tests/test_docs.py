"""The documentation holds: the site builds with no warning, every relative link resolves,
the CLI reference matches the parser, and the README stays the short door CI runs."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# How .ci/run's two commands begin (the first installs chromium where it is missing).
COMMAND_STARTS = ("(command -v chromium", "python3 -m venv", ". .venv")
DOCS = ROOT / "docs"
README = ROOT / "README.md"

_FENCE = re.compile(r"^(```|~~~).*?^\1\s*$", re.S | re.M)
_CODE_SPAN = re.compile(r"`[^`\n]*`")
_LINK = re.compile(r"!?\[[^\]\n]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


def _gen_cli():
    spec = importlib.util.spec_from_file_location("gen_cli", DOCS / "gen_cli.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _pages() -> list[Path]:
    return [README, *sorted(DOCS.rglob("*.md"))]


def relative_links(text: str) -> list[str]:
    """The relative link targets of a Markdown text, outside code blocks and code spans."""
    prose = _CODE_SPAN.sub("", _FENCE.sub("", text))
    return [t for t in _LINK.findall(prose)
            if not re.match(r"^[a-z][a-z0-9+.-]*:", t, re.I) and not t.startswith("#")]


def test_relative_links_finds_links_outside_code() -> None:
    text = ("[a](x.md) [b](https://e.org) [c](#top) ![d](img/e.png \"t\")\n"
            "`[no](code.md)`\n```\n[no](fenced.md)\n```\n[f](dir/g.md#part)\n")
    assert relative_links(text) == ["x.md", "img/e.png", "dir/g.md#part"]


@pytest.mark.parametrize("page", _pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page: Path) -> None:
    broken = []
    for target in relative_links(page.read_text(encoding="utf-8")):
        path = (page.parent / target.split("#", 1)[0]).resolve()
        if not path.exists():
            broken.append(target)
        elif page.is_relative_to(DOCS) and not path.is_relative_to(DOCS):
            broken.append(f"{target} (outside docs/: the site cannot link it)")
    assert not broken, f"{page.relative_to(ROOT)}: {broken}"


def test_cli_reference_is_up_to_date() -> None:
    """A new command or flag needs `python docs/gen_cli.py` (and its page committed)."""
    gen = _gen_cli()
    assert (DOCS / "cli-reference.md").read_text(encoding="utf-8") == gen.render(), (
        "docs/cli-reference.md is stale: run python docs/gen_cli.py")


def test_cli_reference_names_every_command() -> None:
    import argparse

    from memstrata.cli import build_parser

    gen = _gen_cli()
    page = (DOCS / "cli-reference.md").read_text(encoding="utf-8")
    stack = [("memstrata", build_parser())]
    while stack:
        prog, parser = stack.pop()
        assert f"# {prog}\n" in page, prog
        for action in parser._actions:
            if (action.option_strings and action.help != argparse.SUPPRESS
                    and not isinstance(action, argparse._HelpAction)):
                assert f"`{action.option_strings[-1]}`" in page
        stack += [(f"{prog} {name}", sub) for name, sub, _ in gen._subcommands(parser)]


def test_cli_reference_stays_out_of_the_way_of_markdown() -> None:
    """Help text with Markdown's special characters is escaped, not rendered."""
    import argparse

    parser = argparse.ArgumentParser(prog="demo", description="Reads *all* <files> | more.")
    parser.add_argument("--pick", choices=["a", "b"], help="one of_them [x]")
    parser.add_argument("items", nargs="+")
    page = _gen_cli().render(parser)
    assert "Reads \\*all\\* &lt;files&gt; \\| more." in page
    assert "| `--pick` | `{a,b}` | one of\\_them \\[x\\] |" in page
    assert "demo items [items ...] [options]" in page


def test_mkdocs_build_is_strict_and_clean(tmp_path: Path) -> None:
    """`mkdocs build --strict`: a broken link, a page left out of the nav or a bad config
    is an error (mkdocs, mkdocs-material and mkdocstrings come with the `docs` extra, in
    `all`)."""
    pytest.importorskip("mkdocs")
    pytest.importorskip("material")
    pytest.importorskip("mkdocstrings_handlers.python")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file",
         str(ROOT / "mkdocs.yml"), "--site-dir", str(tmp_path / "site")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "WARNING" not in done.stderr, done.stderr
    assert (tmp_path / "site" / "cli-reference" / "index.html").exists()
    api = (tmp_path / "site" / "api" / "index.html").read_text(encoding="utf-8")
    assert "memstrata.api.Memory" in api and "delete_all" in api


def test_readme_is_the_short_door() -> None:
    """At most 250 lines, and its two commands are exactly the ones CI runs."""
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 250
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    commands = [line for line in ci if line.startswith(COMMAND_STARTS)]
    assert len(commands) == 2
    first_block = text.split("```bash\n", 1)[1].split("```", 1)[0].splitlines()
    assert [line for line in first_block if not line.startswith("#") and line] == commands


def test_quickstart_page_shows_the_readme_example() -> None:
    """docs/quickstart.md repeats the README example the tests run, unchanged."""
    block = re.compile(r"```python\n(.*?)```", re.S)
    readme = block.search(README.read_text(encoding="utf-8"))
    page = block.search((DOCS / "quickstart.md").read_text(encoding="utf-8"))
    assert readme and page and readme[1] == page[1]


def test_install_page_shows_the_ci_commands() -> None:
    text = (DOCS / "install.md").read_text(encoding="utf-8")
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    for line in ci:
        if line.startswith(COMMAND_STARTS):
            assert line in text.splitlines()


def test_the_package_ships_its_type_marker_and_licence() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert "py.typed" in project["tool"]["setuptools"]["package-data"]["memstrata"]
    assert (ROOT / "memstrata" / "py.typed").exists()
    licence = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert "Apache License" in licence and "Version 2.0, January 2004" in licence
    assert project["project"]["license"] == {"text": "Apache-2.0"}
    assert "## [Unreleased]" in (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
