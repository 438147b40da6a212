"""A host's release is the single-host render (same files), named by its manifest, and carries the
guards the stack role applies; an export checksums every file it carries."""

from __future__ import annotations

import json
import subprocess
import sys

from sparkgate.bundle import render
from sparkgate.deploy.preflight import memory_floor
from sparkgate.fleet import export, release
from sparkgate.profile import loading as profiles


def test_release_is_the_deploy_render_named_by_its_manifest(tmp_path):
    built = release.build(release.ReleaseOptions("baseline", "sim", tmp_path, sim_time_scale=0.02))
    expected = render.render_files(profiles.load("baseline"), render.RenderOptions(target="sim", sim_time_scale=0.02,
                                                                                   recheck_period_s=5.0))
    bundle = tmp_path / built["release"]
    assert {p.name: p.read_text() for p in bundle.iterdir()} == expected
    assert built["release"].startswith("baseline-") and built["bundle"] == str(bundle)
    assert (built["min_mem_available_gib"], built["verdict_budget_s"]) == (release.SIM_MIN_MEM_AVAILABLE_GIB, 300)


def test_faults_make_another_release_and_spark_keeps_the_spark_guards(tmp_path):
    healthy = release.build(release.ReleaseOptions("all-three", "sim", tmp_path))
    faulted = release.build(release.ReleaseOptions("all-three", "sim", tmp_path, sim_faults=("draft-lm-head-unshared",)))
    assert healthy["release"] != faulted["release"] and faulted["sim_faults"] == ["draft-lm-head-unshared"]
    spark = release.build(release.ReleaseOptions("all-three", "spark", tmp_path))
    floor, _ = memory_floor(profiles.load("all-three").profile)  # the profile's memory plan (docs/sizing.md)
    assert floor > 85 and (spark["min_mem_available_gib"], spark["memory_timeout_s"]) == (floor, 180)


def test_command_line_prints_one_json_object_and_refuses_in_one_line(tmp_path):
    done = subprocess.run([sys.executable, "-m", "sparkgate.fleet.release", "--profile", "baseline", "--target", "sim",
                           "--out", str(tmp_path), "--sim-fault", "draft-lm-head-unshared"],
                          capture_output=True, text=True, check=True)
    assert json.loads(done.stdout)["sim_faults"] == ["draft-lm-head-unshared"]
    bad = subprocess.run([sys.executable, "-m", "sparkgate.fleet.release", "--profile", "no-such-profile", "--target",
                          "sim", "--out", str(tmp_path)], capture_output=True, text=True)
    assert bad.returncode != 0 and len(bad.stderr.strip().splitlines()) == 1 and "Traceback" not in bad.stderr


def test_manifest_lists_every_file_in_sha256sum_format(tmp_path):
    (tmp_path / "bundle").mkdir()
    (tmp_path / "bundle" / "a.txt").write_text("a\n")
    (tmp_path / "images.tar").write_bytes(b"\0" * 10)
    (tmp_path / export.MANIFEST).write_text("stale\n")
    text = export.manifest_text(tmp_path)
    (tmp_path / export.MANIFEST).write_text(text)
    assert [line.split("  ")[1] for line in text.splitlines()] == ["bundle/a.txt", "images.tar"]
    check = subprocess.run(["sha256sum", "--check", "--strict", export.MANIFEST], cwd=tmp_path, capture_output=True, text=True)
    assert check.returncode == 0, check.stdout
    (tmp_path / "bundle" / "a.txt").write_text("b\n")
    check = subprocess.run(["sha256sum", "--check", "--strict", export.MANIFEST], cwd=tmp_path, capture_output=True, text=True)
    assert check.returncode == 1 and "bundle/a.txt: FAILED" in check.stdout


def test_an_inventory_fault_that_is_not_a_fault_name_is_refused_in_one_line(tmp_path):
    """A string the role iterated character by character, or a typo, would crash-loop the simulator and read as an
    engine that never starts; the controller refuses it before anything is rendered."""
    for bad, says in (("draft lm head", "is not a simulator fault name"), ("Draft-LM", "is not a simulator fault name"),
                      ("draft-lm-head-unshared,answers-garbled", "is not a simulator fault name"),
                      ("$(id)", "is not a simulator fault name")):
        done = subprocess.run([sys.executable, "-m", "sparkgate.fleet.release", "--profile", "baseline", "--target",
                               "sim", "--out", str(tmp_path / "x"), "--sim-fault", bad], capture_output=True, text=True)
        assert done.returncode != 0 and len(done.stderr.strip().splitlines()) == 1, done.stderr
        assert says in done.stderr and not (tmp_path / "x").exists()
    spark = subprocess.run([sys.executable, "-m", "sparkgate.fleet.release", "--profile", "baseline", "--target", "spark",
                            "--out", str(tmp_path / "y"), "--sim-fault", "answers-garbled"], capture_output=True, text=True)
    assert spark.returncode != 0 and "exist only on the sim target" in spark.stderr
