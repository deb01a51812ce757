"""What every settings table shares: the strict model, names and the credential sources
(which provider type takes which: its kind, clustermgr.core.kinds)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from clustermgr.core.inputs import has_control, slurm_word_problem

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"


CredentialSource = Literal[
    "chain",
    "profile",
    "default",
    "client_secret_file",
    "client_secret_env",
    "clouds_yaml",
    "password_file",
    "password_env",
    "none",
]


def first_error(exc: ValidationError, unknown_key: str = "unknown key") -> str:
    """A validation failure's first problem as one line: its message, with the value given
    when the message does not say it (the caller names the place)."""
    first = exc.errors()[0]
    message = first["msg"].removeprefix("Value error, ")
    if first["type"] == "extra_forbidden":
        message = unknown_key
    elif "input" in first and first["type"] not in ("missing", "value_error"):
        message = f"{message} (got {first['input']!r})"
    return message


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def slurm_name(value: str) -> str:
    """The value, if Slurm would read it as one name (it reaches slurm.conf or scontrol)."""
    problem = slurm_word_problem(value)
    if problem:
        raise ValueError(problem)
    return value


SLURM_PATH_UNSAFE = frozenset(" #=,\"'\\")


def slurm_conf_path(value: Path) -> Path:
    """A path slurm.conf names (a hook program): absolute, one word, nothing Slurm splits on."""
    text = str(value)
    if not value.is_absolute() or has_control(text) or SLURM_PATH_UNSAFE & set(text):
        raise ValueError(
            f"{text!r} must be an absolute path without spaces, control "
            "characters, '#', '=', ',' or quotes (slurm.conf would split it)"
        )
    return value
