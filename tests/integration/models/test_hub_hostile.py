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


# --------------------------------------------------------------------------- issue 26


def test_a_server_that_always_answers_short_is_given_up_on(
    make_client: MakeClient, hub: HubServer, gguf_bytes: dict[str, bytes]
) -> None:
    """Before: 9,051 GETs and 2.4 GB for a 0.26 MB file in 30 s, never ending."""
    hub.set_fault(REPO, FILE, short_by=1000)
    client = make_client(max_retries=5)
    with pytest.raises(HubError) as err:
        client.download(REPO, FILE)
    assert err.value.kind == "network" and "keeps failing" in err.value.message
    assert "ended 1,000 bytes before the end" in err.value.message
    gets = hub.file_requests(REPO, FILE, "GET")
    assert len(gets) <= 6  # the first try and five retries
    assert hub.bytes_served[(REPO, FILE)] <= 6 * len(gguf_bytes["q4"])
    assert not client.installed_path(REPO, FILE).exists()


def test_a_redirect_loop_is_a_clear_error(make_client: MakeClient, hub: HubServer) -> None:
    hub.set_fault(REPO, FILE, redirect_loop=True)
    with pytest.raises(HubError, match="redirected .* in a loop") as err:
        make_client().download(REPO, FILE)
    assert err.value.kind == "hub"


def test_html_instead_of_the_api_is_a_clear_error(make_client: MakeClient, hub: HubServer) -> None:
    hub.repos[REPO].html_info = True
    client = make_client()
    for call in (lambda: client.list_files(REPO), lambda: client.download(REPO, FILE)):
        with pytest.raises(HubError, match="could not be read") as err:
            call()
        assert err.value.kind == "hub"


def test_names_too_long_for_the_file_system(make_client: MakeClient, hub: HubServer,
                                            gguf_bytes: dict[str, bytes]) -> None:
    """Before: ENAMETOOLONG as a raw OSError."""
    long_file = "x" * 251 + ".gguf"  # 256 bytes: one more than a file name may have
    hub.add_file(REPO, long_file, gguf_bytes["f16"])
    client = make_client()
    with pytest.raises(HubError, match="longer than the 255 bytes") as err:
        client.download(REPO, long_file)
    assert err.value.kind == "invalid"
    # 90-character repo parts and a long-ish file name: the partial's name is hashed.
    repo = "o" * 90 + "/" + "n" * 90
    name = "m" * 60 + "-Q4_K_M.gguf"
    hub.add_repo(repo, {name: gguf_bytes["f16"]})
    path = client.download(repo, name)
    assert path.read_bytes() == gguf_bytes["f16"]


def test_a_folder_at_the_partial_path_is_a_clear_error(make_client: MakeClient, hub: HubServer) -> None:
    client = make_client()
    client.partial_path(REPO, FILE).mkdir(parents=True)
    with pytest.raises(HubError) as err:
        client.download(REPO, FILE)
    assert err.value.kind == "io" and "cannot store" in err.value.message
    assert str(client.partial_path(REPO, FILE)) in err.value.message


def test_a_file_listed_without_checksum_is_installed_as_not_verified(
    make_client: MakeClient, hub: HubServer, gguf_bytes: dict[str, bytes]
) -> None:
    hub.set_fault(REPO, FILE, listed_checksum=False)
    client = make_client()
    [remote] = [f for f in client.list_files(REPO) if f.filename == FILE]
    assert not remote.is_verifiable
    got = client.download_checked(REPO, FILE)
    assert got.verified is False and got.path.read_bytes() == gguf_bytes["q4"]
    hub.set_fault(REPO, FILE, listed_checksum=True)
    assert client.download_checked(REPO, FILE).verified is True
