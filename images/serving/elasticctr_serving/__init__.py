"""elasticctr serving: CTR prediction on Paddle Inference with cube lookups (docs/serving.md)."""
