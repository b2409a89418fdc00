"""The pool's GPUs as Kubernetes ResourceSlices (resource.k8s.io/v1): one slice per Remora
server (its own DRA resource pool), published for all nodes (`allNodes`: the GPUs are reached
over the network from any node), each GPU a device - or, with shares > 1, that many devices
(`<gpu>-s<k>`), so that several claims can use one GPU while Remora enforces their memory.

Pure functions: a `remoractl --json pool status` document in, ResourceSlice objects out."""

import re

from . import DRIVER

API_VERSION = "resource.k8s.io/v1"


def dns_label(text):
    """A DNS label (RFC 1123) made of `text`: lowercase, [a-z0-9-], at most 63, alphanumeric ends."""
    label = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")
    return (label[:63].rstrip("-")) or "x"


def device_name(server, index, share=None):
    name = "%s-gpu%d" % (dns_label(server), index)
    return dns_label(name if share is None else "%s-s%d" % (name, share))


def pool_name(server):
    return dns_label(server)


def slice_name(server):
    return dns_label("remora-" + server)


def devices_of(status, shares=1):
    """(pool name, device name) -> (server, GPU index), for every live GPU of the pool."""
    out = {}
    for g in status.get("gpus", []):
        if g.get("gone"):
            continue
        for k in range(shares):
            out[(pool_name(g["server"]), device_name(g["server"], g["index"], k if shares > 1 else None))] = (
                g["server"], g["index"])
    return out


def slices_for(status, shares=1, generation=1):
    """The ResourceSlices that describe the pool now."""
    emulated = {s["name"]: bool(s.get("emulated")) for s in status.get("servers", [])}
    gpus_by_server = {}
    for g in status.get("gpus", []):
        if not g.get("gone"):
            gpus_by_server.setdefault(g["server"], []).append(g)
    out = []
    for server in sorted(gpus_by_server):
        devices = []
        for g in sorted(gpus_by_server[server], key=lambda x: x["index"]):
            attributes = {
                "uuid": {"string": g["uuid"][:64]},
                "model": {"string": (g.get("name") or "unknown")[:64]},
                "server": {"string": server[:64]},
                "index": {"int": g["index"]},
                "emulated": {"bool": emulated.get(server, False)},
            }
            for k in range(shares):
                d = {"name": device_name(server, g["index"], k if shares > 1 else None),
                     "attributes": dict(attributes),
                     "capacity": {"memory": {"value": str(g["memory"])}}}
                if shares > 1:
                    d["attributes"]["share"] = {"int": k}
                devices.append(d)
        out.append({
            "apiVersion": API_VERSION,
            "kind": "ResourceSlice",
            "metadata": {"name": slice_name(server), "labels": {"app.kubernetes.io/managed-by": "remora-dra"}},
            "spec": {
                "driver": DRIVER,
                "pool": {"name": pool_name(server), "generation": generation, "resourceSliceCount": 1},
                "allNodes": True,
                "devices": devices,
            },
        })
    return out
