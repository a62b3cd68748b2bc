"""Port of ggmlR's tests/testthat/test-meta-backend.R (ggmlR 0.8.2): not yet runnable.

ggml 0.25.3 has the meta backend (ggml_backend_meta_device in ggml-backend.h), but ggmlpy's
generated cdef.h does not declare it: its split-state callback type returns a struct by value, which
scripts/gen_cdef.py drops. The five blocks are kept, skipped with that reason, until the declaration
is generated (reported to the lead; cdef.h is not edited by hand)."""
import pytest

_NO_DECL = "ggml_backend_meta_device is not declared in ggmlpy's generated cdef.h (callback returns a struct)"

pytestmark = pytest.mark.skip(reason=_NO_DECL)


def test_ggml_backend_meta_device_validates_inputs():
    """ggml_backend_meta_device validates inputs"""
def test_meta_backend_1_device_mirrored_round_trips_tensor_data():
    """meta backend (1 device, MIRRORED) round-trips tensor data"""
def test_meta_backend_2_devices_mirrored_round_trips_tensor_data():
    """meta backend (2 devices, MIRRORED) round-trips tensor data"""
def test_meta_backend_split_fn_receives_tensor_info_with_expected_fields():
    """meta backend split_fn receives tensor_info with expected fields"""
def test_meta_backend_tolerates_a_misbehaving_split_fn_sticky_fallback():
    """meta backend tolerates a misbehaving split_fn (sticky fallback)"""
