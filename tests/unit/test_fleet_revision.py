"""The template revision hash: same template → same hash everywhere; any change → another hash."""

from __future__ import annotations

import subprocess
import sys

from hypothesis import given
from hypothesis import strategies as st

from uds_vm_operator.fleet import revision_hash
from uds_vm_operator.fleet.revision import REVISION_HASH_LENGTH

TEMPLATE = {
    "metadata": {"labels": {"app": "web"}},
    "spec": {
        "source": {"dataSource": {"name": "ubuntu-2404", "namespace": "golden"}},
        "runStrategy": "Always",
    },
}


def test_hash_is_short_lower_hex_and_a_valid_label_value():
    value = revision_hash(TEMPLATE)
    assert len(value) == REVISION_HASH_LENGTH
    assert all(c in "0123456789abcdef" for c in value)


def test_key_order_does_not_matter():
    reordered = {
        "spec": {
            "runStrategy": "Always",
            "source": {"dataSource": {"namespace": "golden", "name": "ubuntu-2404"}},
        },
        "metadata": {"labels": {"app": "web"}},
    }
    assert revision_hash(reordered) == revision_hash(TEMPLATE)


def test_a_new_golden_image_is_a_new_revision():
    changed = {**TEMPLATE, "spec": {**TEMPLATE["spec"], "source": {"dataSource": {"name": "ubuntu-2404-v2"}}}}
    assert revision_hash(changed) != revision_hash(TEMPLATE)


def test_labels_are_part_of_the_revision():
    changed = {**TEMPLATE, "metadata": {"labels": {"app": "api"}}}
    assert revision_hash(changed) != revision_hash(TEMPLATE)


def test_empty_maps_and_nulls_are_the_same_revision_as_absent_ones():
    padded = {
        "metadata": {"labels": {"app": "web"}, "annotations": {}},
        "spec": {**TEMPLATE["spec"], "x": None},
    }
    assert revision_hash(padded) == revision_hash(TEMPLATE)


def test_list_order_matters():
    a = {"spec": {"dataDisks": [{"name": "a"}, {"name": "b"}]}}
    b = {"spec": {"dataDisks": [{"name": "b"}, {"name": "a"}]}}
    assert revision_hash(a) != revision_hash(b)


def test_hash_is_stable_across_processes_and_hash_seeds():
    code = f"from uds_vm_operator.fleet import revision_hash;print(revision_hash({TEMPLATE!r}))"
    outputs = {
        subprocess.run(
            [sys.executable, "-c", code],
            check=True,
            capture_output=True,
            text=True,
            env={"PYTHONHASHSEED": seed},
        ).stdout.strip()
        for seed in ("1", "2")
    }
    assert outputs == {revision_hash(TEMPLATE)}


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3)
    ),
    max_leaves=12,
)


@given(st.dictionaries(st.text(max_size=5), json_values, max_size=4))
def test_hash_is_a_pure_function(template):  # type: ignore[no-untyped-def]
    assert revision_hash(template) == revision_hash(dict(reversed(list(template.items()))))
