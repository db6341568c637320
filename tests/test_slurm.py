"""zero-run --slurm: the sbatch script, checked against the options and variables SLURM documents
(zero_planner/catalog/slurm_options.json, read from sbatch.1 and srun.1 by scripts/slurm_options.py), run with
stand-in srun and scontrol to see what each node would execute. Nothing is submitted here."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import heavy_modules_after

from zero_planner.launch import main
from zero_planner.run import launcher, slurm

BASH = shutil.which("bash")


@pytest.fixture
def gpu_plan_file(plan_file):
    return plan_file(gpu="H100", nodes=2, gpus_per_node=8, gpu_memory_bytes=80 * 10**9, precision="bf16")


def script_of(capsys, *argv) -> str:
    assert main([*argv, "--slurm", "--dry-run"]) == 0
    return capsys.readouterr().out


def sbatch_directives(text: str) -> list[tuple[str, str | None]]:
    """Returns the #SBATCH options sbatch reads: those before the first command (sbatch.1, DESCRIPTION)."""
    found = []
    for line in text.splitlines()[1:]:
        if line.startswith("#SBATCH "):
            option, _, value = line[len("#SBATCH "):].partition("=")
            found.append((option, value if "=" in line else None))
        elif line.strip() and not line.startswith("#"):
            break
    return found


def value_fits(form: str, value: str | None) -> bool:
    """Returns whether `value` has the argument form the man page documents (`=<number>`, `[=0|1]`, flags)."""
    if not form:
        return value is None
    if form.startswith("[="):
        return True
    if value is None:
        return False
    if form in ("=<ntasks>", "=<ncpus>", "=<number>") or form.startswith("=<minnodes>"):
        return value.isdigit() and int(value) > 0
    if form == "=<list>":  # --gres: name[[:type]:count], comma separated
        return all(re.fullmatch(r"[a-z]+(:[\w.-]+)?:\d+", item) for item in value.split(","))
    return bool(value)


def test_script_uses_only_documented_sbatch_options(gpu_plan_file, capsys):
    text = script_of(capsys, str(gpu_plan_file), "--slurm-option=--partition=gpu", "--slurm-option", "time=04:00:00",
                     "--slurm-option=--exclusive")  # fmt: skip
    documented = slurm.documented()
    assert text.startswith("#!/bin/bash\n")
    directives = sbatch_directives(text)
    assert len(directives) == sum(line.startswith("#SBATCH ") for line in text.splitlines())  # all before any command
    for option, value in directives:
        form = documented["sbatch"]["options"].get(option)
        assert form is not None, f"{option} is not an sbatch option"
        assert value_fits(form, value), f"#SBATCH {option}={value} does not fit {option}{form}"
    assert dict(directives) == {
        "--job-name": "zero-run-llama-tiny", "--nodes": "2", "--ntasks-per-node": "1",
        "--output": str(gpu_plan_file.parent / "run" / "slurm-%j.out"), "--chdir": os.getcwd(), "--gres": "gpu:8",
        "--partition": "gpu", "--time": "04:00:00", "--exclusive": None,
    }  # fmt: skip


def test_srun_line_and_variables_are_documented(gpu_plan_file, capsys):
    text = script_of(capsys, str(gpu_plan_file))
    srun = next(line for line in text.splitlines() if line.startswith("srun "))
    words = shlex.split(srun)
    options = [w for w in words[1 : words.index("bash")] if w.startswith("--")]
    assert options == ["--nodes=2", "--ntasks-per-node=1", "--kill-on-bad-exit=1"]
    for option in options:
        name, _, value = option.partition("=")
        form = slurm.documented()["srun"]["options"][name]
        assert value_fits(form, value), f"srun {option} does not fit {name}{form}"
    # Variables: SLURM_NODEID is set by srun for each task, the job's by sbatch (OUTPUT ENVIRONMENT VARIABLES).
    used = set(re.findall(r"\$\{?(SLURM_[A-Z_]+)", text)) | set(re.findall(r"\b(SLURM_[A-Z_]+) %", text))
    assert used == {"SLURM_NODEID", "SLURM_JOB_NODELIST", "SLURM_JOB_ID"}
    assert "SLURM_NODEID" in slurm.documented()["srun"]["output_environment"]
    assert {"SLURM_JOB_NODELIST", "SLURM_JOB_ID"} <= set(slurm.documented()["sbatch"]["output_environment"])
    assert 'scontrol show hostnames "$SLURM_JOB_NODELIST"' in text  # scontrol.1: one host name per line


@pytest.mark.skipif(BASH is None, reason="needs bash")
def test_each_node_runs_zero_run_with_its_node_rank(gpu_plan_file, tmp_path):
    """Runs the script with stand-ins: scontrol names two hosts, srun runs the task once per node with its
    SLURM_NODEID, and the interpreter records the command it was given."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text('#!/bin/bash\n[ "$1 $2" = "show hostnames" ] && printf "gpu-a\\ngpu-b\\n"\n')
    (bin_dir / "srun").write_text(
        '#!/bin/bash\nnodes=0\nwhile [[ "$1" == --* ]]; do [[ "$1" == --nodes=* ]] && nodes=${1#--nodes=}; shift; done\n'
        'for ((i = 0; i < nodes; i++)); do SLURM_NODEID=$i "$@" || exit $?; done\n')
    log = tmp_path / "commands.jsonl"
    (bin_dir / "python").write_text(f"#!{sys.executable}\nimport json, sys\n"
                                    f"open({str(log)!r}, 'a').write(json.dumps(sys.argv[1:]) + '\\n')\n")  # fmt: skip
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    text = slurm.sbatch_script(job_name="t", nodes=2, gpus_per_node=8, output_dir=str(tmp_path),
                               workdir=str(tmp_path), node_argv=[str(bin_dir / "python"), "-m", "zero_planner.launch",
                                                                 "/plans/my plan.json", "--lr", "0.0001"],
                               script_args=["--bf16", "it's"])  # fmt: skip
    script = tmp_path / "job.sbatch"
    script.write_text(text)
    assert subprocess.run([BASH, "-n", str(script)]).returncode == 0
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "SLURM_JOB_NODELIST": "gpu-[a-b]",
           "SLURM_JOB_ID": "123456"}  # fmt: skip
    subprocess.run([BASH, str(script)], env=env, check=True, cwd=tmp_path)
    runs = [json.loads(line) for line in log.read_text().splitlines()]
    port = str(20000 + 123456 % 20000)
    assert runs == [["-m", "zero_planner.launch", "/plans/my plan.json", "--lr", "0.0001", "--node-rank", str(n),
                     "--master-addr", "gpu-a", "--master-port", port, "--", "--bf16", "it's"] for n in (0, 1)]  # fmt: skip


def test_node_command_repeats_the_run_options(plan_file, tmp_path, capsys):
    path = plan_file(gpu="cpu", nodes=2, gpus_per_node=1)
    # --resume-if-any: a requeued job continues; --resume with nothing to resume yet is refused at once
    text = script_of(capsys, str(path), "--max-steps", "7", "--resume-if-any", "--output-dir", "out", "--seed", "3",
                     "--master-port", "29555", "--master-wait", "60")  # fmt: skip
    assert "--gres" not in text  # CPU processes: no GPUs asked for
    assert 'export MASTER_PORT="29555"' in text
    inner = shlex.split(text.splitlines()[-1])[-1]
    assert inner == (f"exec {shlex.join([sys.executable, '-m', 'zero_planner.launch', str(path)])} --output-dir "
                     f"{Path('out').absolute()} --max-steps 7 --resume-if-any --master-wait 60 --seed 3 "
                     '--node-rank "$SLURM_NODEID" --master-addr "$MASTER_ADDR" --master-port "$MASTER_PORT"')  # fmt: skip


def test_slurm_writes_the_script_and_submits_it(gpu_plan_file, tmp_path, monkeypatch, capsys):
    out = gpu_plan_file.parent / "run"
    assert main([str(gpu_plan_file), "--slurm"]) == 0
    written = out / slurm.SCRIPT_NAME
    assert capsys.readouterr().out == f"zero-run: wrote {written}\nSubmit it with: sbatch {written}\n"
    assert written.read_text().startswith("#!/bin/bash\n#SBATCH --job-name=zero-run-llama-tiny\n")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert main([str(gpu_plan_file), "--slurm", "--submit"]) == 2
    assert "--submit needs sbatch on PATH" in capsys.readouterr().err
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "sbatch").write_text("#!/bin/sh\n")
    (fake / "sbatch").chmod(0o755)
    monkeypatch.setenv("PATH", str(fake))
    spawned = []
    monkeypatch.setattr(launcher, "spawn", lambda argv, env, **kw: spawned.append(argv) or (0, 0))
    assert main([str(gpu_plan_file), "--slurm", "--submit"]) == 0
    assert spawned == [["sbatch", str(written)]]


@pytest.mark.parametrize(
    "option, message",
    [
        ("--partion=gpu", "--partion is not an sbatch option; did you mean --partition"),
        ("--nodes=4", "the plan decides --nodes"),
        ("--gres=gpu:4", "the plan decides --gres"),
        ("--time", "--time takes a value (--time=<time>)"),
        ("--exclusive=yes", "--exclusive"),  # documented values only through the man page's form: accepted
        ("--parsable=1", "--parsable takes no value"),
        ("--p=gpu", "--p is not an sbatch option"),
    ],
)
def test_bad_slurm_options_exit_2_in_one_line(gpu_plan_file, capsys, option, message):
    rc = main([str(gpu_plan_file), "--slurm", "--dry-run", f"--slurm-option={option}"])
    if option == "--exclusive=yes":
        assert rc == 0 and "#SBATCH --exclusive=yes" in capsys.readouterr().out
        return
    err = capsys.readouterr().err
    assert rc == 2 and message in err and err.count("\n") == 1


def test_catalog_names_its_source():
    record = slurm.documented()
    assert record["source"] == "github.com/SchedMD/slurm" and len(record["commit"]) == 40
    assert record["sbatch"]["options"]["--gres"] == "=<list>"
    assert record["srun"]["options"]["--kill-on-bad-exit"] == "[=0|1]"


def test_import_is_light():
    assert heavy_modules_after("import zero_planner.run.slurm") == []
