"""The operator's controllers: the UDSVirtualMachine and UDSVirtualMachinePool reconcilers and their concerns
(status, SI-7 verification, platform checks, the golden-image factory, UDS Package sync).

They stand on :mod:`uds_vm_operator.runtime` (client, store, queue, controller base, kopf integration) and
make every API request through it. Import the submodules directly (``controller.reconciler``,
``controller.status``...); this package keeps no eager imports so ``uds-vm-operator --help`` stays fast.
"""
