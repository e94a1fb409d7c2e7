"""What every controller stands on: API client and kind registry, transport and trust, object store,
keyed work queue, conditions, kopf integration, health, metrics server, Events, peering, API presence.

Nothing here knows a UDSVirtualMachine's rules: that is ``controller/``. Import the submodules directly
(``runtime.kube``, ``runtime.workqueue``...); this package keeps no eager imports so
``uds-vm-operator --help`` stays fast.
"""
