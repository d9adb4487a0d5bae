"""HubClient with the real huggingface_hub client against the local Hub server."""

from __future__ import annotations

import hashlib
import socket
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from app.models.hub import HubClient, HubError
from app.models.library import ModelLibrary
from tests.helpers.hub_server import DEFAULT_TOKEN, HubServer
from tests.integration.models.conftest import FILE, PRIVATE_REPO, REPO

MakeClient = Callable[..., HubClient]


def gguf_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*.gguf")) if root.exists() else []


def test_search_lists_gguf_repos_most_downloaded_first(make_client: MakeClient) -> None:
    repos = make_client().search("tiny")

    assert [r.id for r in repos] == ["acme/Tiny-Base-GGUF", REPO]  # no safetensors, no private
    tiny = repos[1]
    assert (tiny.downloads, tiny.likes) == (1200, 7)
    assert tiny.updated is not None and tiny.updated.isoformat() == "2025-03-01T08:30:00+00:00"
    assert make_client().search("tiny", limit=1)[0].id == "acme/Tiny-Base-GGUF"
    assert make_client().search("no-such-thing") == []


def test_list_files_gives_sizes_hashes_and_quants(
    make_client: MakeClient, gguf_bytes: dict[str, bytes]
) -> None:
    files = {f.filename: f for f in make_client().list_files(REPO)}

    assert sorted(files) == ["tiny-Q4_K_M.gguf", "tiny-Q8_0.gguf", "tiny-f16.gguf"]
    assert [files[n].quant for n in sorted(files)] == ["q4_k_m", "q8_0", "f16"]
    q4 = files[FILE]
    assert q4.size == len(gguf_bytes["q4"])
    assert q4.sha256 == hashlib.sha256(gguf_bytes["q4"]).hexdigest()


def test_download_installs_a_verified_file(
    make_client: MakeClient, hub: HubServer, gguf_bytes: dict[str, bytes], tmp_path: Path
) -> None:
    calls: list[tuple[int, int, float]] = []
    client = make_client()

    path = client.download(REPO, FILE, progress=lambda *a: calls.append(a))

    assert path == tmp_path / "models" / "acme--Tiny-GGUF" / FILE
    assert path.read_bytes() == gguf_bytes["q4"]
    assert calls[0][0] == 0 and calls[-1][:2] == (len(gguf_bytes["q4"]),) * 2
    assert gguf_files(tmp_path / "partial") == [] and list((tmp_path / "partial").iterdir()) == []
    (entry,) = ModelLibrary(tmp_path / "models", include_default=False).scan()
    assert (entry.path, entry.architecture, entry.quant) == (path, "llama", "q4_k_m")
    assert entry.broken is None
    # Already installed: no second transfer.
    assert client.download(REPO, FILE) == path
    assert len(hub.file_requests(REPO, FILE, "GET")) == 1


def test_dropped_connection_resumes_the_same_file(
    make_client: MakeClient, hub: HubServer, gguf_bytes: dict[str, bytes]
) -> None:
    content = gguf_bytes["q4"]
    f = hub.set_fault(REPO, FILE, drop_after=100_000)

    path = make_client().download(REPO, FILE)

    assert path.read_bytes() == content
    assert f.num_drops == 1
    first, second = hub.file_requests(REPO, FILE, "GET")
    assert first.range is None and 0 < first.num_body_bytes <= 100_000
    assert second.range == f"bytes={first.num_body_bytes}-"
    assert first.num_body_bytes + second.num_body_bytes == len(content)


def test_pause_then_resume_after_restart(
    make_client: MakeClient, hub: HubServer, gguf_bytes: dict[str, bytes], tmp_path: Path
) -> None:
    content = gguf_bytes["q4"]
    hub.set_fault(REPO, FILE, chunk_delay=0.005)
    polls = 0

    def pause() -> bool:
        nonlocal polls
        polls += 1
        return polls > 4  # after a few chunks

    with pytest.raises(HubError) as err:
        make_client().download(REPO, FILE, cancel=pause)
    assert err.value.kind == "cancelled"
    assert gguf_files(tmp_path / "models") == []

    # "Restart": a new client finds the partial and continues from it.
    client = make_client()
    (partial,) = client.list_partials()
    assert (partial.repo_id, partial.filename, partial.size) == (REPO, FILE, len(content))
    assert 0 < partial.num_bytes_done < len(content)

    path = client.download(REPO, FILE)

    assert path.read_bytes() == content
    resumed = hub.file_requests(REPO, FILE, "GET")[-1]
    assert resumed.range == f"bytes={partial.num_bytes_done}-"
    assert resumed.num_body_bytes == len(content) - partial.num_bytes_done < len(content)
    assert client.list_partials() == []


def test_cancel_without_keeping_the_partial_leaves_nothing(
    make_client: MakeClient, hub: HubServer, tmp_path: Path
) -> None:
    hub.set_fault(REPO, FILE, chunk_delay=0.005)
    stop = threading.Event()
    client = make_client()

    def progress(done: int, total: int, rate: float) -> None:
        if done > 0:
            stop.set()

    with pytest.raises(HubError) as err:
        client.download(REPO, FILE, progress=progress, cancel=stop, keep_partial=False)
    assert err.value.kind == "cancelled"
    assert gguf_files(tmp_path / "models") == []
    assert list((tmp_path / "partial").iterdir()) == []


def test_wrong_content_is_rejected_and_nothing_installed(
    make_client: MakeClient, hub: HubServer, tmp_path: Path
) -> None:
    hub.set_fault(REPO, FILE, corrupt=True)

    with pytest.raises(HubError) as err:
        make_client().download(REPO, FILE)

    assert err.value.kind == "checksum_mismatch"
    assert "failed verification" in str(err.value) and "nothing was installed" in str(err.value)
    assert gguf_files(tmp_path / "models") == []
    assert list((tmp_path / "partial").iterdir()) == []


def test_not_enough_disk_is_refused_before_fetching(
    make_client: MakeClient, hub: HubServer, tmp_path: Path
) -> None:
    probed: list[Path] = []

    def tiny_disk(path: Path) -> int:
        probed.append(path)
        return 50_000

    with pytest.raises(HubError) as err:
        make_client(free_space=tiny_disk).download(REPO, FILE)

    assert err.value.kind == "insufficient_space"
    assert "not enough disk space" in str(err.value)
    assert probed == [tmp_path / "partial"]
    assert hub.file_requests(REPO, FILE) == []  # not even a HEAD
    assert list((tmp_path / "partial").iterdir()) == []


def test_missing_repo_and_file_are_not_found(make_client: MakeClient, hub: HubServer) -> None:
    client = make_client()
    for call in (lambda: client.list_files("acme/Nope"),
                 lambda: client.download("acme/Nope", FILE),
                 lambda: client.download(REPO, "absent-Q2_K.gguf")):
        with pytest.raises(HubError) as err:
            call()
        assert err.value.kind == "not_found" and "not found" in str(err.value)

    hub.set_fault(REPO, FILE, missing=True)  # listed, but resolve answers 404
    with pytest.raises(HubError) as err:
        client.download(REPO, FILE)
    assert err.value.kind == "not_found"


def test_private_repo_needs_the_right_token(
    make_client: MakeClient, hub: HubServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(HubError) as err:
        make_client().list_files(PRIVATE_REPO)
    assert err.value.kind == "unauthorized" and "authentication required" in str(err.value)

    with pytest.raises(HubError) as err:
        make_client(token="hf_wrong").download(PRIVATE_REPO, "secret-Q8_0.gguf")
    assert err.value.kind == "unauthorized" and "token rejected" in str(err.value)

    monkeypatch.setenv("HF_TOKEN", DEFAULT_TOKEN)  # HF_TOKEN is honoured
    path = make_client().download(PRIVATE_REPO, "secret-Q8_0.gguf")
    assert path.is_file()
    assert all(r.authorization == f"Bearer {DEFAULT_TOKEN}"
               for r in hub.file_requests(PRIVATE_REPO, "secret-Q8_0.gguf"))


def test_hf_endpoint_is_honoured(
    hub: HubServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("HF_ENDPOINT", hub.endpoint + "/")
    client = HubClient(models_dir=tmp_path / "m")
    assert client.endpoint == hub.endpoint
    assert [r.id for r in client.search("Tiny-GGUF")] == [REPO]


def test_unreachable_hub_is_retried_then_a_clear_error(tmp_path: Path) -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    sleeps: list[float] = []
    client = HubClient(f"http://127.0.0.1:{port}", models_dir=tmp_path, max_retries=3,
                       backoff_base_s=0.5, backoff_max_s=1.5, sleep=sleeps.append)
    with pytest.raises(HubError) as err:
        client.list_files(REPO)
    assert err.value.kind == "network" and "could not reach the Hub" in str(err.value)
    # Three retries with exponential back-off: 0.5 + 1.0 + 1.5 (capped) seconds.
    assert sum(sleeps) == pytest.approx(3.0)


def test_slow_link_reports_progress_and_speed(
    make_client: MakeClient, hub: HubServer, gguf_bytes: dict[str, bytes]
) -> None:
    hub.set_fault(REPO, FILE, chunk_delay=0.02)
    calls: list[tuple[int, int, float]] = []

    make_client().download(REPO, FILE, progress=lambda *a: calls.append(a))

    done = [c[0] for c in calls]
    assert len(calls) >= 3 and done == sorted(done) and done[-1] == len(gguf_bytes["q4"])
    assert all(c[1] == len(gguf_bytes["q4"]) for c in calls)
    assert calls[-1][2] > 0


def test_transient_server_errors_are_retried(
    make_client: MakeClient, hub: HubServer, gguf_bytes: dict[str, bytes]
) -> None:
    hub.set_fault(REPO, FILE, fail_first=2)
    assert make_client().download(REPO, FILE).read_bytes() == gguf_bytes["q4"]
    assert len(hub.file_requests(REPO, FILE, "GET")) == 3


def test_server_ignoring_range_restarts_cleanly(
    make_client: MakeClient, hub: HubServer, gguf_bytes: dict[str, bytes]
) -> None:
    hub.set_fault(REPO, FILE, drop_after=50_000, ignore_range=True)
    assert make_client().download(REPO, FILE).read_bytes() == gguf_bytes["q4"]
    second = hub.file_requests(REPO, FILE, "GET")[1]
    assert second.range is not None and second.num_body_bytes == len(gguf_bytes["q4"])


def test_a_stale_partial_is_discarded(
    make_client: MakeClient, hub: HubServer, gguf_bytes: dict[str, bytes]
) -> None:
    client = make_client()
    part = client.partial_path(REPO, FILE)
    part.parent.mkdir(parents=True)
    part.write_bytes(b"old bytes of another version")
    part.with_name(part.name + ".json").write_text(
        '{"repo_id": "acme/Tiny-GGUF", "filename": "tiny-Q4_K_M.gguf", "sha256": "00", "size": 1}'
    )

    assert client.download(REPO, FILE).read_bytes() == gguf_bytes["q4"]
    assert hub.file_requests(REPO, FILE, "GET")[0].range is None


def test_plain_git_file_is_checked_by_blob_sha1(
    make_client: MakeClient, hub: HubServer, tmp_path: Path
) -> None:
    hub.add_file(REPO, "small-Q2_K.gguf", b"GGUF tiny plain-git file", lfs=False)
    (rf,) = [f for f in make_client().list_files(REPO) if f.filename == "small-Q2_K.gguf"]
    assert rf.sha256 is None and rf.blob_id

    assert make_client().download(REPO, "small-Q2_K.gguf").read_bytes().startswith(b"GGUF")

    hub.add_file(REPO, "bad-Q2_K.gguf", b"GGUF another plain file", lfs=False, corrupt=True)
    with pytest.raises(HubError) as err:
        make_client().download(REPO, "bad-Q2_K.gguf")
    assert err.value.kind == "checksum_mismatch" and "git SHA-1" in str(err.value)


def test_file_in_a_subfolder_lands_in_the_library(
    make_client: MakeClient, hub: HubServer, gguf_bytes: dict[str, bytes], tmp_path: Path
) -> None:
    hub.add_file(REPO, "Q8_0/tiny-00001-of-00001.gguf", gguf_bytes["q8"])
    path = make_client().download(REPO, "Q8_0/tiny-00001-of-00001.gguf")
    assert path == tmp_path / "models" / "acme--Tiny-GGUF" / "Q8_0" / "tiny-00001-of-00001.gguf"
    (entry,) = ModelLibrary(tmp_path / "models", include_default=False).scan()
    assert entry.path == path and entry.broken is None

    for repo, name in ((REPO, "../escape.gguf"), ("..", "x.gguf"), ("a/../b", "x.gguf")):
        with pytest.raises(HubError) as err:
            make_client().download(repo, name)
        assert err.value.kind == "invalid"


def test_a_file_downloads_once_at_a_time_and_a_pause_can_be_discarded(
    make_client: MakeClient, hub: HubServer
) -> None:
    hub.set_fault(REPO, FILE, chunk_delay=0.01)
    client = make_client()
    started, stop = threading.Event(), threading.Event()
    errors: list[HubError] = []

    def run() -> None:
        try:
            client.download(REPO, FILE, progress=lambda *a: started.set(), cancel=stop)
        except HubError as e:
            errors.append(e)

    t = threading.Thread(target=run)
    t.start()
    assert started.wait(5)
    with pytest.raises(HubError) as err:
        client.download(REPO, FILE)
    assert err.value.kind == "busy"
    with pytest.raises(HubError):
        client.discard_partial(REPO, FILE)
    stop.set()
    t.join(5)
    assert [e.kind for e in errors] == ["cancelled"]
    assert len(client.list_partials()) == 1
    client.discard_partial(REPO, FILE)
    assert client.list_partials() == []


def test_cdn_redirect_is_followed_and_resumed(
    make_client: MakeClient, hub: HubServer, gguf_bytes: dict[str, bytes]
) -> None:
    hub.set_fault(REPO, FILE, redirect=True, drop_after=70_000)

    assert make_client().download(REPO, FILE).read_bytes() == gguf_bytes["q4"]

    cdn_gets = [r for r in hub.file_requests(REPO, FILE, "GET") if r.path.startswith("/cdn/")]
    assert len(cdn_gets) == 2 and cdn_gets[1].range == f"bytes={cdn_gets[0].num_body_bytes}-"


def test_a_search_that_cannot_connect_gives_up_after_one_retry(tmp_path: Path) -> None:
    """huggingface_hub's list_models retries a failed connection five times with its own
    back-off (23 s with no network); a search here tries twice, then says so."""
    attempts = 0
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.2)
    stop = threading.Event()

    def refuse() -> None:  # accept and drop every connection, counting them
        nonlocal attempts
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            attempts += 1
            conn.close()

    thread = threading.Thread(target=refuse, daemon=True)
    thread.start()
    try:
        client = HubClient(endpoint=f"http://127.0.0.1:{listener.getsockname()[1]}", models_dir=tmp_path,
                           backoff_base_s=0.01)
        with pytest.raises(HubError) as err:
            client.search("smol")
    finally:
        stop.set()
        thread.join(timeout=5)
        listener.close()
    assert err.value.kind == "network"
    assert "could not reach the Hub" in str(err.value)
    assert attempts == 2
