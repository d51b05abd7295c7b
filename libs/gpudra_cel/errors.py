"""The CEL engine's errors: one root, `CelError`.

Every error here is permanent: the same expression on the same device fails the same way, so
retrying is pointless. `CelCompileError` is raised before any device is seen (syntax, unknown
names, type errors, limits); `CelEvaluationError` is raised while evaluating one device (missing
key, overflow, a non-bool result), which the allocator reports as an allocation error, as
Kubernetes does.
"""

from __future__ import annotations


class CelError(Exception):
    """Root of every error raised by `gpudra_cel`."""


class CelCompileError(CelError):
    """The expression cannot be compiled; the message points at the offending place.

    `gate` names the `CelOptions` field (e.g. `list_type_attributes`) whose feature would declare
    what the expression uses, when that is why it fails; empty otherwise.
    """

    def __init__(
        self,
        message: str,
        *,
        expression: str = "",
        line: int = 0,
        column: int = 0,
        gate: str = "",
    ):
        self.reason = message
        self.expression = expression
        self.line = line
        self.column = column
        self.gate = gate
        super().__init__(_render(message, expression, line, column))


class CelEvaluationError(CelError):
    """Evaluating a compiled expression failed for one input."""


def _render(message: str, expression: str, line: int, column: int) -> str:
    if not expression or line <= 0:
        return message
    lines = expression.splitlines() or [""]
    source = lines[line - 1] if line <= len(lines) else ""
    start = max(0, column - 1 - 40)
    excerpt = source[start : start + 80]
    caret = " " * (column - 1 - start) + "^"
    return f"<input>:{line}:{column}: {message}\n | {excerpt}\n | {caret}"
