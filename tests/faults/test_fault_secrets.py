"""Secrets in URLs (issue 12): a password or a presigned signature is never shown or stored."""

from __future__ import annotations

import json
import stat

import pytest

import datasets_hub as dh
from datasets_hub.cli import main
from datasets_hub.errors import DownloadError
from datasets_hub.redact import redact_text, redact_url

from fixtures.faults import check_rows, d4rl_entry, register, write_d4rl
from fixtures.http_server import serve_files

PASSWORD, SIGNATURE, CREDENTIAL = "s3cretPassw0rd", "abcdef0123signature", "AKIAEXAMPLECRED"


def _secret_url(server, path: str) -> str:
    base = server.url(path).replace("http://", f"http://alice:{PASSWORD}@")
    return f"{base}?X-Amz-Credential={CREDENTIAL}&X-Amz-Signature={SIGNATURE}&part=1"


def _leaks(text: str) -> list[str]:
    return [s for s in (PASSWORD, SIGNATURE, CREDENTIAL) if s in text]


def test_redact_url_keeps_what_names_the_file():
    url = f"https://alice:{PASSWORD}@host.example/d/x.hdf5?X-Amz-Signature={SIGNATURE}&part=1"
    shown = redact_url(url)
    assert not _leaks(shown) and "host.example/d/x.hdf5" in shown and "part=1" in shown
    assert not _leaks(redact_text(f"failed: {url} and {url}"))


def test_credentials_never_reach_messages_cards_manifests_or_file_names(tmp_path, monkeypatch, isolated_cache, capsys):
    data = write_d4rl(tmp_path / "x.hdf5", rows=30).read_bytes()
    with serve_files({"m/x.hdf5": data}) as server:
        url = _secret_url(server, "m/x.hdf5")
        register(
            tmp_path / "extra.yaml",
            {
                "d4rl/secret-v0": d4rl_entry(url),
                "d4rl/secret-missing-v0": d4rl_entry(_secret_url(server, "m/gone.hdf5")),
            },
        )
        monkeypatch.setenv("DATASETS_HUB_REGISTRY", str(tmp_path / "extra.yaml"))
        check_rows(dh.load("d4rl/secret-v0"))
        # an error names the URL, redacted
        with pytest.raises(DownloadError) as info:
            dh.load("d4rl/secret-missing-v0")
        assert "404" in str(info.value) and not _leaks(str(info.value)), str(info.value)
        assert main(["download", "d4rl/secret-missing-v0"]) == 1
        err = capsys.readouterr().err
        assert "404" in err and not _leaks(err)
        # the card, in Python and as JSON
        card = dh.info("d4rl/secret-v0")
        assert not _leaks(json.dumps([card.resources, card.params, card.manifest], default=str))
        assert main(["info", "d4rl/secret-v0", "--json"]) == 0
        out = capsys.readouterr().out
        assert "m/x.hdf5" in out and not _leaks(out)
    # nothing in the cache holds a secret in its name or (apart from the owner-only catalogue copy) its bytes
    for path in isolated_cache.rglob("*"):
        assert not _leaks(str(path)), path
        if path.is_file() and not _leaks(path.read_bytes().decode("latin-1")):
            continue
        if path.is_file():
            assert path.parent.name == "catalogue", f"{path} stores a secret"
            assert stat.S_IMODE(path.stat().st_mode) & 0o077 == 0, f"{path} is readable by others"
