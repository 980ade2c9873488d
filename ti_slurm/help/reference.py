"""What the docs say about the spec, the CLI, the site config and the variables, made from the code.

``python -m ti_slurm.help.reference docs/reference`` writes the reference pages (and the spec's schema,
:mod:`ti_slurm.help.schema`), and a test checks the committed pages are what this makes, so the reference
cannot drift from the code.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ti_slurm.help.schema import schema_text

PAGES = ("spec.md", "cli.md", "site-config.md", "user-config.md", "variables.md", "spec.schema.json")


# -- the spec -------------------------------------------------------------------------------------------
def spec_page() -> str:
    from ti_slurm.submitting.spec import FIELD_DOCS, JobSpec, flow_yaml

    lines = [
        "# Spec fields",
        "",
        "<!-- made by `python -m ti_slurm.help.reference docs/reference`"
        " from ti_slurm/submitting/spec.py: edit there -->",
        "",
        "Every field of a job spec (YAML or JSON). `mode` and `command` are required; everything else has a",
        "default. Editors can check a spec as you type: see [Writing a job spec](../specs.md#editors).",
        "",
        "| field | type | default | what it does | example | more |",
        "|---|---|---|---|---|---|",
    ]
    properties = JobSpec.model_json_schema()["properties"]
    for name, info in JobSpec.model_fields.items():
        page, text, example = FIELD_DOCS[name]
        default = "required" if info.is_required() else _default(info)
        kind = _type_name(properties[name])
        lines.append(
            f"| `{name}` | {kind} | {default} | {text.replace('|', '&#124;')} | "
            f"`{name}: {flow_yaml(example)}` | [{page}](../{page}.md) |"
        )
    lines += ["", "Fields of the mappings above:", ""]
    for model in _sub_models():
        lines.append(f"- **{model.__name__}**: " + ", ".join(f"`{n}`" for n in model.model_fields) + ".")
        doc = (model.__doc__ or "").strip().split("\n\n")[0].replace("\n", " ")
        lines.append(f"  {doc}")
    return "\n".join(lines) + "\n"


def _default(info: Any) -> str:
    if info.default_factory is not None:
        return f"`{json.dumps(info.default_factory())}`"
    return "none" if info.default is None else f"`{json.dumps(info.default)}`"


def _type_name(prop: dict[str, Any]) -> str:
    options = prop.get("anyOf") or prop.get("oneOf") or [prop]
    names = []
    for option in options:
        if "$ref" in option:
            names.append("mapping")
        elif "enum" in option:
            names.append(" / ".join(f"`{v}`" for v in option["enum"]))
        elif "oneOf" in option or "anyOf" in option:
            names.append(_type_name(option))
        elif option.get("type") != "null":
            kind = option.get("type", "any")
            names.append({"object": "mapping", "array": "list", "string": "text"}.get(kind, kind))
    return " or ".join(dict.fromkeys(names))


def _sub_models() -> Iterator[Any]:
    from ti_slurm.submitting import spec

    yield from (
        spec.ComponentSpec,
        spec.NodeRange,
        spec.ContainerSpec,
        spec.InputSpec,
        spec.RestartSpec,
        spec.SignalSpec,
        spec.WatchdogSpec,
        spec.NotifySpec,
        spec.AfterSpec,
        spec.PreflightSpec,
        spec.RemoteSpec,
    )


# -- the command line -----------------------------------------------------------------------------------
def cli_page() -> str:
    from ti_slurm.cli import build_parser

    parser = build_parser()
    lines = [
        "# Commands",
        "",
        "<!-- made by `python -m ti_slurm.help.reference docs/reference` from ti_slurm/cli.py: edit there -->",
        "",
        "Every command and flag of `ti-slurm` (`ti-slurm COMMAND --help` says the same).",
        "",
    ]
    for name, sub in _subcommands(parser):
        lines += [f"## `ti-slurm {name}`", "", sub.description or _help_of(parser, name), ""]
        sub.formatter_class = _Wide
        lines += ["```", sub.format_usage().removeprefix("usage: ").strip(), "```", ""]
        for action in sub._actions:
            if action.help == argparse.SUPPRESS or isinstance(action, argparse._HelpAction):
                continue
            flags = ", ".join(f"`{o}`" for o in action.option_strings) or f"`{action.dest}`"
            choices = f" (one of: {', '.join(map(str, action.choices))})" if action.choices else ""
            lines.append(f"- {flags}: {action.help}{choices}" if action.help else f"- {flags}{choices}")
        lines.append("")
    return "\n".join(lines)


class _Wide(argparse.HelpFormatter):
    """Usage lines as wide as the page, whatever the terminal that made it."""

    def __init__(self, prog: str) -> None:
        super().__init__(prog, width=100)


def _subcommands(parser: argparse.ArgumentParser) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            yield from action.choices.items()


def _help_of(parser: argparse.ArgumentParser, name: str) -> str:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for choice in action._choices_actions:
                if choice.dest == name:
                    return (choice.help or "").capitalize() + "."
    return ""


# -- the site config ------------------------------------------------------------------------------------
def site_page() -> str:
    from dataclasses import MISSING, fields

    from ti_slurm.core.site import KEY_DOCS, SiteConfig

    lines = [
        "# Site config keys",
        "",
        "<!-- made by `python -m ti_slurm.help.reference docs/reference` from ti_slurm/core/site.py: edit there -->",
        "",
        "`/etc/ti-slurm/config.toml` (or the file `TI_SLURM_CONFIG` names); every key is optional, and no",
        "spec can set one. How to use them: [Installing on a cluster](../admin.md).",
        "",
        "| key | default | what it does |",
        "|---|---|---|",
    ]
    for f in fields(SiteConfig):
        default = f.default if f.default_factory is MISSING else f.default_factory()
        shown = json.dumps(list(default) if isinstance(default, tuple) else default)
        lines.append(f"| `{f.name}` | `{shown}` | {KEY_DOCS[f.name]} |")
    return "\n".join(lines) + "\n"


# -- the user config ------------------------------------------------------------------------------------
def user_config_page() -> str:
    from ti_slurm.submitting.userconfig import UserConfig

    lines = [
        "# User config keys",
        "",
        "<!-- made by `python -m ti_slurm.help.reference docs/reference`"
        " from ti_slurm/submitting/userconfig.py: edit there -->",
        "",
        "`$XDG_CONFIG_HOME/ti-slurm/config.toml` (`~/.config/ti-slurm/config.toml`): your own defaults; every key",
        "is optional. A mistake is one line naming the file and the key (`did you mean` for a typo), and nothing",
        "is submitted. How to use them: [Remote submission](../remote.md), [slurmrestd](../rest.md),",
        "[Several clusters](../clusters.md), [Notifications](../notifications.md).",
        "",
        "| key | default | what it does | example |",
        "|---|---|---|---|",
    ]
    for name, info in UserConfig.model_fields.items():
        table = _model_of(info.annotation)
        if table is None or name == "notify":
            lines.append(_key_row(name, info))
            continue
        lines.append(f"| `{name}` | | {_plain(table.__doc__)} | |")
        for key, inner in table.model_fields.items():
            lines.append(_key_row(f"{name}.{key}" if name != "cluster" else f"cluster[].{key}", inner))
    return "\n".join(lines) + "\n"


def _plain(text: str | None) -> str:
    """A docstring as one Markdown line."""
    return " ".join((text or "").split()).replace("``", "`").replace("|", "&#124;")


def _model_of(annotation: Any) -> Any:
    from typing import get_args

    from pydantic import BaseModel

    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return next((a for a in get_args(annotation) if isinstance(a, type) and issubclass(a, BaseModel)), None)


def _key_row(name: str, info: Any) -> str:
    default = "required" if info.is_required() else _default(info)
    example = f"`{json.dumps(info.examples[0])}`" if info.examples else ""
    return f"| `{name}` | {default} | {_plain(info.description)} | {example} |"


# -- the variables ---------------------------------------------------------------------------------------
def variables_page() -> str:
    from ti_slurm.job.contract import COMMON_NAMES
    from ti_slurm.job.modes import get_mode, mode_names
    from ti_slurm.job.platforms import get_platform, platform_names

    lines = [
        "# Variables each node gets",
        "",
        "<!-- made by `python -m ti_slurm.help.reference docs/reference` from ti_slurm/job/: edit there -->",
        "",
        "What every node's command finds in its environment, by mode and platform; what each means and",
        "how it is computed from Slurm's variables: [Modes and their variables](../modes.md) and",
        "[ModelArts jobs](../modelarts.md). A spec's `env:` may set none of these.",
        "",
        "| set by | variables |",
        "|---|---|",
        "| every mode | " + ", ".join(f"`{n}`" for n in sorted(COMMON_NAMES)) + ", and `TI_SLURM_*` |",
    ]
    for name in mode_names():
        names = sorted(get_mode(name).env_names)
        lines.append(f"| mode `{name}` | " + (", ".join(f"`{n}`" for n in names) or "(the common ones)") + " |")
    for name in platform_names():
        prefixes = get_platform(name).reserved_prefixes
        shown = ", ".join(f"`{p}*`" for p in prefixes) or "(the mode's own: the TI platform's names)"
        lines.append(f"| platform `{name}` | {shown} |")
    return "\n".join(lines) + "\n"


def pages() -> dict[str, str]:
    """Each reference page's name and text."""
    return {
        "spec.md": spec_page(),
        "cli.md": cli_page(),
        "site-config.md": site_page(),
        "user-config.md": user_config_page(),
        "variables.md": variables_page(),
        "spec.schema.json": schema_text(),
    }


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m ti_slurm.help.reference DIR   (writes the reference pages into DIR)", file=sys.stderr)
        return 2
    out = Path(argv[0])
    out.mkdir(parents=True, exist_ok=True)
    for name, text in pages().items():
        (out / name).write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
