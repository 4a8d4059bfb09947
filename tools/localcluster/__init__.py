"""A real one-node Kubernetes on this machine: a control plane (etcd, kube-apiserver,
controller-manager, scheduler as host processes), a node (containerd, runc, CNI bridge,
kubelet, kube-proxy), CoreDNS, kube-router's NetworkPolicy enforcer and a host-path volume
provisioner.

`tools/cluster.py up|down|status` is the command; docs/local-cluster.md the manual.

Modules, in the order `up` uses them:
  settings     address ranges, ports and paths, decided once
  controlplane etcd and the Kubernetes servers, their certificates, processes by PID
  host         what the node changes on the host: recorded before, restored after
  node         containerd, CNI, kubelet and kube-proxy configuration and launch
  addons       cluster objects the node needs (DNS Service, RBAC, StorageClass)
  provisioner  the volume provisioner process (PVC -> hostPath PV)
  cluster      the orchestration: up, down, status, the lock
"""
