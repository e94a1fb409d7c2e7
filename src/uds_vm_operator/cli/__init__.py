"""The field CLI ``uds-vmctl``: thin typer commands over the image, render and controller libraries."""
