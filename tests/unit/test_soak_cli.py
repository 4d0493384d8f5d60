"""`dflash-vllm soak`'s command line, without starting a server."""

import pytest

from dflash_vllm import soak

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("bad", ["MALLOC_ARENA_MAX", "=2"])
def test_server_env_needs_name_and_value(bad, capsys):
    with pytest.raises(SystemExit) as e:
        soak.main(["--server-env", bad, "--minutes", "0"])
    assert e.value.code == 2
    assert "--server-env takes NAME=VALUE" in capsys.readouterr().err


def test_server_env_reaches_both_servers(monkeypatch):
    seen = {}

    def fake_run(target, drafter, k, minutes, concurrency, log_dir, kv_cache_mib, server_env):
        seen.update(server_env)
        raise SystemExit(0)

    monkeypatch.setattr(soak, "run", fake_run)
    with pytest.raises(SystemExit):
        soak.main(["--server-env", "MALLOC_ARENA_MAX=2", "--server-env", "A=b=c"])
    assert seen == {"MALLOC_ARENA_MAX": "2", "A": "b=c"}
