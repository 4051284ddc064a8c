#!/usr/bin/env python3
"""Generate docs/configs.rst, the configuration reference: from the click command objects of
``kaas broker`` and ``kaas cluster`` (every option, its default and its environment
variable), so the page never drifts from ``--help``; from ``kaas.configs`` (every topic
config Apache Kafka 4 takes, and what kaas does with it: honoured, or refused with the
reason); from ``kaas.domain.broker_configs`` (the dynamic broker configs, KIP-226),
``kaas.broker_configs`` (the static ones) and ``kaas.domain.groups.configs``.

    python scripts/config_reference.py           # rewrite the generated part of docs/configs.rst
    python scripts/config_reference.py --check   # exit 1 when it is out of date
    python scripts/config_reference.py --print   # print the generated part only

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

DOC = ROOT / "docs" / "configs.rst"
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
    if d == "":
        return "empty"
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


# Settings fields set by a ``kaas broker`` option of another name
OPTION_OF_FIELD = {"inter_broker_listener": "inter_broker_listener_name"}


def _has_option(settings_field: str) -> bool:
    from kaas.cli import cli

    name = OPTION_OF_FIELD.get(settings_field, settings_field)
    return any(p.name == name for p in cli.commands["broker"].params if isinstance(p, click.Option))


def _option_of(settings_field: str) -> str:
    """The ``kaas broker`` option that sets a Settings field, or its fixed value when none does."""
    from kaas.cli import cli

    options = {p.name: p.opts[0] for p in cli.commands["broker"].params if isinstance(p, click.Option)}
    name = OPTION_OF_FIELD.get(settings_field, settings_field)
    if name in options:
        return f"``{options[name]}``"
    return f"fixed at {_fixed(settings_field)} (no option sets it)"


def _fixed(settings_field: str) -> str:
    from kaas.settings import Settings

    return f"``{getattr(Settings(), settings_field)}``"


def topic_configs_table() -> str:
    """Every topic config Apache 4 takes: kaas's (honoured, or honoured for some values)
    and the others (refused, with the reason)."""
    from kaas import configs
    from kaas.cli import cli
    from kaas.settings import Settings

    options = {p.name: p.opts[0] for p in cli.commands["broker"].params if isinstance(p, click.Option)}
    settings = Settings()
    rows = []
    for name in sorted(set(configs.TOPIC_CONFIGS) | set(configs.NOT_TAKEN)):
        if name in configs.TOPIC_CONFIGS:
            only = name in configs._ONLY
            status = "honoured for the default only; other values refused" if only else "honoured"
            default = f"``{configs.default(settings, name)}``"
            src = configs.TOPIC_CONFIGS[name][1]
            if isinstance(src, str) and src in options:
                default += f" (``{options[src]}``)"
            rows.append([f"``{name}``", status, default, configs.HOW[name]])
        else:
            rows.append([f"``{name}``", "refused", "-", configs.NOT_TAKEN[name]])
    return docgen.rst_table(["config", "kaas", "default", "what kaas does, or why not"], rows)


def dynamic_broker_table() -> str:
    """Every broker config Apache 4 updates dynamically, and what kaas does with it."""
    from kaas import configs
    from kaas.domain import broker_configs as dyn

    rows = []
    for name in sorted(dyn.DYNAMIC):
        key = dyn.DYNAMIC[name]
        scope = "per broker" if key.per_broker else "cluster or broker"
        if name in dyn.LISTENER_ONLY:
            scope = "per listener"
        if key.route == dyn.SETTING and key.only:
            status, what = "honoured for " + ", ".join(sorted(key.only)) + " only", key.why
        elif key.route == dyn.SETTING:
            status = "honoured"
            topic = dyn.TOPIC_OF.get(name)
            what = (f"as {_option_of(key.target)}" if _has_option(key.target)
                    else f"the broker's setting (default {_fixed(key.target)})")
            what += f"; the default of topic config ``{topic}``" if topic else ""
            if key.scale != 1:
                what += f" (times {key.scale})"
        elif key.route == dyn.TOPIC and key.target in configs.TOPIC_CONFIGS:
            status = "honoured" if key.target not in configs._ONLY else "honoured for the default only"
            what = f"the default of topic config ``{key.target}`` for topics without an override"
        elif key.route == dyn.TOPIC:
            status = "refused"
            what = configs.NOT_TAKEN.get(key.target, f"kaas has no topic config {key.target}")
        elif key.route == dyn.NONE:
            status, what = "accepted, no effect", key.why
        else:
            status, what = "refused", key.why
        rows.append([f"``{name}``", key.type, scope, status, what])
    return docgen.rst_table(["config", "type", "set on", "kaas", "what kaas does, or why not"], rows)


def static_broker_table() -> str:
    """The broker configs that cannot change at runtime: kaas's options, and Apache's
    other read-only configs kaas names."""
    from kaas import broker_configs
    from kaas.domain import broker_configs as dyn

    rows = []
    for name, (kind, field) in sorted(broker_configs.STATIC.items()):
        if name in dyn.DYNAMIC:
            continue
        rows.append([f"``{name}``", kind, f"read-only: {_option_of(field)}"])
    for name in sorted(broker_configs.APACHE_READ_ONLY):
        rows.append([f"``{name}``", "-", "read-only; kaas has no such setting (or it is fixed, e.g. the data "
                                          "directory is ``--data``)"])
    return docgen.rst_table(["config", "type", "kaas"], rows)


def group_configs_table() -> str:
    """Every group config Apache 4.2 takes: kaas's (with the broker setting that is its
    default and bounds it) and the ones kaas refuses."""
    from kaas.domain.groups import configs as gc

    rows = []
    for name, key in gc.GROUP_CONFIG_KEYS.items():
        broker = gc.broker_synonym(name)
        if broker:
            default = f"``{broker}`` ({_option_of(key.setting)})"
            setting = key.setting.removeprefix("group_")
            low, high = f"group_{setting.replace('_', '_min_', 1)}", f"group_{setting.replace('_', '_max_', 1)}"
            default += f", within ``{gc.option_name(low)}`` .. ``{gc.option_name(high)}``"
        else:
            default = f"``{key.default}``"
        rows.append([f"``{name}``", key.type, "honoured", default, key.doc])
    for name, why in sorted(gc.NOT_TAKEN.items()):
        rows.append([f"``{name}``", "int", "refused", "-", why])
    return docgen.rst_table(["config", "type", "kaas", "default", "what it does, or why not"], rows)


def configs_reference() -> str:
    """The generated block of docs/configs.rst."""
    return "\n".join([
        *(command_reference(n) for n in COMMANDS),
        "Topic configs", "-------------", "",
        "Every topic config Apache Kafka 4 accepts. *honoured*: kaas does what Apache documents (the third "
        "column says how). *refused*: CreateTopics, AlterConfigs and IncrementalAlterConfigs answer "
        "INVALID_CONFIG with the reason, so a setting is never stored and ignored.", "",
        topic_configs_table(), "",
        "Dynamic broker configs (KIP-226)", "--------------------------------", "",
        "Every broker config Apache Kafka 4 updates at runtime, through AlterConfigs or IncrementalAlterConfigs "
        "on a BROKER resource: a broker id (*per broker*), or the empty name for the cluster-wide default "
        "(*cluster or broker*: either). *honoured*: the value replaces the ``kaas broker`` option (or the topic "
        "default) on every broker it applies to, within a poll. *accepted, no effect*: stored and shown by "
        "DescribeConfigs, as Apache accepts it, but kaas has no such machinery (the reason says which). "
        "*refused*: kaas has the setting but reads it only at start, or cannot honour the value: INVALID_CONFIG "
        "with the reason. A listener-prefixed key (``listener.name.<l>.<config>``) is taken as its base config "
        "(per broker); the SSL store keys need the prefix, as in Apache. Any other key is refused: a read-only "
        "one with Apache's INVALID_REQUEST (\"Cannot update these configs dynamically\"), an unknown one with "
        "INVALID_CONFIG (Apache would store an unknown key as a custom config; kaas would never read it).", "",
        dynamic_broker_table(), "",
        "Group configs (KIP-848, KIP-932)", "--------------------------------", "",
        "Set per group with AlterConfigs or IncrementalAlterConfigs (SET and DELETE) on a GROUP resource (type "
        "32), before or after the group exists; DescribeConfigs lists every one with its source: GROUP_CONFIG "
        "when the group sets it, else the broker's ``group.*`` setting (STATIC_BROKER_CONFIG when its option was "
        "given, DEFAULT_CONFIG otherwise) or the key's own default. A value outside the broker's min/max, a "
        "session timeout not above the heartbeat interval, an unknown key and a null value are refused with "
        "INVALID_CONFIG and Apache's message. They live in ``__cluster/group_configs.json``, written only by "
        "the controller and polled by every broker (docs/design.rst); deleting the group leaves them, as in "
        "Apache.", "",
        group_configs_table(), "",
        "Read-only broker configs", "------------------------", "",
        "DescribeConfigs shows kaas's options under their Apache names (STATIC_BROKER_CONFIG when the option "
        "was given, DEFAULT_CONFIG otherwise); AlterConfigs on any of these, or on another of Apache's "
        "read-only configs below, answers INVALID_REQUEST \"Cannot update these configs dynamically\".", "",
        static_broker_table(), ""])


def reference() -> str:
    """The generated block of docs/configs.rst (markers excluded)."""
    return configs_reference()


def render(current: str) -> str:
    """``current`` with the generated block replaced (or appended when it has no markers)."""
    return docgen.splice(current, "config_reference.py", reference())


def main(argv: list[str] | None = None) -> int:
    return docgen.main(sys.argv[1:] if argv is None else argv, description=__doc__.split("\n\n")[0],
                       script="config_reference.py", doc=DOC, generate=reference, source="from kaas.cli, kaas.configs")


if __name__ == "__main__":
    sys.exit(main())
