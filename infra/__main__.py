"""Pulumi's entry point (Pulumi.yaml `main: infra/`); `infra` and `components` are
installed into the project's virtualenv (requirements.txt: `-e .`)."""

from infra.program import main

main()
