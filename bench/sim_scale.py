"""A prod stack at production sizes on a simulated cluster (tools/localcluster/simulated.py):
the real control plane, Volcano and kube-scheduler, kwok nodes in zones, the stack applied
by the real Pulumi engine (tests/support/simulated.py runs the scenario). Checks gang
scheduling, shard placement, a rescale, a drain, a node and a zone lost.

    python bench/sim_scale.py                       # baidu-prod at 100/20/64x2 on 50 nodes
    python bench/sim_scale.py --stack aws-prod --json out.json

docs/simulated-cluster.md has the results and what they mean. Needs the tools of
`bash tools/build-tools.sh` (kubernetes, etcd, volcano, kwok, the Pulumi CLI).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support import simulated
from tools.localcluster.simulated import NodePool

# 50 nodes. The prod stacks' own pools (16 cores and 64 GiB for training, 8 and 16 for
# serving) hold their default sizes; 100 to 150 trainers and 64 to 96 shards x 2 need
# these, and a reshape briefly runs both layouts' shards.
TRAINING = NodePool("training", 30, "32", "128Gi")
SERVING = NodePool("serving", 20, "96", "384Gi")
RESCALED = simulated.Sizes(trainers=150, pservers=20, cube_shards=96, cube_replicas=2)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stack", default="baidu-prod", help="the prod stack file to apply")
    parser.add_argument("--zones", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per wait")
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args(argv)
    scenario = simulated.Scenario(
        args.stack, TRAINING, SERVING, args.zones, simulated.PRODUCTION, RESCALED,
        timeout=args.timeout,
    )  # fmt: skip
    figures = simulated.run(scenario)
    text = json.dumps(asdict(figures), indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    return 0 if not figures.problems() else 1


if __name__ == "__main__":
    sys.exit(main())
