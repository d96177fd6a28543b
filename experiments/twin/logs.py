"""SGLang-like log lines and the pretend memory sizing behind them.

Collectors and the deploy layer's "is the variant really loaded" checks read these lines on real
nodes (index-K bytes, HiCache host pool, CUDA graph capture), so the twin prints the same shapes.
Every line is flushed: the service manager redirects stdout to a file that is read while we run.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass

GPU_GB = 139.8  # an H200-sized card
WEIGHTS_GB_TOTAL = 640.0  # split over tensor-parallel ranks
LAYERS = 61
LATENT_BYTES = 656  # MLA latent per token per layer (fp8 + scale)
INDEX_HEAD_DIM = 128
QUANT_BLOCK = 128
# SGLang 0.5.23's decode CUDA-graph batch bound on an H200 when --cuda-graph-max-bs-decode is
# not given (arg_groups/memory_hook.py): 256 below tensor parallelism 4, else 512.
GRAPH_MAX_BS = 256
GRAPH_MAX_BS_TP4 = 512


def log(message: str, rank: int | None = None) -> None:
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    where = f" TP{rank}" if rank is not None else ""
    print(f"[{stamp}{where}] {message}", flush=True)


def access(peer: str, method: str, path: str, status: int, reason: str) -> None:
    # uvicorn's access-log shape, as SGLang prints it.
    print(f'INFO:     {peer} - "{method} {path} HTTP/1.1" {status} {reason}', flush=True)


@dataclass(frozen=True)
class Capacity:
    weights_gb: float
    kv_gb: float
    index_k_dtype: str
    index_k_bytes: int
    max_total_num_tokens: int
    hicache_gb: float | None
    hicache_tokens: int | None  # tokens the host pool holds (the HiCache prefix bound)
    context_len: int
    chunked_prefill_size: int
    max_running_requests: int
    mem_fraction_static: float
    cuda_graph_max_bs_decode: int  # 0: decode never runs a graph


def graph_max_bs_decode(ns: argparse.Namespace) -> int:
    """The largest decode batch that runs as a CUDA graph (0 with graphs disabled), resolved as
    SGLang resolves it: the flag, else the GPU's default capped at --max-running-requests."""
    if ns.disable_cuda_graph or ns.disable_decode_cuda_graph:
        return 0
    if ns.cuda_graph_max_bs_decode is not None:
        return max(0, ns.cuda_graph_max_bs_decode)
    default = GRAPH_MAX_BS if ns.tp_size < 4 else GRAPH_MAX_BS_TP4
    if ns.max_running_requests is not None:
        default = min(default, max(1, ns.max_running_requests))
    return default


def index_k_bytes(bf16: bool) -> int:
    """Bytes per token per layer of the indexer keys (FACTS.md: fp8 132, bf16 256)."""
    if bf16:
        return INDEX_HEAD_DIM * 2
    return INDEX_HEAD_DIM + INDEX_HEAD_DIM // QUANT_BLOCK * 4


def capacity(ns: argparse.Namespace, env: dict[str, str]) -> Capacity:
    bf16 = env.get("BF16_INDEX_K") == "1"
    per_layer = index_k_bytes(bf16)
    fraction = ns.mem_fraction_static if ns.mem_fraction_static is not None else 0.88
    weights = min(WEIGHTS_GB_TOTAL / max(1, ns.tp_size), GPU_GB * 0.55)
    kv_gb = max(1.0, GPU_GB * fraction - weights)
    token_bytes = LAYERS * (LATENT_BYTES + per_layer)
    tokens = int(kv_gb * 1e9 / token_bytes)
    hicache = None
    if ns.enable_hierarchical_cache:
        hicache = float(ns.hicache_size) if ns.hicache_size > 0 else \
            kv_gb * max(0.0, ns.hicache_ratio)
    return Capacity(
        weights_gb=weights,
        kv_gb=kv_gb,
        index_k_dtype="bf16" if bf16 else "fp8",
        index_k_bytes=per_layer,
        max_total_num_tokens=tokens,
        hicache_gb=hicache,
        hicache_tokens=None if hicache is None else int(hicache * 1e9 / token_bytes),
        context_len=ns.context_length or 163840,
        chunked_prefill_size=ns.chunked_prefill_size or 8192,
        max_running_requests=ns.max_running_requests or 1024,
        mem_fraction_static=fraction,
        cuda_graph_max_bs_decode=graph_max_bs_decode(ns),
    )


def loading_lines(cap: Capacity) -> list[str]:
    avail = GPU_GB - cap.weights_gb
    lines = [
        f"Load weight begin. avail mem={GPU_GB:.2f} GB",
        f"Load weight end. type=DeepseekV4ForCausalLM, dtype=torch.bfloat16, "
        f"avail mem={avail:.2f} GB, mem usage={cap.weights_gb:.2f} GB.",
        f"index_k dtype={cap.index_k_dtype} bytes_per_token_per_layer={cap.index_k_bytes}",
        f"KV Cache is allocated. #tokens: {cap.max_total_num_tokens}, KV size: {cap.kv_gb:.2f} GB",
    ]
    if cap.hicache_gb is not None:
        lines.append(f"Allocating {cap.hicache_gb:.2f} GB host memory for hierarchical KV cache.")
    return lines


def graph_lines(cap: Capacity, elapsed_s: float) -> list[str]:
    avail = GPU_GB - cap.weights_gb - cap.kv_gb
    return [
        f"Capture cuda graph begin. This can take up to several minutes. avail mem={avail:.2f} GB",
        f"Capture cuda graph bs {capture_sizes(cap.cuda_graph_max_bs_decode)}",
        f"Capture cuda graph end. Time elapsed: {elapsed_s:.2f} s. mem usage=0.87 GB. "
        f"avail mem={avail - 0.87:.2f} GB.",
    ]


def capture_sizes(max_bs: int) -> list[int]:
    """The decode batch sizes SGLang captures up to ``max_bs`` (no speculative decoding)."""
    sizes = [1, 2, 4, 8, 12, *range(16, 257, 8), *range(272, 512, 16), *range(512, max_bs + 1, 32)]
    sizes = [size for size in sizes if size <= max_bs]
    return sizes if max_bs in sizes or max_bs < 1 else [*sizes, max_bs]


def limits_line(cap: Capacity) -> str:
    return (
        f"max_total_num_tokens={cap.max_total_num_tokens}, "
        f"chunked_prefill_size={cap.chunked_prefill_size}, "
        f"max_running_requests={cap.max_running_requests}, context_len={cap.context_len}, "
        f"available_gpu_mem={GPU_GB - cap.weights_gb - cap.kv_gb:.2f} GB"
    )


def role_lines(mode: str) -> list[str]:
    """What ServerArgs warns about for a disaggregation role, before ``server_args=``."""
    if mode == "prefill":
        return ["Cuda graph is disabled for prefill server"]
    if mode == "decode":
        return ["KV cache is forced as chunk cache for decode server"]
    return []


def bootstrap_line(host: str, port: int) -> str:
    return f"CommonKVBootstrapServer started successfully on {host}:{port}"


def decode_batch_line(*, running: int, tokens: int, usage: float, transfer: int, queued: int,
                      cuda_graph: bool, throughput: float, pd: bool, retracted: int = 0) -> str:
    pd_part = f"#prealloc-req: 0, #transfer-req: {transfer}, " if pd else ""
    return (f"Decode batch. #running-req: {running}, #token: {tokens}, token usage: {usage:.2f}, "
            f"{pd_part}#retracted-req: {retracted}, cuda graph: {cuda_graph}, "
            f"gen throughput (token/s): {throughput:.2f}, #queue-req: {queued}")


def prefill_batch_line(*, new_tokens: int, cached: int, usage: float, running: int, queued: int,
                       bootstrap: int | None) -> str:
    pd_part = f"#unbootstrapped-req: {bootstrap}, " if bootstrap is not None else ""
    return (f"Prefill batch. #new-seq: 1, #new-token: {new_tokens}, #cached-token: {cached}, "
            f"token usage: {usage:.2f}, #running-req: {running}, {pd_part}#queue-req: {queued}")
