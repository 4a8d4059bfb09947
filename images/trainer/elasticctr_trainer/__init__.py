"""elasticctr trainer image: Paddle parameter-server CTR-DNN training on ElasticCTR data.

Importing this package imports nothing heavy: the dataset pipe command (`pipe.py`) runs
once per data file and must start fast, so Paddle is only imported by the modules that
train (`trainer.py`, `pserver.py`, `model.py`, `export.py`).
"""

# Paddle 2.6.2's wheel carries zlib symbols of its own: once `import paddle` has loaded them
# first, Python's zlib (HTTP gzip in urllib3/aiohttp, gzip files) crashes the process
# (SIGSEGV, or "inconsistent stream state"). Loading Python's zlib first avoids it, so this
# package does so before any of its modules can import Paddle.
import zlib  # noqa: F401

# The exit code of a trainer whose pass failed its checks (bad lines or unusable data files
# over `runner.max_bad_line_fraction`, or a model version refused before publishing), and
# of a pserver or trainer whose model does not fit the checkpoint it would resume
# (checkpoint.CheckpointMismatch) or whose network module cannot be used
# (networks.NetworkError): the Volcano Job ends on it instead of restarting into the same
# failure (components/training.py keeps the same number).
BAD_DATA_EXIT_CODE = 3

# `generate`'s and `simulate`'s slots unless told: slot ids 1..26, those of stacks/slot.txt
# (the stack's default slot_conf), so generated data fits a default stack.
DEFAULT_SLOTS, DEFAULT_FIRST_SLOT = 26, 1
