"""Remora's DRA driver without a cluster (none can run here): every object it sends to the
Kubernetes API, and every recorded API answer it reads, is checked against the API's published
schema (resource_v1_schema.json, trimmed from Kubernetes' OpenAPI of resource.k8s.io/v1);
the API is a local HTTP server answering the recorded requests (recorded_api.json) through the
official client; the kubelet's side is a real gRPC client on the plugin's unix sockets. The
Remora pool is a double behind pool.RemoraPool here (tests/ops/dra_test.sh runs the plugin
against a real pool).

    REMORA_DRA_GEN=<dir of dra_pb2.py ...> python3 -m unittest tools/k8s/tests/test_dra.py
"""
import copy
import http.server
import json
import os
import re
import shutil
import stat
import sys
import tempfile
import threading
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.environ.get("REMORA_DRA_GEN", os.path.join(HERE, "..", "gen")))
sys.path.insert(0, os.path.join(HERE, ".."))

import grpc  # noqa: E402
from kubernetes import client as kclient  # noqa: E402

import dra_pb2  # noqa: E402
import dra_pb2_grpc  # noqa: E402
import pluginregistration_pb2  # noqa: E402
import pluginregistration_pb2_grpc  # noqa: E402
from remora_dra import DRIVER, kube, slices  # noqa: E402
from remora_dra.controller import Controller  # noqa: E402
from remora_dra.plugin import Plugin, quantity_bytes, serve  # noqa: E402
from remora_dra.pool import RemoraError, RemoraPool  # noqa: E402

with open(os.path.join(HERE, "resource_v1_schema.json")) as _f:
    SCHEMA = json.load(_f)["components"]["schemas"]
with open(os.path.join(HERE, "recorded_api.json")) as _f:
    RECORDED = json.load(_f)
PREFIX = "io.k8s.api.resource.v1."


def validate(obj, name, path="$"):
    """Errors of `obj` against schema `name`: types, required fields, and no field the schema
    does not have (what the API server's strict field validation refuses)."""
    s = SCHEMA[name] if isinstance(name, str) else name
    if "allOf" in s:
        return validate(obj, s["allOf"][0]["$ref"].split("/")[-1], path)
    errors = []
    t = s.get("type")
    if t == "object":
        if not isinstance(obj, dict):
            return ["%s: not an object" % path]
        for r in s.get("required", []):
            if r not in obj:
                errors.append("%s: no '%s'" % (path, r))
        props = s.get("properties")
        for k, v in obj.items():
            if props is not None and k in props:
                errors += validate(v, props[k], path + "." + k)
            elif "additionalProperties" in s:
                errors += validate(v, s["additionalProperties"], "%s[%s]" % (path, k))
            elif props is not None:
                errors.append("%s: unknown field '%s'" % (path, k))
    elif t == "array":
        if not isinstance(obj, list):
            return ["%s: not a list" % path]
        for i, v in enumerate(obj):
            errors += validate(v, s["items"], "%s[%d]" % (path, i))
    elif t == "string" and not isinstance(obj, str):
        errors.append("%s: not a string" % path)
    elif t == "integer" and (not isinstance(obj, int) or isinstance(obj, bool)):
        errors.append("%s: not an integer" % path)
    elif t == "boolean" and not isinstance(obj, bool):
        errors.append("%s: not a boolean" % path)
    return errors


DNS_LABEL = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")

STATUS = {  # `remoractl --json pool status` of a pool of two servers, one GPU gone
    "server": "s1", "revision": 42, "fresh": True, "registered": True, "endpoints": ["http://127.0.0.1:2379"],
    "servers": [{"name": "s1", "urls": ["tcp://10.0.0.1:7070"], "backend": "cuda", "emulated": False},
                {"name": "gpu_box.2", "urls": ["tcp://10.0.0.2:7070"], "backend": "cuda", "emulated": False}],
    "gpus": [{"server": "s1", "index": 0, "uuid": "GPU-aaaa", "name": "NVIDIA H200", "memory": 150323855360, "used": 0,
              "gone": False, "tenants": []},
             {"server": "s1", "index": 1, "uuid": "GPU-bbbb", "name": "NVIDIA H200", "memory": 150323855360, "used": 0,
              "gone": False, "tenants": []},
             {"server": "gpu_box.2", "index": 0, "uuid": "GPU-cccc", "name": "NVIDIA H200", "memory": 150323855360,
              "used": 0, "gone": False, "tenants": []},
             {"server": "lost", "index": 0, "uuid": "GPU-dddd", "name": "", "memory": 0, "used": 0, "gone": True,
              "tenants": ["x"]}],
}


class FakePool(RemoraPool):
    def __init__(self):
        self.calls = []
        self.names = []
        self.fail_attach = False

    def status(self):
        return copy.deepcopy(STATUS)

    def tenants(self):
        return list(self.names)

    def create_tenant(self, name, memory_per_gpu=None, pool_memory=None):
        if name in self.names:
            raise RemoraError("tenant '%s' already exists in the pool" % name)
        self.calls.append(("create", name, memory_per_gpu, pool_memory))
        self.names.append(name)
        return "remora1.%s.secret" % name

    def attach_gpu(self, tenant, server, gpu):
        if self.fail_attach:
            raise RemoraError("no GPU %d on server '%s'" % (gpu, server))
        self.calls.append(("attach", tenant, server, gpu))

    def delete_tenant(self, name):
        self.calls.append(("delete", name))
        if name in self.names:
            self.names.remove(name)


class FakeApi:
    """An HTTP server answering the recorded requests (method and path); every request is kept."""

    def __init__(self, exchanges):
        self.exchanges = exchanges
        self.requests = []
        api = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _answer(self):
                n = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(n)) if n else None
                path, _, query = self.path.partition("?")
                api.requests.append({"method": self.command, "path": path, "query": query, "body": body})
                for e in api.exchanges:
                    if e["method"] == self.command and e["path"] == path:
                        out = json.dumps(e["response"]["body"]).encode()
                        self.send_response(e["response"]["status"])
                        break
                else:
                    out = json.dumps({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound",
                                      "code": 404}).encode()
                    self.send_response(404)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            do_GET = do_POST = do_PUT = do_DELETE = _answer

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        cfg = kclient.Configuration()
        cfg.host = "http://127.0.0.1:%d" % self.server.server_address[1]
        self.kube = kube.Kube(kclient.ApiClient(cfg))

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def exchanges(*names):
    return [e for e in RECORDED["exchanges"] if e["name"] in names]


class RecordedDataTest(unittest.TestCase):
    def test_recorded_answers_follow_the_schema(self):
        kinds = {"ResourceSliceList": "ResourceSliceList", "ResourceClaimList": "ResourceClaimList",
                 "ResourceClaim": "ResourceClaim", "ResourceSlice": "ResourceSlice"}
        for e in RECORDED["exchanges"]:
            body = e["response"]["body"]
            if body.get("kind") in kinds:
                self.assertEqual(validate(body, PREFIX + kinds[body["kind"]]), [], e["name"])


class SlicesTest(unittest.TestCase):
    def test_one_slice_per_server_in_the_published_schema(self):
        out = slices.slices_for(STATUS)
        self.assertEqual([s["metadata"]["name"] for s in out], ["remora-gpu-box-2", "remora-s1"])
        for s in out:
            self.assertEqual(validate(s, PREFIX + "ResourceSlice"), [], s["metadata"]["name"])
            self.assertEqual(s["apiVersion"], "resource.k8s.io/v1")
            self.assertEqual(s["spec"]["driver"], DRIVER)
            self.assertTrue(s["spec"]["allNodes"], "network-attached: every node reaches them")
            self.assertTrue(DNS_LABEL.match(s["spec"]["pool"]["name"]))
            for d in s["spec"]["devices"]:
                self.assertTrue(DNS_LABEL.match(d["name"]), d["name"])
                self.assertEqual(d["capacity"]["memory"]["value"], "150323855360")
                self.assertEqual(len(d["attributes"]) + len(d["capacity"]), 6, "at most 32 together")
        s1 = [s for s in out if s["metadata"]["name"] == "remora-s1"][0]
        self.assertEqual([d["name"] for d in s1["spec"]["devices"]], ["s1-gpu0", "s1-gpu1"])
        self.assertEqual(s1["spec"]["devices"][1]["attributes"]["uuid"], {"string": "GPU-bbbb"})
        self.assertNotIn("lost", json.dumps(out), "a gone server's GPU is not published")

    def test_shares_and_the_device_map(self):
        out = slices.slices_for(STATUS, shares=4)
        s1 = [s for s in out if s["metadata"]["name"] == "remora-s1"][0]
        self.assertEqual(len(s1["spec"]["devices"]), 8)
        self.assertEqual(s1["spec"]["devices"][3]["name"], "s1-gpu0-s3")
        self.assertEqual(validate(s1, PREFIX + "ResourceSlice"), [])
        m = slices.devices_of(STATUS, shares=4)
        self.assertEqual(m[("gpu-box-2", "gpu-box-2-gpu0-s2")], ("gpu_box.2", 0))
        self.assertNotIn(("lost", "lost-gpu0-s0"), m)

    def test_quantities(self):
        self.assertEqual(quantity_bytes("16Gi"), 16 << 30)
        self.assertEqual(quantity_bytes("500M"), 500 * 10 ** 6)
        self.assertEqual(quantity_bytes(1024), 1024)
        with self.assertRaises(ValueError):
            quantity_bytes("1.5Gi")


class ControllerTest(unittest.TestCase):
    def setUp(self):
        self.api = FakeApi(exchanges("list-slices", "create-slice", "replace-slice", "delete-slice", "list-claims"))
        self.pool = FakePool()
        self.controller = Controller(self.api.kube, self.pool)

    def tearDown(self):
        self.api.close()

    def test_slices_are_created_replaced_and_deleted(self):
        created, replaced, deleted = self.controller.sync_slices()
        self.assertEqual((created, replaced, deleted), (["remora-gpu-box-2"], ["remora-s1"], ["remora-gone"]))
        reqs = [(r["method"], r["path"]) for r in self.api.requests]
        self.assertEqual(reqs[0], ("GET", kube.SLICES))
        self.assertIn("fieldSelector=spec.driver%3D" + DRIVER, self.api.requests[0]["query"])
        self.assertIn(("POST", kube.SLICES), reqs)
        self.assertIn(("PUT", kube.SLICES + "/remora-s1"), reqs)
        self.assertIn(("DELETE", kube.SLICES + "/remora-gone"), reqs)
        for r in self.api.requests:
            if r["body"] is not None:
                self.assertEqual(validate(r["body"], PREFIX + "ResourceSlice"), [], r["path"])
        put = [r for r in self.api.requests if r["method"] == "PUT"][0]["body"]
        self.assertEqual(put["spec"]["pool"]["generation"], 8, "the next generation of the recorded 7")
        self.assertEqual(put["metadata"]["resourceVersion"], "4711", "an update names what it replaces")

    def test_tenants_of_gone_or_deallocated_claims_are_deleted(self):
        self.pool.names = ["alice", "k8s-11111111-1111-1111-1111-111111111111", "k8s-22222222-2222-2222-2222-222222222222",
                           "k8s-33333333-3333-3333-3333-333333333333"]
        removed = self.controller.reconcile_claims()
        # 1111: allocated (kept); 2222: not allocated any more; 3333: no such claim; alice: not a claim's.
        self.assertEqual(sorted(removed), ["k8s-22222222-2222-2222-2222-222222222222",
                                           "k8s-33333333-3333-3333-3333-333333333333"])
        self.assertEqual(self.pool.names, ["alice", "k8s-11111111-1111-1111-1111-111111111111"])


class PluginTest(unittest.TestCase):
    UID = "11111111-1111-1111-1111-111111111111"

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="remora-dra-test.")
        self.api = FakeApi(exchanges("get-claim", "get-claim-bad-params", "get-claim-other-uid"))
        self.pool = FakePool()
        self.plugin = Plugin(self.api.kube, self.pool, "pool://10.0.0.1:7070,10.0.0.2:7070", "/usr/lib/remora",
                             state_dir=os.path.join(self.dir, "state"), cdi_dir=os.path.join(self.dir, "cdi"))
        self.sock = os.path.join(self.dir, "plugins", DRIVER, "dra.sock")
        self.reg_sock = os.path.join(self.dir, "plugins_registry", DRIVER + "-reg.sock")
        self.servers, self.registration = serve(self.plugin, self.sock, self.reg_sock)
        self.channel = grpc.insecure_channel("unix://" + self.sock)
        self.dra = dra_pb2_grpc.DRAPluginStub(self.channel)

    def tearDown(self):
        self.channel.close()
        for s in self.servers:
            s.stop(None)
        self.api.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def claim(self, name="train-gpus", uid=UID):
        return dra_pb2.Claim(namespace="ml", uid=uid, name=name)

    def test_registration(self):
        with grpc.insecure_channel("unix://" + self.reg_sock) as ch:
            reg = pluginregistration_pb2_grpc.RegistrationStub(ch)
            info = reg.GetInfo(pluginregistration_pb2.InfoRequest())
            self.assertEqual(info.type, "DRAPlugin")
            self.assertEqual(info.name, DRIVER)
            self.assertEqual(info.endpoint, self.sock)
            self.assertEqual(list(info.supported_versions), ["k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin"])
            reg.NotifyRegistrationStatus(pluginregistration_pb2.RegistrationStatus(plugin_registered=True))
            self.assertTrue(self.registration.registered)

    def test_prepare_then_unprepare(self):
        r = self.dra.NodePrepareResources(dra_pb2.NodePrepareResourcesRequest(claims=[self.claim()]))
        self.assertEqual(r.claims[self.UID].error, "")
        devices = r.claims[self.UID].devices
        self.assertEqual([(d.pool_name, d.device_name) for d in devices], [("s1", "s1-gpu1"), ("gpu-box-2", "gpu-box-2-gpu0")])
        self.assertEqual(list(devices[0].cdi_device_ids), [DRIVER + "/claim=" + self.UID])
        self.assertEqual(list(devices[0].request_names), ["gpus"])
        tenant = "k8s-" + self.UID
        self.assertEqual(self.pool.calls, [("create", tenant, 16 << 30, 24 << 30), ("attach", tenant, "s1", 1),
                                           ("attach", tenant, "gpu_box.2", 0)])
        token = os.path.join(self.dir, "state", self.UID, "token")
        with open(token) as f:
            self.assertEqual(f.read(), "remora1.%s.secret\n" % tenant)
        self.assertEqual(stat.S_IMODE(os.stat(token).st_mode), 0o444)
        with open(os.path.join(self.dir, "cdi", "%s-%s.json" % (DRIVER, self.UID))) as f:
            spec = json.load(f)
        self.assertEqual(spec["kind"], DRIVER + "/claim")
        self.assertEqual(spec["devices"][0]["name"], self.UID)
        edits = spec["devices"][0]["containerEdits"]
        self.assertIn("REMORA_SERVER=pool://10.0.0.1:7070,10.0.0.2:7070", edits["env"])
        self.assertIn("REMORA_TOKEN_FILE=/var/run/remora/token", edits["env"])
        self.assertIn("LD_PRELOAD=/opt/remora/lib/libremora.so", edits["env"])
        self.assertEqual(edits["mounts"][0], {"hostPath": os.path.dirname(token), "containerPath": "/var/run/remora",
                                              "options": ["ro", "bind"]})
        # The kubelet may ask again (after its restart): the same answer, nothing made twice.
        again = self.dra.NodePrepareResources(dra_pb2.NodePrepareResourcesRequest(claims=[self.claim()]))
        self.assertEqual(again.claims[self.UID].error, "")
        self.assertEqual(len([c for c in self.pool.calls if c[0] == "create"]), 1)
        u = self.dra.NodeUnprepareResources(dra_pb2.NodeUnprepareResourcesRequest(claims=[self.claim()]))
        self.assertEqual(u.claims[self.UID].error, "")
        self.assertEqual(self.pool.calls[-1], ("delete", tenant))
        self.assertFalse(os.path.exists(token))
        self.assertFalse(os.path.exists(os.path.join(self.dir, "cdi", "%s-%s.json" % (DRIVER, self.UID))))
        u2 = self.dra.NodeUnprepareResources(dra_pb2.NodeUnprepareResourcesRequest(claims=[self.claim()]))
        self.assertEqual(u2.claims[self.UID].error, "", "idempotent")

    def test_failures_are_the_claims_answers_and_leave_nothing(self):
        bad = self.dra.NodePrepareResources(dra_pb2.NodePrepareResourcesRequest(claims=[
            self.claim("bad-params", "22222222-2222-2222-2222-222222222222"),
            self.claim("other-uid", "33333333-3333-3333-3333-333333333333"),
            self.claim("missing", "44444444-4444-4444-4444-444444444444")]))
        self.assertIn("unknown parameters", bad.claims["22222222-2222-2222-2222-222222222222"].error)
        self.assertIn("is not the one asked for", bad.claims["33333333-3333-3333-3333-333333333333"].error)
        self.assertIn("404", bad.claims["44444444-4444-4444-4444-444444444444"].error)
        self.assertEqual(self.pool.names, [])
        self.pool.fail_attach = True
        r = self.dra.NodePrepareResources(dra_pb2.NodePrepareResourcesRequest(claims=[self.claim()]))
        self.assertIn("no GPU", r.claims[self.UID].error)
        self.assertEqual(self.pool.names, [], "a half-made tenant is deleted")
        self.assertFalse(os.path.exists(os.path.join(self.dir, "state", self.UID)))


if __name__ == "__main__":
    unittest.main()
