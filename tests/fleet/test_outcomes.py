"""The fleet report from the play's records: not reached without an outcome, failing checks named from
the deciding verdict, the serving release from the host's own status."""

from __future__ import annotations

import json

from sparkgate.fleet import outcomes


def _verdict(state: str, failed: tuple[str, ...] = (), accept: float | None = None) -> dict:
    checks = [{"name": name, "passed": False} for name in failed] + [{"name": "engine.health", "passed": True}]
    return {"state": state, "full": {"verification": {"checks": checks, "calibration": {"accept_length": accept,
                                                                                        "decode_tok_s": 61.234}},
                                     "smoke": {"passed": True, "tests": []}}}


def _write(directory, kind: str, host: str, data: dict) -> None:
    (directory / kind).mkdir(exist_ok=True)
    (directory / kind / f"{host}.json").write_text(json.dumps(data))


def test_rows_follow_outcomes_and_status(tmp_path):
    _write(tmp_path, "outcomes", "h1", {"outcome": "admitted", "verdict": _verdict("open", accept=2.51234),
                                        "time_to_admit_s": 21.5, "failing_checks": []})
    _write(tmp_path, "outcomes", "h2", {"outcome": "rolled_back", "verdict": _verdict("closed", ("mtp.accept_length",)),
                                        "rollback_verdict": _verdict("open"), "failing_checks": [],
                                        "requested_profile": "all-three"})
    for host, profile in (("h1", "all-three"), ("h2", "baseline"), ("h3", "baseline")):
        _write(tmp_path, "status", host, {"current": {"profile": profile, "release": f"{profile}-x",
                                                      "image_ids": {"img:1": "sha256:abc"}},
                                          "verdict": {"state": "open"}, "project": f"p-{host}"})
    built = outcomes.build(["h1", "h2", "h3"], tmp_path, profile="all-three")
    rows = {r["host"]: r for r in built["hosts"]}
    assert [rows[h]["outcome"] for h in ("h1", "h2", "h3")] == ["admitted", "rolled_back", "not_reached"]
    assert [rows[h]["profile"] for h in ("h1", "h2", "h3")] == ["all-three", "baseline", "baseline"]
    assert rows["h1"]["accept_length"] == 2.51 and rows["h1"]["decode_tok_s"] == 61.2
    assert rows["h2"]["failing_checks"] == ["mtp.accept_length"] and rows["h1"]["failing_checks"] == []
    assert built["summary"] == {"admitted": 1, "refused": 0, "rolled_back": 1, "not_reached": 1}


def test_a_host_that_could_not_be_read_serves_unknown(tmp_path):
    _write(tmp_path, "outcomes", "h1", {"outcome": "refused", "profile": "baseline",
                                        "failing_checks": ["airgap.sha256"], "verdict": {}})
    row = outcomes.build(["h1"], tmp_path)["hosts"][0]
    assert (row["outcome"], row["profile"], row["gate"], row["failing_checks"]) == \
        ("refused", "baseline", None, ["airgap.sha256"])


def test_status_reads_each_hosts_own_last_outcome(tmp_path):
    _write(tmp_path, "status", "h1", {"current": {"profile": "baseline"}, "verdict": {"state": "open"},
                                      "last_outcome": {"outcome": "rolled_back", "failing_checks": ["x.y"]}})
    row = outcomes.build(["h1"], tmp_path, host_outcomes=True)["hosts"][0]
    assert (row["outcome"], row["failing_checks"]) == ("rolled_back", ["x.y"])


def test_report_is_written_atomically_as_json(tmp_path):
    built = outcomes.build(["h1"], tmp_path)
    outcomes.write(built, tmp_path / "r.json")
    assert json.loads((tmp_path / "r.json").read_text())["hosts"][0]["outcome"] == "not_reached"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_the_exit_line_says_why_a_refused_hosts_rollback_did_not_come_back(tmp_path):
    from sparkgate.fleet.rollout import verdict_line

    rows = [
        {"host": "host1", "outcome": "admitted", "failing_checks": [], "profile": "all-three", "refusal": None},
        {"host": "host2", "outcome": "refused", "failing_checks": ["mtp.accept_length"], "profile": None,
         "refusal": "sentinel refused all-three; rollback to baseline not admitted: the sentinel refused the engine "
                    "(engine.calibration)"},
        {"host": "host3", "outcome": "refused", "failing_checks": ["engine.health"], "profile": None,
         "refusal": "sentinel refused all-three"},
    ]
    line = verdict_line({"profile": "all-three", "hosts": rows}, tmp_path / "r.json")
    parts = line.split("; host3 ")
    assert "host1" not in line
    assert parts[0].endswith("serving nothing (rollback to baseline not admitted: the sentinel refused the engine "
                             "(engine.calibration))")
    assert parts[1].startswith("refused (engine.health), serving nothing.")
