"""NCCL's own device buffers per rank: what a multi-GPU run holds outside PyTorch's allocator to communicate.

Computed from NCCL's documented defaults, not measured (the estimate's note says so). Pure: no torch.

One connection (a rank receiving from one peer on one channel) has a buffer per protocol, sized by NCCL's
defaults (src/init.cc, DEFAULT_*BUFFSIZE; the NCCL_BUFFSIZE, NCCL_LL_BUFFSIZE and NCCL_LL128_BUFFSIZE variables
change them). The receiving rank holds them (with P2P reads the Simple one sits on the sender instead:
src/transport/p2p.cc), so each rank holds one set per connection it receives on.

Connections per channel on the busiest rank:
- ring: 1, from its ring predecessor.
- tree, with several nodes: a double binary tree over the nodes and a chain inside each node. A node's first
  rank receives from its parent node, its two child nodes and the next rank of its chain in the tree where the
  node is inner (4), from its parent and its chain in the other tree, where it is a leaf (2): 3 per channel
  over the two trees (src/include/device.h NCCL_MAX_TREE_ARITY). On one node: rings only.
Channels: NCCL chooses them from the topology; the user guide calls the default "platform dependent", at most
32 (NCCL_MIN_NCHANNELS / NCCL_MAX_NCHANNELS, 2.5 and later). The maximum is counted: a bound, not a typical
figure (a PCIe pair gets a few channels).
Communicators: DeepSpeed runs ZeRO's collectives on a clone of the world group (deepspeed/utils/groups.py
_clone_world_group) and barriers on the default group, which zero-run's trainer also all-reduces on: two NCCL
communicators on every rank, each with its own connections.

Left out: point-to-point (send/recv) connections, made on the first send or receive, which ZeRO's data
parallelism never issues; NVLink SHARP (NVLS) buffers (off where we measure: NCCL_NVLS_ENABLE=0); NCCL's
work FIFO and per-channel structures (host memory, or KiB); the rounding of allocations to cuMem granularity;
over the network, the LL buffer (and without GPUDirect RDMA every buffer) lives in host memory, counted here
on the GPU.
"""

from __future__ import annotations

MiB = 2**20

NCCL_STEPS = 8  # src/include/device.h: slots of every connection's FIFO
LL_BUFFSIZE_BYTES = 8 * 512 * NCCL_STEPS * 16
"""LL: NCCL_LL_LINES_PER_THREAD(8) * NCCL_LL_MAX_NTHREADS(512) * NCCL_STEPS * sizeof(ncclLLFifoLine)(16) = 512 KiB."""
LL128_BUFFSIZE_BYTES = 120 * 640 * NCCL_STEPS * 8
"""LL128: NCCL_LL128_ELEMS_PER_THREAD(120) * NCCL_LL128_MAX_NTHREADS(640) * NCCL_STEPS * 8 bytes = 4,800 KiB."""
SIMPLE_BUFFSIZE_BYTES = 4 * MiB
"""Simple: NCCL_BUFFSIZE, "The default is 4194304 (4 MB)" (NCCL user guide, Environment Variables)."""
CONNECTION_BYTES = LL_BUFFSIZE_BYTES + LL128_BUFFSIZE_BYTES + SIMPLE_BUFFSIZE_BYTES  # 9,633,792

MAX_CHANNELS = 32
"""NCCL_MIN_NCHANNELS: "up to ... 32 (2.5 and later)"; the default is platform dependent."""
RING_CONNECTIONS = 1
TREE_CONNECTIONS = 3
"""Per channel on a node's first rank, averaged over the double binary tree's two trees: (4 + 2) / 2."""
COMMUNICATORS = 2
"""DeepSpeed's clone of the world group (ZeRO) and the default group (barriers, zero-run's all-reduces)."""


def connections_per_channel(nodes: int) -> int:
    """Returns the connections the busiest rank receives on per channel: the ring's, and the tree's when the
    run spans several nodes."""
    return RING_CONNECTIONS + (TREE_CONNECTIONS if nodes > 1 else 0)


def nccl_buffer_bytes(world_size: int, gpus_per_node: int, *, channels: int = MAX_CHANNELS,
                      communicators: int = COMMUNICATORS) -> int:  # fmt: skip
    """Returns the bytes of NCCL buffers one rank holds on its GPU: 0 for a single rank (no peer to connect to).

    communicators * channels * connections per channel * (LL + LL128 + Simple buffers)."""
    if world_size <= 1:
        return 0
    nodes = -(-world_size // max(1, gpus_per_node))
    return communicators * channels * connections_per_channel(nodes) * CONNECTION_BYTES


def note(world_size: int, gpus_per_node: int) -> str:
    """Returns the estimate's note naming the NCCL figure and where it comes from."""
    nodes = -(-world_size // max(1, gpus_per_node))
    per_channel = connections_per_channel(nodes)
    mib = nccl_buffer_bytes(world_size, gpus_per_node) / MiB
    what = "ring + tree" if nodes > 1 else "ring"
    return (f"includes {mib:,.0f} MiB of NCCL buffers per rank from NCCL's defaults ({COMMUNICATORS} communicators x "
            f"{MAX_CHANNELS} channels x {per_channel} {what} connection{'s' if per_channel > 1 else ''} x "
            f"{CONNECTION_BYTES / MiB:.2f} MiB; a bound, not yet measured)")
