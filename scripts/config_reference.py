#!/usr/bin/env python3
"""Generate the configuration reference of README.rst from the click command objects of
``kaas broker`` and ``kaas cluster`` (every option, its default and its environment
variable), so the README never drifts from ``--help``, and from ``kaas.configs`` (every
topic config, its default and what kaas does with it).

    python scripts/config_reference.py           # rewrite the generated part of README.rst
    python scripts/config_reference.py --check   # exit 1 when README.rst is out of date
    python scripts/config_reference.py --print   # print the reference only

Only the text between the two marker comments is generated.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import click  # noqa: E402
import docgen  # noqa: E402  (scripts/docgen.py, beside this file)

DOC = ROOT / "README.rst"
ENV_PREFIX = "KAAS"
COMMANDS = ("broker", "cluster")


def _flag(p: click.Option) -> str:
    names = " / ".join(["/".join(p.opts), *(["/".join(p.secondary_opts)] if p.secondary_opts else [])])
    if p.is_flag or p.count:
        return f"``{names}``"
    if p.metavar:
        metavar = p.metavar
    elif isinstance(p.type, click.Choice):
        metavar = "{" + "|".join(map(str, p.type.choices)) + "}"
    else:
        names_of = {"integer": "INT", "float": "FLOAT", "path": "PATH", "text": "TEXT"}
        metavar = names_of.get(p.type.name, p.type.name.upper())
    return f"``{names} {metavar}``"


def _default(p: click.Option, ctx: click.Context) -> str:
    d = p.get_default(ctx, call=True)
    if p.is_flag and p.secondary_opts:  # --x/--no-x
        return f"``{p.opts[0] if d else p.secondary_opts[0]}``"
    if p.is_flag:
        return "on" if d else "off"
    if p.multiple:  # a repeatable option: none unless a default list is given (click 8.2+ answers UNSET)
        return ", ".join(f"``{x}``" for x in d) if isinstance(d, (list, tuple)) and d else "none"
    if d is None:
        return "none"
    if isinstance(d, Path):
        d = d.as_posix() if d.is_absolute() or d.as_posix().startswith(".") else f"./{d.as_posix()}"
    return f"``{d}``"


def _help(p: click.Parameter) -> str:
    text = " ".join((getattr(p, "help", None) or "").split())
    return text or "-"


def command_reference(name: str) -> str:
    from kaas.cli import cli

    cmd = cli.commands[name]
    ctx = click.Context(cmd, info_name=name)
    prefix = f"{ENV_PREFIX}_{name.upper()}"
    rows = []
    odd_env = []
    for p in cmd.params:
        if isinstance(p, click.Option):
            if p.hidden or p.name == "help":
                continue
            env = p.envvar or f"{prefix}_{p.name.upper()}"  # click's auto_envvar_prefix rule
            if env != f"{prefix}_{p.opts[0].lstrip('-').replace('-', '_').upper()}":
                odd_env.append(f"``{p.opts[0]}`` is ``{env}``")
            rows.append([_flag(p), _default(p, ctx), _help(p)])
        elif isinstance(p, click.Argument):
            metavar = p.name.upper() + ("..." if p.nargs == -1 else "")
            rows.append([f"``{metavar}``", "none", "Arguments after ``--`` are passed to every broker."])
    summary = (cmd.help or "").strip().splitlines()[0]
    title = f"``kaas {name}``"
    env_note = (f"Every option can also be set in the environment as ``{prefix}_<OPTION>`` (upper case, "
                f"dashes as underscores; a command-line flag wins)")
    env_note += f", except that {', '.join(odd_env)}." if odd_env else "."
    return "\n".join([title, "-" * len(title), "", summary, "",
                      docgen.rst_table(["option", "default", "meaning"], rows), "", env_note, ""])


def topic_reference() -> str:
    """Every topic config of ``kaas.configs.TOPIC_CONFIGS``: type, default, what kaas does."""
    from kaas import configs
    from kaas.cli import cli
    from kaas.settings import Settings

    options = {p.name: p.opts[0] for p in cli.commands["broker"].params if isinstance(p, click.Option)}
    settings = Settings()
    rows = []
    for name, (kind, src) in configs.TOPIC_CONFIGS.items():
        default = f"``{configs.default(settings, name)}``"
        if isinstance(src, str) and src in options:
            default += f" (``{options[src]}``)"
        rows.append([f"``{name}``", kind, default, configs.HOW.get(name, "-")])
    title = "Topic configs"
    intro = ("Set per topic with CreateTopics, AlterConfigs or IncrementalAlterConfigs (``kaas topics create "
             "--config K=V``); DescribeConfigs shows them. A value kaas would not honour is refused with "
             "INVALID_CONFIG and says why; an unknown key too. A default naming a ``kaas broker`` option comes "
             "from it. Broker configs (DescribeConfigs on a broker) are the ``kaas broker`` options, read only: "
             "AlterConfigs and IncrementalAlterConfigs on a broker answer INVALID_CONFIG.")
    return "\n".join([title, "-" * len(title), "", intro, "",
                      docgen.rst_table(["config", "type", "default", "what kaas does"], rows), ""])


def reference() -> str:
    """The generated block (markers excluded)."""
    return "\n".join([*(command_reference(n) for n in COMMANDS), topic_reference()])


def render(current: str) -> str:
    """``current`` with the generated block replaced (or appended when it has no markers)."""
    return docgen.splice(current, "config_reference.py", reference())

def main(argv: list[str] | None = None) -> int:
    return docgen.main(argv, description=__doc__.split("\n\n")[0], script="config_reference.py", doc=DOC,
                       generate=reference, source="from kaas.cli")


if __name__ == "__main__":
    sys.exit(main())
