"""Library chatter off: warnings and log lines of torch, transformers, peft, bitsandbytes and DeepSpeed.

Planning a model outside the catalog builds it on the meta device, which makes these libraries warn about
things that do not concern a plan (deprecations, optional kernels that are not installed). They are silenced
where they arise, inside `quiet_libraries()`, around the calls into those libraries; stderr itself is left
alone, so errors (and ERROR log records) still show.

Training ranks (zero_planner.train) call `quiet_training_run()` once: it drops, by exact message, the few
warnings a normal zero-run printed that neither the user nor zero-run can act on (each listed in
TRAINING_WARNINGS with where it comes from), and nothing else.
"""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import Iterator


@contextlib.contextmanager
def quiet_libraries() -> Iterator[None]:
    """Runs the block with Python warnings ignored and log records up to WARNING dropped; restores both after.

    logging.disable rather than logger levels: transformers resets its logger's level when it is first
    imported, which happens inside this block; bitsandbytes logs a missing CPU kernel at import."""
    previous = logging.root.manager.disable
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        logging.disable(max(previous, logging.WARNING))
        try:
            yield
        finally:
            logging.disable(previous)


TRAINING_WARNINGS = (
    # torch 2.x, distributed_c10d.barrier with NCCL: DeepSpeed's own barriers (engine.save_checkpoint) pass no
    # device_ids; zero-run's pass them (train.Ranks.barrier). Printed at every checkpoint.
    (UserWarning, r"barrier\(\): using the device under current context"),
    # torch 2.13 deprecates the collectives DeepSpeed 0.19 calls for ZeRO (all_gather_into_tensor in stages 1-3,
    # reduce_scatter_tensor in stage 3): printed on every rank at the first step.
    (FutureWarning, r"`torch\.distributed\.\w+` (is|will be) deprecated"),
)
"""(category, message regex) of each library warning a normal zero-run silences."""
BNB_CPU_KERNEL_LOGGER = "bitsandbytes.backends.cpu.ops"
BNB_CPU_KERNEL_MESSAGE = "Failed to load CPU gemm_4bit_forward"
"""bitsandbytes 0.50 logs this at import on a CPU with AVX512-BF16 when the optional `kernels` package is missing;
transformers imports it through peft (transformers.optimization -> trainer_utils -> peft -> bitsandbytes) for the
LR scheduler. zero-run's 4-bit path is CUDA only, so the CPU kernel is never wanted."""


class _DropMessage(logging.Filter):
    def __init__(self, prefix: str):
        super().__init__()
        self.prefix = prefix

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(self.prefix)


def quiet_training_run() -> None:
    """Silences TRAINING_WARNINGS and bitsandbytes' CPU-kernel log line for the rest of this process; every other
    warning and log record still shows."""
    for category, message in TRAINING_WARNINGS:
        warnings.filterwarnings("ignore", message=message, category=category)
    logging.getLogger(BNB_CPU_KERNEL_LOGGER).addFilter(_DropMessage(BNB_CPU_KERNEL_MESSAGE))
