

def test_a_word_that_varies_between_lines_of_one_shape_is_no_slot(tmp_path: Path) -> None:
    """Tokens that differ between lines of one template become wildcards; numbers inside them have no fixed text."""
    log = tmp_path / "train.log"
    words = ["alpha", "b3ta", "g4mma-7", "delta", "eps1lon2", "zeta"]
    log.write_text("".join(f"run {w} step {i} loss {2 - i * 0.1:.2f}\n" for i, w in enumerate(words, start=1)))
    series = _series(TextLogSource(log).read_new())
    assert [s for s, _ in series["loss"]] == [1, 2, 3, 4, 5, 6]
