"""Sourced fixes to a cases table: applied to a copy, refused where they do not fit the table."""

from pathlib import Path

import pandas as pd
import pytest

from gpucap.calibration.corrections import PROJECT_CORRECTIONS, apply_corrections, read_corrections, read_public
from gpucap.calibration.validate import read_cases


def _cases() -> pd.DataFrame:
    return pd.DataFrame({"case_id": ["a", "b", "c", "c"], "osl": [200.0, 100.0, 200.0, 200.0], "engine": ["vllm"] * 4})


def _fixes(tmp_path: Path, *rows: str) -> pd.DataFrame:
    path = tmp_path / "fixes.csv"
    path.write_text("case_id,column,value,stated,source,reason\n" + "\n".join(rows) + "\n")
    return read_corrections(path)


def test_a_fix_lands_on_a_copy_and_says_what_changed(tmp_path: Path) -> None:
    cases = _cases()
    fixed = apply_corrections(cases, _fixes(tmp_path, "a,osl,104.62,200,printout,mean of the run"))
    assert fixed.loc[0, "osl"] == 104.62
    assert fixed.loc[1, "osl"] == 100.0
    assert list(fixed["corrected"]) == ["osl 200 -> 104.62", "", "", ""]
    assert cases.loc[0, "osl"] == 200.0  # the caller's table is untouched


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ("z,osl,104.62,200,s,r", "case 'z' is not in the cases table"),
        ("a,isl,104.62,200,s,r", "no column 'isl'"),
        ("a,osl,104.62,300,s,r", "a osl reads 200.0, not the stated 300"),
        ("a,osl,many,200,s,r", "value 'many' for osl is not a number"),
        ("c,osl,104.62,200,s,r", "case 'c' is on several rows"),
    ],
)
def test_a_fix_that_does_not_fit_is_refused(tmp_path: Path, row: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        apply_corrections(_cases(), _fixes(tmp_path, row), where="fixes.csv")


def test_a_whole_number_column_takes_a_mean(tmp_path: Path) -> None:
    cases = pd.DataFrame({"case_id": ["a"], "osl": [200], "engine": ["vllm"]})
    fixed = apply_corrections(cases, _fixes(tmp_path, "a,osl,104.62,200,printout,mean of the run"))
    assert fixed.loc[0, "osl"] == 104.62


def test_a_fix_without_its_source_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="row 2: source empty"):
        _fixes(tmp_path, "a,osl,104.62,200,,mean of the run")


def test_the_projects_fixes_fit_the_public_set(shared_cases: Path) -> None:
    # GPUStack's gpt-oss-20b on one H100, 4,000-token prompts asking for 200 tokens: the printout
    # says 500 requests made 52,309 tokens, 104.62 a request.
    fixes = read_corrections(PROJECT_CORRECTIONS)
    fixed = apply_corrections(read_cases(shared_cases), fixes)
    row = fixed.set_index("case_id").loc["m560"]
    assert row["osl"] == pytest.approx(52309 / 500, abs=0.005)  # to two decimals
    assert (fixed["corrected"] != "").sum() == len(fixes)


def test_the_public_set_is_read_with_the_projects_fixes(shared_cases: Path, tmp_path: Path) -> None:
    fixed = read_public(shared_cases, shared_cases)
    assert (fixed["corrected"] != "").sum() == len(read_corrections(PROJECT_CORRECTIONS))
    own = tmp_path / "mine.csv"  # a file of one's own gets no fixes unless it names some
    own.write_bytes(shared_cases.read_bytes())
    assert "corrected" not in read_public(own, shared_cases).columns
