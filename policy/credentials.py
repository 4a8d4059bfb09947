"""Secrets secret: no plaintext value that looks like a credential in a ConfigMap or in env.

A credential belongs in a Secret, mounted as files (or read through
`valueFrom.secretKeyRef`); anything written into a ConfigMap or an env `value` is readable
by everyone who can read the object, and lands in `pulumi preview --diff` output and PR
comments. Messages name where a credential is, never its value.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from itertools import pairwise
from typing import Any

from pulumi_policy import (
    EnforcementLevel,
    ReportViolation,
    ResourceValidationArgs,
    ResourceValidationPolicy,
)

from policy.kube import CONFIG_MAP, containers, entries, get, items, object_label

# A name is a credential's when one of its words is one of these ...
CREDENTIAL_WORDS = {
    "password",
    "passwd",
    "passphrase",
    "secret",
    "secrets",
    "token",
    "credential",
    "credentials",
    "apikey",
    "accesskey",
    "secretkey",
    "privatekey",
    # Baidu's and Huawei's names for an access key pair.
    "ak",
    "sk",
    # The seeds' HDFS UGI is "user,password".
    "ugi",
}
# ... or when it has "<one of these> key" ...
KEY_QUALIFIERS = {"access", "secret", "private", "api", "ssh", "signing", "encryption", "master"}
# ... unless it names something about a credential rather than the credential itself.
NOT_THE_CREDENTIAL = {
    "file",
    "path",
    "dir",
    "name",
    "ref",
    "arn",
    "url",
    "uri",
    "endpoint",
    "type",
    "enabled",
    "mode",
    "length",
    "ttl",
    "expiry",
    "region",
    "algorithm",
    "version",
}
# Values that are recognisably credentials whatever they are called.
VALUE_PATTERNS = [
    (re.compile(r"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b"), "an AWS access key id"),
    (re.compile(r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----"), "a private key"),
    (re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s/:@$]+:[^\s/@$]+@"), "a URL with a password"),
    (re.compile(r"\bgh[pousr]_[A-Za-z0-9]{36,}\b"), "a GitHub token"),
    (re.compile(r"\bxox[abprs]-[A-Za-z0-9-]{10,}"), "a Slack token"),
    (re.compile(r"\bpul-[0-9a-f]{40}\b"), "a Pulumi access token"),
    (
        re.compile(r"\beyJ[A-Za-z0-9_-]{10,}\.eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}"),
        "a JSON Web Token",
    ),
]
_WORDS = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")
_REFERENCE = re.compile(r"^(?:\$\([^)]*\)|\$\{[^}]*\}|\{\{[^}]*\}\})$")
_NOT_SECRET_VALUES = {
    "",
    "true",
    "false",
    "yes",
    "no",
    "on",
    "off",
    "null",
    "none",
    "~",
    '""',
    "''",
}
# `key = value`, `key: value`, `"key": "value"`, `export KEY=value` (config files in ConfigMaps).
_ASSIGNMENT = re.compile(
    r"""^\s*(?:export\s+)?["']?(?P<key>[A-Za-z_][A-Za-z0-9_.-]*)["']?\s*[:=]\s*(?P<value>.*?)\s*,?\s*$"""
)
# Hadoop-style XML: <name>fs.s3a.secret.key</name><value>...</value>.
_XML_PROPERTY = re.compile(
    r"<name>\s*(?P<key>[^<]+?)\s*</name>\s*<value>\s*(?P<value>[^<]*?)\s*</value>", re.S
)


def words(name: str) -> list[str]:
    """`HDFS_UGI` -> [hdfs, ugi]; `secretAccessKey` -> [secret, access, key]."""
    return [w.lower() for w in _WORDS.findall(name)]


def is_credential_name(name: str) -> bool:
    parts = words(name)
    if not parts or parts[-1] in NOT_THE_CREDENTIAL:
        return False
    if any(p in CREDENTIAL_WORDS for p in parts):
        return True
    return any(a in KEY_QUALIFIERS and b == "key" for a, b in pairwise(parts))


def is_plain_value(value: Any) -> bool:
    """A value that holds something itself (not empty, a flag, or a reference to elsewhere)."""
    if isinstance(value, bool) or value is None:
        return False
    text = str(value).strip()
    return text.lower() not in _NOT_SECRET_VALUES and not _REFERENCE.match(text)


def credential_kinds(text: str) -> list[str]:
    return [kind for pattern, kind in VALUE_PATTERNS if pattern.search(text)]


def _json_findings(value: Any, path: str) -> Iterator[str]:
    if isinstance(value, Mapping):
        for key, item in value.items():
            where = f"{path}.{key}" if path else str(key)
            if (
                isinstance(item, (str, int, float))
                and is_credential_name(str(key))
                and is_plain_value(item)
            ):
                yield f"key {where}"
            else:
                yield from _json_findings(item, where)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _json_findings(item, f"{path}[{i}]")


def text_findings(text: str) -> list[str]:
    """Where credential-looking values sit in a config file's text (never the values)."""
    try:
        parsed = json.loads(text)
    except ValueError:
        parsed = None
    if isinstance(parsed, (dict, list)):
        found = list(_json_findings(parsed, ""))
    else:
        found = []
        for number, line in enumerate(text.splitlines(), 1):
            if line.lstrip().startswith(("#", ";", "//", "<!--")):
                continue
            match = _ASSIGNMENT.match(line)
            if match and is_credential_name(match["key"]):
                value = match["value"].strip().strip("\"'")
                if is_plain_value(value):
                    found.append(f"line {number} ({match['key']})")
        for match in _XML_PROPERTY.finditer(text):
            if is_credential_name(match["key"]) and is_plain_value(match["value"]):
                found.append(f"property {match['key']}")
    found += credential_kinds(text)
    return found


def _config_map_findings(props: Any) -> Iterator[str]:
    for key, value in entries(get(props, "data")):
        if not isinstance(value, str):
            continue
        if "\n" not in value.strip() and is_credential_name(key) and is_plain_value(value):
            yield f'data["{key}"] is named like a credential and holds a plaintext value'
            continue
        for finding in text_findings(value):
            yield f'data["{key}"] has {finding} that looks like a credential'


def _env_findings(args: ResourceValidationArgs) -> Iterator[str]:
    for container in containers(args.resource_type, args.props):
        for i, var in enumerate(items(get(container.spec, "env"))):
            name, value = get(var, "name"), get(var, "value")
            if not isinstance(name, str) or not isinstance(value, str):
                continue  # valueFrom (secretKeyRef, fieldRef, ...), or not known yet
            where = f"{container.label} env {name} (env[{i}])"
            if is_credential_name(name) and is_plain_value(value):
                yield f"{where} is named like a credential and holds a plaintext value"
            for kind in credential_kinds(value):
                yield f"{where} holds {kind}"


def validate_no_plaintext_credentials(
    args: ResourceValidationArgs, report: ReportViolation
) -> None:
    findings = list(_env_findings(args))
    if args.resource_type.removesuffix("Patch") == CONFIG_MAP:
        findings += _config_map_findings(args.props)
    if findings:
        label = object_label(args.resource_type, args.props, args.name)
        report(
            f"{label}: "
            + "; ".join(findings)
            + ". Put credentials in a Secret (a Pulumi secret in the stack config: "
            "`pulumi config set --secret`) and mount it as files (or read it with "
            "valueFrom.secretKeyRef).",
            None,
        )


no_plaintext_credentials = ResourceValidationPolicy(
    name="no-plaintext-credentials",
    description="No plaintext credential in a ConfigMap or a container's env.",
    enforcement_level=EnforcementLevel.MANDATORY,
    validate=validate_no_plaintext_credentials,
)
