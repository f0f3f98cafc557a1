"""A kernel manager for the served pages that starts at most ``max_kernels`` kernels at once.

Voila starts one kernel (~100 MB) for every visit to a page, plain GETs included; the culler
(``gpucap.app.serve``) ends idle ones after about a minute. A burst of visits could still start
kernels until the machine runs out of memory. ``CappedKernelManager`` refuses a kernel beyond the
cap with HTTP 503 and a line saying the page is full and to come back in a minute (when the
culler has freed kernels). Used through ``--VoilaConfiguration.multi_kernel_manager_class``.
"""

from __future__ import annotations

from typing import Any

from jupyter_server.services.kernels.kernelmanager import AsyncMappingKernelManager
from tornado import web
from traitlets import Integer

MAX_KERNELS = 8  # 8 x ~100 MB: what a small shared machine gives the pages


class CappedKernelManager(AsyncMappingKernelManager):  # type: ignore[misc]
    """``AsyncMappingKernelManager`` with a cap on the kernels running at once."""

    max_kernels = Integer(MAX_KERNELS, config=True, help="kernels running at once; a visit beyond gets HTTP 503")

    async def start_kernel(self, *args: Any, **kwargs: Any) -> str:  # type: ignore[override]
        if kwargs.get("kernel_id") is None and len(self.list_kernel_ids()) >= self.max_kernels:
            raise web.HTTPError(
                503,
                reason=f"This page is full (it serves {self.max_kernels} at once). Try again in a minute, "
                "when idle pages have been closed.",
            )
        return str(await super().start_kernel(*args, **kwargs))
