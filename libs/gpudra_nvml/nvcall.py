"""One door to the NVML library object: calls by name, NVML errors translated into gpudra's.

Both the real `pynvml` module and `gpudra_nvml.fake.FakeNvml` pass through here, so error handling
is identical on hardware and in the simulator. `optional()` is for queries a GPU or driver may not
support (NVLink on a PCIe card, NUMA on old drivers): those answer None instead of raising.
"""

from __future__ import annotations

from typing import Any

from gpudra_nvml.errors import DeviceLostError, NvmlCallError, NvmlUnavailableError

#: Codes meaning "this host cannot use NVML at all", with the advice a person needs.
_UNAVAILABLE = {
    12: "the NVML library (libnvidia-ml.so.1) was not found: is the NVIDIA driver installed and the"
    " container started with the NVIDIA runtime?",
    9: "the NVIDIA kernel driver is not loaded",
    18: "the NVML library does not match the loaded kernel driver (reboot after a driver upgrade?)",
}
_NO_PERMISSION = 4
#: Codes meaning "this GPU cannot be used now", whatever the call: NVML answers them for a GPU
#: that fell off the bus (GPU_IS_LOST), whose external power cables are not attached
#: (INSUFFICIENT_POWER) or whose interrupts the kernel driver found broken (IRQ_ISSUE).
_UNUSABLE = {
    15: "GPU is lost (fell off the bus or needs a reset)",
    8: "GPU unusable: its external power cables are not properly attached",
    11: "GPU unusable: the kernel driver detected an interrupt issue",
}
#: Codes meaning "not here": the feature, function, link or object does not exist on this GPU, or
#: (NO_PERMISSION) it is a privileged query an unprivileged agent cannot make.
_ABSENT = {
    3,
    13,
    2,
    6,
    _NO_PERMISSION,
}  # NOT_SUPPORTED, FUNCTION_NOT_FOUND, INVALID_ARGUMENT, NOT_FOUND


class Nvml:
    """Calls functions of a pynvml-shaped library object and translates its exceptions."""

    def __init__(self, lib: Any) -> None:
        self.lib = lib

    def const(self, name: str) -> Any:
        return getattr(self.lib, name)

    def call(self, name: str, *args: Any) -> Any:
        fn = getattr(self.lib, name, None)
        if fn is None:
            raise NvmlCallError(name, 13, "function not found in this NVML library")
        try:
            return fn(*args)
        except self.lib.NVMLError as exc:
            raise translate(name, exc) from exc

    def optional(self, name: str, *args: Any) -> Any | None:
        """Like `call`, but None when the GPU or driver does not have the feature."""
        if getattr(self.lib, name, None) is None:
            return None
        try:
            return self.call(name, *args)
        except NvmlCallError as exc:
            if exc.code in _ABSENT:
                return None
            raise


def translate(function: str, exc: Any) -> Exception:
    code = int(getattr(exc, "value", -1))
    if code in _UNAVAILABLE:
        return NvmlUnavailableError(f"NVML unavailable: {_UNAVAILABLE[code]} ({function}: {exc})")
    if code == _NO_PERMISSION and function.startswith("nvmlInit"):
        return NvmlUnavailableError(
            f"NVML unavailable: no permission to open the NVIDIA devices ({exc})"
        )
    if code in _UNUSABLE:
        return DeviceLostError(f"{function}: {_UNUSABLE[code]}", reason=_UNUSABLE[code])
    return NvmlCallError(function, code, str(exc))


def text(value: Any) -> str:
    """NVML strings arrive as str (pynvml decodes most) or bytes (a few functions); always str."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)
