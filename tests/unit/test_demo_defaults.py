"""`dflash-vllm demo` without --pair: the real pair where it is set up, with the adaptive policy."""

import pytest

pytestmark = pytest.mark.unit


def test_demo_defaults_to_smollm2_with_the_adaptive_policy_where_it_is_set_up(tmp_path):
    from dflash_vllm.demo import DemoOptions, fill_defaults

    t, d = tmp_path / "t", tmp_path / "d"
    a = DemoOptions()
    assert fill_defaults(a, (str(t), str(d))) and (a.pair, a.adaptive) == ("tasks", False)  # not set up: says so
    for p in (t, d):
        p.mkdir()
        (p / "config.json").write_text("{}")
    a = DemoOptions()
    assert fill_defaults(a, (str(t), str(d))) is None and (a.pair, a.adaptive) == ("smollm2", True)
    a = DemoOptions(pair="tasks", adaptive=True)  # what the user asked for stays
    assert fill_defaults(a, (str(t), str(d))) is None and (a.pair, a.adaptive) == ("tasks", True)
