"""The strategy registry (dsbench/strategies.py): the one table of strategy names, and what derives from it."""

from __future__ import annotations

import ast
import shlex

import pytest

from dsbench import strategies as registry
from dsbench import strategy_match
from tests.conftest import ROOT

VOCABULARY = {*registry.FIXED, *registry.LISTED, *registry.LAUNCH_STRATEGIES, *registry.PLANNER}


def _tables(tree: ast.AST) -> list[tuple[int, set[str]]]:
    """Literal collections of which two or more items, and at least half, are strategy names (a record whose keys
    include ``fsdp`` and ``deepspeed`` among twenty others is not a table of them); a membership test
    (``x in ("ddp", "zero0")``) is a rule of one function, not a table, and is allowed."""
    rules = {id(c) for n in ast.walk(tree) if isinstance(n, ast.Compare) for c in n.comparators}
    found = []
    for node in ast.walk(tree):
        if id(node) in rules:
            continue
        if isinstance(node, ast.Dict):
            items = [k for k in node.keys if k is not None]
        elif isinstance(node, (ast.List, ast.Tuple, ast.Set)):
            items = node.elts
        else:
            continue
        names = {e.value for e in items if isinstance(e, ast.Constant) and isinstance(e.value, str)
                 and (e.value in VOCABULARY or registry.known(e.value))}
        if len(names) >= 2 and 2 * len(names) >= len(items):
            found.append((node.lineno, names))
    return found


def test_no_other_module_holds_a_table_of_strategy_names():
    problems = [f"{path.relative_to(ROOT)}:{line}: {sorted(names)}"
                for path in sorted((ROOT / "dsbench").rglob("*.py")) if path.name != "strategies.py"
                for line, names in _tables(ast.parse(path.read_text()))]
    assert problems == []


def test_name_for_takes_the_planner_fields_strategy_declares():
    """name_for/for_candidate take Strategy.planner_fields' names with its defaults; any other name is refused."""
    assert strategy_match.name_for("zero2", offload="cpu") == "zero2_offload"
    assert strategy_match.name_for(**registry.get("torch_tp2_sp").planner_fields) == "torch_tp2_sp"
    with pytest.raises(TypeError, match="not planner fields: tensor_parallel"):
        strategy_match.name_for("ddp", tensor_parallel=2)


def test_the_scan_finds_a_planted_table():
    assert _tables(ast.parse('KNOWN = ("ddp", "zero2")\nBY = {"pipe2": 2, "torch_tp4": 4}')) == [
        (1, {"ddp", "zero2"}), (2, {"pipe2", "torch_tp4"})]
    assert _tables(ast.parse('ok = s in ("zero1", "zero2")')) == []
    assert _tables(ast.parse('record = {"fsdp": 1, "deepspeed": 2, "a": 3, "b": 4, "c": 5}')) == []


@pytest.mark.parametrize(("name", "fields"), [
    ("torch_tp4", ("torch_tp", "torchrun", None, 4, 1)), ("pipe3", ("deepspeed", "deepspeed", 1, 1, 3)),
    ("zero1_tp8", ("deepspeed", "deepspeed", 1, 8, 1)), ("zero3_tp2", ("deepspeed", "deepspeed", 3, 2, 1)),
    ("torch_pipe2", ("torch_pp", "torchrun", None, 1, 2)),
    ("zero3_offload", ("deepspeed", "deepspeed", 3, 1, 1))])
def test_a_parameterised_name_carries_its_degree(name, fields):
    how = registry.get(name)
    assert (how.engine, how.launcher, how.zero, how.tp, how.pp) == fields
    assert how.model_parallel == how.tp * how.pp and how.compiles is (how.model_parallel == 1)


def test_torch_tp_option_suffixes_launch_with_their_flags():
    """torch_tp{N}_sp / _lp / _sp_lp: dsbench launch's --sequence-parallel / --loss-parallel; planned (their
    collectives, the split head, SP's own DTensor cost: tests/unit/test_tp_options_planner.py)."""
    both = registry.get("torch_tp4_sp_lp")
    assert (both.tp, both.sequence_parallel, both.loss_parallel, both.planned) == (4, True, True, True)
    assert strategy_match.name_for("ddp", tp=4, engine="torch", sequence_parallel=True, loss_parallel=True) == both.name
    assert both.launch_flags == ("--tp", "4", "--sequence-parallel", "--loss-parallel")
    assert registry.get("torch_tp2_lp").launch_flags == ("--tp", "2", "--loss-parallel")
    assert strategy_match.name_of_run("torch_tp", tp=2, sequence_parallel=True) == "torch_tp2_sp"
    interleaved = registry.get("torch_pipe4_interleaved2")
    # the CPU planner prices interleaved 1F1B (its bubble, V times the sends); not the zero-bubble form
    assert (interleaved.pp, interleaved.virtual_stages, interleaved.planned) == (4, 2, True)
    assert interleaved.planner_fields["virtual_stages"] == 2
    assert strategy_match.name_for("ddp", pp=4, engine="torch", virtual_stages=2) == "torch_pipe4_interleaved2"
    assert interleaved.launch_flags[-4:] == ("--pipeline-schedule", "interleaved", "--virtual-stages", "2")
    assert interleaved.worker_flags == ()  # dsbench launch takes the schedule itself
    assert strategy_match.name_of_run("torch_pp", pp=4, virtual_stages=2) == "torch_pipe4_interleaved2"
    zero_bubble = registry.get("torch_pipe2_zb2")  # torch's ScheduleInterleavedZeroBubble over the same chunks
    assert (zero_bubble.pp, zero_bubble.virtual_stages, zero_bubble.zero_bubble, zero_bubble.planned) == (
        2, 2, True, True)
    assert zero_bubble.launch_flags[-4:] == ("--pipeline-schedule", "interleaved-zb", "--virtual-stages", "2")
    assert strategy_match.name_of_run("torch_pp", pp=2, virtual_stages=2, zero_bubble=True) == "torch_pipe2_zb2"


@pytest.mark.parametrize("name", ["torch_tp1", "pipe0", "pipe02", "zero1_tp", "torch_tp2x", "zero9", "pipe99999",
                                  "torch_tp2_lp_sp", "pipe2_sp", "zero1_tp2_lp", "torch_tp2_sp_sp",
                                  "torch_pipe2_interleaved1", "pipe2_interleaved2", "torch_tp2_interleaved2",
                                  "torch_pipe2_zb1", "pipe2_zb2", "torch_tp2_zb2", "torch_pipe2_interleaved2_zb2"])
def test_a_bad_name_is_unknown(name):
    assert registry.lookup(name) is None and not registry.known(name)


def test_every_planned_strategy_and_its_planner_candidate_name_each_other():
    from dsbench.plan.candidate import Candidate
    from dsbench.plan.verify import candidate_for, compare_strategy

    for name in [*registry.LISTED, "torch_tp4", "pipe4", "zero1_tp8", "zero3_tp4", "torch_pipe8", "torch_tp2_sp",
                 "torch_tp2_lp",
                 "torch_tp4_sp_lp", "torch_pipe2_zb2"]:
        how = registry.get(name)
        candidate = candidate_for(name)
        if not how.planned:
            assert candidate is None
            continue
        assert isinstance(candidate, Candidate)
        expected = "ddp" if name == "single" else name  # single is DDP on one rank
        assert candidate.name == expected
        assert compare_strategy(candidate) == expected


def test_the_recommended_command_launches_the_candidate(cli_run, tmp_path):
    """Every candidate the planner ranks on 2 nodes x 8 GPUs prints a command that ``dsbench launch --dry-run``
    accepts, and the worker's run.json holds the candidate's layout (the launch is the oracle, not the builder)."""
    import json

    from dsbench.plan.api import build
    from dsbench.plan.estimate import estimate
    from dsbench.plan.recommend import candidates, launch_command
    from dsbench.plan.request import PlanRequest

    workload, cluster, _ = build(PlanRequest(model="llama-7b", gpus=16, nodes=2, gpus_per_node=8, seq_len=128,
                                             grad_accum=1, precision="fp32"))
    shape = workload.shape
    seen = set()
    for cand in candidates(cluster, shape):
        if cand.checkpointing or "nvme" in cand.offload:
            continue  # the worker flag and the NVMe folder are the only differences from its twin
        argv = shlex.split(launch_command(estimate(cand, workload, cluster), shape, workload, cluster))[2:]
        run_dir = tmp_path / str(len(seen))
        hosts = argv.index("--hostfile")  # the 2 x 8 slots as a hostfile of this run
        (tmp_path / "hosts").write_text("node1 slots=8\nnode2 slots=8\n")
        argv[hosts + 1] = str(tmp_path / "hosts")
        result = cli_run("launch", *argv[:argv.index("--")], "--run-dir", str(run_dir), "--dry-run",
                         *argv[argv.index("--"):])
        assert result.exit_code == 0, (cand.name, result.output)
        run = json.loads((run_dir / "run.json").read_text())
        how = cand.runs_as
        assert run["strategy"] == how.engine, cand.name
        config = json.loads((run_dir / "ds_config.json").read_text()) if how.engine == "deepspeed" else {}
        if how.engine == "deepspeed":
            assert config["zero_optimization"]["stage"] == how.zero, cand.name
            assert (config.get("pipeline") or {}).get("stages", 1) in (how.pp, "auto"), cand.name
        else:
            assert (run["tp"], run["pipeline_stages"] or 1) == (how.tp, how.pp), cand.name
            assert run["dp_shard"] == cand.dp_shard, cand.name  # HSDP: the node's 8 ranks split one copy
        seen.add(cand.name)
    # zero1 + tp8 + pp2 until 2026-12-01: AutoTP in DeepSpeed's pipeline; and HSDP (fsdp_hybrid) had no command
    assert {"ddp", "zero1", "zero3_offload", "zero1_tp8", "pipe8", "torch_tp8", "torch_pipe8", "fsdp_shard8",
            "torch_3d_tp8_pp2"} <= seen, seen


@pytest.mark.parametrize("offload, offload_param, run_name, candidate", [
    ("cpu", "cpu", "zero3_offload", "zero3_offload"),  # compare's
    ("none", "cpu", "zero3_params_cpu", "zero3 + offload-params-cpu"),  # was "zero3", as if nothing were offloaded
    ("cpu", "none", "zero3_offload", "zero3 + offload-cpu"),
    ("nvme", "cpu", "zero3_nvme_params_cpu", "zero3 + offload-nvme+params"),
])
def test_parameters_offloaded_apart_from_the_optimizer_are_named(offload, offload_param, run_name, candidate):
    """A ZeRO-3 run (and a planner row of `plan --config`) with the parameters offloaded and the optimizer not, which
    DeepSpeed trains (2 CPU ranks, 2026-11-30), is named apart from plain ZeRO-3."""
    assert strategy_match.name_of_run("deepspeed", zero=3, offload=offload, offload_param=offload_param) == run_name
    assert strategy_match.for_candidate("zero3", offload=offload, offload_param=offload_param).name == candidate
