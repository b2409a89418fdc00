"""The driver's controller (one replica per cluster): publishes the Remora pool's GPUs as
ResourceSlices and reconciles the pool's tenants against ResourceClaims.

- Slices: the pool's live GPUs, per server (slices.py); a slice that differs from what the
  pool is now is replaced with the next generation, one of a server that left is deleted.
- Tenants: every tenant named k8s-<claim uid> whose ResourceClaim no longer exists, or is
  no longer allocated, is deleted with its sessions (the clean-up that does not depend on a
  node, as slurmctld's EpilogSlurmctld is for Slurm)."""

import logging

from . import slices as sl

log = logging.getLogger("remora-dra.controller")

TENANT_PREFIX = "k8s-"


def tenant_of(claim_uid):
    return TENANT_PREFIX + claim_uid


class Controller:
    def __init__(self, kube, pool, shares=1):
        self.kube = kube
        self.pool = pool
        self.shares = shares

    def sync_slices(self):
        """Returns (created, replaced, deleted) slice names."""
        want = {s["metadata"]["name"]: s for s in sl.slices_for(self.pool.status(), self.shares)}
        have = {s["metadata"]["name"]: s for s in self.kube.list_slices()}
        created, replaced, deleted = [], [], []
        for name, s in want.items():
            old = have.get(name)
            if old is None:
                self.kube.create_slice(s)
                created.append(name)
                continue
            if old.get("spec", {}).get("devices") == s["spec"]["devices"] and old["spec"].get("pool", {}).get("name") == \
                    s["spec"]["pool"]["name"]:
                continue
            s["spec"]["pool"]["generation"] = int(old["spec"].get("pool", {}).get("generation", 0)) + 1
            s["metadata"]["resourceVersion"] = old["metadata"].get("resourceVersion", "")
            self.kube.replace_slice(name, s)
            replaced.append(name)
        for name in have:
            if name not in want:
                self.kube.delete_slice(name)
                deleted.append(name)
        for what, names in (("published", created), ("updated", replaced), ("removed", deleted)):
            if names:
                log.info("ResourceSlices %s: %s", what, ", ".join(names))
        return created, replaced, deleted

    def reconcile_claims(self):
        """Deletes the tenants of claims that are gone or deallocated; returns their names."""
        live = set()
        for c in self.kube.list_claims():
            if c.get("status", {}).get("allocation"):
                live.add(tenant_of(c["metadata"]["uid"]))
        removed = []
        for t in self.pool.tenants():
            if t.startswith(TENANT_PREFIX) and t not in live:
                self.pool.delete_tenant(t)
                removed.append(t)
                log.info("tenant %s deleted: its ResourceClaim is gone or no longer allocated", t)
        return removed

    def run_once(self):
        self.sync_slices()
        self.reconcile_claims()
