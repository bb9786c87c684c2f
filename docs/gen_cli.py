"""Write ``docs/cli-reference.md`` from the ``memstrata`` command's argparse parser.

    python docs/gen_cli.py           # rewrite the page
    python docs/gen_cli.py --check   # exit 1 when the page differs from the parser

Every command and subcommand gets a section with its synopsis, its description and a table
of its arguments, read from the parser's own actions (not from ``--help`` output, whose
layout changes with the terminal's width and the Python version), so the page is the same
on every machine. ``tests/test_docs.py`` fails when the page is stale.
"""

from __future__ import annotations

import argparse
import inspect
import sys
from pathlib import Path

PAGE = Path(__file__).resolve().with_name("cli-reference.md")

HEADER = """# CLI reference

Every `memstrata` command and subcommand with every argument it takes, generated from the
command's parser by `docs/gen_cli.py` (do not edit by hand: run `python docs/gen_cli.py`).
[The command line](cli.md) says which page explains each command; `memstrata COMMAND
--help` prints the same help in a terminal.
"""

_ESCAPE = str.maketrans({"\\": "\\\\", "`": "\\`", "*": "\\*", "_": "\\_", "[": "\\[",
                         "]": "\\]", "|": "\\|", "<": "&lt;", ">": "&gt;", "&": "&amp;"})


def _text(raw: str | None) -> str:
    """One Markdown paragraph of plain help text (argparse's lines joined, Markdown escaped)."""
    return " ".join((raw or "").split()).translate(_ESCAPE)


def _paragraphs(raw: str | None) -> list[str]:
    """A description (often a docstring) as escaped Markdown paragraphs."""
    text = inspect.cleandoc(raw or "")
    return [_text(block) for block in text.split("\n\n") if block.strip()]


def _subcommands(parser: argparse.ArgumentParser) -> list[tuple[str, argparse.ArgumentParser,
                                                                 str]]:
    """(name, parser, one-line help) of each subcommand, in the parser's order, aliases once."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help for choice in action._choices_actions}
            seen: set[int] = set()
            out = []
            for name, sub in action.choices.items():
                if id(sub) not in seen:
                    seen.add(id(sub))
                    out.append((name, sub, helps.get(name) or ""))
            return out
    return []


def _metavar(action: argparse.Action) -> str:
    """How the value of an argument is written (empty for a flag that takes none)."""
    if action.nargs == 0:
        return ""
    if action.metavar is not None:
        name = (" ".join(action.metavar) if isinstance(action.metavar, tuple)
                else str(action.metavar))
    elif action.choices is not None:
        name = "{" + ",".join(str(c) for c in action.choices) + "}"
    else:
        name = action.dest.upper() if action.option_strings else action.dest
    if isinstance(action.nargs, int):
        return " ".join([name] * action.nargs)
    shapes = {"?": f"[{name}]", "*": f"[{name} ...]", "+": f"{name} [{name} ...]"}
    return shapes.get(str(action.nargs), name)


def _help(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    """The argument's help with argparse's ``%(default)s``-style fields expanded."""
    raw = parser._get_formatter()._expand_help(action) if action.help else ""
    text = _text(raw)
    if action.required and action.option_strings:
        text = f"{text} (required)".strip()
    return text


def _arguments(parser: argparse.ArgumentParser) -> list[str]:
    """The table of a parser's arguments (none: an empty list)."""
    rows = []
    for action in parser._actions:
        if action.help == argparse.SUPPRESS or isinstance(
                action, argparse._HelpAction | argparse._SubParsersAction):
            continue
        names = ", ".join(f"`{s}`" for s in action.option_strings) or f"`{_metavar(action)}`"
        value = f"`{_metavar(action)}`" if action.option_strings and _metavar(action) else ""
        rows.append(f"| {names} | {value} | {_help(parser, action)} |")
    if not rows:
        return []
    return ["| argument | value | help |", "|---|---|---|", *rows]


def _synopsis(prog: str, parser: argparse.ArgumentParser) -> str:
    """``prog``, its positional arguments in order, and ``[options]`` if it has any."""
    words = [prog]
    for action in parser._actions:
        if action.option_strings or action.help == argparse.SUPPRESS:
            continue
        if isinstance(action, argparse._SubParsersAction):
            words.append(str(action.metavar or "COMMAND"))
        else:
            words.append(_metavar(action))
    if any(a.option_strings and not isinstance(a, argparse._HelpAction)
           for a in parser._actions):
        words.append("[options]")
    return " ".join(words)


def _section(prog: str, parser: argparse.ArgumentParser, summary: str, depth: int,
             out: list[str]) -> None:
    """Append the section of one command, then its subcommands' sections, to ``out``."""
    out += ["", f"{'#' * min(depth + 1, 4)} {prog}", "", "```text", _synopsis(prog, parser),
            "```"]
    paragraphs = _paragraphs(parser.description) or ([_text(summary)] if summary else [])
    for paragraph in paragraphs:
        out += ["", paragraph]
    table = _arguments(parser)
    if table:
        out += ["", *table]
    subs = _subcommands(parser)
    if subs:
        out += ["", "| subcommand | what it does |", "|---|---|"]
        out += [f"| `{prog} {name}` | {_text(help_)} |" for name, _, help_ in subs]
    for name, sub, help_ in subs:
        _section(f"{prog} {name}", sub, help_, depth + 1, out)


def render(parser: argparse.ArgumentParser | None = None) -> str:
    """The reference page for ``parser`` (default: the ``memstrata`` command's)."""
    if parser is None:
        from memstrata.cli import build_parser

        parser = build_parser()
    body: list[str] = []
    _section(parser.prog, parser, "", 1, body)
    return HEADER + "\n".join(body) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Rewrite the page, or with ``--check`` report whether it is up to date."""
    ap = argparse.ArgumentParser(description="Generate docs/cli-reference.md.")
    ap.add_argument("--check", action="store_true",
                    help="exit 1 if the page differs from the parser; write nothing")
    args = ap.parse_args(argv)
    page = render()
    if args.check:
        current = PAGE.read_text(encoding="utf-8") if PAGE.exists() else ""
        if current != page:
            print(f"{PAGE} is stale: run python docs/gen_cli.py", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(page, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
