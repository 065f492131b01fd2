"""No checkpoint file can run code: a planted payload in each kind of file is refused by name before anything is
loaded, and torch's forced weights-only load refuses it even where DeepSpeed asks for weights_only=False."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import pytest

from dsbench.errors import UserError
from dsbench.worker import safe_load

torch = pytest.importorskip("torch")


class Payload:
    """What an attacker plants: unpickling it runs a shell command."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


# every kind of file a dsbench checkpoint holds, as it is named
KINDS = {
    "model states": "global_step10/mp_rank_00_model_states.pt",
    "optimizer states": "global_step10/zero_pp_rank_0_mp_rank_00_optim_states.pt",
    "universal checkpoint file": "global_step10_universal/zero/transformer.wte.weight/fp32.pt",
    "rank file": "global_step10/dsbench_rank0.pt",
    "pipeline layer file": "global_step10/layer_01-model_states.pt",
}


@pytest.fixture
def marker(tmp_path):
    path = tmp_path / "pwned"
    yield path
    assert not path.exists(), "the payload ran"


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_planted_payload_is_refused_by_name_before_loading(tmp_path, marker, kind):
    path = tmp_path / KINDS[kind]
    path.parent.mkdir(parents=True)
    torch.save({"module": {"w": torch.zeros(2)}, "extra": Payload(marker)}, path)
    folder = path.parent if "universal" not in kind else tmp_path / "global_step10_universal"
    with pytest.raises(UserError, match=rf"{path.name}: holds posix.system, which no checkpoint"):
        safe_load.check_folder(folder)


@pytest.mark.parametrize("kind", list(KINDS))
def test_forced_weights_only_refuses_even_an_explicit_weights_only_false(tmp_path, marker, kind, monkeypatch):
    """What DeepSpeed's checkpoint engine, zero_to_fp32 and ds_to_universal call: torch.load(weights_only=False)."""
    monkeypatch.setenv(safe_load.FORCE_ENV, "0")
    safe_load.install()
    assert os.environ[safe_load.FORCE_ENV] == "1"
    path = tmp_path / KINDS[kind]
    path.parent.mkdir(parents=True)
    torch.save({"module": {"w": torch.zeros(2)}, "extra": Payload(marker)}, path)
    with pytest.raises(pickle.UnpicklingError, match="system"):
        torch.load(path, map_location="cpu", weights_only=False)


def test_dcp_metadata_payload_is_refused(tmp_path, marker):
    metadata = tmp_path / ".metadata"
    metadata.write_bytes(pickle.dumps(Payload(marker)))
    with pytest.raises(UserError, match=r"\.metadata: holds posix.system"):
        safe_load.check_folder(tmp_path)
    with pytest.raises(UserError, match=r"\.metadata: holds posix.system, which a torch.distributed.checkpoint"):
        safe_load.load_dcp_metadata(metadata)
    with pytest.raises(UserError):  # what export and resume call instead of torch's pickle.load
        safe_load.safe_reader(tmp_path).read_metadata()


def test_real_dcp_metadata_and_deepspeed_types_load(tmp_path):
    """The allow-lists admit what torch and DeepSpeed really write (a DCP save; DeepSpeed's ZeRO state types)."""
    import torch.distributed.checkpoint as dcp

    state = {"model": {"w": torch.arange(6.0).reshape(2, 3)}, "optim": {"step": 3, "lr": 0.1}}
    dcp.save(state, checkpoint_id=str(tmp_path / "dcp"), no_dist=True)
    safe_load.check_folder(tmp_path / "dcp")
    metadata = safe_load.safe_reader(tmp_path / "dcp").read_metadata()
    assert "model.w" in metadata.state_dict_metadata
    loaded = {"model": {"w": torch.zeros(2, 3)}, "optim": {"step": 0, "lr": 0.0}}
    safe_load.install()
    dcp.load(loaded, storage_reader=safe_load.safe_reader(tmp_path / "dcp"), no_dist=True)
    assert torch.equal(loaded["model"]["w"], state["model"]["w"]) and loaded["optim"]["step"] == 3

    from deepspeed.runtime.fp16.loss_scaler import LossScaler
    from deepspeed.runtime.zero.config import ZeroStageEnum

    path = tmp_path / "zero_pp_rank_0_mp_rank_00_optim_states.pt"
    torch.save({"zero_stage": ZeroStageEnum.gradients, "loss_scaler": LossScaler(1.0)}, path)
    safe_load.check_folder(tmp_path)
    assert torch.load(path, weights_only=False)["zero_stage"] == ZeroStageEnum.gradients


@pytest.mark.parametrize("content", [b"", b"PK\x03\x04garbage", b"\x80\x05garbage", b"not a pickle at all"])
def test_a_damaged_file_is_one_line(tmp_path, content):
    (tmp_path / "mp_rank_00_model_states.pt").write_bytes(content)
    with pytest.raises(UserError, match="mp_rank_00_model_states.pt: not a readable checkpoint file"):
        safe_load.check_folder(tmp_path)


def test_a_truncated_dcp_shard_or_metadata_is_one_line(tmp_path):
    """What export and resume call (checkpoint.damaged around dcp.load with the safe reader): a shard cut short is
    one line naming the checkpoint; a metadata file cut short is refused before loading."""
    import torch.distributed.checkpoint as dcp

    from dsbench.worker.checkpoint import damaged

    dcp.save({"model": {"w": torch.arange(1000.0)}}, checkpoint_id=str(tmp_path), no_dist=True)
    shard = next(tmp_path.glob("*.distcp"))
    shard.write_bytes(shard.read_bytes()[:100])
    with (pytest.raises(UserError, match="the checkpoint cannot be read .*damaged, truncated or incomplete"),
          damaged(tmp_path)):
        dcp.load({"model": {"w": torch.zeros(1000)}}, storage_reader=safe_load.safe_reader(tmp_path), no_dist=True)
    metadata = tmp_path / ".metadata"
    metadata.write_bytes(metadata.read_bytes()[:40])
    with pytest.raises(UserError, match=r"\.metadata: not a readable checkpoint file"):
        safe_load.check_folder(tmp_path)


def test_a_rank_file_that_is_a_list_is_one_line(tmp_path):
    from dsbench.worker import checkpoint

    torch.save([1, 2, 3], tmp_path / "dsbench_rank0.pt")
    with pytest.raises(UserError, match="dsbench_rank0.pt: not a dsbench rank file"):
        checkpoint._load_rank_file(tmp_path, 0, same_world=True)
    (tmp_path / "dsbench_rank0.pt").write_bytes(b"garbage")
    with pytest.raises(UserError, match="dsbench_rank0.pt: the checkpoint cannot be read"):
        checkpoint._load_rank_file(tmp_path, 0, same_world=True)
    # on the same world size rank 1's own file must be there (it resumed with rank 0's schedule and no RNG, silently)
    with pytest.raises(UserError, match=r"dsbench_rank1.pt is missing: the checkpoint is incomplete \(rank 1's RNG"):
        checkpoint._load_rank_file(tmp_path, 1, same_world=True)


@pytest.mark.parametrize("strategy", ["deepspeed", "ddp", "fsdp", "torch_tp", "torch_pp", "torch_3d", "single"])
def test_a_rank_scans_the_checkpoint_before_it_joins_or_builds_anything(tmp_path, marker, monkeypatch, strategy):
    """What lets one real launch (tests/integration/test_checkpoint.py) stand for every format: a rank's ``prepare``
    refuses a planted file of ``--resume`` before it joins the process group, builds a model or an engine, or reads
    a format's own files, under any strategy."""
    import json
    from types import SimpleNamespace

    from dsbench import checkpoints
    from dsbench.worker import dist
    from dsbench.worker import run as worker_run

    tag = tmp_path / "ck" / "global_step4"
    tag.mkdir(parents=True)
    written = checkpoints.Manifest(format=1, step=4, tag=tag.name, strategy="ddp", storage="dcp", world_size=2,
                                   dp=2, tp=1, pp=1, zero_stage=None, written_at="now", definition={
                                       "model": {"name": "gpt2-tiny"}, "seq_len": 128, "seed": 1, "global_batch": 4,
                                       "precision": "fp32"})
    (tag / checkpoints.MANIFEST).write_text(json.dumps(written.to_dict()))
    (tag / ".metadata").write_bytes(pickle.dumps(Payload(marker)))
    resolved = SimpleNamespace(strategy=strategy, shape=None, dims=None, ds_config=None, micro_batch=1, grad_accum=1,
                               precision="fp32", fsdp=None, options=None)
    monkeypatch.setattr(worker_run, "resolve", lambda *args: resolved)
    monkeypatch.setattr(worker_run.safe_load, "install", lambda **kw: None)
    monkeypatch.setattr(dist, "env_rank", lambda: (0, 2, 0))

    def too_soon(*args, **kw):
        raise AssertionError("reached before the checkpoint was scanned")

    for name in ("_join", "_run_dir", "_loop_settings", "_check_resume"):
        monkeypatch.setattr(worker_run, name, too_soon)
    spec = SimpleNamespace(resume=str(tag), checkpoint_dir=None, steps=8, warmup=1)
    with pytest.raises(UserError, match=r"\.metadata: holds posix.system"):
        worker_run.prepare(spec)
