"""A stored study is refused when it was measured differently: the device's memory as the machine
reports it moves a little between boots, and that alone is the same machine."""

from __future__ import annotations

import pytest

from autotune.errors import UsageError
from autotune.store.fingerprint import Fingerprint, check_resume, differences

STORED = {"device": "cpu", "device_memory_bytes": 25_276_510_208, "torch": "2.13.0"}


def test_memory_that_moved_by_kibibytes_between_boots_is_the_same_machine() -> None:
    rebooted = {**STORED, "device_memory_bytes": 25_276_502_016}  # 8 KiB less, measured here
    assert differences(STORED, rebooted) == []
    assert check_resume("today", STORED, Fingerprint(**rebooted), ()) == []


def test_another_machines_memory_is_refused() -> None:
    other = {**STORED, "device_memory_bytes": 16 * 2**30}
    assert [d[0] for d in differences(STORED, other)] == ["device_memory_bytes"]
    with pytest.raises(UsageError, match="device_memory_bytes: stored 25276510208"):
        check_resume("today", STORED, Fingerprint(**other), ())
    # 2% apart is not a reboot's drift
    assert differences(STORED, {**STORED, "device_memory_bytes": int(25_276_510_208 * 0.98)})


def test_a_fingerprint_is_stored_under_the_keys_stores_have_held() -> None:
    # the keys and order every store has held (version 0's, and the adapter's since)
    keys = ["model", "model_config_hash", "task", "seq_len", "dataset", "peft", "device", "device_count"]
    keys += ["device_memory_bytes", "cuda", "driver", "torch", "transformers", "space", "base_args"]
    assert list(Fingerprint().to_dict()) == [*keys, "memory_cap", "autotune_version"]
    older = {key: STORED.get(key) for key in keys if key != "peft"}  # a store from before peft
    assert Fingerprint.from_dict(older).peft is None
    assert Fingerprint.from_dict(older).to_dict() == {
        **older,
        "peft": None,
        "memory_cap": None,
        "autotune_version": None,
    }
