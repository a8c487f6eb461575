"""The harness's pieces that need no broker: input generation, version report, README block."""

from __future__ import annotations

import copy
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from benchmarks import data, report

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


def test_zipf_keys_are_deterministic_and_skewed() -> None:
    a = data.zipf_users(50_000, 10_000, 1.1, seed=14)
    assert a == data.zipf_users(50_000, 10_000, 1.1, seed=14)
    assert a != data.zipf_users(50_000, 10_000, 1.1, seed=15)
    assert all(0 <= u < 10_000 for u in a)
    counts = sorted(Counter(a).values(), reverse=True)
    # Zipf 1.1 over 10k ranks: the hottest key has ~1/H(10k, 1.1) ~ 15% of the draws.
    assert 0.12 < counts[0] / len(a) < 0.18
    assert counts[0] > 1.8 * counts[1]  # rank 2 has 2^-1.1 of rank 1's weight
    assert len(counts) < 10_000  # a long tail, part of it never drawn


def test_dataset_values_are_the_compact_json_they_always_were() -> None:
    d = data.make_dataset(2_000, 300, 4)
    for i in (0, 1, 299, 1_999):
        key, value, partition = d.records[i]
        user = f"user-{(i * 7919) % 300:06d}"
        assert key == user.encode() and partition == int(user[5:]) % 4
        assert json.loads(value) == {"user_id": user, "page": data.PAGES[i % 7],
                                     "ts": data.TS0 + i, "session": f"s-{(i * 31) % 999_983:06d}",
                                     "seq": i}
        assert value == json.dumps(json.loads(value), separators=(",", ":")).encode()
    assert set(d.reference().values()) in ({6, 7}, {7, 6})


def test_skewed_dataset_reference_and_description() -> None:
    d = data.make_dataset(20_000, 10_000, 4, zipf=1.1, seed=14)
    ref = d.reference()
    desc = d.describe(ref)
    assert sum(ref.values()) == 20_000 and desc["distinct_users"] == len(ref)
    assert sum(desc["messages_per_partition"]) == 20_000
    assert desc["key_distribution"] == "zipf 1.1" and desc["seed"] == 14
    for key, value, partition in d.records[:100]:
        assert json.loads(value)["user_id"] == key.decode()
        assert partition == int(key[5:]) % 4


def _old_results() -> dict:
    """The results of the 2026-11-22 run, kept as a fixture (benchmarks/results.json changes
    with every make bench)."""
    return json.loads((Path(__file__).parent / "data" / "results-2026-11-22.json").read_text())


def test_versions_of_peers_that_ran_come_from_their_own_runs() -> None:
    meta = {"versions": {"python": "3.11.7", "quixstreams": None, "faust-streaming": None},
            "systems": ["millpond", "quix", "faust"], "workloads": ["count"],
            "peer_versions": {"quix": {"quixstreams": "3.28.1", "confluent-kafka": "2.12.2"}}}
    text = report.versions_text(meta)
    assert "quixstreams 3.28.1 (confluent-kafka 2.12.2" in text
    assert "faust-streaming not installed (it did not run)" in text
    meta["systems"] = ["millpond"]
    meta["peer_versions"] = {}
    text = report.versions_text(meta)
    assert "quixstreams" not in text and "faust" not in text  # not run: not listed
    # Results written before peer_versions existed: the venv lookup is used.
    old = _old_results()["meta"]
    assert "quixstreams 3.28.1" in report.versions_text(old)
    assert "faust-streaming 0.15.3" in report.versions_text(old)


@pytest.mark.parametrize("name", ["results.json", "results-restore.json"])
def test_report_renders_results_of_earlier_runs(name: str) -> None:
    results = json.loads((BENCH / name).read_text())
    results["targets"] = report.targets(results)
    assert "| figure |" in report.markdown(results)
    table = report.readme_table(results)
    assert table.count("| workload |") == 1


def test_readme_table_has_peers_beside_millpond_and_targets() -> None:
    results = _old_results()
    results["targets"] = report.targets(results)
    table = report.readme_table(results)
    lines = table.splitlines()
    assert lines[0] == report.README_BEGIN and lines[-1] == report.README_END
    assert results["meta"]["command"] in table and "CPU steal" in table
    alo = next(line for line in lines if line.startswith("| count, 1M msgs, 100k users uniform"))
    cells = [c.strip() for c in alo.strip("|").split("|")]
    assert cells[1].startswith("34,523 msg/s") and cells[2].startswith("10,196 msg/s")
    assert ">= 8x Quix (at-least-once): 3.22x **miss**" in cells[7]
    assert ">= 25% of raw consume: 28% pass" in cells[7]
    eo = next(line for line in lines if "effectively-once (default)" in line)
    assert "peak RSS <= 253.5 MB: 139 MB pass" in eo
    faust = next(line for line in lines if "Faust's size" in line)
    assert "846 msg/s" in faust and ">= 3x Faust" in faust
    # Every target lands in some row of the one table.
    for t in results["targets"]:
        assert t["short"] in table


def test_write_all_writes_the_three_files(tmp_path: Path) -> None:
    results = copy.deepcopy(_old_results())
    paths = report.write_all(results, tmp_path)
    assert [p.name for p in paths] == ["results.json", "results.md", "readme-table.md"]
    again = json.loads(paths[0].read_text())
    assert again["targets"] == json.loads(json.dumps(results["targets"]))
    assert report.main([str(paths[0])]) == 0


def test_query_phases_compare_the_rate_with_and_without_load_within_a_run() -> None:
    from benchmarks.query_driver import phase_rates

    # [time, load on, processed, commits] at each phase's start: not yet processing (None,
    # 0), then 1 s phases: with queries 280k/s, without 300k, with 290k, without 320k, one
    # with a commit inside (left out, whichever kind), without 200k, and the last reaching
    # the end of the input (left out: the job stopped inside it).
    marks = [[0.0, True, None, None], [1.0, False, 0, 0], [2.0, True, 300_000, 0],
             [3.0, False, 580_000, 0], [4.0, True, 880_000, 0], [5.0, False, 1_170_000, 0],
             [6.0, True, 1_490_000, 0], [7.0, False, 1_790_000, 4],
             [8.0, True, 1_990_000, 4], [9.0, False, 2_000_000, 4]]
    rates = phase_rates(marks, until=2_000_000)
    assert rates is not None
    assert rates["on_s"] == 2.0 and rates["off_s"] == 3.0  # 1-2: the job had not begun
    assert rates["on_msgs_per_s"] == 285_000
    assert abs(rates["off_msgs_per_s"] - 820_000 / 3) < 1e-6
    assert abs(rates["loss"] - (1 - 285_000 / (820_000 / 3))) < 1e-12
    # each on phase against the off phases beside it: 300k after the first (nothing usable
    # before it), 300k and 320k around the second; the one with the commit has none
    losses = rates["pair_losses"]
    assert len(losses) == 2
    assert abs(losses[0] - (1 - 280 / 300)) < 1e-12 and abs(losses[1] - (1 - 290 / 310)) < 1e-12
    assert phase_rates(marks[:3], until=2_000_000) is None  # no phase with the load on yet


def test_the_query_target_comes_from_the_phased_runs_when_there_are_any() -> None:
    def entry(rates: list[float], phases: list[Any] | None = None) -> dict:
        runs = [{"ok": True, "correct": True, "msgs_per_s": r,
                 "queries": {"rate": 1000, "phase_s": 1.0,
                             "phases": phases[i] if phases else None}}
                for i, r in enumerate(rates)]
        return {"runs": runs}

    out: list[dict] = []

    def add(name: str, value: float | None, goal: float | None, *_: object,
            **__: object) -> None:
        out.append({"target": name, "value": value, "goal": goal})

    eo, on = entry([300.0, 300.0, 300.0]), entry([270.0, 270.0, 270.0])
    # the phases of every run pooled: the median of 0.01, 0.02, 0.03, 0.04, 0.05, 0.09, 0.10
    # (the third run recorded before pair losses: its one loss counts as one phase)
    phased = entry([0, 0, 0], [{"loss": 0.5, "pair_losses": [0.01, 0.09, 0.1]},
                               {"loss": 0.5, "pair_losses": [0.05, 0.03, 0.02]}, {"loss": 0.04}])
    report._query_targets(add, eo, on, phased)
    target = next(t for t in out if t["target"] == "query overhead <= 5% at 1000 q/s")
    assert target["value"] == 0.04 and target["goal"] == 0.05
    pair = next(t for t in out if "separate run" in t["target"])
    assert abs(pair["value"] - 0.1) < 1e-9 and pair["goal"] is None
    out.clear()
    report._query_targets(add, eo, on, None)  # no phased runs: the pairs are the target
    assert [t["target"] for t in out][0] == "query overhead <= 5% at 1000 q/s"
    assert abs(out[0]["value"] - 0.1) < 1e-9
