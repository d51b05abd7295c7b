"""Evaluate the CEL expressions of gpudra's manifests with cel-python (a real CEL parser and
interpreter), on JSON-shaped inputs.

It covers the standard CEL the admission policies and DeviceClass selectors use; Kubernetes'
extension libraries (`semver()`, `quantity()`) are not defined here, so expressions using them can
be parsed (`parse`) but not evaluated. Errors come back as `CelProblem` with the expression.
"""

from __future__ import annotations

from typing import Any

import celpy
from celpy.adapter import json_to_cel
from celpy.celparser import CELParseError
from celpy.evaluation import CELEvalError

_ENV = celpy.Environment()


class CelProblem(Exception):
    """The expression does not parse, or does not evaluate on the given input."""


def parse(expression: str) -> None:
    """Raise CelProblem unless `expression` is syntactically valid CEL."""
    try:
        _ENV.compile(expression)
    except CELParseError as exc:
        raise CelProblem(f"{expression!r}: {exc}") from exc


def evaluate(expression: str, activation: dict[str, Any]) -> Any:
    """The value of `expression` with each name of `activation` bound to its JSON value."""
    try:
        program = _ENV.program(_ENV.compile(expression))
        result = program.evaluate({k: json_to_cel(v) for k, v in activation.items()})
    except (CELParseError, CELEvalError) as exc:
        raise CelProblem(f"{expression!r}: {exc}") from exc
    if isinstance(result, CELEvalError):
        raise CelProblem(f"{expression!r}: {result}")
    return result
