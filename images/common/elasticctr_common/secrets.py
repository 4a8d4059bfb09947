"""Secrets reach the pods as files: a Secret volume, and `<NAME>_FILE` naming the file that
holds what `<NAME>` would (the convention of Docker's secrets, which MinIO and most
official images read too). A value in the environment itself still works, for processes
run by hand. The program (components/kube.py, `secret_files`) writes the variables from
`file_variable`; every image reads them through `read`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Final

FILE_SUFFIX: Final = "_FILE"
# Where the pods mount their Secrets, one directory per Secret volume.
SECRETS_DIR: Final = "/var/run/secrets/elasticctr"


class SecretError(ValueError):
    """A secret's file named by the environment cannot be read."""


def file_variable(name: str) -> str:
    """The variable naming the file that holds secret `name`."""
    return f"{name}{FILE_SUFFIX}"


def read(name: str, env: Mapping[str, str] | None = None) -> str:
    """Secret `name`: the contents of the file `<name>_FILE` names (without the trailing
    newline an editor adds), else `<name>`'s value, else ""."""
    env = os.environ if env is None else env
    path = env.get(file_variable(name), "")
    if not path:
        return env.get(name, "")
    try:
        with open(path, encoding="utf-8") as file:
            return file.read().rstrip("\r\n")
    except OSError as error:
        raise SecretError(
            f"{file_variable(name)}={path}: cannot read the secret's file "
            f"({error.strerror or error})"
        ) from None
    except UnicodeDecodeError:
        raise SecretError(f"{file_variable(name)}={path}: the file is not UTF-8 text") from None
