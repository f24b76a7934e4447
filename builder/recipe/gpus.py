"""GPUs trtspec knows: compute capability (FP8 needs ≥ 8.9), memory as the driver reports it, and the peak
rates a roofline needs (`builder.tune.roofline`): memory bandwidth and dense (no 2:4 sparsity) tensor-core
FLOP/s in BF16/FP16 and FP8.

Rates are NVIDIA's datasheet figures. The datasheets print tensor-core FLOP/s "with sparsity"; dense is
half of that (their footnote), which is what a decoder's GEMMs get:

    H100 SXM   3.35 TB/s HBM3   BF16 1,979* → 989.5 dense   FP8 3,958* → 1,979 dense   (H100 datasheet)
    H100 PCIe  2.0 TB/s HBM2e   BF16 1,513* → 756.5 dense   FP8 3,026* → 1,513 dense   (H100 datasheet)
    H200 SXM   4.8 TB/s HBM3e   BF16 1,979* → 989.5 dense   FP8 3,958* → 1,979 dense   (H200 datasheet)
    A100 SXM4 80GB  2,039 GB/s  BF16 624* → 312 dense       no FP8                     (A100 datasheet)
    L40S       864 GB/s GDDR6   BF16 362.05 dense (733*)    FP8 733 dense (1,466*)     (L40S datasheet: both printed)

(* = with sparsity.) TF32 tensor cores run at half the BF16 rate on all five (the same datasheets).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Gpu:
    name: str
    compute_capability: tuple[int, int]
    memory_mib: int  # total memory as nvidia-smi reports it
    bandwidth_gbps: float = 0.0  # peak memory bandwidth, GB/s (10**9 bytes per second)
    bf16_tflops: float = 0.0  # dense BF16/FP16 tensor-core TFLOP/s (10**12)
    fp8_tflops: float | None = None  # dense FP8 tensor-core TFLOP/s; None: no FP8 tensor cores

    @property
    def fp8(self) -> bool:
        return self.compute_capability >= (8, 9)

    @property
    def memory_bytes(self) -> int:
        return self.memory_mib * 2**20

    def flops(self, dtype: str) -> float:
        """Peak dense tensor-core FLOP/s for GEMMs in `dtype` (fp8, bf16, fp16, fp32 → TF32)."""
        if dtype == "fp8":
            if self.fp8_tflops is None:
                raise ValueError(f"{self.name} has no FP8 tensor cores")
            return self.fp8_tflops * 1e12
        rate = self.bf16_tflops * 1e12
        return rate / 2 if dtype == "fp32" else rate

    @property
    def bandwidth(self) -> float:
        """Peak memory bandwidth in bytes per second."""
        return self.bandwidth_gbps * 1e9


GPUS: dict[str, Gpu] = {
    "h100": Gpu("NVIDIA H100 80GB HBM3 (SXM)", (9, 0), 81559, 3350.0, 989.5, 1979.0),
    "h100-pcie": Gpu("NVIDIA H100 PCIe 80GB", (9, 0), 81559, 2000.0, 756.5, 1513.0),
    "h200": Gpu("NVIDIA H200 141GB HBM3e", (9, 0), 143771, 4800.0, 989.5, 1979.0),
    "a100": Gpu("NVIDIA A100-SXM4-80GB", (8, 0), 81920, 2039.0, 312.0, None),
    "l40s": Gpu("NVIDIA L40S 48GB", (8, 9), 46068, 864.0, 362.05, 733.0),
}

FP8_DEVICES = ("cpu", *[k for k, g in GPUS.items() if g.fp8])
