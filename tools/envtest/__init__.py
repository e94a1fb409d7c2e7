"""The real control plane on loopback: etcd, kube-apiserver, kube-controller-manager (README.md here)."""
