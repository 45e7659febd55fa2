"""The table ``python -m bench`` prints (without ``--json``): one line per row of each figure
that ran, in the words of docs/BENCHMARKS.md's tables."""

from __future__ import annotations


def table(r: dict) -> str:
    lines = ["figure | ours | mlx-lm | ratio (goal)", "--- | --- | --- | ---"]
    if "decode" in r:
        d = r["decode"]
        lines.append(
            f"1 decode, batch 1, top_logprobs=10 | {d['ours_tps']} tok/s | {d['mlx_lm_tps']} tok/s | "
            f"{d['ratio']} (>= 1.0)"
        )
    if "batched" in r:
        for size, row in r["batched"]["by_batch"].items():
            lines.append(
                f"2 batched decode, batch {size} | {row['ours_tps']} tok/s | {row['mlx_lm_tps']} tok/s | {row['ratio']}"
            )
    if "penalty_cost" in r:
        for history, row in r["penalty_cost"]["by_history"].items():
            lines.append(
                f"3 penalties on / off, history {history} | {row['step_ms_penalties']} / {row['step_ms_none']} ms"
                f" | processors +{row['mlx_lm_processors_ms']} ms | {row['ratio']} (flat, ~1.0)"
            )
    if "live_change" in r:
        lc = r["live_change"]
        lines.append(
            f"4 first step after a change / steady | {lc['ours_first_ms']} / {lc['ours_steady_ms']} ms | "
            f"sampler {lc['mlx_lm_sampler_first_ms']} ms first call | {lc['ratio']} vs mlx-lm "
            f"{lc['mlx_lm_ratio']} (<= 1.2)"
        )
    if "prefix_reuse" in r:
        pr = r["prefix_reuse"]
        lines.append(
            f"5 TTFT of turn 2, reuse / cold | {pr['ttft_warm_s']} / {pr['ttft_cold_s']} s | prefilled "
            f"{pr['prefilled_with_reuse']} / {pr['prefilled_cold']} of {pr['prompt_tokens']} | {pr['ratio']}"
        )
    if "overhead" in r:
        for size, row in r["overhead"]["by_batch"].items():
            lines.append(
                f"6 outside the forward pass, batch {size} | {row['step_ms']} ms step, {row['forward_ms']} ms "
                f"forward | | {row['outside_forward_share']}"
            )
    if "memory" in r:
        m = r["memory"]
        lines.append(
            f"8 peak memory, 2,000 tokens ({m['model']}) | {m['peak_mib_2000_tokens']} MiB | | growth over 50 "
            f"requests {m['slope_bytes_per_request']} B/request"
        )
    if "chain_cost" in r:
        for size, row in r["chain_cost"]["by_batch"].items():
            costly = sorted(row["stage_ms"].items(), key=lambda kv: -kv[1])[:3]
            lines.append(
                f"9 every stage on / classic chain, batch {size} | {row['every_stage_step_ms']} / "
                f"{row['classic_step_ms']} ms | costliest: {', '.join(f'{k} {v} ms' for k, v in costly)} | "
                f"{row['ratio']} (<= 1.1)"
            )
            lines.append(
                f"9 sampled (temperature, top-k, top-p) / greedy, batch {size} | {row['sampled_step_ms']} / "
                f"{row['greedy_step_ms']} ms | | {row['sampled_over_greedy']} (<= 1.1)"
            )
    if "dry_cost" in r:
        for history, row in r["dry_cost"]["by_history"].items():
            lines.append(
                f"10 DRY on / off, history {history} | {row['step_ms_dry']} / {row['step_ms_off']} ms | "
                f"host {row['dry_host_ms']} ms per step | {row['ratio']}"
            )
    if "compare" in r:
        for n, row in r["compare"]["by_variants"].items():
            lines.append(
                f"11 compare {n} settings: all first tokens / one alone | {row['ours_ratio_to_alone']} "
                f"({row['ours_all_first_s']} s) | {row['mlx_lm_ratio_to_alone']} ({row['mlx_lm_all_first_s']} s) | "
                f"tok/s {row['ours_tps']} vs {row['mlx_lm_tps']} = {row['tps_ratio']} (<= 1.3 at 4)"
            )
    if "prefill" in r:
        p = r["prefill"]
        lines.append(
            f"12 prefill, {p['prompt_tokens']}-token prompt | {p['ours_tps']} tok/s | {p['mlx_lm_tps']} tok/s | "
            f"{p['ratio']} (>= 1.0); score {p['score_tps_200_tokens']} tok/s"
        )
    if "vocab_cost" in r:
        for vocab, row in r["vocab_cost"]["by_vocab"].items():
            step, forward, peer = row["step_ms"], row["forward_ms"], row["mlx_lm_step_ms"]
            share, ratio = row["outside_forward_share"], row["ratio_to_mlx_lm"]
            lines.append(
                f"13 outside the forward pass, V = {vocab} | {step} ms step, {forward} ms forward | "
                f"mlx-lm {peer} ms/token | {share} (<= 0.05); {ratio} of mlx-lm"
            )
    if "gui_scaling" in r:
        for length, row in r["gui_scaling"].items():
            lines.append(
                f"14 GUI, {length}-token conversation, 200 tok/s | {row['ms_per_token']} ms GUI thread per token, "
                f"timer gap max {row['max_gap_ms']} ms ({row['max_gap_cpu_ms']} ms of it GUI work; idle "
                f"{row['idle_max_gap_ms']} ms) | | flat; gap <= 50 ms at 20,000"
            )
    if "startup" in r:
        st = r["startup"]
        for run in ("first_run", "later_runs"):
            row = st[run]
            lines.append(
                f"15 start-up, {run.replace('_', ' ')} | window answers input {row['answers_input']} s, model "
                f"ready {row['model_ready']} s (GUI gap while loading {row['max_gap_ms_while_loading']} ms) | "
                + (
                    f"mlx_lm.load ready {st['mlx_lm_load_ready_s']} s | {st['ratio_ready_later']}"
                    if run == "later_runs"
                    else "GGUF converted | "
                )
            )
    if "precision" in r:
        for model, row in r["precision"].items():
            if isinstance(row, str):
                lines.append(f"16 precision, {model} | {row} | |")
                continue
            for dtype in ("float32", "bfloat16"):
                cell = row[dtype]
                lines.append(
                    f"16 {model} in {dtype} / float16 (auto = {row['auto']}) | decode {cell['decode_tps']} / "
                    f"{row['float16']['decode_tps']} tok/s, prefill {cell['prefill_tps']} / "
                    f"{row['float16']['prefill_tps']} tok/s | | decode {cell['decode_vs_float16']}, "
                    f"prefill {cell['prefill_vs_float16']}"
                )
    if "gemma" in r:
        g = r["gemma"]
        if isinstance(g, str):
            lines.append(f"18 Gemma 3 (V = 262,144) | {g} | |")
        else:
            d, o = g["decode"], g["overhead"]["by_batch"]["1"]
            lines.append(
                f"18 Gemma 3 {g['model']} ({g['precision']}), decode batch 1 | {d['ours_tps']} tok/s | "
                f"{d['mlx_lm_tps']} tok/s | {d['ratio']} (>= 1.0); outside the forward pass "
                f"{o['outside_forward_share']} of {o['step_ms']} ms"
            )
    if "views_open" in r:
        v = r["views_open"]
        for state in ("layers", "compare"):
            lines.append(
                f"19 decode with the {state} view open / closed | {v[state + '_tokens_per_s']} / "
                f"{v['plain_tokens_per_s']} tok/s | | {v[state + '_ratio']} (>= {v['goal']})"
            )
        lines.append(
            f"19 decode with a lens job of an earlier reply queued / none | {v['lens_positions_during']} positions "
            f"read during the reply, {v['lens_positions']} after | | {v['lens_beside_ratio']} (>= {v['goal']})"
        )
    if "library" in r:
        lib = r["library"]
        lines.append(
            f"20 model library, {lib['models']} models ({lib['hf_entries']} HF cache entries, "
            f"{lib['gguf_files'] + lib['ollama_models']} GGUFs) | scan {lib['scan_s_headers_cached']} s "
            f"(headers cached), {lib['scan_s_headers_uncached']} s (first listing) | | < 1 s"
        )
    if "kvquant" in r:
        for context, row in r["kvquant"]["by_context"].items():
            for name in ("8bit", "4bit"):
                cell, none = row[name], row["none"]
                lines.append(
                    f"17 KV cache {name} / unquantized, {context}-token context | {cell['nbytes']} / "
                    f"{none['nbytes']} bytes, decode {cell['decode_tps']} / {none['decode_tps']} tok/s | | "
                    f"bytes {cell['bytes_vs_none']}, decode {cell['decode_vs_none']}"
                )
    for name, row in r.get("step_primitives", {}).items():
        if name != "goal":
            lines.append(
                f"21 kernels (primitives) outside the model, {name} | {row['ours']['kernels']} "
                f"({row['ours']['primitives']}); GPU forms {row['ours_gpu_forms']['kernels']} | "
                f"{row['mlx_lm']['kernels']} ({row['mlx_lm']['primitives']}) | "
                f"(<= {r['step_primitives']['goal']['ours_kernels_at_most']})"
            )
    if "tiny_decode" in r:
        d = r["tiny_decode"]
        lines.append(
            f"22 tiny llama, real vocabulary, decode batch 1 | {d['ours_tps']} tok/s | {d['mlx_lm_tps']} tok/s | "
            f"{d['ratio']} (>= {d['goal']['ratio_at_least']})"
        )
    if "host_step" in r:
        d = r["host_step"]
        lines.append(
            f"26 host-bound step (1 layer, hidden 16, V = 2,048), decode batch 1 | {d['ours_tps']} tok/s "
            f"({d['ours_ms_per_step']} ms) | {d['mlx_lm_tps']} tok/s ({d['mlx_lm_ms_per_step']} ms) | "
            f"{d['ratio']} (>= {d['goal']['ratio_at_least']})"
        )
    if "speculative" in r:
        d = r["speculative"]
        lines.append(
            f"23 speculative decoding, {d['pair']['draft']} drafting {d['pair']['draft_tokens']} | "
            f"{d['ours_draft']['tps']} tok/s (plain {d['ours']['tps']}), acceptance "
            f"{d['ours_draft'].get('acceptance_rate')}, {d['ours_draft'].get('tokens_per_pass')} tokens/pass | "
            f"{d['mlx_lm_draft']['tps']} tok/s (plain {d['mlx_lm']['tps']}) | "
            f"{d['ratio_to_mlx_lm_draft']} (>= {d['goal']['ratio_at_least']})"
        )
    if "grammar_cost" in r:
        for key, row in r["grammar_cost"]["by_vocab_and_batch"].items():
            vocab, size = key.split("/")
            lines.append(
                f"24 JSON-schema grammar on / off, V {int(vocab):,}, batch {size} | "
                f"{row['grammar_step_ms']} / {row['plain_step_ms']} ms (mask {row['mask_host_ms_per_row']} ms a row) | "
                f"— | {row['grammar_over_plain']} (<= 1.10)"
            )
    if "serve_cost" in r:
        d = r["serve_cost"]
        peer = d.get("mlx_lm_server_tps", "—")
        lines.append(
            f"25 served over the OpenAI API, streamed, batch 1 | {d['served_tps']} tok/s (local {d['local_tps']}) | "
            f"mlx_lm.server {peer} tok/s | {d['served_over_local']} of local (>= 0.95), "
            f"{d.get('served_over_mlx_lm_server', '—')} of mlx_lm.server (>= 1.0)"
        )
    if "draft_block" in r:
        for name, d in r["draft_block"].items():
            if name == "goal":
                continue
            short, long = (k for k in d if k.isdigit())
            if "state_ms" not in d[short]:  # runs before the model's passes were timed apart
                lines.append(
                    f"27 a draft block's draft side, {name}, history {int(short):,} / {int(long):,} | "
                    f"{d[short]['draft_ms']} / {d[long]['draft_ms']} ms (a state made afresh: "
                    f"{d[short]['rebuild_ms']} / {d[long]['rebuild_ms']} ms) | — | {d['draft_ratio']} "
                    f"(<= {r['draft_block']['goal']['draft_ratio_at_most']}, with the penalties)"
                )
                continue
            lines.append(
                f"27 a draft block's sampling state, {name}, history {int(short):,} / {int(long):,} | "
                f"{d[short]['state_ms']} / {d[long]['state_ms']} ms (draft side with its model's passes "
                f"{d[short]['draft_ms']} / {d[long]['draft_ms']} ms; a state made afresh "
                f"{d[short]['rebuild_ms']} / {d[long]['rebuild_ms']} ms) | — | {d['state_ratio']} "
                f"(<= {r['draft_block']['goal']['state_ratio_at_most']}, with the penalties)"
            )
    if "serve_soak" in r:
        d = r["serve_soak"]
        lines.append(
            f"28 served under a mixed load, {d['rounds']} rounds of {d['clients_per_round']} clients | RSS "
            f"{d['rss_mib'][0]} -> {d['rss_mib'][-1]} MiB, MLX active {d['mlx_active_mib'][0]} -> "
            f"{d['mlx_active_mib'][-1]} MiB | — | growth from round 2: RSS {d['rss_growth']}, MLX "
            f"{d['mlx_active_growth']} (<= {d['goal']['growth_at_most']})"
        )
    if "serve_burst" in r:
        d = r["serve_burst"]
        lines.append(
            f"29 the app serving {d['requests']} requests at once | largest GUI gap {d['max_gap_ms']} ms (p99 "
            f"{d['p99_gap_ms']}, the GUI thread's own CPU {d['max_gap_cpu_ms']} ms) | written on the GUI thread: "
            f"{d.get('inline_max_gap_ms', '—')} ms | (<= 50 ms)"
        )
    return "\n".join(lines)
