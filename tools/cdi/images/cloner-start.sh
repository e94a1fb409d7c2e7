#!/bin/bash
# Entry point of our cdi-cloner image (the clone *source* pod of a host-assisted clone). CDI's controller starts
# this image without a command and passes VOLUME_MODE, MOUNT_POINT and PREALLOCATION; cdi-cloner needs the number
# of bytes it is about to send (for progress and the receiver's size check), which depends on the volume mode.
set -euo pipefail
: "${VOLUME_MODE:?the clone controller sets VOLUME_MODE (block or filesystem)}"
: "${MOUNT_POINT:?the clone controller sets MOUNT_POINT}"
case "$VOLUME_MODE" in
  block)
    bytes=$(blockdev --getsize64 "$MOUNT_POINT")
    kind=blockdevice-clone ;;
  *)
    cd "$MOUNT_POINT"
    if [ "${PREALLOCATION:-false}" = true ]; then
      bytes=$(du -s --apparent-size --block-size=1 . | cut -f1)  # every byte will be written
    else
      bytes=$(du -s --block-size=1 . | cut -f1)  # sparse files: only what is allocated travels
    fi
    kind=filesystem-clone ;;
esac
echo "cloning $VOLUME_MODE volume at $MOUNT_POINT: $bytes bytes"
exec /usr/bin/cdi-cloner -v=3 -alsologtostderr -content-type "$kind" -upload-bytes "$bytes" -mount "$MOUNT_POINT"
