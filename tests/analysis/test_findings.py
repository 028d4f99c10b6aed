import json

import pytest

from grpo_doctor.analysis.findings import Finding, FindingsFile


def _finding(id_, severity):
    return Finding(id=id_, severity=severity, title=id_, ranks=(1,), hosts=("node-0",), step=2, phase="rollout",
                   evidence={"seq": 3}, hints=("do this",))


def test_a_finding_survives_a_round_trip_through_json():
    f = _finding("rank-crash", "critical")
    assert Finding.from_dict(json.loads(json.dumps(f.to_dict()))) == f


def test_an_unknown_severity_is_refused_naming_the_valid_ones():
    with pytest.raises(ValueError, match="critical, warning, info"):
        Finding(id="x", severity="fatal", title="x")


def test_findings_file_has_the_contract_shape_and_lists_critical_first(tmp_path):
    out = FindingsFile(run=["runs/a"], findings=[_finding("straggler", "warning"), _finding("hang", "critical")],
                       warnings=["w"])
    data = json.loads(out.write(tmp_path / "findings.json").read_text())
    assert list(data) == ["schema", "run", "findings", "warnings", "inputs", "not_checked"]
    assert data["schema"] == 1 and data["run"] == ["runs/a"] and data["warnings"] == ["w"]
    assert [f["id"] for f in data["findings"]] == ["hang", "straggler"]
    assert set(data["findings"][0]) == {"id", "severity", "title", "ranks", "hosts", "step", "phase", "evidence",
                                        "hints", "role", "caused_by"}
    assert FindingsFile.from_dict(data).has_critical


def test_root_causes_lead_and_a_consequence_follows_its_root_whatever_its_severity(tmp_path):
    root = Finding(id="hang", severity="warning", title="rank 1 hung", ranks=(1,), role="root-cause")
    effect = Finding(id="rank-crash", severity="critical", title="rank 0 timed out", ranks=(0,),
                     role="consequence", caused_by=root.key)
    other = Finding(id="straggler", severity="critical", title="slow", ranks=(2,))
    data = FindingsFile(run=[], findings=[effect, other, root], warnings=[]).to_dict()
    assert [(f["id"], f["role"], f["caused_by"]) for f in data["findings"]] == [
        ("hang", "root-cause", None), ("rank-crash", "consequence", "hang@1"), ("straggler", None, None)]


def test_an_unknown_role_is_refused_naming_the_valid_ones():
    with pytest.raises(ValueError, match="root-cause, consequence"):
        Finding(id="x", severity="info", title="x", role="cause")
