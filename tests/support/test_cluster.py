"""The host-restore comparison (tests/support/cluster.py): blind to what the kernel sets by
itself, strict about what the node writes."""

from __future__ import annotations

from pathlib import Path

from tests.support.cluster import KERNEL_GENERATED_SYSCTLS, all_sysctls, sysctl_changes
from tools.localcluster import host

# As a freshly booted machine reads it, and after the first use of TCP Fast Open.
NEVER_GENERATED = "00000000-00000000-00000000-00000000"
GENERATED = "3187eb8e-5a1f3c20-9d0e6b47-c2a81f05"


def _other(value: str) -> str:
    return "0" if value.strip() != "0" else "1"


def test_a_key_the_kernel_generates_on_first_use_is_no_change() -> None:
    before = {"net.ipv4.tcp_fastopen_key": NEVER_GENERATED, "vm.swappiness": "60"}
    after = {"net.ipv4.tcp_fastopen_key": GENERATED, "vm.swappiness": "60"}
    assert sysctl_changes(before, after) == []


def test_a_sysctl_of_the_node_not_written_back_is_caught() -> None:
    before = all_sysctls()
    for key in ("vm.overcommit_memory", "net.ipv4.ip_forward"):
        assert key in host.SYSCTLS
        after = dict(before, **{key: _other(before[key])})
        # The kernel-generated keys moving at the same time hide nothing.
        after.update({k: GENERATED for k in KERNEL_GENERATED_SYSCTLS})
        assert sysctl_changes(before, after) == [f"sysctl {key}: {before[key]} -> {after[key]}"]


def test_a_sysctl_the_node_writes_without_recording_it_is_caught() -> None:
    before = all_sysctls()
    key = "net.ipv4.conf.all.rp_filter"
    assert key not in host.SYSCTLS
    after = dict(before, **{key: _other(before[key])})
    assert sysctl_changes(before, after) == [f"sysctl {key}: {before[key]} -> {after[key]}"]
    # A key that appeared (or went) is a change too.
    assert sysctl_changes(before, dict(before, **{"net.example.new_key": "1"})) == [
        "sysctl net.example.new_key: None -> 1"
    ]


def test_the_kernel_generated_keys_exist_and_are_none_of_the_nodes() -> None:
    # Their files, not `sysctl -a`: only root may read the Fast Open key.
    missing = [k for k in KERNEL_GENERATED_SYSCTLS if not Path("/proc/sys", *k.split(".")).exists()]
    assert missing == []
    assert not KERNEL_GENERATED_SYSCTLS & set(host.SYSCTLS)
