"""zero-planner: plan DeepSpeed ZeRO memory before launch, then train with the plan."""

__version__ = "0.1.0"
