"""tests/restored.py, the testinfra check of a restored original, names each way it can fail."""

from types import SimpleNamespace

from restored import candidate_of, restored_problems


class FakeHost:
    """A testinfra-shaped host over a dict of files and systemctl answers."""

    def __init__(self, files, show, candidate_active="inactive"):
        self.files, self.show, self.candidate_active = files, show, candidate_active

    def run(self, command):
        out = self.show if command.startswith("systemctl show") else self.candidate_active
        return SimpleNamespace(stdout=out + "\n")

    def file(self, path):
        return SimpleNamespace(exists=path in self.files, sha256sum=self.files.get(path))


GOOD = "ActiveState=active\nUnitFileState=enabled\nNRestarts=0"
UNIT = [{"path": "/etc/systemd/system/sglang.service", "sha256": "a" * 64}]


def test_a_restored_original_has_no_problem():
    assert restored_problems(FakeHost({UNIT[0]["path"]: "a" * 64}, GOOD), "sglang.service", UNIT) == []


def test_each_difference_is_named():
    files = {UNIT[0]["path"]: "b" * 64, "/etc/systemd/system/sglang-candidate.service": "c",
             "/var/lib/serving-rollout/sglang.service.lock": "d"}
    show = "ActiveState=active\nUnitFileState=enabled\nNRestarts=1"
    problems = restored_problems(FakeHost(files, show, "active"), "sglang.service", UNIT)
    assert problems == [
        "sglang.service NRestarts='1', expected '0'",
        "/etc/systemd/system/sglang.service sha256 bbbbbbbbbbbb, adopted aaaaaaaaaaaa",
        "the candidate unit sglang-candidate.service is still installed",
        "the candidate sglang-candidate.service is active",
        "the lock /var/lib/serving-rollout/sglang.service.lock is still held"]
    assert restored_problems(FakeHost({}, GOOD), "sglang.service", []) == ["no adopted files to compare"]


def test_candidate_names_follow_the_tool():
    assert candidate_of("sglang@qwen.service") == "sglang@qwen-candidate.service"
