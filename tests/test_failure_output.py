"""A failed stage as a person reads it (issue 42): `prag materialize` on a LaMP-2 folder whose profile document has a
tag in the wrong case ends with prag's own error on one line (the file, the record, the field, the allowed labels),
in the stage's FAILED line and in the closing "the run FAILED" line, not with Dagster's wrapper ("Error occurred
while executing op ...")."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from conftest import ROOT, write_config

from prag_models.data.tasks import INPUT_TEMPLATES, LAMP2_TAGS

BAD_TAG = "Comedy"  # LaMP-2's tags are lower case: "comedy"


def _lamp2_folder(root: Path) -> Path:
    """LaMP_2_time/{train,dev} with a few valid questions; dev question 'd1' has a profile document tagged BAD_TAG."""
    for split, prefix in (("train", "t"), ("dev", "d")):
        folder = root / "LaMP_2_time" / split
        folder.mkdir(parents=True)
        questions, golds = [], []
        for i in range(4):
            sid = f"{prefix}{i}"
            profile = [{"id": f"{sid}-{j}", "description": f"A film {i} {j} about robots.", "tag": LAMP2_TAGS[j]}
                       for j in range(3)]  # fmt: skip
            if sid == "d1":
                profile[2]["tag"] = BAD_TAG
            questions.append({"id": sid, "input": INPUT_TEMPLATES["LaMP-2"].format(x=f"Robots in love {i}."),
                              "user_id": f"u{i}", "profile": profile})  # fmt: skip
            golds.append({"id": sid, "output": LAMP2_TAGS[i]})
        (folder / f"{split}_questions.json").write_text(json.dumps(questions), encoding="utf-8")
        (folder / f"{split}_outputs.json").write_text(json.dumps({"task": "LaMP_2", "golds": golds}), encoding="utf-8")
    return root / "LaMP_2_time" / "dev" / "dev_questions.json"


def test_a_failed_stage_ends_with_its_cause_on_one_line(tmp_path) -> None:
    bad_file = _lamp2_folder(tmp_path / "lamp")
    config = write_config(tmp_path / "prag.toml", tmp_path / "home", generator_backend="fake",
                          data={"source": "lamp", "lamp_dir": str(tmp_path / "lamp"), "tasks": ["LaMP-2"]})
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PRAG_", "DAGSTER_"))}
    env |= {"PRAG_CONFIG": str(config), "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, "-m", "prag_assets.cli", "materialize"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    lines = out.rstrip().splitlines()

    def says_the_cause(line: str) -> bool:
        """The file, the record, the field, the wrong value and what was expected (the allowed tags), in one line."""
        return (str(bad_file) in line and "record id 'd1'" in line and "field 'profile doc 'd1-2'.tag'" in line
                and repr(BAD_TAG) in line and "'comedy'" in line and "'sci-fi'" in line)  # fmt: skip

    failed = [ln for ln in lines if " FAILED lamp_samples " in ln]
    assert len(failed) == 1 and says_the_cause(failed[0]), failed
    closing = [ln for ln in lines if ln.startswith("[prag] the run FAILED")]
    assert len(closing) == 1 and says_the_cause(closing[0]), closing
    assert "Error occurred while executing op" not in out, out[-3000:]
    assert "Traceback" not in out, out[-3000:]
