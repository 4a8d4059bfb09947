"""elasticctr trainer image: Paddle parameter-server CTR-DNN training on ElasticCTR data.

Importing this package imports nothing heavy: the dataset pipe command (`pipe.py`) runs
once per data file and must start fast, so Paddle is only imported by the modules that
train (`trainer.py`, `pserver.py`, `model.py`, `export.py`).
"""
