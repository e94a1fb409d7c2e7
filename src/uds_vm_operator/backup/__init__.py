"""Disk backups to S3 (issue 33): the copier that runs in a short-lived pod of the operator's own image.

``uds-vm-operator backup-disks`` streams each of a VM's disks to an S3 bucket with a standard-library S3
client (``s3``), records each object's sha256 and reports one JSON document in the pod's termination log,
which the operator reads (``copier``, ``command``). The operator process imports ``command`` alone, which
loads only the standard library and ``termination`` at module level: ``operator_main.build_parser`` describes
``backup-disks`` with it, and ``render/backup.py`` takes the copy pod's credential variable names
(``ACCESS_KEY_ENV``, ``SECRET_KEY_ENV``) from it. ``copier`` and ``s3`` are imported only when
``backup-disks`` runs, in the copy pod.
"""
