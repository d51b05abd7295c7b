"""Flags and environment variables for a settings dataclass (flag > environment > default).

Every field of the dataclass becomes `--field-name` and `<PREFIX><FIELD_NAME>`; fields listed in
`SHARED_ENV` also read the variable all gpudra services share (`GPUDRA_NATS_URL`). Values are
converted by the field's default's type (str, int, float, bool); a malformed value raises
`SettingsError` naming the flag or variable, never a traceback.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from gpudra_claim_writer.errors import SettingsError

T = TypeVar("T")

SHARED_ENV = {"nats_url": "GPUDRA_NATS_URL"}
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def doc(help: str, unit: str = "") -> dict[str, str]:
    """A settings field's metadata: its help text and unit (shown by `--help`)."""
    return {"help": help, "unit": unit}


def flag_name(name: str) -> str:
    return "--" + name.replace("_", "-")


def env_names(prefix: str, name: str) -> list[str]:
    own = prefix + name.upper()
    shared = SHARED_ENV.get(name)
    return [own, shared] if shared else [own]


def build_parser(
    cls: type[Any], prefix: str, prog: str, description: str
) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=description)
    for field in dataclasses.fields(cls):
        unit = field.metadata.get("unit", "")
        envs = " or ".join(env_names(prefix, field.name))
        parser.add_argument(
            flag_name(field.name),
            dest=field.name,
            default=None,
            help=f"{field.metadata.get('help', '')} [{unit + ', ' if unit else ''}"
            f"env {envs}, default {field.default!r}]",
        )
    return parser


def convert(default: Any, raw: str, source: str) -> Any:
    try:
        if isinstance(default, bool):
            low = raw.strip().lower()
            if low in _TRUE:
                return True
            if low in _FALSE:
                return False
            raise ValueError(f"expected one of {sorted(_TRUE | _FALSE)}")
        if isinstance(default, int):
            return int(raw)
        if isinstance(default, float):
            return float(raw)
        return raw
    except ValueError as exc:
        raise SettingsError(f"{source}: invalid value {raw!r}: {exc}") from exc


def load(
    cls: type[T],
    prefix: str,
    parser: argparse.ArgumentParser,
    argv: Sequence[str] | None,
    environ: Mapping[str, str],
) -> T:
    """An instance of `cls` from flags, then environment, then the field defaults."""
    args = vars(parser.parse_args(argv))
    values: dict[str, Any] = {}
    for field in dataclasses.fields(cls):  # type: ignore[arg-type]
        raw, source = args.get(field.name), flag_name(field.name)
        if raw is None:
            for env in env_names(prefix, field.name):
                if env in environ:
                    raw, source = environ[env], env
                    break
        if raw is not None:
            values[field.name] = convert(field.default, raw, source)
    return cls(**values)
