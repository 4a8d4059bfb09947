"""Log set-up of the images that import Paddle (trainer, serving)."""

from __future__ import annotations

import logging

FORMAT = "%(asctime)s %(name)s %(levelname)s %(message)s"


def log_info_to_stderr(package: str) -> None:
    """INFO lines of `package` on stderr. Importing Paddle sets the root logger to WARNING
    (paddle.distributed.utils.log_utils.get_logger), which silenced every INFO line of a
    process that configured only the root: serving logged nothing at all, not even the
    versions it loaded. The package's own level survives that."""
    logging.basicConfig(level=logging.INFO, format=FORMAT)
    logging.getLogger(package).setLevel(logging.INFO)
