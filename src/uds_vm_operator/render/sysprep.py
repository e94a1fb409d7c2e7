"""The Windows sysprep Secret ``<name>-sysprep`` (unattend answer files).

KubeVirt builds a CD-ROM from the Secret and requires a key named ``autounattend.xml`` or ``unattend.xml``
(``pkg/config/sysprep.go`` compares lower-cased names since kubevirt/kubevirt#7241); we emit exactly those
lower-case keys, so old and new KubeVirt versions both find them.

- ``iso`` mode: ``autounattend.xml`` with every pass: windowsPE (partitioning, image install, EULA, virtio
  drivers), specialize (computer name, hardening) and oobeSystem (Administrator password, no OOBE screens).
  Setup copies the file to ``Panther`` and applies the later passes from there.
- ``clone`` mode: ``unattend.xml`` with only specialize and oobeSystem, for a generalized golden image.
- ``auto``: ``iso`` for image-transfer sources (upload, http, s3), ``clone`` for clones (dataSource, pvc) and
  registry/blank disks.

The Administrator password appears only inside this Secret (and the ``<name>-admin`` Secret), never in the VM.
"""

from __future__ import annotations

from typing import Any

from uds_vm_operator.api.errors import SpecError
from uds_vm_operator.api.models import NETBIOS_MAX_LENGTH, UDSVirtualMachineSpec, netbios_problem
from uds_vm_operator.child_names import sysprep_secret_name
from uds_vm_operator.render.common import ROLE_LABEL, Owner, child_metadata
from uds_vm_operator.render.guestconfig import checked_value
from uds_vm_operator.render.secrets import encode_secret_data

AUTOUNATTEND_KEY = "autounattend.xml"
UNATTEND_KEY = "unattend.xml"
_ISO_SOURCES = frozenset({"upload", "http", "s3"})
_UNATTEND_NS = "urn:schemas-microsoft-com:unattend"
_WCM_NS = "http://schemas.microsoft.com/WMIConfig/2002/State"
_COMPONENT_ATTRS = (
    'processorArchitecture="amd64" publicKeyToken="31bf3856ad364e35" language="neutral" versionScope="nonSxS"'
)
# Drive letters the virtio-win CD-ROM may get in Windows PE; PnP searches each path's subfolders.
_DRIVER_LETTERS = ("D", "E", "F", "G")
_HARDENING_COMMANDS = (
    ("Turn the firewall on for every profile", "netsh advfirewall set allprofiles state on"),
    (
        "Disable SMBv1",
        'powershell -NoProfile -Command "Set-SmbServerConfiguration -EnableSMB1Protocol $false -Force"',
    ),
    (
        "Require Network Level Authentication for RDP",
        'reg add "HKLM\\SYSTEM\\CurrentControlSet\\Control\\Terminal Server\\WinStations\\RDP-Tcp" '
        "/v UserAuthentication /t REG_DWORD /d 1 /f",
    ),
    (
        "Allow RDP through the firewall (the NetworkPolicy still gates it)",
        'netsh advfirewall firewall set rule group="remote desktop" new enable=Yes',
    ),
    # Automatic BitLocker device encryption seals the key to the vTPM: without persistent VM state the TPM is
    # new after every restart and the guest boots into BitLocker recovery; and sysprep /generalize refuses an
    # encrypting disk. Encryption at rest belongs to the storage class; explicit BitLocker stays possible.
    (
        "Prevent automatic BitLocker device encryption (vTPM may not persist; blocks sysprep)",
        'reg add "HKLM\\SYSTEM\\CurrentControlSet\\Control\\BitLocker" '
        "/v PreventDeviceEncryption /t REG_DWORD /d 1 /f",
    ),
)


def sysprep_mode(spec: UDSVirtualMachineSpec) -> str | None:
    """The effective sysprep mode (``iso`` or ``clone``) of a Windows VM, or None for Linux."""
    if spec.os != "windows":
        return None
    declared = spec.windows.sysprep.mode if spec.windows is not None else "auto"
    if declared != "auto":
        return declared
    return "iso" if spec.source.kind in _ISO_SOURCES else "clone"


def derive_computer_name(vm_name: str) -> str:
    """A NetBIOS-valid computer name from a VM name: upper-cased, at most 15 characters, no edge hyphens.

    All-digit results (``1234``) get a ``VM`` prefix, because Windows rejects all-digit names.
    """
    name = "".join(c if c.isalnum() and c.isascii() else "-" for c in vm_name.upper())
    name = name[:NETBIOS_MAX_LENGTH].strip("-")
    if not name or name.isdigit():
        name = ("VM" + name)[:NETBIOS_MAX_LENGTH].strip("-") if name else "VM"
    return name


def computer_name(owner: Owner, spec: UDSVirtualMachineSpec) -> str:
    """The declared computer name, or one derived from the VM name; checked against the NetBIOS rules."""
    declared = spec.windows.computer_name if spec.windows is not None else None
    name = declared or derive_computer_name(owner.name)
    problem = netbios_problem(name)
    if problem is not None:
        raise SpecError(f"spec.windows: {problem}")
    return name


def _escape(text: str) -> str:
    """XML character data; ``xml.sax`` loads only when a Windows answer file is rendered (not at start)."""
    from xml.sax.saxutils import escape as sax_escape  # noqa: PLC0415

    return sax_escape(text)


def _quoteattr(text: str) -> str:
    """A quoted XML attribute value (lazy, as :func:`_escape`)."""
    from xml.sax.saxutils import quoteattr as sax_quoteattr  # noqa: PLC0415

    return sax_quoteattr(text)


def _element(tag: str, content: str | list[str], attrs: str = "") -> str:
    opening = f"<{tag}{' ' + attrs if attrs else ''}>"
    if isinstance(content, list):
        return opening + "".join(content) + f"</{tag}>"
    return opening + _escape(content) + f"</{tag}>"


def _component(name: str, children: list[str]) -> str:
    return _element("component", children, f"name={_quoteattr(name)} {_COMPONENT_ATTRS}")


def _settings(unattend_pass: str, components: list[str]) -> str:
    return _element("settings", components, f"pass={_quoteattr(unattend_pass)}")


def _synchronous_commands(tag: str, command_tag: str, commands: list[tuple[str, str]]) -> str:
    entries = [
        _element(
            command_tag,
            [_element("Order", str(order)), _element("Description", description), _element("Path", path)]
            if command_tag == "RunSynchronousCommand"
            else [
                _element("Order", str(order)),
                _element("Description", description),
                _element("CommandLine", path),
            ],
            'wcm:action="add"',
        )
        for order, (description, path) in enumerate(commands, start=1)
    ]
    return _element(tag, entries)


# The partitions setup creates on disk 0, as (Order, Type, Size in MB, Extend); the last one holds Windows.
_EFI_PARTITIONS = (("1", "EFI", "100", None), ("2", "MSR", "16", None), ("3", "Primary", None, "true"))
_BIOS_PARTITIONS = (("1", "Primary", None, "true"),)


def _international_component() -> str:
    """Setup's own language and locales (en-US), so Windows PE asks no questions."""
    return _component(
        "Microsoft-Windows-International-Core-WinPE",
        [
            _element("SetupUILanguage", [_element("UILanguage", "en-US")]),
            _element("InputLocale", "en-US"),
            _element("SystemLocale", "en-US"),
            _element("UILanguage", "en-US"),
            _element("UserLocale", "en-US"),
        ],
    )


def _create_partitions(efi: bool) -> list[str]:
    partitions = _EFI_PARTITIONS if efi else _BIOS_PARTITIONS
    return [
        _element(
            "CreatePartition",
            [_element("Order", order), _element("Type", kind)]
            + ([_element("Size", size)] if size else [])
            + ([_element("Extend", extend)] if extend else []),
            'wcm:action="add"',
        )
        for order, kind, size, extend in partitions
    ]


def _modify_partitions(efi: bool) -> list[str]:
    """Format and label the new partitions; the Windows one becomes C: (and, with BIOS, the active one)."""
    if efi:
        layouts = [
            [("Order", "1"), ("PartitionID", "1"), ("Format", "FAT32"), ("Label", "System")],
            [("Order", "2"), ("PartitionID", "3"), ("Format", "NTFS"), ("Label", "Windows"), ("Letter", "C")],
        ]
    else:
        layouts = [
            [
                ("Order", "1"),
                ("PartitionID", "1"),
                ("Format", "NTFS"),
                ("Label", "Windows"),
                ("Letter", "C"),
                ("Active", "true"),
            ]
        ]
    return [
        _element("ModifyPartition", [_element(tag, value) for tag, value in fields], 'wcm:action="add"')
        for fields in layouts
    ]


def _disk_configuration(efi: bool) -> str:
    """Wipe disk 0 and lay it out for the firmware: EFI system + MSR + Windows, or one active partition."""
    disk = _element(
        "Disk",
        [
            _element("DiskID", "0"),
            _element("WillWipeDisk", "true"),
            _element("CreatePartitions", _create_partitions(efi)),
            _element("ModifyPartitions", _modify_partitions(efi)),
        ],
        'wcm:action="add"',
    )
    return _element("DiskConfiguration", [disk, _element("WillShowUI", "OnError")])


def _image_install(image_index: int, partition_id: str) -> str:
    """Install edition ``image_index`` of the install media onto the Windows partition of disk 0."""
    install_from = _element(
        "InstallFrom",
        [
            _element(
                "MetaData",
                [_element("Key", "/IMAGE/INDEX"), _element("Value", str(image_index))],
                'wcm:action="add"',
            )
        ],
    )
    install_to = _element("InstallTo", [_element("DiskID", "0"), _element("PartitionID", partition_id)])
    return _element(
        "ImageInstall", [_element("OSImage", [install_from, install_to, _element("WillShowUI", "OnError")])]
    )


def _setup_component(spec: UDSVirtualMachineSpec, efi: bool) -> str:
    image_index = spec.windows.image_index if spec.windows is not None else 1
    windows_partition = (_EFI_PARTITIONS if efi else _BIOS_PARTITIONS)[-1][0]
    return _component(
        "Microsoft-Windows-Setup",
        [
            _disk_configuration(efi),
            _image_install(image_index, windows_partition),
            _element("UserData", [_element("AcceptEula", "true")]),
        ],
    )


def _driver_paths_component() -> str:
    """Let PnP search every drive letter the virtio-win CD-ROM may get, so setup sees virtio disks."""
    paths = [
        _element(
            "PathAndCredentials",
            [_element("Path", f"{letter}:\\")],
            f'wcm:action="add" wcm:keyValue="{order}"',
        )
        for order, letter in enumerate(_DRIVER_LETTERS, start=1)
    ]
    return _component("Microsoft-Windows-PnpCustomizationsWinPE", [_element("DriverPaths", paths)])


def _windows_pe_pass(spec: UDSVirtualMachineSpec, efi: bool) -> str:
    components = [_international_component(), _setup_component(spec, efi)]
    if spec.windows is not None and spec.windows.driver_media is not None:
        components.append(_driver_paths_component())
    return _settings("windowsPE", components)


def _specialize_pass(name: str) -> str:
    return _settings(
        "specialize",
        [
            _component(
                "Microsoft-Windows-Shell-Setup",
                [_element("ComputerName", name), _element("TimeZone", "UTC")],
            ),
            _component(
                "Microsoft-Windows-TerminalServices-LocalSessionManager",
                [_element("fDenyTSConnections", "false")],
            ),
            _component(
                "Microsoft-Windows-Deployment",
                [_synchronous_commands("RunSynchronous", "RunSynchronousCommand", list(_HARDENING_COMMANDS))],
            ),
        ],
    )


def _oobe_pass(admin_password: str, generalize: bool) -> str:
    password = _element(
        "AdministratorPassword", [_element("Value", admin_password), _element("PlainText", "true")]
    )
    children = [
        _element(
            "OOBE",
            [
                _element("HideEULAPage", "true"),
                _element("HideLocalAccountScreen", "true"),
                _element("HideOnlineAccountScreens", "true"),
                _element("HideWirelessSetupInOOBE", "true"),
                _element("NetworkLocation", "Work"),
                _element("ProtectYourPC", "1"),
            ],
        ),
        _element("UserAccounts", [password]),
        _element("TimeZone", "UTC"),
    ]
    if generalize:
        # Golden-image build: log on once, drop the cached answer file (Panther\unattend.xml would otherwise
        # outrank the clone's own sysprep CD-ROM), then generalize and shut down; the operator clones the disk
        # when the VM reports Stopped.
        children.append(
            _element(
                "AutoLogon",
                [
                    _element("Password", [_element("Value", admin_password), _element("PlainText", "true")]),
                    _element("Enabled", "true"),
                    _element("LogonCount", "1"),
                    _element("Username", "Administrator"),
                ],
            )
        )
        children.append(
            _synchronous_commands(
                "FirstLogonCommands",
                "SynchronousCommand",
                [
                    ("Remove the cached answer file", "cmd /c del /q /f C:\\Windows\\Panther\\unattend.xml"),
                    (
                        "Generalize and shut down for the golden image",
                        "C:\\Windows\\System32\\Sysprep\\sysprep.exe /generalize /oobe /shutdown /quiet",
                    ),
                ],
            )
        )
    return _settings("oobeSystem", [_component("Microsoft-Windows-Shell-Setup", children)])


def render_unattend_xml(
    owner: Owner, spec: UDSVirtualMachineSpec, admin_password: str, *, efi: bool
) -> tuple[str, str]:
    """Return ``(key, xml)``: the answer file name KubeVirt looks for and its content for the mode."""
    mode = sysprep_mode(spec)
    if mode is None:
        raise SpecError("spec.windows: sysprep applies only to os: windows")
    name = computer_name(owner, spec)
    passes: list[str] = []
    if mode == "iso":
        passes.append(_windows_pe_pass(spec, efi))
    passes.append(_specialize_pass(name))
    generalize = mode == "iso" and spec.windows is not None and spec.windows.golden_image is not None
    passes.append(_oobe_pass(admin_password, generalize))
    document = (
        '<?xml version="1.0" encoding="utf-8"?>\n'
        + _element("unattend", passes, f"xmlns={_quoteattr(_UNATTEND_NS)} xmlns:wcm={_quoteattr(_WCM_NS)}")
        + "\n"
    )
    return (AUTOUNATTEND_KEY if mode == "iso" else UNATTEND_KEY), document


def render_sysprep_secret(
    owner: Owner, spec: UDSVirtualMachineSpec, admin_password: str, *, efi: bool
) -> dict[str, Any]:
    """The Secret ``<name>-sysprep`` holding the answer file for the effective sysprep mode."""
    if not admin_password:
        raise SpecError(
            "spec.windows: no Administrator password; reference a Secret in adminPasswordSecretRef or let "
            "the operator generate one"
        )
    # XML 1.0 cannot carry control characters even escaped: a Secret holding one would break the answer
    # file's structure (Windows setup stops at a parse error), so it is refused with a message instead.
    checked_value("the Administrator password (spec.windows.adminPasswordSecretRef)", admin_password)
    key, document = render_unattend_xml(owner, spec, admin_password, efi=efi)
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": child_metadata(owner, sysprep_secret_name(owner.name), labels={ROLE_LABEL: "sysprep"}),
        "type": "Opaque",
        "data": encode_secret_data({key: document}),
    }
