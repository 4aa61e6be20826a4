"""Images: image files and WebDataset tars, one record per image (gpuetl/sources/images.py)."""

from __future__ import annotations


class ImagesFormat:
    name = "images"
    options = ("label", "label_regex", "side_file", "exif_transpose", "max_pixels", "extensions")

    def plan(self, loaded, files, notes, backend=None):
        from ..images import plan_images

        return plan_images(loaded, files, notes, backend)
