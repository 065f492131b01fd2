"""DeepSpeed's pipeline engine on a Hugging Face model: ``PipelineModule`` from the model's own layers.

The config's ``pipeline`` section sets the stages, ``partition_method`` (``parameters``, ``uniform`` or
``type:REGEX`` over layer class names; dsbench renders ``type:BlockPipe``, an equal number of decoder blocks
per stage) and ``activation_checkpoint_interval``. Micro-batches per step are the gradient-accumulation
steps. GPT-2's tied input/output embedding is a ``TiedLayerSpec`` on the first and last stage; DeepSpeed
keeps the two copies equal (broadcast at start, gradients all-reduced between the two stages each step).
"""

from __future__ import annotations

import warnings
from typing import Any

from dsbench.configs.pipeline import pipeline_settings
from dsbench.worker.dist import Collectives
from dsbench.worker.engines.base import EngineOptions
from dsbench.worker.engines.busy import BusyClock
from dsbench.worker.engines.deepspeed import DeepSpeedReadings
from dsbench.worker.engines.pipe_clip import clip_whole_model, first_stage_norm
from dsbench.worker.pipe_split import Split, TokenEmbedding, causal_lm_loss, split_model, stage_layers, tied_head
from dsbench.worker.state_bytes import count_deepspeed


def deepspeed_layers(split: Split) -> list[Any]:
    """The layer list for ``PipelineModule`` (:func:`stage_layers`), the tied embedding as ``TiedLayerSpec``."""
    from deepspeed.pipe import TiedLayerSpec

    layers = stage_layers(split)
    if not split.tied:
        return layers
    embedding = split.embed.embedding

    def tied(**kwargs: Any) -> Any:
        return TiedLayerSpec("embed", TokenEmbedding, embedding, tied_weight_attr=["embedding.weight"], **kwargs)

    return [tied(), *layers[1:-1], tied(forward_fn=tied_head)]


def _quiet_tied_broadcast(module: Any) -> None:
    """DeepSpeed broadcasts a tied embedding in place (PipelineModule._synchronize_tied_weights), which torch 2.13
    records in the graph and warns of at each rank's first backward ("c10d::broadcast_: an autograd kernel was not
    registered ... may lead to silently incorrect behavior"). The gradients are right: tied gpt2-tiny over 2 stages
    trains one process's losses (tests/integration/test_model_parallel.py), so the warning is silenced."""
    if module.tied_comms:
        warnings.filterwarnings("ignore", message=r"c10d::broadcast_: an autograd kernel", category=UserWarning)


class DeepSpeedPipelineEngine(DeepSpeedReadings):
    """``PipelineEngine.train_batch`` runs all micro-batches (1F1B-style schedule) and the optimizer step."""

    name = "deepspeed"

    def __init__(self, model: Any, options: EngineOptions, dist_info: Any) -> None:
        import deepspeed
        from deepspeed.pipe import PipelineModule
        from deepspeed.runtime.pipe import schedule

        assert options.ds_config is not None
        stages, method, interval = pipeline_settings(options.ds_config)
        # only decoder blocks are checkpointed: the embedding takes integer ids, and a reentrant checkpoint
        # of a segment whose inputs need no gradient would leave the stage's output without one
        module = PipelineModule(layers=deepspeed_layers(split_model(model)), num_stages=stages,
                                loss_fn=causal_lm_loss, partition_method=method,
                                activation_checkpoint_interval=interval, checkpointable_layers=["BlockPipe"])
        self.engine, _, _, _ = deepspeed.initialize(model=module, model_parameters=module.parameters(),
                                                    config=options.ds_config)
        _quiet_tied_broadcast(module)
        self.model = self.engine
        if first_stage_norm(self.engine):  # DeepSpeed would clip by the first stage's gradients (pipe_clip.py)
            comm = Collectives(dist_info)
            self.engine.clip_fp32_gradients = lambda: clip_whole_model(self.engine, comm)
        self.measure_states = False
        self._pending_states: dict[str, Any] | None = None
        self.stage = self.engine.stage_id
        self.busy = BusyClock(dist_info.device)  # compute time of this stage, for the bubble (CPU)
        instructions = dict(self.engine._INSTRUCTION_MAP)  # an instance copy: DeepSpeed looks it up on self
        for kind in (schedule.ForwardPass, schedule.BackwardPass):
            instructions[kind] = self.busy.wrap(instructions[kind])
        for kind in (schedule.ReduceTiedGrads, schedule.ReduceGrads, schedule.OptimizerStep):  # after the flush
            instructions[kind] = self.busy.wrap(instructions[kind], "excluded")
        step = instructions[schedule.OptimizerStep]

        def counted_step(*args: Any, **kwargs: Any) -> Any:
            if self.measure_states:  # the gradients exist only until the step (ZeRO-0 frees them after it)
                self._pending_states = count_deepspeed(self.engine)
            return step(*args, **kwargs)

        instructions[schedule.OptimizerStep] = counted_step
        self.engine._INSTRUCTION_MAP = instructions
        self.engine.train_batch = self.busy.wrap(self.engine.train_batch, "span")

    def train_step(self, batches: list[Any]) -> Any:
        """One optimizer step over ``batches`` (one per micro-step): inputs enter the first stage, labels the
        last; returns the loss averaged over micro-batches and data-parallel replicas (on every rank)."""
        loss = self.engine.train_batch(data_iter=iter([(batch, batch) for batch in batches]))
        return loss.detach()

    def busy_seconds(self) -> tuple[float, float] | None:
        """This stage's (compute, schedule span) seconds in the last step (CPU), for the measured bubble."""
        return self.busy.take()

    def replicas(self) -> tuple[Any, Any] | None:
        """The data-parallel ranks of a stage hold the same layers (ZeRO 0-1: DeepSpeed's pipeline refuses 2-3)."""
        return self.engine.data_parallel_group, list(self.engine.module.parameters())
