"""A pipeline rank's checkpoint under the model's own names (no processes, torch's DCP with ``no_dist``).

Oracles: the model's own ``state_dict`` (every rank's stages together hold exactly its keys and tensors) and
``named_parameters`` (the optimizer's states are keyed by the names the model gives their parameters); a reload
into a fresh model and optimizer gives back the saved tensors exactly.
"""

from __future__ import annotations

from contextlib import nullcontext
from types import SimpleNamespace

import pytest

from dsbench.errors import UserError
from dsbench.models import PRESETS

torch = pytest.importorskip("torch")

from dsbench.worker import dcp_state, safe_load  # noqa: E402  (torch first: skipped without it)
from dsbench.worker.engines.model_parallel import Stage, _as_one, stage_layers  # noqa: E402
from dsbench.worker.model import build_model  # noqa: E402
from dsbench.worker.pipe_split import split_model  # noqa: E402


def rank_modules(model, pp: int, chunks: int = 1) -> list:
    """Each pipeline rank's stage modules as the engine holds them (rank r: chunks r, r + pp, ...)."""
    split = split_model(model)
    return [_as_one([Stage(stage_layers(split, r + k * pp, pp * chunks), nullcontext) for k in range(chunks)])
            for r in range(pp)]


@pytest.mark.parametrize("name, pp, chunks", [("gpt2-tiny", 2, 1), ("llama-tiny", 2, 1), ("gpt2-mini", 2, 2),
                                              ("gemma-tiny", 2, 1)])
def test_the_ranks_stages_name_exactly_the_models_state(name, pp, chunks):
    model = build_model(PRESETS[name], seed=0)
    whole = model.state_dict(keep_vars=True)
    held: dict[str, list] = {}
    for module in rank_modules(model, pp, chunks):
        state = dcp_state.StageNames.of(model, module).model_state(module)
        for key, tensor in state.items():
            assert tensor.data_ptr() == whole[key].data_ptr()  # the model's own tensor (a load fills it in place)
            held.setdefault(key, []).append(tensor)
    assert set(held) == set(whole)
    tied = [key for key, copies in held.items() if len(copies) > 1]
    # a tied embedding is on the first stage (as input) and the last (as head), under both of the model's names
    embed = "transformer.wte.weight" if name.startswith("gpt2") else "model.embed_tokens.weight"
    assert sorted(tied) == (sorted([embed, "lm_head.weight"]) if model.config.tie_word_embeddings else [])


def test_a_stage_tensor_the_model_does_not_hold_is_a_bug_named():
    model = build_model(PRESETS["gpt2-tiny"], seed=0)
    stage = Stage([torch.nn.Linear(2, 2)], nullcontext)
    with pytest.raises(RuntimeError, match="the pipeline stage's layers.0.weight is no tensor of the model"):
        dcp_state.StageNames.of(model, stage)


def engine_for(seed: int, rank: int = 1) -> SimpleNamespace:
    """The last stage of a 2-stage gpt2-tiny (the tied head's copy) with AdamW after one step, as an engine."""
    model = build_model(PRESETS["gpt2-tiny"], seed=0)
    module = rank_modules(model, 2)[rank]
    names = dcp_state.StageNames.of(model, module)
    optimizer = torch.optim.AdamW(module.parameters(), lr=1e-3)
    generator = torch.Generator().manual_seed(seed)
    for param in module.parameters():
        param.grad = torch.randn(param.shape, generator=generator)
    optimizer.step()
    return SimpleNamespace(model=module, optimizer=optimizer, stage_names=names, whole=model)


def test_a_stage_saved_flat_loads_back_into_a_fresh_stage_exactly(tmp_path):
    import torch.distributed.checkpoint as dcp

    saved = engine_for(seed=1)
    state = dcp_state.states(saved)
    owned = {id(p) for p in saved.model.parameters()}
    names = {name for name, p in saved.whole.named_parameters() if id(p) in owned}  # tied: the first name only
    assert ({k.removeprefix("state.").removesuffix(".exp_avg") for k in state["optim"] if k.endswith(".exp_avg")}
            == names)
    dcp.save(state, checkpoint_id=str(tmp_path / "ck"), no_dist=True)
    assert dcp_state.is_flat(tmp_path / "ck")

    fresh = engine_for(seed=2)  # other gradients: other weights and moments until loaded
    flat = dcp_state.is_flat(tmp_path / "ck")
    loading = dcp_state.states(fresh, flat)
    dcp.load(loading, storage_reader=safe_load.safe_reader(tmp_path / "ck"), no_dist=True)
    dcp_state.restore(fresh, loading, flat)
    for mine, theirs in zip(fresh.model.parameters(), saved.model.parameters(), strict=True):
        assert torch.equal(mine, theirs)
        for key in ("exp_avg", "exp_avg_sq", "step"):
            assert torch.equal(fresh.optimizer.state[mine][key], saved.optimizer.state[theirs][key])


def test_a_nested_checkpoint_is_read_by_whole_model_engines_and_refused_by_a_stage(tmp_path):
    """Checkpoints written before 2026-12-01 hold one nested param_groups list (torch's default form)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    saved = engine_for(seed=1)
    whole = SimpleNamespace(model=saved.whole, optimizer=torch.optim.AdamW(saved.whole.parameters()), stage_names=None)
    model_state, optim_state = get_state_dict(whole.model, whole.optimizer)  # as dsbench saved until then
    dcp.save({"model": model_state, "optim": optim_state}, checkpoint_id=str(tmp_path / "old"), no_dist=True)
    assert not dcp_state.is_flat(tmp_path / "old")
    state = dcp_state.states(whole, flat=False)
    dcp.load(state, storage_reader=safe_load.safe_reader(tmp_path / "old"), no_dist=True)
    dcp_state.restore(whole, state, flat=False)
    with pytest.raises(UserError, match="written before 2026-12-01.*resume it with --strategy ddp, fsdp"):
        dcp_state.states(saved, flat=False)


def test_a_fused_runs_checkpoint_resumes_without_it_and_keeps_the_resuming_kernel(tmp_path):
    """--fused-optimizer splits the parameters into groups of one tensor kind and steps the fused kernel; a resume
    without it keeps its one group and its own kernel choice (the fused kernel refuses torch_tp's mixed group)."""
    import torch.distributed.checkpoint as dcp

    saved = engine_for(seed=1)
    params = list(saved.model.parameters())
    saved.optimizer = torch.optim.AdamW([{"params": params[:2]}, {"params": params[2:]}], lr=1e-3, fused=True)
    for param in params:
        param.grad = torch.ones_like(param)
    saved.optimizer.step()
    dcp.save(dcp_state.states(saved), checkpoint_id=str(tmp_path / "ck"), no_dist=True)

    fresh = engine_for(seed=2)  # torch AdamW's default kernel, one group
    state = dcp_state.states(fresh)
    dcp.load(state, storage_reader=safe_load.safe_reader(tmp_path / "ck"), no_dist=True)
    dcp_state.restore(fresh, state, flat=True)
    [group] = fresh.optimizer.param_groups
    assert not group["fused"] and len(group["params"]) == len(params)
    for mine, theirs in zip(fresh.model.parameters(), params, strict=True):
        assert torch.equal(fresh.optimizer.state[mine]["exp_avg"], saved.optimizer.state[theirs]["exp_avg"])


def _scheduler(groups: int, lrs: tuple[float, ...] = (), steps: int = 3) -> tuple:
    """torch AdamW over ``groups`` groups and the native engines' LambdaLR warm-up, stepped ``steps`` times."""
    from dsbench.worker.engines.base import warmup_factor

    params = [torch.nn.Parameter(torch.zeros(2)) for _ in range(groups)]
    lrs = lrs or (1e-3,) * groups
    optimizer = torch.optim.AdamW([{"params": [p], "lr": lr} for p, lr in zip(params, lrs, strict=True)])
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: warmup_factor(step, 8))
    for _ in range(steps):
        optimizer.step()
        scheduler.step()
    return optimizer, scheduler


def test_the_lr_schedule_of_two_like_groups_resumes_on_one_and_back():
    """Oracle: the same schedule built on the resuming optimizer's group count and stepped as often."""
    _, two = _scheduler(2)
    for groups in (1, 2, 3):
        _, expected = _scheduler(groups)
        _, resumed = _scheduler(groups, steps=0)  # a fresh run's, before the checkpoint's state
        resumed.load_state_dict(dcp_state.schedule_for(two.state_dict(), groups))
        assert resumed.state_dict() == expected.state_dict()
    _, unlike = _scheduler(2, lrs=(1e-3, 1e-4))
    with pytest.raises(UserError, match="resume with the same --fused-optimizer setting"):
        dcp_state.schedule_for(unlike.state_dict(), 1)
