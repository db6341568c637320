"""Errors meant for people: bad input is named, with the closest valid choices."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class InputError(ValueError):
    """Bad user input. The CLI prints the message on one line and exits with status 2."""


def closest(name: str, choices: Iterable[str], n: int = 3) -> list[str]:
    """Returns up to `n` of `choices` closest to `name` (case-insensitive), best first, original spelling."""
    by_lower: dict[str, str] = {}
    for choice in choices:
        by_lower.setdefault(choice.lower(), choice)
    matches = difflib.get_close_matches(name.lower(), list(by_lower), n=n, cutoff=0.5)
    return [by_lower[m] for m in matches]
