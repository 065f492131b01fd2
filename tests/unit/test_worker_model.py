"""The models the worker builds: SDPA attention for every family dsbench builds (the issue's "checked"), eager
attention where transformers has no SDPA for the class."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from dsbench.models import LLAMA_LIKE, PRESETS
from dsbench.worker.model import build_model


@pytest.mark.parametrize("arch", ["gpt2", *LLAMA_LIKE])
def test_every_family_dsbench_builds_attends_through_sdpa(arch):
    shape = PRESETS["gpt2-tiny"] if arch == "gpt2" else replace(PRESETS["llama-tiny"], arch=arch)
    model = build_model(shape, seed=0)
    assert model.config._attn_implementation == "sdpa"
    # what transformers dispatches to: the SDPA kernel of its own registry, not the eager matmul-softmax path
    attention = next(m for m in model.modules() if type(m).__name__.endswith("Attention"))
    assert attention.config._attn_implementation == "sdpa"


@pytest.mark.parametrize("name", ["gpt2-tiny", "llama-tiny"])
def test_the_loss_is_transformers_causal_lm_loss_named_so_it_does_not_warn(name, capsys):
    """GPT-2's class name matches none of transformers' loss types, so transformers warned on every rank that it
    fell back to ForCausalLMLoss; the worker names that loss, and the loss is the same function."""
    from transformers.loss.loss_utils import LOSS_MAPPING

    model = build_model(PRESETS[name], seed=0)
    assert model.loss_type == "ForCausalLM" and model.loss_function is LOSS_MAPPING["ForCausalLM"]
    ids = torch.randint(0, model.config.vocab_size, (1, 8), generator=torch.Generator().manual_seed(0))
    model(input_ids=ids, labels=ids)
    assert "loss_type" not in capsys.readouterr().err


def test_collectives_old_names_do_not_warn_on_the_ranks():
    """DeepSpeed and FSDP2 call torch's deprecated collective names; the ranks' output keeps none of it."""
    import warnings

    from dsbench.worker.dist import quiet_renamed_collectives

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        quiet_renamed_collectives()
        warnings.warn("`torch.distributed.all_gather_into_tensor` is deprecated. Please use "
                      "`torch.distributed.all_gather_single` instead.", FutureWarning, stacklevel=1)
        warnings.warn("something else is deprecated", FutureWarning, stacklevel=1)
    assert [str(w.message) for w in caught] == ["something else is deprecated"]


def test_a_class_without_sdpa_is_built_with_eager_attention_and_the_same_model(monkeypatch):
    from transformers import LlamaForCausalLM

    ids = torch.randint(0, 4096, (1, 16), generator=torch.Generator().manual_seed(0))
    sdpa = build_model(PRESETS["llama-tiny"], seed=0)
    monkeypatch.setattr(LlamaForCausalLM, "_supports_sdpa", False)
    eager = build_model(PRESETS["llama-tiny"], seed=0)
    assert eager.config._attn_implementation == "eager"
    # the oracle: the same weights under transformers' two attention paths give the same logits
    torch.testing.assert_close(eager(input_ids=ids).logits, sdpa(input_ids=ids).logits, rtol=1e-5, atol=1e-5)


def _saved_bytes(recompute: str) -> int:
    from dsbench.worker.state_bytes import SavedActivations

    model = build_model(PRESETS["llama-tiny"], seed=0, recompute=recompute)
    ids = torch.randint(0, 4096, (2, 64), generator=torch.Generator().manual_seed(0))
    with SavedActivations(model) as saved:
        model(input_ids=ids, labels=ids).loss.backward()
    return saved.bytes


def test_saved_activations_count_what_the_backward_keeps_and_no_weights():
    """One step of llama-tiny: full recompute keeps only each block's input (and what its recompute saves again in
    the backward), fewer bytes than none; a linear layer's forward saves its input, never its weight."""
    from dsbench.worker.state_bytes import SavedActivations

    none, full = _saved_bytes("none"), _saved_bytes("full")
    assert 0 < full < none
    layer, x = torch.nn.Linear(64, 64), torch.randn(8, 64, requires_grad=True)
    with SavedActivations(layer) as saved:
        layer(x).sum().backward()
    assert saved.bytes == x.untyped_storage().nbytes()  # the input, 8 x 64 fp32; the 64 x 64 weight excluded


def test_a_saved_collective_output_counts_its_buffer():
    """A row-parallel layer's all-reduced output reaches the next op as torch's AsyncCollectiveTensor, a wrapper with no
    storage of its own; OLMo-2's norm after attention saves it (the launch of `--strategy torch_tp --model olmo2-tiny`
    stopped on it, "Attempted to access the data pointer on an invalid python storage"). Its bytes are its buffer's."""
    from torch.distributed._functional_collectives import AsyncCollectiveTensor

    from dsbench.worker.state_bytes import SavedActivations

    x = torch.randn(4, 8, requires_grad=True)
    # the model is kept alive, as a run's is: a module freed after the count read its parameters' addresses gave
    # them back to the allocator, and a buffer at one of them was taken for a parameter (saved 0 in a clean clone,
    # 2026-12-01)
    model = torch.nn.Linear(8, 8)
    with SavedActivations(model) as saved:
        buffer = x * 2
        AsyncCollectiveTensor(buffer).pow(2).sum().backward()
    assert saved.bytes == saved.peak == buffer.untyped_storage().nbytes() == 4 * 8 * 4


def test_the_peak_of_saved_activations_is_what_the_graph_holds_at_once():
    """Two micro-batches through one llama-tiny: both forwards before either backward (GPipe's order) hold twice
    what one holds; a backward between them (1F1B's order) holds one at a time. The one-micro-batch run's bytes are
    the oracle for each."""
    from dsbench.worker.state_bytes import SavedActivations

    model = build_model(PRESETS["llama-tiny"], seed=0)
    ids = [torch.randint(0, 4096, (2, 64), generator=torch.Generator().manual_seed(s)) for s in (0, 1)]
    with SavedActivations(model) as one:
        model(input_ids=ids[0], labels=ids[0]).loss.backward()
    assert one.peak == one.bytes > 0
    with SavedActivations(model) as gpipe:
        losses = [model(input_ids=i, labels=i).loss for i in ids]
        for loss in losses:
            loss.backward()
    del losses
    with SavedActivations(model) as one_at_a_time:
        for i in ids:
            model(input_ids=i, labels=i).loss.backward()
    assert (gpipe.peak, one_at_a_time.peak) == (2 * one.bytes, one.bytes)
    # bytes are unique addresses: the second micro-batch's storages may reuse the first's, freed by its backward
    assert gpipe.bytes == 2 * one.bytes and one.bytes <= one_at_a_time.bytes <= 2 * one.bytes


def test_a_retained_graph_frees_its_saved_tensors_when_it_is_dropped():
    """A zero-bubble schedule's input-gradient pass keeps the graph (retain_graph=True) and the weight-gradient pass
    frees only its own path: what is left must go when the graph goes. sigmoid saves its own output; a holder that
    kept that output with its grad_fn would close a cycle through the graph and hold it for ever (it did, and read
    as torch keeping 0.6 micro-batch per micro-batch on the last stage). Oracle: nothing alive once the graph is
    dropped, and the gradient unchanged by the hooks."""
    from dsbench.worker.state_bytes import SavedActivations

    layer, x = torch.nn.Linear(64, 64), torch.randn(8, 64, requires_grad=True)
    expected = torch.autograd.grad(layer(x).sigmoid().sum(), x)[0]
    with SavedActivations(layer) as saved:
        out = layer(x).sigmoid()
        grad = torch.autograd.grad(out.sum(), x, retain_graph=True)[0]  # the input's gradient only, graph kept
        assert saved._live_bytes == saved.peak > 0
        del out
    assert saved._live_bytes == 0
    torch.testing.assert_close(grad, expected)


def test_the_shipped_tokenizer_gives_transformers_ids_and_saves_as_it(tmp_path):
    """Oracle: transformers' PreTrainedTokenizerFast over the same tokenizer.json (what the worker used before it
    read the file with `tokenizers` directly): the same ids on the whole embedded corpus, the same end-of-text id,
    and the same files saved beside a checkpoint."""
    from transformers import PreTrainedTokenizerFast

    from dsbench.paths import data_file
    from dsbench.worker.data import load_tokenizer, token_ids

    shipped = load_tokenizer(None)
    oracle = PreTrainedTokenizerFast(tokenizer_file=str(data_file("tokenizer.json")), eos_token="<|endoftext|>")
    assert token_ids(shipped, None) == token_ids(oracle, None)
    assert shipped.eos_token_id == oracle.eos_token_id
    shipped.save_pretrained(tmp_path / "a")
    oracle.save_pretrained(tmp_path / "b")
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == sorted(p.name for p in (tmp_path / "b").iterdir())
    assert (tmp_path / "a" / "tokenizer.json").read_text() == (tmp_path / "b" / "tokenizer.json").read_text()


def test_selective_recompute_checkpoints_the_16_bit_copies_under_autocast(monkeypatch):
    """Under autocast over fp32 weights Llama's RoPE returns q and k in fp32; the checkpoint around SDPA must hold
    the 16-bit copies SDPA itself runs on (and would save), not those fp32 inputs: on an H200 they cost 0.75 GiB
    at 4 x 2048 on the 1.1B Llama (tests/unit/test_gpu_recompute.py). In fp32 nothing is cast."""
    import torch.utils.checkpoint as checkpointing

    seen: list[tuple[torch.dtype, ...]] = []
    original = checkpointing.checkpoint

    def spy(function, *args, **kwargs):
        seen.append(tuple(a.dtype for a in args[:3]))
        return original(function, *args, **kwargs)

    monkeypatch.setattr(checkpointing, "checkpoint", spy)
    model = build_model(PRESETS["llama-tiny"], seed=0, recompute="selective")
    ids = torch.randint(0, 4096, (2, 64), generator=torch.Generator().manual_seed(0))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        model(input_ids=ids, labels=ids).loss.backward()
    layers = PRESETS["llama-tiny"].layers
    assert seen == [(torch.bfloat16,) * 3] * layers
    seen.clear()
    model(input_ids=ids, labels=ids).loss.backward()
    assert seen == [(torch.float32,) * 3] * layers


def test_a_steps_model_states_take_the_gradients_before_the_step_and_the_moments_after():
    """A ZeRO-0 engine frees its gradients at the optimizer step, and the moments appear only at the first one:
    the step's states are the count before it, with the optimizer states from the count after it."""
    from dsbench.worker.state_bytes import with_optimizer_states

    def counted(params, grads, moments):
        return {"params": params, "grads": grads, "optimizer_states": moments, "master_weights": 0,
                "total": params + grads + moments, "devices": {"params": {"cpu": params}, "grads": {"cpu": grads},
                                                              "optimizer_states": {"cpu": moments} if moments else {}}}

    before, after = counted(100, 100, 0), counted(100, 0, 200)
    assert with_optimizer_states(None, after) == after
    merged = with_optimizer_states(before, after)
    assert (merged["params"], merged["grads"], merged["optimizer_states"], merged["total"]) == (100, 100, 200, 400)
    assert merged["devices"] == {"params": {"cpu": 100}, "grads": {"cpu": 100}, "optimizer_states": {"cpu": 200}}
