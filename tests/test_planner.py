"""The planner's own logic (search, margin, choice, batch shape, advice, plan file) against a fake memory model
with known numbers; the last section runs the real estimate_memory for properties and end-to-end plans."""

from __future__ import annotations

import json
import re
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from zero_planner.errors import InputError
from zero_planner.hardware import parse_gpus
from zero_planner.models.spec import load_model_spec
from zero_planner.plan import options
from zero_planner.plan.checks import resolve_precision
from zero_planner.plan.fit import gpu_limit_bytes, host_limit_bytes
from zero_planner.plan.memory import MemoryEstimate, Workload, estimate_memory
from zero_planner.plan.reference_configs import DS_CONFIGS_DIR
from zero_planner.plan.request import PlanRequest
from zero_planner.plan.search import MAX_MICRO_BATCH, SPEED_TIE, batch_shape, largest_fitting, plan
from zero_planner.plan.userconfig import estimate_config
from zero_planner.planfile import LoraInfo, Plan
from zero_planner.strategies import STRATEGIES

GIB = 2**30
LLAMA3_8B = load_model_spec("meta-llama/Meta-Llama-3-8B")
GPT2 = load_model_spec("gpt2")


class FakeMemory:
    """total = base[strategy] + per_sample * micro * seq/1024 (a quarter of it with checkpointing); host fixed.

    Known numbers, so the tests check the planner's search and choice rather than the memory model."""

    def __init__(self, base_gib=None, per_sample_gib=1.0, host_gib=None):
        self.base = base_gib or {"0": 12, "1": 9, "2": 7, "2-offload": 4, "3": 5, "3-offload": 3, "3-offload-all": 2}
        self.per_sample = per_sample_gib
        self.host = host_gib or {}
        self.calls = []

    def __call__(self, spec, strategy, workload: Workload, buffers=None, gpu_name=None) -> MemoryEstimate:
        self.calls.append((strategy.name, workload))
        act = self.per_sample * workload.micro_batch_size * workload.seq_len / 1024
        if workload.gradient_checkpointing:
            act /= 4
        total = int((self.base[strategy.name] + act) * GIB)
        host = int(self.host.get(strategy.name, 4) * GIB)
        return MemoryEstimate(total // 8, total // 8, total // 4, int(act * GIB), 0, 0, total, total, host, ("fake",))


@pytest.fixture
def fake(monkeypatch):
    memory = FakeMemory()
    monkeypatch.setattr(options, "estimate_memory", memory)
    return memory


def t4s(n=2, cpu_mem="64GiB"):
    return parse_gpus(f"{n}xT4", cpu_mem)


# --- search --------------------------------------------------------------------------------------------------


@given(threshold=st.integers(0, 200), cap=st.integers(1, 64))
def test_largest_fitting_is_the_largest_and_cheap(threshold, cap):
    calls = []

    def fits(m):
        calls.append(m)
        return m <= threshold

    assert largest_fitting(fits, cap) == min(threshold, cap)
    assert max(calls) <= cap
    assert len(calls) <= 2 * cap.bit_length() + 1


def test_micro_batch_is_the_largest_under_the_margin(fake):
    cluster = t4s()
    result = plan(GPT2, cluster, PlanRequest(seq_len=1024, stage="2", grad_ckpt=False))
    limit = gpu_limit_bytes(cluster.gpu.memory_bytes)
    (option,) = result.options
    # base 7 GiB + 1 GiB per sample under 14.06 GiB (14.75 less 3% and 256 MiB): 7 samples.
    assert option.micro_batch_size == 7
    assert option.memory.total_bytes <= limit
    assert (
        fake(
            GPT2,
            STRATEGIES["2"],
            replace(
                options.Evaluator(GPT2, cluster, PlanRequest(seq_len=1024, precision="fp16")).workload(False, 8)
            ),
        ).total_bytes
        > limit
    )


def test_margin_is_respected_and_documented_size():
    memory = 16 * GIB
    assert gpu_limit_bytes(memory) == memory - int(0.03 * memory) - 256 * 2**20
    assert host_limit_bytes(100 * GIB) == 95 * GIB


def test_margin_false_uses_full_capacity(fake):
    fake.base["2"] = 7.2
    cluster = t4s()
    with_margin = plan(GPT2, cluster, PlanRequest(seq_len=1024, stage="2", grad_ckpt=False))
    without = plan(GPT2, cluster, PlanRequest(seq_len=1024, stage="2", grad_ckpt=False, margin=False))
    assert without.chosen.micro_batch_size == 7 > with_margin.chosen.micro_batch_size  # 7.2 + 7 <= 14.75, > 14.06


def test_checkpointing_lets_a_larger_micro_batch_fit(fake):
    result = plan(GPT2, t4s(), PlanRequest(seq_len=1024, stage="2"))
    by_ckpt = {o.gradient_checkpointing: o for o in result.options}
    assert by_ckpt[True].micro_batch_size > by_ckpt[False].micro_batch_size
    assert by_ckpt[True].micro_batch_size == 28  # 7 + 28/4 = 14.0 <= 14.06 GiB


def test_cap_and_given_micro_batch(fake):
    fake.base = dict.fromkeys(fake.base, 0)
    fake.per_sample = 0.01
    result = plan(GPT2, t4s(), PlanRequest(seq_len=1024, stage="0", grad_ckpt=False))
    assert result.chosen.micro_batch_size == MAX_MICRO_BATCH
    assert "capped" in result.chosen.reason
    given_ = plan(GPT2, t4s(), PlanRequest(seq_len=1024, stage="0", grad_ckpt=False, micro_batch=3))
    assert given_.chosen.micro_batch_size == 3


# --- choice --------------------------------------------------------------------------------------------------


def test_chooses_the_fastest_that_fits(fake):
    result = plan(LLAMA3_8B, parse_gpus("8xA100-80GB", "1TiB"), PlanRequest(seq_len=2048, global_batch=256))
    assert result.fits
    feasible = [o for o in result.options if o.fits]
    assert len(result.options) == 14
    assert result.chosen.tokens_per_second == max(o.tokens_per_second for o in feasible)
    assert all(o.step is None for o in result.options if not o.fits)
    chosen = [c for c in result.plan.candidates if c.chosen]
    assert len(chosen) == 1 and chosen[0].strategy.name == result.chosen.strategy.name


def test_stage_and_checkpointing_given_restrict_the_search(fake):
    result = plan(GPT2, t4s(), PlanRequest(seq_len=1024, stage="3-offload", grad_ckpt=True))
    assert [(o.strategy.name, o.gradient_checkpointing) for o in result.options] == [("3-offload", True)]


def test_host_memory_rules_out_offload(fake):
    fake.host = {"2-offload": 100, "3-offload": 100, "3-offload-all": 120}
    result = plan(GPT2, t4s(cpu_mem="64GiB"), PlanRequest(seq_len=1024))
    for option in result.options:
        if option.strategy.offload_optimizer != "none":
            assert not option.fits and "host: needs" in option.reason
    assert result.chosen.strategy.offload_optimizer == "none"


# --- batch shape ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "max_micro, world, global_batch, micro, accum, exact",
    [
        (8, 2, None, 8, 1, True),
        (8, 2, 64, 8, 4, True),
        (5, 2, 64, 4, 8, True),  # 4 divides 32 per GPU
        (6, 1, 7, 6, 1, False),  # 7 is prime: micro 6 x 1 = 6, the nearest
        (3, 4, 10, 2, 1, False),  # 10 / 4 GPUs is not whole: 2.5 per GPU rounds to 2
        (64, 8, 8, 1, 1, True),
    ],
)
def test_batch_shape(max_micro, world, global_batch, micro, accum, exact):
    got_micro, got_accum, note = batch_shape(max_micro, world, global_batch)
    assert (got_micro, got_accum) == (micro, accum)
    assert (note is None) == exact
    if not exact:
        assert str(global_batch) in note and str(got_micro * got_accum * world) in note


@given(max_micro=st.integers(1, 64), world=st.integers(1, 16), per_gpu=st.integers(1, 512))
def test_batch_shape_reaches_a_divisible_global_batch(max_micro, world, per_gpu):
    micro, accum, note = batch_shape(max_micro, world, per_gpu * world)
    assert 1 <= micro <= max_micro
    if note is None:
        assert micro * accum * world == per_gpu * world


def test_global_batch_sets_accumulation(fake):
    result = plan(GPT2, t4s(), PlanRequest(seq_len=1024, stage="2", grad_ckpt=False, global_batch=48))
    t = result.plan.training
    assert t.micro_batch_size * t.gradient_accumulation_steps * 2 == 48
    assert result.plan.deepspeed_config["train_batch_size"] == 48
    assert result.plan.deepspeed_config["gradient_accumulation_steps"] == t.gradient_accumulation_steps


def test_uneven_global_batch_is_said(fake):
    result = plan(GPT2, t4s(), PlanRequest(seq_len=1024, stage="2", grad_ckpt=False, global_batch=13))
    assert any("instead of 13" in n for n in result.plan.notes)


# --- nothing fits --------------------------------------------------------------------------------------------


def test_nothing_fits_says_what_would_with_numbers(fake):
    fake.base = dict.fromkeys(fake.base, 20)  # 20 GiB whatever the strategy: nothing fits a T4
    result = plan(LLAMA3_8B, t4s(), PlanRequest(seq_len=2048))
    assert not result.fits and result.plan is None
    text = "\n".join(result.advice)
    assert re.search(r"smallest option: .* needs \d+\.\d GiB per GPU", text)
    assert "--method lora / qlora: no strategy fits" in text  # the fake needs 20 GiB whatever the method
    assert "--seq-len" in text or "a shorter sequence" in text
    assert "more GPUs" in text


def test_nothing_fits_suggests_host_memory_for_offload(fake):
    fake.base = {k: 30 for k in fake.base} | {"2-offload": 3}
    fake.host = {"2-offload": 150, "3-offload": 150, "3-offload-all": 170}
    result = plan(GPT2, t4s(cpu_mem="29GiB"), PlanRequest(seq_len=1024))
    line = next(a for a in result.advice if a.startswith("more host memory"))
    assert "2-offload" in line and "--cpu-mem 158GiB" in line  # 150 / 0.95 rounded up


def test_nothing_fits_suggests_more_gpus(fake):
    # Stage 3 shards by world size in this fake: base 40 GiB / world.
    def sharded(spec, strategy, workload, buffers=None, gpu_name=None, gpu_memory_bytes=None):
        total = int((40 / workload.world_size + 1) * GIB) if strategy.stage == 3 else 100 * GIB
        return MemoryEstimate(0, 0, 0, 0, 0, 0, total, total, GIB, ())

    options.estimate_memory = sharded  # restored by the fixture's monkeypatch
    result = plan(LLAMA3_8B, t4s(), PlanRequest(seq_len=2048))
    line = next(a for a in result.advice if a.startswith("more GPUs"))
    assert "--gpus 4xT4" in line  # 40/4 + 1 = 11 GiB <= 14.06; 40/3 + 1 = 14.3 does not


# --- bad input -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kw, message",
    [
        (dict(seq_len=0), "--seq-len"),
        (dict(seq_len=-5), "--seq-len"),
        (dict(seq_len=10**6), "maximum of 8192"),
        (dict(seq_len=128, micro_batch=0), "--micro-batch"),
        (dict(seq_len=128, global_batch=0), "--global-batch"),
        (dict(seq_len=128, global_batch=1), "smaller than the 2 GPUs"),
        (dict(seq_len=128, micro_batch=8, global_batch=8), "exceeds --global-batch"),
        (dict(seq_len=128, precision="bf16"), "T4 has no bf16"),
        (dict(seq_len=128, precision="fp8"), "bf16, fp16, fp32"),
        (dict(seq_len=128, stage="3offload"), "did you mean"),
        (dict(seq_len=128, method="dora"), "full, lora, qlora, auto"),
        (dict(seq_len=128, task="summarise"), "causal-lm, seq-cls"),
    ],
)
def test_bad_input_is_an_input_error(fake, kw, message):
    with pytest.raises(InputError, match=re.escape(message)):
        plan(LLAMA3_8B, t4s(), PlanRequest(**kw))


def test_precision_auto():
    assert resolve_precision("auto", t4s()) == "fp16"
    assert resolve_precision("auto", parse_gpus("1xA100")) == "bf16"
    assert resolve_precision("auto", parse_gpus("cpu:2", "8GiB")) == "fp32"
    with pytest.raises(InputError, match="fp16"):
        resolve_precision("fp16", parse_gpus("cpu:2", "8GiB"))


# --- the plan file -------------------------------------------------------------------------------------------


def test_plan_file_fields(fake):
    cluster = parse_gpus("2x8xH100", "1TiB")
    result = plan(LLAMA3_8B, cluster,
                  PlanRequest(seq_len=4096, model_name="meta-llama/Meta-Llama-3-8B", plan_path="p.json"))
    p = Plan.model_validate(json.loads(json.dumps(result.plan.model_dump(mode="json"))))
    assert p.model.params == p.model.trainable_params == LLAMA3_8B.num_params
    assert p.model.init == "random" and p.model.config == LLAMA3_8B.config
    assert p.model.largest_layer == LLAMA3_8B.largest_layer_name
    assert (p.hardware.gpu, p.hardware.nodes, p.hardware.gpus_per_node) == ("H100-SXM", 2, 8)
    assert p.training.seq_len == 4096 and p.training.precision == "bf16"
    assert p.training.attn_implementation == LLAMA3_8B.attn_implementation
    assert p.strategy.name == result.chosen.strategy.name
    assert p.estimate.per_gpu.total == result.chosen.memory.total_bytes
    zero = p.deepspeed_config["zero_optimization"]
    assert zero["stage"] == p.strategy.stage
    assert p.launch.command[2] == "deepspeed" and "--hostfile" in p.launch.command and "p.json" in p.launch.command
    assert len(p.candidates) == 14


# --- --ds-config ---------------------------------------------------------------------------------------------


def test_estimate_config_reads_the_file(fake):
    config = json.loads((DS_CONFIGS_DIR / "zero3_fp16_offload_optimizer.json").read_text())
    config["train_micro_batch_size_per_gpu"] = 2
    config["gradient_accumulation_steps"] = 4
    config["train_batch_size"] = 16
    est = estimate_config(GPT2, t4s(), config, PlanRequest(seq_len=1024))
    workload = fake.calls[-1][1]
    assert fake.calls[-1][0] == "3-offload"
    assert (workload.micro_batch_size, workload.gradient_accumulation_steps, workload.precision) == (2, 4, "fp16")
    # 3 GiB + 2 GiB = 5 GiB on a 14.75 GiB T4: fits without margin, headroom exact.
    assert est.fits and est.gpu_headroom_bytes == t4s().gpu.memory_bytes - 5 * GIB
    assert est.plan.deepspeed_config == config


def test_estimate_config_judges_without_margin(fake):
    fake.base["2"] = 12.5  # 14.5 GiB with 2 samples: inside the margin, under the capacity
    config = {"train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 2}, "fp16": {"enabled": True}}
    est = estimate_config(GPT2, t4s(), config, PlanRequest(seq_len=1024))
    assert est.fits and 0 < est.gpu_headroom_bytes < GIB
    assert any("safety margin" in n for n in est.notes)


@pytest.mark.parametrize(
    "config, message",
    [
        ({"zero_optimization": {"stage": 7}, "train_micro_batch_size_per_gpu": 1}, "stage 7"),
        ({"train_micro_batch_size_per_gpu": -1}, "positive integer"),
        (
            {
                "zero_optimization": {"stage": 2, "offload_param": {"device": "cpu"}},
                "train_micro_batch_size_per_gpu": 1,
            },
            "needs zero_optimization.stage 3",
        ),
        ({"zero_optimization": {"stage": 2}}, "give --micro-batch"),
        ({"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True}}, "T4 lacks"),
    ],
)
def test_estimate_config_bad_files(fake, config, message):
    with pytest.raises(InputError, match=re.escape(message)):
        estimate_config(GPT2, t4s(), config, PlanRequest(seq_len=1024))


def test_estimate_config_batch_mismatch_is_said_and_fixed(fake):
    config = {"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1, "train_batch_size": 5}
    est = estimate_config(GPT2, t4s(), config, PlanRequest(seq_len=1024))
    assert any(
        "train_batch_size(5) != train_micro_batch_size_per_gpu(2) * gradient_accumulation_steps(1) * world_size(2)" in n
        for n in est.notes
    )
    assert est.plan.deepspeed_config["train_batch_size"] == 4


def test_estimate_config_auto_values_become_concrete(fake):
    config = {
        "train_micro_batch_size_per_gpu": "auto",
        "train_batch_size": "auto",
        "gradient_accumulation_steps": "auto",
        "bf16": {"enabled": "auto"},
        "fp16": {"enabled": "auto"},
        "zero_optimization": {"stage": 3, "reduce_bucket_size": "auto", "stage3_prefetch_bucket_size": "auto"},
    }
    est = estimate_config(GPT2, t4s(), config, PlanRequest(seq_len=1024, micro_batch=2))
    ds = est.plan.deepspeed_config
    assert (ds["train_micro_batch_size_per_gpu"], ds["train_batch_size"]) == (2, 4)
    assert ds["fp16"]["enabled"] is True and ds["bf16"]["enabled"] is False
    assert ds["zero_optimization"]["reduce_bucket_size"] == max(GPT2.hidden_size**2, 2**20)
    assert "auto" not in json.dumps(ds)


# --- with the real memory model ------------------------------------------------------------------------------


def require_real_memory():
    """Skips while memory.estimate_memory is still the placeholder; runs once the real model is in."""
    try:
        estimate_memory(GPT2, STRATEGIES["0"], Workload(1, 128, False, "bf16"))
    except NotImplementedError:
        pytest.skip("memory.estimate_memory is not implemented yet")


@pytest.fixture
def real_memory():
    require_real_memory()


@given(
    micro=st.integers(1, 32),
    seq=st.sampled_from([128, 512, 1024]),
    name=st.sampled_from(list(STRATEGIES)),
    ckpt=st.booleans(),
)
def test_memory_grows_with_micro_batch_and_sequence(micro, seq, name, ckpt):
    require_real_memory()

    def total(m, s):
        return estimate_memory(
            GPT2, STRATEGIES[name], Workload(m, s, ckpt, "bf16", world_size=2, gpus_per_node=2)
        ).total_bytes

    assert total(micro + 1, seq) >= total(micro, seq)
    assert total(micro, seq * 2 if seq < 1024 else seq) >= total(micro, seq)


def test_real_llama3_8b_on_two_t4s_plans_or_explains(real_memory):
    result = plan(LLAMA3_8B, parse_gpus("2xT4"), PlanRequest(seq_len=2048))
    if result.fits:
        assert result.chosen.memory.total_bytes <= gpu_limit_bytes(parse_gpus("2xT4").gpu.memory_bytes)
    else:
        text = "\n".join(result.advice)
        assert re.search(r"\d+\.\d GiB", text) and "--method lora" in text


def test_advice_offers_only_what_deepspeed_runs_at_the_users_micro_batch(real_memory):
    # Llama 3 8B on two Kaggle T4s (29 GiB host): LoRA fits only under ZeRO-3 with its parameters offloaded, which
    # DeepSpeed 0.19 stops in the first step. The advice said "--method lora fits with stage 3-offload-all" and the
    # --method auto table beside it said "fails in DeepSpeed"; now it says LoRA fits only there and why not.
    cluster = parse_gpus("2xT4", "29GiB")
    result = plan(LLAMA3_8B, cluster, PlanRequest(seq_len=2048, grad_ckpt=True))
    assert not result.fits
    lora = [line for line in result.advice if line.startswith("--method lora")]
    assert lora == [next(line for line in lora if "fits only with stage 3-offload-all, which does not run" in line)]
    adapters = plan(LLAMA3_8B, cluster, PlanRequest(seq_len=2048, grad_ckpt=True, method="lora"))
    broken = {o.strategy.name for o in adapters.options if options.known_failure("lora", o.strategy)}
    assert "3-offload-all" in broken and not adapters.fits
    # The user's --micro-batch 8: each way out is tried there first, and says where it needs a smaller one.
    asked = plan(LLAMA3_8B, cluster, PlanRequest(seq_len=2048, micro_batch=8))
    qlora = next(line for line in asked.advice if line.startswith("--method qlora"))
    assert "at micro-batch 1" in qlora and "not at --micro-batch 8" in qlora


def test_real_plan_micro_batch_is_the_largest_fitting(real_memory):
    cluster = parse_gpus("8xA100-80GB", "1TiB")
    result = plan(LLAMA3_8B, cluster, PlanRequest(seq_len=2048))
    assert result.fits
    limit = gpu_limit_bytes(cluster.gpu.memory_bytes)
    for option in result.options:
        if option.fits and option.micro_batch_size < MAX_MICRO_BATCH:
            w = Workload(
                option.micro_batch_size + 1,
                2048,
                option.gradient_checkpointing,
                "bf16",
                world_size=8,
                gpus_per_node=8,
                attn_implementation=LLAMA3_8B.attn_implementation or "sdpa",
            )
            bigger = estimate_memory(LLAMA3_8B, option.strategy, w)
            assert bigger.total_bytes > limit or bigger.cpu_total_bytes > host_limit_bytes(cluster.cpu_memory_bytes)


def test_a_speed_tie_goes_to_the_simpler_candidate():
    """QLoRA Mistral-7B on two T4s: the fastest candidates are within 0.5% by the step-time model (whose median error
    is 7%); the simplest runs, ZeRO-0, not whichever is 0.4% ahead. (Llama-3-8B was the example until DeepSpeed's
    per-gradient-tensor host time was counted: ZeRO-0 checks all 448 adapter tensors on each rank, ZeRO-1 and 2 half,
    which puts ZeRO-0 2% behind there.)"""
    result = plan(load_model_spec("mistralai/Mistral-7B-v0.1"), parse_gpus("2xT4", 29 * GIB), PlanRequest(seq_len=2048,
                  method="qlora", grad_ckpt=True))  # fmt: skip
    fitting = [o for o in result.options if o.fits]
    fastest = max(o.tokens_per_second for o in fitting)
    assert result.chosen.tokens_per_second >= fastest * (1 - SPEED_TIE)
    assert result.chosen.strategy.name == "0" and result.chosen.tokens_per_second < fastest
    assert min(o.tokens_per_second for o in fitting) < fastest * (1 - SPEED_TIE)  # not all tied


def test_lora_with_parameter_offload_is_left_out_as_deepspeed_fails_it():
    """LoRA under ZeRO-3 parameter offload stops in DeepSpeed 0.19.8's first step (measured on two models, with
    and without checkpointing): the planner never offers it, and says why."""
    result = plan(load_model_spec("mistralai/Mistral-7B-v0.1"), parse_gpus("1xT4", "120GiB"), PlanRequest(seq_len=1024,
                  method="lora"))  # fmt: skip
    broken = [o for o in result.options if o.strategy.offload_param != "none"]
    assert broken and all(not o.fits and "Cannot partition a param in flight" in o.reason for o in broken)
    assert all("3-offload-all" not in line for line in result.advice)
    full = plan(load_model_spec("mistralai/Mistral-7B-v0.1"), parse_gpus("1xT4", "120GiB"), PlanRequest(seq_len=1024))
    assert all("DeepSpeed" not in o.reason for o in full.options)  # full fine-tuning offloads parameters fine


def test_method_auto_counts_a_local_datasets_host_bytes():
    # --method auto plans each method from the one request: before it did, the dataset's host bytes were dropped
    # on that path while the CLI's note said they were counted.
    cluster = parse_gpus("2xT4")
    asked = PlanRequest(seq_len=2048, method="auto")
    bare = plan(LLAMA3_8B, cluster, asked)
    data = plan(LLAMA3_8B, cluster, asked.model_copy(update={"data_bytes": 2**30, "data_peak_bytes": 3 * 2**30}))
    assert bare.fits and data.fits and data.plan.training.method == bare.plan.training.method == "qlora"
    cpu, cpu_bare = data.plan.estimate.cpu, bare.plan.estimate.cpu
    assert (cpu.data_bytes, cpu.data_peak_bytes) == (2**30, 3 * 2**30) and cpu_bare.data_bytes == 0
    assert cpu.phases["train"] >= cpu_bare.phases["train"] + 2**30


def test_a_request_refuses_an_unknown_field_and_a_wrong_type():
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="seqlen"):
        PlanRequest(seq_len=128, seqlen=256)  # a misspelt option is an error, not a default silently kept
    with pytest.raises(ValidationError, match="micro_batch"):
        PlanRequest(seq_len=128, micro_batch="4")
    request = PlanRequest(seq_len=128, lora=LoraInfo(r=8))
    changed = request.but(method="lora")
    assert (changed.method, changed.lora, request.method) == ("lora", request.lora, "full")  # a copy; the rest kept
    with pytest.raises(ValidationError, match="micro_batch"):
        request.but(micro_batch="4")  # a changed field is checked as the constructor checks it
    with pytest.raises(ValidationError, match="seqlen"):
        request.but(seqlen=256)
