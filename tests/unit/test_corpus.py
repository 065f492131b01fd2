"""Every corpus DeepSpeed config through `validate`; verdicts must match the hand-reviewed expected/ files."""

import csv
import json

import pytest

from dsbench.configs.api import validate_file
from tests.conftest import CORPUS

CONFIGS = sorted((CORPUS / "ds_configs").iterdir())


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name[:60])
def test_verdict_matches_expected(path):
    expected = json.loads((CORPUS / "expected" / f"{path.name}.json").read_text())
    _, findings = validate_file(str(path), None, allow_auto=False)
    got = {"valid": not any(f.severity == "error" for f in findings),
           "findings": sorted([list(t) for t in {(f.severity, f.code, f.path) for f in findings}])}
    assert got == expected


def test_every_corpus_file_has_provenance():
    with open(CORPUS / "SOURCES.tsv", newline="") as handle:
        rows = {row["file"]: row for row in csv.DictReader(handle, delimiter="\t")}
    files = {f"{p.parent.name}/{p.name}" for d in ("ds_configs", "accelerate", "hostfiles")
             for p in (CORPUS / d).iterdir()}
    assert files <= set(rows)
    assert all(len(rows[f]["commit"]) == 40 for f in files)


def test_trainer_configs_become_valid_with_allow_auto():
    path = CORPUS / "ds_configs" / "huggingface__transformers__tests_deepspeed_ds_config_zero2.json"
    _, findings = validate_file(str(path), 8, allow_auto=True)
    assert findings and all(f.severity == "warning" for f in findings)
