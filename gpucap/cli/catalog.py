"""``gpucap gpus`` and ``gpucap models``: the catalogs, as a table or JSON."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

from gpucap.catalog.gpus import load_gpus
from gpucap.catalog.lookup import load_model, model_cards
from gpucap.cli.common import add_json
from gpucap.cli.fields import add_options
from gpucap.config import Deployment
from gpucap.units import GB, TB, TERA, GiB


def add_parsers(sub: Any) -> None:
    g = sub.add_parser("gpus", help="list the GPU catalog")
    add_options(g, Deployment, ("gpu_file",))
    add_json(g, "the GPU catalog")
    m = sub.add_parser("models", help="list the model catalog")
    add_json(m, "the model catalog")


def run_gpus(a: argparse.Namespace) -> int:
    gpus = load_gpus(a.gpu_file)
    rows: list[dict[str, Any]] = [
        {
            "key": g.key,
            "memory_GiB": round(g.memory_bytes / GiB, 1),
            "bf16_TFLOPs": g.flops_per_s["bf16"] / TERA,
            "fp8_TFLOPs": g.flops_per_s["fp8"] / TERA or None,
            "fp4_TFLOPs": g.flops_per_s["fp4"] / TERA or None,
            "hbm_TB_per_s": g.hbm_bytes_per_s / TB,
            "link": g.link_kind,
            "link_GB_per_s": g.link_bytes_per_s / GB,
        }
        for g in gpus.values()
    ]
    return _show(
        a,
        rows,
        f"{'key':<20}{'GiB':>7}{'bf16 TF':>9}{'fp8 TF':>8}{'fp4 TF':>8}{'TB/s':>6}  link",
        lambda r: (
            f"{r['key']:<20}{r['memory_GiB']:>7.1f}{r['bf16_TFLOPs']:>9.0f}{r['fp8_TFLOPs'] or 0:>8.0f}"
            f"{r['fp4_TFLOPs'] or 0:>8.0f}{r['hbm_TB_per_s']:>6.2f}  {r['link']} {r['link_GB_per_s']:.0f} GB/s"
        ),
    )


def run_models(a: argparse.Namespace) -> int:
    rows = []
    for hf_id, card in model_cards().items():
        spec = load_model(hf_id)
        rows.append(
            {
                "id": hf_id,
                "family": spec.family,
                "total_params_B": round(spec.total_params / 1e9, 2),
                "active_params_B": round(spec.active_params / 1e9, 2),
                "layers": spec.num_layers,
                "attention": "MLA" if spec.is_mla else f"GQA {spec.num_heads}/{spec.num_kv_heads}",
                "aliases": card.get("aliases", []),
            }
        )
    return _show(
        a,
        rows,
        f"{'id':<48}{'family':<13}{'total B':>9}{'active B':>9}  attention",
        lambda r: (
            f"{r['id']:<48}{r['family']:<13}{r['total_params_B']:>9.1f}{r['active_params_B']:>9.1f}  {r['attention']}"
        ),
    )


def _show(a: argparse.Namespace, rows: list[dict[str, Any]], header: str, line: Callable[[dict[str, Any]], str]) -> int:
    """The rows as JSON with ``--json``, else as a table: ``header``, then ``line`` of each row."""
    if a.json:
        print(json.dumps(rows, indent=1))
        return 0
    print(header)
    for r in rows:
        print(line(r))
    return 0
