"""What dispatch and tuning know of the GPU: one typed value. The CUDA adapter fills it
from its one reader of the device's facts (``mmsuite.backends.cuda.GpuFacts``)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DeviceFacts:
    """The GPU as the dispatcher's model sees it. Defaults: an H100 SXM, the figures the
    model starts from when a device reports none."""

    name: str = "NVIDIA H100 80GB HBM3"
    sms: int = 132
    clock_mhz: int = 1980
    memory_clock_mhz: int = 2619
    memory_bus_bits: int = 5120
    l2_bytes: int = 50 * 2**20

    @property
    def memory_bytes_per_s(self) -> float:
        """Peak device-memory bandwidth: double data rate over the bus."""
        return 2.0 * self.memory_clock_mhz * 1e6 * self.memory_bus_bits / 8

    @property
    def fp32_peak_flops(self) -> float:
        """SMs x 128 FP32 lanes x 2 flops (FMA) x clock."""
        return self.sms * 128 * 2 * self.clock_mhz * 1e6


#: The facts the model assumes when it is given none: an H100 SXM.
H100_SXM = DeviceFacts()
