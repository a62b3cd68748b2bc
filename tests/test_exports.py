"""Every name ggmlR 0.8.2 exports (shared/ggmlR/exports.txt) exists in ggmlpy, except the R-only ones."""
from pathlib import Path

import pytest

import ggmlpy

EXPORTS = Path(__file__).resolve().parents[2] / "shared" / "ggmlR" / "exports.txt"

# No Python meaning (shared/ggmlR/README.md): routing ggml's abort and log into R (ggmlpy raises
# Python exceptions and logs to `logging`), and R generics.
R_ONLY = {"ggml_abort_is_r_enabled", "ggml_set_abort_callback_r", "ggml_log_is_r_enabled", "ggml_log_set_r",
          "compile", "fit", "evaluate"}

pytestmark = pytest.mark.skipif(not EXPORTS.is_file(), reason=f"ggmlR's export list is not at {EXPORTS}")


def _names():
    return [line.strip() for line in EXPORTS.read_text().splitlines() if line.strip()]


def test_every_exported_name_exists_but_the_listed_ones():
    missing = sorted(n for n in _names() if not hasattr(ggmlpy, n) and n not in R_ONLY)
    assert not missing, f"{len(missing)} of ggmlR's exports are missing: {missing}"


def test_the_r_only_list_names_only_ggmlr_exports_ggmlpy_lacks():
    assert not R_ONLY - set(_names()), "a listed name is not one of ggmlR's exports"
