"""zero-run's launcher: argument lists (never spawned here), dry-run output, preflight refusals, light import."""

from __future__ import annotations

import json
import sys

import pytest
from conftest import GIB, heavy_modules_after, make_plan

from zero_planner import launch
from zero_planner.launch import main, parse_hostfile
from zero_planner.plan.command import Rendezvous, build_launch, launch_command
from zero_planner.run import launcher, preflight
from zero_planner.run.launcher import runnable
from zero_planner.run.preflight import Machine, fix_cuda_arch_list

ROOMY = Machine(gpus=[("NVIDIA H100 80GB HBM3", 85 * 10**9)] * 8, host_available_bytes=500 * GIB,
                disk_free_bytes=1000 * GIB)  # fmt: skip


@pytest.fixture(autouse=True)
def no_spawn(monkeypatch):
    """Launcher tests assert argument lists; any attempt to start a process fails the test."""

    def refuse(*args, **kwargs):
        raise AssertionError("a launcher test tried to spawn")

    monkeypatch.setattr(launcher, "spawn", refuse)


def gpu_plan(**kw):
    kw.setdefault("gpu", "H100")
    kw.setdefault("gpu_memory_bytes", 80 * 10**9)
    kw.setdefault("precision", "bf16")
    return make_plan(**kw)


def test_import_does_not_load_torch():
    assert heavy_modules_after("import zero_planner.launch") == []


def test_single_node_argv():
    argv, env = build_launch(gpu_plan(gpus_per_node=4), plan_path="/p/plan.json", where=Rendezvous(master_port=1234))
    assert argv == ["deepspeed", "--num_gpus", "4", "--master_port", "1234",
                    "--module", "zero_planner.train", "--plan", "/p/plan.json"]  # fmt: skip
    assert env == {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}  # what the memory plan assumes


def test_overrides_reach_the_trainer():
    argv, _ = build_launch(gpu_plan(), plan_path="p.json", max_steps=7, output_dir="/out", resume=True)
    assert argv[-7:] == ["--plan", "p.json", "--output-dir", "/out", "--max-steps", "7", "--resume"]


def test_cpu_plan_sets_ds_accelerator():
    argv, env = build_launch(make_plan(gpu="cpu"), plan_path="p.json")
    assert env == {"DS_ACCELERATOR": "cpu"}
    assert launch_command(make_plan(gpu="cpu"), "p.json")[:3] == ["env", "DS_ACCELERATOR=cpu", "deepspeed"]
    assert launch_command(gpu_plan(), "p.json")[:3] == ["env", "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
                                                         "deepspeed"]  # fmt: skip


def test_multi_node_argv_with_hostfile():
    plan = gpu_plan(nodes=2, gpus_per_node=8)
    hosts = parse_hostfile("# two nodes\nnode-a slots=8\nnode-b slots=8\n")
    where = Rendezvous(hostfile="hosts.txt", hosts=hosts, master_port=29600)
    argv, _ = build_launch(plan, plan_path="p.json", where=where)
    assert argv[:12] == ["deepspeed", "--hostfile", "hosts.txt", "--num_nodes", "2", "--num_gpus", "8",
                         "--master_addr", "node-a", "--master_port", "29600", "--module"]  # fmt: skip
    assert launch_command(plan)[2:5] == ["deepspeed", "--hostfile", "hostfile"]


def test_dry_run_prints_command_and_json(plan_file, capsys):
    path = plan_file(gpu="cpu")
    assert main([str(path), "--dry-run"]) == 0
    out = capsys.readouterr().out
    first, rest = out.split("\n", 1)
    # The interpreter running zero-run runs the launcher module: no `deepspeed` script on PATH needed.
    assert first == (f"DS_ACCELERATOR=cpu {sys.executable} -m deepspeed.launcher.runner --log_level error "
                     f"--num_gpus 2 --master_port 29500 --module zero_planner.train --plan {path}")  # fmt: skip
    assert json.loads(rest) == make_plan(gpu="cpu").deepspeed_config


def test_dry_run_multi_node(plan_file, tmp_path, capsys):
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("10.0.0.1 slots=8\n10.0.0.2 slots=8\n")
    path = plan_file(gpu="H100", nodes=2, gpus_per_node=8, gpu_memory_bytes=80 * 10**9)
    assert main([str(path), "--dry-run", "--hostfile", str(hostfile)]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith(f"PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True {sys.executable} -m "
                            f"deepspeed.launcher.runner --hostfile {hostfile} --num_nodes 2 --num_gpus 8 "
                            f"--master_addr 10.0.0.1 ")


def test_script_with_trailing_args(plan_file, tmp_path, capsys):
    script = tmp_path / "train_hf.py"
    script.write_text("print('hi')\n")
    path = plan_file(gpu="cpu", output_dir=str(tmp_path / "out"))
    assert main([str(path), "--dry-run", "--script", str(script), "--", "--lr", "1e-4", "--bf16"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.endswith(f"--master_port 29500 {script} --deepspeed_config {tmp_path / 'out' / 'ds_config.json'} "
                          "--lr 1e-4 --bf16")  # fmt: skip
    assert main([str(path), "--dry-run", "--script", str(script), "--config-flag", "deepspeed"]) == 0
    assert " --deepspeed " in capsys.readouterr().out.splitlines()[0]


@pytest.mark.parametrize(
    "argv_tail, plan_kw, message",
    [
        (["--", "--lr", "1"], {}, "arguments after -- are for --script"),
        (["--script", "/no/such/train.py"], {}, "does not exist"),
        ([], {"nodes": 2, "gpu": "H100"}, "pass --hostfile"),
        (["--max-steps", "0"], {}, "--max-steps 0"),
        (["--max-step", "5"], {}, "unrecognized arguments: --max-step 5"),  # no abbreviations
        (["--save-step", "5"], {}, "unrecognized arguments: --save-step 5"),
    ],
)
def test_bad_input_exits_2(plan_file, capsys, argv_tail, plan_kw, message):
    assert main([str(plan_file(**plan_kw)), "--dry-run", *argv_tail]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "text, message",
    [("node-a slots=8\n", "lists 1 hosts"), ("node-a slots=8\nnode-b slots=4\n", "node-b(slots=4)"),
     ("node-a eight\n", "is not 'HOST slots=N'")],  # fmt: skip
)
def test_bad_hostfile_exits_2(plan_file, tmp_path, capsys, text, message):
    hostfile = tmp_path / "hostfile"
    hostfile.write_text(text)
    path = plan_file(gpu="H100", nodes=2, gpus_per_node=8)
    assert main([str(path), "--dry-run", "--hostfile", str(hostfile)]) == 2
    assert message in capsys.readouterr().err


def test_unreadable_plan_exits_2(tmp_path, capsys):
    assert main([str(tmp_path / "missing.json")]) == 2
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert main([str(bad)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and "does not exist" in err[0] and "not readable JSON" in err[1]


@pytest.mark.parametrize(
    "plan_kw, machine, message",
    [
        ({"gpus_per_node": 8}, Machine(gpus=ROOMY.gpus[:4], host_available_bytes=500 * GIB, disk_free_bytes=10**12),
         "needs 8 GPUs per node (H100); this machine has 4"),
        ({"total_bytes": 70 * GIB}, Machine(gpus=[("Tesla T4", 15 * GIB)] * 2, host_available_bytes=500 * GIB,
                                            disk_free_bytes=10**12), "GPU 0 (Tesla T4) has 15.0 GiB; the plan needs 70.0 GiB"),
        ({"total_bytes": 10 * GIB}, Machine(gpus=[("NVIDIA A100 40GB", 40 * GIB)] * 2, host_available_bytes=500 * GIB,
                                            disk_free_bytes=10**12), "less than the planned H100"),
        ({"strategy": "2-offload", "cpu_bytes": 200 * GIB},
         Machine(gpus=ROOMY.gpus, host_available_bytes=100 * GIB, disk_free_bytes=10**12),
         "offload (2-offload) needs 200.0 GiB of host memory per node at its peak (train); 100.0 GiB is available"),
        ({"params": 8 * 10**9}, Machine(gpus=ROOMY.gpus, host_available_bytes=500 * GIB, disk_free_bytes=50 * GIB),
         "this run writes up to"),
    ],
)  # fmt: skip
def test_preflight_refusals(plan_file, tmp_path, monkeypatch, capsys, plan_kw, machine, message):
    plan = gpu_plan(**plan_kw)
    problems = preflight.preflight(plan, machine, output_dir=str(tmp_path))
    assert len(problems) == 1 and message in problems[0]
    assert preflight.preflight(plan, ROOMY, output_dir=str(tmp_path)) == [] or "this run writes" in message
    # Through the CLI: refused with exit 2 before anything is spawned (the autouse fixture would fail it).
    monkeypatch.setattr(preflight, "probe_machine", lambda plan, output_dir: machine)
    path = plan_file(**{"gpu": "H100", "gpu_memory_bytes": 80 * 10**9, **plan_kw})
    assert main([str(path)]) == 2
    assert message in capsys.readouterr().err


def test_cpu_plan_ignores_gpu_checks(tmp_path):
    machine = Machine(gpus=None, host_available_bytes=8 * GIB, disk_free_bytes=10 * GIB)
    assert preflight.preflight(make_plan(gpu="cpu", gpus_per_node=2), machine, output_dir=str(tmp_path)) == []


def test_split_argv():
    assert launch.split_argv(["p.json", "--script", "t.py", "--", "--x", "--", "y"]) == (
        ["p.json", "--script", "t.py"],
        ["--x", "--", "y"],
    )


def test_preflight_refuses_qlora_on_cpu_before_any_rank_starts(tmp_path):
    plan = make_plan("2")
    plan.training.method = "qlora"
    machine = Machine(gpus=None, host_available_bytes=64 * GIB, disk_free_bytes=100 * GIB)
    problems = preflight.preflight(plan, machine, output_dir=str(tmp_path))
    assert any("QLoRA needs a CUDA GPU" in p for p in problems)


def test_runnable_needs_no_deepspeed_script_on_path(monkeypatch):
    monkeypatch.setattr(launcher, "launcher_takes_log_level", lambda: False)
    argv, _ = build_launch(gpu_plan(), plan_path="p.json", where=Rendezvous(master_port=1))
    assert runnable(argv, python="/venv/bin/python")[:4] == ["/venv/bin/python", "-m", "deepspeed.launcher.runner",
                                                              "--num_gpus"]  # fmt: skip
    assert runnable(["torchrun", "x.py"]) == ["torchrun", "x.py"]


def test_one_node_runner_is_quiet_where_deepspeed_lets_it(tmp_path):
    """DeepSpeed's runner warns on every one-node launch that it found no hostfile: --log_level error where the
    installed runner has the option (this venv's does), never with a hostfile."""
    argv, _ = build_launch(gpu_plan(), plan_path="p.json", where=Rendezvous(master_port=1))
    assert launcher.launcher_takes_log_level()  # deepspeed 0.19 here
    assert runnable(argv, python="py")[:6] == ["py", "-m", "deepspeed.launcher.runner", "--log_level", "error",
                                               "--num_gpus"]  # fmt: skip
    hosts = tmp_path / "hostfile"
    argv, _ = build_launch(gpu_plan(nodes=2), plan_path="p.json", where=Rendezvous(hostfile=str(hosts), master_port=1))
    assert "--log_level" not in runnable(argv)
    from deepspeed.launcher.runner import parse_args  # the runner's own parser accepts the command

    parsed = parse_args(runnable(build_launch(gpu_plan(), plan_path="p.json", where=Rendezvous(master_port=1))[0])[3:])
    assert parsed.log_level == "error" and parsed.user_script == "zero_planner.train" and parsed.module


@pytest.mark.parametrize(
    "value, capabilities, expected",
    [
        ("9.0a", [(9, 0)], "9.0"),  # seen in CUDA images: DeepSpeed's int() of "0a" crashed the fused Adam build
        ("9.0a", [], "9.0"),  # no GPU detected: the numeric form
        ("8.0;9.0a 10.0f", [(9, 0), (9, 0)], "9.0"),  # the GPUs of this machine win
        ("sm_90", [], "9.0"),
        ("garbage", [], ""),  # nothing numeric: unset, DeepSpeed probes the GPUs itself
    ],
)
def test_unparsable_cuda_arch_list_is_replaced(value, capabilities, expected):
    fixed, note = fix_cuda_arch_list(value, capabilities)
    assert fixed == expected and value in note


@pytest.mark.parametrize("value", [None, "", "9.0", "8.0;8.6 9.0+PTX"])
def test_parsable_cuda_arch_list_is_left_alone(value):
    assert fix_cuda_arch_list(value, [(9, 0)]) == (None, None)


def test_training_overrides_reach_the_trainer(plan_file, capsys, tmp_path):
    data = tmp_path / "d.jsonl"
    data.write_text('{"text": "hello"}\n')
    path = plan_file(gpu="cpu")
    assert main([str(path), "--dry-run", "--lr", "1e-4", "--dataset", str(data), "--epochs", "2", "--warmup", "0.1"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.endswith(f"--plan {path} --dataset {data} --warmup 0.1 --epochs 2.0 --lr 0.0001")


@pytest.mark.parametrize(
    "argv_tail, message",
    [
        (["--dataset", "missing.jsonl"], "dataset file 'missing.jsonl' does not exist"),
        (["--lr", "-1"], "argument --lr: '-1' must be a positive number"),
        (["--lr", "5"], "is not a learning rate in (0, 1)"),
        (["--warmup", "2.5"], "is not a number of steps (integer) or a share in [0, 1)"),
        (["--init", "pretrained"], "is a config only, with no weights"),
        (["--eval-split", "validation"], "the synthetic dataset has none"),
    ],
)
def test_bad_training_overrides_exit_2_in_one_line(plan_file, capsys, argv_tail, message):
    assert main([str(plan_file(gpu="cpu")), "--dry-run", *argv_tail]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


def test_weights_missing_offline_are_refused_before_launch(tmp_path, monkeypatch, capsys):
    import huggingface_hub.constants

    from zero_planner.planfile import save_plan

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    plan = make_plan(gpu="cpu", output_dir=str(tmp_path / "run"))
    plan.model.init, plan.model.load_path, plan.model.source = "pretrained", "nobody/not-cached-zp", "hub"
    save_plan(plan, tmp_path / "plan.json")
    assert main([str(tmp_path / "plan.json")]) == 2
    err = capsys.readouterr().err
    assert "huggingface-cli download nobody/not-cached-zp" in err and "--init random" in err
    assert err.count("\n") == 1 and not (tmp_path / "run").exists()


# --- several nodes: one zero-run per node (--node-rank) ---


def test_per_node_argv_is_deepspeeds_per_node_launcher():
    from deepspeed.launcher.runner import encode_world_info as deepspeeds

    argv, env = build_launch(gpu_plan(nodes=2, gpus_per_node=8), plan_path="/p/plan.json",
                             where=Rendezvous(node_rank=1, master_addr="10.0.0.1", master_port=29600))  # fmt: skip
    world = {"node0": list(range(8)), "node1": list(range(8))}
    # What `deepspeed --no_ssh --node_rank 1` runs (runner.py main), with DeepSpeed's own world encoding.
    assert argv == ["python", "-u", "-m", "deepspeed.launcher.launch", f"--world_info={deepspeeds(world)}",
                    "--node_rank=1", "--master_addr=10.0.0.1", "--master_port=29600",
                    "--module", "zero_planner.train", "--plan", "/p/plan.json"]  # fmt: skip
    assert env == {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}
    assert runnable(argv, python="/venv/bin/python")[:4] == ["/venv/bin/python", "-u", "-m", "deepspeed.launcher.launch"]


def world_of(argv: list[str]) -> dict:
    import base64

    value = next(a for a in argv if a.startswith("--world_info="))[len("--world_info="):]
    return json.loads(base64.urlsafe_b64decode(value))


def test_per_node_uses_this_nodes_visible_gpus():
    visible = ["4", "5", "6", "7", "0", "1", "2", "3"]
    argv, _ = build_launch(gpu_plan(nodes=2, gpus_per_node=4), plan_path="p",
                           where=Rendezvous(node_rank=0, master_addr="a", visible_devices=visible))  # fmt: skip
    assert world_of(argv) == {"node0": ["4", "5", "6", "7"], "node1": [0, 1, 2, 3]}  # SLURM may hand out 4-7
    argv, _ = build_launch(make_plan(gpu="cpu", nodes=2, gpus_per_node=1), plan_path="p",
                           where=Rendezvous(node_rank=1, master_addr="a", visible_devices=visible))  # fmt: skip
    assert world_of(argv) == {"node0": [0], "node1": [0]}  # CPU processes: no devices to pick


def test_dry_run_per_node(plan_file, capsys):
    path = plan_file(gpu="cpu", nodes=2, gpus_per_node=1)
    assert main([str(path), "--dry-run", "--node-rank", "1", "--master-addr", "node-a", "--max-steps", "3"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith(f"DS_ACCELERATOR=cpu {sys.executable} -u -m deepspeed.launcher.launch --world_info=")
    assert first.endswith(f"--node_rank=1 --master_addr=node-a --master_port=29500 --module zero_planner.train "
                          f"--plan {path} --max-steps 3")  # fmt: skip


@pytest.mark.parametrize(
    "argv_tail, message",
    [
        (["--node-rank", "2", "--master-addr", "a"], "--node-rank 2 is not a node of this plan: use 0..1 (nodes(2))"),
        (["--node-rank", "1"], "--node-rank needs --master-addr: the address of node 0"),
        (["--node-rank", "x"], "argument --node-rank: 'x' is not a node index"),
        (["--node-rank", "0", "--master-addr", "a", "--hostfile", "h"], "--hostfile starts every node from one"),
        (["--submit"], "--submit submits the script that --slurm writes: add --slurm"),
        (["--slurm-option=--partition=gpu"], "add --slurm"),
        (["--slurm", "--node-rank", "0"], "drop --node-rank"),
        (["--master-wait", "5"], "it goes with --node-rank or --slurm"),
        (["--node-rank", "0", "--master-addr", "a", "--probe-only"], "--probe runs the candidates on this machine"),
        (["--node-ran", "0"], "unrecognized arguments: --node-ran 0"),  # no abbreviations: allow_abbrev=False
    ],
)
def test_bad_multi_node_input_exits_2_in_one_line(plan_file, tmp_path, capsys, argv_tail, message):
    (tmp_path / "h").write_text("a slots=1\nb slots=1\n")
    argv_tail = [str(tmp_path / "h") if a == "h" else a for a in argv_tail]
    assert main([str(plan_file(gpu="cpu", nodes=2, gpus_per_node=1)), "--dry-run", *argv_tail]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


def test_node0_serves_the_rendezvous_from_its_own_free_port():
    import socket

    port = launcher.free_port()
    assert preflight.check_rendezvous(0, "127.0.0.1", port) is None
    with socket.socket() as busy:
        busy.bind(("", port))
        busy.listen()
        assert preflight.check_rendezvous(0, "127.0.0.1", port) == (f"--master-port {port} is in use on node 0 "
                                                                 "(another run?): choose another port")  # fmt: skip
    # 192.0.2.1 is TEST-NET-1 (RFC 5737): no machine has it
    assert "is not an address of this machine" in preflight.check_rendezvous(0, "192.0.2.1", port)


def test_other_nodes_wait_for_node0_then_say_why(monkeypatch):
    import socket

    port = launcher.free_port()
    said = []
    problem = preflight.check_rendezvous(1, "127.0.0.1", port, wait_s=1, say=said.append)
    assert problem == (f"node 0's rendezvous 127.0.0.1:{port} refused connections for 1 s: start node 0 "
                       "(--node-rank 0) with the same --master-port, or wait longer (--master-wait)")  # fmt: skip
    assert said == [f"zero-run: node 1: waiting up to 1 s for node 0's rendezvous at 127.0.0.1:{port}"]
    with socket.socket() as server:
        server.bind(("127.0.0.1", port))
        server.listen()
        assert preflight.check_rendezvous(1, "127.0.0.1", port, wait_s=1) is None

    def silent(*args, **kwargs):
        raise socket.timeout("timed out")

    monkeypatch.setattr(socket, "create_connection", silent)
    assert "did not answer within 1 s" in preflight.check_rendezvous(2, "127.0.0.1", port, wait_s=1, say=said.append)

    def unknown(*args, **kwargs):
        raise socket.gaierror(-2, "Name or service not known")

    monkeypatch.setattr(socket, "getaddrinfo", unknown)
    assert preflight.check_rendezvous(1, "node-zz", port) == ("--master-addr 'node-zz' does not resolve on this node "
                                                           "(Name or service not known)")  # fmt: skip


def test_node_refuses_to_start_without_node0_or_its_gpus(plan_file, monkeypatch, capsys):
    monkeypatch.setattr(preflight, "probe_machine", lambda plan, output_dir: ROOMY)
    path = plan_file(gpu="H100", nodes=2, gpus_per_node=8, gpu_memory_bytes=80 * 10**9)
    port = str(launcher.free_port())
    assert main([str(path), "--node-rank", "1", "--master-addr", "127.0.0.1", "--master-port", port,
                 "--master-wait", "1"]) == 2  # fmt: skip
    err = capsys.readouterr().err.splitlines()
    assert err[-1].startswith(f"zero-run: refusing to launch: node 1: node 0's rendezvous 127.0.0.1:{port} refused")
    four = Machine(gpus=ROOMY.gpus[:4], host_available_bytes=500 * GIB, disk_free_bytes=10**12)
    monkeypatch.setattr(preflight, "probe_machine", lambda plan, output_dir: four)
    assert main([str(path), "--node-rank", "0", "--master-addr", "127.0.0.1", "--master-port", port]) == 2
    assert capsys.readouterr().err == ("zero-run: refusing to launch: node 0: the plan needs 8 GPUs per node (H100); "
                                       "this machine has 4\n")  # fmt: skip

# --- every input check before the first rank starts (issue 25) ---


def _plan_with(tmp_path, **training):
    from zero_planner.planfile import save_plan

    plan = make_plan(gpu="cpu", output_dir=str(tmp_path / "run"), **training)
    path = tmp_path / "plan.json"
    save_plan(plan, path)
    return path


CHAT_ROW = '{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}\n'


@pytest.mark.parametrize("files, training, argv_tail, message", [
    # a config-only model with no tokenizer: found inside the ranks before, after the launcher had started
    ({}, {"tokenizer": None}, [], "llama-tiny comes with no tokenizer (a config only): pass --tokenizer bytes|PATH|HUB_ID"),
    ({"tok/README": "no tokenizer here"}, {"tokenizer": "{tmp}/tok"}, [], "tok has no tokenizer files"),
    # a malformed data file: found inside the ranks as "could not be read as json: Unexpected character ..."
    ({"d.jsonl": '{"text": "a"}\n{"text": nul}\n'}, {"dataset": "{tmp}/d.jsonl"}, [],
     "--dataset file '{tmp}/d.jsonl' line 2: not valid JSON"),
    ({"d.jsonl": '{"text": "a"}\n', "bad.jsonl": "[1, 2\n"}, {}, ["--dataset", "{tmp}/bad.jsonl"],
     "bad.jsonl' ends before its JSON is complete (line 2: Expecting ',' delimiter); truncated?"),
    ({"d.jsonl": '{"text": "a"}\n', "e.jsonl": "{}\n"}, {"dataset": "{tmp}/d.jsonl"}, ["--eval-split", "{tmp}/e.jsonl"],
     "--eval-split file '{tmp}/e.jsonl' line 1: no value for column 'text'"),
    # chat rows need a chat template, which the byte-level tokenizer lacks
    ({"chat.jsonl": CHAT_ROW}, {"dataset": "{tmp}/chat.jsonl"}, [], "the byte-level tokenizer has none"),
    ({"chat.jsonl": CHAT_ROW, "tok/tokenizer_config.json": "{}"},
     {"dataset": "{tmp}/chat.jsonl", "tokenizer": "{tmp}/tok"}, [], "tok has none: pass --tokenizer PATH|HUB_ID"),
])  # fmt: skip
@pytest.mark.parametrize("dry_run", [False, True])
def test_inputs_are_refused_before_any_rank_starts(tmp_path, capsys, files, training, argv_tail, message, dry_run):
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    training = {k: v.replace("{tmp}", str(tmp_path)) if isinstance(v, str) else v for k, v in training.items()}
    path = _plan_with(tmp_path, **training)
    argv = [str(path), *(a.replace("{tmp}", str(tmp_path)) for a in argv_tail)] + (["--dry-run"] if dry_run else [])
    assert main(argv) == 2  # no_spawn: nothing was launched
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1 and captured.err.startswith("zero-run: error: ")
    assert message.replace("{tmp}", str(tmp_path)) in captured.err
    assert "Traceback" not in captured.err and captured.out == ""


def test_resume_from_checkpoints_of_another_world_size_is_refused(tmp_path, capsys):
    from zero_planner.run import checkpoint as ckpt

    path = _plan_with(tmp_path)
    tag = tmp_path / "run" / ckpt.CHECKPOINTS_DIR / ckpt.tag_for(4)
    tag.mkdir(parents=True)
    (tag / "mp_rank_00_model_states.pt").write_bytes(b"x")
    ckpt.write_marker(tag, {"step": 4, "losses": [1.0] * 4, "world_size": 4})
    assert main([str(path), "--resume"]) == 2
    assert "was written by 4 ranks; this plan has 2" in capsys.readouterr().err


def test_qlora_without_bitsandbytes_is_refused_before_launch(tmp_path, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "bitsandbytes" else real(name, *a))
    plan = gpu_plan(method="qlora", lora={"r": 8, "quantization": "nf4"})
    with pytest.raises(launch.InputError, match="QLoRA needs bitsandbytes"):
        preflight.check_inputs(plan)


def test_good_inputs_pass(tmp_path):
    (tmp_path / "d.jsonl").write_text('{"text": "a"}\n{"text": "b"}\n')
    (tmp_path / "tok").mkdir()
    (tmp_path / "tok" / "tokenizer_config.json").write_text('{"chat_template": "{{ messages }}"}')
    (tmp_path / "chat.jsonl").write_text(CHAT_ROW)
    preflight.check_inputs(make_plan(dataset=str(tmp_path / "d.jsonl")))
    preflight.check_inputs(make_plan(dataset=str(tmp_path / "chat.jsonl"), tokenizer=str(tmp_path / "tok")))
    plan = make_plan(tokenizer=None)
    plan.model.source, plan.model.hub_id = "catalog", "meta-llama/Llama-3.2-1B"  # its own tokenizer, from the hub
    preflight.check_inputs(plan)
