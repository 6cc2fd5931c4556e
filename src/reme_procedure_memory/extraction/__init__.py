"""The trajectory import and the extraction agent: the copy, formats, segmentation, the per-segment agent loop, its
prompts and rolling summary, and the resume command."""
