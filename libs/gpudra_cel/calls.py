"""Closures for calls of library functions: direct calls when the overload is known statically,
`matches` with a literal pattern (substring tests for literal alternatives), and errors that
constant folding found, deferred to run time as Kubernetes reports them.
"""

from __future__ import annotations

from gpudra_cel.dispatch import INTERNAL_ERRORS
from gpudra_cel.errors import CelEvaluationError
from gpudra_cel.functions import Overload
from gpudra_cel.operators import Fn
from gpudra_cel.regex import compile_regex, literal_alternatives
from gpudra_cel.values import no_overload

__all__ = ["direct_call", "has_param", "matches_constant", "raiser"]


def matches_constant(text: Fn, pattern: str) -> Fn:
    literals = literal_alternatives(pattern)
    if literals is not None:  # "H100|H200": plain substring tests, same answer as the regex

        if len(literals) == 1:
            (literal,) = literals

            def contains(act: list[object]) -> object:
                s = text(act)
                if isinstance(s, str):
                    return literal in s
                raise no_overload("matches", s, pattern)

            return contains

        def contains_any(act: list[object]) -> object:
            s = text(act)
            if isinstance(s, str):
                for lit in literals:  # noqa: SIM110 - any() over a generator is slower here
                    if lit in s:
                        return True
                return False
            raise no_overload("matches", s, pattern)

        return contains_any
    search = compile_regex(pattern).search

    def matches(act: list[object]) -> object:
        s = text(act)
        if isinstance(s, str):
            return search(s) is not None
        raise no_overload("matches", s, pattern)

    return matches


def raiser(error: CelEvaluationError) -> Fn:
    message = str(error)

    def fail(act: list[object]) -> object:
        raise CelEvaluationError(message)

    return fail


def has_param(ov: Overload) -> bool:
    types = ([ov.target] if ov.target is not None else []) + list(ov.args)
    return any(t.is_param or any(p.is_param for p in t.params) for t in types)


def direct_call(impl: object, fns: list[Fn], name: str) -> Fn:
    call = impl
    assert callable(call)
    if len(fns) == 1:
        (f0,) = fns

        def call1(act: list[object]) -> object:
            value = f0(act)
            try:
                return call(value)
            except INTERNAL_ERRORS as exc:
                raise CelEvaluationError(f"{name}: {exc}") from exc

        return call1
    if len(fns) == 2:
        f0, f1 = fns

        def call2(act: list[object]) -> object:
            a, b = f0(act), f1(act)
            try:
                return call(a, b)
            except INTERNAL_ERRORS as exc:
                raise CelEvaluationError(f"{name}: {exc}") from exc

        return call2

    def call_n(act: list[object]) -> object:
        values = [f(act) for f in fns]
        try:
            return call(*values)
        except INTERNAL_ERRORS as exc:
            raise CelEvaluationError(f"{name}: {exc}") from exc

    return call_n
