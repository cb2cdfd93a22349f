"""The inner cross-validation's answer is kept (predictor.calibration_cache): a second fit on
the same inputs, in this process or a new one, gives the same weights without computing them;
other inputs compute them again; a cache that cannot be read or written only costs time."""

import pytest

from predictor import calibration_cache
from predictor.model import ThroughputModel
from tests.predictor.test_predictor_model import _spec_proportional_rows


@pytest.fixture
def counted(monkeypatch, tmp_path):
    """Cache under tmp_path, empty memo; returns the list of cross-validations run."""
    monkeypatch.setenv("CPN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(calibration_cache, "_memo", {})
    calls = []
    real = ThroughputModel._cross_validate

    def counting(self):
        calls.append(len(self.measurements))
        return real(self)

    monkeypatch.setattr(ThroughputModel, "_cross_validate", counting)
    return calls


def test_a_second_fit_reuses_the_answer_from_memory_then_from_disk(counted, tmp_path):
    rows = _spec_proportional_rows()
    first = ThroughputModel("rf").fit(rows)
    assert len(counted) == 1
    assert list((tmp_path / "cache").glob("calibration-*.json"))
    again = ThroughputModel("rf").fit(rows)
    calibration_cache._memo.clear()  # as a new process would start
    fresh = ThroughputModel("rf").fit(rows)
    assert len(counted) == 1
    assert first.shrink == again.shrink == fresh.shrink


def test_other_inputs_compute_again(counted):
    rows = _spec_proportional_rows()
    ThroughputModel("rf").fit(rows)
    ThroughputModel("rf").fit(rows[:-1])
    ThroughputModel("rf", seed=1).fit(rows)
    assert len(counted) == 3


def test_the_kept_answer_is_the_computed_one(counted, monkeypatch, tmp_path):
    rows = _spec_proportional_rows()
    kept = ThroughputModel("rf").fit(rows).shrink
    monkeypatch.setenv("CPN_CACHE_DIR", str(tmp_path / "elsewhere"))
    calibration_cache._memo.clear()
    assert ThroughputModel("rf").fit(rows).shrink == kept
    assert len(counted) == 2


def test_a_broken_or_unwritable_cache_only_costs_time(counted, monkeypatch, tmp_path):
    rows = _spec_proportional_rows()
    expected = ThroughputModel("rf").fit(rows).shrink
    for broken in ("{not json", '["a list"]', '{"anchor": [1]}'):
        for path in (tmp_path / "cache").glob("calibration-*.json"):
            path.write_text(broken, encoding="utf-8")
        calibration_cache._memo.clear()
        assert ThroughputModel("rf").fit(rows).shrink == expected
    blocker = tmp_path / "a-file"
    blocker.write_text("", encoding="utf-8")
    monkeypatch.setenv("CPN_CACHE_DIR", str(blocker / "cache"))  # cannot be made
    calibration_cache._memo.clear()
    assert ThroughputModel("rf").fit(rows).shrink == expected
    assert len(counted) == 5
