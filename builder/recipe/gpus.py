"""GPUs trtspec knows: compute capability (FP8 needs ≥ 8.9) and memory as the driver reports it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Gpu:
    name: str
    compute_capability: tuple[int, int]
    memory_mib: int  # total memory as nvidia-smi reports it

    @property
    def fp8(self) -> bool:
        return self.compute_capability >= (8, 9)

    @property
    def memory_bytes(self) -> int:
        return self.memory_mib * 2**20


GPUS: dict[str, Gpu] = {
    "h100": Gpu("NVIDIA H100 80GB HBM3 (SXM)", (9, 0), 81559),
    "h100-pcie": Gpu("NVIDIA H100 PCIe 80GB", (9, 0), 81559),
    "h200": Gpu("NVIDIA H200 141GB HBM3e", (9, 0), 143771),
    "a100": Gpu("NVIDIA A100-SXM4-80GB", (8, 0), 81920),
    "l40s": Gpu("NVIDIA L40S 48GB", (8, 9), 46068),
}

FP8_DEVICES = ("cpu", *[k for k, g in GPUS.items() if g.fp8])
