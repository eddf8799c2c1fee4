"""The UIs start where the links prag writes point (issue 50.5): scripts/ui.sh on run.dagster_ui_url's port,
scripts/mlflow_ui.sh on mlflow.ui_url's, and another PORT is said to break those links."""

import os
import subprocess

import pytest
from conftest import ROOT


@pytest.mark.parametrize(
    ("script", "variable", "url", "port"),
    [("ui.sh", "PRAG__RUN__DAGSTER_UI_URL", "http://127.0.0.1:3123", "3123"),
     ("mlflow_ui.sh", "PRAG__MLFLOW__UI_URL", "http://127.0.0.1:5123/", "5123")],
)  # fmt: skip
def test_each_ui_starts_on_its_configured_port_and_warns_when_told_otherwise(script, variable, url, port, tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("PORT", "PRAG_CONFIG")}
    env |= {"PRAG_UI_DRY_RUN": "1", "PRAG_HOME": str(tmp_path / "home"), variable: url}
    run = subprocess.run(["bash", str(ROOT / "scripts" / script)], env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and run.stdout.split()[-1] == port and not run.stderr, run.stderr
    other = subprocess.run(["bash", str(ROOT / "scripts" / script)], env=env | {"PORT": "4999"}, capture_output=True,
                           text=True, timeout=120)  # fmt: skip
    assert other.stdout.split()[-1] == "4999" and f"links point to port {port}" in other.stderr
