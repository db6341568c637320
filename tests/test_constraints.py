"""The versions the README's commands install: constraints.txt, used by .ci/run and scripts/demo.sh alike."""

from __future__ import annotations

import importlib.util

from conftest import ROOT


def _check_drift():
    spec = importlib.util.spec_from_file_location("check_drift", ROOT / "scripts" / "check_drift.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_install_of_the_readme_commands_uses_the_constraints():
    for script in (".ci/run", "scripts/demo.sh"):
        installs = [line for line in (ROOT / script).read_text().splitlines()
                    if "-m pip install" in line and not line.lstrip().startswith("#")]
        assert installs and all("-c constraints.txt" in line for line in installs), script


def test_the_constraints_pin_what_the_planner_models():
    pinned = _check_drift().pins((ROOT / "constraints.txt").read_text())
    assert pinned["torch"] == "2.13.0" and pinned["deepspeed"] == "0.19.8"
    # 5.25.0 changed Falcon-7B's attention trace (tests/test_math_sdpa.py failed on it, 2026-12-04)
    assert pinned["transformers"] == "5.24.0"
    for package in ("peft", "datasets", "accelerate", "trl", "pydantic", "bitsandbytes", "pytest-xdist"):
        assert package in pinned, package


def test_pins_reads_name_equals_version_lines_only():
    assert _check_drift().pins("# a comment\ntorch==2.13.0\nFoo_Bar==1.2  # why\nbaz>=3\n\n") == \
        {"torch": "2.13.0", "foo_bar": "1.2"}


def test_the_planner_models_the_pinned_versions():
    from zero_planner.versions import MODELLED

    pinned = _check_drift().pins((ROOT / "constraints.txt").read_text())
    assert MODELLED == {name: pinned[name] for name in MODELLED}


def test_a_plan_notes_libraries_at_other_releases(capsys):
    from zero_planner.cli import main
    from zero_planner.versions import drift, drift_note, installed

    assert drift({"transformers": "5.24.1", "deepspeed": "0.19.8", "peft": None}) == {}  # same release, or absent
    assert drift({"transformers": "5.25.0"}) == {"transformers": ("5.25.0", "5.24.0")}
    note = drift_note({"transformers": "5.25.0", "deepspeed": "0.20.0rc1"})
    assert note.startswith("installed transformers 5.25.0 (modelled with 5.24.0), deepspeed 0.20.0rc1 (modelled with")
    # what the installed ones give, in a real plan: the note where they differ, none where they do not
    assert main(["--model", "gpt2", "--gpus", "1xT4", "--json"]) == 0
    import json

    notes = json.loads(capsys.readouterr().out)["notes"]
    expected = drift_note()
    assert (expected in notes) if expected else not any("modelled with" in n for n in notes)
    assert installed("transformers") is not None
