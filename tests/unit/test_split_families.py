"""Which families each way of splitting takes, said once (model_checks.splitting_families) and asked the same way
by the launch's layout check, compare's matrix, tune's strategy list and the planner's candidates.

Oracle: the launch's own layout check (layout_check.check_run_layout, which each rank makes again): what the
matrix, tune and the planner offer for a model is what a launch of it would accept. Phi-3's fused projections
(dsbench.models.FUSED) take Ulysses and pipelines, not tensor parallelism, and OLMo-2's projection-wide q/k norms
(PROJECTION_NORM) Megatron-style tensor parallelism (torch_tp, torch_3d, since 2026-12-01) but not AutoTP
(measured on 2026-11-30: DeepSpeed 0.19.8's AutoTP stops every rank on transformers' plan for both; Ulysses,
ZeRO-2/3, FSDP and both pipelines trained phi3-tiny within 1.2e-7 of one process, olmo2-tiny within 5.8e-8)."""

from __future__ import annotations

import json

import pytest

from dsbench import strategies as registry
from dsbench.bench.matrix import check_models
from dsbench.bench.tune import default_strategies
from dsbench.errors import UserError
from dsbench.layout_check import check_run_layout
from dsbench.models import PRESETS
from dsbench.trainspec import TrainSpec
from tests.conftest import DATA

WORLD = 4
MODELS = ("llama-tiny", "phi3-tiny", "olmo2-tiny", "neox-tiny", "gpt2-tiny")


def _launch_accepts(name: str, model: str) -> bool:
    """Whether a launch of compare's strategy ``name`` on ``model`` passes the layout check every rank makes."""
    how = registry.get(name)
    engine, torch_split = how.engine, how.engine in registry.SPLIT_ENGINES
    train = TrainSpec(strategy=engine, seq_len=32, virtual_stages=how.virtual_stages, grad_accum=8,
                      pipeline_stages=how.pp if torch_split else 1, tp=how.tp if torch_split else 1,
                      loss_parallel=how.loss_parallel, sequence_parallel=how.sequence_parallel,
                      pipeline_schedule="interleaved" if how.virtual_stages > 1 else "1f1b")
    try:
        check_run_layout(train, engine, PRESETS[model], how.dims(WORLD))
    except UserError:
        return False
    return True


SPLITTING = [name for name in registry.LISTED if name != "single" and registry.get(name).planned
             and WORLD % registry.get(name).model_parallel == 0 and _launch_accepts(name, "llama-tiny")]


@pytest.mark.parametrize("model", MODELS)
def test_tune_offers_what_a_launch_accepts(model):
    offered = set(default_strategies(model, WORLD))
    accepted = {name for name in SPLITTING if _launch_accepts(name, model)}
    assert offered & set(SPLITTING) == accepted
    if model in ("phi3-tiny", "olmo2-tiny"):  # Ulysses, the pipelines and Megatron-style TP (Phi-3's since
        # 2026-12-01), not AutoTP
        assert any(registry.get(n).ulysses > 1 for n in accepted) and any(registry.get(n).pp > 1 for n in accepted)
        tensor = {registry.get(n).engine for n in accepted if registry.get(n).tp > 1}
        assert tensor == {"torch_tp", "torch_3d"}
    if model in ("neox-tiny", "gpt2-tiny"):  # Ulysses since 2026-12-01; NeoX AutoTP, torch_tp and torch_3d too,
        # GPT-2 torch_tp and torch_3d (its Conv1D layers, since 2026-12-01), not AutoTP
        tensor = {registry.get(n).engine for n in accepted if registry.get(n).tp > 1}
        assert tensor == ({"deepspeed", "torch_tp", "torch_3d"} if model == "neox-tiny" else {"torch_tp", "torch_3d"})
        assert any(registry.get(n).ulysses > 1 for n in accepted)


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("name", SPLITTING)
def test_compare_refuses_before_any_cell_what_a_launch_would(model, name):
    if _launch_accepts(name, model):
        check_models([name], [model], 32)
    else:
        with pytest.raises(UserError, match=f"--strategies {name}"):
            check_models([name], [model], 32)


PLANNED = {  # model -> (a tensor-parallel candidate, a Ulysses candidate, a note saying why not)
    "llama-7b": (True, True, False),
    str(DATA / "models" / "phi-4"): (True, True, True),  # torch_tp's (since 2026-12-01), not AutoTP's
    str(DATA / "models" / "phi-3-mini-4k"): (True, False, True),  # no Ulysses: its 2047-token window, under 4096
    str(DATA / "models" / "olmo-2-7b"): (True, True, True),  # torch_tp's, not AutoTP's
    str(DATA / "models" / "pythia-1b"): (True, True, False),  # AutoTP's, torch_tp's and Ulysses (2026-12-01)
    "gpt2-xl": (False, False, True),  # Ulysses since 2026-12-01, but no degree of 2, 4 or 8 divides its 25 heads
}


@pytest.mark.parametrize("model", PLANNED)
def test_the_planner_offers_the_splits_a_launch_accepts_and_says_why_not_the_others(cli_run, model):
    seq = "1024" if model.startswith("gpt2") else "2048" if "pythia" in model else "4096"  # their positions
    result = cli_run("plan", "--model", model, "--gpus", "8", "--seq-len", seq, "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    offered = (any(c["tp"] > 1 for c in data["candidates"]), any(c.get("ulysses", 1) > 1 for c in data["candidates"]),
               bool(data["model"]["notes"]))
    assert offered == PLANNED[model]
    if "pythia" in model:
        assert {c["engine"] for c in data["candidates"] if c["tp"] > 1} == {"deepspeed", "torch"}
    if "phi" in model or "olmo" in model:
        assert ("qkv_proj" if "phi" in model else "q_norm") in data["model"]["notes"][0]
        assert "AutoTP" in data["model"]["notes"][0]
        assert "note: no AutoTP candidates" in cli_run("plan", "--model", model, "--gpus", "8").output
        assert {c["engine"] for c in data["candidates"] if c["tp"] > 1} == {"torch"}


@pytest.mark.parametrize(("model", "flags", "runs"), [
    ("llama-7b", ("--tp", "2"), True),
    (str(DATA / "models" / "phi-4"), ("--tp", "2"), False),  # zero1: AutoTP refuses its fused projections
    (str(DATA / "models" / "phi-4"), ("--tp", "2", "--layout", "ddp"), True),  # torch_tp, since 2026-12-01
    (str(DATA / "models" / "olmo-2-7b"), ("--tp", "2"), False),  # zero1: AutoTP (torch_tp below)
    (str(DATA / "models" / "olmo-2-7b"), ("--tp", "2", "--layout", "ddp"), True),  # torch_tp
    (str(DATA / "models" / "olmo-2-7b"), ("--ulysses", "2"), True),
    (str(DATA / "models" / "phi-4"), ("--ulysses", "2"), True),
    (str(DATA / "models" / "pythia-1b"), ("--tp", "2"), True),  # zero1: DeepSpeed's AutoTP
])
def test_an_explicit_layout_gives_a_command_only_where_the_launch_accepts_it(cli_run, model, flags, runs):
    """plan --layout prices any layout on GPUs (a Phi-4 under Megatron's own TP, say), and gives dsbench's launch
    command only where that launch would pass its layout check: until 2026-11-30 it read a Phi-3 or OLMo-2 as a Llama
    and printed `dsbench launch --zero 1 --tp 2` for them, which the launch refuses."""
    result = cli_run("plan", "--model", model, "--gpus", "8", "--layout", "zero1", *flags, "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert (data["launchable"], data["command"] is not None) == (runs, runs), data["why_not"]
    if not runs:
        assert "tensor parallelism splits Llama-family models" in data["why_not"]
