"""The GPU time and memory model against published GPU-cluster runs (``dsbench plan --replay``), no GPU needed.

Oracles: the measured runs in tests/data/oracles (copied from ../shared/oracles with their README: Korthikanti et
al. 2022 Table 5, Narayanan et al. 2021 Tables 1 and 2, torchtitan's published benchmarks). The only constants
chosen on these rows are GRAND_TETON_CLOCK (torchtitan-h100-202412 rows 1 and 4) and ASYNC_TP_HIDDEN
(torchtitan-asynctp-2025-06 rows 1 and 2); the A100 constants are datasheet and microbenchmark figures, so every
A100 row is out of sample.
"""

from __future__ import annotations

import json
import statistics

import pytest

from dsbench.errors import UserError
from dsbench.plan.gpu_layout import Layout, Shape
from dsbench.plan.oracle_csv import COLUMNS, read_rows
from dsbench.plan.rank_correlation import spearman
from dsbench.plan.replay import error_stats, predict_row, replay
from tests.conftest import DATA

ORACLES = DATA / "oracles"
FILES = sorted(str(p) for p in ORACLES.glob("*.csv"))


@pytest.fixture(scope="module")
def results():
    return replay(FILES)


def _rows(results, source):
    return {r.row.row: r for r in results if r.row.source == source}


def test_every_shipped_row_is_priced_or_skipped_with_a_reason(results):
    assert len(results) == 89  # 64 published runs, dsbench's 17 on the lent H100 (two days) and 8 on the H200
    assert all((r.predicted_step_s is not None) != (r.skipped is not None) for r in results)
    assert all(r.skipped is None for r in results), [(r.row.source, r.row.row, r.skipped) for r in results]


def test_korthikanti_table5_out_of_sample(results):
    """The issue's goals, mean absolute step-time error <= 5% and maximum <= 10%, on constants chosen without this
    table: mean 3.8%, maximum 8.5% (22B with sequence parallelism). The maximum was 12.5% until Megatron's
    backward re-gather of the sequence-parallel input was priced (2026-11-28; a count from Megatron's code, no
    constant: docs/planner.md)."""
    stats = error_stats(list(_rows(results, "korthikanti2022-table5").values()))
    assert stats["rows"] == 8 and stats["mean_abs_step_error"] <= 0.05
    assert stats["max_abs_step_error"] <= 0.10
    assert stats["spearman_step"] == 1.0


def test_selective_recompute_with_sequence_parallelism_beats_full_recompute(results):
    """Korthikanti Table 5: every model's SP + selective row is faster than its full-recompute row, by a margin
    within 10 points of the measured one."""
    rows = _rows(results, "korthikanti2022-table5")
    for full, selective in ((1, 2), (3, 4), (5, 6), (7, 8)):
        predicted = rows[selective].predicted_step_s / rows[full].predicted_step_s
        measured = rows[selective].row.values["measured_step_s"] / rows[full].row.values["measured_step_s"]
        assert predicted < 1 and abs(predicted - measured) < 0.10, (full, predicted, measured)


def _per_gpu_throughput(result) -> float:
    v = result.row.values
    return v["global_batch"] * v["seq_len"] / (result.predicted_step_s * v["gpus"])


def test_zero3_per_gpu_throughput_falls_as_the_batch_spreads(results):
    """Megatron 2021 Table 2: the same global batch over more GPUs (ZeRO-3, no model parallelism)."""
    rows = _rows(results, "megatron2021-table2-zero3")
    for group in ((1, 2, 3), (4, 5, 6)):
        throughput = [_per_gpu_throughput(rows[i]) for i in group]
        assert throughput == sorted(throughput, reverse=True), throughput


def test_fsdp_per_gpu_throughput_falls_from_8_to_128_gpus(results):
    """torchtitan's H100 Table 1 (8 GPUs) vs Table 3 (128 GPUs), the same per-GPU batch."""
    rows = _rows(results, "torchtitan-h100-202412")
    for eight, many in ((1, 4), (2, 5), (3, 6)):
        assert _per_gpu_throughput(rows[eight]) > _per_gpu_throughput(rows[many])


def test_peak_memory_within_10_percent_on_torchtitan_bf16_rows(results):
    measured = [r for r in results if r.row.source.startswith("torchtitan") and r.row.values["precision"] == "bf16"
                and r.row.values["measured_peak_mem_gib"]]
    assert len(measured) == 4
    assert all(abs(r.mem_error) <= 0.10 for r in measured), [(r.row.row, r.mem_error) for r in measured]


def test_complete_16_bit_rows_pooled(results):
    """Every complete bf16/fp16 published row (../shared/oracles; dsbench's own H100 runs are not among them):
    median within 8%, maximum within 25%; Spearman of step time per model FLOP at least 0.8 per GPU kind with
    enough rows."""
    complete = [r for r in results if r.complete and r.row.values["precision"] in ("bf16", "fp16")
                and not r.row.source.startswith("dsbench")]
    stats = error_stats(complete)
    assert stats["rows"] >= 10 and stats["median_abs_step_error"] <= 0.08 and stats["max_abs_step_error"] <= 0.25
    a100 = error_stats([r for r in complete if r.row.values["gpu"] == "a100-80g"])
    assert a100["spearman_efficiency"] >= 0.8


def test_rows_with_filled_inputs_say_which_rule_filled_them(results):
    table1 = _rows(results, "megatron2021-table1")[5]
    assert set(table1.assumed) == {"micro_batch", "virtual_stages"}
    assert table1.layout.micro_batch in (1, 2, 4, 8) and table1.layout.virtual_stages >= 1
    a100 = _rows(results, "torchtitan-a100-2024")[1]
    assert "interconnect" in a100.assumed and "recompute" in a100.assumed
    assert _rows(results, "korthikanti2022-table5")[1].assumed == {}


def test_spearman_against_hand_ranks():
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == 1.0
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == -1.0
    assert spearman([1, 2, 2, 3], [1, 3, 2, 4]) == pytest.approx(0.9486832980505138)  # scipy.stats.spearmanr
    assert spearman([1, 2], [2, 1]) is None


def _csv(tmp_path, rows: list[dict[str, str]], header: list[str] = COLUMNS):
    path = tmp_path / "runs.csv"
    lines = [",".join(header)] + [",".join(r.get(c, "") for c in header) for r in rows]
    path.write_text("\n".join(lines) + "\n")
    return path


GOOD = {"source": "s", "row": "1", "model": "m", "arch": "llama", "layers": "32", "hidden": "4096", "heads": "32",
        "kv_heads": "8", "ffn": "14336", "vocab": "128256", "seq_len": "8192", "gpu": "h100-sxm", "gpus": "8",
        "gpus_per_node": "8", "strategy": "fsdp", "tp": "1", "pp": "1", "cp": "1", "micro_batch": "1",
        "global_batch": "8", "recompute": "full", "sequence_parallel": "0", "precision": "bf16", "compile": "0",
        "measured_step_s": "2.0"}


@pytest.mark.parametrize("change, message", [
    ({"layers": "x"}, "row 2 column layers: 'x' is not a positive whole number"),
    ({"measured_step_s": "fast"}, "row 2 column measured_step_s: 'fast' is not a number"),
    ({"gpus": ""}, "row 2 column gpus: empty, and the model needs it"),
    ({"compile": "yes"}, "row 2 column compile: 'yes': use 0 or 1"),
])
def test_a_malformed_row_is_one_line_naming_row_and_column(tmp_path, change, message):
    with pytest.raises(UserError, match=message):
        read_rows([_csv(tmp_path, [{**GOOD, **change}])])


def test_another_schema_is_refused(tmp_path):
    with pytest.raises(UserError, match="not the oracle schema: no column seq_len"):
        read_rows([_csv(tmp_path, [GOOD], [c for c in COLUMNS if c != "seq_len"])])


@pytest.mark.parametrize("change, reason", [
    ({"gpu": "tpu-v5"}, "gpu 'tpu-v5': no hardware profile"),
    ({"gpu": "v100-32g", "precision": "bf16"}, "no bf16 peak in the v100-32g profile"),
    ({"tp": "3"}, "does not divide 8 GPUs"),
    ({"global_batch": "12"}, "global batch 12 is not a multiple of data parallel 8 x micro-batch 1"),
    # heads that cannot lay out the model (transformers' repeat_kv needs kv_heads to divide heads)
    ({"kv_heads": "3"}, "the 3 key/value heads do not divide the 32 heads"),
    ({"kv_heads": "64"}, "the 64 key/value heads do not divide the 32 heads"),
    ({"hidden": "4097"}, "the 32 heads do not divide the hidden size 4097"),
    # the micro-batch not given: each one the model would try refused, for the shape's reason (until 2026-12-03 only
    # "no micro-batch or interleaving the layout allows"), or for each its own (the first named)
    ({"hidden": "4097", "micro_batch": ""}, "the 32 heads do not divide the hidden size 4097"),
    ({"layers": "4", "pp": "8", "schedule": "interleaved"}, "4 layers do not fill pp 8 x 1 virtual stages"),
    ({"global_batch": "12", "micro_batch": ""}, "no micro-batch or interleaving the layout allows (micro-batch 1, 1 "
                                                "virtual stages: global batch 12 is not a multiple of data parallel 8"),
])
def test_a_row_the_model_cannot_price_is_skipped_with_its_reason(tmp_path, change, reason):
    [row] = read_rows([_csv(tmp_path, [{**GOOD, **change}])])
    result = predict_row(row)
    assert result.predicted_step_s is None and reason in result.skipped


def test_replay_command_json_and_errors(cli_run, tmp_path):
    result = cli_run("plan", "--replay", str(ORACLES / "korthikanti2022-table5.csv"), "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    row = data["rows"][0]
    assert {"predicted_step_s", "predicted_peak_mem_gib", "step_error", "mem_error", "assumed", "skipped"} <= set(row)
    assert row["step_error"] == pytest.approx(row["predicted_step_s"] / row["measured_step_s"] - 1)
    source = data["sources"]["korthikanti2022-table5"]
    assert source["rows"] == 8 and source["skipped"] == 0 and "spearman_efficiency" in source["all"]
    table = cli_run("plan", "--replay", str(ORACLES / "korthikanti2022-table5.csv"))
    assert table.exit_code == 0 and "korthikanti2022-table5" in table.output and "-8.5%" in table.output
    bad = _csv(tmp_path, [{**GOOD, "layers": "x"}])
    for args, message in ((["--replay", str(bad)], "column layers"), (["--replay"], "--replay needs one or more"),
                          ([str(bad)], "a file is read only with --replay")):
        result = cli_run("plan", *args)
        assert result.exit_code == 2 and message in result.output and "Traceback" not in result.output


def test_a_layout_refuses_what_no_framework_runs():
    shape = Shape("llama", 32, 4096, 32, 8, 14336, 128256)
    with pytest.raises(UserError, match="tp 3 must divide the 32 heads and the 8 KV heads"):
        Layout(shape, 8192, "h100-sxm", 6, 6, tp=3, global_batch=2).check()
    Layout(shape, 8192, "h100-sxm", 16, 8, tp=16, global_batch=1).check()  # 8 KV heads, each on 2 TP ranks
    with pytest.raises(UserError, match="seq_len 8190 must split into 2 x cp 2"):
        Layout(shape, 8190, "h100-sxm", 8, 8, cp=2, global_batch=4).check()
    with pytest.raises(UserError, match="sequence parallelism shards along the TP group"):
        Layout(shape, 8192, "h100-sxm", 8, 8, sequence_parallel=True, global_batch=8).check()


KORTHIKANTI_22B = [
    "--layout", "ddp", "--kernels", "megatron", "--attention", "eager", "--arch", "gpt", "--layers", "48",
    "--hidden", "6144", "--heads", "64", "--ffn", "24576", "--vocab", "51200", "--seq-len", "2048", "--gpus", "8",
    "--gpu", "a100", "--tp", "8", "--micro-batch", "4", "--global-batch", "4", "--precision", "fp16"]


def test_one_explicit_layout_predicts_a_published_run(cli_run):
    """Korthikanti Table 5 row 1 (22B, TP 8, full recompute: 1.42 s measured) typed as flags."""
    result = cli_run("plan", *KORTHIKANTI_22B, "--recompute", "full", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["step_s"] == pytest.approx(1.42, rel=0.10)
    assert data["layout"]["dp"] == 1 and data["layout"]["micro_batches"] == 1
    assert data["tokens_per_s_per_gpu"] == pytest.approx(4 * 2048 / data["step_s"] / 8)
    assert 0 < data["mfu"] < 1 and data["fits"] and set(data["terms_s"]) >= {"matmul", "tp_comm", "recompute"}
    # a GPT: torch_tp splits its Conv1D layers since 2026-12-01 (before: "tensor parallelism splits Llama-family")
    assert data["launchable"] is True and data["strategy"] == "torch_tp8"
    assert "--strategy torch_tp --launcher torchrun --tp 8 " in data["command"]
    faster = json.loads(cli_run("plan", *KORTHIKANTI_22B, "--recompute", "selective", "--sequence-parallel",
                                "--json").output)
    assert faster["step_s"] < data["step_s"] and faster["strategy"] == "torch_tp8_sp"
    text = cli_run("plan", *KORTHIKANTI_22B, "--recompute", "full")
    assert text.exit_code == 0 and "MFU" in text.output and "time per step: matmul" in text.output


def test_megatron_sequence_parallelism_gathers_its_inputs_again_in_the_backward(cli_run):
    """Korthikanti et al. 2022 sec. 4.2.2, as Megatron-LM runs it: per block, the forward's 2 all-gathers and 2
    reduce-scatters, the backward's 2 of each (their transposes) and 2 all-gathers more, the column-parallel
    linears' saved sequence shards gathered again for the weight gradients: 10 collectives of the same bytes
    where torch's DTensor SP, which saves the gathered input, makes 8 (equal ring costs: an all-gather and a
    reduce-scatter each move (t-1)/t of the buffer)."""
    def tp_comm(kernels: str) -> float:
        flags = [*KORTHIKANTI_22B, "--recompute", "selective", "--sequence-parallel", "--json"]
        flags[flags.index("megatron")] = kernels
        return json.loads(cli_run("plan", *flags).output)["terms_s"]["tp_comm"]

    assert tp_comm("megatron") == pytest.approx(tp_comm("eager") * 10 / 8)
    no_sp = [*KORTHIKANTI_22B, "--recompute", "selective", "--json"]
    without = json.loads(cli_run("plan", *no_sp).output)["terms_s"]["tp_comm"]
    assert without == pytest.approx(tp_comm("eager"))  # all-reduce = reduce-scatter + all-gather, the same bytes


def test_a_launchable_layout_prints_the_command_that_launch_accepts(cli_run, tmp_path):
    """torch_tp on Llama: the printed command, run with --dry-run, writes the layout it was given."""
    import shlex

    result = cli_run("plan", "--layout", "ddp", "--model", "llama-7b", "--gpus", "8", "--tp", "2", "--seq-len", "2048",
                     "--global-batch", "64", "--recompute", "full", "--json")
    data = json.loads(result.output)
    assert data["launchable"] and data["strategy"] == "torch_tp2"
    argv = shlex.split(data["command"])
    assert argv[:2] == ["dsbench", "launch"] and "--activation-checkpointing" in argv
    split = argv.index("--")
    done = cli_run(*argv[1:split], "--dry-run", "--run-dir", str(tmp_path / "r"), *argv[split:])
    assert done.exit_code == 0, done.output
    run = json.loads((tmp_path / "r" / "run.json").read_text())
    text = json.dumps(run)
    assert '"tp": 2' in text and '"grad_accum": 16' in text and '"activation_checkpointing": true' in text


@pytest.mark.parametrize("layout, strategy, fields", [
    (["--tp", "2", "--sequence-parallel", "--recompute", "selective"], "torch_tp2_sp",
     {"tp": 2, "sequence_parallel": True, "recompute": "selective"}),
    (["--pipeline-stages", "2", "--pipeline-schedule", "interleaved", "--virtual-stages", "2"],
     "torch_pipe2_interleaved2", {"pipeline_stages": 2, "pipeline_schedule": "interleaved", "virtual_stages": 2}),
    (["--pipeline-stages", "2", "--pipeline-schedule", "interleaved-zb", "--virtual-stages", "2"],
     "torch_pipe2_zb2", {"pipeline_stages": 2, "pipeline_schedule": "interleaved-zb", "virtual_stages": 2}),
])
def test_issue_28_options_are_launchable_as_printed(cli_run, tmp_path, layout, strategy, fields):
    """Sequence parallelism, selective recompute and the interleaved schedule: the plan's command, run with
    --dry-run, writes a run description with each option."""
    import shlex

    result = cli_run("plan", "--layout", "ddp", "--model", "llama-7b", "--gpus", "8", "--seq-len", "2048",
                     "--global-batch", "64", *layout, "--json")
    data = json.loads(result.output)
    assert data["launchable"] and data["strategy"] == strategy, data["why_not"]
    argv = shlex.split(data["command"])
    split = argv.index("--")
    done = cli_run(*argv[1:split], "--dry-run", "--run-dir", str(tmp_path / "r"), *argv[split:])
    assert done.exit_code == 0, done.output
    run = json.loads((tmp_path / "r" / "run.json").read_text())
    assert {key: run[key] for key in fields} == fields


@pytest.mark.parametrize("args, message", [
    (["--params", "7e9", "--gpus", "8", "--tp", "2"], "--tp goes with --layout NAME"),
    (["--layout", "fsdp", "--params", "7e9", "--gpus", "8", "--global-batch", "64", "--grad-accum", "4"],
     "--global-batch 64 and --grad-accum 4 disagree"),
    (["--layout", "fsdp", "--params", "7e9", "--gpus", "8", "--tp", "3"], "tp 3 x pp 1 x cp 1 does not divide 8 GPUs"),
    (["--layout", "fsdp", "--gpus", "8", "--layers", "32"], "--hidden, --heads, --vocab missing"),
    (["--layout", "fsdp", "--params", "7e9", "--gpus", "8", "--virtual-stages", "2"],
     "--virtual-stages goes with --pipeline-schedule interleaved"),
    (["--layout", "ddp", "--params", "7e9", "--gpus", "8", "--pipeline-stages", "2", "--global-batch", "8",
      "--pipeline-schedule", "interleaved-zb"], "the interleaved zero-bubble schedule needs 2 or more virtual stages"),
    (["--layout", "fsdp", "--params", "7e9", "--gpus", "8", "--efficiency", "0.4"], "--efficiency does not apply"),
    (["--layout", "fsdp", "--params", "7e9", "--gpus", "8", "--gpu", "tpu"], "gpu 'tpu': no hardware profile"),
    (["--layout", "fsdp", "--params", "7e9", "--gpus", "8", "--gpu", "a100", "--precision", "fp8"],
     "--precision fp8: the a100-80g profile has no fp8 peak"),
    (["--params", "7e9", "--gpus", "8", "--precision", "fp8"], "--precision fp8 prices torchao's Float8 linears in one "
     "--layout NAME"),
])
def test_layout_misuse_is_one_line(cli_run, args, message):
    result = cli_run("plan", *args)
    assert result.exit_code == 2 and message in result.output and "Traceback" not in result.output


def test_an_fp8_layout_is_priced_with_its_casts_and_not_offered_to_launch(cli_run):
    """torchtitan's Llama 3.1 8B FSDP + compile + Float8 run (torchtitan-h100-202412 row 3: per-op checkpointing,
    its own modules) as a user types it: the fp8 cast term is one of the step's terms, the same layout in bf16 is
    slower, and dsbench cannot train fp8."""
    args = ["plan", "--layout", "fsdp", "--gpu", "h100-96g-500w", "--gpus", "8", "--layers", "32", "--hidden", "4096",
            "--heads", "32", "--kv-heads", "8", "--ffn", "14336", "--vocab", "128256", "--arch", "llama",
            "--seq-len", "8192", "--micro-batch", "2", "--global-batch", "16", "--recompute", "op", "--kernels",
            "eager", "--compile", "--json"]
    fp8 = json.loads(cli_run(*args, "--precision", "fp8").output)
    bf16 = json.loads(cli_run(*args).output)
    assert fp8["terms_s"]["fp8_cast"] > 0 and bf16["terms_s"]["fp8_cast"] == 0
    assert fp8["step_s"] < bf16["step_s"] and not fp8["launchable"] and "fp8" in fp8["why_not"]
    assert fp8["step_s"] == pytest.approx(1.92, rel=0.10)  # measured 1.92 s (the replay's row 3 prices -9.0%)


def test_days_gpu_hours_and_cost_follow_the_predicted_throughput(cli_run):
    args = ["plan", "--layout", "fsdp", "--model", "llama-7b", "--gpus", "64", "--nodes", "8", "--seq-len", "4096",
            "--global-batch", "512", "--tokens", "2e12", "--price-per-gpu-hour", "2.5", "--json"]
    data = json.loads(cli_run(*args).output)
    seconds = 2e12 / (data["tokens_per_s_per_gpu"] * 64)
    cost = data["training"]
    assert cost["days"] == pytest.approx(seconds / 86400) and cost["gpu_hours"] == pytest.approx(seconds / 3600 * 64)
    assert cost["cost"] == pytest.approx(cost["gpu_hours"] * 2.5)
    alone = cli_run("plan", "--layout", "fsdp", "--model", "llama-7b", "--gpus", "8", "--price-per-gpu-hour", "2")
    assert alone.exit_code == 2 and "--price-per-gpu-hour goes with --tokens N" in alone.output


def test_the_ranking_prices_gpu_candidates_with_the_gpu_model(cli_run):
    """The issue's example: llama-7b on 8 x 8 A100. With peak x efficiency every data-parallel strategy tied at 50%
    MFU with no exposed communication; with the GPU model their traffic and overlap tell them apart."""
    data = json.loads(cli_run("plan", "--model", "llama-7b", "--gpus", "64", "--nodes", "8", "--gpu", "a100",
                              "--json").output)
    plain = {c["name"]: c for c in data["candidates"] if c["name"] in ("ddp", "zero1", "zero2", "zero3", "fsdp")}
    assert len(plain) == 5 and len({round(c["step_s"], 3) for c in plain.values()}) >= 3
    assert plain["zero3"]["exposed_comm_s"] > plain["zero1"]["exposed_comm_s"] > 0
    for c in data["candidates"]:
        assert c["launchable"] == (c["command"] is not None)
    hybrid = next(c for c in data["candidates"] if c["strategy"] == "fsdp_hybrid")  # HSDP, a node per shard group
    assert hybrid["name"] == "fsdp_shard8" and hybrid["dp_shard"] == 8 and "--dp-shard 8" in hybrid["command"]
    older = json.loads(cli_run("plan", "--model", "llama-7b", "--gpus", "64", "--nodes", "8", "--gpu", "a100",
                               "--efficiency", "0.5", "--peak-tflops", "312", "--json").output)
    zero1 = next(c for c in older["candidates"] if c["name"] == "zero1")  # peak x efficiency, as before
    assert zero1["mfu"] == pytest.approx(0.5) and zero1["exposed_comm_s"] == 0


@pytest.mark.parametrize("gpu", ["h100", "h200"])
def test_on_one_gpu_the_ranking_orders_strategies_as_the_lent_gpus_measured(cli_run, gpu):
    """GPT-2 at 16 x 1024 on one GPU no longer ties: autocast's casts (ddp) and DeepSpeed's host time (ZeRO) are in
    the step. Oracle: dsbench's own runs on the lent H100 (2026-11-25: ZeRO-1 115, DDP 121, ZeRO-2 122, ZeRO-3
    192 ms) and H200 (2026-11-27: 100, 107, 135, 277 ms): ZeRO-1 fastest, ZeRO-3 slowest, ZeRO-2 between."""
    data = json.loads(cli_run("plan", "--model", "gpt2", "--gpus", "1", "--gpu", gpu, "--micro-batch", "16",
                              "--seq-len", "1024", "--precision", "bf16", "--grad-accum", "1", "--json").output)
    step = {c["name"]: c["step_s"] for c in data["candidates"]}
    assert step["zero1"] < step["ddp"] < step["zero3"] and step["zero1"] < step["zero2"] < step["zero3"], step
    assert next(c for c in data["candidates"] if c["name"] == "zero3")["framework_s"] > 0


def test_a_hosts_own_zero_host_us_is_a_plan_input(cli_run):
    """--zero-host-us: the 2026-11-23 host's constant (fitted on its GPT-2 rows: 230,385,1454) prices that day's
    Llama ZeRO-3 run (dsbench-h100 row 8, measured 0.568 s) within 15%, where the shipped constant (another host's)
    is 38% fast; the ranking takes it too, and a plan without the GPU model refuses it."""
    args = ("plan", "--model", "llama-1b", "--gpus", "1", "--gpu", "h100", "--micro-batch", "4", "--seq-len", "2048")
    own = json.loads(cli_run(*args, "--layout", "zero3", "--zero-host-us", "230,385,1454", "--json").output)
    shipped = json.loads(cli_run(*args, "--layout", "zero3", "--json").output)
    assert own["step_s"] == pytest.approx(0.568, rel=0.15) and shipped["step_s"] < 0.65 * 0.568
    ranked = json.loads(cli_run(*args, "--grad-accum", "1", "--zero-host-us", "230,385,1454", "--json").output)
    zero3 = next(c for c in ranked["candidates"] if c["name"] == "zero3")
    assert zero3["step_s"] == pytest.approx(own["step_s"], rel=0.02)
    profile = str(DATA / "runs" / "cpu-calibrated" / "profile-llama-tiny.json")
    for extra in (("--efficiency", "0.4"), ("--profile", profile)):
        refused = cli_run(*args, "--zero-host-us", "1,2,3", *extra)
        assert refused.exit_code == 2 and "--zero-host-us" in refused.output, refused.output


def test_dsbench_h100_runs_engine_constants_chosen_on_gpt2_hold_on_llama(results):
    """zero_host_us is chosen on the GPT-2 ZeRO rows of 2026-11-25 (10-12); the same day's 1.1B Llama rows (13-15)
    are out of sample and meet the issue's 15%. The runs under autocast over fp32 weights (rows 1, 5, 9, 13) are
    priced by the autocast term, which no row chose (its bytes are counted from torch's autocast op list): within
    12% (11% until the flash backward was counted as 2.5x its forward, 2026-11-28: the Llama's 2048-token attention
    costs more). Held as measured, and named in docs/planner.md: the 2026-11-23 ZeRO rows, whose host-bound cells ran up
    to 1.6x slower than the same cells two days later."""
    rows = _rows(results, "dsbench-h100")
    assert all(abs(rows[n].step_error) < 0.01 for n in (10, 11, 12))
    assert all(abs(rows[n].step_error) <= 0.15 for n in (13, 14, 15)), [rows[n].step_error for n in (13, 14, 15)]
    assert all(abs(rows[n].step_error) <= 0.12 for n in (1, 5, 9, 13)), [rows[n].step_error for n in (1, 5, 9, 13)]
    assert max(abs(rows[n].step_error) for n in range(1, 9)) <= 0.40


def test_peak_memory_within_10_percent_on_dsbench_h100_runs(results):
    """The allocated peak of every run, from the model's derivations (transformers' RMSNorm and tanh GELU,
    DeepSpeed's 16-bit gradients; under autocast, the fp32 residual stream, the GELU's fp32 tensors after its pow,
    the 16-bit weight casts kept for the backward and no gradients at the forward's peak), nothing fitted."""
    rows = _rows(results, "dsbench-h100")
    assert all(abs(r.mem_error) <= 0.10 for r in rows.values()), {n: r.mem_error for n, r in rows.items()}


def test_the_autocast_term_by_hand():
    """GPT-2 124M at 16 x 1024 on an H100 under autocast: 12 bytes per parameter of weight casts and the tanh GELU
    after its fp32 pow (26 bytes per ffn element forward, x3 with the backward) at the HF modules' HBM rate; the
    same layout on 16-bit weights pays nothing, and Llama's SiLU adds no chain."""
    from dataclasses import replace

    from dsbench.plan.gpu_profiles import profile_for
    from dsbench.plan.gpu_time import step_time

    gpt2 = Shape("gpt", 12, 768, 12, 12, 3072, 50257)
    lay = Layout(gpt2, 1024, "h100-sxm", 1, 1, micro_batch=16, global_batch=16, kernels="hf", autocast=True).check()
    hw = profile_for("h100-sxm")
    params = 12 * (12 * 768 ** 2 + 13 * 768) + 50257 * 768  # blocks (Shape.layer_params: 12h^2 + 13h) + embedding
    chain = 3 * 12 * 26 * 16 * 1024 * 3072
    expected = (12 * params + chain) / (3.35e12 * 0.44)
    assert step_time(lay, hw).terms["autocast"] == pytest.approx(expected, rel=0.01)
    assert step_time(replace(lay, autocast=False), hw).terms["autocast"] == 0
    llama = Shape("llama", 22, 2048, 32, 4, 5632, 32000)
    lay = Layout(llama, 2048, "h100-sxm", 1, 1, micro_batch=4, global_batch=4, kernels="hf", autocast=True).check()
    h = 2048  # q and o h x h, k and v h x 256 (4 of 32 heads), gate/up/down h x 5632, two norms; the output layer
    # is cast, the embedding (a lookup, not on autocast's list) is not
    casts = 22 * (2 * h * h + 2 * h * 256 + 3 * h * 5632 + 2 * h) + 32000 * h
    assert step_time(lay, hw).terms["autocast"] == pytest.approx(12 * casts / (3.35e12 * 0.44), rel=0.01)


def test_the_fp8_cast_term_by_hand():
    """Llama 3.1 8B's block at 2 x 1024 tokens on an H100 under fp8, compiled: torchao's roofline counts (the amax
    pass fused, each activation cast once into both fp8 layouts: 4 bytes per element of the inputs forward and the
    output gradients backward; each weight 5 forward and 3 backward) over the four linears, at HBM bandwidth, per
    layer and micro-batch; eager adds the 2-byte amax pass per activation element; 16-bit pays nothing."""
    from dataclasses import replace

    from dsbench.plan.gpu_profiles import profile_for
    from dsbench.plan.gpu_time import layer_times, step_time

    llama = Shape("llama", 32, 4096, 32, 8, 14336, 128256)
    lay = Layout(llama, 1024, "h100-sxm", 1, 1, micro_batch=2, global_batch=4, precision="fp8", compile=True).check()
    hw = profile_for("h100-sxm")
    tokens = 2 * 1024
    inputs = 4096 + 4096 + 4096 + 14336  # QKV, output, gate+up, down: in-features
    outputs = (4096 + 2 * 1024) + 4096 + 2 * 14336 + 4096  # out-features (k, v: 8 of 32 heads)
    weights = 4096 * (4096 + 2 * 1024) + 4096 * 4096 + 4096 * 2 * 14336 + 14336 * 4096
    per_layer = 4 * tokens * (inputs + outputs) + 8 * weights
    expected = 32 * 2 * per_layer / 3.35e12  # 32 layers, 2 micro-batches; compiled: the full HBM rate
    assert step_time(lay, hw).terms["fp8_cast"] == pytest.approx(expected, rel=1e-9)
    eager = replace(lay, compile=False, kernels="eager")
    assert step_time(eager, hw).terms["fp8_cast"] == pytest.approx(
        32 * 2 * (per_layer + 2 * tokens * (inputs + outputs)) / 3.35e12, rel=1e-9)
    assert step_time(replace(lay, precision="bf16"), hw).terms["fp8_cast"] == 0
    # a full recompute repeats the forward, its casts (inputs and weights) included
    full = step_time(replace(lay, recompute="full"), hw).terms["recompute"]
    forward = 32 * 2 * sum(layer_times(lay, hw).values())
    assert full - forward == pytest.approx(32 * 2 * (4 * tokens * inputs + 5 * weights) / 3.35e12, rel=1e-9)


def test_fp8_tensorwise_rows_are_no_longer_all_fast(results):
    """Out of sample (no constant chose on an fp8 row): before the cast term all 20 tensorwise fp8 rows were fast
    (median 13.6%, worst 30.1%); with it 5 of 20 are slow, the median 11.1%, the worst 26.8%. The 4 rowwise rows
    stay 26-46% fast: their scaled GEMMs, not their casts (docs/planner.md)."""
    fp8 = [r for r in results if r.row.values["precision"] == "fp8" and r.step_error is not None]
    tensorwise = [r.step_error for r in fp8 if "rowwise" not in r.row.values["note"]]
    assert len(tensorwise) == 20 and sum(e > 0 for e in tensorwise) == 5
    assert statistics.median(abs(e) for e in tensorwise) <= 0.12 and max(map(abs, tensorwise)) <= 0.27


def test_dsbench_h200_runs_out_of_sample(results):
    """The lent H200 of 2026-11-27 (tests/data/runs/gpu-h200-20261127), priced with constants fixed before it ran:
    the GPU terms hold (ZeRO-1 and the cells under autocast within 5%), the host term of another host does not
    (ZeRO-2 and ZeRO-3 come out 13-37% fast on this host), and peak memory is within 10% on every row. Held as
    measured; docs/planner.md gives the figures."""
    rows = _rows(results, "dsbench-h200")
    assert len(rows) == 8 and all(r.row.values["gpu"] == "h200" for r in rows.values())
    assert all(abs(rows[n].step_error) <= 0.05 for n in (1, 2, 5, 6)), [rows[n].step_error for n in (1, 2, 5, 6)]
    assert all(-0.40 < rows[n].step_error < -0.10 for n in (3, 4, 7, 8)), [rows[n].step_error for n in (3, 4, 7, 8)]
    assert all(abs(r.mem_error) <= 0.10 for r in rows.values()), {n: r.mem_error for n, r in rows.items()}


def test_the_zero_host_constant_fitted_on_a_hosts_gpt2_runs_holds_on_its_llama_runs():
    """The issue's check of the engine constants (chosen on GPT-2, checked on Llama), on each of the three lent
    machines separately: fitted on a session's GPT-2 ZeRO rows, zero_host_us predicts that session's Llama rows
    within 15%, although the fitted values differ by up to 2.2x between hosts (so no one host's value is the
    GPU's)."""
    from dsbench.plan.gpu_fit import by_session, fit_zero_host_us, predict_with_host

    sessions = by_session(read_rows(sorted(ORACLES.glob("dsbench-*.csv"))))
    assert len(sessions) == 3, sorted(sessions)
    fits = []
    for name, rows in sessions.items():
        fit = fit_zero_host_us([r for r in rows if r.values["model"] == "gpt2"])
        assert sorted(fit) == [1, 2, 3] and fit[1] < fit[2] < fit[3], (name, fit)
        checked = predict_with_host([r for r in rows if r.values["model"] == "llama-1b"], fit)
        assert all(abs(r.step_error) <= 0.15 for r in checked), (name, [r.step_error for r in checked])
        fits.append(fit)
    assert max(f[3] for f in fits) / min(f[3] for f in fits) > 1.8  # hosts differ: the constant is not portable


PROFILES = DATA / "runs" / "gpu-h100-20261125" / "profile"


@pytest.mark.parametrize("name", ["gpt2-zero1", "gpt2-zero2", "gpt2-zero3", "llama-1b-zero1", "llama-1b-zero2"])
def test_gpu_terms_match_the_kernel_time_profiled_on_the_h100(results, name):
    """The model's GPU terms (all but the engine's host time) against the kernel time scripts/profile_gpu_step.py
    measured under DeepSpeed's bf16 weights (the model's assumption): hf_hbm_fraction was chosen on gpt2-zero1's
    non-GEMM kernels, every other profile (and every GEMM and attention figure) is out of sample."""
    import json

    from dsbench.plan.gpu_profiles import profile_for
    from dsbench.plan.gpu_time import step_time
    from dsbench.plan.replay import row_layouts

    measured = json.loads((PROFILES / f"profile-{name}.json").read_text())["profiled"]["busy_s"]
    model, strategy = name.rsplit("-", 1)
    row = next(r for r in results if r.row.source == "dsbench-h100" and r.row.values["model"] == model
               and r.row.values["strategy"] == strategy)
    time = step_time(row_layouts(row.row.values)[0], profile_for("h100-sxm"))
    assert time.seconds - time.terms["engine_host"] == pytest.approx(measured, rel=0.10)


def test_a_16_bit_gemm_with_an_unaligned_dimension_runs_at_the_fallback_rate():
    """cuBLAS's align1 fallback: GPT-2's 50,257-word output layer costs ~6x the padded 50,304 (Karpathy's nanoGPT
    pads the vocabulary for this reason); fp8 and aligned shapes keep the curve."""
    from dsbench.plan.gpu_profiles import profile_for
    from dsbench.plan.gpu_time import gemm_seconds

    hw = profile_for("h100-sxm")
    odd, padded = (gemm_seconds(16384, vocab, 768, 1, hw, "bf16") for vocab in (50257, 50304))
    assert 4.0 < odd / padded < 8.0


def test_an_unstated_interconnect_is_priced_at_the_usual_network_and_its_sensitivity_shows(results):
    """torchtitan's 2024 A100 cluster states no interconnect: the rule prices 25 GB/s per GPU (the A100 profile's
    network), and docs/planner.md gives the comm-bound Llama 2 70B row at 50 GB/s beside it."""
    from dsbench.plan.replay import with_columns

    row7 = _rows(results, "torchtitan-a100-2024")[7]
    assert "interconnect" in row7.assumed and row7.step_error > 0.5  # comm-bound at 25 GB/s
    faster = predict_row(with_columns(row7.row, inter_gbs=50.0, intra_gbs=300.0))
    assert abs(faster.step_error) < 0.10 and faster.predicted_step_s < row7.predicted_step_s / 1.5


def test_context_parallelism_terms_by_hand():
    """Ring attention (Liu et al. 2023, arXiv:2310.01889), which the planner prices though no CPU rank runs it: each
    of cp-1 steps passes this rank's K and V blocks (16-bit, its s/cp tokens, the KV heads' share of h) to the next,
    hidden behind that step's 1/cp of the attention; each rank computes attention for its s/cp queries against all s
    keys, and holds its s/cp tokens' activations."""
    from dsbench.plan.gpu_memory import peak_memory
    from dsbench.plan.gpu_profiles import profile_for
    from dsbench.plan.gpu_time import layer_times, step_time

    shape = Shape("llama", 32, 4096, 32, 8, 14336, 128256)
    hw = profile_for("h100-sxm")
    one = Layout(shape, 8192, "h100-sxm", 8, 8, global_batch=8).check()
    two = Layout(shape, 8192, "h100-sxm", 8, 8, cp=2, global_batch=4).check()
    assert layer_times(two, hw)["attention"] == pytest.approx(layer_times(one, hw)["attention"] / 2)
    assert step_time(one, hw).terms.get("cp_comm", 0.0) == 0.0
    # a 1 GB/s link leaves the sends exposed: 3 (forward and backward) x layers x (cp-1) x (send - attention/cp)
    slow = Layout(shape, 8192, "h100-sxm", 8, 8, cp=2, global_batch=4, intra_gbs=1.0).check()
    kv_bytes = 2 * 2 * 1 * 8192 / 2 * 4096 * 8 / 32  # K and V, 2 bytes, micro-batch 1, s/cp tokens, h x kv/a
    send = kv_bytes / (1.0 * hw.nvlink_efficiency * 1e9)
    attention = layer_times(slow, hw)["attention"]
    assert step_time(slow, hw).terms["cp_comm"] == pytest.approx(3 * 32 * (send - attention / 2) * slow.micro_batches)
    assert peak_memory(two).terms["activations"] == pytest.approx(peak_memory(one).terms["activations"] / 2, rel=1e-6)
    # the data-parallel group (dp x cp = 8 ranks) stays inside the 8-GPU node: the network's speed does not matter
    # (it did when the group's span counted the cp ranks twice)
    fsdp = [Layout(shape, 8192, "h100-sxm", 8, 8, strategy="fsdp", cp=2, global_batch=4, inter_gbs=g).check()
            for g in (None, 0.1)]
    assert step_time(fsdp[0], hw).terms["dp_comm"] == step_time(fsdp[1], hw).terms["dp_comm"]


def test_ulysses_terms_by_hand(cli_run):
    """DeepSpeed Ulysses (Jacobs et al. 2023, arXiv:2309.14509, sec. 3): per block four all-to-alls forward (q, k, v
    to a head split, the output back), four backward, each moving (N-1)/N of this rank's 16-bit buffer, not hidden;
    compute and activations as context parallelism's (s/N tokens per rank, 1/N of attention)."""
    from dsbench.plan.gpu_memory import peak_memory
    from dsbench.plan.gpu_profiles import profile_for
    from dsbench.plan.gpu_time import layer_times, step_time

    shape = Shape("llama", 32, 4096, 32, 8, 14336, 128256)
    hw = profile_for("h100-sxm")
    ring = Layout(shape, 8192, "h100-sxm", 8, 8, strategy="zero3", cp=4, global_batch=2).check()
    a2a = Layout(shape, 8192, "h100-sxm", 8, 8, strategy="zero3", cp=4, global_batch=2, cp_comm="a2a").check()
    assert layer_times(a2a, hw) == layer_times(ring, hw)
    assert peak_memory(a2a).terms == peak_memory(ring).terms
    tokens = 8192 / 4  # micro-batch 1
    buffers = 2 * tokens * 4096 * (2 + 2 * 8 / 32)  # q and output, k and v (8 of 32 heads), 2 bytes
    gbs = hw.nvlink_gbs * hw.nvlink_efficiency
    per_block = 3 / 4 * buffers / (gbs * 1e9) + 4 * 3 * hw.collective_latency_us * 1e-6
    assert step_time(a2a, hw).terms["cp_comm"] == pytest.approx(2 * per_block * 32 * a2a.micro_batches)
    with pytest.raises(UserError, match="Ulysses 3 must divide the 32 heads"):
        Layout(shape, 8190, "h100-sxm", 6, 6, cp=3, global_batch=2, cp_comm="a2a").check()
    result = cli_run("plan", "--model", "llama-7b", "--gpus", "8", "--gpu", "h100", "--layout", "zero3", "--ulysses",
                     "4", "--seq-len", "4096", "--global-batch", "16")
    assert result.exit_code == 0 and "x ulysses 4 x dp 2" in result.output, result.output
    assert "dsbench launch --zero 3 --ulysses 4 --model llama-7b" in result.output
    both = cli_run("plan", "--model", "llama-7b", "--gpus", "8", "--layout", "zero1", "--ulysses", "2", "--cp", "2")
    assert both.exit_code == 2 and "both split the sequence: give one" in both.output


def test_fsdp_under_a_pipeline_holds_the_stage_gathered_and_its_gradients_unsharded_in_fp32(results):
    """torch's pipeline schedules run every micro-batch's backward but the last without gradient sync or resharding
    (torch/distributed/pipelining/stage.py), so FSDP2 keeps the stage's 16-bit weights gathered and accumulates its
    gradients unsharded in the reduce dtype until the step's one reduce-scatter: by hand, 2 + 4 bytes per stage
    parameter beyond the sharded states. Oracle: torchtitan's Llama 3.1 405B rows (TP 8 x PP 8, FSDP 8, fp8, full
    recompute), which chose no constant: their peaks were 31-39% above the model that resharded them."""
    from dsbench.plan.gpu_memory import GIB, peak_memory

    shape = Shape("llama", 32, 4096, 32, 8, 14336, 128256)
    flat = Layout(shape, 4096, "h100-sxm", 64, 8, strategy="fsdp", tp=2, global_batch=32).check()
    piped = Layout(shape, 4096, "h100-sxm", 64, 8, strategy="fsdp", tp=2, pp=2, global_batch=32).check()
    params = piped.stage_layers * shape.layer_params() / 2 + shape.vocab * shape.hidden / 2
    shard, layer = piped.dp * piped.cp, shape.layer_params() / 2
    terms = peak_memory(piped).terms
    assert terms["weights"] == pytest.approx((4 * params / shard + 2 * params) / GIB)
    assert terms["grads"] == pytest.approx((4 * params + 2 * layer) / GIB)
    assert peak_memory(flat).terms["grads"] < terms["grads"] / 4  # without a pipeline: sharded, one layer whole
    # HSDP under the same pipeline: its states shard over a node's data-parallel ranks only (8 GPUs / tp 2)
    hybrid = Layout(shape, 4096, "h100-sxm", 64, 8, strategy="fsdp_hybrid", tp=2, pp=2, global_batch=32).check()
    assert peak_memory(hybrid).terms["optimizer"] == pytest.approx(8 * params / 4 / GIB)
    rows = _rows(results, "torchtitan-h100-202412")
    errors = {i: rows[i].mem_error for i in range(13, 19)}
    assert all(-0.13 <= e <= 0 for e in errors.values()), errors  # measured reserved peaks: -12.5% to -1.4%


def test_the_zero_bubble_schedule_by_hand():
    """torch's interleaved zero-bubble schedule on the GPU model: the interleaved bubble, (p-1)/v micro-batch
    slots, of which the deferred weight gradients fill all but (F+B-W)/(F+B+W) = 1/3 at F = B = W (Qi et al.
    2024 sec. 2); every other term as interleaved 1F1B."""
    from dataclasses import replace

    from dsbench.plan.gpu_profiles import profile_for
    from dsbench.plan.gpu_time import step_time

    shape = Shape("llama", 32, 4096, 32, 8, 14336, 128256)
    inter = Layout(shape, 4096, "h100-sxm", 8, 8, pp=4, schedule="interleaved", virtual_stages=2, global_batch=16,
                   kernels="eager").check()
    zb = replace(inter, schedule="interleaved-zb").check()
    a, b = step_time(inter, profile_for("h100-sxm")).terms, step_time(zb, profile_for("h100-sxm")).terms
    per_micro = sum(a[k] for k in a if k not in ("pp_bubble", "pp_p2p", "dp_comm", "optimizer", "engine_host"))
    per_micro /= inter.micro_batches
    assert a["pp_bubble"] == pytest.approx(3 / 2 * per_micro)
    assert b["pp_bubble"] == pytest.approx(a["pp_bubble"] / 3)
    assert {k: v for k, v in a.items() if k != "pp_bubble"} == {k: v for k, v in b.items() if k != "pp_bubble"}
    # memory: every stage holds P = 4 micro-batches' activations, 1F1B's (Qi et al. 2024, ZB-H1), where interleaved
    # 1F1B's first stage holds P·(1 + (P - 1)/(P·V)) = 5.5 (Korthikanti et al. 2022 sec. 4.2.3) and is the busiest;
    # under zero bubble the last stage is, with one micro-batch's logits on top (its weight gradients wait, so its
    # blocks hold P like the others): b·s·V 16-bit logits, their fp32 upcast and its gradient, 10 bytes each
    from dsbench.plan.gpu_memory import peak_memory

    assert inter.micro_batches % 4 == 0 and inter.tp == 1
    a, b = peak_memory(inter).terms, peak_memory(zb).terms
    assert b["activations"] == pytest.approx(a["activations"] * 4 / 5.5)
    assert a["logits"] == 0 and b["logits"] == pytest.approx(1 * 4096 * 128256 * 10 / 2**30)
    assert (peak_memory(inter).busiest_stage, peak_memory(zb).busiest_stage) == (0, 3)
    assert peak_memory(replace(inter, pp=1, schedule="1f1b", virtual_stages=1).check()).busiest_stage is None
    same = ("weights", "grads", "optimizer", "workspace")
    assert {k: a[k] for k in same} == {k: b[k] for k in same}


def test_a_pipeline_layout_names_its_busiest_stage(cli_run):
    """The printed memory says which stage it counts: the first under 1F1B (P micro-batches of its blocks), the last
    under zero bubble (its deferred weight gradients keep P micro-batches of its blocks' sets, as every stage holds,
    and its logits come on top); the JSON carries the stage (0 the first), null without a pipeline."""
    flags = ["plan", "--model", "llama-7b", "--gpus", "8", "--gpu", "h100", "--layout", "fsdp", "--tp", "2",
             "--pipeline-stages", "4", "--micro-batch", "1", "--global-batch", "64", "--seq-len", "4096"]
    plain = cli_run(*flags)
    assert plain.exit_code == 0 and "(pipeline stage 1 of 4, the busiest: its micro-batches in flight)" in plain.output
    zb = ["--pipeline-schedule", "interleaved-zb", "--virtual-stages", "2"]
    assert "(pipeline stage 4 of 4, the busiest: its blocks' activations and the logits)" in cli_run(*flags,
                                                                                                    *zb).output
    assert json.loads(cli_run(*flags, *zb, "--json").output)["memory_gib"]["busiest_stage"] == 3
    alone = json.loads(cli_run(*flags[:9], "--micro-batch", "1", "--global-batch", "64", "--json").output)
    assert alone["memory_gib"]["busiest_stage"] is None


HELD_OUT = ORACLES / "held-out" / "mtnlg2022.csv"
BLOOM = ORACLES / "held-out" / "bloom2022.csv"


def test_bloom_held_out_from_shared_is_within_10_percent():
    """BLOOM 176B's training log (bigscience tr11-176B-ml, 104.70 s per iteration at batch 2048 on 384 A100s, tp 4 x
    pp 12 x dp 8, micro-batch 2, over 6.25 GB/s per GPU of Omni-Path), transcribed 2026-11-28 after the model was
    built: every input stated, nothing fitted to it. Predicted 98.45 s, -6.0%: DeepSpeed's pipeline engine of 2022
    is priced as the model prices Megatron's 1F1B, so MT-NLG's -25% is not the engine's schedule as such."""
    (row,) = replay([str(BLOOM)])
    assert row.complete and row.skipped is None
    assert abs(row.step_error) <= 0.10, row.step_error


def test_a_table_held_out_from_shared_is_priced_in_order_and_its_miss_stays_bounded():
    """MT-NLG 530B (Smith et al. 2022 sec 2.4), transcribed here after the model was built and not in shared/:
    the same batch over 2240, 2800 and 3360 A100s under DeepSpeed's pipeline engine. Measured 2026-11-28: every
    row predicted too fast, -24.2%, -25.1%, -27.2%, in the right order; the same model under Megatron-LM's own
    interleaved schedule (Table 1 row 9) is -9.5%. docs/planner.md splits the miss into a per-micro-batch and a
    per-step part."""
    rows = replay([str(HELD_OUT)])
    assert [r.skipped for r in rows] == [None] * 3
    assert all(r.row.values["micro_batch"] is None and "micro_batch" in r.assumed for r in rows)
    assert all(-0.30 <= r.step_error < -0.15 for r in rows), [r.step_error for r in rows]
    stats = error_stats(rows)
    assert stats["spearman_step"] == 1.0


@pytest.mark.xfail(strict=True, reason="measured 2026-11-28: max 27.2% (3360 GPUs); the model's per-micro-batch "
                   "time is 16% under the table's and its per-step part 5.9 s against 13.0 s (docs/planner.md)")
def test_the_held_out_table_meets_the_pooled_maximum():
    assert error_stats(replay([str(HELD_OUT)]))["max_abs_step_error"] <= 0.25


def test_the_replay_table_stars_only_the_inputs_a_rule_filled():
    """The MT-NLG rows leave the micro-batch out and assume the recompute; torchtitan's A100 rows state no
    interconnect, which no column shows, so the row number carries the star."""
    from dsbench.plan.replay import as_json
    from dsbench.report.replay_table import replay_grids

    grid, _ = replay_grids(as_json(replay([str(HELD_OUT), str(ORACLES / "torchtitan.csv")])))
    cells = {(row[0], row[1].rstrip("*")): row for row in grid.rows}
    mtnlg, a100 = cells["mtnlg2022", "1"], cells["torchtitan-a100-2024", "3"]
    assert mtnlg[1] == "1" and mtnlg[3].endswith("mb1*") and mtnlg[5] == "full*"
    assert a100[1] == "3*" and a100[5] == "full"  # its recompute is stated; its interconnect is not
    h100 = {n: cells["torchtitan-h100-202412", n] for n in ("1", "7", "13")}
    assert h100["1"][5] == "selective*"  # torchtitan's per-op checkpointing, priced by the attention-core rule
    assert h100["7"][1:6:2] == ["7", "1/1/1/8 mb1", "full"]  # every input stated
    assert h100["13"][3].endswith("mb4*") and h100["13"][5] == "full (SP)"  # only its micro-batch filled



def test_the_replay_table_writes_an_interleaved_layout_as_the_plan_table_does():
    """Korthikanti et al.'s GPT-3 and MT-NLG rows run the interleaved schedule over 3 chunks (their Table 5):
    ``int3``, as `dsbench plan` writes it (until 2026-12-03 the replay wrote ``v3``), and the legend says so."""
    from dsbench.plan.replay import as_json
    from dsbench.report.replay_table import replay_grids

    grid, _ = replay_grids(as_json(replay([str(ORACLES / "korthikanti2022-table5.csv")])))
    assert [row[3] for row in grid.rows][2:6] == ["8/8/1/1 mb1 int3"] * 2 + ["8/35/1/1 mb1 int3"] * 2
    assert "int V the interleaved schedule over V chunks per rank" in grid.notes[0]


def test_a_flash_backward_costs_two_and_a_half_forwards():
    """FlashAttention's backward recomputes QK^T and runs dV, dP, dQ and dK: 5 GEMMs to the forward's 2 (Dao 2023,
    arXiv:2307.08691 sec. 3.1.2), the count FlashAttention's benchmarks and papers report TFLOP/s with. Megatron's
    eager attention (scores in HBM) backs its 2 GEMMs with 4."""
    from dsbench.plan.gpu_profiles import profile_for
    from dsbench.plan.gpu_time import layer_times, step_time

    shape = Shape("llama", 32, 4096, 32, 8, 14336, 128256)
    hw = profile_for("h100-sxm")
    for attention, per_forward in (("flash", 3.5), ("eager", 3.0)):
        lay = Layout(shape, 8192, "h100-sxm", 8, 8, global_batch=8, attention=attention).check()
        forward = layer_times(lay, hw)["attention"]
        assert step_time(lay, hw).terms["attention"] == pytest.approx(per_forward * forward * 32 * lay.micro_batches)


MOSAIC = ORACLES / "held-out" / "mosaic2023-a100-80g.csv"


def test_mosaic_held_out_holds_to_2048_tokens_and_misses_as_the_sequence_grows():
    """MosaicML's llm-foundry A100 table (61 rows, MPT 125M-70B under FSDP, 512 to 65,536 tokens), transcribed
    2026-11-28 and fitted to nothing: up to 2048 tokens the median error is within 5%; beyond, the rows run
    slower than the FA2 rate the profile prices (MPT's Triton attention kernel), more the longer the sequence."""
    rows = replay([str(MOSAIC)])
    assert len(rows) == 61 and all(r.complete and r.skipped is None for r in rows)
    short = [abs(r.step_error) for r in rows if r.row.values["seq_len"] <= 2048]
    assert len(short) == 25 and statistics.median(short) <= 0.05
    by_length = {}
    for r in rows:
        by_length.setdefault(r.row.values["seq_len"], []).append(r.step_error)
    medians = [statistics.median(by_length[s]) for s in sorted(by_length)]
    assert medians[-1] < medians[3] < medians[0] and medians[-1] < -0.25, medians


@pytest.mark.xfail(strict=True, reason="measured 2026-11-28: median 14.3%, max 101.9% (MPT-70B on 32 GPUs, priced "
                   "comm-bound at one NIC per GPU); the long sequences run below FA2's rate (docs/planner.md)")
def test_the_mosaic_table_meets_the_pooled_goals():
    stats = error_stats(replay([str(MOSAIC)]))
    assert stats["median_abs_step_error"] <= 0.08 and stats["max_abs_step_error"] <= 0.25


def test_mosaic_h100_shows_data_parallel_rings_faster_than_one_nic_per_gpu():
    """MosaicML's H100 table: MPT-13B (micro-batch 2, no accumulation, FSDP) ran the same tokens/s per GPU on 8 to
    64 GPUs, so its weights' all-gathers and gradients' reduce-scatter crossed nodes faster than one NIC per GPU
    carries; the model, which prices one NIC per GPU, has the multi-node rows comm-bound and 2.5x slow. Held as
    measured: docs/planner.md weighs the other rule (a node's NICs shared by its ring) on every table."""
    rows = {r.row.row: r for r in replay([str(ORACLES / "held-out" / "mosaic2023-h100.csv")])}
    assert len(rows) == 52 and all(r.skipped is None for r in rows.values())
    assert rows[15].row.values["gpus"] == 8 and -0.40 < rows[15].step_error < -0.25
    assert all(rows[n].row.values["gpus"] > 8 and 1.3 < rows[n].step_error < 1.8 for n in (12, 13, 14))
    one_node_short = [r.step_error for r in rows.values() if r.row.values["gpus"] == 8
                      and r.row.values["seq_len"] <= 2048]
    assert len(one_node_short) == 14 and all(-0.35 < e < 0 for e in one_node_short)


def test_a_table_saved_by_a_spreadsheet_reads_as_the_same_rows(tmp_path):
    """Excel and LibreOffice save a UTF-8 CSV with a byte-order mark and CRLF line ends; the rows are the same."""
    source = ORACLES / "torchtitan.csv"
    saved = tmp_path / "torchtitan.csv"
    saved.write_bytes(b"\xef\xbb\xbf" + source.read_bytes().replace(b"\n", b"\r\n"))
    assert [r.values for r in read_rows([saved])] == [r.values for r in read_rows([source])]


def test_a_row_interleaving_under_another_schedule_is_skipped_not_priced_as_one_chunk(results):
    """virtual_stages above 1 beside a 1f1b schedule contradicts itself: until 2026-11-30 the row was priced as one
    chunk per stage without a word; now it is skipped with the reason, as an unknown GPU is."""
    from dsbench.plan.replay import with_columns

    row = next(r for r in results if r.layout is not None and r.layout.pp == r.layout.tp == 1
               and r.row.values["gpus"] % 2 == 0)
    contradictory = predict_row(with_columns(row.row, pp=2, schedule="1f1b", virtual_stages=4))
    assert contradictory.skipped == "virtual_stages 4 goes with schedule interleaved, not '1f1b': give one or the other"
    assert predict_row(with_columns(row.row, pp=2, schedule="interleaved", virtual_stages=2)).skipped is None
