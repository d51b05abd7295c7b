"""gpudra_nvml's exceptions: one root, permanent and retryable kept apart.

NVML's own exceptions (`pynvml.NVMLError_*`, or the same classes raised by the simulator) never
leave this package: the adapter translates them where it calls NVML, keeping the original as
`__cause__`.
"""

from __future__ import annotations


class NvmlError(Exception):
    """Root of every error gpudra_nvml raises."""


class NvmlPermanentError(NvmlError):
    """Retrying the same call will not help (bad profile, unsupported setup)."""


class NvmlRetryableError(NvmlError):
    """The call may succeed later (a GPU busy resetting, a transient driver error)."""


class NvmlUnavailableError(NvmlPermanentError):
    """NVML cannot be used on this host: the library is missing or the driver is not loaded."""


class ProfileError(NvmlPermanentError):
    """A simulator profile is unknown or its data file is invalid."""


class DeviceLostError(NvmlRetryableError):
    """A GPU stopped answering (NVML_ERROR_GPU_IS_LOST) or NVML refuses it as unusable (power
    cables, interrupts); it may come back after a reset or a repair. `reason` says which."""

    def __init__(
        self, message: str, index: int | None = None, reason: str = "GPU is lost (fell off the bus)"
    ) -> None:
        super().__init__(message)
        self.index = index
        self.reason = reason


class NvmlCallError(NvmlRetryableError):
    """An NVML call failed with a code gpudra does not treat specially."""

    def __init__(self, function: str, code: int, message: str) -> None:
        super().__init__(f"{function}: {message} (NVML error {code})")
        self.function = function
        self.code = code
