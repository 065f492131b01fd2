"""One explicit training layout on GPUs (pure, stdlib only): the model's shape, the degrees, the batch and the
options that change time and memory, spelled as ``dsbench launch`` and ``compare`` spell them. Its checks refuse
what no framework could run, in one line each."""

from __future__ import annotations

from dataclasses import dataclass

from dsbench.errors import UserError
from dsbench.models import FUSED, LAYER_NORM, PROJECTION_NORM, QK_NORM, ModelShape
from dsbench.strategies import FIXED, GPU_DATA_PARALLEL

SCHEDULES = ("gpipe", "1f1b", "interleaved", "interleaved-zb")
"""``interleaved-zb``: torch's ScheduleInterleavedZeroBubble, interleaved 1F1B with the weight gradients moved into
the bubble (Qi et al. 2024), as ``dsbench launch --pipeline-schedule interleaved-zb`` runs it."""
RECOMPUTE = ("none", "full", "selective", "op")
"""``selective``: the attention core only (Korthikanti et al. 2022); ``op``: torchtitan's per-op selective
checkpointing (every matmul output but every second one, and the attention kernel's output, are saved; the rest
of the block is recomputed)."""
ARCHS = ("gpt", "llama")
OFFLOADED = {s.name: (f"zero{s.zero}", s.offload_param != "none") for s in FIXED.values() if s.offload == "cpu"}
"""compare's CPU-offload strategies (``zero2_offload``; ``zero3_offload``, parameters too) as the GPU model prices
them: the sharding, and whether ZeRO-3's parameters are on the host. The oracle schema's ``strategy`` may name
them."""
PRICED = (*GPU_DATA_PARALLEL, *OFFLOADED)
"""Every strategy name the GPU model prices (``plan --layout``, the replay's ``strategy``)."""
KERNELS = ("hf", "eager", "megatron")
"""How the non-GEMM ops run: ``hf`` as the Hugging Face modules dsbench's worker trains (one kernel per torch op,
with transformers' casts and copies), ``eager`` as torchtitan's leaner modules write them, ``megatron``:
Megatron-LM's fused kernels (LayerNorm, bias-GELU, bias-dropout-add, scale-mask-softmax). ``compile`` fuses any."""


def runs_autocast(strategy: str, kernels: str) -> bool:
    """Whether dsbench's worker trains this layout's fp32 weights under torch.autocast: its own DDP (and single)
    engine on the HF modules (worker/engines/native.py); DeepSpeed, FSDP and Megatron train 16-bit weights."""
    return strategy == "ddp" and kernels == "hf"


@dataclass(frozen=True, slots=True)
class Shape:
    """A decoder-only transformer. ``gpt``: LayerNorm, GELU MLP (two matrices), learned positions; ``llama``:
    RMSNorm, SwiGLU MLP (three matrices), RoPE, grouped-query attention (kv_heads < heads)."""

    arch: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    ffn: int
    vocab: int
    head_dim: int = 0
    """A head's width where the model states one that is not hidden / heads (Mistral-Nemo's 128 on 5120 / 32);
    0: hidden / heads."""
    qk_norm: bool = False
    """Each query and key head is normalised before RoPE (Qwen3's q_norm and k_norm): two more RMSNorms per block,
    over q and k, inside the TP region."""
    fused: bool = False
    """q|k|v in one matrix and gate|up in another (Phi-3: :data:`dsbench.models.FUSED`): the same weights and FLOPs,
    in fewer tensors."""
    tied: bool | None = None
    """The output layer is the token embedding (one matrix for both). None: the arch's habit, GPT-3's and Megatron's
    tied (``gpt``), Llama's untied (``llama``); a model's shape says its own (Gemma and Qwen3-0.6B tie theirs)."""
    family: str = ""
    """The model's family (:data:`dsbench.models.Arch`) where the shape is a model's, for what dsbench can launch of
    it; "": a shape given by flags, read as ``gpt2`` for ``gpt`` and ``llama`` for ``llama``."""

    @property
    def launch_family(self) -> str:
        """The family whose splits a launch of this shape would be checked against (model_checks.py)."""
        return self.family or ("gpt2" if self.arch == "gpt" else "llama")

    @property
    def head_width(self) -> int:
        return self.head_dim or self.hidden // self.heads

    @property
    def q_width(self) -> int:
        """Queries (and the attention's output): heads x head width, the hidden size unless head_dim says other."""
        return self.heads * self.head_width

    @property
    def kv_width(self) -> int:
        return self.kv_heads * self.head_width

    @property
    def mlp_matrices(self) -> int:
        return 3 if self.arch == "llama" else 2

    def layer_params(self) -> int:
        """Weights of one block: attention (Q, O at the heads' width; K, V at the key/value heads') and the MLP
        (norm and bias terms neglected: < 0.1% at these widths)."""
        h = self.hidden
        return 2 * h * self.q_width + 2 * h * self.kv_width + self.mlp_matrices * h * self.ffn

    def layer_tensors(self) -> int:
        """Parameter tensors of one block as the HF modules hold them: GPT-2's two LayerNorms and four linears,
        each a weight and a bias (12); Llama's two RMSNorm weights and seven bias-free linears (9), four when fused
        (6). A ZeRO engine's hooks and gradient copies run per tensor."""
        return 12 if self.arch == "gpt" else 6 if self.fused else 9

    @property
    def head_tied(self) -> bool:
        """Whether the output layer is the embedding: :attr:`tied` where given, else the arch's habit."""
        return self.arch == "gpt" if self.tied is None else self.tied

    def params(self) -> int:
        """Blocks plus the input embedding and an untied output layer (a tied one counted once, as transformers
        counts it; until 2026-11-30 every ``llama`` shape counted two, so a Gemma-2B read 3.03B parameters for
        its 2.51B)."""
        embeddings = self.vocab * self.hidden * (1 if self.head_tied else 2)
        return self.layers * self.layer_params() + embeddings

    def end_tensors(self) -> int:
        """Parameter tensors outside the blocks: the token embedding, GPT's learned positions (not GPT-NeoX's: it
        rotates), the final norm (GPT's LayerNorm a weight and a bias) and an untied output layer (GPT 4, GPT-NeoX 4,
        Llama 3, a tied Llama 2)."""
        gpt = self.arch == "gpt"
        positions = gpt and self.family in ("", "gpt2")
        return 1 + int(positions) + (2 if gpt else 1) + (0 if self.head_tied else 1)


def shape_of_model(s: ModelShape) -> Shape:
    """A model's shape as the GPU model reads it: GPT-2 and GPT-NeoX as ``gpt`` (GPT-NeoX's rotary part of each head
    priced as GPT's positions, a few element-wise passes), the Llama-layout families as ``llama`` (Qwen3's
    q_norm/k_norm, and OLMo-2's over the whole projections, as ``qk_norm``: the same elements normalised), the
    head width where the model states one."""
    return Shape("gpt" if s.arch in LAYER_NORM else "llama", s.layers, s.hidden, s.heads, s.kv_heads, s.intermediate,
                 s.vocab_size, s.head_dim or 0, qk_norm=s.arch in (*QK_NORM, *PROJECTION_NORM),
                 fused=s.arch in FUSED, tied=s.tied_embeddings, family=s.arch)


@dataclass(frozen=True, slots=True)
class Layout:
    shape: Shape
    seq_len: int
    gpu: str
    gpus: int
    gpus_per_node: int
    strategy: str = "ddp"
    tp: int = 1
    pp: int = 1
    cp: int = 1
    schedule: str = "1f1b"
    virtual_stages: int = 1
    micro_batch: int = 1
    global_batch: int = 1
    recompute: str = "none"
    sequence_parallel: bool = False
    precision: str = "bf16"
    compile: bool = False
    kernels: str = "eager"
    attention: str = "flash"
    """``flash``: a fused kernel that keeps the score matrix on chip and skips masked blocks; ``eager``: the
    scores materialised in memory (Megatron 2021-22's fused softmax)."""
    intra_gbs: float | None = None
    inter_gbs: float | None = None
    async_tp: bool = False
    """TP collectives overlapped with the matmuls (torchtitan's Async TP, micro-pipelined)."""
    autocast: bool = False
    """The forward runs under ``torch.autocast`` over fp32 weights (torch AMP; dsbench's single, DDP, TP and pipeline
    engines) instead of on 16-bit weights (DeepSpeed's bf16 engine, FSDP's mixed precision, Megatron)."""
    cp_comm: str = "p2p"
    """How the ``cp`` ranks of a sequence attend: ``p2p``, ring attention passing K and V blocks (torch's and
    Megatron's default); ``a2a``, DeepSpeed Ulysses' all-to-alls that swap the sequence split for a head split
    around the attention core (Jacobs et al. 2023, arXiv:2309.14509; Megatron-core's ``cp_comm_type a2a``). Either
    way each rank holds s/cp tokens outside attention and does 1/cp of its FLOPs."""
    offload: bool = False
    """ZeRO-Offload: DeepSpeed's optimizer (fp32 master weights, moments and gradients) on the host, stepped by
    DeepSpeedCPUAdam (``--offload cpu``; compare's ``zero2_offload``)."""
    offload_param: bool = False
    """ZeRO-3's 16-bit parameter partitions on the host too, fetched for every gather (``--offload-param cpu``;
    compare's ``zero3_offload``)."""

    @property
    def dp(self) -> int:
        return self.gpus // (self.tp * self.pp * self.cp)

    @property
    def hybrid_shard(self) -> int:
        """HSDP's (fsdp_hybrid's) shard group: the data-parallel ranks of one node (its GPUs over tp x cp, the
        ranks beside them holding other slices), at most every data-parallel rank; the nodes replicate it."""
        return max(1, min(self.gpus_per_node // (self.tp * self.cp), self.dp))

    @property
    def chunks(self) -> int:
        """Model chunks per pipeline stage: the virtual stages under an interleaved schedule, else 1."""
        return self.virtual_stages if self.schedule.startswith("interleaved") else 1

    @property
    def stage_layers(self) -> int:
        """Blocks on the busiest pipeline stage: layers split over pp x v chunks, the remainder on some stages
        (torchtitan splits unevenly; Megatron needs an even split)."""
        return -(-self.shape.layers // (self.pp * self.chunks)) * self.chunks

    @property
    def micro_batches(self) -> int:
        """Micro-batches per optimizer step on each pipeline (grad accumulation × pipeline micro-batches)."""
        return self.global_batch // (self.dp * self.micro_batch)

    def check(self) -> Layout:
        """Refuse a layout no framework can run (one line naming the input)."""
        s = self.shape
        if s.arch not in ARCHS:
            raise UserError(f"arch {s.arch!r}: use one of {', '.join(ARCHS)}")
        if not 1e6 <= s.params() <= 1e15:
            raise UserError(f"the shape has {s.params():.3g} parameters: dsbench plans 1e6 to 1e15")
        if self.strategy not in GPU_DATA_PARALLEL:
            raise UserError(f"strategy {self.strategy!r}: use one of {', '.join(GPU_DATA_PARALLEL)}")
        if self.kernels not in KERNELS:
            raise UserError(f"kernels {self.kernels!r}: use one of {', '.join(KERNELS)}")
        if self.recompute not in RECOMPUTE:
            raise UserError(f"recompute {self.recompute!r}: use one of {', '.join(RECOMPUTE)}")
        if self.gpus % (self.tp * self.pp * self.cp):
            split = "ulysses" if self.cp_comm == "a2a" else "cp"
            raise UserError(f"tp {self.tp} x pp {self.pp} x {split} {self.cp} does not divide {self.gpus} GPUs")
        if s.heads % self.tp or s.kv_heads % self.tp and self.tp % s.kv_heads:
            raise UserError(f"tp {self.tp} must divide the {s.heads} heads and the {s.kv_heads} KV heads (or be a "
                            "multiple of the KV heads, which are then replicated)")
        self._check_context_parallel()
        if self.pp > 1 and self.schedule not in SCHEDULES:
            raise UserError(f"schedule {self.schedule!r}: use one of {', '.join(SCHEDULES)}")
        if s.layers < self.pp * self.chunks:
            raise UserError(f"{s.layers} layers do not fill pp {self.pp} x {self.chunks} virtual stages")
        if self.global_batch % (self.dp * self.micro_batch):
            raise UserError(f"global batch {self.global_batch} is not a multiple of data parallel {self.dp} x "
                            f"micro-batch {self.micro_batch}")
        if self.schedule.startswith("interleaved") and self.pp > 1 and self.micro_batches % self.pp:
            raise UserError(f"interleaved 1F1B needs micro-batches ({self.micro_batches}) divisible by pp {self.pp}")
        if self.schedule == "interleaved-zb" and self.pp > 1 and self.virtual_stages < 2:
            raise UserError("the interleaved zero-bubble schedule needs 2 or more virtual stages (--virtual-stages)")
        if self.offload and self.strategy not in ("zero1", "zero2", "zero3"):
            raise UserError(f"offload: DeepSpeed offloads the optimizer under ZeRO-1, 2 or 3, not {self.strategy}")
        if self.offload_param and (self.strategy != "zero3" or not self.offload):  # alone: DeepSpeed trains it, but
            # this model has no host-link term for it (the CPU planner's engine_time.offload_seconds has)
            raise UserError("offload_param: the GPU model prices ZeRO-3's parameters offloaded with its optimizer "
                            "offloaded too (DeepSpeed offloads parameters under ZeRO-3 only)")
        if self.sequence_parallel and self.tp == 1:
            raise UserError("sequence parallelism shards along the TP group: it needs tp > 1")
        return self

    def _check_context_parallel(self) -> None:
        """The sequence split: Ulysses gives each rank whole heads and an equal shard; the ring takes 2 x cp chunks."""
        if self.cp_comm not in ("p2p", "a2a"):
            raise UserError(f"cp_comm {self.cp_comm!r}: use p2p (ring attention) or a2a (Ulysses)")
        if self.cp_comm == "a2a":
            heads, kv = self.shape.heads // self.tp, max(1, self.shape.kv_heads // self.tp)
            if heads % self.cp or (kv % self.cp and self.cp % kv):
                raise UserError(f"Ulysses {self.cp} must divide the {heads} heads per TP rank, and their {kv} KV heads "
                                "or be a multiple of them (the all-to-all gives each rank whole heads)")
            if self.seq_len % self.cp:
                raise UserError(f"seq_len {self.seq_len} must split into Ulysses {self.cp} equal shards")
        elif self.seq_len % (self.cp * (2 if self.cp > 1 else 1)):
            raise UserError(f"seq_len {self.seq_len} must split into 2 x cp {self.cp} chunks (load-balanced ring)")
