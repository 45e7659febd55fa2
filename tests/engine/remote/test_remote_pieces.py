"""When a reply from a server that streams no logprobs goes in pieces, and how a piece is
cut to the tokens it keeps (engine.remote.pieces); no server."""

from __future__ import annotations

from engine.api.params import SamplingParams
from engine.remote.pieces import CUT, keep_first, whole_reason
from engine.remote.servers import KINDS
from engine.remote.wire import TextDecoder, WireChunk, WireEntry, assign_texts

MLX = KINDS["mlx_lm"]


def test_pieces_unless_seeded_sampling_penalties_no_template_or_thinking():
    greedy = SamplingParams()
    assert whole_reason(MLX, greedy, True, "", False) == ""
    assert whole_reason(MLX, SamplingParams(temperature=0.7), True, "", False) == ""  # unseeded
    assert "seeded" in whole_reason(MLX, SamplingParams(temperature=0.7, seed=3), True, "", False)
    assert whole_reason(MLX, SamplingParams(seed=3), True, "", False) == ""  # greedy: the seed draws nothing
    assert "penalized" in whole_reason(MLX, SamplingParams(repetition_penalty=1.3), True, "", False)
    assert "not readable" in whole_reason(MLX, greedy, True, "not readable here", False)
    # Plain text needs the tokenizer, not the template: to check that its text encodes back.
    assert "encodes it back to the tokens received" in whole_reason(MLX, greedy, False, "not readable here", False)
    assert whole_reason(MLX, greedy, False, "", False) == ""
    assert "reasoning model" in whole_reason(MLX, greedy, True, "", True)
    assert "streams" in whole_reason(KINDS["llama.cpp"], greedy, True, "", False)


def _entry(text: str) -> WireEntry:
    return WireEntry(None, text.encode(), -0.1, ())


def test_a_piece_keeps_its_first_tokens_and_their_text_only():
    chunk = WireChunk([_entry(t) for t in (" Once", " upon", " a")], "Once upon a", finish_reason="length")
    assert keep_first(chunk, 2)
    assert [e.raw for e in chunk.entries] == [b" Once", b" upon"] and chunk.text == "Once upon"
    assert chunk.finish_reason == CUT
    stopped = WireChunk([_entry(" end"), _entry("")], " end", finish_reason="stop")
    assert not keep_first(stopped, 1) and len(stopped.entries) == 2  # it ended by itself: kept whole
    short = WireChunk([_entry(" a")], " a", finish_reason="length")
    assert not keep_first(short, 1) and short.finish_reason == "length"  # the last piece


def _texts(raws: list[bytes], server_text: str, decoder: TextDecoder | None = None) -> list[str]:
    entries = [WireEntry(None, r, -0.1, ()) for r in raws]
    return [t.text for t in assign_texts(entries, server_text, decoder or TextDecoder())]


def test_a_token_keeps_the_leading_space_mlx_lm_drops_from_each_answer():
    """mlx-lm's detokenizer drops the first space of each answer (a piece's too), a lone
    space token included; the tokens keep it, so the reply continued from their texts is
    the one they spell."""
    assert _texts([b" ", b"1", b"0"], "10") == [" ", "1", "0"]
    assert _texts([b" Once", b" upon"], "Once upon") == [" Once", " upon"]
    assert _texts([b" "], "") == [" "]  # a piece of one lone space: its answer's text is ""
    assert _texts([b" Once"], "Once") == [" Once"]
    assert _texts([b"  x"], " x") == ["  x"]  # two spaces: one dropped
    assert _texts([b" Once", b" upon"], " Once upon") == [" Once", " upon"]  # a server that keeps it
    assert _texts([b"\n"], "") == [""]  # an answer that sent no text
    # A character split across tokens: the first holds its space only, the second the character.
    decoder = TextDecoder()
    assert _texts([b" \xe3\x83"], "", decoder) == [" "] and _texts([b"\x8f"], "\u30cf", decoder) == ["\u30cf"]
