"""``python -m engine kld``: two models (or one model in two settings) on the same tokens.

One ``token`` record per scored token — ``index``, ``token_id``, ``text``, ``kld``
(KL(base ‖ model) over the whole vocabulary, nats), ``same_top``, ``p_base``, ``p_model``,
``logprob_base``, ``logprob_model``, ``top_base`` and ``top_model`` (``token_id``,
``text``, ``logprob`` each) — then one ``summary`` (:func:`engine.api.kld_stats.summarize`);
both shaped by :mod:`engine.api.kld_records`, which the app's Compare models export shares.
Both models stay loaded when they fit in memory; otherwise, or with ``--save-base``, the
base's distributions go through a file first and the base is freed before the model loads.
Progress goes to stderr; Ctrl+C prints the summary of what was done and exits 130.
``--kv-bits`` (with ``--kv-group-size``, ``--quantized-kv-start``) quantizes the compared
model's KV cache only: without ``--model`` that is the base's own weights (shared, loaded
once), so the comparison is the KV-cache quantization's cost; the summary names it.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import tempfile
from pathlib import Path

from engine.api.precision import PRECISIONS
from engine.cli.args import UsageError, add_kv_flags, check_chat, kv_from, read_text


def add_kld_command(commands) -> None:
    k = commands.add_parser("kld", help="KL divergence between two models on the same tokens, token by token")
    k.add_argument("--base", default="default", help="the reference model: default | PATH | REPO")
    k.add_argument("--model", help="the model compared with it (default: the base, in --precision)")
    k.add_argument("--base-precision", default="auto", choices=PRECISIONS, help="what the base computes in")
    k.add_argument("--precision", default="auto", choices=PRECISIONS, help="what the model computes in")
    add_kv_flags(k, whose="the compared model's (not the base's)")
    source = k.add_mutually_exclusive_group()
    source.add_argument("--text", help="the text to score")
    source.add_argument("--file", help="a UTF-8 text file to score")
    k.add_argument("--chat", action="store_true", help="the text is the assistant's reply to --prompt")
    k.add_argument("--prompt", help="with --chat: the user message the text answers")
    k.add_argument("--top", type=int, default=5, help="top tokens per record (default 5)")
    k.add_argument("--save-base", help="write the base's distributions to this file (then compare, with --model)")
    k.add_argument("--base-file", help="read the base's distributions (and tokens) from a --save-base file")
    k.add_argument("--prefill-chunk", type=int, default=64, help=argparse.SUPPRESS)


def kld_command(args: argparse.Namespace) -> int:
    from engine.api.errors import EngineError

    args.kv = kv_from(args)
    check_chat(args)
    if args.base_file is None and args.text is None and args.file is None:
        raise UsageError("give the text: --text or --file (or the tokens of a --base-file).")
    if args.base_file and args.save_base:
        raise UsageError("--base-file reads a saved base; --save-base writes one: give one of them.")
    if args.prefill_chunk <= 0 or not 1 <= args.top <= 100:
        raise EngineError("--prefill-chunk must be positive and --top in [1, 100].")
    return _Run(args).run()


class _Run:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.rows: list = []
        self.out = sys.stdout

    def run(self) -> int:
        from engine.analysis.kld import BaseFile

        args = self.args
        try:
            if args.base_file:
                base_file = BaseFile.open(Path(args.base_file))
                model = self._load(args.model or args.base, args.precision, args.kv)
                tokens, first = self._tokens(model, base_file)
                self._check_model(base_file.vocab, model, tokens)
                return self._compare(base_file.rows(args.prefill_chunk), model, tokens, first, base_file.header)
            base = self._load(args.base, args.base_precision)
            tokens, first = self._tokens(base, None)
            about = {"base": base.name, "base_precision": base.precision.dtype, "first": first}
            same_weights = args.model is None and args.precision == args.base_precision
            if args.save_base and same_weights and not args.kv.enabled:
                self._save(base, tokens, Path(args.save_base), about)
                self.out.write(json.dumps({"type": "saved", "path": args.save_base, "tokens": len(tokens)}) + "\n")
                return 0
            from engine.analysis.kld import logprob_rows

            if same_weights and args.kv.enabled:  # the base's own weights with a quantized KV cache: loaded once
                model = base.with_kv(args.kv)
                print(
                    f"kld: the model is the base, its own weights with a {args.kv.describe()} KV cache", file=sys.stderr
                )
                if args.save_base:
                    self._save(base, tokens, Path(args.save_base), about)
                    rows = BaseFile.open(Path(args.save_base)).rows(args.prefill_chunk)
                else:
                    rows = logprob_rows(base, tokens, args.prefill_chunk)
                return self._compare(rows, model, tokens, first, about)
            if args.save_base or not self._both_fit(base):
                return self._through_file(base, tokens, first, about)
            model = self._load(args.model or args.base, args.precision, args.kv)
            self._check_model(base.vocab_size, model, tokens)

            return self._compare(logprob_rows(base, tokens, args.prefill_chunk), model, tokens, first, about)
        except KeyboardInterrupt:
            self._summary(interrupted=True)
            return 130

    def _through_file(self, base, tokens, first, about) -> int:
        from engine.analysis.kld import BaseFile

        path = Path(self.args.save_base) if self.args.save_base else None
        with tempfile.TemporaryDirectory(prefix="logitscope-kld-") as tmp:
            target = path or Path(tmp) / "base.kld"
            self._save(base, tokens, target, about)
            vocab = base.vocab_size
            del base
            gc.collect()  # the base's weights go before the model's come
            model = self._load(self.args.model or self.args.base, self.args.precision, self.args.kv)
            self._check_model(vocab, model, tokens)
            stored = BaseFile.open(target)
            return self._compare(stored.rows(self.args.prefill_chunk), model, tokens, first, about)

    def _save(self, base, tokens, path: Path, about: dict) -> None:
        from engine.analysis.kld import BaseFile, logprob_rows

        rows = logprob_rows(base, tokens, self.args.prefill_chunk)
        BaseFile.write(path, tokens, base.vocab_size, about, rows, lambda d, n: _progress("base", d, n))

    def _compare(self, base_rows, model, tokens, first: int, about: dict) -> int:
        from engine.analysis.kld import logprob_rows, pair_rows
        from engine.api.kld_records import token_record
        from engine.runtime.text import TokenText

        self.about = {k: v for k, v in about.items() if k != "first"}
        self.about.update(model=model.name, precision=model.precision.dtype, **model.kv.to_dict())
        pieces = TokenText(model.tokenizer)
        model_rows = logprob_rows(model, tokens, self.args.prefill_chunk)
        total = len(tokens) - 1 - first
        for row in pair_rows(base_rows, model_rows, tokens, first, self.args.top):
            self.rows.append(row)
            self.out.write(json.dumps(token_record(row, pieces.piece)) + "\n")
            self.out.flush()
            if len(self.rows) % 16 == 0:
                _progress("compare", len(self.rows), total)
        self._summary(interrupted=False)
        return 0

    def _summary(self, interrupted: bool) -> None:
        from engine.api.kld_records import summary_record

        record = summary_record(self.rows, getattr(self, "about", {}), interrupted)
        self.out.write(json.dumps(record) + "\n")
        self.out.flush()

    def _tokens(self, loaded, base_file) -> tuple[list[int], int]:
        """The token ids and the position predicting the first scored token."""
        from engine.api.errors import EngineError

        if base_file is not None and self.args.text is None and self.args.file is None:
            return base_file.tokens, int(base_file.header.get("first", 0))
        context, targets = self._split(loaded.tokenizer)
        tokens = context + targets
        if len(targets) < 1 or len(tokens) < 2:
            raise EngineError("the text has no token to score.")
        if base_file is not None and base_file.tokens != tokens:
            raise EngineError("the text's tokens are not the ones the base file was written for.")
        return tokens, len(context) - 1

    def _check_model(self, vocab: int, model, tokens: list[int]) -> None:
        from engine.analysis.kld import check_same_tokenization
        from engine.api.errors import EngineError

        if model.vocab_size != vocab:
            raise EngineError(
                f"the models have different vocabularies ({vocab} and {model.vocab_size} logits): "
                "a token-by-token comparison needs the same tokenizer."
            )
        if self.args.text is not None or self.args.file is not None:
            check_same_tokenization(tokens, self._reencode(model))

    def _reencode(self, model) -> list[int]:
        context, targets = self._split(model.tokenizer)
        return context + targets

    def _split(self, tokenizer) -> tuple[list[int], list[int]]:
        from engine.runtime.prompts import scored_text

        return scored_text(tokenizer, read_text(self.args), self.args.prompt if self.args.chat else None)

    def _both_fit(self, base) -> bool:
        from engine.api.errors import EngineError
        from engine.models.fit import check_fits_beside, loaded_bytes

        source = self.args.model or self.args.base
        try:
            check_fits_beside(loaded_bytes(base.model), source, self.args.precision)
        except EngineError as exc:
            print(f"kld: {exc} The base's distributions go through a file.", file=sys.stderr)
            return False
        return True

    @staticmethod
    def _load(source: str, precision: str, kv=None):
        from engine.models.load import load

        quantized = f", KV cache {kv.describe()}" if kv is not None and kv.enabled else ""
        print(f"kld: loading {source} ({precision}{quantized})", file=sys.stderr)
        return load(source, precision=precision, kv=kv)


def _progress(what: str, done: int, total: int) -> None:
    print(f"kld: {what} {done}/{total} tokens", file=sys.stderr, flush=True)
