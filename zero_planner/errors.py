"""Errors meant for people: bad input is named, with the closest valid choices."""

from __future__ import annotations

import argparse
import difflib
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any


class InputError(ValueError):
    """Bad user input. The CLI prints the message on one line and exits with status 2."""


EXIT_CLOSED_PIPE = 141
"""What zero-plan and zero-run exit with when the reader of their output went away (`zero-plan ... | head`): the
status of a program SIGPIPE ends (128 + 13), as `cat` and `grep` give in that pipe."""


def left_by_the_reader() -> int:
    """Returns EXIT_CLOSED_PIPE after pointing stdout at /dev/null, so that Python's own flush at exit does not fail
    again on the closed pipe and print a traceback (the recipe of the Python docs, signal module, "Note on SIGPIPE")."""
    import os

    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    return EXIT_CLOSED_PIPE


def closest(name: str, choices: Iterable[str], n: int = 3) -> list[str]:
    """Returns up to `n` of `choices` closest to `name` (case-insensitive), best first, original spelling."""
    by_lower: dict[str, str] = {}
    for choice in choices:
        by_lower.setdefault(choice.lower(), choice)
    matches = difflib.get_close_matches(name.lower(), list(by_lower), n=n, cutoff=0.5)
    return [by_lower[m] for m in matches]


def read_mapping(path: str | Path, where: str, parse: Callable[[str], Any], parse_errors: tuple[type[Exception], ...],
                 language: str, expected: str) -> dict[str, Any]:
    """Returns the mapping a config file holds: `parse` of its text. Every way it can fail is an InputError
    that starts with `where` (the flag and path): no such file, unreadable, not valid `language` (the parser's
    message on one line), or not a mapping ("is not `expected`")."""
    try:
        data = parse(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(f"{where}: no such file") from None
    except (OSError, UnicodeDecodeError) as error:
        raise InputError(f"{where}: cannot read it ({error.__class__.__name__}: {error})") from None
    except parse_errors as error:
        raise InputError(f"{where} is not valid {language}: {' '.join(str(error).split())}") from None
    if not isinstance(data, dict):
        raise InputError(f"{where} is not {expected}")
    return data


class InputErrorParser(argparse.ArgumentParser):
    """argparse that raises InputError (one line, exit 2) instead of printing the long usage and exiting, and hands
    a value that looks like a negative number to its option's type (negative_values_joined)."""

    def error(self, message: str):
        raise InputError(message)

    def parse_known_args(self, args=None, namespace=None):
        argv = sys.argv[1:] if args is None else args
        return super().parse_known_args(negative_values_joined(self, argv), namespace)


def negative_values_joined(parser, argv):
    """Returns `argv` with each value that looks like a negative number or size (`--cpu-mem -5GiB`, `--lr -1`)
    joined to its option (`--cpu-mem=-5GiB`), so that argparse hands it to the option's type, which names the bad
    value, instead of reading it as an unknown option and saying the option lacks its argument."""
    import re

    takes_value = {s for a in parser._actions if a.option_strings and a.nargs is None and a.const is None
                   for s in a.option_strings}  # fmt: skip
    out, args, i = [], list(argv), 0
    while i < len(args):
        token = args[i]
        if token in takes_value and i + 1 < len(args) and re.match(r"^-[\d.]", args[i + 1]):
            out.append(f"{token}={args[i + 1]}")
            i += 2
            continue
        out.append(token)
        i += 1
    return out
