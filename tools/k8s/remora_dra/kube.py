"""The few Kubernetes API calls the driver makes, through the official Python client's
ApiClient (authentication, TLS, retries of connections: python3-kubernetes). The client's
generated typed APIs predate resource.k8s.io/v1, so the calls name their paths and carry
plain JSON objects, as the API's reference gives them."""

from kubernetes import client as kclient

from . import DRIVER

SLICES = "/apis/resource.k8s.io/v1/resourceslices"
CLAIMS = "/apis/resource.k8s.io/v1/resourceclaims"


class Kube:
    def __init__(self, api_client=None):
        self.api = api_client or kclient.ApiClient()

    def _call(self, method, path, body=None, query=None):
        return self.api.call_api(path, method, query_params=query or [], body=body,
                                 header_params={"Accept": "application/json", "Content-Type": "application/json"},
                                 response_type="object", auth_settings=["BearerToken"], _return_http_data_only=True,
                                 _preload_content=True)

    def list_slices(self):
        """Our driver's ResourceSlices."""
        return self._call("GET", SLICES, query=[("fieldSelector", "spec.driver=" + DRIVER)]).get("items", [])

    def create_slice(self, obj):
        return self._call("POST", SLICES, body=obj)

    def replace_slice(self, name, obj):
        return self._call("PUT", SLICES + "/" + name, body=obj)

    def delete_slice(self, name):
        return self._call("DELETE", SLICES + "/" + name)

    def list_claims(self):
        """Every ResourceClaim of the cluster."""
        return self._call("GET", CLAIMS).get("items", [])

    def get_claim(self, namespace, name):
        return self._call("GET", "/apis/resource.k8s.io/v1/namespaces/%s/resourceclaims/%s" % (namespace, name))
