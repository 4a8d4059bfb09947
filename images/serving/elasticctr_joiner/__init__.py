"""The feedback joiner (docs/feedback.md): impressions and clicks -> training partitions."""
