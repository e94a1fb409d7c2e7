"""Every API version the project writes or reads, defined once (no heavier import than this module).

The renderers, the CLI, the runtime's kind registry and the controllers all name upstream APIs; a version
bump (CDI's ``v1beta1`` → ``v1``, say) must be one edit here, never a hunt for string literals.
"""

UDS_GROUP = "uds.dev"
UDS_VERSION = "v1alpha1"
UDS_API_VERSION = f"{UDS_GROUP}/{UDS_VERSION}"
"""Our own CRDs: UDSVirtualMachine and UDSVirtualMachinePool."""
UDS_PACKAGE_API_VERSION = "uds.dev/v1alpha1"
"""UDS Core's ``Package`` (a different API that happens to share our group and version today)."""
CDI_API_VERSION = "cdi.kubevirt.io/v1beta1"
CDI_UPLOAD_API_VERSION = "upload.cdi.kubevirt.io/v1beta1"
KUBEVIRT_API_VERSION = "kubevirt.io/v1"
KUBEVIRT_SUBRESOURCES_API_VERSION = "subresources.kubevirt.io/v1"
GATEWAY_API_VERSION = "gateway.networking.k8s.io/v1"
NETWORKING_API_VERSION = "networking.k8s.io/v1"
EVENTS_API_VERSION = "events.k8s.io/v1"
APIEXTENSIONS_API_VERSION = "apiextensions.k8s.io/v1"
KOPF_API_VERSION = "kopf.dev/v1"
