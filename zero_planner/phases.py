"""The phases of a run, each with a memory peak of its own: the vocabulary the memory model predicts per phase
(memory.py) and zero-run measures per phase (meter.py), so plan and run report line up by name."""

from __future__ import annotations

PHASES = ("load", "initialize", "resume", "train", "eval", "save", "export")
"""In the order they first happen in a run:
load        the model built or read (from_config / from_pretrained; under ZeRO-3 partitioned while it is made)
initialize  deepspeed.initialize: ZeRO flattens and partitions the weights and creates its optimizer buffers
resume      engine.load_checkpoint of a --resume: optimizer states loaded back
train       the training steps: the first (optimizer states created, ZeRO-3's trace) and the steady ones
eval        the eval loss at the training micro-batch, no gradients
save        a DeepSpeed checkpoint (engine.save_checkpoint)
export      the final 16-bit model (ZeRO-3 gathers it layer by layer) or adapter"""
