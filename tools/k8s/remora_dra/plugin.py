"""The driver's kubelet plugin (a DaemonSet on every node that runs GPU pods; nodes need no
GPU, no NVIDIA driver and no CUDA). It serves the kubelet's DRA gRPC API on a unix socket and
registers it through the kubelet's plugin registration socket.

NodePrepareResources(claim): reads the claim (its allocated devices of this driver and the
opaque RemoraConfig parameters), creates the pool's tenant k8s-<claim uid> with those GPUs and
limits, writes its token to <state>/<uid>/token and a CDI spec that mounts that directory at
/var/run/remora and the shim at /opt/remora/lib and sets REMORA_SERVER (the pool's address),
REMORA_TOKEN_FILE and LD_PRELOAD. A claim prepared already is answered again the same way.
NodeUnprepareResources(claim): deletes the tenant (its sessions end, its memory returns) and
the files; idempotent."""

import json
import logging
import os
import re
import shutil

import dra_pb2
import dra_pb2_grpc
from kubernetes.client.exceptions import ApiException
import pluginregistration_pb2
import pluginregistration_pb2_grpc

from . import DRIVER
from . import slices as sl
from .controller import tenant_of

log = logging.getLogger("remora-dra.plugin")

DRA_SERVICE = "k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin"
CONFIG_KIND = "RemoraConfig"
CONFIG_API = DRIVER + "/v1alpha1"
_QUANTITY = re.compile(r"^([0-9]+)(Ki|Mi|Gi|Ti|Pi|k|M|G|T|P)?$")
_UNITS = {None: 1, "Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40, "Pi": 1 << 50,
          "k": 10 ** 3, "M": 10 ** 6, "G": 10 ** 9, "T": 10 ** 12, "P": 10 ** 15}


def quantity_bytes(text):
    """A Kubernetes quantity of bytes ("16Gi", "500M", "1073741824") as an int."""
    m = _QUANTITY.match(str(text).strip())
    if not m:
        raise ValueError("'%s' is not a quantity of bytes (like 16Gi)" % text)
    return int(m.group(1)) * _UNITS[m.group(2)]


def claim_config(claim):
    """(memory per GPU, memory across the pool) from the claim's RemoraConfig parameters."""
    memory = pool_memory = None
    alloc = claim.get("status", {}).get("allocation", {}).get("devices", {})
    for c in alloc.get("config", []):
        opaque = c.get("opaque") or {}
        if opaque.get("driver") != DRIVER:
            continue
        p = opaque.get("parameters") or {}
        if p.get("kind") != CONFIG_KIND or p.get("apiVersion") != CONFIG_API:
            raise ValueError("unknown parameters %s/%s for %s (expected %s, kind %s)" % (
                p.get("apiVersion"), p.get("kind"), DRIVER, CONFIG_API, CONFIG_KIND))
        if "memoryPerGpu" in p:
            memory = quantity_bytes(p["memoryPerGpu"])
        if "poolMemory" in p:
            pool_memory = quantity_bytes(p["poolMemory"])
    return memory, pool_memory


class Plugin(dra_pb2_grpc.DRAPluginServicer):
    """`kube` reads claims, `pool` is the Remora pool (pool.RemoraPool); files go under
    `state_dir` (tokens) and `cdi_dir` (CDI specs)."""

    def __init__(self, kube, pool, pool_address, shim_dir, state_dir="/var/run/remora-dra", cdi_dir="/var/run/cdi",
                 shares=1):
        self.kube = kube
        self.pool = pool
        self.pool_address = pool_address
        self.shim_dir = shim_dir
        self.state_dir = state_dir
        self.cdi_dir = cdi_dir
        self.shares = shares

    def cdi_id(self, uid):
        return "%s/claim=%s" % (DRIVER, uid)

    def cdi_path(self, uid):
        return os.path.join(self.cdi_dir, "%s-%s.json" % (DRIVER, uid))

    def _write(self, path, text, mode):
        tmp = path + ".tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, mode)
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.chmod(tmp, mode)
        os.replace(tmp, path)

    def prepare(self, ref):
        try:
            claim = self.kube.get_claim(ref.namespace, ref.name)
        except ApiException as e:
            raise ValueError("cannot read claim %s/%s: the API answered %s %s" % (ref.namespace, ref.name, e.status,
                                                                               e.reason)) from None
        if claim["metadata"]["uid"] != ref.uid:
            raise ValueError("claim %s/%s is not the one asked for (uid %s, not %s)" % (
                ref.namespace, ref.name, claim["metadata"]["uid"], ref.uid))
        results = [r for r in claim.get("status", {}).get("allocation", {}).get("devices", {}).get("results", [])
                   if r.get("driver") == DRIVER]
        if not results:
            raise ValueError("claim %s/%s has no device of %s allocated" % (ref.namespace, ref.name, DRIVER))
        memory, pool_memory = claim_config(claim)
        devices = sl.devices_of(self.pool.status(), self.shares)
        gpus = []
        for r in results:
            where = devices.get((r["pool"], r["device"]))
            if where is None:
                raise ValueError("device %s/%s is not a GPU of the pool now" % (r["pool"], r["device"]))
            if where not in gpus:  # two shares of one GPU are one GPU
                gpus.append(where)
        tenant = tenant_of(ref.uid)
        token_dir = os.path.join(self.state_dir, ref.uid)
        token_file = os.path.join(token_dir, "token")
        if not os.path.exists(token_file):
            if tenant in self.pool.tenants():
                self.pool.delete_tenant(tenant)  # half made by an earlier try: start again
            token = self.pool.create_tenant(tenant, memory, pool_memory)
            try:
                for server, index in gpus:
                    self.pool.attach_gpu(tenant, server, index)
                os.makedirs(self.state_dir, mode=0o711, exist_ok=True)
                os.makedirs(token_dir, mode=0o755, exist_ok=True)
                # Read by the claim's containers, whatever their user; the directory is only
                # mounted into them.
                self._write(token_file, token + "\n", 0o444)
            except Exception:
                self.pool.delete_tenant(tenant)
                shutil.rmtree(token_dir, ignore_errors=True)
                raise
        spec = {
            "cdiVersion": "0.6.0",
            "kind": DRIVER + "/claim",
            "devices": [{
                "name": ref.uid,
                "containerEdits": {
                    "env": ["REMORA_SERVER=" + self.pool_address, "REMORA_TOKEN_FILE=/var/run/remora/token",
                            "LD_PRELOAD=/opt/remora/lib/libremora.so"],
                    "mounts": [
                        {"hostPath": token_dir, "containerPath": "/var/run/remora", "options": ["ro", "bind"]},
                        {"hostPath": self.shim_dir, "containerPath": "/opt/remora/lib", "options": ["ro", "bind"]},
                    ],
                },
            }],
        }
        os.makedirs(self.cdi_dir, exist_ok=True)
        self._write(self.cdi_path(ref.uid), json.dumps(spec, indent=2) + "\n", 0o644)
        log.info("claim %s/%s prepared: tenant %s with %d GPU(s)", ref.namespace, ref.name, tenant, len(gpus))
        return [dra_pb2.Device(request_names=[r["request"]], pool_name=r["pool"], device_name=r["device"],
                               cdi_device_ids=[self.cdi_id(ref.uid)]) for r in results]

    def unprepare(self, ref):
        self.pool.delete_tenant(tenant_of(ref.uid))
        shutil.rmtree(os.path.join(self.state_dir, ref.uid), ignore_errors=True)
        try:
            os.unlink(self.cdi_path(ref.uid))
        except FileNotFoundError:
            pass
        log.info("claim %s/%s unprepared: tenant %s deleted", ref.namespace, ref.name, tenant_of(ref.uid))

    def NodePrepareResources(self, request, context):
        out = dra_pb2.NodePrepareResourcesResponse()
        for ref in request.claims:
            try:
                out.claims[ref.uid].devices.extend(self.prepare(ref))
            except Exception as e:  # a claim's failure is its answer, not the call's
                log.warning("claim %s/%s: %s", ref.namespace, ref.name, e)
                out.claims[ref.uid].error = str(e)
        return out

    def NodeUnprepareResources(self, request, context):
        out = dra_pb2.NodeUnprepareResourcesResponse()
        for ref in request.claims:
            try:
                self.unprepare(ref)
                out.claims[ref.uid].CopyFrom(dra_pb2.NodeUnprepareResourceResponse())
            except Exception as e:
                log.warning("claim %s/%s: %s", ref.namespace, ref.name, e)
                out.claims[ref.uid].error = str(e)
        return out


class Registration(pluginregistration_pb2_grpc.RegistrationServicer):
    """What the kubelet's plugin watcher asks on the registration socket."""

    def __init__(self, endpoint):
        self.endpoint = endpoint
        self.registered = None

    def GetInfo(self, request, context):
        return pluginregistration_pb2.PluginInfo(type="DRAPlugin", name=DRIVER, endpoint=self.endpoint,
                                                 supported_versions=[DRA_SERVICE])

    def NotifyRegistrationStatus(self, request, context):
        self.registered = request.plugin_registered
        if request.plugin_registered:
            log.info("registered with the kubelet")
        else:
            log.error("the kubelet refused the registration: %s", request.error)
        return pluginregistration_pb2.RegistrationStatusResponse()


def serve(plugin, plugin_socket, registration_socket, workers=4):
    """Serves the DRA API on plugin_socket and the registration on registration_socket;
    returns the two grpc servers (started)."""
    import grpc
    from concurrent import futures
    servers = []
    for path in (plugin_socket, registration_socket):
        if os.path.exists(path):
            os.unlink(path)
        os.makedirs(os.path.dirname(path), exist_ok=True)
    s1 = grpc.server(futures.ThreadPoolExecutor(max_workers=workers))
    dra_pb2_grpc.add_DRAPluginServicer_to_server(plugin, s1)
    s1.add_insecure_port("unix://" + plugin_socket)
    s1.start()
    servers.append(s1)
    reg = Registration(plugin_socket)
    s2 = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
    pluginregistration_pb2_grpc.add_RegistrationServicer_to_server(reg, s2)
    s2.add_insecure_port("unix://" + registration_socket)
    s2.start()
    servers.append(s2)
    return servers, reg
