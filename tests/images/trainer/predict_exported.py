"""Run an exported dense model the way serving would (Paddle Inference), in its own
process: python predict_exported.py <dense dir> <pooled.npz> <out.npy>.

pooled.npz holds one [examples, embedding_dim] array per feed name of meta.json."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import paddle.inference as inference


def main(dense_dir: str, pooled_path: str, out_path: str) -> None:
    meta = json.loads((Path(dense_dir) / "meta.json").read_text())
    config = inference.Config(
        str(Path(dense_dir) / meta["model_file"]), str(Path(dense_dir) / meta["params_file"])
    )
    config.disable_gpu()
    config.switch_ir_optim(False)  # the exact ops the trainer ran, no fused kernels
    predictor = inference.create_predictor(config)
    pooled = np.load(pooled_path)
    for name in meta["feed_names"]:
        handle = predictor.get_input_handle(name)
        handle.reshape(pooled[name].shape)
        handle.copy_from_cpu(np.ascontiguousarray(pooled[name], dtype=np.float32))
    predictor.run()
    prob = predictor.get_output_handle(predictor.get_output_names()[0]).copy_to_cpu()
    np.save(out_path, prob[:, 1])


if __name__ == "__main__":
    main(*sys.argv[1:4])
