#!/usr/bin/env bash
# Set-up from nothing: a Python 3.11 virtualenv with every pinned package the program,
# the workload code and the tests need. Safe to run again (it only adds what is missing).
set -euo pipefail
cd "$(dirname "$0")/.."

python=${PYTHON:-python3.11}
command -v "$python" >/dev/null || python=python3
if [ ! -x .venv/bin/python ]; then
  "$python" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
# constraints.txt pins every transitive package (Paddle needs protobuf 4.25 and numpy < 2).
.venv/bin/python -m pip install --quiet -r requirements-dev.txt -c constraints.txt
echo "set-up done: $(.venv/bin/python --version), $(.venv/bin/pip list 2>/dev/null | wc -l) packages"
