"""Hostile userData at the unit tier: deep nesting and alias bombs are refused or rendered, never a
RecursionError and never an exponential walk (integration: tests/integration/test_malformed_crs.py)."""

from __future__ import annotations

import pytest
import yaml

from uds_vm_operator.api import SpecError, parse_vm_spec
from uds_vm_operator.render import Owner
from uds_vm_operator.render.cloudinit import USER_DATA_MAX_DEPTH, render_user_data

OWNER = Owner("vm", "ns", "uid-1")


def spec_with(user_data: str) -> object:
    return parse_vm_spec(
        {
            "source": {"upload": {}},
            "disk": {"virtualSize": "10Mi"},
            "cloudInit": {"sshAuthorizedKeys": ["ssh-ed25519 AAAA ops@site"], "userData": user_data},
        }
    )


@pytest.mark.parametrize(
    "user_data",
    [
        "a: " + "[" * 5000 + "]" * 5000,
        "a: " + "[" * USER_DATA_MAX_DEPTH + "]" * USER_DATA_MAX_DEPTH,
        "".join(f"{' ' * i}k{i}:\n" for i in range(100)) + " " * 100 + "v",
    ],
    ids=["lists-5000", "one-past-the-limit", "maps-100"],
)
def test_too_deep_user_data_is_a_spec_error_not_a_recursion_error(user_data: str) -> None:
    with pytest.raises(SpecError, match="nested more than"):
        render_user_data(OWNER, spec_with(user_data))  # type: ignore[arg-type]


def test_user_data_at_the_depth_limit_renders() -> None:
    depth = USER_DATA_MAX_DEPTH - 1  # the mapping is one level, the lists the rest
    text = render_user_data(OWNER, spec_with("a: " + "[" * depth + "1" + "]" * depth))  # type: ignore[arg-type]
    node = yaml.safe_load(text)["a"]
    for _ in range(depth):
        assert isinstance(node, list) and len(node) == 1
        node = node[0]
    assert node == 1


def test_alias_bomb_is_rendered_with_aliases_not_expanded() -> None:
    bomb = "lol0: &l0 [a, a, a, a, a, a, a, a, a]\n" + "".join(
        f"lol{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]\n" for i in range(1, 10)
    )
    text = render_user_data(OWNER, spec_with(bomb))  # type: ignore[arg-type]
    assert len(text) < 100_000  # 9**10 elements if it were expanded
