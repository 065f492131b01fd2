"""The torch engines built directly on 4 CPU ranks: one torchrun (tests/integration/engine_ranks.py) for what a launch
adds nothing to.

fp16's loss scale (worker/engines/loss_scale.py): ddp, fsdp, torch_tp, torch_pp and torch_3d with the scale off, on,
and on with an inf in one gradient of the last rank only. The oracle for "on" is "off" (the same engine unscaled):
the scale is a power of two, so in fp32 it changes no bit. A CPU rank cannot run fp16 (refused), so the scale is
switched on in fp32; the rule itself is checked against torch's GradScaler in tests/unit/test_loss_scale.py.

The replica check (worker/replicas.py) on real copies: the engines' copies agree after training, and one weight of
the last rank nudged is found, named by its rank, in its own replica group.

FSDP as HSDP (``--dp-shard 2``: 2 shard groups of 2, the replicas all-reducing their shards) in each of these and
against one process on Qwen2 (since 2026-12-01).

Qwen2's q/k/v biases under tensor parallelism (column-parallel: each TP rank holds its heads' slice of each bias),
Gemma under tensor and pipeline parallelism (its embedding scales itself and is tied to the head), Phi-3's fused
projections under DDP, FSDP, torch's pipeline, DeepSpeed's ZeRO-3 and (since 2026-12-01) Megatron-style TP, with
sequence parallelism too, and torch_3d, OLMo-2's projection-wide q/k norms under
FSDP, torch's pipeline and ZeRO-3, GPT-NeoX under FSDP, torch's pipeline, ZeRO-3 and DeepSpeed's AutoTP, and GPT-2
and GPT-NeoX under DeepSpeed's Ulysses (GPT-NeoX's attention core recomputed, --recompute selective), and GPT-2
(gpt2-mini, tied) under torch's interleaved schedules (1F1B with its attention core recomputed, and zero bubble; pp 2
x dp 2, 2 chunks per rank; launched by test_model_parallel.py until 2026-12-01), against one process on the same
batches.

DeepSpeed Ulysses' gradients under plain SGD at ZeRO-1 and ZeRO-3, against plain torch's SGD on one process (since
2026-12-01; before, tests/integration/test_ulysses.py launched two Ulysses runs and a one-rank DeepSpeed reference).

DeepSpeed's ZeRO-0 and ZeRO-1 on gpt2-tiny (dp 4) against one process, and the model states each rank holds (since
2026-12-02; before, test_launch_strategies.py launched each on 2 ranks); and ZeRO-2 with the optimizer on the host
(``--offload cpu``: DeepSpeed's CPU Adam on the host partitions), against one process (since 2026-12-02 (night);
launched by test_launch_strategies.py before), and ZeRO-3 so (``dsbench launch --zero 3 --offload cpu``: the
optimizer on the host, the parameters partitioned on the ranks; since 2026-12-03, launched nowhere before: the
launched ZeRO-3 cells offload the parameters too).

The 16-bit weight casts autograd keeps under bf16 autocast on each rank of torch_tp and torch_pp (1F1B, GPipe),
against the planner's per-rank bytes (since 2026-12-05)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dsbench.plan.candidate import Candidate
from tests.conftest import ROOT
from tests.integration.conftest import bin_path, run_command

STRATEGIES = ("ddp", "fsdp", "torch_tp", "torch_pp", "torch_3d", "hsdp")
"""engine_ranks.py's torch layouts: hsdp is the FSDP engine with --dp-shard 2 (2 shard groups of 2 ranks)."""
FSDP = ("fsdp", "hsdp", "fsdp_offload", "fsdp_no_reshard")
"""engine_ranks.py's layouts of the FSDP engine."""
DEEPSPEED = ("autotp", "zero0", "zero1", "zero2_offload", "zero3_offload_optimizer", "zero3", "ulysses")
"""engine_ranks.py's DeepSpeed engines, which clip inside (no norm before clipping to compare)."""


@pytest.fixture(scope="module")
def ranks(tmp_path_factory) -> list[dict]:
    out = tmp_path_factory.mktemp("engine-ranks")
    result = run_command([bin_path("torchrun"), "--standalone", "--nproc-per-node", "4",
                          str(Path(__file__).with_name("engine_ranks.py")), str(out)], cwd=ROOT, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(4)]


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_the_scale_changes_no_loss_and_no_weight(ranks, strategy):
    for rank in ranks:
        off, on = rank[strategy]["off"], rank[strategy]["on"]
        assert on["losses"] == off["losses"] and on["weight_sums"] == off["weight_sums"]
        assert (on["scale"], on["skipped"]) == (2.0**16, 0)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_an_overflow_on_one_rank_skips_the_step_on_every_rank(ranks, strategy):
    """Step 1's inf is on rank 3 only; every rank skips step 1 (its weights stay as after step 0), halves the
    scale, and steps again at step 2, where the weights move."""
    for rank in ranks:
        spoiled, off = rank[strategy]["spoiled"], rank[strategy]["off"]
        assert (spoiled["scale"], spoiled["skipped"]) == (2.0**15, 1)
        sums = spoiled["weight_sums"]
        assert sums[0] == off["weight_sums"][0] and sums[1] == sums[0] and sums[2] != sums[1]


def _group_mean(ranks: list[dict], model: str, name: str) -> list[float]:
    """A Ulysses run's loss per step: each rank's is its share of the sequence's, weighted so that the ranks' mean is
    the sequence's (engines/deepspeed.UlyssesEngine; the worker's loop averages them)."""
    steps = zip(*(rank["families"][model][name]["losses"] for rank in ranks), strict=True)
    return [sum(step) / len(ranks) for step in steps]


@pytest.mark.parametrize(("model", "strategy"), [("qwen2-tiny", "torch_tp"), ("qwen2-tiny", "torch_3d"),
                                                 ("qwen2-tiny", "torch_tp_fused"),
                                                 ("qwen2-tiny", "hsdp"), ("qwen2-tiny", "fsdp_offload"),
                                                 ("qwen2-tiny", "fsdp_no_reshard"),
                                                 ("gemma-tiny", "torch_tp"), ("gemma-tiny", "torch_pp"),
                                                 ("gemma-tiny", "torch_3d"), ("gemma-tiny", "autotp"),
                                                 ("phi3-tiny", "ddp"), ("phi3-tiny", "fsdp"), ("phi3-tiny", "torch_pp"),
                                                 ("phi3-tiny", "zero3"), ("olmo2-tiny", "fsdp"),
                                                 ("olmo2-tiny", "torch_pp"), ("olmo2-tiny", "zero3"),
                                                 ("neox-tiny", "fsdp"), ("neox-tiny", "torch_pp"),
                                                 ("neox-tiny", "zero3"), ("neox-tiny", "autotp"),
                                                 ("neox-tiny", "torch_tp"), ("neox-tiny", "torch_tp_sp_lp"),
                                                 ("neox-tiny", "torch_3d"), ("olmo2-tiny", "torch_tp"),
                                                 ("olmo2-tiny", "torch_tp_sp"), ("olmo2-tiny", "torch_3d"),
                                                 ("gpt2-tiny", "ulysses"), ("neox-tiny", "ulysses"),
                                                 ("gpt2-tiny", "zero0"), ("gpt2-tiny", "zero1"),
                                                 ("gpt2-tiny", "zero2_offload"),
                                                 ("gpt2-tiny", "zero3_offload_optimizer"),
                                                 ("gpt2-tiny", "torch_tp"), ("gpt2-tiny", "torch_tp_sp"),
                                                 ("gpt2-tiny", "torch_3d"), ("gpt2-mini", "torch_pp_interleaved"),
                                                 ("gpt2-mini", "torch_pp_zb"), ("phi3-tiny", "torch_tp"),
                                                 ("phi3-tiny", "torch_tp_sp"), ("phi3-tiny", "torch_3d")])
def test_families_split_by_tensor_and_pipeline_parallelism_train_as_one_process(ranks, model, strategy):
    """The losses and the gradient norms before clipping (clip 0.5: every step clips) within 1e-4 of one process's,
    the parity bound of tests/integration/test_model_parallel.py, on every rank. Measured 2026-11-30: the losses
    equal to the last digit, the norms 1.35e-5 apart, for llama-tiny as for qwen2-tiny. The gradients agree within
    4.7e-7 per tensor (llama-tiny, tp 2); the gap is one process's norm: torch's clip_grad_norm_ on CPU fp32 came
    1.30e-5 from the float64 norm of the same gradients, the split engines' sum of squares (model_parallel.clip_)
    1.6e-8.

    Under DeepSpeed's Ulysses (sp 2 x dp 2) each rank's loss is its half of the sequence's, weighted so that the
    ranks' mean is the sequence's (engines/deepspeed.UlyssesEngine; the worker's loop averages them): the mean is
    compared, on every rank. Measured 2026-12-01: gpt2-tiny 5.7e-8 from one process, neox-tiny 1.1e-7."""
    if strategy == "ulysses":
        mean = _group_mean(ranks, model, strategy)
        ranks = [{"families": {model: {"single": r["families"][model]["single"], strategy: {"losses": mean}}}}
                 for r in ranks]
    for rank in ranks:
        one, split = rank["families"][model]["single"], rank["families"][model][strategy]
        for key in ("losses", "grad_norms") if strategy not in DEEPSPEED else ("losses",):  # DeepSpeed clips inside
            worst = max(abs(a - b) / abs(b) for a, b in zip(split[key], one[key], strict=True))
            assert worst < 1e-4, (strategy, key, split[key], one[key])
        assert one["grad_norms"][0] > 0.5  # clipped, so the norm's parity is the update's
        if strategy not in DEEPSPEED:  # torch AdamW's fused kernel where asked (--fused-optimizer), else its for-loop
            kernel = "fused" if strategy == "torch_tp_fused" else "for-loop"
            assert split["optimizer"] == f"AdamW ({kernel})", (strategy, split["optimizer"])
        elif "offload" in strategy:  # the optimizer on the host: DeepSpeed's CPU Adam, not torch's AdamW
            assert split["optimizer"] == "DeepSpeedCPUAdam", split["optimizer"]
        # FSDP2's blocks are gathered for their forward and, unless --no-fsdp-reshard, back to shards after it
        assert split.get("gathered_after_forward") is ((strategy == "fsdp_no_reshard") if strategy in FSDP else None)


@pytest.mark.parametrize("stage", [0, 1])
def test_zero_0_and_1_hold_the_model_states_of_the_zero_paper(ranks, stage):
    """Model states per rank (Rajbhandari et al. 2020, sec. 5.1: P_os partitions the optimizer states over the N_d
    data-parallel ranks; ZeRO-0 partitions nothing), as the worker counts them from its tensors (fp32: 4 bytes a
    parameter, Adam's two moments 8): ZeRO-0 holds the parameters, the gradients and both moments whole on every
    rank, ZeRO-1 a quarter of the moments on each of 4 (N_d = 4), with the planner's bytes within 5% of either.
    Measured 2026-12-02 (gpt2-tiny, 378,624 parameters): ZeRO-0 6,058,096 bytes a rank, ZeRO-1 3,028,996, the losses
    those of one process to the last digit.
    Until 2026-12-02 two launches of test_launch_strategies.py (on 2 ranks) measured these."""
    from dsbench.plan.memory import accounting_for, model_states
    from dsbench.plan.verify import comparable_bytes

    name = f"zero{stage}"
    for rank in ranks:
        run = rank["families"]["gpt2-tiny"][name]
        states, n_bytes = run["states"], run["num_params"] * 4
        assert states["params"] == n_bytes
        # what DeepSpeed's stage-1/2 optimizer keeps at the boundary (stage_1_and_2.py): the reduced gradients of its
        # partition and the fp32 partition it steps; ZeRO-0 the whole gradients and no copy
        assert (states["grads"], states["master_weights"]) == ((n_bytes // 4,) * 2 if stage == 1 else (n_bytes, 0))
        moments = states["optimizer_states"] - run["step_counter_bytes"]  # torch AdamW's steps: 4 bytes a tensor
        assert moments == 2 * n_bytes // (4 if stage == 1 else 1), (name, states, run["step_counter_bytes"])
        predicted = model_states(run["num_params"], name, 4, accounting_for("fp32", name))
        measured, expected = comparable_bytes(name, states, predicted)
        assert measured == pytest.approx(expected, rel=0.05), name


REPLICA_GROUPS = {"ddp": (1, 4), "fsdp": None, "torch_tp": (2, 2), "torch_pp": (2, 2), "torch_3d": None,
                  "hsdp": (2, 2)}
"""(groups, ranks per group) of each engine's copies on 4 ranks: DDP one group of all; torch_tp's and torch_pp's dp
replicas two pairs (tp 2 x dp 2, pp 2 x dp 2); HSDP's two replicas of each shard (ranks 0 and 2, 1 and 3); FSDP
shards and torch_3d's tp 2 x pp 2 keeps no copies."""


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_the_replica_check_finds_a_copy_that_drifted(ranks, strategy):
    off = ranks[0][strategy]["off"]  # rank 0 holds the verdict (every rank's digest gathered)
    expected = REPLICA_GROUPS[strategy]
    if expected is None:
        assert off["replicas"] is None and off["replicas_nudged"] is None
        return
    groups, size = expected
    assert off["replicas"] == {"type": "replicas", "groups": groups, "ranks_per_group": size, "agree": True,
                               "differing_ranks": []}
    assert off["replicas_nudged"]["agree"] is False and off["replicas_nudged"]["differing_ranks"] == [3]


@pytest.mark.parametrize("stage", [1, 3])
def test_ulysses_gradients_equal_one_process_s(ranks, stage):
    """Adam hides a constant gradient scale (its step is m/sqrt(v)), so a Ulysses run whose gradients were sp times too
    large kept Adam's losses to 1e-7. Plain SGD (lr 0.5, no clipping) shows a scale in the first update: DeepSpeed
    0.19.8 reduces Ulysses' gradients differently by stage (ZeRO-3 averages over dp x sp, ZeRO-1/2 sum sp and
    average dp), and the worker scales each (engines/deepspeed.py). sp 2 x dp 2; the oracle is plain torch's SGD on
    one process, the same model and batches (micro-batch 2, 2 micro-steps). Until 2026-12-01 launched by
    test_ulysses.py (ZeRO-1 on 2 ranks, ZeRO-3 on 4, a one-rank DeepSpeed reference): there ZeRO-1 came 5.7e-8 from
    one process, ZeRO-3 6.2e-8."""
    expected = ranks[0]["families"]["llama-tiny"]["sgd_single"]["losses"]
    assert all(rank["families"]["llama-tiny"]["sgd_single"]["losses"] == expected for rank in ranks)
    got = _group_mean(ranks, "llama-tiny", f"ulysses_sgd_z{stage}")
    twice = ranks[0]["families"]["llama-tiny"]["sgd_single_x2"]["losses"]

    def gap(a: list[float], b: list[float]) -> float:
        return max(abs(x - y) / y for x, y in zip(a, b, strict=True))

    # the bound must tell a scale of 2 apart: gradients twice as large (the learning rate doubled) move a later
    # step's loss by far more than it
    assert gap(twice, expected) > 10 * 1e-5, (twice, expected)
    assert gap(got, expected) < 1e-5, (got, expected)
    print(f"stage {stage}: {gap(got, expected):.2e} from one process; twice the gradient {gap(twice, expected):.2e}")


RESUMES = ("ddp", "fsdp", "hsdp", "torch_tp", "torch_pp", "torch_3d", "torch_3d_fsdp", "zero2", "zero3", "pipe")
"""engine_resume.py's layouts on 4 ranks: DDP, FSDP2, HSDP, DTensor TP (tp 2 x dp 2, sequence parallel, the
vocabulary-parallel loss), torch's GPipe (pp 2 x dp 2), torch_3d interleaved (tp 2 x pp 2, 2 chunks a rank) and
torch_3d's pp 2 x FSDP2 2; and since 2026-12-02 (night) DeepSpeed's ZeRO-2 and ZeRO-3 (dp 4) and its pipeline
engine (pp 2 x dp 2 at ZeRO-0), which test_checkpoint.py launched a resume of each of before."""


@pytest.mark.parametrize("layout", RESUMES)
def test_an_engine_resumed_from_its_checkpoint_continues_the_run(ranks, layout):
    """Steps 6-11 of a second engine that loaded the checkpoint saved after step 6 (worker/checkpoint.py: DCP, the rank
    files' LR schedule and RNG; DeepSpeed's own save_checkpoint and load_checkpoint for its engines) against the
    same steps of the run that saved it: the same losses and learning rates, exactly (CPU fp32); the LR still ramps
    (8 warm-up steps), so the schedule came back too. The second engine starts from other weights and another RNG
    state, which the load replaces.

    DDP alone is 1 ulp off on 4 ranks (measured 2026-12-02: 9.5e-7 on a loss of 8.3, at 5 of the 4 ranks x 6
    steps): DDP rebuilds its gradient buckets in the order the gradients became ready after its first step, so a new
    engine's first step sums each gradient's 4 parts in another order (gloo's ring); with a step taken before the
    load, the resume was exact. On 2 ranks (a + b = b + a) the launched DDP resume was exact too."""
    assert all(set(rank["resume"]) == set(RESUMES) for rank in ranks)
    for rank in ranks:
        run = rank["resume"][layout]
        # the manifest names the engine, and its files are DeepSpeed's own or torch's DCP
        assert (run["storage"], run["strategy"]) == ("deepspeed" if run["engine"] == "deepspeed" else "dcp",
                                                     run["engine"])
        weights = run["weights"]
        assert weights["loaded"] == weights["saved"] != weights["fresh"] and run["rng_restored"]
        straight, resumed = run["straight"], run["resumed"]
        assert [lr for _, lr in resumed] == [lr for _, lr in straight] and straight[0][1] < straight[-1][1]
        if layout == "ddp":
            assert max(abs(a - b) / b for (a, _), (b, _) in zip(resumed, straight, strict=True)) < 2.5e-7
        else:
            assert resumed == straight, (layout, resumed, straight)


CASTS = {"torch_tp": (Candidate(strategy="ddp", tp=2, engine="torch"), "1f1b"),
         "torch_tp_lp": (Candidate(strategy="ddp", tp=2, engine="torch", sequence_parallel=True, loss_parallel=True),
                         "1f1b"),
         "torch_pp": (Candidate(strategy="ddp", pp=2, engine="torch"), "1f1b"),
         "torch_pp_gpipe": (Candidate(strategy="ddp", pp=2, engine="torch"), "gpipe")}
"""engine_ranks.CASTS as the planner names them (dsbench's DDP-family engines autocast in bf16), with the schedule."""


@pytest.mark.parametrize("name", list(CASTS))
def test_the_autocast_casts_each_rank_keeps_are_priced(ranks, name):
    """bf16 over fp32 weights (torch.autocast): each rank's 16-bit weight casts that autograd holds for the backward,
    measured at their peak over one step of 4 micro-batches, against the planner's: one micro-batch's casts per
    layer (TP's shards) and the head's, times the micro-batches its schedule holds in flight on each stage
    (plan/rank_memory.cast_bytes, plan/pipeline_peak.peaks). Until 2026-12-05 the plan priced one micro-batch's
    casts whatever the schedule: GPipe's last stage held 4 times that. The busiest rank, which the plan reports,
    exactly; torch_pp's first stage holds some more on the first step (torch's PipelineStage infers its shapes by a
    forward of its own, and part of its casts stays alive: 13% more under 1F1B, unpriced)."""
    from dsbench.models import PRESETS
    from dsbench.plan.pipeline_peak import chunk_layers, peaks
    from dsbench.plan.rank_memory import cast_bytes

    cand, schedule = CASTS[name]
    shape = PRESETS["llama-tiny"]
    layer, head = cast_bytes(shape, cand)
    stages = [n * layer for n in chunk_layers(shape.layers, cand.pp)]
    stages[-1] += head
    priced = [peak.total for peak in peaks(cand.pp, 4, stages, None, 1, schedule)] if cand.pp > 1 else stages
    measured = [rank["casts"][name] for rank in ranks]
    assert max(measured) == pytest.approx(max(priced), rel=0.005), (measured, priced)
    for rank, held in enumerate(measured):  # a rank's stage: rank // dp (torch_pp's mesh, pp outermost)
        assert priced[rank // (4 // cand.pp)] <= held <= 1.15 * priced[rank // (4 // cand.pp)], (measured, priced)
