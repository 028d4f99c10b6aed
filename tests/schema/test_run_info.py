"""run.json as a type: the watches of several nodes add their hosts to one file; keys of another
version survive a rewrite; a damaged file is refused with the field named, and watch writes it anew."""
import json

import pytest

from grpo_doctor.schema import RunPaths
from grpo_doctor.schema.json_shapes import FormatError
from grpo_doctor.schema.run_info import RunInfo, WatchHost
from grpo_doctor.supervisor.run_files import RunFiles

# As watch wrote it before run.json had a type.
OLDER_RUN_JSON = {
    "start_t": 1795486850.5, "command": ["torchrun", "--nproc-per-node", "2", "train.py"],
    "grpo_doctor_version": "0.3.0",
    "hosts": {"vm": {"pid": 31500, "env_set_by_watch": {"TORCH_NCCL_DUMP_ON_TIMEOUT": "1"},
                     "hang_policy": {"factor": 3.0, "floor_s": 5.0, "initial_s": 600.0, "fixed_s": None},
                     "on_hang": "kill"}},
}


def test_an_older_run_json_reads_as_attributes_and_writes_back_the_same_json():
    info = RunInfo.from_dict(OLDER_RUN_JSON)
    assert info.command[0] == "torchrun" and info.hosts["vm"].on_hang == "kill"
    assert info.hosts["vm"].env_set_by_watch == {"TORCH_NCCL_DUMP_ON_TIMEOUT": "1"}
    assert info.to_dict() == OLDER_RUN_JSON
    assert RunInfo.from_dict(json.loads(json.dumps(info.to_dict()))) == info


def test_keys_of_another_version_are_kept_through_a_rewrite():
    data = {**OLDER_RUN_JSON, "job_id": "slurm-77", "hosts": {"vm": {"pid": 1, "gpu_model": "H100"}}}
    assert RunInfo.from_dict(data).to_dict()["job_id"] == "slurm-77"
    assert RunInfo.from_dict(data).to_dict()["hosts"]["vm"]["gpu_model"] == "H100"


def test_a_second_host_joins_and_the_first_watchs_command_and_start_stay():
    first = RunInfo.from_dict(OLDER_RUN_JSON)
    joined = first.joined_by(RunInfo(command=("other",), start_t=2e9, grpo_doctor_version="9",
                                     hosts={"node-b": WatchHost(pid=5, on_hang="report")}))
    assert joined.command == first.command and joined.start_t == first.start_t
    assert joined.grpo_doctor_version == "0.3.0" and sorted(joined.hosts) == ["node-b", "vm"]


@pytest.mark.parametrize("data, field", [
    ({"command": "torchrun train.py"}, "command"),
    ({"hosts": {"vm": {"pid": "31500"}}}, "hosts"),
    ({"hosts": ["vm"]}, "hosts"),
    ({"start_t": "yesterday"}, "start_t"),
])
def test_a_damaged_run_json_names_the_field(data, field):
    with pytest.raises(FormatError, match=f"field {field} is"):
        RunInfo.from_dict(data)


def test_watch_writes_a_damaged_run_json_anew_and_says_so(tmp_path):
    paths = RunPaths(tmp_path)
    paths.run_json.write_text('{"hosts": ["vm"]}')
    notes: list[str] = []
    files = RunFiles(paths, paths.supervisor_host("node-a"), note=notes.append)
    files.add_host_to_run_json(RunInfo(command=("python", "train.py"), hosts={"node-a": WatchHost(pid=9)}))
    written = RunInfo.from_dict(json.loads(paths.run_json.read_text()))
    assert list(written.hosts) == ["node-a"] and written.start_t is not None
    assert len(notes) == 1 and "run.json cannot be read (field hosts" in notes[0]
    files.add_host_to_run_json(RunInfo(command=("ignored",), hosts={"node-b": WatchHost(pid=10)}))
    again = RunInfo.from_dict(json.loads(paths.run_json.read_text()))
    assert again.command == ("python", "train.py") and sorted(again.hosts) == ["node-a", "node-b"]
