"""The kubelet plugin's errors: one root, permanent and retryable kinds kept apart.

A `PermanentError` will fail again on retry with the same input (a claim whose UID does not match,
an unknown opaque config, a device this node does not have); a `RetryableError` may succeed later
(the claim store is unreachable, the checkpoint is busy). Both surface to the kubelet as the one
claim's error string; the kubelet retries either way, but logs and metrics tell them apart.
"""

from __future__ import annotations

# A setting (flag or environment variable) is missing or malformed: the shared runtime's error,
# re-exported as the plugin's own so `except SettingsError` here catches what the loader raises.
# It is a `gpudra_service.ServiceError`, not a `KubeletPluginError`.
from gpudra_service.errors import SettingsError


class KubeletPluginError(Exception):
    """Root of every error this service raises on purpose."""


class PermanentError(KubeletPluginError):
    """Retrying with the same input cannot succeed."""


class RetryableError(KubeletPluginError):
    """A transient failure: the same call may succeed later."""


class ClaimNotFoundError(RetryableError):
    """The claim is not (yet) in the claim store; it may appear, so this is retryable."""


class ClaimSourceUnavailableError(RetryableError):
    """The claim store could not be reached."""


class ClaimReadError(PermanentError):
    """The claim store refused the read for good (forbidden, malformed request)."""


class ClaimUidMismatchError(PermanentError):
    """The stored claim has a different UID than the kubelet asked for (deleted and recreated)."""


class InvalidClaimError(PermanentError):
    """The claim JSON lacks what preparation needs (no allocation, malformed results)."""


class ConfigError(PermanentError):
    """An opaque device configuration is unknown or malformed."""


class DeviceError(PermanentError):
    """A device named by the allocation is unknown on this node or cannot be used."""


class DeviceControlError(RetryableError):
    """Creating or destroying a MIG device failed (NVML or the simulator refused)."""


class CdiError(PermanentError):
    """A CDI spec could not be built, validated or written."""


class CheckpointError(PermanentError):
    """The checkpoint file is corrupt, of an unknown version, or cannot be written."""


class SocketError(PermanentError):
    """A gRPC socket path cannot be used (occupied by something that is not a socket)."""


__all__ = [
    "CdiError",
    "CheckpointError",
    "ClaimNotFoundError",
    "ClaimReadError",
    "ClaimSourceUnavailableError",
    "ClaimUidMismatchError",
    "ConfigError",
    "DeviceControlError",
    "DeviceError",
    "InvalidClaimError",
    "KubeletPluginError",
    "PermanentError",
    "RetryableError",
    "SettingsError",
    "SocketError",
]
