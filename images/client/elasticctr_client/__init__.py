"""The elasticctr user CLI: predict, logs, status, upload (docs/serving.md, "Client")."""
