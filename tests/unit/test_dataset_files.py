"""What a --dataset path names (dsbench/dataset_files.py), checked at launch where every rank reads this machine's
files, and on each rank before ``datasets`` reads them."""

import pytest

from dsbench import dataset_files as df
from dsbench.errors import UserError


def test_a_folder_gives_its_data_files_sorted_of_one_format(tmp_path):
    (tmp_path / "b").mkdir()
    for name in ("b/2.jsonl", "1.jsonl", "README.md"):
        (tmp_path / name).write_text('{"text": "x"}\n')
    files, kind = df.dataset_files(str(tmp_path))
    assert files == [tmp_path / "1.jsonl", tmp_path / "b" / "2.jsonl"] and kind == "json"


@pytest.mark.parametrize(("names", "message"), [
    ((), "no .txt/.json/.jsonl/.parquet/.csv files found"),
    (("a.txt", "b.csv"), "use files of one format"),
])
def test_a_folder_that_is_no_corpus_is_one_line(tmp_path, names, message):
    for name in names:
        (tmp_path / name).write_text("x,y\n")
    with pytest.raises(UserError, match=message):
        df.dataset_files(str(tmp_path))


def test_empty_files_and_a_fifo_are_refused(tmp_path):
    (tmp_path / "a.txt").write_text("")
    with pytest.raises(UserError, match="empty"):
        df.dataset_files(str(tmp_path / "a.txt"))
    import os

    os.mkfifo(tmp_path / "f.txt")
    with pytest.raises(UserError, match="not a regular file"):
        df.dataset_files(str(tmp_path / "f.txt"))


def test_a_walk_past_the_bound_stops(tmp_path, monkeypatch):
    """--dataset / walked the whole file system file by file; the walk stops past MAX_FILES."""
    monkeypatch.setattr(df, "MAX_FILES", 3)
    for i in range(4):  # one data file, three others: every file counts towards the bound
        (tmp_path / f"{i}.{'txt' if i == 0 else 'md'}").write_text("x")
    with pytest.raises(UserError, match="over 3 files below it"):
        df.dataset_files(str(tmp_path))


def test_a_rank_reads_the_files_it_checked_without_walking_the_folder_again(tmp_path, monkeypatch):
    """The rank lists the dataset's files before it imports torch (worker/run.prepare) and the data plan reads that
    list: one walk of the folder, and a file added in between is not read. The oracle for the tokens is the same
    folder read without the list."""
    from dsbench.worker import data

    (tmp_path / "a.txt").write_text("hello world\n")
    tokenizer = data.load_tokenizer(None)
    expected = data.token_ids(tokenizer, str(tmp_path))
    found = df.dataset_files(str(tmp_path))
    (tmp_path / "b.txt").write_text("added after the check\n")

    def walked_again(*_args):
        raise AssertionError("the dataset's folder was walked twice")

    monkeypatch.setattr(data, "dataset_files", walked_again)
    assert data.token_ids(tokenizer, str(tmp_path), found=found) == expected
