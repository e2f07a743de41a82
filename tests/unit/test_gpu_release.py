"""What a wait for free GPUs tells the console and why a run cannot go on (module_utils/gpu_release.py)."""

from serving_rollout.module_utils.gpu_release import release_problem, release_summary


def test_a_wait_shorter_than_a_second_with_nothing_ended_says_nothing():
    assert release_summary(0.3, []) == ""


def test_the_summary_names_the_wait_and_each_process_ended_with_its_signal():
    ended = [{"pid": 41, "ended_by": "SIGTERM"}, {"pid": 42, "ended_by": "SIGKILL"}]
    assert release_summary(12.04, ended) == (
        "waited 12.0 s for GPU workers to exit; terminated 2 process(es) of the stopped engine still holding "
        "the GPUs: 41 by SIGTERM, 42 by SIGKILL")


def test_free_and_idle_gpus_are_no_problem():
    assert release_problem("nvml", [], [], [], 60) is None


def test_a_foreign_process_is_named_with_what_to_do_and_never_called_the_engines():
    left = [{"pid": 7, "cmdline": "python train.py", "unit": "user@1000.service"}]
    problem = release_problem("process-scan", left, foreign=left, wedged=[], timeout_s=60)
    assert problem.startswith("GPUs still held after 60 s (process-scan): 7 (python train.py)")
    assert "not the engine's, so not touched: 7. Stop them (kill PID), then run rollback.yml" in problem


def test_an_nvml_process_without_a_command_line_is_named_by_its_gpu():
    problem = release_problem("nvml", [{"pid": 9, "gpu": 3}], [], [], 30)
    assert problem == "GPUs still held after 30 s (nvml): 9 (gpu 3)"


def test_a_wedged_gpu_is_named_with_its_utilisation_and_power_and_needs_a_reset():
    wedged = [{"index": 1, "util_pct": 100, "power_w": 412.6}]
    problem = release_problem("nvml", [], [], wedged, 60)
    assert problem.startswith("GPU(s) wedged: 1 busy (100 % utilisation, 413 W) with no process")
    assert "a GPU reset is needed" in problem
