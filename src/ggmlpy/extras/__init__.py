"""ggmlR's add-ons on the ag_* API: matrix drop-ins (linalg), model-parallel forwards, single-cell tasks."""
