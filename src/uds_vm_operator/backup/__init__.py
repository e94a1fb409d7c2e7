"""Disk backups to S3 (issue 33): the copier that runs in a short-lived pod of the operator's own image.

``uds-vm-operator backup-disks`` streams each of a VM's disks to an S3 bucket with a standard-library S3
client (``s3``), records each object's sha256 and reports one JSON document in the pod's termination log,
which the operator reads (``copier``, ``command``). Nothing here is imported by the operator's ``run``.
"""
