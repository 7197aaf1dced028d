"""The review's plan: what a patch's touched files make it build (no source tree needed)."""

from __future__ import annotations

from pathlib import Path

from pytest_readstream.review.plan import code_tokens, decide

from ._trees import BUFMGR, STREAM, fake_tree


def _pair(tmp_path: Path) -> tuple[Path, Path]:
    return fake_tree(tmp_path / "a"), fake_tree(tmp_path / "b")


def test_comment_and_whitespace_changes_are_no_code_change() -> None:
    a = 'x = 1; /* one */ s = "/* not a comment */";\n// two\n'
    b = 'x  =  1;\n/* changed */ s = "/* not a comment */"; // other\n'
    assert code_tokens(a) == code_tokens(b)
    assert code_tokens('s = "/* a */";') != code_tokens('s = "/* b */";')
    assert code_tokens("x = 1;") != code_tokens("x = 2;")


def test_a_read_stream_only_patch_runs_traced_copies_without_a_rebuild(tmp_path: Path) -> None:
    a, b = _pair(tmp_path)
    (b / STREAM).write_text((b / STREAM).read_text().replace("distance = 0", "distance = 2"))
    plan = decide([STREAM, "src/test/modules/t.pl"], a, b)
    assert plan.mode == "traced" and plan.code_changed == (STREAM,)
    assert plan.outside == ("src/test/modules/t.pl",)


def test_a_comment_only_patch_changes_no_code(tmp_path: Path) -> None:
    a, b = _pair(tmp_path)
    (b / BUFMGR).write_text("/* a new comment */\n" + (b / BUFMGR).read_text())
    plan = decide([BUFMGR], a, b)
    assert plan.mode == "traced" and plan.no_code_change and plan.comment_only == (BUFMGR,)


def test_a_patch_of_bufmgr_rebuilds_the_server(tmp_path: Path) -> None:
    a, b = _pair(tmp_path)
    (b / BUFMGR).write_text((b / BUFMGR).read_text().replace("return 0", "return 1"))
    (b / STREAM).write_text((b / STREAM).read_text().replace("distance = 0", "distance = 2"))
    plan = decide([STREAM, BUFMGR], a, b)
    assert plan.mode == "rebuild" and BUFMGR in plan.reason


def test_a_new_header_or_meson_file_rebuilds(tmp_path: Path) -> None:
    a, b = _pair(tmp_path)
    assert decide(["meson.build"], a, b).mode == "rebuild"
    assert decide(["src/include/storage/new.h"], a, b).mode == "rebuild"  # only on the patched side
