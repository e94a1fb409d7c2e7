"""The only layer that talks to the API server: watches, reconcile, status, Events and metrics.

Import the submodules directly (``controller.reconciler``, ``controller.status``...); this package keeps
no eager imports so ``uds-vm-operator --help`` stays fast.
"""
