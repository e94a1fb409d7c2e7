"""What a release is made of beside the package: deploy/ from the chart, the image's hash locks."""
