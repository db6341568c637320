"""The library versions zero-planner's figures were modelled and tested with, and a note when others are installed.

The memory model follows code paths of transformers (attention kernels, fused experts), DeepSpeed (ZeRO's buffers
and flattening) and peft (what "all-linear" adapts) that change between releases: transformers 5.25.0 changed what
Falcon-7B keeps in SDPA's math kernel, and 5.17.0 Gemma 2's attention. MODELLED holds the versions constraints.txt
pins, which the tests and CI run (tests/test_constraints.py checks that the two agree); `drift_note` reads the
installed versions from package metadata, without importing the libraries.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

MODELLED = {"transformers": "5.24.0", "deepspeed": "0.19.8", "peft": "0.21.2"}
"""Distribution -> the version the tests and the committed measurements' re-estimates ran with."""


def installed(distribution: str) -> str | None:
    try:
        return version(distribution)
    except PackageNotFoundError:
        return None


def _release(text: str) -> tuple[int, ...]:
    parts = []
    for piece in text.split(".")[:2]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


def drift(versions: dict[str, str | None] | None = None) -> dict[str, tuple[str, str]]:
    """Returns {distribution: (installed, modelled)} where the installed release (major.minor) differs from the
    modelled one; `versions` stands in for the installed ones (tests)."""
    found = versions if versions is not None else {name: installed(name) for name in MODELLED}
    return {name: (have, MODELLED[name]) for name, have in found.items()
            if have is not None and name in MODELLED and _release(have) != _release(MODELLED[name])}  # fmt: skip


def drift_note(versions: dict[str, str | None] | None = None) -> str | None:
    """Returns the plan's note on libraries installed at other releases than the modelled ones, or None."""
    off = drift(versions)
    if not off:
        return None
    listed = ", ".join(f"{name} {have} (modelled with {want})" for name, (have, want) in off.items())
    return (f"installed {listed}: the memory figures follow code paths of these libraries that change between "
            f"releases; pip install -c constraints.txt installs the modelled ones")  # fmt: skip
