"""torch_3d (issue 28): its names, layout, flags and refusals, without processes.

The rank layout's oracle is torch's own DeviceMesh (built on torch's fake process group, one rank at a time): the
engine's (pp, dp_replicate, dp_shard, tp) mesh must give each rank the data-parallel index the data plan reads
(ParallelDims.dp_rank) and consecutive tensor-parallel ranks.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from dsbench import strategies, strategy_match
from dsbench.errors import UserError
from dsbench.parallel import ParallelDims
from dsbench.trainspec import TrainSpec


def test_names_parse_to_the_layout_they_spell():
    plain = strategies.get("torch_3d_tp2_pp2")
    assert (plain.engine, plain.launcher, plain.tp, plain.pp, plain.dp_shard) == ("torch_3d", "torchrun", 2, 2, 0)
    assert plain.launch_flags == ("--tp", "2", "--pipeline-stages", "2")
    assert strategies.get("torch_3d_tp2_pp2_shard1").launch_flags[-2:] == ("--dp-shard", "1")
    assert strategies.get("torch_3d_tp1_pp4").tp == 1
    for bad in ("torch_3d_tp2_pp1", "torch_3d_tp0_pp2", "torch_3d_tp2_pp2_shard0", "torch_3d_tp2", "torch_3d"):
        assert strategies.lookup(bad) is None, bad
    assert "torch_3d_tp{T}_pp{P}[_interleaved{V}|_zb{V}][_shard{S}]" in strategies.choices()
    assert plain.model_parallel == 4 and plain.family == "torch_3d" and not plain.compiles
    chunked = strategies.get("torch_3d_tp2_pp2_interleaved2_shard1")
    assert (chunked.virtual_stages, chunked.dp_shard, chunked.planned) == (2, 1, True)
    assert chunked.launch_flags[4:8] == ("--pipeline-schedule", "interleaved", "--virtual-stages", "2")
    zero_bubble = strategies.get("torch_3d_tp2_pp2_zb2")
    assert zero_bubble.launch_flags[5] == "interleaved-zb" and zero_bubble.planned  # priced since 2026-11-26 23:20
    assert strategies.lookup("torch_3d_tp2_pp2_interleaved1") is None


def test_the_planner_names_its_candidates_as_compare_does():
    assert strategies.get("torch_3d_tp2_pp2").planner_fields["strategy"] == "fsdp"
    assert strategies.get("torch_3d_tp2_pp2_shard1").planner_fields["strategy"] == "ddp"
    assert strategies.get("torch_3d_tp2_pp2_shard2").planner_fields["strategy"] == "fsdp_hybrid"
    assert strategy_match.name_for("fsdp", tp=2, pp=2, engine="torch") == "torch_3d_tp2_pp2"
    assert strategy_match.name_for("ddp", tp=2, pp=2, engine="torch") == "torch_3d_tp2_pp2_shard1"
    assert strategy_match.for_candidate("fsdp_hybrid", tp=2, pp=2, engine="torch").engine == "torch_3d"


def test_a_run_header_names_the_run_back():
    assert strategy_match.name_of_run("torch_3d", tp=2, pp=2) == "torch_3d_tp2_pp2"
    assert strategy_match.name_of_run("torch_3d", tp=2, pp=2, dp_shard=1) == "torch_3d_tp2_pp2_shard1"
    assert strategy_match.name_of_run("torch_3d", tp=2, pp=2, virtual_stages=2) == "torch_3d_tp2_pp2_interleaved2"
    assert strategy_match.name_for("fsdp", tp=2, pp=2, engine="torch",
                                   virtual_stages=2) == "torch_3d_tp2_pp2_interleaved2"


def test_dims_split_data_parallelism_into_replicas_and_shards():
    dims = ParallelDims(world=16, tp=2, pp=2, dp_shard=2)
    assert (dims.dp, dims.shard, dims.replicate) == (4, 2, 2)
    full = ParallelDims(world=8, tp=2, pp=2)
    assert (full.shard, full.replicate) == (2, 1)
    with pytest.raises(UserError, match="--dp-shard 3 must divide the 4 data-parallel ranks"):
        ParallelDims(world=16, tp=2, pp=2, dp_shard=3)
    with pytest.raises(UserError, match="--dp-shard must be an integer"):
        ParallelDims(world=8, dp_shard=-1)


@pytest.mark.parametrize("world,tp,pp,shard", [(8, 2, 2, 0), (8, 1, 2, 2), (8, 2, 2, 1), (16, 2, 2, 2)])
def test_the_engine_mesh_puts_each_rank_where_the_data_plan_reads(world, tp, pp, shard):
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    from dsbench.worker.engines.three_d import Torch3DEngine

    dims = ParallelDims(world=world, tp=tp, pp=pp, dp_shard=shard)
    for rank in range(world):
        dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world)
        try:
            mesh = Torch3DEngine.make_mesh(SimpleNamespace(dims=dims), "cpu")
            replica, piece = mesh.get_local_rank("dp_replicate"), mesh.get_local_rank("dp_shard")
            assert replica * dims.shard + piece == dims.dp_rank(rank)  # the samples this rank trains on
            assert mesh.get_local_rank("pp") == rank // (dims.dp * tp)  # stages outermost
            assert mesh["tp"].mesh.tolist() == list(range(rank - rank % tp, rank - rank % tp + tp))  # consecutive
            assert mesh["dp_shard"].size() == dims.shard and mesh["dp_replicate"].size() == dims.replicate
        finally:
            dist.destroy_process_group()


@pytest.mark.parametrize("fields,message", [
    ({"strategy": "torch_3d", "tp": 2}, "--strategy torch_3d pipelines the model: give --pipeline-stages 2 or more"),
    ({"strategy": "ddp", "dp_shard": 2}, "--dp-shard 2 sizes FSDP2's shard groups: it needs --strategy fsdp or "
                                          "torch_3d"),
    ({"strategy": "torch_3d", "tp": 2, "pipeline_stages": 2, "grad_accum": 2, "sequence_parallel": True},
     "--sequence-parallel shards what tensor parallelism splits: it needs --strategy torch_tp"),
    ({"strategy": "torch_3d", "tp": 2, "pipeline_stages": 2, "grad_accum": 1},
     "1F1B needs at least as many micro-batches as stages"),
    ({"strategy": "torch_3d", "tp": 2, "pipeline_stages": 2, "grad_accum": 2, "compile": True, "warmup": 1},
     "--compile is not supported with --strategy torch_3d"),
])
def test_the_worker_refuses_what_torch_3d_cannot_run(fields, message):
    with pytest.raises(UserError, match=message.replace("(", r"\(")):
        TrainSpec(**fields)


def test_launch_writes_the_layout_into_the_run_description(cli_run, tmp_path):
    result = cli_run("launch", "--strategy", "torch_3d", "--tp", "2", "--pipeline-stages", "2", "--dp-shard", "1",
                     "--num-gpus", "8", "--model", "llama-tiny", "--grad-accum", "2", "--run-dir", "r", "--dry-run")
    assert result.exit_code == 0, result.output
    run = json.loads((tmp_path / "r" / "run.json").read_text())
    assert (run["strategy"], run["tp"], run["pipeline_stages"], run["dp_shard"]) == ("torch_3d", 2, 2, 1)
    assert "deepspeed --num_gpus 8" in result.output  # the default launcher starts any engine


def test_launch_takes_the_pipeline_schedule_itself(cli_run, tmp_path):
    """`--pipeline-schedule` and `--virtual-stages` before `--`, as the strategy registry's commands give them; the
    worker's own spelling after `--` still works and wins, as for every run-description field."""
    base = ["launch", "--strategy", "torch_pp", "--launcher", "torchrun", "--pipeline-stages", "2", "--num-gpus", "2",
            "--model", "gpt2-mini", "--grad-accum", "4", "--dry-run"]
    result = cli_run(*base, "--pipeline-schedule", "interleaved-zb", "--virtual-stages", "2", "--run-dir", "a")
    assert result.exit_code == 0, result.output
    run = json.loads((tmp_path / "a" / "run.json").read_text())
    assert (run["pipeline_schedule"], run["virtual_stages"]) == ("interleaved-zb", 2)
    result = cli_run(*base, "--pipeline-schedule", "interleaved", "--virtual-stages", "2", "--run-dir", "b", "--",
                     "--pipeline-schedule", "interleaved-zb")
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "b" / "run.json").read_text())["pipeline_schedule"] == "interleaved-zb"
    assert strategies.get("torch_pipe2_zb2").launch_flags == ("--pipeline-stages", "2", "--pipeline-schedule",
                                                              "interleaved-zb", "--virtual-stages", "2")


@pytest.mark.parametrize("args,message", [
    (["--strategy", "ddp", "--pipeline-schedule", "gpipe"],
     "--pipeline-schedule orders torch's pipeline stages: it needs --strategy torch_pp or torch_3d; --strategy ddp"),
    (["--zero", "1", "--virtual-stages", "2"], "--virtual-stages orders torch's pipeline stages: it needs --strategy "
     "torch_pp or torch_3d; --strategy deepspeed would ignore it (DeepSpeed's pipeline engine runs its own 1F1B)"),
    (["--strategy", "torch_pp", "--pipeline-stages", "2", "--virtual-stages", "2", "--grad-accum", "4"],
     "--virtual-stages 2 needs --pipeline-schedule interleaved or interleaved-zb"),
    (["--strategy", "torch_pp", "--pipeline-stages", "2", "--pipeline-schedule", "interleaved", "--virtual-stages",
      "3", "--grad-accum", "4"], "--virtual-stages 3 does not divide gpt2-mini's 4 layers into 2 stages x 3"),
    (["--strategy", "torch_pp", "--pipeline-stages", "2", "--pipeline-schedule", "1F1B"], "'1F1B' is not one of"),
    (["--strategy", "torch_pp", "--pipeline-stages", "2", "--virtual-stages", "0"], "0 is not in the range x>=1"),
])
def test_launch_refuses_a_schedule_its_strategy_cannot_run(cli_run, args, message):
    result = cli_run("launch", "--model", "gpt2-mini", "--num-gpus", "2", "--dry-run", *args)
    assert result.exit_code == 2 and message in result.output, result.output


@pytest.mark.parametrize("args,message", [
    (["--dp-shard", "3"], "--dp-shard 3 must divide the 2 data-parallel ranks"),
    # (a family it did not split until 2026-12-01: Phi-3, GPT-2 before; the heads a degree does not divide since)
    (["--model", "phi3-tiny", "--tp", "4"],
     "--tp 4 must divide phi3-tiny's 4 attention heads and 2 key/value heads"),
])
def test_launch_refuses_a_layout_the_ranks_or_model_cannot_take(cli_run, args, message):
    base = ["launch", "--strategy", "torch_3d", "--tp", "2", "--pipeline-stages", "2", "--num-gpus", "8",
            "--model", "llama-tiny", "--grad-accum", "2", "--dry-run"]
    result = cli_run(*base, *args)
    assert result.exit_code == 2 and message in result.output, result.output


def test_plan_prices_a_3d_layout_and_prints_the_command_that_runs_it(cli_run, tmp_path):
    """`dsbench plan --layout fsdp --tp T --pipeline-stages P` (interleaved too) names torch_3d, and the command it
    prints is one `dsbench launch` accepts (here as a dry run on 8 CPU ranks)."""
    result = cli_run("plan", "--model", "llama-7b", "--gpus", "8", "--gpu", "a100", "--layout", "fsdp", "--tp", "2",
                     "--pipeline-stages", "2", "--pipeline-schedule", "interleaved", "--virtual-stages", "1",
                     "--micro-batch", "1", "--global-batch", "8", "--json")
    assert result.exit_code == 0, result.output
    plain = json.loads(result.output)
    assert plain["strategy"] == "torch_3d_tp2_pp2" and plain["launchable"], plain["why_not"]
    chunked = json.loads(cli_run("plan", "--model", "llama-7b", "--gpus", "8", "--gpu", "a100", "--layout", "ddp",
                                 "--tp", "2", "--pipeline-stages", "2", "--pipeline-schedule", "interleaved",
                                 "--virtual-stages", "2", "--micro-batch", "1", "--global-batch", "8",
                                 "--json").output)
    assert chunked["strategy"] == "torch_3d_tp2_pp2_interleaved2_shard1", chunked["why_not"]
    argv = chunked["command"].split()[2:]  # after `dsbench launch`
    argv = [a for a in argv if a != "--hostfile" and not a.startswith("hostfiles/")]
    launch = cli_run("launch", *argv[:argv.index("--")], "--run-dir", "r", "--dry-run", *argv[argv.index("--"):])
    assert launch.exit_code == 0, launch.output
    run = json.loads((tmp_path / "r" / "run.json").read_text())
    assert (run["strategy"], run["dp_shard"], run["pipeline_schedule"], run["virtual_stages"]) == (
        "torch_3d", 1, "interleaved", 2)
