"""Where FP8 PTQ runs and what it needs there: pure functions of host facts (no torch, no CUDA here).

The quantize stage calibrates on the CUDA devices of the host it runs on when there are any, in the
recipe's `model.dtype` (bf16 for the GPU recipes), the model spread over up to `target.gpus` of them with
transformers' `device_map="auto"` and a `max_memory` budget per GPU (what `place` returns); on a host
without CUDA it calibrates on the CPU in float32, as before. `trtspec plan` asks the same question for the
host the recipe will be built on: for a GPU target, `target.gpus` × the target GPU (the build that writes the
engine runs there); for a cpu target, this host. It refuses (exit 2) a recipe whose PTQ cannot fit there.

Memory where PTQ runs (`Placement`):
* weights: every parameter of the HF model in the calibration dtype (`llama_params`), plus, per GPU, the
  runtime reserve (`target.runtime_reserve_gib`: CUDA context, cuBLAS workspaces);
* activations of one calibration batch (`calibration_activation_bytes`): HF's Llama forward keeps, for the
  layer being computed, the residual stream and its norm, q/k/v and the attention output, the attention
  probabilities (the eager / math SDPA path materialises [B, H, S, S]; flash kernels do not — counted, so the
  estimate is an upper bound), the MLP's gate, up and product, the logits of every position, and modelopt's
  fake-quantized copy of the largest weight (its weight quantizer runs on every forward). Only one layer is
  live at a time under `torch.no_grad()`, so these do not scale with the layer count.
With several GPUs each gets `memory − reserve − activations` for weights (the activations may land on any of
them: the last one also holds the logits), and PTQ fits when the weights fit in their sum.
"""

from __future__ import annotations

from dataclasses import dataclass, field

GIB = 2**30
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
CALIBRATION_BATCH = 4  # sequences per forward in `builder.quantize.ptq.calibrate`


@dataclass(frozen=True)
class HostFacts:
    """What PTQ can use on a host: CUDA devices (bytes of memory each, in device order) and host RAM."""

    gpu_bytes: tuple[int, ...] = ()
    ram_bytes: int = 0
    gpu_name: str = "GPU"


@dataclass(frozen=True)
class LlamaShape:
    """The numbers PTQ memory depends on (HF Llama 3)."""

    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    tied: bool = False

    def params(self) -> int:
        """Parameters of `LlamaForCausalLM`: embedding, layers (4 attention + 3 MLP matrices, 2 norms), final
        norm, LM head unless tied to the embedding."""
        c, d = self.hidden, self.head_dim
        attn = c * d * (2 * self.heads + 2 * self.kv_heads)  # q, o: [H·D, C]; k, v: [KV·D, C]
        layer = attn + 3 * c * self.intermediate + 2 * c
        return self.vocab * c * (1 if self.tied else 2) + self.layers * layer + c


def calibration_activation_bytes(s: LlamaShape, batch: int, seq_len: int, dtype: str) -> int:
    """Upper estimate of one calibration forward's live activations (module docstring), in bytes."""
    b = DTYPE_BYTES[dtype]
    tokens = batch * seq_len
    per_token = 2 * s.hidden + (s.heads + 2 * s.kv_heads) * s.head_dim + s.heads * s.head_dim  # h, norm(h), qkv, attn
    per_token += 3 * s.intermediate + s.vocab  # gate, up, act·up; logits
    scores = 2 * batch * s.heads * seq_len * seq_len  # attention scores and probabilities (math path)
    weight_copy = s.intermediate * s.hidden  # modelopt's fake-quantized copy of the largest weight
    return (tokens * per_token + scores + weight_copy) * b


@dataclass
class Placement:
    """Where PTQ runs and whether it fits (see `place`)."""

    device: str  # "cpu" | "cuda"
    gpus: int  # CUDA devices the model is spread over (0 on the CPU)
    dtype: str  # calibration dtype: float32 on the CPU, the recipe's model.dtype on GPUs
    weight_bytes: int
    activation_bytes: int
    capacity_bytes: int  # memory PTQ may use there (RAM, or Σ GPU memory − reserves)
    max_memory: dict[int, int] = field(default_factory=dict)  # CUDA: weight budget per device (device_map="auto")
    fits: bool = True
    where: str = ""  # e.g. "cpu (host RAM)" | "4 × NVIDIA H100 80GB HBM3"

    def describe(self) -> str:
        """One line for the plan and the stage log."""
        what = (
            f"{self.where}, {self.dtype}: weights {self.weight_bytes / GIB:.2f} GiB + activations "
            f"{self.activation_bytes / GIB:.2f} GiB of {self.capacity_bytes / GIB:.2f} GiB"
        )
        return what if self.fits else what + " — does not fit"

    def to_json(self) -> dict:
        return {
            "device": self.device,
            "gpus": self.gpus,
            "dtype": self.dtype,
            "weight_bytes": self.weight_bytes,
            "activation_bytes": self.activation_bytes,
            "capacity_bytes": self.capacity_bytes,
            "max_memory": {str(k): v for k, v in self.max_memory.items()},
            "fits": self.fits,
            "where": self.where,
            "text": self.describe(),
        }


def place(
    shape: LlamaShape,
    host: HostFacts,
    model_dtype: str,
    want_gpus: int,
    seq_len: int,
    reserve_bytes: int = 2 * GIB,
    batch: int = CALIBRATION_BATCH,
) -> Placement:
    """PTQ on `host`: CUDA (up to `want_gpus` devices, `model_dtype`) when it has any, else the CPU in float32."""
    if not host.gpu_bytes:
        dtype = "float32"
        weights = shape.params() * DTYPE_BYTES[dtype]
        act = calibration_activation_bytes(shape, batch, seq_len, dtype)
        return Placement(
            "cpu", 0, dtype, weights, act, host.ram_bytes, fits=weights + act <= host.ram_bytes, where="cpu (host RAM)"
        )
    n = max(1, min(want_gpus, len(host.gpu_bytes)))
    weights = shape.params() * DTYPE_BYTES[model_dtype]
    act = calibration_activation_bytes(shape, batch, seq_len, model_dtype)
    budget = {i: max(0, host.gpu_bytes[i] - reserve_bytes - act) for i in range(n)}
    capacity = sum(max(0, host.gpu_bytes[i] - reserve_bytes) for i in range(n))
    fits = all(v > 0 for v in budget.values()) and weights <= sum(budget.values())
    return Placement("cuda", n, model_dtype, weights, act, capacity, budget, fits, f"{n} × {host.gpu_name}")


def recipe_host(target_device: str, target_gpus: int, here: HostFacts) -> HostFacts:
    """The host `trtspec plan` plans PTQ for: a GPU target's build host (`target.gpus` × that GPU, as the
    recipe's GPU table knows it); for a cpu target, this host (`here`)."""
    if target_device == "cpu":
        return here
    from builder.recipe.gpus import GPUS

    gpu = GPUS[target_device]
    return HostFacts((gpu.memory_bytes,) * target_gpus, here.ram_bytes, gpu.name)


def this_host(timeout: float = 20.0) -> HostFacts:
    """This host's RAM and its GPUs' memory as `nvidia-smi` reports it (none without a driver): no torch."""
    import os
    import shutil
    import subprocess

    ram = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return HostFacts((), ram)
    try:
        text = subprocess.run(
            [smi, "--query-gpu=name,memory.total", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return HostFacts((), ram)
    rows = [line.rsplit(",", 1) for line in text.splitlines() if "," in line]
    mib = [(n.strip(), m.strip()) for n, m in rows if m.strip().isdigit()]
    return HostFacts(tuple(int(m) * 2**20 for _, m in mib), ram, mib[0][0] if mib else "GPU")
