"""The UDSVirtualMachine API (``uds.dev/v1alpha1``) as pydantic models.

These classes are the single source of truth: the CRD under ``deploy/crds`` is generated from them
(``python -m uds_vm_operator.api.crdgen``), and the operator parses every object through them. JSON names are
camelCase exactly as SPEC §3; Python attributes are their snake_case twins. Every rule the API server enforces
through CEL (``x-kubernetes-validations``) is mirrored by a Python validator, so a spec that slips past an old
CRD is still refused with the same message.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated, Any, Literal, TypeVar, get_args

from pydantic import BaseModel, ConfigDict, Field, StrictInt, ValidationError, model_validator
from pydantic.alias_generators import to_camel

from uds_vm_operator.api.calendar import CALENDAR_SHAPE, SCHEDULE_CHARSET, calendar_problem
from uds_vm_operator.api.errors import SpecError
from uds_vm_operator.api.quantity import QUANTITY_PATTERN, parse_bytes
from uds_vm_operator.apiversions import UDS_GROUP, UDS_VERSION
from uds_vm_operator.names import DNS_LABEL_PATTERN, DNS_SUBDOMAIN_PATTERN

API_GROUP = UDS_GROUP
API_VERSION = UDS_VERSION
VM_KIND = "UDSVirtualMachine"
VM_PLURAL = "udsvirtualmachines"
VM_SINGULAR = "udsvirtualmachine"
VM_SHORT_NAMES = ("udsvm",)
VM_API_VERSION = f"{API_GROUP}/{API_VERSION}"

CHECKSUM_PATTERN = r"^(sha256:[0-9a-f]{64}|sha512:[0-9a-f]{128})$"
CIDR_PATTERN = r"^([0-9]{1,3}(\.[0-9]{1,3}){3}/[0-9]{1,2}|[0-9a-fA-F:]+/[0-9]{1,3})$"
LINUX_USER_PATTERN = r"^[a-z_][a-z0-9_-]{0,31}$"
HOSTNAME_PATTERN = r"^(\*\.)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)+$"
MAX_VM_NAME_LENGTH = 52
"""Longest ``metadata.name``: ``<name>-cloudinit`` and ``<name>-<port>`` must stay 63-character DNS labels."""
NETBIOS_MAX_LENGTH = 15
GOLDEN_IMAGE_NAME_MAX = 55
"""``<name>-v<version>`` (version <= 100000) must stay a 63-character DNS label."""

SOURCE_KINDS = ("upload", "http", "s3", "registry", "dataSource", "pvc", "blank")
RUN_STRATEGIES = ("Always", "Halted", "Manual", "RerunOnFailure", "Once")
Phase = Literal[
    "Pending",
    "WaitingForUpload",
    "Importing",
    "Verifying",
    "Provisioning",
    "Ready",
    "Stopped",
    "Failed",
]
"""A VM's phase: the status field's type (and the CRD's enum) and the names the CLI and metrics use."""
PHASES: tuple[str, ...] = get_args(Phase)

Checksum = Annotated[
    str,
    Field(
        pattern=CHECKSUM_PATTERN,
        max_length=135,
        description="Image digest: sha256:<64 lower-case hex> or sha512:<128 lower-case hex>.",
    ),
]
Quantity = Annotated[
    str, Field(pattern=QUANTITY_PATTERN, max_length=32, description="A quantity such as 10Gi or 512Mi.")
]
DnsLabel = Annotated[str, Field(pattern=DNS_LABEL_PATTERN, min_length=1, max_length=63)]
ObjectName = Annotated[str, Field(pattern=DNS_SUBDOMAIN_PATTERN, min_length=1, max_length=253)]
ShortText = Annotated[str, Field(max_length=256)]
AccessMode = Literal["ReadWriteOnce", "ReadWriteMany", "ReadOnlyMany", "ReadWriteOncePod"]
VolumeMode = Literal["Filesystem", "Block"]
ARMORED_PUBLIC_KEY = r"^\s*-----BEGIN PGP PUBLIC KEY BLOCK-----[\s\S]+-----END PGP PUBLIC KEY BLOCK-----\s*$"
SshKey = Annotated[str, Field(min_length=1, max_length=4096, pattern=r"^(ssh-|ecdsa-|sk-)[ -~]*$")]
"""One authorized_keys line: printable ASCII only (no control character, no Unicode line separator), so a
key can never add a second line (issue 32)."""
URL_CHARS = r"[A-Za-z0-9._~:/?#\[\]@!$&()*+,;=%-]+"
"""RFC 3986 characters only: no whitespace, quotes or control characters, so a URL stays one token in the
guest's sources.list / .repo file and in CDI's importer (issue 32)."""
MIRROR_URL_PATTERN = rf"^https?://{URL_CHARS}$"


def _cel(rule: str, message: str, field_path: str | None = None) -> dict[str, str]:
    entry = {"rule": rule, "message": message}
    if field_path is not None:
        entry["fieldPath"] = field_path
    return entry


def _validations(*rules: dict[str, str]) -> dict[str, Any]:
    return {"x-kubernetes-validations": list(rules)}


class ApiModel(BaseModel):
    """Base of every API model: camelCase JSON, unknown fields refused, immutable once parsed.

    ``defer_build``: pydantic builds a model's validator on first use instead of at class creation, so the
    operator's start-up pays only for the models it parses (a VM spec, once, with its nested models
    inlined), not for every status, pool and sub-model validator it never calls on its own.
    """

    model_config = ConfigDict(
        extra="forbid",
        alias_generator=to_camel,
        validate_by_name=True,
        validate_by_alias=True,
        serialize_by_alias=True,
        frozen=True,
        defer_build=True,
    )

    def to_json_dict(self) -> dict[str, Any]:
        """Return the camelCase JSON form without unset optional fields, as a user would write it."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


# --------------------------------------------------------------------------------------------- selectors


class LabelSelectorRequirement(ApiModel):
    """One ``matchExpressions`` entry of a Kubernetes label selector."""

    key: Annotated[str, Field(min_length=1, max_length=317)]
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    values: Annotated[list[Annotated[str, Field(max_length=63)]], Field(max_length=32)] | None = None


class LabelSelector(ApiModel):
    """A Kubernetes label selector; an empty selector selects everything in its scope."""

    match_labels: Annotated[dict[str, Annotated[str, Field(max_length=63)]], Field(max_length=32)] | None = (
        None
    )
    match_expressions: Annotated[list[LabelSelectorRequirement], Field(max_length=16)] | None = None


# ------------------------------------------------------------------------------------------------ source


class UploadSource(ApiModel):
    """The image arrives through the CDI upload proxy; CDI cannot check it, so the operator verifies it."""

    checksum: Checksum | None = None


class HttpSource(ApiModel):
    """An HTTP(S) image server; CDI checks ``checksum`` itself where the installed CDI supports it."""

    url: Annotated[str, Field(pattern=rf"^https?://{URL_CHARS}$", max_length=2048)]
    checksum: Checksum | None = None
    secret_ref: ObjectName | None = Field(
        default=None, description="Secret with accessKeyId and secretKey, in the VM's namespace."
    )
    cert_config_map: ObjectName | None = Field(
        default=None, description="ConfigMap with the CA bundle of the server, in the VM's namespace."
    )


class S3Source(ApiModel):
    """An S3-compatible object store."""

    url: Annotated[str, Field(pattern=rf"^(s3|https?)://{URL_CHARS}$", max_length=2048)]
    secret_ref: ObjectName | None = None
    checksum: Checksum | None = None


class RegistrySource(ApiModel):
    """A containerDisk image in an OCI registry (``docker://`` or ``oci-archive://``)."""

    url: Annotated[str, Field(pattern=r"^(docker|oci-archive)://", max_length=2048)]
    pull_method: Literal["pod", "node"] = "pod"
    checksum: Checksum | None = None


class ObjectRef(ApiModel):
    """A namespaced object; the namespace defaults to the VM's own."""

    name: ObjectName
    namespace: DnsLabel | None = None


class CloneSource(ObjectRef):
    """A disk CDI clones (a golden image's DataSource, or a PVC); ``checksum`` makes the clone verified.

    A clone has no image file, so the digest is of the disk's raw content: the ``content sha256`` that
    ``uds-vmctl prep`` prints for the golden image. With it, the operator's verifier hashes the clone before
    the VM may start (SI-7 for every clone, and so for the golden image it was copied from); without it,
    nothing is claimed verified.
    """

    checksum: Checksum | None = Field(
        default=None,
        description="Digest of the cloned disk's raw content (uds-vmctl prep: content sha256); "
        "verified in the cluster before the VM starts.",
    )


class BlankSource(ApiModel):
    """An empty disk of ``disk.virtualSize``."""


class Source(ApiModel):
    """Where the root disk comes from: exactly one key."""

    model_config = ConfigDict(
        json_schema_extra=_validations(
            _cel(
                " + ".join(f"(has(self.{k}) ? 1 : 0)" for k in SOURCE_KINDS) + " == 1",
                "exactly one of spec.source.{" + ",".join(SOURCE_KINDS) + "} must be set",
            )
        )
    )

    upload: UploadSource | None = None
    http: HttpSource | None = None
    s3: S3Source | None = None
    registry: RegistrySource | None = None
    data_source: CloneSource | None = None
    pvc: CloneSource | None = None
    blank: BlankSource | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> Source:
        set_kinds = [kind for kind in SOURCE_KINDS if self._by_kind(kind) is not None]
        if len(set_kinds) != 1:
            raise ValueError(
                "exactly one of spec.source.{"
                + ",".join(SOURCE_KINDS)
                + "} must be set"
                + (f" (found {', '.join(set_kinds)})" if set_kinds else "")
            )
        return self

    def _by_kind(self, kind: str) -> ApiModel | None:
        attribute = {"dataSource": "data_source"}.get(kind, kind)
        value: ApiModel | None = getattr(self, attribute)
        return value

    @property
    def kind(self) -> str:
        """The JSON key of the source that is set: upload, http, s3, registry, dataSource, pvc or blank."""
        for kind in SOURCE_KINDS:
            if self._by_kind(kind) is not None:
                return kind
        raise SpecError("spec.source: exactly one source must be set")  # unreachable after validation

    @property
    def checksum(self) -> str | None:
        """The declared digest of the source image, if the source kind carries one."""
        chosen = self._by_kind(self.kind)
        value = getattr(chosen, "checksum", None)
        return value if isinstance(value, str) else None

    @property
    def is_clone(self) -> bool:
        """True for sources CDI clones (and whose size CDI infers from the source volume)."""
        return self.kind in ("dataSource", "pvc")


# -------------------------------------------------------------------------------------------------- disks


class Disk(ApiModel):
    """The root disk: size, storage class and access.

    ``virtualSize`` is the size of the virtual disk inside the image (``uds-vmctl prep`` prints it); the PVC
    is ``pvc_size(virtualSize, overheadPercent)`` exactly (SPEC §4).
    """

    virtual_size: StrictInt | str | None = Field(
        default=None,
        json_schema_extra={"x-kubernetes-int-or-string": True},
        description="Virtual disk size in bytes or as a quantity (10Gi); required unless cloning.",
    )
    storage_class_name: ObjectName | None = None
    volume_mode: VolumeMode = "Filesystem"
    access_modes: Annotated[list[AccessMode], Field(min_length=1, max_length=4)] | None = None
    overhead_percent: Annotated[int, Field(ge=0, le=100)] = 6

    @model_validator(mode="after")
    def _size_is_a_quantity(self) -> Disk:
        if self.virtual_size is not None:
            parse_bytes(self.virtual_size, field="spec.disk.virtualSize")
        return self

    @property
    def virtual_bytes(self) -> int | None:
        """The virtual size in bytes, or None when it is left to the source (clones)."""
        if self.virtual_size is None:
            return None
        return parse_bytes(self.virtual_size, field="spec.disk.virtualSize")


class DataDisk(ApiModel):
    """An additional blank disk ``<name>-data-<disk>``.

    ``Retain`` disks carry no ownerReference: they survive deletion of the VM and are re-attached by name
    when a VM of the same name is created again (rebuildability).
    """

    model_config = ConfigDict(
        json_schema_extra=_validations(
            _cel(
                "!has(self.backup) || self.backup || has(self.backupExemptionReason)",
                "backup: false needs backupExemptionReason (why this disk is not backed up)",
                ".backupExemptionReason",
            )
        )
    )

    name: Annotated[str, Field(pattern=DNS_LABEL_PATTERN, min_length=1, max_length=40)]
    size: Quantity
    storage_class_name: ObjectName | None = None
    access_modes: Annotated[list[AccessMode], Field(min_length=1, max_length=4)] | None = None
    volume_mode: VolumeMode = "Filesystem"
    retention_policy: Literal["Retain", "Delete"] = "Retain"
    backup: bool = True
    backup_exemption_reason: Annotated[str, Field(min_length=1, max_length=256)] | None = None

    @model_validator(mode="after")
    def _exemption_needs_reason(self) -> DataDisk:
        if not self.backup and not self.backup_exemption_reason:
            raise ValueError("backup: false needs backupExemptionReason (why this disk is not backed up)")
        return self


# ------------------------------------------------------------------------------------------------ network


class NetworkPort(ApiModel):
    """A port and protocol."""

    port: Annotated[int, Field(ge=1, le=65535)]
    protocol: Literal["TCP", "UDP", "SCTP"] = "TCP"


class AllowRule(ApiModel):
    """An explicit allow rule on top of the default deny: peers by selector or by CIDR, and ports."""

    model_config = ConfigDict(
        json_schema_extra=_validations(
            _cel(
                "!has(self.cidr) || (!has(self.namespaceSelector) && !has(self.podSelector))",
                "an allow rule takes either cidr or namespaceSelector/podSelector, not both",
            )
        )
    )

    direction: Literal["Ingress", "Egress"]
    namespace_selector: LabelSelector | None = None
    pod_selector: LabelSelector | None = None
    cidr: Annotated[str, Field(pattern=CIDR_PATTERN, max_length=43)] | None = None
    ports: Annotated[list[NetworkPort], Field(max_length=16)] = Field(default_factory=list)

    @model_validator(mode="after")
    def _cidr_or_selectors(self) -> AllowRule:
        if self.cidr is not None and (self.namespace_selector is not None or self.pod_selector is not None):
            raise ValueError("an allow rule takes either cidr or namespaceSelector/podSelector, not both")
        return self


class GatewayRef(ApiModel):
    """The Gateway API Gateway that terminates TLS for an exposed HTTP port."""

    name: ObjectName
    namespace: DnsLabel


class HttpExposure(ApiModel):
    """Publish a port through a Gateway API HTTPRoute (TLS is terminated at the gateway)."""

    hostname: Annotated[str, Field(pattern=HOSTNAME_PATTERN, max_length=253)]
    gateway: GatewayRef


class Exposure(ApiModel):
    """A port published as a Service ``<name>-<port>`` and, with ``http``, an HTTPRoute."""

    model_config = ConfigDict(
        json_schema_extra=_validations(
            _cel(
                "!has(self.http) || !has(self.protocol) || self.protocol == 'TCP'",
                "expose[].http needs protocol TCP",
            )
        )
    )

    port: Annotated[int, Field(ge=1, le=65535)]
    protocol: Literal["TCP", "UDP", "SCTP"] = "TCP"
    name: Annotated[str, Field(pattern=r"^[a-z]([-a-z0-9]*[a-z0-9])?$", max_length=15)] | None = None
    http: HttpExposure | None = None

    @model_validator(mode="after")
    def _http_is_tcp(self) -> Exposure:
        if self.http is not None and self.protocol != "TCP":
            raise ValueError("http needs protocol TCP")
        return self


class VpnGateway(ApiModel):
    """The VPN gateway pods that egress is pinned to (kill switch: no gateway, no egress)."""

    namespace_selector: LabelSelector | None = None
    pod_selector: LabelSelector


class Network(ApiModel):
    """Zero-trust networking: default deny, an egress class, explicit allows and exposures."""

    model_config = ConfigDict(
        json_schema_extra=_validations(
            _cel(
                "!has(self.egress) || self.egress != 'vpn' || has(self.vpnGateway)",
                "network.egress: vpn needs network.vpnGateway (the gateway pods egress is pinned to)",
                ".vpnGateway",
            ),
            _cel(
                "!has(self.expose) || self.expose.all(e, self.expose.exists_one(f, f.port == e.port))",
                "network.expose[].port values must be unique",
                ".expose",
            ),
        )
    )

    mode: Literal["networkpolicy", "uds-package"] = "networkpolicy"
    egress: Literal["dns", "none", "internet", "vpn"] = "dns"
    vpn_gateway: VpnGateway | None = None
    allow: Annotated[list[AllowRule], Field(max_length=32)] = Field(default_factory=list)
    expose: Annotated[list[Exposure], Field(max_length=16)] = Field(default_factory=list)

    @model_validator(mode="after")
    def _vpn_needs_gateway(self) -> Network:
        if self.egress == "vpn" and self.vpn_gateway is None:
            raise ValueError("egress: vpn needs vpnGateway (the gateway pods egress is pinned to)")
        ports = [item.port for item in self.expose]
        if len(ports) != len(set(ports)):
            raise ValueError("expose[].port values must be unique")
        return self


# --------------------------------------------------------------------------------------------- cloud-init


class GuestUser(ApiModel):
    """A key-only guest user (its password is locked)."""

    name: Annotated[str, Field(pattern=LINUX_USER_PATTERN, max_length=32)]
    ssh_authorized_keys: Annotated[list[SshKey], Field(max_length=32)] = Field(default_factory=list)
    sudo: bool = False

    @model_validator(mode="after")
    def _not_root(self) -> GuestUser:
        if self.name == "root":
            raise ValueError("root logins are disabled; choose another user name")
        return self


class AutoUpdate(ApiModel):
    """Guest OS package updates (unattended-upgrades or dnf-automatic), from local mirrors in an air gap."""

    model_config = ConfigDict(
        json_schema_extra=_validations(
            _cel("!has(self.aptMirrorKey) || has(self.aptMirror)", "aptMirrorKey needs aptMirror")
        )
    )

    enabled: bool = True
    schedule: Annotated[
        str,
        Field(
            min_length=1,
            max_length=64,
            pattern=SCHEDULE_CHARSET,
            json_schema_extra=_validations(
                _cel(
                    f"self.matches(r'{CALENDAR_SHAPE}')",
                    "autoUpdate.schedule must be a systemd calendar expression (systemd.time(7)), e.g. "
                    "'Mon..Fri *-*-* 03:00:00' or 'daily'",
                )
            ),
        ),
    ] = Field(
        default="*-*-* 03:00:00",
        description="systemd OnCalendar expression for the update run (systemd.time(7)), e.g. "
        "'Mon..Fri *-*-* 03:00:00' or 'daily'.",
    )
    reboot_window: Annotated[str, Field(pattern=r"^([01][0-9]|2[0-3]):[0-5][0-9]$", max_length=5)] | None = (
        Field(
            default=None, description="HH:MM local time at which a reboot required by an update may happen."
        )
    )
    apt_mirror: Annotated[str, Field(pattern=MIRROR_URL_PATTERN, max_length=2048)] | None = None
    apt_mirror_key: (
        Annotated[
            str,
            Field(
                pattern=ARMORED_PUBLIC_KEY,
                max_length=16384,
            ),
        ]
        | None
    ) = Field(
        default=None,
        description="ASCII-armored OpenPGP public key that signs aptMirror's Release files; the guest "
        "trusts it for apt. Needed when the mirror is signed by a site key rather than Debian's or Ubuntu's.",
    )
    yum_mirror: Annotated[str, Field(pattern=MIRROR_URL_PATTERN, max_length=2048)] | None = None

    @model_validator(mode="after")
    def _schedule_is_a_calendar(self) -> AutoUpdate:
        """A schedule systemd cannot parse would leave the guest's update timer silently dead."""
        problem = calendar_problem(self.schedule)
        if problem is not None:
            raise ValueError(f"autoUpdate.schedule {self.schedule!r} {problem}")
        return self

    @model_validator(mode="after")
    def _key_needs_mirror(self) -> AutoUpdate:
        """A key alone would trust a signer for sources nobody configured: say so instead of ignoring it."""
        if self.apt_mirror_key is not None and self.apt_mirror is None:
            raise ValueError("aptMirrorKey needs aptMirror (the mirror whose Release files it signs)")
        return self


class CloudInit(ApiModel):
    """Linux guest configuration; the operator's hardening is applied on top and always wins."""

    flavor: Literal["ubuntu", "rhel", "debian"] = Field(
        default="ubuntu",
        description="Guest family: ubuntu and debian (apt, unattended-upgrades), rhel (dnf-automatic). "
        "FIPS mode can be enabled on ubuntu (Ubuntu Pro) and rhel only; debian has no FIPS mode.",
    )
    ssh_authorized_keys: Annotated[list[SshKey], Field(max_length=32)] = Field(default_factory=list)
    users: Annotated[list[GuestUser], Field(max_length=16)] = Field(default_factory=list)
    packages: Annotated[
        list[Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9.+_:=-]*$", max_length=128)]],
        Field(max_length=64),
    ] = Field(default_factory=list)
    auto_update: AutoUpdate | None = None
    fips: bool = True
    user_data: Annotated[str, Field(max_length=32768)] | None = Field(
        default=None, description="Extra #cloud-config YAML, merged under the operator's hardening."
    )


# ---------------------------------------------------------------------------------------------- windows


def netbios_problem(name: str) -> str | None:
    """Say why ``name`` is not a valid Windows computer name (NetBIOS/DNS rules), or None when it is."""
    if not name:
        return "computerName must not be empty"
    if len(name.encode()) > NETBIOS_MAX_LENGTH:
        return f"computerName {name!r} is longer than {NETBIOS_MAX_LENGTH} characters"
    if not re.fullmatch(r"[A-Za-z0-9-]+", name):
        return f"computerName {name!r} may contain only letters, digits and hyphens"
    if name.isdigit():
        return f"computerName {name!r} must not be all digits"
    if name.startswith("-") or name.endswith("-"):
        return f"computerName {name!r} must not start or end with a hyphen"
    return None


class SysprepOptions(ApiModel):
    """How the unattend file is built: ``iso`` installs from an ISO, ``clone`` specialises a golden image."""

    mode: Literal["iso", "clone", "auto"] = "auto"


class SecretKeyRef(ApiModel):
    """A key in a Secret of the VM's namespace."""

    name: ObjectName
    key: Annotated[str, Field(pattern=r"^[-._a-zA-Z0-9]+$", max_length=253)] = "password"


class DriverMedia(ApiModel):
    """virtio-win driver media attached as a second CD-ROM: a PVC of this namespace or a DataSource clone."""

    model_config = ConfigDict(
        json_schema_extra=_validations(
            _cel(
                "(has(self.pvc) ? 1 : 0) + (has(self.dataSource) ? 1 : 0) == 1",
                "exactly one of windows.driverMedia.{pvc,dataSource} must be set",
            )
        )
    )

    pvc: ObjectName | None = None
    data_source: ObjectRef | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> DriverMedia:
        if (self.pvc is None) == (self.data_source is None):
            raise ValueError("exactly one of pvc or dataSource must be set")
        return self


class GoldenImage(ApiModel):
    """Mark an ``iso`` VM as a golden-image build: generalised, then published as ``<name>-v<version>``."""

    name: Annotated[str, Field(pattern=DNS_LABEL_PATTERN, min_length=1, max_length=GOLDEN_IMAGE_NAME_MAX)] = (
        Field(description="DataSource name; versions are the DataVolumes <name>-v<version>.")
    )
    version: Annotated[int, Field(ge=1, le=100000)]
    keep: Annotated[int, Field(ge=1, le=100)] = Field(
        default=3,
        description="How many published versions (clone DataVolumes) to keep; older ones are deleted.",
    )


_NETBIOS_RULES = (
    ("self.size() <= 15", "windows.computerName must be at most 15 characters (NetBIOS)"),
    ("self.matches('^[A-Za-z0-9-]+$')", "windows.computerName may contain only letters, digits and hyphens"),
    ("!self.matches('^[0-9]+$')", "windows.computerName must not be all digits"),
    (
        "!self.startsWith('-') && !self.endsWith('-')",
        "windows.computerName must not start or end with a hyphen",
    ),
)


class Windows(ApiModel):
    """Windows guest configuration (only with ``os: windows``)."""

    sysprep: SysprepOptions = Field(default_factory=SysprepOptions)
    computer_name: (
        Annotated[
            str,
            Field(
                min_length=1,
                max_length=NETBIOS_MAX_LENGTH,
                json_schema_extra=_validations(*(_cel(rule, message) for rule, message in _NETBIOS_RULES)),
            ),
        ]
        | None
    ) = Field(default=None, description="NetBIOS name; derived from the VM name when absent.")
    admin_password_secret_ref: SecretKeyRef | None = Field(
        default=None,
        description="Administrator password; a random one is generated into <name>-admin if absent.",
    )
    driver_media: DriverMedia | None = None
    golden_image: GoldenImage | None = None
    system_disk_size: Quantity = Field(
        default="64Gi", description="Size of the blank system disk Windows installs onto (sysprep mode iso)."
    )
    image_index: Annotated[int, Field(ge=1, le=64)] = Field(
        default=1,
        description="Which image of install.wim to install (sysprep mode iso); see `dism /Get-WimInfo`.",
    )

    @model_validator(mode="after")
    def _netbios(self) -> Windows:
        if self.computer_name is not None:
            problem = netbios_problem(self.computer_name)
            if problem is not None:
                raise ValueError(problem)
        return self


# --------------------------------------------------------------------------------------------- the rest


class Resources(ApiModel):
    """CPU and memory, or a KubeVirt instancetype/preference pair."""

    model_config = ConfigDict(
        json_schema_extra=_validations(
            _cel(
                "!has(self.instancetype) || (!has(self.cpu) && !has(self.memory))",
                "resources: give either cpu/memory or instancetype, not both",
            )
        )
    )

    cpu: Annotated[int, Field(ge=1, le=512)] | None = None
    memory: Quantity | None = None
    instancetype: ObjectName | None = None
    preference: ObjectName | None = None

    @model_validator(mode="after")
    def _one_style(self) -> Resources:
        if self.instancetype is not None and (self.cpu is not None or self.memory is not None):
            raise ValueError("give either cpu/memory or instancetype, not both")
        return self


class Firmware(ApiModel):
    """Boot firmware; ``efi-secureboot`` always comes with SMM (KubeVirt's webhook rule)."""

    type: Literal["bios", "efi", "efi-secureboot"]
    tpm: bool = False


class Monitoring(ApiModel):
    """Evidence from inside the guest: its node exporter, and drift of the hardening checked on a schedule.

    Opt-in because it installs a package (Prometheus' node exporter) and opens one port in the VM's policy:
    to the monitoring namespace's Prometheus and to the operator, nothing else. Linux guests only.
    """

    enabled: bool = Field(
        default=False,
        description=(
            "Install and enable the guest's Prometheus node exporter (port 9100) and a guest-side report of "
            "the hardened settings; the operator checks them every checkIntervalSeconds and reports the "
            "GuestCompliant condition. It never changes the guest."
        ),
    )
    check_interval_seconds: Annotated[int, Field(ge=15, le=86400)] = Field(
        default=300, description="How often the operator checks the running guest for drift."
    )
    allowed_users: Annotated[
        list[Annotated[str, Field(pattern=LINUX_USER_PATTERN, max_length=32)]], Field(max_length=32)
    ] = Field(
        default_factory=list,
        description=(
            "Users who may be logged in besides those the VM declares (cloudInit.users and the image's "
            "default user); anyone else logged in is drift. root is never allowed."
        ),
    )


BACKUP_SCHEDULE_PATTERN = r"^(@hourly|@daily|@weekly|@every ([1-9][0-9]{0,4})(m|h))$"
"""A backup schedule: ``@hourly``, ``@daily``, ``@weekly`` or ``@every <N>m|h`` (5 minutes at least)."""
BACKUP_TARGET_URL_PATTERN = (
    r"^https?://[A-Za-z0-9.-]+(:[0-9]{1,5})?/[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/[A-Za-z0-9._-]+)*/?$"
)
"""``http(s)://host[:port]/bucket[/prefix]``: path-style S3, a DNS-compatible bucket, a plain prefix."""


class BackupTarget(ApiModel):
    """An S3 bucket the site already runs (AWS, Ceph RGW, MinIO, Versity, ...), path-style.

    The Secret holds ``accessKeyId`` and ``secretKey`` (CDI's own S3 Secret keys), so the one Secret serves
    the backup pod that writes and CDI's importer that reads on restore. The operator never reads it.
    """

    url: Annotated[str, Field(pattern=BACKUP_TARGET_URL_PATTERN, max_length=1024)] = Field(
        description="http(s)://host[:port]/bucket[/prefix]: where the disks' objects are written."
    )
    secret_ref: ObjectName = Field(
        description="Secret in the VM's namespace with accessKeyId and secretKey (CDI's S3 Secret format)."
    )
    region: Annotated[str, Field(pattern=r"^[a-z0-9:.-]+$", max_length=64)] | None = Field(
        default=None,
        description=(
            "Signing region. Default: the region CDI's importer derives from the endpoint (s3.<region>."
            "amazonaws.com, else the host's first label), so a restore reads what the backup wrote."
        ),
    )


class BackupPolicy(ApiModel):
    """Backups of the VM's disks to S3, each disk's sha256 recorded (CP-9); restores are verified (CP-10)."""

    target: BackupTarget
    schedule: Annotated[str, Field(pattern=BACKUP_SCHEDULE_PATTERN, max_length=16)] | None = Field(
        default=None,
        description=(
            "@hourly, @daily, @weekly or @every <N>m|h (N minutes >= 5). Without it, backups are on demand "
            "only (uds-vmctl backup)."
        ),
    )
    keep: Annotated[int, Field(ge=1, le=100)] = Field(
        default=7, description="Successful backups kept; older ones and their objects are deleted."
    )

    @model_validator(mode="after")
    def _schedule_not_too_often(self) -> BackupPolicy:
        if self.schedule is not None and schedule_seconds(self.schedule) < MIN_BACKUP_PERIOD_S:
            raise ValueError(f"backup.schedule {self.schedule!r} is more often than every 5 minutes")
        return self


MIN_BACKUP_PERIOD_S = 300
_SCHEDULE_NAMES = {"@hourly": 3600, "@daily": 86400, "@weekly": 604800}


def schedule_seconds(schedule: str) -> int:
    """The period of a backup schedule in seconds: what "within its schedule" means for CP-9."""
    if schedule in _SCHEDULE_NAMES:
        return _SCHEDULE_NAMES[schedule]
    match = re.fullmatch(BACKUP_SCHEDULE_PATTERN, schedule)
    if match is None or match.group(2) is None:
        raise ValueError(f"{schedule!r} is not a backup schedule (@hourly, @daily, @weekly, @every <N>m|h)")
    return int(match.group(2)) * (60 if match.group(3) == "m" else 3600)


class UDSVirtualMachineSpec(ApiModel):
    """What a user declares; the operator owns every child object below it."""

    model_config = ConfigDict(
        json_schema_extra=_validations(
            _cel(
                "!has(self.cloudInit) || !has(self.os) || self.os == 'linux'",
                "spec.cloudInit is only for os: linux (use spec.windows for Windows guests)",
            ),
            _cel(
                "!has(self.windows) || (has(self.os) && self.os == 'windows')",
                "spec.windows needs os: windows",
            ),
            _cel(
                "!has(self.dataDisks) || "
                "self.dataDisks.all(d, self.dataDisks.exists_one(e, e.name == d.name))",
                "spec.dataDisks[].name values must be unique",
                ".dataDisks",
            ),
            _cel(
                "!has(self.source) || !has(self.source.blank) || "
                "(has(self.disk) && has(self.disk.virtualSize))",
                "spec.source.blank needs spec.disk.virtualSize (the size of the empty disk)",
            ),
        )
    )

    os: Literal["linux", "windows"] = "linux"
    resources: Resources | None = None
    source: Source
    disk: Disk = Field(default_factory=Disk)
    data_disks: Annotated[list[DataDisk], Field(max_length=16)] = Field(default_factory=list)
    run_strategy: Literal["Always", "Halted", "Manual", "RerunOnFailure", "Once"] = "Always"
    network: Network = Field(default_factory=Network)
    cloud_init: CloudInit | None = None
    windows: Windows | None = None
    live_migration: bool = False
    allow_live_migrate_if_possible: bool = False
    firmware: Firmware | None = None
    monitoring: Monitoring = Field(default_factory=Monitoring)
    backup: BackupPolicy | None = None
    readiness: Literal["guestAgent", "domain"] | None = Field(
        default=None,
        description=(
            "What Ready means. guestAgent (default for linux): KubeVirt's guestAgentPing readiness probe, so "
            "the VM is Ready only once the guest's QEMU agent answers (the guest booted to userspace). "
            "domain (default for windows): Ready once KubeVirt runs the domain, whatever the guest does."
        ),
    )
    image_record: ObjectName | None = Field(
        default=None, description="ConfigMap written by `uds-vmctl prep` holding the sealed image record."
    )

    @model_validator(mode="after")
    def _cross_field_rules(self) -> UDSVirtualMachineSpec:
        if self.cloud_init is not None and self.os != "linux":
            raise ValueError("cloudInit is only for os: linux (use windows for Windows guests)")
        if self.windows is not None and self.os != "windows":
            raise ValueError("windows needs os: windows")
        if self.monitoring.enabled and self.os != "linux":
            raise ValueError("monitoring.enabled is for os: linux guests (their cloud-init installs it)")
        names = [disk.name for disk in self.data_disks]
        if len(names) != len(set(names)):
            raise ValueError("dataDisks[].name values must be unique")
        if self.source.blank is not None and self.disk.virtual_size is None:
            raise ValueError("source.blank needs disk.virtualSize (the size of the empty disk)")
        return self

    @property
    def declared_checksum(self) -> str | None:
        """The digest the user declared for the root image, or None."""
        return self.source.checksum

    @property
    def effective_readiness(self) -> str:
        """``readiness``, or the default for the OS: Linux guests built for us carry the QEMU agent, so their
        Ready can mean "the guest is up"; a Windows guest may lack it until drivers are installed."""
        if self.readiness is not None:
            return self.readiness
        return "guestAgent" if self.os == "linux" else "domain"


# ------------------------------------------------------------------------------------------------ status


class Condition(ApiModel):
    """A standard Kubernetes condition (``metav1.Condition`` shape)."""

    type: Annotated[str, Field(pattern=r"^[A-Za-z][A-Za-z0-9]*$", max_length=64)]
    status: Literal["True", "False", "Unknown"]
    reason: Annotated[str, Field(pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$", max_length=128)]
    message: Annotated[str, Field(max_length=4096)] = ""
    last_transition_time: Annotated[str, Field(max_length=64)] | None = Field(
        default=None, json_schema_extra={"format": "date-time"}
    )
    observed_generation: Annotated[int, Field(ge=0)] | None = None


class BackupExemption(ApiModel):
    """A data disk excluded from backups, with the recorded reason."""

    disk: Annotated[str, Field(max_length=63)]
    reason: Annotated[str, Field(max_length=256)]


class GoldenImageStatus(ApiModel):
    """Progress of a golden-image build: which version ran, which one the DataSource serves."""

    name: Annotated[str, Field(max_length=63)]
    phase: Literal["Building", "Cloning", "Published", "Blocked"]
    started_version: Annotated[int, Field(ge=1)] | None = Field(
        default=None,
        description="The version whose build VM was seen running (a Stopped VM before it is not a build).",
    )
    published_version: Annotated[int, Field(ge=1)] | None = None
    data_source: Annotated[str, Field(max_length=63)] | None = None
    clone_data_volume: Annotated[str, Field(max_length=63)] | None = None
    message: Annotated[str, Field(max_length=1024)] | None = None


class GuestDrift(ApiModel):
    """One hardened setting the running guest no longer has, and the control it belongs to."""

    setting: Annotated[str, Field(max_length=64)]
    control: Annotated[str, Field(pattern=r"^[a-z]{2}-[0-9]{1,2}$", max_length=8)]
    observed: Annotated[str, Field(max_length=256)]
    expected: Annotated[str, Field(max_length=256)]


class GuestStatus(ApiModel):
    """What the last guest check found (spec.monitoring): compliant, drifted, or unknown and why."""

    compliant: Literal["True", "False", "Unknown"]
    reason: Annotated[str, Field(max_length=64)]
    checked_at: Annotated[str, Field(max_length=64)] | None = None
    drift: Annotated[list[GuestDrift], Field(max_length=32)] = Field(default_factory=list)
    logged_in_users: Annotated[list[Annotated[str, Field(max_length=64)]], Field(max_length=64)] = Field(
        default_factory=list
    )


class UDSVirtualMachineStatus(ApiModel):
    """What the operator observed; written through the status subresource only."""

    phase: Phase | None = None
    source: Annotated[str, Field(max_length=32)] | None = None
    pvc_size: Annotated[str, Field(max_length=32)] | None = None
    checksum_verified: bool = False
    verified_by: Literal["cdi-http-checksum", "in-cluster-verifier"] | None = None
    verified_digest: Annotated[str, Field(max_length=135)] | None = None
    zero_trust: bool = False
    reconciled_by: Annotated[str, Field(max_length=64)] | None = None
    import_progress: Annotated[str, Field(max_length=16)] | None = None
    observed_generation: Annotated[int, Field(ge=0)] | None = None
    conditions: Annotated[list[Condition], Field(max_length=32)] = Field(default_factory=list)
    message: Annotated[str, Field(max_length=4096)] | None = None
    backup_exemptions: Annotated[list[BackupExemption], Field(max_length=16)] = Field(default_factory=list)
    golden_image: GoldenImageStatus | None = None
    guest: GuestStatus | None = None


# ---------------------------------------------------------------------------------------------- parsing


def _field_path(loc: tuple[int | str, ...]) -> str:
    path = "spec"
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else f".{part}"
    return path


_UNION_TAGS = frozenset({"int", "str", "bool", "list[...]", "dict[...]"})


def _describe(error: Mapping[str, Any]) -> str:
    message = str(error.get("msg", "invalid value"))
    message = message.removeprefix("Value error, ")
    loc = tuple(
        part
        for part in error.get("loc", ())
        if not str(part).startswith("function-") and part not in _UNION_TAGS
    )
    if message.startswith("spec."):
        return message
    if error.get("type") == "extra_forbidden":
        return f"{_field_path(loc)}: unknown field; remove it (see `kubectl explain udsvm.spec`)"
    if error.get("type") == "missing":
        return f"{_field_path(loc)}: required field is missing"
    if error.get("type") == "string_pattern_mismatch" and loc and loc[-1] == "checksum":
        return f"{_field_path(loc)}: write the digest as sha256:<64 hex> or sha512:<128 hex>, in lower case"
    return f"{_field_path(loc)}: {message}"


def parse_vm_spec(raw: Mapping[str, Any]) -> UDSVirtualMachineSpec:
    """Parse a UDSVirtualMachine ``spec`` mapping, or raise :class:`SpecError` naming the field and the fix.

    Never lets pydantic's ValidationError escape: the controller turns SpecError into a condition and an
    Event, and a traceback there would tell the user nothing.
    """
    return parse_spec_mapping(UDSVirtualMachineSpec, raw)


SpecModelT = TypeVar("SpecModelT", bound=BaseModel)


def parse_spec_mapping(model: type[SpecModelT], raw: Mapping[str, Any]) -> SpecModelT:
    """Validate ``raw`` as ``model``, turning pydantic's errors into one user-facing :class:`SpecError`.

    Shared by every CRD's spec parser so each reports its first problem (and how many more) the same way.
    """
    if not isinstance(raw, Mapping):
        raise SpecError(f"spec: expected a mapping, got {type(raw).__name__}")
    try:
        return model.model_validate(dict(raw))
    except SpecError:
        raise
    except ValidationError as exc:
        problems = [_describe(error) for error in exc.errors(include_url=False)]
        more = f" (and {len(problems) - 1} more problem(s))" if len(problems) > 1 else ""
        raise SpecError(problems[0] + more) from None


def validate_vm_name(name: str) -> None:
    """Refuse VM names whose derived child names would not be valid DNS labels (Service, Secret, labels)."""
    if len(name) > MAX_VM_NAME_LENGTH:
        raise SpecError(
            f"metadata.name {name!r} is {len(name)} characters; use at most {MAX_VM_NAME_LENGTH} so "
            "child names such as <name>-cloudinit stay valid"
        )
    if not re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", name):
        raise SpecError(
            f"metadata.name {name!r} must start with a letter and use lower-case letters, digits and hyphens "
            "(it names a KubeVirt VM, Services and labels)"
        )


VM_NAME_VALIDATIONS = (
    _cel(
        f"self.metadata.name.size() <= {MAX_VM_NAME_LENGTH}",
        f"metadata.name must be at most {MAX_VM_NAME_LENGTH} characters so child names such as "
        "<name>-cloudinit stay valid",
    ),
    _cel(
        "self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",
        "metadata.name must start with a letter and use lower-case letters, digits and hyphens",
    ),
)
"""CEL rules on the object root: the name feeds child names, labels and Service names."""
