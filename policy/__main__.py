"""The policy pack: `pulumi preview --policy-pack policy` runs this file (docs/review.md).

It only assembles the pack; every rule lives in its own module.
"""

import sys
from pathlib import Path

# The pack's modules import `policy.*` from the project root (the engine runs this directory).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pulumi_policy import EnforcementLevel, Policy, PolicyPack

from policy.budget import training_budget
from policy.credentials import no_plaintext_credentials
from policy.cube import cube_shards_match
from policy.exposure import load_balancer_guarded
from policy.images import image_tag_pinned
from policy.pod_security import no_host_namespaces, no_privileged_containers, run_as_non_root
from policy.resources import container_resources
from policy.storage import bucket_not_public, s3_public_access_block
from policy.volcano import volcano_min_available, volcano_restart_policy

NAME = "elasticctr-guardrails"
POLICIES: list[Policy] = [
    container_resources,
    no_privileged_containers,
    no_host_namespaces,
    run_as_non_root,
    image_tag_pinned,
    no_plaintext_credentials,
    volcano_min_available,
    volcano_restart_policy,
    cube_shards_match,
    bucket_not_public,
    s3_public_access_block,
    load_balancer_guarded,
    training_budget,
]

if __name__ == "__main__":
    PolicyPack(name=NAME, policies=POLICIES, enforcement_level=EnforcementLevel.MANDATORY)
