"""dsbench whatif's pure parts: the link list, the planner's time per link, the table from summaries."""

from __future__ import annotations

import re

import pytest

from dsbench.bench.matrix import expand, fused_by_default
from dsbench.bench.whatif import UNSHAPED, check_links, markdown, predicted_comm_s, rows_from, whatif_cells
from dsbench.errors import UserError
from dsbench.model_config import resolve_model
from dsbench.run_record import RunSummary, Throughput


def test_links_start_with_the_unshaped_baseline_and_bad_rates_are_refused():
    assert check_links(["100mbit", "unshaped", "1gbit"]) == ["unshaped", "100mbit", "1gbit"]
    with pytest.raises(UserError, match="--links 'fast': give a tc rate"):
        check_links(["fast"])


def test_cells_are_compare_s_cells_on_the_test_bed_s_ranks():
    """One cell per strategy at nodes x slots ranks, as compare's expansion makes them (the fused optimizer wherever
    it applies, compare's default); the hostfile is the test bed's, set per link."""
    strategies = ["ddp", "zero2", "fsdp", "pipe2", "torch_tp2"]
    cells = whatif_cells(strategies, 2, "llama-tiny", 2, 10, 3, 128)
    assert cells == expand(strategies, [2], [2], ["llama-tiny"], steps=10, warmup=3, seq_len=128,
                           fused_optimizer="auto")
    assert [c.strategy for c in cells] == strategies and {c.world_size for c in cells} == {2}
    assert [c.fused_optimizer for c in cells] == [fused_by_default(s) for s in strategies]
    assert all(c.hostfile is None and not c.compile for c in cells)


@pytest.mark.parametrize(("strategies", "world", "model", "seq", "message"), [
    ([], 2, "gpt2-tiny", 128, "--strategies is empty"),
    (["single"], 2, "gpt2-tiny", 128, "--strategies 'single': choose among"),
    (["zero3_nvme"], 2, "gpt2-tiny", 128, "--strategies 'zero3_nvme': choose among"),
    (["ddp"], 2, "gpt2-tiny", 4096, "--seq-len 4096 exceeds gpt2-tiny's"),
    (["torch_tp2"], 3, "llama-tiny", 128, "--strategies torch_tp2 runs on a multiple of 2 ranks; --nodes x --slots "
                                          "(3 ranks) gives it no cell"),
    # compare's check of the layers against the layout, before any test bed goes up: 2 stages x 2 chunks of 2 layers
    (["torch_pipe2_interleaved2"], 2, "gpt2-tiny", 128, "torch_pipe2_interleaved2"),
])
def test_cells_refuse_what_cannot_run_before_a_test_bed_goes_up(strategies, world, model, seq, message):
    with pytest.raises(UserError, match=re.escape(message)):
        whatif_cells(strategies, world, model, 2, 10, 3, seq)


def test_planner_time_is_the_ring_all_reduce_at_the_link_rate():
    """DDP on 2 ranks: a ring all-reduce sends 2 x B x (N-1)/N = B bytes per rank (seeds/001), B = 4 bytes per
    fp32 gradient; at 20 Mbit/s that is B x 8 / 20e6 seconds."""
    params = resolve_model("gpt2-tiny").num_params()
    assert predicted_comm_s("ddp", "gpt2-tiny", 2, 2, 128, "20mbit") == pytest.approx(4 * params * 8 / 20e6)
    # ZeRO-2 moves the same volume (reduce-scatter + all-gather); ZeRO-3/FSDP 1.5x (the ZeRO paper, sec. 7:
    # 3 psi against data parallelism's 2 psi: parameters gathered in the forward and again in the backward)
    assert predicted_comm_s("zero2", "gpt2-tiny", 2, 2, 128, "20mbit") == pytest.approx(4 * params * 8 / 20e6)
    assert predicted_comm_s("fsdp", "gpt2-tiny", 2, 2, 128, "20mbit") == pytest.approx(1.5 * 4 * params * 8 / 20e6)
    assert predicted_comm_s("ddp", "gpt2-tiny", 2, 2, 128, UNSHAPED) is None


def _summary(tokens_per_s, window_s, steps=10):
    return RunSummary(status="ok", throughput=Throughput(tokens_per_s=tokens_per_s, window_s=window_s, steps=steps))


def test_rows_rank_strategies_per_link_and_subtract_the_unshaped_step():
    results = {UNSHAPED: {"ddp": ("ok", _summary(8000, 1.0)), "zero2": ("ok", _summary(5000, 1.6))},
               "20mbit": {"ddp": ("ok", _summary(500, 8.0)), "zero2": ("failed", None)}}
    rows = {(r.link, r.strategy): r for r in rows_from(results, "gpt2-tiny", 2, 2, 128)}
    assert rows[UNSHAPED, "ddp"].rank == 1 and rows[UNSHAPED, "zero2"].rank == 2
    assert rows["20mbit", "ddp"].extra_step_s == pytest.approx(0.8 - 0.1)
    assert rows["20mbit", "zero2"].rank is None and rows["20mbit", "zero2"].step_s is None
    table = markdown(list(rows.values()))
    assert "| 20mbit | zero2 | - | - | - |" in table and table.count("\n") == 6


def test_whatif_dry_run_checks_everything_a_run_checks_and_brings_nothing_up(cli_run, tmp_path):
    """``whatif --dry-run`` (no root needed): per link, the test bed it would bring up and each cell's launch across
    its hostfile, which `dsbench launch` takes as typed (a dry run); nothing written. Bad inputs are refused as a run
    refuses them, before any test bed."""
    import shlex

    result = cli_run("whatif", "--links", "unshaped,100mbit", "--strategies", "ddp,zero2", "--out", "w", "--dry-run")
    assert result.exit_code == 0, result.output
    assert not (tmp_path / "w").exists()
    lines = result.output.splitlines()
    assert lines[0].startswith("2 links x 2 cells, one test bed of 2 nodes x 1 slot at a time, into w")
    assert lines[1] == "unshaped: the test bed up unshaped (the bare bridge)"
    assert lines[4] == "100mbit: the test bed up with each node's link shaped to 100mbit (tc)"
    commands = [shlex.split(line) for line in lines if line.startswith("  dsbench launch")]
    assert len(commands) == 4 and all("--hostfile" in args for args in commands)
    assert [args[args.index("--run-dir") + 1] for args in commands][2:] == [
        f"w/100mbit/cells/{name}" for name in ("ddp-w2-mb2-fused-gpt2-tiny-r0", "zero2-w2-mb2-gpt2-tiny-r0")]
    (tmp_path / "hosts").write_text("n1 slots=1\nn2 slots=1\n")  # the test bed's hostfile stands in for a dry run
    for args in commands[:2]:
        args[args.index("--hostfile") + 1] = "hosts"
        cut = args.index("--")
        launched = cli_run(*args[1:cut], "--dry-run", *args[cut:])
        assert launched.exit_code == 0, launched.output
    refused = cli_run("whatif", "--links", "100mbit,0.1gbit", "--out", "w2", "--dry-run")
    assert refused.exit_code == 2 and "names one rate twice" in refused.output and not (tmp_path / "w2").exists()
