"""The operator image and the test base images, built offline with buildah (shell scripts only)."""
