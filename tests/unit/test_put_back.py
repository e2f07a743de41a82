"""What a restore has to do, decided from systemd's properties as `systemctl show` reports them (the lab's
real systemd runs the same decisions in tests/integration/test_rollout_faults.py and test_fleet.py)."""

import pytest

from serving_rollout.module_utils.put_back import left_to_put_back, untouched_refusal

MANIFEST = "/var/lib/serving-rollout/sglang.service/manifest.json"


@pytest.mark.parametrize("candidate, original, expected", [
    # a clean host after a rollback has nothing left to do
    ({"LoadState": "not-found", "ActiveState": "inactive"}, {"ActiveState": "active", "NRestarts": "0"},
     (False, False, False)),
    ({"LoadState": "loaded", "ActiveState": "active"}, {"ActiveState": "inactive", "NRestarts": "0"},
     (True, False, True)),
    # a candidate whose unit file was deleted while it ran: systemd keeps running it
    ({"LoadState": "not-found", "ActiveState": "active"}, {"ActiveState": "inactive", "NRestarts": "0"},
     (True, False, True)),
    ({"LoadState": "loaded", "ActiveState": "failed"}, {"ActiveState": "inactive", "NRestarts": "0"},
     (True, False, True)),
    # an original that crashed and came back under Restart=: serving, but not clean
    ({"LoadState": "not-found", "ActiveState": "inactive"}, {"ActiveState": "active", "NRestarts": "2"},
     (False, True, True)),
    ({}, {"ActiveState": "activating", "NRestarts": "0"}, (False, False, True)),
])
def test_left_to_put_back_reads_both_units(candidate, original, expected):
    assert left_to_put_back(candidate, original) == expected


def test_an_untouched_serving_unit_has_nothing_to_restore():
    state = {"ActiveState": "active", "UnitFileState": "enabled", "LoadState": "loaded"}
    assert untouched_refusal("sglang.service", "sglang-candidate.service", False, state, MANIFEST) is None


def test_a_candidate_without_a_snapshot_is_refused_by_name():
    state = {"ActiveState": "active", "UnitFileState": "enabled", "LoadState": "loaded"}
    problem = untouched_refusal("sglang.service", "sglang-candidate.service", True, state, MANIFEST)
    assert problem == (f"sglang-candidate.service is installed but there is no snapshot of sglang.service "
                       f"({MANIFEST} is missing): nothing to restore from")


@pytest.mark.parametrize("state", [
    {"ActiveState": "failed", "UnitFileState": "enabled", "LoadState": "loaded"},
    {"ActiveState": "active", "UnitFileState": "disabled", "LoadState": "loaded"},
    {"ActiveState": "inactive", "UnitFileState": "", "LoadState": "not-found"},
])
def test_an_untouched_unit_that_does_not_serve_is_named_with_its_state(state):
    problem = untouched_refusal("sglang.service", "sglang-candidate.service", False, state, MANIFEST)
    assert problem.startswith("no snapshot of sglang.service on this host (serving-rollout never changed it) and "
                              "it is not serving: ")
    assert (f"ActiveState={state['ActiveState']} UnitFileState={state['UnitFileState']} "
            f"LoadState={state['LoadState']}") in problem
