"""The client's failures: each is one line on stderr naming the thing and what to do, and
exits with the code of its kind (docs/serving.md, "Errors and exit codes")."""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0
    RESULT = 1  # the command ran; what it found is bad (failed examples, unhealthy parts)
    USAGE = 2  # a flag or argument is wrong (argparse's code too)
    INPUT = 3  # a local file or directory is missing, unreadable or not what it must be
    ENDPOINT = 4  # where to send is unknown: no flag, no stack output, no pulumi CLI
    CREDENTIALS = 5  # no kubeconfig, no storage keys, a token serving or the API refuses
    UNREACHABLE = 6  # a service does not answer: connection refused, no route, timeout
    REFUSED = 7  # a service answered with an error
    INTERRUPTED = 130  # Ctrl-C (128 + SIGINT, as shells report it)
    BUG = 70  # an error the client does not know: a bug (sysexits' EX_SOFTWARE)


class CliError(Exception):
    """A failure the user can act on; str() is the one line, `code` the exit code."""

    code = ExitCode.RESULT


class UsageError(CliError):
    code = ExitCode.USAGE


class InputError(CliError):
    code = ExitCode.INPUT


class EndpointError(CliError):
    """An endpoint is neither given as a flag nor a stack output; the message says how."""

    code = ExitCode.ENDPOINT


class CredentialsError(CliError):
    code = ExitCode.CREDENTIALS


class UnreachableError(CliError):
    code = ExitCode.UNREACHABLE


class RefusedError(CliError):
    code = ExitCode.REFUSED


def one_line(text: str) -> str:
    """`text` with its line breaks and runs of spaces made single spaces."""
    return " ".join(text.split())
