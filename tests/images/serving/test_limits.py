"""One request must not fail others: serving's per-request key limit is
cube's (cube.conf max_keys), and a request that fails in its batch fails alone."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import numpy as np
import pytest

from tests.support.serving import expected, http, probe_instances, start_stack

pytestmark = pytest.mark.slow
INFERENCE = "/ElasticCTRPredictionService/inference"


def together(url: str, bodies: Sequence[bytes | dict]) -> list[tuple[int, dict]]:
    """Send every body at once (so that serving batches them); the answers in order."""
    answers: list = [None] * len(bodies)

    def send(i: int) -> None:
        code, answer, _ = http("POST", url + INFERENCE, bodies[i], timeout=60)
        answers[i] = (code, answer)

    threads = [threading.Thread(target=send, args=(i,)) for i in range(len(bodies))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(90)
    return answers


def check_small(stack, answers, instances, want) -> None:
    for code, answer in answers:
        assert code == 200, answer
        got = np.array([p["prob1"] for p in answer["predictions"]])
        assert np.max(np.abs(got - want)) <= 1e-5


def test_a_huge_request_is_refused_by_serving_and_fails_nothing_else(procs, tmp_path,
                                                                     cube_server_bin):  # fmt: skip
    stack = start_stack(procs, tmp_path, "--max-wait-ms", "200")
    instances = probe_instances(stack.spec, 8, seed=4)
    want = expected(stack.spec, 1, instances)
    slot = str(stack.spec["slots"][0])
    feasigns = ",".join(str(f) for f in range(1, 400_001))  # 400k distinct: ~2.9 MB
    huge = f'{{"instances":[{{"slots":[{{"slot_name":"{slot}","feasigns":[{feasigns}]}}]}}]}}'
    assert 2_500_000 < len(huge) < 8 * 1024 * 1024  # within serving's body limit
    for _ in range(3):
        answers = together(stack.serving.url, [huge.encode()] + [{"instances": instances}] * 6)
        check_small(stack, answers[1:], instances, want)
        code, answer = answers[0]
        assert code == 413, answer
        assert answer["err_msg"] == (
            "400000 feasigns in one request, more than the limit 100000 (the keys cube takes "
            "in one lookup)"
        )


def test_a_request_that_fails_in_its_batch_fails_alone(procs, tmp_path, cube_server_bin):
    """cube-servers that take fewer keys than cube.conf says (a config drift): the big
    request is refused by cube; the requests batched with it still get their answers."""
    stack = start_stack(procs, tmp_path, "--max-wait-ms", "200",
                        server_args=("--max-keys", "3000"))  # fmt: skip
    instances = probe_instances(stack.spec, 8, seed=4)
    want = expected(stack.spec, 1, instances)
    slot = str(stack.spec["slots"][0])
    big = {"instances": [{"slots": [{"slot_name": slot, "feasigns": list(range(1, 20_001))}]}]}
    isolated = 0.0
    for _ in range(10):  # until the big request has shared a batch (timing: usually at once)
        answers = together(stack.serving.url, [big] + [{"instances": instances}] * 6)
        check_small(stack, answers[1:], instances, want)
        code, answer = answers[0]
        assert code == 413 and "cube refused the lookup" in answer["err_msg"], answer
        assert "exceeds the limit of 3000 keys" in answer["err_msg"]
        metrics = http("GET", stack.serving.url + "/metrics")[1]
        lines = [x for x in metrics.splitlines() if x.startswith("elasticctr_serving_isolated")]
        isolated = float(lines[0].split()[-1]) if lines else 0.0  # not shown before the first
        if isolated:
            break
    assert isolated > 0  # the big request did share a batch, which ran again one by one
