"""Stack output names: exported by the program (infra/program.py), read by the client CLI
(`pulumi stack output --json`) and the tests; written once, here, where both reach them."""

SERVING_URL = "serving_url"
SERVING_GRPC = "serving_grpc"  # host:port of the Open Inference Protocol over gRPC
SERVING_TOKEN = "serving_token"  # secret: only with serving.auth token; --show-secrets
MLFLOW_URL = "mlflow_url"
BUCKET = "bucket"
STORAGE_ENDPOINT = "storage_endpoint"
HDFS_ADDRESS = "hdfs_address"
NAMESPACE = "namespace"
TRAINER0_LOGS = "trainer0_logs"
CUBE_SHARDS = "cube_shards"
CUBE_LAYOUT = "cube_layout"  # the shard pods are cube-<layout>-<shard>-<replica>
CUBE_TRANSFER_URL = "cube_transfer_url"
JOINER_URL = "joiner_url"  # feedback.enabled: the joiner's /status; "" otherwise
PROMETHEUS_URL = "prometheus_url"  # monitoring.prometheus in-cluster: its HTTP API; "" otherwise
TRAINING_JOB = "training_job"
KUBECONFIG = "kubeconfig"
