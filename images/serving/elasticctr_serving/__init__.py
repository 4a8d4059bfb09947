"""elasticctr serving: CTR prediction on Paddle Inference with cube lookups (docs/serving.md)."""

# Paddle 2.6.2's wheel carries zlib symbols of its own: once `import paddle` has loaded them
# first, Python's zlib (HTTP gzip in urllib3/aiohttp, gzip files) crashes the process
# (SIGSEGV, or "inconsistent stream state"). Loading Python's zlib first avoids it, so this
# package does so before any of its modules can import Paddle.
import zlib  # noqa: F401
