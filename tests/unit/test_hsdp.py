"""FSDP as HSDP (``dsbench launch --strategy fsdp --dp-shard S``, compare's ``fsdp_shard{S}``, the planner's
``fsdp_hybrid``, an accelerate YAML's ``parallelism_config``): one vocabulary from the click flag to the rank.

Oracles: accelerate's own ``launch_command`` and ``ParallelismConfig`` for what a YAML asks of the ranks; the ring
collectives' byte counts (Patarasuk and Yuan 2009) for what HSDP sends across nodes. The losses (HSDP against one
process) are tests/integration/test_engine_ranks.py's."""

from __future__ import annotations

import json
import os

import pytest
import yaml

from dsbench import strategies
from dsbench.configs import accelerate_check, accelerate_explain, accelerate_worker
from dsbench.errors import UserError
from dsbench.launchers.accelerate import accelerate_yaml
from dsbench.parallel import ParallelDims
from dsbench.plan.candidate import Candidate, hybrid
from dsbench.plan.gpu_comm import dp_seconds, local_params
from dsbench.plan.gpu_layout import Layout, Shape
from dsbench.plan.gpu_profiles import profile_for
from dsbench.strategy_match import for_candidate, name_for, name_of_run
from dsbench.trainspec import TrainSpec
from tests.accelerate_oracle import accelerate_env as launched_env
from tests.conftest import DATA


def test_a_shard_group_is_named_launched_and_planned_alike():
    how = strategies.get("fsdp_shard4")
    assert (how.engine, how.launcher, how.dp_shard) == ("fsdp", "torchrun", 4)
    assert how.launch_flags == ("--dp-shard", "4") and how.model_parallel == 1
    dims = how.dims(16)
    assert (dims.shard, dims.replicate, dims.dp) == (4, 4, 16)
    assert how.planner_fields["strategy"] == "fsdp_hybrid" and how.planner_fields["dp_shard"] == 4
    assert name_for("fsdp_hybrid", dp_shard=4) == "fsdp_shard4"  # the planner's candidate is compare's cell
    assert name_of_run("fsdp", dp_shard=4) == "fsdp_shard4"  # and a launched run's header names it back
    assert strategies.lookup("fsdp_shard1") is None and strategies.lookup("fsdp_shard0") is None
    assert "fsdp_shard{S}" in strategies.choices()
    # the plain strategies keep their fields: no shard group outside HSDP
    assert strategies.get("fsdp").planner_fields["dp_shard"] == 0
    assert strategies.get("torch_3d_tp2_pp2").planner_fields["dp_shard"] == 0
    assert strategies.get("torch_3d_tp2_pp2_shard2").planner_fields["dp_shard"] == 2


def test_the_planners_hybrid_candidate_runs_as_a_nodes_shard_group():
    cand = hybrid(gpus_per_node=8)
    assert cand == Candidate(strategy="fsdp_hybrid", dp_shard=8)
    assert cand.runs_as.name == "fsdp_shard8" and cand.dims(32).replicate == 4
    # a plan row written before 2026-12-01 has no dp_shard: read as 0, never a wrong group
    row = {"strategy": "fsdp_hybrid", "offload": "none", "offload_param": "none", "tp": 1, "pp": 1}
    assert Candidate.from_dict(row).dp_shard == 0
    # torch_3d's HSDP from the planner's fields too (its shard group in the name)
    assert for_candidate("fsdp_hybrid", tp=2, pp=2, engine="torch", dp_shard=2).name == "torch_3d_tp2_pp2_shard2"


def test_the_run_description_takes_a_shard_group_for_fsdp_and_torch_3d_only():
    assert TrainSpec(strategy="fsdp", dp_shard=2).dp_shard == 2
    with pytest.raises(UserError, match="--dp-shard 2 sizes FSDP2's shard groups: it needs --strategy fsdp or "):
        TrainSpec(strategy="ddp", dp_shard=2)
    with pytest.raises(UserError, match="--dp-shard 3 must divide the 4 data-parallel ranks"):
        ParallelDims(world=4, dp_shard=3)


HSDP = {"compute_environment": "LOCAL_MACHINE", "distributed_type": "FSDP", "num_machines": 1, "num_processes": 4,
        "machine_rank": 0, "main_process_ip": "127.0.0.1", "main_process_port": 29500, "rdzv_backend": "static",
        "same_network": True, "mixed_precision": "no", "use_cpu": False,
        "fsdp_config": {"fsdp_version": 2, "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
                        "fsdp_reshard_after_forward": True, "fsdp_state_dict_type": "SHARDED_STATE_DICT"},
        "parallelism_config": {"parallelism_config_dp_replicate_size": 2, "parallelism_config_dp_shard_size": 2}}
"""An FSDP2 YAML asking accelerate for HSDP: 2 replicas of a model sharded over 2 processes."""


@pytest.mark.parametrize("replicate, shard", [(2, 2), (1, 4), (4, 1)])
def test_the_rank_reads_hsdp_as_accelerates_parallelism_config_does(replicate, shard, monkeypatch, tmp_path):
    from accelerate.parallelism_config import ParallelismConfig

    from dsbench.worker import accelerate_env

    config = {**HSDP, "parallelism_config": {"parallelism_config_dp_replicate_size": replicate,
                                             "parallelism_config_dp_shard_size": shard}}
    path = tmp_path / "hsdp.yaml"
    path.write_text(yaml.safe_dump(config))
    env = launched_env(["--config_file", str(path), "-m", "dsbench.train"])
    assert env["ACCELERATE_USE_PARALLELISM_CONFIG"] == "true"
    if replicate > 1 and shard == 1:  # accelerate's own ParallelismConfig refuses it; so does validate (the launch's)
        assert "needs dp_shard_size 2 or more" in accelerate_check.check(config)[0].message
        with pytest.raises(UserError, match="needs dp_shard_size 2 or more"):
            accelerate_env.shard_group(env, 4)
        return
    assert accelerate_worker.worker_refusal(config, 4) is None
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    oracle = ParallelismConfig()  # reads the PARALLELISM_CONFIG_* variables accelerate launch set
    got = accelerate_env.shard_group(os.environ, 4)
    assert got == (oracle.dp_shard_size if oracle.dp_replicate_enabled else 0)
    assert accelerate_env.launcher_env(os.environ)["PARALLELISM_CONFIG_DP_REPLICATE_SIZE"] == str(replicate)


def test_an_hsdp_yaml_that_does_not_cover_the_processes_is_refused_before_a_rank_starts():
    config = {**HSDP, "parallelism_config": {"parallelism_config_dp_replicate_size": 2,
                                             "parallelism_config_dp_shard_size": 4}}
    [finding] = accelerate_check.check(config)  # validate's, which the launch and compare run on the YAML first
    assert (finding.path, finding.message) == ("parallelism_config", "dp_replicate_size 2 x dp_shard_size 4 = 8, but "
                                               "the launch starts 4 processes; make their product the process count")
    replicas_alone = {**HSDP, "distributed_type": "MULTI_GPU"}  # accelerate needs FSDP2 for a parallelism_config
    assert "parallelism_config.parallelism_config_dp_replicate_size 2" in accelerate_worker.worker_refusal(
        replicas_alone, 4)


def test_the_rank_refuses_a_shard_group_the_yaml_contradicts():
    from dsbench.worker.resolve import _dp_shard

    env = {"ACCELERATE_USE_PARALLELISM_CONFIG": "true", "PARALLELISM_CONFIG_DP_REPLICATE_SIZE": "2",
           "PARALLELISM_CONFIG_DP_SHARD_SIZE": "2"}
    assert _dp_shard(TrainSpec(strategy="fsdp"), 4, env) == 2
    assert _dp_shard(TrainSpec(strategy="fsdp", dp_shard=2), 4, env) == 2
    with pytest.raises(UserError, match="--dp-shard 4 but accelerate's YAML asks for shard groups of 2"):
        _dp_shard(TrainSpec(strategy="fsdp", dp_shard=4), 4, env)


def test_the_yaml_dsbench_writes_for_hsdp_is_what_accelerate_reads(tmp_path):
    from accelerate.commands.config.config_args import ClusterConfig

    written = accelerate_yaml("fsdp", processes=16, machines=2, main_ip="10.0.0.1", port=29500, dp_shard=8)
    path = tmp_path / "hsdp.yaml"
    path.write_text(yaml.safe_dump(written))
    read = ClusterConfig.from_yaml_file(str(path))
    assert read.parallelism_config == {"parallelism_config_dp_replicate_size": 2,
                                       "parallelism_config_dp_shard_size": 8}
    env = launched_env(["--config_file", str(path), "--machine_rank", "0", "-m", "dsbench.train"])
    assert (env["PARALLELISM_CONFIG_DP_REPLICATE_SIZE"], env["PARALLELISM_CONFIG_DP_SHARD_SIZE"]) == ("2", "8")
    plain = accelerate_yaml("fsdp", processes=8, machines=1, main_ip="127.0.0.1", port=29500, dp_shard=8)
    assert "parallelism_config" not in plain  # one shard group of every process: plain FSDP
    said = accelerate_explain.explain(HSDP)
    assert any(line.startswith("HSDP (parallelism_config): each group of 2 processes shards one copy, 2 groups")
               for line in said)


def test_plan_prints_the_hsdp_launch(cli_run):
    """The ranking's HSDP row and --layout fsdp_hybrid print a launch with the node's shard group (plan --write's
    YAML for it: tests/unit/test_plan.py)."""
    ranked = json.loads(cli_run("plan", "--model", "llama-7b", "--gpus", "16", "--nodes", "2", "--json").output)
    row = next(c for c in ranked["candidates"] if c["strategy"] == "fsdp_hybrid" and not c["activation_checkpointing"])
    assert row["name"] == "fsdp_shard8" and row["launchable"]
    assert "--strategy fsdp --launcher torchrun --dp-shard 8 " in row["command"]
    layout = json.loads(cli_run("plan", "--layout", "fsdp_hybrid", "--model", "llama-7b", "--gpus", "32",
                                "--nodes", "4", "--gpus-per-node", "8", "--json").output)
    assert layout["strategy"] == "fsdp_shard8" and "--dp-shard 8" in layout["command"]
    three_d = json.loads(cli_run("plan", "--layout", "fsdp_hybrid", "--model", "llama-7b", "--gpus", "64",
                                 "--nodes", "8", "--gpus-per-node", "8", "--tp", "2", "--pipeline-stages", "2",
                                 "--json").output)
    # tp 2 x pp 2 on 64 GPUs: a node's 8 GPUs hold 4 data-parallel ranks of one stage, HSDP's shard group
    assert three_d["strategy"] == "torch_3d_tp2_pp2_shard4" and "--dp-shard 4" in three_d["command"]
    # one node: the shard group is every data-parallel rank, so HSDP is plain FSDP, run and named as such (until
    # 2026-12-01 printed as fsdp_shard8 with --dp-shard 8 on 8 GPUs)
    one = json.loads(cli_run("plan", "--layout", "fsdp_hybrid", "--model", "llama-7b", "--gpus", "8",
                             "--json").output)
    assert one["strategy"] == "fsdp" and "--dp-shard" not in one["command"]
    one_3d = json.loads(cli_run("plan", "--layout", "fsdp_hybrid", "--model", "llama-7b", "--gpus", "8", "--tp", "2",
                                "--pipeline-stages", "2", "--json").output)
    assert one_3d["strategy"] == "torch_3d_tp2_pp2" and "--dp-shard" not in one_3d["command"]


LLAMA_7B = Shape("llama", 32, 4096, 32, 32, 11008, 32000)


def _dp_seconds(strategy: str, inter_gbs: float) -> float:
    """The GPU model's exposed data-parallel seconds of llama-7b on 2 nodes x 8 H100s, nothing to hide under."""
    lay = Layout(LLAMA_7B, 2048, "h100-sxm", 16, 8, strategy=strategy, global_batch=16, inter_gbs=inter_gbs).check()
    return dp_seconds(lay, profile_for("h100-sxm"), compute=0.0)


def test_hsdp_sends_only_its_shards_gradient_across_nodes():
    """The GPU model's HSDP: gathers and reduce-scatters within the node's shard group, then each shard's fp32
    gradient all-reduced across the 2 nodes (a ring all-reduce of n ranks sends 2(n-1)/n of the buffer per GPU:
    Patarasuk and Yuan 2009); FSDP's whole ring crosses nodes. A 10x slower network adds to HSDP's step only
    that all-reduce's extra seconds."""
    hsdp_fast, hsdp_slow = _dp_seconds("fsdp_hybrid", 100.0), _dp_seconds("fsdp_hybrid", 10.0)
    fsdp_fast, fsdp_slow = _dp_seconds("fsdp", 100.0), _dp_seconds("fsdp", 10.0)
    assert hsdp_fast < fsdp_fast and hsdp_slow - hsdp_fast < (fsdp_slow - fsdp_fast) / 4
    lay = Layout(LLAMA_7B, 2048, "h100-sxm", 16, 8, strategy="fsdp_hybrid", global_batch=16).check()
    sent = 4 * local_params(lay) / 8 * 2 * (2 - 1) / 2  # bytes each GPU sends: its shard's fp32 gradient
    efficiency = profile_for("h100-sxm").network_efficiency
    extra = sent / 1e9 * (1 / 10 - 1 / 100) / efficiency
    # dp_seconds adds a layer's share of the traffic (comm / layers) to what the compute cannot hide
    assert hsdp_slow - hsdp_fast == pytest.approx(extra * (1 + 1 / lay.stage_layers), rel=1e-9)


def test_dsbench_launch_writes_its_shard_group_into_the_accelerate_yaml_it_runs(cli_run, tmp_path):
    """``--launcher accelerate --dp-shard 2``: the YAML dsbench writes (and a user may reuse) asks accelerate for the
    same HSDP as run.json asks the ranks, so a rank reads one shard group from both (worker/resolve._dp_shard)."""
    result = cli_run("launch", "--strategy", "fsdp", "--launcher", "accelerate", "--num-gpus", "4", "--dp-shard", "2",
                     "--run-dir", str(tmp_path / "run"), "--dry-run")
    assert result.exit_code == 0, result.output
    written = yaml.safe_load((tmp_path / "run" / "accelerate_config.yaml").read_text())
    assert written["parallelism_config"] == {"parallelism_config_dp_replicate_size": 2,
                                             "parallelism_config_dp_shard_size": 2}
    assert json.loads((tmp_path / "run" / "run.json").read_text())["dp_shard"] == 2


def test_whatif_prices_hsdp_by_its_replicas_all_reduce_alone():
    """On the test bed a node's ranks share its bridge; between nodes HSDP sends only the replicas' all-reduce of each
    shard's fp32 gradient: 2(n-1)/n x 4 bytes x params / S per rank at the link's rate (Patarasuk and Yuan 2009).
    Measured 2026-12-01 (2 nodes x 2 ranks, gpt2-tiny, 20mbit): fsdp 2.327 s a step, fsdp_shard2 0.759 s."""
    from dsbench.bench.whatif import predicted_comm_s
    from dsbench.models import PRESETS

    params = PRESETS["gpt2-tiny"].num_params()
    expected = 2 * (2 - 1) / 2 * 4 * params / 2 / (20e6 / 8)
    assert predicted_comm_s("fsdp_shard2", "gpt2-tiny", 4, 2, 128, "20mbit") == pytest.approx(expected)
    assert predicted_comm_s("fsdp", "gpt2-tiny", 4, 2, 128, "20mbit") > 3 * expected  # every collective on the wire


FSDP1 = DATA / "bad" / "accelerate" / "fsdp_no_shard.yaml"


@pytest.mark.parametrize("strategy, local, expected", [
    ("FULL_SHARD", 2, 0), ("SHARD_GRAD_OP", 2, 0), ("NO_SHARD", 2, 1), ("HYBRID_SHARD", 2, 2),
    ("_HYBRID_SHARD_ZERO2", 2, 2), ("HYBRID_SHARD", 4, 0),  # one machine: its shard group is every rank
])
def test_every_fsdp1_sharding_strategy_runs_on_fsdp2s_mesh(strategy, local, expected, monkeypatch, tmp_path):
    """An FSDP1 YAML's sharding strategy, as accelerate's own plugin reads it from the environment accelerate
    launch sets: reshard_after_forward as torch's FSDP1 -> FSDP2 notes map it (SHARD_GRAD_OP and _HYBRID_SHARD_ZERO2
    keep the gathered weights), and the shard group: whole replicas for NO_SHARD, a machine's processes for the
    hybrid ones (4 ranks here, ``local`` per machine). Until 2026-12-01 NO_SHARD and HYBRID_SHARD were refused."""
    from accelerate.utils import FullyShardedDataParallelPlugin

    from dsbench.worker import accelerate_env

    config = {**yaml.safe_load(FSDP1.read_text()), "num_processes": 4}
    config["fsdp_config"]["fsdp_sharding_strategy"] = strategy
    path = tmp_path / "fsdp1.yaml"
    path.write_text(yaml.safe_dump(config))
    assert accelerate_worker.worker_refusal(config, 4) is None
    env = launched_env(["--config_file", str(path), "-m", "dsbench.train"])
    for key, value in {**env, "LOCAL_WORLD_SIZE": str(local)}.items():
        monkeypatch.setenv(key, value)
    oracle = FullyShardedDataParallelPlugin(sync_module_states=False, cpu_ram_efficient_loading=False)
    assert oracle.sharding_strategy.name == strategy
    settings = accelerate_env.fsdp_settings(reshard=True, cpu_offload=False, activation_checkpointing=False)
    assert settings["reshard"] is (strategy not in ("SHARD_GRAD_OP", "_HYBRID_SHARD_ZERO2"))
    assert accelerate_env.shard_group(os.environ, 4) == expected


@pytest.mark.parametrize("value", ["abc", -2, 0, True, 1e30, [2], 10**20])
def test_a_parallelism_config_size_that_is_no_process_count_is_one_line(value):
    """accelerate reads the sizes with int() only when the script builds its Accelerator, after the launch; validate
    (and so the launch) names the key first. An empty value is left to accelerate's default (1)."""
    config = {**HSDP, "parallelism_config": {"parallelism_config_dp_replicate_size": value,
                                             "parallelism_config_dp_shard_size": 2}}
    [finding] = [f for f in accelerate_check.check(config) if f.severity == "error"]
    assert finding.path == "parallelism_config.parallelism_config_dp_replicate_size"
    assert finding.message.endswith("is not a whole number in 1..1,000,000")


@pytest.mark.parametrize("hosts, expected", [("a slots=2\nb slots=2\n", ["fsdp_shard2"]),
                                             ("a slots=8\nb slots=8\nc slots=8\n", ["fsdp_shard8"]),
                                             ("a slots=1\nb slots=1\n", []),  # a node of one rank shards nothing
                                             ("a slots=2\nb slots=4\n", []),  # uneven: planned as one node
                                             (None, [])])
def test_tune_searches_hsdp_with_a_node_per_shard_group_across_nodes(hosts, expected, tmp_path):
    from dsbench.bench.tune import hybrid_strategies
    from dsbench.bench.tune_request import TuneRequest

    hostfile = None
    if hosts:
        hostfile = tmp_path / "hosts"
        hostfile.write_text(hosts)
    world = sum(int(line.split("=")[1]) for line in hosts.splitlines()) if hosts else 2
    req = TuneRequest(model="gpt2-tiny", world=world, global_batch=4 * world,
                      hostfile=str(hostfile) if hostfile else None)
    assert hybrid_strategies(req) == expected
