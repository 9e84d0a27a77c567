"""reference/cli.md from the argparse parsers: every subcommand with its usage, every option with
its help, choices and default."""

from __future__ import annotations

import argparse
from collections.abc import Iterator, Mapping

from scripts.docs_reference.common import GENERATED, USAGE_WIDTH, cell, code

# The one place the generator names the config model and the parsers: a move of either module
# changes these two lines only.


def subparsers(
    parser: argparse.ArgumentParser,
) -> Iterator[tuple[str, str, argparse.ArgumentParser]]:
    """(name, help, parser) of each subcommand of `parser`, in the order they were added."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            for name, sub in action.choices.items():
                yield name, helps.get(name, ""), sub


def usage(parser: argparse.ArgumentParser) -> str:
    formatter = argparse.HelpFormatter(parser.prog, width=USAGE_WIDTH)
    formatter.add_usage(parser.usage, parser._actions, parser._mutually_exclusive_groups)
    return formatter.format_help().strip()


def option_name(action: argparse.Action) -> str:
    """How the reference names an argument: its option strings, or a positional's metavar."""
    if action.option_strings:
        return ", ".join(code(o) for o in action.option_strings)
    metavar = action.metavar if isinstance(action.metavar, str) else None
    return code(metavar or action.dest)


def option_help(action: argparse.Action, prog: str) -> str:
    """The help text with argparse's %(...)s placeholders filled in, as `--help` shows it."""
    text = action.help or ""
    if text == argparse.SUPPRESS:
        return ""
    if "%" in text:
        params = {k: v for k, v in vars(action).items() if v is not argparse.SUPPRESS}
        params["prog"] = prog
        if params.get("choices") is not None:
            params["choices"] = ", ".join(str(c) for c in params["choices"])
        text = text % params
    return text


def option_value(action: argparse.Action) -> str:
    """What the argument takes: its choices, its metavar, or nothing for a switch."""
    if action.nargs == 0:
        return ""
    if action.choices is not None and not isinstance(action.choices, Mapping):
        return " \\| ".join(code(str(c)) for c in action.choices)
    metavar = action.metavar if isinstance(action.metavar, str) else action.dest.upper()
    return code(metavar) + (" …" if action.nargs in ("+", "*") else "")


def option_default(action: argparse.Action) -> str:
    if action.nargs == 0 or action.default in (None, argparse.SUPPRESS) or action.required:
        return "required" if action.required else ""
    return code(str(action.default))


def cli_arguments(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """The arguments a reference lists: everything but -h and the subcommand selector."""
    return [
        a
        for a in parser._actions
        if not isinstance(a, argparse._HelpAction | argparse._SubParsersAction)
        and a.help != argparse.SUPPRESS
    ]


def cli_page(parser: argparse.ArgumentParser) -> str:
    lines = [
        "# Command line reference",
        "",
        GENERATED.strip(),
        "",
        f"{parser.description or ''} `gpu-webhook --help` and `gpu-webhook SUBCOMMAND --help`"
        " print the same help.",
        "",
        "```text",
        usage(parser),
        "```",
        "",
    ]
    lines += _argument_table(parser)
    lines += ["## Subcommands", "", "| subcommand | what it does |", "|---|---|"]
    subs = list(subparsers(parser))
    for name, help_text, _ in subs:
        lines.append(f"| [{code(name)}](#{parser.prog}-{name}) | {cell(help_text)} |")
    lines.append("")
    for _name, help_text, sub in subs:
        lines += [f"## {sub.prog}", "", help_text, "", "```text", usage(sub), "```", ""]
        lines += _argument_table(sub)
    return "\n".join(lines).rstrip() + "\n"


def _argument_table(parser: argparse.ArgumentParser) -> list[str]:
    actions = cli_arguments(parser)
    if not actions:
        return []
    lines = ["| argument | value | default | description |", "|---|---|---|---|"]
    for action in actions:
        lines.append(
            f"| {option_name(action)} | {option_value(action)} | {option_default(action)}"
            f" | {cell(option_help(action, parser.prog))} |"
        )
    return [*lines, ""]


# ---------------------------------------------------------------------------------------------
# Types and defaults from a JSON schema (the config model's and the chart's)
# ---------------------------------------------------------------------------------------------
