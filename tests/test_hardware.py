"""GPU catalog, find_gpu, --gpus and size parsing."""

from __future__ import annotations

import types

import pytest
from hypothesis import given
from hypothesis import strategies as st

from zero_planner import hardware
from zero_planner.errors import InputError, closest
from zero_planner.hardware import find_gpu, load_gpu_catalog, parse_gpus, parse_size

GiB, MiB = 2**30, 2**20

REQUIRED = [
    "T4", "P100", "V100-16GB", "V100-32GB", "A10G", "A10", "L4", "RTX3090", "RTX4090", "A6000", "L40S",
    "A100-40GB", "A100-80GB", "H100-SXM", "H100-PCIe", "H200", "B200", "MI300X", "cpu",
]


def test_catalog_has_the_common_gpus():
    assert set(REQUIRED) <= set(load_gpu_catalog())
    assert len(load_gpu_catalog()) >= 17


@pytest.mark.parametrize("gpu", list(load_gpu_catalog().values()), ids=lambda g: g.name)
def test_catalog_entries_are_coherent(gpu):
    assert gpu.memory_bytes > 8 * GiB
    if gpu.nvidia_smi_total_mib is not None:
        # usable memory is nvidia-smi's total minus the driver reservation (at most ~1.5 GiB)
        assert gpu.nvidia_smi_total_mib * MiB - 2 * GiB < gpu.memory_bytes <= gpu.nvidia_smi_total_mib * MiB
    for value in (gpu.intra_node_bandwidth_bytes_per_s, gpu.pcie_bandwidth_bytes_per_s, gpu.memory_bandwidth_bytes_per_s):
        assert isinstance(value, int) and value >= 10**9
    assert gpu.peak_dense_tflops_16bit >= gpu.peak_tflops_fp32 > 0 or gpu.is_cpu
    assert gpu.host_memory_per_gpu_bytes >= 8 * GiB
    assert gpu.source


@pytest.mark.parametrize(
    "name, memory_bytes",
    [
        ("H100-SXM", 85017493504),  # measured: torch total_memory on 'NVIDIA H100 80GB HBM3'
        ("H200", 150109880320),  # measured: torch total_memory on 'NVIDIA H200'
        ("T4", 15835660288),  # 14.75 GiB, as torch reports on Colab/Kaggle
    ],
)
def test_memory_figures(name, memory_bytes):
    assert find_gpu(name).memory_bytes == memory_bytes


@pytest.mark.parametrize(
    "name, bf16", [("T4", False), ("V100-32GB", False), ("P100", False), ("A100-80GB", True), ("H100", True), ("L4", True)]
)
def test_bf16_support(name, bf16):
    assert find_gpu(name).bf16 is bf16


@pytest.mark.parametrize(
    "text, expected",
    [
        ("a100-80gb", "A100-80GB"),
        ("A100_80GB", "A100-80GB"),
        ("A100 80GB", "A100-80GB"),
        ("h100", "H100-SXM"),
        ("H100-sxm", "H100-SXM"),
        ("nvidia-a10g", "A10G"),
        ("NVIDIA A10G", "A10G"),
        ("rtx 4090", "RTX4090"),
        ("3090", "RTX3090"),
        ("rtx-a6000", "A6000"),
        ("t4", "T4"),
        ("A100", "A100-40GB"),  # ambiguous names resolve to the smaller-memory variant (documented in gpus.json)
        ("V100", "V100-16GB"),
        ("h100-pcie", "H100-PCIe"),
        ("mi300x", "MI300X"),
    ],
)
def test_find_gpu(text, expected):
    assert find_gpu(text).name == expected


@pytest.mark.parametrize("text, suggestion", [("T5", "T4"), ("H1000", "H100-SXM"), ("A100-90GB", "A100-80GB")])
def test_find_gpu_unknown_names_the_value_and_suggests(text, suggestion):
    with pytest.raises(InputError) as error:
        find_gpu(text)
    message = str(error.value)
    assert repr(text) in message and suggestion in message and "\n" not in message


@pytest.mark.parametrize(
    "spec, cpu_mem, gpu, nodes, per_node, host_bytes",
    [
        ("2xT4", None, "T4", 1, 2, 29 * GiB),  # assumed: Kaggle 2xT4 has ~29 GiB
        ("1xH100", None, "H100-SXM", 1, 1, 256 * GiB),
        ("8xA100-80GB", None, "A100-80GB", 1, 8, 8 * 144 * GiB),
        ("2x8xH100", None, "H100-SXM", 2, 8, 8 * 256 * GiB),
        ("T4", None, "T4", 1, 1, int(14.5 * GiB)),
        ("2xT4", "29GiB", "T4", 1, 2, 29 * GiB),
        ("4xL4", "100GB", "L4", 1, 4, 100 * 10**9),
        ("2x3090", None, "RTX3090", 1, 2, 64 * GiB),
        ("2X RTX4090", None, "RTX4090", 1, 2, 64 * GiB),
        (" 4 x a10g ", None, "A10G", 1, 4, 128 * GiB),
        ("16*H200", None, "H200", 1, 16, 16 * 256 * GiB),
    ],
)
def test_parse_gpus(spec, cpu_mem, gpu, nodes, per_node, host_bytes):
    cluster = parse_gpus(spec, cpu_mem)
    assert (cluster.gpu.name, cluster.nodes, cluster.gpus_per_node) == (gpu, nodes, per_node)
    assert cluster.world_size == nodes * per_node
    assert cluster.cpu_memory_bytes == host_bytes
    assert cluster.cpu_memory_source == ("assumed" if cpu_mem is None else "given")
    assert not cluster.is_cpu


@pytest.mark.parametrize(
    "spec, must_mention",
    [
        ("2xT5", ["'2xT5'", "T4"]),
        ("0xT4", ["'0xT4'", "at least 1"]),
        ("2x0xT4", ["'2x0xT4'", "at least 1"]),
        ("-1xT4", ["'-1xT4'", "NxTYPE"]),
        ("8x", ["'8x'", "NxTYPE"]),
        ("", ["NxTYPE", "cpu:N"]),
        ("1.5xT4", ["'1.5xT4'", "NxTYPE"]),
        ("2x2x2xT4", ["'2x2x2xT4'", "NODESxNxTYPE"]),
        ("cpu:0", ["'cpu:0'", "N >= 1"]),
        ("cpu:two", ["'cpu:two'", "N >= 1"]),
        ("2xcpu", ["'2xcpu'", "cpu:N"]),
        ("4xA100-90GB", ["'4xA100-90GB'", "A100-80GB"]),
    ],
)
def test_parse_gpus_rejects(spec, must_mention):
    with pytest.raises(InputError) as error:
        parse_gpus(spec)
    message = str(error.value)
    assert "\n" not in message
    for text in must_mention:
        assert text in message


def test_parse_gpus_bad_cpu_mem():
    with pytest.raises(InputError, match="'lots'"):
        parse_gpus("2xT4", "lots")


@pytest.mark.parametrize("cpu_mem, host_bytes, source", [("64GiB", 64 * GiB, "given"), (None, 48 * GiB, "detected")])
def test_parse_gpus_cpu_processes(monkeypatch, cpu_mem, host_bytes, source):
    monkeypatch.setattr(hardware, "_detected_host_memory_bytes", lambda: 48 * GiB)
    cluster = parse_gpus("cpu:2", cpu_mem)
    assert cluster.is_cpu and cluster.gpu.is_cpu
    assert (cluster.nodes, cluster.gpus_per_node, cluster.world_size) == (1, 2, 2)
    assert cluster.cpu_memory_bytes == host_bytes and cluster.cpu_memory_source == source
    assert cluster.gpu.memory_bytes == host_bytes // 2


def _fake_torch(count: int, name: str = "", total: int = 0):
    props = types.SimpleNamespace(name=name, total_memory=total)
    cuda = types.SimpleNamespace(
        is_available=lambda: count > 0, device_count=lambda: count, get_device_properties=lambda index: props
    )
    return types.SimpleNamespace(cuda=cuda)


def test_parse_gpus_auto_without_gpus(monkeypatch):
    monkeypatch.setattr(hardware, "_nvml_devices", lambda: None)  # no NVML (ROCm?): torch decides
    monkeypatch.setattr(hardware, "_gpu_device_nodes", lambda: True)
    monkeypatch.setitem(__import__("sys").modules, "torch", _fake_torch(0))
    with pytest.raises(InputError, match="--gpus"):
        parse_gpus("auto")


def test_parse_gpus_auto_without_a_gpu_driver_asks_no_torch(monkeypatch):
    monkeypatch.setattr(hardware, "_nvml_devices", lambda: None)
    monkeypatch.setattr(hardware, "_gpu_device_nodes", lambda: False)
    monkeypatch.setitem(__import__("sys").modules, "torch", None)  # importing torch would fail
    with pytest.raises(InputError, match="found no CUDA GPU"):
        parse_gpus("auto")


def test_parse_gpus_auto_reads_the_local_gpus(monkeypatch):
    monkeypatch.setattr(hardware, "_nvml_devices", lambda: None)
    monkeypatch.setattr(hardware, "_gpu_device_nodes", lambda: True)
    monkeypatch.setitem(__import__("sys").modules, "torch", _fake_torch(8, "NVIDIA H100 80GB HBM3", 85017493504))
    monkeypatch.setattr(hardware, "_detected_host_memory_bytes", lambda: 2048 * GiB)
    cluster = parse_gpus("auto")
    assert (cluster.gpu.name, cluster.gpus_per_node, cluster.world_size) == ("H100-SXM", 8, 8)
    assert cluster.gpu.memory_bytes == 85017493504
    assert (cluster.cpu_memory_bytes, cluster.cpu_memory_source) == (2048 * GiB, "detected")


H100S = [("NVIDIA H100 80GB HBM3", 85017493504)] * 8


@pytest.mark.parametrize("visible, count", [(None, 8), ("0,1", 2), ("3", 1), ("", 0), ("0,1,9,2", 2), ("-1", 0)])
def test_parse_gpus_auto_asks_nvml_not_torch(monkeypatch, visible, count):
    # NVML answers in milliseconds without a CUDA context; CUDA_VISIBLE_DEVICES is read as CUDA reads it
    # (up to the first index that does not exist).
    monkeypatch.setattr(hardware, "_nvml_devices", lambda: H100S)
    monkeypatch.setitem(__import__("sys").modules, "torch", None)  # importing torch would fail
    monkeypatch.setattr(hardware, "_detected_host_memory_bytes", lambda: 2048 * GiB)
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    if count == 0:
        with pytest.raises(InputError, match="found no CUDA GPU"):
            parse_gpus("auto")
        return
    cluster = parse_gpus("auto")
    assert (cluster.gpu.name, cluster.gpus_per_node, cluster.gpu.memory_bytes) == ("H100-SXM", count, 85017493504)


@pytest.mark.parametrize("nvml, visible", [
    (None, None),  # no NVML (no NVIDIA driver, MIG mode)
    (H100S, "GPU-5f1c2a3b-0000-0000-0000-000000000000"),  # UUIDs: only CUDA maps them
    ([("NVIDIA H100 80GB HBM3", 85017493504), ("NVIDIA A100-SXM4-80GB", 85094825984)], None),  # mixed types
])  # fmt: skip
def test_parse_gpus_auto_falls_back_to_torch(monkeypatch, nvml, visible):
    monkeypatch.setattr(hardware, "_nvml_devices", lambda: nvml)
    monkeypatch.setattr(hardware, "_gpu_device_nodes", lambda: True)
    monkeypatch.setitem(__import__("sys").modules, "torch", _fake_torch(2, "NVIDIA A100-SXM4-80GB", 85094825984))
    monkeypatch.setattr(hardware, "_detected_host_memory_bytes", lambda: 512 * GiB)
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    cluster = parse_gpus("auto")
    assert (cluster.gpu.name, cluster.gpus_per_node) == ("A100-80GB", 2)


def test_nvml_reader_answers_without_a_driver():
    # Here (no NVIDIA driver) the reader says "cannot tell" instead of failing; with one it lists the GPUs.
    devices = hardware._nvml_devices()
    assert devices is None or all(isinstance(n, str) and m > 0 for n, m in devices)


@pytest.mark.parametrize(
    "device_name, expected",
    [
        ("NVIDIA H100 80GB HBM3", "H100-SXM"),
        ("NVIDIA H100 PCIe", "H100-PCIe"),
        ("NVIDIA H100 NVL", "H100-NVL"),
        ("NVIDIA H200", "H200"),
        ("NVIDIA A100-SXM4-80GB", "A100-80GB"),
        ("NVIDIA A100-SXM4-40GB", "A100-40GB"),
        ("NVIDIA A100 80GB PCIe", "A100-80GB"),
        ("NVIDIA A10G", "A10G"),
        ("NVIDIA A10", "A10"),
        ("NVIDIA L4", "L4"),
        ("NVIDIA L40S", "L40S"),
        ("Tesla T4", "T4"),
        ("Tesla V100-SXM2-16GB", "V100-16GB"),
        ("Tesla V100-SXM2-32GB", "V100-32GB"),
        ("Tesla P100-PCIE-16GB", "P100"),
        ("NVIDIA GeForce RTX 4090", "RTX4090"),
        ("NVIDIA GeForce RTX 3090", "RTX3090"),
        ("NVIDIA RTX A6000", "A6000"),
        ("NVIDIA B200", "B200"),
        ("AMD Instinct MI300X", "MI300X"),
    ],
)
def test_gpu_from_cuda_device_name(device_name, expected):
    assert hardware._gpu_from_device_name(device_name).name == expected


def test_each_catalog_part_is_known_by_its_own_device_names():
    # One entry in gpus.json is all a new part needs: its device_names find it (and no more specific pattern of
    # another part takes them), its compute capability says its generation.
    for gpu in hardware.load_gpu_catalog().values():
        if gpu.is_cpu:
            assert not gpu.device_names and gpu.compute_capability is None
            continue
        assert gpu.device_names, gpu.name
        for pattern in gpu.device_names:
            assert hardware.gpu_from_device_name(f"NVIDIA {pattern.lower()}") == gpu, (gpu.name, pattern)
        assert (gpu.compute_capability is None) == (gpu.vendor != "nvidia"), gpu.name
    assert hardware.gpu_from_device_name("NVIDIA Quadro RTX 8000") is None
    assert hardware.catalog_gpu("h100") == hardware.catalog_gpu("H100 80GB HBM3") == hardware.find_gpu("H100-SXM")
    assert hardware.catalog_gpu("no such card") is None


@pytest.mark.parametrize(
    "text, expected",
    [
        ("29GiB", 29 * 2**30),
        ("32GB", 32 * 10**9),
        ("1.5TiB", 3 * 2**39),
        ("512MiB", 512 * 2**20),
        ("1000", 1000),
        ("64 gib", 64 * 2**30),
        ("2T", 2 * 10**12),
        ("100KiB", 102400),
        (4096, 4096),
    ],
)
def test_parse_size(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "GiB", "lots", "-5GB", "0", "0GiB", "12 parsecs", "1e9", "3.GB.", 0, -1])
def test_parse_size_rejects(text):
    with pytest.raises(InputError) as error:
        parse_size(text)
    assert str(text) in str(error.value)


@given(value=st.integers(min_value=1, max_value=10**6), unit=st.sampled_from(["", "B", "KB", "MB", "GB", "KiB", "MiB", "GiB"]))
def test_parse_size_units(value, unit):
    factor = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}[unit]
    assert parse_size(f"{value}{unit}") == value * factor


@pytest.mark.parametrize(
    "name, choices, expected",
    [("t5", ["T4", "L4", "A100-80GB"], ["T4"]), ("LLAMA3-8B", ["llama3-8b", "gpt2"], ["llama3-8b"]), ("zzz", ["T4"], [])],
)
def test_closest(name, choices, expected):
    assert closest(name, choices) == expected
