"""The parallel layout and its batch arithmetic (ParallelDims), against hand-computed values and DeepSpeed."""

from __future__ import annotations

import pytest

from dsbench.errors import UserError
from dsbench.models import PRESETS
from dsbench.parallel import ParallelDims


@pytest.mark.parametrize("world, tp, pp, dp", [(1, 1, 1, 1), (2, 2, 1, 1), (2, 1, 2, 1), (8, 2, 2, 2),
                                               (64, 1, 4, 16), (512, 8, 4, 16)])
def test_degrees_multiply_to_the_world(world, tp, pp, dp):
    dims = ParallelDims(world=world, tp=tp, pp=pp)
    assert dims.dp == dp and dims.dp * dims.tp * dims.pp == world


def test_four_stages_by_sixteen_replicas():
    """64 ranks as 4 pipeline stages x 16 data-parallel replicas, micro 2 x 8 micro-batches per replica."""
    dims = ParallelDims(world=64, pp=4)
    assert dims.samples_per_step(micro_batch=2, grad_accum=8) == 2 * 8 * 16 == 256
    assert dims.deepspeed_batch_ranks() == 16  # the pipeline engine's grid: world / stages


def test_tensor_parallel_ranks_share_a_batch_but_deepspeed_counts_them():
    dims = ParallelDims(world=8, tp=2)
    assert dims.samples_per_step(micro_batch=1, grad_accum=4) == 16  # 4 TP groups read distinct data
    assert dims.deepspeed_batch_ranks() == 8  # DeepSpeed 0.19.8's assertion with AutoTP (no mpu): the full world


def test_autotp_batch_rule_is_what_deepspeed_asserts(monkeypatch):
    """The oracle: DeepSpeed's own DeepSpeedConfig on 8 ranks accepts train_batch_size = micro x accum x 8 with
    autotp_size 2, and refuses the distinct-sample count micro x accum x 4."""
    from deepspeed.runtime import config as ds_config

    monkeypatch.setattr(ds_config.dist, "get_world_size", lambda *a, **k: 8)
    monkeypatch.setattr(ds_config.dist, "get_rank", lambda *a, **k: 0)
    dims = ParallelDims(world=8, tp=2)

    def config(train_batch: int) -> dict:
        return {"train_batch_size": train_batch, "train_micro_batch_size_per_gpu": 1,
                "gradient_accumulation_steps": 4, "tensor_parallel": {"autotp_size": 2}}

    ds_config.DeepSpeedConfig(config(1 * 4 * dims.deepspeed_batch_ranks()))
    with pytest.raises(AssertionError):
        ds_config.DeepSpeedConfig(config(dims.samples_per_step(1, 4)))


@pytest.mark.parametrize("world, tp, pp, needle", [
    (4, 3, 1, "world size 4 is not divisible by --pipeline-stages 1 x --tp 3 = 3"),
    (6, 2, 2, "world size 6 is not divisible by --pipeline-stages 2 x --tp 2 = 4"),
    (2, 0, 1, "--tp must be an integer >= 1, got 0"),
    (2, 1, -2, "--pipeline-stages must be an integer >= 1, got -2"),
    (0, 1, 1, "the world size must be an integer >= 1, got 0"),
    (2, True, 1, "--tp must be an integer >= 1, got True"),
])
def test_bad_layouts_name_the_flag(world, tp, pp, needle):
    with pytest.raises(UserError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        ParallelDims(world=world, tp=tp, pp=pp)


def test_model_must_split_into_whole_heads_and_layers():
    llama = PRESETS["llama-tiny"]  # 4 heads, 2 key/value heads, 2 layers
    kwargs = {"name": llama.name, "heads": llama.heads, "kv_heads": llama.kv_heads, "layers": llama.layers}
    ParallelDims(world=2, tp=2).check_model(**kwargs)
    ParallelDims(world=2, pp=2).check_model(**kwargs)
    with pytest.raises(UserError, match="--tp 4 must divide llama-tiny's 4 attention heads and 2 key/value heads"):
        ParallelDims(world=4, tp=4).check_model(**kwargs)
    with pytest.raises(UserError, match="--pipeline-stages 4 exceeds llama-tiny's 2 decoder layers"):
        ParallelDims(world=4, pp=4).check_model(**kwargs)


@pytest.mark.parametrize("world, tp, pp", [(8, 2, 2), (16, 2, 4), (12, 3, 2), (4, 1, 2), (4, 2, 1)])
def test_data_parallel_rank_follows_deepspeeds_grid(world, tp, pp):
    """The oracle: DeepSpeed's own PipeModelDataParallelTopology (axes pipe, data, model) on the same ranks."""
    from deepspeed.runtime.pipe.topology import PipeModelDataParallelTopology

    dims = ParallelDims(world=world, tp=tp, pp=pp)
    grid = PipeModelDataParallelTopology(num_pp=pp, num_mp=tp, num_dp=dims.dp)
    assert [dims.dp_rank(rank) for rank in range(world)] == [grid.get_coord(rank).data for rank in range(world)]


def test_bubble_fraction_formula():
    from dsbench.parallel import bubble_fraction

    assert [bubble_fraction(2, m) for m in (1, 2, 4, 8)] == pytest.approx([1 / 2, 1 / 3, 1 / 5, 1 / 9])
    assert bubble_fraction(1, 4) == 0.0
    assert bubble_fraction(4, 8, virtual_stages=2) == pytest.approx(3 / 19)  # Narayanan et al. 2021 sec. 2.2


def test_the_first_stage_holds_p_micro_batches_or_more_when_interleaved():
    from dsbench.plan.pipeline_peak import in_flight_micro_batches

    assert in_flight_micro_batches(4, 8) == 4 and in_flight_micro_batches(4, 2) == 2  # 1F1B: min(P, M)
    assert in_flight_micro_batches(4, 8, gpipe=True) == 8 and in_flight_micro_batches(1, 8) == 1
    # Korthikanti et al. 2022 sec. 4.2.3: interleaving holds P·(1 + (P - 1)/(P·V)) micro-batches' activations
    assert in_flight_micro_batches(4, 16, virtual_stages=2) == pytest.approx(4 * (1 + 3 / 8))


@pytest.mark.parametrize("tp, pp", [(1, 1), (2, 1), (1, 2), (2, 2)])
def test_a_fixed_global_batch_under_any_layout(tp, pp):
    """Accumulating tp x pp times more keeps pure data parallelism's global batch (micro x accum x world) on the
    same ranks, and the inverse gives the accumulation back; each rank does 1/(tp x pp) of its replica's work."""
    dims = ParallelDims(world=8, tp=tp, pp=pp)
    pure = ParallelDims(world=8)
    assert dims.samples_per_step(2, dims.accumulation_for(3)) == pure.samples_per_step(2, 3) == 2 * 3 * 8
    assert dims.pure_dp_accumulation(dims.accumulation_for(3)) == 3
    assert dims.rank_share(2 * dims.accumulation_for(3)) == 2 * 3


@pytest.mark.parametrize("ranks", [1, 2, 3, 4, 6, 8])
@pytest.mark.parametrize("model", ["llama-tiny", "gpt2-tiny", "qwen2-tiny", "llama-7b"])
def test_the_widest_tp_is_the_largest_degree_a_launch_accepts(ranks, model):
    """calibrate's tensor-parallel degree on a node of ``ranks`` ranks: the launch's own model check (ParallelDims.
    check_model) accepts it, and refuses every larger divisor of the ranks (llama-tiny, 2 key/value heads, on 4
    ranks: 2, where calibrate used to split 4 ways and fail)."""
    from dsbench.parallel import widest_tp

    shape = PRESETS[model]
    tp = widest_tp(ranks, shape.heads, shape.kv_heads)
    assert ranks % tp == 0
    ParallelDims(world=ranks, tp=tp).check_model(name=model, heads=shape.heads, kv_heads=shape.kv_heads, layers=99)
    for wider in range(tp + 1, ranks + 1):
        if ranks % wider == 0:
            with pytest.raises(UserError, match="--tp"):
                ParallelDims(world=ranks, tp=wider).check_model(name=model, heads=shape.heads,
                                                                kv_heads=shape.kv_heads, layers=99)
    if model == "llama-tiny" and ranks == 4:
        assert tp == 2
