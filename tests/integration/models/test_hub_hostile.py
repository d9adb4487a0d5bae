"""HubClient against hostile names and a wrong file in the library (issue 15, item 8).

The real huggingface_hub client talks to the local Hub server.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path

import pytest

from app.models.hub import HubClient, HubError
from tests.helpers.hub_server import HubServer
from tests.integration.models.conftest import FILE, REPO

MakeClient = Callable[..., HubClient]


def test_a_wrong_file_of_the_right_size_is_not_installed(
    make_client: MakeClient, hub: HubServer, gguf_bytes: dict[str, bytes]
) -> None:
    """A same-size file with other bytes at the destination used to be returned as installed."""
    client = make_client()
    good = gguf_bytes["q4"]
    dest = client.installed_path(REPO, FILE)
    dest.parent.mkdir(parents=True)
    wrong = bytes(reversed(good))
    dest.write_bytes(wrong)
    assert len(wrong) == len(good) and wrong != good

    assert client.download(REPO, FILE) == dest
    assert hashlib.sha256(dest.read_bytes()).hexdigest() == hashlib.sha256(good).hexdigest()
    assert len(hub.file_requests(REPO, FILE, "GET")) == 1

    # Now it is the right file: nothing is fetched again.
    assert client.download(REPO, FILE) == dest
    assert len(hub.file_requests(REPO, FILE, "GET")) == 1


def test_a_wrong_plain_git_file_of_the_right_size_is_not_installed(
    make_client: MakeClient, hub: HubServer
) -> None:
    content = b"GGUF a small plain-git file"
    hub.add_file(REPO, "small-Q2_K.gguf", content, lfs=False)
    client = make_client()
    dest = client.installed_path(REPO, "small-Q2_K.gguf")
    dest.parent.mkdir(parents=True)
    dest.write_bytes(content.upper())
    assert client.download(REPO, "small-Q2_K.gguf").read_bytes() == content


BAD_REPOS = [
    REPO + "\n", REPO + "\r\n", "\n" + REPO, "acme/Tiny GGUF", "acme/Tiny-GGUF/extra", "acme--x/y",
    "acme/x--y", "acme/x.", "acme/" + "x" * 97, "acme/x\x00", "", "/x", "acme/", "..", "a/../b",
    "acme/ïnvalid",
]
BAD_FILES = [
    FILE + "\n", FILE + "\r", "\n" + FILE, "tiny\x00.gguf", "tiny\t.gguf", " " + FILE, FILE + " ",
    "sub//x.gguf", "./x.gguf", "sub/./x.gguf", "sub/", "../x.gguf", "/etc/x.gguf", "a\\b.gguf", "",
    "tiny\x7f.gguf",
]


@pytest.mark.parametrize("repo", BAD_REPOS)
def test_a_bad_repo_id_is_invalid_before_any_request(
    make_client: MakeClient, hub: HubServer, tmp_path: Path, repo: str
) -> None:
    client = make_client()
    for call in (lambda: client.list_files(repo), lambda: client.download(repo, FILE),
                 lambda: client.installed_path(repo, FILE), lambda: client.discard_partial(repo, FILE)):
        with pytest.raises(HubError) as err:
            call()
        assert err.value.kind == "invalid"
    assert hub.requests == []
    assert not (tmp_path / "models").exists() and not (tmp_path / "partial").exists()


@pytest.mark.parametrize("name", BAD_FILES)
def test_a_bad_file_name_is_invalid_before_any_request(
    make_client: MakeClient, hub: HubServer, tmp_path: Path, name: str
) -> None:
    client = make_client()
    for call in (lambda: client.download(REPO, name), lambda: client.installed_path(REPO, name),
                 lambda: client.partial_path(REPO, name)):
        with pytest.raises(HubError) as err:
            call()
        assert err.value.kind == "invalid"
    assert hub.requests == []
    assert not (tmp_path / "models").exists() and not (tmp_path / "partial").exists()


def test_good_names_still_work(make_client: MakeClient, hub: HubServer, gguf_bytes: dict[str, bytes]) -> None:
    hub.add_file(REPO, "sub dir/with space-Q8_0.gguf", gguf_bytes["q8"])
    path = make_client().download(REPO, "sub dir/with space-Q8_0.gguf")
    assert path.read_bytes() == gguf_bytes["q8"] and path.parent.name == "sub dir"
