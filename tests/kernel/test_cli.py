"""The pyrmq command line: help, errors naming the culprit, plugin-added commands, `pyrmq plugins`."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from pyrmq.kernel import cli
from pyrmq.kernel.hookspecs import hookimpl


def run_cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pyrmq", *args], capture_output=True, text=True, timeout=timeout)


def test_help_lists_the_roles():
    out = run_cli("--help")
    assert out.returncode == 0
    for command in ("namesrv", "broker", "dev", "plugins"):
        assert command in out.stdout


def test_each_role_has_help():
    for command in ("namesrv", "broker", "dev", "plugins"):
        out = run_cli(command, "--help")
        assert out.returncode == 0 and "usage: pyrmq " + command in out.stdout


def test_bad_setting_on_the_command_line_exits_2_naming_the_key():
    out = run_cli("broker", "-c", "broker", "--set", "brokerRole=MASTER")
    assert out.returncode == 2
    assert "brokerRole" in out.stderr and "ASYNC_MASTER" in out.stderr


def test_bad_bundle_file_exits_2_naming_file_and_key(tmp_path):
    path = tmp_path / "broken.toml"
    path.write_text(textwrap.dedent("""
        [bundle]
        name = "broken"
        roles = ["broker"]
        include = ["broker"]
        [broker]
        listenPort = 70000
    """))
    out = run_cli("broker", "-c", str(path))
    assert out.returncode == 2
    assert str(path) in out.stderr and "listenPort" in out.stderr and "65535" in out.stderr


def test_plugins_lists_plugins_and_hook_colours():
    out = run_cli("plugins", "-c", "dev")
    assert out.returncode == 0, out.stderr
    assert "pyrmq.plugins.builtin.essentials" in out.stdout
    assert "pyrmq_serve [async]" in out.stdout and "pyrmq_configure [sync]" in out.stdout


@pytest.mark.hook("pyrmq_add_commands")
def test_plugins_add_sub_commands(monkeypatch, capsys):
    class Greeter:
        @hookimpl
        def pyrmq_add_commands(self, subparsers, kernel_cli):
            p = subparsers.add_parser("greet", help="say hello")
            p.add_argument("name")
            p.set_defaults(func=lambda args: print(f"hello {args.name}") or 3)

    from pyrmq.kernel import manager

    original = manager.load_plugins

    def load_with_greeter(bundle, **kw):
        kw.setdefault("extra", [Greeter()])
        return original(bundle, **kw)

    monkeypatch.setattr(manager, "load_plugins", load_with_greeter)
    assert cli.main(["greet", "pyrmq"]) == 3
    assert "hello pyrmq" in capsys.readouterr().out


def test_no_command_prints_help_and_exits_2(capsys):
    assert cli.main([]) == 2
    assert "usage: pyrmq" in capsys.readouterr().out
