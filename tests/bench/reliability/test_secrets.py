"""The secrets scenario: its quick slice finds nothing, and its scan finds a planted key
in every form it looks for (raw, escaped, base64 at any alignment, cut short), in any
file under the root, through grep or Python."""

from __future__ import annotations

import base64
import json
import random
from pathlib import Path

import pytest

from memstrata.bench.reliability import secrets as S
from memstrata.bench.reliability.common import Context, Scenario


def test_quick_slice_finds_no_secret(tmp_path: Path) -> None:
    work = tmp_path / "secrets"
    work.mkdir()
    (tmp_path / "other-scenario").mkdir()  # the parent's other files are scanned too
    (tmp_path / "other-scenario" / "x.db").write_bytes(b"\0" * 100)
    result = S.secrets(Context(work=work, quick=True, seed=1))
    assert result.attempts == len(S.CHANNELS) * (len(S.SHAPES) + 1)
    assert (result.failures, result.secrets_found, result.crashes) == (0, 0, 0), result.details
    assert result.figures["masks_in_own_files"] > 0  # the keys reached the records
    assert result.figures["files_scanned"] >= 3


def test_fresh_secrets_have_every_shape_the_redactor_knows() -> None:
    from memstrata.trajectories import redact_text

    batch = S.fresh_secrets(random.Random(0), "config")
    assert {s.kind for s in batch} == {k for k, _, _ in S.SHAPES} | {S.NAMED}
    for s in batch:
        if s.kind not in ("env", S.NAMED):  # those two have no shape, by design
            assert s.value not in redact_text(f"x {s.planted} y"), s.kind
    again = S.fresh_secrets(random.Random(1), "config")
    assert not {s.value for s in batch} & {s.value for s in again}


@pytest.mark.parametrize("grep", [True, False])
def test_scan_finds_a_planted_key_in_every_form(tmp_path: Path, grep: bool,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    if not grep:  # the pure-Python scan; with grep absent the other case runs it too
        monkeypatch.setattr(S.shutil, "which", lambda name: None)
    batch = S.fresh_secrets(random.Random(5), "prompt")
    openai, google, hf, env, aws, slack = (next(s for s in batch if s.kind == k) for k in (
        "openai", "google", "huggingface", "env", "aws_akia", "slack"))
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / "memory.db-wal").write_bytes(b"\0\1page" + openai.value.encode())
    (tmp_path / "log.txt").write_text(json.dumps({"k": google.value}))
    blob = base64.b64encode(b"xy" + hf.value.encode() + b"tail").decode()  # alignment 2
    (tmp_path / "export.jsonl").write_text(f'{{"b": "{blob}"}}\n')
    (tmp_path / "cut.txt").write_text("preview: " + env.value[:20] + "…")  # cut short
    (tmp_path / "b64url.bin").write_bytes(base64.urlsafe_b64encode(b"z" + aws.value.encode()))
    hits = S.scan(tmp_path, batch)
    found = {s.kind: sorted({f for f, _ in where}) for s, where in hits.items()}
    assert found == {"openai": ["a/b/memory.db-wal"], "google": ["log.txt"],
                     "huggingface": ["export.jsonl"], "env": ["cut.txt"],
                     "aws_akia": ["b64url.bin"]}
    assert slack not in hits
    assert "b642" in {f for _, f in hits[hf]}  # found at its own alignment
    result = Scenario(name="secrets")
    S.judge(result, hits)
    assert result.secrets_found == 5 and result.failures == 5
    assert all(s.value not in json.dumps(result.details) for s in batch)  # no key reported


def test_a_leak_through_a_channel_is_found(tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    # The event log before issue 21: payloads stored as given.
    import memstrata.memory.runs as runs

    monkeypatch.setattr(runs, "redact", lambda obj, env=None, _depth=0: obj)
    work = tmp_path / "secrets"
    work.mkdir()
    result = S.secrets(Context(work=work, quick=True, seed=2))
    assert result.secrets_found > 0
    assert {d["channel"] for d in result.details if "channel" in d} >= {"model_output"}
