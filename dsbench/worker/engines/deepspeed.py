"""DeepSpeed: ``deepspeed.initialize`` from the rendered config (ZeRO 0-3, cpu/nvme offload)."""

from __future__ import annotations

from typing import Any

from dsbench.worker.engines.base import EngineOptions, accumulate
from dsbench.worker.state_bytes import count_deepspeed


class DeepSpeedEngine:
    """The DeepSpeed engine owns optimizer, scheduler, accumulation, clipping and loss scaling."""

    name = "deepspeed"

    def __init__(self, model: Any, options: EngineOptions, dist_info: Any) -> None:
        import deepspeed

        assert options.ds_config is not None
        self.engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(),
                                                    config=options.ds_config)
        if options.compile:
            self.engine.compile()  # DeepSpeed's own torch.compile of its module, aware of its ZeRO hooks
        self.model = self.engine
        self.options = options
        self._pending_states: dict[str, Any] | None = None
        self.measure_states = False

    def forward_backward(self, input_ids: Any, last_micro: bool) -> Any:
        loss = self.engine(input_ids=input_ids, labels=input_ids).loss
        self.engine.backward(loss)  # scales by 1/grad_accum; reduces (ZeRO: reduce-scatters) at the boundary
        if last_micro and self.measure_states:
            self._pending_states = count_deepspeed(self.engine)  # gradients exist only until step()
        self.engine.step()  # DeepSpeed steps the optimizer only at the accumulation boundary
        return loss.detach()

    def step(self) -> None:
        """Nothing to do: ``engine.step()`` ran after each micro-step."""

    def zero_grad(self) -> None:
        """DeepSpeed zeroes gradients itself at the boundary."""

    def train_step(self, batches: list[Any]) -> Any:
        return accumulate(self, batches)

    def model_state_bytes(self) -> dict[str, Any]:
        after = count_deepspeed(self.engine)
        if self._pending_states is None:
            return after
        merged = dict(self._pending_states)
        merged["optimizer_states"] = after["optimizer_states"]  # moments exist only after the first step
        merged["devices"] = {**self._pending_states["devices"],
                             "optimizer_states": after["devices"]["optimizer_states"]}
        merged["total"] = sum(merged[k] for k in ("params", "grads", "optimizer_states", "master_weights"))
        return merged

    def lr(self) -> float:
        return float(self.engine.get_lr()[0])
