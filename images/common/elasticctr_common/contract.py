"""What crosses from the Pulumi program into the pods, written once: ports, the
environment variables each image reads, the mounted config files' paths and the storage
layout. The program (components/) sets them from these names and the images read them by
the same names; tests/infra/test_pod_contract.py feeds every rendered pod to the image's
own parsers. docs/architecture.md explains each one. The files' schemas are beside this
module: trainer.json in trainer_json.py, cube.conf in cube/conf.py, the donefile line in
versions.py.
"""

from __future__ import annotations

from typing import Final

# Config files, mounted from ConfigMaps (docs/architecture.md, "Config files").
CONFIG_DIR: Final = "/etc/elasticctr"
TRAINER_JSON: Final = f"{CONFIG_DIR}/trainer.json"
CUBE_CONF: Final = f"{CONFIG_DIR}/cube.conf"
SLOT_CONF: Final = f"{CONFIG_DIR}/slot.conf"
# model custom with a .py file of the project: the program ships it in the training
# ConfigMap, trainer.json's network_module names it here.
NETWORK_FILE: Final = f"{CONFIG_DIR}/network.py"
# Local scratch of the trainer and cube images (their Dockerfiles create it).
DATA_DIR: Final = "/var/lib/elasticctr"

# The bucket's layout (docs/architecture.md, "Model versions" and "Cube"): one prefix each.
MODELS: Final = "models"  # the trainer's versions and their donefile
CUBE: Final = "cube"  # cube-transfer's shards of each version and their donefile
CHECKPOINTS: Final = "checkpoints"
MLFLOW: Final = "mlflow"

# Training data: hour directories <dataset>/YYYYMMDD/HH, ready once their donefile exists;
# a donefile also publishes versions (versions.py: one JSON line per version).
HOUR_FORMAT: Final = "%Y%m%d/%H"
DONEFILE: Final = "donefile"

# The in-cluster HDFS's datanode StatefulSet: the client writes through its pods from
# outside the cluster (kubectl exec), as only they and the trainers may reach HDFS.
HDFS_DATANODES: Final = "hdfs-datanode"

# Ports (docs/architecture.md, "Ports").
SERVING_PORT: Final = 8010
SERVING_GRPC_PORT: Final = 8011  # the Open Inference Protocol over gRPC
CUBE_SERVER_PORT: Final = 8027
CUBE_SERVER_CONTROL_PORT: Final = 8028  # the pod's loopback: its agent's
CUBE_AGENT_PORT: Final = 8001
CUBE_TRANSFER_PORT: Final = 8099
CUBE_TRANSFER_CONTROL_PORT: Final = 8098  # the pod's loopback: operators' port-forward
# A trainer pod's /metrics while it runs (TrainerEnv.METRICS_PORT; 0: none). Its only HTTP
# port: Paddle's pserver port speaks brpc.
TRAINER_METRICS_PORT: Final = 8014
# The Secret holding serving's bearer token (key ServingEnv.AUTH_TOKEN), with serving.auth
# token: serving reads it, Prometheus scrapes with it.
SERVING_AUTH_SECRET: Final = "serving-auth"


# Committed cube versions cube-transfer keeps for rollback (CubeEnv.KEEP_VERSIONS; the
# stack's cube.keep_versions).
CUBE_KEEP_VERSIONS: Final = 3
# Deltas (docs/cube.md, "Deltas"): a version becomes a base again once its chain would hold
# this many deltas (CubeEnv.BASE_EVERY; the stack's cube.base_every), or once the chain's
# deltas hold more keys than this fraction of its base's (CubeEnv.MAX_CHAIN_FRACTION).
CUBE_BASE_EVERY: Final = 10
CUBE_MAX_CHAIN_FRACTION: Final = 0.5


class CubeEnv:
    """The cube image's variables (elasticctr_cube.cliargs: each defaults an option)."""

    SHARD_INDEX: Final = "CUBE_SHARD_INDEX"
    SHARD_NUM: Final = "CUBE_SHARD_NUM"
    DATA_DIR: Final = "CUBE_DATA_DIR"
    CUBE_URI: Final = "CUBE_URI"
    MODEL_URI: Final = "MODEL_URI"
    CUBE_CONF: Final = "CUBE_CONF"
    KEEP_VERSIONS: Final = "CUBE_KEEP_VERSIONS"
    BASE_EVERY: Final = "CUBE_BASE_EVERY"
    MAX_CHAIN_FRACTION: Final = "CUBE_MAX_CHAIN_FRACTION"
    WORK_DIR: Final = "CUBE_WORK_DIR"


class TrainerEnv:
    """The trainer image's variables (elasticctr_trainer.roles; the PADDLE_* ones are
    Paddle fleet's own names, VC_TASK_INDEX Volcano's env plugin's)."""

    ROLE: Final = "TRAINING_ROLE"  # PSERVER or TRAINER
    PSERVERS: Final = "PADDLE_PSERVERS_IP_PORT_LIST"
    TRAINERS_NUM: Final = "PADDLE_TRAINERS_NUM"
    PSERVER_PORT: Final = "PADDLE_PORT"
    PSERVER_ID: Final = "PADDLE_PSERVER_ID"
    TRAINER_ID: Final = "PADDLE_TRAINER_ID"
    TASK_INDEX: Final = "VC_TASK_INDEX"  # the pod's index in its task, when no *_ID is set
    POD_IP: Final = "POD_IP"  # a pserver listens on it
    HDFS_UGI: Final = "HDFS_UGI"  # from a Secret: "user,password"
    MLFLOW_TRACKING_URI: Final = "MLFLOW_TRACKING_URI"  # MLflow's own name
    METRICS_PORT: Final = "TRAINER_METRICS_PORT"  # default TRAINER_METRICS_PORT; 0: off


class ServingEnv:
    """The serving image's variables (elasticctr_serving.__main__)."""

    MODEL_URI: Final = "MODEL_URI"
    CUBE_CONF: Final = "CUBE_CONF"
    CUBE_TRANSFER_URL: Final = "CUBE_TRANSFER_URL"
    SLOT_CONF: Final = "SLOT_CONF"
    SPARSE_DIM: Final = "SPARSE_DIM"
    AUTH_TOKEN: Final = "SERVING_AUTH_TOKEN"  # from a Secret, with serving.auth token
