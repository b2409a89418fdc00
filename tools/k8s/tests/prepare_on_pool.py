"""The kubelet plugin against a real Remora pool (tests/ops/dra_test.sh starts the pool):
a claim allocated two of the pool's GPUs (one per server) is prepared through the plugin's
gRPC socket; a CUDA program then runs with the environment the CDI spec gives containers
(the token directory's host path in place of its mount) and must see exactly those two
devices with the claim's memory limit; unprepare must remove the tenant from the pool.

    prepare_on_pool.py BIN_DIR SHIM POOL_ADDRESS STATE_DIR_OF_A_POOL_SERVER WORK_DIR
"""
import json
import os
import subprocess
import sys
import threading
import http.server

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.environ.get("REMORA_DRA_GEN", os.path.join(HERE, "..", "gen")))
sys.path.insert(0, os.path.join(HERE, ".."))

import grpc  # noqa: E402
from kubernetes import client as kclient  # noqa: E402

import dra_pb2  # noqa: E402
import dra_pb2_grpc  # noqa: E402
from remora_dra import DRIVER, kube, slices  # noqa: E402
from remora_dra.plugin import Plugin, serve  # noqa: E402
from remora_dra.pool import Remoractl  # noqa: E402

UID = "5eed0000-1111-2222-3333-444455556666"


def fail(msg):
    print("FAIL dra on a pool: " + msg, flush=True)
    sys.exit(1)


def main():
    bin_dir, shim, pool_address, state_dir, work = sys.argv[1:6]
    pool = Remoractl(os.path.join(bin_dir, "remoractl"), state_dir=state_dir)
    status = pool.status()
    devices = sorted(slices.devices_of(status))
    by_server = {}
    for (pool_name, device), (server, index) in sorted(slices.devices_of(status).items()):
        by_server.setdefault(server, (pool_name, device))
    if len(by_server) < 2:
        fail("the pool should have GPUs on two servers: %s" % devices)
    results = [{"request": "gpus", "driver": DRIVER, "pool": p, "device": d} for p, d in list(by_server.values())[:2]]
    claim = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
             "metadata": {"name": "train", "namespace": "ml", "uid": UID, "resourceVersion": "1"},
             "spec": {"devices": {"requests": [{"name": "gpus", "exactly": {"deviceClassName": "gpu.remora.dra.io",
                                                                           "count": 2}}]}},
             "status": {"allocation": {"devices": {"results": results, "config": [
                 {"source": "FromClaim", "requests": ["gpus"],
                  "opaque": {"driver": DRIVER, "parameters": {"apiVersion": DRIVER + "/v1alpha1", "kind": "RemoraConfig",
                                                              "memoryPerGpu": "48Mi"}}}]}}}}

    class Api(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            ok = self.path == "/apis/resource.k8s.io/v1/namespaces/ml/resourceclaims/train"
            out = json.dumps(claim if ok else {"kind": "Status", "code": 404}).encode()
            self.send_response(200 if ok else 404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

        def log_message(self, *args):
            pass

    api = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Api)
    threading.Thread(target=api.serve_forever, daemon=True).start()
    cfg = kclient.Configuration()
    cfg.host = "http://127.0.0.1:%d" % api.server_address[1]
    plugin = Plugin(kube.Kube(kclient.ApiClient(cfg)), pool, pool_address, os.path.dirname(shim),
                    state_dir=os.path.join(work, "state"), cdi_dir=os.path.join(work, "cdi"))
    sock = os.path.join(work, "plugins", DRIVER, "dra.sock")
    servers, _ = serve(plugin, sock, os.path.join(work, "registry", DRIVER + "-reg.sock"))
    ref = dra_pb2.Claim(namespace="ml", uid=UID, name="train")
    with grpc.insecure_channel("unix://" + sock) as ch:
        dra = dra_pb2_grpc.DRAPluginStub(ch)
        r = dra.NodePrepareResources(dra_pb2.NodePrepareResourcesRequest(claims=[ref]))
        if r.claims[UID].error:
            fail("prepare: " + r.claims[UID].error)
        print("  prepared: " + ", ".join("%s/%s" % (d.pool_name, d.device_name) for d in r.claims[UID].devices), flush=True)
        with open(os.path.join(work, "cdi", "%s-%s.json" % (DRIVER, UID))) as f:
            spec = json.load(f)
        edits = spec["devices"][0]["containerEdits"]
        env = dict(os.environ)
        for e in edits["env"]:
            k, v = e.split("=", 1)
            env[k] = v
        # What the container runtime would mount: the token directory and the shim's.
        mounts = {m["containerPath"]: m["hostPath"] for m in edits["mounts"]}
        env["REMORA_TOKEN_FILE"] = env["REMORA_TOKEN_FILE"].replace("/var/run/remora", mounts["/var/run/remora"])
        env["LD_PRELOAD"] = env["LD_PRELOAD"].replace("/opt/remora/lib", mounts["/opt/remora/lib"])
        p = subprocess.run([os.path.join(bin_dir, "app_device_info"), "2"], env=env, capture_output=True, text=True,
                           timeout=60)
        print("  " + p.stdout.replace("\n", "\n  "), flush=True)
        if p.returncode != 0 or "PASS device_info" not in p.stdout:
            fail("the claim's program: %s %s" % (p.stdout, p.stderr[-2000:]))
        if "device 1: " not in p.stdout or "48 MiB" not in p.stdout.split("device 1: ")[1].splitlines()[0]:
            fail("device 1 does not show the claim's 48 MiB: " + p.stdout)
        tenant = "k8s-" + UID
        if tenant not in pool.tenants():
            fail("the claim's tenant is not in the pool")
        u = dra.NodeUnprepareResources(dra_pb2.NodeUnprepareResourcesRequest(claims=[ref]))
        if u.claims[UID].error:
            fail("unprepare: " + u.claims[UID].error)
        if tenant in pool.tenants():
            fail("the claim's tenant is still in the pool after unprepare")
    for s in servers:
        s.stop(None)
    api.shutdown()
    print("PASS dra on a pool: a claim's two GPUs on two servers prepared, used through its CDI environment, "
          "unprepared", flush=True)


if __name__ == "__main__":
    main()
