"""A random credential made once and kept (as a secret) in the stack's state.

A dynamic provider runs inside the program's own Python process, so this needs no extra
provider plugin (pulumi-random would be one more binary to build and ship offline).
"""

from __future__ import annotations

import secrets
import string
from typing import Any

import pulumi
from pulumi.dynamic import CreateResult, DiffResult, Resource, ResourceProvider

ALPHABET = string.ascii_letters + string.digits


class _CredentialProvider(ResourceProvider):
    def create(self, props: dict[str, Any]) -> CreateResult:
        length = int(props["length"])
        value = "".join(secrets.choice(ALPHABET) for _ in range(length))
        return CreateResult(id_=secrets.token_hex(8), outs={"length": length, "value": value})

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        # Only a new length makes a new value; everything else keeps the stored one.
        changed = int(olds.get("length", 0)) != int(news["length"])
        return DiffResult(changes=changed, replaces=["length"] if changed else [])


class GeneratedCredential(Resource):
    """`value` is a random string of `length` letters and digits, stable across updates."""

    value: pulumi.Output[str]

    def __init__(self, name: str, length: int, opts: pulumi.ResourceOptions | None = None) -> None:
        if not 16 <= length <= 128:
            raise ValueError(f"{name}: length must be from 16 to 128, got {length}")
        super().__init__(
            _CredentialProvider(),
            name,
            {"length": length, "value": None},
            pulumi.ResourceOptions.merge(
                opts, pulumi.ResourceOptions(additional_secret_outputs=["value"])
            ),
        )
