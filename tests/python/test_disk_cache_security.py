"""Security of the persistent compile cache: only entries this user wrote,
under this user's secret, for this host, are ever loaded.

Each case runs fresh interpreters (the child of ``test_compile_cache``) with
their own ``HLOBRIDGE_CACHE_DIR`` (or, for the temp-dir fallback, their own
``TMPDIR`` and no ``HOME``/``XDG_CACHE_HOME``). A refused entry or directory
must mean a warning and a normal compile with the right results, never a
load of the wrong program.
"""

from __future__ import annotations

import json
import math
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from test_compile_cache import _CHILD, _payload_offset

OTHER_UID = 12345


def run(cache_dir: Path | None, *modules: int, umask: int | None = None,
        drop: tuple[str, ...] = (), **env: str) -> tuple[dict, str]:
    e = {k: v for k, v in os.environ.items()
         if k not in ("HLOBRIDGE_CACHE", "HLOBRIDGE_CACHE_MAX_BYTES", "HLOBRIDGE_CACHE_DIR",
                      "HLOBRIDGE_CACHE_HOST_ID", *drop)}
    e.update(PJRT_DEVICE="CPU", **env)
    if cache_dir is not None:
        e["HLOBRIDGE_CACHE_DIR"] = str(cache_dir)
    # Popen's own ``umask`` (not a ``preexec_fn``, which runs Python's fork
    # hooks in the parent, and JAX's hook warns when it has started threads).
    p = subprocess.run([sys.executable, "-c", _CHILD, *map(str, modules)], env=e,
                       capture_output=True, text=True, timeout=300,
                       umask=-1 if umask is None else umask)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.strip().splitlines()[-1]), p.stderr


def expected(i: int) -> list[float]:
    return [pytest.approx((i + 1.5) * math.exp(k + 0.5)) for k in range(4)]


def entries(d: Path) -> list[Path]:
    return sorted(d.glob("*.pjrt"))


def mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


def compiled_again(out: dict, i: int = 0) -> None:
    """The program was compiled (nothing loaded) and computes the right thing."""
    assert out["stats"]["compiles"] == 1 and out["stats"]["disk_cache_hits"] == 0, out
    assert out["results"][0] == expected(i)


def test_created_dir_and_entries_are_private_whatever_the_umask(tmp_path: Path) -> None:
    d = tmp_path / "a" / "b"
    out, _ = run(d, 0, umask=0)
    assert out["info"]["disk_writes"] == 1
    assert mode(tmp_path / "a") == 0o700 and mode(d) == 0o700
    (entry,) = entries(d)
    assert mode(entry) == 0o600
    assert mode(d / ".hlobridge-key") == 0o600
    again, _ = run(d, 0, umask=0)
    assert again["stats"]["disk_cache_hits"] == 1 and again["results"] == out["results"]


def test_forged_entry_header_of_f_payload_of_g_is_refused(tmp_path: Path) -> None:
    run(tmp_path, 0)
    (f_entry,) = entries(tmp_path)
    run(tmp_path, 1)
    (g_entry,) = [p for p in entries(tmp_path) if p != f_entry]
    f_data, g_data = f_entry.read_bytes(), g_entry.read_bytes()
    # f's header (magic + key), then g's payload length, payload and MAC.
    forged = f_data[:_payload_offset(f_data) - 8] + g_data[_payload_offset(g_data) - 8:]
    f_entry.write_bytes(forged)
    out, stderr = run(tmp_path, 0)
    compiled_again(out, 0)
    assert "integrity" in stderr, stderr
    # The forged file was replaced by a good entry.
    third, _ = run(tmp_path, 0)
    assert third["stats"]["disk_cache_hits"] == 1 and third["results"][0] == expected(0)


@pytest.mark.parametrize("cut", [1, 32, 100, "half"])
def test_truncated_entry_is_refused(tmp_path: Path, cut: int | str) -> None:
    run(tmp_path, 0)
    (entry,) = entries(tmp_path)
    data = entry.read_bytes()
    n = len(data) // 2 if cut == "half" else len(data) - int(cut)
    entry.write_bytes(data[:n])
    out, stderr = run(tmp_path, 0)
    compiled_again(out, 0)
    assert "compile cache" in stderr and "deleting it" in stderr, stderr


def test_appended_bytes_are_refused(tmp_path: Path) -> None:
    run(tmp_path, 0)
    (entry,) = entries(tmp_path)
    entry.write_bytes(entry.read_bytes() + b"\0" * 16)
    out, stderr = run(tmp_path, 0)
    compiled_again(out, 0)
    assert "integrity" in stderr, stderr


@pytest.mark.parametrize("dir_mode", [0o777, 0o770, 0o722])
def test_entry_in_a_group_or_world_writable_dir_is_refused(tmp_path: Path, dir_mode: int) -> None:
    d = tmp_path / "cache"
    run(d, 0)
    before = {p: p.read_bytes() for p in entries(d)}
    os.chmod(d, dir_mode)
    out, stderr = run(d, 0)
    compiled_again(out, 0)
    assert out["info"]["disk_writes"] == 0
    assert "refusing directory" in stderr and "writable" in stderr, stderr
    assert {p: p.read_bytes() for p in entries(d)} == before  # nothing written there
    os.chmod(d, 0o700)
    fixed, _ = run(d, 0)
    assert fixed["stats"]["disk_cache_hits"] == 1


def test_writable_ancestor_without_sticky_bit_is_refused(tmp_path: Path) -> None:
    parent = tmp_path / "shared"
    parent.mkdir()
    os.chmod(parent, 0o777)
    out, stderr = run(parent / "cache", 0)
    compiled_again(out, 0)
    assert "ancestor" in stderr and out["info"]["disk_writes"] == 0, stderr
    os.chmod(parent, 0o1777)  # sticky, like /tmp: fine
    ok, _ = run(parent / "cache", 0)
    assert ok["info"]["disk_writes"] == 1


@pytest.mark.parametrize("entry_mode", [0o666, 0o620])
def test_group_or_world_writable_entry_is_refused(tmp_path: Path, entry_mode: int) -> None:
    run(tmp_path, 0)
    (entry,) = entries(tmp_path)
    os.chmod(entry, entry_mode)
    out, stderr = run(tmp_path, 0)
    compiled_again(out, 0)
    assert "refusing entry" in stderr, stderr
    (entry,) = entries(tmp_path)
    assert mode(entry) == 0o600  # replaced by a fresh, private one


def test_symlinked_entry_is_refused(tmp_path: Path) -> None:
    d, elsewhere = tmp_path / "cache", tmp_path / "elsewhere"
    run(d, 0)
    (entry,) = entries(d)
    elsewhere.mkdir()
    target = elsewhere / "planted"
    target.write_bytes(entry.read_bytes())
    entry.unlink()
    entry.symlink_to(target)
    out, stderr = run(d, 0)
    compiled_again(out, 0)
    assert "refusing entry" in stderr, stderr


root_only = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another uid needs root")


@root_only
def test_entry_owned_by_another_user_is_refused(tmp_path: Path) -> None:
    run(tmp_path, 0)
    (entry,) = entries(tmp_path)
    os.chown(entry, OTHER_UID, OTHER_UID)
    out, stderr = run(tmp_path, 0)
    compiled_again(out, 0)
    assert "refusing entry" in stderr and str(OTHER_UID) in stderr, stderr


@root_only
def test_dir_owned_by_another_user_is_refused(tmp_path: Path) -> None:
    d = tmp_path / "cache"
    run(d, 0)
    os.chown(d, OTHER_UID, OTHER_UID)
    out, stderr = run(d, 0)
    compiled_again(out, 0)
    assert "refusing directory" in stderr and str(OTHER_UID) in stderr, stderr


@root_only
def test_secret_owned_by_another_user_is_refused(tmp_path: Path) -> None:
    run(tmp_path, 0)
    os.chown(tmp_path / ".hlobridge-key", OTHER_UID, OTHER_UID)
    out, stderr = run(tmp_path, 0)
    compiled_again(out, 0)
    assert "refusing directory" in stderr and ".hlobridge-key" in stderr, stderr


def test_readable_secret_is_refused(tmp_path: Path) -> None:
    run(tmp_path, 0)
    os.chmod(tmp_path / ".hlobridge-key", 0o644)
    out, stderr = run(tmp_path, 0)
    compiled_again(out, 0)
    assert ".hlobridge-key" in stderr, stderr


NO_HOME = ("HOME", "XDG_CACHE_HOME")


def test_temp_fallback_is_per_user_and_private(tmp_path: Path) -> None:
    out, _ = run(None, 0, drop=NO_HOME, TMPDIR=str(tmp_path), umask=0)
    root = tmp_path / f"hlobridge-{os.geteuid()}"
    assert out["info"]["dir"] == str(root / "executables")
    assert out["info"]["disk_writes"] == 1
    assert mode(root) == 0o700 and mode(root / "executables") == 0o700
    again, _ = run(None, 0, drop=NO_HOME, TMPDIR=str(tmp_path))
    assert again["stats"]["disk_cache_hits"] == 1


@pytest.mark.parametrize("planted_mode", [0o755, 0o777])
def test_temp_fallback_not_private_disables_the_cache(tmp_path: Path, planted_mode: int) -> None:
    root = tmp_path / f"hlobridge-{os.geteuid()}"
    root.mkdir()
    os.chmod(root, planted_mode)
    out, stderr = run(None, 0, 1, drop=NO_HOME, TMPDIR=str(tmp_path))
    assert out["stats"]["compiles"] == 2 and out["info"]["disk_writes"] == 0
    assert out["info"]["enabled"] is False
    assert stderr.count("disabled for this process") == 1, stderr
    assert not (root / "executables").exists()


@root_only
def test_temp_fallback_owned_by_another_user_disables_the_cache(tmp_path: Path) -> None:
    root = tmp_path / f"hlobridge-{os.geteuid()}"
    root.mkdir(mode=0o700)
    os.chown(root, OTHER_UID, OTHER_UID)
    out, stderr = run(None, 0, drop=NO_HOME, TMPDIR=str(tmp_path))
    compiled_again(out, 0)
    assert out["info"]["enabled"] is False and "disabled for this process" in stderr, stderr


def test_host_identity_is_part_of_the_key(tmp_path: Path) -> None:
    a, _ = run(tmp_path, 0, HLOBRIDGE_CACHE_HOST_ID="cpu-a")
    assert a["info"]["host"] == "override:cpu-a" and a["info"]["disk_writes"] == 1
    b, _ = run(tmp_path, 0, HLOBRIDGE_CACHE_HOST_ID="cpu-b")
    compiled_again(b, 0)  # another CPU: not served cpu-a's executable
    assert len(entries(tmp_path)) == 2
    a2, _ = run(tmp_path, 0, HLOBRIDGE_CACHE_HOST_ID="cpu-a")
    assert a2["stats"]["disk_cache_hits"] == 1
    detected, _ = run(tmp_path, 0)
    compiled_again(detected, 0)
    host = detected["info"]["host"]
    assert host.startswith("arch=") and "features=" in host, host
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text()
    except OSError:
        return
    models = [ln.split(":", 1)[1].strip() for ln in cpuinfo.splitlines()
              if ln.startswith("model name")]
    if models:
        assert f"model={models[0]};" in host, host
