"""DeepSpeed's diagnostics switches (dsbench/configs/diagnostics.py). The oracle: DeepSpeed's own functions as
installed, called here with the accelerator's counters replaced, and its engine's sources for where it calls them."""

import inspect
from types import SimpleNamespace

import pytest

from dsbench.configs.diagnostics import check_diagnostics
from dsbench.configs.explain import explain


def _counted(monkeypatch, name: str) -> list:
    from deepspeed.accelerator import get_accelerator

    calls: list = []
    monkeypatch.setattr(get_accelerator(), name, lambda *args, **kwargs: calls.append(args))
    return calls


def test_memory_breakdown_resets_the_peak_counter_around_forward_backward_and_step(monkeypatch):
    from deepspeed.runtime import utils
    from deepspeed.runtime.engine import DeepSpeedEngine

    resets = _counted(monkeypatch, "reset_peak_memory_stats")
    utils.see_memory_usage("probe", force=True)
    assert len(resets) == 1
    utils.see_memory_usage("probe", force=False)  # memory_breakdown false: nothing
    assert len(resets) == 1
    engine = inspect.getsource(DeepSpeedEngine)
    for when in ("before forward", "after forward", "before backward", "after backward", "before step",
                 "after step"):
        assert f'see_memory_usage("Engine {when}", force=self.memory_breakdown())' in engine, when


def test_comms_logger_synchronises_after_every_collective_even_unprofiled(monkeypatch):
    from deepspeed.comm import comm

    syncs = _counted(monkeypatch, "synchronize")
    monkeypatch.setattr(comm, "cdb", SimpleNamespace(using_mpi=False))
    monkeypatch.setattr(comm.comms_logger, "prof_all", False)
    monkeypatch.setattr(comm.comms_logger, "prof_ops", [])

    def all_reduce(tensor, log_name="all_reduce", prof=False):
        return tensor

    op = comm.timed_op(all_reduce)
    monkeypatch.setattr(comm.comms_logger, "enabled", False)
    op(1)
    assert syncs == []
    monkeypatch.setattr(comm.comms_logger, "enabled", True)
    op(1), op(2)
    assert len(syncs) == 2


def test_wall_clock_breakdown_reads_its_timers_at_every_step_call_and_a_read_waits(monkeypatch):
    from deepspeed.accelerator import get_accelerator
    from deepspeed.runtime.engine import DeepSpeedEngine
    from deepspeed.utils.timer import CudaEventTimer

    monkeypatch.setattr(get_accelerator(), "current_stream", lambda: SimpleNamespace(wait_event=lambda event: None))
    waited: list = []
    end = SimpleNamespace(synchronize=lambda: waited.append(1))
    start = SimpleNamespace(elapsed_time=lambda other: 2.5)
    assert CudaEventTimer(start, end).get_elapsed_msec() == 2.5 and waited == [1]
    step = inspect.getsource(DeepSpeedEngine.step)
    assert "if self.wall_clock_breakdown():" in step
    assert "self.timers.log(names=self.engine_timers.micro_timers" in step
    assert "if self.wall_clock_breakdown() or self.flops_profiler_enabled():" in step  # the global timers too


@pytest.mark.parametrize("config, paths", [
    ({"wall_clock_breakdown": True}, ["wall_clock_breakdown"]),
    ({"wall_clock_breakdown": False, "memory_breakdown": False}, []),
    ({"memory_breakdown": True}, ["memory_breakdown"]),
    ({"flops_profiler": {"enabled": True}}, ["flops_profiler.enabled"]),
    ({"flops_profiler": {"enabled": False, "profile_step": 3}}, []),
    ({"comms_logger": {"enabled": True, "verbose": True}}, ["comms_logger.enabled"]),
    ({"comms_logger": {"enabled": False, "prof_all": True}}, []),
    ({"wall_clock_breakdown": True, "memory_breakdown": True, "comms_logger": {"enabled": True}},
     ["memory_breakdown", "wall_clock_breakdown", "comms_logger.enabled"]),
])
def test_each_switch_that_is_on_is_warned_of_and_explained(config, paths):
    config = {"train_micro_batch_size_per_gpu": 1, **config}
    findings = check_diagnostics(config)
    assert [f.path for f in findings] == paths
    assert all(f.severity == "warning" and f.code in ("peak-reset", "device-sync") for f in findings)
    said = [line.split(":")[0] for line in explain(config) if line.split(":")[0] in (
        "wall_clock_breakdown", "memory_breakdown", "flops_profiler", "comms_logger")]
    assert said == sorted({path.split(".")[0] for path in paths}, key=[
        "wall_clock_breakdown", "memory_breakdown", "flops_profiler", "comms_logger"].index)


def test_the_profilers_own_settings_are_named():
    config = {"train_micro_batch_size_per_gpu": 1,
              "flops_profiler": {"enabled": True, "profile_step": 3, "output_file": "flops.txt"},
              "comms_logger": {"enabled": True}}
    lines = explain(config)
    assert any("at optimizer step 3 (counted from 0) and prints them to flops.txt" in line for line in lines)
    assert any("kept until the script calls deepspeed.comm.log_summary()" in line for line in lines)


@pytest.mark.parametrize("config, path, deepspeed_reads", [
    ({"memory_breakdown": "x"}, "memory_breakdown", lambda c: bool(c.memory_breakdown)),
    ({"comms_logger": {"enabled": "yes"}}, "comms_logger.enabled", lambda c: c.comms_config.comms_logger.enabled),
    ({"flops_profiler": {"enabled": True, "profile_step": "2"}}, "flops_profiler.profile_step",
     lambda c: c.flops_profiler_config.profile_step == "2"),  # never equal to the engine's int step: no profile
])
def test_a_switch_deepspeed_reads_as_on_but_no_bool_is_refused_by_name(monkeypatch, config, path, deepspeed_reads):
    """DeepSpeed takes these (a truthy dict.get, pydantic's lax bool) and acts on them as written; dsbench names
    each as an error instead of saying nothing (memory_breakdown "x" was valid, 0 warnings)."""
    from deepspeed.runtime import config as ds_config

    from dsbench.configs.validate import ValidateContext, validate

    monkeypatch.setattr(ds_config.dist, "get_world_size", lambda *a, **k: 1)
    monkeypatch.setattr(ds_config.dist, "get_rank", lambda *a, **k: 0)
    assert deepspeed_reads(ds_config.DeepSpeedConfig({"train_batch_size": 2, **config}))
    errors = [f for f in validate({"train_batch_size": 2, **config}, ValidateContext(world_size=1),
                                  deepspeed_check=False) if f.severity == "error"]
    assert [f.path for f in errors] == [path]


def test_the_autotuners_switch_ends_a_training_run_after_end_profile_step_plus_one_steps(monkeypatch):
    """DeepSpeed's engine, outside its autotuner, writes the metric file and calls exit() at the end of the step whose
    global step count reaches end_profile_step + 1 (after incrementing it in _take_model_step); its config reads the
    section as written (enabled, end_profile_step 5 by default). dsbench refuses it, naming the step count."""
    from deepspeed.runtime import config as ds_config
    from deepspeed.runtime.engine import DeepSpeedEngine

    monkeypatch.setattr(ds_config.dist, "get_world_size", lambda *a, **k: 1)
    monkeypatch.setattr(ds_config.dist, "get_rank", lambda *a, **k: 0)
    tuning = {"train_batch_size": 2, "autotuning": {"enabled": True}}
    read = ds_config.DeepSpeedConfig(dict(tuning)).autotuning_config
    assert read.enabled is True and read.end_profile_step == 5
    step = inspect.getsource(DeepSpeedEngine.step)
    assert step.index("self._take_model_step(") < step.index(
        "if self.autotuning_enabled() and self.global_steps == (self.autotuning_end_profile_step() + 1):")
    assert inspect.getsource(DeepSpeedEngine._take_model_step).count("self.global_steps += 1") == 1
    assert inspect.getsource(DeepSpeedEngine._autotuning_exit).rstrip().endswith("exit()")
    for config, steps in ((tuning, 6), ({**tuning, "autotuning": {"enabled": True, "end_profile_step": 9}}, 10)):
        (finding,) = check_diagnostics(config)
        assert finding.severity == "error" and f"+ 1 = {steps} optimizer steps" in finding.message
        assert any(f"once {steps} optimizer steps have run" in line for line in explain(config))
    assert check_diagnostics({**tuning, "autotuning": {"enabled": False}}) == []


def _timer_waits(config: dict, monkeypatch, micro_steps: int = 5) -> int:
    """How many times DeepSpeed's own ThroughputTimer, built from DeepSpeedConfig(config) as the engine builds it
    (start_step 2), synchronises the device over ``micro_steps`` forward/step pairs."""
    from deepspeed.runtime import config as ds_config
    from deepspeed.utils.timer import ThroughputTimer

    monkeypatch.setattr(ds_config.dist, "get_world_size", lambda *a, **k: 1)
    monkeypatch.setattr(ds_config.dist, "get_rank", lambda *a, **k: 0)
    timer = ThroughputTimer(ds_config.DeepSpeedConfig(dict(config)).timers_config, batch_size=2, start_step=2)
    syncs = _counted(monkeypatch, "synchronize")
    for _ in range(micro_steps):
        timer.start()
        timer.stop(global_step=True)
    return len(syncs)


def test_deepspeeds_throughput_timer_waits_twice_a_step_unless_told_not_to_and_dsbench_renders_it_so(monkeypatch):
    """DeepSpeed's default throughput timer synchronises the device at every start (each forward) and stop (each
    step()) from its third step: 6 waits over 5 steps. DeepSpeed PR #5363 added `synchronized: false` for that cost
    ("up to 20-25%" on some accelerators). What dsbench renders, and its calibration's configs, wait 0 times."""
    from deepspeed.runtime.engine import DeepSpeedEngine

    from dsbench.configs.api import render_config
    from dsbench.worker.calibrate_engines import zero_config

    plain = {"train_batch_size": 2, "train_micro_batch_size_per_gpu": 2}
    assert _timer_waits(plain, monkeypatch) == 6
    assert any(line.startswith("throughput timer: DeepSpeed waits for the GPU") for line in explain(plain))
    for stage in (0, 2, 3):
        rendered, _ = render_config({"zero": stage, "world_size": 1})
        assert _timer_waits(rendered, monkeypatch) == 0 and not any(
            line.startswith("throughput timer") for line in explain(rendered))
    assert _timer_waits({**zero_config(3, "fp32", 2, 64), "train_batch_size": 2}, monkeypatch) == 0
    forward, step = inspect.getsource(DeepSpeedEngine.forward), inspect.getsource(DeepSpeedEngine.step)
    assert "self.tput_timer.start()" in inspect.getsource(DeepSpeedEngine._forward_prologue) or (
        "self.tput_timer.start()" in forward)
    assert "self.tput_timer.stop(global_step=self.is_gradient_accumulation_boundary()" in step


@pytest.mark.parametrize("value", [True, False])
def test_explain_says_deepcompile_waits_for_engine_compile(value):
    """``compile.deepcompile`` changes nothing until the script calls ``engine.compile()`` (DeepSpeed 0.19.8's
    forward logs "DeepCompile is enabled but engine.compile() has not been called"); the oracle for the switch being
    read as on is DeepSpeed's own parser."""
    from deepspeed.runtime.config import DeepSpeedConfig

    config = {"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 3},
              "compile": {"deepcompile": value}}
    said = [line for line in explain(config) if line.startswith("compile.deepcompile")]
    assert DeepSpeedConfig(config).compile_config.deepcompile is value
    assert bool(said) is value and (not said or "engine.compile()" in said[0])
