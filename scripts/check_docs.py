#!/usr/bin/env python3
"""Check that what the documentation names exists: every repository path (``docs/deploy.rst``,
``scripts/chaos``, ``tests/unit/test_txn.py``), every ``make`` target and every ``kaas``
subcommand and option. ``make lint`` runs it.

    python scripts/check_docs.py                 # README.rst, CHANGELOG.rst, docs/*.rst, examples/*/README.rst
    python scripts/check_docs.py --root DIR FILE...   # other documents, paths relative to DIR

What counts as a name:

- a path: a word starting with one of the repository's top-level directories (``kaas/``,
  ``docs/``, ``scripts/``, ``tests/``, ...) or naming one of its top-level files
  (``Makefile``, ``LICENSE``, ...), anywhere in the text, relative to the repository or to
  the document's directory; a ``::test`` suffix is dropped, and a path with a placeholder
  (``<id>``, ``*``) is checked up to it;
- a make target: the words after ``make`` in an inline literal or a literal block, up to
  the first option, assignment, shell separator or comment (not in a line that builds
  another project: ``cd``, ``./configure``);
- a kaas command line: ``kaas`` followed by subcommands and options in an inline literal
  or a literal block; each subcommand must exist and each ``--option`` must be one of the
  command's (after a bare ``--``, ``kaas cluster`` passes options to ``kaas broker``).

Exits 1, listing each missing name with its file and line.
"""

from __future__ import annotations

import argparse
import re
import shlex
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOP_DIRS = ("kaas", "docs", "scripts", "tests", "examples", "deploy", "cluster", ".ci")
TOP_FILES = ("README.rst", "CHANGELOG.rst", "LICENSE", "Makefile", "pyproject.toml", "setup.py", "Containerfile",
             "containers.conf")
PATH = re.compile(r"(?<![\w./<-])((?:%s)/[\w./-]*|(?:%s)\b)" % (
    "|".join(re.escape(d) for d in TOP_DIRS), "|".join(re.escape(f) for f in TOP_FILES)))
INLINE = re.compile(r"``(.+?)``")
RATIO = re.compile(r"kaas/(apache|mock|tansu|other)", re.I)  # a benchmark ratio's column, not a path
SEPARATORS = {"#", ";", "&&", "||", "|", ")", "(", "&", ">", "2>&1"}


def documents(root: Path) -> list[Path]:
    """The documents a user reads."""
    return [p for p in [root / "README.rst", root / "CHANGELOG.rst", *sorted((root / "docs").glob("*.rst")),
                        *sorted((root / "examples").glob("*/README.rst"))] if p.exists()]


def literals(text: str) -> Iterator[tuple[int, str]]:
    """(line number, text) of every inline literal and every line of a literal block."""
    in_block, block_indent = False, 0
    lines = text.splitlines()
    for n, line in enumerate(lines, 1):
        stripped = line.strip()
        indent = len(line) - len(line.lstrip())
        if in_block:
            if stripped and indent <= block_indent:
                in_block = False
            elif stripped:
                yield n, stripped
                continue
        for m in INLINE.finditer(line):
            yield n, m.group(1)
        if stripped.endswith("::") and not stripped.startswith(".. "):
            in_block, block_indent = True, indent


def paths(text: str) -> Iterator[tuple[int, str]]:
    for n, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith(".. _"):  # a link target
            continue
        for m in PATH.finditer(line):
            word = m.group(1).rstrip(".,:;")
            if not RATIO.fullmatch(word):
                yield n, word


def make_targets(makefile: Path) -> set[str]:
    """The targets of ``makefile``, its simple variables expanded."""
    text = makefile.read_text()
    variables = dict(re.findall(r"^([A-Z_]+)\s*[:?]?=\s*(\S*)\s*$", text, re.M))
    targets: set[str] = set()
    for m in re.finditer(r"^([^\s:=#][^:=]*?):(?!=)", text, re.M):
        for name in m.group(1).split():
            name = re.sub(r"\$\((\w+)\)", lambda v: variables.get(v.group(1), v.group(0)), name)
            name = re.sub(r"\$\((\w+)\)", lambda v: variables.get(v.group(1), v.group(0)), name)
            targets.add(name)
    for phony in re.findall(r"^\.PHONY:(.*(?:\\\n.*)*)", text, re.M):
        targets.update(w for w in phony.replace("\\\n", " ").split() if not w.startswith("$"))
    return targets


def _words(snippet: str) -> list[str]:
    try:
        return shlex.split(snippet, comments=False)
    except ValueError:
        return snippet.split()


def _code(snippet: str) -> str:
    """A literal without its shell comment."""
    return re.split(r"(?:^|\s)#", snippet, maxsplit=1)[0]


def make_calls(snippet: str) -> Iterator[str]:
    """The targets of each ``make ...`` in a literal; none when it builds another project
    (``cd``, ``./configure``)."""
    snippet = _code(snippet)
    if re.search(r"(?:^|\s)(?:cd|\./configure)\s", snippet):
        return
    words = _words(snippet)
    for i, w in enumerate(words):
        if w != "make" or (i and words[i - 1] not in SEPARATORS and not words[i - 1].endswith("$")):
            continue
        j = i + 1
        while j < len(words):
            t = words[j]
            if t in SEPARATORS or t.startswith("#"):
                break
            if t in ("-C", "-f"):
                j += 2
                continue
            if t.startswith("-") or "=" in t:
                j += 1
                continue
            if not re.fullmatch(r"[\w./-]+", t):
                break
            yield t
            j += 1


def _cli():  # the click group, imported only when a document names a kaas command
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from kaas.cli import cli

    return cli


def _options(cmd) -> set[str]:
    import click

    out = {"--help", "-h"}
    for p in cmd.params:
        if isinstance(p, click.Option):
            out.update(p.opts)
            out.update(p.secondary_opts)
    return out


def kaas_problems(snippet: str) -> Iterator[str]:
    """What a ``kaas ...`` command line in a literal names that does not exist."""
    import click

    words = _words(_code(snippet))
    for i, w in enumerate(words):
        if w != "kaas" or (i and words[i - 1] not in SEPARATORS and not words[i - 1].endswith("$")):
            continue
        cli = _cli()
        cmd, path, known = cli, ["kaas"], _options(cli)
        for t in words[i + 1:]:
            if t in SEPARATORS or t.startswith("#"):
                break
            if t == "--":
                if path == ["kaas", "cluster"]:
                    broker = cli.get_command(click.Context(cli), "broker")
                    cmd, path, known = broker, ["kaas", "broker"], _options(broker)
                continue
            if t.startswith("-"):
                name = t.split("=", 1)[0]
                if name.startswith("--") and name not in known and re.fullmatch(r"--[a-z0-9-]+", name):
                    yield f"{' '.join(path)} has no option {name}"
                continue
            if isinstance(cmd, click.Group):
                if not re.fullmatch(r"[a-z][a-z0-9-]*", t):
                    break  # a placeholder (<tool>) or an argument: nothing more to check
                sub = cmd.get_command(click.Context(cmd), t)
                if sub is None:
                    yield f"{' '.join(path)} has no subcommand {t}"
                    break
                cmd, path = sub, [*path, t]
                known = known | _options(sub)
            # else: an argument of a command


def check(docs: list[Path], root: Path) -> list[str]:
    """Every problem, as ``file:line: what``."""
    targets = make_targets(root / "Makefile")
    problems = []
    for doc in docs:
        text = doc.read_text()
        rel = doc.relative_to(root) if doc.is_relative_to(root) else doc
        for n, word in paths(text):
            if not (root / word).exists() and not (doc.parent / word).exists():
                problems.append(f"{rel}:{n}: names {word}, which does not exist")
        for n, snippet in literals(text):
            for t in make_calls(snippet):
                if t not in targets:
                    problems.append(f"{rel}:{n}: names make {t}, which is not a target of the Makefile")
            if re.search(r"(?:^|[\s$|;&(])kaas\s", snippet + " "):
                for p in kaas_problems(snippet):
                    problems.append(f"{rel}:{n}: {p}")
    return problems


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", type=Path, default=ROOT, help="the repository the paths are relative to")
    ap.add_argument("docs", nargs="*", type=Path, help="documents (default: the user documentation)")
    args = ap.parse_args(argv)
    root = args.root.resolve()
    docs = [d.resolve() for d in args.docs] or documents(root)
    problems = check(docs, root)
    for p in problems:
        print(p, file=sys.stderr)
    if problems:
        print(f"{len(problems)} name(s) in the docs do not exist", file=sys.stderr)
        return 1
    print(f"docs: {len(docs)} documents, every path, make target and kaas option they name exists")
    return 0


if __name__ == "__main__":
    sys.exit(main())
