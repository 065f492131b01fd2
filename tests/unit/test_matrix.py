import json
import re
from pathlib import Path

import pytest

from dsbench import strategies as registry
from dsbench.bench.matrix import DEFAULTS, Cell, cell_launch_args, expand
from dsbench.bench.matrix_file import load_matrix_file
from dsbench.bench.session import matrix_from
from dsbench.errors import UserError


def test_default_matrix_is_single_plus_each_strategy_on_two_ranks():
    cells = expand(**DEFAULTS)
    assert [(c.strategy, c.world_size) for c in cells] == [("single", 1)] + [
        (s, 2) for s in registry.DEFAULT_COMPARE if s != "single"]
    assert len({c.id for c in cells}) == len(cells)
    # every strategy steps with a fused Adam by default: torch's fused AdamW where the worker steps torch AdamW,
    # DeepSpeed's own (FusedAdam, DeepSpeedCPUAdam under offload) for the ZeRO strategies
    assert {c.strategy for c in cells if c.fused_optimizer} == {"single", "ddp", "fsdp"}
    assert not any(c.compile for c in cells)


def test_fused_auto_runs_each_strategy_once_with_the_kernel_where_it_applies():
    cells = expand(["single", "torch_tp2", "zero1_tp2", "pipe2", f"accel:{Path('x.yaml')}"], [2], [2],
                   ["llama-tiny"], fused_optimizer="auto")
    assert {c.strategy: c.fused_optimizer for c in cells} == {"single": True, "torch_tp2": True, "zero1_tp2": False,
                                                               "pipe2": False, "accel:x.yaml": False}
    assert len(cells) == 5


def test_expansion_is_the_full_product_with_repeats():
    cells = expand(["ddp", "zero3"], [1, 2, 4], [1, 2], ["gpt2-tiny", "llama-tiny"], repeats=3)
    assert len(cells) == 2 * 3 * 2 * 2 * 3
    assert cells[0].id == "ddp-w1-mb1-gpt2-tiny-r0"


def test_single_runs_only_at_one_rank_and_is_added_as_baseline():
    cells = expand(["single", "ddp"], [2, 4], [2], ["gpt2-tiny"])
    assert [(c.strategy, c.world_size) for c in cells] == [("single", 1), ("ddp", 2), ("ddp", 4)]


def test_a_hostfile_runs_every_cell_but_single_across_its_hosts(tmp_path):
    """compare --hostfile: the world size is the hostfile's slots, each cell's launch names the hostfile, and single
    stays on this machine as the scaling baseline."""
    cells = expand(["single", "ddp", "torch_pipe2"], [4], [2], ["gpt2-tiny"], hostfile="hosts")
    assert [(c.strategy, c.world_size, c.hostfile) for c in cells] == [
        ("single", 1, None), ("ddp", 4, "hosts"), ("torch_pipe2", 4, "hosts")]
    args = cell_launch_args(cells[2], tmp_path / "run")
    assert args[args.index("--hostfile") + 1] == "hosts" and "--num-gpus" not in args
    assert "--num-gpus" in cell_launch_args(cells[0], tmp_path / "run")
    with pytest.raises(UserError, match="accel:x.yaml: a user's accelerate YAML runs on this machine's ranks"):
        expand(["ddp", "accel:x.yaml"], [2], [2], ["gpt2-tiny"], hostfile="hosts")


@pytest.mark.parametrize("strategy", ["ddp", "zero3_nvme", "torch_pipe2", "zero1_tp2", "ulysses2"])
def test_the_command_tune_shows_for_its_winner_runs_as_typed(cli_run, tmp_path, strategy):
    """tune's winner is shown as a `dsbench launch` to run again: the launch's own folder and progress lines
    (until 2026-12-03 the cell's --run-dir and --quiet), and a command the launch takes as typed (a dry run)."""
    import shlex
    from dataclasses import replace

    [cell] = expand([strategy], [2], [1], ["llama-tiny"])
    cell = replace(cell, checkpointing=True)
    shown = shlex.join(["dsbench", "launch", *cell_launch_args(cell, Path("runs") / cell.id, for_user=True)])
    args = shlex.split(shown)[2:]  # as the user pastes it
    assert "--quiet" not in args and "--run-dir" not in args and "--activation-checkpointing" in args
    cut = args.index("--")
    result = cli_run("launch", *args[:cut], "--dry-run", "--run-dir", "r", *args[cut:])
    assert result.exit_code == 0, result.output
    assert "--quiet" in cell_launch_args(cell, tmp_path) and "--run-dir" in cell_launch_args(cell, tmp_path)


def test_compare_takes_its_world_size_from_the_hostfile(cli_run, tmp_path):
    (tmp_path / "hosts").write_text("n1 slots=2\nn2 slots=2\n")
    result = cli_run("compare", "--hostfile", str(tmp_path / "hosts"), "--world-sizes", "2", "--out", "c")
    assert result.exit_code == 2 and "--world-sizes is the ranks on this machine; with --hostfile" in result.output
    (tmp_path / "bad").write_text("n1 slots=x\n")
    result = cli_run("compare", "--hostfile", str(tmp_path / "bad"), "--out", "c")
    assert result.exit_code == 2 and "slots" in result.output and "Traceback" not in result.output


def test_compare_resumes_with_its_hostfile_typed_either_way(tmp_path, monkeypatch):
    """`compare --hostfile h` resumed as `--hostfile ./h` or `$PWD/h` is the same matrix (it was refused as "a
    different matrix (hostfile: ...)"); a hostfile elsewhere is not."""
    from dsbench.bench.compare import check_out, prepare_out
    from dsbench.bench.session import checked_matrix
    from dsbench.errors import UserError

    for folder in (tmp_path, tmp_path / "other"):
        folder.mkdir(exist_ok=True)
        (folder / "h").write_text("n1 slots=1\nn2 slots=1\n")
    monkeypatch.chdir(tmp_path)

    def matrix(hostfile: str) -> dict:
        return checked_matrix(None, {"strategies": ["ddp"], "hostfile": hostfile}, "out")[0]

    prepare_out(tmp_path / "out", matrix("h"), resume=False)
    for same in ("./h", str(tmp_path / "h")):
        check_out(tmp_path / "out", matrix(same), resume=True)
    with pytest.raises(UserError, match="holds a different matrix \\(hostfile: "):
        check_out(tmp_path / "out", matrix("other/h"), resume=True)


def test_compare_resumes_with_its_accelerate_yaml_typed_either_way(tmp_path, monkeypatch):
    """`compare --strategies accel:a.yaml` resumed as `accel:./a.yaml` or `accel:$PWD/a.yaml` is the same matrix (it
    was refused as "a different matrix (strategies: ...)"); a YAML of the same name elsewhere is not. The matrix
    stored holds the file's absolute path; the cells keep the label `accel:a.yaml` and the path as typed."""
    from dsbench.bench.compare import check_out, prepare_out
    from dsbench.bench.session import checked_matrix
    from dsbench.errors import UserError

    yaml = "distributed_type: MULTI_GPU\nnum_processes: 2\nmixed_precision: 'no'\n"
    for folder in (tmp_path, tmp_path / "other"):
        folder.mkdir(exist_ok=True)
        (folder / "a.yaml").write_text(yaml)
    monkeypatch.chdir(tmp_path)

    def checked(path: str) -> tuple[dict, list]:
        matrix, cells, _ = checked_matrix(None, {"strategies": ["ddp", f"accel:{path}"], "world_sizes": [2]}, "out")
        return matrix, cells

    matrix, cells = checked("a.yaml")
    assert matrix["strategies"] == ["ddp", f"accel:{tmp_path / 'a.yaml'}"]
    assert [(c.strategy, c.accelerate_config) for c in cells] == [("ddp", None), ("accel:a.yaml", "a.yaml")]
    prepare_out(tmp_path / "out", matrix, resume=False)
    for same in ("./a.yaml", str(tmp_path / "a.yaml")):
        check_out(tmp_path / "out", checked(same)[0], resume=True)
    with pytest.raises(UserError, match="holds a different matrix \\(strategies: "):
        check_out(tmp_path / "out", checked("other/a.yaml")[0], resume=True)


@pytest.mark.parametrize("kwargs, needle", [
    ({"strategies": ["zero4"]}, "unknown strategy 'zero4'"),
    ({"strategies": ["torch_pipe2_interleaved2"]},
     "torch_pipe2_interleaved2: --virtual-stages 2 does not divide gpt2-tiny's 2 layers into 2 stages x 2"),
    ({"world_sizes": [0]}, ">= 1"),
    ({"warmup": 20, "steps": 20}, "--warmup must be in 0..19"),
])
def test_bad_matrices(kwargs, needle):
    base = {"strategies": ["ddp"], "world_sizes": [2], "micro_batches": [2], "models": ["gpt2-tiny"]}
    with pytest.raises(UserError, match=needle):
        expand(**{**base, **kwargs})


def test_matrix_file_yaml_and_json_and_flag_precedence(tmp_path):
    yaml_file = tmp_path / "m.yaml"
    yaml_file.write_text("strategies: [ddp, zero2]\nworld_sizes: [1, 2]\nsteps: 8\n")
    matrix = matrix_from(str(yaml_file), {"steps": 12, "models": None})
    assert matrix["strategies"] == ["ddp", "zero2"] and matrix["steps"] == 12 and matrix["models"] == ["gpt2-mini"]
    json_file = tmp_path / "m.json"
    json_file.write_text(json.dumps({"repeats": 2}))
    assert load_matrix_file(str(json_file)) == {"repeats": 2}
    bad = tmp_path / "bad.yaml"
    bad.write_text("strategy: [ddp]\n")
    with pytest.raises(UserError, match="unexpected matrix keys"):
        load_matrix_file(str(bad))


@pytest.mark.parametrize("strategy", [*registry.LISTED, "torch_tp4", "pipe4", "zero1_tp4", "torch_pipe4"])
def test_every_strategy_cell_is_a_valid_launch(cli_run, tmp_path, strategy):
    how = registry.get(strategy)
    # tensor parallelism and Ulysses split Llama-family models (llama-1b's 4 KV heads split 4 ways); 4 stages need
    # 4 layers
    llama = "llama-tiny" if how.tp < 4 else "llama-1b"
    model = llama if how.tp > 1 or how.ulysses > 1 else "gpt2-mini" if how.pp > 2 else "gpt2-tiny"
    world = 1 if strategy == "single" else max(2, how.model_parallel)
    cell = Cell(strategy=strategy, world_size=world, micro_batch=2, model=model)
    args = cell_launch_args(cell, tmp_path / "cell")
    result = cli_run("launch", *args[: args.index("--")], "--dry-run", *args[args.index("--"):])
    assert result.exit_code == 0, result.output
    assert result.output.strip().endswith(f"--run-json {tmp_path / 'cell' / 'run.json'}")
    run = json.loads((tmp_path / "cell" / "run.json").read_text())  # what the worker will run
    assert (run["steps"], run["warmup"], run["seq_len"], run["quiet"], run["micro_batch"]) == (20, 5, 128, True, 2)
    # every strategy trains micro x world samples per step: model-parallel ranks accumulate to make up for it
    assert run["grad_accum"] == registry.get(strategy).model_parallel
    assert run["fsdp_reshard"] is (strategy != "fsdp_no_reshard")


def test_model_parallel_cells_only_where_the_world_divides():
    cells = expand(["single", "ddp", "pipe2", "torch_tp2"], [1, 2, 3, 4], [2], ["llama-tiny"])
    pairs = sorted({(c.strategy, c.world_size) for c in cells})
    assert ("pipe2", 1) not in pairs and ("pipe2", 3) not in pairs and ("torch_tp2", 3) not in pairs
    assert {("pipe2", 2), ("pipe2", 4), ("torch_tp2", 2), ("torch_tp2", 4), ("ddp", 3), ("single", 1)} <= set(pairs)


def test_compile_both_puts_each_strategy_eager_and_compiled_side_by_side():
    cells = expand(["single", "ddp", "pipe2"], [2], [2], ["gpt2-tiny"], compile="both")
    assert [(c.strategy, c.compile) for c in cells] == [("single", False), ("single", True), ("ddp", False),
                                                       ("ddp", True), ("pipe2", False)]  # pipelines run eager
    assert {c.id for c in cells if c.compile} == {"single-w1-mb2-compiled-gpt2-tiny-r0",
                                                  "ddp-w2-mb2-compiled-gpt2-tiny-r0"}
    compiled = next(c for c in cells if c.compile and c.strategy == "ddp")
    assert cell_launch_args(compiled, Path("x"))[-1] == "--compile"  # the worker's flag, after "--"
    assert "--compile" not in cell_launch_args(cells[2], Path("x"))


@pytest.mark.parametrize("kwargs, needle", [
    ({"compile": "yes"}, "--compile must be one of off, on, both"),
    ({"compile": "on", "warmup": 0}, "--compile needs --warmup >= 1"),
    ({"compile": "on", "strategies": ["ddp", "torch_tp2"]}, "torch_tp2 is not compiled by dsbench"),
    ({"fused_optimizer": "always"}, "--fused-optimizer must be one of off, on, both"),
    ({"fused_optimizer": "on", "strategies": ["ddp", "zero2"]}, "zero2 steps with DeepSpeed's optimizer"),
])
def test_compile_requests_that_cannot_be_met_are_refused(kwargs, needle):
    args = {"strategies": ["ddp"], "world_sizes": [2], "micro_batches": [2], "models": ["llama-tiny"], **kwargs}
    with pytest.raises(UserError, match=needle):
        expand(**args)


def test_fused_optimizer_both_puts_the_native_strategies_both_ways_beside_compile():
    cells = expand(["single", "ddp", "zero2", "torch_tp2"], [2], [2], ["llama-tiny"], compile="both",
                   fused_optimizer="both")
    variants = {}
    for c in cells:
        variants.setdefault(c.strategy, []).append((c.compile, c.fused_optimizer))
    every = [(False, False), (False, True), (True, False), (True, True)]
    # DeepSpeed steps with its config's optimizer; torch_tp2 is not compiled but takes the fused kernel
    assert variants == {"single": every, "ddp": every, "zero2": [(False, False), (True, False)],
                        "torch_tp2": [(False, False), (False, True)]}
    both = next(c for c in cells if c.strategy == "ddp" and c.compile and c.fused_optimizer)
    assert both.id == "ddp-w2-mb2-compiled-fused-llama-tiny-r0"
    assert cell_launch_args(both, Path("x"))[-2:] == ["--compile", "--fused-optimizer"]


def test_a_compiled_cell_is_its_own_row_in_the_report():
    from dsbench.cell_record import CellRecord
    from dsbench.report.collect import run_label
    from dsbench.run_record import RunHeader

    def _label(record, cell):
        """The label of a run whose cell.json holds ``cell`` as its definition (the rest as compare writes it)."""
        status = cell and CellRecord.from_dict({"cell": {"world_size": 2, "micro_batch": 2, "model": "gpt2-tiny",
                                                         **cell["cell"]},
                                                "id": "c", "command": "dsbench launch", "status": "ok"}, "cell.json")
        return run_label(RunHeader.from_record(record), status)

    header = {"strategy": "ddp"}
    assert _label(header, {"cell": {"strategy": "ddp", "compile": True}}) == "ddp+compile"
    assert _label(header, {"cell": {"strategy": "ddp"}}) == "ddp"  # a cell from before --compile existed
    assert _label({"strategy": "fsdp", "speed": {"compile": True}}, None) == "fsdp+compile"  # a plain launch
    assert (_label(header, {"cell": {"strategy": "ddp", "compile": True, "fused_optimizer": True}})
            == "ddp+compile+fused")
    assert _label({"strategy": "ddp", "speed": {"fused_optimizer": True}}, None) == "ddp+fused"


def test_a_matrix_written_before_compile_existed_resumes_as_eager(tmp_path):
    from dsbench.bench.compare import prepare_out

    old = {"strategies": ["ddp"], "models": ["gpt2-tiny"]}  # as compare (and tune, always) wrote it
    (tmp_path / "matrix.json").write_text(json.dumps({"matrix": old}))
    prepare_out(tmp_path, {**old, "compile": "off"}, resume=True)  # compare today: the same eager matrix
    prepare_out(tmp_path, dict(old), resume=True)  # tune's matrix has no compile key at all
    prepare_out(tmp_path, {**old, "compile": "off", "fused_optimizer": "off"}, resume=True)
    with pytest.raises(UserError, match="holds a different matrix"):
        prepare_out(tmp_path, {**old, "compile": "both"}, resume=True)
    with pytest.raises(UserError, match='different matrix \\(fused_optimizer: "off" there, "auto" now\\)'):
        prepare_out(tmp_path, {**old, "fused_optimizer": "auto"}, resume=True)  # compare's default since issue 15



def test_a_tune_resumed_with_other_flags_names_the_one_that_differs(tmp_path):
    """tune's matrix is one object, ``{"tune": {...}}``: until 2026-12-03 the refusal printed both whole (two JSON
    objects of 15 keys, for one flag); it names the flag's key inside it."""
    from dsbench.bench.compare import prepare_out

    tune = {"model": "gpt2-mini", "strategies": ["zero2", "ddp"], "budget": 3, "gpu_mem": None}
    (tmp_path / "matrix.json").write_text(json.dumps({"matrix": {"tune": tune}}))
    prepare_out(tmp_path, {"tune": dict(tune)}, resume=True)
    with pytest.raises(UserError) as refused:
        prepare_out(tmp_path, {"tune": {**tune, "strategies": ["zero2"]}}, resume=True)
    assert str(refused.value) == (f'{tmp_path} holds a different matrix (tune.strategies: ["zero2", "ddp"] there, '
                                  '["zero2"] now); --resume needs the same flags (or a new --out)')
    with pytest.raises(UserError, match=r"\(tune.budget: 3 there, null now\)"):
        prepare_out(tmp_path, {"tune": {key: value for key, value in tune.items() if key != "budget"}}, resume=True)
    prepare_out(tmp_path, {"tune": {**tune, "budget": 5}}, resume=True, free=("tune.budget",))  # tune's own free key
    assert json.loads((tmp_path / "matrix.json").read_text())["matrix"]["tune"]["budget"] == 5


@pytest.mark.parametrize("resume", [False, True])
def test_a_results_folder_of_the_users_files_is_refused_and_an_empty_one_taken(tmp_path, resume):
    """compare, tune and whatif write only into a new or empty --out, or their own results (until 2026-12-03 tune
    wrote its tune.json over a user's file of that name)."""
    from dsbench.bench.compare import prepare_out

    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "tune.json").write_text("mine")
    (mine / "notes.txt").write_text("mine")
    with pytest.raises(UserError, match=r"--out .*mine: holds files that are not dsbench results \(notes.txt and 1 "
                                        r"more\): choose a new or empty --out"):
        prepare_out(mine, {"strategies": ["ddp"]}, resume=resume)
    assert sorted(p.name for p in mine.iterdir()) == ["notes.txt", "tune.json"]
    (tmp_path / "empty").mkdir()
    prepare_out(tmp_path / "empty", {"strategies": ["ddp"]}, resume=resume)
    assert (tmp_path / "empty" / "matrix.json").exists()


@pytest.mark.parametrize(("strategy", "model", "message"), [
    ("zero1_tp4", "llama-tiny", "--strategies zero1_tp4: --tp 4 must divide llama-tiny's 4 attention heads and 2 "
                                "key/value heads"),
    ("torch_pipe3", "gpt2-tiny", "--strategies torch_pipe3: --pipeline-stages 3 exceeds gpt2-tiny's 2 decoder layers"),
])
def test_a_degree_the_model_cannot_split_is_refused_before_any_cell(strategy, model, message):
    with pytest.raises(UserError, match=re.escape(message)):
        expand([strategy], [12], [2], [model])


@pytest.mark.parametrize(("hostfile", "ranks_from", "source"), [
    (None, None, "--world-sizes 3"),
    ("hosts", None, "--hostfile hosts (3 slots)"),  # compare --hostfile: its slots, not a flag the user left out
    (None, "--nodes x --slots (3 ranks)", "--nodes x --slots (3 ranks)"),  # whatif's
])
def test_a_layout_no_world_size_places_names_where_the_ranks_came_from(hostfile, ranks_from, source):
    with pytest.raises(UserError) as refused:
        expand(["pipe2"], [3], [2], ["gpt2-tiny"], hostfile=hostfile, ranks_from=ranks_from)
    assert str(refused.value) == f"--strategies pipe2 runs on a multiple of 2 ranks; {source} gives it no cell"


@pytest.mark.parametrize(("given", "message"), [
    ({"strategies": []}, "--strategies is empty"), ({"models": []}, "--models is empty"),
    ({"world_sizes": []}, "--world-sizes is empty"), ({"micro_batches": []}, "--micro-batches is empty"),
    ({"seq_len": 0}, "--seq-len must be >= 1, got 0"), ({"precision": "fp8"}, "--precision must be one of"),
    ({"repeats": 10**8}, "the matrix has 100,000,000 cells: at most 10,000"),
    ({"world_sizes": [1, 2, 3, 4], "repeats": 2501, "strategies": ["ddp"]}, "the matrix has 10,004 cells"),
    # a value twice: until 2026-12-03 each of its cells ran twice (the flags: test_a_list_flag_names_each_value_once)
    ({"models": ["gpt2-tiny", "gpt2-tiny"]}, "--models names gpt2-tiny twice: name it once"),
    ({"world_sizes": [2, 2]}, "--world-sizes names 2 twice"), ({"micro_batches": [1, 2, 1]}, "--micro-batches names 1"),
    ({"strategies": ["ddp", "zero2", "ddp"]}, "--strategies names ddp twice: name it once"),
])
def test_a_matrix_file_value_the_flags_would_refuse_is_refused_before_any_cell(given, message):
    """What click's types refuse in the flags (a choice, a range, a count) the matrix file can hold: expand refuses
    it before the cells are built, and counts them before building them (10^8 repeats never fill the memory)."""
    matrix = {"strategies": ["ddp"], "world_sizes": [2], "micro_batches": [2], "models": ["gpt2-tiny"], **given}
    with pytest.raises(UserError, match=re.escape(message)):
        expand(**matrix)


@pytest.mark.parametrize("args, named", [
    (["compare", "--models", "gpt2-tiny,gpt2-tiny"], "'--models': names gpt2-tiny twice: name it once"),
    (["compare", "--world-sizes", "2, 2"], "'--world-sizes': names 2 twice"),
    (["compare", "--micro-batches", "1,2,1"], "'--micro-batches': names 1 twice"),
    (["compare", "--strategies", "ddp,zero2,ddp"], "'--strategies': names ddp twice"),
    (["tune", "--strategies", "zero2,zero2"], "'--strategies': names zero2 twice"),  # until 2026-12-03 raced twice
    (["whatif", "--strategies", "ddp,ddp"], "'--strategies': names ddp twice"),
    (["whatif", "--links", "unshaped,unshaped"], "'--links': names unshaped twice"),
    (["whatif", "--links", "1gbit,1000mbit"], "--links names one rate twice (1gbit and 1000mbit): name it once"),
])
def test_a_list_flag_names_each_value_once(cli_run, args, named):
    """A value named twice in a comma list ran its cells twice (compare: 14 launches for --models a,a), raced a
    layout twice (tune) or shaped the same link twice (whatif, 1gbit and 1000mbit alike); each is one line, exit 2,
    before anything runs."""
    result = cli_run(*args, "--out", "o")
    assert result.exit_code == 2 and named in result.output, result.output


def test_compare_dry_run_checks_the_matrix_prints_each_cells_command_and_runs_nothing(cli_run, tmp_path):
    """``compare --dry-run``: the matrix refused or accepted as a run would, its folder included; one line per cell
    in the order they would run, each the exact launch compare makes (its own cell_command), which the launch takes
    as typed (a dry run of each); nothing written. With --resume, a finished cell is named as kept."""
    import json
    import shlex

    from dsbench.bench.compare import cell_command
    from dsbench.bench.matrix import expand

    flags = ["--strategies", "single,ddp,zero3_nvme,torch_pipe2", "--models", "gpt2-tiny", "--world-sizes", "2",
             "--steps", "6", "--warmup", "2"]
    result = cli_run("compare", *flags, "--out", "c", "--dry-run")
    assert result.exit_code == 0, result.output
    assert not (tmp_path / "c").exists()  # nothing written
    lines = result.output.splitlines()
    assert lines[0] == "4 cells, one after another, into c (--dry-run: nothing runs)"
    cells = expand(**_matrix_of(flags))
    assert [cell.strategy for cell in cells] == ["single", "ddp", "zero3_nvme", "torch_pipe2"]
    for index, (line, cell) in enumerate(zip(lines[1:], cells, strict=True), start=1):
        head, _, command = line.partition(": ")
        assert head == f"{index}/4 {cell.id}"
        args = shlex.split(command)
        assert args[2:] == cell_command(cell, Path("c") / "cells" / cell.id, None)[4:]  # what compare runs
        cut = args.index("--")
        launched = cli_run(*args[1:cut], "--dry-run", *args[cut:])
        assert launched.exit_code == 0, (line, launched.output)
    # a folder of this matrix with one cell finished ok and one failed: --resume keeps both, --retry-failed runs
    # the failed one again; another matrix in it is refused, as the run refuses it
    out = tmp_path / "r"
    (out / "cells").mkdir(parents=True)
    (out / "matrix.json").write_text(json.dumps({"matrix": _matrix_of(flags)}))
    for cell, status in zip(cells[:2], ("ok", "failed"), strict=True):
        (out / "cells" / cell.id).mkdir()
        (out / "cells" / cell.id / "cell.json").write_text(json.dumps({"cell": cell.to_dict(), "id": cell.id,
                                                                       "command": "dsbench launch", "status": status}))
    kept = cli_run("compare", *flags, "--out", "r", "--resume", "--dry-run").output.splitlines()
    assert kept[1].endswith(": finished (ok): --resume keeps it") and kept[2].endswith(": finished (failed): "
                                                                                      "--resume keeps it")
    retried = cli_run("compare", *flags, "--out", "r", "--resume", "--retry-failed", "--dry-run").output.splitlines()
    assert retried[1] == kept[1] and "dsbench launch --strategy ddp" in retried[2]
    other = cli_run("compare", *flags[:-4], "--out", "r", "--resume", "--dry-run")
    assert other.exit_code == 2 and "holds a different matrix (steps: 6 there, 20 now)" in other.output
    assert sorted(p.name for p in out.iterdir()) == ["cells", "matrix.json"]


def _matrix_of(flags: list[str]) -> dict:
    """The matrix compare records for these flags (its own reading of them)."""
    from dsbench.bench.session import matrix_from

    return matrix_from(None, {"strategies": flags[1].split(","), "models": [flags[3]], "world_sizes": [2],
                              "steps": 6, "warmup": 2})


def test_an_alst_yaml_cell_trains_the_global_batch_of_every_other_cell(cli_run, tmp_path):
    """An ``accel:`` ALST YAML (sp_size 2) in a compare accumulates 2 micro-steps, as the native ulysses2 cell does,
    so that all cells train micro-batch x world samples a step (until 2026-12-03 it trained half). Oracle for its
    global batch: accelerate's own arithmetic, ``train_batch_size = micro x accumulation x processes // sp_size``
    (accelerate 1.15 Accelerator._prepare_deepspeed); DeepSpeed's for ulysses2, world / sequence_parallel_size data-
    parallel ranks (runtime/config.py). A YAML that sets its own accumulation keeps it."""
    import shlex

    alst = ("distributed_type: DEEPSPEED\nnum_processes: 2\nmixed_precision: 'no'\ndeepspeed_config:\n"
            "  zero_stage: 1\n{}parallelism_config:\n  parallelism_config_sp_size: 2\n"
            "  parallelism_config_sp_backend: deepspeed\n")
    (tmp_path / "alst.yaml").write_text(alst.format(""))
    (tmp_path / "own.yaml").write_text(alst.format("  gradient_accumulation_steps: 3\n"))
    result = cli_run("compare", "--strategies", "ddp,ulysses2,accel:alst.yaml,accel:own.yaml", "--models",
                     "llama-tiny", "--world-sizes", "2", "--micro-batches", "2", "--out", "c", "--dry-run")
    assert result.exit_code == 0, result.output
    batches = {}
    for line in result.output.splitlines()[1:]:
        args = shlex.split(line.partition(": ")[2])
        cut = args.index("--")
        launched = cli_run(*args[1:cut], "--dry-run", *args[cut:])
        assert launched.exit_code == 0, (line, launched.output)
        run = json.loads((tmp_path / args[args.index("--run-dir") + 1] / "run.json").read_text())
        sp = 2 if "ulysses" in line or "alst" in line or "own" in line else 1
        own = "own.yaml" in line  # the YAML's 3 is what its ranks accumulate; no --grad-accum is passed
        assert own is ("--grad-accum" not in args) or "ddp" in line
        batches[line.split()[1].split("-w2")[0]] = run["micro_batch"] * (3 if own else run["grad_accum"]) * 2 // sp
    assert batches == {"ddp": 4, "ulysses2": 4, "accel-alst.yaml": 4, "accel-own.yaml": 6}, batches
