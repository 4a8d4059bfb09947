"""Stack output names, shared by the program, the tests and the client CLI."""

SERVING_URL = "serving_url"
SERVING_TOKEN = "serving_token"  # secret; only with serving.auth token
MLFLOW_URL = "mlflow_url"
BUCKET = "bucket"
STORAGE_ENDPOINT = "storage_endpoint"
HDFS_ADDRESS = "hdfs_address"
NAMESPACE = "namespace"
TRAINER0_LOGS = "trainer0_logs"
CUBE_SHARDS = "cube_shards"
CUBE_TRANSFER_URL = "cube_transfer_url"
TRAINING_JOB = "training_job"
KUBECONFIG = "kubeconfig"
