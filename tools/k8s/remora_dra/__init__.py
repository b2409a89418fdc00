"""Remora's Dynamic Resource Allocation driver for Kubernetes (docs/KUBERNETES.md): the
controller publishes a Remora pool's GPUs as ResourceSlices and removes the tenants of claims
that are gone; the kubelet plugin prepares a claim (a tenant of the pool with the allocated
GPUs, its token on the node, a CDI spec that injects the shim) and unprepares it.

The Kubernetes API is reached with the official Python client (python3-kubernetes), the
kubelet's gRPC with grpcio; Remora's pool with remoractl (its admin API)."""

DRIVER = "remora.dra.io"
