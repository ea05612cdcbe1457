"""GPU utilisation and memory through NVML; None on nodes without a GPU, never a fake zero."""

from __future__ import annotations


class NvmlSource:
    name = "nvml"

    def __init__(self, device_index: int | None) -> None:
        self.handle = None
        if device_index is None:
            return
        try:
            import pynvml

            pynvml.nvmlInit()
            self.handle = pynvml.nvmlDeviceGetHandleByIndex(device_index)
            self._nvml = pynvml
        except Exception:  # no driver, no device: the figures stay None
            self.handle = None

    def sample(self) -> dict[str, float | None]:
        if self.handle is None:
            return {"gpu_util": None, "gpu_mem_util": None, "gpu_mem_used_bytes": None}
        util = self._nvml.nvmlDeviceGetUtilizationRates(self.handle)
        mem = self._nvml.nvmlDeviceGetMemoryInfo(self.handle)
        return {
            "gpu_util": float(util.gpu),
            "gpu_mem_util": 100.0 * mem.used / mem.total,
            "gpu_mem_used_bytes": float(mem.used),
        }
