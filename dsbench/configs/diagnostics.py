"""DeepSpeed's own diagnostics switches, in plain words, and what each costs a measurement (pure).

Read in DeepSpeed 0.19.8's sources, the version pinned:

- ``wall_clock_breakdown``: the engine times forward, backward and step with CUDA events (``EngineTimers``) and, at
  the end of every ``engine.step()`` call, every micro-step, reads them (``SynchronizedWallClockTimer.log``), which
  waits for the event (``CudaEventTimer.get_elapsed_msec``: ``end_event.synchronize()``). Rank 0 prints the times.
- ``memory_breakdown``: rank 0 runs ``gc.collect()``, prints the memory, and resets the device's peak-memory counter
  (``runtime/utils.see_memory_usage``: ``reset_peak_memory_stats``) before and after every forward, backward and
  step. A peak read after the step, dsbench's ``torch.cuda.max_memory_allocated`` included, covers only what
  followed the last reset. (On CPU ranks DeepSpeed's reset is its own RSS tracker's; dsbench's ``ru_maxrss`` is
  not touched.)
- ``flops_profiler.enabled``: rank 0 counts the FLOPs of one step, ``profile_step`` (default 1), and prints the
  profile; the engine's global timers are on, and read at every optimizer step on every rank (a wait, as above).
- ``comms_logger.enabled``: every collective through ``deepspeed.comm`` is followed by
  ``get_accelerator().synchronize()`` (and a barrier under MPI, ``comm/comm.py`` ``timed_op``), so no communication
  overlaps computation; the timings are printed per op only with ``verbose``, else by ``deepspeed.comm.log_summary()``,
  which the script calls itself (dsbench's worker, the HF Trainer and accelerate do not).
- ``timers.throughput``: DeepSpeed's throughput timer (``utils/timer.ThroughputTimer``, built by the engine) starts at
  every forward and stops at every ``engine.step()``, from its third optimizer step on, and with ``synchronized``
  (true by default) each start and stop calls ``get_accelerator().synchronize()``: two waits for the GPU a
  micro-step, in every DeepSpeed run that leaves the section out. Its own docs say the wait costs performance.
  dsbench renders ``synchronized: false`` (the timer reads the host clock; dsbench's figures come from its own
  clocks, worker/loop.py).
- ``autotuning.enabled``: the section is the input of DeepSpeed's autotuner (``deepspeed --autotuning tune``), which
  runs experiments with it on. In any other run the engine profiles steps ``start_profile_step`` to
  ``end_profile_step`` (3 and 5 by default), writes ``autotuning_metric.json`` (``metric_path``; into the working
  folder by default) and calls ``exit()`` at the end of the step that makes ``global_steps`` end_profile_step + 1
  (``DeepSpeedEngine.step``, ``_autotuning_exit``): the training ends after 6 optimizer steps, with status 0.
"""

from __future__ import annotations

from typing import Any

from dsbench.configs.findings import Finding

_FIX = "set it to false for the runs you measure, and on in a run of its own"


def _enabled(config: dict[str, Any], section: str) -> bool:
    value = config.get(section)
    return isinstance(value, dict) and value.get("enabled") is True


def explain_diagnostics(config: dict[str, Any]) -> list[str]:
    """A line for each diagnostics switch that is on."""
    lines = []
    if config.get("wall_clock_breakdown") is True:
        lines.append("wall_clock_breakdown: rank 0 prints the forward, backward and step times of every micro-step; "
                     "reading them makes each rank wait for its GPU at every micro-step")
    if config.get("memory_breakdown") is True:
        lines.append("memory_breakdown: rank 0 runs gc.collect(), prints its memory and resets the GPU's peak-memory "
                     "counter before and after every forward, backward and step")
    if _enabled(config, "flops_profiler"):
        step = config["flops_profiler"].get("profile_step", 1)
        where = config["flops_profiler"].get("output_file") or "standard output"
        lines.append(f"flops_profiler: rank 0 profiles the FLOPs and time of each module at optimizer step {step} "
                     f"(counted from 0) and prints them to {where}; every rank waits for its GPU at each optimizer "
                     "step to read the step timers")
    if _timer_waits(config):
        lines.append("throughput timer: DeepSpeed waits for the GPU at the start of every forward and the end of every "
                     "step() to time them (timers.throughput.synchronized, true by default; dsbench renders false)")
    if _enabled(config, "autotuning"):
        lines.append(f"autotuning: DeepSpeed's autotuner's settings; outside `deepspeed --autotuning` the engine ends "
                     f"the process once {_autotuning_end(config) + 1} optimizer steps have run")
    if _enabled(config, "comms_logger"):
        shown = "printed as each op ends (verbose)" if config["comms_logger"].get("verbose") is True else (
            "kept until the script calls deepspeed.comm.log_summary()")
        lines.append("comms_logger: every collective through deepspeed.comm waits for the GPU before the next "
                     f"op starts, so none overlaps computation; the timings are {shown}")
    return lines


def _timer_waits(config: dict[str, Any]) -> bool:
    """Whether DeepSpeed's throughput timer synchronises the device (its defaults: enabled, synchronized)."""
    timers = config.get("timers")
    timer = timers.get("throughput") if isinstance(timers, dict) else None
    timer = timer if isinstance(timer, dict) else {}
    return timer.get("enabled", True) is True and timer.get("synchronized", True) is True


def _autotuning_end(config: dict[str, Any]) -> int:
    end = config["autotuning"].get("end_profile_step", 5)  # DeepSpeed's AUTOTUNING_END_PROFILE_STEP_DEFAULT
    return end if isinstance(end, int) and not isinstance(end, bool) else 5


def check_diagnostics(config: dict[str, Any]) -> list[Finding]:
    """Warnings for the switches that change what a run measures: its step time, or rank 0's peak memory; an error
    for the autotuner's switch, which ends a training run after a few steps."""
    findings = []
    if _enabled(config, "autotuning"):
        end = _autotuning_end(config)
        findings.append(Finding(
            severity="error", code="autotuning-exits", path="autotuning.enabled",
            message=f"outside `deepspeed --autotuning tune|run` DeepSpeed's engine writes autotuning_metric.json "
                    f"and ends the process with exit() once end_profile_step + 1 = {end + 1} optimizer steps have run, "
                    "status 0: a training run stops there",
            fix="set it to false to train (keep it in the file you give `deepspeed --autotuning`)"))
    if config.get("memory_breakdown") is True:
        findings.append(Finding(
            severity="warning", code="peak-reset", path="memory_breakdown", fix=_FIX,
            message="DeepSpeed resets the GPU's peak-memory counter on rank 0 before and after every forward, "
                    "backward and step, so rank 0's peak memory (dsbench's, any max_memory_allocated read after the "
                    "step) covers only the last phase; it also runs gc.collect() six times a micro-step"))
    waits = (("wall_clock_breakdown", "at every micro-step", config.get("wall_clock_breakdown") is True),
             ("flops_profiler.enabled", "at every optimizer step (and rank 0 profiles one step under hooks)",
              _enabled(config, "flops_profiler")),
             ("comms_logger.enabled", "after every collective", _enabled(config, "comms_logger")))
    findings += [Finding(severity="warning", code="device-sync", path=path, fix=_FIX,
                         message=f"each rank waits for its GPU {when}, which a run without it does not: the step "
                                 "time measured includes those waits")
                 for path, when, on in waits if on]
    return findings
