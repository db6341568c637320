"""Deciding a plan: the memory, step-time and disk models, the search over ZeRO strategies, and the plan file it
writes, with the DeepSpeed JSON and the launch command in it. Pure functions of numbers and small frozen models:
no torch, transformers or deepspeed import at module level (zero-plan starts fast).

    memory.py      bytes per GPU and per host, per phase of a run      throughput.py  seconds per step, tokens/s
    nccl.py        NCCL's buffers per rank                             saves.py       what a run writes to disk
    dsconfig.py    the DeepSpeed JSON (one function)                   dsdefaults.py  DeepSpeed's own defaults
    checks.py      input checks                                        fit.py         safety margins, why not
    options.py     Option, PlanResult, the Evaluator                   search.py      the search and the choice
    advice.py      when nothing fits, what would                       assemble.py    the plan file of a choice
    command.py     the deepspeed launcher command of a plan            userconfig.py  --ds-config
    importers.py   --from-axolotl / --from-llamafactory                export.py      hand-offs to other trainers
    compare.py     --compare: clusters ranked by time and cost         render.py      what zero-plan prints
    host_rates.py  this host's CPU Adam rate                           reference_configs.py  ds_configs/
"""
