"""The GPU catalog (catalog/gpus.json) and `--gpus` / `--cpu-mem` parsing.

No torch at import time: `parse_gpus("auto")` asks the NVIDIA driver (NVML) and imports torch only where NVML
cannot answer.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
from dataclasses import dataclass, replace
from functools import lru_cache
from importlib import resources

from zero_planner.errors import InputError, closest

GPU_SPEC_FORMS = "NxTYPE (2xT4), NODESxNxTYPE (2x8xH100), TYPE (=1xTYPE), auto, or cpu:N"


@dataclass(frozen=True)
class GPU:
    """One accelerator type from catalog/gpus.json; every bandwidth is per GPU and per direction."""

    name: str
    """Canonical catalog name (`A100-80GB`)."""
    aliases: tuple[str, ...]
    """Other names accepted by `find_gpu` (`a100-sxm4-80gb`)."""
    memory_bytes: int
    """Memory a process can allocate: torch's `total_memory` (nvidia-smi total minus driver reservation)."""
    bf16: bool
    """Whether the part computes bf16 (Ampere and later); fp16 is used otherwise."""
    peak_dense_tflops_16bit: float
    """Dense fp16/bf16 tensor-core peak, no sparsity (TFLOP/s)."""
    peak_tflops_fp32: float
    """Plain fp32 peak (TFLOP/s)."""
    intra_node_bandwidth_bytes_per_s: int
    """GPU-to-GPU inside a node: NVLink / Infinity Fabric where the part has it, else its PCIe link."""
    pcie_bandwidth_bytes_per_s: int
    """Host <-> device over PCIe (offload traffic)."""
    memory_bandwidth_bytes_per_s: int
    """Device memory (HBM/GDDR) bandwidth."""
    host_memory_per_gpu_bytes: int
    """ASSUMED host RAM per GPU of a typical machine with this part; used only when host memory is neither
    given nor detected (host memory per node = this x GPUs per node)."""
    source: str
    """Where the figures come from, and which are uncertain."""
    vendor: str = "nvidia"
    """`nvidia`, `amd` or `cpu`."""
    interconnect: str = "pcie"
    """What `intra_node_bandwidth_bytes_per_s` measures: `nvlink`, `infinity-fabric`, `pcie` or `host`."""
    nvidia_smi_total_mib: int | None = None
    """nvidia-smi's `memory.total` where known."""
    device_names: tuple[str, ...] = ()
    """Patterns of the CUDA/NVML device name that identify the part (`A100 80GB`: both words in the upper-cased
    name); of all the catalog's patterns that match, the most specific wins (gpu_from_device_name)."""
    compute_capability: str | None = None
    """CUDA's major.minor (`9.0`); None for AMD parts and the cpu entry."""

    @property
    def sm90_or_later(self) -> bool:
        """Hopper and later (compute capability 9.0 and up): cuBLAS holds its larger workspaces there."""
        return self.compute_capability is not None and int(self.compute_capability.split(".")[0]) >= 9

    @property
    def is_cpu(self) -> bool:
        """True for the placeholder `cpu` entry used by `--gpus cpu:N`."""
        return self.vendor == "cpu"


@dataclass(frozen=True)
class Cluster:
    """The machines a plan is for: `nodes` x `gpus_per_node` GPUs of one type."""

    gpu: GPU
    nodes: int
    gpus_per_node: int
    cpu_memory_bytes: int
    """Host memory per node available to the job (offloaded optimizer states/params live here)."""
    is_cpu: bool = False
    """True for `cpu:N`: N CPU processes, each with `gpu.memory_bytes` = host memory / N."""
    cpu_memory_source: str = "given"
    """`given` (--cpu-mem), `detected` (this machine) or `assumed` (the GPU type's typical host memory)."""

    @property
    def world_size(self) -> int:
        """Total number of processes (one per GPU)."""
        return self.nodes * self.gpus_per_node


@lru_cache(maxsize=1)
def load_gpu_catalog() -> dict[str, GPU]:
    """Returns the GPU catalog keyed by canonical name, in file order (read once)."""
    text = resources.files("zero_planner").joinpath("catalog/gpus.json").read_text(encoding="utf-8")
    catalog: dict[str, GPU] = {}
    for entry in json.loads(text)["gpus"]:
        entry = dict(entry)
        entry["aliases"] = tuple(entry.get("aliases", ()))
        entry["device_names"] = tuple(entry.get("device_names", ()))
        catalog[entry["name"]] = GPU(**entry)
    return catalog


def _key(name: str) -> str:
    """Lower case with dashes, underscores, spaces and a leading vendor word removed: `NVIDIA A100_80GB` -> `a10080gb`."""
    key = re.sub(r"[\s_\-]+", "", name.strip().lower())
    return key.removeprefix("nvidia") if key != "nvidia" else key


@lru_cache(maxsize=1)
def _index() -> dict[str, str]:
    index: dict[str, str] = {}
    for gpu in load_gpu_catalog().values():
        for name in (gpu.name, *gpu.aliases):
            index.setdefault(_key(name), gpu.name)
    return index


def gpu_names() -> list[str]:
    """Returns the canonical GPU names, in catalog order."""
    return list(load_gpu_catalog())


def find_gpu(name: str) -> GPU:
    """Returns the catalog GPU for `name` (case, dashes, underscores and spaces ignored; aliases accepted).

    Raises InputError naming the bad value and the closest catalog names.
    """
    catalog = load_gpu_catalog()
    found = _index().get(_key(name))
    if found is not None:
        return catalog[found]
    raise InputError(f"unknown GPU type {name!r}{_suggest(name)}; known types: {', '.join(catalog)}")


def _suggest(name: str) -> str:
    catalog = load_gpu_catalog()
    choices = [*catalog, *(a for g in catalog.values() for a in g.aliases)]
    by_key = {_key(c): c for c in choices}
    near = closest(_key(name), list(by_key), n=6)
    names = list(dict.fromkeys(_index()[k] for k in near))[:3]
    return f" (did you mean {', '.join(names)}?)" if names else ""


_SIZE_UNITS = {
    "": 1, "b": 1,
    "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6, "g": 10**9, "gb": 10**9, "t": 10**12, "tb": 10**12,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
}
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-z]*)\s*$", re.IGNORECASE)


def parse_size(text: str | int) -> int:
    """Returns the byte count of a size such as `29GiB`, `32GB`, `1.5TiB`, `512MiB` or `1000` (bytes).

    GB/MB/KB/TB (and bare G/M/K/T) are powers of 10; GiB/MiB/KiB/TiB powers of 2. Raises InputError.
    """
    if isinstance(text, int) and not isinstance(text, bool):
        if text <= 0:
            raise InputError(f"size must be positive, got {text}")
        return text
    match = _SIZE_RE.match(str(text))
    unit = match.group(2).lower() if match else None
    if match is None or unit not in _SIZE_UNITS:
        raise InputError(f"bad size {text!r}: use a number with a unit, e.g. 29GiB, 32GB, 1.5TiB, 512MiB")
    size = int(float(match.group(1)) * _SIZE_UNITS[unit])
    if size <= 0:
        raise InputError(f"size must be positive, got {text!r}")
    return size


# Counts are digits followed by x/X/*; the type may itself start with digits (`2x3090`) or contain an x (`RTX4090`).
_COUNTS_RE = re.compile(r"^(?:(\d+)\s*[xX*]\s*)?(?:(\d+)\s*[xX*]\s*)?(\S.*)$")


def parse_gpus(spec: str, cpu_mem: str | int | None = None) -> Cluster:
    """Returns the Cluster described by a `--gpus` value; host memory per node from `cpu_mem` when given.

    Forms: `2xT4`, `8xA100-80GB`, `2x8xH100` (nodes x GPUs per node x type), `T4` (one GPU), `auto` (this
    machine's GPUs), `cpu:2` (two CPU processes sharing this machine's memory). Raises InputError.
    """
    text = (spec or "").strip()
    host_bytes = parse_size(cpu_mem) if cpu_mem is not None else None
    lowered = text.lower()
    if lowered == "auto":
        return _local_cluster(host_bytes)
    if lowered == "cpu" or lowered.startswith("cpu:"):
        return _cpu_cluster(text, host_bytes)

    match = _COUNTS_RE.match(text)
    if match is None:
        raise InputError(f"bad --gpus value {spec!r}: use {GPU_SPEC_FORMS}")
    first, second, type_name = match.groups()
    if second is not None:
        nodes, per_node = int(first), int(second)
    else:
        nodes, per_node = 1, int(first) if first is not None else 1
    if nodes <= 0 or per_node <= 0:
        raise InputError(f"bad --gpus value {spec!r}: counts must be at least 1 (use {GPU_SPEC_FORMS})")
    if re.match(r"^[-+\d.]", type_name) and _key(type_name) not in _index():
        # `-1xT4`, `8x`, `2x2x2xT4`: the counts are wrong, not the GPU type.
        raise InputError(f"bad --gpus value {spec!r}: use {GPU_SPEC_FORMS}, counts at least 1")
    try:
        gpu = find_gpu(type_name)
    except InputError as error:
        raise InputError(f"bad --gpus value {spec!r}: {error}") from None
    if gpu.is_cpu:
        raise InputError(f"bad --gpus value {spec!r}: write CPU processes as cpu:N")
    if host_bytes is None:
        return Cluster(gpu, nodes, per_node, gpu.host_memory_per_gpu_bytes * per_node, cpu_memory_source="assumed")
    return Cluster(gpu, nodes, per_node, host_bytes)


def _detected_host_memory_bytes() -> int:
    import psutil

    return int(psutil.virtual_memory().total)


def _cpu_cluster(spec: str, host_bytes: int | None) -> Cluster:
    _, _, count_text = spec.partition(":")
    count_text = count_text.strip() or "1"
    if not count_text.isdigit() or int(count_text) <= 0:
        raise InputError(f"bad --gpus value {spec!r}: cpu:N needs a process count N >= 1 (use {GPU_SPEC_FORMS})")
    processes = int(count_text)
    source = "given" if host_bytes is not None else "detected"
    host = host_bytes if host_bytes is not None else _detected_host_memory_bytes()
    gpu = replace(load_gpu_catalog()["cpu"], memory_bytes=host // processes)
    return Cluster(gpu, 1, processes, host, is_cpu=True, cpu_memory_source=source)


def _local_cluster(host_bytes: int | None) -> Cluster:
    """Returns a one-node Cluster of this machine's CUDA GPUs (all of device 0's type).

    Asks the driver through NVML first (milliseconds, no CUDA context); torch only where NVML cannot answer
    for what CUDA would see (no NVML, MIG, GPUs named by UUID in CUDA_VISIBLE_DEVICES, mixed types) and a GPU
    driver is there at all (a CPU-only machine answers "no GPU" without importing torch)."""
    devices = _visible_devices(_nvml_devices())
    if devices is None:
        devices = _torch_devices() if _gpu_device_nodes() else []
    if not devices:
        raise InputError(f"--gpus auto found no CUDA GPU on this machine; pass --gpus explicitly ({GPU_SPEC_FORMS})")
    name, memory_bytes = devices[0]
    gpu = _gpu_from_device_name(name)
    # Our catalog figure is the typical part; the device itself says exactly what it can allocate.
    gpu = replace(gpu, memory_bytes=memory_bytes)
    source = "given" if host_bytes is not None else "detected"
    host = host_bytes if host_bytes is not None else _detected_host_memory_bytes()
    return Cluster(gpu, 1, len(devices), host, cpu_memory_source=source)


GPU_DEVICE_NODES = ("/dev/nvidiactl", "/dev/nvidia0", "/dev/kfd", "/dev/dxg")
"""Device files a GPU driver creates: NVIDIA, AMD ROCm, WSL2. Without any, CUDA and ROCm find no GPU."""


def _gpu_device_nodes() -> bool:
    """Returns whether this machine has a GPU driver's device file: without one, asking torch (seconds) is moot."""
    return any(os.path.exists(node) for node in GPU_DEVICE_NODES)


def _torch_devices() -> list[tuple[str, int]]:
    """Returns (name, total_memory) of each GPU torch sees (imports torch and creates the CUDA context: seconds)."""
    try:
        import torch

        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    except ImportError:
        return []
    return [(props.name, int(props.total_memory)) for props in map(torch.cuda.get_device_properties, range(count))]


def _visible_devices(devices: list[tuple[str, int]] | None) -> list[tuple[str, int]] | None:
    """Returns the NVML devices CUDA would see under CUDA_VISIBLE_DEVICES, or None where only CUDA can tell.

    Integer lists are read as CUDA reads them (up to the first index that does not exist); UUIDs and MIG
    names, and a machine with GPUs of several types (whose order CUDA decides), are left to torch."""
    if devices is None or len({name for name, _ in devices}) > 1:
        return None
    text = os.environ.get("CUDA_VISIBLE_DEVICES")
    if text is None:
        return devices
    visible = []
    for entry in (e.strip() for e in text.split(",")):
        if not entry.lstrip("-").isdigit():
            return None if entry else visible
        if not 0 <= int(entry) < len(devices):
            break
        visible.append(devices[int(entry)])
    return visible


class _NvmlMemory(ctypes.Structure):
    """nvmlMemory_v2_t (nvml.h): `total - reserved` is what cudaGetDeviceProperties reports as totalGlobalMem."""

    _fields_ = [("version", ctypes.c_uint), ("total", ctypes.c_ulonglong), ("reserved", ctypes.c_ulonglong),
                ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]  # fmt: skip


NVML_MEMORY_V2 = ctypes.sizeof(_NvmlMemory) | (2 << 24)  # NVML_STRUCT_VERSION(Memory, 2)


def _nvml_devices() -> list[tuple[str, int]] | None:
    """Returns (name, bytes CUDA can allocate) of every NVIDIA GPU, in NVML's order, from the driver's NVML
    library; None where there is no NVML (no NVIDIA driver), a call fails, or a GPU is in MIG mode (CUDA
    then sees MIG instances instead). Milliseconds, and no CUDA context."""
    try:
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return None
    try:
        if nvml.nvmlInit_v2() != 0:
            return None
    except AttributeError:
        return None
    try:
        count = ctypes.c_uint()
        if nvml.nvmlDeviceGetCount_v2(ctypes.byref(count)) != 0:
            return None
        devices = []
        for index in range(count.value):
            handle = ctypes.c_void_p()
            name = ctypes.create_string_buffer(96)
            memory = _NvmlMemory(version=NVML_MEMORY_V2)
            mig, pending = ctypes.c_uint(0), ctypes.c_uint(0)
            if (
                nvml.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(handle)) != 0
                or nvml.nvmlDeviceGetName(handle, name, len(name)) != 0
                or nvml.nvmlDeviceGetMemoryInfo_v2(handle, ctypes.byref(memory)) != 0
            ):
                return None
            if nvml.nvmlDeviceGetMigMode(handle, ctypes.byref(mig), ctypes.byref(pending)) == 0 and mig.value == 1:
                return None
            devices.append((name.value.decode(errors="replace"), int(memory.total - memory.reserved)))
        return devices
    except AttributeError:  # a driver too old for the _v2 calls
        return None
    finally:
        nvml.nvmlShutdown()


@lru_cache(maxsize=1)
def _device_patterns() -> list[tuple[tuple[str, ...], str]]:
    """Returns (words, catalog name) of every device-name pattern, most specific first: more words, then more
    letters, then catalog order (`A100 80GB` before `A100` before `A10`; `L40S` before `L4`)."""
    patterns = [(tuple(p.upper().split()), gpu.name) for gpu in load_gpu_catalog().values() for p in gpu.device_names]
    return sorted(patterns, key=lambda pattern: (-len(pattern[0]), -sum(map(len, pattern[0]))))


def gpu_from_device_name(device_name: str) -> GPU | None:
    """Returns the catalog GPU whose device_names match a CUDA device name such as `NVIDIA H100 80GB HBM3` or
    `Tesla T4` (the most specific pattern wins), or None where none does."""
    name = device_name.upper()
    for words, catalog_name in _device_patterns():
        if all(word in name for word in words):
            return load_gpu_catalog()[catalog_name]
    return None


@lru_cache(maxsize=64)
def catalog_gpu(name: str) -> GPU | None:
    """Returns the catalog GPU of a catalog name, an alias or a CUDA device name; None where it is none of them."""
    found = _index().get(_key(name))
    return load_gpu_catalog()[found] if found is not None else gpu_from_device_name(name)


def _gpu_from_device_name(device_name: str) -> GPU:
    """Returns the catalog GPU for a CUDA device name (gpu_from_device_name, then the catalog's names); raises
    InputError naming the device and the catalog's types where neither knows it."""
    gpu = gpu_from_device_name(device_name)
    if gpu is not None:
        return gpu
    try:
        return find_gpu(device_name)
    except InputError:
        raise InputError(
            f"--gpus auto found {device_name!r}, which is not in the GPU catalog; pass --gpus NxTYPE with the "
            f"closest type ({', '.join(load_gpu_catalog())})"
        ) from None
